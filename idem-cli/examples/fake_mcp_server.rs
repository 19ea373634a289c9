//! A scriptable MCP server on stdio, for the tests of `idem mcp-proxy` (tests/it/mcp_proxy.rs):
//! it speaks the 2025-11-25 handshake with raw JSON lines and misbehaves on request.
//!
//! Not an example of idem's API: a test fixture that `cargo test` builds with the other
//! examples. Its tools:
//!
//! - `send_refund {order_id, amount_cents}`: appends `order_id amount_cents` to the file in
//!   `FAKE_EFFECTS` and answers `refund #N`;
//! - `lookup {order_id}` (`readOnlyHint`): appends `lookup order_id`, answers at once;
//! - `crash {}`: appends `crash`, then exits with status 3 without answering;
//! - `slow {ms, cancelled_error}`: appends `slow`, answers `slept` after `ms` milliseconds
//!   unless the client cancelled it (then it never answers, or, with `cancelled_error: true`,
//!   answers MCP's -32800 "request cancelled" error);
//! - `garbage {}`: writes a line that is not JSON, then answers `ok`;
//! - `echo_id {}`: answers with the JSON-RPC id it received, as text;
//! - `drop_refund_tool {}`: from now on lists no `send_refund`, and says so with
//!   `notifications/tools/list_changed`;
//! - `cycle_cursors {}`: from now on lists its tools in pages whose cursors go round
//!   (none → `A` → `B` → `A`…), and says so with `notifications/tools/list_changed`.
//!
//! After `notifications/initialized` it asks the client `roots/list` with id 0. It logs what
//! it sees to the file in `FAKE_LOG`: `initialize`, `roots <result>`, `cancelled <id>`.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

static REFUND_LISTED: AtomicBool = AtomicBool::new(true);
static CURSORS_CYCLE: AtomicBool = AtomicBool::new(false);

fn append(variable: &str, line: &str) {
    let Ok(path) = std::env::var(variable) else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(file, "{line}").unwrap();
    file.sync_all().unwrap();
}

fn count_lines(variable: &str) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map_or(0, |text| text.lines().count())
}

#[derive(Clone)]
struct Out(Arc<Mutex<std::io::Stdout>>);

impl Out {
    fn line(&self, text: &str) {
        let mut out = self.0.lock().unwrap();
        writeln!(out, "{text}").unwrap();
        out.flush().unwrap();
    }

    fn send(&self, message: &Value) {
        self.line(&message.to_string());
    }

    fn result(&self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
}

fn text(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": false})
}

fn tools() -> Value {
    let object = |properties: Value| json!({"type": "object", "properties": properties});
    let mut tools = vec![];
    if REFUND_LISTED.load(Ordering::SeqCst) {
        tools.push(json!({"name": "send_refund", "inputSchema": object(json!({
            "order_id": {"type": "string"}, "amount_cents": {"type": "integer"}}))}));
    }
    tools.extend([
        json!({"name": "lookup", "annotations": {"readOnlyHint": true},
               "inputSchema": object(json!({"order_id": {"type": "string"}}))}),
        json!({"name": "crash", "inputSchema": object(json!({}))}),
        json!({"name": "slow", "inputSchema": object(json!({"ms": {"type": "integer"}}))}),
        json!({"name": "garbage", "inputSchema": object(json!({}))}),
        json!({"name": "echo_id", "inputSchema": object(json!({}))}),
        json!({"name": "bad_result", "inputSchema": object(json!({}))}),
        json!({"name": "drop_refund_tool", "inputSchema": object(json!({}))}),
        json!({"name": "cycle_cursors", "inputSchema": object(json!({}))}),
    ]);
    json!({ "tools": tools })
}

fn main() {
    let out = Out(Arc::new(Mutex::new(std::io::stdout())));
    let cancelled: Arc<Mutex<HashSet<String>>> = Arc::default();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = message.get("id").cloned();
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        let params = message.get("params").cloned().unwrap_or(json!({}));
        match (method, id) {
            ("initialize", Some(id)) => {
                append("FAKE_LOG", "initialize");
                out.result(
                    &id,
                    json!({"protocolVersion": params["protocolVersion"],
                           "capabilities": {"tools": {"listChanged": true}},
                           "serverInfo": {"name": "fake", "version": "1"}}),
                );
            }
            ("notifications/initialized", None) => {
                out.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list"}));
            }
            ("notifications/cancelled", None) => {
                let request = params["requestId"].to_string();
                append("FAKE_LOG", &format!("cancelled {request}"));
                cancelled.lock().unwrap().insert(request);
            }
            ("", Some(id)) => {
                // A response: the client's answer to roots/list.
                if id == json!(0) {
                    append("FAKE_LOG", &format!("roots {}", message["result"]));
                }
            }
            ("ping", Some(id)) => out.result(&id, json!({})),
            ("x/echo", Some(id)) => {
                // The line as received, and an answer written by hand (numbers a Value
                // would change, members in no sorted order).
                append("FAKE_LOG", &format!("raw {line}"));
                out.line(&format!(
                    r#"{{"result":{{"echoed":true,"n":-0,"big":123456789012345678901234567890}},"jsonrpc":"2.0","id":{id}}}"#
                ));
            }
            ("tools/list", Some(id)) => {
                let mut page = tools();
                if CURSORS_CYCLE.load(Ordering::SeqCst) {
                    let next = if params["cursor"] == "A" { "B" } else { "A" };
                    page["nextCursor"] = json!(next);
                }
                out.result(&id, page);
            }
            ("tools/call", Some(id)) => call(&out, &cancelled, id, &params),
            (_, Some(id)) => out.send(&json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("no method {method}")}})),
            (_, None) => {}
        }
    }
}

fn call(out: &Out, cancelled: &Arc<Mutex<HashSet<String>>>, id: Value, params: &Value) {
    let arguments = &params["arguments"];
    match params["name"].as_str().unwrap_or("") {
        "send_refund" => {
            append(
                "FAKE_EFFECTS",
                &format!("{} {}", arguments["order_id"].as_str().unwrap_or("?"), arguments["amount_cents"]),
            );
            out.result(&id, text(format!("refund #{}", count_lines("FAKE_EFFECTS"))));
        }
        "lookup" => {
            append("FAKE_EFFECTS", &format!("lookup {}", arguments["order_id"].as_str().unwrap_or("?")));
            out.result(&id, text("paid"));
        }
        "crash" => {
            append("FAKE_EFFECTS", "crash");
            std::process::exit(3);
        }
        "slow" => {
            append("FAKE_EFFECTS", "slow");
            let ms = arguments["ms"].as_u64().unwrap_or(100);
            let answer_cancelled = arguments["cancelled_error"] == json!(true);
            let (out, cancelled) = (out.clone(), Arc::clone(cancelled));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                if !cancelled.lock().unwrap().contains(&id.to_string()) {
                    out.result(&id, text("slept"));
                } else if answer_cancelled {
                    out.send(&json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32800, "message": "request cancelled"}}));
                }
            });
        }
        "garbage" => {
            out.line("this is not json");
            out.line("{\"jsonrpc\": \"2.0\", \"id\": 987654, \"result\": {}}");
            out.result(&id, text("ok"));
        }
        "echo_id" => out.result(&id, text(id.to_string())),
        "bad_result" => {
            append("FAKE_EFFECTS", "bad_result");
            out.result(&id, json!(42));
        }
        "drop_refund_tool" => {
            REFUND_LISTED.store(false, Ordering::SeqCst);
            out.result(&id, text("dropped"));
            out.send(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        }
        "cycle_cursors" => {
            CURSORS_CYCLE.store(true, Ordering::SeqCst);
            out.result(&id, text("cycling"));
            out.send(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        }
        other => out.result(
            &id,
            json!({"content": [{"type": "text", "text": format!("no tool {other}")}], "isError": true}),
        ),
    }
}
