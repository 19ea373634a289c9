// pins K6, K7, K8, S8: every scope, `name`, durations, `key(…)` and `skip(…)`.
#![deny(warnings)]

use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "conversation", ttl = "7d", lease = "30s", wait = "250ms")]
pub fn in_conversation(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(scope = "global", name = "charge.v2")]
pub fn global(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(scope = "call", lease = "0s", wait = "0s")]
pub fn per_call(sides: u32) -> Result<u32, ToolError> {
    Ok(sides)
}

#[idempotent(scope = "tenant", key(order), skip(requested_at))]
pub fn per_tenant(order: String, amount: u64, requested_at: u64) -> Result<u64, ToolError> {
    let _ = order;
    Ok(amount + requested_at)
}

#[idempotent(key())]
pub fn once_per_conversation(greeting: String) -> Result<String, ToolError> {
    Ok(greeting)
}

#[idempotent(skip(r#type))]
pub fn raw_names(r#type: String, r#ref: u8) -> Result<String, ToolError> {
    Ok(format!("{type}{ref}", type = r#type, ref = r#ref))
}

#[idempotent(
    scope = "global",
    ttl = "1h 30m",
)]
pub fn trailing_comma(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    assert_eq!(global::tool().name(), "charge.v2");
    assert_eq!(in_conversation::tool().name(), "in_conversation");
    assert_eq!(raw_names::tool().name(), "raw_names");
    let _ = (per_call::tool(), per_tenant::tool(), once_per_conversation::tool(), trailing_comma::tool());
}
