//! Many OS processes on one store: the parent side (fresh store resources, spawning the test
//! binary again as child processes, a start barrier, reading what the children left) and
//! the child side (one process that opens the store and makes calls through the full
//! protocol, `prepare(..)` then `run(..)`, exactly as `#[idempotent]` expands).
//!
//! A child is the test binary itself, re-run as
//! `<exe> --exact <child test> --ignored --nocapture --test-threads 1` with the environment
//! variable [`JOB_VAR`] holding its [`Job`] as JSON. What a child did outlives it:
//! - every real execution of a body appends one line to `effects.jsonl` in the run's
//!   folder (`O_APPEND`, one `write` per line, so lines of concurrent processes never mix);
//! - every call's result goes to `results-<child>.jsonl` when the child is done (a child
//!   that kills itself writes none).
//!
//! Clocks: every child runs on a [`ManualClock`] that starts at the instant the parent chose
//! ([`Job::start_ms`]); it moves only if the job says so ([`Job::advance_to_ms`]), never by
//! sleeping. Lease, TTL and wait come from the [`Spans`] the parent passes.

#![allow(dead_code)] // each test binary uses its own subset

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::envelope::Envelope;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    ChangeSignal, Claim, ClaimRequest, Completion, MarkUnknownRequest, OwnerToken, Record,
    RenewRequest, StoreFuture, TakeoverRequest,
};
use idem_runtime::testkit::ManualClock;
use idem_runtime::{
    current_key, prepare, CallContext, CallRecord, Engine, MemoryStore, Scope, Store, Timestamp,
    ToolError, ToolSpec,
};
use serde::{Deserialize, Serialize};

/// The environment variable that carries a child's [`Job`] (JSON).
pub const JOB_VAR: &str = "IDEM_TEST_PROCESS_JOB";

/// The tool every process calls; the key is the order number (scope: one conversation).
pub const TOOL: &str = "send_refund";
/// The conversation every process calls in, so that equal orders share a key (K7).
pub const CONVERSATION: &str = "conv_processes";

/// How long the parent waits for one child before killing it and failing.
const CHILD_DEADLINE: Duration = Duration::from_secs(120);

/// Where the records live; every process of a run opens the same one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// A SQLite file.
    Sqlite { path: PathBuf },
    /// A Redis server and a key prefix no other run uses.
    Redis { url: String, prefix: String },
    /// A PostgreSQL database and a schema no other run uses.
    Postgres { url: String, schema: String },
}

impl Backend {
    /// The backend's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Redis { .. } => "redis",
            Backend::Postgres { .. } => "postgres",
        }
    }

    /// Opens this backend's store (a new connection or pool: one per process).
    pub async fn open(&self) -> Arc<dyn Store> {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite { path } => Arc::new(
                idem_runtime::SqliteStore::open(path)
                    .unwrap_or_else(|e| panic!("open {}: {e}", path.display())),
            ),
            #[cfg(feature = "redis")]
            Backend::Redis { url, prefix } => Arc::new(
                idem_runtime::RedisStore::connect(url)
                    .await
                    .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
                    .with_prefix(prefix.clone()),
            ),
            #[cfg(feature = "postgres")]
            Backend::Postgres { url, schema } => Arc::new(
                idem_runtime::PostgresStore::with_schema(url, schema)
                    .unwrap_or_else(|e| panic!("postgres store {url} {schema}: {e}")),
            ),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?}: this build lacks the backend's feature"),
        }
    }
}

/// Lease, TTL and wait of the tool, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Spans {
    pub ttl_ms: u64,
    pub lease_ms: u64,
    pub wait_ms: u64,
}

impl Spans {
    /// The `'static` spec of [`TOOL`] with these spans (leaked: a few per process).
    pub fn spec(self) -> &'static ToolSpec {
        Box::leak(Box::new(ToolSpec {
            name: TOOL,
            scope: Scope::Conversation,
            ttl: Duration::from_millis(self.ttl_ms),
            lease: Duration::from_millis(self.lease_ms),
            wait: Duration::from_millis(self.wait_ms),
            ..ToolSpec::new(TOOL)
        }))
    }
}

/// Where a child kills itself with SIGKILL (no destructor, no guard runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)] // the names of the points in issue 3: after_claim, …
pub enum CrashPoint {
    /// The claim landed; the body starts and dies before its effect.
    AfterClaim,
    /// The body's effect landed (its line is in `effects.jsonl`); the outcome is not saved.
    AfterEffect,
    /// `complete` answered `Saved`; the caller never gets the reply.
    AfterRecord,
}

/// What one child process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub backend: Backend,
    /// The run's folder: effects, results, barrier files, the child's stdout and stderr.
    pub dir: PathBuf,
    /// This child's name (unique within the run); it names its files and starts its outcomes.
    pub name: String,
    /// The manual clock's start, ms since the Unix epoch.
    pub start_ms: u64,
    /// If set, once the first claim answered, a thread moves the clock forward 1 ms per real
    /// millisecond up to this instant and stops it there (to let a bounded wait elapse
    /// without reaching the lease). Meant for jobs of one call.
    pub advance_to_ms: Option<u64>,
    pub spans: Spans,
    /// One list of orders per task: each task calls them one after the other; the tasks
    /// run concurrently on a 2-worker tokio runtime.
    pub tasks: Vec<Vec<u64>>,
    /// How long each body holds the claim after its effect (real time, to widen races).
    pub body_ms: u64,
    pub crash: Option<CrashPoint>,
    /// Where the child waits at the start barrier until the parent opens it.
    pub barrier: Barrier,
}

/// Where a child waits for the start barrier ([`spawn_together`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Barrier {
    /// No barrier: the child starts at once.
    None,
    /// After opening the store and a first read (connection, schema): the race is on the
    /// calls.
    BeforeCalls,
    /// Before opening the store: the race includes opening it (a new SQLite file, a new
    /// PostgreSQL schema) and its first use.
    BeforeOpen,
}

/// One line of `effects.jsonl`: one real execution of a body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectLine {
    pub order: u64,
    /// The key in force in the body ([`current_key`]), hex.
    pub key: Option<String>,
    pub child: String,
    pub pid: u32,
    /// The outcome the body returns.
    pub outcome: String,
}

/// One line of `results-<child>.jsonl`: what one call returned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultLine {
    pub task: usize,
    pub order: u64,
    pub result: Result<String, ToolError>,
    /// The call's [`CallRecord`] (`None` when it ended in a layer error before it had one).
    pub record: Option<CallRecord>,
}

/// The key of `order` (the same in every process: it does not depend on the store).
pub fn key_of(spans: Spans, order: u64) -> IdempotencyKey {
    let ctx = CallContext::new()
        .with_engine(Engine::new(MemoryStore::new(), ManualClock::new()))
        .with_conversation(CONVERSATION);
    prepare(spans.spec(), Some(&ctx), |a| {
        a.key("order", &order).map(drop)
    })
    .expect("a key")
    .key()
    .clone()
}

/// Reads a JSON-lines file (missing file: no lines).
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    };
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad line {line:?}: {e}", path.display()))
        })
        .collect()
}

/// The effects of a run so far.
pub fn effects(dir: &Path) -> Vec<EffectLine> {
    read_lines(&dir.join("effects.jsonl"))
}

/// The results a child wrote.
pub fn results(dir: &Path, child: &str) -> Vec<ResultLine> {
    read_lines(&dir.join(format!("results-{child}.jsonl")))
}

// ---------------------------------------------------------------------------------------
// Parent side

/// A child process started by [`spawn`].
pub struct Running {
    name: String,
    dir: PathBuf,
    child: std::process::Child,
}

/// Starts the test binary again as a child running `child_test` with `job`. Its stdout and
/// stderr go to files in the job's folder (shown if it fails).
pub fn spawn(child_test: &str, job: &Job) -> Running {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = File::create(job.dir.join(format!("stdout-{}.txt", job.name))).unwrap();
    let err = File::create(job.dir.join(format!("stderr-{}.txt", job.name))).unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            child_test,
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(JOB_VAR, serde_json::to_string(job).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("spawn the child process");
    Running {
        name: job.name.clone(),
        dir: job.dir.clone(),
        child,
    }
}

impl Running {
    /// Waits for the child (killing it and failing past [`CHILD_DEADLINE`]).
    pub fn wait(mut self) -> ExitStatus {
        let deadline = Instant::now() + CHILD_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "child {} still running after {CHILD_DEADLINE:?}; killed it\n{}",
                    self.name,
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the child and fails unless it exited with status 0.
    pub fn wait_success(self) {
        let (name, output) = (self.name.clone(), self.output_later());
        let status = self.wait();
        assert!(
            status.success(),
            "child {name} failed: {status}\n{}",
            output()
        );
    }

    /// Waits for the child and fails unless it died of SIGKILL (its crash point).
    pub fn wait_killed(self) {
        let (name, output) = (self.name.clone(), self.output_later());
        let status = self.wait();
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "child {name} should have killed itself, got {status}\n{}",
            output()
        );
    }

    fn output_later(&self) -> impl Fn() -> String {
        let (dir, name) = (self.dir.clone(), self.name.clone());
        move || child_output(&dir, &name)
    }

    fn output(&self) -> String {
        child_output(&self.dir, &self.name)
    }
}

fn child_output(dir: &Path, name: &str) -> String {
    let read = |what: &str| {
        std::fs::read_to_string(dir.join(format!("{what}-{name}.txt"))).unwrap_or_default()
    };
    format!(
        "--- stdout of {name}\n{}--- stderr of {name}\n{}",
        read("stdout"),
        read("stderr")
    )
}

/// Spawns one child per job, all waiting at the start barrier, and opens the barrier once
/// every child has opened its store and is ready.
pub fn spawn_together(child_test: &str, jobs: &[Job]) -> Vec<Running> {
    assert!(jobs.iter().all(|j| j.barrier != Barrier::None));
    let dir = &jobs[0].dir;
    let running: Vec<Running> = jobs.iter().map(|job| spawn(child_test, job)).collect();
    let deadline = Instant::now() + CHILD_DEADLINE;
    for job in jobs {
        let ready = dir.join(format!("ready-{}", job.name));
        while !ready.exists() {
            assert!(
                Instant::now() < deadline,
                "child {} never got ready\n{}",
                job.name,
                child_output(dir, &job.name)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    File::create(dir.join("go")).expect("open the start barrier");
    running
}

/// Runs `job` in one child and waits for it to exit with status 0; returns its results.
pub fn run_one(child_test: &str, job: &Job) -> Vec<ResultLine> {
    spawn(child_test, job).wait_success();
    results(&job.dir, &job.name)
}

/// Fresh resources for one run of one backend, removed when dropped: a temporary folder
/// (the SQLite file, effects, results) and, for the servers, a prefix or schema of its own.
pub struct Fresh {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
}

impl Fresh {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn sqlite() -> Fresh {
        let dir = tempfile::tempdir().expect("temporary folder");
        let backend = Backend::Sqlite {
            path: dir.path().join("idem.sqlite3"),
        };
        Fresh { backend, dir }
    }

    pub fn redis() -> Fresh {
        let url = std::env::var("IDEM_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("idem-test:{}:", uuid::Uuid::new_v4().simple());
        Fresh {
            backend: Backend::Redis { url, prefix },
            dir: tempfile::tempdir().expect("temporary folder"),
        }
    }

    pub fn postgres() -> Fresh {
        let url = std::env::var("IDEM_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!("idem_test_{}", uuid::Uuid::new_v4().simple());
        Fresh {
            backend: Backend::Postgres { url, schema },
            dir: tempfile::tempdir().expect("temporary folder"),
        }
    }

    /// A job on this run's backend and folder; callers fill in the rest.
    pub fn job(&self, name: &str, start_ms: u64, spans: Spans, tasks: Vec<Vec<u64>>) -> Job {
        Job {
            backend: self.backend.clone(),
            dir: self.dir.path().to_path_buf(),
            name: name.to_owned(),
            start_ms,
            advance_to_ms: None,
            spans,
            tasks,
            body_ms: 0,
            crash: None,
            barrier: Barrier::None,
        }
    }
}

impl Drop for Fresh {
    /// Deletes the run's Redis keys or PostgreSQL schema (on a thread of its own, so it
    /// works inside and outside a runtime); a failure is printed, not raised.
    fn drop(&mut self) {
        let backend = self.backend.clone();
        let done = std::thread::spawn(move || cleanup(&backend)).join();
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("cleanup of {:?} failed: {e}", self.backend),
            Err(_) => eprintln!("cleanup of {:?} panicked", self.backend),
        }
    }
}

fn cleanup(backend: &Backend) -> Result<(), String> {
    match backend {
        Backend::Sqlite { .. } => Ok(()), // the temporary folder goes with `Fresh`
        #[cfg(feature = "redis")]
        Backend::Redis { url, prefix } => {
            let client = ::redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
            let mut conn = client.get_connection().map_err(|e| e.to_string())?;
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query(&mut conn)
                .map_err(|e| e.to_string())?;
            if !keys.is_empty() {
                ::redis::cmd("DEL")
                    .arg(&keys)
                    .query::<usize>(&mut conn)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres { url, schema } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await
                    .map_err(|e| e.to_string())
            })
        }
        #[allow(unreachable_patterns)]
        _ => Ok(()),
    }
}

/// The record of `key` as the parent sees it at `now`, through a store of its own.
pub fn read_record(backend: &Backend, key: &IdempotencyKey, now: u64) -> Option<Record> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = backend.open().await;
        store
            .read(key, Timestamp::from_millis(now))
            .await
            .expect("read the record")
    })
}

// ---------------------------------------------------------------------------------------
// Child side

/// The child's entry point: runs the job in [`JOB_VAR`]; does nothing without one (the
/// child tests are `#[ignore]`d and only meant to be started by their parent test).
pub fn child_main() {
    let Ok(job) = std::env::var(JOB_VAR) else {
        eprintln!("{JOB_VAR} is not set: this test is a child process of the others");
        return;
    };
    let job: Job = serde_json::from_str(&job).expect("a job");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let lines = runtime.block_on(run_job(job.clone()));
    let mut text = String::new();
    for line in &lines {
        text.push_str(&serde_json::to_string(line).unwrap());
        text.push('\n');
    }
    std::fs::write(job.dir.join(format!("results-{}.jsonl", job.name)), text)
        .expect("write the results");
}

/// SIGKILL to this process: no destructor, no guard, no buffered write runs.
fn die() -> ! {
    // SAFETY: `kill` and `getpid` have no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught or ignored; this line is never reached.
    std::process::abort()
}

/// Appends one line with one `write` to a file opened with `O_APPEND`: lines written by
/// concurrent processes never interleave.
fn append_line(path: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    let written = file.write(&bytes).expect("append the line");
    assert_eq!(written, bytes.len(), "one write per line");
}

/// Tells the parent this child is ready, then waits for the barrier to open.
fn wait_at_the_barrier(job: &Job) {
    File::create(job.dir.join(format!("ready-{}", job.name))).unwrap();
    let go = job.dir.join("go");
    let deadline = Instant::now() + CHILD_DEADLINE;
    while !go.exists() {
        assert!(Instant::now() < deadline, "the barrier never opened");
        std::thread::sleep(Duration::from_micros(200));
    }
}

async fn run_job(job: Job) -> Vec<ResultLine> {
    if job.barrier == Barrier::BeforeOpen {
        wait_at_the_barrier(&job);
    }
    let claimed = Arc::new(AtomicBool::new(false));
    let store: Arc<dyn Store> = Arc::new(ChildStore {
        inner: job.backend.open().await,
        die_after_record: job.crash == Some(CrashPoint::AfterRecord),
        claimed: claimed.clone(),
    });
    let clock = ManualClock::starting_at(Timestamp::from_millis(job.start_ms));
    let engine = Engine::from_shared(store.clone(), Arc::new(clock.clone()));
    let spec = job.spans.spec();
    // Warm up (connect, schema) before calling: with `BeforeCalls` the race is on the calls.
    let warm_up = key_of(job.spans, u64::MAX);
    store
        .read(&warm_up, Timestamp::from_millis(job.start_ms))
        .await
        .expect("the store answers");
    if job.barrier == Barrier::BeforeCalls {
        wait_at_the_barrier(&job);
    }
    if let Some(target) = job.advance_to_ms {
        let clock = clock.clone();
        std::thread::spawn(move || {
            use idem_runtime::Clock;
            // The call read its start time before its first claim; move only after that.
            while !claimed.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_micros(200));
            }
            while clock.now().as_millis() < target {
                clock.advance(Duration::from_millis(1));
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }
    let job = Arc::new(job);
    let executions = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for (task, orders) in job.tasks.iter().cloned().enumerate() {
        let (job, engine, executions) = (job.clone(), engine.clone(), executions.clone());
        handles.push(tokio::spawn(async move {
            let ctx = CallContext::new()
                .with_engine(engine)
                .with_conversation(CONVERSATION);
            let mut lines = Vec::new();
            for order in orders {
                let result = call(&job, spec, &ctx, &executions, order).await;
                lines.push(ResultLine {
                    task,
                    order,
                    result,
                    record: ctx.last_outcome(),
                });
            }
            lines
        }));
    }
    let mut lines = Vec::new();
    for handle in handles {
        lines.extend(handle.await.expect("a calling task"));
    }
    lines
}

/// One call of [`TOOL`] for `order` through the full protocol. The body appends its effect
/// line and returns `"<child>/pid <pid>/run <n>"`, naming the process that executed it.
async fn call(
    job: &Job,
    spec: &'static ToolSpec,
    ctx: &CallContext,
    executions: &AtomicU64,
    order: u64,
) -> Result<String, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop))?;
    prepared
        .run(async {
            if job.crash == Some(CrashPoint::AfterClaim) {
                die();
            }
            let n = executions.fetch_add(1, Ordering::SeqCst);
            let pid = std::process::id();
            let outcome = format!("{}/pid {pid}/run {n}", job.name);
            let line = EffectLine {
                order,
                key: current_key().map(|k| k.as_str().to_owned()),
                child: job.name.clone(),
                pid,
                outcome: outcome.clone(),
            };
            append_line(
                &job.dir.join("effects.jsonl"),
                &serde_json::to_string(&line).unwrap(),
            );
            if job.crash == Some(CrashPoint::AfterEffect) {
                die();
            }
            if job.body_ms > 0 {
                tokio::time::sleep(Duration::from_millis(job.body_ms)).await;
            }
            Ok(outcome)
        })
        .await
}

/// The real store, watched: it tells when the first claim has answered (so that a job's
/// clock starts moving only once its call has read the time it starts waiting from), and
/// with `die_after_record` the process dies as soon as `complete` answered `Saved`: the
/// outcome is recorded and the caller never hears of it (crash point `after_record`).
#[derive(Debug)]
struct ChildStore {
    inner: Arc<dyn Store>,
    die_after_record: bool,
    claimed: Arc<AtomicBool>,
}

impl Store for ChildStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        Box::pin(async move {
            let claim = self.inner.claim(req).await;
            self.claimed.store(true, Ordering::SeqCst);
            claim
        })
    }
    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        self.inner.take_over(req)
    }
    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
        outcome: &'a Envelope,
        now: Timestamp,
    ) -> StoreFuture<'a, Completion> {
        Box::pin(async move {
            let completion = self.inner.complete(key, owner, outcome, now).await;
            if self.die_after_record && completion == Ok(Completion::Saved) {
                die();
            }
            completion
        })
    }
    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        self.inner.release(key, owner)
    }
    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        self.inner.read(key, now)
    }
    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.inner.renew(req)
    }
    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        self.inner.mark_unknown(req)
    }
    fn watch(&self, key: &IdempotencyKey) -> Option<ChangeSignal> {
        self.inner.watch(key)
    }
    fn needs_runtime_io(&self) -> bool {
        self.inner.needs_runtime_io()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}
