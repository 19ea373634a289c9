// pins C4: an associated fn without receiver and without `Self` in its signature looks
// like a free fn, so its dispatch companion struct lands in the impl block, which rustc
// rejects at the attribute; `dispatch = false` there is the fix (documented on the
// attribute). The method itself is still emitted: its caller gets no error.
use idem_agent::{idempotent, ToolError};

pub struct Bank;

impl Bank {
    #[idempotent(scope = "global")]
    pub fn rate(currency: String) -> Result<u32, ToolError> {
        Ok(currency.len() as u32)
    }
}

fn main() {
    let _ = Bank::rate("EUR".into());
}
