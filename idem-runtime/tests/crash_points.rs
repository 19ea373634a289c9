//! Crash points (issue 3, item 8; contract S2, S3, S6, S7, S10, U2a): a child process calls the
//! tool once and kills itself with SIGKILL at a named point, so no destructor, no claim
//! guard and no release runs:
//! - `after_claim`: the claim landed; the body dies before its effect;
//! - `after_effect`: the body's effect landed (its line is in the shared effects file); the
//!   outcome is not saved;
//! - `after_record`: `complete` answered `Saved` (a wrapper around the real store dies right
//!   then); the reply never reached the caller.
//!
//! Every process runs on a manual clock set by the parent: the crash at `T0`, then fresh
//! processes at chosen instants around `T0 + lease`. For `after_claim` and `after_effect`:
//! - a process at `T0 + lease − 1 ms` with a zero wait, and one whose wait of 100 ms runs from
//!   `T0 + lease − 101 ms` to `T0 + lease − 1 ms`, both get a typed `InProgress` and do not
//!   run the body; the record is still the crashed owner's claim (S6, S10);
//! - then 4 processes at `T0 + lease`, released together, each making 4 concurrent calls:
//!   exactly one of the 16 calls takes over and runs the body (one more effect, with the same
//!   key; the tool re-runs unknown outcomes, `on_unknown = "rerun"`, U2a); the 15 others replay its outcome within their call (their clocks do not move, so
//!   their wait never runs out: they wait for the new owner and replay, S5). For
//!   `after_effect` that makes exactly 2 effects in all, the second only after the lease
//!   lapsed.
//!
//! For `after_record`: a restarted process at `T0 + lease − 1 ms`, at `T0 + lease` and at
//! `T0 + ttl − 1 ms` replays the saved outcome (the crashed process's), with no new effect
//! (S3); one at `T0 + ttl` finds it expired and runs the body again (S8).
//!
//! Each crash point on SQLite (a file), Redis and PostgreSQL, behind each feature.

#![cfg(any(feature = "sqlite", feature = "redis", feature = "postgres"))]

mod processes;

use std::collections::BTreeSet;

use idem_runtime::store::{OwnerToken, RecordState};
use idem_runtime::{CallStatus, Error, ToolError};
use processes::{effects, read_record, Barrier, CrashPoint, EffectLine, Fresh, Spans};

/// The crash's instant (2027-01-15T08:00:00Z).
const T0: u64 = 1_800_000_000_000;
const LEASE_MS: u64 = 30_000;
const TTL_MS: u64 = 86_400_000;
/// The bounded wait of the probe that waits.
const WAIT_MS: u64 = 100;
/// How many processes race for the takeover, and how many concurrent calls each makes.
const RACERS: usize = 4;
const TASKS_PER_RACER: usize = 4;
const ORDER: u64 = 7;

fn spans(wait_ms: u64) -> Spans {
    Spans {
        ttl_ms: TTL_MS,
        lease_ms: LEASE_MS,
        wait_ms,
        heartbeat_ms: None,
    }
}

/// The child process of these tests (run by them, not on its own).
#[test]
#[ignore = "a child process of the crash-point tests; they start it"]
fn child() {
    processes::child_main();
}

/// Runs the call at `T0` in a child that dies at `point`; returns the crashed execution's
/// effect, if it got that far.
fn crash(fresh: &Fresh, point: CrashPoint) -> Option<EffectLine> {
    let mut job = fresh.job("crash", T0, spans(0), vec![vec![ORDER]]);
    job.crash = Some(point);
    processes::spawn("child", &job).wait_killed();
    assert!(
        processes::results(fresh.path(), "crash").is_empty(),
        "the crashed process never finished its call"
    );
    let effects = effects(fresh.path());
    let key = processes::key_of(spans(0), ORDER);
    match point {
        CrashPoint::AfterClaim => {
            assert_eq!(effects, Vec::new(), "died before the effect");
            None
        }
        CrashPoint::AfterEffect | CrashPoint::AfterRecord => {
            assert_eq!(effects.len(), 1, "{effects:?}");
            assert_eq!(effects[0].child, "crash");
            assert_eq!(effects[0].key.as_deref(), Some(key.as_str()));
            Some(effects[0].clone())
        }
    }
}

/// The crashed owner's claim, as the parent reads it at `now`: in progress, claimed at
/// `T0`, lease until `T0 + lease`.
fn crashed_claim(fresh: &Fresh, now: u64) -> OwnerToken {
    let key = processes::key_of(spans(0), ORDER);
    let record = read_record(&fresh.backend, &key, now).expect("the claim is live");
    assert_eq!(record.created_at.as_millis(), T0);
    assert_eq!(record.expires_at.as_millis(), T0 + TTL_MS);
    match record.state {
        RecordState::InProgress { owner, lease_until } => {
            assert_eq!(lease_until.as_millis(), T0 + LEASE_MS);
            owner
        }
        other => panic!("expected the crashed claim in progress, got {other:?}"),
    }
}

/// One fresh process calling once: the result of its call and its call record.
fn probe(
    fresh: &Fresh,
    name: &str,
    start_ms: u64,
    advance_to_ms: Option<u64>,
    wait_ms: u64,
) -> processes::ResultLine {
    let mut job = fresh.job(name, start_ms, spans(wait_ms), vec![vec![ORDER]]);
    job.advance_to_ms = advance_to_ms;
    let mut lines = processes::run_one("child", &job);
    assert_eq!(lines.len(), 1, "{name}: one call");
    lines.remove(0)
}

fn assert_in_progress(line: &processes::ResultLine, waited: u64) {
    let key = processes::key_of(spans(0), ORDER);
    match &line.result {
        Err(ToolError::Idem(Error::InProgress {
            key: busy,
            waited_ms,
            ..
        })) => {
            assert_eq!(busy, key.as_str());
            assert_eq!(*waited_ms, waited, "waited the whole bound, in engine time");
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    assert!(line.record.is_none(), "no execution, no replay");
}

/// `after_claim` / `after_effect`: no second run before the lease lapses; exactly one
/// takeover after it, whose outcome every racer gets.
fn crash_before_the_record(fresh: Fresh, point: CrashPoint) {
    let started = std::time::Instant::now();
    let crashed = crash(&fresh, point);
    let effects_before = effects(fresh.path());
    let owner = crashed_claim(&fresh, T0);

    // pins S6, S10: before the lease lapses nobody runs the body again.
    let at_once = probe(&fresh, "probe-no-wait", T0 + LEASE_MS - 1, None, 0);
    assert_in_progress(&at_once, 0);
    let waited = probe(
        &fresh,
        "probe-wait",
        T0 + LEASE_MS - 1 - WAIT_MS,
        Some(T0 + LEASE_MS - 1),
        WAIT_MS,
    );
    assert_in_progress(&waited, WAIT_MS);
    assert_eq!(
        effects(fresh.path()),
        effects_before,
        "no run before the lease lapsed"
    );
    assert_eq!(
        crashed_claim(&fresh, T0 + LEASE_MS - 1),
        owner,
        "still the crashed owner's claim"
    );

    // pins S6, S2, S5: at the lease instant 4 processes race; one takes over.
    let jobs: Vec<_> = (0..RACERS)
        .map(|i| {
            let mut job = fresh.job(
                &format!("racer{i}"),
                T0 + LEASE_MS,
                spans(10_000),
                vec![vec![ORDER]; TASKS_PER_RACER],
            );
            job.barrier = Barrier::BeforeCalls;
            job.body_ms = 50;
            job
        })
        .collect();
    for running in processes::spawn_together("child", &jobs) {
        running.wait_success();
    }
    let effects_after = effects(fresh.path());
    assert_eq!(
        effects_after.len(),
        effects_before.len() + 1,
        "exactly one more execution: {effects_after:?}"
    );
    assert_eq!(effects_after[..effects_before.len()], effects_before[..]);
    let taker = effects_after.last().unwrap().clone();
    let key = processes::key_of(spans(0), ORDER);
    assert!(taker.child.starts_with("racer"), "{taker:?}");
    assert_eq!(taker.key.as_deref(), Some(key.as_str()), "same key");
    if let Some(crashed) = &crashed {
        assert_ne!(crashed.pid, taker.pid);
    }
    let expected_total = match point {
        CrashPoint::AfterClaim => 1,
        _ => 2,
    };
    assert_eq!(effects_after.len(), expected_total);

    let mut executed = Vec::new();
    let mut outcomes = BTreeSet::new();
    for job in &jobs {
        let lines = processes::results(fresh.path(), &job.name);
        assert_eq!(lines.len(), TASKS_PER_RACER, "{}", job.name);
        for line in &lines {
            let out = line
                .result
                .clone()
                .unwrap_or_else(|e| panic!("{}: {e:?}", job.name));
            let record = line.record.clone().expect("a call record");
            assert_eq!(record.key, key);
            assert!(record.recorded);
            // The takeover's lifetime: claimed anew at the lease instant (S6, S8).
            assert_eq!(record.created_at.as_millis(), T0 + LEASE_MS, "{record:?}");
            assert_eq!(record.expires_at.as_millis(), T0 + LEASE_MS + TTL_MS);
            match record.status {
                CallStatus::Executed => {
                    assert!(record.takeover, "the execution was a takeover: {record:?}");
                    executed.push(job.name.clone());
                }
                CallStatus::Replayed => assert!(!record.takeover),
                _ => panic!("no reconcile function: {record:?}"),
            }
            outcomes.insert(out);
        }
    }
    assert_eq!(executed, vec![taker.child.clone()], "exactly one takeover");
    assert_eq!(
        outcomes,
        BTreeSet::from([taker.outcome.clone()]),
        "every racer got the taker's outcome"
    );
    let record = read_record(&fresh.backend, &key, T0 + LEASE_MS).expect("a live record");
    match record.state {
        RecordState::Completed { outcome, .. } => assert_eq!(
            outcome.decode::<String, ToolError>(),
            Ok(Ok(taker.outcome.clone()))
        ),
        other => panic!("expected the taker's outcome saved, got {other:?}"),
    }
    eprintln!(
        "{} {point:?}: {} processes, {} effects, {:?}",
        fresh.backend.name(),
        3 + RACERS,
        effects_after.len(),
        started.elapsed()
    );
}

/// `after_record`: the saved outcome replays after the restart, before and after the lease
/// instant, and until the TTL ends; no new execution.
fn crash_after_the_record(fresh: Fresh) {
    let started = std::time::Instant::now();
    let crashed = crash(&fresh, CrashPoint::AfterRecord).expect("the effect landed");
    let key = processes::key_of(spans(0), ORDER);
    let record = read_record(&fresh.backend, &key, T0).expect("a live record");
    assert_eq!(record.created_at.as_millis(), T0);
    match record.state {
        RecordState::Completed { outcome, .. } => assert_eq!(
            outcome.decode::<String, ToolError>(),
            Ok(Ok(crashed.outcome.clone()))
        ),
        other => panic!("expected the saved outcome, got {other:?}"),
    }
    // pins S3, S8: replays from a new process, at instants on both sides of the lease.
    let instants = [T0 + LEASE_MS - 1, T0 + LEASE_MS, T0 + TTL_MS - 1];
    for (i, at) in instants.into_iter().enumerate() {
        let line = probe(&fresh, &format!("restart{i}"), at, None, 0);
        assert_eq!(line.result, Ok(crashed.outcome.clone()), "at {at}");
        let record = line.record.expect("a call record");
        assert_eq!(record.status, CallStatus::Replayed, "at {at}");
        assert_eq!(record.key, key);
        assert_eq!(record.created_at.as_millis(), T0);
    }
    assert_eq!(
        effects(fresh.path()),
        vec![crashed.clone()],
        "no new execution"
    );
    // pins S8: and from the TTL instant on the record is expired: the key runs again.
    let expired = probe(&fresh, "after-ttl", T0 + TTL_MS, None, 0);
    let record = expired.record.expect("a call record");
    assert_eq!(record.status, CallStatus::Executed);
    assert!(!record.takeover);
    let effects = effects(fresh.path());
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0], crashed);
    assert_eq!(expired.result, Ok(effects[1].outcome.clone()));
    eprintln!(
        "{} AfterRecord: {} processes, {:?}",
        fresh.backend.name(),
        2 + instants.len(),
        started.elapsed()
    );
}

/// One module per backend with the three crash points.
macro_rules! crash_tests {
    ($feature:literal, $backend:ident) => {
        #[cfg(feature = $feature)]
        mod $backend {
            use super::*;

            // pins S6, S7, S10, S2, S5: died after the claim, before the effect; no guard ran,
            // yet the claim is stuck only until its lease lapses
            #[test]
            fn after_claim_no_run_before_the_lease_then_exactly_one_takeover() {
                crash_before_the_record(Fresh::$backend(), CrashPoint::AfterClaim);
            }

            // pins S10, S6, S2, S5: died after the effect, before the outcome was saved:
            // the second run happens only after the lease lapsed, once
            #[test]
            fn after_effect_no_run_before_the_lease_then_exactly_one_takeover() {
                crash_before_the_record(Fresh::$backend(), CrashPoint::AfterEffect);
            }

            // pins S3, S8: died after the outcome was saved, before the reply
            #[test]
            fn after_record_the_saved_outcome_replays_after_restart() {
                crash_after_the_record(Fresh::$backend());
            }
        }
    };
}

crash_tests!("sqlite", sqlite);
crash_tests!("redis", redis);
crash_tests!("postgres", postgres);
