//! The call protocol on the in-memory store: contract S1–S10, S12.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{RecordState, Store};
use idem_runtime::{prepare, CallStatus, Error, ToolError};
use support::{default_spec, key_of, refund, spec, Harness};

// pins S1, S3, S12
#[tokio::test]
async fn second_call_replays_the_first_outcome_without_running_the_body() {
    let h = Harness::new();
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

// pins S1: absent → in progress (owner, lease) → completed
#[tokio::test]
async fn record_moves_from_absent_to_in_progress_to_completed() {
    let h = Harness::new();
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
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_async_callers_run_the_body_once() {
    let h = Arc::new(Harness::new());
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
#[test]
fn sixty_four_threads_through_the_sync_path_run_the_body_once() {
    let h = Arc::new(Harness::new());
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
#[tokio::test]
async fn falsy_values_replay_exactly() {
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
    let h = Harness::new();
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
#[tokio::test]
async fn errors_are_outcomes_and_are_replayed() {
    let h = Harness::new();
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
#[tokio::test]
async fn retryable_errors_release_the_claim_and_save_nothing() {
    let h = Harness::new();
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
#[tokio::test]
async fn layer_errors_returned_by_a_body_are_not_saved() {
    let h = Harness::new();
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
// owner's outcome as a replay
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_duplicate_waits_then_replays() {
    let counting = Arc::new(support::FaultyStore::default());
    let (h, engine) = Harness::with_store(counting.clone());
    let ctx = idem_runtime::CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_wait");
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
    let waiter_ctx = ctx.clone();
    let log = h.log.clone();
    let waiter = tokio::spawn(async move { refund(spec, &waiter_ctx, &log, 3).await });
    // The waiter looks, subscribes, looks again, then waits: three claims in all.
    while counting.claims.load(Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        counting.claims.load(Ordering::SeqCst),
        3,
        "the waiter sleeps on the change signal, it does not poll"
    );
    finish_tx.send(()).unwrap();
    assert_eq!(owner.await.unwrap(), Ok(300));
    assert_eq!(waiter.await.unwrap(), Ok(300));
    assert_eq!(
        counting.claims.load(Ordering::SeqCst),
        4,
        "woken once, looked once"
    );
    assert!(h.log.is_empty(), "the duplicate's body never ran");
}

// pins S5: past the wait bound the duplicate gets a typed, retryable InProgress
#[tokio::test]
async fn in_progress_duplicate_gets_in_progress_after_the_wait_bound() {
    let h = Harness::new();
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
#[tokio::test]
async fn zero_wait_answers_in_progress_at_once() {
    let h = Harness::new();
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

// pins S6: after the lease lapses the first caller takes over and runs the body with the same key;
// the stale owner finishing late cannot overwrite the new owner's record
#[tokio::test]
async fn lapsed_lease_is_taken_over_and_the_stale_owner_is_fenced() {
    let h = Harness::new();
    let spec = spec("send_refund", 86_400_000, 1_000, 0);
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
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

// pins S6: a lease of zero means "already lapsed", not "no lease"
#[tokio::test]
async fn zero_lease_is_already_lapsed() {
    let h = Harness::new();
    let spec = spec("send_refund", 86_400_000, 0, 5_000);
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

// pins S7: a panicking body releases its claim; the next call runs the body
#[test]
fn panicking_body_releases_the_claim() {
    let h = Harness::new();
    let spec = default_spec();
    let ctx = h.ctx("conv_panic");
    let key = key_of(spec, &ctx, 6);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &6u64).map(drop)).unwrap();
        p.run_blocking(|| -> Result<u64, ToolError> { panic!("tool bug") })
    }));
    assert!(result.is_err());
    assert_eq!(
        pollster::block_on(h.store.read(&key, h.now())).unwrap(),
        None
    );
    assert_eq!(pollster::block_on(refund(spec, &ctx, &h.log, 6)), Ok(600));
}

// pins S7: a dropped (cancelled) call future releases its claim
#[tokio::test]
async fn dropped_future_releases_the_claim() {
    let h = Harness::new();
    let spec = default_spec();
    let ctx = h.ctx("conv_cancel");
    let key = key_of(spec, &ctx, 2);
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &2u64).map(drop)).unwrap();
    let never = p.run(std::future::pending::<Result<u64, ToolError>>());
    let timed_out = tokio::time::timeout(Duration::from_millis(5), never).await;
    assert!(timed_out.is_err());
    assert_eq!(h.store.read(&key, h.now()).await.unwrap(), None);
    assert_eq!(refund(spec, &ctx, &h.log, 2).await, Ok(200));
}

// pins S8: live while now < created + ttl; at ttl − 1 ms it replays, at ttl it runs again
#[tokio::test]
async fn ttl_boundary_is_exact() {
    let h = Harness::new();
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
    spec: &'static idem_runtime::ToolSpec,
    ctx: &idem_runtime::CallContext,
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
#[tokio::test]
async fn mismatch_on_a_completed_record_leaves_it_untouched() {
    let h = Harness::new();
    let spec = default_spec();
    let ctx = h.ctx("conv_mm");
    let first: Result<u8, ToolError> = fingerprinted(spec, &ctx, "a").run(async { Ok(1) }).await;
    assert_eq!(first, Ok(1));
    let p = fingerprinted(spec, &ctx, "b");
    let key = p.key().clone();
    let before = h.store.read(&key, h.now()).await.unwrap();
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

// pins S9: Mismatch also on the in-progress path (claim conflict), even after the lease lapsed
#[tokio::test]
async fn mismatch_on_an_in_progress_record_and_on_takeover() {
    let h = Harness::new();
    let spec = spec("send_refund", 86_400_000, 1_000, 0);
    let ctx = h.ctx("conv_mm2");
    let clock = h.clock.clone();
    let out: Result<u8, ToolError> = fingerprinted(spec, &ctx, "a")
        .run(async {
            let dup: Result<u8, ToolError> =
                fingerprinted(spec, &ctx, "b").run(async { Ok(9) }).await;
            assert!(
                matches!(dup, Err(ToolError::Idem(Error::Mismatch { .. }))),
                "{dup:?}"
            );
            clock.advance(Duration::from_millis(1_000));
            let dup: Result<u8, ToolError> =
                fingerprinted(spec, &ctx, "b").run(async { Ok(9) }).await;
            assert!(
                matches!(dup, Err(ToolError::Idem(Error::Mismatch { .. }))),
                "no takeover with another fingerprint: {dup:?}"
            );
            Ok(1)
        })
        .await;
    assert_eq!(out, Ok(1));
}

// pins S10: store unreachable → the body does not run; the caller gets a typed, transient store error
#[tokio::test]
async fn unreachable_store_fails_closed() {
    let faulty = Arc::new(support::FaultyStore::default());
    let (h, engine) = Harness::with_store(faulty.clone());
    let ctx = idem_runtime::CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_down");
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

// pins S10: outcome not saved after the body ran → the caller still learns the outcome; the key stays
// in progress until the lease lapses, so no second run happens before then
#[tokio::test]
async fn unsaved_outcome_keeps_the_key_in_progress_until_the_lease_lapses() {
    let faulty = Arc::new(support::FaultyStore::default());
    let (h, engine) = Harness::with_store(faulty.clone());
    let spec = spec("send_refund", 86_400_000, 30_000, 0);
    let ctx = idem_runtime::CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_unsaved");
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
#[tokio::test]
async fn unencodable_outcome_is_returned_and_not_released() {
    let h = Harness::new();
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
