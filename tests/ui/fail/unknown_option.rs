// pins C3: an unknown option is an error at its name, with a suggestion.
use idem_agent::{idempotent, ToolError};

#[idempotent(tll = "1h")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(timeout = "5s")]
pub fn refund_again(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund_again("o1".into());
}
