//! The `idem` binary against adversarial inputs (X1–X4, I1, I3, K2), from a review: odd
//! argument types, malformed locators, locators where a subcommand goes, odd option values,
//! a record of the MCP client-key path.
//!
//! SQLite always runs; PostgreSQL and Redis with the test-only features `test-postgres` and
//! `test-redis` (Redis prefix `idem-adv:<random>:`, PostgreSQL schema `adv_<random>`, both
//! deleted).

use std::process::Command;
use std::time::Duration;

use idem_runtime::store::{ClaimRequest, OwnerToken};
use idem_runtime::{
    prepare, CallContext, Engine, Fingerprint, IdempotencyKey, RecordLabel, ScopePath, ToolError,
    ToolSpec,
};
use serde_json::{json, Value};

static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");

fn idem(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_STORE")
        .env_remove("IDEM_NAMESPACE")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(any(feature = "test-postgres", feature = "test-redis"))]
fn random() -> String {
    OwnerToken::random().to_hex()
}

struct Backend {
    locator: String,
    _keep: Box<dyn std::any::Any>,
}

fn sqlite() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idem.db");
    idem_runtime::SqliteStore::open(&path).unwrap();
    Backend {
        locator: format!("sqlite:{}", path.display()),
        _keep: Box::new(dir),
    }
}

#[cfg(feature = "test-postgres")]
struct DropSchema(String);
#[cfg(feature = "test-postgres")]
impl Drop for DropSchema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.0);
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (c, conn) = tokio_postgres::connect(
                    "postgres://postgres@127.0.0.1:5432/test",
                    tokio_postgres::NoTls,
                )
                .await?;
                tokio::spawn(conn);
                c.batch_execute(&sql).await
            })
        })
        .join();
    }
}
#[cfg(feature = "test-postgres")]
fn postgres() -> Backend {
    let schema = format!("adv_{}", random());
    Backend {
        locator: format!("postgres://postgres@127.0.0.1:5432/test?idem_schema={schema}"),
        _keep: Box::new(DropSchema(schema)),
    }
}

#[cfg(feature = "test-redis")]
struct DropPrefix(String);
#[cfg(feature = "test-redis")]
impl Drop for DropPrefix {
    fn drop(&mut self) {
        let client = ::redis::Client::open("redis://127.0.0.1:6379").unwrap();
        let mut conn = client.get_connection().unwrap();
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg(format!("{}*", self.0))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<usize, _> = ::redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
    }
}
#[cfg(feature = "test-redis")]
fn redis() -> Backend {
    let prefix = format!("idem-adv:{}:", random());
    Backend {
        locator: format!("redis://127.0.0.1:6379?idem_prefix={prefix}"),
        _keep: Box::new(DropPrefix(prefix)),
    }
}

fn with_engine<R>(b: &Backend, f: impl FnOnce(&Engine, &tokio::runtime::Runtime) -> R) -> R {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = rt.block_on(async { Engine::from_locator(&b.locator).unwrap() });
    f(&engine, &rt)
}

fn refund(engine: &Engine, rt: &tokio::runtime::Runtime, conversation: &str) -> String {
    let ctx = CallContext::new()
        .with_engine(engine.clone())
        .with_conversation(conversation);
    let p = prepare(&SEND_REFUND, Some(&ctx), |a| {
        a.key("order_id", &4417u64)?.key("amount_cents", &500u64)?;
        Ok(())
    })
    .unwrap();
    let key = p.key().to_string();
    let r: Result<Value, ToolError> =
        rt.block_on(p.run(async { Ok(json!({"refund_id": "re_1"})) }));
    r.unwrap();
    key
}

/// A record the rmcp client-key path writes (label scope kind `mcp:idempotencyKey`, what
/// `McpCall` writes for `_meta.idempotencyKey`) lists beside a tool's record. (The rest of
/// the reviewer's "done when" run, show, ls, purge, show, is `done_when` in tests/cli.rs.)
fn a_client_key_record_lists_beside_a_tools_record(b: Backend) {
    let key = with_engine(&b, |e, rt| refund(e, rt, "c-9"));
    with_engine(&b, |e, rt| {
        let k =
            IdempotencyKey::from_hex(&format!("{:064x}", OwnerToken::random().as_u128())).unwrap();
        let now = e.clock().now();
        rt.block_on(async {
            e.store()
                .claim(ClaimRequest {
                    key: &k,
                    fingerprint: &Fingerprint::from_hex(&"0".repeat(64)).unwrap(),
                    owner: OwnerToken::random(),
                    now,
                    lease_until: now.saturating_add(Duration::from_secs(60)),
                    expires_at: now.saturating_add(Duration::from_secs(3600)),
                    label: &RecordLabel::new(
                        "transfer",
                        ScopePath::new().with("mcp:idempotencyKey", "client-key-1"),
                    ),
                })
                .await
        })
        .unwrap();
    });
    let (code, out, err) = idem(&["--store", &b.locator, "ls", "--json"]);
    assert_eq!(
        code, 0,
        "I3/X1: one MCP client-key record must not break `idem ls`: {err}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains(&key), "{out}");
}

// A record written by rmcp's client-key path (scope kind `mcp:idempotencyKey`) lists on
// every backend: stored labels are read leniently and `:` is allowed in scope kinds.

// pins I3, X1
#[test]
fn sqlite_lists_a_client_key_record() {
    a_client_key_record_lists_beside_a_tools_record(sqlite());
}
// pins I3, X1
#[cfg(feature = "test-postgres")]
#[test]
fn postgres_lists_a_client_key_record() {
    a_client_key_record_lists_beside_a_tools_record(postgres());
}
// pins I3, X1
#[cfg(feature = "test-redis")]
#[test]
fn redis_lists_a_client_key_record() {
    a_client_key_record_lists_beside_a_tools_record(redis());
}

/// `idem key` equals the key the tool derived for floats, unicode, nested objects.
// pins I1, K2, X1
#[test]
fn key_equals_the_tools_for_floats_unicode_and_nested_objects() {
    static T: ToolSpec = ToolSpec::new("odd");
    let tool_key = |fill: &dyn Fn(&mut idem_runtime::ArgsBuilder)| {
        let ctx = CallContext::new()
            .with_engine(Engine::in_memory())
            .with_conversation("c-é/1");
        prepare(&T, Some(&ctx), |a| {
            fill(a);
            Ok(())
        })
        .unwrap()
        .key()
        .to_string()
    };
    let cli_key = |args: &str| {
        let (code, out, err) = idem(&[
            "key",
            "--tool",
            "odd",
            "--scope",
            "conversation=c-é%2F1",
            "--args",
            args,
        ]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_owned()
    };
    let k = tool_key(&|a| {
        a.key("x", &57.0f64).unwrap();
    });
    assert_eq!(cli_key(r#"{"x":57}"#), k);
    assert_eq!(cli_key(r#"{"x":57.0}"#), k);
    assert_eq!(cli_key(r#"{"x":5.7e1}"#), k);
    let k = tool_key(&|a| {
        a.key("s", &"h\u{e9}llo \u{1f600} \u{2028}").unwrap();
        a.key(
            "n",
            &json!({"b": [1, {"z": null, "a": -0.0}], "a": u64::MAX}),
        )
        .unwrap();
    });
    assert_eq!(
        cli_key(
            r#"{"n":{"a":18446744073709551615,"b":[1,{"a":0,"z":null}]},"s":"h\u00e9llo 😀 \u2028"}"#
        ),
        k
    );
    let k = tool_key(&|a| {
        a.key("big", &9_007_199_254_740_993u64).unwrap();
    });
    assert_eq!(cli_key(r#"{"big":9007199254740993}"#), k);
}

/// Malformed locators are bad input (exit 2) naming where they came from, their password
/// hidden, like an unknown scheme; nothing is contacted.
// pins X3, X4
#[test]
fn malformed_locators_are_exit_2_naming_the_option() {
    for locator in [
        "postgres://u:pw@127.0.0.1:notaport/db",
        "postgres://u:pw@127.0.0.1:1/db?idem_schema=bad;drop",
        "postgres://u:pw@127.0.0.1:1/db?idem_schema=bad-schema!",
        "postgres://u:pw@127.0.0.1:1/db?foo=bar",
        "redis://:pw@127.0.0.1:abc/",
        "redis://:pw@127.0.0.1:1/notadb",
    ] {
        let (code, out, err) = idem(&["--store", locator, "ls"]);
        assert_eq!(code, 2, "{locator}: {err}");
        assert!(err.starts_with("idem: --store: "), "{locator}: {err}");
        assert!(err.contains("is malformed"), "{locator}: {err}");
        assert!(
            !err.contains("pw") && !out.contains("pw"),
            "{locator}: {err}"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["stats"])
            .env("IDEM_STORE", locator)
            .env_remove("IDEM_NAMESPACE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{locator}: {err}");
        assert!(err.starts_with("idem: IDEM_STORE: "), "{locator}: {err}");
        assert!(!err.contains("pw"), "{locator}: {err}");
    }
}

/// A locator given where a subcommand goes is refused by the argument parser, which echoes
/// it: its password is hidden, the message has the `idem: ` prefix, exit 2. The same for a
/// password of `IDEM_STORE` echoed as an argument.
// pins X4, X3
#[test]
fn a_misplaced_locator_is_refused_without_its_password() {
    let (code, out, err) = idem(&["postgres://u:SECRETPW@127.0.0.1:1/db", "ls"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        !out.contains("SECRETPW") && !err.contains("SECRETPW"),
        "{err}"
    );
    assert!(
        err.starts_with("idem: unrecognized subcommand 'postgres://u:***@127.0.0.1:1/db'"),
        "{err}"
    );
    let (code, _, err) = idem(&["--store=redis://:SECRETPW@h", "ls", "SECRETPW"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        !err.contains("SECRETPW") && err.starts_with("idem: "),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["ls", "--frobnicate", "ENVSECRET"])
        .env("IDEM_STORE", "postgres://u:ENVSECRET@127.0.0.1:1/db")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("ENVSECRET"), "{err}");
    // --help and --version still print on stdout, exit 0.
    let (code, out, _) = idem(&["--version"]);
    assert_eq!((code, out.starts_with("idem ")), (0, true), "{out}");
    let (code, out, _) = idem(&["ls", "--help"]);
    assert_eq!((code, out.contains("Usage: idem ls")), (0, true), "{out}");
}

/// Odd values of every option never panic; exit statuses are 0 to 3.
// pins X3
#[test]
fn odd_option_values_never_panic() {
    let cases: Vec<Vec<&str>> = vec![
        vec!["--store", "memory", "--timeout", "584942417355y", "ls"],
        vec!["--store", "memory", "--timeout", "0s", "stats"],
        vec!["--store", "memory", "ls", "--since", "99999999999y"],
        vec!["--store", "memory", "ls", "--since", "1969-01-01T00:00:00Z"],
        vec!["--store", "memory", "ls", "--until", "9999-12-31T23:59:59Z"],
        vec![
            "--store",
            "memory",
            "ls",
            "--cursor",
            "18446744073709551616.00",
        ],
        vec!["--store", "memory", "ls", "--cursor", "."],
        vec!["--store", "memory", "ls", "--cursor", "\u{e9}\u{e9}.x"],
        vec!["--store", "memory", "ls", "--scope", "conversation=%"],
        vec!["--store", "memory", "ls", "--scope", "conversation=%e9"],
        vec!["--store", "memory", "ls", "--scope", "=x"],
        vec![
            "--store",
            "memory",
            "show",
            "--tool",
            "t",
            "--args",
            "{\"a\":1e400}",
        ],
        vec!["--store", "memory", "show", "\u{e9}"],
        vec!["--store", "memory", "purge", "--scope", "call=x/y"],
        vec!["key", "--tool", "", "--args", "{}"],
        vec!["key", "--tool", "t", "--args", "[]", "--namespace", ""],
        vec![
            "key",
            "--tool",
            "t",
            "--args",
            "{}",
            "--namespace",
            "\u{e9}",
        ],
        vec!["key", "--tool", "t", "--args", "{}", "--scope", "global=x"],
    ];
    for args in cases {
        let (code, _, err) = idem(&args);
        eprintln!("{args:?}: exit {code}: {}", err.trim());
        assert!((0..=3).contains(&code), "{args:?}: {code} {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
