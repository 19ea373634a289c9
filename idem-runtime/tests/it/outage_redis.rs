//! Outages of the Redis store (issue 3, item 9; contract S2, S3, S6, S10): a private
//! `redis-server` (never the shared one on 6379, which other test binaries use) is killed
//! with SIGKILL in the middle of a run and started again on the same port and directory.
//!
//! The server runs with an append-only file fsynced on every write (`--appendonly yes
//! --appendfsync always`), the setting the README recommends for production: what the
//! server acknowledged survives the crash. Needs the `redis-server` binary (Debian package
//! `redis-server`); without it the tests fail saying so.

#![cfg(feature = "redis")]

use crate::outage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::RedisStore;
use outage::PrivateServer;

/// A `redis-server` child process on a free port with its data in a temporary directory.
/// Dropping it kills the server and deletes the directory, also when the test panics.
struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port; panics with what to install when `redis-server` is
    /// missing.
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idem-redis-outage-")
            .tempdir()
            .expect("a temporary directory");
        let mut server = RedisServer {
            port: 0,
            dir,
            child: None,
        };
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn_and_wait() {
                return server;
            }
        }
        panic!(
            "redis-server did not start; its log: {}",
            std::fs::read_to_string(server.dir.path().join("redis.log")).unwrap_or_default()
        );
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Spawns the server on `self.port`; true once it answers `PING`, false if it exited.
    fn spawn_and_wait(&mut self) -> bool {
        let dir: &Path = self.dir.path();
        let spawned = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir)
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--save", "", "--daemonize", "no"])
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server not found on PATH: install Debian's `redis-server` package \
                 (apt-get install redis-server) to run the Redis outage tests"
            ),
            Err(e) => panic!("cannot run redis-server: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if ping(self.port) {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl PrivateServer for RedisServer {
    /// SIGKILL: no shutdown, no final write; only what was fsynced survives.
    fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL redis-server");
            child.wait().expect("reap redis-server");
        }
    }

    fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        assert!(
            self.spawn_and_wait(),
            "redis-server did not restart on port {}; its log: {}",
            self.port,
            std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
        );
    }

    fn freeze(&mut self) {
        self.signal("STOP");
    }

    fn thaw(&mut self) {
        self.signal("CONT");
    }
}

impl RedisServer {
    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} redis-server: {status}");
    }
}

impl Drop for RedisServer {
    /// SIGKILL also ends a frozen (stopped) server.
    fn drop(&mut self) {
        self.crash();
        // `dir` is deleted when the field drops, after the server is gone.
    }
}

/// A port nobody listens on right now (the OS picks it).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Whether a server on `port` answers `PING` with `PONG` (not `LOADING`).
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

// pins S10 (fail closed: typed Unavailable errors, no body runs without a claim, the call in
// flight learns its outcome unrecorded), S3 (completed keys replay after the crash, from the
// append-only file), S2 (keys tried during the outage run once after it), S6 (the claim in
// flight at the crash blocks a second run until its lease lapses, then one takeover)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_crash_mid_run_fails_closed_and_loses_nothing() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(&server.url())
        .await
        .expect("connect to the private server")
        .with_prefix("idem-outage:");
    let figures = outage::crash_and_restart(&mut server, Arc::new(store)).await;
    figures.print("redis");
}

// pins S10 (a server that stops answering without closing its connections: typed
// Unavailable errors within the client's timeouts, never a hang, no body runs), S3, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_frozen_server_fails_within_the_timeouts() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(&server.url())
        .await
        .expect("connect to the private server")
        .with_prefix("idem-frozen:");
    let figures = outage::freeze_and_thaw(&mut server, Arc::new(store)).await;
    figures.print("redis");
}
