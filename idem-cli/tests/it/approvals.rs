//! `idem approve`, `idem deny` and the queue of calls awaiting approval (`idem ls --state
//! awaiting-approval`) against real stores (contract A2–A6, U7, I5, I7, X1–X3): a tool that
//! requires approval is called in the tool's process (its first call records the request
//! and does not run), a person runs the binary, and the tool's next call meets the decision.
//!
//! SQLite always runs; PostgreSQL and Redis with the test-only features `test-postgres` and
//! `test-redis`, on the stores of [`crate::common`].

use std::time::Duration;

use idem_runtime::{CallStatus, Error, OutcomeSource, ToolError, ToolSpec};
use serde_json::{json, Value};

#[cfg(feature = "test-postgres")]
use crate::common::postgres;
#[cfg(feature = "test-redis")]
use crate::common::redis;
use crate::common::{sqlite, Backend, Called, Run};

/// `big_refund(order_id, amount_cents = 500)`: waits for a person's approval, valid 1 h.
static BIG_REFUND: ToolSpec = ToolSpec {
    approval: Some(Duration::from_secs(3600)),
    ..ToolSpec::new("big_refund")
};

const ANA: [(&str, &str); 1] = [("IDEM_ACTOR", "ana")];
const BOB: [(&str, &str); 1] = [("IDEM_ACTOR", "bob")];

/// The key of a call that answered `AwaitingApproval` (with `expired` as given) without
/// running.
#[track_caller]
fn awaiting(called: &Called, expired: bool) -> String {
    assert!(!called.ran, "the body does not run: {called:?}");
    match &called.result {
        Err(ToolError::Idem(Error::AwaitingApproval {
            key, expired: e, ..
        })) if *e == expired => key.clone(),
        other => panic!("AwaitingApproval (expired: {expired}): {other:?}"),
    }
}

fn events(object: &Value) -> Vec<&str> {
    object["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

fn keys(run: &Run) -> Vec<String> {
    run.json_lines()
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect()
}

/// The value of `show`'s row `name`.
#[track_caller]
fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no row {name}: {text}"))
}

/// The history lines of `show --history`, from the `history` heading on.
fn history_lines(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("history"))
        .collect()
}

/// The first call asks for approval and does not run; `approve` lets the next call run the
/// tool once (the next fence), whose outcome is then replayed; approving again is "already
/// approved" and writes nothing.
fn approve_runs_the_next_call_once(b: Backend) {
    let tool = b.engine(None);
    let key = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 4417), false);
    let again = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 4417), false);
    assert_eq!(again, key, "A2: every call with the key waits");

    let approve = [
        "approve",
        key.as_str(),
        "--note",
        "checked with the customer",
        "--expect-fence",
        "1",
    ];
    let decided = b.idem_env(&approve, &ANA).expect(0);
    assert!(
        decided.stdout.starts_with(&format!(
            "decided {key}: approved, by ana; it is now approved until "
        )) && decided.stdout.contains(
            ", fence 1: the next call with the same arguments runs the tool once (fence 2)"
        ),
        "{decided:?}"
    );
    let repeated = b.idem_env(&approve, &ANA).expect(0);
    assert!(
        repeated.stdout.starts_with(&format!(
            "{key} was already approved: nothing written; it is approved until "
        )),
        "{repeated:?}"
    );
    let json = b
        .idem_env(&["approve", &key, "--json"], &BOB)
        .expect(0)
        .json();
    assert_eq!(
        (
            &json["decision"],
            &json["state"],
            &json["fence"],
            &json["already_decided"]
        ),
        (
            &json!("approved"),
            &json!("approved"),
            &json!(1),
            &json!(true)
        ),
        "{json}"
    );
    assert!(json["approved_until"].is_string(), "{json}");

    let ran = tool.call_tool(&BIG_REFUND, "c-9", 4417);
    assert!(ran.ran, "A4: the approved call runs: {ran:?}");
    assert_eq!(ran.result.unwrap(), json!({"refund_id": "re_4417"}));
    assert_eq!(ran.outcome.unwrap().fence, 2, "F1: the next fence");
    let replayed = tool.call_tool(&BIG_REFUND, "c-9", 4417);
    assert!(!replayed.ran, "once, not twice: {replayed:?}");
    assert_eq!(replayed.result.unwrap(), json!({"refund_id": "re_4417"}));
    let outcome = replayed.outcome.expect("a replay's outcome");
    assert_eq!(
        (outcome.status, outcome.source),
        (CallStatus::Replayed, OutcomeSource::Executed)
    );

    let object = b
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (&object["state"], &object["source"], &object["fence"]),
        (&json!("completed"), &json!("executed"), &json!(2))
    );
    let approved = object["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "approved")
        .collect::<Vec<_>>();
    assert_eq!(approved.len(), 1, "the repeats wrote nothing: {object}");
    assert_eq!(
        (&approved[0]["actor"], &approved[0]["note"]),
        (&json!("ana"), &json!("checked with the customer"))
    );
    assert!(approved[0]["until"].is_string(), "{object}");
    assert_eq!(
        events(&object).last(),
        Some(&"completed"),
        "the approved run saved its outcome: {object}"
    );
}

/// `deny` saves the denial: every call gets `Denied` (who, the note) without running; the
/// same denial again is "already denied"; approving a denied key is refused.
fn deny_is_replayed_as_denied(b: Backend) {
    let tool = b.engine(None);
    let key = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 9000), false);
    let deny = ["deny", key.as_str(), "--note", "over the refund limit"];
    let denied = b.idem_env(&deny, &ANA).expect(0);
    assert!(
        denied.stdout.starts_with(&format!(
            "decided {key}: denied, by ana; it is now completed (source denied), fence 1: \
             every call with the key gets the denial without running the tool until "
        )),
        "{denied:?}"
    );

    for _ in 0..2 {
        let called = tool.call_tool(&BIG_REFUND, "c-9", 9000);
        assert!(!called.ran, "A5: a denied call never runs: {called:?}");
        match &called.result {
            Err(ToolError::Idem(Error::Denied {
                actor,
                note,
                key: k,
                ..
            })) => {
                assert_eq!(
                    (actor.as_str(), note.as_deref(), k.as_str()),
                    ("ana", Some("over the refund limit"), key.as_str())
                );
            }
            other => panic!("Denied: {other:?}"),
        }
    }

    let repeated = b.idem_env(&deny, &BOB).expect(0);
    assert!(
        repeated.stdout.starts_with(&format!(
            "{key} was already denied: nothing written; it is completed (source denied), fence 1"
        )),
        "{repeated:?}"
    );
    let json = b.idem_env(&["deny", &key, "--json"], &ANA).expect(0).json();
    assert_eq!(
        json,
        json!({"key": key, "decision": "denied", "actor": "ana", "note": null,
               "state": "completed", "fence": 1, "already_decided": true})
    );
    let refused = b.idem_env(&["approve", &key], &ANA).expect(1);
    assert!(
        refused.stderr.contains("it was denied") && refused.stderr.contains("nothing was decided"),
        "{refused:?}"
    );

    let object = b.idem(&["show", &key, "--json"]).expect(0).json();
    assert_eq!(object["source"], "denied");
    assert_eq!(object["denial"]["actor"], "ana");
    assert_eq!(object["denial"]["note"], "over the refund limit");
}

/// What cannot be approved or denied is exit 1 saying why, and bad input exit 2 naming the
/// option; nothing is written by any of them.
fn refusals_name_what_is_wrong(b: Backend) {
    let tool = b.engine(None);
    let key = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 1), false);
    let plain = tool.refund("c-9", 2);

    let not_waiting = b.idem_env(&["approve", &plain], &ANA).expect(1);
    assert!(
        not_waiting.stderr.starts_with(&format!(
            "idem: idempotency key {plain} cannot be decided: it does not wait for approval (it \
             is completed)"
        )) && not_waiting.stderr.contains("nothing was decided"),
        "{not_waiting:?}"
    );
    b.idem_env(&["deny", &plain], &ANA).expect(1);
    let absent = b.idem_env(&["approve", &"ab".repeat(32)], &ANA).expect(1);
    assert!(absent.stderr.contains("no record"), "{absent:?}");
    let moved = b
        .idem_env(&["approve", &key, "--expect-fence", "7"], &ANA)
        .expect(1);
    assert!(
        moved.stderr.contains("fence 1 (awaiting_approval), not 7"),
        "both fences: {moved:?}"
    );
    b.idem_env(&["deny", &key, "--expect-fence", "2"], &ANA)
        .expect(1);

    let bad_span = b
        .idem_env(&["approve", &key, "--valid-for", "soon"], &ANA)
        .expect(2);
    assert!(bad_span.stderr.contains("--valid-for"), "{bad_span:?}");
    let zero = b
        .idem_env(&["approve", &key, "--valid-for", "0s"], &ANA)
        .expect(2);
    assert!(
        zero.stderr
            .starts_with("idem: --valid-for: must be longer than zero"),
        "{zero:?}"
    );
    let zero_ttl = b.idem_env(&["deny", &key, "--ttl", "0s"], &ANA).expect(2);
    assert!(
        zero_ttl
            .stderr
            .starts_with("idem: --ttl: must be longer than zero"),
        "{zero_ttl:?}"
    );
    let no_actor = b.idem_without_user(&["approve", &key]).expect(2);
    assert!(
        no_actor.stderr.starts_with("idem: --actor: needed"),
        "{no_actor:?}"
    );
    let long_note = "n".repeat(1025);
    let note = b
        .idem_env(&["deny", &key, "--note", &long_note], &ANA)
        .expect(2);
    assert!(note.stderr.starts_with("idem: --note:"), "{note:?}");
    let bad_key = b.idem_env(&["approve", "abc"], &ANA).expect(2);
    assert!(bad_key.stderr.contains("is not a key"), "{bad_key:?}");

    let object = b
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(object["state"], "awaiting_approval");
    assert!(
        !events(&object)
            .iter()
            .any(|e| *e == "approved" || *e == "denied"),
        "nothing written: {object}"
    );
    assert!(
        awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 1), false) == key,
        "still waiting"
    );
}

/// `ls --state awaiting-approval` is a queue, oldest first, with the key arguments; `stats`
/// counts awaiting approval and approved; `ls --state approved` lists approvals not yet
/// used.
fn the_queue_of_calls_awaiting_approval(b: Backend) {
    let oldest = awaiting(
        &b.engine_at(Duration::from_secs(2 * 3600))
            .call_tool(&BIG_REFUND, "c-9", 1),
        false,
    );
    let older = awaiting(
        &b.engine_at(Duration::from_secs(3600))
            .call_tool(&BIG_REFUND, "c-10", 2),
        false,
    );
    let tool = b.engine(None);
    let recent = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 3), false);
    tool.refund("c-9", 4);

    let queue = b
        .idem(&["ls", "--json", "--state", "awaiting-approval"])
        .expect(0);
    assert_eq!(
        keys(&queue),
        [oldest.clone(), older.clone(), recent.clone()],
        "A6: oldest first"
    );
    let objects = queue.json_lines();
    assert!(
        objects.iter().all(|o| o["state"] == "awaiting_approval"
            && o["awaiting_approval_since"].is_string()
            && o["tool"] == "big_refund"),
        "{queue:?}"
    );
    assert_eq!(
        objects[0]["key_args"],
        json!({"amount_cents": 500, "order_id": 1}),
        "A1: the person sees what they approve"
    );
    let newest = b
        .idem(&[
            "ls",
            "--json",
            "--state",
            "awaiting_approval",
            "--newest-first",
        ])
        .expect(0);
    assert_eq!(
        keys(&newest),
        [recent.clone(), older.clone(), oldest.clone()]
    );

    let table = b
        .idem(&["ls", "--state", "awaiting-approval", "--wide"])
        .expect(0)
        .stdout;
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(
        rows[0].starts_with("KEY") && rows[0].ends_with("ARGUMENTS"),
        "{table}"
    );
    assert!(
        rows[1].starts_with(&oldest)
            && rows[1].contains("awaiting approval")
            && rows[1].ends_with(r#"{"amount_cents":500,"order_id":1}"#),
        "{table}"
    );
    assert!(rows[3].starts_with(&recent), "{table}");

    b.idem_env(&["approve", &older], &ANA).expect(0);
    let stats = b.idem(&["stats", "--json"]).expect(0).json();
    assert_eq!(
        stats["total"],
        json!({"records": 4, "completed": 1, "in_progress": 0, "outcome_unknown": 0,
               "not_applied": 0, "awaiting_approval": 2, "approved": 1}),
        "{stats}"
    );
    assert_eq!(stats["by_tool"]["big_refund"]["awaiting_approval"], 2);
    let text = b.idem(&["stats"]).expect(0).stdout;
    assert!(
        text.lines().next().unwrap().ends_with("AWAITING APPROVAL  APPROVED")
            && text.ends_with(
                "all tools    4        1          0            0                0            2                  1\n"
            ),
        "{text}"
    );
    let approved = b.idem(&["ls", "--json", "--state", "approved"]).expect(0);
    assert_eq!(keys(&approved), [older]);
    let object = approved.json();
    assert!(
        object["decided_at"].is_string() && object["approved_until"].is_string(),
        "{object}"
    );
    let queue = b
        .idem(&["ls", "--json", "--state", "awaiting-approval"])
        .expect(0);
    assert_eq!(keys(&queue), [oldest, recent]);
}

/// `show` prints the approval states and the denial; `show --history` the approval events:
/// requested, approved by whom until when, an approval expired, denied by whom and why.
fn show_and_history_print_the_approval_events(b: Backend) {
    let tool = b.engine(None);
    let key = awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 7), false);

    let shown = b.idem(&["show", &key]).expect(0).stdout;
    assert_eq!(row(&shown, "state"), "awaiting approval", "{shown}");
    assert!(row(&shown, "awaiting since").contains("Z ("), "{shown}");
    assert_eq!(
        row(&shown, "arguments"),
        r#"{"amount_cents":500,"order_id":7}"#
    );
    assert!(
        row(&shown, "to decide").starts_with(&format!("idem approve {key} --expect-fence 1")),
        "{shown}"
    );

    // An approval no call uses in time: the next call waits again (A4).
    b.idem_env(
        &["approve", &key, "--valid-for", "1ms", "--note", "quick"],
        &ANA,
    )
    .expect(0);
    std::thread::sleep(Duration::from_millis(20));
    let shown = b.idem(&["show", &key]).expect(0).stdout;
    assert_eq!(row(&shown, "state"), "approved (expired)", "{shown}");
    assert!(
        row(&shown, "approved until").ends_with("expired, the next call asks for approval again"),
        "{shown}"
    );
    awaiting(&tool.call_tool(&BIG_REFUND, "c-9", 7), true);

    b.idem_env(&["approve", &key, "--note", "checked"], &ANA)
        .expect(0);
    let shown = b.idem(&["show", &key]).expect(0).stdout;
    assert_eq!(row(&shown, "state"), "approved", "{shown}");
    assert!(row(&shown, "approved until").contains("(in 59m"), "{shown}");
    assert!(row(&shown, "decided").contains("Z ("), "{shown}");
    assert!(
        row(&shown, "to revoke").starts_with(&format!("idem deny {key} --expect-fence 1")),
        "{shown}"
    );
    // A denial revokes an approval no call has used (A3).
    b.idem_env(
        &[
            "deny",
            &key,
            "--note",
            "changed my mind",
            "--expect-fence",
            "1",
        ],
        &BOB,
    )
    .expect(0);

    let text = b.idem(&["show", &key, "--history"]).expect(0).stdout;
    assert_eq!(row(&text, "state"), "completed", "{text}");
    assert_eq!(
        row(&text, "source"),
        "denied: a person refused the call; the tool did not run"
    );
    assert_eq!(row(&text, "denied by"), "bob", "{text}");
    assert_eq!(row(&text, "note"), r#""changed my mind""#, "{text}");
    let history = history_lines(&text);
    let ends = |suffix: &str| history.iter().any(|l| l.ends_with(suffix));
    assert!(
        ends("approval requested: the call waits for a person's approval"),
        "{text}"
    );
    assert!(
        history
            .iter()
            .any(|l| l.contains("approved by ana until ") && l.ends_with(r#": "quick""#)),
        "{text}"
    );
    assert!(
        ends("approval expired: no call used it in time; awaiting approval again"),
        "{text}"
    );
    assert!(
        history
            .iter()
            .any(|l| l.contains("approved by ana until ") && l.ends_with(r#": "checked""#)),
        "{text}"
    );
    assert!(ends(r#"denied by bob: "changed my mind""#), "{text}");

    let object = b
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    let approval_events: Vec<&str> = events(&object)
        .into_iter()
        .filter(|e| *e != "claimed")
        .collect();
    assert_eq!(
        approval_events,
        [
            "approval_requested",
            "approved",
            "approval_expired",
            "approved",
            "denied"
        ],
        "{object}"
    );
    let denied = object["history"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (&denied["actor"], &denied["note"]),
        (&json!("bob"), &json!("changed my mind"))
    );
    assert_eq!(
        object["denial"],
        json!({"actor": "bob", "at": object["completed_at"], "note": "changed my mind"})
    );
}

macro_rules! on_backend {
    ($module:ident, $make:path) => {
        mod $module {
            // pins A2, A3, A4, F1, S3, U7, X2, X3
            #[test]
            fn approve_runs_the_next_call_once() {
                super::approve_runs_the_next_call_once($make());
            }

            // pins A3, A5, X2, X3
            #[test]
            fn deny_is_replayed_as_denied() {
                super::deny_is_replayed_as_denied($make());
            }

            // pins A3, U6, X3
            #[test]
            fn refusals_name_what_is_wrong() {
                super::refusals_name_what_is_wrong($make());
            }

            // pins A1, A6, I5, I7, X2
            #[test]
            fn the_queue_of_calls_awaiting_approval() {
                super::the_queue_of_calls_awaiting_approval($make());
            }

            // pins A2, A3, A4, A5, U7, X2
            #[test]
            fn show_and_history_print_the_approval_events() {
                super::show_and_history_print_the_approval_events($make());
            }
        }
    };
}

on_backend!(sqlite, super::sqlite);
#[cfg(feature = "test-postgres")]
on_backend!(postgres, super::postgres);
#[cfg(feature = "test-redis")]
on_backend!(redis, super::redis);

// pins X1, A3, U6: the help names the options, where the actor comes from, and the defaults
#[test]
fn help_names_the_options_and_defaults() {
    let help = crate::common::idem(&["approve", "--help"]).expect(0).stdout;
    for needle in [
        "--valid-for <DURATION>",
        "[default: 1h]",
        "--expect-fence <N>",
        "--note <TEXT>",
        "IDEM_ACTOR, else USER",
        "already approved",
        "awaiting-approval",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let help = crate::common::idem(&["deny", "--help"]).expect(0).stdout;
    for needle in ["--ttl <DURATION>", "[default: 24h]", "already denied"] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let help = crate::common::idem(&["--help"]).expect(0).stdout;
    assert!(help.contains("approve") && help.contains("deny"), "{help}");
    let help = crate::common::idem(&["ls", "--help"]).expect(0).stdout;
    assert!(
        help.contains("awaiting-approval") && help.contains("approved"),
        "{help}"
    );
}
