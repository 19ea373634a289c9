//! Every transition from every state, on this store and on the memory store (the
//! reference, `MemoryStore::transition`): the same answer, the same record and the same
//! history (A2–A4, U2, U6, U7, F1), by the matrix every store runs
//! (`store::transition_matrix`), with the approval columns checked on the server.

use super::{PostgresStore, Schema};
use crate::key::IdempotencyKey;
use crate::store::transition_matrix::{self, Backend, Case};
use crate::store::Store;

/// The store in a fresh schema, and the schema to read its raw columns (dropped after the
/// store).
struct Matrix {
    store: PostgresStore,
    schema: Schema,
}

impl Backend for Matrix {
    fn store(&self) -> &dyn Store {
        &self.store
    }

    async fn moved(&mut self, k: &IdempotencyKey, case: &Case<'_>) {
        let (approval_at, approval_until) = case.approval();
        for (column, expected) in [
            ("approval_at", approval_at),
            ("approval_until", approval_until),
        ] {
            let sql = format!("SELECT {column} FROM {{schema}}.records WHERE key = '{k}'");
            let stored = self.schema.value(&sql).await;
            let expected = expected.map(|t| t.as_millis().to_string());
            assert_eq!(stored, expected, "{case}: {column}");
        }
    }
}

// pins A2, A3, A4, A5, U2, U6, U7, F1: every transition (6 targets) tried on a record in
// every state (6) as every state seen (7), on the right fence and on a stale one, answers
// what the specification's table says, and leaves the same record and history as the
// memory store: a transition applies only on the record's fence and the state seen, moves
// the record to exactly the target's state (approval columns set only in the two approval
// states), and appends its entry; a refused one writes nothing, history included
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_from_every_state_matches_the_memory_store() {
    let schema = Schema::fresh();
    let store = schema.store();
    transition_matrix::run(&mut Matrix { store, schema }).await;
}
