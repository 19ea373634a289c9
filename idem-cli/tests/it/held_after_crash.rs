//! Issue 17's scenario, with real processes: a worker is SIGKILLed after its effect (no
//! reconcile function, default options); once its lease lapsed, 20 retries over 5 lease
//! lengths run nothing (U2); `idem resolve` decides (U6); the history tells the story (U7).
//! On SQLite always, on PostgreSQL and Redis with the test-only features (the memory store
//! dies with its process: its scenario is the conformance suite's, with the API).
//!
//! The worker is this test binary started again (`worker`, ignored unless run as a child),
//! which calls `send_refund` on the shared store; its body appends one line to an effects
//! file, tells the parent, and waits to be killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idem_runtime::{prepare, CallContext, CallStatus, Error, OutcomeSource, ToolError, ToolSpec};
use serde_json::{json, Value};

use crate::common::{self, Backend};

/// The worker's settings, from the parent.
const STORE_VAR: &str = "IDEM_HELD_TEST_STORE";
const DIR_VAR: &str = "IDEM_HELD_TEST_DIR";

/// The lease of the scenario's tool: short, so that 5 lease lengths take 2 s.
const LEASE: Duration = Duration::from_millis(400);

static HELD_REFUND: ToolSpec = ToolSpec {
    lease: LEASE,
    wait: Duration::ZERO,
    ..ToolSpec::new("held_refund")
};

/// One call of `held_refund(order_id)` in conversation `c-held` on `engine`; the body
/// appends `effect` to `effects` and then runs `then`.
async fn call(
    engine: &idem_runtime::Engine,
    effects: &Path,
    effect: &str,
    then: impl std::future::Future<Output = ()>,
) -> (Result<Value, ToolError>, CallContext) {
    let ctx = CallContext::new()
        .with_engine(engine.clone())
        .with_conversation("c-held");
    let prepared = prepare(&HELD_REFUND, Some(&ctx), |a| {
        a.key("order_id", &4417u64).map(drop)
    })
    .unwrap();
    let answer = prepared
        .run(async {
            let mut lines = fs::read_to_string(effects).unwrap_or_default();
            lines.push_str(effect);
            lines.push('\n');
            fs::write(effects, lines).unwrap();
            then.await;
            Ok(json!({"refund_id": "re_from_body"}))
        })
        .await;
    (answer, ctx)
}

/// The child: claims, has its effect, says so, and waits for SIGKILL.
#[test]
#[ignore = "a child process of held_after_crash's scenarios"]
fn worker() {
    let (Ok(store), Ok(dir)) = (std::env::var(STORE_VAR), std::env::var(DIR_VAR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = idem_runtime::Engine::builder()
            .store_locator(store)
            .build()
            .unwrap();
        let signal = dir.join("effect-done");
        let _ = call(&engine, &dir.join("effects"), "worker", async {
            fs::write(&signal, "").unwrap();
            std::future::pending::<()>().await
        })
        .await;
    });
}

fn effects(dir: &Path) -> usize {
    fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Starts the worker on `backend` and kills it with SIGKILL once its effect happened.
fn kill_after_effect(backend: &Backend, dir: &Path) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "held_after_crash::worker",
            "--ignored",
            "--nocapture",
        ])
        .env(STORE_VAR, &backend.locator)
        .env(DIR_VAR, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("effect-done").exists() {
        assert!(Instant::now() < deadline, "the worker had its effect");
        assert!(child.try_wait().unwrap().is_none(), "the worker is alive");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL: no release, no marking, no renewal
    child.wait().unwrap();
}

fn events(history: &Value) -> Vec<String> {
    history["history"]
        .as_array()
        .unwrap_or_else(|| panic!("a history array: {history}"))
        .iter()
        .map(|e| match (e["cause"].as_str(), e["decision"].as_str()) {
            (Some(cause), _) => format!("{}({cause})", e["event"].as_str().unwrap()),
            (_, Some(decision)) => format!("{}({decision})", e["event"].as_str().unwrap()),
            _ => e["event"].as_str().unwrap().to_owned(),
        })
        .collect()
}

/// The scenario on `backend`, decided by `decision` (`idem resolve` arguments after KEY).
fn scenario(backend: &Backend, decision: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    kill_after_effect(backend, dir.path());
    assert_eq!(effects(dir.path()), 1);
    let tool = backend.engine(None);
    let retry = || {
        tool.runtime.block_on(call(
            &tool.engine,
            &dir.path().join("effects"),
            "retry",
            async {},
        ))
    };
    // After the lease lapses, 20 retries over 5 lease lengths run nothing.
    std::thread::sleep(LEASE);
    let started = Instant::now();
    let mut key = String::new();
    for n in 0..20u32 {
        let (answer, ctx) = retry();
        match answer {
            Err(ToolError::Idem(Error::OutcomeUnknown {
                held: true, key: k, ..
            })) => key = k,
            other => panic!("retry {n}: held, got {other:?}"),
        }
        assert!(ctx.last_outcome().is_none());
        std::thread::sleep(LEASE * 5 / 20);
    }
    assert!(
        started.elapsed() >= LEASE * 5,
        "the retries spanned 5 lease lengths"
    );
    assert_eq!(effects(dir.path()), 1, "nothing ran again");

    let shown = backend.idem(&["show", &key, "--json"]).expect(0).json();
    let fence = shown["fence"].as_u64().unwrap().to_string();
    let mut args = vec!["resolve", key.as_str()];
    args.extend_from_slice(decision);
    args.extend_from_slice(&[
        "--actor",
        "ana",
        "--note",
        "checked the bank",
        "--expect-fence",
        &fence,
    ]);
    backend.idem(&args).expect(0);
    let history = backend
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        events(&history)[..3],
        [
            "claimed",
            "unknown(lease_lapsed)",
            &format!("resolved({})", decision_name(decision))
        ],
        "{history}"
    );
    let resolved = &history["history"][2];
    assert_eq!(
        (resolved["actor"].as_str(), resolved["note"].as_str()),
        (Some("ana"), Some("checked the bank"))
    );

    let (answer, ctx) = retry();
    let outcome = ctx.last_outcome().unwrap();
    if decision[0] == "--applied" {
        assert_eq!(answer.unwrap(), json!({"refund_id": "re_from_the_bank"}));
        assert_eq!(
            (outcome.status, outcome.source),
            (CallStatus::Replayed, OutcomeSource::Resolved)
        );
        assert_eq!(effects(dir.path()), 1, "replayed, not run");
    } else {
        assert_eq!(answer.unwrap(), json!({"refund_id": "re_from_body"}));
        assert_eq!(
            (outcome.status, outcome.fence),
            (CallStatus::Executed, 2),
            "a larger fence"
        );
        assert_eq!(effects(dir.path()), 2, "exactly once more");
    }
    // A replay reads and writes nothing new.
    let before = backend
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    let (again, ctx) = retry();
    assert!(again.is_ok());
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    let after = backend
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(before["history"], after["history"]);
    assert_eq!(
        effects(dir.path()),
        if decision[0] == "--applied" { 1 } else { 2 }
    );
}

fn decision_name(decision: &[&str]) -> &'static str {
    match decision[0] {
        "--applied" => "applied",
        "--not-applied" => "not_applied",
        _ => "error",
    }
}

const APPLIED: &[&str] = &[
    "--applied",
    "--output",
    r#"{"refund_id":"re_from_the_bank"}"#,
];
const NOT_APPLIED: &[&str] = &["--not-applied"];

// pins U1, U2, U6, U7 on SQLite: SIGKILL after the effect, held, resolved applied
#[test]
fn sqlite_crash_is_held_then_resolved_applied() {
    scenario(&common::sqlite(), APPLIED);
}

// pins U1, U2, U6, F1 on SQLite: SIGKILL after the effect, held, resolved not applied
#[test]
fn sqlite_crash_is_held_then_resolved_not_applied() {
    scenario(&common::sqlite(), NOT_APPLIED);
}

// pins U1, U2, U6, U7 on PostgreSQL
#[cfg(feature = "test-postgres")]
#[test]
fn postgres_crash_is_held_then_resolved() {
    scenario(&common::postgres(), APPLIED);
    scenario(&common::postgres(), NOT_APPLIED);
}

// pins U1, U2, U6, U7 on Redis
#[cfg(feature = "test-redis")]
#[test]
fn redis_crash_is_held_then_resolved() {
    scenario(&common::redis(), APPLIED);
    scenario(&common::redis(), NOT_APPLIED);
}
