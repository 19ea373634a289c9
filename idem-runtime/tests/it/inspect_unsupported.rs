//! A `Store` that does not implement inspection answers it with a typed `Unsupported`
//! error, never a guess (contract I6).

use crate::support;

use std::sync::Arc;

use idem_runtime::inspect::{CallQuery, InspectError};
use idem_runtime::store::ListQuery;
use idem_runtime::{Engine, ScopePath, Store, StoreErrorKind, Timestamp};
use support::FaultyStore;

// pins I6: list, purge, purge_matching and stats default to Unsupported, naming what was
// asked; a look-up by call that needs a listing reports it too
#[tokio::test]
async fn a_store_without_inspection_says_unsupported() {
    let store = Arc::new(FaultyStore::default());
    let now = Timestamp::from_millis(1_000);
    let key = idem_runtime::IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
    let query = ListQuery::new();
    let errors = [
        store.list(&query, now).await.map(drop).unwrap_err(),
        store.purge(&key, true, now).await.map(drop).unwrap_err(),
        store
            .purge_matching(&query, true, now)
            .await
            .map(drop)
            .unwrap_err(),
        store.stats(now).await.map(drop).unwrap_err(),
    ];
    for (error, what) in errors
        .iter()
        .zip(["listing", "purging", "purging", "counting"])
    {
        assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
        assert!(error.message.contains(what), "{error}");
    }
    let engine = Engine::from_shared(store, Arc::new(idem_runtime::SystemClock));
    let call = CallQuery::new(
        "send_refund",
        ScopePath::new().with("conversation", "c-9"),
        serde_json::json!({"order_id": 4417}),
    );
    match engine.lookup_call(&call).await {
        Err(InspectError::Store(error)) => assert_eq!(error.kind, StoreErrorKind::Unsupported),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(
        engine.lookup(&key).await.unwrap().is_none(),
        "reads still work"
    );
}
