// pins C3/C4 with `store = …`: a tool with its own store locator compiles (memory is a
// default feature), alongside the other options.
use idem_agent::{idempotent, ToolError};

#[idempotent(store = "memory", scope = "global", ttl = "1h")]
async fn send_refund(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(store = " memory ")]
fn send_mail(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {
    let _ = (send_refund(1), send_mail(String::new()));
}
