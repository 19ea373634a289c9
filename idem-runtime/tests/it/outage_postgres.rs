//! Outages of the PostgreSQL store (issue 3, item 9; contract S2, S3, S6, S10): a private
//! cluster (never the shared server on 5432, which other test binaries use) is made with
//! `initdb` in a temporary directory, crashed with `pg_ctl stop -m immediate` in the middle
//! of a run, and started again.
//!
//! Needs the server binaries (`initdb`, `pg_ctl`: Debian package `postgresql`, found under
//! `/usr/lib/postgresql/*/bin` or on `PATH`); without them the tests fail saying so. As
//! root, the cluster runs as the `postgres` OS user (`runuser -u postgres`), since `initdb`
//! refuses to run as root.

#![cfg(feature = "postgres")]

use crate::outage;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use idem_runtime::PostgresStore;
use outage::PrivateServer;

/// A PostgreSQL cluster in a temporary directory, listening on a free port on 127.0.0.1
/// (and a socket in the directory). Dropping it stops the server (immediate mode) and
/// deletes the directory, also when the test panics. Also used by `tls_postgres`.
pub(crate) struct PgServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    running: bool,
    /// The processes stopped by [`PrivateServer::freeze`].
    frozen: Vec<u32>,
}

impl PgServer {
    /// Makes and starts a cluster; panics with what to install when the binaries are missing.
    fn start() -> Self {
        Self::start_with(|_| {})
    }

    /// As [`start`](Self::start), with `prepare` run on the data directory after `initdb`
    /// and before the server starts (to add settings, files, `pg_hba.conf` lines); what it
    /// writes is handed to the `postgres` OS user when this process is root.
    pub(crate) fn start_with(prepare: impl FnOnce(&std::path::Path)) -> Self {
        let bin = find_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("idem-pg-outage-")
            .tempdir()
            .expect("a temporary directory");
        let mut server = PgServer {
            bin,
            dir,
            port: 0,
            running: false,
            frozen: Vec::new(),
        };
        if as_root() {
            server.check(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(server.dir.path()),
                "chown the cluster directory to postgres",
            );
        }
        let mut initdb = server.command("initdb");
        initdb
            .arg("-D")
            .arg(server.data())
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale"])
            .arg("--no-sync");
        server.check(&mut initdb, "initdb");
        prepare(&server.data());
        if as_root() {
            server.check(
                Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(server.data()),
                "chown the prepared data directory to postgres",
            );
        }
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.pg_ctl_start().status.success() {
                server.running = true;
                return server;
            }
        }
        panic!(
            "the private PostgreSQL server did not start: {}",
            server.log()
        );
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The directory of its Unix socket (`host=DIR` in a `key=value` connection string).
    pub(crate) fn socket_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// The port it listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `bin/name`, run as the `postgres` OS user when this process is root.
    fn command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn check(&self, command: &mut Command, what: &str) {
        let out = command
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
        assert!(out.status.success(), "{what} failed: {}", describe(&out));
    }

    fn pg_ctl_start(&self) -> Output {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-o", &options, "-w", "-t", "30", "start"])
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl start")
    }

    fn pg_ctl_stop(&self) -> Output {
        self.command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "-t", "30", "stop"])
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl stop")
    }
}

impl PrivateServer for PgServer {
    /// `pg_ctl stop -m immediate`: every server process quits at once, without a
    /// checkpoint; the next start recovers from the write-ahead log, as after a crash.
    fn crash(&mut self) {
        let out = self.pg_ctl_stop();
        assert!(out.status.success(), "pg_ctl stop: {}", describe(&out));
        self.running = false;
    }

    fn restart(&mut self) {
        assert!(!self.running, "the server is running");
        let out = self.pg_ctl_start();
        assert!(
            out.status.success(),
            "pg_ctl start: {}; server log: {}",
            describe(&out),
            self.log()
        );
        self.running = true;
    }

    /// Stops the postmaster first (so it starts no new backend), then every child.
    fn freeze(&mut self) {
        assert!(self.frozen.is_empty(), "already frozen");
        let postmaster = self.postmaster_pid();
        signal("STOP", postmaster);
        self.frozen.push(postmaster);
        for child in children_of(postmaster) {
            signal("STOP", child);
            self.frozen.push(child);
        }
    }

    fn thaw(&mut self) {
        for pid in self.frozen.drain(..).rev() {
            signal("CONT", pid);
        }
    }
}

impl PgServer {
    /// The first line of `postmaster.pid`.
    fn postmaster_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("read postmaster.pid");
        text.lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .expect("a pid on the first line of postmaster.pid")
    }
}

/// Sends `signal` (`STOP`, `CONT`) to `pid`; a process that is gone already is fine.
fn signal(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// The processes whose parent is `parent` (from `/proc/<pid>/stat`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid …; comm may hold spaces and parentheses.
            let after_comm = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after_comm.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.thaw(); // a stopped postmaster would not act on pg_ctl stop
        if self.running {
            let out = self.pg_ctl_stop();
            if !out.status.success() {
                eprintln!(
                    "could not stop the private PostgreSQL server: {}",
                    describe(&out)
                );
            }
        }
        // `dir` is deleted when the field drops, after the server is gone.
    }
}

fn describe(out: &Output) -> String {
    format!(
        "{}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// The directory holding `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/*/bin`
/// (Debian's layout), else the one on `PATH`.
fn find_bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir: &PathBuf| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .unwrap_or_else(|| {
            panic!(
                "the PostgreSQL server binaries (initdb, pg_ctl) are not under \
                 /usr/lib/postgresql/*/bin nor on PATH: install Debian's `postgresql` package \
                 (apt-get install postgresql) to run the PostgreSQL outage tests"
            )
        })
}

/// Whether this process runs as root (then the cluster runs as `postgres`).
fn as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            // Uid: real effective saved filesystem
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// A port nobody listens on right now (the OS picks it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

// pins S10 (fail closed: typed Unavailable errors, no body runs without a claim, the call in
// flight learns its outcome unrecorded), S3 (completed keys replay after crash recovery from
// the write-ahead log), S2 (keys tried during the outage run once after it), S6 (the claim in
// flight at the crash blocks a second run until its lease lapses, then one takeover)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_crash_mid_run_fails_closed_and_loses_nothing() {
    let mut server = PgServer::start();
    let store = PostgresStore::with_schema(&server.url(), "idem_outage").expect("a valid URL");
    let figures = outage::crash_and_restart(&mut server, Arc::new(store)).await;
    figures.print("postgres");
}

// pins S10 (a server that stops answering without closing its connections: typed
// Unavailable errors within the store's timeouts, never a hang, no body runs), S3, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_frozen_server_fails_within_the_timeouts() {
    let mut server = PgServer::start();
    let store = PostgresStore::with_schema(&server.url(), "idem_frozen").expect("a valid URL");
    let figures = outage::freeze_and_thaw(&mut server, Arc::new(store)).await;
    figures.print("postgres");
}
