//! The approval states on the server (A2–A5): every transition into and out of them, from
//! every state and seen state, against the memory store (the reference), by the matrix
//! every store runs (`store::transition_matrix`), with the hash and its Redis expiry
//! checked; a record's way through them is in `approval_queue`.

use super::*;
use crate::store::transition_matrix::{self, Backend, Case};
use crate::store::Denial;

/// An hour (ms): the approvals' validity in these tests.
pub(super) const HOUR_MS: u64 = 3_600_000;

/// Moves `key`'s record of `fence`, seen as `seen`, to `target` at `now`, with the entry
/// the engine writes for that move (a denial for a completion); whether it moved.
pub(super) async fn transition(
    store: &impl Store,
    key: &IdempotencyKey,
    fence: u64,
    seen: Seen,
    target: Target<'_>,
    now: Timestamp,
    expires_at: Timestamp,
) -> bool {
    let entry = transition_matrix::entry(&target, fence, now);
    store
        .transition(TransitionRequest {
            key,
            fence,
            seen,
            target,
            now,
            expires_at,
            entry,
        })
        .await
        .unwrap()
}

/// The outcome a denial by `bo` at `now` saves (A3, A5).
pub(super) fn denial(now: Timestamp) -> Envelope {
    Denial {
        actor: "bo".to_owned(),
        at: now,
        note: Some("not this month".to_owned()),
    }
    .to_envelope()
}

/// The store on a fresh prefix, and the hash and `PTTL` of the case's record before its
/// transition.
struct Matrix {
    s: Server,
    before: Vec<(String, String)>,
    pttl_before: i64,
}

impl Backend for Matrix {
    fn store(&self) -> &dyn Store {
        &self.s.store
    }

    async fn before(&mut self, k: &IdempotencyKey) {
        self.before = hash(&mut self.s, k).await;
        self.pttl_before = self.s.pttl(k).await;
    }

    async fn refused(&mut self, k: &IdempotencyKey, case: &Case<'_>) {
        assert_eq!(
            hash(&mut self.s, k).await,
            self.before,
            "{case}: nothing written"
        );
        let (pttl_before, pttl) = (self.pttl_before, self.s.pttl(k).await);
        assert!(
            pttl <= pttl_before && (pttl > 0) == (pttl_before > 0),
            "{case}: expiry kept, {pttl_before} then {pttl}"
        );
    }

    async fn moved(&mut self, k: &IdempotencyKey, case: &Case<'_>) {
        let s = &mut self.s;
        assert_eq!(s.field(k, "v").await.as_deref(), Some("5"), "{case}");
        let completed = matches!(case.target, Target::Completed { .. });
        let pttl = s.pttl(k).await;
        assert_eq!(pttl > 0, completed, "{case}: Redis expiry {pttl}");
        let (approval_at, approval_until) = case.approval();
        for (field, expected) in [
            ("approval_at", approval_at),
            ("approval_until", approval_until),
        ] {
            let stored = s
                .field(k, field)
                .await
                .map(|ms| ms.parse::<u64>().expect("ms"));
            let expected = expected.map(Timestamp::as_millis);
            assert_eq!(stored, expected, "{case}: {field}");
        }
    }
}

// pins A2, A3, A4, A5, F1, U7, S8, G1: every target (the approval ones, the run an approval
// allows, a denial, not applied, outcome unknown) tried on a record in every state with
// every seen state and a wrong fence moves exactly what the memory store (the reference)
// moves, to the same record and history, and exactly the specification's moves: awaiting
// approval only from in progress or approved, approved only from awaiting approval or in
// progress, in progress only from approved, a denial from awaiting approval; a refused
// transition writes nothing (hash, history and Redis expiry as they were); a record that
// is not completed has no Redis expiry, a completed one has one; each write makes layout 5
#[tokio::test]
async fn approval_transitions_move_as_the_reference_does() {
    let mut matrix = Matrix {
        s: server().await,
        before: Vec::new(),
        pttl_before: 0,
    };
    transition_matrix::run(&mut matrix).await;
}
