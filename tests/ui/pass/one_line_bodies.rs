// pins C4: one-line bodies, async and sync, with and without pattern arguments, raise no
// warning (the generated async block must not wrap the body in braces rustc calls
// unnecessary).
#![deny(warnings)]

use idem_agent::{idempotent, CallContext, ToolError};

#[idempotent(scope = "global")]
pub async fn one_line(id: u32) -> Result<String, ToolError> { Ok(format!("{id}")) }

#[idempotent(scope = "global", dispatch = false)]
pub async fn one_line_pattern((a, b): (u32, u32)) -> Result<u32, ToolError> { Ok(a + b) }

#[idempotent(scope = "global")]
pub fn one_line_sync(id: u32) -> Result<u32, ToolError> { Ok(id) }

fn main() {
    let ctx = CallContext::new();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    assert_eq!(runtime.block_on(ctx.run(one_line(1))), Ok("1".to_owned()));
    assert_eq!(runtime.block_on(ctx.run(one_line_pattern((1, 2)))), Ok(3));
    assert_eq!(ctx.enter(|| one_line_sync(4)), Ok(4));
}
