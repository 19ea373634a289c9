//! `idem show`: one record, by key or by call (I2).

use idem_runtime::inspect::{CallQuery, InspectError};
use idem_runtime::store::Record;
use idem_runtime::{Engine, IdempotencyKey, StoreErrorKind};

use super::{call_query, parse_key, Report};
use crate::cli::ShowArgs;
use crate::exit::CliError;
use crate::output::{json_line, part_text, record_json, record_text, records};

pub(super) async fn run(engine: &Engine, args: &ShowArgs) -> Result<Report, CliError> {
    let now = engine.clock().now();
    let (key, record) = match &args.key {
        Some(text) => {
            let key = parse_key(text)?;
            match engine.lookup(&key).await? {
                Some(record) => (key, record),
                None => {
                    return Err(CliError::NotFound(format!(
                        "no live record of key {key} (never claimed, expired, or purged)"
                    )))
                }
            }
        }
        None => by_call(engine, &call_query(&args.call)?).await?,
    };
    let stdout = if args.json {
        json_line(&record_json(&key, &record))
    } else {
        record_text(&key, &record, now)
    };
    Ok(Report::out(stdout))
}

/// The record of `call`; when there is none, the error says how many live records the tool
/// has in that scope (I2), to tell "other arguments" from "never".
async fn by_call(engine: &Engine, call: &CallQuery) -> Result<(IdempotencyKey, Record), CliError> {
    let (key, record, same_scope) = match engine.lookup_call(call).await {
        Ok(found) => (found.key, found.record, Some(found.same_scope)),
        // A store that cannot list still reads: the count is then unknown.
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
    let hint = match same_scope {
        Some(0) => format!("{tool} has no live record in {scope} at all"),
        Some(n) => {
            let scopes: Vec<String> = call
                .scope
                .parts()
                .iter()
                .map(|p| format!(" --scope {}", part_text(p)))
                .collect();
            format!(
                "{tool} has {} in {scope}: called with other arguments? (`idem ls --tool \
                 {tool}{}`)",
                records(n as u64),
                scopes.concat()
            )
        }
        None => "this store cannot list, so other records of the scope are not counted".to_owned(),
    };
    Err(CliError::NotFound(format!(
        "no live record of {tool} in {scope} with these arguments (key {key}); {hint}"
    )))
}
