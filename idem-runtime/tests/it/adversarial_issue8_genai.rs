//! adv8: genai typed dispatch (contract O6, K7, K9).

use crate::common;

use common::tools::{engine, logged, spec};
use genai::chat::ChatResponse;
use idem_runtime::dispatch::{Conversation, Dispatcher};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{CallStatus, Scope};
use serde_json::{json, Value};

/// A genai `ChatResponse` as genai 0.7's Gemini adapter builds it: Gemini sent no
/// `functionCall.id`, so genai made up `call#<fn_name>#<index in the response>`
/// (genai-0.7.2 src/adapter/adapters/gemini/adapter_impl.rs:343-347).
fn gemini_response(args: Value) -> ChatResponse {
    let model = json!({"adapter_kind": "Gemini", "model_name": "gemini-2.5-flash"});
    let body = json!({
        "content": [{"ToolCall": {"call_id": "call#roll_die#0", "fn_name": "roll_die", "fn_arguments": args}}],
        "model_iden": model, "provider_model_iden": model, "usage": {}
    });
    serde_json::from_str(&body.to_string()).unwrap()
}

// K7/K9: a `scope = "call"` tool's identical calls are distinct intents (two dice rolls).
// Two turns of one conversation (two separate Gemini responses) each roll the die once;
// genai gives both calls the id `call#roll_die#0`, taken as the provider's own id
// (`id_synthesized: false`), so the second turn's roll replays the first's. The JSON
// dispatcher reading the same Gemini responses labels positional ids per response
// (responseId, or a random label) precisely to avoid this (parse/gemini.rs).
// pins O9, K7, K9 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test]
async fn adv8_genai_synthetic_gemini_ids_make_call_scoped_turns_replay() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(logged(spec("roll_die", Scope::Call), &log))
        .engine(engine())
        .build()
        .unwrap();
    let conversation = Conversation::new("adv8_dice");
    let turn1 = dispatcher
        .dispatch_genai(&gemini_response(json!({"sides": 6})), &conversation)
        .await
        .unwrap();
    let turn2 = dispatcher
        .dispatch_genai(&gemini_response(json!({"sides": 6})), &conversation)
        .await
        .unwrap();
    assert_eq!(turn1.reports()[0].status(), Some(CallStatus::Executed));
    assert_eq!(
        turn2.reports()[0].status(),
        Some(CallStatus::Executed),
        "the second turn's die roll (a new Gemini response) replayed the first turn's: effects {}",
        log.len()
    );
    assert_eq!(log.len(), 2);
}
