//! The `idem` binary against adversarial inputs (X1–X4, I1, I3, K2), from a review: odd
//! argument types, malformed locators, locators where a subcommand goes, odd option values,
//! a record of the MCP client-key path.
//!
//! SQLite always runs; PostgreSQL and Redis with the test-only features `test-postgres` and
//! `test-redis`, on the stores of [`crate::common`] (a fresh schema or key prefix, deleted).

use idem_runtime::{prepare, CallContext, Engine, RecordLabel, ScopePath, ToolSpec};
use serde_json::json;

#[cfg(feature = "test-postgres")]
use crate::common::postgres;
#[cfg(feature = "test-redis")]
use crate::common::redis;
use crate::common::{idem, idem_env, sqlite, Backend, Run};

/// A record the rmcp client-key path writes (label scope kind `mcp:idempotencyKey`, what
/// `McpCall` writes for `_meta.idempotencyKey`) lists beside a tool's record. (The rest of
/// the reviewer's "done when" run, show, ls, purge, show, is `cli::done_when`.)
fn a_client_key_record_lists_beside_a_tools_record(b: Backend) {
    let tool = b.engine(None);
    let key = tool.refund("c-9", 4417);
    tool.claim(&RecordLabel::new(
        "transfer",
        ScopePath::new().with("mcp:idempotencyKey", "client-key-1"),
    ));
    let listed = b.idem(&["ls", "--json"]);
    assert_eq!(
        listed.code, 0,
        "I3/X1: one MCP client-key record must not break `idem ls`: {listed:?}"
    );
    assert_eq!(listed.json_lines().len(), 2, "{listed:?}");
    assert!(listed.stdout.contains(&key), "{listed:?}");
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
        let run = idem(&[
            "key",
            "--tool",
            "odd",
            "--scope",
            "conversation=c-é%2F1",
            "--args",
            args,
        ])
        .expect(0);
        run.stdout.trim().to_owned()
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
        let Run {
            code,
            stdout: out,
            stderr: err,
        } = idem(&["--store", locator, "ls"]);
        assert_eq!(code, 2, "{locator}: {err}");
        assert!(err.starts_with("idem: --store: "), "{locator}: {err}");
        assert!(err.contains("is malformed"), "{locator}: {err}");
        assert!(
            !err.contains("pw") && !out.contains("pw"),
            "{locator}: {err}"
        );
        let Run {
            code, stderr: err, ..
        } = idem_env(&["stats"], &[("IDEM_STORE", locator)]);
        assert_eq!(code, 2, "{locator}: {err}");
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
    let Run {
        code,
        stdout: out,
        stderr: err,
    } = idem(&["postgres://u:SECRETPW@127.0.0.1:1/db", "ls"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        !out.contains("SECRETPW") && !err.contains("SECRETPW"),
        "{err}"
    );
    assert!(
        err.starts_with("idem: unrecognized subcommand 'postgres://u:***@127.0.0.1:1/db'"),
        "{err}"
    );
    let Run {
        code, stderr: err, ..
    } = idem(&["--store=redis://:SECRETPW@h", "ls", "SECRETPW"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        !err.contains("SECRETPW") && err.starts_with("idem: "),
        "{err}"
    );
    let Run {
        code, stderr: err, ..
    } = idem_env(
        &["ls", "--frobnicate", "ENVSECRET"],
        &[("IDEM_STORE", "postgres://u:ENVSECRET@127.0.0.1:1/db")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("ENVSECRET"), "{err}");
    // --help and --version still print on stdout, exit 0.
    let out = idem(&["--version"]).expect(0).stdout;
    assert!(out.starts_with("idem "), "{out}");
    let out = idem(&["ls", "--help"]).expect(0).stdout;
    assert!(out.contains("Usage: idem ls"), "{out}");
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
        let Run {
            code, stderr: err, ..
        } = idem(&args);
        eprintln!("{args:?}: exit {code}: {}", err.trim());
        assert!((0..=3).contains(&code), "{args:?}: {code} {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
