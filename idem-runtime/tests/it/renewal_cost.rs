//! What lease renewal costs, in store round trips (contract L1), on the memory store and the
//! manual clock: a first call costs 2 (claim, complete) plus one per renewal, a body that
//! returns within its heartbeat renews nothing, a body spanning n heartbeats renews n times,
//! and a replay costs 1 and never renews, async and sync bodies alike. The figures in
//! BENCHMARKS.md ("Lease renewal", `cargo bench --bench renewal`) are the same counts,
//! measured with real time on every backend.

use crate::support;

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::poll;
use idem_runtime::{prepare, CallContext, CallStatus, Scope, Store, ToolError, ToolSpec};
use support::Harness;

/// A `'static` spec with the given lease and heartbeat (ms; `None`: the default, a third
/// of the lease).
fn spec(name: &'static str, lease_ms: u64, heartbeat_ms: Option<u64>) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_secs(86_400),
        lease: Duration::from_millis(lease_ms),
        heartbeat: heartbeat_ms.map(Duration::from_millis),
        ..ToolSpec::new(name)
    }))
}

fn round_trips(store: &Arc<dyn Store>) -> u64 {
    store.round_trips().expect("the memory store counts")
}

/// The store round trips of one call of `spec` for `order` whose async body lasts `body` on
/// the manual clock: the clock moves in steps of at most one heartbeat (a renewal is due
/// every heartbeat, so each step may bring one), the owner is polled after each step while
/// the body still runs, then the body returns and the call finishes. Checks the body ran
/// (`executed`) or was replayed.
async fn round_trips_of_an_async_call(
    h: &Harness,
    spec: &'static ToolSpec,
    ctx: &CallContext,
    order: u64,
    body: Duration,
    executed: bool,
) -> u64 {
    let heartbeat = spec.effective_heartbeat().expect("a lease to renew");
    let before = round_trips(&h.store);
    let gate = tokio::sync::Notify::new();
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop)).unwrap();
    let mut call = pin!(prepared.run(async {
        gate.notified().await;
        Ok::<u64, ToolError>(order * 100)
    }));
    if executed {
        assert!(
            poll!(&mut call).is_pending(),
            "the body runs until released"
        );
        let mut left = body;
        while !left.is_zero() {
            let step = left.min(heartbeat);
            h.clock.advance(step);
            left -= step;
            assert!(poll!(&mut call).is_pending(), "the body still runs");
        }
        gate.notify_one();
    }
    assert_eq!(call.await, Ok(order * 100));
    let status = ctx.last_outcome().expect("an outcome").status;
    let expected = if executed {
        CallStatus::Executed
    } else {
        CallStatus::Replayed
    };
    assert_eq!(status, expected);
    round_trips(&h.store) - before
}

/// [`round_trips_of_an_async_call`] for a sync body (`run_blocking`), whose lease is renewed
/// from a task of its own: the body moves the clock in heartbeat steps and waits (in real
/// time, bounded) for each renewal that step made due to land before the next.
fn round_trips_of_a_sync_call(
    h: &Harness,
    spec: &'static ToolSpec,
    ctx: &CallContext,
    order: u64,
    body: Duration,
) -> u64 {
    let heartbeat = spec.effective_heartbeat().expect("a lease to renew");
    let before = round_trips(&h.store);
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop)).unwrap();
    let outcome = prepared.run_blocking(|| {
        // The claim is made: one round trip so far.
        let mut expected = before + 1;
        assert_eq!(
            round_trips(&h.store),
            expected,
            "claimed, nothing renewed yet"
        );
        let mut left = body;
        let mut since_claim = Duration::ZERO;
        while !left.is_zero() {
            let step = left.min(heartbeat);
            h.clock.advance(step);
            left -= step;
            since_claim += step;
            // A renewal is due at every whole heartbeat since the claim.
            if since_claim
                .as_millis()
                .is_multiple_of(heartbeat.as_millis())
            {
                expected += 1;
                let deadline = Instant::now() + Duration::from_secs(5);
                while round_trips(&h.store) < expected {
                    assert!(
                        Instant::now() < deadline,
                        "no renewal after {since_claim:?}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        // No renewal beyond the due ones (a late one would show here).
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(round_trips(&h.store), expected, "only the due renewals");
        Ok::<u64, ToolError>(order * 100)
    });
    assert_eq!(outcome, Ok(order * 100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    round_trips(&h.store) - before
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

// pins L1: lease 300 ms, heartbeat 100 ms: a body shorter than the heartbeat costs 2 round
// trips (claim, complete), one spanning n heartbeats 2 + n, and a replay 1 (no renewal),
// whatever the body's length
#[tokio::test]
async fn an_async_body_costs_two_round_trips_plus_one_per_heartbeat_it_spans() {
    let h = Harness::new();
    let spec = spec("renewal_cost_async", 300, Some(100));
    let ctx = h.ctx("conv_renewal_cost");
    // body ms → renewals: 0 → 0, 50 → 0, 99 → 0, 100 → 1, 250 → 2, 1 050 → 10, 3 050 → 30
    let cases = [
        (0, 0),
        (50, 0),
        (99, 0),
        (100, 1),
        (250, 2),
        (1_050, 10),
        (3_050, 30),
    ];
    for (order, (body_ms, renewals)) in (1u64..).zip(cases) {
        let first = round_trips_of_an_async_call(&h, spec, &ctx, order, ms(body_ms), true).await;
        assert_eq!(first, 2 + renewals, "first call, body of {body_ms} ms");
        let replay = round_trips_of_an_async_call(&h, spec, &ctx, order, ms(0), false).await;
        assert_eq!(replay, 1, "replay of the call whose body took {body_ms} ms");
    }
}

// pins L1: the default heartbeat is a third of the lease: with the default 60 s lease, one
// renewal per 20 s of body, none for a body under 20 s
#[tokio::test]
async fn the_default_heartbeat_renews_once_per_third_of_the_lease() {
    let h = Harness::new();
    let spec = spec("renewal_cost_default", 60_000, None);
    assert_eq!(spec.effective_heartbeat(), Some(ms(20_000)));
    let ctx = h.ctx("conv_renewal_default");
    let cases = [(19_999, 0), (20_000, 1), (60_500, 3), (300_000, 15)];
    for (order, (body_ms, renewals)) in (1u64..).zip(cases) {
        let first = round_trips_of_an_async_call(&h, spec, &ctx, order, ms(body_ms), true).await;
        assert_eq!(first, 2 + renewals, "first call, body of {body_ms} ms");
        let replay = round_trips_of_an_async_call(&h, spec, &ctx, order, ms(0), false).await;
        assert_eq!(replay, 1, "replay of the call whose body took {body_ms} ms");
    }
}

// pins L1: the same counts for a sync body, whose heartbeat runs on a task of its own
#[test]
fn a_sync_body_costs_two_round_trips_plus_one_per_heartbeat_it_spans() {
    let h = Harness::new();
    let spec = spec("renewal_cost_sync", 300, Some(100));
    let ctx = h.ctx("conv_renewal_cost_sync");
    let cases = [(0, 0), (99, 0), (250, 2), (1_050, 10)];
    for (order, (body_ms, renewals)) in (1u64..).zip(cases) {
        let first = round_trips_of_a_sync_call(&h, spec, &ctx, order, ms(body_ms));
        assert_eq!(first, 2 + renewals, "first call, body of {body_ms} ms");
        let before = round_trips(&h.store);
        let prepared = prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
        let replay = prepared.run_blocking(|| Ok::<u64, ToolError>(0));
        assert_eq!(replay, Ok(order * 100), "the saved outcome");
        assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
        assert_eq!(
            round_trips(&h.store) - before,
            1,
            "replay after {body_ms} ms"
        );
    }
}
