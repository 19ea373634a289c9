//! The capture of `Serialize` values: serde_json's mapping of serde's data model, the
//! guards of K3, error paths, map keys, duplicate members, and serde_json's private
//! number / raw-value representations (contract K2, K3, K4).

use std::collections::{BTreeMap, HashMap};

use idem_runtime::canonical::{capture, capture_at, to_canonical, CanonicalError, Node};
use idem_runtime::ArgsBuilder;
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

fn canonical<T: Serialize + ?Sized>(value: &T) -> String {
    to_canonical(value)
        .expect("canonicalises")
        .as_str()
        .to_owned()
}

/// What serde_json writes for the node captured from `value`, as a `Value`.
fn through_node<T: Serialize + ?Sized>(value: &T) -> serde_json::Value {
    let node = capture(value).expect("captures");
    serde_json::to_value(&node).expect("node serializes")
}

#[derive(Serialize)]
struct Unit;

#[derive(Serialize)]
struct Meters(f64);

#[derive(Serialize)]
struct Pair(u8, &'static str);

#[derive(Serialize)]
enum Shape {
    Empty,
    Circle(f64),
    Line(u8, u8),
    Rect { w: u32, h: u32 },
}

// pins K2: serde's data model maps to JSON exactly as serde_json maps it
#[test]
fn serde_types_map_to_json_as_serde_json_maps_them() {
    #[derive(Serialize)]
    struct All {
        unit: (),
        unit_struct: Unit,
        newtype: Meters,
        tuple: (u8, bool),
        tuple_struct: Pair,
        none: Option<u8>,
        some: Option<u8>,
        ch: char,
        #[serde(with = "bytes")]
        bytes: Vec<u8>,
        shapes: Vec<Shape>,
        nested: BTreeMap<String, Vec<i64>>,
        big: u128,
        small: i128,
        f: f32,
    }
    mod bytes {
        pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }
    }
    let value = All {
        unit: (),
        unit_struct: Unit,
        newtype: Meters(1.5),
        tuple: (7, true),
        tuple_struct: Pair(1, "x"),
        none: None,
        some: Some(3),
        ch: 'é',
        bytes: vec![0, 255],
        shapes: vec![
            Shape::Empty,
            Shape::Circle(2.0),
            Shape::Line(1, 2),
            Shape::Rect { w: 3, h: 4 },
        ],
        nested: BTreeMap::from([("k".to_owned(), vec![-1, 2])]),
        big: u64::MAX.into(),
        small: -5,
        f: 0.5,
    };
    assert_eq!(through_node(&value), serde_json::to_value(&value).unwrap());
    assert_eq!(
        canonical(&value),
        r#"{"big":18446744073709552000,"bytes":[0,255],"ch":"é","f":0.5,"nested":{"k":[-1,2]},"newtype":1.5,"none":null,"shapes":["Empty",{"Circle":2},{"Line":[1,2]},{"Rect":{"h":4,"w":3}}],"small":-5,"some":3,"tuple":[7,true],"tuple_struct":[1,"x"],"unit":null,"unit_struct":null}"#.to_owned() + "\n0:18446744073709551615"
    );
}

// pins K3: NaN and ±Infinity are errors naming where they are, never `null`
#[test]
fn non_finite_floats_are_errors_with_their_path() {
    #[derive(Serialize)]
    struct Item {
        price: f64,
    }
    #[derive(Serialize)]
    struct Amount {
        items: Vec<Item>,
    }
    let amount = Amount {
        items: vec![
            Item { price: 1.0 },
            Item { price: 2.0 },
            Item { price: f64::NAN },
        ],
    };
    let error = capture_at(&amount, "amount").unwrap_err();
    assert_eq!(
        error,
        CanonicalError::NonFiniteNumber {
            path: "amount.items[2].price".into(),
            value: "NaN".into()
        }
    );
    assert!(error
        .to_string()
        .starts_with("amount.items[2].price: NaN is not a finite number"));

    assert!(matches!(
        capture(&Some(f64::INFINITY)),
        Err(CanonicalError::NonFiniteNumber { value, .. }) if value == "inf"
    ));
    assert!(matches!(
        capture(&[f32::NEG_INFINITY]),
        Err(CanonicalError::NonFiniteNumber { path, value }) if path == "$[0]" && value == "-inf"
    ));
    // `Some(NaN)` can never share a key with `None`.
    assert_eq!(canonical(&None::<f64>), "null");
    assert!(capture(&Some(f64::NAN)).is_err());
}

// pins K3: errors name members that are not identifiers unambiguously
#[test]
fn paths_quote_odd_member_names_and_map_keys() {
    let value = BTreeMap::from([("unit price", vec![HashMap::from([(7u8, f64::NAN)])])]);
    assert_eq!(
        capture(&value).unwrap_err(),
        CanonicalError::NonFiniteNumber {
            path: r#"$["unit price"][0]["7"]"#.into(),
            value: "NaN".into()
        }
    );
}

// pins K2: map keys become member names as serde_json writes them
#[test]
fn map_keys_become_member_names_as_serde_json_writes_them() {
    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    enum Color {
        Red,
    }
    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    struct Id(u32);
    assert_eq!(canonical(&BTreeMap::from([(-3i64, 1)])), r#"{"-3":1}"#);
    assert_eq!(
        canonical(&BTreeMap::from([(u128::MAX, 1)])),
        format!(r#"{{"{}":1}}"#, u128::MAX)
    );
    assert_eq!(
        canonical(&BTreeMap::from([(true, 1), (false, 0)])),
        r#"{"false":0,"true":1}"#
    );
    assert_eq!(canonical(&BTreeMap::from([('x', 1)])), r#"{"x":1}"#);
    assert_eq!(
        canonical(&BTreeMap::from([(Color::Red, 1)])),
        r#"{"Red":1}"#
    );
    assert_eq!(canonical(&BTreeMap::from([(Id(9), 1)])), r#"{"9":1}"#);
    assert_eq!(canonical(&BTreeMap::from([(Some(4u8), 1)])), r#"{"4":1}"#);
    let floats = vec![(1.0f64, 1), (0.5, 2)];
    assert_eq!(canonical(&OrderedMap(floats)), r#"{"0.5":2,"1.0":1}"#);
    assert_eq!(
        through_node(&OrderedMap(vec![(1.5f32, 1)])),
        serde_json::to_value(OrderedMap(vec![(1.5f32, 1)])).unwrap()
    );
}

// pins K3: keys JSON cannot name are errors, never silently written
#[test]
fn unsupported_and_non_finite_map_keys_are_errors() {
    let unsupported = |error: CanonicalError| match error {
        CanonicalError::UnsupportedMapKey { path, key_kind } => (path, key_kind),
        other => panic!("expected UnsupportedMapKey, got {other:?}"),
    };
    let (path, kind) = unsupported(capture(&BTreeMap::from([(None::<u8>, 1)])).unwrap_err());
    assert_eq!((path.as_str(), kind.as_str()), ("$", "none"));
    let (_, kind) = unsupported(capture(&BTreeMap::from([(vec![1u8], 1)])).unwrap_err());
    assert_eq!(kind, "sequence");
    let (_, kind) = unsupported(capture(&BTreeMap::from([((), 1)])).unwrap_err());
    assert_eq!(kind, "unit");
    let (path, _) =
        unsupported(capture_at(&vec![BTreeMap::from([((1u8, 2u8), 1)])], "arg").unwrap_err());
    assert_eq!(path, "arg[0]");
    assert!(matches!(
        capture(&OrderedMap(vec![(f64::NAN, 1)])),
        Err(CanonicalError::NonFiniteNumber { path, .. }) if path == "$"
    ));
}

/// A map serialized in the order of its entries (as an `IndexMap` or serde_json's
/// `preserve_order` map would be), keys of any type.
struct OrderedMap<K, V>(Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for OrderedMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

// pins K2: two members of one object may not share a name (RFC 8785 §3.2.3 / I-JSON)
#[test]
fn duplicate_member_names_are_errors() {
    #[derive(Serialize)]
    struct Flattened {
        a: u8,
        #[serde(flatten)]
        rest: BTreeMap<String, u8>,
    }
    let value = Flattened {
        a: 1,
        rest: BTreeMap::from([("a".to_owned(), 2)]),
    };
    assert_eq!(
        capture(&vec![value]).unwrap_err(),
        CanonicalError::DuplicateMember {
            path: "$[0]".into(),
            name: "a".into()
        }
    );
    // Different keys whose text is the same member name.
    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    #[serde(untagged)]
    enum Key {
        Int(u8),
        Text(&'static str),
    }
    let clash = BTreeMap::from([(Key::Int(1), 1), (Key::Text("1"), 2)]);
    assert!(matches!(
        capture(&clash),
        Err(CanonicalError::DuplicateMember { name, .. }) if name == "1"
    ));

    let members = vec![
        ("x".to_owned(), capture(&1).unwrap()),
        ("x".to_owned(), capture(&2).unwrap()),
    ];
    assert_eq!(
        Node::object(members).unwrap_err(),
        CanonicalError::DuplicateMember {
            path: "$".into(),
            name: "x".into()
        }
    );

    let mut args = ArgsBuilder::new();
    args.key("order_id", &1).unwrap();
    assert!(matches!(
        args.key("order_id", &2),
        Err(CanonicalError::DuplicateMember { name, .. }) if name == "order_id"
    ));
    // The failed call left the builder as it was.
    let (canonical, _) = args.finish();
    assert_eq!(canonical.as_str(), r#"{"order_id":1}"#);
}

// pins K2: `Node::object` sorts members by UTF-16 code units, whatever order they came in
#[test]
fn node_object_sorts_members() {
    let members = |names: &[&str]| {
        names
            .iter()
            .map(|n| ((*n).to_owned(), capture(*n).unwrap()))
            .collect::<Vec<_>>()
    };
    let a = Node::object(members(&["b", "\u{fb33}", "😂", "a"])).unwrap();
    let b = Node::object(members(&["😂", "a", "\u{fb33}", "b"])).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        a.to_canonical().as_str(),
        "{\"a\":\"a\",\"b\":\"b\",\"😂\":\"😂\",\"\u{fb33}\":\"\u{fb33}\"}"
    );
}

#[derive(Debug)]
struct Failing;

impl Serialize for Failing {
    fn serialize<S: Serializer>(&self, _serializer: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "database handle cannot be serialized",
        ))
    }
}

// pins K3: a failing Serialize impl is an error at its own path
#[test]
fn failing_serialize_impls_are_located() {
    #[derive(Serialize)]
    struct Args {
        handle: Failing,
    }
    assert_eq!(
        capture_at(&vec![Args { handle: Failing }], "args").unwrap_err(),
        CanonicalError::Serialize {
            path: "args[0].handle".into(),
            message: "database handle cannot be serialized".into()
        }
    );
    let mut args = ArgsBuilder::new();
    assert!(matches!(
        args.key("db", &Failing),
        Err(CanonicalError::Serialize { path, .. }) if path == "db"
    ));
    // A failure deep inside an argument leaves the arguments as they were.
    let nested = vec![Args { handle: Failing }];
    assert!(matches!(
        args.key("nested", &nested),
        Err(CanonicalError::Serialize { path, .. }) if path == "nested[0].handle"
    ));
    args.key("order_id", &7).unwrap();
    let (canonical, _) = args.finish();
    assert_eq!(canonical.as_str(), r#"{"order_id":7}"#);
}

// pins K3: errors serialize as tagged objects (stored diagnostics)
#[test]
fn errors_serialize_tagged_by_kind() {
    let error = capture(&f64::NAN).unwrap_err();
    assert_eq!(
        serde_json::to_value(&error).unwrap(),
        serde_json::json!({"kind": "non_finite_number", "path": "$", "value": "NaN"})
    );
    let back: CanonicalError =
        serde_json::from_value(serde_json::to_value(&error).unwrap()).unwrap();
    assert_eq!(back, error);
}

/// serde_json's `Number` under `arbitrary_precision`, written by hand so that this build
/// (without the feature) sees exactly what that build would send.
struct PrivateNumber(&'static str);

impl Serialize for PrivateNumber {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("$serde_json::private::Number", 1)?;
        s.serialize_field("$serde_json::private::Number", self.0)?;
        s.end()
    }
}

/// serde_json's `RawValue`, written by hand.
struct PrivateRaw(&'static str);

impl Serialize for PrivateRaw {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("$serde_json::private::RawValue", 1)?;
        s.serialize_field("$serde_json::private::RawValue", self.0)?;
        s.end()
    }
}

// pins K4: serde_json's arbitrary_precision numbers capture as serde_json reads them
// without the feature
#[test]
fn arbitrary_precision_numbers_read_as_without_the_feature() {
    for text in [
        "0",
        "-0",
        "1",
        "1.0",
        "1e21",
        "1E21",
        "-0.0",
        "0.1",
        "5e-324",
        "9007199254740993",
        "18446744073709551615",
        "-9223372036854775808",
        "18446744073709551616",
        "-9223372036854775809",
        "1.50",
        "123456789012345678901234567890",
    ] {
        let parsed: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            to_canonical(&PrivateNumber(text)).unwrap(),
            to_canonical(&parsed).unwrap(),
            "{text}"
        );
        assert_eq!(through_node(&PrivateNumber(text)), parsed, "{text}");
    }
    assert_eq!(
        canonical(&PrivateNumber("9007199254740993")),
        "9007199254740992\n0:9007199254740993"
    );
    for bad in ["1e400", "NaN", "01", "", "1.", "0x1"] {
        assert!(
            matches!(capture_at(&[PrivateNumber(bad)], "n"), Err(CanonicalError::InvalidNumber { path, .. }) if path == "n[0]"),
            "{bad}"
        );
    }
    let keyed = OrderedMap(vec![(PrivateNumber("1.50"), 1), (PrivateNumber("7"), 2)]);
    assert_eq!(canonical(&keyed), r#"{"1.5":1,"7":2}"#);
}

// pins K4: a serde_json RawValue captures as the JSON it holds, whitespace and member
// order aside
#[test]
fn raw_values_capture_as_the_json_they_hold() {
    let raw = PrivateRaw(r#" { "b" : [1.0, 18446744073709551615], "a": {"y":null, "x": "é"} } "#);
    let value: serde_json::Value = serde_json::from_str(raw.0).unwrap();
    assert_eq!(to_canonical(&raw).unwrap(), to_canonical(&value).unwrap());
    assert_eq!(
        canonical(&raw),
        "{\"a\":{\"x\":\"é\",\"y\":null},\"b\":[1,18446744073709552000]}\n1:18446744073709551615"
    );
    assert!(matches!(
        capture_at(&PrivateRaw("{"), "raw"),
        Err(CanonicalError::Serialize { path, .. }) if path == "raw"
    ));
}

// pins K3: integers are exact across the whole of serde's data model
#[test]
fn integers_are_exact_to_128_bits() {
    assert_eq!(
        canonical(&i128::MIN),
        format!("-1.7014118346046923e+38\n0:{}", i128::MIN)
    );
    assert_eq!(
        canonical(&u128::MAX),
        format!("3.402823669209385e+38\n0:{}", u128::MAX)
    );
    assert_eq!(canonical(&(i64::MAX as u128)), canonical(&i64::MAX));
    assert_eq!(canonical(&5u8), canonical(&5i128));
    assert_ne!(canonical(&u128::MAX), canonical(&(u128::MAX - 1)));
    for v in [u64::MAX as u128, u128::MAX, 0] {
        let text = serde_json::to_string(&capture(&v).unwrap()).unwrap();
        assert_eq!(serde_json::from_str::<u128>(&text).unwrap(), v);
    }
    for v in [i64::MIN as i128, i128::MIN, -1] {
        let text = serde_json::to_string(&capture(&v).unwrap()).unwrap();
        assert_eq!(serde_json::from_str::<i128>(&text).unwrap(), v);
    }
}

// pins K2: an f32 is written as serde_json writes it, and canonicalises as its double
#[test]
fn f32_keeps_its_text_and_canonicalises_as_a_double() {
    let node = capture(&0.1f32).unwrap();
    assert_eq!(serde_json::to_string(&node).unwrap(), "0.1");
    assert_eq!(node.to_canonical().as_str(), "0.10000000149011612");
    assert_eq!(canonical(&0.5f32), canonical(&0.5f64));
}

// pins K3: the exactness annex, as the module docs give it: one line per unsafe integer,
// in canonical text order; values with only safe integers are plain RFC 8785
#[test]
fn annex_format_matches_the_module_docs() {
    let value = serde_json::json!({"n": 7, "min": i64::MIN, "id": 9_007_199_254_740_993u64});
    let canonical = to_canonical(&value).unwrap();
    assert_eq!(
        canonical.as_str(),
        "{\"id\":9007199254740992,\"min\":-9223372036854776000,\"n\":7}\n0:9007199254740993\n1:-9223372036854775808"
    );
    assert_eq!(
        canonical.jcs_text(),
        "{\"id\":9007199254740992,\"min\":-9223372036854776000,\"n\":7}"
    );
    assert_eq!(canonical.to_string(), canonical.as_str());
    let safe = to_canonical(&[9_007_199_254_740_991i64, -9_007_199_254_740_991]).unwrap();
    assert_eq!(safe.as_str(), "[9007199254740991,-9007199254740991]");
    assert_eq!(
        to_canonical(&[9_007_199_254_740_992u64]).unwrap().as_str(),
        "[9007199254740992]\n0:9007199254740992"
    );
}

// pins K4: repeated structs of one type (whose member order a capture remembers),
// structs whose field set varies, and types sharing field names all canonicalise as the
// serde_json::Value of the same data does
#[test]
fn repeated_and_varying_structs_sort_like_maps() {
    #[derive(Serialize)]
    struct Line {
        sku: String,
        qty: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        amount: f64,
    }
    #[derive(Serialize)]
    struct Other {
        qty: u32,
        sku: &'static str,
    }
    #[derive(Serialize)]
    enum Event {
        Moved { to: u8, from: u8 },
    }
    let lines: Vec<Line> = (0..10)
        .map(|i| Line {
            sku: format!("S{i}"),
            qty: i,
            note: (i % 3 == 0).then(|| "n".into()),
            amount: f64::from(i) / 2.0,
        })
        .collect();
    let value = (
        lines,
        vec![Other { qty: 1, sku: "x" }, Other { qty: 2, sku: "y" }],
        [
            Event::Moved { to: 2, from: 1 },
            Event::Moved { to: 3, from: 2 },
        ],
    );
    let expected = to_canonical(&serde_json::to_value(&value).unwrap()).unwrap();
    assert_eq!(to_canonical(&value).unwrap(), expected);
    assert!(expected
        .as_str()
        .contains(r#"{"amount":0,"note":"n","qty":0,"sku":"S0"}"#));
    assert!(expected
        .as_str()
        .contains(r#"{"amount":0.5,"qty":1,"sku":"S1"}"#));
}
