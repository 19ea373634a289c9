// pins C3: the attribute on something that is not a supported fn.
use idem_agent::{idempotent, ToolError};

#[idempotent]
pub struct Refund {
    pub order: String,
}

#[idempotent]
pub const fn fixed(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent]
pub extern "C" fn exported(order: u64) -> u64 {
    order
}

fn main() {
    let _ = Refund { order: "o1".into() };
    let _ = fixed(1);
    let _ = exported(1);
}
