// pins U4, C3: `on_cancel` is "hold" or "release"; anything else is an error at the value
// that lists both.
use idem_agent::{idempotent, ToolError};

#[idempotent(on_cancel = "retry")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_cancel = "Release")]
pub async fn refund_later(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_cancel = hold)]
pub fn refund_unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(on_cancel = "hold", on_cancel = "release")]
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
