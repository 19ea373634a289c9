//! The server's process: started, fed, read, restarted with backoff and re-initialised
//! (contract Y6).

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

use super::router::{Outgoing, Reply, Router, OWN_REQUEST_TIMEOUT};

/// How many times in a row the server may exit without a successful initialisation before
/// the proxy gives up.
pub const MAX_RESTARTS: u32 = 5;
/// The first pause before a restart; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A server that ran this long before exiting counts as started (for a client of MCP's
/// discovery era, which never sends `initialize`): the restart count starts again.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);
/// How long a server whose input was closed may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Runs the server `command` until `outgoing` closes (the client is gone), restarting it
/// when it exits (Y6). Returns when the proxy should exit.
pub async fn supervise(
    router: Arc<Router>,
    command: Vec<OsString>,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut generation = 0u64;
    let mut failures = 0u32;
    let mut backoff = FIRST_BACKOFF;
    loop {
        generation += 1;
        let why = match start(&command) {
            Ok((mut child, mut stdin, stdout)) => {
                router.server_started(generation);
                tracing::info!(pid = child.id(), generation, "started the MCP server");
                let reader = {
                    let router = Arc::clone(&router);
                    tokio::spawn(async move {
                        // Lines as bytes: one that is not UTF-8 is logged and dropped (Y8).
                        let mut lines = BufReader::new(stdout).split(b'\n');
                        while let Ok(Some(line)) = lines.next_segment().await {
                            router.from_server(generation, &line);
                        }
                        // No answer can come any more: what waits for one learns it now, not
                        // when the process has been reaped (Y6).
                        router
                            .server_exited(generation, "the MCP server exited (its output closed)");
                    })
                };
                let started = tokio::time::Instant::now();
                if generation > 1 {
                    if reinitialise(&router, &mut stdin, generation).await {
                        failures = 0;
                        backoff = FIRST_BACKOFF;
                    }
                    router.probe_if_unlisted();
                }
                let client_gone = feed(
                    &router,
                    &mut stdin,
                    &mut outgoing,
                    &mut shutdown,
                    generation,
                    reader,
                )
                .await;
                if client_gone {
                    drop(stdin);
                    finish(&mut child).await;
                    return;
                }
                let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    _ => {
                        let _ = child.kill().await;
                        "closed its output and was killed".to_owned()
                    }
                };
                if router.initialize_answered() || started.elapsed() >= STABLE_AFTER {
                    failures = 0;
                    backoff = FIRST_BACKOFF;
                }
                format!("the MCP server exited ({status})")
            }
            Err(error) => format!("the MCP server could not be started: {error}"),
        };
        router.server_exited(generation, &why);
        failures += 1;
        if failures > MAX_RESTARTS {
            router.stop(
                format!(
                    "{why}; it ended {failures} times in a row without a successful start ({MAX_RESTARTS} restarts), so idem mcp-proxy stops"
                ),
                1,
            );
            return;
        }
        tracing::warn!(
            "{why}; restarting it in {backoff:?} (restart {failures} of at most {MAX_RESTARTS} in a row)"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

type Started = (Child, ChildStdin, tokio::process::ChildStdout);

fn start(command: &[OsString]) -> std::io::Result<Started> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    Ok((child, stdin, stdout))
}

/// Writes what the router sends to the server until the server's output ends (`false`) or
/// the proxy shuts down (`true`, after writing what was queued).
async fn feed(
    router: &Router,
    stdin: &mut ChildStdin,
    outgoing: &mut mpsc::UnboundedReceiver<Outgoing>,
    shutdown: &mut watch::Receiver<bool>,
    generation: u64,
    mut reader: tokio::task::JoinHandle<()>,
) -> bool {
    loop {
        tokio::select! {
            _ = &mut reader => return false,
            _ = async { shutdown.wait_for(|stop| *stop).await.map(|_| ()) } => {
                while let Ok(next) = outgoing.try_recv() {
                    send(router, stdin, next, generation).await;
                }
                return true;
            }
            next = outgoing.recv() => match next {
                Some(next) => send(router, stdin, next, generation).await,
                None => return true,
            },
        }
    }
}

async fn send(router: &Router, stdin: &mut ChildStdin, next: Outgoing, generation: u64) {
    let Outgoing { proxy_id, line } = next;
    if let Some(id) = proxy_id {
        if !router.written(id, generation) {
            tracing::debug!(
                proxy_id = id,
                "not written: its request was answered as not delivered"
            );
            return;
        }
    }
    if let Err(error) = write_line(stdin, &line).await {
        tracing::warn!("cannot write to the MCP server: {error}");
        if let Some(id) = proxy_id {
            router.not_delivered(id, &format!("the MCP server's input is closed ({error})"));
        }
    }
}

/// Writes one message (`line`, JSON text without its newline) to the server.
async fn write_line(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    let mut line = line.as_bytes().to_vec();
    line.push(b'\n');
    stdin.write_all(&line).await?;
    stdin.flush().await
}

/// Initialises a restarted server with the client's original `initialize` and
/// `notifications/initialized` (Y6), then lists its tools again. `true` when it answered
/// with a result. A client that never sent `initialize` (MCP's discovery era describes
/// every request by itself) needs nothing, and `false` is answered: only a run of
/// [`STABLE_AFTER`] counts as a start then.
async fn reinitialise(router: &Arc<Router>, stdin: &mut ChildStdin, generation: u64) -> bool {
    let Some(params) = router.initialize_params() else {
        return false;
    };
    let (proxy_id, reply) = router.request_unsent("initialize");
    let request =
        json!({"jsonrpc": "2.0", "id": proxy_id, "method": "initialize", "params": params});
    if !router.written(proxy_id, generation) {
        return false;
    }
    if let Err(error) = write_line(stdin, &request.to_string()).await {
        router.not_delivered(proxy_id, &error.to_string());
        return false;
    }
    match tokio::time::timeout(OWN_REQUEST_TIMEOUT, reply).await {
        Ok(Ok(Reply::Answer(answer))) if answer.contains_key("result") => {
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            if write_line(stdin, &initialized.to_string()).await.is_err() {
                return false;
            }
            tracing::info!(
                generation,
                "re-initialised the MCP server with the client's initialize"
            );
            if router.client_initialized() {
                router.probe_tools();
            }
            true
        }
        Ok(Ok(Reply::Answer(answer))) => {
            let answer = serde_json::Value::Object(answer).to_string();
            tracing::warn!(%answer, "the restarted MCP server refused the client's initialize");
            false
        }
        Ok(Ok(Reply::Lost(why) | Reply::NotDelivered(why))) => {
            tracing::warn!(
                "the restarted MCP server did not answer the client's initialize: {why}"
            );
            false
        }
        Ok(Err(_)) => false,
        Err(_) => {
            tracing::warn!("the restarted MCP server did not answer the client's initialize within {OWN_REQUEST_TIMEOUT:?}");
            false
        }
    }
}

/// Waits for a server whose input was closed to exit; kills it after [`EXIT_GRACE`].
async fn finish(child: &mut Child) {
    if tokio::time::timeout(EXIT_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
