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
//!   that kills itself writes none);
//! - every lease renewal a child's store answered appends one line to `renewals.jsonl`.
//!
//! Clocks: a child runs on a [`ManualClock`] that starts at the instant the parent chose
//! ([`Job::start_ms`]); it moves only if the job says so ([`Job::advance_to_ms`]), never by
//! sleeping. A job with [`ChildClock::System`] runs on the wall clock instead (real leases,
//! real renewals, for the heartbeat tests). Lease, TTL, wait and heartbeat come from the
//! [`Spans`] the parent passes.
//!
//! A job with [`Polling`] calls its one order again and again at a fixed real-time pace
//! (a client retrying with a zero wait) and appends each call's result as it comes, so a
//! poller that is killed still leaves the results of its calls so far.

#![allow(dead_code)] // each test binary uses its own subset

#[path = "../support/intercept.rs"]
mod intercept;
use intercept::{Intercept, Intercepted};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, Record, RenewRequest, StoreFuture,
};
use idem_runtime::testkit::ManualClock;
use idem_runtime::{
    current_attempt, current_key, prepare, CallContext, CallRecord, Clock, Engine, MemoryStore,
    OnCancel, OnUnknown, Scope, Store, SystemClock, Timestamp, ToolError, ToolSpec, UnknownCause,
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

/// Lease, TTL, wait and heartbeat of the tool, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Spans {
    pub ttl_ms: u64,
    pub lease_ms: u64,
    pub wait_ms: u64,
    /// The renewal period (L1); `None`: the default, a third of the lease.
    pub heartbeat_ms: Option<u64>,
}

impl Spans {
    /// The `'static` spec of [`TOOL`] with these spans (leaked: a few per process). Its
    /// unknown outcomes are re-run (`on_unknown = "rerun"`, U2a): the crash tests pin that
    /// a dead owner's claim is taken over once its lease lapsed, and the hammer never lets
    /// a lease lapse.
    pub fn spec(self) -> &'static ToolSpec {
        Box::leak(Box::new(ToolSpec {
            name: TOOL,
            scope: Scope::Conversation,
            ttl: Duration::from_millis(self.ttl_ms),
            lease: Duration::from_millis(self.lease_ms),
            wait: Duration::from_millis(self.wait_ms),
            heartbeat: self.heartbeat_ms.map(Duration::from_millis),
            on_cancel: OnCancel::Hold,
            on_unknown: OnUnknown::Rerun,
            reconcile: false,
            store: None,
            audit: false,
            approval: None,
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
    /// The engine's clock: the manual clock at `start_ms` (the default), or the wall clock.
    pub clock: ChildClock,
    /// If set, the job's one task calls its one order repeatedly (see [`Polling`]).
    pub polling: Option<Polling>,
}

/// The clock a child's engine runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildClock {
    /// A [`ManualClock`] at [`Job::start_ms`], moved only by [`Job::advance_to_ms`].
    Manual,
    /// [`SystemClock`]: real time, real lease lapses, real renewals (`start_ms` is ignored).
    System,
}

/// A child that calls one order again and again, one call every `every_ms` of real time
/// (from the start of one call to the start of the next), like a client retrying.
///
/// It stops once a call returned anything but `InProgress` and `then` more calls were made
/// after it, or after `max_calls` calls in all (the parent then finds no settled result).
/// Each call's [`ResultLine`] is appended to `results-<child>.jsonl` when it returns, and
/// the file `polling-<child>` appears once the first call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Polling {
    pub every_ms: u64,
    pub max_calls: u32,
    pub then: u32,
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
    /// The attempt the body saw ([`current_attempt`]).
    pub attempt: Option<AttemptLine>,
}

/// What a body saw of its attempt (F1, U2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLine {
    pub fence: u64,
    /// When this attempt claimed or took over the key (engine clock, ms).
    pub claimed_at_ms: u64,
    pub takeover: bool,
    /// The run it took over, if any.
    pub previous: Option<PreviousLine>,
}

/// [`idem_runtime::PreviousRun`], as a body saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousLine {
    pub claimed_at_ms: u64,
    pub fence: u64,
    pub unknown_since_ms: u64,
    /// `lease_lapsed` or `gave_up`.
    pub cause: String,
}

impl PreviousLine {
    pub const LEASE_LAPSED: &'static str = "lease_lapsed";
    pub const GAVE_UP: &'static str = "gave_up";
}

/// One line of `renewals.jsonl`: one lease renewal a child's store answered (L1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewalLine {
    pub child: String,
    /// The renewal's "now" (engine clock, ms).
    pub now_ms: u64,
    /// The lease deadline it asked for.
    pub lease_until_ms: u64,
    /// `Ok(true)`: renewed; `Ok(false)`: the claim was lost; `Err`: a store error.
    pub renewed: Result<bool, String>,
}

/// One line of `results-<child>.jsonl`: what one call returned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultLine {
    pub task: usize,
    pub order: u64,
    pub result: Result<String, ToolError>,
    /// The call's [`CallRecord`] (`None` when it ended in a layer error before it had one).
    pub record: Option<CallRecord>,
    /// When the call started and returned (wall clock, ms since the epoch).
    pub started_ms: u64,
    pub ended_ms: u64,
}

/// This machine's wall clock, ms since the Unix epoch (what [`SystemClock`] reads).
pub fn wall_ms() -> u64 {
    SystemClock.now().as_millis()
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

/// The lease renewals of a run so far, by every child.
pub fn renewals(dir: &Path) -> Vec<RenewalLine> {
    read_lines(&dir.join("renewals.jsonl"))
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
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child has exited (it is not reaped: [`wait`](Self::wait) still works).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("look at the child").is_some()
    }

    /// Sends SIGKILL to the child now; returns the wall clock ([`wall_ms`]) just before.
    /// Fails if the child already exited (nothing would have been killed).
    pub fn sigkill(&mut self) -> u64 {
        if let Some(status) = self.child.try_wait().expect("look at the child") {
            panic!(
                "child {} exited ({status}) before it was to be killed\n{}",
                self.name,
                self.output()
            );
        }
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        let at = wall_ms();
        // SAFETY: `kill` has no memory-safety preconditions; `pid` is our own child, not
        // yet reaped (so its pid cannot have been reused).
        let sent = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(sent, 0, "kill({pid}, SIGKILL) failed");
        at
    }

    /// Waits, polling every 2 ms, until `done()` holds; fails (with the child's output) if
    /// the child exits first or `deadline` passes. Returns the wall clock when it held.
    pub fn wait_until(
        &mut self,
        what: &str,
        deadline: Duration,
        mut done: impl FnMut() -> bool,
    ) -> u64 {
        let until = Instant::now() + deadline;
        loop {
            if done() {
                return wall_ms();
            }
            if let Some(status) = self.child.try_wait().expect("look at the child") {
                panic!(
                    "child {} exited ({status}) while the parent waited for {what}\n{}",
                    self.name,
                    self.output()
                );
            }
            assert!(
                Instant::now() < until,
                "{what}: not within {deadline:?}\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

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

impl Drop for Running {
    /// A child still running when its parent lets go of it (a failed test) is killed, so
    /// that no process outlives the test and its folder.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
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
            clock: ChildClock::Manual,
            polling: None,
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

/// The parent's own connection to a run's store, for repeated reads (each read is one
/// store round trip, not a new connection).
pub struct Observer {
    runtime: tokio::runtime::Runtime,
    store: Arc<dyn Store>,
}

impl Observer {
    pub fn new(backend: &Backend) -> Observer {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = runtime.block_on(backend.open());
        Observer { runtime, store }
    }

    /// The record of `key` at `now`.
    pub fn read(&self, key: &IdempotencyKey, now: u64) -> Option<Record> {
        self.runtime.block_on(async {
            self.store
                .read(key, Timestamp::from_millis(now))
                .await
                .expect("read the record")
        })
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
    if job.polling.is_some() {
        return; // each call's line is already appended
    }
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
    let store: Arc<dyn Store> = Arc::new(Intercepted::new(
        job.backend.open().await,
        ChildStore {
            die_after_record: job.crash == Some(CrashPoint::AfterRecord),
            claimed: claimed.clone(),
            renewals: job.dir.join("renewals.jsonl"),
            child: job.name.clone(),
        },
    ));
    let clock = ManualClock::starting_at(Timestamp::from_millis(job.start_ms));
    let engine_clock: Arc<dyn Clock> = match job.clock {
        ChildClock::Manual => Arc::new(clock.clone()),
        ChildClock::System => Arc::new(SystemClock),
    };
    let engine = Engine::from_shared(store.clone(), engine_clock);
    let spec = job.spans.spec();
    // Warm up (connect, schema) before calling: with `BeforeCalls` the race is on the calls.
    let warm_up = key_of(job.spans, u64::MAX);
    let warm_up_at = match job.clock {
        ChildClock::Manual => job.start_ms,
        ChildClock::System => wall_ms(),
    };
    store
        .read(&warm_up, Timestamp::from_millis(warm_up_at))
        .await
        .expect("the store answers");
    if job.barrier == Barrier::BeforeCalls {
        wait_at_the_barrier(&job);
    }
    if let Some(target) = job.advance_to_ms {
        let clock = clock.clone();
        std::thread::spawn(move || {
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
    if let Some(polling) = job.polling {
        poll(&job, polling, spec, &engine, &executions).await;
        return Vec::new();
    }
    let mut handles = Vec::new();
    for (task, orders) in job.tasks.iter().cloned().enumerate() {
        let (job, engine, executions) = (job.clone(), engine.clone(), executions.clone());
        handles.push(tokio::spawn(async move {
            let ctx = CallContext::new()
                .with_engine(engine)
                .with_conversation(CONVERSATION);
            let mut lines = Vec::new();
            for order in orders {
                let started_ms = wall_ms();
                let result = call(&job, spec, &ctx, &executions, order).await;
                lines.push(ResultLine {
                    task,
                    order,
                    result,
                    record: ctx.last_outcome(),
                    started_ms,
                    ended_ms: wall_ms(),
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

/// The polling job: one order, called every `every_ms` until settled (see [`Polling`]).
async fn poll(
    job: &Job,
    polling: Polling,
    spec: &'static ToolSpec,
    engine: &Engine,
    executions: &AtomicU64,
) {
    assert_eq!(job.tasks.len(), 1, "a polling job has one task");
    assert_eq!(job.tasks[0].len(), 1, "a polling job calls one order");
    let order = job.tasks[0][0];
    let results = job.dir.join(format!("results-{}.jsonl", job.name));
    let marker = job.dir.join(format!("polling-{}", job.name));
    let mut after_settled: Option<u32> = None;
    let mut next = Instant::now();
    for _ in 0..polling.max_calls {
        // A context per call: its `last_outcome` is this call's, never an earlier one's.
        let ctx = CallContext::new()
            .with_engine(engine.clone())
            .with_conversation(CONVERSATION);
        let started_ms = wall_ms();
        let result = call(job, spec, &ctx, executions, order).await;
        let busy = matches!(
            &result,
            Err(ToolError::Idem(idem_runtime::Error::InProgress { .. }))
        );
        let line = ResultLine {
            task: 0,
            order,
            result,
            record: ctx.last_outcome(),
            started_ms,
            ended_ms: wall_ms(),
        };
        append_line(&results, &serde_json::to_string(&line).unwrap());
        if !marker.exists() {
            File::create(&marker).unwrap();
        }
        if let Some(done) = after_settled.as_mut() {
            *done += 1;
        } else if !busy {
            after_settled = Some(0);
        }
        if after_settled.is_some_and(|done| done >= polling.then) {
            return;
        }
        next += Duration::from_millis(polling.every_ms);
        tokio::time::sleep_until(next.into()).await;
    }
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
            let attempt = current_attempt().map(|a| AttemptLine {
                fence: a.fence(),
                claimed_at_ms: a.claimed_at().as_millis(),
                takeover: a.is_takeover(),
                previous: a.previous().map(|p| PreviousLine {
                    claimed_at_ms: p.claimed_at.as_millis(),
                    fence: p.fence,
                    unknown_since_ms: p.unknown_since.as_millis(),
                    cause: match p.cause {
                        UnknownCause::LeaseLapsed => PreviousLine::LEASE_LAPSED,
                        UnknownCause::GaveUp => PreviousLine::GAVE_UP,
                    }
                    .to_owned(),
                }),
            });
            let line = EffectLine {
                order,
                key: current_key().map(|k| k.as_str().to_owned()),
                child: job.name.clone(),
                pid,
                outcome: outcome.clone(),
                attempt,
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
    die_after_record: bool,
    claimed: Arc<AtomicBool>,
    /// `renewals.jsonl`: every renewal's answer is appended there (after it answered).
    renewals: PathBuf,
    child: String,
}

impl Intercept for ChildStore {
    fn claim<'a>(&'a self, inner: &'a dyn Store, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        Box::pin(async move {
            let claim = inner.claim(req).await;
            self.claimed.store(true, Ordering::SeqCst);
            claim
        })
    }
    fn renew<'a>(&'a self, inner: &'a dyn Store, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let (now_ms, lease_until_ms) = (req.now.as_millis(), req.lease_until.as_millis());
            let renewed = inner.renew(req).await;
            let line = RenewalLine {
                child: self.child.clone(),
                now_ms,
                lease_until_ms,
                renewed: renewed.clone().map_err(|e| e.to_string()),
            };
            append_line(&self.renewals, &serde_json::to_string(&line).unwrap());
            renewed
        })
    }
    fn complete<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: CompleteRequest<'a>,
    ) -> StoreFuture<'a, Completion> {
        Box::pin(async move {
            let completion = inner.complete(req).await;
            if self.die_after_record && completion == Ok(Completion::Saved) {
                die();
            }
            completion
        })
    }
}
