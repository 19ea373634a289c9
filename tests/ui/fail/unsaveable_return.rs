// pins C2: a success type that cannot be saved and replayed, in a sync and an async tool.
use idem_agent::{idempotent, ToolError};

pub struct Receipt {
    pub id: String,
}

#[idempotent]
pub fn refund(order: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: order })
}

#[idempotent]
pub async fn refund_later(order: String) -> Result<Receipt, ToolError> {
    Ok(Receipt { id: order })
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund_later("o1".into());
}
