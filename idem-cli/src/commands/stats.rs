//! `idem stats`: live records by state, in total and per tool (I5).

use std::collections::BTreeMap;

use idem_runtime::store::StateCounts;
use idem_runtime::Engine;
use serde::Serialize;

use super::Report;
use crate::cli::StatsArgs;
use crate::exit::CliError;
use crate::output::{json_line, table};

/// `stats --json`: `{"total": COUNTS, "by_tool": {TOOL: COUNTS}}`.
#[derive(Serialize)]
struct StatsJson {
    total: CountsJson,
    by_tool: BTreeMap<String, CountsJson>,
}

/// `{"records", "completed", "in_progress", "outcome_unknown", "not_applied",
/// "awaiting_approval", "approved"}`.
#[derive(Serialize)]
struct CountsJson {
    records: u64,
    completed: u64,
    in_progress: u64,
    outcome_unknown: u64,
    not_applied: u64,
    awaiting_approval: u64,
    approved: u64,
}

impl From<&StateCounts> for CountsJson {
    fn from(counts: &StateCounts) -> Self {
        CountsJson {
            records: counts.total(),
            completed: counts.completed,
            in_progress: counts.in_progress,
            outcome_unknown: counts.outcome_unknown,
            not_applied: counts.not_applied,
            awaiting_approval: counts.awaiting_approval,
            approved: counts.approved,
        }
    }
}

pub(super) async fn run(engine: &Engine, args: &StatsArgs) -> Result<Report, CliError> {
    let now = engine.clock().now();
    let stats = engine.store().stats(now).await?;
    if args.json {
        return Ok(Report::out(json_line(&StatsJson {
            total: (&stats.total).into(),
            by_tool: stats
                .by_tool
                .iter()
                .map(|(tool, counts)| (tool.clone(), counts.into()))
                .collect(),
        })));
    }
    let row = |name: &str, c: &StateCounts| {
        vec![
            name.to_owned(),
            c.total().to_string(),
            c.completed.to_string(),
            c.in_progress.to_string(),
            c.outcome_unknown.to_string(),
            c.not_applied.to_string(),
            c.awaiting_approval.to_string(),
            c.approved.to_string(),
        ]
    };
    let mut rows: Vec<Vec<String>> = stats
        .by_tool
        .iter()
        .map(|(tool, counts)| {
            let name = if tool.is_empty() {
                "- (no label)"
            } else {
                tool
            };
            row(name, counts)
        })
        .collect();
    rows.push(row("all tools", &stats.total));
    Ok(Report::out(table(
        &[
            "TOOL",
            "RECORDS",
            "COMPLETED",
            "IN PROGRESS",
            "OUTCOME UNKNOWN",
            "NOT APPLIED",
            "AWAITING APPROVAL",
            "APPROVED",
        ],
        &rows,
    )))
}
