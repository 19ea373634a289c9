//! `idem mcp-proxy --listen --upstream` (contract Y10) in front of a real streamable-HTTP
//! server: the MCP conformance suite (`@modelcontextprotocol/conformance`) run against the
//! reference "everything" server directly and through the proxy must give the same
//! verdicts, scenario by scenario and check by check.
//!
//! Test-only feature `test-mcp-node`; both packages are installed under `target/mcp-node`
//! by `.ci/install-mcp-deps.sh` (pinned versions there).
//!
//! The everything server is not the suite's own reference server (it lacks the suite's
//! `test_*` tools, prompts and resources), so many scenarios fail directly: what is pinned
//! is that the proxy changes none of the verdicts. The proxy runs with its default
//! configuration, which keys every tool of the everything server not annotated read-only
//! (and every name it does not list, such as the suite's `test_*` tools).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mcp_http::{free_port, Proxy};

/// One conformance run's bound.
const RUN: Duration = Duration::from_secs(120);
/// How long the everything server may take to listen.
const START: Duration = Duration::from_secs(15);

fn node_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("idem-cli is inside the workspace")
        .to_owned();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    };
    target.join("mcp-node")
}

fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run .ci/install-mcp-deps.sh first",
        path.display()
    );
    path
}

/// A child process killed (and reaped) when dropped.
struct Killed {
    child: Child,
    log: PathBuf,
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Killed {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `PORT=… node …/server-everything/dist/index.js streamableHttp`, once it listens; its
/// endpoint's URL.
fn everything_server(dir: &Path, name: &str) -> (Killed, String) {
    let entry = installed(
        node_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
    );
    let mut last = String::new();
    // A port found free may be taken before the server binds it: try another.
    for attempt in 0..3 {
        let port = free_port();
        let log = dir.join(format!("{name}-everything-{attempt}.log"));
        let child = Command::new("node")
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(
                std::fs::File::create(dir.join(format!("{name}-everything-{attempt}.err")))
                    .unwrap(),
            )
            .spawn()
            .expect("node runs");
        let mut server = Killed { child, log };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + START;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return (server, format!("http://{addr}/mcp"));
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                last = format!("it exited ({status}): {}", server.log());
                break;
            }
            if Instant::now() > deadline {
                last = format!("it did not listen within {START:?}: {}", server.log());
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("the everything server did not start: {last}");
}

/// What one conformance run said.
struct Verdicts {
    /// The summary's `✓ scenario: N passed, M failed` / `✗ …` lines, in order.
    scenarios: Vec<String>,
    /// Its `Total: …` line.
    total: String,
    /// Each scenario's checks (id → status), from the output directory.
    checks: BTreeMap<String, Vec<(String, String)>>,
    output: String,
}

/// `conformance server --url URL -o DIR`, bounded by [`RUN`].
async fn conformance(url: &str, out: &Path) -> Verdicts {
    let runner = installed(node_dir().join("node_modules/.bin/conformance"));
    let run = tokio::process::Command::new(runner)
        .args(["server", "--url", url, "-o"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN, run)
        .await
        .unwrap_or_else(|_| panic!("the conformance suite against {url} took over {RUN:?}"))
        .expect("the conformance suite runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = output
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary from the suite against {url}:\n{output}"));
    let scenarios: Vec<String> = summary
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('✓') || l.starts_with('✗'))
        .map(str::to_owned)
        .collect();
    let total = summary
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("Total:"))
        .unwrap_or_else(|| panic!("no total from the suite against {url}:\n{output}"))
        .to_owned();
    assert!(
        !scenarios.is_empty(),
        "no scenario ran against {url}:\n{output}"
    );
    Verdicts {
        scenarios,
        total,
        checks: checks(out),
        output,
    }
}

/// Each scenario's checks as the suite saved them (`server-SCENARIO-TIMESTAMP/checks.json`).
fn checks(out: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let mut all = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return all;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `server-SCENARIO-2026-12-05T09-15-43-836Z`: the timestamp is the last six
        // dash-separated parts.
        let parts: Vec<&str> = name.split('-').collect();
        if parts.len() < 8 || parts[0] != "server" {
            continue;
        }
        let scenario = parts[1..parts.len() - 6].join("-");
        let Ok(text) = std::fs::read_to_string(entry.path().join("checks.json")) else {
            continue;
        };
        let Ok(Value::Array(list)) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let mut checks: Vec<(String, String)> = list
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap_or("?").to_owned(),
                    c["status"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect();
        checks.sort();
        all.insert(scenario, checks);
    }
    all
}

fn show(name: &str, verdicts: &Verdicts) -> String {
    format!(
        "--- {name}:\n{}\n{}",
        verdicts.scenarios.join("\n"),
        verdicts.total
    )
}

// pins Y10, Y1: the MCP conformance suite gives the everything server the same verdicts,
// scenario by scenario and check by check, directly and through `idem mcp-proxy --listen
// --upstream` (default configuration: its non-read-only tools keyed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_verdicts_are_the_same_through_the_proxy() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();

    let (direct_server, direct_url) = everything_server(dir.path(), "direct");
    let direct = conformance(&direct_url, &dir.path().join("direct")).await;
    drop(direct_server);

    println!("{}", show("direct", &direct));
    assert_eq!(
        direct.checks.len(),
        direct.scenarios.len(),
        "every scenario's checks.json was read: {:?}",
        direct.checks.keys().collect::<Vec<_>>()
    );

    // The default configuration (a tool call without `_meta.conversationId` is refused as
    // `missing_scope`, the upstream not called), then `session_as_conversation = true` (the
    // suite's tool calls keyed by their session and forwarded).
    for (name, config) in [
        ("through the proxy", None),
        (
            "through the proxy, session_as_conversation",
            Some("session_as_conversation = true\n"),
        ),
    ] {
        let (proxied_server, upstream) = everything_server(dir.path(), "proxied");
        let proxy = Proxy::start(&upstream, config);
        let out = dir.path().join(name.replace([' ', ','], "_"));
        let proxied = conformance(&proxy.url(), &out).await;
        let proxy_log = proxy.log();
        let server_log = proxied_server.log();
        drop(proxy);
        drop(proxied_server);

        let shown = show(name, &proxied);
        println!("{shown}");
        assert_eq!(
            direct.scenarios,
            proxied.scenarios,
            "the verdicts differ\n{}\n{shown}\n--- the suite {name} said:\n{}{proxy_log}\n--- the everything server behind it:\n{server_log}",
            show("direct", &direct),
            proxied.output
        );
        assert_eq!(direct.total, proxied.total);
        assert_eq!(
            direct.checks, proxied.checks,
            "the checks differ {name}{proxy_log}"
        );
    }
    eprintln!("three runs in {:?}", started.elapsed());
}
