// pins L1, U2–U4, C4: `heartbeat`, `on_cancel`, `on_unknown` and `reconcile` on async and
// sync tools, free fns (with their dispatch companion) and methods; a sync tool may name an
// async reconcile fn; the reconcile fn gets every parameter by shared reference (a
// `&CallContext`, skipped and pattern arguments too), the receiver first; the async tool's
// future stays `Send` when the body's and the reconcile fn's are.
#![deny(warnings)]

use idem_agent::{idempotent, AttemptInfo, CallContext, Reconciled, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refund {
    pub order: String,
    pub amount: u64,
}

pub async fn check_refund(
    order: &str,
    amount: &u64,
    attempt: &AttemptInfo,
) -> Reconciled<Refund, ToolError> {
    let _ = attempt;
    tokio::task::yield_now().await;
    Reconciled::Done(Ok(Refund { order: order.to_owned(), amount: *amount }))
}

/// All four options on an async fn.
#[idempotent(heartbeat = "20s", on_cancel = "hold", on_unknown = "hold", reconcile = check_refund)]
pub async fn send_refund(order: &str, amount: u64) -> Result<Refund, ToolError> {
    tokio::task::yield_now().await;
    Ok(Refund { order: order.to_owned(), amount })
}

pub fn check_sync(order: &String, attempt: &AttemptInfo) -> Reconciled<String, ToolError> {
    let _ = (order, attempt);
    Reconciled::NotDone
}

/// A sync fn with a sync reconcile fn, `on_cancel = "release"`, `on_unknown = "rerun"`, and
/// a lease and heartbeat in milliseconds.
#[idempotent(
    lease = "1500ms",
    heartbeat = "500ms",
    on_cancel = "release",
    on_unknown = "rerun",
    reconcile = check_sync
)]
pub fn note(order: String) -> Result<String, ToolError> {
    Ok(order)
}

pub async fn check_async(
    ctx: &CallContext,
    order: &String,
    (x, y): &(u8, u8),
    requested_at: &u64,
    attempt: &AttemptInfo,
) -> Reconciled<u64, ToolError> {
    let _ = (ctx, order, x, y, requested_at, attempt);
    Reconciled::Unknown
}

/// A sync fn with an async reconcile fn; a context, a pattern and a skipped argument.
#[idempotent(key(order), skip(requested_at), reconcile = check_async)]
pub fn charge(
    ctx: &CallContext,
    order: String,
    (x, y): (u8, u8),
    requested_at: u64,
) -> Result<u64, ToolError> {
    let _ = (ctx, order, requested_at);
    Ok(u64::from(x) + u64::from(y))
}

mod bank {
    pub fn check(
        order: &str,
        attempt: &idem_agent::AttemptInfo,
    ) -> idem_agent::Reconciled<u32, idem_agent::ToolError> {
        let _ = (order, attempt);
        idem_agent::Reconciled::NotDone
    }
}

/// A path with a module.
#[idempotent(scope = "global", reconcile = bank::check)]
pub async fn withdraw(order: &str) -> Result<u32, ToolError> {
    Ok(order.len() as u32)
}

pub struct Bank {
    refunds: u32,
}

impl Bank {
    fn check(&self, order: &str, attempt: &AttemptInfo) -> Reconciled<u32, ToolError> {
        let _ = (order, attempt);
        Reconciled::Done(Ok(self.refunds))
    }

    async fn check_later(&self, order: &str, attempt: &AttemptInfo) -> Reconciled<u32, ToolError> {
        let _ = attempt;
        Reconciled::Done(Ok(self.refunds + order.len() as u32))
    }

    fn check_owned(&self, reason: &String, attempt: &AttemptInfo) -> Reconciled<String, ToolError> {
        let _ = (self.refunds, attempt);
        Reconciled::Done(Ok(reason.clone()))
    }

    /// A method on `&self` with `reconcile = Self::check`.
    #[idempotent(scope = "global", reconcile = Self::check)]
    pub fn balance(&self, order: &str) -> Result<u32, ToolError> {
        let _ = order;
        Ok(self.refunds)
    }

    /// `&mut self`, async, an async reconcile method (which gets `&Self`), at least once.
    #[idempotent(scope = "global", heartbeat = "10s", on_unknown = "rerun", reconcile = Self::check_later)]
    pub async fn refund(&mut self, order: &str) -> Result<u32, ToolError> {
        let _ = order;
        self.refunds += 1;
        Ok(self.refunds)
    }

    /// By value: the reconcile fn borrows the receiver, the body then moves it.
    #[idempotent(scope = "global", reconcile = Self::check_owned)]
    pub fn close(self, reason: String) -> Result<String, ToolError> {
        Ok(format!("{reason}:{}", self.refunds))
    }
}

fn require_send<T: Send>(value: T) -> T {
    value
}

fn main() {
    let ctx = CallContext::new().with_conversation("conv");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refund = runtime
        .block_on(ctx.run(require_send(send_refund("o1", 5))))
        .unwrap();
    assert_eq!(refund, Refund { order: "o1".into(), amount: 5 });
    let _ = send_refund::tool();
    ctx.enter(|| {
        assert_eq!(note("o1".into()).unwrap(), "o1");
        let _ = note::tool();
    });
    assert_eq!(charge(&ctx, "o2".into(), (1, 2), 0).unwrap(), 3);
    let _ = charge::tool();
    let withdrawn = runtime.block_on(require_send(withdraw("o1"))).unwrap();
    assert_eq!(withdrawn, 2);
    let mut bank = Bank { refunds: 0 };
    assert_eq!(bank.balance("o1").unwrap(), 0);
    assert_eq!(runtime.block_on(require_send(bank.refund("o1"))).unwrap(), 1);
    assert_eq!(bank.close("done".into()).unwrap(), "done:1");
}
