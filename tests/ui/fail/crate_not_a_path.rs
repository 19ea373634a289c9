// pins C5, C3: a `crate` value that is not a path is an error at the literal.
use idem_agent::{idempotent, ToolError};

#[idempotent(crate = "idem agent")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(crate = idem_agent)]
pub fn unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {}
