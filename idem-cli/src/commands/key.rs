//! `idem key`: the key a call derives (I1), without touching any store.

use idem_runtime::Engine;
use serde::Serialize;

use super::{call_query, Report};
use crate::cli::KeyArgs;
use crate::exit::CliError;
use crate::output::json_line;

/// `key --json`: `{"key", "tool", "namespace", "scope"}`.
#[derive(Serialize)]
struct KeyJson<'a> {
    key: &'a str,
    tool: &'a str,
    namespace: Option<&'a str>,
    scope: String,
}

pub(super) fn run(engine: &Engine, args: &KeyArgs) -> Result<Report, CliError> {
    let call = call_query(&args.call)?;
    let key = engine.key_of(&call)?;
    let stdout = if args.json {
        json_line(&KeyJson {
            key: key.as_str(),
            tool: &call.tool,
            namespace: engine.namespace(),
            scope: call.scope.to_string(),
        })
    } else {
        format!("{key}\n")
    };
    Ok(Report::out(stdout))
}
