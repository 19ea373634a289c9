// pins K8, C3: `skip` naming an argument that does not exist is an error at that name.
use idem_agent::{idempotent, ToolError};

#[idempotent(skip(ammount))]
pub fn refund(order: String, amount: u64) -> Result<String, ToolError> {
    Ok(format!("{order}{amount}"))
}

#[idempotent(skip(x))]
pub fn area((x, y): (u32, u32)) -> Result<u32, ToolError> {
    Ok(x * y)
}

fn main() {
    let _ = refund("o1".into(), 5);
    let _ = refund::tool();
    let _ = area((2, 3));
}
