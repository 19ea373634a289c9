//! Hammer tests from the adversarial review: takeover storms, a panicking owner with
//! waiting duplicates, clocks moving backwards (S2, S6, S7).

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use idem_runtime::store::RecordState;
use idem_runtime::{prepare, Error, OnCancel, ToolError, ToolSpec};
use support::{rerun, spec, Harness};

/// `h`'s context for an owner cut off from the store's renewals (they fail, L1): a hung or
/// partitioned owner, whose lease lapses while its body still runs.
fn cut_off(h: &Harness) -> idem_runtime::CallContext {
    let store = support::FaultyStore::wrapping(h.store.clone());
    store.fail_renew.store(true, Ordering::SeqCst);
    let engine = idem_runtime::Engine::from_shared(Arc::new(store), Arc::new(h.clock.clone()));
    h.ctx("c").with_engine(engine)
}

// pins S6, S2, U2a: an owner hangs (cut off from renewals); 16 thread duplicates and 16 task
// duplicates wait; the clock passes the lease once → with `on_unknown = "rerun"`, exactly one
// takeover runs; all duplicates replay its value; the stale owner finishing late is fenced.
#[test]
fn takeover_storm_one_takeover_all_replay() {
    let h = Arc::new(Harness::new());
    let spec = rerun(spec("storm", 86_400_000, 1_000, 60_000));
    let runs = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let entered = Arc::new(Barrier::new(2));
    let owner = {
        let (h, runs, entered) = (h.clone(), runs.clone(), entered.clone());
        std::thread::spawn(move || {
            let ctx = cut_off(&h);
            let p = prepare(spec, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
            p.run_blocking(|| {
                runs.fetch_add(1, Ordering::SeqCst);
                entered.wait();
                release_rx.recv().unwrap();
                Ok::<_, ToolError>("stale".to_owned())
            })
        })
    };
    entered.wait();
    let mut threads = Vec::new();
    for _ in 0..16 {
        let (h, runs) = (h.clone(), runs.clone());
        threads.push(std::thread::spawn(move || {
            let ctx = h.ctx("c");
            let p = prepare(spec, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
            p.run_blocking(|| {
                let n = runs.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                Ok::<_, ToolError>(format!("takeover-{n}"))
            })
        }));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (h, runs) = (h.clone(), runs.clone());
        tasks.push(rt.spawn(async move {
            let ctx = h.ctx("c");
            let p = prepare(spec, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
            p.run(async {
                let n = runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, ToolError>(format!("takeover-{n}"))
            })
            .await
        }));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.clock.advance(Duration::from_millis(1_000));
    let mut outs: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for t in tasks {
        outs.push(rt.block_on(t).unwrap());
    }
    release_tx.send(()).unwrap();
    assert_eq!(owner.join().unwrap().as_deref(), Ok("stale"));
    assert_eq!(runs.load(Ordering::SeqCst), 2, "{outs:?}");
    assert!(
        outs.iter().all(|o| o.as_deref() == Ok("takeover-1")),
        "{outs:?}"
    );
}

/// The owner panics while 8 thread duplicates wait; returns the 8 duplicates' outcomes and
/// how many bodies ran.
fn owner_panics_while_duplicates_wait(
    on_cancel: OnCancel,
) -> (Vec<Result<usize, ToolError>>, usize) {
    let h = Arc::new(Harness::new());
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        on_cancel,
        ..*spec("panicky", 86_400_000, 60_000, 60_000)
    }));
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Barrier::new(2));
    let owner = {
        let (h, runs, gate) = (h.clone(), runs.clone(), gate.clone());
        std::thread::spawn(move || {
            let ctx = h.ctx("c");
            let p = prepare(spec, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
            let _ = p.run_blocking(|| -> Result<String, ToolError> {
                runs.fetch_add(1, Ordering::SeqCst);
                gate.wait();
                std::thread::sleep(Duration::from_millis(50));
                panic!("owner bug")
            });
        })
    };
    gate.wait();
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (h, runs) = (h.clone(), runs.clone());
            std::thread::spawn(move || {
                let ctx = h.ctx("c");
                let p = prepare(spec, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
                p.run_blocking(|| {
                    let n = runs.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                    Ok::<_, ToolError>(n)
                })
            })
        })
        .collect();
    assert!(owner.join().is_err());
    let outs: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    (outs, runs.load(Ordering::SeqCst))
}

// pins S7, U4: the owner panics after its body began while 8 thread duplicates wait: the
// outcome is unknown, so none of them runs the body; each is woken and told so
#[test]
fn owner_panics_while_duplicates_wait_and_they_are_told_the_outcome_is_unknown() {
    let (outs, runs) = owner_panics_while_duplicates_wait(OnCancel::Hold);
    assert_eq!(runs, 1, "{outs:?}");
    assert!(
        outs.iter()
            .all(|o| matches!(o, Err(ToolError::Idem(Error::OutcomeUnknown { .. })))),
        "{outs:?}"
    );
}

// pins S7, U4: with `on_cancel = "release"` exactly one waiting duplicate runs next, the rest
// replay it
#[test]
fn owner_panics_while_duplicates_wait_and_release_lets_one_run() {
    let (outs, runs) = owner_panics_while_duplicates_wait(OnCancel::Release);
    assert_eq!(runs, 2, "{outs:?}");
    assert!(outs.iter().all(|o| o == &Ok(1)), "{outs:?}");
}

// pins S6, S8: clock time going backwards after a claim never lets a duplicate run while the lease
// is live, and a far-future clock with huge ttl does not overflow.
#[tokio::test]
async fn clock_backwards_and_huge_spans() {
    let h = Harness::new();
    let big = spec("huge", u64::MAX, u64::MAX, 0);
    let ctx = h.ctx("c");
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        let p = prepare(big, Some(&ctx), |a| a.key("k", &1u8).map(drop)).unwrap();
        let out = p
            .run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(1u8)
            })
            .await;
        assert_eq!(out, Ok(1));
        h.clock.set(idem_runtime::Timestamp::from_millis(5));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let key = prepare(big, Some(&ctx), |a| a.key("k", &1u8).map(drop))
        .unwrap()
        .key()
        .clone();
    let rec = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(matches!(rec.state, RecordState::Completed { .. }));
}
