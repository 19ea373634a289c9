//! `idem ls`: live records, newest first (or oldest first: the queue of records waiting
//! for a decision or an approval), one page (I3, I7, A6).

use idem_runtime::store::{ListCursor, StateFilter};
use idem_runtime::Engine;
use serde_json::json;

use super::{list_query, Report};
use crate::cli::LsArgs;
use crate::exit::CliError;
use crate::output::{
    effective_state_text, json_line, record_json, scope_text, table, tool_of, when,
};

/// Hex digits of a key the table shows without `--wide`.
const KEY_PREFIX: usize = 16;

pub(super) async fn run(engine: &Engine, args: &LsArgs) -> Result<Report, CliError> {
    let now = engine.clock().now();
    let mut query = list_query(engine, &args.filters, now)?;
    query.limit = usize::from(args.limit);
    // Records waiting for a decision or an approval are a queue: oldest first unless told
    // otherwise (I7, A6).
    query.oldest_first = args.oldest_first
        || (!args.newest_first
            && matches!(
                query.state,
                Some(StateFilter::OutcomeUnknown | StateFilter::AwaitingApproval)
            ));
    query.after = args
        .cursor
        .as_deref()
        .map(|text| text.trim().parse::<ListCursor>())
        .transpose()
        .map_err(|e| CliError::usage("--cursor", e))?;
    let page = engine.store().list(&query, now).await?;

    let mut report = Report::default();
    if args.json {
        for found in &page.records {
            report
                .stdout
                .push_str(&json_line(&record_json(&found.key, &found.record, now)));
        }
        if let Some(next) = &page.next {
            report.stderr = json!({ "next_cursor": next.to_string() }).to_string() + "\n";
        }
        return Ok(report);
    }

    if page.records.is_empty() {
        report.stdout = "no live records\n".to_owned();
        return Ok(report);
    }
    let with_namespace = page.records.iter().any(|r| {
        r.record
            .label
            .as_ref()
            .is_some_and(|l| l.namespace.is_some())
    });
    let mut header = vec!["KEY", "TOOL"];
    if with_namespace {
        header.push("NAMESPACE");
    }
    // One column per time, each under its own header: the RFC 3339 time (fixed width) and
    // its relative form, as `show` prints them (P3, X2).
    header.extend(["SCOPE", "STATE", "FENCE", "CREATED", "EXPIRES"]);
    // The queue of calls waiting for approval shows what each would do (A6): its key
    // arguments, last (they are the widest).
    let with_args = matches!(
        query.state,
        Some(StateFilter::AwaitingApproval | StateFilter::Approved)
    );
    if with_args {
        header.push("ARGUMENTS");
    }
    let rows: Vec<Vec<String>> = page
        .records
        .iter()
        .map(|found| {
            let record = &found.record;
            let label = record.label.clone().unwrap_or_default();
            let key = if args.wide {
                found.key.as_str()
            } else {
                found.key.prefix(KEY_PREFIX)
            };
            let mut row = vec![key.to_owned(), tool_of(record).unwrap_or("-").to_owned()];
            if with_namespace {
                row.push(label.namespace.clone().unwrap_or_else(|| "-".to_owned()));
            }
            let scope = scope_text(&label.scope);
            row.extend([
                if scope.is_empty() {
                    "-".to_owned()
                } else {
                    scope
                },
                effective_state_text(record, now),
                record.fence.to_string(),
                when(record.created_at, now),
                when(record.expires_at, now),
            ]);
            if with_args {
                row.push(label.key_args.clone().unwrap_or_else(|| "-".to_owned()));
            }
            row
        })
        .collect();
    report.stdout = table(&header, &rows);
    if let Some(next) = &page.next {
        report.stderr = format!("idem: next page: --cursor {next}\n");
    }
    Ok(report)
}
