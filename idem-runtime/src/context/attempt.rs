//! The running attempt as the call context carries it; its public face is [`crate::attempt`].

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::clock::Timestamp;
use crate::key::IdempotencyKey;

/// The attempt of an `#[idempotent]` body that is running now: read it inside the body with
/// [`current_attempt`](crate::current_attempt), or from a reconcile function's last argument.
///
/// Cheap to clone (the fenced signal is shared between clones).
///
/// # Forwarding the key and the fence downstream
///
/// The [`key`](Self::key) makes a downstream API deduplicate (a payment API's
/// `Idempotency-Key`). The [`fence`](Self::fence) lets a downstream store refuse a stale
/// owner's late write (F2): every claim and takeover of a key gets a larger fence, so a
/// write guarded by it lands only if no newer attempt of the same key wrote first.
///
/// ```sql
/// -- one row per idempotency key, written by the body with its key and fence
/// INSERT INTO refunds (idem_key, fence, order_id, amount_cents)
/// VALUES ($key, $fence, $order, $amount)
/// ON CONFLICT (idem_key) DO UPDATE
///     SET fence = EXCLUDED.fence, amount_cents = EXCLUDED.amount_cents
///     WHERE refunds.fence < EXCLUDED.fence;   -- a stale owner's write changes nothing
/// -- or, for a row that exists already:
/// UPDATE accounts SET balance = balance - $amount, fence = $fence
///  WHERE id = $account AND fence < $fence;
/// ```
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{current_attempt, prepare, CallContext, ToolError, ToolSpec};
/// static SPEC: ToolSpec = ToolSpec::new("send_refund");
/// let ctx = CallContext::new().with_conversation("conv_1");
/// let prepared = prepare(&SPEC, Some(&ctx), |args| args.key("order", "ord_7").map(drop)).unwrap();
/// let fence = prepared.run_blocking(|| -> Result<u64, ToolError> {
///     let attempt = current_attempt().expect("inside the body");
///     assert!(!attempt.is_takeover());      // a first run, not a takeover
///     assert!(!attempt.is_fenced());        // the claim is still ours
///     Ok(attempt.fence())
/// });
/// assert_eq!(fence, Ok(1));                 // the first claim of a key has fence 1
/// ```
#[derive(Debug, Clone)]
pub struct AttemptInfo {
    key: IdempotencyKey,
    fence: u64,
    claimed_at: Timestamp,
    previous: Option<PreviousRun>,
    fenced: Arc<FencedSignal>,
}

/// The earlier run of a key that this attempt took over, whose outcome is unknown (U2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousRun {
    /// When the earlier run claimed the key (engine clock, ms since the epoch).
    pub claimed_at: Timestamp,
    /// The earlier run's fencing token (this attempt's is larger).
    pub fence: u64,
    /// Since when the outcome has been unknown: the claim time of the first run in a chain
    /// of runs that ended without an outcome (kept across reconciliations that could not
    /// tell).
    pub unknown_since: Timestamp,
    /// Why the earlier run's outcome is unknown.
    pub cause: UnknownCause,
}

/// Why an earlier run's outcome is unknown (U1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownCause {
    /// Its owner stopped renewing the lease and the lease lapsed: the process crashed, was
    /// killed, or stalled or was cut off for longer than the lease.
    LeaseLapsed,
    /// Its owner gave up without an outcome: the body was cancelled or panicked after it
    /// began, the body ended with an outcome-unknown error, or a reconcile function could
    /// not tell.
    GaveUp,
}

impl AttemptInfo {
    pub(crate) fn new(
        key: IdempotencyKey,
        fence: u64,
        claimed_at: Timestamp,
        previous: Option<PreviousRun>,
    ) -> Self {
        AttemptInfo {
            key,
            fence,
            claimed_at,
            previous,
            fenced: Arc::default(),
        }
    }

    /// The call's idempotency key (K10).
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// This attempt's fencing token (F1): strictly larger than that of every earlier claim
    /// or takeover of the key the store still holds. 1 for a key's first claim.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// When this attempt claimed (or took over) the key (engine clock, ms since the epoch).
    pub fn claimed_at(&self) -> Timestamp {
        self.claimed_at
    }

    /// The earlier run this attempt took over, whose outcome is unknown; `None` for a first
    /// run.
    pub fn previous(&self) -> Option<&PreviousRun> {
        self.previous.as_ref()
    }

    /// Whether this attempt took over a run whose outcome is unknown (U2): the effect may
    /// already have happened; ask the downstream API by the key before repeating it.
    pub fn is_takeover(&self) -> bool {
        self.previous.is_some()
    }

    /// Whether a lease renewal found the claim lost (L2): another caller took the key
    /// over after this owner stalled or was cut off for longer than the lease. The body
    /// should not start its effect; its outcome will not be saved (S6).
    pub fn is_fenced(&self) -> bool {
        self.fenced.is_set()
    }

    /// Completes when a lease renewal finds the claim lost (L2); never, while the claim
    /// holds. Race the effect against it (`tokio::select!`) to stop before a stale effect.
    pub fn fenced(&self) -> impl Future<Output = ()> + Send + 'static {
        let signal = Arc::clone(&self.fenced);
        async move { signal.wait().await }
    }

    pub(crate) fn fenced_signal(&self) -> &Arc<FencedSignal> {
        &self.fenced
    }
}

/// Set once, when a renewal finds the claim lost; wakes every waiter.
#[derive(Debug, Default)]
pub(crate) struct FencedSignal {
    set: AtomicBool,
    notify: Notify,
}

impl FencedSignal {
    pub(crate) fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}
