//! Canonicalisation + SHA-256 of a ~1 MB tool argument (contract K1, K2): what a call pays
//! to derive its idempotency key. Measured, never asserted.
//!
//! ```text
//! cargo bench --bench canonical
//! ```
//!
//! Throughput is the size of the argument's canonical JSON (about 1 MiB: orders with
//! customers, addresses, line items, prices, labels), so criterion reports MB/s of
//! canonical text. Two shapes of the same data: typed structs (what `#[idempotent]` fns
//! take) and a `serde_json::Value` (what dispatch of provider tool calls holds). The
//! second group splits the work (capture into a `Node`, then the canonical text) and
//! gives two references: plain `serde_json::to_vec`, and `serde_json_canonicalizer` on
//! the whole value, which the canonical module does not use that way (it sorts members
//! and copies plain tokens itself, and calls the crate per float, large integer and
//! escaped string).

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use idem_agent::canonical::capture;
use idem_agent::key::{derive_key, ScopeComponent};
use idem_agent::ArgsBuilder;
use serde::Serialize;

#[derive(Serialize)]
struct Batch {
    batch_id: String,
    created_at: String,
    orders: Vec<Order>,
}

#[derive(Serialize)]
struct Order {
    order_id: u64,
    customer: Customer,
    items: Vec<Item>,
    total: f64,
    currency: &'static str,
    paid: bool,
    coupon: Option<String>,
    note: String,
    labels: HashMap<String, String>,
}

#[derive(Serialize)]
struct Customer {
    id: String,
    name: String,
    email: String,
    address: Address,
}

#[derive(Serialize)]
struct Address {
    street: String,
    city: String,
    postal_code: String,
    country: &'static str,
}

#[derive(Serialize)]
struct Item {
    sku: String,
    title: String,
    quantity: u32,
    unit_price: f64,
    weight_kg: f64,
    tags: Vec<&'static str>,
}

const WORDS: [&str; 12] = [
    "refund",
    "order",
    "parcel",
    "express",
    "warehouse",
    "Zürich",
    "invoice",
    "priority",
    "fragile",
    "gift",
    "returned",
    "naïve",
];

fn words(seed: usize, n: usize) -> String {
    (0..n)
        .map(|i| WORDS[(seed * 7 + i * 3) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn batch(orders: usize) -> Batch {
    let orders = (0..orders)
        .map(|o| Order {
            order_id: 9_000_000_000 + o as u64 * 7919,
            customer: Customer {
                id: format!("cus_{o:08}"),
                name: format!("Customer {o} {}", words(o, 2)),
                email: format!("customer{o}@example.com"),
                address: Address {
                    street: format!("{} Lake Street", o % 300 + 1),
                    city: WORDS[o % WORDS.len()].to_owned(),
                    postal_code: format!("{:05}", o * 37 % 100_000),
                    country: "CH",
                },
            },
            items: (0..(o % 5 + 1))
                .map(|i| Item {
                    sku: format!("SKU-{o:05}-{i}"),
                    title: words(o + i, 4),
                    quantity: (i as u32 % 3) + 1,
                    unit_price: (o * 13 + i * 7) as f64 / 4.0 + 0.99,
                    weight_kg: (i as f64 + 1.0) * 0.125,
                    tags: vec!["standard", "taxable"],
                })
                .collect(),
            total: (o * 31) as f64 / 8.0 + 0.05,
            currency: "CHF",
            paid: o % 3 != 0,
            coupon: (o % 4 == 0).then(|| format!("SPRING{}", o % 100)),
            note: words(o, 8),
            labels: (0..3)
                .map(|l| (format!("label_{l}"), words(o + l, 1)))
                .collect(),
        })
        .collect();
    Batch {
        batch_id: "batch_2024_06_01".to_owned(),
        created_at: "2024-06-01T12:00:00Z".to_owned(),
        orders,
    }
}

fn key_of<T: Serialize>(value: &T) -> idem_agent::IdempotencyKey {
    let mut args = ArgsBuilder::new();
    args.key("batch", value)
        .expect("benchmark data canonicalises");
    let (canonical, _fingerprint) = args.finish();
    derive_key(
        ScopeComponent::new("conversation", Some("conv_1")),
        "import_orders",
        &canonical,
    )
}

fn canonical(c: &mut Criterion) {
    let typed = batch(1_213);
    let value = serde_json::to_value(&typed).expect("benchmark data is JSON");
    let node = capture(&typed).expect("canonicalises");
    let size = node.to_canonical().as_bytes().len() as u64;
    eprintln!("canonical argument size: {size} bytes");

    // What a call pays for its key: ArgsBuilder (capture + canonical text) + SHA-256.
    let mut group = c.benchmark_group("key_of_1MB_argument");
    group.throughput(Throughput::Bytes(size));
    group.bench_function("typed_structs", |b| b.iter(|| key_of(black_box(&typed))));
    group.bench_function("serde_json_value", |b| b.iter(|| key_of(black_box(&value))));
    group.finish();

    // Where the time goes, and reference points.
    let mut group = c.benchmark_group("canonical_phases_1MB");
    group.throughput(Throughput::Bytes(size));
    group.bench_function("capture_typed", |b| b.iter(|| capture(black_box(&typed))));
    group.bench_function("to_canonical_of_node", |b| {
        b.iter(|| black_box(&node).to_canonical())
    });
    group.bench_function("reference_serde_json_to_vec", |b| {
        b.iter(|| serde_json::to_vec(black_box(&typed)))
    });
    group.bench_function("reference_serde_json_canonicalizer_alone", |b| {
        b.iter(|| serde_json_canonicalizer::to_vec(black_box(&value)))
    });
    group.finish();
}

criterion_group!(benches, canonical);
criterion_main!(benches);
