// pins C4: sync and async tools keep their signature, attributes and docs; `return` and
// `?` in the body still work.
#![deny(warnings)]

use idem_agent::{idempotent, CallContext, ToolError};

fn check(amount: u64) -> Result<u64, ToolError> {
    if amount > 1_000 {
        Err(ToolError::failed("too much"))
    } else {
        Ok(amount)
    }
}

/// Refunds an order.
#[idempotent]
#[must_use = "the refund id"]
#[inline]
pub fn refund(order: String, amount: u64) -> Result<String, ToolError> {
    let amount = check(amount)?;
    if amount == 0 {
        return Ok(String::new());
    }
    Ok(format!("{order}:{amount}"))
}

/// Refunds an order, later.
#[idempotent]
pub async fn refund_later(order: String, amount: u64) -> Result<String, ToolError> {
    let amount = check(amount)?;
    if amount == 0 {
        return Err(ToolError::failed("nothing to refund"));
    }
    Ok(format!("{order}:{amount}"))
}

#[idempotent]
fn no_arguments() -> Result<(), ToolError> {
    Ok(())
}

#[idempotent]
pub(crate) unsafe fn unchecked(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let ctx = CallContext::new().with_conversation("conv");
    ctx.enter(|| {
        assert_eq!(refund("o1".into(), 5).unwrap(), "o1:5");
        assert!(refund("o1".into(), 5_000).is_err());
        no_arguments().unwrap();
        assert_eq!(unsafe { unchecked("o2".into()) }.unwrap(), "o2");
    });
    let later = pollster_block_on(ctx.run(refund_later("o1".into(), 7)));
    assert_eq!(later.unwrap(), "o1:7");
}

fn pollster_block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}
