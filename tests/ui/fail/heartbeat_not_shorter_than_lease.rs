// pins L1, C3: a heartbeat as long as the lease or longer (the lease written, else the
// 60 s default) is an error at the heartbeat: the lease would lapse between two renewals.
use idem_agent::{idempotent, ToolError};

#[idempotent(heartbeat = "60s")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(lease = "10s", heartbeat = "30s")]
pub async fn refund_later(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(heartbeat = "5m", lease = "2m")]
pub fn refund_slowly(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_later("o1".into());
    let _ = refund_slowly("o1".into());
}
