// pins C4, K8: pattern arguments are keyed as `arg<index>` and destructured in the body.
#![deny(warnings)]

use idem_agent::{idempotent, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Point {
    pub x: i64,
    pub y: i64,
}

#[idempotent]
pub fn area((width, height): (u32, u32), Point { x, y }: Point) -> Result<i64, ToolError> {
    Ok(i64::from(width * height) + x + y)
}

#[idempotent(key(arg1), skip(arg0))]
pub async fn moved(_: u8, Point { x, mut y }: Point, (a, _): (u8, u8)) -> Result<i64, ToolError> {
    y += i64::from(a);
    Ok(x + y)
}

fn main() {
    let _ = area((2, 3), Point { x: 1, y: 1 });
    let _ = area::tool();
    let _ = moved::tool();
}
