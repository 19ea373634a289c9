//! Integral numbers (contract D8) through the dispatch companion of `#[idempotent]` fns:
//! Gemini's doubles (`{"a": 57.0, "b": 44.0}`) fill `u64` parameters, nested and optional
//! integers included; the integer spelling replays; a fraction is a `bad_arguments` reply
//! naming the argument's path.

use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_agent::dispatch::{parse_turns, Conversation, Dispatcher, FailureKind, Turn};
use idem_agent::testkit::{EffectLog, ManualClock};
use idem_agent::{idempotent, CallStatus, Engine, MemoryStore, ToolError};

static PRODUCTS: LazyLock<EffectLog> = LazyLock::new(EffectLog::new);
static SHIPMENTS: LazyLock<EffectLog> = LazyLock::new(EffectLog::new);

#[idempotent]
async fn multiply(a: u64, b: u64) -> Result<u64, ToolError> {
    PRODUCTS.record("multiply", format!("{a} * {b}"));
    Ok(a * b)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    sku: String,
    qty: u32,
}

#[idempotent]
fn ship(order: u64, lines: &[Line], priority: Option<u8>) -> Result<String, ToolError> {
    let total: u32 = lines.iter().map(|l| l.qty).sum();
    SHIPMENTS.record(
        "ship",
        format!("{order}: {total} items, priority {priority:?}"),
    );
    Ok(format!("shipped {total}"))
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .tool(multiply::tool())
        .tool(ship::tool())
        .engine(Engine::from_shared(
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new()),
        ))
        .build()
        .unwrap()
}

/// A Gemini response (JSON text, so the numbers keep their spelling) calling `name` with
/// each of `args`.
fn gemini(response_id: &str, calls: &[(&str, &str)]) -> Turn {
    let parts: Vec<String> = calls
        .iter()
        .map(|(name, args)| format!(r#"{{"functionCall":{{"name":"{name}","args":{args}}}}}"#))
        .collect();
    let text = format!(
        r#"{{"candidates":[{{"content":{{"role":"model","parts":[{}]}}}}],"responseId":"{response_id}"}}"#,
        parts.join(",")
    );
    let document: Value = serde_json::from_str(&text).unwrap();
    parse_turns(&document).unwrap().remove(0)
}

// pins D8, C4: the companion of an `#[idempotent]` fn with u64 parameters runs on Gemini's
// doubles; the integer spelling in a later response replays under the same key
#[tokio::test]
async fn the_companion_reads_gemini_doubles_and_integers_replay() {
    let dispatcher = dispatcher();
    let conversation = Conversation::new("conv_multiply");
    let first = dispatcher
        .dispatch_turn(
            &gemini("r-1", &[("multiply", r#"{"a":57.0,"b":44.0}"#)]),
            &conversation,
        )
        .await;
    let ran = &first.calls[0];
    assert_eq!(ran.reply.result, Ok(Value::from(2508)), "{ran:?}");
    assert_eq!(ran.status(), Some(CallStatus::Executed));
    assert_eq!(PRODUCTS.len(), 1);

    let again = dispatcher
        .dispatch_turn(
            &gemini("r-2", &[("multiply", r#"{"a":57,"b":44}"#)]),
            &conversation,
        )
        .await;
    let replayed = &again.calls[0];
    assert_eq!(replayed.reply.result, Ok(Value::from(2508)));
    assert_eq!(replayed.status(), Some(CallStatus::Replayed));
    assert_eq!(replayed.key, ran.key);
    assert_eq!(PRODUCTS.len(), 1, "one execution");
}

// pins D8, D2, C4: nested and optional integers through the companion; a fraction or an
// out-of-range number names the argument's path; the turn's other calls still run
#[tokio::test]
async fn the_companion_names_the_path_of_a_number_that_does_not_fit() {
    let dispatcher = dispatcher();
    let outcome = dispatcher
        .dispatch_turn(
            &gemini(
                "r-ship",
                &[
                    (
                        "ship",
                        r#"{"order":7.0,"lines":[{"sku":"a","qty":1.0},{"sku":"b","qty":2}],"priority":3.0}"#,
                    ),
                    (
                        "ship",
                        r#"{"order":8.0,"lines":[{"sku":"a","qty":1},{"sku":"b","qty":2},{"sku":"c","qty":2.5}]}"#,
                    ),
                    ("ship", r#"{"order":9,"lines":[],"priority":300.0}"#),
                    ("multiply", r#"{"a":57.5,"b":44.0}"#),
                ],
            ),
            &Conversation::new("conv_ship"),
        )
        .await;
    let shipped = &outcome.calls[0];
    assert_eq!(
        shipped.reply.result,
        Ok(Value::from("shipped 3")),
        "{shipped:?}"
    );
    assert_eq!(shipped.status(), Some(CallStatus::Executed));
    assert_eq!(SHIPMENTS.len(), 1);
    assert_eq!(
        SHIPMENTS.effects()[0].detail,
        "7: 3 items, priority Some(3)"
    );

    let expected = [
        "arguments do not fit tool `ship`: argument `lines[2].qty`: invalid type: floating point `2.5`, expected u32",
        "arguments do not fit tool `ship`: argument `priority`: invalid value: integer `300`, expected u8",
        "arguments do not fit tool `multiply`: argument `a`: invalid type: floating point `57.5`, expected u64",
    ];
    for (report, expected) in outcome.calls[1..].iter().zip(expected) {
        let failure = report.reply.result.as_ref().unwrap_err();
        assert_eq!(failure.kind, FailureKind::BadArguments);
        assert_eq!(failure.message, expected);
        assert_eq!(report.reply.record, None, "did not run");
    }
    assert_eq!(SHIPMENTS.len(), 1);
}
