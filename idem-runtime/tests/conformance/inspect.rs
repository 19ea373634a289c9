//! The inspection part of the suite (contract P1, P2, I1–I5, K7 composite scopes, K11):
//! labels written by claims, look-ups by call, listing with filters and a cursor, purging
//! with and without force, counts, and tenants that never share a record. Every backend
//! runs it through `conformance_suite!`.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_runtime::inspect::CallQuery;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    ClaimRequest, ListCursor, ListQuery, OwnerToken, PurgeOutcome, StateFilter,
};
use idem_runtime::{
    prepare, CallContext, CallStatus, Engine, RecordLabel, Scope, ScopePath, ToolError, ToolSpec,
};
use serde_json::json;

use super::{harness, Factory};
use crate::support::{default_spec, key_of, refund, spec, Harness};

fn conversation(id: &str) -> ScopePath {
    ScopePath::new().with("conversation", id)
}

/// Claims `key` directly with `label`, leaving it in progress.
async fn claim_in_progress(h: &Harness, key: &IdempotencyKey, label: &RecordLabel) {
    let now = h.now();
    let fingerprint = idem_runtime::key::derive_fingerprint(
        &idem_runtime::canonical::to_canonical(&json!({})).unwrap(),
    );
    h.store
        .claim(ClaimRequest {
            key,
            fingerprint: &fingerprint,
            owner: OwnerToken::random(),
            now,
            lease_until: now.saturating_add(Duration::from_secs(60)),
            expires_at: now.saturating_add(Duration::from_secs(3600)),
            label,
        })
        .await
        .unwrap();
}

fn tick(h: &Harness) {
    h.clock.advance(Duration::from_millis(1));
}

// pins P1, P2: a claim stores the tool, the scope as parts and the fence, and no arguments
pub async fn records_carry_tool_scope_and_fence_but_no_arguments(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("c-9");
    let spec = default_spec();
    refund(spec, &ctx, &h.log, 4417).await.unwrap();
    let key = key_of(spec, &ctx, 4417);
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert_eq!(record.fence, 1);
    assert_eq!(
        record.label,
        Some(RecordLabel::new("send_refund", conversation("c-9")))
    );
}

// pins P2: a tool that opts in to audit keeps its canonical key arguments, never the
// fingerprint-only ones
pub async fn audited_tools_keep_their_key_arguments(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("c-9");
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        audit: true,
        ..*spec("audited_refund", 86_400_000, 60_000, 5_000)
    }));
    let prepared = prepare(spec, Some(&ctx), |a| {
        a.key("order_id", &4417)?
            .fingerprint("amount_cents", &500)?;
        Ok(())
    })
    .unwrap();
    let key = prepared.key().clone();
    let done: Result<u32, ToolError> = prepared.run(async { Ok(1) }).await;
    done.unwrap();
    let label = h
        .store
        .read(&key, h.now())
        .await
        .unwrap()
        .unwrap()
        .label
        .unwrap();
    assert_eq!(label.key_args.as_deref(), Some(r#"{"order_id":4417}"#));
}

// pins I1, I2: the key of a call from tool, scope and arguments equals the call's own; a
// look-up with other arguments says how many records the scope holds
pub async fn a_call_is_found_by_tool_scope_and_arguments(make: Factory) {
    let h = harness(make);
    let ctx = h.ctx("c-9");
    static SPEC: ToolSpec = ToolSpec::new("send_refund");
    let prepared = prepare(&SPEC, Some(&ctx), |a| {
        a.key("order_id", &4417)?.key("amount_cents", &500)?;
        Ok(())
    })
    .unwrap();
    let key = prepared.key().clone();
    let done: Result<String, ToolError> = prepared.run(async { Ok("refunded".to_owned()) }).await;
    done.unwrap();

    let call = CallQuery::new(
        "send_refund",
        conversation("c-9"),
        json!({"amount_cents": 500, "order_id": 4417}),
    );
    assert_eq!(h.engine.key_of(&call).unwrap(), key);
    let found = h.engine.lookup_call(&call).await.unwrap();
    assert_eq!(found.key, key);
    let record = found.record.expect("the call's record");
    assert_eq!(record.label.unwrap().tool, "send_refund");
    assert_eq!(
        h.engine.lookup(&key).await.unwrap().map(|r| r.fence),
        Some(1)
    );

    let missing_one = CallQuery::new(
        "send_refund",
        conversation("c-9"),
        json!({"order_id": 4417}),
    );
    let not_found = h.engine.lookup_call(&missing_one).await.unwrap();
    assert_eq!(not_found.record, None);
    assert_eq!(not_found.same_scope, 1, "one record of the tool in c-9");
    let elsewhere = CallQuery::new(
        "send_refund",
        conversation("c-10"),
        json!({"order_id": 4417}),
    );
    assert_eq!(
        h.engine.lookup_call(&elsewhere).await.unwrap().same_scope,
        0
    );
    assert!(h
        .engine
        .key_of(&CallQuery::new("t", conversation("c"), json!([1])))
        .unwrap_err()
        .to_string()
        .contains("JSON object"));
}

// pins I3: list filters by tool, scope prefix, state and creation time; expired records are
// not listed
pub async fn list_filters_by_tool_scope_state_and_time(make: Factory) {
    let h = harness(make);
    let refunds = spec("send_refund", 10_000, 1_000, 0);
    let emails = spec("send_email", 100_000, 1_000, 0);
    let start = h.now();
    refund(refunds, &h.ctx("c-1"), &h.log, 1).await.unwrap();
    tick(&h);
    refund(refunds, &h.ctx("c-1"), &h.log, 2).await.unwrap();
    tick(&h);
    refund(emails, &h.ctx("c-2"), &h.log, 3).await.unwrap();
    tick(&h);
    let running = key_of(emails, &h.ctx("c-1"), 4);
    claim_in_progress(
        &h,
        &running,
        &RecordLabel::new("send_email", conversation("c-1")),
    )
    .await;
    tick(&h);
    let now = h.now();
    let keys = |query: ListQuery| {
        let store = h.store.clone();
        async move {
            let page = store.list(&query, now).await.unwrap();
            page.records
                .iter()
                .map(|r| {
                    r.record.label.clone().unwrap().tool
                        + "/"
                        + &r.record.label.clone().unwrap().scope.to_string()
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        keys(ListQuery::new()).await,
        [
            "send_email/conversation=c-1",
            "send_email/conversation=c-2",
            "send_refund/conversation=c-1",
            "send_refund/conversation=c-1",
        ],
        "newest first"
    );
    assert_eq!(keys(ListQuery::new().tool("send_refund")).await.len(), 2);
    assert_eq!(
        keys(ListQuery::new().scope(conversation("c-1"))).await,
        [
            "send_email/conversation=c-1",
            "send_refund/conversation=c-1",
            "send_refund/conversation=c-1",
        ]
    );
    assert_eq!(
        keys(ListQuery::new().scope(conversation("c"))).await.len(),
        0
    );
    assert_eq!(
        keys(ListQuery::new().state(StateFilter::InProgress)).await,
        ["send_email/conversation=c-1"]
    );
    assert_eq!(
        keys(ListQuery::new().state(StateFilter::Completed))
            .await
            .len(),
        3
    );
    let window = ListQuery {
        created_from: Some(start.saturating_add(Duration::from_millis(1))),
        created_before: Some(start.saturating_add(Duration::from_millis(3))),
        ..ListQuery::new()
    };
    assert_eq!(
        keys(window).await,
        [
            "send_email/conversation=c-2",
            "send_refund/conversation=c-1"
        ]
    );
    let page = h.store.list(&ListQuery::new(), now).await.unwrap();
    assert!(page.records.iter().all(|r| r.record.fence == 1));
    assert_eq!(page.next, None);
    // the refunds' 10 s TTL passes: they expire and are no longer listed
    let later = now.saturating_add(Duration::from_secs(10));
    let listed = h.store.list(&ListQuery::new(), later).await.unwrap();
    assert!(
        listed
            .records
            .iter()
            .all(|r| r.record.label.as_ref().unwrap().tool == "send_email"),
        "{listed:?}"
    );
}

// pins I3: pages of `limit` records, newest first, with a cursor that round-trips through
// its text; every record once
pub async fn list_pages_follow_the_cursor(make: Factory) {
    let h = harness(make);
    let spec = default_spec();
    let ctx = h.ctx("c-1");
    for order in 0..25 {
        refund(spec, &ctx, &h.log, order).await.unwrap();
        if order % 2 == 0 {
            tick(&h); // pairs share a created_at: the key breaks the tie
        }
    }
    let now = h.now();
    let mut seen = Vec::new();
    let mut query = ListQuery::new().limit(10);
    let mut pages = 0;
    loop {
        let page = h.store.list(&query, now).await.unwrap();
        pages += 1;
        assert!(page.records.len() <= 10);
        seen.extend(
            page.records
                .iter()
                .map(|r| (r.record.created_at, r.key.clone())),
        );
        match page.next {
            Some(cursor) => {
                let text = cursor.to_string();
                query = query.after(text.parse::<ListCursor>().unwrap());
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first, then key descending");
    assert_eq!(seen.iter().map(|s| &s.1).collect::<BTreeSet<_>>().len(), 25);
    assert!("12.nothex".parse::<ListCursor>().is_err());
}

// pins I4: purge deletes a completed record (the next call runs again), keeps one in
// progress without force, deletes it with force, and says when nothing was there
pub async fn purge_deletes_one_key_and_needs_force_for_in_progress(make: Factory) {
    let h = harness(make);
    let spec = default_spec();
    let ctx = h.ctx("c-9");
    refund(spec, &ctx, &h.log, 4417).await.unwrap();
    let key = key_of(spec, &ctx, 4417);
    let purged = h.store.purge(&key, false, h.now()).await.unwrap();
    assert!(
        matches!(purged, PurgeOutcome::Deleted(ref r) if r.label.is_some()),
        "{purged:?}"
    );
    assert_eq!(h.store.read(&key, h.now()).await.unwrap(), None);
    assert_eq!(
        h.store.purge(&key, false, h.now()).await.unwrap(),
        PurgeOutcome::Absent
    );
    refund(spec, &ctx, &h.log, 4417).await.unwrap();
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    assert_eq!(h.log.len(), 2, "purged: the body ran again");

    let running = key_of(spec, &ctx, 1);
    claim_in_progress(
        &h,
        &running,
        &RecordLabel::new("send_refund", conversation("c-9")),
    )
    .await;
    let kept = h.store.purge(&running, false, h.now()).await.unwrap();
    assert!(matches!(kept, PurgeOutcome::Kept(_)), "{kept:?}");
    assert!(h.store.read(&running, h.now()).await.unwrap().is_some());
    let forced = h.store.purge(&running, true, h.now()).await.unwrap();
    assert!(matches!(forced, PurgeOutcome::Deleted(_)), "{forced:?}");
    assert_eq!(h.store.read(&running, h.now()).await.unwrap(), None);
}

// pins I4: purging by filter deletes what matches, keeps in-progress records without force
pub async fn purge_matching_deletes_what_the_filter_selects(make: Factory) {
    let h = harness(make);
    let spec = default_spec();
    for order in 0..3 {
        refund(spec, &h.ctx("c-1"), &h.log, order).await.unwrap();
    }
    refund(spec, &h.ctx("c-2"), &h.log, 9).await.unwrap();
    let running = key_of(spec, &h.ctx("c-1"), 7);
    claim_in_progress(
        &h,
        &running,
        &RecordLabel::new("send_refund", conversation("c-1")),
    )
    .await;
    let c1 = ListQuery::new().scope(conversation("c-1")).limit(1);
    let counts = h.store.purge_matching(&c1, false, h.now()).await.unwrap();
    assert_eq!(
        (counts.deleted, counts.kept),
        (3, 1),
        "the limit does not apply"
    );
    let forced = h.store.purge_matching(&c1, true, h.now()).await.unwrap();
    assert_eq!((forced.deleted, forced.kept), (1, 0));
    let left = h.store.list(&ListQuery::new(), h.now()).await.unwrap();
    assert_eq!(left.records.len(), 1);
    assert_eq!(
        left.records[0].record.label.as_ref().unwrap().scope,
        conversation("c-2")
    );
}

// pins I5: counts of live records by state and by tool
pub async fn stats_count_live_records_by_state_and_tool(make: Factory) {
    let h = harness(make);
    let refunds = spec("send_refund", 10_000, 1_000, 0);
    let emails = default_spec();
    let emails: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        name: "send_email",
        ..*emails
    }));
    for order in 0..3 {
        refund(refunds, &h.ctx("c-1"), &h.log, order).await.unwrap();
    }
    refund(emails, &h.ctx("c-1"), &h.log, 1).await.unwrap();
    let running = key_of(emails, &h.ctx("c-1"), 2);
    claim_in_progress(
        &h,
        &running,
        &RecordLabel::new("send_email", conversation("c-1")),
    )
    .await;
    let stats = h.store.stats(h.now()).await.unwrap();
    assert_eq!(stats.total.completed, 4);
    assert_eq!(stats.total.in_progress, 1);
    assert_eq!(stats.total.total(), 5);
    assert_eq!(stats.by_tool["send_refund"].completed, 3);
    assert_eq!(stats.by_tool["send_email"].completed, 1);
    assert_eq!(stats.by_tool["send_email"].in_progress, 1);
    let later = h.now().saturating_add(Duration::from_secs(10));
    let stats = h.store.stats(later).await.unwrap();
    assert!(
        !stats.by_tool.contains_key("send_refund"),
        "expired: {stats:?}"
    );
}

// pins K7, K11, P1: two tenants with the same conversation id, tool and arguments on one
// shared store never replay each other's outcome, by a composite scope or by namespaces;
// records show the tenant
pub async fn tenants_never_share_a_record(make: Factory) {
    let h = harness(make);
    static TENANT_SCOPED: ToolSpec = ToolSpec {
        scope: Scope::Composite {
            kind: "tenant+conversation",
            parts: &[Scope::Named("tenant"), Scope::Conversation],
        },
        ..ToolSpec::new("send_refund")
    };
    for tenant in ["acme", "globex"] {
        let ctx = h.ctx("c-1").with_scope("tenant", tenant);
        refund(&TENANT_SCOPED, &ctx, &h.log, 4417).await.unwrap();
        assert_eq!(
            ctx.last_outcome().unwrap().status,
            CallStatus::Executed,
            "{tenant}"
        );
    }
    assert_eq!(h.log.len(), 2, "two executions, no cross-tenant replay");
    let acme = ScopePath::new().with("tenant", "acme");
    let listed = h
        .store
        .list(&ListQuery::new().scope(acme.clone()), h.now())
        .await
        .unwrap();
    assert_eq!(listed.records.len(), 1);
    assert_eq!(
        listed.records[0].record.label.as_ref().unwrap().scope,
        acme.with("conversation", "c-1")
    );
    let missing_tenant = refund(&TENANT_SCOPED, &h.ctx("c-1"), &h.log, 4417).await;
    assert!(
        matches!(missing_tenant, Err(ref e) if e.to_string().contains("tenant")),
        "{missing_tenant:?}"
    );

    // namespaces: one engine per tenant over the same store
    let spec = default_spec();
    let mut outcomes = Vec::new();
    for namespace in ["tenant-a", "tenant-b"] {
        let engine = Engine::builder()
            .shared_store(h.store.clone())
            .clock(h.clock.clone())
            .namespace(namespace)
            .build()
            .unwrap();
        let ctx = CallContext::new()
            .with_engine(engine.clone())
            .with_conversation("c-1");
        refund(spec, &ctx, &h.log, 99).await.unwrap();
        outcomes.push(ctx.last_outcome().unwrap());
        let call = CallQuery::new("send_refund", conversation("c-1"), json!({"order": 99}));
        let found = engine.lookup_call(&call).await.unwrap();
        assert_eq!(found.key, ctx.last_outcome().unwrap().key);
        let label = found.record.unwrap().label.unwrap();
        assert_eq!(label.namespace.as_deref(), Some(namespace));
    }
    assert!(outcomes.iter().all(|o| o.status == CallStatus::Executed));
    assert_ne!(outcomes[0].key, outcomes[1].key);
    assert_eq!(h.log.len(), 4);
    let in_b = ListQuery {
        namespace: Some("tenant-b".to_owned()),
        ..ListQuery::new()
    };
    assert_eq!(h.store.list(&in_b, h.now()).await.unwrap().records.len(), 1);
}

// pins P1, P4, M4, K1: labels a claim writes read back unchanged and never make their record
// unreadable: rmcp's client-key scope (`mcp:idempotencyKey`), a hand-built kind with `+`,
// values with NUL, `/`, `=` and `%`; the record replays and lists
pub async fn odd_labels_round_trip_and_never_break_a_record(make: Factory) {
    let h = harness(make);
    let labels = [
        RecordLabel::new(
            "transfer",
            ScopePath::new().with("mcp:idempotencyKey", "client-key-1"),
        ),
        RecordLabel::new("transfer", ScopePath::from_stored("a+b=x")),
        RecordLabel::new("transfer", conversation("nul\0in/the=middle%")),
    ];
    for (i, label) in labels.iter().enumerate() {
        let key = key_of(default_spec(), &h.ctx("odd"), i as u64);
        claim_in_progress(&h, &key, label).await;
        let record = h
            .store
            .read(&key, h.now())
            .await
            .unwrap()
            .expect("readable");
        assert_eq!(record.label.as_ref(), Some(label), "{label:?}");
    }
    let listed = h.store.list(&ListQuery::new(), h.now()).await.unwrap();
    assert_eq!(listed.records.len(), labels.len());
    let mcp = ListQuery::new().scope(ScopePath::new().with("mcp:idempotencyKey", "client-key-1"));
    assert_eq!(h.store.list(&mcp, h.now()).await.unwrap().records.len(), 1);
}
