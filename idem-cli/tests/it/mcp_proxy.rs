//! `idem mcp-proxy` driven with raw JSON-RPC lines in front of a scriptable server
//! (`examples/fake_mcp_server.rs`, which `cargo test` builds): request ids in both
//! directions, a server that crashes mid-call, malformed lines, cancellation, concurrent
//! duplicates and a configuration the server contradicts (contract Y1–Y8).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The fake server, built by `cargo test` beside this test binary (target/…/examples/).
fn fake_server() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let server = profile.join("examples/fake_mcp_server");
    assert!(
        server.exists(),
        "{} is missing: `cargo test` builds it (cargo build -p idem-cli --examples)",
        server.display()
    );
    server
}

/// A proxy in front of the fake server, and a client's view of it.
struct Proxy {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Messages that arrived while waiting for another.
    seen: Vec<Value>,
    dir: Arc<tempfile::TempDir>,
}

impl Proxy {
    fn start(config: &str) -> Proxy {
        Proxy::start_in(Arc::new(tempfile::tempdir().unwrap()), config)
    }

    /// A proxy whose store and files are in `dir` (another proxy's, to share its store).
    fn start_in(dir: Arc<tempfile::TempDir>, config: &str) -> Proxy {
        let config_path = dir.path().join("idem.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["mcp-proxy", "--store"])
            .arg(format!("sqlite:{}", dir.path().join("proxy.db").display()))
            .arg("--config")
            .arg(&config_path)
            .arg("--")
            .arg(fake_server())
            .env("FAKE_EFFECTS", dir.path().join("effects"))
            .env("FAKE_LOG", dir.path().join("log"))
            .env("IDEM_LOG", "warn")
            .env_remove("IDEM_STORE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        // Every line as the proxy wrote it, for the tests of exact forwarding.
        let mut transcript = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("client_saw"))
            .unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(transcript, "{line}");
                let value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the proxy wrote a line that is not JSON ({e}): {line}")
                });
                if sender.send(value).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proxy {
            child: Some(child),
            stdin,
            lines,
            seen: Vec::new(),
            dir,
        }
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_line(&message.to_string());
    }

    /// The next message that `matches`, within 10 s; the others are kept in `seen`.
    fn wait_for(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.seen.iter().position(&matches) {
            return self.seen.remove(at);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(message) if matches(&message) => return message,
                Ok(message) => self.seen.push(message),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {what} within 10 s; seen {:?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "the proxy closed its output before {what}; seen {:?}",
                        self.seen
                    )
                }
            }
        }
    }

    /// Whether a message that `matches` arrives within `within`.
    fn arrives(&mut self, within: Duration, matches: impl Fn(&Value) -> bool) -> bool {
        if self.seen.iter().any(&matches) {
            return true;
        }
        let deadline = Instant::now() + within;
        while let Ok(message) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if matches(&message) {
                return true;
            }
            self.seen.push(message);
        }
        false
    }

    fn response(&mut self, id: Value) -> Value {
        self.wait_for(&format!("response {id}"), |m| {
            m.get("id") == Some(&id) && m.get("method").is_none()
        })
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(json!(id))
    }

    fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": {"conversationId": "c1"}}),
        )
    }

    /// initialize (id 0) and initialized; answers the server's roots/list.
    fn initialize(&mut self) -> Value {
        let init = self.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                   "clientInfo": {"name": "test", "version": "1"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let roots = self.wait_for("roots/list", |m| m["method"] == "roots/list");
        self.send(json!({"jsonrpc": "2.0", "id": roots["id"], "result": {"roots": [{"uri": "file:///r"}]}}));
        init
    }

    fn file(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Closes the proxy's input and waits for it: its exit status and stderr.
    fn finish(mut self) -> (i32, String) {
        drop(self.stdin.take());
        self.wait()
    }

    /// Waits for the proxy to exit: its exit status and stderr.
    fn wait(&mut self) -> (i32, String) {
        let output = self.child.take().unwrap().wait_with_output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn text(result: &Value) -> &str {
    result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("")
}

// pins Y1, Y5, M10: ids are translated both ways (the client's id 0 and the server's own
// request id 0 never meet), the server gets the client's answer to its request, and the
// initialize result advertises idempotency
#[test]
fn request_ids_are_kept_apart_in_both_directions() {
    let mut proxy = Proxy::start("");
    let init = proxy.initialize();
    assert_eq!(init["id"], 0);
    let advertised = &init["result"]["capabilities"]["experimental"]["idempotency"];
    assert_eq!(advertised["conversationIdMeta"], "conversationId", "{init}");
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    let echoed = proxy.call(0, "echo_id", json!({}));
    assert_eq!(echoed["id"], 0);
    let server_saw: u64 = text(&echoed).parse().unwrap();
    assert_ne!(
        server_saw, 0,
        "the server sees the proxy's id, not the client's"
    );
    let started = Instant::now();
    while !proxy.file("log").iter().any(|l| l.starts_with("roots ")) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            proxy.file("log")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        proxy
            .file("log")
            .iter()
            .find(|l| l.starts_with("roots "))
            .unwrap(),
        r#"roots {"roots":[{"uri":"file:///r"}]}"#
    );
    let (code, _) = proxy.finish();
    assert_eq!(code, 0);
}

// pins Y6, U1, U2: a server that exits mid-call is restarted and re-initialised with the
// client's initialize; the call whose answer was lost is an unknown outcome, held, and is
// not run again; other calls go on
#[test]
fn a_server_that_exits_mid_call_is_restarted_and_its_call_is_held() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    let lost = proxy.call(1, "crash", json!({}));
    assert_eq!(lost["result"]["isError"], true, "{lost}");
    assert_eq!(
        lost["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{lost}"
    );
    assert!(text(&lost).contains("exited"), "{lost}");
    let refund = proxy.call(
        2,
        "send_refund",
        json!({"order_id": "o1", "amount_cents": 5}),
    );
    assert_eq!(text(&refund), "refund #2", "{refund}");
    assert_eq!(
        proxy
            .file("log")
            .iter()
            .filter(|l| *l == "initialize")
            .count(),
        2
    );
    let again = proxy.call(3, "crash", json!({}));
    assert_eq!(
        again["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{again}"
    );
    assert!(
        again["result"]["_meta"].get("idem/retryAfterMs").is_none(),
        "held: {again}"
    );
    assert_eq!(proxy.file("effects"), ["crash", "o1 5"], "crash ran once");
    let (code, _) = proxy.finish();
    assert_eq!(code, 0);
}

// pins Y8: malformed lines from the client are answered as JSON-RPC says; junk and stray
// answers from the server are dropped; the proxy goes on
#[test]
fn malformed_lines_are_answered_and_dropped_and_the_proxy_goes_on() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    proxy.send_line("this is not json");
    let parse = proxy.wait_for("parse error", |m| m["error"]["code"] == -32700);
    assert_eq!(parse["id"], Value::Null);
    proxy.send_line(r#"{"jsonrpc":"2.0","id":5}"#);
    let invalid = proxy.wait_for("invalid request", |m| m["error"]["code"] == -32600);
    assert_eq!(invalid["id"], 5);
    // A batch (removed from MCP in 2025-06-18) is refused request by request, as JSON-RPC
    // answers a batch: an array with one error per id, so no request waits forever.
    proxy.send_line(
        r#"[{"jsonrpc":"2.0","id":8,"method":"ping"},{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"send_refund","arguments":{}}}]"#,
    );
    let batch = proxy.wait_for("batch answer", Value::is_array);
    let ids: Vec<&Value> = batch.as_array().unwrap().iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(8), &json!(9)], "{batch}");
    assert!(proxy.file("effects").is_empty(), "nothing in a batch runs");
    proxy.send_line(r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":{}}"#);
    assert_eq!(proxy.response(json!(6))["result"], json!({}));
    let junk = proxy.call(7, "garbage", json!({}));
    assert_eq!(text(&junk), "ok");
    let (code, stderr) = proxy.finish();
    assert_eq!(code, 0);
    assert!(
        stderr.contains("malformed message from the server"),
        "{stderr}"
    );
}

// pins Y7, U4: a keyed call the client cancels is cancelled at the server too; unanswered
// within cancel_wait, it is an unknown outcome under on_cancel = "hold" (the default) and
// released under "release"
#[test]
fn a_cancelled_call_the_server_never_answers_follows_on_cancel() {
    for (policy, runs_again) in [("hold", false), ("release", true)] {
        let mut proxy = Proxy::start(&format!(
            "cancel_wait = \"300ms\"\n[tools.slow]\non_cancel = \"{policy}\"\n"
        ));
        proxy.initialize();
        let params =
            json!({"name": "slow", "arguments": {"ms": 1500}, "_meta": {"conversationId": "c1"}});
        proxy.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}));
        let started = Instant::now();
        while proxy.file("effects").is_empty() {
            assert!(started.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(10));
        }
        proxy.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 1, "reason": "user"}}),
        );
        assert!(
            !proxy.arrives(Duration::from_millis(2500), |m| m.get("id")
                == Some(&json!(1))),
            "{policy}: no answer to a cancelled call the server does not answer"
        );
        assert!(
            proxy
                .file("log")
                .iter()
                .any(|l| l.starts_with("cancelled ") && l != "cancelled 1"),
            "{policy}: the server got the cancellation with its own id: {:?}",
            proxy.file("log")
        );
        let retry = proxy.request(2, "tools/call", params.clone());
        if runs_again {
            assert_eq!(text(&retry), "slept", "{policy}: {retry}");
            assert_eq!(proxy.file("effects"), ["slow", "slow"], "{policy}");
        } else {
            assert_eq!(
                retry["result"]["_meta"]["idem/error"], "outcome_unknown",
                "{policy}: {retry}"
            );
            assert_eq!(proxy.file("effects"), ["slow"], "{policy}");
        }
    }
}

// pins S5, Y3: two identical calls at once run the tool once; both get its result
#[test]
fn concurrent_duplicates_run_once() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    for id in [1, 2] {
        proxy.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params":
            {"name": "slow", "arguments": {"ms": 400}, "_meta": {"conversationId": "c1"}}}),
        );
    }
    let (first, second) = (proxy.response(json!(1)), proxy.response(json!(2)));
    assert_eq!(text(&first), "slept");
    assert_eq!(text(&second), "slept");
    let mut statuses = [
        first["result"]["_meta"]["idem/status"].clone(),
        second["result"]["_meta"]["idem/status"].clone(),
    ];
    statuses.sort_by_key(Value::to_string);
    assert_eq!(statuses, [json!("executed"), json!("replayed")]);
    assert_eq!(proxy.file("effects"), ["slow"]);
}

// pins Y4: a configuration naming a tool the server does not list stops the proxy with
// exit 2 and a message naming it, at start and after tools/list_changed
#[test]
fn a_configuration_the_server_contradicts_stops_the_proxy() {
    let mut proxy = Proxy::start("[tools.send_refnud]\n");
    proxy.initialize();
    let (code, stderr) = proxy.finish();
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("`send_refnud`") && stderr.contains("send_refund"),
        "{stderr}"
    );

    let mut proxy = Proxy::start("[tools.send_refund]\nkey = [\"order_id\"]\n");
    proxy.initialize();
    let refund = proxy.call(
        1,
        "send_refund",
        json!({"order_id": "o1", "amount_cents": 5}),
    );
    assert_eq!(text(&refund), "refund #1");
    proxy.call(2, "drop_refund_tool", json!({}));
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.child.as_mut().unwrap().try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the proxy goes on under a contradicted config"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, stderr) = proxy.finish();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`send_refund`"), "{stderr}");
}

// pins Y3, Y4, A1–A3, M6: a tool the config makes require approval waits for a person: the
// first call is an awaiting_approval tool error naming the key and the server is not called;
// `idem approve KEY` on the proxy's store lets the next call run once; later calls replay
#[test]
fn a_tool_that_requires_approval_waits_for_idem_approve() {
    let mut proxy = Proxy::start("[tools.send_refund]\nrequire_approval = \"30m\"\n");
    proxy.initialize();
    let args = json!({"order_id": "o1", "amount_cents": 900});
    let waiting = proxy.call(1, "send_refund", args.clone());
    assert_eq!(waiting["result"]["isError"], true, "{waiting}");
    assert_eq!(
        waiting["result"]["_meta"]["idem/error"], "awaiting_approval",
        "{waiting}"
    );
    assert!(
        proxy.file("effects").is_empty(),
        "the server was not called"
    );
    let key = waiting["result"]["_meta"]["idem/key"]
        .as_str()
        .unwrap()
        .to_owned();
    let store = format!("sqlite:{}", proxy.dir.path().join("proxy.db").display());
    let listed =
        crate::common::idem(&["--store", &store, "ls", "--state", "awaiting-approval"]).expect(0);
    assert!(listed.stdout.contains("send_refund"), "{listed:?}");
    crate::common::idem(&["--store", &store, "approve", &key, "--actor", "ops"]).expect(0);
    let ran = proxy.call(2, "send_refund", args.clone());
    assert_eq!(text(&ran), "refund #1", "{ran}");
    let replayed = proxy.call(3, "send_refund", args);
    assert_eq!(
        replayed["result"]["_meta"]["idem/status"], "replayed",
        "{replayed}"
    );
    assert_eq!(proxy.file("effects"), ["o1 900"]);
}

/// Sends `signal` (`TERM`, `INT`) to the proxy.
fn signal(proxy: &Proxy, signal: &str) {
    let pid = proxy.child.as_ref().unwrap().id().to_string();
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until the server's effects file has `count` lines.
fn wait_for_effects(proxy: &Proxy, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.file("effects").len() < count {
        assert!(Instant::now() < deadline, "{:?}", proxy.file("effects"));
        std::thread::sleep(Duration::from_millis(10));
    }
}

// pins Y9, S7, U4: a client that writes a keyed call and closes its input at once (a
// discovery-era client never initialises): the proxy lists the tools, forwards the call,
// answers it and saves the outcome before it exits, so a later proxy on the store replays
// it; nothing is left in progress
#[test]
fn a_call_sent_just_before_the_input_closes_is_answered_and_saved() {
    let mut proxy = Proxy::start("");
    let args = json!({"order_id": "o9", "amount_cents": 7});
    proxy.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "send_refund", "arguments": args, "_meta": {"conversationId": "c1"}}}));
    drop(proxy.stdin.take());
    let answer = proxy.response(json!(1));
    assert_eq!(text(&answer), "refund #1", "{answer}");
    let (code, stderr) = proxy.wait();
    assert_eq!(code, 0, "{stderr}");
    let dir = Arc::clone(&proxy.dir);
    drop(proxy);

    let mut again = Proxy::start_in(dir, "");
    let replayed = again.call(2, "send_refund", args);
    assert_eq!(
        replayed["result"]["_meta"]["idem/status"], "replayed",
        "{replayed}"
    );
    assert_eq!(again.file("effects"), ["o9 7"]);
}

// pins Y9: SIGTERM stops the proxy as the end of its input does: a keyed call in progress
// gets the server's answer, saved and replayed later; the proxy exits 0
#[test]
fn sigterm_lets_a_keyed_call_in_progress_finish() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    proxy.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 1500}, "_meta": {"conversationId": "c1"}}}));
    wait_for_effects(&proxy, 1);
    signal(&proxy, "TERM");
    let answer = proxy.response(json!(1));
    assert_eq!(text(&answer), "slept", "{answer}");
    assert_eq!(answer["result"]["_meta"]["idem/status"], "executed");
    let (code, stderr) = proxy.wait();
    assert_eq!(code, 0, "{stderr}");
    let dir = Arc::clone(&proxy.dir);
    drop(proxy);

    let mut again = Proxy::start_in(dir, "");
    let replayed = again.call(2, "slow", json!({"ms": 1500}));
    assert_eq!(replayed["result"]["_meta"]["idem/status"], "replayed");
    assert_eq!(again.file("effects"), ["slow"]);
}

// pins Y9, Y7, U1, U2: a keyed call the server has not answered within cancel_wait of the
// proxy being stopped has an unknown outcome: answered outcome_unknown, held for a person
// in the store, not run again by a retry; a duplicate still waiting for its claim is
// answered with an error and never forwarded
#[test]
fn a_stopped_proxy_holds_a_call_the_server_never_answered() {
    let config = "cancel_wait = \"500ms\"\n";
    let mut proxy = Proxy::start(config);
    proxy.initialize();
    proxy.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 60000}, "_meta": {"conversationId": "c1"}}}));
    wait_for_effects(&proxy, 1);
    // A duplicate, waiting for the first call's claim when the proxy stops: never forwarded.
    proxy.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 60000}, "_meta": {"conversationId": "c1"}}}));
    std::thread::sleep(Duration::from_millis(200));
    drop(proxy.stdin.take());
    let answer = proxy.response(json!(1));
    assert_eq!(
        answer["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{answer}"
    );
    assert!(text(&answer).contains("the proxy is stopping"), "{answer}");
    let duplicate = proxy.response(json!(2));
    assert_eq!(duplicate["error"]["code"], -32603, "{duplicate}");
    assert!(
        duplicate["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not forwarded"),
        "{duplicate}"
    );
    let (code, stderr) = proxy.wait();
    assert_eq!(code, 0, "{stderr}");
    let dir = Arc::clone(&proxy.dir);
    drop(proxy);

    let mut again = Proxy::start_in(dir, config);
    let retry = again.call(2, "slow", json!({"ms": 60000}));
    assert_eq!(
        retry["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{retry}"
    );
    assert_eq!(again.file("effects"), ["slow"], "not run again");
}

// pins Y3, U1: a server that answers tools/call with a result that is not an object did
// receive the call: the outcome is unknown and held, never released for a second run
#[test]
fn a_result_that_is_not_an_object_is_an_unknown_outcome() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    let first = proxy.call(1, "bad_result", json!({}));
    assert_eq!(
        first["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{first}"
    );
    assert!(text(&first).contains("not an object: 42"), "{first}");
    let retry = proxy.call(2, "bad_result", json!({}));
    assert_eq!(
        retry["result"]["_meta"]["idem/error"], "outcome_unknown",
        "{retry}"
    );
    assert_eq!(proxy.file("effects"), ["bad_result"]);
}

// pins Y3: `arguments` that are not an object are refused with invalid params before any
// claim, and the server is not called (two such calls would otherwise share a key)
#[test]
fn arguments_that_are_not_an_object_are_refused() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    for (id, arguments) in [(1, json!(["o1", 5])), (2, json!("o1"))] {
        let refused = proxy.request(
            id,
            "tools/call",
            json!({"name": "send_refund", "arguments": arguments, "_meta": {"conversationId": "c1"}}),
        );
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    }
    assert!(proxy.file("effects").is_empty());
}

// pins Y1, Y5: a message is forwarded as its sender wrote it (member order, numbers past
// f64, `-0`, escapes, unknown members), only its id rewritten; the client's id comes back
// exactly as it sent it, an integer past 2^64 included
#[test]
fn messages_pass_through_byte_for_byte_but_their_ids() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    let line = r#"{"params":{"z":-0,"big":123456789012345678901234567890,"s":"caf\u00e9","f":1.50},"method":"x/echo","jsonrpc":"2.0","id":98765432109876543210987654321,"extra":{"b":1,"a":2}}"#;
    proxy.send_line(line);
    let deadline = Instant::now() + Duration::from_secs(10);
    let forwarded = loop {
        if let Some(seen) = proxy
            .file("log")
            .iter()
            .find_map(|l| l.strip_prefix("raw ").map(str::to_owned))
        {
            break seen;
        }
        assert!(Instant::now() < deadline, "{:?}", proxy.file("log"));
        std::thread::sleep(Duration::from_millis(10));
    };
    let proxy_id: Value = serde_json::from_str::<Value>(&forwarded).unwrap()["id"].clone();
    assert!(proxy_id.is_u64(), "{forwarded}");
    assert_eq!(
        forwarded,
        line.replace(
            r#""id":98765432109876543210987654321"#,
            &format!(r#""id":{proxy_id}"#)
        ),
        "the server got the message as sent, but for its id"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let answered = loop {
        if let Some(seen) = proxy
            .file("client_saw")
            .into_iter()
            .find(|l| l.contains("echoed"))
        {
            break seen;
        }
        assert!(Instant::now() < deadline, "{:?}", proxy.file("client_saw"));
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        answered,
        r#"{"result":{"echoed":true,"n":-0,"big":123456789012345678901234567890},"jsonrpc":"2.0","id":98765432109876543210987654321}"#
    );
}

// pins Y3, Y8: a line that is not UTF-8 is a parse error (never a call with its bytes
// replaced); a request whose `params` is neither an object nor an array is invalid; a
// tools/call that names no tool (no `params`, `params` not an object, no string `name`) is
// refused with invalid params; none of them reaches the server
#[test]
fn lines_that_name_no_tool_or_are_not_utf8_are_refused() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    let mut line = br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"send_refund","arguments":{"order_id":"o"#.to_vec();
    line.push(0xff);
    line.extend_from_slice(br#"","amount_cents":1},"_meta":{"conversationId":"c1"}}}"#);
    line.push(b'\n');
    let stdin = proxy.stdin.as_mut().unwrap();
    stdin.write_all(&line).unwrap();
    stdin.flush().unwrap();
    let parse = proxy.wait_for("parse error", |m| m["error"]["code"] == -32700);
    assert_eq!(parse["id"], Value::Null, "{parse}");
    assert!(
        parse["error"]["message"]
            .as_str()
            .unwrap()
            .contains("UTF-8"),
        "{parse}"
    );
    for (id, params) in [
        (12, Some(json!(["send_refund", {}]))),
        (13, Some(json!({"arguments": {}}))),
        (14, Some(json!({"name": 5}))),
        (15, None),
    ] {
        let mut request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call"});
        if let Some(params) = params {
            request["params"] = params;
        }
        proxy.send(request);
        let refused = proxy.response(json!(id));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    }
    proxy.send_line(r#"{"jsonrpc":"2.0","id":16,"method":"ping","params":5}"#);
    let invalid = proxy.response(json!(16));
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert!(proxy.file("effects").is_empty());
    let log = proxy.file("log");
    assert!(
        !log.iter().any(|l| l.contains("ping")),
        "nothing refused reached the server: {log:?}"
    );
}

// pins Y7, U4: after the client's cancellation, an error the server answers (-32800) does
// not say the effect did not happen: on_cancel decides it (hold: unknown; release: released)
#[test]
fn a_cancelled_call_answered_with_an_error_follows_on_cancel() {
    for (policy, runs_again) in [("hold", false), ("release", true)] {
        let mut proxy = Proxy::start(&format!(
            "cancel_wait = \"5s\"\n[tools.slow]\non_cancel = \"{policy}\"\n"
        ));
        proxy.initialize();
        let params = json!({"name": "slow", "arguments": {"ms": 600, "cancelled_error": true},
                            "_meta": {"conversationId": "c1"}});
        proxy.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}));
        wait_for_effects(&proxy, 1);
        proxy.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 1, "reason": "user"}}),
        );
        let answered = proxy.response(json!(1));
        let retry = proxy.request(2, "tools/call", params.clone());
        if runs_again {
            assert_eq!(answered["error"]["code"], -32800, "{policy}: {answered}");
            assert_eq!(text(&retry), "slept", "{policy}: {retry}");
            assert_eq!(proxy.file("effects"), ["slow", "slow"], "{policy}");
        } else {
            assert_eq!(
                answered["result"]["_meta"]["idem/error"], "outcome_unknown",
                "{policy}: {answered}"
            );
            assert_eq!(
                retry["result"]["_meta"]["idem/error"], "outcome_unknown",
                "{policy}: {retry}"
            );
            assert_eq!(proxy.file("effects"), ["slow"], "{policy}");
        }
    }
}

// pins Y2: a server whose tools/list cursors go round (A, B, A…) is listed once round, and
// keyed calls go on
#[test]
fn a_listing_whose_cursors_go_round_ends() {
    let mut proxy = Proxy::start("");
    proxy.initialize();
    assert_eq!(text(&proxy.call(1, "cycle_cursors", json!({}))), "cycling");
    let refund = proxy.call(
        2,
        "send_refund",
        json!({"order_id": "o1", "amount_cents": 5}),
    );
    assert_eq!(text(&refund), "refund #1", "{refund}");
    let again = proxy.call(
        3,
        "send_refund",
        json!({"order_id": "o1", "amount_cents": 5}),
    );
    assert_eq!(
        again["result"]["_meta"]["idem/status"], "replayed",
        "{again}"
    );
}

// pins Y5, Y7: two ids past 2^64 that one f64 cannot tell apart are two requests: the
// cancellation of one reaches the server as that one's, and the other is answered
#[test]
fn a_cancellation_finds_its_request_among_ids_past_2_64() {
    let mut proxy =
        Proxy::start("cancel_wait = \"200ms\"\n[tools.slow]\non_cancel = \"release\"\n");
    proxy.initialize();
    let (a, b) = ("36893488147419103232", "36893488147419103233");
    for (id, conversation) in [(a, "ca"), (b, "cb")] {
        proxy.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{"ms":700}},"_meta":{{"conversationId":"{conversation}"}}}}}}"#
        ));
    }
    wait_for_effects(&proxy, 2);
    proxy.send_line(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{b}}}}}"#
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer_to = |id: &str| format!(r#""id":{id},"#);
    while !proxy
        .file("client_saw")
        .iter()
        .any(|l| l.contains(&answer_to(a)))
    {
        assert!(Instant::now() < deadline, "{:?}", proxy.file("client_saw"));
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let saw = proxy.file("client_saw");
    let answer_a = saw.iter().find(|l| l.contains(&answer_to(a))).unwrap();
    assert!(answer_a.contains("slept"), "{answer_a}");
    assert!(
        !saw.iter().any(|l| l.contains(&answer_to(b))),
        "the cancelled request is not answered: {saw:?}"
    );
    let cancelled: Vec<String> = proxy
        .file("log")
        .into_iter()
        .filter(|l| l.starts_with("cancelled "))
        .collect();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
}
