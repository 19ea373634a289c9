// pins U3, C3: a reconcile fn that returns something else than `Reconciled<T, E>` (or a
// future of one) is an error at the reconcile path saying what it should return; one that
// takes other parameters is an error at the path too.
use idem_agent::{idempotent, AttemptInfo, ToolError};

pub fn check_refund(order: &str, attempt: &AttemptInfo) -> Result<String, ToolError> {
    let _ = attempt;
    Ok(order.to_owned())
}

#[idempotent(reconcile = check_refund)]
pub fn refund(order: &str) -> Result<String, ToolError> {
    Ok(order.to_owned())
}

pub async fn check_later(order: &str, attempt: &AttemptInfo) -> bool {
    let _ = (order, attempt);
    true
}

#[idempotent(reconcile = check_later)]
pub async fn refund_later(order: &str) -> Result<String, ToolError> {
    Ok(order.to_owned())
}

pub fn check_amount(amount: u64, attempt: &AttemptInfo) -> idem_agent::Reconciled<u64, ToolError> {
    let _ = (amount, attempt);
    idem_agent::Reconciled::NotDone
}

#[idempotent(reconcile = check_amount)]
pub fn refund_amount(amount: u64) -> Result<u64, ToolError> {
    Ok(amount)
}

fn main() {
    let _ = refund("o1");
    let _ = refund_later("o1");
    let _ = refund_amount(5);
}
