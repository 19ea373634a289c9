// pins K7, C3: a composite scope names conversation and scopes of your own, each once.
use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "tenant+call")]
pub fn with_call(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(scope = "global+conversation")]
pub fn with_global(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(scope = "tenant+tenant")]
pub fn twice(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(scope = "tenant+")]
pub fn empty_part(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(audit, audit)]
pub fn audit_twice(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

fn main() {}
