// pins U2, U2a, C3: `on_unknown` is "hold" or "rerun"; anything else is an error at the
// value that explains both.
use idem_agent::{idempotent, ToolError};

#[idempotent(on_unknown = "release")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_unknown = "Rerun")]
pub async fn refund_later(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_unknown = rerun)]
pub fn refund_unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_unknown = "hold", on_unknown = "rerun")]
pub fn refund_twice(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_later("o1".into());
    let _ = refund_unquoted("o1".into());
    let _ = refund_twice("o1".into());
}
