// pins L1, C3: a heartbeat that is not a whole-millisecond duration string is an error at
// the literal; callers see no further error.
use idem_agent::{idempotent, ToolError};

#[idempotent(heartbeat = "every 20 seconds")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(heartbeat = 20s)]
pub fn refund_unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(heartbeat = "1500us")]
pub async fn refund_later(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_unquoted("o1".into());
    let _ = refund_later("o1".into());
}
