// pins C2, C3: a tool without a return type is an error at its name; the fn still exists.
use idem_agent::idempotent;

#[idempotent]
pub fn notify(user: String) {
    let _ = user;
}

fn main() {
    notify("ada".into());
    let _ = notify::tool();
}
