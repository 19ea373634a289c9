//! The case idempotency exists for: the effect lands, the response is lost, the agent
//! retries (contract T2, T3, T4, D3, K9).

use crate::common;

use common::tools::{engine, logged, send_refund, spec};
use common::{transcript_path, transcripts_dir};
use idem_runtime::dispatch::{Conversation, Dispatcher, FailureKind, RetryPolicy, Tool};
use idem_runtime::testkit::{EffectLog, FailOn, LosingTransport, ScriptError, ScriptedModel};
use idem_runtime::{CallStatus, Engine, Scope};
use serde_json::{json, Value};

fn dispatcher(tool: Tool, engine: &Engine, transport: &LosingTransport) -> Dispatcher {
    Dispatcher::builder()
        .tool(tool)
        .engine(engine.clone())
        .transport(transport.clone())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap()
}

/// The agent loop: take the model's next turn, dispatch it, send the results back.
async fn run_agent(model: &ScriptedModel, dispatcher: &Dispatcher, conversation: &Conversation) {
    while let Some(turn) = model.next_turn() {
        let outcome = dispatcher.dispatch_turn(&turn, conversation).await;
        model.send_results(&outcome);
    }
}

const REFUND_SCRIPT: &str = r#"[
  {"role": "assistant", "content": [
    {"type": "text", "text": "Refunding order 7."},
    {"type": "tool_use", "id": "toolu_refund", "name": "send_refund", "input": {"order": 7, "cents": 1250}}
  ]},
  {"role": "assistant", "content": "Done: order 7 was refunded."}
]"#;

// pins T2, T3, T4, D3, K9: lost first response → the transport was invoked twice, the
// effect happened once, both attempts carried the same key, the agent was told success
#[tokio::test]
async fn lost_first_response_is_retried_as_a_replay() {
    let effects = EffectLog::new();
    let transport = LosingTransport::new(FailOn::FirstAttempt);
    let dispatcher = dispatcher(send_refund(&effects), &engine(), &transport);
    let model = ScriptedModel::from_json(REFUND_SCRIPT).unwrap();

    run_agent(&model, &dispatcher, &Conversation::new("conv_refund")).await;

    let seen = transport.invocations();
    assert_eq!(transport.invocation_count(), 2, "the retry happened");
    assert_eq!(effects.len(), 1, "the effect happened once");
    assert!(seen[0].key.is_some());
    assert_eq!(
        seen[0].key, seen[1].key,
        "both attempts carried the same key"
    );
    assert_eq!(effects.effects()[0].key, seen[0].key);
    assert!(
        model.was_told_success("toolu_refund"),
        "the agent was told success"
    );

    assert!(seen[0].failed && !seen[1].failed);
    let status = |i: usize| {
        seen[i]
            .reply
            .as_ref()
            .unwrap()
            .record
            .as_ref()
            .unwrap()
            .status
    };
    assert_eq!(
        (status(0), status(1)),
        (CallStatus::Executed, CallStatus::Replayed)
    );
    let told = model.result_for("toolu_refund").unwrap();
    assert_eq!(told.result["is_error"], false);
    let content: Value = serde_json::from_str(told.result["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"refund_id": "re_7", "cents": 1250}));
    assert_eq!(
        model.messages().len(),
        1,
        "one user message of tool results"
    );
    assert_eq!(model.remaining(), 0);
}

// pins T2, D4, K9: every parallel call loses its first reply: each is retried once with
// its own key, each has one effect, the agent is told success for all four
#[tokio::test]
async fn parallel_calls_each_lose_their_first_reply() {
    let effects = EffectLog::new();
    let transport = LosingTransport::new(FailOn::FirstAttempt);
    let tool = logged(spec("retrieve_entity_info", Scope::Conversation), &effects);
    let dispatcher = dispatcher(tool, &engine(), &transport);
    let model =
        ScriptedModel::from_file(transcript_path("anthropic-parallel-same-tool-4x")).unwrap();

    run_agent(&model, &dispatcher, &Conversation::new("conv_family")).await;

    assert_eq!(transport.invocation_count(), 8);
    assert_eq!(transport.lost_count(), 4);
    assert_eq!(effects.len(), 4);
    let received = model.received();
    assert_eq!(received.len(), 4);
    let mut keys = Vec::new();
    for result in &received {
        assert!(result.ok, "{}", result.call_id);
        let attempts: Vec<_> = transport
            .invocations()
            .into_iter()
            .filter(|i| i.call_id == result.call_id)
            .collect();
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].key, attempts[1].key);
        keys.push(attempts[0].key.clone().unwrap());
    }
    keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    keys.dedup();
    assert_eq!(keys.len(), 4, "different arguments, different keys");
}

// pins T2: losing chosen (call id, attempt) pairs only
#[tokio::test]
async fn lose_only_chosen_attempts() {
    let effects = EffectLog::new();
    let transport = LosingTransport::new(FailOn::attempts([("call_Veeyp2hYJOKp0wT7ODxmTjaS", 1)]));
    let tool = logged(
        spec("get_n_day_weather_forecast", Scope::Conversation),
        &effects,
    );
    let dispatcher = dispatcher(tool, &engine(), &transport);
    let model =
        ScriptedModel::from_file(transcript_path("openai-chat-parallel-same-function")).unwrap();

    run_agent(&model, &dispatcher, &Conversation::new("conv_weather")).await;

    assert_eq!(transport.invocation_count(), 3);
    assert_eq!(effects.len(), 2);
    assert!(model.was_told_success("call_pFdKcCu5taDTtOOfX14vEDRp"));
    assert!(model.was_told_success("call_Veeyp2hYJOKp0wT7ODxmTjaS"));
    let messages = model.messages();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1]["tool_call_id"], "call_Veeyp2hYJOKp0wT7ODxmTjaS");
}

// pins T2, D3, S3: every reply lost: the dispatcher gives up at its bound and tells the
// agent the outcome is unknown (retryable); the agent's later retry replays, no second effect
#[tokio::test]
async fn every_reply_lost_then_a_later_retry_replays() {
    let effects = EffectLog::new();
    let engine = engine();
    let conversation = Conversation::new("conv_flaky_network");
    let losing = LosingTransport::new(FailOn::Always);
    let model = ScriptedModel::from_json(REFUND_SCRIPT).unwrap();
    let turn = model.next_turn().unwrap();

    let outcome = dispatcher(send_refund(&effects), &engine, &losing)
        .dispatch_turn(&turn, &conversation)
        .await;
    model.send_results(&outcome);
    assert_eq!(losing.invocation_count(), 3);
    assert_eq!(effects.len(), 1);
    assert!(!model.was_told_success("toolu_refund"));
    let failure = outcome.calls[0].reply.result.as_ref().unwrap_err();
    assert_eq!(
        (failure.kind, failure.retryable),
        (FailureKind::Transport, true)
    );

    let healthy = LosingTransport::new(FailOn::AttemptNumbers(Default::default()));
    let later = dispatcher(send_refund(&effects), &engine, &healthy)
        .dispatch_turn(&turn, &conversation)
        .await;
    model.send_results(&later);
    assert_eq!(later.calls[0].status(), Some(CallStatus::Replayed));
    assert_eq!(later.calls[0].key, outcome.calls[0].key);
    assert_eq!(effects.len(), 1);
    assert!(model.was_told_success("toolu_refund"));
}

// pins T4: scripts load from files; a missing file or a non-document is a typed error
#[test]
fn scripts_load_from_transcript_files() {
    let model = ScriptedModel::from_file(transcript_path("gemini-functioncall-with-id")).unwrap();
    assert_eq!(model.remaining(), 2);
    assert!(matches!(
        ScriptedModel::from_file(transcript_path("no-such-transcript")),
        Err(ScriptError::Io { .. })
    ));
    assert!(matches!(
        ScriptedModel::from_file(transcripts_dir().join("README.md")),
        Err(ScriptError::Parse { .. })
    ));
}
