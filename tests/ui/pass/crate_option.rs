// pins C5: `crate = "…"` reaches the facade through a path of the user's choosing (a
// re-export here), and an absolute path works too.
#![deny(warnings)]

mod platform {
    pub use idem_agent as idem;
}

use idem_agent::{idempotent, ToolError};

#[idempotent(crate = "crate::platform::idem")]
pub fn through_a_reexport(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(crate = "::idem_agent", scope = "global")]
pub async fn absolute(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = through_a_reexport::tool();
    let _ = absolute::tool();
}
