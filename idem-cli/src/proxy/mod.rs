//! `idem mcp-proxy`: idem in front of any MCP server, without changing it (contract Y).
//!
//! The server runs as a child process on stdio; the client speaks MCP to the proxy's own
//! stdin and stdout. Every message passes through [`router::Router`], which translates
//! request ids and hands `tools/call` requests to [`keyed`]; [`child`] keeps the server's
//! process running. Nothing but protocol messages is written to stdout; logs go to stderr.

mod child;
pub mod config;
mod http;
mod jsonrpc;
mod keyed;
mod router;
mod tools;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::StoreLocator;
use idem_runtime::Engine;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use self::config::Config;
use self::router::Router;

/// What `idem mcp-proxy` was asked to do.
#[derive(Debug)]
pub struct Options<'a> {
    /// The store locator (`--store`, `IDEM_STORE`); `None`: an in-memory store.
    pub store: Option<&'a str>,
    /// The namespace keys are derived in.
    pub namespace: Option<&'a str>,
    /// The configuration file.
    pub config: Option<&'a Path>,
    /// Log lines as JSON.
    pub json_logs: bool,
    /// Where the server is.
    pub transport: Transport,
}

/// How the proxy reaches the server, and the client the proxy.
#[derive(Debug)]
pub enum Transport {
    /// The server's command and arguments, run as a child on stdio; the client on this
    /// process's stdio.
    Stdio {
        /// The command and its arguments.
        command: Vec<OsString>,
    },
    /// The server's streamable HTTP endpoint; the client on `listen` (Y10).
    Http {
        /// Where to listen.
        listen: std::net::SocketAddr,
        /// The upstream endpoint URL, as given.
        upstream: String,
    },
}

/// Runs the proxy until the client closes its input (exit 0), the configuration is refused
/// (exit 2), or the server cannot be kept running (exit 1).
pub fn main(options: Options<'_>) -> ExitCode {
    init_logs(options.json_logs);
    let config = match options.config.map(Config::load).transpose() {
        Ok(config) => config.unwrap_or_else(Config::defaults),
        Err(error) => return refuse(&error.0),
    };
    if config.session_as_conversation && matches!(options.transport, Transport::Stdio { .. }) {
        // A stdio client has no session: the setting would never apply (Y4).
        return refuse(&format!(
            "the config file {}: session_as_conversation = true takes an HTTP client's session as the conversation, and a proxy on stdio has no sessions: remove it, or run the proxy with --listen and --upstream",
            options.config.map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return refuse(&format!("cannot start the async runtime: {error}")),
    };
    let code = runtime.block_on(async move {
        let engine = match open(options.store, options.namespace) {
            Ok(engine) => engine,
            Err(message) => return Err(message),
        };
        Ok(match options.transport {
            Transport::Stdio { command } => serve(config, engine, command).await,
            Transport::Http { listen, upstream } => {
                let upstream = parse_upstream(&upstream)?;
                http::serve(config, engine, listen, upstream).await
            }
        })
    });
    // Tasks still blocked on stdin would keep the runtime alive.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match code {
        Ok(code) => ExitCode::from(code),
        Err(message) => refuse(&message),
    }
}

fn refuse(message: &str) -> ExitCode {
    eprintln!("idem mcp-proxy: {message}");
    ExitCode::from(2)
}

fn init_logs(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("IDEM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The engine over the store (created and migrated as the runtime does, Y9).
fn open(store: Option<&str>, namespace: Option<&str>) -> Result<Engine, String> {
    let locator = match store {
        Some(text) => StoreLocator::parse(text).map_err(|e| format!("--store: {e}"))?,
        None => {
            tracing::warn!("no --store (nor IDEM_STORE): outcomes are kept in memory and forgotten when the proxy exits");
            StoreLocator::Memory
        }
    };
    let shown = locator.to_string();
    let store = locator
        .open()
        .map_err(|e| format!("the store {shown} cannot be opened: {e}"))?;
    let mut builder = Engine::builder().shared_store(store);
    if let Some(namespace) = namespace {
        builder = builder.namespace(namespace);
    }
    let engine = builder.build().map_err(|e| format!("--namespace: {e}"))?;
    tracing::info!("idem mcp-proxy keeps outcomes in {shown}");
    Ok(engine)
}

/// `--upstream`: an absolute `http://` URL.
fn parse_upstream(text: &str) -> Result<::http::Uri, String> {
    let uri: ::http::Uri = text
        .parse()
        .map_err(|e| format!("--upstream {text:?} is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) => Ok(uri),
        (Some("https"), _) => Err(format!(
            "--upstream {text:?}: https is not supported yet; put the proxy next to the server and use http://"
        )),
        _ => Err(format!(
            "--upstream {text:?} must be an absolute http:// URL such as http://127.0.0.1:3001/mcp"
        )),
    }
}

/// Proxies until the client's input ends or the proxy must stop; the exit status.
async fn serve(config: Config, engine: Engine, command: Vec<OsString>) -> u8 {
    let (to_client, from_router) = mpsc::unbounded_channel::<Option<String>>();
    let (to_server, outgoing) = mpsc::unbounded_channel();
    let router = Arc::new(Router::new(config, engine, to_client, to_server));
    let writer = tokio::spawn(write_client(from_router));
    let (shutdown, shutdown_seen) = tokio::sync::watch::channel(false);
    let supervisor = tokio::spawn(child::supervise(
        Arc::clone(&router),
        command,
        outgoing,
        shutdown_seen,
    ));
    let mut fatal = router.fatal();
    let mut stop_signal = StopSignal::new();
    // Lines as bytes: one that is not UTF-8 is answered as a parse error (Y8), not taken
    // for the end of the input.
    let mut lines = BufReader::new(tokio::io::stdin()).split(b'\n');
    let code = loop {
        tokio::select! {
            line = lines.next_segment() => match line {
                Ok(Some(line)) => router.from_client(&line),
                Ok(None) | Err(_) => break 0,
            },
            signal = stop_signal.received() => {
                tracing::info!("{signal}: the proxy stops as when its input ends");
                break 0;
            }
            _ = fatal.wait_for(Option::is_some) => break 1,
        }
    };
    if code == 0 {
        // The client's input is closed, its output may still be read: the requests in
        // flight still get their answers, keyed calls still save their outcomes, and a tool
        // listing under way still checks the configuration (Y9).
        let deadline = tokio::time::Instant::now() + router.config.cancel_wait;
        while (router.client_requests_in_flight() > 0 || router.probing())
            && tokio::time::Instant::now() < deadline
            && router.fatal().borrow().is_none()
        {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                signal = stop_signal.received() => {
                    tracing::info!("{signal} again: the proxy stops now");
                    break;
                }
            }
        }
        router.wind_down("the proxy is stopping (its client closed its input or it was signalled)");
    }
    // Every keyed call now ends: it answers, saves, releases or marks its outcome unknown
    // in the store before the proxy exits.
    let deadline = tokio::time::Instant::now() + WIND_DOWN;
    while router.keyed_in_progress() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = match router.fatal().borrow().as_ref() {
        Some((_, fatal_code)) => *fatal_code,
        None => code,
    };
    shutdown.send_replace(true);
    let _ = supervisor.await;
    router.close_client();
    let _ = writer.await;
    code
}

/// How long the proxy waits, once it stops, for its keyed calls to write what they came to
/// in the store (the store steps left after the wind-down, not the server's answers).
pub(crate) const WIND_DOWN: Duration = Duration::from_secs(5);

/// SIGTERM and SIGINT, which stop the proxy as the end of its input does (Y9).
pub(crate) struct StopSignal {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    pub(crate) fn new() -> Self {
        StopSignal {
            #[cfg(unix)]
            terminate: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .ok(),
        }
    }

    /// The next signal's name.
    pub(crate) async fn received(&mut self) -> &'static str {
        #[cfg(unix)]
        if let Some(terminate) = self.terminate.as_mut() {
            return tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            };
        }
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// Writes each message to stdout as one line, until the `None` that ends the proxy.
async fn write_client(mut messages: mpsc::UnboundedReceiver<Option<String>>) {
    let mut stdout = tokio::io::stdout();
    while let Some(Some(message)) = messages.recv().await {
        let mut line = message.into_bytes();
        line.push(b'\n');
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}
