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
        self.claim(tool, ScopePath::new().with("conversation", conversation))
            .await
    }

    /// Claims a record of `tool` in `scope` and leaves it in progress (lease 60 s, ttl 1 h):
    /// a call still running, or, once the clock moved past its lease, whose owner crashed.
    async fn claim(&self, tool: &str, scope: ScopePath) -> String {
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
                label: &RecordLabel::new(tool, scope),
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
            "total": {"records": 3, "completed": 2, "in_progress": 1, "outcome_unknown": 0, "not_applied": 0, "awaiting_approval": 0, "approved": 0},
            "by_tool": {
                "send_email": {"records": 1, "completed": 0, "in_progress": 1, "outcome_unknown": 0, "not_applied": 0, "awaiting_approval": 0, "approved": 0},
                "send_refund": {"records": 2, "completed": 2, "in_progress": 0, "outcome_unknown": 0, "not_applied": 0, "awaiting_approval": 0, "approved": 0},
            },
        })
    );
    let table = idem(&w.engine, &["stats"]).await.unwrap().stdout;
    assert_eq!(
        table,
        "TOOL         RECORDS  COMPLETED  IN PROGRESS  OUTCOME UNKNOWN  NOT APPLIED  AWAITING APPROVAL  APPROVED\n\
         send_email   1        0          1            0                0            0                  0\n\
         send_refund  2        2          0            0                0            0                  0\n\
         all tools    3        2          1            0                0            0                  0\n"
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

/// `running` records of `send_refund` in c-9 whose owner then crashed: the clock moves past
/// their lease (60 s).
async fn crashed(w: &World, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(w.running("send_refund", "c-9").await);
    }
    w.clock.advance(Duration::from_secs(61));
    keys
}

fn exit_of(report: &Report) -> Exit {
    report.exit.unwrap_or(Exit::Done)
}

// pins U6, X3: the actor is --actor, else IDEM_ACTOR, else USER (empty variables unset);
// without any, bad usage naming --actor
#[test]
fn the_actor_comes_from_the_option_or_the_environment() {
    use super::decide::{actor, ActorOrigin};
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        actor(Some("ana"), some("bob"), some("eve")).unwrap(),
        ("ana".to_owned(), ActorOrigin::Option)
    );
    assert_eq!(
        actor(None, some("bob"), some("eve")).unwrap(),
        ("bob".to_owned(), ActorOrigin::IdemActor)
    );
    assert_eq!(
        actor(None, some(""), some("eve")).unwrap(),
        ("eve".to_owned(), ActorOrigin::User)
    );
    for (idem_actor, user) in [(None, None), (some(""), some(""))] {
        let error = actor(None, idem_actor, user).unwrap_err();
        assert_eq!(error.exit(), Exit::Usage);
        assert!(error.to_string().starts_with("--actor: needed"), "{error}");
        assert!(error.to_string().contains("pass --actor"), "{error}");
    }
}

// pins U6, U7, S3, X2, X3: "applied" on a crashed owner's claim saves the output with
// source resolved (exit 0); the same decision again is "already" and writes nothing (exit
// 0); another decision is refused (exit 1); show and its history say what happened
#[tokio::test]
async fn resolve_applied_saves_the_output_once() {
    let w = world();
    let key = crashed(&w, 1).await.remove(0);
    let decide = [
        "resolve",
        key.as_str(),
        "--applied",
        "--output",
        r#"{"refund_id":"re_1"}"#,
        "--actor",
        "ana",
        "--note",
        "the bank shows re_1",
    ];
    let decided = idem(&w.engine, &decide).await.unwrap();
    assert_eq!(exit_of(&decided), Exit::Done);
    assert_eq!(
        decided.stdout,
        format!(
            "decided {key}: applied, by ana; it is now completed (source resolved), fence 1: \
             every later call gets the saved output back until 2026-12-02T20:34:34.133Z\n"
        ),
        "kept 24 h from the decision"
    );
    let shown = idem(&w.engine, &["show", &key, "--json"]).await.unwrap();
    let object = &lines(&shown.stdout)[0];
    assert_eq!(object["state"], "completed");
    assert_eq!(object["source"], "resolved");
    assert_eq!(object["outcome"], json!({"ok": {"refund_id": "re_1"}}));
    assert_eq!(object["overdue"], false);

    let again = idem(&w.engine, &decide).await.unwrap();
    assert_eq!(exit_of(&again), Exit::Done);
    assert_eq!(
        again.stdout,
        format!(
            "{key} was already decided applied: nothing written; it is completed (source \
             resolved), fence 1\n"
        )
    );
    let as_json = idem(&w.engine, &with(&decide, &["--json"])).await.unwrap();
    assert_eq!(
        lines(&as_json.stdout)[0],
        json!({"key": key, "decision": "applied", "actor": "ana", "note": "the bank shows re_1",
               "state": "completed", "fence": 1, "already_decided": true})
    );
    let other = idem(
        &w.engine,
        &[
            "resolve",
            &key,
            "--applied",
            "--output",
            "2",
            "--actor",
            "ana",
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(other.exit(), Exit::NotFound, "{other}");
    assert!(
        other
            .to_string()
            .contains("its outcome is saved already (source resolved)")
            && other.to_string().ends_with("nothing was decided"),
        "{other}"
    );

    let history = idem(&w.engine, &["show", &key, "--history", "--json"])
        .await
        .unwrap();
    let object = &lines(&history.stdout)[0];
    let events: Vec<&str> = object["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["claimed", "unknown", "resolved"], "{object}");
    assert_eq!(object["history"][1]["cause"], "lease_lapsed");
    assert_eq!(
        object["history"][2],
        json!({"at": "2026-12-01T20:34:34.133Z", "event": "resolved", "fence": 1,
               "decision": "applied", "actor": "ana", "note": "the bank shows re_1"})
    );
    assert_eq!(object["history_dropped"], 0);
    assert_eq!(object["source"], "resolved", "the record's members too");
    let text = idem(&w.engine, &["show", &key, "--history"])
        .await
        .unwrap()
        .stdout;
    assert!(
        text.contains("source     resolved: a person's decision"),
        "{text}"
    );
    assert!(text.contains("\nhistory  3 entries\n"), "{text}");
    assert!(
        text.contains(
            "  2026-12-01T20:34:34.133Z (now)     1      resolved applied by ana: \"the bank \
             shows re_1\"\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  2026-12-01T20:33:33.123Z (1m ago)  1      claimed (owner "),
        "{text}"
    );
}

// pins U6, I5, I7, X2: "not applied" leaves a record that ls, show and stats name so, and
// "error" saves the failure
#[tokio::test]
async fn resolve_not_applied_and_error() {
    let w = world();
    let keys = crashed(&w, 2).await;
    let not_applied = idem(
        &w.engine,
        &["resolve", &keys[0], "--not-applied", "--actor", "ana"],
    )
    .await
    .unwrap();
    assert_eq!(exit_of(&not_applied), Exit::Done);
    assert!(
        not_applied.stdout.ends_with(
            "it is now not applied, fence 1: the next call with the same arguments runs the \
             tool (fence 2)\n"
        ),
        "{}",
        not_applied.stdout
    );
    let failed = idem(
        &w.engine,
        &[
            "resolve",
            &keys[1],
            "--error",
            r#""card declined""#,
            "--actor",
            "ana",
            "--json",
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        lines(&failed.stdout)[0],
        json!({"key": keys[1], "decision": "error", "actor": "ana", "note": null,
               "state": "completed", "fence": 1, "already_decided": false})
    );
    let shown = idem(&w.engine, &["show", &keys[1], "--json"])
        .await
        .unwrap();
    assert_eq!(
        lines(&shown.stdout)[0]["outcome"],
        json!({"err": "card declined"})
    );

    let listed = idem(&w.engine, &["ls", "--json", "--state", "not-applied"])
        .await
        .unwrap();
    let objects = lines(&listed.stdout);
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["key"], keys[0].as_str());
    assert_eq!(objects[0]["state"], "not_applied");
    assert_eq!(objects[0]["decided_at"], "2026-12-01T20:34:34.143Z");
    let text = idem(&w.engine, &["show", &keys[0]]).await.unwrap().stdout;
    assert!(text.contains("state      not applied\n"), "{text}");
    assert!(
        text.contains("decided    2026-12-01T20:34:34.143Z (now)\n"),
        "{text}"
    );
    let stats = idem(&w.engine, &["stats", "--json"]).await.unwrap();
    assert_eq!(
        lines(&stats.stdout)[0]["total"],
        json!({"records": 2, "completed": 1, "in_progress": 0, "outcome_unknown": 0, "not_applied": 1, "awaiting_approval": 0, "approved": 0})
    );
    let table = idem(&w.engine, &["stats"]).await.unwrap().stdout;
    assert!(
        table.ends_with(
            "all tools    2        1          0            0                1            0                  0\n"
        ),
        "{table}"
    );
}

// pins U6, X3: what cannot be decided is exit 1 saying why (a fence that moved names both
// fences; a live claim; no record); bad input is exit 2 naming the option; nothing is
// written
#[tokio::test]
async fn resolve_refuses_and_names_what_is_wrong() {
    let w = world();
    let lapsed = crashed(&w, 1).await.remove(0);
    let live = w.running("send_refund", "c-9").await;
    for (args, exit, needles) in [
        (
            vec![
                "resolve",
                lapsed.as_str(),
                "--not-applied",
                "--expect-fence",
                "2",
            ],
            Exit::NotFound,
            vec!["fence 1 (outcome_unknown), not 2", "idem show"],
        ),
        (
            vec!["resolve", live.as_str(), "--not-applied"],
            Exit::NotFound,
            vec!["a call holds it", "wait for it"],
        ),
        (
            vec!["resolve", &"0".repeat(64), "--not-applied"],
            Exit::NotFound,
            vec!["no record of idempotency key"],
        ),
        (
            vec![
                "resolve",
                lapsed.as_str(),
                "--applied",
                "--output",
                "{\"a\":",
            ],
            Exit::Usage,
            vec!["--output: not one JSON value"],
        ),
        (
            vec!["resolve", lapsed.as_str(), "--error", "card declined"],
            Exit::Usage,
            vec!["--error: not one JSON value"],
        ),
        (
            vec!["resolve", lapsed.as_str(), "--not-applied", "--output", "1"],
            Exit::Usage,
            vec!["--output: goes with --applied"],
        ),
        (
            vec!["resolve", lapsed.as_str(), "--not-applied", "--ttl", "0s"],
            Exit::Usage,
            vec!["--ttl: must be longer than zero"],
        ),
        (
            vec!["resolve", "--not-applied", "--scope", "conversation=c-9"],
            Exit::Usage,
            vec!["too broad"],
        ),
    ] {
        let mut args = args;
        args.extend(["--actor", "ana"]);
        let error = idem(&w.engine, &args).await.unwrap_err();
        assert_eq!(error.exit(), exit, "{args:?}: {error}");
        for needle in needles {
            assert!(error.to_string().contains(needle), "{args:?}: {error}");
        }
    }
    let long_note = "n".repeat(1025);
    let error = idem(
        &w.engine,
        &[
            "resolve",
            &lapsed,
            "--not-applied",
            "--actor",
            "ana",
            "--note",
            &long_note,
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(error.exit(), Exit::Usage);
    assert!(
        error
            .to_string()
            .starts_with("--note: the note has 1025 characters"),
        "{error}"
    );
    let error = idem(
        &w.engine,
        &["resolve", &lapsed, "--not-applied", "--actor", "a\u{7}b"],
    )
    .await
    .unwrap_err();
    assert_eq!(error.exit(), Exit::Usage);
    assert!(
        error.to_string().starts_with("--actor: actor \"a\\u{7}b\""),
        "{error}"
    );

    // Nothing was written: both records are as they were.
    let listed = idem(&w.engine, &["ls", "--json"]).await.unwrap();
    let states: Vec<Value> = lines(&listed.stdout)
        .iter()
        .map(|o| o["state"].clone())
        .collect();
    assert_eq!(states, [json!("in_progress"), json!("outcome_unknown")]);
    let history = w.engine.history(&parse(&lapsed)).await.unwrap().unwrap();
    assert_eq!(history.entries.len(), 1, "only the claim: {history:?}");

    // The command line refuses KEY with bulk selectors, and two decisions at once.
    for args in [
        vec![
            "idem",
            "resolve",
            lapsed.as_str(),
            "--tool",
            "t",
            "--not-applied",
        ],
        vec![
            "idem",
            "resolve",
            lapsed.as_str(),
            "--older-than",
            "1h",
            "--not-applied",
        ],
        vec![
            "idem",
            "resolve",
            lapsed.as_str(),
            "--applied",
            "--not-applied",
        ],
        vec![
            "idem",
            "resolve",
            "--tool",
            "t",
            "--expect-fence",
            "1",
            "--not-applied",
        ],
        vec!["idem", "resolve", lapsed.as_str()],
    ] {
        let error = Cli::try_parse_from(&args).unwrap_err();
        assert!(
            matches!(
                error.kind(),
                clap::error::ErrorKind::ArgumentConflict
                    | clap::error::ErrorKind::MissingRequiredArgument
            ),
            "{args:?}: {error}"
        );
    }
}

fn parse(key: &str) -> idem_runtime::IdempotencyKey {
    idem_runtime::IdempotencyKey::from_hex(key).unwrap()
}

// pins U6, I7, X2, X3: a bulk decision takes the unknown outcomes a filter selects, oldest
// first; a dry run lists them and writes nothing; a live claim and other tools are left
#[tokio::test]
async fn bulk_resolve_takes_the_oldest_first_and_dry_runs_write_nothing() {
    let w = world();
    let old = crashed(&w, 2).await;
    w.clock.advance(Duration::from_secs(600));
    let newer = crashed(&w, 1).await.remove(0);
    let email = w.running("send_email", "c-9").await;
    w.clock.advance(Duration::from_secs(61));
    let live = w.running("send_refund", "c-9").await;
    let dry = idem(
        &w.engine,
        &[
            "resolve",
            "--tool",
            "send_refund",
            "--not-applied",
            "--dry-run",
            "--actor",
            "ana",
        ],
    )
    .await
    .unwrap();
    assert_eq!(exit_of(&dry), Exit::Done);
    let rows: Vec<&str> = dry.stdout.lines().collect();
    assert_eq!(rows.len(), 5, "{}", dry.stdout);
    assert!(rows[0].starts_with("KEY "), "{}", dry.stdout);
    for (row, key) in rows[1..4].iter().zip([&old[0], &old[1], &newer]) {
        assert!(
            row.starts_with(key.as_str())
                && row.contains("send_refund  conversation=c-9")
                && row.ends_with("  1      would decide"),
            "{}",
            dry.stdout
        );
    }
    assert_eq!(
        rows[4],
        "would decide 3 records not applied by ana (dry run: nothing written)"
    );
    let stats = w
        .store
        .stats(Timestamp::from_millis(w.clock_ms()))
        .await
        .unwrap();
    assert_eq!(stats.total.outcome_unknown, 4, "nothing written: {stats:?}");

    let older = idem(
        &w.engine,
        &[
            "resolve",
            "--older-than",
            "5m",
            "--applied",
            "--output",
            "null",
            "--actor",
            "ana",
            "--json",
        ],
    )
    .await
    .unwrap();
    assert_eq!(exit_of(&older), Exit::Done);
    let objects = lines(&older.stdout);
    let keys: Vec<&Value> = objects.iter().map(|o| &o["key"]).collect();
    assert_eq!(
        keys,
        [&json!(old[0]), &json!(old[1])],
        "created over 5 min ago"
    );
    assert!(objects
        .iter()
        .all(|o| o["result"] == "decided" && o["state"] == "completed"));
    assert_eq!(
        lines(&older.stderr)[0],
        json!({"matched": 2, "decided": 2, "already_decided": 0, "not_decided": 0, "dry_run": false})
    );

    let rest = idem(
        &w.engine,
        &[
            "resolve",
            "--tool",
            "send_refund",
            "--not-applied",
            "--actor",
            "ana",
        ],
    )
    .await
    .unwrap();
    assert_eq!(exit_of(&rest), Exit::Done);
    assert!(rest.stdout.contains(&newer), "{}", rest.stdout);
    assert!(!rest.stdout.contains(&live), "a live claim is not decided");
    assert!(
        rest.stdout
            .ends_with("decided 1 record not applied by ana\n"),
        "{}",
        rest.stdout
    );
    let nothing = idem(
        &w.engine,
        &[
            "resolve",
            "--tool",
            "send_refund",
            "--not-applied",
            "--actor",
            "ana",
        ],
    )
    .await
    .unwrap();
    assert_eq!(exit_of(&nothing), Exit::NotFound);
    assert!(
        nothing.stderr.contains("nothing to decide"),
        "{}",
        nothing.stderr
    );
    let listed = idem(&w.engine, &["ls", "--json", "--state", "outcome-unknown"])
        .await
        .unwrap();
    assert_eq!(
        lines(&listed.stdout)
            .iter()
            .map(|o| o["key"].clone())
            .collect::<Vec<_>>(),
        [json!(email)],
        "send_email's is still waiting"
    );
}

// pins I7, S8, X2: ls --state outcome-unknown is a queue (oldest first unless
// --newest-first) that includes claims whose lease lapsed, shows them as outcome unknown,
// and marks those past their expiry overdue
#[tokio::test]
async fn ls_outcome_unknown_is_a_queue_of_lapsed_claims() {
    let w = world();
    let lapsed = crashed(&w, 2).await;
    let live = w.running("send_refund", "c-9").await;
    w.refund(&w.engine, "c-9", 1).await;
    let queue = idem(&w.engine, &["ls", "--json", "--state", "outcome-unknown"])
        .await
        .unwrap();
    let objects = lines(&queue.stdout);
    let keys: Vec<&Value> = objects.iter().map(|o| &o["key"]).collect();
    assert_eq!(keys, [&json!(lapsed[0]), &json!(lapsed[1])], "oldest first");
    assert!(objects
        .iter()
        .all(|o| o["state"] == "outcome_unknown" && o["overdue"] == false));
    assert_eq!(objects[0]["unknown_since"], objects[0]["created_at"]);
    let newest = idem(
        &w.engine,
        &[
            "ls",
            "--json",
            "--state",
            "outcome_unknown",
            "--newest-first",
        ],
    )
    .await
    .unwrap();
    let keys: Vec<Value> = lines(&newest.stdout)
        .iter()
        .map(|o| o["key"].clone())
        .collect();
    assert_eq!(keys, [json!(lapsed[1]), json!(lapsed[0])]);
    let all_oldest = idem(&w.engine, &["ls", "--json", "--oldest-first"])
        .await
        .unwrap();
    assert_eq!(lines(&all_oldest.stdout)[0]["key"], lapsed[0].as_str());
    assert_eq!(lines(&all_oldest.stdout).len(), 4);
    let running = idem(&w.engine, &["ls", "--json", "--state", "in-progress"])
        .await
        .unwrap();
    assert_eq!(lines(&running.stdout).len(), 1);
    assert_eq!(lines(&running.stdout)[0]["key"], live.as_str());

    // An hour later (their ttl) the lapsed claims are overdue, and still listed.
    w.clock.advance(Duration::from_secs(3600));
    let table = idem(&w.engine, &["ls", "--state", "outcome-unknown", "-w"])
        .await
        .unwrap()
        .stdout;
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(
        rows.len(),
        4,
        "the lapsed two and the claim that lapsed since: {table}"
    );
    assert!(
        rows[1].starts_with(lapsed[0].as_str())
            && rows[1].contains("outcome unknown (lease lapsed), overdue"),
        "{table}"
    );
    let shown = idem(&w.engine, &["show", &lapsed[0], "--json"])
        .await
        .unwrap();
    assert_eq!(lines(&shown.stdout)[0]["overdue"], true);
}

// pins I2, X3: a call looked up in a scope that holds none of the tool's records, while
// narrower scopes do, says so and tells to pass --scope; exact-scope records count apart
#[tokio::test]
async fn show_by_call_counts_the_exact_scope_apart_from_narrower_ones() {
    let w = world();
    w.refund(&w.engine, "c-9", 4417).await;
    w.refund(&w.engine, "c-10", 4417).await;
    let global = idem(
        &w.engine,
        &[
            "show",
            "--tool",
            "send_refund",
            "--args",
            r#"{"order_id":4417,"amount_cents":500}"#,
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(global.exit(), Exit::NotFound);
    let message = global.to_string();
    assert!(
        message.contains(
            "send_refund has no live record in the global scope itself, but 2 records in \
             narrower scopes within it: pass --scope"
        ),
        "{message}"
    );
    assert!(!message.contains("other arguments"), "{message}");

    w.claim("send_refund", ScopePath::new()).await;
    let both = idem(
        &w.engine,
        &[
            "show",
            "--tool",
            "send_refund",
            "--args",
            r#"{"order_id":1}"#,
        ],
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        both.contains(
            "send_refund has 1 record in the global scope: called with other arguments? And 2 \
             records in narrower scopes"
        ),
        "{both}"
    );
    let exact = idem(
        &w.engine,
        &[
            "show",
            "--tool",
            "send_refund",
            "--scope",
            "conversation=c-9",
            "--args",
            r#"{"order_id":1}"#,
        ],
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        exact
            .contains("send_refund has 1 record in conversation=c-9: called with other arguments?"),
        "{exact}"
    );
    assert!(!exact.contains("narrower"), "{exact}");
}

/// A store of before histories and decisions: the memory store's calls, and the trait's
/// defaults (Unsupported) for everything else.
#[derive(Debug)]
struct WithoutHistories(MemoryStore);

impl Store for WithoutHistories {
    fn claim<'a>(
        &'a self,
        req: ClaimRequest<'a>,
    ) -> idem_runtime::store::StoreFuture<'a, idem_runtime::store::Claim> {
        self.0.claim(req)
    }
    fn take_over<'a>(
        &'a self,
        req: idem_runtime::store::TakeoverRequest<'a>,
    ) -> idem_runtime::store::StoreFuture<'a, bool> {
        self.0.take_over(req)
    }
    fn renew<'a>(
        &'a self,
        req: idem_runtime::store::RenewRequest<'a>,
    ) -> idem_runtime::store::StoreFuture<'a, bool> {
        self.0.renew(req)
    }
    fn mark_unknown<'a>(
        &'a self,
        req: idem_runtime::store::MarkUnknownRequest<'a>,
    ) -> idem_runtime::store::StoreFuture<'a, bool> {
        self.0.mark_unknown(req)
    }
    fn complete<'a>(
        &'a self,
        req: idem_runtime::store::CompleteRequest<'a>,
    ) -> idem_runtime::store::StoreFuture<'a, idem_runtime::store::Completion> {
        self.0.complete(req)
    }
    fn release<'a>(
        &'a self,
        key: &'a idem_runtime::IdempotencyKey,
        owner: OwnerToken,
    ) -> idem_runtime::store::StoreFuture<'a, bool> {
        self.0.release(key, owner)
    }
    fn read<'a>(
        &'a self,
        key: &'a idem_runtime::IdempotencyKey,
        now: Timestamp,
    ) -> idem_runtime::store::StoreFuture<'a, Option<idem_runtime::store::Record>> {
        self.0.read(key, now)
    }
    fn backend(&self) -> &'static str {
        "plain"
    }
}

// pins U7, U6, I6, X3: a store that keeps no histories nor decisions answers `show
// --history` and `resolve` with exit 3 and its own message; plain `show` still works
#[tokio::test]
async fn a_store_without_histories_is_exit_3() {
    let store: Arc<dyn Store> = Arc::new(WithoutHistories(MemoryStore::new()));
    let clock = ManualClock::starting_at(Timestamp::from_millis(START));
    let engine = Engine::builder()
        .shared_store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    let w = World {
        store,
        clock,
        engine,
    };
    let key = crashed(&w, 1).await.remove(0);
    let shown = idem(&w.engine, &["show", &key]).await.unwrap();
    assert!(
        shown.stdout.contains("outcome unknown (lease lapsed)"),
        "{}",
        shown.stdout
    );
    for args in [
        vec!["show", key.as_str(), "--history"],
        vec!["show", key.as_str(), "--history", "--json"],
        vec!["resolve", key.as_str(), "--not-applied", "--actor", "ana"],
    ] {
        let error = idem(&w.engine, &args).await.unwrap_err();
        assert_eq!(error.exit(), Exit::Store, "{args:?}: {error}");
        assert!(
            error
                .to_string()
                .starts_with("the store refused the operation: ")
                && error.to_string().contains("this store does not support"),
            "{args:?}: {error}"
        );
    }
}
