//! Unit tests of the PostgreSQL store that need no server: the collection cutoff and
//! the redaction of passwords.

use super::{redact, MARGIN_PAST_CUTOFF};
use crate::clock::Timestamp;
use crate::store::{gc_cutoff_by, GC_DRIFT_MARGIN_MS};

// pins G1: the background collection's SQL cutoff, min(caller's now, server's now) −
// MARGIN_PAST_CUTOFF, is the shared rule's `gc_cutoff_by`, and deletes nothing (a
// negative cutoff) where that rule allows nothing
#[test]
fn the_collection_cutoff_is_the_shared_rule() {
    let margin = GC_DRIFT_MARGIN_MS;
    let year = 365 * 86_400_000;
    for (now, server) in [
        (0, 0),
        (margin, 10 * margin),
        (margin + 1, 10 * margin),
        (10 * margin, margin + 1),
        (1_796_000_000_000 + year, 1_796_000_000_000),
        (1_796_000_000_000, 1_796_000_000_000 + year),
    ] {
        let sql = i64::try_from(u64::min(now, server)).unwrap() - MARGIN_PAST_CUTOFF;
        match gc_cutoff_by(Timestamp::from_millis(now), Timestamp::from_millis(server)) {
            Some(cutoff) => assert_eq!(sql, cutoff.as_millis() as i64, "{now} {server}"),
            None => assert!(sql < 0, "{now} {server}: no row has a negative time"),
        }
    }
}

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact("postgres://agent:s3cr:et@db:5432/x?sslmode=disable"),
        "postgres://agent:***@db:5432/x?sslmode=disable"
    );
    assert_eq!(redact("postgres://agent@db/x"), "postgres://agent@db/x");
    assert_eq!(redact("postgresql://db/x"), "postgresql://db/x");
    assert_eq!(
        redact("host=db user=agent password=hunter2 dbname=x"),
        "host=db user=agent password=*** dbname=x"
    );
}
