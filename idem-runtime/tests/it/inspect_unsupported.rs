//! A `Store` that does not implement inspection answers it with a typed `Unsupported`
//! error, never a guess (contract I6).

use std::sync::Arc;

use idem_runtime::inspect::{CallQuery, InspectError};
use idem_runtime::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, ListQuery, MarkUnknownRequest, OwnerToken,
    Record, RenewRequest, StoreFuture, TakeoverRequest,
};
use idem_runtime::{
    Engine, IdempotencyKey, MemoryStore, ScopePath, Store, StoreErrorKind, Timestamp,
};

/// A third-party store as the trait's required methods alone make it: every other operation
/// is the trait's default.
#[derive(Debug, Default)]
struct RequiredOnly(MemoryStore);

impl Store for RequiredOnly {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.0.claim(req)
    }
    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        self.0.take_over(req)
    }
    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.0.renew(req)
    }
    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        self.0.mark_unknown(req)
    }
    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        self.0.complete(req)
    }
    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        self.0.release(key, owner)
    }
    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        self.0.read(key, now)
    }
    fn backend(&self) -> &'static str {
        "required-only"
    }
}

// pins I6: list, purge, purge_matching and stats default to Unsupported, naming what was
// asked; a look-up by call that needs a listing reports it too
#[tokio::test]
async fn a_store_without_inspection_says_unsupported() {
    let store = Arc::new(RequiredOnly::default());
    let now = Timestamp::from_millis(1_000);
    let key = IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
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
