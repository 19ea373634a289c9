//! `idem mcp-proxy` in front of a real third-party server (contract Y1, Y3, Y5): the MCP
//! reference "everything" server (`@modelcontextprotocol/server-everything`, Node), driven
//! directly and through the proxy by the same scripted client, must say the same things.
//!
//! Test-only feature `test-mcp-node`; the server is installed under `target/mcp-node` by
//! `.ci/install-mcp-deps.sh` (pinned version there).
//!
//! The script speaks raw JSON-RPC lines, as an MCP client would: `initialize` with the
//! `roots` and `sampling` capabilities, `notifications/initialized`, the server's own
//! `roots/list` (answered), listings, a prompt, an unkeyed tool call with progress, an echo,
//! a keyed tool call during which the server asks the client to sample, the roots as the
//! server saw them, `notifications/roots/list_changed` (the server asks for the roots again)
//! and a ping. What each side receives is compared: responses (matched to their requests
//! by id, the ids themselves left out), the server's requests (ids left out: the proxy
//! renumbers them, Y5) and the notifications, after removing exactly what idem adds:
//! `_meta["idem/status"]` and `_meta["idem/key"]` on keyed `tools/call` results, and
//! `capabilities.experimental.idempotency` on the `initialize` result.
//!
//! No notification of this script is time-dependent: the everything server's timers (its
//! random-level log messages every 5 s, its resource-update notifications) only start when
//! the `toggle-simulated-logging` / `toggle-subscriber-updates` tools are called, and the
//! script calls neither. Every notification is therefore compared whole, in order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::{timeout, timeout_at, Instant};

/// A whole test's bound.
const BOUND: Duration = Duration::from_secs(30);
/// How long one awaited message may take.
const STEP: Duration = Duration::from_secs(10);
/// How long the script listens after its last step for late messages.
const QUIET: Duration = Duration::from_millis(300);
const CONVERSATION: &str = "conv-transparency";
const PROGRESS_TOKEN: &str = "progress-transparency";
/// The scripted model's answer to the server's `sampling/createMessage`.
const SAMPLED: &str = "Hello from the scripted model";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("idem-cli is inside the workspace")
        .to_owned()
}

/// `node …/server-everything/dist/index.js stdio`.
fn everything_server() -> Vec<String> {
    let root = repo_root();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    };
    let entry =
        target.join("mcp-node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run .ci/install-mcp-deps.sh first",
        entry.display()
    );
    vec!["node".into(), entry.display().to_string(), "stdio".into()]
}

/// `idem mcp-proxy --store memory -- node …`.
fn proxy_command() -> Vec<String> {
    proxy_command_with(&[])
}

/// `idem mcp-proxy --store memory OPTIONS -- node …`.
fn proxy_command_with(options: &[String]) -> Vec<String> {
    let mut command = vec![
        env!("CARGO_BIN_EXE_idem").to_owned(),
        "mcp-proxy".into(),
        "--store".into(),
        "memory".into(),
    ];
    command.extend_from_slice(options);
    command.push("--".into());
    command.extend(everything_server());
    command
}

fn is_request(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some()
}

fn is_notification(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_none()
}

fn is_response_to(message: &Value, id: &Value) -> bool {
    message.get("method").is_none() && message.get("id") == Some(id)
}

/// A `notifications/message` whose text contains `text`.
fn is_log(message: &Value, text: &str) -> bool {
    is_notification(message)
        && message["method"] == "notifications/message"
        && message["params"]["data"]
            .as_str()
            .is_some_and(|data| data.contains(text))
}

/// One side of the comparison: an MCP client talking to a process on stdio.
struct Session {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: mpsc::UnboundedReceiver<Value>,
    stderr: Arc<Mutex<String>>,
    /// Everything received, in order.
    received: Vec<Value>,
    /// The server's requests to the client, as received.
    server_requests: Vec<Value>,
    notifications: Vec<Value>,
    /// What the client answers `roots/list` with.
    roots: Value,
}

impl Session {
    fn start(name: &'static str, command: &[String]) -> Session {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .env_remove("IDEM_STORE")
            .env_remove("IDEM_NAMESPACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start {command:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (sender, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message = serde_json::from_str(&line)
                    .unwrap_or_else(|_| json!({ "NOT A JSON LINE ON STDOUT": line }));
                if sender.send(message).is_err() {
                    break;
                }
            }
        });
        let collected = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        Session {
            name,
            stdin: child.stdin.take(),
            child,
            incoming,
            stderr,
            received: Vec::new(),
            server_requests: Vec::new(),
            notifications: Vec::new(),
            roots: json!([{ "uri": "file:///tmp/idem-transparency", "name": "first root" }]),
        }
    }

    fn context(&self) -> String {
        let received: Vec<String> = self.received.iter().map(Value::to_string).collect();
        format!(
            "\n--- {} received:\n{}\n--- its stderr:\n{}",
            self.name,
            received.join("\n"),
            self.stderr.lock().unwrap()
        )
    }

    async fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        let stdin = self.stdin.as_mut().expect("stdin open");
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(error) = written.await {
            panic!(
                "{}: cannot write {message}: {error}{}",
                self.name,
                self.context()
            );
        }
    }

    async fn notify(&mut self, method: &str, params: Option<Value>) {
        let mut message = json!({ "jsonrpc": "2.0", "method": method });
        if let Some(params) = params {
            message["params"] = params;
        }
        self.send(message).await;
    }

    /// Sends request `id` and waits for its response (answering the server's requests
    /// meanwhile).
    async fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        let what = format!("the response to {method} (id {id})");
        self.pump(|m| is_response_to(m, &id), &what).await
    }

    /// Reads messages until one satisfies `until` (returned), recording each and answering
    /// the server's requests as a client would.
    async fn pump(&mut self, until: impl Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = Instant::now() + STEP;
        loop {
            let message = match timeout_at(deadline, self.incoming.recv()).await {
                Ok(Some(message)) => message,
                Ok(None) => panic!(
                    "{}: its stdout closed while waiting for {what}{}",
                    self.name,
                    self.context()
                ),
                Err(_) => panic!("{}: no {what} within {STEP:?}{}", self.name, self.context()),
            };
            self.take(message.clone()).await;
            if until(&message) {
                return message;
            }
        }
    }

    /// Listens for `QUIET` more: whatever comes is recorded (and answered).
    async fn drain(&mut self) {
        let deadline = Instant::now() + QUIET;
        while let Ok(Some(message)) = timeout_at(deadline, self.incoming.recv()).await {
            self.take(message).await;
        }
    }

    async fn take(&mut self, message: Value) {
        assert!(
            message.get("NOT A JSON LINE ON STDOUT").is_none(),
            "{}: stdout is the protocol, yet it carried {message}{}",
            self.name,
            self.context()
        );
        self.received.push(message.clone());
        if is_request(&message) {
            self.server_requests.push(message.clone());
            let answer = self.answer(&message);
            self.send(answer).await;
        } else if is_notification(&message) {
            self.notifications.push(message);
        }
    }

    /// The client's answer to a request of the server's, with the id it came with.
    fn answer(&self, request: &Value) -> Value {
        let result = match request["method"].as_str().unwrap_or_default() {
            "roots/list" => json!({ "roots": self.roots }),
            "sampling/createMessage" => json!({
                "role": "assistant",
                "content": { "type": "text", "text": SAMPLED },
                "model": "scripted-model",
                "stopReason": "endTurn",
            }),
            "ping" => json!({}),
            _ => {
                return json!({
                    "jsonrpc": "2.0", "id": request["id"],
                    "error": { "code": -32601, "message": "the test client does not do that" },
                })
            }
        };
        json!({ "jsonrpc": "2.0", "id": request["id"], "result": result })
    }

    /// Closes the process's input and waits for it to exit; its exit code.
    async fn close(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        match timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                panic!(
                    "{}: did not exit within 5 s of its input closing{}",
                    self.name,
                    self.context()
                )
            }
        }
    }
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {
            "roots": { "listChanged": true },
            "sampling": {},
        },
        "clientInfo": { "name": "idem-transparency-test", "version": "0.0.1" },
    })
}

/// `initialize`, `notifications/initialized`, and the server's `roots/list` that follows
/// (about 350 ms later) answered: waits until the server logs that it got the roots.
async fn handshake(session: &mut Session) -> Value {
    let initialize = session
        .request(json!(1), "initialize", initialize_params())
        .await;
    session.notify("notifications/initialized", None).await;
    session
        .pump(
            |m| is_log(m, "Roots updated: 1 root(s)"),
            "the server's log that it got the roots",
        )
        .await;
    initialize
}

fn call_params(tool: &str, arguments: Value, meta: Value) -> Value {
    json!({ "name": tool, "arguments": arguments, "_meta": meta })
}

/// What one side received during the script.
#[derive(Debug)]
struct Transcript {
    /// By step name: the response, without its `id`.
    responses: BTreeMap<String, Value>,
    /// The ids the responses came with (they must be the ids the client sent).
    response_ids: BTreeMap<String, Value>,
    /// The tool each `tools/call` step called.
    tool_of: BTreeMap<String, String>,
    /// The server's requests to the client, without their ids.
    server_requests: Vec<Value>,
    /// Their ids.
    server_request_ids: Vec<Value>,
    notifications: Vec<Value>,
}

/// The script (the same on both sides).
async fn script(session: &mut Session) -> Transcript {
    let mut steps: Vec<(String, Value, Option<String>)> = Vec::new();
    let initialize = handshake(session).await;
    steps.push(("01 initialize".into(), initialize, None));

    let meta = json!({ "conversationId": CONVERSATION });
    let plain: Vec<(&str, &str, Value)> = vec![
        (
            "02 logging/setLevel",
            "logging/setLevel",
            json!({ "level": "debug" }),
        ),
        ("03 tools/list", "tools/list", json!({})),
        ("04 resources/list", "resources/list", json!({})),
        (
            "05 resources/templates/list",
            "resources/templates/list",
            json!({}),
        ),
        ("06 prompts/list", "prompts/list", json!({})),
        (
            "07 prompts/get args-prompt",
            "prompts/get",
            json!({ "name": "args-prompt", "arguments": { "city": "Paris", "state": "Texas" } }),
        ),
    ];
    let mut id = 1;
    for (step, method, params) in plain {
        id += 1;
        let response = session.request(json!(id), method, params).await;
        steps.push((step.into(), response, None));
    }

    let calls: Vec<(&str, &str, Value, Value)> = vec![
        (
            "08 tools/call trigger-long-running-operation",
            "trigger-long-running-operation",
            json!({ "duration": 0.3, "steps": 3 }),
            json!({ "progressToken": PROGRESS_TOKEN, "conversationId": CONVERSATION }),
        ),
        (
            "09 tools/call echo",
            "echo",
            json!({ "message": "hello through idem" }),
            meta.clone(),
        ),
        (
            "10 tools/call trigger-sampling-request",
            "trigger-sampling-request",
            json!({ "prompt": "Say hello", "maxTokens": 20 }),
            meta.clone(),
        ),
        (
            "11 tools/call get-roots-list",
            "get-roots-list",
            json!({}),
            meta.clone(),
        ),
    ];
    for (step, tool, arguments, meta) in calls {
        id += 1;
        let response = session
            .request(json!(id), "tools/call", call_params(tool, arguments, meta))
            .await;
        steps.push((step.into(), response, Some(tool.into())));
    }

    // The client's roots change: the server asks for them again.
    session.roots = json!([
        { "uri": "file:///tmp/idem-transparency", "name": "first root" },
        { "uri": "file:///tmp/idem-transparency-2", "name": "second root" },
    ]);
    session
        .notify("notifications/roots/list_changed", None)
        .await;
    session
        .pump(
            |m| is_log(m, "Roots updated: 2 root(s)"),
            "the server's log that it got the new roots",
        )
        .await;
    id += 1;
    let response = session
        .request(
            json!(id),
            "tools/call",
            call_params("get-roots-list", json!({}), meta.clone()),
        )
        .await;
    steps.push((
        "12 tools/call get-roots-list after list_changed".into(),
        response,
        Some("get-roots-list".into()),
    ));
    // A string id, which the proxy must give back as it was.
    let response = session.request(json!("ping-1"), "ping", json!({})).await;
    steps.push(("13 ping".into(), response, None));
    session.drain().await;

    let mut transcript = Transcript {
        responses: BTreeMap::new(),
        response_ids: BTreeMap::new(),
        tool_of: BTreeMap::new(),
        server_requests: Vec::new(),
        server_request_ids: Vec::new(),
        notifications: session.notifications.clone(),
    };
    for (step, mut response, tool) in steps {
        let id = response.as_object_mut().unwrap().remove("id").unwrap();
        transcript.response_ids.insert(step.clone(), id);
        transcript.responses.insert(step.clone(), response);
        if let Some(tool) = tool {
            transcript.tool_of.insert(step, tool);
        }
    }
    for request in &session.server_requests {
        let mut request = request.clone();
        let id = request.as_object_mut().unwrap().remove("id").unwrap();
        transcript.server_request_ids.push(id);
        transcript.server_requests.push(request);
    }
    transcript
}

/// The tools the server lists with `readOnlyHint: true` (the proxy passes their calls
/// through unkeyed, Y2).
fn read_only_tools(tools_list: &Value) -> BTreeSet<String> {
    tools_list["result"]["tools"]
        .as_array()
        .expect("tools/list has tools")
        .iter()
        .filter(|tool| tool["annotations"]["readOnlyHint"] == json!(true))
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every difference between two JSON values, one line per path.
fn diff(path: &str, direct: &Value, proxied: &Value, out: &mut Vec<String>) {
    match (direct, proxied) {
        (Value::Object(a), Value::Object(b)) => {
            let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for name in names {
                let here = format!("{path}.{name}");
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => diff(&here, x, y, out),
                    (Some(x), None) => out.push(format!("{here}: direct {x}, proxied: absent")),
                    (None, Some(y)) => out.push(format!("{here}: direct: absent, proxied {y}")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if direct != proxied => out.push(format!("{path}: direct {direct}, proxied {proxied}")),
        _ => {}
    }
}

/// Removes `name` from `object`, when it is there.
fn take_member(object: &mut Value, name: &str) -> Option<Value> {
    object.as_object_mut().and_then(|o| o.remove(name))
}

/// Takes idem's additions out of the proxied transcript (checking they are there), so that
/// what is left must equal the direct one. Problems go to `problems`.
fn remove_idem_additions(
    direct: &Transcript,
    proxied: &mut Transcript,
    read_only: &BTreeSet<String>,
    problems: &mut Vec<String>,
) {
    // `initialize`: capabilities.experimental.idempotency (M10).
    let step = "01 initialize";
    let direct_capabilities = &direct.responses[step]["result"]["capabilities"];
    let capabilities = &mut proxied.responses.get_mut(step).unwrap()["result"]["capabilities"];
    match take_member(&mut capabilities["experimental"], "idempotency") {
        Some(Value::Object(_)) => {}
        other => problems.push(format!(
            "{step}: result.capabilities.experimental.idempotency should be an object, is {other:?}"
        )),
    }
    if direct_capabilities.get("experimental").is_none()
        && capabilities["experimental"] == json!({})
    {
        take_member(capabilities, "experimental");
    }

    // Keyed `tools/call` results: _meta["idem/status"] = "executed" and _meta["idem/key"].
    for (step, tool) in &proxied.tool_of {
        if read_only.contains(tool) {
            continue; // unkeyed: passed through unchanged, nothing to remove
        }
        let result = &mut proxied.responses.get_mut(step).unwrap()["result"];
        let meta = &mut result["_meta"];
        let status = take_member(meta, "idem/status");
        let key = take_member(meta, "idem/key");
        if status != Some(json!("executed")) {
            problems.push(format!(
                "{step} (keyed): _meta[\"idem/status\"] should be \"executed\", is {status:?}"
            ));
        }
        if !key.as_ref().is_some_and(Value::is_string) {
            problems.push(format!(
                "{step} (keyed): _meta[\"idem/key\"] should be a string, is {key:?}"
            ));
        }
        if *meta == json!({}) && direct.responses[step]["result"].get("_meta").is_none() {
            take_member(result, "_meta");
        }
    }
}

/// Every difference between the two transcripts, idem's additions aside.
fn compare(direct: &Transcript, proxied: &mut Transcript) -> Vec<String> {
    let mut problems = Vec::new();
    let read_only = read_only_tools(&direct.responses["03 tools/list"]);
    remove_idem_additions(direct, proxied, &read_only, &mut problems);

    for (step, id) in &direct.response_ids {
        if proxied.response_ids[step] != *id {
            problems.push(format!(
                "{step}: the response came back with id {}, the request had {id}",
                proxied.response_ids[step]
            ));
        }
    }
    for (step, response) in &direct.responses {
        let mut lines = Vec::new();
        diff("", response, &proxied.responses[step], &mut lines);
        problems.extend(lines.into_iter().map(|line| format!("{step}: {line}")));
    }

    // The server's requests, ids left out (Y5: the proxy numbers them itself).
    if direct.server_requests.len() != proxied.server_requests.len() {
        problems.push(format!(
            "the server's requests to the client: direct {} {:#?}, proxied {} {:#?}",
            direct.server_requests.len(),
            direct.server_requests,
            proxied.server_requests.len(),
            proxied.server_requests
        ));
    } else {
        for (i, (a, b)) in direct
            .server_requests
            .iter()
            .zip(&proxied.server_requests)
            .enumerate()
        {
            let mut lines = Vec::new();
            diff("", a, b, &mut lines);
            problems.extend(
                lines
                    .into_iter()
                    .map(|line| format!("server request #{i} ({}): {line}", a["method"])),
            );
        }
    }

    // The progress of the call that asked for it: same count, same params.
    let progress = |t: &Transcript| -> Vec<Value> {
        t.notifications
            .iter()
            .filter(|n| {
                n["method"] == "notifications/progress"
                    && n["params"]["progressToken"] == PROGRESS_TOKEN
            })
            .cloned()
            .collect()
    };
    let (direct_progress, proxied_progress) = (progress(direct), progress(proxied));
    if direct_progress.is_empty() {
        problems.push("the direct server sent no progress: the script is wrong".into());
    }
    if direct_progress != proxied_progress {
        problems.push(format!(
            "progress notifications differ:\n  direct  {}\n  proxied {}",
            Value::from(direct_progress),
            Value::from(proxied_progress)
        ));
    }

    // Every notification, in order (none of this script's is time-dependent: module docs).
    if direct.notifications.len() != proxied.notifications.len() {
        problems.push(format!(
            "notifications: direct got {}, proxied {}:\n  direct  {}\n  proxied {}",
            direct.notifications.len(),
            proxied.notifications.len(),
            Value::from(direct.notifications.clone()),
            Value::from(proxied.notifications.clone())
        ));
    } else {
        for (i, (a, b)) in direct
            .notifications
            .iter()
            .zip(&proxied.notifications)
            .enumerate()
        {
            let mut lines = Vec::new();
            diff("", a, b, &mut lines);
            problems.extend(
                lines
                    .into_iter()
                    .map(|line| format!("notification #{i} ({}): {line}", a["method"])),
            );
        }
    }
    problems
}

/// What shows that the server acted on the client's answers to its requests (asserted on
/// both sides, so a proxied answer lost or misrouted fails here even if both sides agree).
fn answers_were_acted_on(name: &str, transcript: &Transcript) {
    let text = |step: &str| {
        transcript.responses[step]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {step} has no text: {transcript:#?}"))
            .to_owned()
    };
    let sampled = text("10 tools/call trigger-sampling-request");
    assert!(
        sampled.contains(SAMPLED) && sampled.contains("scripted-model"),
        "{name}: the sampling answer did not reach the server: {sampled}"
    );
    let roots = text("11 tools/call get-roots-list");
    assert!(
        roots.contains("(1 total)") && roots.contains("file:///tmp/idem-transparency"),
        "{name}: the roots answer did not reach the server: {roots}"
    );
    let roots = text("12 tools/call get-roots-list after list_changed");
    assert!(
        roots.contains("(2 total)") && roots.contains("file:///tmp/idem-transparency-2"),
        "{name}: the second roots answer did not reach the server: {roots}"
    );
    let methods: Vec<&str> = transcript
        .server_requests
        .iter()
        .map(|r| r["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["roots/list", "sampling/createMessage", "roots/list"],
        "{name}: the server's requests"
    );
}

async fn run(name: &'static str, command: &[String]) -> (Transcript, Option<i32>) {
    let mut session = Session::start(name, command);
    let transcript = script(&mut session).await;
    let code = session.close().await;
    (transcript, code)
}

#[tokio::test]
async fn everything_server_says_the_same_through_the_proxy() {
    let started = std::time::Instant::now();
    let both = async {
        let (server, proxy) = (everything_server(), proxy_command());
        tokio::join!(run("direct", &server), run("proxied", &proxy))
    };
    let ((direct, _), (mut proxied, proxy_code)) = timeout(BOUND, both)
        .await
        .unwrap_or_else(|_| panic!("the script did not finish within {BOUND:?}"));
    assert_eq!(proxy_code, Some(0), "the proxy exits 0 when its input ends");
    answers_were_acted_on("direct", &direct);
    answers_were_acted_on("proxied", &proxied);
    eprintln!(
        "the server's request ids: direct {:?}, through the proxy {:?}",
        direct.server_request_ids, proxied.server_request_ids
    );

    let problems = compare(&direct, &mut proxied);
    assert!(
        problems.is_empty(),
        "direct and proxied differ ({} problem(s)):\n{}",
        problems.len(),
        problems.join("\n")
    );
    eprintln!(
        "{} responses, {} server requests, {} notifications compared in {:?}",
        direct.responses.len(),
        direct.server_requests.len(),
        direct.notifications.len(),
        started.elapsed()
    );
}

/// Y3, M7: the keyed call sent again with the same conversation and arguments gets the
/// first result back, marked replayed, and the server is not called again (it asks the
/// client to sample only once).
#[tokio::test]
async fn a_keyed_call_sent_twice_is_replayed() {
    let test = async {
        let mut session = Session::start("proxied", &proxy_command());
        handshake(&mut session).await;
        let params = call_params(
            "trigger-sampling-request",
            json!({ "prompt": "Say hello", "maxTokens": 20 }),
            json!({ "conversationId": CONVERSATION }),
        );
        let first = session
            .request(json!(2), "tools/call", params.clone())
            .await;
        let sampling_requests = |s: &Session| {
            s.server_requests
                .iter()
                .filter(|r| r["method"] == "sampling/createMessage")
                .count()
        };
        assert_eq!(sampling_requests(&session), 1, "{}", session.context());
        let second = session.request(json!(3), "tools/call", params).await;
        session.drain().await;
        assert_eq!(
            sampling_requests(&session),
            1,
            "the replay called the server{}",
            session.context()
        );
        assert_eq!(session.close().await, Some(0));
        (first, second)
    };
    let (first, second) = timeout(BOUND, test)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {BOUND:?}"));

    assert_eq!(first["id"], 2);
    assert_eq!(second["id"], 3);
    assert_eq!(
        first["result"]["_meta"]["idem/status"], "executed",
        "{first}"
    );
    assert_eq!(
        second["result"]["_meta"]["idem/status"], "replayed",
        "{second}"
    );
    assert!(
        first["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains(SAMPLED)),
        "{first}"
    );
    let mut expected: Map<String, Value> = first.as_object().unwrap().clone();
    expected.insert("id".into(), json!(3));
    let mut expected = Value::Object(expected);
    expected["result"]["_meta"]["idem/status"] = json!("replayed");
    let mut lines = Vec::new();
    diff("", &expected, &second, &mut lines);
    assert!(
        lines.is_empty(),
        "the replay differs from the first result:\n{}",
        lines.join("\n")
    );
}

/// Progress through a keyed call (Y3, Y5): `trigger-long-running-operation` is read-only,
/// so the main test's call of it passes through unkeyed; keyed by the configuration here,
/// the proxy forwards it under its own request id, and the server's progress for the
/// client's token still reaches the client, all of it and unchanged. The replay sends none
/// (the server is not called).
#[tokio::test]
async fn progress_of_a_keyed_call_reaches_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        "[tools.trigger-long-running-operation]\nkeyed = true\n",
    )
    .unwrap();
    let command = proxy_command_with(&["--config".into(), config.display().to_string()]);
    let test = async {
        let mut session = Session::start("proxied, keyed progress", &command);
        handshake(&mut session).await;
        let params = call_params(
            "trigger-long-running-operation",
            json!({ "duration": 0.3, "steps": 3 }),
            json!({ "progressToken": PROGRESS_TOKEN, "conversationId": CONVERSATION }),
        );
        let first = session
            .request(json!(2), "tools/call", params.clone())
            .await;
        let progress_after_first = session.notifications.clone();
        let second = session.request(json!(3), "tools/call", params).await;
        session.drain().await;
        let progress_after_second = session.notifications.clone();
        assert_eq!(session.close().await, Some(0));
        (first, second, progress_after_first, progress_after_second)
    };
    let (first, second, after_first, after_second) = timeout(BOUND, test)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {BOUND:?}"));

    let progress = |notifications: &[Value]| -> Vec<Value> {
        notifications
            .iter()
            .filter(|n| n["method"] == "notifications/progress")
            .map(|n| n["params"].clone())
            .collect()
    };
    let expected: Vec<Value> = (1..=3)
        .map(|i| json!({ "progress": i, "total": 3, "progressToken": PROGRESS_TOKEN }))
        .collect();
    assert_eq!(progress(&after_first), expected, "{after_first:#?}");
    assert_eq!(
        progress(&after_second),
        expected,
        "the replay sent progress of its own: {after_second:#?}"
    );
    assert_eq!(
        first["result"]["_meta"]["idem/status"], "executed",
        "{first}"
    );
    assert_eq!(
        second["result"]["_meta"]["idem/status"], "replayed",
        "{second}"
    );
    assert_eq!(
        first["result"]["content"],
        json!([{
            "type": "text",
            "text": "Long running operation completed. Duration: 0.3 seconds, Steps: 3.",
        }]),
        "{first}"
    );
    assert_eq!(first["result"]["content"], second["result"]["content"]);
}
