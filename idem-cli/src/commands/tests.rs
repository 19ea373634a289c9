//! The commands on the memory store, in process (the binary's tests in tests/it/cli.rs run
//! them across processes on the stores that outlive one).

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use idem_runtime::store::{ClaimRequest, OwnerToken};
use idem_runtime::testkit::ManualClock;
use idem_runtime::{
    prepare, CallContext, Engine, MemoryStore, RecordLabel, Scope, ScopePath, Store, Timestamp,
    ToolError, ToolSpec,
};
use serde_json::{json, Value};

use super::{execute, Report};
use crate::cli::Cli;
use crate::exit::{CliError, Exit};

static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");

const START: u64 = 1_796_157_213_123;

struct World {
    store: Arc<dyn Store>,
    clock: ManualClock,
    engine: Engine,
}

fn world() -> World {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = ManualClock::starting_at(Timestamp::from_millis(START));
    let engine = Engine::builder()
        .shared_store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    World {
        store,
        clock,
        engine,
    }
}

impl World {
    fn in_namespace(&self, namespace: &str) -> Engine {
        Engine::builder()
            .shared_store(self.store.clone())
            .clock(self.clock.clone())
            .namespace(namespace)
            .build()
            .unwrap()
    }

    /// Runs `send_refund(order_id, amount_cents)` in `conversation` through `engine`, as
    /// the tool would, and returns its key.
    async fn refund(&self, engine: &Engine, conversation: &str, order_id: u32) -> String {
        let ctx = CallContext::new()
            .with_engine(engine.clone())
            .with_conversation(conversation);
        let prepared = prepare(&SEND_REFUND, Some(&ctx), |a| {
            a.key("order_id", &order_id)?.key("amount_cents", &500)?;
            Ok(())
        })
        .unwrap();
        let key = prepared.key().to_string();
        let done: Result<Value, ToolError> = prepared
            .run(async move { Ok(json!({"refund_id": format!("re_{order_id}")})) })
            .await;
        done.unwrap();
        self.clock.advance(Duration::from_millis(10));
        key
    }

    /// Claims a record of `tool` in `conversation` and leaves it in progress.
    async fn running(&self, tool: &str, conversation: &str) -> String {
        let key =
            idem_runtime::IdempotencyKey::from_hex(&format!("{:064x}", self.clock_ms())).unwrap();
        let now = Timestamp::from_millis(self.clock_ms());
        let fingerprint = idem_runtime::Fingerprint::from_hex(&"0".repeat(64)).unwrap();
        self.store
            .claim(ClaimRequest {
                key: &key,
                fingerprint: &fingerprint,
                owner: OwnerToken::random(),
                now,
                lease_until: now.saturating_add(Duration::from_secs(60)),
                expires_at: now.saturating_add(Duration::from_secs(3600)),
                label: &RecordLabel::new(tool, ScopePath::new().with("conversation", conversation)),
            })
            .await
            .unwrap();
        self.clock.advance(Duration::from_millis(10));
        key.to_string()
    }

    fn clock_ms(&self) -> u64 {
        use idem_runtime::Clock;
        self.clock.now().as_millis()
    }
}

async fn idem(engine: &Engine, args: &[&str]) -> Result<Report, CliError> {
    let cli = Cli::try_parse_from(std::iter::once("idem").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    execute(engine, &cli.command).await
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const CALL: [&str; 6] = [
    "--tool",
    "send_refund",
    "--scope",
    "conversation=c-9",
    "--args",
    r#"{"order_id":4417,"amount_cents":500}"#,
];

fn with<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    head.iter().chain(tail).copied().collect()
}

// pins X1, X2, I1, I2: key and show by call find what the tool saved, with its times
#[tokio::test]
async fn show_by_call_finds_what_the_tool_saved() {
    let w = world();
    let key = w.refund(&w.engine, "c-9", 4417).await;
    let printed = idem(&w.engine, &with(&["key"], &CALL)).await.unwrap();
    assert_eq!(printed.stdout, format!("{key}\n"));

    let shown = idem(&w.engine, &with(&["show", "--json"], &CALL))
        .await
        .unwrap();
    let object = &lines(&shown.stdout)[0];
    assert_eq!(object["key"], key.as_str());
    assert_eq!(object["tool"], "send_refund");
    assert_eq!(object["scope"], "conversation=c-9");
    assert_eq!(object["state"], "completed");
    assert_eq!(object["created_at"], "2026-12-01T20:33:33.123Z");
    assert_eq!(object["expires_at"], "2026-12-02T20:33:33.123Z");
    assert_eq!(object["completed_at"], "2026-12-01T20:33:33.123Z");
    assert_eq!(object["outcome"], json!({"ok": {"refund_id": "re_4417"}}));

    let text = idem(&w.engine, &with(&["show"], &CALL))
        .await
        .unwrap()
        .stdout;
    assert!(text.contains("state      completed"), "{text}");
    assert!(
        text.contains("expires    2026-12-02T20:33:33.123Z (in 23h 59m)"),
        "{text}"
    );
    assert!(text.contains("\"refund_id\": \"re_4417\""), "{text}");
    let by_key = idem(&w.engine, &["show", &key.to_uppercase()])
        .await
        .unwrap();
    assert_eq!(by_key.stdout, text, "a key in upper case is the same key");
}

// pins I2, X3: not found is exit 1, and says whether the tool has other records in scope
#[tokio::test]
async fn not_found_tells_other_arguments_from_never() {
    let w = world();
    w.refund(&w.engine, "c-9", 4417).await;
    let other = idem(
        &w.engine,
        &[
            "show",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-9",
            "--args",
            r#"{"order_id":4417}"#,
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(other.exit(), Exit::NotFound);
    assert!(
        other
            .to_string()
            .contains("send_refund has 1 record in conversation=c-9"),
        "{other}"
    );
    let never = idem(
        &w.engine,
        &[
            "show",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-10",
            "--args",
            r#"{"order_id":4417,"amount_cents":500}"#,
        ],
    )
    .await
    .unwrap_err();
    assert!(
        never
            .to_string()
            .contains("no live record in conversation=c-10 at all"),
        "{never}"
    );
    let absent = idem(&w.engine, &["show", &"0".repeat(64)])
        .await
        .unwrap_err();
    assert_eq!(absent.exit(), Exit::NotFound);
}

// pins X3: bad input is exit 2 naming the option
#[tokio::test]
async fn bad_input_names_the_option() {
    let w = world();
    for (args, needle) in [
        (vec!["show", "xyz"], "KEY \"xyz\""),
        (
            vec!["key", "--tool", "t", "--args", "{"],
            "--args: not valid JSON",
        ),
        (
            vec!["key", "--tool", "t", "--args", "[1]"],
            "--args: expected a JSON object",
        ),
        (vec!["key", "--args", "{}"], "--tool: needed"),
        (vec!["key", "--tool", "t"], "--args: needed"),
        (vec!["show"], "--tool: needed"),
        (
            vec![
                "key",
                "--tool",
                "t",
                "--scope",
                "call=1",
                "--scope",
                "conversation=c",
                "--args",
                "{}",
            ],
            "--scope: `call` must be the last",
        ),
        (
            vec!["ls", "--since", "yesterday-ish"],
            "--since: \"yesterday-ish\"",
        ),
        (vec!["ls", "--cursor", "12"], "--cursor: list cursor \"12\""),
        (vec!["purge"], "at least one filter"),
    ] {
        let err = idem(&w.engine, &args).await.unwrap_err();
        assert_eq!(err.exit(), Exit::Usage, "{args:?}: {err}");
        assert!(err.to_string().contains(needle), "{args:?}: {err}");
    }
}

// pins I3, X2: ls prints one object per line, filters, and pages with a cursor on stderr
#[tokio::test]
async fn ls_filters_and_pages() {
    let w = world();
    let first = w.refund(&w.engine, "c-9", 1).await;
    let second = w.refund(&w.engine, "c-9", 2).await;
    let elsewhere = w.refund(&w.engine, "c-10", 3).await;
    let all = idem(&w.engine, &["ls", "--json"]).await.unwrap();
    let keys: Vec<Value> = lines(&all.stdout)
        .iter()
        .map(|o| o["key"].clone())
        .collect();
    assert_eq!(
        keys,
        [json!(elsewhere), json!(second), json!(first)],
        "newest first"
    );
    assert_eq!(all.stderr, "", "no next page");

    let page = idem(
        &w.engine,
        &[
            "ls",
            "--json",
            "--scope",
            "conversation=c-9",
            "--limit",
            "1",
        ],
    )
    .await
    .unwrap();
    assert_eq!(lines(&page.stdout)[0]["key"], second.as_str());
    let cursor = lines(&page.stderr)[0]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let next = idem(
        &w.engine,
        &[
            "ls",
            "--json",
            "--scope",
            "conversation=c-9",
            "--limit",
            "1",
            "--cursor",
            &cursor,
        ],
    )
    .await
    .unwrap();
    assert_eq!(lines(&next.stdout)[0]["key"], first.as_str());
    assert_eq!(next.stderr, "", "the last page");

    let table = idem(&w.engine, &["ls", "--limit", "2"]).await.unwrap();
    // Every column under its own header, each time one column: RFC 3339, then relative.
    assert_eq!(
        table.stdout,
        format!(
            "KEY               TOOL         SCOPE              STATE      FENCE  CREATED                         EXPIRES\n\
             {}  send_refund  conversation=c-10  completed  1      2026-12-01T20:33:33.143Z (now)  2026-12-02T20:33:33.143Z (in 23h 59m)\n\
             {}  send_refund  conversation=c-9   completed  1      2026-12-01T20:33:33.133Z (now)  2026-12-02T20:33:33.133Z (in 23h 59m)\n",
            &elsewhere[..16],
            &second[..16],
        ),
    );
    assert!(
        table.stderr.starts_with("idem: next page: --cursor "),
        "{}",
        table.stderr
    );
    let wide = idem(
        &w.engine,
        &[
            "ls",
            "-w",
            "--tool",
            "send_refund",
            "--state",
            "in-progress",
        ],
    )
    .await
    .unwrap();
    assert_eq!(wide.stdout, "no live records\n");
    let since = idem(
        &w.engine,
        &["ls", "--json", "--since", "2026-12-01T20:33:33.133Z"],
    )
    .await
    .unwrap();
    assert_eq!(lines(&since.stdout).len(), 2);
    let until = idem(&w.engine, &["ls", "--json", "--until", "15ms"])
        .await
        .unwrap();
    assert_eq!(lines(&until.stdout).len(), 2, "created more than 15 ms ago");
}

// pins I4, X3: purge by key deletes a completed record, keeps one in progress without
// --force (exit 1), and a purged key is absent
#[tokio::test]
async fn purge_by_key() {
    let w = world();
    let done = w.refund(&w.engine, "c-9", 1).await;
    let running = w.running("send_refund", "c-9").await;
    let deleted = idem(&w.engine, &["purge", &done]).await.unwrap();
    assert_eq!(deleted.exit, None);
    assert_eq!(
        deleted.stdout,
        format!("deleted {done} (send_refund, conversation=c-9, completed)\n")
    );
    let again = idem(&w.engine, &["purge", &done]).await.unwrap();
    assert_eq!(again.exit, Some(Exit::NotFound));
    assert!(again.stderr.contains("nothing to purge"));
    assert_eq!(
        idem(&w.engine, &["show", &done]).await.unwrap_err().exit(),
        Exit::NotFound
    );

    let kept = idem(&w.engine, &["purge", "--json", &running])
        .await
        .unwrap();
    assert_eq!(kept.exit, Some(Exit::NotFound));
    assert_eq!(lines(&kept.stdout)[0]["result"], "kept");
    assert!(kept.stderr.contains("pass --force"), "{}", kept.stderr);
    let forced = idem(&w.engine, &["purge", "--force", &running])
        .await
        .unwrap();
    assert_eq!(forced.exit, None);
    assert!(forced.stdout.contains("in progress"));
}

// pins I4: purge by filters needs a filter or --all; counts deleted and kept
#[tokio::test]
async fn purge_by_filters() {
    let w = world();
    w.refund(&w.engine, "c-9", 1).await;
    w.refund(&w.engine, "c-9", 2).await;
    w.refund(&w.engine, "c-10", 3).await;
    w.running("send_refund", "c-9").await;
    let purged = idem(
        &w.engine,
        &["purge", "--json", "--scope", "conversation=c-9"],
    )
    .await
    .unwrap();
    assert_eq!(lines(&purged.stdout)[0], json!({"deleted": 2, "kept": 1}));
    assert!(purged.stderr.contains("kept 1 record"), "{}", purged.stderr);
    assert_eq!(purged.exit, None);
    let nothing = idem(&w.engine, &["purge", "--tool", "send_email"])
        .await
        .unwrap();
    assert_eq!(nothing.exit, Some(Exit::NotFound));
    let all = idem(&w.engine, &["purge", "--all", "--force"])
        .await
        .unwrap();
    assert_eq!(all.stdout, "deleted 2 records\n");
}

// pins I5, X2: stats by state and tool, as a table and one JSON object
#[tokio::test]
async fn stats_count_by_state_and_tool() {
    let w = world();
    w.refund(&w.engine, "c-9", 1).await;
    w.refund(&w.engine, "c-9", 2).await;
    w.running("send_email", "c-9").await;
    let json = idem(&w.engine, &["stats", "--json"]).await.unwrap();
    assert_eq!(
        lines(&json.stdout)[0],
        json!({
            "total": {"records": 3, "completed": 2, "in_progress": 1, "outcome_unknown": 0},
            "by_tool": {
                "send_email": {"records": 1, "completed": 0, "in_progress": 1, "outcome_unknown": 0},
                "send_refund": {"records": 2, "completed": 2, "in_progress": 0, "outcome_unknown": 0},
            },
        })
    );
    let table = idem(&w.engine, &["stats"]).await.unwrap().stdout;
    assert_eq!(
        table,
        "TOOL         RECORDS  COMPLETED  IN PROGRESS  OUTCOME UNKNOWN\n\
         send_email   1        0          1            0\n\
         send_refund  2        2          0            0\n\
         all tools    3        2          1            0\n"
    );
}

// pins K11, K7, X1: a namespace changes the key and show finds the namespaced record; a
// composite scope round-trips
#[tokio::test]
async fn namespaces_and_composite_scopes() {
    let w = world();
    let tenant_a = w.in_namespace("tenant-a");
    let key = w.refund(&tenant_a, "c-9", 4417).await;
    let plain = idem(&w.engine, &with(&["key"], &CALL))
        .await
        .unwrap()
        .stdout;
    let namespaced = idem(&tenant_a, &with(&["key"], &CALL))
        .await
        .unwrap()
        .stdout;
    assert_eq!(namespaced, format!("{key}\n"));
    assert_ne!(plain, namespaced);
    let shown = idem(&tenant_a, &with(&["show", "--json"], &CALL))
        .await
        .unwrap();
    assert_eq!(lines(&shown.stdout)[0]["namespace"], "tenant-a");
    assert_eq!(
        idem(&w.engine, &with(&["show"], &CALL))
            .await
            .unwrap_err()
            .exit(),
        Exit::NotFound
    );
    let table = idem(&w.engine, &["ls"]).await.unwrap().stdout;
    assert!(table.contains("NAMESPACE"), "{table}");
    assert!(table.contains("tenant-a"), "{table}");

    static COMPOSITE: ToolSpec = ToolSpec {
        scope: Scope::Composite {
            kind: "tenant+conversation",
            parts: &[Scope::Named("tenant"), Scope::Conversation],
        },
        ..ToolSpec::new("open_ticket")
    };
    let ctx = CallContext::new()
        .with_engine(w.engine.clone())
        .with_scope("tenant", "acme")
        .with_conversation("c/1");
    let prepared = prepare(&COMPOSITE, Some(&ctx), |a| {
        a.key("subject", &"refund")?;
        Ok(())
    })
    .unwrap();
    let key = prepared.key().to_string();
    let done: Result<u8, ToolError> = prepared.run(async { Ok(1) }).await;
    done.unwrap();
    let call = [
        "--tool",
        "open_ticket",
        "--scope",
        "tenant=acme",
        "--scope",
        "conversation=c%2F1",
        "--args",
        r#"{"subject":"refund"}"#,
    ];
    assert_eq!(
        idem(&w.engine, &with(&["key"], &call))
            .await
            .unwrap()
            .stdout,
        format!("{key}\n")
    );
    let shown = idem(&w.engine, &with(&["show", "--json"], &call))
        .await
        .unwrap();
    let object = &lines(&shown.stdout)[0];
    assert_eq!(object["scope"], "tenant=acme/conversation=c%2F1");
    assert_eq!(
        object["scope_parts"],
        json!([{"kind": "tenant", "value": "acme"}, {"kind": "conversation", "value": "c/1"}])
    );
    let listed = idem(&w.engine, &["ls", "--json", "--scope", "tenant=acme"])
        .await
        .unwrap();
    assert_eq!(lines(&listed.stdout).len(), 1);
}
