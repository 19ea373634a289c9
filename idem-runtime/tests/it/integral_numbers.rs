//! Integral numbers (contract D8): Gemini's arguments are protobuf `Struct` values whose
//! numbers are doubles (`multiply(57, 44)` arrives as `{"a": 57.0, "b": 44.0}`). A tool
//! whose parameters are integers runs with them, the same call spelled with integers
//! replays it, and a number with a fraction is a `bad_arguments` reply naming the argument
//! while the other calls of the turn still run (D2). The same from every provider.

use crate::common;

use common::tools::engine;
use idem_runtime::dispatch::{
    parse_turns, CallReport, Conversation, Dispatcher, FailureKind, RetryPolicy, Tool, Turn,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{prepare, CallStatus, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::Value;

static MULTIPLY: ToolSpec = ToolSpec::new("multiply");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MultiplyArgs {
    a: u64,
    b: u64,
}

/// `multiply(a: u64, b: u64)`, keyed by both arguments; each run is one effect in `log`.
fn multiply(log: &EffectLog) -> Tool {
    let log = log.clone();
    Tool::from_async("multiply", move |args: MultiplyArgs, _ctx| {
        let log = log.clone();
        async move {
            prepare(&MULTIPLY, None, |b| {
                b.key("a", &args.a)?.key("b", &args.b)?;
                Ok(())
            })?
            .run(async move {
                log.record("multiply", format!("{} * {}", args.a, args.b));
                Ok::<_, ToolError>(args.a * args.b)
            })
            .await
        }
    })
}

fn dispatcher(log: &EffectLog) -> Dispatcher {
    Dispatcher::builder()
        .tool(multiply(log))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap()
}

/// The one turn of a document written as JSON text (the numbers keep their spelling).
fn one_turn(text: &str) -> Turn {
    let document: Value = serde_json::from_str(text).unwrap();
    let mut turns = parse_turns(&document).unwrap();
    assert_eq!(turns.len(), 1, "{text}");
    turns.remove(0)
}

/// A Gemini `generateContent` response whose one candidate calls `multiply` with each of
/// `args` (JSON object texts), without call ids.
fn gemini(response_id: &str, args: &[&str]) -> Turn {
    let parts: Vec<String> = args
        .iter()
        .map(|a| format!(r#"{{"functionCall":{{"name":"multiply","args":{a}}}}}"#))
        .collect();
    one_turn(&format!(
        r#"{{"candidates":[{{"content":{{"role":"model","parts":[{}]}}}}],"responseId":"{response_id}"}}"#,
        parts.join(",")
    ))
}

fn bad_arguments_message(report: &CallReport) -> &str {
    let failure = report.reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::BadArguments, "{failure:?}");
    assert!(!failure.retryable);
    assert_eq!(
        report.reply.record, None,
        "the call never reached the store"
    );
    &failure.message
}

// pins D8, D1, K2: Gemini's doubles run a u64 tool once; the same call with integer
// spellings (and another double spelling) in a later response replays it under the same key
#[tokio::test]
async fn gemini_doubles_run_an_integer_tool_and_integers_replay_it() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_gemini");

    let first = dispatcher
        .dispatch_turn(&gemini("r-1", &[r#"{"a":57.0,"b":44.0}"#]), &conversation)
        .await;
    let ran = &first.calls[0];
    assert_eq!(ran.reply.result, Ok(Value::from(2508)), "{ran:?}");
    assert_eq!(ran.status(), Some(CallStatus::Executed));
    assert_eq!(log.len(), 1);
    assert_eq!(log.effects()[0].detail, "57 * 44");
    let key = ran.key.clone().expect("a key");

    for (response_id, args) in [
        ("r-2", r#"{"a":57,"b":44}"#),
        ("r-3", r#"{"a":5.7e1,"b":4.4E1}"#),
    ] {
        let again = dispatcher
            .dispatch_turn(&gemini(response_id, &[args]), &conversation)
            .await;
        let replayed = &again.calls[0];
        assert_eq!(replayed.reply.result, Ok(Value::from(2508)), "{args}");
        assert_eq!(replayed.status(), Some(CallStatus::Replayed), "{args}");
        assert_eq!(replayed.key.as_ref(), Some(&key), "{args}");
        assert_eq!(log.len(), 1, "{args}: still one execution");
    }
}

// pins D8, D2: a fraction, or a number outside the parameter's type, is a bad_arguments
// reply naming the argument; that call does not run, the turn's other calls do
#[tokio::test]
async fn a_fraction_is_bad_arguments_naming_the_argument_and_the_rest_runs() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let turn = gemini(
        "r-bad",
        &[
            r#"{"a":57.5,"b":44.0}"#,
            r#"{"a":3.0,"b":-1.0}"#,
            r#"{"a":1.8446744073709552e19,"b":1.0}"#,
            r#"{"a":3.0,"b":4.0}"#,
        ],
    );
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_bad"))
        .await;
    assert_eq!(outcome.calls.len(), 4);
    let expected = [
        "arguments do not fit tool `multiply`: argument `a`: invalid type: floating point `57.5`, expected u64",
        "arguments do not fit tool `multiply`: argument `b`: invalid value: integer `-1`, expected u64",
        "arguments do not fit tool `multiply`: argument `a`: invalid value: floating point `1.8446744073709552e+19`, expected u64",
    ];
    for (report, expected) in outcome.calls.iter().zip(expected) {
        assert_eq!(bad_arguments_message(report), expected);
        assert_eq!(report.attempt_count(), 1, "not retried");
        // The model reads the message in Gemini's functionResponse.
        let response = &report.result["functionResponse"]["response"];
        assert!(response.to_string().contains(expected), "{response}");
    }
    let good = &outcome.calls[3];
    assert_eq!(good.reply.result, Ok(Value::from(12)));
    assert_eq!(good.status(), Some(CallStatus::Executed));
    assert_eq!(log.len(), 1, "only the good call ran");
    assert_eq!(log.effects()[0].detail, "3 * 4");
}

/// `multiply`'s call with arguments `args` (an object's JSON text) in each provider's
/// shape: the JSON of an OpenAI Chat message, a Responses output, an Anthropic message,
/// an MCP `tools/call` request and a Gemini response.
fn every_provider(id: &str, args: &str) -> Vec<(&'static str, Turn)> {
    let escaped = serde_json::to_string(args).unwrap();
    vec![
        (
            "openai-chat",
            one_turn(&format!(
                r#"{{"role":"assistant","tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"multiply","arguments":{escaped}}}}}]}}"#
            )),
        ),
        (
            "openai-responses",
            one_turn(&format!(
                r#"{{"output":[{{"type":"function_call","call_id":"{id}","name":"multiply","arguments":{escaped}}}]}}"#
            )),
        ),
        (
            "anthropic",
            one_turn(&format!(
                r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"{id}","name":"multiply","input":{args}}}]}}"#
            )),
        ),
        (
            "mcp",
            one_turn(&format!(
                r#"{{"jsonrpc":"2.0","id":"{id}","method":"tools/call","params":{{"name":"multiply","arguments":{args}}}}}"#
            )),
        ),
        ("gemini", gemini(id, &[args])),
    ]
}

// pins D8, D1: every provider's doubles fit integer parameters (an OpenAI Chat call whose
// arguments string is `{"a":57.0,"b":44.0}`, …), and the integer spelling replays them;
// a fraction is bad_arguments naming the argument from every provider
#[tokio::test]
async fn every_provider_reads_integral_doubles() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let firsts = every_provider("call-1", r#"{"a":57.0,"b":44.0}"#);
    let agains = every_provider("call-2", r#"{"a":57,"b":44}"#);
    let fractions = every_provider("call-3", r#"{"a":57.5,"b":44}"#);
    for (((provider, first), (_, again)), (_, fraction)) in
        firsts.into_iter().zip(agains).zip(fractions)
    {
        let conversation = Conversation::new(format!("conv_{provider}"));
        let before = log.len();
        let ran = dispatcher.dispatch_turn(&first, &conversation).await;
        let ran = &ran.calls[0];
        assert_eq!(
            ran.reply.result,
            Ok(Value::from(2508)),
            "{provider}: {ran:?}"
        );
        assert_eq!(ran.status(), Some(CallStatus::Executed), "{provider}");
        assert_eq!(log.len(), before + 1, "{provider}");

        let replayed = dispatcher.dispatch_turn(&again, &conversation).await;
        let replayed = &replayed.calls[0];
        assert_eq!(replayed.reply.result, Ok(Value::from(2508)), "{provider}");
        assert_eq!(replayed.status(), Some(CallStatus::Replayed), "{provider}");
        assert_eq!(replayed.key, ran.key, "{provider}");
        assert_eq!(log.len(), before + 1, "{provider}: no second execution");

        let refused = dispatcher.dispatch_turn(&fraction, &conversation).await;
        assert_eq!(
            bad_arguments_message(&refused.calls[0]),
            "arguments do not fit tool `multiply`: argument `a`: invalid type: floating point `57.5`, expected u64",
            "{provider}"
        );
        assert_eq!(
            log.len(),
            before + 1,
            "{provider}: the fraction did not run"
        );
    }
}
