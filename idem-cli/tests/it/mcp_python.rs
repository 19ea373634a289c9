//! `idem mcp-proxy` between the official MCP Python SDK's client and a server written with
//! it (`tests/mcp/`): retries replay, other calls run, calls without a scope are refused,
//! read-only tools pass through, and a proxy killed mid-call leaves an unknown outcome, not
//! a second refund (contract Y1–Y9, U1, U2, U6).
//!
//! Needs the test-only feature `test-mcp-python` and a Python with `mcp==2.3.0`: the venv
//! `.ci/install-mcp-deps.sh` makes in `target/mcp-venv`, or `IDEM_TEST_MCP_PYTHON`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::idem;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let python = std::env::var_os("IDEM_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/mcp-venv/bin/python"));
    assert!(
        python.exists(),
        "no Python with the MCP SDK at {}: run .ci/install-mcp-deps.sh (or set IDEM_TEST_MCP_PYTHON)",
        python.display()
    );
    python
}

fn fixture(name: &str) -> String {
    repo()
        .join("idem-cli/tests/mcp")
        .join(name)
        .display()
        .to_string()
}

/// A scratch directory with the refunds and lookups files, a store and a config.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("idem.toml"), config).unwrap();
        Scene { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn store(&self) -> String {
        format!("sqlite:{}", self.path("proxy.db"))
    }

    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The command the client starts: the proxy (its pid written to `proxy.pid`) in front
    /// of the Python server.
    fn proxy_command(&self) -> Vec<String> {
        let script = format!(
            "echo $$ > '{}'; exec '{}' mcp-proxy --store '{}' --config '{}' -- '{}' '{}'",
            self.path("proxy.pid"),
            env!("CARGO_BIN_EXE_idem"),
            self.store(),
            self.path("idem.toml"),
            python().display(),
            fixture("payments_server.py"),
        );
        vec!["sh".into(), "-c".into(), script]
    }

    fn client(&self, steps: &Value, mode: &str, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(python());
        command
            .arg(fixture("client.py"))
            .arg(steps.to_string())
            .arg("--")
            .args(self.proxy_command())
            .env("MCP_CLIENT_MODE", mode)
            .env("REFUNDS_FILE", self.path("refunds"))
            .env("LOOKUPS_FILE", self.path("lookups"))
            .env("IDEM_LOG", "warn")
            .env_remove("IDEM_STORE")
            .env_remove("REFUND_DELAY_MS");
        for (name, value) in env {
            command.env(name, value);
        }
        command
    }

    /// Runs the client to its end: one JSON value per step.
    fn run(&self, steps: Value, mode: &str) -> Vec<Value> {
        let output = self.client(&steps, mode, &[]).output().unwrap();
        parse(&output)
    }
}

fn parse(output: &Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "the client failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn refund(order: &str, cents: u64, conversation: Option<&str>) -> Value {
    let mut step =
        json!({"tool": "send_refund", "arguments": {"order_id": order, "amount_cents": cents}});
    if let Some(conversation) = conversation {
        step["meta"] = json!({ "conversationId": conversation });
    }
    step
}

fn lookup(order: &str) -> Value {
    json!({"tool": "lookup_order", "arguments": {"order_id": order}})
}

// pins Y1, Y2, Y3, M3, M5: through the proxy, a retry replays, another order runs, a call
// without a conversation is refused, a read-only tool runs every time; in both of the SDK
// client's protocol eras; keys are those of `idem key` (a Rust tool's)
#[test]
fn the_python_sdk_retries_through_the_proxy() {
    for mode in ["legacy", "auto"] {
        let scene = Scene::new("");
        let out = scene.run(
            json!([
                refund("o1", 500, Some("c1")),
                refund("o1", 500, Some("c1")),
                refund("o2", 500, Some("c1")),
                refund("o3", 100, None),
                lookup("o1"),
                lookup("o1"),
            ]),
            mode,
        );
        assert_eq!(out.len(), 6, "{mode}: {out:?}");
        assert_eq!(out[0]["meta"]["idem/status"], "executed", "{mode}");
        assert_eq!(out[1]["meta"]["idem/status"], "replayed", "{mode}");
        assert_eq!(out[1]["text"], out[0]["text"], "{mode}");
        assert_eq!(out[1]["structured"], out[0]["structured"], "{mode}");
        assert_eq!(out[0]["text"], "refund re_1 of 500 cents on o1", "{mode}");
        assert_eq!(out[2]["meta"]["idem/status"], "executed", "{mode}");
        assert_eq!(out[2]["text"], "refund re_2 of 500 cents on o2", "{mode}");
        assert_eq!(out[3]["isError"], true, "{mode}");
        assert_eq!(out[3]["meta"]["idem/error"], "missing_scope", "{mode}");
        assert!(
            out[3]["text"]
                .as_str()
                .unwrap()
                .contains("`_meta.conversationId`"),
            "{mode}: {}",
            out[3]["text"]
        );
        for read in &out[4..] {
            assert_eq!(read["text"], "order o1: paid", "{mode}");
            assert!(read["meta"].get("idem/status").is_none(), "{mode}: {read}");
        }
        assert_eq!(scene.lines("refunds"), ["o1 500", "o2 500"], "{mode}");
        assert_eq!(scene.lines("lookups"), ["lookup o1", "lookup o1"], "{mode}");

        // The key a Rust `#[idempotent]` send_refund(order_id, amount_cents) derives.
        let key = idem(&[
            "key",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c1",
            "--args",
            r#"{"order_id":"o1","amount_cents":500}"#,
        ])
        .expect(0);
        assert_eq!(out[0]["meta"]["idem/key"], key.stdout.trim(), "{mode}");
        // The proxy's records are ordinary records.
        let listed = idem(&["--store", &scene.store(), "ls", "--json"]).expect(0);
        let tools: Vec<Value> = listed
            .json_lines()
            .iter()
            .map(|r| r["tool"].clone())
            .collect();
        assert_eq!(
            tools,
            [json!("send_refund"), json!("send_refund")],
            "{mode}"
        );
    }
}

// pins Y6, U1, U2, U6, Y9: the proxy killed with SIGKILL after the server made the refund
// and before the outcome was saved: a new proxy on the same SQLite store answers the retry
// with an unknown outcome held for a person, never a second refund; the person's decision
// is replayed
#[test]
fn a_proxy_killed_mid_call_leaves_an_unknown_outcome_not_a_second_refund() {
    let scene = Scene::new("lease = \"1s\"\n");
    let step = json!([refund("o1", 500, Some("c1"))]);
    let first = scene
        .client(&step, "legacy", &[("REFUND_DELAY_MS", "5000")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while scene.lines("refunds").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no refund made"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(scene.path("proxy.pid")).unwrap();
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = first.wait_with_output().unwrap();
    assert!(!output.status.success(), "the client saw its proxy die");
    assert_eq!(scene.lines("refunds"), ["o1 500"]);

    // Retries through a new proxy: in progress while the dead proxy's lease runs, then
    // the unknown outcome, held.
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let out = scene.run(step.clone(), "legacy");
        if out[0]["meta"]["idem/error"] != "in_progress" {
            break out[0].clone();
        }
        assert!(Instant::now() < deadline, "still in progress: {out:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer["isError"], true, "{answer}");
    assert_eq!(answer["meta"]["idem/error"], "outcome_unknown", "{answer}");
    assert!(
        answer["meta"].get("idem/retryAfterMs").is_none(),
        "held: {answer}"
    );
    assert_eq!(scene.lines("refunds"), ["o1 500"], "never a second refund");

    // The operator checks the bank and records that it happened, with the result the tool
    // would have returned (its output schema asks for structuredContent).
    let key = answer["meta"]["idem/key"].as_str().unwrap().to_owned();
    let shown = idem(&["--store", &scene.store(), "show", &key, "--json"]).expect(0);
    assert_eq!(shown.json()["state"], "outcome_unknown", "{shown:?}");
    let text = "refund re_1 (checked at the bank)";
    let output = json!({"content": [{"type": "text", "text": text}],
                        "structuredContent": {"result": text}});
    idem(&[
        "--store",
        &scene.store(),
        "resolve",
        &key,
        "--applied",
        "--output",
        &output.to_string(),
        "--actor",
        "ops",
    ])
    .expect(0);
    let out = scene.run(step, "legacy");
    assert_eq!(
        out[0]["text"], "refund re_1 (checked at the bank)",
        "{out:?}"
    );
    assert_eq!(out[0]["isError"], false, "{out:?}");
    assert_eq!(scene.lines("refunds"), ["o1 500"]);
}
