// pins A1, C4: `require_approval` as a flag and with a validity, on async and sync tools,
// free fns (with their dispatch companion) and methods, with other options; a call of such
// a tool waits for a person's approval instead of running the body.
#![deny(warnings)]

use idem_agent::{idempotent, CallContext, Error, ToolError};

#[idempotent(require_approval)]
pub async fn send_refund(order: &str, amount: u64) -> Result<u64, ToolError> {
    let _ = order;
    Ok(amount)
}

#[idempotent(key(order), require_approval = "30m", ttl = "48h", audit)]
pub fn close_account(order: String, reason: String) -> Result<String, ToolError> {
    Ok(format!("{order}: {reason}"))
}

pub struct Bank;

impl Bank {
    #[idempotent(require_approval = "1h 30m", scope = "global", dispatch = false)]
    pub async fn wire(&self, to: String, cents: u64) -> Result<u64, ToolError> {
        let _ = to;
        Ok(cents)
    }
}

fn main() {
    let _ = send_refund::tool();
    let _ = close_account::tool();
    let _ = Bank.wire("acct".into(), 1);
    let _ = send_refund("o1", 1);
    let ctx = CallContext::new().with_conversation("c1");
    let answer = ctx.enter(|| close_account("o1".into(), "fraud".into()));
    assert!(
        matches!(answer, Err(ToolError::Idem(Error::AwaitingApproval { .. }))),
        "{answer:?}"
    );
}
