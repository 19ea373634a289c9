//! The call protocol's key handling on the in-memory store: K7, K9, K10. The store rules
//! (S1–S12) are pinned by the conformance suite (`tests/conformance/`), which runs on every
//! backend (`tests/conformance_*.rs`).

use crate::support;

use idem_runtime::{prepare, Error, ToolError};
use support::{default_spec, key_of, Harness};

// pins K10: the key is available inside the body and on the outcome
#[tokio::test]
async fn key_is_available_inside_the_body_and_on_the_outcome() {
    let h = Harness::new();
    let ctx = h.ctx("conv_key");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    let expected = p.key().clone();
    let inside: Result<Option<String>, ToolError> = p
        .run(async { Ok(idem_runtime::current_key().map(|k| k.to_string())) })
        .await;
    assert_eq!(inside, Ok(Some(expected.to_string())));
    assert_eq!(ctx.last_outcome().unwrap().key, expected);
    assert_eq!(idem_runtime::current_key(), None, "only inside the body");
}

// pins K7: no conversation id in force → MissingScope before anything else
#[test]
fn missing_conversation_is_an_error_before_the_body() {
    let h = Harness::new();
    let ctx = idem_runtime::CallContext::new().with_engine(h.engine.clone());
    let err = prepare(default_spec(), Some(&ctx), |_| {
        panic!("arguments are not even read")
    })
    .unwrap_err();
    assert_eq!(
        err,
        Error::MissingScope {
            tool: "send_refund".into(),
            scope: "conversation".into()
        }
    );
}

// pins K9: the attempt record carries the first attempt's key to every retry of that call
#[test]
fn attempt_record_carries_the_first_key() {
    let h = Harness::new();
    let attempt = idem_runtime::AttemptRecord::new("send_refund");
    let first = h.ctx("conv_a").with_attempt(attempt.clone());
    let k1 = key_of(default_spec(), &first, 1);
    // The retry runs under another conversation id (say the agent re-read its state): the key is carried.
    let retry = h.ctx("conv_b").with_attempt(attempt.clone());
    assert_eq!(key_of(default_spec(), &retry, 1), k1);
    // A new call (fresh attempt record) derives its own key.
    let fresh = h
        .ctx("conv_b")
        .with_attempt(idem_runtime::AttemptRecord::new("send_refund"));
    assert_ne!(key_of(default_spec(), &fresh, 1), k1);
}
