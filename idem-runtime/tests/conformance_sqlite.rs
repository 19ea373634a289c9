//! The store conformance suite (contract S1–S11) on the SQLite store, each test on a fresh
//! file in its own temporary directory; then what only a file can show: two stores on one
//! file, reopening, the schema version, typed open errors.

#![cfg(feature = "sqlite")]

mod support;
#[macro_use]
mod conformance;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use idem_runtime::store::sqlite::SQLITE_SCHEMA_VERSION;
use idem_runtime::store::RecordState;
use idem_runtime::{prepare, SqliteOpenError, SqliteStore, Store, StoreErrorKind, ToolError};
use support::{default_spec, refund, Harness, TestStore};

/// A fresh store in `idem.sqlite3` of a new temporary directory, kept alive with it.
fn sqlite_file() -> TestStore {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(dir.path().join("idem.sqlite3")).expect("open the store");
    TestStore {
        store: Arc::new(store),
        keep: Some(Box::new(dir)),
    }
}

fn sqlite_in_memory() -> TestStore {
    TestStore {
        store: Arc::new(SqliteStore::open_in_memory().expect("open in memory")),
        keep: None,
    }
}

conformance_suite!(sqlite, crate::sqlite_file);
conformance_suite!(sqlite_in_memory, crate::sqlite_in_memory);

// pins S2 (across connections, as across processes): two stores on one file, 32 threads each,
// on the same 8 keys → exactly one execution per key, and every caller gets that execution's outcome
#[test]
fn two_stores_on_one_file_run_each_key_once() {
    const KEYS: u64 = 8;
    const THREADS_PER_STORE: usize = 32;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.sqlite3");
    let stores = [
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    ];
    let spec = support::spec("hammer", 86_400_000, 60_000, 30_000);
    let executions: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(Barrier::new(2 * THREADS_PER_STORE));
    let mut threads = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        let h = Arc::new(Harness::on(TestStore {
            store: Arc::new(store.clone()),
            keep: None,
        }));
        for t in 0..THREADS_PER_STORE {
            let (h, executions, barrier) = (h.clone(), executions.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || {
                let ctx = h.ctx("conv_two_stores");
                barrier.wait();
                let mut seen = Vec::new();
                for i in 0..KEYS {
                    let order = (i + t as u64) % KEYS; // threads start on different keys
                    let p =
                        prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
                    let out = p.run_blocking(|| {
                        let n = executions[order as usize].fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        Ok::<_, ToolError>(format!("order {order}: store {s}, run {n}"))
                    });
                    seen.push((order, out.expect("every caller gets the outcome")));
                }
                seen
            }));
        }
    }
    let mut seen = Vec::new();
    for t in threads {
        seen.extend(t.join().unwrap());
    }
    conformance::assert_one_execution_and_one_outcome_per_key(&executions, seen);
}

// pins S3, S8: a completed key replays from a store reopened on the same file (a restart)
#[tokio::test]
async fn completed_keys_replay_after_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restart.sqlite3");
    let h = Harness::on(TestStore {
        store: Arc::new(SqliteStore::open(&path).unwrap()),
        keep: None,
    });
    let ctx = h.ctx("conv_restart");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    drop(ctx);
    let clock = h.clock.clone();
    drop(h);
    let reopened: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let engine = idem_runtime::Engine::from_shared(reopened, Arc::new(clock));
    let ctx = idem_runtime::CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_restart");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    let out: Result<u64, ToolError> = p.run(async { panic!("must replay") }).await;
    assert_eq!(out, Ok(100));
    assert_eq!(
        ctx.last_outcome().unwrap().status,
        idem_runtime::CallStatus::Replayed
    );
}

// pins S8: garbage collection deletes expired rows only
#[tokio::test]
async fn garbage_collection_deletes_only_expired_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("gc.sqlite3")).unwrap();
    let h = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let short = support::spec("short", 1_000, 500, 0);
    let long = support::spec("long", 10_000, 500, 0);
    let ctx = h.ctx("conv_gc");
    assert_eq!(refund(short, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(refund(long, &ctx, &h.log, 1).await, Ok(100));
    let long_key = ctx.last_outcome().unwrap().key;
    assert_eq!(store.collect_garbage(h.now()).unwrap(), 0, "both live");
    h.clock.advance(std::time::Duration::from_millis(999));
    assert_eq!(
        store.collect_garbage(h.now()).unwrap(),
        0,
        "live at ttl − 1 ms"
    );
    h.clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(store.collect_garbage(h.now()).unwrap(), 1, "expired at ttl");
    let record = store.read(&long_key, h.now()).await.unwrap().unwrap();
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

// pins S10: open errors are typed and name the file; a newer schema is refused, not touched
#[test]
fn open_errors_are_typed_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no such dir").join("idem.sqlite3");
    match SqliteStore::open(&missing) {
        Err(e @ SqliteOpenError::Open { .. }) => {
            assert!(e.to_string().contains("no such dir"), "{e}");
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unavailable);
        }
        other => panic!("expected an open error, got {other:?}"),
    }
    let not_a_db = dir.path().join("notes.txt");
    std::fs::write(
        &not_a_db,
        "this is not a database, just some text padded out ".repeat(40),
    )
    .unwrap();
    match SqliteStore::open(&not_a_db) {
        Err(e @ (SqliteOpenError::Open { .. } | SqliteOpenError::Setup { .. })) => {
            assert!(e.to_string().contains("notes.txt"), "{e}")
        }
        other => panic!("expected an open error, got {other:?}"),
    }
    let newer = dir.path().join("newer.sqlite3");
    drop(SqliteStore::open(&newer).unwrap());
    {
        let conn = rusqlite::Connection::open(&newer).unwrap();
        let version: i64 = conn
            .query_row(
                "SELECT value FROM idem_meta WHERE name = 'schema_version'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(version, SQLITE_SCHEMA_VERSION);
        conn.execute(
            "UPDATE idem_meta SET value = 99 WHERE name = 'schema_version'",
            [],
        )
        .unwrap();
    }
    match SqliteStore::open(&newer) {
        Err(e @ SqliteOpenError::UnsupportedSchema { found: 99, .. }) => {
            assert!(e.to_string().contains("newer.sqlite3"), "{e}");
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unsupported);
        }
        other => panic!("expected UnsupportedSchema, got {other:?}"),
    }
}

// pins S10: a row that is not a valid record is a typed Corrupt error, not a panic or a replay
#[tokio::test]
async fn corrupt_rows_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.sqlite3");
    let h = Harness::on(TestStore {
        store: Arc::new(SqliteStore::open(&path).unwrap()),
        keep: None,
    });
    let ctx = h.ctx("conv_corrupt");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    for (column, value) in [
        ("fingerprint", "'not hex'"),
        ("created_at", "-1"),
        ("owner", "'00'"),
    ] {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA ignore_check_constraints = ON")
            .unwrap();
        let saved: (String, i64, Option<String>, Option<i64>) = conn
            .query_row(
                "SELECT fingerprint, created_at, owner, lease_until FROM idem_records WHERE key = ?1",
                [key.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        let extra = if column == "owner" {
            ", lease_until = 1"
        } else {
            ""
        };
        conn.execute(
            &format!("UPDATE idem_records SET {column} = {value}{extra} WHERE key = ?1"),
            [key.as_str()],
        )
        .unwrap();
        let error = h.store.read(&key, h.now()).await.unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{column}: {error}");
        assert!(error.message.contains("corrupt.sqlite3"), "{error}");
        let out = refund(default_spec(), &ctx, &h.log, 1).await;
        assert!(
            matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
            "{column}: {out:?}"
        );
        conn.execute(
            "UPDATE idem_records SET fingerprint = ?1, created_at = ?2, owner = ?3, lease_until = ?4 WHERE key = ?5",
            rusqlite::params![saved.0, saved.1, saved.2, saved.3, key.as_str()],
        )
        .unwrap();
    }
    assert_eq!(h.log.len(), 1, "the body never ran on a corrupt record");
}

// pins S10 (no spurious store error): opening a file while another connection holds a lock on
// it waits for the lock, as every statement does (up to the busy timeout), instead of failing
// at once with "database is locked": switching to WAL mode needs an exclusive lock, and SQLite
// answers SQLITE_BUSY there without calling the busy handler (seen when several worker
// processes open a new file at the same moment: tests/process_hammer.rs)
#[test]
fn opening_waits_for_a_lock_held_by_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.sqlite3");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder
        .execute_batch("BEGIN IMMEDIATE; CREATE TABLE other_app (x INTEGER);")
        .unwrap();
    let opener = {
        let path = path.clone();
        std::thread::spawn(move || SqliteStore::open(path))
    };
    // Real time, not a clock: give the opener the time to run into the held lock.
    std::thread::sleep(std::time::Duration::from_millis(300));
    holder.execute_batch("COMMIT").unwrap();
    let store = opener
        .join()
        .unwrap()
        .expect("open waits for the lock instead of failing");
    drop((store, holder));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, SQLITE_SCHEMA_VERSION);
}
