//! The store conformance suite (contract S1–S12) on the PostgreSQL store, then what only a
//! shared server can show: two stores (two pools) on one schema, a new store replaying what
//! an old one saved, garbage collection (judged by the server's clock too, and never of a
//! record that is not completed, G1), the schema version and the upgrades from versions 1,
//! 2 and 3 (P4), typed errors, and the sync path without a runtime refused; and the
//! store-level rules of issues 7 and 17: fencing tokens (F1), the heartbeat (L1), unknown
//! outcomes (U1) and records that are not completed staying live past their expiry (S8).
//!
//! The server is `IDEM_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! Every store made here lives in a fresh schema `idem_test_<32 hex digits>`, dropped when
//! the test is done, so runs (and tests within a run) never see each other's records.

#![cfg(feature = "postgres")]

#[allow(unused_imports)]
use crate::conformance;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{
    Claim, ClaimRequest, Completion, DecisionKind, History, HistoryEvent, ListQuery,
    MarkUnknownRequest, OwnerToken, PurgeOutcome, Record, RecordState, RenewRequest, Seen,
    TakeoverRequest, Target, TransitionRequest, POSTGRES_SCHEMA_VERSION,
};
use idem_runtime::{
    prepare, Clock, Envelope, Fingerprint, IdempotencyKey, PostgresConnectError, PostgresStore,
    Store, StoreErrorKind, SystemClock, Timestamp, ToolError,
};
use support::{default_spec, refund, Harness, TestStore};

use crate::conformance::LABEL;

fn url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema name no other test or run uses; dropped (with its tables) when this is dropped.
struct Schema {
    name: String,
}

impl Schema {
    fn fresh() -> Self {
        Schema {
            name: format!("idem_test_{:032x}", OwnerToken::random().as_u128()),
        }
    }

    fn store(&self) -> PostgresStore {
        PostgresStore::with_schema(&url(), &self.name).expect("a valid URL and schema")
    }

    /// Runs `sql` (with this schema's name for `{schema}`) on a connection of its own, on a
    /// thread of its own with its own runtime, so it works from sync code, async code and
    /// `Drop` alike.
    fn try_admin(&self, sql: &str) -> Result<(), String> {
        let (url, sql) = (
            url(),
            sql.replace("{schema}", &format!("\"{}\"", self.name)),
        );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client
                    .batch_execute(&sql)
                    .await
                    .map_err(|e| format!("{sql:?}: {e}"))
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the admin thread panicked".to_owned()))
    }

    fn admin(&self, sql: &str) {
        if let Err(e) = self.try_admin(sql) {
            panic!("admin statement: {e}");
        }
    }

    /// The first column of the first row `sql` answers (`{schema}` as in `try_admin`), as
    /// text; `None` when it answers no row or NULL.
    fn admin_value(&self, sql: &str) -> Option<String> {
        let (url, sql) = (
            url(),
            sql.replace("{schema}", &format!("\"{}\"", self.name)),
        );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("the test server");
                tokio::spawn(connection);
                let messages = client.simple_query(&sql).await.expect(&sql);
                messages.into_iter().find_map(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some(row.get(0).map(str::to_owned))
                    }
                    _ => None,
                })?
            })
        })
        .join()
        .expect("the admin thread")
    }

    /// The schema version the meta table holds, if any.
    fn version(&self) -> Option<i64> {
        self.admin_value("SELECT value FROM {schema}.meta WHERE name = 'schema_version'")
            .map(|text| text.parse().expect("a number"))
    }
}

impl Drop for Schema {
    /// Drops the schema, also when the test failed (then a failure to drop is only printed).
    fn drop(&mut self) {
        if let Err(e) = self.try_admin("DROP SCHEMA IF EXISTS {schema} CASCADE") {
            if std::thread::panicking() {
                eprintln!("could not drop the test schema {}: {e}", self.name);
            } else {
                panic!("could not drop the test schema {}: {e}", self.name);
            }
        }
    }
}

/// A fresh store in a fresh schema, the schema dropped with the harness.
fn postgres() -> TestStore {
    let schema = Schema::fresh();
    TestStore {
        store: Arc::new(schema.store()),
        keep: Some(Box::new(schema)),
    }
}

conformance_suite!(postgres, super::postgres, async_only);
decisions_suite!(postgres_decisions, super::postgres);
approvals_suite!(postgres_approvals, super::postgres);

// pins S2 (across pools, as across processes): two stores with a pool each, 32 tasks each, on
// the same 8 keys → exactly one execution per key, and every caller gets that execution's outcome
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_run_each_key_once() {
    let schema = Schema::fresh();
    conformance::two_stores_run_each_key_once([Arc::new(schema.store()), Arc::new(schema.store())])
        .await;
}

// pins S3, S8: a completed key replays through a new store (a new pool: a restarted process)
#[tokio::test]
async fn completed_keys_replay_through_a_new_store() {
    let schema = Schema::fresh();
    conformance::completed_keys_replay_through_a_new_store(Arc::new(schema.store()), || {
        Arc::new(schema.store())
    })
    .await;
}

// pins S7, U4: a body that panics inside a task leaves its outcome unknown (the mark is a store
// write detached onto the runtime); the next call gets OutcomeUnknown and does not run the body
#[tokio::test]
async fn panicking_async_body_leaves_the_outcome_unknown() {
    let h = Harness::on(postgres());
    let spec = default_spec();
    let ctx = h.ctx("conv_panic");
    let key = support::key_of(spec, &ctx, 6);
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &6u64).map(drop)).unwrap();
    async fn buggy_tool() -> Result<u64, ToolError> {
        panic!("tool bug")
    }
    let task = tokio::spawn(p.run(buggy_tool()));
    assert!(task.await.unwrap_err().is_panic());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let record = h.store.read(&key, h.now()).await.unwrap();
        if matches!(
            record.as_ref().map(|r| &r.state),
            Some(idem_runtime::store::RecordState::OutcomeUnknown { .. })
        ) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not marked unknown: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(
        refund(spec, &ctx, &h.log, 6).await,
        Err(ToolError::Idem(idem_runtime::Error::OutcomeUnknown { .. }))
    ));
    assert_eq!(h.log.len(), 0);
}

// pins S10: outside a tokio runtime every operation is a clear Unsupported error, and a sync
// tool's body never runs without a claim
#[test]
fn the_sync_path_without_a_runtime_is_unsupported() {
    let h = Harness::on(postgres());
    let ctx = h.ctx("conv_sync");
    let key = support::key_of(default_spec(), &ctx, 3);
    let error = pollster::block_on(h.store.read(&key, h.now())).unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
    assert!(error.message.contains("tokio runtime"), "{error}");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &3u64).map(drop)
    })
    .unwrap();
    let out = p.run_blocking(|| {
        h.log.record("sync", "must not run");
        Ok::<_, ToolError>(1u64)
    });
    match out {
        Err(ToolError::Idem(idem_runtime::Error::Store { .. })) => {}
        other => panic!("expected a store error, got {other:?}"),
    }
    assert_eq!(h.log.len(), 0);
}

// pins S8, G1: garbage collection deletes expired rows only (here completed ones, at their ttl)
#[tokio::test]
async fn garbage_collection_deletes_only_expired_rows() {
    let schema = Schema::fresh();
    let store = schema.store();
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
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        0,
        "both live"
    );
    h.clock.advance(Duration::from_millis(999));
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        0,
        "live at ttl − 1 ms"
    );
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        1,
        "expired at ttl"
    );
    let record = store.read(&long_key, h.now()).await.unwrap().unwrap();
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

// pins S10: bad arguments are typed connect errors naming the URL without its password; an
// unreachable server is a transient store error naming it the same way
#[tokio::test]
async fn errors_are_typed_and_name_the_url_without_its_password() {
    match PostgresStore::connect("postgres://agent:hunter2@db/x?connect_timeout=nope") {
        Err(e @ PostgresConnectError::InvalidUrl { .. }) => {
            let text = e.to_string();
            assert!(text.contains("agent:***@db/x"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unsupported);
        }
        other => panic!("expected InvalidUrl, got {other:?}"),
    }
    for schema in ["", "Idem", "x\"; DROP TABLE y; --", "9lives"] {
        match PostgresStore::with_schema(&url(), schema) {
            Err(PostgresConnectError::InvalidSchema { schema: got, .. }) => {
                assert_eq!(got, schema)
            }
            other => panic!("expected InvalidSchema for {schema:?}, got {other:?}"),
        }
    }
    let store = PostgresStore::connect("postgres://agent:hunter2@127.0.0.1:1/x").unwrap();
    assert_eq!(store.url(), "postgres://agent:***@127.0.0.1:1/x");
    assert_eq!(store.schema(), "idem");
    let h = Harness::on(TestStore {
        store: Arc::new(store),
        keep: None,
    });
    let ctx = h.ctx("conv_down");
    let key = support::key_of(default_spec(), &ctx, 1);
    let error = h.store.read(&key, h.now()).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("agent:***@127.0.0.1:1"), "{error}");
    assert!(!error.message.contains("hunter2"), "{error}");
    let out = refund(default_spec(), &ctx, &h.log, 1).await;
    assert!(
        matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
        "{out:?}"
    );
    assert_eq!(h.log.len(), 0, "no body runs without a claim");
}

// pins S10, P4: this build's schema is version 4; a schema of another version (newer than this
// build: the next one or any later one; or older than version 1) is refused (Unsupported), not
// touched
#[tokio::test]
async fn another_schema_version_is_refused() {
    let schema = Schema::fresh();
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let ctx = h.ctx("conv_version");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(POSTGRES_SCHEMA_VERSION, 5);
    assert_eq!(schema.version(), Some(5));
    let key = ctx.last_outcome().unwrap().key;
    for version in [6, 99, 0] {
        schema.admin(&format!(
            "UPDATE {{schema}}.meta SET value = {version} WHERE name = 'schema_version'"
        ));
        let other = schema.store();
        let error = other.read(&key, h.now()).await.unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
        assert!(
            error.message.contains(&format!("version {version}")),
            "{error}"
        );
        assert!(error.message.contains(&schema.name), "{error}");
        assert_eq!(schema.version(), Some(version), "left untouched");
    }
    assert!(h.store.read(&key, h.now()).await.unwrap().is_some());
}

// pins S10: a row that is not a valid record is a typed Corrupt error, not a panic or a replay
#[tokio::test]
async fn corrupt_rows_are_typed_errors() {
    let schema = Schema::fresh();
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let ctx = h.ctx("conv_corrupt");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    let k = key.as_str();
    for (corrupt, restore) in [
        (
            format!("UPDATE {{schema}}.records SET fingerprint = 'not hex' WHERE key = '{k}'"),
            format!(
                "UPDATE {{schema}}.records SET fingerprint = '{}' WHERE key = '{k}'",
                "0".repeat(64)
            ),
        ),
        (
            format!("UPDATE {{schema}}.records SET created_at = -1 WHERE key = '{k}'"),
            format!("UPDATE {{schema}}.records SET created_at = 0 WHERE key = '{k}'"),
        ),
    ] {
        schema.admin(&corrupt);
        let error = h.store.read(&key, h.now()).await.unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{corrupt}: {error}");
        assert!(error.message.contains(&schema.name), "{error}");
        let out = refund(default_spec(), &ctx, &h.log, 1).await;
        assert!(
            matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
            "{corrupt}: {out:?}"
        );
        schema.admin(&restore);
    }
    assert!(h.store.read(&key, h.now()).await.unwrap().is_some());
    assert_eq!(h.log.len(), 1, "the body never ran on a corrupt record");
}

// ---- fencing tokens, heartbeat, outcome unknown, garbage collection, migration (issue 7) ----

/// A store-level key: `n` as 64 hex digits.
fn raw_key(n: u64) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_hex(&format!("{n:02x}").repeat(32)).expect("64 hex digits")
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn claim_at(
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: u64,
    lease_until: u64,
    expires_at: u64,
) -> ClaimRequest<'_> {
    // One fingerprint for every store-level claim here (`fp(7)`).
    static FINGERPRINT: std::sync::OnceLock<Fingerprint> = std::sync::OnceLock::new();
    ClaimRequest {
        key,
        fingerprint: FINGERPRINT.get_or_init(|| fp(7)),
        owner,
        now: at(now),
        lease_until: at(lease_until),
        expires_at: at(expires_at),
        label: &LABEL,
    }
}

fn ok_envelope() -> Envelope {
    Envelope::from_stored("{\"ok\":true}".to_owned())
}

/// The record of `key` at `now`; panics when there is none.
async fn record(store: &PostgresStore, key: &IdempotencyKey, now: u64) -> Record {
    store
        .read(key, at(now))
        .await
        .expect("read")
        .unwrap_or_else(|| panic!("a live record of {key} at {now}"))
}

/// The round trips `op` costs on `store`.
async fn costs<T>(store: &PostgresStore, op: impl std::future::Future<Output = T>) -> (T, u64) {
    let before = store.round_trips().expect("counted");
    let out = op.await;
    (out, store.round_trips().expect("counted") - before)
}

/// A person's decision "not applied" (U6) on `key`'s unknown outcome, held by `owner` with
/// the lease deadline `lease_until` and fence `fence`, at `now`: whether it was recorded.
async fn decide_not_applied(
    store: &PostgresStore,
    key: &IdempotencyKey,
    owner: OwnerToken,
    lease_until: u64,
    fence: u64,
    now: u64,
) -> bool {
    let request = TransitionRequest {
        key,
        fence,
        seen: Seen::OutcomeUnknown {
            owner,
            lease_until: at(lease_until),
        },
        target: Target::NotApplied,
        now: at(now),
        expires_at: at(now),
        entry: support::entry(HistoryEvent::Resolved {
            decision: DecisionKind::NotApplied,
        }),
    };
    store.transition(request).await.expect("transition")
}

// pins F1, S8: the fence strictly increases per key: a first claim gets 1, each takeover stores
// the caller's seen fence + 1, and a claim over an expired completed record the store still
// holds gets that record's fence + 1; a released (deleted) key starts at 1. A record that is not
// completed (in progress, outcome unknown) past its `expires_at` is live: a claim answers it
// untouched, and only a takeover passes its fence on
#[tokio::test]
async fn fences_increase_across_claims_takeovers_and_expiry() {
    let schema = Schema::fresh();
    let store = schema.store();
    let key = raw_key(1);
    let (a, b, c, d, e) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    assert_eq!(
        store.claim(claim_at(&key, a, 0, 100, 1_000)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let mut seen = record(&store, &key, 0).await;
    assert_eq!(seen.fence, 1);
    for (owner, seen_owner, now) in [(b, a, 100), (c, b, 200)] {
        let seen_lease_until = match seen.state {
            RecordState::InProgress { lease_until, .. } => lease_until,
            other => panic!("in progress, got {other:?}"),
        };
        let takeover = TakeoverRequest {
            key: &key,
            seen_owner,
            seen_lease_until,
            owner,
            now: at(now),
            lease_until: at(now + 100),
            expires_at: at(now + 1_000),
            fence: seen.fence + 1,
            label: &LABEL,
            entry: crate::support::takeover_entry(),
        };
        assert_eq!(store.take_over(takeover).await, Ok(true));
        let next = record(&store, &key, now).await;
        assert!(next.fence > seen.fence, "{next:?} after {seen:?}");
        assert_eq!(next.fence, seen.fence + 1);
        assert_eq!(next.created_at, at(now));
        assert_eq!(
            next.state,
            RecordState::InProgress {
                owner,
                lease_until: at(now + 100)
            }
        );
        seen = next;
    }
    assert_eq!(seen.fence, 3);
    // in progress past its expiry (at 1_200, lease lapsed at 300): still live (S8), a claim
    // answers it as it is, fence and all
    assert_eq!(seen.expires_at, at(1_200));
    match store.claim(claim_at(&key, d, 1_200, 1_300, 2_000)).await {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, seen),
        other => panic!("the overdue claim in progress, got {other:?}"),
    }
    assert_eq!(record(&store, &key, 1_200).await, seen, "unchanged");
    // a takeover of it passes the fence on
    let takeover = TakeoverRequest {
        key: &key,
        seen_owner: c,
        seen_lease_until: at(300),
        owner: d,
        now: at(1_200),
        lease_until: at(1_300),
        expires_at: at(2_000),
        fence: seen.fence + 1,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(store.take_over(takeover).await, Ok(true));
    assert_eq!(record(&store, &key, 1_200).await.fence, 4);
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                d,
                &ok_envelope(),
                at(1_250)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(
        record(&store, &key, 1_250).await.fence,
        4,
        "kept when completed"
    );
    // expired completed (at 2_000): the fence goes on
    assert_eq!(
        store.claim(claim_at(&key, e, 2_000, 2_100, 3_000)).await,
        Ok(Claim::Acquired {
            fence: 5,
            reopened: false
        })
    );
    let live = record(&store, &key, 2_000).await;
    assert_eq!(live.fence, 5);
    assert_eq!(
        live.state,
        RecordState::InProgress {
            owner: e,
            lease_until: at(2_100)
        }
    );
    // a live record is returned with its fence, untouched
    match store.claim(claim_at(&key, a, 2_001, 2_101, 3_001)).await {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, live),
        other => panic!("the live record, got {other:?}"),
    }
    // released: the store no longer holds the key, a claim starts over at 1
    assert_eq!(store.release(&key, e).await, Ok(true));
    assert_eq!(
        store.claim(claim_at(&key, a, 2_002, 2_102, 3_002)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    // an unknown outcome past its expiry (at 3_002): still live (S8), a claim answers it
    // untouched; a takeover is in progress with fence + 1
    let unknown = MarkUnknownRequest {
        key: &key,
        owner: a,
        now: at(2_010),
        since: at(2_002),
        entry: crate::support::unknown_entry(),
    };
    assert_eq!(store.mark_unknown(unknown).await, Ok(true));
    let held = record(&store, &key, 3_002).await;
    assert_eq!(
        (held.fence, held.expires_at, &held.state),
        (
            1,
            at(3_002),
            &RecordState::OutcomeUnknown {
                owner: a,
                lease_until: at(2_102),
                since: at(2_002)
            }
        )
    );
    match store.claim(claim_at(&key, b, 3_002, 3_102, 4_002)).await {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, held),
        other => panic!("the overdue unknown outcome, got {other:?}"),
    }
    assert_eq!(record(&store, &key, 3_002).await, held, "unchanged");
    let takeover = TakeoverRequest {
        key: &key,
        seen_owner: a,
        seen_lease_until: at(2_102),
        owner: b,
        now: at(3_002),
        lease_until: at(3_102),
        expires_at: at(4_002),
        fence: held.fence + 1,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(store.take_over(takeover).await, Ok(true));
    let taken = record(&store, &key, 3_002).await;
    assert_eq!(taken.fence, 2);
    assert_eq!(
        taken.state,
        RecordState::InProgress {
            owner: b,
            lease_until: at(3_102)
        }
    );
}

// pins L1, S8: renew is a compare-and-set heartbeat: the owner of a live in-progress record moves
// its lease (one round trip), also past the record's `expires_at` (a record in progress does not
// expire), raising the expiry to the new lease deadline; a stranger, an owner that was taken over,
// a completed record and a record marked unknown are not renewed, and nothing changes
#[tokio::test]
async fn renew_extends_only_the_owners_live_claim() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (key, other_key) = (raw_key(2), raw_key(3));
    let (owner, stranger, successor) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let renew = |key, owner, now: u64, lease_until: u64| RenewRequest {
        key,
        owner,
        now: at(now),
        lease_until: at(lease_until),
    };
    // warm-up: the renew statement prepared on the connection
    assert!(matches!(
        store
            .claim(claim_at(&other_key, owner, 0, 100, 1_000))
            .await,
        Ok(Claim::Acquired { .. })
    ));
    assert_eq!(
        store.renew(renew(&other_key, owner, 10, 200)).await,
        Ok(true)
    );

    assert_eq!(
        store.claim(claim_at(&key, owner, 0, 100, 1_000)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let (renewed, trips) = costs(&store, store.renew(renew(&key, owner, 50, 150))).await;
    assert_eq!(renewed, Ok(true));
    assert_eq!(trips, 1, "a renewal is one round trip");
    let before = record(&store, &key, 50).await;
    assert_eq!(
        before.state,
        RecordState::InProgress {
            owner,
            lease_until: at(150)
        }
    );
    assert_eq!((before.fence, before.created_at), (1, at(0)));
    // a heartbeat after the lease lapsed, before anyone took over, still holds it
    assert_eq!(store.renew(renew(&key, owner, 160, 260)).await, Ok(true));
    let before = record(&store, &key, 160).await;
    let (refused, trips) = costs(&store, store.renew(renew(&key, stranger, 170, 999))).await;
    assert_eq!(refused, Ok(false), "a stranger");
    assert_eq!(trips, 1);
    assert_eq!(record(&store, &key, 170).await, before, "unchanged");
    // past its expiry (1_000) the claim in progress is still live (S8): its owner renews it,
    // and the expiry rises to the new lease deadline
    assert_eq!(before.expires_at, at(1_000));
    assert_eq!(
        store.renew(renew(&key, owner, 1_000, 1_100)).await,
        Ok(true),
        "in progress at its expiry"
    );
    let overdue = record(&store, &key, 1_050).await;
    assert_eq!(
        overdue.state,
        RecordState::InProgress {
            owner,
            lease_until: at(1_100)
        }
    );
    assert_eq!(
        (overdue.fence, overdue.created_at, overdue.expires_at),
        (1, at(0), at(1_100))
    );
    // taken over: the old owner has lost the claim
    let takeover = TakeoverRequest {
        key: &key,
        seen_owner: owner,
        seen_lease_until: at(1_100),
        owner: successor,
        now: at(1_200),
        lease_until: at(1_300),
        expires_at: at(2_200),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(store.take_over(takeover).await, Ok(true));
    assert_eq!(
        store.renew(renew(&key, owner, 1_210, 1_999)).await,
        Ok(false)
    );
    assert_eq!(
        record(&store, &key, 1_210).await.state,
        RecordState::InProgress {
            owner: successor,
            lease_until: at(1_300)
        }
    );
    // marked unknown: nobody renews it
    assert_eq!(
        store
            .mark_unknown(MarkUnknownRequest {
                key: &key,
                owner: successor,
                now: at(1_220),
                since: at(1_200),
                entry: crate::support::unknown_entry(),
            })
            .await,
        Ok(true)
    );
    let unknown = record(&store, &key, 1_230).await;
    assert_eq!(
        store.renew(renew(&key, successor, 1_230, 1_999)).await,
        Ok(false)
    );
    assert_eq!(record(&store, &key, 1_230).await, unknown, "still unknown");
    // completed: nothing to renew
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &other_key,
                owner,
                &ok_envelope(),
                at(20)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(
        store.renew(renew(&other_key, owner, 30, 999)).await,
        Ok(false)
    );
    assert!(matches!(
        record(&store, &other_key, 30).await.state,
        RecordState::Completed { .. }
    ));
    // absent
    assert_eq!(
        store.renew(renew(&raw_key(4), owner, 30, 999)).await,
        Ok(false)
    );
}

// pins U1, S8: mark_unknown is a compare-and-set on the owner of an in-progress record (one round
// trip): the record keeps its owner, lease, fence and times and gains `since`; complete, release,
// renew and a second mark of the unknown record fail and change nothing; take_over with the seen
// owner and lease (and only with them) makes it in progress again with the caller's fence. Past
// its `expires_at` a record in progress is still live: it is marked unknown, and the unknown
// outcome stays, answered to every claim, however late
#[tokio::test]
async fn an_unknown_outcome_can_only_be_taken_over() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (key, warm) = (raw_key(5), raw_key(6));
    let (owner, stranger, successor) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let mark = |key, owner, now: u64| MarkUnknownRequest {
        key,
        owner,
        now: at(now),
        since: at(0),
        entry: crate::support::unknown_entry(),
    };
    // warm-up: the mark_unknown statement prepared on the connection
    assert!(matches!(
        store.claim(claim_at(&warm, owner, 0, 100, 1_000)).await,
        Ok(Claim::Acquired { .. })
    ));
    assert_eq!(store.mark_unknown(mark(&warm, owner, 10)).await, Ok(true));

    assert_eq!(
        store.claim(claim_at(&key, owner, 0, 500, 10_000)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(
        store.mark_unknown(mark(&key, stranger, 10)).await,
        Ok(false)
    );
    assert!(matches!(
        record(&store, &key, 10).await.state,
        RecordState::InProgress { .. }
    ));
    let (marked, trips) = costs(&store, store.mark_unknown(mark(&key, owner, 20))).await;
    assert_eq!(marked, Ok(true));
    assert_eq!(trips, 1, "marking unknown is one round trip");
    let unknown = record(&store, &key, 20).await;
    assert_eq!(
        unknown.state,
        RecordState::OutcomeUnknown {
            owner,
            lease_until: at(500),
            since: at(0)
        }
    );
    assert_eq!(
        (unknown.fence, unknown.created_at, unknown.expires_at),
        (1, at(0), at(10_000))
    );
    assert_eq!(unknown.fingerprint, fp(7));
    // neither completed nor released nor marked again, by its owner or anyone
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                owner,
                &ok_envelope(),
                at(30)
            ))
            .await,
        Ok(Completion::Fenced)
    );
    assert_eq!(store.release(&key, owner).await, Ok(false));
    assert_eq!(store.mark_unknown(mark(&key, owner, 30)).await, Ok(false));
    // a claim finds it live, as it is
    match store.claim(claim_at(&key, stranger, 30, 130, 1_030)).await {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, unknown),
        other => panic!("the unknown record, got {other:?}"),
    }
    assert_eq!(record(&store, &key, 30).await, unknown, "unchanged");
    // take over: only with the seen owner and the seen lease
    let takeover = |seen_owner, seen_lease_until: u64| TakeoverRequest {
        key: &key,
        seen_owner,
        seen_lease_until: at(seen_lease_until),
        owner: successor,
        now: at(40),
        lease_until: at(140),
        expires_at: at(10_040),
        fence: unknown.fence + 1,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(store.take_over(takeover(stranger, 500)).await, Ok(false));
    assert_eq!(store.take_over(takeover(owner, 499)).await, Ok(false));
    assert_eq!(record(&store, &key, 40).await, unknown, "unchanged");
    assert_eq!(store.take_over(takeover(owner, 500)).await, Ok(true));
    let taken = record(&store, &key, 40).await;
    assert_eq!(
        taken.state,
        RecordState::InProgress {
            owner: successor,
            lease_until: at(140)
        }
    );
    assert_eq!(
        (taken.fence, taken.created_at, taken.expires_at),
        (2, at(40), at(10_040))
    );
    // the old owner is fenced; the new one finishes normally
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                owner,
                &ok_envelope(),
                at(50)
            ))
            .await,
        Ok(Completion::Fenced)
    );
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                successor,
                &ok_envelope(),
                at(50)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert!(matches!(
        record(&store, &key, 50).await.state,
        RecordState::Completed { .. }
    ));

    // past its expiry (1_000; lease lapsed at 100) a claim in progress is live (S8): its owner
    // marks it unknown, and the unknown outcome is neither expired nor claimed over, a year on
    let overdue = raw_key(7);
    assert_eq!(
        store.claim(claim_at(&overdue, owner, 0, 100, 1_000)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(
        store.mark_unknown(mark(&overdue, owner, 1_000)).await,
        Ok(true),
        "in progress at its expiry"
    );
    let held = record(&store, &overdue, 1_000).await;
    assert_eq!(
        held.state,
        RecordState::OutcomeUnknown {
            owner,
            lease_until: at(100),
            since: at(0)
        }
    );
    assert_eq!(
        (held.fence, held.created_at, held.expires_at),
        (1, at(0), at(1_000))
    );
    let year_on = 1_000 + YEAR_MS;
    assert_eq!(record(&store, &overdue, year_on).await, held);
    match store
        .claim(claim_at(
            &overdue,
            stranger,
            year_on,
            year_on + 100,
            year_on + 1_000,
        ))
        .await
    {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, held),
        other => panic!("the overdue unknown outcome, got {other:?}"),
    }
    assert_eq!(record(&store, &overdue, year_on).await, held, "unchanged");
}

/// One year, in ms.
const YEAR_MS: u64 = 365 * 86_400_000;

/// How many claims of one store trigger its background garbage collection (the store's
/// `COLLECT_EVERY`); the test below fails if that collection never ran.
const CLAIMS_PER_COLLECTION: u64 = 1024;

/// Plants a record that is garbage by every clock (completed at 1.1 s after the epoch,
/// expired at 2 s), returns its key.
async fn plant_garbage(store: &PostgresStore, n: u64) -> IdempotencyKey {
    let key = plant_stale_claim(store, n).await;
    let RecordState::InProgress { owner, .. } = record(store, &key, 1_000).await.state else {
        panic!("{key}: the claim just planted is in progress")
    };
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                owner,
                &ok_envelope(),
                at(1_100)
            ))
            .await,
        Ok(Completion::Saved)
    );
    key
}

/// Plants a claim in progress as old as the garbage of `plant_garbage` (expires_at 2 s after
/// the epoch, its lease lapsed at 1.5 s): its owner is long gone, but it is not completed, so
/// it is never garbage (G1, S8). Returns its key.
async fn plant_stale_claim(store: &PostgresStore, n: u64) -> IdempotencyKey {
    let key = raw_key(n);
    assert_eq!(
        store
            .claim(claim_at(&key, OwnerToken::random(), 1_000, 1_500, 2_000))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    key
}

/// Waits (up to 10 s) until the background collection deleted `key` (planted garbage): proof
/// that a collection ran.
async fn collected(store: &PostgresStore, key: &IdempotencyKey) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.read(key, at(1_000)).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "no background collection deleted the planted garbage {key}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `count` claims of fresh keys (from `first` on) by a worker whose clock reads `now`.
async fn claim_many(store: &PostgresStore, first: u64, count: u64, now: Timestamp) {
    let now = now.as_millis();
    for n in first..first + count {
        let key = raw_key(n);
        let claim = store
            .claim(claim_at(
                &key,
                OwnerToken::random(),
                now,
                now + 60_000,
                now + 86_400_000,
            ))
            .await;
        assert!(matches!(claim, Ok(Claim::Acquired { .. })), "{claim:?}");
    }
}

// pins G1, S8: a worker whose clock runs a year ahead claims thousands of other keys (each 1024th
// claim of its store starts a background collection, whose cutoff by that worker's clock alone
// would be a year ahead): neither the in-progress claim of a worker with a correct clock nor,
// later, that claim's completed outcome, nor another completed record, is deleted, while planted
// garbage (completed and expired by every clock) is, which shows that the collections ran; a
// planted claim in progress that expired as long ago (its owner gone) is never collected: it is
// not completed
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_a_year_ahead_collects_nothing_live() {
    let schema = Schema::fresh();
    let (correct, ahead) = (schema.store(), schema.store());
    let now = SystemClock.now().as_millis();
    let future = at(now + YEAR_MS);
    let (running, done) = (raw_key(10), raw_key(11));
    let (runner, finisher) = (OwnerToken::random(), OwnerToken::random());
    assert_eq!(
        correct
            .claim(claim_at(
                &running,
                runner,
                now,
                now + 60_000,
                now + 86_400_000
            ))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(
        correct
            .claim(claim_at(
                &done,
                finisher,
                now,
                now + 60_000,
                now + 86_400_000
            ))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let saved = Envelope::from_stored("{\"refund\":\"r_1\"}".to_owned());
    assert_eq!(
        correct
            .complete(crate::support::complete_request(
                &done,
                finisher,
                &saved,
                at(now + 1)
            ))
            .await,
        Ok(Completion::Saved)
    );

    let stale = plant_stale_claim(&correct, 14).await;
    let stale_record = record(&correct, &stale, 1_000).await;
    let garbage = plant_garbage(&correct, 12).await;
    claim_many(&ahead, 1_000_000, CLAIMS_PER_COLLECTION, future).await;
    collected(&correct, &garbage).await;
    let later = SystemClock.now().as_millis();
    assert_eq!(
        record(&correct, &stale, later).await,
        stale_record,
        "the stale claim in progress is not garbage"
    );
    assert_eq!(
        record(&correct, &running, later).await.state,
        RecordState::InProgress {
            owner: runner,
            lease_until: at(now + 60_000)
        },
        "the live claim survived"
    );
    // the correct worker heartbeats and finishes: its record was never lost
    assert_eq!(
        correct
            .renew(RenewRequest {
                key: &running,
                owner: runner,
                now: at(later),
                lease_until: at(later + 60_000),
            })
            .await,
        Ok(true)
    );
    assert_eq!(
        correct
            .complete(crate::support::complete_request(
                &running,
                runner,
                &saved,
                at(later)
            ))
            .await,
        Ok(Completion::Saved)
    );

    let garbage = plant_garbage(&correct, 13).await;
    claim_many(&ahead, 2_000_000, CLAIMS_PER_COLLECTION, future).await;
    collected(&correct, &garbage).await;
    let later = SystemClock.now().as_millis();
    for key in [&running, &done] {
        match record(&correct, key, later).await.state {
            RecordState::Completed { outcome, .. } => assert_eq!(outcome.as_str(), saved.as_str()),
            other => panic!("{key}: the completed outcome survived, got {other:?}"),
        }
    }
    assert_eq!(
        record(&correct, &stale, later).await,
        stale_record,
        "still not garbage"
    );
}

// pins G1, S8: collect_garbage(now) is judged by `now` and by the server's clock: with a `now` a
// year ahead of the server it deletes only completed records expired by both clocks, never one the
// server sees live, and never a record that is not completed, however long ago it expired and
// whatever its lease: in progress (its lease lapsed or still running), outcome unknown (likewise),
// decided not applied
#[tokio::test]
async fn collect_garbage_keeps_what_the_server_sees_live() {
    let schema = Schema::fresh();
    let store = schema.store();
    let now = SystemClock.now().as_millis();
    let day = 86_400_000;
    let owner = OwnerToken::random();
    let keys: Vec<IdempotencyKey> = (20..28).map(raw_key).collect();
    let [stale, dead_done, leased, leased_unknown, lapsed_unknown, decided, live, live_done] =
        &keys[..]
    else {
        unreachable!()
    };
    for (key, claim) in [
        (stale, claim_at(stale, owner, 1_000, 1_500, 2_000)),
        (dead_done, claim_at(dead_done, owner, 1_000, 1_500, 2_000)),
        (leased, claim_at(leased, owner, 1_000, now + day, 2_000)),
        (
            leased_unknown,
            claim_at(leased_unknown, owner, 1_000, now + day, 2_000),
        ),
        (
            lapsed_unknown,
            claim_at(lapsed_unknown, owner, 1_000, 1_500, 2_000),
        ),
        (decided, claim_at(decided, owner, 1_000, 1_500, 2_000)),
        (live, claim_at(live, owner, now, now + 60_000, now + day)),
        (
            live_done,
            claim_at(live_done, owner, now, now + 60_000, now + day),
        ),
    ] {
        assert_eq!(
            store.claim(claim).await,
            Ok(Claim::Acquired {
                fence: 1,
                reopened: false
            }),
            "{key}"
        );
    }
    for (key, at_ms) in [(dead_done, 1_100), (live_done, now)] {
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    key,
                    owner,
                    &ok_envelope(),
                    at(at_ms)
                ))
                .await,
            Ok(Completion::Saved)
        );
    }
    for key in [leased_unknown, lapsed_unknown, decided] {
        let unknown = MarkUnknownRequest {
            key,
            owner,
            now: at(1_100),
            since: at(1_000),
            entry: crate::support::unknown_entry(),
        };
        assert_eq!(store.mark_unknown(unknown).await, Ok(true), "{key}");
    }
    assert!(decide_not_applied(&store, decided, owner, 1_500, 1, 1_200).await);

    assert_eq!(store.collect_garbage(at(now + YEAR_MS)).await, Ok(1));
    assert_eq!(store.read(dead_done, at(1_000)).await, Ok(None));
    assert_eq!(
        schema.admin_value(&format!(
            "SELECT count(*) FROM {{schema}}.records WHERE key = '{dead_done}'"
        )),
        Some("0".to_owned()),
        "the expired outcome is deleted"
    );
    // not completed: kept, and live a year on, past its expiry (S8)
    assert_eq!(
        record(&store, stale, now + YEAR_MS).await.state,
        RecordState::InProgress {
            owner,
            lease_until: at(1_500)
        }
    );
    assert!(matches!(
        record(&store, leased, now + YEAR_MS).await.state,
        RecordState::InProgress { .. }
    ));
    for key in [leased_unknown, lapsed_unknown] {
        assert!(
            matches!(
                record(&store, key, now + YEAR_MS).await.state,
                RecordState::OutcomeUnknown { .. }
            ),
            "{key}"
        );
    }
    assert_eq!(
        record(&store, decided, now + YEAR_MS).await.state,
        RecordState::NotApplied {
            decided_at: at(1_200)
        }
    );
    assert!(matches!(
        record(&store, live, now).await.state,
        RecordState::InProgress { .. }
    ));
    assert!(matches!(
        record(&store, live_done, now).await.state,
        RecordState::Completed { .. }
    ));
    assert_eq!(store.collect_garbage(at(now + YEAR_MS)).await, Ok(0));
}

/// The records table of schema version 1 (this crate before fencing tokens), as that build
/// created it.
const SCHEMA_V1: &str = "
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE {schema}.records (
        key          TEXT PRIMARY KEY,
        fingerprint  TEXT NOT NULL,
        created_at   BIGINT NOT NULL,
        expires_at   BIGINT NOT NULL,
        owner        TEXT,
        lease_until  BIGINT,
        outcome      TEXT,
        completed_at BIGINT,
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL))
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 1);";

// pins F1, S3, S10, P4, U7 (migration): a schema of version 1, written by hand as the older build
// wrote it, is upgraded in place to version 4 on first use — by two stores starting together, once
// — (the fence, the unknown mark, the label, the outcome's source, the decision time and the
// history columns; the unnamed state check replaced by `records_state`) and keeps every record: a
// completed record replays its outcome byte for byte, with source executed and an empty history;
// an in-progress record (fence 1, no label) can be taken over (fence 2, labelled) and completed,
// its history starting with that takeover; an expired completed one is claimed again with fence 2,
// a label and a new history
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated_in_place() {
    let schema = Schema::fresh();
    schema.admin(SCHEMA_V1);
    let (running, done, expired) = (raw_key(30), raw_key(31), raw_key(32));
    let old_owner = OwnerToken::random();
    let outcome = "{\"ok\":{\"refund\":\"r_9\",\"amount\":1.50}}";
    let fingerprint = fp(7);
    let f = fingerprint.as_str();
    schema.admin(&format!(
        "INSERT INTO {{schema}}.records VALUES
            ('{running}', '{f}', 1000, 100000, '{owner}', 2000, NULL, NULL),
            ('{done}', '{f}', 1000, 100000, NULL, NULL, '{outcome}', 1500),
            ('{expired}', '{f}', 1000, 3000, NULL, NULL, '{outcome}', 1500);",
        owner = old_owner.to_hex(),
    ));
    assert_eq!(schema.version(), Some(1));

    // two stores (two pools) start together on the old schema: one migrates, both read
    let (first, second) = (schema.store(), schema.store());
    let (a, b) = tokio::join!(
        first.read(&done, at(5_000)),
        second.read(&running, at(5_000))
    );
    let (done_record, running_record) = (a.unwrap().unwrap(), b.unwrap().unwrap());
    assert_eq!(schema.version(), Some(POSTGRES_SCHEMA_VERSION));
    assert_eq!(
        schema.admin_value(&format!(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_schema = '{}' AND table_name = 'records'",
            schema.name
        )),
        Some("21".to_owned()),
        "fence, unknown_since, the four label columns, the five of version 4 and the two of version 5 added"
    );
    assert_eq!(
        added_columns(&schema, 8),
        "fence,unknown_since,tool,namespace,scope,key_args,\
         source,decided_at,history,history_len,history_dropped,approval_at,approval_until"
    );
    assert_eq!(
        record_checks(&schema),
        "records_fence_positive,records_state,records_unknown_has_owner"
    );
    assert_eq!(
        done_record,
        Record {
            fingerprint: fingerprint.clone(),
            created_at: at(1_000),
            expires_at: at(100_000),
            fence: 1,
            state: RecordState::Completed {
                outcome: Envelope::from_stored(outcome.to_owned()),
                completed_at: at(1_500),
                source: idem_runtime::OutcomeSource::Executed,
            },
            label: None,
        }
    );
    assert_eq!(
        running_record,
        Record {
            fingerprint: fingerprint.clone(),
            created_at: at(1_000),
            expires_at: at(100_000),
            fence: 1,
            state: RecordState::InProgress {
                owner: old_owner,
                lease_until: at(2_000),
            },
            label: None,
        }
    );
    // the old records have no history until their next transition (U7)
    for key in [&done, &running, &expired] {
        assert_eq!(
            first.history(key, at(2_500)).await,
            Ok(Some(History::default())),
            "{key}"
        );
    }
    // the old records work as new ones: a replay, a takeover, a completion, a re-claim
    match first
        .claim(claim_at(&done, OwnerToken::random(), 5_000, 6_000, 9_000))
        .await
    {
        Ok(Claim::Existing(existing)) => assert_eq!(existing, done_record),
        other => panic!("the completed record, got {other:?}"),
    }
    let successor = OwnerToken::random();
    let takeover = TakeoverRequest {
        key: &running,
        seen_owner: old_owner,
        seen_lease_until: at(2_000),
        owner: successor,
        now: at(5_000),
        lease_until: at(6_000),
        expires_at: at(100_000),
        fence: running_record.fence + 1,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(second.take_over(takeover).await, Ok(true));
    let taken = record(&first, &running, 5_000).await;
    assert_eq!((taken.fence, taken.label.as_ref()), (2, Some(&*LABEL)));
    assert_eq!(
        first
            .complete(crate::support::complete_request(
                &running,
                successor,
                &ok_envelope(),
                at(5_100)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(
        events(&first, &running, 5_100).await,
        [
            HistoryEvent::TakenOver {
                cause: idem_runtime::store::UnknownReason::LeaseLapsed
            },
            HistoryEvent::Completed {
                source: idem_runtime::OutcomeSource::Executed
            }
        ]
    );
    let reclaimer = OwnerToken::random();
    assert_eq!(
        second
            .claim(claim_at(&expired, reclaimer, 5_000, 6_000, 9_000))
            .await,
        Ok(Claim::Acquired {
            fence: 2,
            reopened: false
        })
    );
    assert_eq!(
        record(&first, &expired, 5_000).await.label.as_ref(),
        Some(&*LABEL)
    );
    assert_eq!(
        first.history(&expired, at(5_000)).await,
        Ok(Some(History {
            entries: vec![idem_runtime::store::HistoryEntry::claimed(
                at(5_000),
                2,
                reclaimer
            )],
            dropped: 0
        }))
    );
    // the replayed record still has no history: a replay writes nothing
    assert_eq!(
        first.history(&done, at(5_000)).await,
        Ok(Some(History::default()))
    );
    // a store opened later finds version 4 and changes nothing
    let third = schema.store();
    assert_eq!(record(&third, &done, 5_000).await, done_record);
    assert_eq!(schema.version(), Some(POSTGRES_SCHEMA_VERSION));
}

// pins S10 (migration): a migration that fails (here a version 1 table that already has a column
// named `fence`) is rolled back whole: the store reports a typed, non-transient error, and the
// schema keeps version 1 and its records
#[tokio::test]
async fn a_failed_migration_changes_nothing() {
    let schema = Schema::fresh();
    schema.admin(SCHEMA_V1);
    schema.admin("ALTER TABLE {schema}.records ADD COLUMN fence TEXT");
    let key = raw_key(40);
    schema.admin(&format!(
        "INSERT INTO {{schema}}.records VALUES
            ('{key}', '{}', 1000, 100000, NULL, NULL, '{{}}', 1500, 'x')",
        fp(7).as_str()
    ));
    let error = schema.store().read(&key, at(5_000)).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
    assert!(error.message.contains("42701"), "duplicate column: {error}");
    assert_eq!(schema.version(), Some(1));
    assert_eq!(
        schema.admin_value(&format!(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_schema = '{}' AND table_name = 'records'
             AND column_name = 'unknown_since'",
            schema.name
        )),
        Some("0".to_owned()),
        "no column added"
    );
    assert_eq!(
        schema.admin_value("SELECT fence FROM {schema}.records"),
        Some("x".to_owned())
    );
}

// ---- labels, the version 2 upgrade, and inspection served by indexes (issue 9) ----

/// The schema of version 2 (fencing tokens and unknown outcomes, no labels), as that build
/// created it.
const SCHEMA_V2: &str = "
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE {schema}.records (
        key           TEXT PRIMARY KEY,
        fingerprint   TEXT NOT NULL,
        created_at    BIGINT NOT NULL,
        expires_at    BIGINT NOT NULL,
        owner         TEXT,
        lease_until   BIGINT,
        outcome       TEXT,
        completed_at  BIGINT,
        fence         BIGINT NOT NULL DEFAULT 1,
        unknown_since BIGINT,
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL)),
        CONSTRAINT records_fence_positive CHECK (fence >= 1),
        CONSTRAINT records_unknown_has_owner CHECK (unknown_since IS NULL OR owner IS NOT NULL)
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 2);";

/// The names of the columns of `schema`'s records table after the first `after`, in
/// table order.
fn added_columns(schema: &Schema, after: u32) -> String {
    schema
        .admin_value(&format!(
            "SELECT string_agg(column_name, ',' ORDER BY ordinal_position)
             FROM information_schema.columns
             WHERE table_schema = '{}' AND table_name = 'records' AND ordinal_position > {after}",
            schema.name
        ))
        .unwrap_or_default()
}

/// The names of the check constraints on `schema`'s records table, sorted.
fn record_checks(schema: &Schema) -> String {
    schema
        .admin_value(&format!(
            "SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
             WHERE conrelid = '\"{}\".records'::regclass AND contype = 'c'",
            schema.name
        ))
        .unwrap_or_default()
}

/// The events of `key`'s history at `now`, oldest first.
async fn events(store: &PostgresStore, key: &IdempotencyKey, now: u64) -> Vec<HistoryEvent> {
    store
        .history(key, at(now))
        .await
        .expect("history")
        .unwrap_or_else(|| panic!("a live record of {key} at {now}"))
        .entries
        .into_iter()
        .map(|entry| entry.event)
        .collect()
}

/// The names of the indexes on `schema`'s records table, sorted.
fn record_indexes(schema: &Schema) -> String {
    schema
        .admin_value(&format!(
            "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes
             WHERE schemaname = '{}' AND tablename = 'records'",
            schema.name
        ))
        .unwrap_or_default()
}

// pins P4, S3, F1, I3, I5, U7: a schema of version 2, written by hand as that build wrote it, is
// upgraded in place to version 4 on first use (four label columns, three listing indexes, the
// five columns of version 4, the state check `records_state`); a call saved before the upgrade
// replays through the engine (the body does not run) with source executed, and reads, lists and
// counts with no label and an empty history; a new call stores its label and its history; a
// record whose outcome is unknown keeps its state and fence, and a takeover labels it and starts
// its history
#[tokio::test]
async fn a_version_2_schema_is_upgraded_in_place() {
    // the outcome a version 2 build saved for a call: made here by a current store, copied
    let donor = Harness::on(postgres());
    let ctx = donor.ctx("conv_v2");
    assert_eq!(refund(default_spec(), &ctx, &donor.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    let saved = donor.store.read(&key, donor.now()).await.unwrap().unwrap();
    let RecordState::Completed { outcome, .. } = &saved.state else {
        panic!("completed: {saved:?}")
    };

    let schema = Schema::fresh();
    schema.admin(SCHEMA_V2);
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let now = h.now().as_millis();
    let (unknown, owner) = (raw_key(50), OwnerToken::random());
    schema.admin(&format!(
        "INSERT INTO {{schema}}.records VALUES
            ('{key}', '{f}', {now}, {expires}, NULL, NULL, '{outcome}', {now}, 3, NULL),
            ('{unknown}', '{f}', {now}, {expires}, '{owner}', {lease}, NULL, NULL, 2, {now});",
        f = saved.fingerprint.as_str(),
        expires = now + 86_400_000,
        outcome = outcome.as_str().replace('\'', "''"),
        owner = owner.to_hex(),
        lease = now + 60_000,
    ));
    assert_eq!(schema.version(), Some(2));

    let replay_ctx = h.ctx("conv_v2");
    assert_eq!(
        refund(default_spec(), &replay_ctx, &h.log, 1).await,
        Ok(100)
    );
    assert_eq!(h.log.len(), 0, "replayed: the body did not run");
    let replayed = replay_ctx.last_outcome().unwrap();
    assert_eq!(
        (
            replayed.key.clone(),
            replayed.status,
            replayed.source,
            replayed.fence
        ),
        (
            key.clone(),
            idem_runtime::CallStatus::Replayed,
            idem_runtime::OutcomeSource::Executed,
            3
        )
    );
    assert_eq!(schema.version(), Some(POSTGRES_SCHEMA_VERSION));
    assert_eq!(
        added_columns(&schema, 10),
        "tool,namespace,scope,key_args,source,decided_at,history,history_len,history_dropped,\
         approval_at,approval_until"
    );
    assert_eq!(
        record_checks(&schema),
        "records_fence_positive,records_state,records_unknown_has_owner"
    );
    assert_eq!(
        record_indexes(&schema),
        "records_created,records_expires_at,records_pkey,records_scope,records_tool_created"
    );
    let old = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert_eq!((old.fence, &old.label), (3, &None));
    assert!(
        matches!(
            old.state,
            RecordState::Completed {
                source: idem_runtime::OutcomeSource::Executed,
                ..
            }
        ),
        "{old:?}"
    );
    let held = h.store.read(&unknown, h.now()).await.unwrap().unwrap();
    assert!(
        matches!(held.state, RecordState::OutcomeUnknown { .. }),
        "{held:?}"
    );
    assert_eq!((held.fence, held.label), (2, None));
    for k in [&key, &unknown] {
        assert_eq!(
            h.store.history(k, h.now()).await,
            Ok(Some(History::default())),
            "{k}: no history before the upgrade, and a replay writes none"
        );
    }

    // a new call is labelled; the listing and the counts show the old records unlabelled
    let ctx = h.ctx("conv_v2");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 2).await, Ok(200));
    let new_key = ctx.last_outcome().unwrap().key;
    let new = h.store.read(&new_key, h.now()).await.unwrap().unwrap();
    let new_events: Vec<_> = h
        .store
        .history(&new_key, h.now())
        .await
        .unwrap()
        .unwrap()
        .entries
        .into_iter()
        .map(|entry| entry.event)
        .collect();
    assert_eq!(
        new_events,
        [
            HistoryEvent::Claimed,
            HistoryEvent::Completed {
                source: idem_runtime::OutcomeSource::Executed
            }
        ]
    );
    assert_eq!(
        new.label,
        Some(idem_runtime::RecordLabel::new(
            "send_refund",
            idem_runtime::ScopePath::new().with("conversation", "conv_v2")
        ))
    );
    let listed = h.store.list(&ListQuery::new(), h.now()).await.unwrap();
    assert_eq!(listed.records.len(), 3);
    let labelled: Vec<_> = listed
        .records
        .iter()
        .map(|r| (r.key.clone(), r.record.label.is_some()))
        .collect();
    assert!(labelled.contains(&(key.clone(), false)), "{labelled:?}");
    assert!(labelled.contains(&(new_key.clone(), true)), "{labelled:?}");
    let by_tool = |tool: &str| {
        let query = ListQuery::new().tool(tool);
        let store = h.store.clone();
        let now = h.now();
        async move { store.list(&query, now).await.unwrap().records.len() }
    };
    assert_eq!(by_tool("send_refund").await, 1);
    assert_eq!(
        by_tool("").await,
        2,
        "unlabelled records list under the tool \"\""
    );
    let stats = h.store.stats(h.now()).await.unwrap();
    assert_eq!(stats.by_tool[""].completed, 1);
    assert_eq!(stats.by_tool[""].outcome_unknown, 1);
    assert_eq!(stats.by_tool["send_refund"].completed, 1);

    // a takeover of the unknown outcome labels it
    let takeover = TakeoverRequest {
        key: &unknown,
        seen_owner: owner,
        seen_lease_until: at(now + 60_000),
        owner: OwnerToken::random(),
        now: h.now(),
        lease_until: at(now + 120_000),
        expires_at: at(now + 86_400_000),
        fence: 3,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert_eq!(h.store.take_over(takeover).await, Ok(true));
    let taken = h.store.read(&unknown, h.now()).await.unwrap().unwrap();
    assert_eq!((taken.fence, taken.label.as_ref()), (3, Some(&*LABEL)));
    assert_eq!(
        h.store.history(&unknown, h.now()).await,
        Ok(Some(History {
            entries: vec![crate::support::takeover_entry()],
            dropped: 0
        }))
    );
}

// ---- the version 3 upgrade: history, outcome source, not applied (issue 17) ----

/// The schema of version 3 (labels and listing indexes; no history, no outcome source, no
/// "not applied" state), as that build created it: its state check has no name of its own
/// (PostgreSQL calls it `records_check`).
const SCHEMA_V3: &str = "
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE {schema}.records (
        key           TEXT PRIMARY KEY,
        fingerprint   TEXT NOT NULL,
        created_at    BIGINT NOT NULL,
        expires_at    BIGINT NOT NULL,
        owner         TEXT,
        lease_until   BIGINT,
        outcome       TEXT,
        completed_at  BIGINT,
        fence         BIGINT NOT NULL DEFAULT 1,
        unknown_since BIGINT,
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL)),
        CONSTRAINT records_fence_positive CHECK (fence >= 1),
        CONSTRAINT records_unknown_has_owner
            CHECK (unknown_since IS NULL OR owner IS NOT NULL),
        tool          TEXT,
        namespace     TEXT,
        scope         TEXT COLLATE \"C\",
        key_args      TEXT
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    CREATE INDEX records_created ON {schema}.records (created_at, key COLLATE \"C\");
    CREATE INDEX records_tool_created ON {schema}.records (tool, created_at, key COLLATE \"C\");
    CREATE INDEX records_scope ON {schema}.records (scope);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 3);";

// pins P4, U7, U6, S3, S8, G1, I7: a schema of version 3, written by hand as that build wrote it,
// is upgraded in place to version 4 on first use (the outcome's source, the decision time and the
// history columns added; its unnamed state check replaced by `records_state`; the indexes kept):
// a call saved before the upgrade replays through the engine (the body does not run) with its
// label, source executed and an empty history; a record marked unknown before the upgrade keeps
// its state and can be decided not applied (a row with neither owner nor outcome, which the old
// check forbade), after which the next claim reopens it with the next fence and a history of the
// decision and the claim; a claim in progress that expired long before the upgrade, its lease
// lapsed, is live (S8), counted as outcome unknown (I7) and never collected (G1)
#[tokio::test]
async fn a_version_3_schema_is_upgraded_in_place() {
    // the outcome a version 3 build saved for a call: made here by a current store, copied
    let donor = Harness::on(postgres());
    let ctx = donor.ctx("conv_v3");
    assert_eq!(refund(default_spec(), &ctx, &donor.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    let saved = donor.store.read(&key, donor.now()).await.unwrap().unwrap();
    let RecordState::Completed { outcome, .. } = &saved.state else {
        panic!("completed: {saved:?}")
    };
    let label = saved.label.clone().expect("a labelled record");

    let schema = Schema::fresh();
    schema.admin(SCHEMA_V3);
    let store = schema.store();
    let h = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let now = h.now().as_millis();
    let (unknown, stale, owner) = (raw_key(80), raw_key(81), OwnerToken::random());
    schema.admin(&format!(
        "INSERT INTO {{schema}}.records VALUES
            ('{key}', '{f}', {now}, {expires}, NULL, NULL, '{outcome}', {now}, 2, NULL,
             '{tool}', NULL, '{scope}', NULL),
            ('{unknown}', '{f7}', {now}, {expires}, '{owner}', {lease}, NULL, NULL, 2, {now},
             'conformance', NULL, 'conversation=c-1', NULL),
            ('{stale}', '{f7}', 1000, 2000, '{owner}', 1500, NULL, NULL, 1, NULL,
             'conformance', NULL, 'conversation=c-1', NULL);",
        f = saved.fingerprint.as_str(),
        f7 = fp(7).as_str(),
        expires = now + 86_400_000,
        outcome = outcome.as_str().replace('\'', "''"),
        tool = label.tool,
        scope = label.scope,
        owner = owner.to_hex(),
        lease = now + 60_000,
    ));
    assert_eq!(schema.version(), Some(3));
    let indexes = record_indexes(&schema);

    // the saved call replays: the body does not run; source executed, as before the upgrade
    let replay_ctx = h.ctx("conv_v3");
    assert_eq!(
        refund(default_spec(), &replay_ctx, &h.log, 1).await,
        Ok(100)
    );
    assert_eq!(h.log.len(), 0, "replayed: the body did not run");
    let replayed = replay_ctx.last_outcome().unwrap();
    assert_eq!(
        (
            replayed.key.clone(),
            replayed.status,
            replayed.source,
            replayed.fence
        ),
        (
            key.clone(),
            idem_runtime::CallStatus::Replayed,
            idem_runtime::OutcomeSource::Executed,
            2
        )
    );
    assert_eq!(schema.version(), Some(POSTGRES_SCHEMA_VERSION));
    assert_eq!(
        added_columns(&schema, 14),
        "source,decided_at,history,history_len,history_dropped,approval_at,approval_until"
    );
    assert_eq!(
        record_checks(&schema),
        "records_fence_positive,records_state,records_unknown_has_owner"
    );
    assert_eq!(record_indexes(&schema), indexes, "the indexes kept");
    let old = record(&store, &key, now).await;
    assert_eq!((old.fence, old.label.as_ref()), (2, Some(&label)));
    assert_eq!(
        old.state,
        RecordState::Completed {
            outcome: outcome.clone(),
            completed_at: at(now),
            source: idem_runtime::OutcomeSource::Executed
        }
    );
    let held = record(&store, &unknown, now).await;
    assert_eq!(
        (held.fence, held.label.as_ref(), &held.state),
        (
            2,
            Some(&*LABEL),
            &RecordState::OutcomeUnknown {
                owner,
                lease_until: at(now + 60_000),
                since: at(now)
            }
        )
    );
    for k in [&key, &unknown, &stale] {
        assert_eq!(
            store.history(k, at(now)).await,
            Ok(Some(History::default())),
            "{k}: no history before the upgrade, and a replay writes none"
        );
    }

    // the claim that expired long before the upgrade: live, counted as outcome unknown, kept
    let overdue = record(&store, &stale, now).await;
    assert_eq!(
        (overdue.fence, overdue.expires_at, &overdue.state),
        (
            1,
            at(2_000),
            &RecordState::InProgress {
                owner,
                lease_until: at(1_500)
            }
        )
    );
    let stats = store.stats(at(now)).await.unwrap();
    assert_eq!(stats.by_tool["conformance"].outcome_unknown, 2);
    assert_eq!(stats.by_tool["conformance"].in_progress, 0);
    assert_eq!(stats.by_tool[&label.tool].completed, 1);
    assert_eq!(store.collect_garbage(at(now)).await, Ok(0));
    assert_eq!(record(&store, &stale, now).await, overdue, "not collected");

    // the unknown outcome decided not applied: a row the old check forbade
    assert!(decide_not_applied(&store, &unknown, owner, now + 60_000, 2, now + 10).await);
    assert_eq!(
        record(&store, &unknown, now + 20).await.state,
        RecordState::NotApplied {
            decided_at: at(now + 10)
        }
    );
    let reclaimer = OwnerToken::random();
    assert_eq!(
        store
            .claim(claim_at(
                &unknown,
                reclaimer,
                now + 20,
                now + 120,
                now + 86_400_000
            ))
            .await,
        Ok(Claim::Acquired {
            fence: 3,
            reopened: true
        })
    );
    let history = store
        .history(&unknown, at(now + 20))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(history.dropped, 0);
    assert_eq!(
        history
            .entries
            .iter()
            .map(|entry| (&entry.event, entry.fence))
            .collect::<Vec<_>>(),
        [
            (
                &HistoryEvent::Resolved {
                    decision: DecisionKind::NotApplied
                },
                0
            ),
            (&HistoryEvent::Claimed, 3)
        ]
    );
    assert_eq!(
        history.entries[1],
        idem_runtime::store::HistoryEntry::claimed(at(now + 20), 3, reclaimer)
    );
}

/// Fills `schema`'s records table with `rows` completed records, analysed: tool
/// `tool_<n % 20>`, scope `conversation=c-<n % 500>` (every other one within a call),
/// created at `1000 + n`, live until 10¹².
fn fill(schema: &Schema, rows: u64) {
    schema.admin(&format!(
        "INSERT INTO {{schema}}.records
             (key, fingerprint, created_at, expires_at, outcome, completed_at, tool, scope)
         SELECT lpad(to_hex(g), 64, '0'), repeat('07', 32), 1000 + g, 1000000000000,
                '{{\"ok\":1}}', 1000 + g, 'tool_' || (g % 20),
                'conversation=c-' || (g % 500)
                    || CASE WHEN g % 2 = 0 THEN '/call=x' || g ELSE '' END
         FROM generate_series(1, {rows}) AS g;
         ANALYZE {{schema}}.records;"
    ));
}

// pins I3: listings are served by indexes, not by scanning the table: on 20 000 analysed records,
// a tool filter reads `records_tool_created`, a scope prefix `records_scope`, the bare listing
// and a page after a cursor `records_created` (the plans are the server's own, through
// `explain_list`); and the scope prefix matches whole parts only (`c-7` is not `c-70`, `c-7.5`
// or `c-7/x`)
#[tokio::test]
async fn listings_are_served_by_indexes() {
    let schema = Schema::fresh();
    let store = schema.store();
    let now = at(5_000_000);
    assert_eq!(store.stats(now).await.unwrap().total.total(), 0);
    fill(&schema, 20_000);
    for (n, value) in [(1u64, "c-7.5"), (2, "c-7/x"), (3, "c-7")] {
        let label = idem_runtime::RecordLabel::new(
            "tool_3",
            idem_runtime::ScopePath::new().with("conversation", value),
        );
        let key = raw_key(1_000_000 + n);
        let claim = ClaimRequest {
            label: &label,
            ..claim_at(&key, OwnerToken::random(), 4_000_000, 4_100_000, 9_000_000)
        };
        assert!(matches!(
            store.claim(claim).await,
            Ok(Claim::Acquired { .. })
        ));
    }

    let c7 = ListQuery::new().scope(idem_runtime::ScopePath::new().with("conversation", "c-7"));
    let cursor = store
        .list(&ListQuery::new().limit(10), now)
        .await
        .unwrap()
        .next;
    let after = ListQuery::new()
        .limit(10)
        .after(cursor.expect("more than a page"));
    for (name, query, index) in [
        (
            "tool",
            ListQuery::new().tool("tool_3"),
            "records_tool_created",
        ),
        ("scope", c7.clone(), "records_scope"),
        ("everything", ListQuery::new(), "records_created"),
        ("after a cursor", after, "records_created"),
    ] {
        let plan = store.explain_list(&query, now).await.unwrap();
        eprintln!("{name}:\n{plan}\n");
        assert!(plan.contains(index), "{name}: {plan}");
        assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
    }

    // 20 000 / 500 = 40 filled records in c-7 (none in c-70…c-79), and the claim in c-7
    let listed = store.list(&c7.clone().limit(1000), now).await.unwrap();
    assert_eq!(listed.records.len(), 41);
    assert_eq!(listed.next, None);
    for r in &listed.records {
        let scope = r.record.label.as_ref().unwrap().scope.to_string();
        assert!(
            scope == "conversation=c-7" || scope.starts_with("conversation=c-7/"),
            "{scope}"
        );
    }
    let page = store
        .list(&ListQuery::new().tool("tool_3").limit(5), now)
        .await
        .unwrap();
    let created: Vec<u64> = page
        .records
        .iter()
        .map(|r| r.record.created_at.as_millis())
        .collect();
    assert_eq!(
        created,
        [4_000_000, 4_000_000, 4_000_000, 20_983, 20_963],
        "newest first"
    );
}

// pins I3, I4, I5, I7: each inspection operation is one statement: one round trip once its
// statement is prepared on the connection, two before (a listing prepares one per combination of
// filters); the claim counted (its lease lapsed at 2 s, counted at 5 s) is outcome unknown, not in
// progress, and a purge without force keeps it
#[tokio::test]
async fn inspection_costs_one_round_trip() {
    let schema = Schema::fresh();
    let store = schema.store();
    let now = at(5_000);
    let key = raw_key(60);
    assert!(matches!(
        store
            .claim(claim_at(&key, OwnerToken::random(), 1_000, 2_000, 90_000))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    ));
    let by_tool = ListQuery::new().tool("conformance");
    // one task at a time: the pool hands out its one connection every time
    for (round, expected) in [("first", 2), ("prepared", 1)] {
        let (page, cost) = costs(&store, store.list(&by_tool, now)).await;
        assert_eq!(page.unwrap().records.len(), 1);
        assert_eq!(cost, expected, "{round} list");
        let (stats, cost) = costs(&store, store.stats(now)).await;
        let total = stats.unwrap().total;
        assert_eq!(
            (total.in_progress, total.outcome_unknown, total.total()),
            (0, 1, 1),
            "a claim whose lease lapsed counts as outcome unknown"
        );
        assert_eq!(cost, expected, "{round} stats");
        let (kept, cost) = costs(&store, store.purge(&key, false, now)).await;
        assert!(matches!(kept, Ok(PurgeOutcome::Kept(_))), "{kept:?}");
        assert_eq!(cost, expected, "{round} purge");
        let (counts, cost) = costs(&store, store.purge_matching(&by_tool, false, now)).await;
        assert_eq!(counts.map(|c| (c.deleted, c.kept)), Ok((0, 1)));
        assert_eq!(cost, expected, "{round} purge_matching");
    }
    // another combination of filters is another statement: prepared once, then one trip
    let by_scope = ListQuery::new().scope(LABEL.scope.clone());
    let (_, cost) = costs(&store, store.list(&by_scope, now)).await;
    assert_eq!(cost, 2);
    let (_, cost) = costs(&store, store.list(&by_scope.clone().limit(5), now)).await;
    assert_eq!(cost, 1, "the page size is a parameter");
}

// pins I4, G1, S8: a purge deletes only a live record: an expired completed one is absent (left
// to garbage collection, judged by the server's clock too) and the next claim passes its fence
// on; with force, an in-progress one goes and the key is claimed afresh (fence 1). A record in
// progress past its `expires_at` is live (S8): without force it is kept, with force deleted
#[tokio::test]
async fn purge_leaves_expired_outcomes_to_garbage_collection() {
    let schema = Schema::fresh();
    let store = schema.store();
    let key = raw_key(70);
    let first = OwnerToken::random();
    assert_eq!(
        store
            .claim(claim_at(&key, first, 1_000, 2_000, 3_000))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                first,
                &ok_envelope(),
                at(1_500)
            ))
            .await,
        Ok(Completion::Saved)
    );
    assert_eq!(
        store.purge(&key, true, at(3_000)).await,
        Ok(PurgeOutcome::Absent)
    );
    assert_eq!(
        schema.admin_value("SELECT count(*) FROM {schema}.records"),
        Some("1".to_owned()),
        "the expired row stays"
    );
    assert_eq!(
        store
            .claim(claim_at(&key, OwnerToken::random(), 3_000, 4_000, 9_000))
            .await,
        Ok(Claim::Acquired {
            fence: 2,
            reopened: false
        })
    );
    match store.purge(&key, true, at(3_500)).await {
        Ok(PurgeOutcome::Deleted(record)) => {
            assert_eq!((record.fence, record.label.as_ref()), (2, Some(&*LABEL)))
        }
        other => panic!("deleted with force: {other:?}"),
    }
    let overdue = OwnerToken::random();
    assert_eq!(
        store
            .claim(claim_at(&key, overdue, 3_600, 4_000, 9_000))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    // in progress past its expiry (9 s) and its lease (4 s): live, kept without force
    let held = record(&store, &key, 9_000).await;
    assert_eq!(
        held.state,
        RecordState::InProgress {
            owner: overdue,
            lease_until: at(4_000)
        }
    );
    assert_eq!(
        store.purge(&key, false, at(9_000)).await,
        Ok(PurgeOutcome::Kept(held.clone()))
    );
    assert_eq!(record(&store, &key, 9_000).await, held, "kept");
    assert_eq!(
        store.purge(&key, true, at(9_000)).await,
        Ok(PurgeOutcome::Deleted(held))
    );
    assert_eq!(
        schema.admin_value("SELECT count(*) FROM {schema}.records"),
        Some("0".to_owned()),
        "the overdue row is gone"
    );
    assert_eq!(
        store
            .claim(claim_at(&key, OwnerToken::random(), 9_100, 9_200, 19_000))
            .await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
}
