// pins issue 3 (a store whose cargo feature is off is a clear error naming the feature):
// built without idem's `redis` feature, the error is at the locator.
use idem_agent::{idempotent, ToolError};

#[idempotent(store = "redis://127.0.0.1:6379")]
async fn send_refund(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

fn main() {
    let _ = send_refund(1);
}
