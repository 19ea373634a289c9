// pins C4: the dispatch companion: one line to register a tool; it follows the fn's
// visibility and `cfg`; `dispatch = false` leaves it out; nested and private tools work.
#![deny(warnings, missing_docs)]
//! A crate with documented public tools.

use idem_agent::dispatch::Tool;
use idem_agent::{idempotent, ToolError};

/// Sends a refund.
#[idempotent]
pub async fn send_refund(order: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{order}:{amount_cents}"))
}

/// Only on unix.
#[cfg(unix)]
#[idempotent]
pub fn unix_only(path: String) -> Result<String, ToolError> {
    Ok(path)
}

/// No companion: a handle argument cannot come from JSON.
#[idempotent(skip(db), dispatch = false)]
pub fn with_handle(db: &std::sync::Mutex<u32>, order: String) -> Result<String, ToolError> {
    *db.lock().unwrap() += 1;
    Ok(order)
}

/// A type named like a tool does not clash with a tool of another name.
pub struct Receipt;

mod tools {
    use idem_agent::{idempotent, ToolError};

    #[idempotent]
    pub(crate) fn private_tool(order: String) -> Result<String, ToolError> {
        Ok(order)
    }
}

fn registry() -> Vec<Tool> {
    #[idempotent]
    fn nested(order: String) -> Result<String, ToolError> {
        Ok(order)
    }
    let mut tools = vec![send_refund::tool(), tools::private_tool::tool(), nested::tool()];
    #[cfg(unix)]
    tools.push(unix_only::tool());
    tools
}

fn main() {
    let names: Vec<String> = registry().iter().map(|t| t.name().to_owned()).collect();
    assert!(names.contains(&"send_refund".to_owned()));
    let _ = with_handle(&std::sync::Mutex::new(0), "o".into());
    let _ = Receipt;
}
