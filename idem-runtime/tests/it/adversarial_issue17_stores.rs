//! Adversarial checks of approvals and held unknown outcomes on the shared-backend stores
//! (SQLite files, PostgreSQL, Redis), with several engines on one store: docs/CONTRACT.md
//! S1a, U1–U7, A1–A6, F1, P4.
//!
//! Every test opens a fresh location (a temporary SQLite file, a private PostgreSQL schema
//! `idem_t17_<hex>` dropped afterwards, a Redis prefix `idem-t17:<hex>:` deleted
//! afterwards) and one store (its own connection or pool) per engine on it; each engine has
//! a manual clock of its own. The tests that kill a process re-run this test binary as a
//! child (`child_process`, ignored, inert without its job variable) and SIGKILL it from the
//! inside at a chosen point.
//!
//! Tests marked `#[ignore = "finding N: …"]` reproduce a break of the contract; the others
//! pin an edge that holds.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::resolve::{Decision, Resolution, ResolveError, Resolved};
use idem_runtime::store::{
    HistoryEvent, ListQuery, OutcomeSource, RecordState, StateFilter, StoreFuture, Target,
    TransitionRequest,
};
use idem_runtime::testkit::{EffectLog, ManualClock};
use idem_runtime::{
    prepare, CallContext, Clock, Engine, Error, IdempotencyKey, OnCancel, OnUnknown, Scope, Store,
    SystemClock, Timestamp, ToolError, ToolSpec,
};
use serde::{Deserialize, Serialize};

use crate::support::{awaiting, is_held, Intercept, Intercepted};

const LEASE_MS: u64 = 1_000;
const VALID_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;
const CONVERSATION: &str = "c-t17";

// ---------------------------------------------------------------------------------------
// Places: one shared location, any number of stores (connections, pools) on it.

/// Where the records of one test live.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Place {
    Sqlite(PathBuf),
    Postgres(String),
    Redis(String),
}

#[allow(dead_code)] // with the postgres feature only
fn postgres_url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[allow(dead_code)] // with the redis feature only
fn redis_url() -> String {
    std::env::var("IDEM_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

#[allow(dead_code)] // with the postgres and redis features only
fn hex() -> String {
    format!(
        "{:032x}",
        idem_runtime::store::OwnerToken::random().as_u128()
    )
}

impl Place {
    /// A new store on this place: its own connection (SQLite) or pool (PostgreSQL, Redis).
    /// Inside a tokio runtime (Redis connects lazily on it).
    fn open(&self) -> Arc<dyn Store> {
        match self {
            #[cfg(feature = "sqlite")]
            Place::Sqlite(path) => Arc::new(idem_runtime::SqliteStore::open(path).expect("open")),
            #[cfg(feature = "postgres")]
            Place::Postgres(schema) => Arc::new(
                idem_runtime::PostgresStore::with_schema(&postgres_url(), schema)
                    .expect("a schema"),
            ),
            #[cfg(feature = "redis")]
            Place::Redis(prefix) => Arc::new(
                idem_runtime::RedisStore::connect_lazy(&redis_url())
                    .expect("a Redis URL")
                    .with_prefix(prefix.clone()),
            ),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?}: this build lacks the feature"),
        }
    }
}

/// A fresh place, cleaned up when dropped.
struct Fresh {
    place: Place,
    _dir: Option<Box<dyn Any + Send + Sync>>,
}

impl Fresh {
    #[cfg(feature = "sqlite")]
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Fresh {
            place: Place::Sqlite(dir.path().join("idem.sqlite3")),
            _dir: Some(Box::new(dir)),
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres() -> Self {
        Fresh {
            place: Place::Postgres(format!("idem_t17_{}", hex())),
            _dir: None,
        }
    }

    #[cfg(feature = "redis")]
    fn redis() -> Self {
        Fresh {
            place: Place::Redis(format!("idem-t17:{}:", hex())),
            _dir: None,
        }
    }

    /// The folder for a child process's files.
    fn files(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let place = self.place.clone();
        let _ = std::thread::spawn(move || cleanup(&place)).join();
    }
}

fn cleanup(place: &Place) {
    match place {
        Place::Sqlite(_) => {}
        #[cfg(feature = "postgres")]
        Place::Postgres(schema) => {
            pg_admin(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
        #[cfg(feature = "redis")]
        Place::Redis(prefix) => {
            let Ok(client) = ::redis::Client::open(redis_url()) else {
                return;
            };
            let Ok(mut conn) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query(&mut conn)
                .unwrap_or_default();
            if !keys.is_empty() {
                let _: Result<usize, _> = ::redis::cmd("DEL").arg(&keys).query(&mut conn);
            }
        }
        #[allow(unreachable_patterns)]
        _ => {}
    }
}

/// Runs `sql` on a connection of its own, on a thread of its own (works anywhere).
#[cfg(feature = "postgres")]
fn pg_admin(sql: &str) {
    let (url, sql) = (postgres_url(), sql.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("the test server");
            tokio::spawn(connection);
            client
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        })
    })
    .join()
    .expect("the admin thread");
}

/// One engine on its own store and its own manual clock.
struct Node {
    store: Arc<dyn Store>,
    clock: ManualClock,
    engine: Engine,
}

impl Node {
    fn on(place: &Place, start: Timestamp) -> Self {
        Node::over(place.open(), start)
    }

    /// A node whose store is `place`'s behind `hook`.
    fn hooked<I: Intercept>(
        place: &Place,
        start: Timestamp,
        hook: I,
    ) -> (Self, Arc<Intercepted<I>>) {
        let store = Arc::new(Intercepted::new(place.open(), hook));
        (Node::over(store.clone(), start), store)
    }

    fn over(store: Arc<dyn Store>, start: Timestamp) -> Self {
        let clock = ManualClock::starting_at(start);
        let engine = Engine::from_shared(store.clone(), Arc::new(clock.clone()));
        Node {
            store,
            clock,
            engine,
        }
    }

    fn ctx(&self) -> CallContext {
        CallContext::new()
            .with_engine(self.engine.clone())
            .with_conversation(CONVERSATION)
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }

    async fn record(&self, key: &IdempotencyKey) -> Option<idem_runtime::store::Record> {
        self.store.read(key, self.now()).await.expect("read")
    }

    async fn events(&self, key: &IdempotencyKey) -> Vec<HistoryEvent> {
        self.engine
            .history(key)
            .await
            .expect("history")
            .map(|h| h.entries.into_iter().map(|e| e.event).collect())
            .unwrap_or_default()
    }
}

fn wall() -> Timestamp {
    SystemClock.now()
}

// ---------------------------------------------------------------------------------------
// The tool: a refund keyed by its order, the amount fingerprinted.

fn spec_of(
    name: &'static str,
    on_unknown: OnUnknown,
    reconcile: bool,
    approval: Option<u64>,
    wait_ms: u64,
) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_millis(DAY_MS),
        lease: Duration::from_millis(LEASE_MS),
        wait: Duration::from_millis(wait_ms),
        on_cancel: OnCancel::Hold,
        on_unknown,
        reconcile,
        approval: approval.map(Duration::from_millis),
        ..ToolSpec::new(name)
    }))
}

fn approving(name: &'static str) -> &'static ToolSpec {
    spec_of(name, OnUnknown::Hold, false, Some(VALID_MS), 0)
}

async fn pay(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
) -> Result<u64, ToolError> {
    pay_slow(spec, ctx, log, order, 0).await
}

/// A payment whose body holds its claim `body_ms` of real time after its effect.
async fn pay_slow(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
    body_ms: u64,
) -> Result<u64, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &40u64).map(drop)
    })?;
    let log = log.clone();
    prepared
        .run(async move {
            log.record(spec.name, order.to_string());
            if body_ms > 0 {
                tokio::time::sleep(Duration::from_millis(body_ms)).await;
            }
            Ok(order * 100 + 40)
        })
        .await
}

fn key_of(spec: &'static ToolSpec, order: u64) -> IdempotencyKey {
    let ctx = CallContext::new()
        .with_engine(Engine::in_memory())
        .with_conversation(CONVERSATION);
    prepare(spec, Some(&ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap()
    .key()
    .clone()
}

fn is_denied(answer: &Result<u64, ToolError>) -> bool {
    matches!(answer, Err(ToolError::Idem(Error::Denied { .. })))
}

fn ana() -> Approval {
    Approval::new("ana")
        .unwrap()
        .note("checked")
        .valid_for(Duration::from_millis(VALID_MS))
}

fn not_applied() -> Resolution {
    Resolution::new(Decision::not_applied(), "ana").unwrap()
}

fn not_decidable<T: std::fmt::Debug>(answer: &Result<T, ResolveError>) -> bool {
    matches!(answer, Err(ResolveError::NotDecidable { .. }))
}

// ---------------------------------------------------------------------------------------
// The tests, instantiated once per backend.

macro_rules! store_tests {
    ($($(#[$meta:meta])* $name:ident),* $(,)?) => {
        #[cfg(feature = "sqlite")]
        mod sqlite {
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fresh::sqlite()).await;
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fresh::postgres()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(
                $(#[$meta])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Fresh::redis()).await;
                }
            )*
        }
    };
}

store_tests!(
    approve_deny_and_calls_race_across_two_engines,
    thirty_two_callers_on_two_engines_run_an_approval_once,
    skewed_clocks_judge_the_approval_each_by_its_own,
    deciding_a_live_approved_run_is_refused,
    listing_and_counts_agree_in_every_state,
    a_denial_expires_after_keep_for_and_the_key_asks_again,
    a_killed_approved_run_is_held_whatever_on_unknown_and_reconcile,
    a_worker_killed_between_claim_and_request_is_held_never_run,
    an_expired_approval_raced_by_a_call_and_an_approver,
    a_stale_expiry_by_a_call_sends_a_fresh_approval_back,
    two_approvers_of_an_expired_approval_both_write,
    approving_a_held_record_written_by_another_engine_is_refused_then_resolved,
);

// pins A3, A4, A5, S2: on one store, engine A approves while engine B denies and four
// callers (two per engine) call the key: the body runs at most once, and never once a
// denial is saved; a denial and a run never both land
async fn approve_deny_and_calls_race_across_two_engines(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec = spec_of("t17_race", OnUnknown::Hold, false, Some(VALID_MS), 2_000);
    let log = EffectLog::new();
    for order in 0..6u64 {
        let key = key_of(spec, order);
        assert!(awaiting(&pay(spec, &a.ctx(), &log, order).await, false));
        let before = log.len();
        let (ea, eb) = (a.engine.clone(), b.engine.clone());
        let (k1, k2) = (key.clone(), key.clone());
        let approve = tokio::spawn(async move { ea.approve(&k1, &ana()).await });
        let deny = tokio::spawn(async move {
            if order % 2 == 0 {
                tokio::task::yield_now().await;
            }
            eb.deny(&k2, &Approval::new("bo").unwrap()).await
        });
        let mut callers = Vec::new();
        for i in 0..4 {
            let ctx = if i % 2 == 0 { a.ctx() } else { b.ctx() };
            let log = log.clone();
            callers.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..5 {
                    let answer = pay(spec, &ctx, &log, order).await;
                    let done = answer.is_ok() || is_denied(&answer);
                    answers.push(answer);
                    if done {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                answers
            }));
        }
        let (approved, denied) = (approve.await.unwrap(), deny.await.unwrap());
        let mut answers = Vec::new();
        for c in callers {
            answers.extend(c.await.unwrap());
        }
        let ran = log.len() - before;
        assert!(ran <= 1, "order {order}: {ran} runs");
        let record = a.record(&key).await.expect("a record");
        let events = a.events(&key).await;
        let denials = events
            .iter()
            .filter(|e| **e == HistoryEvent::Denied)
            .count();
        assert!(denials <= 1, "{events:?}");
        if ran == 1 {
            assert_eq!(denials, 0, "a run and a denial: {events:?} {denied:?}");
            assert!(denied.is_err(), "{denied:?}");
            assert!(
                matches!(
                    record.state,
                    RecordState::Completed {
                        source: OutcomeSource::Executed,
                        ..
                    }
                ),
                "{record:?}"
            );
        }
        if matches!(denied, Ok(Resolved::Decided(_))) {
            assert_eq!(ran, 0, "denied and run: {events:?}");
            assert!(
                matches!(
                    record.state,
                    RecordState::Completed {
                        source: OutcomeSource::Denied,
                        ..
                    }
                ),
                "{record:?}"
            );
        }
        for answer in &answers {
            let fine = match answer {
                Ok(v) => *v == order * 100 + 40,
                Err(ToolError::Idem(Error::AwaitingApproval { .. } | Error::Denied { .. })) => true,
                _ => false,
            };
            assert!(
                fine,
                "order {order}: {answer:?} (approve {approved:?}, deny {denied:?})"
            );
        }
    }
}

// pins A4, S2, S5: 32 tasks on two engines (two stores on one place) call an approved key
// at once: one body run, and every caller gets its outcome
async fn thirty_two_callers_on_two_engines_run_an_approval_once(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec = spec_of("t17_herd", OnUnknown::Hold, false, Some(VALID_MS), 5_000);
    let log = EffectLog::new();
    let key = key_of(spec, 9);
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 9).await, false));
    b.engine.approve(&key, &ana()).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let ctx = if i % 2 == 0 { a.ctx() } else { b.ctx() };
        let (log, barrier) = (log.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            pay_slow(spec, &ctx, &log, 9, 30).await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(940));
    }
    assert_eq!(log.len(), 1, "one run");
    let record = a.record(&key).await.unwrap();
    assert_eq!(record.fence, 2, "{record:?}");
}

// pins A4 (an approval's validity is judged by the calling engine's clock, as every expiry
// is, S8): an engine whose clock runs ahead of the approver's by more than the validity
// finds a fresh approval expired and sends it back (AwaitingApproval, expired); an engine
// whose clock runs behind runs an approval the approver's clock says has expired. Nothing
// runs twice either way.
async fn skewed_clocks_judge_the_approval_each_by_its_own(fresh: Fresh) {
    let start = wall();
    let approver = Node::on(&fresh.place, start);
    let ahead = Node::on(
        &fresh.place,
        start.saturating_add(Duration::from_millis(VALID_MS)),
    );
    let behind = Node::on(&fresh.place, start);
    let spec = approving("t17_skew");
    let log = EffectLog::new();
    // Ahead by the validity: the fresh approval is expired for it.
    let key = key_of(spec, 1);
    assert!(awaiting(&pay(spec, &approver.ctx(), &log, 1).await, false));
    approver.engine.approve(&key, &ana()).await.unwrap();
    assert!(awaiting(&pay(spec, &ahead.ctx(), &log, 1).await, true));
    assert!(awaiting(&pay(spec, &approver.ctx(), &log, 1).await, false));
    assert_eq!(log.len(), 0);
    // Behind: the approver's clock passed the validity, the caller's did not.
    let key = key_of(spec, 2);
    assert!(awaiting(&pay(spec, &approver.ctx(), &log, 2).await, false));
    approver.engine.approve(&key, &ana()).await.unwrap();
    approver.advance(VALID_MS);
    behind.advance(VALID_MS - 1);
    assert_eq!(pay(spec, &behind.ctx(), &log, 2).await, Ok(240));
    assert_eq!(pay(spec, &approver.ctx(), &log, 2).await, Ok(240));
    assert_eq!(log.len(), 1);
}

// pins A3, U6: while an approved run holds its claim with a live lease, another engine can
// neither approve, deny nor resolve the key; the run finishes and is replayed
async fn deciding_a_live_approved_run_is_refused(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec = approving("t17_live");
    let log = EffectLog::new();
    let key = key_of(spec, 3);
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 3).await, false));
    b.engine.approve(&key, &ana()).await.unwrap();
    let (ctx, l) = (a.ctx(), log.clone());
    let run = tokio::spawn(async move { pay_slow(spec, &ctx, &l, 3, 400).await });
    while log.is_empty() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let approve = b.engine.approve(&key, &ana()).await;
    let deny = b.engine.deny(&key, &ana()).await;
    let resolve = b.engine.resolve(&key, &not_applied()).await;
    for answer in [&approve, &deny] {
        assert!(not_decidable(answer), "{answer:?}");
    }
    assert!(not_decidable(&resolve), "{resolve:?}");
    assert_eq!(run.await.unwrap(), Ok(340));
    assert_eq!(pay(spec, &b.ctx(), &log, 3).await, Ok(340));
    assert_eq!(log.len(), 1);
}

// pins A6, I7, U1: with records in every state on one store (written by two engines), each
// state's listing (paged to its end) has as many records as the store's counts say; a
// claim whose lease lapsed is listed and counted as an unknown outcome
async fn listing_and_counts_agree_in_every_state(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let approval = approving("t17_counts");
    let plain = spec_of("t17_counts_plain", OnUnknown::Hold, false, None, 0);
    let log = EffectLog::new();
    // Awaiting approval: 0..5; approved: 5..8; denied (completed): 8..10.
    for order in 0..10u64 {
        let node = if order % 2 == 0 { &a } else { &b };
        assert!(awaiting(
            &pay(approval, &node.ctx(), &log, order).await,
            false
        ));
    }
    for order in 5..8 {
        a.engine
            .approve(&key_of(approval, order), &ana())
            .await
            .unwrap();
    }
    for order in 8..10 {
        b.engine
            .deny(&key_of(approval, order), &ana())
            .await
            .unwrap();
    }
    // Completed: 20..24.
    for order in 20..24 {
        assert_eq!(
            pay(plain, &a.ctx(), &log, order).await,
            Ok(order * 100 + 40)
        );
    }
    // In progress, its lease lapsing soon: 30..33 (a claim whose owner went away).
    for order in 30..33 {
        let prepared = prepare(plain, Some(&b.ctx()), |x| {
            x.key("order", &order)?;
            x.fingerprint("amount", &40u64).map(drop)
        })
        .unwrap();
        let claimed = prepared.claim::<u64, ToolError>().await.ok().unwrap();
        std::mem::forget(claimed);
    }
    a.advance(LEASE_MS / 2);
    b.advance(LEASE_MS / 2);
    // In progress, live: 40..42 (claimed after the others).
    for order in 40..42 {
        let prepared = prepare(plain, Some(&b.ctx()), |x| {
            x.key("order", &order)?;
            x.fingerprint("amount", &40u64).map(drop)
        })
        .unwrap();
        let claimed = prepared.claim::<u64, ToolError>().await.ok().unwrap();
        std::mem::forget(claimed);
    }
    a.advance(LEASE_MS / 2);
    b.advance(LEASE_MS / 2);
    // 30..33 lapsed now; mark one unknown by a call, decide one not applied.
    assert!(is_held(&pay(plain, &a.ctx(), &log, 30).await));
    b.engine
        .resolve(&key_of(plain, 31), &not_applied())
        .await
        .unwrap();
    let now = a.now();
    let stats = a.store.stats(now).await.unwrap();
    let want = [
        (StateFilter::AwaitingApproval, 5u64),
        (StateFilter::Approved, 3),
        (StateFilter::Completed, 6),
        (StateFilter::InProgress, 2),
        (StateFilter::OutcomeUnknown, 2),
        (StateFilter::NotApplied, 1),
    ];
    let counts = stats.total;
    let counted = |s: StateFilter| match s {
        StateFilter::AwaitingApproval => counts.awaiting_approval,
        StateFilter::Approved => counts.approved,
        StateFilter::Completed => counts.completed,
        StateFilter::InProgress => counts.in_progress,
        StateFilter::OutcomeUnknown => counts.outcome_unknown,
        StateFilter::NotApplied => counts.not_applied,
        other => panic!("{other:?}"),
    };
    for (state, n) in want {
        let mut listed = 0u64;
        let mut query = ListQuery::new().state(state).limit(2);
        loop {
            let page = b.store.list(&query, now).await.unwrap();
            for r in &page.records {
                assert_eq!(StateFilter::at(&r.record.state, now), state, "{r:?}");
            }
            listed += page.records.len() as u64;
            match page.next {
                Some(cursor) => query = query.after(cursor),
                None => break,
            }
        }
        assert_eq!((state, listed), (state, n), "listed");
        assert_eq!((state, counted(state)), (state, n), "counted: {stats:?}");
    }
    assert_eq!(log.len(), 4);
}

// pins A3, A5, S8, F1: a denial is kept `keep_for` from the decision even past the tool's
// TTL; from that instant the key is absent and its next call asks for approval again,
// with the expired record's fence + 1
async fn a_denial_expires_after_keep_for_and_the_key_asks_again(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        ttl: Duration::from_millis(60_000),
        ..*approving("t17_denied_expiry")
    }));
    let log = EffectLog::new();
    let key = key_of(spec, 4);
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 4).await, false));
    let keep = 3_600_000;
    b.engine
        .deny(&key, &ana().keep_for(Duration::from_millis(keep)))
        .await
        .unwrap();
    a.advance(keep - 1);
    assert!(is_denied(&pay(spec, &a.ctx(), &log, 4).await));
    a.advance(1);
    assert!(a.record(&key).await.is_none(), "expired at keep_for");
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 4).await, false));
    let record = a.record(&key).await.unwrap();
    assert!(
        matches!(record.state, RecordState::AwaitingApproval { .. }),
        "{record:?}"
    );
    assert_eq!(record.fence, 2, "the expired record's fence + 1 (F1)");
    assert_eq!(a.events(&key).await.first(), Some(&HistoryEvent::Claimed));
    assert_eq!(log.len(), 0);
}

// pins A2, A4, U2, U3, U2a, U6: a process SIGKILLed inside an approved run's body, after
// its effect, leaves the claim; once its lease lapsed every call is held (even of a tool
// declared `on_unknown = "rerun"` or with a reconcile function) and nothing runs again;
// approving is refused (the outcome is unknown); decided not applied, the next call asks
// for approval again, and only an approval in force runs it
async fn a_killed_approved_run_is_held_whatever_on_unknown_and_reconcile(fresh: Fresh) {
    let start = wall();
    let a = Node::on(&fresh.place, start);
    let spec = approving("t17_killed");
    let rerun = spec_of("t17_killed", OnUnknown::Rerun, false, Some(VALID_MS), 0);
    let reconciles = spec_of("t17_killed", OnUnknown::Hold, true, Some(VALID_MS), 0);
    let key = key_of(spec, 5);
    assert_eq!(key, key_of(rerun, 5));
    assert_eq!(key, key_of(reconciles, 5));
    let log = EffectLog::new();
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 5).await, false));
    a.engine.approve(&key, &ana()).await.unwrap();
    let files = fresh.files();
    run_child(&Job {
        place: fresh.place.clone(),
        files: files.path().to_owned(),
        start_ms: a.now().as_millis(),
        order: 5,
        die: Die::InBody,
        tool: "t17_killed".to_owned(),
    });
    assert_eq!(child_effects(files.path()), 1, "the child's body ran once");
    let record = a.record(&key).await.unwrap();
    assert!(
        matches!(record.state, RecordState::InProgress { .. }),
        "{record:?}"
    );
    assert_eq!(record.fence, 2);
    a.advance(LEASE_MS);
    for s in [rerun, reconciles, spec, rerun] {
        let answer = pay(s, &a.ctx(), &log, 5).await;
        assert!(is_held(&answer), "{answer:?}");
    }
    a.advance(DAY_MS * 2);
    assert!(is_held(&pay(rerun, &a.ctx(), &log, 5).await));
    assert_eq!(log.len(), 0, "never re-run");
    assert!(not_decidable(&a.engine.approve(&key, &ana()).await));
    a.engine.resolve(&key, &not_applied()).await.unwrap();
    assert!(awaiting(&pay(rerun, &a.ctx(), &log, 5).await, false));
    assert_eq!(log.len(), 0);
    a.engine.approve(&key, &ana()).await.unwrap();
    assert_eq!(pay(rerun, &a.ctx(), &log, 5).await, Ok(540));
    assert_eq!(log.len(), 1);
    let record = a.record(&key).await.unwrap();
    assert!(record.fence >= 4, "fences grow: {record:?}");
}

// pins A2, U2, U6: a worker SIGKILLed between its claim and its request for approval
// leaves a claim; before its lease lapses a call waits (InProgress), after it every call is
// held (also under `on_unknown = "rerun"`), approving is refused, nothing ever runs; decided
// not applied, the next call asks for approval
async fn a_worker_killed_between_claim_and_request_is_held_never_run(fresh: Fresh) {
    let start = wall();
    let a = Node::on(&fresh.place, start);
    let spec = approving("t17_gap");
    let rerun = spec_of("t17_gap", OnUnknown::Rerun, false, Some(VALID_MS), 0);
    let key = key_of(spec, 6);
    let log = EffectLog::new();
    let files = fresh.files();
    run_child(&Job {
        place: fresh.place.clone(),
        files: files.path().to_owned(),
        start_ms: a.now().as_millis(),
        order: 6,
        die: Die::BeforeRequest,
        tool: "t17_gap".to_owned(),
    });
    assert_eq!(child_effects(files.path()), 0);
    let record = a.record(&key).await.unwrap();
    assert!(
        matches!(record.state, RecordState::InProgress { .. }),
        "{record:?}"
    );
    assert_eq!(record.fence, 1);
    let early = pay(rerun, &a.ctx(), &log, 6).await;
    assert!(
        matches!(early, Err(ToolError::Idem(Error::InProgress { .. }))),
        "{early:?}"
    );
    a.advance(LEASE_MS);
    for s in [rerun, spec] {
        let answer = pay(s, &a.ctx(), &log, 6).await;
        assert!(is_held(&answer), "{answer:?}");
    }
    assert!(not_decidable(&a.engine.approve(&key, &ana()).await));
    assert!(not_decidable(&a.engine.deny(&key, &ana()).await));
    a.engine.resolve(&key, &not_applied()).await.unwrap();
    assert!(awaiting(&pay(rerun, &a.ctx(), &log, 6).await, false));
    assert_eq!(log.len(), 0, "nothing ran");
    assert_eq!(a.record(&key).await.unwrap().fence, 2);
}

// pins A3, A4: an approval expired; engine A's call (moving it back to awaiting) races
// engine B re-approving it: never a run on the expired approval, never two runs; the
// approver is told when the record changed under it, and once an approval is in force
// the next call runs once
async fn an_expired_approval_raced_by_a_call_and_an_approver(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec = approving("t17_expired_race");
    let log = EffectLog::new();
    for order in 0..8u64 {
        let key = key_of(spec, order);
        assert!(awaiting(&pay(spec, &a.ctx(), &log, order).await, false));
        b.engine.approve(&key, &ana()).await.unwrap();
        a.advance(VALID_MS);
        b.advance(VALID_MS);
        let before = log.len();
        let (ctx, l, eb, k) = (a.ctx(), log.clone(), b.engine.clone(), key.clone());
        let call = tokio::spawn(async move { pay(spec, &ctx, &l, order).await });
        let approve = tokio::spawn(async move { eb.approve(&k, &ana()).await });
        let (call, approve) = (call.await.unwrap(), approve.await.unwrap());
        assert!(log.len() - before <= 1);
        match &approve {
            Ok(Resolved::Decided(_)) => {}
            Err(ResolveError::Changed { .. }) => {
                b.engine.approve(&key, &ana()).await.unwrap();
            }
            other => panic!("order {order}: {other:?}"),
        }
        if call.is_err() {
            assert!(awaiting(&call, true) || awaiting(&call, false), "{call:?}");
        }
        assert_eq!(pay(spec, &a.ctx(), &log, order).await, Ok(order * 100 + 40));
        assert_eq!(log.len() - before, 1, "order {order}: one run");
    }
}

/// Holds the first "approval expired" write (approved → awaiting approval) until `go`.
#[derive(Debug, Default)]
struct HoldExpiry {
    armed: std::sync::atomic::AtomicBool,
    reached: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

impl Intercept for HoldExpiry {
    fn transition<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TransitionRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        let expiry = matches!(req.target, Target::AwaitingApproval)
            && matches!(req.seen, idem_runtime::store::Seen::Approved { .. });
        Box::pin(async move {
            if expiry && self.armed.swap(false, Ordering::SeqCst) {
                self.reached.notify_one();
                self.go.notified().await;
            }
            inner.transition(req).await
        })
    }
}

// pins A3, A4 (finding 1, fixed): engine A's call reads the approval expired and is about
// to move it back; meanwhile a person on engine B re-approves (expired → awaiting →
// approved, fence unchanged). A's compare-and-set names the approval it saw (its expiry),
// so it does not match the new one: A looks again and runs once on the fresh approval, and
// every later call replays.
async fn a_stale_expiry_by_a_call_sends_a_fresh_approval_back(fresh: Fresh) {
    let start = wall();
    let hook = HoldExpiry::default();
    hook.armed.store(true, Ordering::SeqCst);
    let (a, hook) = Node::hooked(&fresh.place, start, hook);
    let b = Node::on(&fresh.place, start);
    let spec = approving("t17_aba_call");
    let log = EffectLog::new();
    let key = key_of(spec, 1);
    assert!(awaiting(&pay(spec, &b.ctx(), &log, 1).await, false));
    b.engine.approve(&key, &ana()).await.unwrap();
    a.advance(VALID_MS);
    b.advance(VALID_MS);
    let (ctx, l) = (a.ctx(), log.clone());
    let call = tokio::spawn(async move { pay(spec, &ctx, &l, 1).await });
    hook.reached.notified().await;
    let again = b.engine.approve(&key, &ana()).await;
    assert!(matches!(again, Ok(Resolved::Decided(_))), "{again:?}");
    hook.go.notify_one();
    let answer = call.await.unwrap();
    let record = b.record(&key).await.unwrap();
    let events = b.events(&key).await;
    assert_eq!(
        answer,
        Ok(140),
        "the call ran on the fresh approval: {events:?}"
    );
    assert!(
        matches!(record.state, RecordState::Completed { .. }),
        "the fresh approval was sent back by a stale expiry: {record:?}\n{events:?}"
    );
    assert!(
        events
            .iter()
            .filter(|e| **e == HistoryEvent::ApprovalExpired)
            .count()
            == 1,
        "one expiry, the approver's: {events:?}"
    );
    assert_eq!(pay(spec, &b.ctx(), &log, 1).await, Ok(140));
    assert_eq!(log.len(), 1, "one run");
}

// pins A3 (finding 1, fixed): two people re-approve an expired approval at once; the first
// one's "expired" write is held until the second one has decided. The compare-and-sets name
// the approval seen, so exactly one writes and is told Decided; the history holds one
// re-approval.
async fn two_approvers_of_an_expired_approval_both_write(fresh: Fresh) {
    let start = wall();
    let hook = HoldExpiry::default();
    let (a, hook) = Node::hooked(&fresh.place, start, hook);
    let b = Node::on(&fresh.place, start);
    let spec = approving("t17_aba_approvers");
    let log = EffectLog::new();
    let key = key_of(spec, 2);
    assert!(awaiting(&pay(spec, &b.ctx(), &log, 2).await, false));
    b.engine.approve(&key, &ana()).await.unwrap();
    a.advance(VALID_MS);
    b.advance(VALID_MS);
    hook.armed.store(true, Ordering::SeqCst);
    let (ea, k) = (a.engine.clone(), key.clone());
    let first = tokio::spawn(async move { ea.approve(&k, &Approval::new("ana").unwrap()).await });
    hook.reached.notified().await;
    let second = b.engine.approve(&key, &Approval::new("bo").unwrap()).await;
    hook.go.notify_one();
    let first = first.await.unwrap();
    let events = b.events(&key).await;
    let approvals = events
        .iter()
        .filter(|e| matches!(e, HistoryEvent::Approved { .. }))
        .count();
    let decided = [&first, &second]
        .iter()
        .filter(|a| matches!(a, Ok(Resolved::Decided(_))))
        .count();
    assert_eq!(decided, 1, "{first:?}\n{second:?}\n{events:?}");
    assert_eq!(
        approvals, 2,
        "the first approval and one re-approval: {events:?}"
    );
}

// pins A3, U1, U6 across engines: a record engine A left in progress (its owner gone) is,
// once its lease lapsed, an unknown outcome for engine B: approving and denying it are
// refused (NotDecidable, state outcome unknown), a resolution is taken
async fn approving_a_held_record_written_by_another_engine_is_refused_then_resolved(fresh: Fresh) {
    let start = wall();
    let (a, b) = (Node::on(&fresh.place, start), Node::on(&fresh.place, start));
    let spec = approving("t17_held_other");
    let log = EffectLog::new();
    let key = key_of(spec, 8);
    assert!(awaiting(&pay(spec, &a.ctx(), &log, 8).await, false));
    b.engine.approve(&key, &ana()).await.unwrap();
    let prepared = prepare(spec, Some(&a.ctx()), |x| {
        x.key("order", &8u64)?;
        x.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    let claimed = prepared.claim::<u64, ToolError>().await.ok().unwrap();
    std::mem::forget(claimed); // the owner went away with its claim
    b.advance(LEASE_MS);
    for answer in [
        b.engine.approve(&key, &ana()).await,
        b.engine.deny(&key, &ana()).await,
    ] {
        match answer {
            Err(ResolveError::NotDecidable { state, .. }) => {
                assert_eq!(state, StateFilter::OutcomeUnknown)
            }
            other => panic!("{other:?}"),
        }
    }
    let applied = Resolution::new(Decision::applied(&840u64).unwrap(), "ana").unwrap();
    b.engine.resolve(&key, &applied).await.unwrap();
    a.advance(LEASE_MS);
    assert_eq!(pay(spec, &a.ctx(), &log, 8).await, Ok(840));
    assert_eq!(log.len(), 0);
}

// ---------------------------------------------------------------------------------------
// Upgrade in place (P4): records written at the previous version (4, no approval states).

/// A call of the tool as the previous build had it (no approval) whose body records its
/// effect and then says its outcome is unknown.
async fn pay_unknown(spec: &'static ToolSpec, ctx: &CallContext, log: &EffectLog, order: u64) {
    let prepared = prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    let log = log.clone();
    let answer: Result<u64, ToolError> = prepared
        .run(async move {
            log.record(spec.name, order.to_string());
            Err(ToolError::outcome_unknown("bank timed out"))
        })
        .await;
    assert!(answer.is_err(), "{answer:?}");
}

/// Writes, with a tool that did not require approval: order 1 outcome unknown, order 2
/// decided not applied, order 3 claimed by an owner that went away, order 4 completed.
/// Returns the time the records were written at.
async fn write_previous_records(place: &Place, log: &EffectLog) -> Timestamp {
    let start = wall();
    let a = Node::on(place, start);
    let plain = spec_of("t17_upgrade", OnUnknown::Hold, false, None, 0);
    pay_unknown(plain, &a.ctx(), log, 1).await;
    pay_unknown(plain, &a.ctx(), log, 2).await;
    a.engine
        .resolve(&key_of(plain, 2), &not_applied())
        .await
        .unwrap();
    let prepared = prepare(plain, Some(&a.ctx()), |x| {
        x.key("order", &3u64)?;
        x.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    std::mem::forget(prepared.claim::<u64, ToolError>().await.ok().unwrap());
    assert_eq!(pay(plain, &a.ctx(), log, 4).await, Ok(440));
    assert_eq!(log.len(), 3);
    start
}

/// The previous version's records, read by this build with the tool now requiring approval.
async fn previous_records_under_approval(place: &Place, log: &EffectLog, start: Timestamp) {
    let a = Node::on(place, start.saturating_add(Duration::from_millis(LEASE_MS)));
    let spec = approving("t17_upgrade");
    assert_eq!(
        key_of(spec, 1),
        key_of(spec_of("t17_upgrade", OnUnknown::Hold, false, None, 0), 1)
    );
    // Completed: replayed.
    assert_eq!(pay(spec, &a.ctx(), log, 4).await, Ok(440));
    // Outcome unknown and lapsed claims: held, not approvable; decided, then asked for.
    for order in [1u64, 3] {
        let key = key_of(spec, order);
        assert!(is_held(&pay(spec, &a.ctx(), log, order).await));
        assert!(not_decidable(&a.engine.approve(&key, &ana()).await));
        a.engine.resolve(&key, &not_applied()).await.unwrap();
    }
    // Decided not applied before the upgrade (order 2) or after it (1, 3): every run needs
    // an approval in force (A2).
    for order in [2u64, 1, 3] {
        let key = key_of(spec, order);
        let before = log.len();
        let answer = pay(spec, &a.ctx(), log, order).await;
        assert!(awaiting(&answer, false), "order {order}: {answer:?}");
        assert_eq!(log.len(), before, "order {order} ran without an approval");
        a.engine.approve(&key, &ana()).await.unwrap();
        assert_eq!(pay(spec, &a.ctx(), log, order).await, Ok(order * 100 + 40));
    }
    assert_eq!(log.len(), 6);
}

// pins P4, A2, U2, U6: a SQLite file of version 4 holding an unknown outcome, a key decided
// not applied, a lapsed claim and a completed record, opened by this build with the tool
// now requiring approval: the completed one replays, the unknown ones are held and not
// approvable, and every key decided not applied asks for approval before it runs
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_version_4_file_under_approval() {
    let fresh = Fresh::sqlite();
    let log = EffectLog::new();
    let start = write_previous_records(&fresh.place, &log).await;
    let Place::Sqlite(path) = &fresh.place else {
        unreachable!()
    };
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE idem_records_v4 (
            key TEXT PRIMARY KEY NOT NULL, fingerprint TEXT NOT NULL,
            created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
            owner TEXT, lease_until INTEGER, outcome TEXT, completed_at INTEGER,
            fence INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1), unknown_since INTEGER,
            tool TEXT, namespace TEXT, scope TEXT, key_args TEXT, source TEXT,
            decided_at INTEGER, history TEXT,
            history_len INTEGER NOT NULL DEFAULT 0 CHECK (history_len >= 0),
            history_dropped INTEGER NOT NULL DEFAULT 0 CHECK (history_dropped >= 0));
         INSERT INTO idem_records_v4 SELECT key, fingerprint, created_at, expires_at, owner,
            lease_until, outcome, completed_at, fence, unknown_since, tool, namespace, scope,
            key_args, source, decided_at, history, history_len, history_dropped
            FROM idem_records;
         DROP TABLE idem_records;
         ALTER TABLE idem_records_v4 RENAME TO idem_records;
         UPDATE idem_meta SET value = 4 WHERE name = 'schema_version';
         COMMIT;",
    )
    .unwrap();
    drop(conn);
    previous_records_under_approval(&fresh.place, &log, start).await;
}

// pins P4, A2, U2, U6: the same on a PostgreSQL schema of version 4
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_version_4_schema_under_approval() {
    let fresh = Fresh::postgres();
    let log = EffectLog::new();
    let start = write_previous_records(&fresh.place, &log).await;
    let Place::Postgres(schema) = &fresh.place else {
        unreachable!()
    };
    pg_admin(&format!(
        "ALTER TABLE \"{schema}\".records DROP CONSTRAINT records_state,
            DROP COLUMN approval_at, DROP COLUMN approval_until;
         UPDATE \"{schema}\".meta SET value = 4 WHERE name = 'schema_version';"
    ));
    previous_records_under_approval(&fresh.place, &log, start).await;
}

#[cfg(feature = "redis")]
use idem_runtime::StoreErrorKind;

#[cfg(feature = "redis")]
fn redis_cmd<T: ::redis::FromRedisValue>(args: &[&str]) -> T {
    let client = ::redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut cmd = ::redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn).unwrap()
}

#[cfg(feature = "redis")]
fn record_key(place: &Place, key: &IdempotencyKey) -> String {
    let Place::Redis(prefix) = place else {
        unreachable!()
    };
    format!("{prefix}rec:{}", key.as_str())
}

// pins P4, A2, U2, U6: the same on Redis records of layout 4
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_layout_4_records_under_approval() {
    let fresh = Fresh::redis();
    let log = EffectLog::new();
    let start = write_previous_records(&fresh.place, &log).await;
    let plain = spec_of("t17_upgrade", OnUnknown::Hold, false, None, 0);
    for order in 1..=4 {
        let rec = record_key(&fresh.place, &key_of(plain, order));
        let set: i64 = redis_cmd(&["HSET", &rec, "v", "4"]);
        assert_eq!(set, 0, "the layout field was there");
    }
    previous_records_under_approval(&fresh.place, &log, start).await;
}

// pins S10, A2–A4 on Redis: a record whose approval fields were tampered with (an approval
// deadline that is not a number; an owner beside a request; approval fields on a layout-4
// record) is a typed Corrupt store error for calls and a store error for deciders; the body
// never runs
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tampered_approval_fields_are_typed_errors() {
    let fresh = Fresh::redis();
    let a = Node::on(&fresh.place, wall());
    let spec = approving("t17_tamper");
    let log = EffectLog::new();
    let tampers: [&[&str]; 4] = [
        &["approval_until", "soon"],
        &["approval_at", "yesterday"],
        &["owner", "0123456789abcdef0123456789abcdef"],
        &["v", "4"],
    ];
    for (order, tamper) in tampers.iter().enumerate() {
        let order = order as u64;
        let key = key_of(spec, order);
        assert!(awaiting(&pay(spec, &a.ctx(), &log, order).await, false));
        if order % 2 == 1 {
            a.engine.approve(&key, &ana()).await.unwrap();
        }
        let rec = record_key(&fresh.place, &key);
        let mut args = vec!["HSET", rec.as_str()];
        args.extend_from_slice(tamper);
        let _: i64 = redis_cmd(&args);
        let answer = pay(spec, &a.ctx(), &log, order).await;
        match &answer {
            Err(ToolError::Idem(Error::Store { source, .. })) => {
                assert_eq!(source.kind, StoreErrorKind::Corrupt, "{tamper:?}: {source}")
            }
            other => panic!("{tamper:?}: {other:?}"),
        }
        for decided in [
            a.engine.approve(&key, &ana()).await,
            a.engine.deny(&key, &ana()).await,
        ] {
            assert!(
                matches!(&decided, Err(ResolveError::Store(e)) if e.kind == StoreErrorKind::Corrupt),
                "{tamper:?}: {decided:?}"
            );
        }
        assert_eq!(log.len(), 0, "{tamper:?}: the body ran");
    }
}

// ---------------------------------------------------------------------------------------
// Child processes: this test binary again, running `child_process` with a job.

const JOB_VAR: &str = "IDEM_TEST_ISSUE17_STORES_JOB";

/// Where the child dies (SIGKILL, from the inside).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum Die {
    /// Inside an approved run's body, after its effect line.
    InBody,
    /// When the store is asked to record the request for approval of its fresh claim.
    BeforeRequest,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    place: Place,
    files: PathBuf,
    start_ms: u64,
    order: u64,
    die: Die,
    tool: String,
}

fn run_child(job: &Job) {
    let exe = std::env::current_exe().unwrap();
    let status = std::process::Command::new(exe)
        .args([
            "--exact",
            "adversarial_issue17_stores::child_process",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(JOB_VAR, serde_json::to_string(job).unwrap())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(job.files.join("stderr.txt")).unwrap())
        .status()
        .expect("run the child");
    use std::os::unix::process::ExitStatusExt;
    let stderr = std::fs::read_to_string(job.files.join("stderr.txt")).unwrap_or_default();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child died by SIGKILL: {status:?}\n{stderr}"
    );
}

fn child_effects(files: &Path) -> usize {
    std::fs::read_to_string(files.join("effects"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn die() -> ! {
    // SAFETY: `kill` and `getpid` have no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

/// Dies when asked to record a request for approval (A2's second write).
#[derive(Debug)]
struct DieAtRequest;

impl Intercept for DieAtRequest {
    fn transition<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TransitionRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        if matches!(req.target, Target::AwaitingApproval) {
            die();
        }
        inner.transition(req)
    }
}

#[test]
#[ignore = "a child process of the killed-process tests; inert without its job"]
fn child_process() {
    let Ok(job) = std::env::var(JOB_VAR) else {
        return;
    };
    let job: Job = serde_json::from_str(&job).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let mut store = job.place.open();
        if matches!(job.die, Die::BeforeRequest) {
            store = Arc::new(Intercepted::new(store, DieAtRequest));
        }
        let clock = ManualClock::starting_at(Timestamp::from_millis(job.start_ms));
        let engine = Engine::from_shared(store, Arc::new(clock));
        let ctx = CallContext::new()
            .with_engine(engine)
            .with_conversation(CONVERSATION);
        let spec = spec_of(
            Box::leak(job.tool.clone().into_boxed_str()),
            OnUnknown::Hold,
            false,
            Some(VALID_MS),
            0,
        );
        let files = job.files.clone();
        let order = job.order;
        let prepared = prepare(spec, Some(&ctx), |a| {
            a.key("order", &order)?;
            a.fingerprint("amount", &40u64).map(drop)
        })
        .unwrap();
        let answer: Result<u64, ToolError> = prepared
            .run(async move {
                std::fs::write(files.join("effects"), "effect\n").unwrap();
                die();
            })
            .await;
        panic!("the child lived: {answer:?}");
    });
}
