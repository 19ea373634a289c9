// pins C3: `store = …` must name a known backend; the error is at the literal.
use idem_agent::{idempotent, ToolError};

#[idempotent(store = "mysql://db/agents")]
async fn send_refund(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(store = "sqlite:")]
async fn send_mail(to: String) -> Result<String, ToolError> {
    Ok(to)
}

#[idempotent(store = sqlite)]
async fn charge(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

fn main() {
    let _ = (send_refund(1), send_mail(String::new()), charge(2));
}
