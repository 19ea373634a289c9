// pins C4: an async tool whose future is not `Send` compiles, but its dispatch companion
// needs `Send` (dispatchers run calls concurrently): the error says why.
use std::rc::Rc;

use idem_agent::{idempotent, ToolError};

#[idempotent]
pub async fn refund(order: String) -> Result<usize, ToolError> {
    let shared = Rc::new(order);
    tokio::task::yield_now().await;
    Ok(shared.len())
}

fn main() {
    let _ = refund("o".into());
}
