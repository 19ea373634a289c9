//! Lease renewal: while a body runs, its owner extends the claim's lease every `heartbeat`
//! with a compare-and-set on its owner token, so a live owner is never taken over however
//! long its body runs, and a dead one is taken over at most one lease after its last
//! renewal (contract L1, L2).
//!
//! Renewals run on the engine's clock (tests move a manual clock; nothing sleeps for real):
//! the first one `heartbeat` after the claim, then one `heartbeat` after each success. An
//! async body's heartbeat is polled alongside the body, inside the caller's future, and so
//! stops when that future is dropped; a sync body's heartbeat is served by one renewal
//! thread per process ([`service`], [`Heartbeat::register`]) until the call ends. A body
//! that returns within `heartbeat` costs no renewal.

mod service;

pub(crate) use service::Beating;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::attempt::FencedSignal;
use crate::clock::{Clock, Timestamp};
use crate::key::IdempotencyKey;
use crate::store::{OwnerToken, RenewRequest, Store};
use crate::telemetry::{CallTrace, StoreOperation};

/// After a renewal that failed with a store error, the next try comes this soon at the
/// latest (or one heartbeat, if shorter).
const RETRY_AFTER_STORE_ERROR: Duration = Duration::from_secs(1);

/// One claim's lease renewal. Clones share the schedule and the fenced signal.
#[derive(Clone, Debug)]
pub(crate) struct Heartbeat {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    key: IdempotencyKey,
    owner: OwnerToken,
    tool: &'static str,
    lease: Duration,
    every: Duration,
    /// When the next renewal is due (engine clock, ms).
    next_at: Arc<AtomicU64>,
    fenced: Arc<FencedSignal>,
    /// The call's span: renewals report in it (V2), also from the renewal thread.
    trace: CallTrace,
}

/// The parts of a claim a heartbeat renews.
pub(crate) struct Lease {
    pub(crate) tool: &'static str,
    pub(crate) owner: OwnerToken,
    pub(crate) claimed_at: Timestamp,
    pub(crate) lease: Duration,
    /// `None`: no renewal (a zero lease).
    pub(crate) every: Option<Duration>,
    /// The call's span.
    pub(crate) trace: CallTrace,
}

impl Heartbeat {
    pub(crate) fn new(
        store: &Arc<dyn Store>,
        clock: &Arc<dyn Clock>,
        key: &IdempotencyKey,
        lease: Lease,
        fenced: &Arc<FencedSignal>,
    ) -> Option<Self> {
        let every = lease.every?;
        Some(Heartbeat {
            store: Arc::clone(store),
            clock: Arc::clone(clock),
            key: key.clone(),
            owner: lease.owner,
            tool: lease.tool,
            lease: lease.lease,
            every,
            next_at: Arc::new(AtomicU64::new(
                lease.claimed_at.saturating_add(every).as_millis(),
            )),
            fenced: Arc::clone(fenced),
            trace: lease.trace,
        })
    }

    /// Renews the lease on schedule until a renewal finds the claim lost (then sets the
    /// fenced signal and returns). Never returns while the claim holds.
    async fn beat(self) {
        loop {
            self.clock.sleep_until(self.due()).await;
            if !self.renew_once().await {
                return;
            }
        }
    }

    /// Whether a renewal is due now.
    pub(crate) fn is_due(&self) -> bool {
        self.clock.now() >= self.due()
    }

    /// When the next renewal is due (engine clock).
    fn due(&self) -> Timestamp {
        Timestamp::from_millis(self.next_at.load(Ordering::SeqCst))
    }

    /// One renewal, now, and the schedule of the next: `false` when it found the claim lost
    /// (the fenced signal is then set, L2), `true` otherwise (renewed, or a store error to
    /// retry soon).
    async fn renew_once(&self) -> bool {
        {
            let now = self.clock.now();
            let request = RenewRequest {
                key: &self.key,
                owner: self.owner,
                now,
                lease_until: now.saturating_add(self.lease),
            };
            let lease_until = request.lease_until;
            let renewing = self.store.renew(request);
            let renewed = self
                .trace
                .timed(StoreOperation::Renew, self.store.backend(), renewing);
            let next = match renewed.await {
                Ok(true) => {
                    self.trace.renewed(lease_until);
                    now.saturating_add(self.every)
                }
                // Another caller took over after this owner stalled longer than the lease:
                // the body is fenced and its outcome will not be saved (L2).
                Ok(false) => {
                    self.trace.lease_lost(StoreOperation::Renew);
                    self.fenced.set();
                    return false;
                }
                // Reported by `timed`; tried again soon.
                Err(_) => now.saturating_add(self.every.min(RETRY_AFTER_STORE_ERROR)),
            };
            self.next_at.store(next.as_millis(), Ordering::SeqCst);
            true
        }
    }

    /// Runs `work` with this heartbeat polled alongside it (an async body, a reconcile
    /// function, the final store write). The heartbeat is first polled only after `work`
    /// returned `Pending` once, so work that is ready at once pays nothing for it.
    pub(crate) async fn alongside<F: Future>(heartbeat: Option<&Heartbeat>, work: F) -> F::Output {
        Self::alongside_with(heartbeat, work, false).await
    }

    /// [`alongside`](Self::alongside), and with `may_block` for work that may block its
    /// thread inside a poll (an MCP tool whose handler runs a sync fn inline, where the
    /// future never returns `Pending` while the body runs): for the length of each poll the
    /// heartbeat is also in this thread's slot of the renewal service
    /// ([`register`](Self::register)), which renews it on schedule if the poll outlasts a
    /// heartbeat. Costs a registration (two short lock holds) per poll.
    pub(crate) async fn alongside_with<F: Future>(
        heartbeat: Option<&Heartbeat>,
        work: F,
        may_block: bool,
    ) -> F::Output {
        let Some(heartbeat) = heartbeat else {
            return work.await;
        };
        let mut work = pin!(work);
        let mut beat = pin!(heartbeat.clone().beat());
        let mut beating = true;
        std::future::poll_fn(move |cx| {
            let beating_here = may_block.then(|| heartbeat.register());
            let polled = work.as_mut().poll(cx);
            drop(beating_here);
            if let Poll::Ready(output) = polled {
                return Poll::Ready(output);
            }
            if beating && beat.as_mut().poll(cx).is_ready() {
                beating = false;
            }
            Poll::Pending
        })
        .await
    }
}
