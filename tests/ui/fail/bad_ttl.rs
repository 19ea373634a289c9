// pins S8, C3: a bad duration is an error at the literal; callers see no further error.
use idem_agent::{idempotent, ToolError};

#[idempotent(ttl = "one day")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(ttl = 24h)]
pub fn refund_unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(ttl = "30s")]
pub fn refund_short(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_unquoted("o1".into());
    let _ = refund_short("o1".into());
}
