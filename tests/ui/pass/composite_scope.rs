// pins K7, P2: a composite scope (outermost first) and `audit`, alone or with other options.
#![deny(warnings)]

use idem_agent::{idempotent, ToolError};

#[idempotent(scope = "tenant+conversation", audit)]
pub fn per_tenant_conversation(order: u64) -> Result<u64, ToolError> {
    Ok(order)
}

#[idempotent(audit, scope = "org.unit+tenant+conversation", key(order))]
pub fn three_parts(order: u64, amount: u64) -> Result<u64, ToolError> {
    Ok(order + amount)
}

fn main() {
    let _ = per_tenant_conversation(1);
    let _ = three_parts(1, 2);
}
