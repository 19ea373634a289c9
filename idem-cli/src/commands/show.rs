//! `idem show`: one record, by key or by call (I2), and with `--history` its transitions
//! (U7).

use idem_runtime::inspect::{CallQuery, InspectError};
use idem_runtime::store::Record;
use idem_runtime::{Engine, IdempotencyKey, StoreErrorKind};

use super::{call_query, parse_key, Report};
use crate::cli::ShowArgs;
use crate::exit::CliError;
use crate::output::{
    history_text, json_line, part_text, record_json, record_text, record_with_history_json, records,
};

pub(super) async fn run(engine: &Engine, args: &ShowArgs) -> Result<Report, CliError> {
    let (key, record) = match &args.key {
        Some(text) => {
            let key = parse_key(text)?;
            match engine.lookup(&key).await? {
                Some(record) => (key, record),
                None => return Err(no_record(&key)),
            }
        }
        None => by_call(engine, &call_query(&args.call)?).await?,
    };
    let now = engine.clock().now();
    if !args.history {
        let stdout = if args.json {
            json_line(&record_json(&key, &record, now))
        } else {
            record_text(&key, &record, now)
        };
        return Ok(Report::out(stdout));
    }
    // A store that keeps no histories answers Unsupported: exit 3 with its message.
    let Some(history) = engine.history(&key).await? else {
        // Deleted (purged, or released) between the two reads.
        return Err(no_record(&key));
    };
    let stdout = if args.json {
        json_line(&record_with_history_json(&key, &record, &history, now))
    } else {
        record_text(&key, &record, now) + &history_text(&history, now)
    };
    Ok(Report::out(stdout))
}

fn no_record(key: &IdempotencyKey) -> CliError {
    CliError::NotFound(format!(
        "no live record of key {key} (never claimed, expired, or purged)"
    ))
}

/// The record of `call`; when there is none, the error says how many live records the tool
/// has in exactly that scope, and how many in narrower ones (I2), to tell "other
/// arguments" and "a scope part missing" from "never".
async fn by_call(engine: &Engine, call: &CallQuery) -> Result<(IdempotencyKey, Record), CliError> {
    let (key, record, counts) = match engine.lookup_call(call).await {
        Ok(found) => (
            found.key,
            found.record,
            Some((found.same_scope, found.nested_scope)),
        ),
        // A store that cannot list still reads: the counts are then unknown.
        Err(InspectError::Store(e)) if e.kind == StoreErrorKind::Unsupported => {
            let key = engine.key_of(call)?;
            let record = engine.lookup(&key).await?;
            (key, record, None)
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(record) = record {
        return Ok((key, record));
    }
    let tool = &call.tool;
    let mut scope = if call.scope.is_global() {
        "the global scope".to_owned()
    } else {
        call.scope.to_string()
    };
    if let Some(ns) = engine.namespace() {
        scope.push_str(&format!(" of namespace {ns}"));
    }
    let scopes: String = call
        .scope
        .parts()
        .iter()
        .map(|p| format!(" --scope {}", part_text(p)))
        .collect();
    let ls = format!("`idem ls --tool {tool}{scopes}`");
    let hint = match counts {
        Some((0, 0)) => format!("{tool} has no live record in {scope} at all"),
        Some((same, 0)) => format!(
            "{tool} has {} in {scope}: called with other arguments? ({ls})",
            records(same as u64)
        ),
        Some((0, nested)) => format!(
            "{tool} has no live record in {scope} itself, but {} in narrower scopes within \
             it: pass --scope for each part of the call's scope (`--scope \
             conversation=ID`, outermost first; {ls} shows their scopes)",
            records(nested as u64)
        ),
        Some((same, nested)) => format!(
            "{tool} has {} in {scope}: called with other arguments? And {} in narrower \
             scopes within it: pass --scope for each part of the call's scope ({ls} shows \
             their scopes)",
            records(same as u64),
            records(nested as u64)
        ),
        None => "this store cannot list, so other records of the scope are not counted".to_owned(),
    };
    Err(CliError::NotFound(format!(
        "no live record of {tool} in {scope} with these arguments (key {key}); {hint}"
    )))
}
