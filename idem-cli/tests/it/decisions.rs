//! `idem resolve`, `idem show --history` and the queue of unknown outcomes (`idem ls --state
//! outcome-unknown`) against real stores (contract U2, U6, U7, I7, S8, X1–X3): a tool's
//! process claims a call and dies (its engine's clock in the past, so that its lease lapsed
//! long ago), then a person runs the binary, and the tool's next call meets the decision.
//!
//! SQLite always runs; PostgreSQL and Redis with the test-only features `test-postgres` and
//! `test-redis`, on the stores of [`crate::common`].

use std::time::Duration;

use idem_runtime::{CallStatus, Error, OutcomeSource, ToolError};
use serde_json::{json, Value};

#[cfg(feature = "test-postgres")]
use crate::common::postgres;
#[cfg(feature = "test-redis")]
use crate::common::redis;
use crate::common::{sqlite, Backend, Run};

const TEN_MINUTES: Duration = Duration::from_secs(600);
const ANA: [(&str, &str); 1] = [("IDEM_ACTOR", "ana")];

fn events(object: &Value) -> Vec<&str> {
    object["history"]
        .as_array()
        .unwrap_or_else(|| panic!("no history: {object}"))
        .iter()
        .map(|entry| entry["event"].as_str().unwrap())
        .collect()
}

fn keys(run: &Run) -> Vec<String> {
    run.json_lines()
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect()
}

/// A crashed owner's call is held; `resolve --applied` saves the output a person found;
/// the tool's next call replays it without running (source resolved); the same decision
/// again is "already" (exit 0); `show --history` tells the whole story.
fn a_crashed_call_decided_applied_is_replayed(b: Backend) {
    let key = b.engine_at(TEN_MINUTES).crash("c-9", 4417);
    let tool = b.engine(None);
    let held = tool.call("c-9", 4417);
    assert!(!held.ran, "U2: held, not run again: {held:?}");
    assert!(
        matches!(
            held.result,
            Err(ToolError::Idem(Error::OutcomeUnknown { held: true, .. }))
        ),
        "{held:?}"
    );

    let shown = b.idem(&["show", &key]).expect(0).stdout;
    assert!(shown.contains("outcome unknown"), "{shown}");
    assert!(
        shown.contains(&format!("idem resolve {key} --expect-fence 1")),
        "{shown}"
    );
    let decide = [
        "resolve",
        key.as_str(),
        "--applied",
        "--output",
        r#"{"refund_id":"re_by_hand"}"#,
        "--note",
        "the bank shows re_by_hand",
        "--expect-fence",
        "1",
    ];
    let decided = b.idem_env(&decide, &ANA).expect(0);
    assert!(
        decided.stdout.starts_with(&format!(
            "decided {key}: applied, by ana; it is now completed (source resolved), fence 1: \
             every later call gets the saved output back until "
        )),
        "{decided:?}"
    );
    let again = b.idem_env(&decide, &ANA).expect(0);
    assert!(
        again.stdout.starts_with(&format!(
            "{key} was already decided applied: nothing written"
        )),
        "{again:?}"
    );

    let replayed = tool.call("c-9", 4417);
    assert!(!replayed.ran, "{replayed:?}");
    assert_eq!(replayed.result.unwrap(), json!({"refund_id": "re_by_hand"}));
    let outcome = replayed.outcome.expect("a replay's outcome");
    assert_eq!(
        (outcome.status, outcome.source),
        (CallStatus::Replayed, OutcomeSource::Resolved)
    );

    let object = b
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(object["state"], "completed");
    assert_eq!(object["source"], "resolved");
    assert_eq!(
        object["outcome"],
        json!({"ok": {"refund_id": "re_by_hand"}})
    );
    assert_eq!(
        events(&object),
        ["claimed", "unknown", "resolved"],
        "{object}"
    );
    assert_eq!(object["history"][1]["cause"], "lease_lapsed");
    let resolved = &object["history"][2];
    assert_eq!(
        (
            &resolved["decision"],
            &resolved["actor"],
            &resolved["note"],
            &resolved["fence"]
        ),
        (
            &json!("applied"),
            &json!("ana"),
            &json!("the bank shows re_by_hand"),
            &json!(1)
        )
    );
    assert_eq!(object["history_dropped"], 0);
    assert!(
        object["history"][0]["owner"].as_str().unwrap().len() == 32,
        "{object}"
    );

    let text = b.idem(&["show", &key, "--history"]).expect(0).stdout;
    let history: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("history"))
        .collect();
    assert_eq!(history[0], "history  3 entries", "{text}");
    assert!(
        history[2].contains("(10m ago)") && history[2].contains("  1      claimed (owner "),
        "{text}"
    );
    assert!(
        history[3].ends_with("  1      outcome unknown: lease lapsed"),
        "{text}"
    );
    assert!(
        history[4].ends_with(r#"  1      resolved applied by ana: "the bank shows re_by_hand""#),
        "{text}"
    );
}

/// `resolve --not-applied` lets the tool's next call run the body once more, with the next
/// fence; `--error` saves a failure that `show` prints.
fn not_applied_runs_once_more_and_error_is_saved(b: Backend) {
    let old = b.engine_at(TEN_MINUTES);
    let first = old.crash("c-9", 1);
    let second = old.crash("c-9", 2);
    let tool = b.engine(None);
    let decided = b
        .idem_env(&["resolve", &first, "--not-applied", "--json"], &ANA)
        .expect(0)
        .json();
    assert_eq!(
        decided,
        json!({"key": first, "decision": "not_applied", "actor": "ana", "note": null,
               "state": "not_applied", "fence": 1, "already_decided": false})
    );
    let listed = b
        .idem(&["ls", "--json", "--state", "not-applied"])
        .expect(0);
    assert_eq!(keys(&listed), [first.as_str()]);
    assert!(listed.json()["decided_at"].is_string(), "{listed:?}");
    let stats = b.idem(&["stats", "--json"]).expect(0).json();
    assert_eq!(stats["total"]["not_applied"], 1, "{stats}");
    assert_eq!(
        stats["total"]["outcome_unknown"], 1,
        "a lapsed claim counts unknown: {stats}"
    );

    let ran = tool.call("c-9", 1);
    assert!(ran.ran, "{ran:?}");
    assert_eq!(ran.result.unwrap(), json!({"refund_id": "re_1"}));
    assert_eq!(ran.outcome.unwrap().fence, 2);
    let object = b
        .idem(&["show", &first, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (&object["state"], &object["source"], &object["fence"]),
        (&json!("completed"), &json!("executed"), &json!(2))
    );
    assert_eq!(
        events(&object),
        ["claimed", "unknown", "resolved", "claimed", "completed"],
        "U7: the lapsed claim marked unknown, decided, claimed again: {object}"
    );
    assert!(!tool.call("c-9", 1).ran, "once more, not twice");

    b.idem_env(&["resolve", &second, "--error", r#""card declined""#], &ANA)
        .expect(0);
    let object = b.idem(&["show", &second, "--json"]).expect(0).json();
    assert_eq!(object["outcome"], json!({"err": "card declined"}));
    assert_eq!(object["source"], "resolved");
}

/// What cannot be decided is exit 1 saying why; bad input and a missing actor are exit 2
/// naming the option; nothing is written by any of them.
fn refusals_name_what_is_wrong(b: Backend) {
    let key = b.engine_at(TEN_MINUTES).crash("c-9", 1);
    let live = b.engine(None).running("c-9");

    let moved = b
        .idem_env(
            &["resolve", &key, "--not-applied", "--expect-fence", "7"],
            &ANA,
        )
        .expect(1);
    assert!(
        moved.stderr.contains("fence 1 (outcome_unknown), not 7"),
        "both fences: {moved:?}"
    );
    let running = b
        .idem_env(&["resolve", &live, "--not-applied"], &ANA)
        .expect(1);
    assert!(running.stderr.contains("a call holds it"), "{running:?}");
    let no_actor = b
        .idem_without_user(&["resolve", &key, "--not-applied"])
        .expect(2);
    assert!(
        no_actor.stderr.starts_with("idem: --actor: needed")
            && no_actor.stderr.contains("pass --actor"),
        "{no_actor:?}"
    );
    let bad_output = b
        .idem_env(
            &["resolve", &key, "--applied", "--output", "{\"refund_id\":"],
            &ANA,
        )
        .expect(2);
    assert!(
        bad_output
            .stderr
            .starts_with("idem: --output: not one JSON value"),
        "{bad_output:?}"
    );
    let both = b
        .idem_env(
            &["resolve", &key, "--tool", "send_refund", "--not-applied"],
            &ANA,
        )
        .expect(2);
    assert!(both.stderr.contains("cannot be used with"), "{both:?}");
    let broad = b.idem_env(&["resolve", "--not-applied"], &ANA).expect(2);
    assert!(broad.stderr.contains("too broad"), "{broad:?}");

    let object = b
        .idem(&["show", &key, "--history", "--json"])
        .expect(0)
        .json();
    assert_eq!(object["state"], "outcome_unknown");
    assert_eq!(events(&object), ["claimed"], "nothing written: {object}");
    // The user's name is the actor when nothing else names one.
    let by_user = b
        .idem_env(
            &["resolve", &key, "--not-applied", "--json"],
            &[("USER", "ops-bob")],
        )
        .expect(0)
        .json();
    assert_eq!(by_user["actor"], "ops-bob");
}

/// A bulk decision takes what the filters select that waits for a decision, oldest first;
/// a dry run lists it and writes nothing; a live claim is never taken.
fn bulk_decisions_and_dry_runs(b: Backend) {
    let oldest = b
        .engine_at(Duration::from_secs(2 * 3600 + 1))
        .crash("c-9", 1);
    let older = b.engine_at(Duration::from_secs(2 * 3600)).crash("c-10", 2);
    let recent = b.engine_at(TEN_MINUTES).crash("c-9", 3);
    let live = b.engine(None).running("c-9");

    let dry = b
        .idem_env(
            &[
                "resolve",
                "--tool",
                "send_refund",
                "--older-than",
                "1h",
                "--not-applied",
                "--dry-run",
            ],
            &ANA,
        )
        .expect(0);
    let lines: Vec<&str> = dry.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{dry:?}");
    assert!(lines[0].starts_with("KEY"), "{dry:?}");
    assert!(
        lines[1].starts_with(&oldest) && lines[1].ends_with("would decide"),
        "{dry:?}"
    );
    assert!(lines[2].starts_with(&older), "{dry:?}");
    assert_eq!(
        lines[3],
        "would decide 2 records not applied by ana (dry run: nothing written)"
    );
    let waiting = b
        .idem(&["ls", "--json", "--state", "outcome-unknown"])
        .expect(0);
    assert_eq!(
        keys(&waiting),
        [oldest.clone(), older.clone(), recent.clone()],
        "nothing written, oldest first"
    );

    let decided = b
        .idem_env(
            &["resolve", "--tool", "send_refund", "--applied", "--json"],
            &ANA,
        )
        .expect(0);
    assert_eq!(keys(&decided), [oldest, older, recent]);
    assert!(
        decided
            .json_lines()
            .iter()
            .all(|o| o["result"] == "decided"),
        "{decided:?}"
    );
    let summary: Value = serde_json::from_str(decided.stderr.trim()).unwrap();
    assert_eq!(summary["decided"], 3);
    let nothing = b
        .idem_env(&["resolve", "--tool", "send_refund", "--applied"], &ANA)
        .expect(1);
    assert!(nothing.stderr.contains("nothing to decide"), "{nothing:?}");
    let running = b
        .idem(&["ls", "--json", "--state", "in-progress"])
        .expect(0);
    assert_eq!(keys(&running), [live]);
}

/// `ls --state outcome-unknown` is a queue, oldest first, of unknown outcomes including
/// claims whose lease lapsed; one past its expiry is still listed, marked overdue.
fn the_queue_of_unknown_outcomes(b: Backend) {
    let overdue = b.engine_at(Duration::from_secs(25 * 3600)).crash("c-9", 1);
    let lapsed = b.engine_at(TEN_MINUTES).crash("c-9", 2);
    let tool = b.engine(None);
    let live = tool.running("c-9");
    tool.refund("c-9", 3);

    let queue = b
        .idem(&["ls", "--json", "--state", "outcome-unknown"])
        .expect(0);
    assert_eq!(keys(&queue), [overdue.clone(), lapsed.clone()]);
    let objects = queue.json_lines();
    assert!(
        objects.iter().all(|o| o["state"] == "outcome_unknown"),
        "{queue:?}"
    );
    assert_eq!(objects[0]["overdue"], true, "S8: kept past its expiry");
    assert_eq!(objects[1]["overdue"], false);
    let newest = b
        .idem(&[
            "ls",
            "--json",
            "--state",
            "outcome-unknown",
            "--newest-first",
        ])
        .expect(0);
    assert_eq!(keys(&newest), [lapsed.clone(), overdue.clone()]);

    let table = b
        .idem(&["ls", "--state", "outcome-unknown", "--wide"])
        .expect(0)
        .stdout;
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[1].starts_with(&overdue)
            && rows[1].contains("outcome unknown (lease lapsed), overdue"),
        "{table}"
    );
    assert!(
        rows[2].starts_with(&lapsed)
            && rows[2].contains("outcome unknown (lease lapsed)")
            && !rows[2].contains("overdue"),
        "{table}"
    );
    let all = b.idem(&["ls", "--json"]).expect(0);
    let states: Vec<(String, Value)> = all
        .json_lines()
        .iter()
        .map(|o| (o["key"].as_str().unwrap().to_owned(), o["state"].clone()))
        .collect();
    assert!(states.contains(&(live, json!("in_progress"))), "{states:?}");
}

macro_rules! on_backend {
    ($module:ident, $make:path) => {
        mod $module {
            // pins U2, U6, U7, S3, X2, X3
            #[test]
            fn a_crashed_call_decided_applied_is_replayed() {
                super::a_crashed_call_decided_applied_is_replayed($make());
            }

            // pins U6, U7, F1, S4, I5, X2
            #[test]
            fn not_applied_runs_once_more_and_error_is_saved() {
                super::not_applied_runs_once_more_and_error_is_saved($make());
            }

            // pins U6, X3
            #[test]
            fn refusals_name_what_is_wrong() {
                super::refusals_name_what_is_wrong($make());
            }

            // pins U6, I7, X3
            #[test]
            fn bulk_decisions_and_dry_runs() {
                super::bulk_decisions_and_dry_runs($make());
            }

            // pins I7, S8, U1, X2
            #[test]
            fn the_queue_of_unknown_outcomes() {
                super::the_queue_of_unknown_outcomes($make());
            }
        }
    };
}

on_backend!(sqlite, super::sqlite);
#[cfg(feature = "test-postgres")]
on_backend!(postgres, super::postgres);
#[cfg(feature = "test-redis")]
on_backend!(redis, super::redis);

// pins I2, X3: `show --tool` without the call's scope, whose records are all in
// conversations, says none is in the global scope itself and how many are in narrower
// scopes, and to pass --scope; it no longer suggests other arguments
#[test]
fn show_without_the_scope_counts_narrower_scopes_apart() {
    let b = sqlite();
    let tool = b.engine(None);
    tool.refund("c-9", 4417);
    tool.refund("c-10", 4417);
    let run = b
        .idem(&[
            "show",
            "--tool",
            "send_refund",
            "--args",
            r#"{"order_id":4417,"amount_cents":500}"#,
        ])
        .expect(1);
    assert!(
        run.stderr.contains(
            "send_refund has no live record in the global scope itself, but 2 records in \
             narrower scopes within it: pass --scope"
        ),
        "{run:?}"
    );
    assert!(!run.stderr.contains("other arguments"), "{run:?}");
}

// pins X1, U6, I7: the help names the decisions, where the actor comes from, the limits,
// and the queue's order
#[test]
fn help_names_decisions_actors_and_the_queue() {
    let help = crate::common::idem(&["resolve", "--help"]).expect(0).stdout;
    for needle in [
        "--applied",
        "--not-applied",
        "--error <JSON>",
        "IDEM_ACTOR, else USER",
        "1 MiB",
        "--expect-fence <N>",
        "[default: 24h]",
        "--dry-run",
        "--older-than <DURATION>",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let help = crate::common::idem(&["ls", "--help"]).expect(0).stdout;
    for needle in [
        "--oldest-first",
        "--newest-first",
        "not-applied",
        "lease lapsed",
    ] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
    let help = crate::common::idem(&["--help"]).expect(0).stdout;
    assert!(
        help.contains("resolve") && help.contains("nothing to show, purge or decide"),
        "{help}"
    );
}
