//! The harness the binary's tests share: running the built `idem` ([`idem`], [`Run`]), the
//! stores it and a test share ([`Backend`]: SQLite always, PostgreSQL and Redis with the
//! test-only features), and the records a tool's process writes there ([`Tool`]).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{ClaimRequest, OwnerToken};
use idem_runtime::testkit::ManualClock;
use idem_runtime::{
    prepare, CallContext, CallRecord, Clock, Engine, Fingerprint, IdempotencyKey, RecordLabel,
    ScopePath, SystemClock, Timestamp, ToolError, ToolSpec,
};
use serde_json::{json, Value};

pub static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect()
    }

    pub fn json(&self) -> Value {
        let lines = self.json_lines();
        assert_eq!(lines.len(), 1, "one JSON object: {self:?}");
        lines.into_iter().next().unwrap()
    }

    #[track_caller]
    pub fn expect(self, code: i32) -> Self {
        assert_eq!(self.code, code, "{self:?}");
        self
    }
}

/// Runs `idem ARGS` with none of `IDEM_STORE`, `IDEM_NAMESPACE` and `IDEM_ACTOR` in its
/// environment.
pub fn idem(args: &[&str]) -> Run {
    idem_env(args, &[])
}

/// Runs `idem ARGS` with `env` (and none of `IDEM_STORE`, `IDEM_NAMESPACE` and
/// `IDEM_ACTOR` otherwise).
pub fn idem_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    wait(spawn(args, env))
}

/// Runs `idem ARGS` without `USER` either, nor `IDEM_STORE`, `IDEM_NAMESPACE`,
/// `IDEM_ACTOR`: no actor to be found.
pub fn idem_without_user(args: &[&str]) -> Run {
    let mut command = command(args, &[]);
    command.env_remove("USER");
    wait(command.spawn().expect("the idem binary runs"))
}

/// Starts `idem ARGS` with `env` (and none of `IDEM_STORE`, `IDEM_NAMESPACE` and
/// `IDEM_ACTOR` otherwise).
pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    command(args, env).spawn().expect("the idem binary runs")
}

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args(args)
        .env_remove("IDEM_STORE")
        .env_remove("IDEM_NAMESPACE")
        .env_remove("IDEM_ACTOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// Waits for a run started by [`spawn`]; its output must be UTF-8.
pub fn wait(child: std::process::Child) -> Run {
    let output = child.wait_with_output().expect("the idem binary ends");
    Run {
        code: output.status.code().expect("an exit status"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A store the binary and the test share, deleted when dropped.
pub struct Backend {
    pub locator: String,
    _cleanup: Box<dyn std::any::Any>,
}

impl Backend {
    /// `idem --store LOCATOR ARGS`.
    pub fn idem(&self, args: &[&str]) -> Run {
        idem(&self.with_store(args))
    }

    /// `idem --store LOCATOR ARGS` with `env`.
    pub fn idem_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        idem_env(&self.with_store(args), env)
    }

    /// `idem --store LOCATOR ARGS` with neither `IDEM_ACTOR` nor `USER`.
    pub fn idem_without_user(&self, args: &[&str]) -> Run {
        idem_without_user(&self.with_store(args))
    }

    fn with_store<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--store", self.locator.as_str()];
        all.extend_from_slice(args);
        all
    }

    /// An engine over the store (in `namespace`, if any) and the runtime its connections
    /// live on.
    pub fn engine(&self, namespace: Option<&str>) -> Tool {
        self.build(|builder| match namespace {
            Some(ns) => builder.namespace(ns),
            None => builder,
        })
    }

    /// An engine over the store whose clock stands `ago` in the past (and stays there): what
    /// it claims was claimed then, and its lease lapsed long ago unless `ago` is shorter
    /// than the lease.
    pub fn engine_at(&self, ago: Duration) -> Tool {
        let then = SystemClock.now().as_millis() - ago.as_millis() as u64;
        let clock = ManualClock::starting_at(Timestamp::from_millis(then));
        self.build(|builder| builder.clock(clock))
    }

    fn build(
        &self,
        configure: impl FnOnce(idem_runtime::EngineBuilder) -> idem_runtime::EngineBuilder,
    ) -> Tool {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let engine = runtime.block_on(async {
            configure(Engine::builder().store_locator(self.locator.clone()))
                .build()
                .expect("the store opens")
        });
        Tool { runtime, engine }
    }
}

/// What one call of `send_refund` through [`Tool::call`] did.
#[derive(Debug)]
pub struct Called {
    /// What the call returned.
    pub result: Result<Value, ToolError>,
    /// Whether the body ran.
    pub ran: bool,
    /// The call's outcome (S12), when it reached one.
    pub outcome: Option<CallRecord>,
}

/// An engine, as a tool's process has one.
pub struct Tool {
    pub runtime: tokio::runtime::Runtime,
    pub engine: Engine,
}

impl Tool {
    /// Runs `send_refund(order_id, amount_cents = 500)` in `conversation`, as the tool
    /// would (both arguments in the key), and returns the key it derived.
    pub fn refund(&self, conversation: &str, order_id: u64) -> String {
        let ctx = CallContext::new()
            .with_engine(self.engine.clone())
            .with_conversation(conversation);
        let prepared = prepare(&SEND_REFUND, Some(&ctx), |a| {
            a.key("order_id", &order_id)?.key("amount_cents", &500)?;
            Ok(())
        })
        .unwrap();
        let key = prepared.key().to_string();
        let done: Result<Value, ToolError> = self.runtime.block_on(
            prepared.run(async move { Ok(json!({"refund_id": format!("re_{order_id}")})) }),
        );
        done.unwrap();
        // Distinct creation times, so that listing order is by time.
        std::thread::sleep(Duration::from_millis(5));
        key
    }

    /// Calls `send_refund(order_id, amount_cents = 500)` in `conversation` as the tool
    /// would (its body answers `{"refund_id": "re_ORDER"}`), and says what happened.
    pub fn call(&self, conversation: &str, order_id: u64) -> Called {
        self.call_tool(&SEND_REFUND, conversation, order_id)
    }

    /// Calls the tool `spec` as [`call`](Self::call) calls `send_refund`: the same
    /// arguments, the same body.
    pub fn call_tool(&self, spec: &'static ToolSpec, conversation: &str, order_id: u64) -> Called {
        let ctx = CallContext::new()
            .with_engine(self.engine.clone())
            .with_conversation(conversation);
        let prepared = prepare(spec, Some(&ctx), |a| {
            a.key("order_id", &order_id)?.key("amount_cents", &500)?;
            Ok(())
        })
        .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let body_ran = ran.clone();
        let result: Result<Value, ToolError> = self.runtime.block_on(prepared.run(async move {
            body_ran.store(true, Ordering::SeqCst);
            Ok(json!({"refund_id": format!("re_{order_id}")}))
        }));
        Called {
            result,
            ran: ran.load(Ordering::SeqCst),
            outcome: ctx.last_outcome(),
        }
    }

    /// Claims the key of `send_refund(order_id, 500)` in `conversation` as the tool's call
    /// would, and dies: no body, no release, no renewal, as after SIGKILL. Returns its key.
    pub fn crash(&self, conversation: &str, order_id: u64) -> String {
        let ctx = CallContext::new()
            .with_engine(self.engine.clone())
            .with_conversation(conversation);
        let prepared = prepare(&SEND_REFUND, Some(&ctx), |a| {
            a.key("order_id", &order_id)?.key("amount_cents", &500)?;
            Ok(())
        })
        .unwrap();
        let key = prepared.key().to_string();
        let claimed = self
            .runtime
            .block_on(prepared.claim::<Value, ToolError>())
            .unwrap_or_else(|answer| panic!("the first call claims: {answer:?}"));
        std::mem::forget(claimed);
        std::thread::sleep(Duration::from_millis(5));
        key
    }

    /// Claims a record of `send_refund` in `conversation` and leaves it in progress (a
    /// call still running); returns its key.
    pub fn running(&self, conversation: &str) -> String {
        self.claim(&RecordLabel::new(
            "send_refund",
            ScopePath::new().with("conversation", conversation),
        ))
    }

    /// Claims a record under a random key with `label` and leaves it in progress (lease
    /// 10 minutes, ttl 1 hour); returns its key.
    pub fn claim(&self, label: &RecordLabel) -> String {
        let key =
            IdempotencyKey::from_hex(&format!("{:064x}", OwnerToken::random().as_u128())).unwrap();
        let now = self.engine.clock().now();
        self.runtime.block_on(async {
            self.engine
                .store()
                .claim(ClaimRequest {
                    key: &key,
                    fingerprint: &Fingerprint::from_hex(&"0".repeat(64)).unwrap(),
                    owner: OwnerToken::random(),
                    now,
                    lease_until: now.saturating_add(Duration::from_secs(600)),
                    expires_at: now.saturating_add(Duration::from_secs(3600)),
                    label,
                })
                .await
                .unwrap()
        });
        std::thread::sleep(Duration::from_millis(5));
        key.to_string()
    }
}

/// An SQLite store in a temporary directory.
pub fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    // The binary never creates a store file: the tool's engine does, as in production.
    idem_runtime::SqliteStore::open(&path).unwrap();
    Backend {
        locator: format!("sqlite:{}", path.display()),
        _cleanup: Box::new(dir),
    }
}

/// The test PostgreSQL database: `IDEM_TEST_POSTGRES_URL`, by default
/// `postgres://postgres@127.0.0.1:5432/test`.
#[cfg(feature = "test-postgres")]
fn postgres_url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema of the test PostgreSQL database, dropped when the backend is.
#[cfg(feature = "test-postgres")]
pub fn postgres() -> Backend {
    struct DropSchema(String);
    impl Drop for DropSchema {
        fn drop(&mut self) {
            let _ = postgres_sql(format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.0));
        }
    }
    let url = postgres_url();
    let schema = format!("idem_cli_test_{}", OwnerToken::random().to_hex());
    let separator = if url.contains('?') { '&' } else { '?' };
    Backend {
        locator: format!("{url}{separator}idem_schema={schema}"),
        _cleanup: Box::new(DropSchema(schema)),
    }
}

/// Runs `sql` on the test database as `postgres` (a runtime of its own on a thread of its
/// own, so that it also runs from `Drop`).
#[cfg(feature = "test-postgres")]
pub fn postgres_sql(sql: String) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
    let url = postgres_url();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client.simple_query(&sql).await.map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap()
}

/// A fresh key prefix on the test Redis server (`IDEM_TEST_REDIS_URL`, by default
/// `redis://127.0.0.1:6379`), its keys deleted when the backend is dropped.
#[cfg(feature = "test-redis")]
pub fn redis() -> Backend {
    struct DeletePrefix {
        url: String,
        prefix: String,
    }
    impl Drop for DeletePrefix {
        fn drop(&mut self) {
            let Ok(client) = ::redis::Client::open(self.url.as_str()) else {
                return;
            };
            let Ok(mut conn) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = ::redis::cmd("KEYS")
                .arg(format!("{}*", self.prefix))
                .query(&mut conn)
                .unwrap_or_default();
            if !keys.is_empty() {
                let _: Result<usize, _> = ::redis::cmd("DEL").arg(&keys).query(&mut conn);
            }
        }
    }
    let url = std::env::var("IDEM_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("idem-cli-test:{}:", OwnerToken::random().to_hex());
    let separator = if url.contains('?') { '&' } else { '?' };
    Backend {
        locator: format!("{url}{separator}idem_prefix={prefix}"),
        _cleanup: Box::new(DeletePrefix { url, prefix }),
    }
}
