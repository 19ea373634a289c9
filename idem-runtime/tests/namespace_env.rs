//! `IDEM_NAMESPACE` enters every key the process derives (contract K11), also for a tool
//! with its own store called outside any engine, before and after the default engine
//! exists: one call, one key, one run. (Found by the adversarial review of issue 9: that
//! path used to derive keys without the namespace until the default engine was made.)
//! Its own test binary: it sets the process's environment.

use std::sync::atomic::{AtomicUsize, Ordering};

use idem_runtime::{default_engine, prepare, CallContext, ToolError, ToolSpec};

static SPEC: ToolSpec = ToolSpec {
    store: Some("memory"),
    ..ToolSpec::new("adv_ns_refund")
};
static RUNS: AtomicUsize = AtomicUsize::new(0);

async fn call(ctx: &CallContext) -> (Result<u64, ToolError>, String) {
    let prepared = prepare(&SPEC, Some(ctx), |a| a.key("order", &4417u64).map(drop)).unwrap();
    let key = prepared.key().to_string();
    let result = prepared
        .run(async {
            RUNS.fetch_add(1, Ordering::SeqCst);
            Ok(1u64)
        })
        .await;
    (result, key)
}

// pins K11, K9, S3
#[tokio::test]
async fn the_namespace_enters_keys_of_tools_with_their_own_store() {
    // SAFETY: the only test of this binary; set before any engine is made.
    unsafe { std::env::set_var("IDEM_NAMESPACE", "tenant-a") };
    let ctx = CallContext::new().with_conversation("c-9");
    let (_, before) = call(&ctx).await;
    let engine = default_engine().unwrap();
    assert_eq!(engine.namespace(), Some("tenant-a"));
    let (_, after) = call(&ctx).await;
    assert_eq!(before, after, "K11/K9: one call, one key");
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "S3: the retry must replay");
}
