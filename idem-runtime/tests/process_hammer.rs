//! Many OS processes hammer the same keys through one store (issue 3, item 7; contract S2,
//! S3, S5): 4 processes, each with 4 concurrent tasks, every task calling every one of 32
//! keys in its own order, all released together by a start barrier. Then:
//! - exactly one execution per key across all processes (the shared effects file);
//! - every call of every process got that execution's outcome (which names the executing
//!   process), exactly one call per key says "executed" and it is the executor's, every
//!   other says "replayed";
//! - no call failed, and the store holds that same outcome for every key.
//!
//! Each process runs on a manual clock frozen at the same instant, so no lease ever lapses:
//! any second execution would be a broken claim, never a takeover.
//!
//! A second test per backend starts 8 single-task processes that open the store only once
//! the barrier opens: they create the SQLite file (WAL mode, schema) or the PostgreSQL
//! schema on first use at the same moment, and connect to Redis together, then call.
//!
//! Two tests per backend, each behind its feature: SQLite (one file), Redis, PostgreSQL
//! (`IDEM_TEST_REDIS_URL`, `IDEM_TEST_POSTGRES_URL`).

#![cfg(any(feature = "sqlite", feature = "redis", feature = "postgres"))]

mod processes;

use std::collections::{BTreeMap, BTreeSet};

use idem_runtime::store::RecordState;
use idem_runtime::CallStatus;
use processes::{Barrier, Fresh, Job, Spans};

const KEYS: u64 = 32;
/// The instant every clock shows (2027-01-15T08:00:00Z).
const T0: u64 = 1_800_000_000_000;
const SPANS: Spans = Spans {
    ttl_ms: 86_400_000,
    lease_ms: 60_000,
    wait_ms: 60_000,
    heartbeat_ms: None,
};

/// The child process of these tests (run by them, not on its own).
#[test]
#[ignore = "a child process of the process hammer tests; they start it"]
fn child() {
    processes::child_main();
}

/// Task `g` of the whole run calls the keys in the order `(i·a + 5g) mod 32` with an odd
/// `a`: a permutation of every key, different for every task.
fn orders_of(global_task: usize) -> Vec<u64> {
    let g = global_task as u64;
    let a = 2 * (g % 8) + 1;
    (0..KEYS).map(|i| (i * a + 5 * g) % KEYS).collect()
}

/// `processes` child processes with `tasks` tasks each call every key; the verdict of S2/S3.
fn hammer(fresh: Fresh, processes: usize, tasks: usize, barrier: Barrier) {
    let started = std::time::Instant::now();
    let jobs: Vec<Job> = (0..processes)
        .map(|p| {
            let orders = (0..tasks).map(|t| orders_of(p * tasks + t)).collect();
            let mut job = fresh.job(&format!("p{p}"), T0, SPANS, orders);
            job.body_ms = 10;
            job.barrier = barrier;
            job
        })
        .collect();
    for running in processes::spawn_together("child", &jobs) {
        running.wait_success();
    }
    let dir = fresh.path();

    // Exactly one execution per key, carrying that key (S2).
    let effects = processes::effects(dir);
    let mut executor = BTreeMap::new();
    for effect in &effects {
        let key = processes::key_of(SPANS, effect.order);
        assert_eq!(effect.key.as_deref(), Some(key.as_str()), "{effect:?}");
        if let Some(first) = executor.insert(effect.order, effect.clone()) {
            panic!("order {} ran twice: {first:?} and {effect:?}", effect.order);
        }
    }
    assert_eq!(
        executor.keys().copied().collect::<Vec<_>>(),
        (0..KEYS).collect::<Vec<_>>(),
        "every key ran once"
    );

    // Every call got the executor's outcome; one "executed" per key, by the executor (S3).
    let mut executed = BTreeMap::<u64, Vec<String>>::new();
    let mut outcomes = BTreeMap::<u64, BTreeSet<String>>::new();
    let mut calls = 0;
    for job in &jobs {
        let lines = processes::results(dir, &job.name);
        assert_eq!(
            lines.len(),
            tasks * KEYS as usize,
            "{}: every call",
            job.name
        );
        for line in lines {
            calls += 1;
            let out = line
                .result
                .unwrap_or_else(|e| panic!("{} order {}: {e:?}", job.name, line.order));
            let record = line.record.expect("a call record");
            assert_eq!(record.key, processes::key_of(SPANS, line.order));
            assert!(record.recorded, "{record:?}");
            assert!(!record.takeover, "no lease lapses: {record:?}");
            match record.status {
                CallStatus::Executed => executed
                    .entry(line.order)
                    .or_default()
                    .push(job.name.clone()),
                CallStatus::Replayed => {}
                _ => panic!("no reconcile function: {record:?}"),
            }
            outcomes.entry(line.order).or_default().insert(out);
        }
    }
    assert_eq!(calls, processes * tasks * KEYS as usize);
    for (order, effect) in &executor {
        assert_eq!(
            executed.get(order),
            Some(&vec![effect.child.clone()]),
            "order {order}: one executed call, in the process that ran the body"
        );
        assert_eq!(
            outcomes.get(order),
            Some(&BTreeSet::from([effect.outcome.clone()])),
            "order {order}: every process got the executor's outcome"
        );
        // The store holds the same outcome.
        let record = processes::read_record(&fresh.backend, &processes::key_of(SPANS, *order), T0)
            .expect("a live record");
        match record.state {
            RecordState::Completed { outcome, .. } => assert_eq!(
                outcome.decode::<String, idem_runtime::ToolError>(),
                Ok(Ok(effect.outcome.clone()))
            ),
            other => panic!("order {order}: {other:?}"),
        }
    }
    let mut per_process = BTreeMap::<&str, usize>::new();
    for effect in &effects {
        *per_process.entry(effect.child.as_str()).or_default() += 1;
    }
    eprintln!(
        "{} ({barrier:?}): {processes} processes × {tasks} tasks × {KEYS} keys: {calls} calls, \
         {} executions (per process: {per_process:?}), {:?}",
        fresh.backend.name(),
        effects.len(),
        started.elapsed()
    );
}

// pins S2, S3, S5: 4 processes × 4 tasks on one SQLite file (WAL, a connection each)
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_four_processes_run_each_key_once_and_share_its_outcome() {
    hammer(Fresh::sqlite(), 4, 4, Barrier::BeforeCalls);
}

// pins S2, S3: 8 processes create and open one new SQLite file at the same moment, then call
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_eight_processes_opening_a_new_file_together_run_each_key_once() {
    hammer(Fresh::sqlite(), 8, 1, Barrier::BeforeOpen);
}

// pins S2, S3, S5: 4 processes × 4 tasks on one Redis server (a connection each)
#[cfg(feature = "redis")]
#[test]
fn redis_four_processes_run_each_key_once_and_share_its_outcome() {
    hammer(Fresh::redis(), 4, 4, Barrier::BeforeCalls);
}

// pins S2, S3: 8 processes connect to Redis at the same moment, then call
#[cfg(feature = "redis")]
#[test]
fn redis_eight_processes_connecting_together_run_each_key_once() {
    hammer(Fresh::redis(), 8, 1, Barrier::BeforeOpen);
}

// pins S2, S3, S5: 4 processes × 4 tasks on one PostgreSQL schema (a pool each)
#[cfg(feature = "postgres")]
#[test]
fn postgres_four_processes_run_each_key_once_and_share_its_outcome() {
    hammer(Fresh::postgres(), 4, 4, Barrier::BeforeCalls);
}

// pins S2, S3: 8 processes create one new PostgreSQL schema on first use at the same moment
#[cfg(feature = "postgres")]
#[test]
fn postgres_eight_processes_creating_a_new_schema_together_run_each_key_once() {
    hammer(Fresh::postgres(), 8, 1, Barrier::BeforeOpen);
}
