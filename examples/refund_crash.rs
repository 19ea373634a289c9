//! A worker that dies after the bank accepted a refund, and the agent's retries: the
//! runbook of README.md's "When idem cannot know" (contract U1, U2, U6, U7).
//!
//! ```sh
//! cargo run --features sqlite --example refund_crash -- crash   # the worker dies after the refund
//! cargo run --features sqlite --example refund_crash            # the agent retries
//! ```
//!
//! The store is `IDEM_STORE` (default `sqlite:refunds.db` in the current folder). With
//! `crash`, the body "sends" the refund and the process exits at once without unwinding,
//! as a killed worker would (status 137, SIGKILL's): no destructor runs, so the claim is
//! neither released nor marked, and its 2 s lease simply stops being renewed. Without it,
//! the call is the agent's retry: held (the tool did not run), or the outcome a person
//! decided, replayed.

use idem_agent::{idempotent, CallContext, Engine, Error, ToolError};

#[idempotent(lease = "2s")]
async fn send_refund(order_id: &str, amount_cents: u64) -> Result<String, ToolError> {
    let key = idem_agent::current_key().unwrap();
    println!(
        "the bank accepted a refund of {amount_cents} cents on {order_id} (Idempotency-Key {})",
        key.prefix(8)
    );
    if std::env::args().nth(1).as_deref() == Some("crash") {
        println!("the worker dies before it can save the outcome");
        std::process::exit(137);
    }
    Ok(format!("re_{order_id}"))
}

#[tokio::main]
async fn main() {
    let store = std::env::var("IDEM_STORE").unwrap_or_else(|_| "sqlite:refunds.db".to_owned());
    let engine = Engine::builder()
        .store_locator(store)
        .build()
        .expect("the store opens");
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("c-9");
    match ctx.run(send_refund("ord_4417", 500)).await {
        Ok(refund) => {
            let outcome = ctx.last_outcome().unwrap();
            println!(
                "{refund} [{:?}, source {:?}]",
                outcome.status, outcome.source
            );
        }
        Err(ToolError::Idem(held @ Error::OutcomeUnknown { .. })) => println!("{held}"),
        Err(other) => println!("failed: {other}"),
    }
}
