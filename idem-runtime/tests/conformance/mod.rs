//! One conformance suite for every store: the same test bodies, generic over a store
//! factory, instantiated once per backend with [`conformance_suite!`]. Each body names the
//! contract rules it pins. The factory must return a fresh, empty store each call.
//!
//! Protocol-level tests drive the store through [`prepare`]/`run` with a manual clock;
//! store-level tests call the [`Store`] methods directly.

#![allow(dead_code)] // each backend's test binary instantiates the whole suite

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::envelope::Envelope;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::store::{
    Claim, ClaimRequest, Completion, OwnerToken, RecordState, TakeoverRequest,
};
use idem_runtime::{
    prepare, CallContext, CallStatus, Clock, Error, Timestamp, ToolError, ToolSpec,
};

use crate::support::{default_spec, key_of, refund, rerun, spec, FaultyStore, Harness, TestStore};

#[macro_use]
mod approvals;
#[macro_use]
mod decisions;
mod inspect;
mod never_twice;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod shared_backend;
pub use approvals::*;
pub use decisions::*;
pub use inspect::*;
pub use never_twice::*;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub use shared_backend::*;

/// The label every claim and takeover of these tests writes (P1); the backends' own store-level tests use it too.
pub static LABEL: std::sync::LazyLock<idem_runtime::RecordLabel> = std::sync::LazyLock::new(|| {
    idem_runtime::RecordLabel::new(
        "conformance",
        idem_runtime::ScopePath::new().with("conversation", "c-1"),
    )
});

/// Makes a fresh, empty store for one test.
pub type Factory = fn() -> TestStore;

/// The verdict of a cross-store hammer (S2): every key ran exactly once, and every caller
/// of a key got the one shared outcome. `executions[order]` counts the bodies that ran for
/// `order`; `seen` is every caller's `(order, outcome)`.
pub fn assert_one_execution_and_one_outcome_per_key(
    executions: &[AtomicUsize],
    seen: impl IntoIterator<Item = (u64, String)>,
) {
    let mut outcomes = std::collections::BTreeMap::<u64, std::collections::BTreeSet<String>>::new();
    for (order, out) in seen {
        outcomes.entry(order).or_default().insert(out);
    }
    for (order, count) in executions.iter().enumerate() {
        assert_eq!(count.load(Ordering::SeqCst), 1, "order {order} ran once");
    }
    assert_eq!(outcomes.len(), executions.len());
    for (order, outs) in &outcomes {
        assert_eq!(
            outs.len(),
            1,
            "order {order}: one shared outcome, got {outs:?}"
        );
    }
}

/// Defines `#[tokio::test]` wrappers (current-thread runtime) calling the suite functions
/// of the same names with the enclosing module's `factory`.
macro_rules! async_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            suite::$name(factory).await;
        }
    )*};
}

/// As `async_tests!`, on a multi-thread runtime with 4 workers.
macro_rules! multi_thread_tests {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            suite::$name(factory).await;
        }
    )*};
}

/// Defines plain `#[test]` wrappers (no runtime: the sync path).
#[allow(unused_macros)] // unused by backends instantiated `async_only`
macro_rules! sync_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            suite::$name(factory);
        }
    )*};
}

/// Instantiates every test of the suite for one backend:
/// `conformance_suite!(memory, TestStore::memory);` makes a module `memory` with one
/// test per suite function. Needs `#[macro_use] mod conformance;` and `mod support;`.
///
/// `conformance_suite!(postgres, factory, async_only);` leaves out the tests of the sync
/// path without a runtime, for network stores that need an async runtime (they must
/// answer such calls with a `StoreErrorKind::Unsupported` error instead; the backend's
/// own tests check that).
macro_rules! conformance_suite {
    ($backend:ident, $factory:expr) => {
        conformance_suite!(@module $backend, $factory, {
            sync_tests!(
                sixty_four_threads_through_the_sync_path_run_the_body_once,
                a_panicking_body_holds_the_key_as_unknown,
            );
        });
    };
    ($backend:ident, $factory:expr, async_only) => {
        conformance_suite!(@module $backend, $factory, {});
    };
    (@module $backend:ident, $factory:expr, { $($sync:tt)* }) => {
        mod $backend {
            use super::conformance as suite;
            #[allow(unused_imports)]
            use super::support::TestStore;

            fn factory() -> TestStore {
                ($factory)()
            }

            async_tests!(
                second_call_replays_the_first_outcome_without_running_the_body,
                record_moves_from_absent_to_in_progress_to_completed,
                falsy_values_replay_exactly,
                errors_are_outcomes_and_are_replayed,
                retryable_errors_release_the_claim_and_save_nothing,
                layer_errors_returned_by_a_body_are_not_saved,
                in_progress_duplicate_gets_in_progress_after_the_wait_bound,
                zero_wait_answers_in_progress_at_once,
                rerun_lapsed_lease_is_taken_over_and_the_stale_owner_is_fenced,
                zero_lease_is_already_lapsed,
                future_dropped_during_the_claim_leaves_no_claim,
                a_renewed_lease_is_never_taken_over,
                rerun_a_dead_owner_is_taken_over_one_lease_after_its_last_renewal,
                the_fence_strictly_increases_across_takeovers,
                rerun_an_unknown_outcome_holds_the_key_until_its_lease_lapses,
                a_cancelled_body_holds_the_key_as_unknown,
                a_cancelled_body_is_reconciled_on_retry,
                a_stale_owners_late_write_is_refused_by_the_fence,
                on_cancel_release_releases_at_once,
                reconcile_done_is_saved_and_replayed,
                reconcile_not_done_runs_the_body_and_unknown_asks_again,
                finishing_survives_a_dropped_caller,
                store_renew_and_mark_unknown_compare_the_owner,
                ttl_boundary_is_exact,
                mismatch_on_a_completed_record_leaves_it_untouched,
                mismatch_on_an_in_progress_record_and_on_takeover,
                unreachable_store_fails_closed,
                unsaved_outcome_keeps_the_key_in_progress_until_the_lease_lapses,
                unencodable_outcome_is_returned_and_not_released,
                outcome_envelope_is_stored_verbatim,
                store_claim_is_insert_if_absent_with_exact_expiry,
                store_take_over_and_complete_compare_the_owner,
                store_release_compares_the_owner,
                store_keeps_any_envelope_text_verbatim,
                store_handles_extreme_timestamps,
                first_execution_costs_two_round_trips_and_a_replay_one,
                round_trips_are_counted_for_every_operation_and_shared_by_the_engine,
                records_carry_tool_scope_and_fence_but_no_arguments,
                audited_tools_keep_their_key_arguments,
                a_call_is_found_by_tool_scope_and_arguments,
                list_filters_by_tool_scope_state_and_time,
                list_pages_follow_the_cursor,
                purge_deletes_one_key_and_needs_force_for_in_progress,
                purge_matching_deletes_what_the_filter_selects,
                stats_count_live_records_by_state_and_tool,
                tenants_never_share_a_record,
                odd_labels_round_trip_and_never_break_a_record,
            );
            multi_thread_tests!(
                sixty_four_concurrent_async_callers_run_the_body_once,
                in_progress_duplicate_waits_then_replays,
                slow_bodies_under_duplicates_run_once,
                random_aborts_leave_no_key_in_progress,
                a_year_ahead_worker_deletes_nothing_live,
            );
            $($sync)*
        }
    };
}

fn harness(make: Factory) -> Harness {
    Harness::on(make())
}

/// A harness whose store is `make()` behind a [`FaultyStore`] (claim counting, faults).
fn faulty_harness(make: Factory) -> (Harness, Arc<FaultyStore>) {
    let inner = make();
    let faulty = Arc::new(FaultyStore::wrapping(inner.store));
    let h = Harness::on(TestStore {
        store: faulty.clone(),
        keep: inner.keep,
    });
    (h, faulty)
}

// pins S1, S3, S12
pub async fn second_call_replays_the_first_outcome_without_running_the_body(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_1");
    let spec = default_spec();
    assert_eq!(refund(spec, &ctx, &h.log, 7).await, Ok(700));
    let first = ctx.last_outcome().expect("first outcome");
    assert_eq!(first.status, CallStatus::Executed);
    assert!(first.recorded);
    assert_eq!(refund(spec, &ctx, &h.log, 7).await, Ok(700));
    let second = ctx.last_outcome().expect("second outcome");
    assert_eq!(second.status, CallStatus::Replayed);
    assert_eq!(second.key, first.key);
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(second.expires_at, first.created_at.saturating_add(spec.ttl));
    assert_eq!(h.log.len(), 1);
    assert_eq!(h.log.count_for(&first.key), 1);
}

/// The store's round-trip count now; every backend of the suite counts them.
fn round_trips(h: &Harness) -> u64 {
    h.store
        .round_trips()
        .unwrap_or_else(|| panic!("the {} store counts round trips", h.store.backend()))
}

// pins S2, S3 and issue 3 item 4: once the store's scripts/statements are known (one
// warm-up call), a first execution of a new key costs exactly 2 round trips (claim,
// complete) and a replay exactly 1 (claim), measured as deltas of `Store::round_trips`
pub async fn first_execution_costs_two_round_trips_and_a_replay_one(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_round_trips");
    let spec = default_spec();
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100)); // warm-up
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100)); // warm-up replay
    for order in 2..6 {
        let before = round_trips(&h);
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        assert_eq!(
            ctx.last_outcome().expect("outcome").status,
            CallStatus::Executed
        );
        let first = round_trips(&h) - before;
        assert_eq!(
            first, 2,
            "first execution of order {order}: claim + complete"
        );
        let before = round_trips(&h);
        assert_eq!(refund(spec, &ctx, &h.log, order).await, Ok(order * 100));
        assert_eq!(
            ctx.last_outcome().expect("outcome").status,
            CallStatus::Replayed
        );
        let replay = round_trips(&h) - before;
        assert_eq!(replay, 1, "replay of order {order}: one claim");
    }
    assert_eq!(h.log.len(), 5, "each order ran once");
}

// pins S2, S4, S6 and issue 3 item 4: every store operation is counted (read, release,
// take over, a fenced completion), a retryable error costs claim + release, and the
// engine's store is the same counter
pub async fn round_trips_are_counted_for_every_operation_and_shared_by_the_engine(make: Factory) {
    let h = harness(make);
    let (key, owner, other) = (test_key(41), OwnerToken::random(), OwnerToken::random());
    let fp = fingerprint(1);
    // warm-up: every statement/script once
    let warm = test_key(40);
    let warm_owner = OwnerToken::random();
    assert_eq!(
        h.store
            .claim(claim_req(
                &warm,
                &fp,
                warm_owner,
                at(1_000),
                at(2_000),
                at(90_000)
            ))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let lapsed = TakeoverRequest {
        key: &warm,
        seen_owner: warm_owner,
        seen_lease_until: at(2_000),
        owner: other,
        now: at(2_000),
        lease_until: at(3_000),
        expires_at: at(90_000),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(h.store.take_over(lapsed).await, Ok(true));
    let envelope = Envelope::from_stored("{\"ok\":1}".to_owned());
    assert_eq!(
        h.store
            .complete(crate::support::complete_request(
                &warm,
                other,
                &envelope,
                at(2_500)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert!(h.store.read(&warm, at(2_500)).await.unwrap().is_some());
    assert_eq!(h.store.release(&warm, owner).await, Ok(false));

    let start = round_trips(&h);
    let engine_store = h.engine.store().clone();
    assert_eq!(engine_store.round_trips(), Some(start), "one counter");
    assert_eq!(
        h.store
            .claim(claim_req(
                &key,
                &fp,
                owner,
                at(1_000),
                at(2_000),
                at(90_000)
            ))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(round_trips(&h), start + 1, "claim");
    assert!(h.store.read(&key, at(1_500)).await.unwrap().is_some());
    assert_eq!(round_trips(&h), start + 2, "read");
    let takeover = TakeoverRequest {
        key: &key,
        seen_owner: owner,
        seen_lease_until: at(2_000),
        owner: other,
        now: at(2_000),
        lease_until: at(3_000),
        expires_at: at(90_000),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(h.store.take_over(takeover).await, Ok(true));
    assert_eq!(round_trips(&h), start + 3, "take over");
    assert_eq!(
        h.store
            .complete(crate::support::complete_request(
                &key,
                owner,
                &envelope,
                at(2_100)
            ))
            .await,
        Ok(Completion::Fenced)
    );
    assert_eq!(
        round_trips(&h),
        start + 4,
        "a fenced completion still asked"
    );
    assert_eq!(h.store.release(&key, other).await, Ok(true));
    assert_eq!(round_trips(&h), start + 5, "release");
    assert_eq!(engine_store.round_trips(), Some(start + 5), "one counter");

    // a retryable error: claim, then release (S4)
    let ctx = h.ctx("conv_round_trips_retryable");
    let before = round_trips(&h);
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &9u64).map(drop)
    })
    .unwrap();
    let out: Result<u64, ToolError> = p.run(async { Err(ToolError::retryable("busy")) }).await;
    assert!(out.is_err());
    assert_eq!(round_trips(&h) - before, 2, "claim + release");
}

// pins S1: absent → in progress (owner, lease) → completed
pub async fn record_moves_from_absent_to_in_progress_to_completed(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_1");
    let spec = default_spec();
    let key = key_of(spec, &ctx, 1);
    assert_eq!(h.store.read(&key, h.now()).await.unwrap(), None);
    let store = h.store.clone();
    let now = h.now();
    let prepared = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    let seen: Result<u64, ToolError> = prepared
        .run(async {
            let record = store
                .read(&key, now)
                .await
                .unwrap()
                .expect("in progress during the body");
            match record.state {
                RecordState::InProgress { lease_until, .. } => Ok(lease_until.as_millis()),
                other => panic!("expected in progress, got {other:?}"),
            }
        })
        .await;
    assert_eq!(seen, Ok(now.saturating_add(spec.lease).as_millis()));
    let record = h
        .store
        .read(&key, h.now())
        .await
        .unwrap()
        .expect("completed");
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

// pins S2: 64 concurrent async callers on one key in one process → one execution, one shared outcome
pub async fn sixty_four_concurrent_async_callers_run_the_body_once(make: Factory) {
    let h = Arc::new(harness(make));
    let executions = Arc::new(AtomicUsize::new(0));
    let spec = default_spec();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (h, executions) = (h.clone(), executions.clone());
        tasks.push(tokio::spawn(async move {
            let ctx = h.ctx("conv_hammer");
            let prepared = prepare(spec, Some(&ctx), |a| a.key("order", &42u64).map(drop)).unwrap();
            prepared
                .run(async {
                    executions.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok::<_, ToolError>(format!("refund-{}", executions.load(Ordering::SeqCst)))
                })
                .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert!(
        outcomes.iter().all(|o| o == &Ok("refund-1".to_owned())),
        "{outcomes:?}"
    );
}

// pins S2, S5: 64 OS threads through the sync path → one execution, every thread gets the outcome
pub fn sixty_four_threads_through_the_sync_path_run_the_body_once(make: Factory) {
    let h = Arc::new(harness(make));
    let executions = Arc::new(AtomicUsize::new(0));
    let spec = default_spec();
    let barrier = Arc::new(std::sync::Barrier::new(64));
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let (h, executions, barrier) = (h.clone(), executions.clone(), barrier.clone());
            std::thread::spawn(move || {
                let ctx = h.ctx("conv_threads");
                barrier.wait();
                let prepared =
                    prepare(spec, Some(&ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
                prepared.run_blocking(|| {
                    executions.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    Ok::<_, ToolError>(vec![0u8; 0])
                })
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Ok(Vec::new()));
    }
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}

// pins S3: falsy values replay exactly
pub async fn falsy_values_replay_exactly(make: Factory) {
    async fn twice<T>(
        h: &Harness,
        name: &'static str,
        value: T,
    ) -> (Result<T, ToolError>, Result<T, ToolError>)
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Clone + Send,
    {
        let ctx = h.ctx("conv_falsy");
        let spec = spec(name, 86_400_000, 60_000, 5_000);
        let mut results = Vec::new();
        for _ in 0..2 {
            let v = value.clone();
            let p = prepare(spec, Some(&ctx), |a| a.key("x", &0u8).map(drop)).unwrap();
            results.push(p.run(async move { Ok::<_, ToolError>(v) }).await);
            if results.len() == 2 {
                assert_eq!(
                    ctx.last_outcome().unwrap().status,
                    CallStatus::Replayed,
                    "{name}"
                );
            }
        }
        let second = results.pop().unwrap();
        (results.pop().unwrap(), second)
    }
    let h = harness(make);
    let (a, b) = twice(&h, "zero", 0i64).await;
    assert_eq!((a, b), (Ok(0), Ok(0)));
    let (a, b) = twice(&h, "false", false).await;
    assert_eq!((a, b), (Ok(false), Ok(false)));
    let (a, b) = twice(&h, "empty_string", String::new()).await;
    assert_eq!((a, b), (Ok(String::new()), Ok(String::new())));
    let (a, b) = twice(&h, "empty_vec", Vec::<u8>::new()).await;
    assert_eq!((a, b), (Ok(vec![]), Ok(vec![])));
    let (a, b) = twice(
        &h,
        "empty_map",
        std::collections::BTreeMap::<String, u8>::new(),
    )
    .await;
    assert_eq!(a, b);
    assert_eq!(a, Ok(std::collections::BTreeMap::new()));
    let (a, b) = twice(&h, "none", None::<u8>).await;
    assert_eq!((a, b), (Ok(None), Ok(None)));
    let (a, b) = twice(&h, "unit", ()).await;
    assert_eq!((a, b), (Ok(()), Ok(())));
    let (a, b) = twice(&h, "big", u64::MAX).await;
    assert_eq!((a, b), (Ok(u64::MAX), Ok(u64::MAX)));
    let (a, b) = twice(&h, "float", 0.1f64 + 0.2).await;
    assert_eq!((a, b), (Ok(0.1 + 0.2), Ok(0.1 + 0.2)));
}

// pins S4: a saved error is replayed; the body does not run again
pub async fn errors_are_outcomes_and_are_replayed(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_err");
    let spec = default_spec();
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &5u64).map(drop)).unwrap();
        let out: Result<u64, ToolError> = p
            .run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                Err(ToolError::failed("card declined"))
            })
            .await;
        assert_eq!(out, Err(ToolError::failed("card declined")));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
}

// pins S4: a retryable error releases the claim; nothing is saved; the next attempt runs with the same key
pub async fn retryable_errors_release_the_claim_and_save_nothing(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_retry");
    let spec = default_spec();
    let runs = AtomicUsize::new(0);
    let mut keys = Vec::new();
    for attempt in 0..3u32 {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &5u64).map(drop)).unwrap();
        keys.push(p.key().clone());
        let out: Result<u64, ToolError> = p
            .run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                if attempt < 2 {
                    Err(ToolError::retryable("bank timed out"))
                } else {
                    Ok(500)
                }
            })
            .await;
        if attempt < 2 {
            assert_eq!(out, Err(ToolError::retryable("bank timed out")));
            assert_eq!(
                h.store.read(&keys[0], h.now()).await.unwrap(),
                None,
                "nothing saved"
            );
        } else {
            assert_eq!(out, Ok(500));
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(keys.windows(2).all(|w| w[0] == w[1]));
}

// pins S4: errors of the layer itself that come out of a body are never saved
pub async fn layer_errors_returned_by_a_body_are_not_saved(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("conv_layer");
    let spec = default_spec();
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    let key = p.key().clone();
    let out: Result<u64, ToolError> = p
        .run(async {
            Err(ToolError::Idem(Error::MissingScope {
                tool: "inner".into(),
                scope: "tenant".into(),
            }))
        })
        .await;
    assert!(matches!(
        out,
        Err(ToolError::Idem(Error::MissingScope { .. }))
    ));
    assert_eq!(h.store.read(&key, h.now()).await.unwrap(), None);
}

// pins S5: a duplicate that finds the key in progress waits (no busy loop) and then gets the
// owner's outcome as a replay. A store with change signals wakes it exactly once; a store
// without polls with backoff (10 ms doubling to 250 ms), so a few looks at most.
pub async fn in_progress_duplicate_waits_then_replays(make: Factory) {
    let (h, counting) = faulty_harness(make);
    let signals = h
        .store
        .watch(&key_of(default_spec(), &h.ctx("x"), 0))
        .is_some();
    let ctx = h.ctx("conv_wait");
    let spec = default_spec();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let owner = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &3u64).map(drop)).unwrap();
            p.run(async {
                entered_tx.send(()).unwrap();
                finish_rx.await.unwrap();
                Ok::<_, ToolError>(300u64)
            })
            .await
        })
    };
    entered_rx.await.unwrap();
    let looks_before = counting.claims.load(Ordering::SeqCst);
    let waiter_ctx = ctx.clone();
    let log = h.log.clone();
    let waiter = tokio::spawn(async move { refund(spec, &waiter_ctx, &log, 3).await });
    // The waiter looks, subscribes, looks again, then waits: three claims in all.
    while counting.claims.load(Ordering::SeqCst) < looks_before + 2 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let looks_waiting = counting.claims.load(Ordering::SeqCst) - looks_before;
    if signals {
        assert_eq!(
            looks_waiting, 2,
            "the waiter sleeps on the change signal, it does not poll"
        );
    } else {
        // 10 + 20 + 40 + 80 ms of backoff fill 100 ms: at most six looks, never a busy loop.
        assert!(looks_waiting <= 8, "polled {looks_waiting} times in 100 ms");
    }
    finish_tx.send(()).unwrap();
    assert_eq!(owner.await.unwrap(), Ok(300));
    assert_eq!(waiter.await.unwrap(), Ok(300));
    let looks = counting.claims.load(Ordering::SeqCst) - looks_before;
    if signals {
        assert_eq!(looks, 3, "woken once, looked once");
    }
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert!(h.log.is_empty(), "the duplicate's body never ran");
}

// pins S5: past the wait bound the duplicate gets a typed, retryable InProgress
pub async fn in_progress_duplicate_gets_in_progress_after_the_wait_bound(make: Factory) {
    let h = harness(make);
    let spec = spec("send_refund", 86_400_000, 60_000, 2_000);
    let ctx = h.ctx("conv_bound");
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &3u64).map(drop)).unwrap();
    let clock = h.clock.clone();
    let log = h.log.clone();
    let out: Result<u64, ToolError> = p
        .run(async {
            // While we own the claim, a duplicate arrives; time moves past its wait bound.
            let duplicate = refund(spec, &ctx, &log, 3);
            let mover = async {
                tokio::task::yield_now().await;
                clock.advance(Duration::from_millis(1_999));
                tokio::task::yield_now().await;
                clock.advance(Duration::from_millis(1));
            };
            let (dup, ()) = tokio::join!(duplicate, mover);
            match dup {
                Err(ToolError::Idem(e @ Error::InProgress { .. })) => {
                    assert!(e.is_transient());
                    assert!(
                        matches!(
                            e,
                            Error::InProgress {
                                waited_ms: 2_000,
                                ..
                            }
                        ),
                        "{e:?}"
                    );
                }
                other => panic!("expected InProgress, got {other:?}"),
            }
            Ok(1)
        })
        .await;
    assert_eq!(out, Ok(1));
    assert!(log.is_empty());
}

// pins S5: a zero wait answers InProgress at once
pub async fn zero_wait_answers_in_progress_at_once(make: Factory) {
    let h = harness(make);
    let spec = spec("send_refund", 86_400_000, 60_000, 0);
    let ctx = h.ctx("conv_zero_wait");
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &3u64).map(drop)).unwrap();
    let out: Result<(), ToolError> = p
        .run(async {
            let dup = refund(spec, &ctx, &h.log, 3).await;
            assert!(
                matches!(
                    dup,
                    Err(ToolError::Idem(Error::InProgress { waited_ms: 0, .. }))
                ),
                "{dup:?}"
            );
            Ok(())
        })
        .await;
    assert_eq!(out, Ok(()));
}

// pins S6, L2, U2a: with `on_unknown = "rerun"`, after the lease lapses the first caller takes
// over and runs the body with the same key; the stale owner finishing late cannot overwrite the
// new owner's record. (The owner is cut off from the store: its renewals fail, so its lease
// lapses while its body still runs.)
pub async fn rerun_lapsed_lease_is_taken_over_and_the_stale_owner_is_fenced(make: Factory) {
    let (h, faulty) = faulty_harness(make);
    faulty.fail_renew.store(true, Ordering::SeqCst);
    let spec = rerun(spec("send_refund", 86_400_000, 1_000, 0));
    let ctx = h.ctx("conv_lease");
    let stale = prepare(spec, Some(&ctx), |a| a.key("order", &4u64).map(drop)).unwrap();
    let key = stale.key().clone();
    let clock = h.clock.clone();
    let store = h.store.clone();
    let log = h.log.clone();
    let stale_out: Result<String, ToolError> = stale
        .run(async {
            // Before the lease lapses a duplicate is refused …
            clock.advance(Duration::from_millis(999));
            assert!(matches!(
                refund(spec, &ctx, &log, 4).await,
                Err(ToolError::Idem(Error::InProgress { .. }))
            ));
            // … at the instant it lapses, the next caller takes over and runs the body.
            clock.advance(Duration::from_millis(1));
            assert_eq!(refund(spec, &ctx, &log, 4).await, Ok(400));
            let record = ctx.last_outcome().unwrap();
            assert_eq!(
                (record.status, record.takeover, record.key.clone()),
                (CallStatus::Executed, true, key.clone())
            );
            Ok("stale".to_owned())
        })
        .await;
    assert_eq!(
        stale_out.as_deref(),
        Ok("stale"),
        "the stale owner still learns its own outcome"
    );
    assert!(
        !ctx.last_outcome().unwrap().recorded,
        "the stale owner's outcome was fenced out"
    );
    assert_eq!(h.log.len(), 1);
    assert_eq!(
        refund(spec, &ctx, &h.log, 4).await,
        Ok(400),
        "the new owner's record stands"
    );
    let record = store.read(&key, h.now()).await.unwrap().unwrap();
    match record.state {
        RecordState::Completed { outcome, .. } => {
            assert_eq!(outcome.as_str(), r#"{"version":1,"ok":400}"#)
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

// pins S6, U2a: a lease of zero means "already lapsed", not "no lease" (with `on_unknown =
// "rerun"`, a duplicate takes the claim over at once)
pub async fn zero_lease_is_already_lapsed(make: Factory) {
    let h = harness(make);
    let spec = rerun(spec("send_refund", 86_400_000, 0, 5_000));
    let ctx = h.ctx("conv_zero_lease");
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &8u64).map(drop)).unwrap();
    let out: Result<u64, ToolError> = p
        .run(async {
            let dup = refund(spec, &ctx, &h.log, 8).await;
            assert_eq!(dup, Ok(800), "a zero lease is taken over at once");
            Ok(1)
        })
        .await;
    assert_eq!(out, Ok(1));
    assert_eq!(h.log.len(), 1);
}

// pins S8: live while now < created + ttl; at ttl − 1 ms it replays, at ttl it runs again
pub async fn ttl_boundary_is_exact(make: Factory) {
    let h = harness(make);
    let spec = spec("send_refund", 10_000, 1_000, 0);
    let ctx = h.ctx("conv_ttl");
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    h.clock.advance(Duration::from_millis(9_999));
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(h.log.len(), 1);
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    assert_eq!(h.log.len(), 2);
}

fn fingerprinted(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    note: &str,
) -> idem_runtime::PreparedCall {
    prepare(spec, Some(ctx), |a| {
        a.key("order", &1u64)?;
        a.fingerprint("note", note)?;
        Ok(())
    })
    .unwrap()
}

// pins S9: same key, different fingerprint → Mismatch on the completed path; record untouched
pub async fn mismatch_on_a_completed_record_leaves_it_untouched(make: Factory) {
    let h = harness(make);
    let spec = default_spec();
    let ctx = h.ctx("conv_mm");
    let first: Result<u8, ToolError> = fingerprinted(spec, &ctx, "a").run(async { Ok(1) }).await;
    assert_eq!(first, Ok(1));
    let p = fingerprinted(spec, &ctx, "b");
    let key = p.key().clone();
    let before = h.store.read(&key, h.now()).await.unwrap();
    assert!(before.is_some());
    let ran = AtomicUsize::new(0);
    let second: Result<u8, ToolError> = p
        .run(async {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(2)
        })
        .await;
    assert!(
        matches!(second, Err(ToolError::Idem(Error::Mismatch { .. }))),
        "{second:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(h.store.read(&key, h.now()).await.unwrap(), before);
    assert_eq!(
        ctx.last_outcome(),
        None,
        "S12: a refused call leaves no stale outcome"
    );
}

// pins S9: Mismatch also on the in-progress path (claim conflict), even after the lease lapsed;
// the in-progress record is untouched (the owner's renewals fail, so nothing else touches it)
pub async fn mismatch_on_an_in_progress_record_and_on_takeover(make: Factory) {
    let (h, faulty) = faulty_harness(make);
    faulty.fail_renew.store(true, Ordering::SeqCst);
    let spec = spec("send_refund", 86_400_000, 1_000, 0);
    let ctx = h.ctx("conv_mm2");
    let clock = h.clock.clone();
    let store = h.store.clone();
    let first = fingerprinted(spec, &ctx, "a");
    let key = first.key().clone();
    let out: Result<u8, ToolError> = first
        .run(async {
            let before = store.read(&key, clock.now()).await.unwrap();
            let dup: Result<u8, ToolError> =
                fingerprinted(spec, &ctx, "b").run(async { Ok(9) }).await;
            assert!(
                matches!(dup, Err(ToolError::Idem(Error::Mismatch { .. }))),
                "{dup:?}"
            );
            assert_eq!(store.read(&key, clock.now()).await.unwrap(), before);
            clock.advance(Duration::from_millis(1_000));
            let dup: Result<u8, ToolError> =
                fingerprinted(spec, &ctx, "b").run(async { Ok(9) }).await;
            assert!(
                matches!(dup, Err(ToolError::Idem(Error::Mismatch { .. }))),
                "no takeover with another fingerprint: {dup:?}"
            );
            assert_eq!(store.read(&key, clock.now()).await.unwrap(), before);
            Ok(1)
        })
        .await;
    assert_eq!(out, Ok(1));
}

// pins S10: store unreachable → the body does not run; the caller gets a typed, transient store error
pub async fn unreachable_store_fails_closed(make: Factory) {
    let (h, faulty) = faulty_harness(make);
    let ctx = h.ctx("conv_down");
    faulty.fail_claim.store(true, Ordering::SeqCst);
    let out = refund(default_spec(), &ctx, &h.log, 1).await;
    match out {
        Err(ToolError::Idem(e @ Error::Store { .. })) => assert!(e.is_transient()),
        other => panic!("expected a store error, got {other:?}"),
    }
    assert!(h.log.is_empty());
    faulty.fail_claim.store(false, Ordering::SeqCst);
    assert_eq!(
        refund(default_spec(), &ctx, &h.log, 1).await,
        Ok(100),
        "service resumes"
    );
}

// pins S10, U2a: outcome not saved after the body ran → the caller still learns the outcome; the
// key stays in progress until the lease lapses, so no second run happens before then (with
// `on_unknown = "rerun"`, the first call after it takes over)
pub async fn unsaved_outcome_keeps_the_key_in_progress_until_the_lease_lapses(make: Factory) {
    let (h, faulty) = faulty_harness(make);
    let spec = rerun(spec("send_refund", 86_400_000, 30_000, 0));
    let ctx = h.ctx("conv_unsaved");
    faulty.fail_complete.store(true, Ordering::SeqCst);
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    let record = ctx.last_outcome().unwrap();
    assert_eq!(
        (record.status, record.recorded),
        (CallStatus::Executed, false)
    );
    faulty.fail_complete.store(false, Ordering::SeqCst);
    assert!(matches!(
        refund(spec, &ctx, &h.log, 1).await,
        Err(ToolError::Idem(Error::InProgress { .. }))
    ));
    assert_eq!(h.log.len(), 1, "no second run before the lease lapses");
    h.clock.advance(Duration::from_millis(30_000));
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(
        h.log.len(),
        2,
        "after the lease lapses the call is taken over"
    );
}

// pins S10: an outcome that cannot be saved (non-finite float) is still returned; the key stays in progress
pub async fn unencodable_outcome_is_returned_and_not_released(make: Factory) {
    let h = harness(make);
    let spec = spec("measure", 86_400_000, 30_000, 0);
    let ctx = h.ctx("conv_nan");
    let p = prepare(spec, Some(&ctx), |a| a.key("x", &1u8).map(drop)).unwrap();
    let key = p.key().clone();
    let out: Result<f64, ToolError> = p.run(async { Ok(f64::NAN) }).await;
    assert!(out.unwrap().is_nan());
    assert!(!ctx.last_outcome().unwrap().recorded);
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(matches!(record.state, RecordState::InProgress { .. }));
}

// pins S11: the store keeps the envelope the protocol wrote, byte for byte
pub async fn outcome_envelope_is_stored_verbatim(make: Factory) {
    #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
    struct Refund {
        refund_id: String,
        amount_cents: u64,
        note: Option<String>,
    }
    let h = harness(make);
    let spec = spec("send_refund_v", 86_400_000, 60_000, 0);
    let ctx = h.ctx("conv_verbatim");
    let value = Refund {
        refund_id: "re_\u{e9}\u{1f4b8}\"\\\n".to_owned(),
        amount_cents: 500,
        note: None,
    };
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    let key = p.key().clone();
    let v = value.clone();
    let out: Result<Refund, ToolError> = p.run(async move { Ok(v) }).await;
    assert_eq!(out.as_ref(), Ok(&value));
    let expected = Envelope::encode_ok(&value).unwrap();
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    match record.state {
        RecordState::Completed { outcome, .. } => assert_eq!(outcome.as_str(), expected.as_str()),
        other => panic!("expected completed, got {other:?}"),
    }
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    let replayed: Result<Refund, ToolError> = p.run(async { panic!("must replay") }).await;
    assert_eq!(replayed, Ok(value));
}

// --- store-level tests: the Store methods called directly ---

const T0: u64 = 1_735_689_600_000;

fn test_key(n: u8) -> IdempotencyKey {
    let ctx = CallContext::new()
        .with_engine(idem_runtime::Engine::in_memory())
        .with_conversation("conv_store_level");
    key_of(default_spec(), &ctx, u64::from(n))
}

fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::from_hex(&format!("{n:02x}").repeat(32)).unwrap()
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn claim_req<'a>(
    key: &'a IdempotencyKey,
    fp: &'a Fingerprint,
    owner: OwnerToken,
    now: Timestamp,
    lease_until: Timestamp,
    expires_at: Timestamp,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint: fp,
        owner,
        now,
        lease_until,
        expires_at,
        label: &LABEL,
    }
}

// pins S1, S2, S8: claim is insert-if-absent; a live record (any state, any fingerprint) is returned
// untouched; it is live while now < expires_at and behaves as absent from that instant
pub async fn store_claim_is_insert_if_absent_with_exact_expiry(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let (key, fp, other_fp) = (test_key(1), fingerprint(1), fingerprint(2));
    let (a, b, c) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let req = claim_req(&key, &fp, a, at(0), at(100), at(1_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let in_progress = store.read(&key, at(0)).await.unwrap().unwrap();
    assert_eq!(in_progress.fingerprint, fp);
    assert_eq!(
        (in_progress.created_at, in_progress.expires_at),
        (at(0), at(1_000))
    );
    assert_eq!(
        in_progress.state,
        RecordState::InProgress {
            owner: a,
            lease_until: at(100)
        }
    );
    // A second claim, even with another fingerprint and after the lease, changes nothing.
    let req = claim_req(&key, &other_fp, b, at(500), at(600), at(1_500));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Existing(in_progress.clone())
    );
    assert_eq!(store.read(&key, at(500)).await.unwrap(), Some(in_progress));
    let envelope = Envelope::encode_ok(&0u8).unwrap();
    assert_eq!(
        store
            .complete(crate::support::complete_request(&key, a, &envelope, at(10)))
            .await
            .unwrap(),
        Completion::Saved
    );
    // Live at expires_at − 1 ms, absent at expires_at.
    let completed = store.read(&key, at(999)).await.unwrap().unwrap();
    assert_eq!(
        completed.state,
        RecordState::Completed {
            outcome: envelope,
            completed_at: at(10),
            source: idem_runtime::OutcomeSource::Executed,
        }
    );
    let req = claim_req(&key, &fp, b, at(999), at(1_099), at(1_999));
    assert_eq!(store.claim(req).await.unwrap(), Claim::Existing(completed));
    assert_eq!(store.read(&key, at(1_000)).await.unwrap(), None);
    // An expired record is replaced by a new claim, with the new fingerprint and the
    // next fence (F1).
    let req = claim_req(&key, &other_fp, c, at(1_000), at(1_100), at(2_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 2,
            reopened: false
        }
    );
    let fresh = store.read(&key, at(1_000)).await.unwrap().unwrap();
    assert_eq!(fresh.fingerprint, other_fp);
    assert_eq!((fresh.created_at, fresh.expires_at), (at(1_000), at(2_000)));
    assert_eq!(
        fresh.state,
        RecordState::InProgress {
            owner: c,
            lease_until: at(1_100)
        }
    );
    // The old owner is fenced from the new record.
    assert!(
        !store.release(&key, a).await.unwrap(),
        "the expired owner cannot release the new claim"
    );
    // Another key is independent.
    assert_eq!(store.read(&test_key(2), at(1_000)).await.unwrap(), None);
}

// pins S6, S8: take_over is a compare-and-set on the exact (owner, lease) seen; complete checks the
// owner; a record in progress past its expires_at is still live, and only a completed one expires
pub async fn store_take_over_and_complete_compare_the_owner(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let (key, fp) = (test_key(3), fingerprint(3));
    let (stale, new, late) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let req = claim_req(&key, &fp, stale, at(0), at(100), at(10_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let takeover = |seen_owner, seen_lease_until, owner, now: u64| TakeoverRequest {
        key: &key,
        seen_owner,
        seen_lease_until,
        owner,
        now: at(now),
        lease_until: at(now + 100),
        expires_at: at(now + 10_000),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    // A wrong seen owner or lease changes nothing.
    assert!(!store
        .take_over(takeover(new, at(100), new, 100))
        .await
        .unwrap());
    assert!(!store
        .take_over(takeover(stale, at(99), new, 100))
        .await
        .unwrap());
    assert!(store
        .take_over(takeover(stale, at(100), new, 100))
        .await
        .unwrap());
    let record = store.read(&key, at(100)).await.unwrap().unwrap();
    assert_eq!(
        (record.created_at, record.expires_at),
        (at(100), at(10_100))
    );
    assert_eq!(
        record.state,
        RecordState::InProgress {
            owner: new,
            lease_until: at(200)
        }
    );
    assert_eq!(record.fingerprint, fp, "takeover keeps the fingerprint");
    // A second taker that saw the same old state loses.
    assert!(!store
        .take_over(takeover(stale, at(100), late, 100))
        .await
        .unwrap());
    // The stale owner can neither complete nor release.
    let stale_outcome = Envelope::encode_ok(&"stale").unwrap();
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                stale,
                &stale_outcome,
                at(150)
            ))
            .await
            .unwrap(),
        Completion::Fenced
    );
    assert!(!store.release(&key, stale).await.unwrap());
    assert_eq!(store.read(&key, at(150)).await.unwrap(), Some(record));
    let outcome = Envelope::encode_ok(&"new").unwrap();
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                new,
                &outcome,
                at(150)
            ))
            .await
            .unwrap(),
        Completion::Saved
    );
    // A completed record can be neither taken over, completed again, nor released.
    assert!(!store
        .take_over(takeover(new, at(200), late, 300))
        .await
        .unwrap());
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                new,
                &stale_outcome,
                at(160)
            ))
            .await
            .unwrap(),
        Completion::Fenced
    );
    assert!(!store.release(&key, new).await.unwrap());
    let record = store.read(&key, at(160)).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::Completed {
            outcome,
            completed_at: at(150),
            source: idem_runtime::OutcomeSource::Executed,
        }
    );
    // A record in progress does not expire (S8): past its expires_at it is still live
    // (overdue), a claim finds it, and its owner is fenced only by a takeover, which is
    // the same compare-and-set as on any live record. Once completed, it expires at its
    // own expires_at.
    let key2 = test_key(4);
    let owner = OwnerToken::random();
    let req = claim_req(&key2, &fp, owner, at(0), at(5_000), at(1_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let overdue = store
        .read(&key2, at(1_000))
        .await
        .unwrap()
        .expect("a record in progress is live past its expires_at");
    assert_eq!(
        overdue.state,
        RecordState::InProgress {
            owner,
            lease_until: at(5_000)
        }
    );
    assert!(overdue.is_overdue(at(1_000)));
    let req = claim_req(&key2, &fp, late, at(1_000), at(1_100), at(2_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Existing(overdue.clone()),
        "an overdue record is not absent: no new claim over it"
    );
    let takeover2 = |seen_lease_until| TakeoverRequest {
        key: &key2,
        seen_owner: owner,
        seen_lease_until,
        owner: late,
        now: at(1_000),
        lease_until: at(1_100),
        expires_at: at(2_000),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert!(!store.take_over(takeover2(at(4_999))).await.unwrap());
    assert_eq!(store.read(&key2, at(1_000)).await.unwrap(), Some(overdue));
    assert!(
        store.take_over(takeover2(at(5_000))).await.unwrap(),
        "an overdue record is taken over with the state seen, as a live one"
    );
    // The owner whose record was overdue is fenced by the takeover.
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key2,
                owner,
                &stale_outcome,
                at(1_000)
            ))
            .await
            .unwrap(),
        Completion::Fenced
    );
    assert!(!store.release(&key2, owner).await.unwrap());
    let taken = store.read(&key2, at(1_000)).await.unwrap().unwrap();
    assert_eq!(
        (taken.fence, taken.expires_at, taken.state),
        (
            2,
            at(2_000),
            RecordState::InProgress {
                owner: late,
                lease_until: at(1_100)
            }
        )
    );
    let outcome2 = Envelope::encode_ok(&"late").unwrap();
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key2,
                late,
                &outcome2,
                at(1_050)
            ))
            .await
            .unwrap(),
        Completion::Saved
    );
    assert!(store.read(&key2, at(1_999)).await.unwrap().is_some());
    assert_eq!(
        store.read(&key2, at(2_000)).await.unwrap(),
        None,
        "a completed record expires at its expires_at"
    );
}

// pins S4, S7: release is a compare-and-delete on the owner; the released key can be claimed again
pub async fn store_release_compares_the_owner(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let (key, fp) = (test_key(5), fingerprint(5));
    let (owner, other) = (OwnerToken::random(), OwnerToken::random());
    let req = claim_req(&key, &fp, owner, at(0), at(100), at(1_000));
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    assert!(!store.release(&key, other).await.unwrap());
    assert!(store.read(&key, at(0)).await.unwrap().is_some());
    assert!(store.release(&key, owner).await.unwrap());
    assert_eq!(store.read(&key, at(0)).await.unwrap(), None);
    assert!(!store.release(&key, owner).await.unwrap(), "already gone");
}

// pins S11: whatever text the envelope holds is stored and read back exactly
pub async fn store_keeps_any_envelope_text_verbatim(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let texts = [
        r#"{"version":1,"ok":null}"#,
        r#"{"err":"no","version":1}"#,
        "{ \"version\" : 1 ,\n \"ok\" : [0, false, \"\", {}, []] }",
        r#"{"version":1,"ok":"\u0000 nul, é, 💸, ' OR 1=1 --"}"#,
        r#"{"version":1,"ok":18446744073709551615}"#,
    ];
    for (n, text) in texts.iter().enumerate() {
        let key = test_key(10 + n as u8);
        let fp = fingerprint(1);
        let owner = OwnerToken::random();
        let req = claim_req(&key, &fp, owner, at(0), at(100), at(1_000));
        assert_eq!(
            store.claim(req).await.unwrap(),
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
        let envelope = Envelope::from_stored(*text);
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &key,
                    owner,
                    &envelope,
                    at(1)
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        match store.read(&key, at(2)).await.unwrap().unwrap().state {
            RecordState::Completed { outcome, .. } => assert_eq!(outcome.as_str(), *text),
            other => panic!("expected completed, got {other:?}"),
        }
    }
}

// pins S8, S6: extreme instants (the epoch, a saturated now + ttl) keep their order; a record in
// progress does not expire, a completed one does (even at the epoch). "now" stays
// below 2^63 ms (year 292 million): SQL stores keep instants as signed 64-bit integers,
// saturating there, so two instants at or past it compare equal.
pub async fn store_handles_extreme_timestamps(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let (key, fp) = (test_key(20), fingerprint(20));
    let owner = OwnerToken::random();
    let max = Timestamp::from_millis(u64::MAX);
    let req = claim_req(&key, &fp, owner, Timestamp::EPOCH, max, max);
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let late = Timestamp::from_millis(i64::MAX as u64 / 2);
    let record = store
        .read(&key, late)
        .await
        .unwrap()
        .expect("never expires");
    let RecordState::InProgress { lease_until, .. } = record.state else {
        panic!("expected in progress, got {record:?}");
    };
    assert!(lease_until > late);
    // A takeover that saw the lease as read back succeeds.
    let new = OwnerToken::random();
    assert!(store
        .take_over(TakeoverRequest {
            key: &key,
            seen_owner: owner,
            seen_lease_until: lease_until,
            owner: new,
            now: late,
            lease_until: late,
            expires_at: max,
            fence: 2,
            label: &LABEL,
            entry: crate::support::takeover_entry(),
        })
        .await
        .unwrap());
    let envelope = Envelope::encode_ok(&1u8).unwrap();
    assert_eq!(
        store
            .complete(crate::support::complete_request(&key, new, &envelope, late))
            .await
            .unwrap(),
        Completion::Saved
    );
    assert!(store.read(&key, late).await.unwrap().is_some());
    // A record created at the epoch with a zero ttl (and a zero lease) is overdue at once
    // but, in progress, still live (S8); completed, it is expired at once.
    let key0 = test_key(21);
    let req = claim_req(
        &key0,
        &fp,
        owner,
        Timestamp::EPOCH,
        Timestamp::EPOCH,
        Timestamp::EPOCH,
    );
    assert_eq!(
        store.claim(req).await.unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let overdue = store
        .read(&key0, Timestamp::EPOCH)
        .await
        .unwrap()
        .expect("a record in progress does not expire");
    assert_eq!(
        (overdue.created_at, overdue.expires_at),
        (Timestamp::EPOCH, Timestamp::EPOCH)
    );
    assert!(overdue.is_overdue(Timestamp::EPOCH));
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key0,
                owner,
                &envelope,
                Timestamp::EPOCH
            ))
            .await
            .unwrap(),
        Completion::Saved
    );
    assert_eq!(store.read(&key0, Timestamp::EPOCH).await.unwrap(), None);
}
