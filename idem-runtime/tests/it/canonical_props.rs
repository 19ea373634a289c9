//! Property tests of the canonical form (contract K2, K3, K4): agreement with
//! `serde_json_canonicalizer` on whole values, independence from member order, distinct
//! integers never colliding, and `Node`'s `Serialize` round-tripping through serde_json.

use std::collections::{BTreeMap, HashMap};

use idem_runtime::canonical::{capture, to_canonical, Node};
use idem_runtime::key::{derive_key, ScopeComponent};
use idem_runtime::ArgsBuilder;
use proptest::prelude::*;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

const MAX_SAFE: i64 = (1 << 53) - 1;

/// Strings that exercise escaping and UTF-16 ordering: plain words, arbitrary Unicode,
/// and mixes of quotes, backslashes, control characters, DEL, high BMP and astral chars.
fn json_string() -> impl Strategy<Value = String> {
    let special = prop_oneof![
        Just('"'),
        Just('\\'),
        Just('/'),
        Just('\n'),
        Just('\u{0}'),
        Just('\u{1f}'),
        Just('\u{7f}'),
        Just('é'),
        Just('\u{e000}'),
        Just('\u{fb33}'),
        Just('\u{ffff}'),
        Just('😂'),
        Just('\u{10000}'),
        any::<char>(),
    ];
    prop_oneof![
        "[a-c]{0,3}",
        any::<String>(),
        prop::collection::vec(special, 0..10).prop_map(|cs| cs.into_iter().collect()),
    ]
}

fn finite_f64() -> impl Strategy<Value = f64> {
    use proptest::num::f64 as f;
    prop_oneof![
        (f::NORMAL | f::SUBNORMAL | f::ZERO | f::POSITIVE | f::NEGATIVE),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            0.1,
            1e21,
            1e-7,
            5e-324,
            1.7976931348623157e308
        ]),
        (-1_000_000i64..1_000_000).prop_map(|v| v as f64 / 8.0),
    ]
}

/// A JSON value; integers all safe (magnitude ≤ 2^53 − 1) unless `unsafe_ints`.
fn json_value(unsafe_ints: bool) -> impl Strategy<Value = Value> {
    let int = if unsafe_ints {
        prop_oneof![
            (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
        ]
        .boxed()
    } else {
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from).boxed()
    };
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        int,
        finite_f64().prop_map(Value::from),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_string(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// The annex lines of `value`: `ordinal:digits` for each unsafe integer, the ordinal
/// counting every number of the canonical text (members in UTF-16 order).
fn unsafe_integers(value: &Value, numbers: &mut usize, out: &mut Vec<String>) {
    match value {
        Value::Number(n) => {
            let ordinal = *numbers;
            *numbers += 1;
            if n.is_i64() || n.is_u64() {
                let v: i128 = n
                    .as_i64()
                    .map_or_else(|| n.as_u64().unwrap_or(0).into(), i128::from);
                if v.unsigned_abs() > MAX_SAFE as u128 {
                    out.push(format!("{ordinal}:{v}"));
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| unsafe_integers(v, numbers, out)),
        Value::Object(members) => {
            let mut sorted: Vec<_> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            sorted
                .into_iter()
                .for_each(|(_, v)| unsafe_integers(v, numbers, out));
        }
        _ => {}
    }
}

/// A map serialized in the order of its entries, as an `IndexMap` or serde_json's
/// `preserve_order` map would be.
struct OrderedMap<'a>(&'a [(String, Value)]);

impl Serialize for OrderedMap<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

fn unique_members() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::btree_map(json_string(), json_value(true), 0..8)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
}

#[derive(Serialize)]
struct Abc {
    a: u64,
    b: String,
    c: Vec<f64>,
}

#[derive(Serialize)]
struct Cba {
    c: Vec<f64>,
    b: String,
    a: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Kind {
    Plain,
    Tagged(i64),
    Pair(u8, String),
    Record { x: f32, y: Option<u128> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rich {
    a: u64,
    b: i64,
    c: i128,
    d: u128,
    e: f64,
    f: f32,
    g: String,
    h: Vec<Option<u32>>,
    i: BTreeMap<u64, bool>,
    j: Vec<Kind>,
    k: (char, ()),
}

fn finite_f32() -> impl Strategy<Value = f32> {
    any::<f32>().prop_filter("finite", |f| f.is_finite())
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Plain),
        any::<i64>().prop_map(Kind::Tagged),
        (any::<u8>(), json_string()).prop_map(|(a, b)| Kind::Pair(a, b)),
        (finite_f32(), any::<Option<u128>>()).prop_map(|(x, y)| Kind::Record { x, y }),
    ]
}

prop_compose! {
    fn rich()(
        a in any::<u64>(), b in any::<i64>(), c in any::<i128>(), d in any::<u128>(),
        e in finite_f64(), f in finite_f32(), g in json_string(),
        h in prop::collection::vec(any::<Option<u32>>(), 0..4),
        i in prop::collection::btree_map(any::<u64>(), any::<bool>(), 0..4),
        j in prop::collection::vec(kind(), 0..4),
        ch in any::<char>(),
    ) -> Rich {
        Rich { a, b, c, d, e, f, g, h, i, j, k: (ch, ()) }
    }
}

fn key_of(arg: &impl Serialize) -> String {
    let mut args = ArgsBuilder::new();
    args.key("order_id", arg).unwrap();
    let (canonical, _) = args.finish();
    let scope = ScopeComponent::new("global", None);
    derive_key(scope, "send_refund", &canonical).to_string()
}

proptest! {
    // pins K2: with safe integers, the canonical form is exactly RFC 8785 as the crate writes it
    #[test]
    fn safe_values_match_the_crate(value in json_value(false)) {
        let expected = serde_json_canonicalizer::to_vec(&value).unwrap();
        let canonical = to_canonical(&value).unwrap();
        prop_assert_eq!(canonical.as_str(), String::from_utf8(expected).unwrap());
    }

    // pins K2, K3: the JCS part always matches the crate; the annex lists the unsafe
    // integers exactly, in canonical text order
    #[test]
    fn jcs_part_matches_the_crate_and_annex_lists_unsafe_integers(value in json_value(true)) {
        let expected = serde_json_canonicalizer::to_string(&value).unwrap();
        let canonical = to_canonical(&value).unwrap();
        prop_assert_eq!(canonical.jcs_text(), expected.as_str());
        let mut integers = Vec::new();
        unsafe_integers(&value, &mut 0, &mut integers);
        let annex: Vec<&str> = canonical.as_str().split('\n').skip(1).collect();
        prop_assert_eq!(annex, integers.iter().map(String::as_str).collect::<Vec<_>>());
    }

    // pins K4: member order of maps and objects does not change the canonical form
    #[test]
    fn member_order_does_not_matter(members in unique_members().prop_flat_map(|m| {
        let shuffled = Just(m.clone()).prop_shuffle();
        (Just(m), shuffled)
    })) {
        let (sorted, shuffled) = members;
        let a = to_canonical(&OrderedMap(&sorted)).unwrap();
        let b = to_canonical(&OrderedMap(&shuffled)).unwrap();
        prop_assert_eq!(&a, &b);
        let as_value = Value::Object(shuffled.iter().cloned().collect());
        prop_assert_eq!(&a, &to_canonical(&as_value).unwrap());
        let nodes = |m: &[(String, Value)]| m.iter().map(|(k, v)| (k.clone(), capture(v).unwrap())).collect::<Vec<_>>();
        prop_assert_eq!(&a, &Node::object(nodes(&shuffled)).unwrap().to_canonical());
        prop_assert_eq!(Node::object(nodes(&sorted)).unwrap(), Node::object(nodes(&shuffled)).unwrap());
    }

    // pins K4: HashMap iteration order (capacity, insertion order, hasher seed) does not
    // change the canonical form
    #[test]
    fn hashmap_iteration_order_does_not_matter(
        entries in prop::collection::btree_map(json_string(), any::<i64>(), 0..16),
        extra_capacity in 0usize..64,
    ) {
        let mut forward = HashMap::with_capacity(extra_capacity);
        forward.extend(entries.clone());
        let mut backward = HashMap::new();
        backward.extend(entries.clone().into_iter().rev());
        let expected = to_canonical(&entries).unwrap();
        prop_assert_eq!(&to_canonical(&forward).unwrap(), &expected);
        prop_assert_eq!(&to_canonical(&backward).unwrap(), &expected);
    }

    // pins K4: struct field order does not change the canonical form
    #[test]
    fn struct_field_order_does_not_matter(
        a in any::<u64>(), b in json_string(), c in prop::collection::vec(finite_f64(), 0..4),
    ) {
        let abc = Abc { a, b: b.clone(), c: c.clone() };
        let cba = Cba { c, b, a };
        prop_assert_eq!(to_canonical(&abc).unwrap(), to_canonical(&cba).unwrap());
        prop_assert_eq!(key_of(&abc), key_of(&cba));
    }

    // pins K3: two different i64/u64 values never share a canonical form, or a key
    #[test]
    fn different_integers_never_collide(a in any::<i64>(), b in any::<i64>(), c in any::<u64>(), d in any::<u64>()) {
        let pairs: [(i128, i128); 4] = [
            (a.into(), b.into()),
            (c.into(), d.into()),
            (a.into(), c.into()),
            (c.into(), i128::from(c).wrapping_add(1)),
        ];
        for (x, y) in pairs {
            let y_fits = u64::try_from(y).is_ok() || i64::try_from(y).is_ok();
            if x == y || !y_fits {
                continue;
            }
            let canonical = |v: i128| match (i64::try_from(v), u64::try_from(v)) {
                (Ok(v), _) => to_canonical(&v).unwrap(),
                (_, Ok(v)) => to_canonical(&v).unwrap(),
                _ => unreachable!("both values fit i64 or u64"),
            };
            prop_assert_ne!(canonical(x), canonical(y));
            prop_assert_ne!(key_of(&[x]), key_of(&[y]));
        }
    }

    // pins K3: near 2^53 and up to u64::MAX, neighbours stay distinct
    #[test]
    fn neighbours_of_large_integers_stay_distinct(v in (1u64 << 52)..u64::MAX) {
        prop_assert_ne!(to_canonical(&v).unwrap(), to_canonical(&(v + 1)).unwrap());
        let negative = -(i128::from(v) >> 1);
        prop_assert_ne!(to_canonical(&negative).unwrap(), to_canonical(&(negative - 1)).unwrap());
    }

    // pins K3: a captured JSON value reads back unchanged: integers exact, floats exact
    #[test]
    fn node_round_trips_json_values(value in json_value(true)) {
        let text = serde_json::to_string(&capture(&value).unwrap()).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, value);
    }

    // pins K3: a captured Rust value reads back as the same value, to the bit
    #[test]
    fn node_round_trips_typed_values(value in rich()) {
        let text = serde_json::to_string(&capture(&value).unwrap()).unwrap();
        let back: Rich = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back.e.to_bits(), value.e.to_bits());
        prop_assert_eq!(back.f.to_bits(), value.f.to_bits());
        prop_assert_eq!(back, value);
    }
}
