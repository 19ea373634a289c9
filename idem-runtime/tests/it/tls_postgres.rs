//! The PostgreSQL store over TLS (issue 19, item 0): a private server (never the shared one)
//! with a test CA's certificate, `ssl = on`, and `pg_hba.conf` taking TCP connections only
//! over TLS (`hostssl`): the conformance suite with `sslmode=verify-full` and the CA as
//! `sslrootcert`; a plain-text URL refused with a message that says to use TLS; a server
//! certificate of an unknown CA refused; a client certificate authenticating a role.
//!
//! The server is started once per test binary, on first use, and stopped at exit (an
//! `atexit` handler, since statics are never dropped). Needs the server binaries, as
//! `outage_postgres` does.

#![cfg(feature = "postgres")]

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use idem_runtime::store::OwnerToken;
use idem_runtime::{IdempotencyKey, PostgresStore, Store, StoreErrorKind, Timestamp};

#[allow(unused_imports)]
use crate::conformance;
use crate::outage_postgres::PgServer;
use crate::support;
use crate::support::TestStore;
use crate::tls_ca::{self, TestCa};

/// The private server, and the certificates its clients use.
struct Tls {
    ca: TestCa,
    port: u16,
    _dir: tempfile::TempDir,
}

/// The running server, taken and stopped by [`stop_server`] when the process exits.
static RUNNING: Mutex<Option<PgServer>> = Mutex::new(None);

extern "C" fn stop_server() {
    let server = RUNNING.lock().ok().and_then(|mut running| running.take());
    drop(server);
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a directory for the certificates");
        let ca = tls_ca::make(dir.path());
        let server = PgServer::start_with(|data| prepare(data, &ca));
        let port = server.port();
        create_client_role(data_socket(&server), port);
        *RUNNING.lock().unwrap() = Some(server);
        // SAFETY: `stop_server` is an `extern "C" fn()` that touches only a static.
        unsafe {
            libc::atexit(stop_server);
        }
        Tls {
            ca,
            port,
            _dir: dir,
        }
    })
}

/// The certificates in the data directory, TLS on, TCP only over TLS.
fn prepare(data: &Path, ca: &TestCa) {
    for (from, to) in [
        (&ca.server_cert, "server.crt"),
        (&ca.server_key, "server.key"),
        (&ca.ca, "ca.crt"),
    ] {
        std::fs::copy(from, data.join(to)).expect("copy a certificate into the data directory");
    }
    let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).expect("postgresql.conf");
    conf.push_str(
        "\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nssl_ca_file = 'ca.crt'\n",
    );
    std::fs::write(data.join("postgresql.conf"), conf).expect("write postgresql.conf");
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\n\
         hostssl all client_user 127.0.0.1/32 cert\n\
         hostssl all all 127.0.0.1/32 trust\n",
    )
    .expect("write pg_hba.conf");
}

/// The server's socket directory (it listens there too, as `local`, trusted).
fn data_socket(server: &PgServer) -> String {
    server.socket_dir()
}

/// `CREATE ROLE client_user LOGIN`, over the socket (plain, trusted).
fn create_client_role(socket_dir: String, port: u16) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let config = format!("host={socket_dir} port={port} user=postgres dbname=postgres");
            let (client, connection) = tokio_postgres::connect(&config, tokio_postgres::NoTls)
                .await
                .expect("the private server's socket");
            tokio::spawn(connection);
            client
                .batch_execute("CREATE ROLE client_user LOGIN; GRANT CREATE ON DATABASE postgres TO client_user")
                .await
                .expect("create the client role");
        });
    })
    .join()
    .expect("the admin thread");
}

fn url(user: &str, query: &str) -> String {
    format!(
        "postgres://{user}@127.0.0.1:{}/postgres?{query}",
        tls().port
    )
}

fn verify_full() -> String {
    url(
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={}", tls().ca.ca.display()),
    )
}

fn fresh_schema() -> String {
    format!("idem_tls_{:032x}", OwnerToken::random().as_u128())
}

/// A store over verified TLS in a fresh schema (the server is dropped at exit, with it).
fn postgres_tls() -> TestStore {
    TestStore {
        store: Arc::new(
            PostgresStore::with_schema(&verify_full(), &fresh_schema()).expect("a valid URL"),
        ),
        keep: None,
    }
}

conformance_suite!(postgres_tls, super::postgres_tls, async_only);

/// The first operation's result on a fresh store at `url`: `Ok` when the server took it.
async fn first_read(url: &str) -> Result<(), idem_runtime::StoreError> {
    let store = PostgresStore::with_schema(url, &fresh_schema()).expect("a valid URL");
    let key = IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
    store
        .read(&key, Timestamp::from_millis(1))
        .await
        .map(|_| ())
}

// pins N1: a plain-text URL to a server that takes TCP only over TLS fails, and the
// message says what to add to the URL
#[tokio::test]
async fn plain_text_to_a_tls_only_server_is_told_to_use_tls() {
    let error = first_read(&url("postgres", "sslmode=disable"))
        .await
        .unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("only over TLS") && text.contains("sslmode=require"),
        "{text}"
    );
}

// pins N1: `prefer` (the default) and `require` encrypt without checking the
// certificate, as libpq does; `verify-full` checks it against `sslrootcert` and refuses
// a server whose certificate another CA signed
#[tokio::test]
async fn certificates_are_checked_as_the_sslmode_says() {
    first_read(&url("postgres", ""))
        .await
        .expect("prefer: TLS, unverified");
    first_read(&url("postgres", "sslmode=require"))
        .await
        .expect("require: TLS, unverified");
    first_read(&verify_full())
        .await
        .expect("verify-full with the CA");
    let ca = tls().ca.ca.display().to_string();
    first_read(&url(
        "postgres",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-ca with the CA");
    let other = tls().ca.other_ca.display().to_string();
    for mode in ["verify-full", "verify-ca", "require"] {
        let error = first_read(&url(
            "postgres",
            &format!("sslmode={mode}&sslrootcert={other}"),
        ))
        .await
        .unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Unavailable, "{mode}: {error}");
        assert!(error.to_string().contains("certificate"), "{mode}: {error}");
    }
}

// pins N1: a client certificate (`sslcert`, `sslkey`) authenticates a role that
// pg_hba.conf admits only by certificate; without it the server refuses
#[tokio::test]
async fn a_client_certificate_authenticates() {
    let ca = &tls().ca;
    let with_cert = url(
        "client_user",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            ca.ca.display(),
            ca.client_cert.display(),
            ca.client_key.display()
        ),
    );
    first_read(&with_cert)
        .await
        .expect("the certificate's role");
    let without = url(
        "client_user",
        &format!("sslmode=verify-full&sslrootcert={}", ca.ca.display()),
    );
    let error = first_read(&without).await.unwrap_err();
    assert!(error.to_string().contains("client_user"), "{error}");
}

// pins N1: a certificate file that cannot be read is refused when the store is
// made, naming the parameter and the file
#[test]
fn unreadable_certificate_files_are_named() {
    let error =
        PostgresStore::connect("postgres://u@h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem")
            .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("sslrootcert") && text.contains("/no/such/ca.pem"),
        "{text}"
    );
}
