//! `idem purge`: delete one record by key, or every record filters match (I4).

use idem_runtime::store::{PurgeOutcome, Record, RecordState};
use idem_runtime::{Engine, IdempotencyKey, Timestamp};
use serde::Serialize;

use super::{list_query, parse_key, Report};
use crate::cli::PurgeArgs;
use crate::exit::{CliError, Exit};
use crate::output::{
    effective_state_text, json_line, record_json, records, tool_of, when, RecordJson,
};

/// `purge KEY --json`: `{"key", "result", "record"}`.
#[derive(Serialize)]
struct PurgedJson<'a> {
    key: &'a str,
    result: &'static str,
    record: Option<RecordJson>,
}

pub(super) async fn run(engine: &Engine, args: &PurgeArgs) -> Result<Report, CliError> {
    match &args.key {
        Some(text) => by_key(engine, &parse_key(text)?, args).await,
        None => by_filters(engine, args).await,
    }
}

async fn by_key(
    engine: &Engine,
    key: &IdempotencyKey,
    args: &PurgeArgs,
) -> Result<Report, CliError> {
    let now = engine.clock().now();
    let outcome = engine.store().purge(key, args.force, now).await?;
    let (result, record) = match &outcome {
        PurgeOutcome::Deleted(record) => ("deleted", Some(record)),
        PurgeOutcome::Kept(record) => ("kept", Some(record)),
        PurgeOutcome::Absent => ("absent", None),
    };
    let mut report = Report::default();
    if args.json {
        report.stdout = json_line(&PurgedJson {
            key: key.as_str(),
            result,
            record: record.map(|r| record_json(key, r, now)),
        });
    }
    match outcome {
        PurgeOutcome::Deleted(record) => {
            if !args.json {
                report.stdout = format!("deleted {key} ({})\n", describe(&record, now));
            }
            Ok(report)
        }
        PurgeOutcome::Kept(record) => {
            let (lease, why) = match &record.state {
                RecordState::InProgress { lease_until, .. } if *lease_until > now => (
                    format!(", lease until {}", when(*lease_until, now)),
                    "its call may still be running",
                ),
                RecordState::InProgress { lease_until, .. }
                | RecordState::OutcomeUnknown { lease_until, .. } => (
                    format!(", lease until {}", when(*lease_until, now)),
                    "its call may have had its effect (decide it with `idem resolve`)",
                ),
                RecordState::NotApplied { .. } => (
                    String::new(),
                    "it was decided not applied and waits for its next call",
                ),
                RecordState::AwaitingApproval { .. } => (
                    String::new(),
                    "it waits for a person's approval (decide it with `idem approve` or \
                     `idem deny`)",
                ),
                RecordState::Approved { .. } => (
                    String::new(),
                    "it was approved and waits for its next call (revoke it with `idem deny`)",
                ),
                _ => (String::new(), "it is not completed"),
            };
            report.stderr = format!(
                "idem: kept {key} ({}{lease}): {why}; pass --force to delete it\n",
                describe(&record, now)
            );
            report.exit = Some(Exit::NotFound);
            Ok(report)
        }
        PurgeOutcome::Absent => {
            report.stderr = format!("idem: no live record of key {key}: nothing to purge\n");
            report.exit = Some(Exit::NotFound);
            Ok(report)
        }
    }
}

/// `send_refund, conversation=c-9, completed`.
fn describe(record: &Record, now: Timestamp) -> String {
    let scope = record
        .label
        .as_ref()
        .map(|l| l.scope.to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "-".to_owned());
    format!(
        "{}, {scope}, {}",
        tool_of(record).unwrap_or("-"),
        effective_state_text(record, now)
    )
}

async fn by_filters(engine: &Engine, args: &PurgeArgs) -> Result<Report, CliError> {
    if !args.filters.any() && !args.all {
        return Err(CliError::Usage(
            "purge: name a KEY, or at least one filter (--tool, --scope, --state, --since, \
             --until), or --all to purge every live record"
                .to_owned(),
        ));
    }
    let now = engine.clock().now();
    let query = list_query(engine, &args.filters, now)?;
    let counts = engine
        .store()
        .purge_matching(&query, args.force, now)
        .await?;
    let mut report = Report::default();
    if args.json {
        // PurgeCounts serializes as {"deleted": N, "kept": N}.
        report.stdout = json_line(&counts);
    } else {
        report.stdout = format!("deleted {}\n", records(counts.deleted));
    }
    if counts.kept > 0 {
        report.stderr = format!(
            "idem: kept {} not completed (in progress, with an unknown outcome, decided not \
             applied, awaiting approval or approved): their calls may still be running, or may have had their effect; pass \
             --force to delete them\n",
            records(counts.kept)
        );
    } else if counts.deleted == 0 {
        report.stderr = "idem: no live record matches: nothing to purge\n".to_owned();
    }
    if counts.deleted == 0 {
        report.exit = Some(Exit::NotFound);
    }
    Ok(report)
}
