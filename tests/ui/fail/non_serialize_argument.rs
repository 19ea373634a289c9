// pins C1: an argument that is not `Serialize` is an error at its type, naming the
// argument and suggesting `skip(…)`.
use idem_agent::{idempotent, ToolError};

pub struct Card {
    pub number: String,
}

#[idempotent(dispatch = false)]
pub fn charge(card: Card, amount_cents: u64) -> Result<u64, ToolError> {
    Ok(amount_cents + card.number.len() as u64)
}

fn main() {
    let _ = charge(Card { number: "4242".into() }, 500);
}
