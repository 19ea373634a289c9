// pins C4: generic type parameters, where clauses, lifetimes and `impl Serialize`
// arguments (no companion for these).
#![deny(warnings)]

use std::fmt::Debug;

use idem_agent::{idempotent, ToolError};
use serde::Serialize;

#[idempotent]
pub fn record<T: Serialize + Debug>(item: T, count: u32) -> Result<String, ToolError> {
    Ok(format!("{item:?}{count}"))
}

#[idempotent]
pub async fn record_later<T, const N: usize>(items: Vec<T>, fixed: [u8; 4]) -> Result<usize, ToolError>
where
    T: Serialize + Send,
{
    Ok(items.len() + N + fixed.len())
}

#[idempotent]
pub fn describe(item: impl Serialize + Debug, tags: Vec<impl Serialize>) -> Result<String, ToolError> {
    Ok(format!("{item:?}{}", tags.len()))
}

#[idempotent]
pub async fn describe_later(item: &(impl Serialize + Sync)) -> Result<u8, ToolError> {
    let _ = item;
    Ok(1)
}

fn main() {
    let _ = record("x", 1);
    let _ = record_later::<_, 2>(vec![1, 2, 3], [0; 4]);
    let _ = describe(1, vec!["a"]);
    let _ = describe_later(&2);
}
