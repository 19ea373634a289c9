//! The `idem` binary against real stores (contract X1–X4 over I1–I5, K7, K11): a record is
//! set up the way a tool makes one (`prepare` with a `ToolSpec`, a `CallContext` in
//! conversation `c-9` and an engine over the store), then the binary runs as a person
//! would run it.
//!
//! SQLite always runs. PostgreSQL and Redis run with the test-only cargo features
//! `test-postgres` and `test-redis`, against `IDEM_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `IDEM_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`), each test in a fresh schema or key prefix deleted when it
//! ends. The closed-port and password tests need no server and always run.

use std::time::Duration;

#[cfg(feature = "test-postgres")]
use idem_runtime::store::OwnerToken;
use idem_runtime::{prepare, CallContext, Scope, Timestamp, ToolError, ToolSpec};
use serde_json::{json, Value};

#[cfg(feature = "test-redis")]
use crate::common::redis;
use crate::common::{idem, idem_env, spawn, sqlite, wait, Backend};
#[cfg(feature = "test-postgres")]
use crate::common::{postgres, postgres_sql};

static OPEN_TICKET: ToolSpec = ToolSpec {
    scope: Scope::Composite {
        kind: "tenant+conversation",
        parts: &[Scope::Named("tenant"), Scope::Conversation],
    },
    ..ToolSpec::new("open_ticket")
};

static CAT: ToolSpec = ToolSpec {
    scope: Scope::Call,
    ..ToolSpec::new("cat")
};

const ARGS: &str = r#"{"order_id":4417,"amount_cents":500}"#;

fn rfc3339(value: &Value) -> Timestamp {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is no text"));
    assert!(text.ends_with('Z') && text.len() == 24, "{text}");
    let at = humantime::parse_rfc3339(text).unwrap();
    Timestamp::from_millis(
        at.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    )
}

/// The issue's "done when": after the tool ran in c-9, `key` derives its key, `show --json`
/// says completed with its times, `ls --json` lists it with tool and conversation, `purge
/// KEY` removes it and `show` then exits 1.
fn done_when(backend: Backend) {
    let tool = backend.engine(None);
    let key = tool.refund("c-9", 4417);
    let call = [
        "--tool",
        "send_refund",
        "--scope",
        "conversation=c-9",
        "--args",
        ARGS,
    ];

    let printed = idem(&[&["key"][..], &call].concat()).expect(0);
    assert_eq!(printed.stdout, format!("{key}\n"), "key equals the tool's");

    let shown = backend
        .idem(&[&["show"][..], &call, &["--json"]].concat())
        .expect(0);
    let object = shown.json();
    assert_eq!(object["key"], key.as_str());
    assert_eq!(object["tool"], "send_refund");
    assert_eq!(object["namespace"], Value::Null);
    assert_eq!(object["scope"], "conversation=c-9");
    assert_eq!(
        object["scope_parts"],
        json!([{"kind": "conversation", "value": "c-9"}])
    );
    assert_eq!(object["state"], "completed");
    assert_eq!(object["fence"], 1);
    let created = rfc3339(&object["created_at"]);
    let expires = rfc3339(&object["expires_at"]);
    let completed = rfc3339(&object["completed_at"]);
    assert_eq!(
        expires.as_millis() - created.as_millis(),
        24 * 3600 * 1000,
        "the default ttl"
    );
    assert!(created <= completed && completed < expires);
    assert_eq!(object["outcome"], json!({"ok": {"refund_id": "re_4417"}}));
    assert_eq!(object["key_args"], Value::Null, "no audit: no arguments");

    let text = backend.idem(&["show", &key]).expect(0).stdout;
    assert!(
        text.contains("send_refund") && text.contains("(in 23h 59m)"),
        "{text}"
    );

    let listed = backend.idem(&["ls", "--json"]).expect(0).json();
    assert_eq!(listed["key"], key.as_str());
    assert_eq!(listed["tool"], "send_refund");
    assert_eq!(listed["scope"], "conversation=c-9");
    let table = backend.idem(&["ls"]).expect(0).stdout;
    assert!(
        table.contains(&key[..16]) && table.contains("conversation=c-9"),
        "{table}"
    );

    let purged = backend.idem(&["purge", &key]).expect(0);
    assert!(
        purged.stdout.starts_with(&format!("deleted {key}")),
        "{purged:?}"
    );
    let gone = backend
        .idem(&[&["show"][..], &call, &["--json"]].concat())
        .expect(1);
    assert!(
        gone.stderr.contains("no live record of send_refund"),
        "{gone:?}"
    );
    assert_eq!(gone.stdout, "");
    backend.idem(&["show", &key]).expect(1);
    backend.idem(&["purge", &key]).expect(1);
}

/// `--namespace` changes the key and `show` finds the namespaced record; a composite scope
/// (`--scope tenant=acme --scope conversation=c-1`) round-trips; with other arguments,
/// `show` says how many records the tool has in the scope.
fn namespaces_and_composite_scopes(backend: Backend) {
    let tenant = backend.engine(Some("tenant-a"));
    let key = tenant.refund("c-9", 4417);
    let call = [
        "--tool",
        "send_refund",
        "--scope",
        "conversation=c-9",
        "--args",
        ARGS,
    ];
    let plain = idem(&[&["key"][..], &call].concat()).expect(0).stdout;
    let namespaced = idem(&[&["--namespace", "tenant-a", "key"][..], &call].concat())
        .expect(0)
        .stdout;
    assert_eq!(namespaced, format!("{key}\n"));
    assert_ne!(plain, namespaced, "the namespace enters the key (K11)");
    let from_env = idem_env(
        &[&["key"][..], &call].concat(),
        &[("IDEM_NAMESPACE", "tenant-a")],
    )
    .expect(0);
    assert_eq!(from_env.stdout, namespaced);

    let shown = backend
        .idem(&[&["--namespace", "tenant-a", "show", "--json"][..], &call].concat())
        .expect(0)
        .json();
    assert_eq!(shown["key"], key.as_str());
    assert_eq!(shown["namespace"], "tenant-a");
    let elsewhere = backend.idem(&[&["show"][..], &call].concat()).expect(1);
    assert!(elsewhere.stderr.contains("no live record"), "{elsewhere:?}");

    let other_args = backend
        .idem(&[
            "--namespace",
            "tenant-a",
            "show",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-9",
            "--args",
            r#"{"order_id":4417}"#,
        ])
        .expect(1);
    assert!(
        other_args
            .stderr
            .contains("send_refund has 1 record in conversation=c-9 of namespace tenant-a"),
        "{other_args:?}"
    );

    let ctx = CallContext::new()
        .with_engine(tenant.engine.clone())
        .with_scope("tenant", "acme")
        .with_conversation("c-1");
    let prepared = prepare(&OPEN_TICKET, Some(&ctx), |a| {
        a.key("subject", &"refund")?;
        Ok(())
    })
    .unwrap();
    let ticket = prepared.key().to_string();
    let done: Result<u32, ToolError> = tenant.runtime.block_on(prepared.run(async { Ok(7) }));
    done.unwrap();
    let composite = [
        "--namespace",
        "tenant-a",
        "--tool",
        "open_ticket",
        "--scope",
        "tenant=acme",
        "--scope",
        "conversation=c-1",
        "--args",
        r#"{"subject":"refund"}"#,
    ];
    let derived = idem(&[&["key"][..], &composite].concat()).expect(0);
    assert_eq!(derived.stdout, format!("{ticket}\n"));
    let shown = backend
        .idem(&[&["show", "--json"][..], &composite].concat())
        .expect(0)
        .json();
    assert_eq!(shown["scope"], "tenant=acme/conversation=c-1");
    assert_eq!(shown["outcome"], json!({"ok": 7}));
    let listed = backend
        .idem(&[
            "--namespace",
            "tenant-a",
            "ls",
            "--json",
            "--scope",
            "tenant=acme",
        ])
        .expect(0)
        .json();
    assert_eq!(listed["key"], ticket.as_str());
    let other_namespace = backend
        .idem(&["--namespace", "tenant-b", "ls", "--json"])
        .expect(0);
    assert_eq!(other_namespace.stdout, "", "ls narrows to the namespace");
}

/// `ls --limit` pages newest first, the next page's cursor on stderr.
fn ls_pages_with_a_cursor(backend: Backend) {
    let tool = backend.engine(None);
    let keys: Vec<String> = (1..=3).map(|order| tool.refund("c-9", order)).collect();
    tool.refund("c-10", 9);
    let page = |cursor: Option<&str>| {
        let mut args = vec![
            "ls",
            "--json",
            "--limit",
            "2",
            "--scope",
            "conversation=c-9",
        ];
        if let Some(cursor) = cursor {
            args.extend(["--cursor", cursor]);
        }
        backend.idem(&args).expect(0)
    };
    let first = page(None);
    let listed: Vec<Value> = first
        .json_lines()
        .iter()
        .map(|o| o["key"].clone())
        .collect();
    assert_eq!(listed, [json!(keys[2]), json!(keys[1])], "newest first");
    let trailer: Value = serde_json::from_str(first.stderr.trim()).unwrap();
    let cursor = trailer["next_cursor"].as_str().unwrap().to_owned();
    let second = page(Some(&cursor));
    let listed: Vec<Value> = second
        .json_lines()
        .iter()
        .map(|o| o["key"].clone())
        .collect();
    assert_eq!(listed, [json!(keys[0])]);
    assert_eq!(second.stderr, "", "the last page has no cursor");

    let human = backend.idem(&["ls", "--limit", "1"]).expect(0);
    let cursor = human
        .stderr
        .trim()
        .strip_prefix("idem: next page: --cursor ")
        .unwrap_or_else(|| panic!("{human:?}"))
        .to_owned();
    let next = backend
        .idem(&["ls", "--limit", "1", "--wide", "--cursor", &cursor])
        .expect(0);
    assert!(next.stdout.contains(&keys[2]), "{next:?}");
    let filtered = backend
        .idem(&[
            "ls",
            "--json",
            "--tool",
            "send_refund",
            "--state",
            "completed",
            "--since",
            "1h",
        ])
        .expect(0);
    assert_eq!(filtered.json_lines().len(), 4);
    let none = backend
        .idem(&["ls", "--json", "--state", "in-progress"])
        .expect(0);
    assert_eq!(none.stdout, "");
}

/// `purge` by filters deletes what matches, keeps records in progress without `--force`,
/// and refuses an unfiltered purge without `--all`.
fn purge_by_filters(backend: Backend) {
    let tool = backend.engine(None);
    tool.refund("c-9", 1);
    tool.refund("c-9", 2);
    let other = tool.refund("c-10", 3);
    let running = tool.running("c-9");

    let refused = backend.idem(&["purge"]).expect(2);
    assert!(refused.stderr.contains("--all"), "{refused:?}");
    let purged = backend
        .idem(&["purge", "--scope", "conversation=c-9", "--json"])
        .expect(0);
    assert_eq!(purged.json(), json!({"deleted": 2, "kept": 1}));
    assert!(purged.stderr.contains("pass --force"), "{purged:?}");
    let kept = backend.idem(&["purge", &running]).expect(1);
    assert!(
        kept.stderr.contains("in progress") && kept.stderr.contains("--force"),
        "{kept:?}"
    );
    backend.idem(&["show", &running]).expect(0);
    let forced = backend
        .idem(&["purge", "--scope", "conversation=c-9", "--force"])
        .expect(0);
    assert_eq!(forced.stdout, "deleted 1 record\n");
    backend
        .idem(&[
            "purge",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-9",
        ])
        .expect(1);
    backend.idem(&["show", &other]).expect(0);
    let all = backend.idem(&["purge", "--all"]).expect(0);
    assert_eq!(all.stdout, "deleted 1 record\n");
}

/// `stats` counts by state and tool.
fn stats_by_state_and_tool(backend: Backend) {
    let tool = backend.engine(None);
    tool.refund("c-9", 1);
    tool.refund("c-10", 2);
    tool.running("c-9");
    let stats = backend.idem(&["stats", "--json"]).expect(0).json();
    assert_eq!(
        stats,
        json!({
            "total": {"records": 3, "completed": 2, "in_progress": 1, "outcome_unknown": 0, "not_applied": 0, "awaiting_approval": 0, "approved": 0},
            "by_tool": {
                "send_refund": {"records": 3, "completed": 2, "in_progress": 1, "outcome_unknown": 0, "not_applied": 0, "awaiting_approval": 0, "approved": 0},
            },
        })
    );
    let table = backend.idem(&["stats"]).expect(0).stdout;
    assert!(table.starts_with("TOOL"), "{table}");
    assert!(
        table.contains("send_refund  3        2          1            0                0"),
        "{table}"
    );
}

macro_rules! on_backend {
    ($module:ident, $make:path) => {
        mod $module {
            // pins X1, X2, X3, I1, I2, I4, P1, P3
            #[test]
            fn done_when() {
                super::done_when($make());
            }

            // pins K11, K7, I2, X1
            #[test]
            fn namespaces_and_composite_scopes() {
                super::namespaces_and_composite_scopes($make());
            }

            // pins I3, X2
            #[test]
            fn ls_pages_with_a_cursor() {
                super::ls_pages_with_a_cursor($make());
            }

            // pins I4, X3
            #[test]
            fn purge_by_filters() {
                super::purge_by_filters($make());
            }

            // pins I5, X2
            #[test]
            fn stats_by_state_and_tool() {
                super::stats_by_state_and_tool($make());
            }
        }
    };
}

on_backend!(sqlite, super::sqlite);
#[cfg(feature = "test-postgres")]
on_backend!(postgres, super::postgres);
#[cfg(feature = "test-redis")]
on_backend!(redis, super::redis);

const SOME_KEY: &str = "25b613dba478f508522c4d3ec3e2ef5c19e66dbffbbd8334f58f1a4053b71364";

// pins X3, X4: a stopped server is exit 3 with a clear message, and the password is
// printed nowhere
#[test]
fn a_stopped_server_is_exit_3_without_the_password() {
    for locator in [
        "postgres://user:secret@127.0.0.1:1/db",
        "redis://:secret@127.0.0.1:1",
    ] {
        // All at once: each waits for the refused connection's retries.
        let runs: Vec<(Vec<&str>, std::process::Child)> = [
            vec!["show", SOME_KEY],
            vec![
                "show",
                "--tool",
                "send_refund",
                "--scope",
                "conversation=c-9",
                "--args",
                ARGS,
            ],
            vec!["ls"],
            vec!["ls", "--json"],
            vec!["purge", SOME_KEY],
            vec!["purge", "--all"],
            vec!["stats", "--json"],
        ]
        .into_iter()
        .map(|args| {
            let child = spawn(&[&["--store", locator][..], &args].concat(), &[]);
            (args, child)
        })
        .collect();
        for (args, child) in runs {
            let run = wait(child).expect(3);
            assert!(
                !run.stdout.contains("secret"),
                "{locator} {args:?}: {run:?}"
            );
            assert!(
                !run.stderr.contains("secret"),
                "{locator} {args:?}: {run:?}"
            );
            assert!(run.stderr.contains(":***@127.0.0.1:1"), "{run:?}");
            assert!(
                run.stderr.starts_with("idem: the store is unavailable: ")
                    && run.stderr.contains("Connection refused"),
                "{run:?}"
            );
            assert_eq!(run.stdout, "");
        }
        // The same from IDEM_STORE.
        let env = idem_env(&["show", SOME_KEY], &[("IDEM_STORE", locator)]).expect(3);
        assert!(!env.stderr.contains("secret"), "{env:?}");
        // key touches no store.
        let key = idem(&[
            "--store",
            locator,
            "key",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-9",
            "--args",
            ARGS,
        ])
        .expect(0);
        assert_eq!(key.stdout, format!("{SOME_KEY}\n"));
    }
}

// pins X3, X4: a server that accepts connections and never answers is exit 3 after
// --timeout, naming the store without its password
#[test]
fn a_server_that_never_answers_is_exit_3_after_the_timeout() {
    // The kernel completes connections into the backlog; nobody ever reads or writes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for locator in [
        format!("postgres://user:secret@127.0.0.1:{port}/db"),
        format!("redis://:secret@127.0.0.1:{port}"),
    ] {
        let started = std::time::Instant::now();
        let run = idem(&["--timeout", "1s", "--store", &locator, "show", SOME_KEY]).expect(3);
        assert!(started.elapsed() < Duration::from_secs(10), "{run:?}");
        assert!(
            run.stderr.contains("no answer within 1s (--timeout)")
                && run.stderr.contains(":***@127.0.0.1:"),
            "{run:?}"
        );
        assert!(!run.stderr.contains("secret"), "{run:?}");
    }
}

// pins X3: an SQLite file that does not exist (here: in a directory that does not exist)
// is exit 3, and is not created
#[test]
fn a_missing_sqlite_file_is_exit_3_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("idem.db");
    let locator = format!("sqlite:{}", path.display());
    let run = idem(&["--store", &locator, "show", SOME_KEY]).expect(3);
    assert!(run.stderr.contains("does not exist"), "{run:?}");
    let path = dir.path().join("idem.db");
    idem(&["--store", &format!("sqlite:{}", path.display()), "stats"]).expect(3);
    assert!(!path.exists(), "idem never creates a store file");
}

// pins X1, X3: no store is exit 2 naming --store and IDEM_STORE; a bad locator names
// where it came from, its password hidden
#[test]
fn a_missing_or_bad_store_is_exit_2() {
    let none = idem(&["ls"]).expect(2);
    assert!(
        none.stderr.contains("--store") && none.stderr.contains("IDEM_STORE"),
        "{none:?}"
    );
    let bad = idem(&["--store", "mysql://u:secret@db/x", "ls"]).expect(2);
    assert!(
        bad.stderr
            .contains("--store: unknown store `mysql://u:***@db/x`"),
        "{bad:?}"
    );
    assert!(!bad.stderr.contains("secret"));
    let from_env = idem_env(&["ls"], &[("IDEM_STORE", "sqlite:")]).expect(2);
    assert!(from_env.stderr.contains("IDEM_STORE: "), "{from_env:?}");
    let namespace = idem(&["--namespace", "", "key", "--tool", "t", "--args", "{}"]).expect(2);
    assert!(namespace.stderr.contains("--namespace"), "{namespace:?}");
}

// pins D10, I1, X1: a call-scoped call that came from a response with an id is named by
// its conversation, turn and call id, outermost first, and `key` derives the tool's key
#[test]
fn key_of_a_call_scoped_call_names_its_turn() {
    let ctx = CallContext::new()
        .with_conversation("c-9")
        .with_turn("chatcmpl-7")
        .with_tool_call("call_0");
    let prepared = prepare(&CAT, Some(&ctx), |a| {
        a.key("path", &"notes.txt")?;
        Ok(())
    })
    .unwrap();
    let call = |turn: &[&'static str]| {
        let mut args = vec!["key", "--tool", "cat", "--scope", "conversation=c-9"];
        args.extend_from_slice(turn);
        args.extend([
            "--scope",
            "call=call_0",
            "--args",
            r#"{"path":"notes.txt"}"#,
        ]);
        idem(&args).expect(0).stdout
    };
    assert_eq!(
        call(&["--scope", "turn=chatcmpl-7"]),
        format!("{}\n", prepared.key())
    );
    assert_ne!(
        call(&[]),
        format!("{}\n", prepared.key()),
        "the turn is part of the key"
    );
}

// pins X3: bad input is exit 2, the message naming the option or value
#[test]
fn bad_input_is_exit_2_naming_the_option() {
    let backend = sqlite();
    for (args, needle) in [
        (vec!["show", "not-a-key"], "KEY \"not-a-key\""),
        (vec!["purge", "abc123"], "expected 64 hex digits"),
        (
            vec![
                "show",
                "--tool",
                "t",
                "--scope",
                "conversation",
                "--args",
                "{}",
            ],
            "--scope <KIND=VALUE>",
        ),
        (
            vec![
                "show",
                "--tool",
                "t",
                "--scope",
                "conversation=",
                "--args",
                "{}",
            ],
            "empty value",
        ),
        (
            vec![
                "show",
                "--tool",
                "t",
                "--scope",
                "conversation=c",
                "--args",
                "{\"a\":",
            ],
            "--args: not valid JSON",
        ),
        (
            vec!["key", "--tool", "t", "--args", "[4417]"],
            "--args: expected a JSON object",
        ),
        (vec!["key", "--tool", "t"], "--args: needed"),
        (vec!["ls", "--limit", "1001"], "--limit <N>"),
        (vec!["ls", "--state", "done"], "--state <STATE>"),
        (vec!["ls", "--since", "last tuesday"], "--since: "),
        (vec!["ls", "--cursor", "nope"], "--cursor: "),
        (vec!["show", SOME_KEY, "--tool", "t"], "cannot be used with"),
        (vec!["purge"], "at least one filter"),
        (vec!["frobnicate"], "unrecognized subcommand"),
    ] {
        let run = backend.idem(&args).expect(2);
        assert!(run.stderr.contains(needle), "{args:?}: {run:?}");
    }
}

// pins X1: --help says units and formats; exit 0
#[test]
fn help_says_formats() {
    let help = idem(&["ls", "--help"]).expect(0).stdout;
    for needle in ["RFC 3339", "1 to 1000", "KIND=VALUE", "next_cursor"] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let help = idem(&["--help"]).expect(0).stdout;
    assert!(help.contains("empty in a fresh process"), "{help}");
    assert!(help.contains("Exit status"), "{help}");
}

// pins X3: a mistyped PostgreSQL schema is exit 3 naming the schema, and is not created
#[cfg(feature = "test-postgres")]
#[test]
fn a_mistyped_postgres_schema_is_exit_3_and_not_created() {
    let backend = postgres();
    let typo = format!("idem_cli_typo_{}", OwnerToken::random().to_hex());
    let locator = format!(
        "{}{typo}",
        backend.locator.rsplit_once('=').unwrap().0.to_owned() + "="
    );
    for args in [vec!["show", SOME_KEY], vec!["ls"], vec!["stats"]] {
        let run = idem(&[&["--store", locator.as_str()][..], &args].concat()).expect(3);
        assert!(
            run.stderr.contains(&format!(
                "no idem schema `{typo}` in the PostgreSQL database"
            )),
            "{run:?}"
        );
    }
    let found = postgres_sql(format!(
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = '{typo}'"
    ))
    .unwrap();
    assert!(
        !found
            .iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_))),
        "the CLI created schema {typo}"
    );
}

// pins X1, I2, I3, I5: a role with USAGE on the schema and SELECT on its tables can show,
// list and count; purging needs DELETE (exit 3 without it)
#[cfg(feature = "test-postgres")]
#[test]
fn a_read_only_postgres_role_can_show_list_and_count() {
    struct DropRole(String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            let _ = postgres_sql(format!(
                "DROP OWNED BY \"{0}\"; DROP ROLE IF EXISTS \"{0}\"",
                self.0
            ));
        }
    }
    let backend = postgres();
    let key = backend.engine(None).refund("c-9", 4417);
    let schema = backend.locator.rsplit_once('=').unwrap().1.to_owned();
    let role = format!("idem_ro_{}", OwnerToken::random().to_hex());
    postgres_sql(format!("CREATE ROLE \"{role}\" LOGIN")).unwrap();
    let _role = DropRole(role.clone());
    postgres_sql(format!(
        "GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\"; \
         GRANT SELECT ON ALL TABLES IN SCHEMA \"{schema}\" TO \"{role}\""
    ))
    .unwrap();
    let (_, rest) = backend.locator.split_once('@').unwrap();
    let locator = format!("postgres://{role}@{rest}");
    let as_role = |args: &[&str]| idem(&[&["--store", locator.as_str()][..], args].concat());
    let show = as_role(&["show", &key, "--json"]).expect(0);
    assert_eq!(show.json()["state"], "completed", "{show:?}");
    as_role(&[
        "show",
        "--tool",
        "send_refund",
        "--scope",
        "conversation=c-9",
        "--args",
        ARGS,
    ])
    .expect(0);
    assert_eq!(as_role(&["ls", "--json"]).expect(0).json_lines().len(), 1);
    let stats = as_role(&["stats", "--json"]).expect(0);
    assert_eq!(stats.json()["total"]["records"], 1, "{stats:?}");
    let purge = as_role(&["purge", &key]).expect(3);
    assert!(purge.stderr.contains("permission denied"), "{purge:?}");
    backend.idem(&["show", &key]).expect(0);
}

// pins X3: an SQLite file without idem's tables is exit 3 and is left as it was
#[test]
fn an_sqlite_file_without_idem_tables_is_exit_3_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    std::fs::write(&path, b"").unwrap();
    let run = idem(&["--store", &format!("sqlite:{}", path.display()), "stats"]).expect(3);
    assert!(run.stderr.contains("holds no idem store"), "{run:?}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing was created"
    );
}

// pins X3, P4: an SQLite file of an older schema version is reported, not upgraded, by the
// command (an agent of this build upgrades it in place)
#[test]
fn an_older_sqlite_schema_is_exit_3_and_not_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let locator = format!("sqlite:{}", path.display());
    drop(idem_runtime::SqliteStore::open(&path).unwrap());
    let set_version = |version: i64| {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
            [version],
        )
        .unwrap();
    };
    set_version(2);
    let run = idem(&["--store", &locator, "stats"]).expect(3);
    assert!(run.stderr.contains("schema version 2"), "{run:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, 2, "not upgraded");
    set_version(idem_runtime::store::SQLITE_SCHEMA_VERSION);
    idem(&["--store", &locator, "stats"]).expect(0);
}
