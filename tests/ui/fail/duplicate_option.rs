// pins C3: an option given twice is an error at the second one.
use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "global", ttl = "1h", scope = "call")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
}
