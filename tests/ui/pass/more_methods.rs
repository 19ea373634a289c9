// pins C4: methods of generic impls, `Self`-typed arguments, `async fn` in trait impls,
// deprecated tools, and async tools whose future is not `Send` (they compile; only the
// dispatch companion needs `Send`, so they opt out of it).
#![deny(warnings)]

use std::rc::Rc;

use idem_agent::{idempotent, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Shelf<T> {
    items: Vec<T>,
}

impl<T: Serialize + Clone> Shelf<T> {
    #[idempotent(scope = "global")]
    pub fn put(&mut self, item: T) -> Result<usize, ToolError> {
        self.items.push(item);
        Ok(self.items.len())
    }

    #[idempotent(scope = "global")]
    pub fn merge(&mut self, other: Self) -> Result<usize, ToolError> {
        self.items.extend(other.items);
        Ok(self.items.len())
    }
}

trait Payments {
    fn pay(&self, order: String) -> impl std::future::Future<Output = Result<u64, ToolError>> + Send;
    async fn refund(&self, order: String) -> Result<u64, ToolError>;
}

pub struct Stripe;

impl Payments for Stripe {
    #[idempotent(scope = "global")]
    async fn pay(&self, order: String) -> Result<u64, ToolError> {
        Ok(order.len() as u64)
    }

    #[idempotent(scope = "global")]
    async fn refund(&self, order: String) -> Result<u64, ToolError> {
        Ok(order.len() as u64)
    }
}

/// Old name.
#[deprecated = "use the other one"]
#[idempotent]
pub fn old_refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(dispatch = false)]
pub async fn not_send(order: String) -> Result<usize, ToolError> {
    let shared = Rc::new(order);
    tokio::task::yield_now().await;
    Ok(shared.len())
}

fn main() {
    let mut shelf = Shelf { items: vec![1] };
    let _ = shelf.put(2);
    let _ = shelf.merge(Shelf { items: vec![3] });
    let _ = Stripe.pay("o".into());
    let _ = Stripe.refund("o".into());
    let _ = not_send("o".into());
}
