// pins C4, K7, K10: an explicit `&CallContext` argument is the call's context and never
// part of the key; the key is available in the body.
#![deny(warnings)]

use idem_agent::{idempotent, CallContext, ToolError};

#[idempotent]
pub fn refund(ctx: &CallContext, order: String) -> Result<String, ToolError> {
    Ok(format!("{order}:{}", ctx.key().map(ToString::to_string).unwrap_or_default()))
}

#[idempotent(scope = "call")]
pub async fn roll<'c>(sides: u32, context: &'c idem_agent::CallContext) -> Result<u32, ToolError> {
    let _ = (context, idem_agent::current_key());
    Ok(sides)
}

fn main() {
    let ctx = CallContext::new().with_conversation("conv").with_tool_call("call_1");
    assert!(refund(&ctx, "o1".into()).unwrap().starts_with("o1:"));
    let _ = refund::tool();
    let _ = roll::tool();
}
