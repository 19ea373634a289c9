// pins U3, C3: `reconcile` takes the path of a fn: a string, a call or another expression
// is an error at it.
use idem_agent::{idempotent, AttemptInfo, Reconciled, ToolError};

pub fn check_refund(order: &String, attempt: &AttemptInfo) -> Reconciled<String, ToolError> {
    let _ = (order, attempt);
    Reconciled::NotDone
}

#[idempotent(reconcile = "check_refund")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(reconcile = check_refund())]
pub fn refund_called(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(reconcile = |order, attempt| check_refund(order, attempt))]
pub fn refund_closure(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(reconcile = 42)]
pub fn refund_number(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(reconcil = check_refund)]
pub fn refund_typo(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_called("o1".into());
    let _ = refund_closure("o1".into());
    let _ = refund_number("o1".into());
    let _ = refund_typo("o1".into());
}
