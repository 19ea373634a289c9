//! Unknown outcomes and reconciliation against a fake payment API (contract U1–U4, F1).
//!
//! `send_refund` forwards its idempotency key and fence to a payment API that records
//! refunds by key and can be asked about one later. When the API times out, the tool ends
//! with "outcome unknown"; when its caller gives up (a timeout around the call), the outcome
//! is unknown too. The next call then asks `check_refund` first — did a refund with this key
//! happen? — instead of refunding blind.
//!
//! ```sh
//! cargo run --example payment
//! ```
//!
//! Four scenarios, one order each; every line is one call and what it did. The last line
//! counts the refunds the API made: one per order, however the calls ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use idem_agent::{idempotent, AttemptInfo, CallContext, Reconciled, ToolError};
use serde::{Deserialize, Serialize};

/// A refund as the payment API records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refund {
    pub id: String,
    pub order: String,
    pub amount_cents: u64,
}

/// How the fake API misbehaves on the next request.
#[derive(Default)]
struct Faults {
    /// The refund is made, then the response is lost (a timeout after the effect).
    lose_response: AtomicBool,
    /// The request times out before it reaches the API (no effect).
    drop_request: AtomicBool,
    /// Look-ups by key fail (the API's read side is down).
    lookups_down: AtomicBool,
    /// The refund is made, then the API hangs (the caller's own timeout fires).
    hang_after_effect: AtomicBool,
}

/// A payment API that deduplicates refunds by idempotency key and can be asked about one.
#[derive(Default)]
struct PaymentApi {
    refunds: Mutex<HashMap<String, (u64, Refund)>>,
    faults: Faults,
}

#[derive(Debug)]
enum ApiError {
    Timeout,
    Unavailable,
}

impl PaymentApi {
    /// Refunds `amount_cents` on `order` once per idempotency key; `fence` is kept with the
    /// refund (a stale owner's late request with a smaller fence would change nothing).
    async fn refund(
        &self,
        key: &str,
        fence: u64,
        order: &str,
        amount_cents: u64,
    ) -> Result<Refund, ApiError> {
        if self.faults.drop_request.swap(false, Ordering::SeqCst) {
            return Err(ApiError::Timeout);
        }
        let refund = {
            let mut refunds = self.refunds.lock().unwrap();
            let next_id = format!("re_{}", refunds.len() + 1);
            let (stored_fence, refund) = refunds.entry(key.to_owned()).or_insert_with(|| {
                let refund = Refund {
                    id: next_id,
                    order: order.to_owned(),
                    amount_cents,
                };
                (fence, refund)
            });
            *stored_fence = (*stored_fence).max(fence);
            refund.clone()
        };
        if self.faults.lose_response.swap(false, Ordering::SeqCst) {
            return Err(ApiError::Timeout);
        }
        if self.faults.hang_after_effect.swap(false, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(refund)
    }

    /// The refund made with idempotency key `key`, if any.
    async fn find(&self, key: &str) -> Result<Option<Refund>, ApiError> {
        if self.faults.lookups_down.load(Ordering::SeqCst) {
            return Err(ApiError::Unavailable);
        }
        let refunds = self.refunds.lock().unwrap();
        Ok(refunds.get(key).map(|(_, refund)| refund.clone()))
    }

    fn refunds_made(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }
}

static API: LazyLock<PaymentApi> = LazyLock::new(PaymentApi::default);

/// Did a refund with this call's idempotency key happen? Asked instead of the body whenever
/// a call finds the key's outcome unknown.
async fn check_refund(
    order: &str,
    amount_cents: &u64,
    attempt: &AttemptInfo,
) -> Reconciled<Refund, ToolError> {
    let _ = (order, amount_cents);
    match API.find(attempt.key().as_str()).await {
        Ok(Some(refund)) => Reconciled::Done(Ok(refund)),
        Ok(None) => Reconciled::NotDone,
        Err(_) => Reconciled::Unknown,
    }
}

/// Refunds an order through the payment API, forwarding the idempotency key and fence.
#[idempotent(reconcile = check_refund, lease = "30s")]
async fn send_refund(order: &str, amount_cents: u64) -> Result<Refund, ToolError> {
    let attempt = idem_agent::current_attempt().expect("inside an #[idempotent] body");
    match API
        .refund(attempt.key().as_str(), attempt.fence(), order, amount_cents)
        .await
    {
        Ok(refund) => Ok(refund),
        Err(ApiError::Timeout) => Err(ToolError::outcome_unknown(
            "the payment API timed out after the request was sent",
        )),
        Err(ApiError::Unavailable) => Err(ToolError::retryable("the payment API is down")),
    }
}

/// One call, printed as `scenario  call N  what happened`.
async fn call(ctx: &CallContext, scenario: &str, n: u32, order: &str) {
    let outcome = ctx.run(send_refund(order, 500)).await;
    let status = ctx
        .last_outcome()
        .map(|record| format!("{:?}", record.status).to_lowercase());
    let what = match (&outcome, status) {
        (Ok(refund), Some(status)) => {
            format!("{status}: {} of {} cents", refund.id, refund.amount_cents)
        }
        (Err(ToolError::Idem(idem_agent::Error::OutcomeUnknown { .. })), _) => {
            "error: outcome unknown (the reconcile function could not tell yet)".to_owned()
        }
        (Err(error), _) => format!("error: {error}"),
        (Ok(_), None) => "ok without a call record".to_owned(),
    };
    println!("{scenario:<28} call {n}  {what}");
}

#[tokio::main]
async fn main() {
    let faults = &API.faults;

    // 1. The refund is made and the response lost: the retry reconciles, finds it, replays.
    let ctx = CallContext::new().with_conversation("conv_lost_response");
    faults.lose_response.store(true, Ordering::SeqCst);
    call(&ctx, "lost response", 1, "ord_1").await;
    call(&ctx, "lost response", 2, "ord_1").await;
    call(&ctx, "lost response", 3, "ord_1").await;

    // 2. The request never reached the API: the retry reconciles, finds nothing, refunds.
    let ctx = CallContext::new().with_conversation("conv_dropped_request");
    faults.drop_request.store(true, Ordering::SeqCst);
    call(&ctx, "dropped request", 1, "ord_2").await;
    call(&ctx, "dropped request", 2, "ord_2").await;

    // 3. The API cannot be asked yet: the key stays unknown until it can.
    let ctx = CallContext::new().with_conversation("conv_lookups_down");
    faults.lose_response.store(true, Ordering::SeqCst);
    call(&ctx, "look-ups down", 1, "ord_3").await;
    faults.lookups_down.store(true, Ordering::SeqCst);
    call(&ctx, "look-ups down", 2, "ord_3").await;
    faults.lookups_down.store(false, Ordering::SeqCst);
    call(&ctx, "look-ups down", 3, "ord_3").await;

    // 4. The caller's own timeout fires after the refund was made: the call is cancelled
    //    after its body began, so its outcome is unknown; the retry reconciles.
    let ctx = CallContext::new().with_conversation("conv_cancelled");
    faults.hang_after_effect.store(true, Ordering::SeqCst);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        ctx.run(send_refund("ord_4", 500)),
    )
    .await;
    assert!(cancelled.is_err(), "the caller's timeout fired");
    println!(
        "{:<28} call 1  cancelled by the caller's timeout after the refund was made",
        "cancelled after the effect"
    );
    // On a network store the unknown mark is written by a detached task: let it land.
    tokio::time::sleep(Duration::from_millis(20)).await;
    call(&ctx, "cancelled after the effect", 2, "ord_4").await;
    call(&ctx, "cancelled after the effect", 3, "ord_4").await;

    println!(
        "refunds made by the payment API: {} for 4 orders",
        API.refunds_made()
    );
    assert_eq!(API.refunds_made(), 4, "one refund per order");
}
