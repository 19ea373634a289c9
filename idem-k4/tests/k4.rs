//! K4: keys and canonical forms do not change with serde_json's `preserve_order`,
//! `arbitrary_precision` and `raw_value` features on. The expected strings come from
//! `idem-runtime/tests/golden/keys.json`, which the default build checks too, so both
//! builds are held to the same bytes.

#[path = "../../idem-runtime/tests/golden/table.rs"]
mod table;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use idem_runtime::canonical::{capture, to_canonical};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Number, Value};

fn runtime_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../idem-runtime")
}

fn golden() -> table::Table {
    table::load(&runtime_dir())
}

fn golden_value(table: &table::Table, name: &str) -> String {
    table
        .values
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no golden value {name:?}"))
        .canonical
        .clone()
}

fn canonical<T: Serialize + ?Sized>(value: &T) -> String {
    to_canonical(value)
        .expect("canonicalises")
        .as_str()
        .to_owned()
}

// pins K4: this build really has the three features on (else the other tests prove nothing)
#[test]
fn the_features_are_on_in_this_build() {
    // preserve_order: objects keep insertion order.
    let ordered: Value = serde_json::from_str(r#"{"b":1,"a":2}"#).unwrap();
    assert_eq!(ordered.to_string(), r#"{"b":1,"a":2}"#);
    // arbitrary_precision: numbers keep their text.
    let precise: Value = serde_json::from_str("[1.50, 18446744073709551616]").unwrap();
    assert_eq!(precise.to_string(), "[1.50,18446744073709551616]");
    // raw_value: RawValue exists and keeps its text.
    let raw: Box<RawValue> = serde_json::from_str(r#"{ "b" : 1 }"#).unwrap();
    assert_eq!(raw.get(), r#"{ "b" : 1 }"#);
}

// pins K5: the table belongs to the key-format version of this build
#[test]
fn table_is_for_this_key_format_version() {
    assert_eq!(
        golden().key_format_version,
        idem_runtime::KEY_FORMAT_VERSION
    );
}

// pins K4, K5: every golden call derives the same canonical JSON, key and fingerprint
#[test]
fn golden_keys_are_unchanged() {
    let mismatches = table::key_mismatches(&golden());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

// pins K4, K5: every golden JSON text canonicalises the same, as a Value and as a RawValue
#[test]
fn golden_values_are_unchanged_as_value_and_raw_value() {
    let table = golden();
    let mismatches = table::value_mismatches(&table);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    for row in &table.values {
        let raw: Box<RawValue> = serde_json::from_str(&row.json).unwrap();
        assert_eq!(canonical(&raw), row.canonical, "RawValue {:?}", row.name);
        let nested = json!({ "raw": serde_json::to_value(&raw).unwrap() });
        assert_eq!(
            canonical(&nested),
            canonical(&json!({ "raw": serde_json::from_str::<Value>(&row.json).unwrap() })),
            "nested {:?}",
            row.name
        );
    }
}

// pins K3, K4: Values built from Rust numbers (their text written by serde_json under
// arbitrary_precision) canonicalise as the golden table says
#[test]
fn values_built_from_numbers_are_unchanged() {
    let table = golden();
    let integers = json!([
        0,
        -1,
        9_007_199_254_740_991i64,
        -9_007_199_254_740_991i64,
        9_007_199_254_740_992u64,
        -9_007_199_254_740_993i64,
        u64::MAX,
        i64::MIN
    ]);
    assert_eq!(canonical(&integers), golden_value(&table, "integers"));
    let floats = json!([
        1.0,
        1e21,
        1e21,
        0.1,
        -0.0,
        -0.0,
        5e-324,
        1.5e300,
        2e-3,
        // The double the table's 333333333.33333329 reads as.
        333_333_333.333_333_3,
        4.50,
        0.0
    ]);
    assert_eq!(canonical(&floats), golden_value(&table, "floats"));
    let typed = (1.0f64, 1e21f64, 0.1f64, -0.0f64, u64::MAX, i64::MIN);
    assert_eq!(
        canonical(&typed),
        canonical(&serde_json::to_value(typed).unwrap())
    );
}

// pins K4: member order of a preserve_order map does not change the canonical form
#[test]
fn preserve_order_member_order_does_not_matter() {
    let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2.0,"x":[3]},"😂":0,"דּ":1}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"דּ":1,"a":{"x":[3],"y":2.0},"😂":0,"b":1}"#).unwrap();
    assert_ne!(
        a.to_string(),
        b.to_string(),
        "preserve_order keeps both orders"
    );
    assert_eq!(canonical(&a), canonical(&b));
    assert_eq!(canonical(&a), r#"{"a":{"x":[3],"y":2},"b":1,"😂":0,"דּ":1}"#);
}

// pins K4: a typed value, and the Value serde_json makes of it under these features, share
// a canonical form; struct field order does not matter
#[test]
fn typed_values_and_their_values_agree() {
    #[derive(Serialize)]
    struct Order {
        id: u64,
        amount: f64,
        lines: Vec<(String, u32)>,
        meta: HashMap<String, i64>,
    }
    #[derive(Serialize)]
    struct Reordered {
        meta: HashMap<String, i64>,
        lines: Vec<(String, u32)>,
        amount: f64,
        id: u64,
    }
    let meta: HashMap<String, i64> = (0..20)
        .map(|i| (format!("k{i}"), i * 1_000_000_007))
        .collect();
    let order = Order {
        id: 9_007_199_254_740_993,
        amount: 12.5,
        lines: vec![("A".into(), 2)],
        meta: meta.clone(),
    };
    let reordered = Reordered {
        meta,
        lines: vec![("A".into(), 2)],
        amount: 12.5,
        id: 9_007_199_254_740_993,
    };
    let expected = canonical(&order);
    assert_eq!(canonical(&reordered), expected);
    assert_eq!(canonical(&serde_json::to_value(&order).unwrap()), expected);
    assert!(expected.ends_with(":9007199254740993"), "{expected}");
}

// pins K4: serde_json Number map keys (a private struct under arbitrary_precision, which
// serde_json's own writer refuses) name members as they would without the feature
#[test]
fn number_map_keys_are_unchanged() {
    let keys: HashMap<Number, u8> = HashMap::from([
        (Number::from(7u64), 1),
        (Number::from_f64(1.5).unwrap(), 2),
        (Number::from(-3i64), 3),
    ]);
    let strings = BTreeMap::from([("7", 1), ("1.5", 2), ("-3", 3)]);
    assert_eq!(canonical(&keys), canonical(&strings));
}

// pins K3, K4: a captured node's JSON reads back as the same value in this build
#[test]
fn node_round_trips_under_these_features() {
    let value = json!({"n": [u64::MAX, i64::MIN, 0.1, -0.0, 1e21], "s": "é\n", "o": {"z": null, "a": true}});
    let text = serde_json::to_string(&capture(&value).unwrap()).unwrap();
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(canonical(&back), canonical(&value));
    let typed: (u64, i64, f64) = serde_json::from_str(
        &serde_json::to_string(&capture(&(u64::MAX, i64::MIN, 0.1)).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(typed, (u64::MAX, i64::MIN, 0.1));
}
