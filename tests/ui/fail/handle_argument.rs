// pins K8, C1: a skipped handle argument is out of the key, but the dispatch companion
// still reads every argument from JSON: the error says to write `dispatch = false`.
use idem_agent::{idempotent, ToolError};

pub struct Db;

#[idempotent(skip(db))]
pub fn refund(db: &Db, order: String) -> Result<String, ToolError> {
    let _ = db;
    Ok(order)
}

fn main() {
    let _ = refund(&Db, "o1".into());
}
