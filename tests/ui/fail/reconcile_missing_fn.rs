// pins U3, C3: a reconcile fn that does not exist is rustc's own error at the path.
use idem_agent::{idempotent, ToolError};

#[idempotent(reconcile = check_refund)]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
}
