// pins C4: `&str`, `&[T]`, `&T`, `Option<&T>`, `Option<&str>`, `mut x: T`, async fns with
// reference arguments; the companion reads them as owned values.
#![deny(warnings)]

use idem_agent::{idempotent, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Order {
    pub id: String,
}

#[idempotent]
pub fn refund(
    order: &str,
    lines: &[u32],
    detail: &Order,
    note: Option<&str>,
    coupon: Option<&Order>,
    mut retries: u8,
) -> Result<String, ToolError> {
    retries += 1;
    Ok(format!("{order}{lines:?}{}{note:?}{}{retries}", detail.id, coupon.is_some()))
}

#[idempotent]
pub async fn refund_later<'a>(order: &'a str, lines: &[u32], note: Option<&'a [u8]>) -> Result<usize, ToolError> {
    tokio::task::yield_now().await;
    Ok(order.len() + lines.len() + note.map_or(0, <[u8]>::len))
}

#[idempotent]
pub fn adjust(total: &mut u64, by: u64) -> Result<u64, ToolError> {
    *total += by;
    Ok(*total)
}

fn main() {
    let _ = refund::tool();
    let _ = refund_later::tool();
    let _ = adjust::tool();
}
