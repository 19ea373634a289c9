// pins C2: an error type that is not `idem_agent::IdempotentError`.
use idem_agent::idempotent;

#[idempotent]
pub fn refund(order: String) -> Result<String, String> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
}
