//! `idem key`: the key a call derives (I1), without touching any store.

use idem_runtime::Engine;
use serde_json::json;

use super::{call_query, Report};
use crate::cli::KeyArgs;
use crate::exit::CliError;

pub(super) fn run(engine: &Engine, args: &KeyArgs) -> Result<Report, CliError> {
    let call = call_query(&args.call)?;
    let key = engine.key_of(&call)?;
    let stdout = if args.json {
        json!({
            "key": key.as_str(),
            "tool": call.tool,
            "namespace": engine.namespace(),
            "scope": call.scope.to_string(),
        })
        .to_string()
    } else {
        key.to_string()
    };
    Ok(Report::out(stdout + "\n"))
}
