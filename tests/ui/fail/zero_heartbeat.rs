// pins L1, C3: a zero heartbeat is an error at the literal.
use idem_agent::{idempotent, ToolError};

#[idempotent(heartbeat = "0s")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
}
