//! Lease renewal across real processes on the wall clock (issue 7; contract L1, F1, U2a):
//! every process here runs on [`SystemClock`](idem_runtime::SystemClock), so leases lapse
//! and heartbeats renew them in real time, and the dead owners die of a real SIGKILL (no
//! destructor, no guard, no release runs).
//!
//! - A live owner whose body takes 5 leases is never taken over: two other processes call
//!   the same key with a zero wait every quarter lease for the whole body, and every one of
//!   their calls gets `InProgress` until the outcome is saved, then a replay of it; one
//!   effect in all.
//! - An owner killed by SIGKILL mid-body, after its lease was renewed at least once, is taken
//!   over (the tool re-runs unknown outcomes, `on_unknown = "rerun"`) by a process polling
//!   with a zero wait every tenth of a lease: not before the deadline of the last renewal
//!   the store holds, and within lease + heartbeat (+ a scheduling slack) of the kill; the
//!   body that takes over sees a takeover of a run whose lease lapsed, with a fence one
//!   larger.
//! - Two SIGKILLs in a row (the first taker is killed mid-body too): the fence goes 1, 2, 3
//!   across claim → takeover → takeover, and the last outcome replays with fence 3.
//!
//! The tests of this file take a lock, so that they never run at the same time (their
//! deadlines are real ones; a sibling test's processes would only add scheduling noise).
//! Each test runs on SQLite (a file), Redis and PostgreSQL, behind each feature
//! (`IDEM_TEST_REDIS_URL`, `IDEM_TEST_POSTGRES_URL`).

#![cfg(any(feature = "sqlite", feature = "redis", feature = "postgres"))]

mod processes;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use idem_runtime::store::RecordState;
use idem_runtime::{CallStatus, Error, IdempotencyKey, ToolError};
use processes::{
    effects, results, wall_ms, AttemptLine, ChildClock, EffectLine, Fresh, Job, Observer, Polling,
    PreviousLine, ResultLine, Running, Spans,
};

const LEASE_MS: u64 = 400;
/// The default heartbeat: a third of the lease (`ToolSpec::effective_heartbeat`).
const HEARTBEAT_MS: u64 = LEASE_MS / 3;
/// The live owner's body: five leases of real time.
const LONG_BODY_MS: u64 = 5 * LEASE_MS;
/// A body that is killed before it ends (the kill comes within a second or two).
const KILLED_BODY_MS: u64 = 30_000;
/// Long enough that no record expires during a test.
const TTL_MS: u64 = 3_600_000;
const ORDER: u64 = 7;
/// The duplicates' pace in the live-owner test: every quarter lease.
const DUPLICATE_EVERY_MS: u64 = LEASE_MS / 4;
/// The would-be takers' pace: every tenth of a lease.
const POLL_EVERY_MS: u64 = LEASE_MS / 10;
/// How late a takeover may come past the protocol's deadline, kill + lease + heartbeat,
/// on a busy 2-core machine (the suite runs next to other builds). The deadline itself
/// already covers the protocol: the last renewal's "now" was read before the kill, so its
/// lease ends at most one lease after the kill, and a poller's next call comes at most
/// `POLL_EVERY_MS` (40 ms) after that. What is left is scheduling: waking the poller's
/// timer, its claim and takeover round trips (a SQLite write with a WAL fsync, a Redis
/// script, a PostgreSQL transaction with its commit fsync), each of which can wait for a
/// CPU behind compiler processes for a few scheduler periods, and a disk shared with
/// them. 500 ms is several of those stacked; a heartbeat that stopped or a takeover that
/// waited for a second lapse would be hundreds of ms past it.
const SCHEDULING_SLACK_MS: u64 = 500;
/// How long after the first renewal it sees the parent kills (one per kill of the tests):
/// right after a renewal (the lease then ends about one lease after the kill, the latest a
/// takeover may come), half a heartbeat later, and a heartbeat and a half later (after a
/// second renewal, mid-period).
const KILL_PHASES: [Duration; 3] = [
    Duration::from_millis(HEARTBEAT_MS / 2),
    Duration::ZERO,
    Duration::from_millis(HEARTBEAT_MS * 3 / 2),
];
/// Bounds of the parent's waits (a child that never gets there fails the test).
const STEP_DEADLINE: Duration = Duration::from_secs(15);

const SPANS: Spans = Spans {
    ttl_ms: TTL_MS,
    lease_ms: LEASE_MS,
    wait_ms: 0,
    heartbeat_ms: None,
};

/// The child process of these tests (run by them, not on its own).
#[test]
#[ignore = "a child process of the heartbeat process tests; they start it"]
fn child() {
    processes::child_main();
}

/// One test at a time (see the module's doc); a failed test does not stop the others.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn key() -> IdempotencyKey {
    processes::key_of(SPANS, ORDER)
}

/// A job on the wall clock calling `ORDER` once, with a zero wait.
fn real_job(fresh: &Fresh, name: &str, body_ms: u64) -> Job {
    let mut job = fresh.job(name, 0, SPANS, vec![vec![ORDER]]);
    job.clock = ChildClock::System;
    job.body_ms = body_ms;
    job
}

/// A job on the wall clock that calls `ORDER` with a zero wait every `every_ms` until a call
/// is answered otherwise than `InProgress`, then `then` more times.
fn poller(fresh: &Fresh, name: &str, every_ms: u64, then: u32, body_ms: u64) -> Job {
    let mut job = real_job(fresh, name, body_ms);
    job.polling = Some(Polling {
        every_ms,
        // A bound on the loop: the calls of 20 s (no test here needs more than a few).
        max_calls: u32::try_from(20_000 / every_ms).unwrap(),
        then,
    });
    job
}

/// Waits until `child`'s body has run (its effect line is there) and returns that line.
fn wait_for_effect(fresh: &Fresh, running: &mut Running, child: &str) -> EffectLine {
    running.wait_until(&format!("the body of {child}"), STEP_DEADLINE, || {
        effects(fresh.path()).iter().any(|e| e.child == child)
    });
    effects(fresh.path())
        .into_iter()
        .find(|e| e.child == child)
        .unwrap()
}

/// Waits until `running`, a poller, has made its first call.
fn wait_until_polling(fresh: &Fresh, running: &mut Running, child: &str) {
    let marker = fresh.path().join(format!("polling-{child}"));
    running.wait_until(&format!("{child} polling"), STEP_DEADLINE, || {
        marker.exists()
    });
}

fn attempt(effect: &EffectLine) -> &AttemptLine {
    effect
        .attempt
        .as_ref()
        .unwrap_or_else(|| panic!("the body saw no attempt: {effect:?}"))
}

fn is_in_progress(line: &ResultLine) -> bool {
    matches!(line.result, Err(ToolError::Idem(Error::InProgress { .. })))
}

/// A typed `InProgress` for `key` that did not wait, hinting to come back within one
/// heartbeat (S5): no execution, no replay.
fn assert_in_progress(line: &ResultLine, who: &str) {
    match &line.result {
        Err(ToolError::Idem(Error::InProgress {
            key,
            waited_ms,
            retry_after_ms,
            ..
        })) => {
            assert_eq!(key, self::key().as_str(), "{who}");
            // A zero wait: the engine time the call spent is its own round trips (on the
            // wall clock that can cross a millisecond tick), never a pause for the owner.
            let took = line.ended_ms - line.started_ms;
            assert!(
                *waited_ms <= took + 1,
                "{who}: waited {waited_ms} ms in a call of {took} ms"
            );
            assert!(
                (1..=HEARTBEAT_MS).contains(retry_after_ms),
                "{who}: retry after {retry_after_ms} ms"
            );
        }
        other => panic!("{who}: expected InProgress, got {other:?}"),
    }
    assert!(line.record.is_none(), "{who}: no execution, no replay");
}

/// What the parent saw of one SIGKILL.
struct Kill {
    /// The wall clock just before the signal.
    at_ms: u64,
    /// The lease deadline of the last renewal the store holds, read right after the kill.
    lease_until_ms: u64,
}

/// Waits until the store shows the claim of fence `fence`, claimed at `claimed_at_ms`,
/// renewed at least once (its lease deadline moved past claim + lease), waits `phase` more
/// (where in the heartbeat period the kill falls), then kills `victim` with SIGKILL and
/// reads the lease deadline the store is left with.
fn kill_after_a_renewal(
    observer: &Observer,
    mut victim: Running,
    claimed_at_ms: u64,
    fence: u64,
    phase: Duration,
) -> Kill {
    let key = key();
    victim.wait_until("a renewal of the claim", STEP_DEADLINE, || {
        let record = observer.read(&key, wall_ms()).expect("the claim is live");
        assert_eq!(record.fence, fence, "still the victim's claim: {record:?}");
        match record.state {
            RecordState::InProgress { lease_until, .. } => {
                lease_until.as_millis() > claimed_at_ms + LEASE_MS
            }
            other => panic!("expected the victim's claim in progress, got {other:?}"),
        }
    });
    std::thread::sleep(phase);
    let at_ms = victim.sigkill();
    let record = observer.read(&key, wall_ms()).expect("the claim is live");
    let lease_until_ms = match record.state {
        RecordState::InProgress { lease_until, .. } if record.fence == fence => {
            lease_until.as_millis()
        }
        other => panic!(
            "right after the kill the store should still hold the victim's claim (fence \
             {fence}); got fence {} {other:?}",
            record.fence
        ),
    };
    victim.wait_killed();
    Kill {
        at_ms,
        lease_until_ms,
    }
}

/// The checks of one takeover after a kill (L1, F1, U2): `taker` is the effect line of the
/// body that took over `victim`'s claim. Returns the delay from the kill to the takeover.
fn assert_taken_over_in_time(kill: &Kill, victim: &EffectLine, taker: &EffectLine) -> u64 {
    let (dead, new) = (attempt(victim), attempt(taker));
    assert_eq!(taker.key, victim.key, "same key");
    assert_ne!(taker.pid, victim.pid, "another process");
    assert!(new.takeover, "is_takeover(): {taker:?}");
    assert_eq!(new.fence, dead.fence + 1, "a fence one larger: {taker:?}");
    let previous = new.previous.as_ref().expect("previous()");
    assert_eq!(previous.cause, PreviousLine::LEASE_LAPSED, "{taker:?}");
    assert_eq!(previous.fence, dead.fence);
    assert_eq!(previous.claimed_at_ms, dead.claimed_at_ms);
    // No early takeover: not before the deadline of the last renewal (read by the parent
    // after the kill; a renewal still in flight could only have moved it later).
    assert!(
        new.claimed_at_ms >= kill.lease_until_ms,
        "taken over at {} before the lease deadline {} (kill at {})",
        new.claimed_at_ms,
        kill.lease_until_ms,
        kill.at_ms
    );
    let delay = new.claimed_at_ms.saturating_sub(kill.at_ms);
    let bound = LEASE_MS + HEARTBEAT_MS + SCHEDULING_SLACK_MS;
    assert!(
        delay <= bound,
        "taken over {delay} ms after the kill, past lease + heartbeat + slack = {bound} ms \
         (lease deadline {} ms after the kill)",
        kill.lease_until_ms as i64 - kill.at_ms as i64
    );
    delay
}

/// A poller's lines: `InProgress` until its call that executed (a takeover, recorded iff
/// `completed`), or only `InProgress` if it was killed in that body. Returns the executed
/// call's record.
fn assert_polled_until_takeover(
    fresh: &Fresh,
    name: &str,
    completed: bool,
) -> Option<idem_runtime::CallRecord> {
    let lines = results(fresh.path(), name);
    assert!(!lines.is_empty(), "{name} made calls");
    let busy = lines.iter().take_while(|l| is_in_progress(l)).count();
    for line in &lines[..busy] {
        assert_in_progress(line, name);
    }
    if !completed {
        assert_eq!(
            busy,
            lines.len(),
            "{name} was killed in its body: {lines:?}"
        );
        return None;
    }
    assert_eq!(busy + 1, lines.len(), "{name}: busy, then one takeover");
    let last = &lines[busy];
    let record = last.record.clone().expect("a call record");
    assert!(last.result.is_ok(), "{name}: {last:?}");
    assert_eq!(record.status, CallStatus::Executed, "{name}: {record:?}");
    assert!(record.takeover && record.recorded, "{name}: {record:?}");
    Some(record)
}

/// A fresh process calls once more: a replay of `outcome`, with `fence`.
fn assert_replays(fresh: &Fresh, name: &str, outcome: &str, fence: u64) {
    let lines = processes::run_one("child", &real_job(fresh, name, 0));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].result.as_deref(), Ok(outcome), "{name}");
    let record = lines[0].record.clone().expect("a call record");
    assert_eq!(record.status, CallStatus::Replayed);
    assert_eq!(record.fence, fence, "{record:?}");
}

/// Every renewal the children logged succeeded (no claim was lost while its owner lived,
/// L2); returns how many `child` logged. A child logs a renewal once the store answered it,
/// so a kill right after a renewal can beat its line: the parent's reads of the record, not
/// this count, prove a renewal before a kill.
fn renewals_of(fresh: &Fresh, child: &str) -> usize {
    let all = processes::renewals(fresh.path());
    for line in &all {
        assert_eq!(line.renewed, Ok(true), "{line:?}");
        assert_eq!(line.lease_until_ms, line.now_ms + LEASE_MS, "{line:?}");
    }
    all.iter().filter(|l| l.child == child).count()
}

/// Item 1: a live owner whose body takes 5 leases, two processes calling the key all along.
fn live_owner_is_never_taken_over(fresh: Fresh) {
    let started = std::time::Instant::now();
    let dir = fresh.path();
    let observer = Observer::new(&fresh.backend);
    let mut owner = processes::spawn("child", &real_job(&fresh, "owner", LONG_BODY_MS));
    let began = wait_for_effect(&fresh, &mut owner, "owner");
    let claim = attempt(&began).clone();
    assert_eq!((claim.fence, claim.takeover), (1, false), "{began:?}");

    let duplicates: Vec<Running> = ["dup0", "dup1"]
        .iter()
        .map(|name| processes::spawn("child", &poller(&fresh, name, DUPLICATE_EVERY_MS, 2, 0)))
        .collect();
    // While the body runs, the store shows the owner's claim, renewed past its first lease.
    let mut deadlines_seen = std::collections::BTreeSet::new();
    let until = std::time::Instant::now() + STEP_DEADLINE;
    while !owner.has_exited() {
        assert!(
            std::time::Instant::now() < until,
            "the owner never finished"
        );
        let record = observer.read(&key(), wall_ms()).expect("a live record");
        assert_eq!(record.fence, 1, "never taken over: {record:?}");
        match record.state {
            RecordState::InProgress { lease_until, .. } => {
                deadlines_seen.insert(lease_until.as_millis());
            }
            RecordState::Completed { .. } => {}
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    owner.wait_success();
    for running in duplicates {
        running.wait_success();
    }

    let effects = effects(dir);
    assert_eq!(effects, vec![began.clone()], "one effect: the owner's");
    let owned = processes::results(dir, "owner");
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].result.as_deref(), Ok(began.outcome.as_str()));
    let record = owned[0].record.clone().expect("a call record");
    assert_eq!(record.status, CallStatus::Executed);
    assert!(record.recorded && !record.takeover, "{record:?}");
    assert_eq!(record.fence, 1);

    let lapsed_first = claim.claimed_at_ms + LEASE_MS;
    let mut busy_past_the_first_lease = 0;
    let mut latest_busy = 0;
    for name in ["dup0", "dup1"] {
        let lines = results(dir, name);
        let busy = lines.iter().take_while(|l| is_in_progress(l)).count();
        assert_eq!(
            lines.len(),
            busy + 3,
            "{name}: busy, then 3 replays: {lines:?}"
        );
        for line in &lines[..busy] {
            assert_in_progress(line, name);
            if line.started_ms >= lapsed_first {
                busy_past_the_first_lease += 1;
            }
            latest_busy = latest_busy.max(line.started_ms);
        }
        for line in &lines[busy..] {
            assert_eq!(line.result.as_deref(), Ok(began.outcome.as_str()), "{name}");
            let record = line.record.clone().expect("a call record");
            assert_eq!(record.status, CallStatus::Replayed, "{name}: {record:?}");
            assert_eq!(record.fence, 1);
        }
    }
    // The duplicates did call after the unrenewed lease would have lapsed, and kept calling
    // until well into the body's fourth lease: without renewals they would have taken over.
    assert!(
        busy_past_the_first_lease >= 4,
        "{busy_past_the_first_lease}"
    );
    assert!(
        latest_busy >= claim.claimed_at_ms + 3 * LEASE_MS,
        "the duplicates' last InProgress came {} ms after the claim",
        latest_busy - claim.claimed_at_ms
    );
    let renewed = renewals_of(&fresh, "owner");
    assert!(
        deadlines_seen.iter().any(|&d| d > lapsed_first),
        "the parent saw the lease renewed: {deadlines_seen:?}"
    );
    eprintln!(
        "{}: live owner, body {LONG_BODY_MS} ms, lease {LEASE_MS} ms: {renewed} renewals, \
         {} lease deadlines seen by the parent, {busy_past_the_first_lease} InProgress past \
         the first lease (the last {} ms after the claim), {:?}",
        fresh.backend.name(),
        deadlines_seen.len(),
        latest_busy - claim.claimed_at_ms,
        started.elapsed()
    );
}

/// Item 2: one SIGKILL mid-body; a poller takes over in time and completes.
fn killed_owner_is_taken_over_in_time(fresh: Fresh) {
    let started = std::time::Instant::now();
    let observer = Observer::new(&fresh.backend);
    let mut victim = processes::spawn("child", &real_job(&fresh, "victim", KILLED_BODY_MS));
    let dead = wait_for_effect(&fresh, &mut victim, "victim");
    assert_eq!(attempt(&dead).fence, 1);
    let mut taker = processes::spawn("child", &poller(&fresh, "taker", POLL_EVERY_MS, 0, 0));
    wait_until_polling(&fresh, &mut taker, "taker");
    let kill = kill_after_a_renewal(
        &observer,
        victim,
        attempt(&dead).claimed_at_ms,
        1,
        KILL_PHASES[0],
    );
    taker.wait_success();

    let effects = effects(fresh.path());
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0], dead);
    let took = effects[1].clone();
    assert_eq!(took.child, "taker");
    let delay = assert_taken_over_in_time(&kill, &dead, &took);
    let record = assert_polled_until_takeover(&fresh, "taker", true).unwrap();
    assert_eq!(record.fence, 2);
    assert_replays(&fresh, "after", &took.outcome, 2);
    eprintln!(
        "{}: SIGKILL → takeover in {delay} ms (lease deadline {} ms after the kill; bound \
         {} ms), {} renewals logged before the kill, {:?}",
        fresh.backend.name(),
        kill.lease_until_ms as i64 - kill.at_ms as i64,
        LEASE_MS + HEARTBEAT_MS + SCHEDULING_SLACK_MS,
        renewals_of(&fresh, "victim"),
        started.elapsed()
    );
}

/// Item 3: two SIGKILLs mid-body; the fence goes 1, 2, 3.
fn fence_grows_across_two_kills(fresh: Fresh) {
    let started = std::time::Instant::now();
    let observer = Observer::new(&fresh.backend);
    let mut first = processes::spawn("child", &real_job(&fresh, "first", KILLED_BODY_MS));
    let one = wait_for_effect(&fresh, &mut first, "first");
    let mut second = processes::spawn(
        "child",
        &poller(&fresh, "second", POLL_EVERY_MS, 0, KILLED_BODY_MS),
    );
    wait_until_polling(&fresh, &mut second, "second");
    let kill1 = kill_after_a_renewal(
        &observer,
        first,
        attempt(&one).claimed_at_ms,
        1,
        KILL_PHASES[1],
    );

    let two = wait_for_effect(&fresh, &mut second, "second");
    let delay1 = assert_taken_over_in_time(&kill1, &one, &two);
    let mut third = processes::spawn("child", &poller(&fresh, "third", POLL_EVERY_MS, 0, 0));
    wait_until_polling(&fresh, &mut third, "third");
    let kill2 = kill_after_a_renewal(
        &observer,
        second,
        attempt(&two).claimed_at_ms,
        2,
        KILL_PHASES[2],
    );
    third.wait_success();

    let effects = effects(fresh.path());
    assert_eq!(effects.len(), 3, "{effects:?}");
    assert_eq!(effects[..2], [one.clone(), two.clone()]);
    let three = effects[2].clone();
    assert_eq!(three.child, "third");
    let delay2 = assert_taken_over_in_time(&kill2, &two, &three);
    let fences: Vec<u64> = effects.iter().map(|e| attempt(e).fence).collect();
    assert_eq!(fences, [1, 2, 3], "claim → takeover → takeover");
    assert_polled_until_takeover(&fresh, "second", false);
    let record = assert_polled_until_takeover(&fresh, "third", true).unwrap();
    assert_eq!(record.fence, 3);
    let stored = observer.read(&key(), wall_ms()).expect("the saved outcome");
    assert_eq!(stored.fence, 3);
    assert!(
        matches!(stored.state, RecordState::Completed { .. }),
        "{stored:?}"
    );
    assert_replays(&fresh, "after", &three.outcome, 3);
    eprintln!(
        "{}: two SIGKILLs → takeovers in {delay1} ms and {delay2} ms (lease deadlines {} and \
         {} ms after the kills), {} and {} renewals logged before them, {:?}",
        fresh.backend.name(),
        kill1.lease_until_ms as i64 - kill1.at_ms as i64,
        kill2.lease_until_ms as i64 - kill2.at_ms as i64,
        renewals_of(&fresh, "first"),
        renewals_of(&fresh, "second"),
        started.elapsed()
    );
}

/// One module per backend with the three tests.
macro_rules! heartbeat_tests {
    ($feature:literal, $backend:ident) => {
        #[cfg(feature = $feature)]
        mod $backend {
            use super::*;

            // pins L1, S5, S2, S3: a live owner outlasting its lease 5 times over is never
            // taken over by other processes; they get InProgress, then the replay
            #[test]
            fn live_owner_outlasting_its_lease_is_never_taken_over() {
                let _serial = serial();
                live_owner_is_never_taken_over(Fresh::$backend());
            }

            // pins L1, S6, F1, U2: an owner killed by SIGKILL after a renewal is taken over
            // no earlier than its last lease deadline and within lease + heartbeat
            #[test]
            fn owner_killed_mid_body_is_taken_over_within_lease_and_heartbeat() {
                let _serial = serial();
                killed_owner_is_taken_over_in_time(Fresh::$backend());
            }

            // pins F1, L1, U2: fences strictly increase across claim → takeover → takeover
            // with two SIGKILLs in different processes
            #[test]
            fn fence_increases_across_two_sigkilled_owners() {
                let _serial = serial();
                fence_grows_across_two_kills(Fresh::$backend());
            }
        }
    };
}

heartbeat_tests!("sqlite", sqlite);
heartbeat_tests!("redis", redis);
heartbeat_tests!("postgres", postgres);
