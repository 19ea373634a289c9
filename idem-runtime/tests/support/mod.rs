//! Shared helpers of the protocol tests: an engine over a memory store and a manual
//! clock, a spec builder, a store in front of another that sees or changes chosen
//! operations ([`Intercepted`]), and one that injects faults ([`FaultyStore`]).

#![allow(dead_code)]

mod intercept;
pub use intercept::{Intercept, Intercepted};

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::envelope::Envelope;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, OwnerToken, RenewRequest, StoreFuture,
    TakeoverRequest,
};
use idem_runtime::testkit::{EffectLog, ManualClock};
use idem_runtime::{
    prepare, CallContext, Engine, MemoryStore, Scope, Store, StoreError, StoreErrorKind, Timestamp,
    ToolError, ToolSpec,
};

pub struct Harness {
    pub store: Arc<dyn Store>,
    pub clock: ManualClock,
    pub engine: Engine,
    pub log: EffectLog,
    /// Whatever must outlive the store (a temporary directory, say).
    _keep: Option<Box<dyn Any + Send + Sync>>,
}

/// A store under test and whatever must live as long as it (a temporary directory).
pub struct TestStore {
    pub store: Arc<dyn Store>,
    pub keep: Option<Box<dyn Any + Send + Sync>>,
}

impl TestStore {
    pub fn memory() -> Self {
        TestStore {
            store: Arc::new(MemoryStore::new()),
            keep: None,
        }
    }
}

impl Harness {
    /// A harness over a fresh memory store.
    pub fn new() -> Self {
        Harness::on(TestStore::memory())
    }

    /// A harness over `store`, with a manual clock.
    pub fn on(store: TestStore) -> Self {
        let clock = ManualClock::new();
        let engine = Engine::from_shared(store.store.clone(), Arc::new(clock.clone()));
        Harness {
            store: store.store,
            clock,
            engine,
            log: EffectLog::new(),
            _keep: store.keep,
        }
    }

    pub fn with_store(store: Arc<dyn Store>) -> (Self, Engine) {
        let h = Harness::new();
        let engine = Engine::from_shared(store, Arc::new(h.clock.clone()));
        (h, engine)
    }

    pub fn ctx(&self, conversation: &str) -> CallContext {
        CallContext::new()
            .with_engine(self.engine.clone())
            .with_conversation(conversation)
    }

    pub fn now(&self) -> Timestamp {
        use idem_runtime::Clock;
        self.clock.now()
    }
}

/// A `'static` spec with the given spans (ms).
pub fn spec(name: &'static str, ttl_ms: u64, lease_ms: u64, wait_ms: u64) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        name,
        scope: Scope::Conversation,
        ttl: Duration::from_millis(ttl_ms),
        lease: Duration::from_millis(lease_ms),
        wait: Duration::from_millis(wait_ms),
        ..ToolSpec::new(name)
    }))
}

pub fn default_spec() -> &'static ToolSpec {
    spec("send_refund", 86_400_000, 60_000, 5_000)
}

/// `spec` with `on_unknown = "rerun"` (U2a): an unknown outcome, a crashed owner's claim
/// whose lease lapsed among them, is taken over and run again once its lease lapsed,
/// instead of being held for a person's decision (U2, the default).
pub fn rerun(spec: &'static ToolSpec) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        on_unknown: idem_runtime::OnUnknown::Rerun,
        ..*spec
    }))
}

/// The demo tool: refunds `order`, records the effect, returns `order * 100`.
pub async fn refund(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
) -> Result<u64, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop))?;
    prepared
        .run(async {
            log.record(spec.name, order.to_string());
            Ok(order * 100)
        })
        .await
}

/// The key a call would get, without running it.
pub fn key_of(spec: &'static ToolSpec, ctx: &CallContext, order: u64) -> IdempotencyKey {
    prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop))
        .unwrap()
        .key()
        .clone()
}

/// A store that wraps another (a memory store by default), counts claims, takeovers and
/// renewals, and fails chosen operations on demand (`fail_claim` … as switches).
pub type FaultyStore = Intercepted<Faults>;

/// The switches and counters of a [`FaultyStore`], reached through it (`store.fail_renew`).
#[derive(Debug, Default)]
pub struct Faults {
    pub fail_claim: AtomicBool,
    pub fail_complete: AtomicBool,
    pub fail_release: AtomicBool,
    pub fail_renew: AtomicBool,
    pub claims: AtomicUsize,
    pub takeovers: AtomicUsize,
    pub renewals: AtomicUsize,
}

impl Intercepted<Faults> {
    pub fn wrapping(inner: Arc<dyn Store>) -> Self {
        Intercepted::new(inner, Faults::default())
    }
}

impl Default for Intercepted<Faults> {
    fn default() -> Self {
        FaultyStore::wrapping(Arc::new(MemoryStore::new()))
    }
}

fn unavailable<'a, T: Send + 'a>() -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Err(StoreError::new(
        "faulty",
        StoreErrorKind::Unavailable,
        "connection refused",
    ))))
}

impl Intercept for Faults {
    fn claim<'a>(&'a self, inner: &'a dyn Store, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        if self.fail_claim.load(Ordering::SeqCst) {
            return unavailable();
        }
        inner.claim(req)
    }
    fn take_over<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TakeoverRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        self.takeovers.fetch_add(1, Ordering::SeqCst);
        inner.take_over(req)
    }
    fn complete<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: CompleteRequest<'a>,
    ) -> StoreFuture<'a, Completion> {
        if self.fail_complete.load(Ordering::SeqCst) {
            return unavailable();
        }
        inner.complete(req)
    }
    fn release<'a>(
        &'a self,
        inner: &'a dyn Store,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
    ) -> StoreFuture<'a, bool> {
        if self.fail_release.load(Ordering::SeqCst) {
            return unavailable();
        }
        inner.release(key, owner)
    }
    fn renew<'a>(&'a self, inner: &'a dyn Store, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.fail_renew.load(Ordering::SeqCst) {
            return unavailable();
        }
        inner.renew(req)
    }
    fn backend(&self) -> Option<&'static str> {
        Some("faulty")
    }
}

/// A history entry of `event` at the epoch, fence 0: for store-level tests that do not
/// read the history back.
pub fn entry(event: idem_runtime::store::HistoryEvent) -> idem_runtime::store::HistoryEntry {
    idem_runtime::store::HistoryEntry::new(Timestamp::EPOCH, event, 0)
}

/// A completion of `key` by `owner` with `outcome` at `now`, from the body (source
/// executed), with a `completed` history entry (fence 0).
pub fn complete_request<'a>(
    key: &'a IdempotencyKey,
    owner: OwnerToken,
    outcome: &'a Envelope,
    now: Timestamp,
) -> idem_runtime::store::CompleteRequest<'a> {
    use idem_runtime::store::{HistoryEvent, OutcomeSource};
    idem_runtime::store::CompleteRequest {
        key,
        owner,
        outcome,
        source: OutcomeSource::Executed,
        now,
        entry: entry(HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        }),
    }
}

/// The history entry of a takeover, for store-level tests (fence 0).
pub fn takeover_entry() -> idem_runtime::store::HistoryEntry {
    entry(idem_runtime::store::HistoryEvent::TakenOver {
        cause: idem_runtime::store::UnknownReason::LeaseLapsed,
    })
}

/// The history entry of a run marked unknown, for store-level tests (fence 0).
pub fn unknown_entry() -> idem_runtime::store::HistoryEntry {
    entry(idem_runtime::store::HistoryEvent::Unknown {
        cause: idem_runtime::store::UnknownReason::Error,
    })
}

/// Whether a call answered `AwaitingApproval` with `expired` as given (A2, A4).
pub fn awaiting<T>(answer: &Result<T, ToolError>, expired: bool) -> bool {
    matches!(answer, Err(ToolError::Idem(idem_runtime::Error::AwaitingApproval { expired: e, .. })) if *e == expired)
}

/// Whether a call answered `OutcomeUnknown` held for a person: `held`, no retry-after (U2).
pub fn is_held<T>(answer: &Result<T, ToolError>) -> bool {
    matches!(
        answer,
        Err(ToolError::Idem(idem_runtime::Error::OutcomeUnknown {
            held: true,
            retry_after_ms: None,
            ..
        }))
    )
}

/// The events of a history, oldest first (U7).
pub fn events(history: &idem_runtime::store::History) -> Vec<idem_runtime::store::HistoryEvent> {
    history.entries.iter().map(|e| e.event.clone()).collect()
}
