// pins K7, C3: scope names are checked at the literal.
use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "Conversation")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(scope = "my tenant", name = "refund v2")]
pub fn refund_v2(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund_v2("o1".into());
}
