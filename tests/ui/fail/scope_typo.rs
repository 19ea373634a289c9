// pins K12: a scope name within two edits of a built-in one is an error at the literal
// that suggests the built-in.
use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "conversaton")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(scope = "globl")]
pub fn rebuild_index(shard: u32) -> Result<u32, ToolError> {
    Ok(shard)
}

#[idempotent(scope = "cell")]
pub fn roll_die(sides: u8) -> Result<u8, ToolError> {
    Ok(sides)
}

fn main() {
    let _ = refund("o1".into());
    let _ = rebuild_index(1);
    let _ = roll_die(6);
}
