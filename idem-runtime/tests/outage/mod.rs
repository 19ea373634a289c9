//! The outage scenarios shared by the Redis and PostgreSQL outage tests: a private server
//! (never the shared one) is crashed in the middle of a run and started again
//! ([`crash_and_restart`]), or frozen and thawed ([`freeze_and_thaw`]), and the scenarios
//! check what the contract promises around that (S2, S3, S6, S10).
//!
//! Timings (how long a caller waits for its store error during the outage, how long service
//! takes to resume) are measured and printed, never asserted; a generous bound
//! ([`HANG_BOUND`]) only turns a hang into a failure.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::{
    prepare, CallStatus, Error, Store, StoreError, StoreErrorKind, ToolError, ToolSpec,
};

use crate::support::{self, refund, Harness, TestStore};

/// Longer than any store timeout (Redis 5 s, PostgreSQL 10 s) plus the Redis client's
/// reconnect backoff: a call that has not answered by then hangs, which fails the test.
pub const HANG_BOUND: Duration = Duration::from_secs(20);

/// How long the scenario waits for service to resume after the server accepts connections
/// again before it fails.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(20);

/// A database server that this test process owns alone, so that crashing it disturbs no
/// other test. Dropping it stops the server and deletes its files, also when the test fails.
pub trait PrivateServer: Send {
    /// Kills the server hard (a crash, not a clean shutdown) and returns once it is gone.
    fn crash(&mut self);
    /// Starts the server again on the same port with the same data, and returns once it
    /// accepts connections.
    fn restart(&mut self);
    /// Stops every process of the server (SIGSTOP) without closing a connection: to the
    /// client, a server that hangs (connections stay open, nothing is answered).
    fn freeze(&mut self);
    /// Lets a frozen server run again (SIGCONT).
    fn thaw(&mut self);
}

/// What the scenario measured, for the test's report.
#[derive(Debug)]
pub struct Figures {
    /// How long each caller waited for its store error while the server was down.
    pub outage_latencies: Vec<Duration>,
    /// How long the call in flight at the crash waited for its failed completion.
    pub in_flight_completion: Duration,
    /// From "the server accepts connections again" to the first call that succeeded.
    pub time_to_recover: Duration,
    /// Calls that failed after the server accepted connections again.
    pub errors_after_restart: usize,
}

impl Figures {
    pub fn print(&self, backend: &str) {
        let max = self
            .outage_latencies
            .iter()
            .max()
            .copied()
            .unwrap_or_default();
        let min = self
            .outage_latencies
            .iter()
            .min()
            .copied()
            .unwrap_or_default();
        let mut sorted = self.outage_latencies.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        eprintln!(
            "outage[{backend}]: store error during the outage after min {:.1} ms, median {:.1} ms, max {:.1} ms ({} calls); \
             failed completion of the call in flight after {:.1} ms; \
             service resumed {:.1} ms after the server accepted connections, with {} failed call(s) in between",
            ms(min),
            ms(median),
            ms(max),
            self.outage_latencies.len(),
            ms(self.in_flight_completion),
            ms(self.time_to_recover),
            self.errors_after_restart,
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Orders completed before the outage.
const BEFORE: std::ops::RangeInclusive<u64> = 1..=8;
/// The order whose body is running when the server dies.
const IN_FLIGHT: u64 = 100;
/// Orders first tried during the outage.
const DURING: std::ops::RangeInclusive<u64> = 200..=203;
/// Orders used to probe for recovery, one per attempt.
const PROBE: u64 = 1_000;

/// How long the scenario leaves the store idle before restarting the server: longer than
/// the Redis client's reconnect backoff (about 0.5 s), so the first call after the restart
/// meets a connection that gave up, not one still retrying.
const IDLE_BEFORE_RESTART: Duration = Duration::from_millis(1_500);

/// Lease of the scenario's tool (ms).
const LEASE_MS: u64 = 60_000;

/// The scenario's tool: one day TTL, a one-minute lease, no waiting for a key in progress
/// (so a caller that finds the key in progress answers `InProgress` at once, S5), and
/// `on_unknown = "rerun"` (U2a): the scenarios pin that exactly one caller takes over a
/// claim the outage left behind once its lease lapsed (under the default, U2, it would be
/// held for a person instead, as the decisions suite pins on every store).
fn outage_spec() -> &'static ToolSpec {
    support::rerun(support::spec("send_refund", 86_400_000, LEASE_MS, 0))
}

/// `out` is a typed store error of kind `Unavailable` (S10).
fn assert_unavailable<T: std::fmt::Debug>(what: &str, out: &Result<T, ToolError>) {
    match out {
        Err(ToolError::Idem(Error::Store { source, .. })) => {
            assert_eq!(source.kind, StoreErrorKind::Unavailable, "{what}: {source}");
            assert!(source.is_transient(), "{what}: {source}");
        }
        other => panic!("{what}: expected an Unavailable store error, got {other:?}"),
    }
}

/// Runs `call` with [`HANG_BOUND`]; returns its result and how long it took.
async fn timed<T>(what: &str, call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    match tokio::time::timeout(HANG_BOUND, call).await {
        Ok(out) => (out, started.elapsed()),
        Err(_) => panic!("{what}: no answer within {HANG_BOUND:?}: the store hangs"),
    }
}

fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// The whole scenario on `store`, which talks to `server`. Needs a multi-threaded runtime.
///
/// 1. Orders 1–8 run (concurrently, so a pool holds several connections), each once.
/// 2. Order 100's body starts (its claim is recorded), then the server is killed; the body
///    finishes: the caller still gets the body's outcome, marked as not recorded (S10).
/// 3. While the server is down, calls on completed, in-progress and new keys, one by one
///    and 16 at once, all get `Error::Store` of kind `Unavailable`; no body runs (S10).
/// 4. The server restarts; calls on new keys succeed again (measured, and failures after
///    the restart counted).
/// 5. Nothing recorded was lost: orders 1–8 replay without running (S3); the orders tried
///    during the outage run once (S2); order 100 answers `InProgress` until its lease
///    lapses, at lease − 1 ms still, and at the lease exactly one caller takes over and
///    runs it again (S6, S10); then it replays.
pub async fn crash_and_restart(server: &mut dyn PrivateServer, store: Arc<dyn Store>) -> Figures {
    let h = Arc::new(Harness::on(TestStore { store, keep: None }));
    let spec = outage_spec();
    let ctx = h.ctx("conv_outage");

    // 1. Before the outage (S2): each order runs once.
    let before = futures_util::future::join_all(BEFORE.map(|order| {
        let (h, ctx) = (h.clone(), ctx.clone());
        async move { (order, refund(spec, &ctx, &h.log, order).await) }
    }))
    .await;
    for (order, out) in before {
        assert_eq!(out, Ok(order * 100), "order {order} before the outage");
    }
    assert_eq!(h.log.len(), BEFORE.count());

    // 2. A call in flight when the server dies (S10).
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let in_flight = {
        let h = h.clone();
        tokio::spawn(async move {
            let ctx = h.ctx("conv_outage");
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &IN_FLIGHT).map(drop))
                .expect("prepared");
            let log = h.log.clone();
            let out = p
                .run(async move {
                    log.record(spec.name, IN_FLIGHT.to_string());
                    let _ = started_tx.send(());
                    let _ = finish_rx.await;
                    Ok::<u64, ToolError>(IN_FLIGHT * 100)
                })
                .await;
            (out, ctx.last_outcome())
        })
    };
    started_rx.await.expect("the in-flight body started");
    blocking(|| server.crash());
    let completing = Instant::now();
    let _ = finish_tx.send(());
    let ((out, record), in_flight_completion) = timed("the call in flight", async {
        in_flight.await.expect("no panic")
    })
    .await;
    let in_flight_completion = in_flight_completion.min(completing.elapsed());
    assert_eq!(
        out,
        Ok(IN_FLIGHT * 100),
        "the caller learns the body's outcome"
    );
    let record = record.expect("the call's outcome is recorded on its context");
    assert_eq!(record.status, CallStatus::Executed);
    assert!(!record.recorded, "the outcome cannot have been saved");
    let executed_before_outage = h.log.len();
    assert_eq!(executed_before_outage, BEFORE.count() + 1);

    // 3. During the outage (S10): typed errors, no body runs.
    let mut outage_latencies = Vec::new();
    let key = support::key_of(spec, &ctx, 1);
    let (read, took) = timed("a read", h.store.read(&key, h.now())).await;
    match read {
        Err(StoreError { kind, .. }) => assert_eq!(kind, StoreErrorKind::Unavailable),
        Ok(found) => panic!("a read on a dead server answered {found:?}"),
    }
    outage_latencies.push(took);
    for order in [1, 2, IN_FLIGHT].into_iter().chain(DURING) {
        let (out, took) = timed("a call", refund(spec, &ctx, &h.log, order)).await;
        assert_unavailable(&format!("order {order} during the outage"), &out);
        outage_latencies.push(took);
    }
    let burst = futures_util::future::join_all((0..16u64).map(|i| {
        let (h, ctx) = (h.clone(), ctx.clone());
        let order = [1, IN_FLIGHT, *DURING.start()][(i % 3) as usize];
        async move { timed("a call", refund(spec, &ctx, &h.log, order)).await }
    }))
    .await;
    for (out, took) in burst {
        assert_unavailable("a concurrent call during the outage", &out);
        outage_latencies.push(took);
    }
    assert_eq!(
        h.log.len(),
        executed_before_outage,
        "no body ran while the store was down"
    );

    // Nobody calls for a while: the client's own reconnect attempts run out (real time:
    // this waits for the client library, it does not move the engine's clock).
    tokio::time::sleep(IDLE_BEFORE_RESTART).await;

    // 4. The server is back: service resumes.
    blocking(|| server.restart());
    let back = Instant::now();
    let mut errors_after_restart = 0;
    let mut probe = PROBE;
    let time_to_recover = loop {
        let (out, _) = timed(
            "a call after the restart",
            refund(spec, &ctx, &h.log, probe),
        )
        .await;
        match out {
            Ok(value) => {
                assert_eq!(value, probe * 100);
                break back.elapsed();
            }
            Err(error) => {
                assert_unavailable("a call after the restart", &Err::<(), _>(error));
                errors_after_restart += 1;
                assert!(
                    back.elapsed() < RECOVERY_BOUND,
                    "service did not resume within {RECOVERY_BOUND:?} of the restart"
                );
                probe += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // Once the server accepts connections the stores serve the very next call: the
    // PostgreSQL pool drops connections the server closed, the Redis store resends a
    // command the connection manager refused with its last failed reconnect attempt.
    assert_eq!(
        errors_after_restart, 0,
        "calls failed after the server was back"
    );
    assert_eq!(h.log.len(), executed_before_outage + 1);

    // 5. Nothing recorded was lost (S3): completed keys replay without running.
    for order in BEFORE {
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        let record = ctx.last_outcome().expect("an outcome");
        assert_eq!(record.status, CallStatus::Replayed, "order {order} replays");
    }
    assert_eq!(h.log.len(), executed_before_outage + 1);
    // Keys first tried during the outage never ran: they run now, once (S2), then replay.
    for order in DURING {
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    }
    let executed = h.log.len();
    assert_eq!(executed, executed_before_outage + 1 + DURING.count());

    // The call in flight at the crash (S6, S10): its claim survived; no second run before
    // its lease lapses (the clock has not moved since the claim).
    let in_progress = |out: &Result<u64, ToolError>| {
        matches!(out, Err(ToolError::Idem(Error::InProgress { .. })))
    };
    let out = refund(spec, &ctx, &h.log, IN_FLIGHT).await;
    assert!(
        in_progress(&out),
        "order {IN_FLIGHT} right after the restart: {out:?}"
    );
    h.clock.advance(Duration::from_millis(LEASE_MS - 1));
    let out = refund(spec, &ctx, &h.log, IN_FLIGHT).await;
    assert!(
        in_progress(&out),
        "order {IN_FLIGHT} at lease − 1 ms: {out:?}"
    );
    assert_eq!(
        h.log.len(),
        executed,
        "no second run before the lease lapses"
    );
    h.clock.advance(Duration::from_millis(1));
    let takeovers = futures_util::future::join_all((0..8).map(|_| {
        let (h, ctx) = (h.clone(), h.ctx("conv_outage"));
        async move {
            let out = refund(spec, &ctx, &h.log, IN_FLIGHT).await;
            (out, ctx.last_outcome())
        }
    }))
    .await;
    let mut took_over = 0;
    for (out, record) in takeovers {
        match out {
            Ok(value) => {
                assert_eq!(value, IN_FLIGHT * 100);
                let record = record.expect("an outcome");
                if record.status == CallStatus::Executed {
                    assert!(record.takeover, "{record:?}");
                    assert!(record.recorded, "{record:?}");
                    took_over += 1;
                }
            }
            // Callers that found the new owner's claim do not wait (wait = 0).
            Err(ToolError::Idem(Error::InProgress { .. })) => {}
            Err(other) => panic!("order {IN_FLIGHT} after its lease lapsed: {other:?}"),
        }
    }
    assert_eq!(
        took_over, 1,
        "exactly one caller takes over after the lease lapsed"
    );
    assert_eq!(
        h.log.len(),
        executed + 1,
        "the takeover ran the body once more"
    );
    assert_eq!(
        refund(spec, &ctx, &h.log, IN_FLIGHT).await,
        Ok(IN_FLIGHT * 100)
    );
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);

    // Per order: one run each, two for the order whose lease lapsed (S2, S6).
    let key_of = |order: u64| support::key_of(spec, &ctx, order);
    for order in BEFORE.chain(DURING) {
        assert_eq!(h.log.count_for(&key_of(order)), 1, "order {order}");
    }
    assert_eq!(h.log.count_for(&key_of(IN_FLIGHT)), 2);
    assert_eq!(h.log.count_for(&key_of(probe)), 1);
    for failed in PROBE..probe {
        assert_eq!(
            h.log.count_for(&key_of(failed)),
            0,
            "probe {failed} failed, never ran"
        );
    }

    Figures {
        outage_latencies,
        in_flight_completion,
        time_to_recover,
        errors_after_restart,
    }
}

/// What the frozen-server scenario measured.
#[derive(Debug)]
pub struct FrozenFigures {
    /// How long each caller waited for its store error, first round (fresh connections).
    pub first_round: Vec<Duration>,
    /// The same, second round (after the first round's timeouts).
    pub second_round: Vec<Duration>,
    /// From the thaw to the first call that succeeded.
    pub time_to_recover: Duration,
    /// Calls that failed after the thaw.
    pub errors_after_thaw: usize,
}

impl FrozenFigures {
    pub fn print(&self, backend: &str) {
        let show = |d: &[Duration]| {
            d.iter()
                .map(|d| format!("{:.0}", ms(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!(
            "frozen[{backend}]: store errors after [{}] ms, then after [{}] ms; \
             service resumed {:.1} ms after the thaw, with {} failed call(s) in between",
            show(&self.first_round),
            show(&self.second_round),
            ms(self.time_to_recover),
            self.errors_after_thaw,
        );
    }
}

/// Orders tried while the server is frozen.
const FROZEN: [u64; 2] = [300, 301];

/// A server that stops answering without closing its connections (S10): every caller gets
/// a typed `Unavailable` error within the store's timeouts instead of hanging, no body
/// runs; after the thaw service resumes, completed keys replay (S3), and a key tried
/// during the freeze runs exactly once in the end: its claim may have reached the server
/// and been applied after the caller gave up, and then it is in progress until its lease
/// lapses (S6, S10), never run twice.
pub async fn freeze_and_thaw(
    server: &mut dyn PrivateServer,
    store: Arc<dyn Store>,
) -> FrozenFigures {
    let h = Arc::new(Harness::on(TestStore { store, keep: None }));
    let spec = outage_spec();
    let ctx = h.ctx("conv_frozen");
    for order in 1..=4 {
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
    }
    assert_eq!(h.log.len(), 4);

    blocking(|| server.freeze());
    let mut rounds = Vec::new();
    for _ in 0..2 {
        let round = futures_util::future::join_all([1, 2].into_iter().chain(FROZEN).map(|order| {
            let (h, ctx) = (h.clone(), ctx.clone());
            async move {
                let (out, took) = timed(
                    "a call to a frozen server",
                    refund(spec, &ctx, &h.log, order),
                )
                .await;
                assert_unavailable(&format!("order {order} on a frozen server"), &out);
                took
            }
        }))
        .await;
        rounds.push(round);
    }
    assert_eq!(h.log.len(), 4, "no body ran while the server was frozen");

    blocking(|| server.thaw());
    let back = Instant::now();
    let mut errors_after_thaw = 0;
    let mut probe = PROBE;
    let time_to_recover = loop {
        let (out, _) = timed("a call after the thaw", refund(spec, &ctx, &h.log, probe)).await;
        match out {
            Ok(value) => {
                assert_eq!(value, probe * 100);
                break back.elapsed();
            }
            Err(error) => {
                assert_unavailable("a call after the thaw", &Err::<(), _>(error));
                errors_after_thaw += 1;
                assert!(
                    back.elapsed() < RECOVERY_BOUND,
                    "service did not resume within {RECOVERY_BOUND:?} of the thaw"
                );
                probe += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(errors_after_thaw, 0, "calls failed after the thaw");
    assert_eq!(h.log.len(), 5);
    for order in 1..=4 {
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        assert_eq!(
            ctx.last_outcome().unwrap().status,
            CallStatus::Replayed,
            "order {order}"
        );
    }
    // A key tried during the freeze: absent (runs now) or claimed late by a caller that
    // gave up (in progress until its lease lapses, then one takeover).
    for order in FROZEN {
        match refund(spec, &ctx, &h.log, order).await {
            Ok(value) => assert_eq!(value, order * 100),
            Err(ToolError::Idem(Error::InProgress { .. })) => {}
            Err(other) => panic!("order {order} after the thaw: {other:?}"),
        }
    }
    h.clock.advance(Duration::from_millis(LEASE_MS));
    for order in FROZEN {
        assert_eq!(
            refund(spec, &ctx, &h.log, order).await,
            Ok(order * 100),
            "order {order}"
        );
        assert_eq!(
            h.log.count_for(&support::key_of(spec, &ctx, order)),
            1,
            "order {order} ran once"
        );
    }
    for order in 1..=4 {
        assert_eq!(
            h.log.count_for(&support::key_of(spec, &ctx, order)),
            1,
            "order {order}"
        );
    }
    FrozenFigures {
        first_round: rounds[0].clone(),
        second_round: rounds[1].clone(),
        time_to_recover,
        errors_after_thaw,
    }
}
