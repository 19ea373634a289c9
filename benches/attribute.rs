//! First call and replay through `#[idempotent]` on the memory store, each beside its floor
//! measured in the same run: RFC 8785 encoding (serde_json_canonicalizer) of the same
//! ~200-byte arguments + SHA-256 + a HashMap insert (first call) or lookup (replay).
//!
//! Targets (issue 2): first call ≤ 2× its floor, replay ≤ 1.5× its floor.
//! Run: `cargo bench --bench attribute`.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use idem_agent::{idempotent, CallContext, Engine, MemoryStore, SystemClock, ToolError};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
}

/// The arguments, as one struct, for the floor's encoding.
#[derive(Debug, Clone, Serialize)]
struct RefundArgs<'a> {
    order_id: &'a str,
    amount_cents: u64,
    currency: &'a str,
    customer_email: &'a str,
    reason: &'a str,
}

const REASON: &str =
    "Customer reported the parcel arrived damaged; photo evidence attached to ticket.";

#[idempotent(dispatch = false)]
fn send_refund(
    ctx: &CallContext,
    order_id: &str,
    amount_cents: u64,
    currency: &str,
    customer_email: &str,
    reason: &str,
) -> Result<Receipt, ToolError> {
    let _ = (ctx, currency, customer_email, reason);
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        amount_cents,
    })
}

fn order_ids(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("ord_{i:012}")).collect()
}

fn args(order_id: &str) -> RefundArgs<'_> {
    RefundArgs {
        order_id,
        amount_cents: 129_900,
        currency: "EUR",
        customer_email: "jane.doe@example.com",
        reason: REASON,
    }
}

fn call(ctx: &CallContext, order_id: &str) -> Result<Receipt, ToolError> {
    let a = args(order_id);
    send_refund(
        ctx,
        a.order_id,
        a.amount_cents,
        a.currency,
        a.customer_email,
        a.reason,
    )
}

fn context() -> CallContext {
    let engine = Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_bench")
}

fn floor_key(order_id: &str) -> [u8; 32] {
    let canonical = serde_json_canonicalizer::to_vec(&args(order_id)).expect("encodable");
    Sha256::digest(&canonical).into()
}

fn first_call(c: &mut Criterion) {
    let size = serde_json_canonicalizer::to_vec(&args("ord_000000000000"))
        .unwrap()
        .len();
    let mut group = c.benchmark_group(format!("first_call_{size}B_args"));
    group.bench_function("floor: jcs+sha256+hashmap_insert", |b| {
        b.iter_custom(|iters| {
            let ids = order_ids(iters);
            let mut map: HashMap<[u8; 32], Vec<u8>> = HashMap::new();
            let start = Instant::now();
            for id in &ids {
                map.insert(floor_key(id), b"{\"refund_id\":\"re\"}".to_vec());
            }
            let elapsed = start.elapsed();
            black_box(map);
            elapsed
        })
    });
    group.bench_function("idempotent: memory store", |b| {
        b.iter_custom(|iters| {
            let ids = order_ids(iters);
            let ctx = context();
            let start = Instant::now();
            for id in &ids {
                black_box(call(&ctx, id).expect("first call"));
            }
            start.elapsed()
        })
    });
    group.finish();
}

/// idem's own key derivation for the same arguments (capture + canonical text + SHA-256),
/// without the store: what separates the attribute from the floor besides the protocol.
fn idem_key(order_id: &str) -> idem_agent::IdempotencyKey {
    let a = args(order_id);
    let mut builder = idem_agent::ArgsBuilder::new();
    builder.key("order_id", a.order_id).expect("encodable");
    builder
        .key("amount_cents", &a.amount_cents)
        .expect("encodable");
    builder.key("currency", a.currency).expect("encodable");
    builder
        .key("customer_email", a.customer_email)
        .expect("encodable");
    builder.key("reason", a.reason).expect("encodable");
    let (canonical, _fingerprint) = builder.finish();
    idem_agent::key::derive_key(
        idem_agent::key::ScopeComponent::new("conversation", Some("conv_bench")),
        "send_refund",
        &canonical,
    )
}

fn key_only(c: &mut Criterion) {
    let mut group = c.benchmark_group("key_derivation_202B_args");
    group.bench_function("floor: jcs crate+sha256", |b| {
        b.iter(|| black_box(floor_key(black_box("ord_key"))))
    });
    group.bench_function("idem: capture+canonical+sha256", |b| {
        b.iter(|| black_box(idem_key(black_box("ord_key"))))
    });
    group.finish();
}

fn replay(c: &mut Criterion) {
    let size = serde_json_canonicalizer::to_vec(&args("ord_000000000000"))
        .unwrap()
        .len();
    let mut group = c.benchmark_group(format!("replay_{size}B_args"));
    let mut map: HashMap<[u8; 32], Vec<u8>> = HashMap::new();
    map.insert(floor_key("ord_replay"), b"{\"refund_id\":\"re\"}".to_vec());
    group.bench_function("floor: jcs+sha256+hashmap_lookup", |b| {
        b.iter(|| black_box(map.get(&floor_key(black_box("ord_replay"))).map(Vec::len)))
    });
    let ctx = context();
    call(&ctx, "ord_replay").expect("first call");
    group.bench_function("idempotent: memory store", |b| {
        b.iter(|| black_box(call(&ctx, black_box("ord_replay")).expect("replay")))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = first_call, replay, key_only
}
criterion_main!(benches);
