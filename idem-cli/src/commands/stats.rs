//! `idem stats`: live records by state, in total and per tool (I5).

use idem_runtime::store::StateCounts;
use idem_runtime::Engine;
use serde_json::{json, Map, Value};

use super::Report;
use crate::cli::StatsArgs;
use crate::exit::CliError;
use crate::output::table;

pub(super) async fn run(engine: &Engine, args: &StatsArgs) -> Result<Report, CliError> {
    let now = engine.clock().now();
    let stats = engine.store().stats(now).await?;
    if args.json {
        let by_tool: Map<String, Value> = stats
            .by_tool
            .iter()
            .map(|(tool, counts)| (tool.clone(), counts_json(counts)))
            .collect();
        let object = json!({ "total": counts_json(&stats.total), "by_tool": by_tool });
        return Ok(Report::out(object.to_string() + "\n"));
    }
    let row = |name: &str, c: &StateCounts| {
        vec![
            name.to_owned(),
            c.total().to_string(),
            c.completed.to_string(),
            c.in_progress.to_string(),
            c.outcome_unknown.to_string(),
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
        ],
        &rows,
    )))
}

/// `{"records", "completed", "in_progress", "outcome_unknown"}`.
fn counts_json(counts: &StateCounts) -> Value {
    json!({
        "records": counts.total(),
        "completed": counts.completed,
        "in_progress": counts.in_progress,
        "outcome_unknown": counts.outcome_unknown,
    })
}
