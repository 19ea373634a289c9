//! Golden keys (contract K5): `tests/golden/keys.json` pins, for a set of calls, the
//! canonical JSON of their key arguments, their idempotency key and their fingerprint.
//!
//! CHANGING ANY EXPECTED STRING OF THAT TABLE IS A BREAKING CHANGE of the key format:
//! every key already stored changes with it. Such a change must bump `KEY_FORMAT_VERSION`
//! (`src/key.rs`) and the table's `key_format_version` together.

#[path = "../golden/table.rs"]
mod table;

use std::collections::BTreeMap;
use std::path::Path;

use idem_runtime::key::{derive_key, ScopeComponent};
use idem_runtime::{ArgsBuilder, KEY_FORMAT_VERSION};
use serde::Serialize;

fn golden() -> table::Table {
    table::load(Path::new(env!("CARGO_MANIFEST_DIR")))
}

// pins K5: the table belongs to this key-format version
#[test]
fn table_is_for_this_key_format_version() {
    assert_eq!(golden().key_format_version, KEY_FORMAT_VERSION);
}

// pins K5, K1, K2, K3, K6, K7: every golden call derives its canonical JSON, key and
// fingerprint, byte for byte
#[test]
fn every_golden_call_derives_its_key() {
    let mismatches = table::key_mismatches(&golden());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

// pins K5, K2, K3: every golden JSON text canonicalises as the table says
#[test]
fn every_golden_value_canonicalises() {
    let mismatches = table::value_mismatches(&golden());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

// pins K5: the table covers what it must, and its calls have distinct keys (K1: a `|`
// or NUL inside a scope value or tool name never makes two calls share a key)
#[test]
fn golden_rows_cover_the_required_cases_and_keys_are_distinct() {
    let table = golden();
    let kinds: Vec<&str> = table.keys.iter().map(|r| r.scope.kind.as_str()).collect();
    for kind in ["conversation", "global", "call", "tenant"] {
        assert!(kinds.contains(&kind), "no row with scope {kind}");
    }
    let values: Vec<&str> = table
        .keys
        .iter()
        .filter_map(|r| r.scope.value.as_deref())
        .collect();
    assert!(values.iter().any(|v| v.contains('|')));
    assert!(values.iter().any(|v| v.contains('\0')));
    assert!(table.keys.iter().any(|r| !r.fingerprint_args.is_empty()));
    assert!(
        table.keys.iter().any(|r| r.canonical.contains('\n')),
        "no annex row"
    );
    let mut keys: Vec<&str> = table.keys.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), table.keys.len(), "two golden calls share a key");
}

fn typed_key<T: Serialize>(scope: ScopeComponent<'_>, tool: &str, name: &str, value: &T) -> String {
    let mut args = ArgsBuilder::new();
    args.key(name, value).unwrap();
    let (canonical, _) = args.finish();
    derive_key(scope, tool, &canonical).to_string()
}

fn row<'t>(table: &'t table::Table, name: &str) -> &'t table::KeyRow {
    table
        .keys
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no golden row {name:?}"))
}

const GLOBAL: ScopeComponent<'static> = ScopeComponent::new("global", None);

// pins K5, K3, K4: typed Rust values give the same golden keys as the JSON rows
#[test]
fn typed_values_give_the_golden_keys() {
    let table = golden();

    let ids = (
        9_007_199_254_740_991i64,
        9_007_199_254_740_992u64,
        9_007_199_254_740_993u128,
        u64::MAX,
        i64::MIN,
    );
    assert_eq!(
        typed_key(GLOBAL, "refund_orders", "ids", &ids),
        row(&table, "big integers").key
    );

    let floats = [1.0f64, 1e21, 0.1, -0.0, 5e-324, 1e-7, 123.456, 1e20];
    assert_eq!(
        typed_key(GLOBAL, "measure", "values", &floats),
        row(&table, "floats").key
    );

    #[derive(Serialize)]
    struct Line {
        sku: &'static str,
        qty: u32,
    }
    #[derive(Serialize)]
    struct Address {
        zip: &'static str,
        city: &'static str,
    }
    #[derive(Serialize)]
    struct Shipping {
        express: bool,
        address: Address,
    }
    #[derive(Serialize)]
    struct Order {
        shipping: Shipping,
        lines: Vec<Line>,
        id: &'static str,
    }
    let order = Order {
        shipping: Shipping {
            express: true,
            address: Address {
                zip: "8001",
                city: "Zürich",
            },
        },
        lines: vec![Line { sku: "B", qty: 1 }, Line { sku: "A", qty: 2 }],
        id: "ord_1",
    };
    let scope = ScopeComponent::new("conversation", Some("conv_42"));
    assert_eq!(
        typed_key(scope, "ship_order", "order", &order),
        row(&table, "nested objects").key
    );

    let names = BTreeMap::from([
        ("\u{fb33}", 3),
        ("a", 0),
        ("😂", 2),
        ("€", 4),
        ("é", 1),
        ("A", 5),
        ("", 6),
    ]);
    assert_eq!(
        typed_key(GLOBAL, "label", "names", &names),
        row(&table, "unicode member names in UTF-16 order").key
    );
}

// pins K5, K7, K11: the keys of a composite scope and of a namespace are fixed too (a change
// to either encoding must bump the key-format version); the un-namespaced key of the same
// call is the K1 key of the table above
#[test]
fn composite_scope_and_namespace_keys_are_fixed() {
    use idem_runtime::key::derive_key_in;
    use idem_runtime::ScopePath;

    let args = idem_runtime::canonical::to_canonical(
        &serde_json::json!({"amount_cents": 500, "order_id": 4417}),
    )
    .unwrap();
    let tenant_conversation = ScopePath::new()
        .with("tenant", "acme")
        .with("conversation", "c-1");
    let composite = tenant_conversation
        .with_component(|scope| derive_key_in(None, scope, "send_refund", &args));
    assert_eq!(
        composite.as_str(),
        "65241a66eb07b1fa6e0a4c69de2b5972e519751d46fcb207c3c6f0d692ed8fea"
    );
    let conversation = ScopePath::new().with("conversation", "c-9");
    let plain = conversation.with_component(|scope| derive_key(scope, "send_refund", &args));
    let namespaced = conversation
        .with_component(|scope| derive_key_in(Some("eu-prod"), scope, "send_refund", &args));
    assert_ne!(plain, namespaced);
    assert_eq!(
        namespaced.as_str(),
        "42ac42aa9e0e0b721050b55f7333ee1ed1d20b5414531c3e0c8364de6c1056e9"
    );
}
