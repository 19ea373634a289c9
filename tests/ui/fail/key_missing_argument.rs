// pins K8, C3: `key` naming an argument that does not exist, the receiver, or a skipped
// argument, is an error at that name.
use idem_agent::{idempotent, ToolError};

#[idempotent(key(order_id))]
pub fn refund(order: String, amount: u64) -> Result<String, ToolError> {
    Ok(format!("{order}{amount}"))
}

#[idempotent(skip(amount), key(order, amount))]
pub fn refund_twice(order: String, amount: u64) -> Result<String, ToolError> {
    Ok(format!("{order}{amount}"))
}

pub struct Shop;

impl Shop {
    #[idempotent(key(self))]
    pub fn refund(&self, order: String) -> Result<String, ToolError> {
        Ok(order)
    }
}

fn main() {
    let _ = refund("o1".into(), 5);
    let _ = refund_twice("o1".into(), 5);
    let _ = Shop.refund("o1".into());
}
