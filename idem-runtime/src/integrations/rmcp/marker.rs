//! The tool `_meta` marker of a tool keyed by its own `#[idempotent]` (contract M9).

use ::rmcp::model::{MetaObject, Tool};
use serde_json::{json, Value};

use super::names::TOOL_MARKER;
use crate::spec::ToolSpec;

/// The value the `#[idempotent]` attribute writes for `#[tool(meta = …)]`: the tool's own
/// `_meta` (`existing`, if it had one) with idem's marker `"idem/idempotent":
/// {"scope": "<scope kind>"}` added, so that an [`IdempotentServer`](super::IdempotentServer)
/// sees through `ServerHandler::get_tool` that the tool keys its own calls and passes them
/// through (M9). A hand-written tool that calls `McpCall::run` sets it the same way.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::integrations::rmcp::tool_meta;
/// use idem_agent::ToolSpec;
/// static SPEC: ToolSpec = ToolSpec::new("send_refund");
/// let meta = tool_meta(None, &SPEC);
/// assert_eq!(meta["idem/idempotent"], serde_json::json!({"scope": "conversation"}));
/// ```
#[doc(hidden)]
pub fn tool_meta(existing: Option<MetaObject>, spec: &ToolSpec) -> MetaObject {
    let mut meta = existing.unwrap_or_default();
    meta.insert(
        TOOL_MARKER.to_owned(),
        json!({ "scope": spec.scope.kind() }),
    );
    meta
}

/// Whether `tool` carries the marker of [`tool_meta`] (an object under `"idem/idempotent"`).
pub(crate) fn keys_its_own_calls(tool: &Tool) -> bool {
    tool.meta
        .as_ref()
        .and_then(|meta| meta.get(TOOL_MARKER))
        .is_some_and(Value::is_object)
}
