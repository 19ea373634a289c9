// pins C1: an `impl Trait` argument whose type is not `Serialize`.
use idem_agent::{idempotent, ToolError};

#[idempotent]
pub fn greet(who: impl std::fmt::Display) -> Result<String, ToolError> {
    Ok(format!("hello {who}"))
}

fn main() {
    let _ = greet("ada");
}
