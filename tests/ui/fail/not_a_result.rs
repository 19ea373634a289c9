// pins C2: a return type that is not a `Result`.
use idem_agent::idempotent;

#[idempotent]
pub fn roll(sides: u32) -> u32 {
    sides
}

#[idempotent]
pub async fn roll_later(sides: u32) -> u32 {
    sides
}

fn main() {
    let _ = roll(6);
    let _ = roll_later(6);
}
