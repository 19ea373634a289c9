//! The Redis store over TLS (issue 19, item 0): a private `redis-server` (never the shared
//! one) that listens only for TLS (`--port 0 --tls-port P`) with a test CA's certificate:
//! the conformance suite over `rediss://` with the CA as `ssl_ca_certs`; a server
//! certificate of an unknown CA refused; a client certificate required by
//! `--tls-auth-clients yes` on a second server; a plain `redis://` URL to the TLS port
//! failing with a message that says to write `rediss://`.
//!
//! The servers are started once per test binary, on first use, and killed at exit (an
//! `atexit` handler). Needs `redis-server` built with TLS (Debian's is).

#![cfg(feature = "redis")]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use idem_runtime::{IdempotencyKey, RedisStore, Store, StoreErrorKind, Timestamp};

#[allow(unused_imports)]
use crate::conformance;
use crate::support;
use crate::support::TestStore;
use crate::tls_ca::{self, TestCa};

/// The private servers: `open` takes clients without certificates, `mutual` requires one.
struct Tls {
    ca: TestCa,
    open: u16,
    mutual: u16,
    _dir: tempfile::TempDir,
}

/// The servers' processes, killed by [`kill_servers`] when the process exits.
static RUNNING: Mutex<Vec<Child>> = Mutex::new(Vec::new());

extern "C" fn kill_servers() {
    if let Ok(mut running) = RUNNING.lock() {
        for mut child in running.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a directory for the certificates");
        let ca = tls_ca::make(dir.path());
        // SAFETY: `kill_servers` is an `extern "C" fn()` that touches only a static.
        unsafe {
            libc::atexit(kill_servers);
        }
        let open = start(dir.path(), &ca, "optional", "open");
        let mutual = start(dir.path(), &ca, "yes", "mutual");
        Tls {
            ca,
            open,
            mutual,
            _dir: dir,
        }
    })
}

/// Starts a TLS-only server (`auth_clients`: `optional` or `yes`); its port.
fn start(dir: &std::path::Path, ca: &TestCa, auth_clients: &str, name: &str) -> u16 {
    let data = dir.join(name);
    std::fs::create_dir_all(&data).expect("a data directory");
    for _ in 0..5 {
        let port = crate::outage_redis::free_port();
        let spawned = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(&ca.server_cert)
            .arg("--tls-key-file")
            .arg(&ca.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&ca.ca)
            .args(["--tls-auth-clients", auth_clients])
            .arg("--dir")
            .arg(&data)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--logfile")
            .arg(data.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => panic!("cannot run redis-server (Debian package redis-server): {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                RUNNING.lock().unwrap().push(child);
                return port;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!(
        "a TLS redis-server did not start: {}",
        std::fs::read_to_string(data.join("redis.log")).unwrap_or_default()
    );
}

fn open_url() -> String {
    format!(
        "rediss://127.0.0.1:{}/?ssl_ca_certs={}",
        tls().open,
        tls().ca.ca.display()
    )
}

/// A store over TLS on a fresh prefix (the server and its keys go at exit).
fn redis_tls() -> TestStore {
    let prefix = format!(
        "idem-tls-{:032x}:",
        idem_runtime::store::OwnerToken::random().as_u128()
    );
    let store = RedisStore::connect_lazy(&open_url())
        .expect("a Redis URL and a tokio runtime")
        .with_prefix(prefix);
    TestStore {
        store: Arc::new(store),
        keep: None,
    }
}

conformance_suite!(redis_tls, super::redis_tls, async_only);

/// The first operation's result on a fresh store at `url`.
async fn first_read(url: &str) -> Result<(), idem_runtime::StoreError> {
    let store = RedisStore::connect_lazy(url).map_err(idem_runtime::StoreError::from)?;
    let key = IdempotencyKey::from_hex(&"cd".repeat(32)).unwrap();
    store
        .read(&key, Timestamp::from_millis(1))
        .await
        .map(|_| ())
}

// pins N1: the server's certificate is checked: a CA that did not sign it is refused
#[tokio::test]
async fn a_certificate_of_another_ca_is_refused() {
    first_read(&open_url())
        .await
        .expect("the CA that signed it");
    let other = format!(
        "rediss://127.0.0.1:{}/?ssl_ca_certs={}",
        tls().open,
        tls().ca.other_ca.display()
    );
    let error = first_read(&other).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
}

// pins N1: a server that requires client certificates takes the one the URL names
// (`ssl_certfile`, `ssl_keyfile`) and refuses a client without
#[tokio::test]
async fn a_client_certificate_is_sent_when_named() {
    let ca = &tls().ca;
    let base = format!(
        "rediss://127.0.0.1:{}/?ssl_ca_certs={}",
        tls().mutual,
        ca.ca.display()
    );
    let with_cert = format!(
        "{base}&ssl_certfile={}&ssl_keyfile={}",
        ca.client_cert.display(),
        ca.client_key.display()
    );
    first_read(&with_cert)
        .await
        .expect("with the client certificate");
    assert!(
        first_read(&base).await.is_err(),
        "without a client certificate"
    );
}

// pins N1: a plain-text URL to a TLS-only server fails, saying to write rediss://
#[tokio::test]
async fn plain_text_to_a_tls_only_server_is_told_to_use_tls() {
    let plain = format!("redis://127.0.0.1:{}/", tls().open);
    let error = first_read(&plain).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(error.to_string().contains("rediss://"), "{error}");
}
