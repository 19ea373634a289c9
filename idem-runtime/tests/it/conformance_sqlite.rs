//! The store conformance suite (contract S1–S11) on the SQLite store, each test on a fresh
//! file in its own temporary directory; then what only a file can show: two stores on one
//! file, reopening, the schema version and the upgrade of version-1 and version-2 files,
//! typed open errors; and the SQLite store's fencing tokens (F1), renewal (L1), outcome-unknown
//! records (U1) and garbage collection judged by this machine's clock (G1).

#![cfg(feature = "sqlite")]

#[allow(unused_imports)]
use crate::conformance;
use crate::support;

use std::sync::{Arc, Barrier};

use conformance::{mark_unknown, read, renew};
use idem_runtime::envelope::Envelope;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::store::sqlite::SQLITE_SCHEMA_VERSION;
use idem_runtime::store::{
    Claim, ClaimRequest, Completion, DecisionKind, HistoryEvent, ListQuery, OwnerToken,
    PurgeOutcome, Record, RecordState, Seen, TakeoverRequest, Target, TransitionRequest,
};
use idem_runtime::{
    prepare, Clock, SqliteOpenError, SqliteStore, Store, StoreErrorKind, SystemClock, Timestamp,
    ToolError,
};
use support::{default_spec, refund, Harness, TestStore};

use crate::conformance::LABEL;

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

conformance_suite!(sqlite, super::sqlite_file);
conformance_suite!(sqlite_in_memory, super::sqlite_in_memory);
decisions_suite!(sqlite_decisions, super::sqlite_file);
approvals_suite!(sqlite_approvals, super::sqlite_file);

// pins S2 (across connections, as across processes): two stores on one file, 32 threads each
// through the sync path, on the same 8 keys → one execution per key, one shared outcome
#[test]
fn two_stores_on_one_file_run_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.sqlite3");
    conformance::two_stores_run_each_key_once_on_threads([
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ]);
}

// pins S3, S8: a completed key replays from a store reopened on the same file (a restart)
#[tokio::test]
async fn completed_keys_replay_after_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restart.sqlite3");
    conformance::completed_keys_replay_through_a_new_store(
        Arc::new(SqliteStore::open(&path).unwrap()),
        || Arc::new(SqliteStore::open(&path).unwrap()),
    )
    .await;
}

// pins S8, G1: garbage collection deletes expired (completed) rows only
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

// ---------------------------------------------------------------------------------------
// Fencing tokens, renewal, outcome-unknown records, garbage collection, migration: the
// store's methods called directly, with explicit instants.

/// 2025-01-01T00:00:00Z, ms: the instant the store-level tests below start at.
const T0: u64 = 1_735_689_600_000;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
}

fn fp() -> Fingerprint {
    Fingerprint::from_hex(&"5a".repeat(32)).expect("64 hex digits")
}

/// A store on `name` in `dir`.
fn open_in(dir: &tempfile::TempDir, name: &str) -> SqliteStore {
    SqliteStore::open(dir.path().join(name)).expect("open the store")
}

async fn claim(
    store: &SqliteStore,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: Timestamp,
    lease_until: Timestamp,
    expires_at: Timestamp,
) -> Claim {
    let fingerprint = fp();
    store
        .claim(ClaimRequest {
            key,
            fingerprint: &fingerprint,
            owner,
            now,
            lease_until,
            expires_at,
            label: &LABEL,
        })
        .await
        .expect("claim")
}

/// Takes `key` over from `seen` (as read at `now`) for `owner`, with `fence`.
async fn take_over(
    store: &SqliteStore,
    key: &IdempotencyKey,
    seen: &Record,
    owner: OwnerToken,
    now: Timestamp,
    fence: u64,
) -> bool {
    let (seen_owner, seen_lease_until) = match seen.state {
        RecordState::InProgress { owner, lease_until }
        | RecordState::OutcomeUnknown {
            owner, lease_until, ..
        } => (owner, lease_until),
        ref other => panic!("no owner to take over from (not in progress or unknown): {other:?}"),
    };
    store
        .take_over(TakeoverRequest {
            key,
            seen_owner,
            seen_lease_until,
            owner,
            now,
            lease_until: Timestamp::from_millis(now.as_millis() + 100),
            expires_at: Timestamp::from_millis(now.as_millis() + 1_000),
            fence,
            label: &LABEL,
            entry: crate::support::takeover_entry(),
        })
        .await
        .expect("take over")
}

fn outcome() -> Envelope {
    Envelope::from_stored(r#"{"version":1,"ok":"refunded"}"#)
}

fn round_trips(store: &SqliteStore) -> u64 {
    store.round_trips().expect("the SQLite store counts")
}

// pins I3, I4, I5 (what `Store::round_trips` documents): listing, counting, purging one key
// (deleted, kept or absent) and purging by filter (with and without force) are one round trip
// each
#[tokio::test]
async fn inspection_costs_one_round_trip_per_operation() {
    let store = SqliteStore::open_in_memory().unwrap();
    let owner = OwnerToken::random();
    for n in 1..=3 {
        claim(&store, &key(n), owner, at(n), at(100), at(1_000)).await;
    }
    for n in 1..=2 {
        let saved = store
            .complete(crate::support::complete_request(
                &key(n),
                owner,
                &outcome(),
                at(5),
            ))
            .await;
        assert_eq!(saved, Ok(Completion::Saved));
    }
    let mut last = round_trips(&store);
    let mut one_more = |store: &SqliteStore| {
        let now = round_trips(store);
        assert_eq!(now - last, 1);
        last = now;
    };
    let page = store.list(&ListQuery::new().limit(1), at(6)).await.unwrap();
    assert!(page.next.is_some());
    one_more(&store);
    let page = store
        .list(&ListQuery::new().limit(1).after(page.next.unwrap()), at(6))
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    one_more(&store);
    assert_eq!(store.stats(at(6)).await.unwrap().total.total(), 3);
    one_more(&store);
    let kept = store.purge(&key(3), false, at(6)).await.unwrap();
    assert!(matches!(kept, PurgeOutcome::Kept(_)), "{kept:?}");
    one_more(&store);
    let deleted = store.purge(&key(1), false, at(6)).await.unwrap();
    assert!(matches!(deleted, PurgeOutcome::Deleted(_)), "{deleted:?}");
    one_more(&store);
    assert_eq!(
        store.purge(&key(1), false, at(6)).await,
        Ok(PurgeOutcome::Absent)
    );
    one_more(&store);
    let counts = store
        .purge_matching(&ListQuery::new(), false, at(6))
        .await
        .unwrap();
    assert_eq!((counts.deleted, counts.kept), (1, 1));
    one_more(&store);
    let counts = store
        .purge_matching(&ListQuery::new(), true, at(6))
        .await
        .unwrap();
    assert_eq!((counts.deleted, counts.kept), (1, 0));
    one_more(&store);
}

// pins F1: the fence strictly increases claim → takeover → takeover, and across a claim of the
// expired record (also from another store on the file, as from another process); a key the
// store does not hold starts at 1
#[tokio::test]
async fn fences_strictly_increase_over_claims_and_takeovers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_in(&dir, "fence.sqlite3");
    let k = key(1);
    let (a, b, c) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let first = claim(&store, &k, a, at(0), at(100), at(1_000)).await;
    assert_eq!(
        first,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let seen = read(&store, &k, at(100)).await;
    assert_eq!(seen.fence, 1);
    assert!(take_over(&store, &k, &seen, b, at(100), seen.fence + 1).await);
    let seen = read(&store, &k, at(200)).await;
    assert_eq!(
        (seen.fence, &seen.state),
        (
            2,
            &RecordState::InProgress {
                owner: b,
                lease_until: at(200)
            }
        )
    );
    assert!(take_over(&store, &k, &seen, c, at(200), seen.fence + 1).await);
    let taken = read(&store, &k, at(200)).await;
    assert_eq!(taken.fence, 3);
    assert!(
        !take_over(&store, &k, &seen, a, at(300), seen.fence + 1).await,
        "a stale takeover changes nothing"
    );
    assert_eq!(read(&store, &k, at(300)).await, taken);
    assert_eq!(
        store
            .complete(crate::support::complete_request(&k, c, &outcome(), at(300)))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(
        read(&store, &k, at(300)).await.fence,
        3,
        "kept on completion"
    );
    // Expired at 1 200 (taken over at 200 with a ttl of 1 000): the row is still held, so
    // the next claim continues its fences.
    let other_process = open_in(&dir, "fence.sqlite3");
    let again = claim(&other_process, &k, a, at(1_200), at(1_300), at(2_200)).await;
    assert_eq!(
        again,
        Claim::Acquired {
            fence: 4,
            reopened: false
        }
    );
    assert_eq!(read(&store, &k, at(1_200)).await.fence, 4);
    let seen = read(&store, &k, at(1_300)).await;
    assert!(take_over(&other_process, &k, &seen, b, at(1_300), 5).await);
    drop((store, other_process));
    let reopened = open_in(&dir, "fence.sqlite3");
    assert_eq!(
        read(&reopened, &k, at(1_300)).await.fence,
        5,
        "kept in the file"
    );
    let fresh = claim(&reopened, &key(2), a, at(0), at(100), at(1_000)).await;
    assert_eq!(
        fresh,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
}

// pins L1, S8: the owner renews its live claim in progress (one round trip), also once the
// claim's expires_at passed (not completed, so it does not expire: still live), and the
// renewal raises the expiry to the new lease deadline; a stranger, a taken-over owner, the
// owner of a completed, outcome-unknown, released or absent record does not, and nothing
// changes
#[tokio::test]
async fn only_the_owner_of_a_live_claim_in_progress_renews_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_in(&dir, "renew.sqlite3");
    let k = key(1);
    let (a, b, stranger) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    claim(&store, &k, a, at(0), at(100), at(1_000)).await;
    let before = round_trips(&store);
    assert!(renew(&store, &k, a, at(50), at(150)).await);
    assert_eq!(round_trips(&store), before + 1, "one round trip");
    let renewed = read(&store, &k, at(50)).await;
    assert_eq!(
        renewed.state,
        RecordState::InProgress {
            owner: a,
            lease_until: at(150)
        }
    );
    assert!(!renew(&store, &k, stranger, at(60), at(900)).await);
    assert_eq!(read(&store, &k, at(60)).await, renewed);

    // Taken over once the renewed lease lapsed: the old owner's heartbeat fails.
    assert!(take_over(&store, &k, &renewed, b, at(150), 2).await);
    let taken = read(&store, &k, at(150)).await;
    assert!(!renew(&store, &k, a, at(160), at(900)).await);
    assert_eq!(read(&store, &k, at(160)).await, taken);
    assert!(renew(&store, &k, b, at(160), at(260)).await);

    // Outcome unknown: nobody renews the lease.
    assert!(mark_unknown(&store, &k, b, at(170), at(150)).await);
    let unknown = read(&store, &k, at(170)).await;
    assert!(!renew(&store, &k, b, at(180), at(900)).await);
    assert_eq!(read(&store, &k, at(180)).await, unknown);

    // Completed.
    let done = key(2);
    claim(&store, &done, a, at(0), at(100), at(1_000)).await;
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &done,
                a,
                &outcome(),
                at(10)
            ))
            .await,
        Ok(Completion::Saved)
    );
    let completed = read(&store, &done, at(20)).await;
    assert!(!renew(&store, &done, a, at(20), at(900)).await);
    assert_eq!(read(&store, &done, at(20)).await, completed);

    // Overdue (its expires_at passed by the renewing caller's now): still in progress, so
    // live, and renewed by its owner alone; the expiry rises to the new lease deadline.
    let overdue = key(3);
    claim(&store, &overdue, a, at(0), at(2_000), at(1_000)).await;
    let before_renewal = read(&store, &overdue, at(1_000)).await;
    assert_eq!(
        (before_renewal.expires_at, &before_renewal.state),
        (
            at(1_000),
            &RecordState::InProgress {
                owner: a,
                lease_until: at(2_000)
            }
        ),
        "not completed: live at and past its expires_at"
    );
    assert!(!renew(&store, &overdue, stranger, at(1_000), at(9_000)).await);
    assert_eq!(read(&store, &overdue, at(1_000)).await, before_renewal);
    assert!(renew(&store, &overdue, a, at(1_000), at(3_000)).await);
    let renewed = read(&store, &overdue, at(1_500)).await;
    assert_eq!(
        (renewed.expires_at, renewed.fence, &renewed.state),
        (
            at(3_000),
            1,
            &RecordState::InProgress {
                owner: a,
                lease_until: at(3_000)
            }
        )
    );
    // Released, never claimed.
    assert!(store.release(&overdue, a).await.unwrap());
    assert!(!renew(&store, &overdue, a, at(10), at(20)).await);
    assert!(!renew(&store, &key(4), a, at(10), at(20)).await);
    assert_eq!(store.read(&key(4), at(10)).await, Ok(None));
}

// pins U1: mark_unknown is a compare-and-set on the owner of a claim in progress (one round
// trip) that keeps owner, lease and fence; the unknown record is neither completed nor
// released, is returned to claims, and is taken over with the seen owner and lease
#[tokio::test]
async fn an_unknown_outcome_is_kept_until_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_in(&dir, "unknown.sqlite3");
    let k = key(1);
    let (a, b, stranger) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    claim(&store, &k, a, at(0), at(100), at(1_000)).await;
    assert!(!mark_unknown(&store, &k, stranger, at(10), at(0)).await);
    assert!(matches!(
        read(&store, &k, at(10)).await.state,
        RecordState::InProgress { .. }
    ));
    let before = round_trips(&store);
    assert!(mark_unknown(&store, &k, a, at(10), at(0)).await);
    assert_eq!(round_trips(&store), before + 1, "one round trip");
    let unknown = read(&store, &k, at(10)).await;
    assert_eq!(
        unknown,
        Record {
            fingerprint: fp(),
            created_at: at(0),
            expires_at: at(1_000),
            fence: 1,
            state: RecordState::OutcomeUnknown {
                owner: a,
                lease_until: at(100),
                since: at(0)
            },
            label: Some(LABEL.clone()),
        }
    );
    assert!(
        !mark_unknown(&store, &k, a, at(20), at(20)).await,
        "already unknown"
    );
    assert_eq!(
        store
            .complete(crate::support::complete_request(&k, a, &outcome(), at(20)))
            .await,
        Ok(Completion::Fenced)
    );
    assert_eq!(store.release(&k, a).await, Ok(false));
    assert_eq!(read(&store, &k, at(20)).await, unknown);
    assert_eq!(
        claim(&store, &k, b, at(30), at(130), at(1_030)).await,
        Claim::Existing(unknown.clone())
    );

    // A takeover must match the seen owner and lease; it need not wait for the lease.
    let mut wrong_lease = unknown.clone();
    wrong_lease.state = RecordState::OutcomeUnknown {
        owner: a,
        lease_until: at(101),
        since: at(0),
    };
    assert!(!take_over(&store, &k, &wrong_lease, b, at(40), 2).await);
    assert!(take_over(&store, &k, &unknown, b, at(40), unknown.fence + 1).await);
    assert_eq!(
        read(&store, &k, at(40)).await,
        Record {
            fingerprint: fp(),
            created_at: at(40),
            expires_at: at(1_040),
            fence: 2,
            state: RecordState::InProgress {
                owner: b,
                lease_until: at(140)
            },
            label: Some(LABEL.clone()),
        }
    );
    assert!(
        !mark_unknown(&store, &k, a, at(50), at(0)).await,
        "the old owner"
    );
    assert_eq!(
        store
            .complete(crate::support::complete_request(&k, b, &outcome(), at(50)))
            .await,
        Ok(Completion::Saved)
    );
    assert!(
        !mark_unknown(&store, &k, b, at(60), at(40)).await,
        "completed"
    );
    assert!(matches!(
        read(&store, &k, at(60)).await.state,
        RecordState::Completed { .. }
    ));
}

/// Runs a store future to its end outside any runtime (the SQLite store's futures are then
/// ready at once).
fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    pollster::block_on(future)
}

/// Whether the file at `path` still holds a row for `key`, live or not.
fn row_exists(path: &std::path::Path, key: &IdempotencyKey) -> bool {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT count(*) FROM idem_records WHERE key = ?1",
        [key.as_str()],
        |row| row.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}

// pins G1, S8: a worker whose clock runs a year ahead claims enough other keys to trigger the
// store's collection (every 1 024 claims of a store) twice: it deletes a completed record that
// expired days ago by both clocks, but neither a correct-clock worker's claim in progress, nor
// its saved outcomes (one saved before, one between the collections), nor any record that is
// not completed whose expires_at passed days ago (a claim in progress whose lease this machine
// still sees running, one whose lease lapsed, an outcome unknown, a key decided not applied);
// its collect_garbage deletes none of them either. Those stay live for both clocks: a claim of
// one finds it (Existing) and takes nothing over, and a claim of the key decided not applied
// continues its fence
#[test]
fn a_worker_a_year_ahead_deletes_nothing_live() {
    const HOUR: u64 = 3_600_000;
    const DAY: u64 = 24 * HOUR;
    const COLLECT_EVERY: u64 = 1_024;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gc.sqlite3");
    let honest = SqliteStore::open(&path).unwrap();
    let ahead = SqliteStore::open(&path).unwrap();
    let now = SystemClock.now();
    let plus = |t: Timestamp, ms: u64| Timestamp::from_millis(t.as_millis() + ms);
    let minus = |t: Timestamp, ms: u64| Timestamp::from_millis(t.as_millis() - ms);

    let (running, saved, late) = (key(1), key(2), key(3));
    let (garbage, leased, lapsed, unknown, not_applied) = (key(4), key(5), key(6), key(7), key(8));
    let owner = OwnerToken::random();
    let year_ahead = plus(now, 365 * DAY);
    for k in [&running, &saved, &late] {
        let claimed = block(claim(
            &honest,
            k,
            owner,
            now,
            plus(now, 60_000),
            plus(now, DAY),
        ));
        assert_eq!(
            claimed,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
    }
    assert_eq!(
        block(honest.complete(crate::support::complete_request(
            &saved,
            owner,
            &outcome(),
            now
        ))),
        Ok(Completion::Saved)
    );
    // Claimed three days ago, expires_at two days ago; the lease lapsed a minute after the
    // claim, or (one longer than the ttl) still runs for ten minutes.
    let long_ago = minus(now, 3 * DAY);
    let overdue = minus(now, 2 * DAY);
    let lapsed_lease = plus(long_ago, 60_000);
    for (k, lease_until) in [
        (&garbage, lapsed_lease),
        (&leased, plus(now, 600_000)),
        (&lapsed, lapsed_lease),
        (&unknown, lapsed_lease),
        (&not_applied, lapsed_lease),
    ] {
        let claimed = block(claim(&honest, k, owner, long_ago, lease_until, overdue));
        assert_eq!(
            claimed,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
    }
    // The garbage: completed, so it expired two days ago.
    assert_eq!(
        block(honest.complete(crate::support::complete_request(
            &garbage,
            owner,
            &outcome(),
            plus(long_ago, 1_000)
        ))),
        Ok(Completion::Saved)
    );
    // Outcome unknown; then, for another key, decided not applied by a person.
    for k in [&unknown, &not_applied] {
        assert!(block(mark_unknown(
            &honest,
            k,
            owner,
            plus(long_ago, 1_000),
            long_ago
        )));
    }
    let decided_at = plus(long_ago, 120_000);
    assert_eq!(
        block(honest.transition(TransitionRequest {
            key: &not_applied,
            fence: 1,
            seen: Seen::OutcomeUnknown {
                owner,
                lease_until: lapsed_lease,
            },
            target: Target::NotApplied,
            now: decided_at,
            expires_at: decided_at,
            entry: crate::support::entry(HistoryEvent::Resolved {
                decision: DecisionKind::NotApplied,
            }),
        })),
        Ok(true)
    );
    // What each record that is not completed holds: it must come through untouched.
    let waiting = [
        (
            &leased,
            RecordState::InProgress {
                owner,
                lease_until: plus(now, 600_000),
            },
        ),
        (
            &lapsed,
            RecordState::InProgress {
                owner,
                lease_until: lapsed_lease,
            },
        ),
        (
            &unknown,
            RecordState::OutcomeUnknown {
                owner,
                lease_until: lapsed_lease,
                since: long_ago,
            },
        ),
        (&not_applied, RecordState::NotApplied { decided_at }),
    ];
    let untouched = |why: &str| {
        for (k, state) in &waiting {
            assert!(row_exists(&path, k), "{why}: {state:?} kept");
            for (store, when) in [(&honest, now), (&ahead, year_ahead)] {
                let record = block(store.read(k, when)).unwrap();
                let record = record.unwrap_or_else(|| panic!("{why}: {state:?} live at {when:?}"));
                assert_eq!(
                    (record.expires_at, record.fence, &record.state),
                    (overdue, 1, state),
                    "{why}"
                );
                assert!(record.is_overdue(when), "{why}: {state:?} overdue");
            }
        }
    };

    let claim_many = |first: u64| {
        for n in first..first + COLLECT_EVERY {
            let claimed = block(claim(
                &ahead,
                &key(n),
                OwnerToken::random(),
                year_ahead,
                plus(year_ahead, 60_000),
                plus(year_ahead, DAY),
            ));
            assert_eq!(
                claimed,
                Claim::Acquired {
                    fence: 1,
                    reopened: false
                }
            );
        }
    };
    claim_many(1_000);
    assert!(!row_exists(&path, &garbage), "the collection ran");
    let record = block(honest.read(&running, now)).unwrap();
    assert_eq!(
        record.map(|r| r.state),
        Some(RecordState::InProgress {
            owner,
            lease_until: plus(now, 60_000)
        })
    );
    untouched("not completed: never collected");
    assert_eq!(
        block(honest.complete(crate::support::complete_request(
            &late,
            owner,
            &outcome(),
            now
        ))),
        Ok(Completion::Saved)
    );

    claim_many(10_000);
    assert_eq!(
        ahead.collect_garbage(year_ahead).unwrap(),
        0,
        "nothing completed expired by this machine's clock"
    );
    untouched("not completed: never collected, on demand either");
    for k in [&saved, &late] {
        match block(honest.read(k, now)).unwrap().map(|r| r.state) {
            Some(RecordState::Completed { outcome: o, .. }) => {
                assert_eq!(o.as_str(), outcome().as_str())
            }
            other => panic!("expected the saved outcome, got {other:?}"),
        }
    }
    assert_eq!(
        block(honest.complete(crate::support::complete_request(
            &running,
            owner,
            &outcome(),
            now
        ))),
        Ok(Completion::Saved),
        "the claim in progress survived"
    );
    // Not completed, so not expired: a claim finds the record and claims nothing over it.
    for (k, _) in &waiting[..3] {
        let seen = block(honest.read(k, now)).unwrap().unwrap();
        let found = block(claim(
            &honest,
            k,
            OwnerToken::random(),
            now,
            plus(now, 1),
            plus(now, 2),
        ));
        assert_eq!(found, Claim::Existing(seen));
    }
    untouched("a claim takes nothing over");
    // The key decided not applied: its claim continues its fence, the store still held it.
    let reclaimed = block(claim(
        &honest,
        &not_applied,
        owner,
        now,
        plus(now, 1),
        plus(now, 2),
    ));
    assert_eq!(
        reclaimed,
        Claim::Acquired {
            fence: 2,
            reopened: true
        }
    );
}

/// The version-1 schema, as the first build created it (written out here, not taken from the
/// library, so that the test keeps the old format even when the library changes).
const SCHEMA_V1: &str = "
CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
CREATE TABLE idem_records (
    key          TEXT PRIMARY KEY NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    owner        TEXT,
    lease_until  INTEGER,
    outcome      TEXT,
    completed_at INTEGER,
    CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
            AND outcome IS NULL AND completed_at IS NULL)
        OR (owner IS NULL AND lease_until IS NULL
            AND outcome IS NOT NULL AND completed_at IS NOT NULL))
);
CREATE INDEX idem_records_expires_at ON idem_records (expires_at);
INSERT INTO idem_meta (name, value) VALUES ('schema_version', 1);
";

/// A version-1 file at `path` holding a completed record for `completed` (with `fp` and
/// `outcome`, as a version-1 build saved it) and one in progress for `running`, owned by
/// `owner`: both live until `T0 + 86 400 000`.
fn write_version_1_file(
    path: &std::path::Path,
    completed: (&IdempotencyKey, &Fingerprint, &str),
    running: &IdempotencyKey,
    owner: OwnerToken,
) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(SCHEMA_V1).unwrap();
    let (t0, expires) = (T0 as i64, (T0 + 86_400_000) as i64);
    conn.execute(
        "INSERT INTO idem_records (key, fingerprint, created_at, expires_at, outcome, completed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?3)",
        rusqlite::params![
            completed.0.as_str(),
            completed.1.as_str(),
            t0,
            expires,
            completed.2
        ],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO idem_records (key, fingerprint, created_at, expires_at, owner, lease_until)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        rusqlite::params![
            running.as_str(),
            fp().as_str(),
            t0,
            expires,
            owner.to_hex(),
            t0 + 60_000
        ],
    )
    .unwrap();
}

/// What a version-2 build added to a version-1 file (written out here for the same reason).
const V1_TO_V2: &str = "
ALTER TABLE idem_records
    ADD COLUMN fence INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1);
ALTER TABLE idem_records
    ADD COLUMN unknown_since INTEGER CHECK (unknown_since IS NULL OR outcome IS NULL);
UPDATE idem_meta SET value = 2 WHERE name = 'schema_version';
";

/// The key of the record whose outcome is unknown in a version-2 file.
fn old_unknown_key() -> IdempotencyKey {
    key(9)
}

/// A version-2 file at `path`: the records of [`write_version_1_file`], the completed one
/// with fence 3 (as a version-2 build would have left it after takeovers), and one whose
/// outcome is unknown ([`old_unknown_key`], fence 2, owned by `owner`, its lease lapsed at
/// `T0 + 60 000`, unknown since `T0`): no label columns.
fn write_version_2_file(
    path: &std::path::Path,
    completed: (&IdempotencyKey, &Fingerprint, &str),
    running: &IdempotencyKey,
    owner: OwnerToken,
) {
    write_version_1_file(path, completed, running, owner);
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(V1_TO_V2).unwrap();
    conn.execute(
        "UPDATE idem_records SET fence = 3 WHERE key = ?1",
        [completed.0.as_str()],
    )
    .unwrap();
    let (t0, expires) = (T0 as i64, (T0 + 86_400_000) as i64);
    conn.execute(
        "INSERT INTO idem_records
             (key, fingerprint, created_at, expires_at, owner, lease_until, fence, unknown_since)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 2, ?3)",
        rusqlite::params![
            old_unknown_key().as_str(),
            fp().as_str(),
            t0,
            expires,
            owner.to_hex(),
            t0 + 60_000
        ],
    )
    .unwrap();
}

/// The names of the idem indexes in the file at `path`.
fn index_names(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'idem%'
             ORDER BY name",
        )
        .unwrap();
    let names = statement.query_map([], |row| row.get(0)).unwrap();
    names.collect::<Result<_, _>>().unwrap()
}

fn schema_version(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT value FROM idem_meta WHERE name = 'schema_version'",
        [],
        |row| row.get(0),
    )
    .unwrap()
}

// pins P4, S3, S8, F1, U1, U7 (an old store keeps working): a file written by a version-1
// build is migrated in place to the current version (4) when opened: its records read back
// with fence 1, their state, no label and an empty history, its saved outcome counted as
// executed; its saved outcome replays through the protocol and expires at its expires_at, its
// claim in progress stays live past its expires_at and completes, new claims, renewals and
// mark-unknowns work on it and are labelled, and it is listed and counted; opening it again
// changes nothing
#[tokio::test]
async fn a_version_1_file_is_migrated_in_place_and_keeps_its_records() {
    an_old_file_is_upgraded_in_place(1).await;
}

// pins P4, S3, S8, F1, U1, U7: a file written by a version-2 build (fences, an outcome unknown,
// no labels) is upgraded in place to the current version (4) as a version-1 file is: its
// records keep their fences and states and read with no label and an empty history; its
// unknown outcome stays live past its expires_at, and taking it over labels the record
#[tokio::test]
async fn a_version_2_file_is_upgraded_in_place_and_keeps_its_records() {
    an_old_file_is_upgraded_in_place(2).await;
}

/// Writes a file of `version` (1 or 2) and checks its upgrade to the current version.
async fn an_old_file_is_upgraded_in_place(version: i64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    // The completed record a version-1 build would have saved for refund(order 1).
    let h = Harness::on(sqlite_in_memory());
    let ctx = h.ctx("conv_migrate");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    let done = ctx.last_outcome().unwrap().key;
    let saved = h.store.read(&done, h.now()).await.unwrap().unwrap();
    let RecordState::Completed {
        outcome: envelope, ..
    } = &saved.state
    else {
        panic!("expected the saved outcome, got {saved:?}")
    };
    let (running, owner) = (key(7), OwnerToken::random());
    let write = match version {
        1 => write_version_1_file,
        2 => write_version_2_file,
        other => panic!("no version {other} file to write"),
    };
    write(
        &path,
        (&done, &saved.fingerprint, envelope.as_str()),
        &running,
        owner,
    );
    assert_eq!(schema_version(&path), version);
    assert_eq!(index_names(&path), ["idem_records_expires_at"]);

    let store = SqliteStore::open(&path).expect("an old file opens");
    assert_eq!(SQLITE_SCHEMA_VERSION, 5);
    assert_eq!(schema_version(&path), SQLITE_SCHEMA_VERSION);
    assert_eq!(
        index_names(&path),
        [
            "idem_records_created_at",
            "idem_records_expires_at",
            "idem_records_scope",
            "idem_records_tool",
        ]
    );
    let done_fence = if version == 1 { 1 } else { 3 };
    assert_eq!(
        read(&store, &done, at(10)).await,
        Record {
            fingerprint: saved.fingerprint.clone(),
            created_at: at(0),
            expires_at: at(86_400_000),
            fence: done_fence,
            state: RecordState::Completed {
                outcome: envelope.clone(),
                completed_at: at(0),
                source: idem_runtime::OutcomeSource::Executed,
            },
            label: None,
        }
    );
    assert_eq!(
        read(&store, &running, at(10)).await,
        Record {
            fingerprint: fp(),
            created_at: at(0),
            expires_at: at(86_400_000),
            fence: 1,
            state: RecordState::InProgress {
                owner,
                lease_until: at(60_000)
            },
            label: None,
        }
    );
    // Written before version 4: an empty history until the next transition (U7, P4).
    for k in [&done, &running] {
        assert_eq!(
            store.history(k, at(10)).await,
            Ok(Some(idem_runtime::store::History::default()))
        );
    }
    // Only the completed record expires (S8): the old claim in progress, past its
    // expires_at, is live and unchanged.
    assert_eq!(
        store
            .read(&done, at(86_399_999))
            .await
            .unwrap()
            .map(|r| r.fence),
        Some(done_fence)
    );
    assert_eq!(store.read(&done, at(86_400_000)).await, Ok(None));
    assert_eq!(
        read(&store, &running, at(86_400_000)).await,
        read(&store, &running, at(10)).await
    );

    // The old outcome replays through the protocol.
    let replay = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let ctx = replay.ctx("conv_migrate");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    assert_eq!(p.key(), &done);
    let out: Result<u64, ToolError> = p.run(async { panic!("must replay") }).await;
    assert_eq!(out, Ok(100));
    assert_eq!(
        ctx.last_outcome().unwrap().status,
        idem_runtime::CallStatus::Replayed
    );

    // The old claim in progress: renewed, completed by its owner; it keeps no label.
    assert!(renew(&store, &running, owner, at(20), at(80_000)).await);
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &running,
                owner,
                &outcome(),
                at(30)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(read(&store, &running, at(30)).await.label, None);
    // New records: claimed (with their label), marked unknown, taken over with the next fence.
    let fresh = key(8);
    assert_eq!(
        claim(&store, &fresh, owner, at(40), at(140), at(1_040)).await,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    assert_eq!(
        read(&store, &fresh, at(40)).await.label,
        Some(LABEL.clone())
    );
    assert!(mark_unknown(&store, &fresh, owner, at(50), at(40)).await);
    let unknown = read(&store, &fresh, at(50)).await;
    assert!(take_over(&store, &fresh, &unknown, OwnerToken::random(), at(60), 2).await);
    let taken = read(&store, &fresh, at(60)).await;
    assert_eq!((taken.fence, taken.label), (2, Some(LABEL.clone())));
    let old_unknown = old_unknown_key();
    if version == 2 {
        // The version-2 unknown outcome: as it was, then labelled by the takeover.
        let seen = read(&store, &old_unknown, at(60)).await;
        assert_eq!(seen.fence, 2);
        assert_eq!(seen.label, None);
        assert_eq!(
            read(&store, &old_unknown, at(86_400_000)).await,
            seen,
            "not completed: live past its expires_at (S8)"
        );
        assert!(matches!(
            seen.state,
            RecordState::OutcomeUnknown { owner: o, since, .. } if o == owner && since == at(0)
        ));
        assert!(take_over(&store, &old_unknown, &seen, OwnerToken::random(), at(70), 3).await);
        let taken = read(&store, &old_unknown, at(70)).await;
        assert_eq!((taken.fence, taken.label), (3, Some(LABEL.clone())));
    }

    // Listed and counted: the old records with no label (tool ""), the new one with its own.
    let listed = store.list(&ListQuery::new(), at(70)).await.unwrap();
    let labels: Vec<_> = listed
        .records
        .iter()
        .map(|r| (r.key.clone(), r.record.label.clone()))
        .collect();
    // Newest first; `running` and `done` share T0, so the larger key comes first.
    let mut old = [running.clone(), done.clone()];
    old.sort_by(|a, b| b.cmp(a));
    let mut expected = vec![(fresh.clone(), Some(LABEL.clone()))];
    if version == 2 {
        expected.insert(0, (old_unknown.clone(), Some(LABEL.clone())));
    }
    expected.extend(old.into_iter().map(|k| (k, None)));
    assert_eq!(labels, expected);
    let unlabelled = store
        .list(&ListQuery::new().tool(""), at(70))
        .await
        .unwrap();
    assert_eq!(unlabelled.records.len(), 2);
    let in_scope = store
        .list(&ListQuery::new().scope(LABEL.scope.clone()), at(70))
        .await
        .unwrap();
    assert_eq!(in_scope.records.len(), expected.len() - 2);
    let stats = store.stats(at(70)).await.unwrap();
    assert_eq!(stats.by_tool[""].completed, 2);
    assert_eq!(
        stats.by_tool[LABEL.tool.as_str()].total(),
        expected.len() as u64 - 2
    );
    drop(store);

    let again = SqliteStore::open(&path).expect("a migrated file opens again");
    assert_eq!(schema_version(&path), SQLITE_SCHEMA_VERSION);
    assert_eq!(read(&again, &fresh, at(60)).await.fence, 2);
    assert!(matches!(
        read(&again, &running, at(60)).await.state,
        RecordState::Completed { .. }
    ));
}

// pins S2: stores that open one version-1 file at the same moment (as processes starting
// together) migrate it once: every open succeeds and the records are intact
#[test]
fn stores_opening_a_version_1_file_together_migrate_it_once() {
    const STORES: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    let (done, running, owner) = (key(1), key(2), OwnerToken::random());
    write_version_1_file(
        &path,
        (&done, &fp(), r#"{"version":1,"ok":1}"#),
        &running,
        owner,
    );
    let barrier = Arc::new(Barrier::new(STORES));
    let openers: Vec<_> = (0..STORES)
        .map(|_| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                SqliteStore::open(path)
            })
        })
        .collect();
    for opener in openers {
        let store = opener.join().unwrap().expect("every store opens the file");
        let record = block(store.read(&running, at(0))).unwrap().unwrap();
        assert_eq!(record.fence, 1);
        assert!(matches!(record.state, RecordState::InProgress { owner: o, .. } if o == owner));
    }
    assert_eq!(schema_version(&path), SQLITE_SCHEMA_VERSION);
}
