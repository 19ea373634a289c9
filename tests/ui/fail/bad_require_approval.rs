// pins A1, C3: `require_approval` is a flag, or how long an approval is valid as a
// positive whole-millisecond duration string; anything else is an error at the value, a
// repeat at the repeated option, a typo at the typo with a suggestion; callers see no
// further error.
use idem_agent::{idempotent, ToolError};

#[idempotent(require_approval = "0s")]
pub fn refund(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(require_approval = "half an hour")]
pub async fn refund_later(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(require_approval = true)]
pub fn refund_flagged(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(require_approval = 30m)]
pub fn refund_unquoted(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(require_approval, require_approval = "30m")]
pub fn refund_twice(order: String) -> Result<String, ToolError> {
    Ok(order)
}

#[idempotent(require_aproval)]
pub fn refund_typo(order: String) -> Result<String, ToolError> {
    Ok(order)
}

fn main() {
    let _ = refund("o1".into());
    let _ = refund::tool();
    let _ = refund_later("o1".into());
    let _ = refund_flagged("o1".into());
    let _ = refund_unquoted("o1".into());
    let _ = refund_twice("o1".into());
    let _ = refund_typo("o1".into());
}
