// pins C4
//! Arguments named like the generated code's locals still work (C4): the generated locals
//! have mixed-site hygiene, so they neither see nor shadow the user's names.
#![deny(warnings)]

use idem_agent::{idempotent, CallContext, ToolError};

#[idempotent(scope = "global", dispatch = false)]
pub fn h_idem_args(__idem_args: u32) -> Result<u32, ToolError> {
    Ok(__idem_args)
}

#[idempotent(scope = "global", dispatch = false)]
pub async fn h_idem_prepared(__idem_prepared: u32) -> Result<u32, ToolError> {
    Ok(__idem_prepared)
}

#[idempotent(scope = "global")]
pub fn ordinary_names(args: u32, prepared: u32, spec: u32, body: u32) -> Result<u32, ToolError> {
    Ok(args + prepared + spec + body)
}

fn main() {
    let ctx = CallContext::new();
    assert_eq!(ctx.enter(|| h_idem_args(7)), Ok(7));
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    assert_eq!(runtime.block_on(ctx.run(h_idem_prepared(8))), Ok(8));
    assert_eq!(ctx.enter(|| ordinary_names(1, 2, 3, 4)), Ok(10));
}
