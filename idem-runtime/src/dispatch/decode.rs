//! Decoding a tool call's JSON arguments into the tool's typed parameters (contract D2, D8).
//!
//! Every dispatched call's arguments are decoded here: [`Tool::from_async`] and
//! [`Tool::from_sync`] decode the whole arguments object with [`decode_arguments`], and the
//! dispatch companion of an `#[idempotent]` fn decodes each argument with
//! [`decode_argument`] (through `macro_support::take_argument`).
//!
//! # Integral numbers (D8)
//!
//! Gemini carries a call's arguments as a protobuf `google.protobuf.Struct`, whose numbers
//! are `google.protobuf.Value.number_value`, a `double`: `multiply(57, 44)` arrives as
//! `{"a": 57.0, "b": 44.0}`. serde refuses a float for an integer type ("invalid type:
//! floating point `57.0`, expected u64"), so the decoder wraps serde_json's `Value`
//! deserializer: where the target type asks for an integer (`deserialize_u8` … `u64`,
//! `i8` … `i64`, `u128`, `i128`), a number whose value is an integer is handed to the
//! target as that integer, whatever its spelling (`57`, `57.0`, `5.7e1`, `-0.0` is `0`),
//! exactly as the integer spelled without fraction or exponent would be:
//!
//! - from `0` up to (not including) 2^64 as `visit_u64`, from -2^63 up to 0 as
//!   `visit_i64`; the target checks its own range ("invalid value: integer `300`, expected
//!   u8", "invalid value: integer `-1`, expected u64");
//! - a number with a fraction (`57.5`) is handed on as the float it is: "invalid type:
//!   floating point `57.5`, expected u64";
//! - an integral float outside [-2^63, 2^64) is out of range for every integer type:
//!   "invalid value: floating point `1.8446744073709552e+19`, expected u64". For `u128`
//!   and `i128` too: beyond 64 bits serde_json (without `arbitrary_precision`) has already
//!   rounded an *integer* spelling to a double (`18446744073709551617` reads as 2^64), so
//!   accepting it would run the tool with another number than the model wrote, under the
//!   key of that other number.
//!
//! The value checked is the number's IEEE double, as JCS reads it (K2): the key and the
//! decoded argument agree. Beyond 2^53 not every integer is a double, so a float spelling
//! there names the nearest double (`9007199254740993.0` is 2^53); integer spellings of
//! integers that fit `u64`/`i64` stay exact (K3).
//!
//! Every other hint and every other value passes through unchanged: an `f64` parameter
//! still gets `57.5`, a `serde_json::Value` parameter still holds `57.0` as a float, and a
//! string is never read as a number. The wrapper recurses through options, newtypes,
//! sequences, map values and enum variants; map keys and variant names are not wrapped
//! (they are strings; serde_json's own key deserializer reads `"57"` as a `u64` key).
//! Values that serde buffers before deciding their type (`#[serde(flatten)]`, untagged,
//! internally and adjacently tagged enums) are decoded by serde's private buffer, out of
//! the wrapper's reach: when decoding fails and the arguments hold integral numbers written
//! with a fraction or exponent, the subtree the error is at is decoded again with those
//! numbers written as integers (within the 64-bit ranges above), one subtree per attempt
//! (at most 8), and that decoding stands if it fits; else the first error does. Arguments
//! elsewhere keep their spelling; a flattened struct's error is at the whole object, so a
//! `serde_json::Value` beside it sees integers then. (A value that fits as written, such as
//! an untagged `Int(u64) | Float(f64)` reading `57.0` as `Float`, is never decoded again.)
//!
//! With serde_json's `arbitrary_precision` feature on (K4: cargo unifies features), a
//! `Number` keeps its text, and serde_json's own integer deserializers parse that text as
//! the integer type (refusing `57.0`), so an integer target is given the number through
//! `deserialize_any`; there a number whose text is neither an integer nor its double's
//! shortest spelling (`5.7e1`) reaches the visitor as the one-member map
//! `{"$serde_json::private::Number": text}`, whose text is read as the double it spells.
//! Decoding is the same in every build.
//!
//! # Paths
//!
//! An error names where it happened, found with `serde_path_to_error`: "argument
//! `items[2].qty`: invalid type: floating point `57.5`, expected u64".
//!
//! [`Tool::from_async`]: super::Tool::from_async
//! [`Tool::from_sync`]: super::Tool::from_sync

use std::fmt::{self, Write as _};
use std::sync::LazyLock;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    Unexpected, VariantAccess, Visitor,
};
use serde_json::Value;
use serde_path_to_error::{Path, Segment};

/// Why a call's arguments do not fit the tool's parameters: the path of the value that
/// did not fit (`amount_cents`, `items[2].qty`; an unknown member is its own path; none
/// when the arguments as a whole do not fit, as for a missing member) and serde's message.
///
/// Displays as "argument `items[2].qty`: invalid type: floating point `57.5`, expected
/// u64", or the bare message when there is no path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArgumentsError {
    path: Option<String>,
    message: String,
}

impl ArgumentsError {
    /// The path of the value that did not fit, if the error is inside the arguments.
    #[cfg(test)]
    pub(crate) fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }
}

impl fmt::Display for ArgumentsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "argument `{path}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Decodes a call's arguments (an object, as every provider sends them) into `A`, reading
/// integral numbers as integers where `A` asks for an integer (D8).
///
/// # Errors
/// The arguments do not fit `A`: the error names the path (`amount_cents`,
/// `items[2].qty`) and what was expected.
pub(crate) fn decode_arguments<A: DeserializeOwned>(arguments: Value) -> Result<A, ArgumentsError> {
    decode_at(None, arguments)
}

/// Decodes the argument `name` of a call into `T`, as [`decode_arguments`] does: the path
/// of an error starts at `name` (`items[2].qty` for `name` = `items`).
///
/// # Errors
/// The value does not fit `T`.
pub(crate) fn decode_argument<T: DeserializeOwned>(
    name: &str,
    value: Value,
) -> Result<T, ArgumentsError> {
    decode_at(Some(name), value)
}

/// How many subtrees a decode rewrites at most ([`decode_at`]), one per failed attempt.
const MOST_REWRITES: usize = 8;

fn decode_at<T: DeserializeOwned>(prefix: Option<&str>, value: Value) -> Result<T, ArgumentsError> {
    let first = match serde_path_to_error::deserialize(Integral(&value)) {
        Ok(decoded) => return Ok(decoded),
        Err(error) => error,
    };
    // A value serde buffered before knowing its type (an internally, adjacently or untagged
    // enum, `#[serde(flatten)]`) is out of the wrapper's reach: the subtree the error is at
    // is decoded again with its integral numbers written as integers, one subtree per
    // attempt, so arguments elsewhere keep their spelling. The first error stands otherwise.
    // (Only after a failure: a call that decodes pays for nothing here.)
    let mut current = value;
    let mut path = first.path().clone();
    for _ in 0..MOST_REWRITES {
        if !write_integers(subtree_at(&mut current, &path)) {
            break;
        }
        match serde_path_to_error::deserialize(Integral(&current)) {
            Ok(decoded) => return Ok(decoded),
            Err(error) => path = error.path().clone(),
        }
    }
    Err(ArgumentsError {
        path: render(prefix, first.path()),
        message: first.inner().to_string(),
    })
}

/// The value at `path` in `value`, as far as the path leads through members and elements
/// (a variant or an unknown segment ends it there).
fn subtree_at<'a>(value: &'a mut Value, path: &Path) -> &'a mut Value {
    let mut node = value;
    for segment in path.iter() {
        let next = match (segment, &*node) {
            (Segment::Map { key }, Value::Object(members)) if members.contains_key(key) => key,
            (Segment::Seq { index }, Value::Array(items)) if *index < items.len() => {
                node = &mut node[*index];
                continue;
            }
            _ => break,
        };
        node = &mut node[next.as_str()];
    }
    node
}

/// The integer a number written with a fraction or exponent names, if it names one within
/// the ranges [`visit_integral`] accepts.
fn integer_of(number: &serde_json::Number) -> Option<serde_json::Number> {
    if number.is_i64() || number.is_u64() {
        return None;
    }
    let v = number.as_f64().filter(|v| v.fract() == 0.0)?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    if (0.0..U64_END).contains(&v) {
        Some(serde_json::Number::from(v as u64))
    } else if v > I64_MIN && v < 0.0 {
        Some(serde_json::Number::from(v as i64))
    } else {
        None
    }
}

/// Writes every integral double in `value` as its integer; whether there was one.
fn write_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(number) => match integer_of(number) {
            Some(integer) => {
                *number = integer;
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |any, item| write_integers(item) | any),
        Value::Object(members) => members
            .values_mut()
            .fold(false, |any, member| write_integers(member) | any),
        _ => false,
    }
}

/// `items[2].qty`: member names and variants joined by `.`, indexes in brackets, after
/// `prefix` when there is one. `None` for the root (no prefix, no named segment).
fn render(prefix: Option<&str>, path: &Path) -> Option<String> {
    if prefix.is_none() && path.iter().all(|s| matches!(s, Segment::Unknown)) {
        return None;
    }
    let mut out = String::new();
    let mut first = true;
    if let Some(prefix) = prefix {
        out.push_str(prefix);
        first = false;
    }
    for segment in path {
        match segment {
            Segment::Seq { index } => {
                let _ = write!(out, "[{index}]");
            }
            Segment::Map { key: name } | Segment::Enum { variant: name } => {
                if !first {
                    out.push('.');
                }
                out.push_str(name);
            }
            // A map key that is not a string (never in JSON).
            Segment::Unknown => {
                if !first {
                    out.push('.');
                }
                out.push('?');
            }
        }
        first = false;
    }
    Some(out)
}

/// 2^64: the first integral double above `u64::MAX`.
const U64_END: f64 = 18_446_744_073_709_551_616.0;
/// -2^63 = `i64::MIN`, exactly a double.
const I64_MIN: f64 = -9_223_372_036_854_775_808.0;

/// Hands `v` to `visitor` as the integer it is (D8), for a target that asked for an
/// integer: `visit_u64` from 0 up to 2^64, `visit_i64` from above -2^63 up to 0 (the
/// visitor checks its own range); a fraction as the float it is; an integral value outside
/// both ranges is an invalid value. Both ends are open: the double 2^64 is what integer
/// spellings from 2^64 to 2^64 + 2047 read as, and -2^63 what those from -2^63 - 1024 to
/// -2^63 - 1 read as (serde_json reads an integer that fits no 64-bit type as a double),
/// so accepting either would run the tool with another number than the model wrote.
fn visit_integral<'de, V: Visitor<'de>, E: de::Error>(visitor: V, v: f64) -> Result<V::Value, E> {
    // NaN and ±Infinity have a NaN fraction: handed on as they are.
    if v.fract() != 0.0 {
        return visitor.visit_f64(v);
    }
    // -0.0 is in the first range: it is 0.
    if (0.0..U64_END).contains(&v) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return visitor.visit_u64(v as u64);
    }
    if v > I64_MIN && v < 0.0 {
        #[allow(clippy::cast_possible_truncation)]
        return visitor.visit_i64(v as i64);
    }
    Err(E::invalid_value(Unexpected::Float(v), &visitor))
}

/// The struct and field name of a serde_json `Number` under `arbitrary_precision`.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Whether serde_json's `arbitrary_precision` feature is on in this build: a number keeps
/// its text (`1e+1`; serde_json 1.0.154 writes the exponent that way), where without the
/// feature it is the double `10.0`. Only then is a `{"$serde_json::private::Number": text}`
/// map a number: in a build without it, such an object is an object.
static ARBITRARY_PRECISION: LazyLock<bool> = LazyLock::new(|| {
    serde_json::from_str::<serde_json::Number>("1E1").is_ok_and(|n| n.to_string() != "10.0")
});

/// A deserializer reading integral numbers as integers where the target asks for an
/// integer (D8), and everything else as `D` does.
struct Integral<D>(D);

/// A visitor, seed or access wrapped so that what it hands on is wrapped too.
struct Wrap<T> {
    inner: T,
    /// The target asked for an integer.
    integer: bool,
}

impl<T> Wrap<T> {
    fn new(inner: T) -> Self {
        Wrap {
            inner,
            integer: false,
        }
    }

    fn integer(inner: T) -> Self {
        Wrap {
            inner,
            integer: true,
        }
    }
}

macro_rules! forward {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method(Wrap::new(visitor))
            }
        )*
    };
}

macro_rules! integer {
    ($($method:ident)*) => {
        $(
            // `deserialize_any`, not `$method`: with `arbitrary_precision`, serde_json's
            // `$method` parses the number's text as the integer type and fails on `57.0`
            // before any visitor sees it. Without the feature the two are the same for a
            // number, and a non-number reaches the target's visitor, which refuses it as
            // serde_json would.
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.0.deserialize_any(Wrap::integer(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Integral<D> {
    type Error = D::Error;

    forward! {
        deserialize_any deserialize_bool deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    integer! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Wrap::new(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Wrap::new(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Wrap::new(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Wrap::new(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, Wrap::new(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Wrap::new(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! pass {
    ($($method:ident: $ty:ty)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    pass! {
        visit_bool: bool
        visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64 visit_i128: i128
        visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64 visit_u128: u128
        visit_char: char
        visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_f32<E: de::Error>(self, v: f32) -> Result<V::Value, E> {
        if self.integer {
            visit_integral(self.inner, v.into())
        } else {
            self.inner.visit_f32(v)
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        if self.integer {
            visit_integral(self.inner, v)
        } else {
            self.inner.visit_f64(v)
        }
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Integral(deserializer))
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Integral(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(Wrap::new(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        if !self.integer {
            return self.inner.visit_map(Wrap::new(map));
        }
        // An integer target given a map: under `arbitrary_precision`, a number serde_json
        // could not hand on as an integer or as its double (`5.7e1`), as its text.
        if *ARBITRARY_PRECISION && map.next_key_seed(IsNumberToken)? == Some(true) {
            let text: String = map.next_value()?;
            return match text.parse::<f64>() {
                Ok(v) if v.is_finite() => visit_integral(self.inner, v),
                _ => Err(de::Error::invalid_value(
                    Unexpected::Other(&format!("number `{text}`")),
                    &self.inner,
                )),
            };
        }
        // What serde_json's `Value` answers an integer target given an object.
        Err(de::Error::invalid_type(Unexpected::Map, &self.inner))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(Wrap::new(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Integral(deserializer))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Wrap::new(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    /// Keys as they are: JSON keys are strings, and serde_json's key deserializer reads
    /// integer keys (`HashMap<u64, _>`) from them itself.
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Wrap::new(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    /// The variant name as it is; its content wrapped.
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let (value, variant) = self.inner.variant_seed(seed)?;
        Ok((value, Wrap::new(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(Wrap::new(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(len, Wrap::new(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner.struct_variant(fields, Wrap::new(visitor))
    }
}

/// Reads a map key and tells whether it is serde_json's private number token.
struct IsNumberToken;

impl<'de> DeserializeSeed<'de> for IsNumberToken {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for IsNumberToken {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == NUMBER_TOKEN)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Deserialize;
    use serde_json::{json, Map};

    use super::*;

    /// The arguments as the text spells them (`json!` would write every float as Rust does).
    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn decode<T: DeserializeOwned>(text: &str) -> Result<T, ArgumentsError> {
        decode_arguments(parse(text))
    }

    fn refused<T: DeserializeOwned + fmt::Debug>(text: &str) -> ArgumentsError {
        decode::<T>(text).unwrap_err()
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct One<T> {
        a: T,
    }

    fn one<T: DeserializeOwned>(number: &str) -> Result<T, ArgumentsError> {
        decode::<One<T>>(&format!("{{\"a\": {number}}}")).map(|one| one.a)
    }

    // pins D8: every integer type reads an integral number whatever its spelling
    #[test]
    fn integral_floats_read_as_integers() {
        for spelling in ["57", "57.0", "5.7e1", "570e-1", "57.000"] {
            assert_eq!(one::<u64>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<i64>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<u8>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<i32>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<u16>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<i8>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<u128>(spelling), Ok(57), "{spelling}");
            assert_eq!(one::<i128>(spelling), Ok(57), "{spelling}");
        }
        for spelling in ["-3", "-3.0", "-3e0", "-0.3E1"] {
            assert_eq!(one::<i64>(spelling), Ok(-3), "{spelling}");
            assert_eq!(one::<i8>(spelling), Ok(-3), "{spelling}");
            assert_eq!(one::<i32>(spelling), Ok(-3), "{spelling}");
            assert_eq!(one::<i128>(spelling), Ok(-3), "{spelling}");
        }
        assert_eq!(one::<u64>("1e3"), Ok(1000));
        assert_eq!(one::<u16>("1e3"), Ok(1000));
        assert_eq!(one::<i64>("1E3"), Ok(1000));
        assert_eq!(one::<u32>("1e+3"), Ok(1000));
        assert_eq!(one::<u64>("0.0"), Ok(0));
        assert_eq!(one::<u64>("-0.0"), Ok(0), "-0.0 is 0");
        assert_eq!(one::<u8>("-0.0"), Ok(0));
        assert_eq!(one::<i64>("-0.0"), Ok(0));
    }

    // pins D8: the edges of the 64-bit ranges, as doubles
    #[test]
    fn the_64_bit_edges() {
        // The largest double below 2^64, and the one above -2^63.
        assert_eq!(
            one::<u64>("1.8446744073709550e19"),
            Ok(18_446_744_073_709_549_568)
        );
        assert_eq!(
            one::<i64>("-9.2233720368547748e18"),
            Ok(-9_223_372_036_854_774_784)
        );
        // -2^63 as a double is also what integers below i64::MIN read as: refused, as 2^64.
        assert!(one::<i64>("-9.223372036854775808e18").is_err());
        assert!(one::<i128>("-9223372036854775809").is_err());
        assert_eq!(
            one::<u128>("1.8446744073709550e19"),
            Ok(18_446_744_073_709_549_568)
        );
        // Integer spellings stay exact (K3).
        assert_eq!(one::<u64>("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(one::<i64>("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(one::<u64>("9007199254740993"), Ok(9_007_199_254_740_993));
        // A float spelling is its double (as the key reads it, K2).
        assert_eq!(one::<u64>("9007199254740993.0"), Ok(9_007_199_254_740_992));
    }

    // pins D8: a fraction, a negative number for an unsigned type, a number out of the
    // type's range: errors naming the argument and what was expected
    #[test]
    fn fractions_and_numbers_out_of_range_are_refused() {
        let cases: [(ArgumentsError, &str); 9] = [
            (
                refused::<One<u64>>(r#"{"a": 57.5}"#),
                "argument `a`: invalid type: floating point `57.5`, expected u64",
            ),
            (
                refused::<One<i32>>(r#"{"a": -0.5}"#),
                "argument `a`: invalid type: floating point `-0.5`, expected i32",
            ),
            (
                refused::<One<u64>>(r#"{"a": -1.0}"#),
                "argument `a`: invalid value: integer `-1`, expected u64",
            ),
            (
                refused::<One<u8>>(r#"{"a": 300.0}"#),
                "argument `a`: invalid value: integer `300`, expected u8",
            ),
            (
                refused::<One<i8>>(r#"{"a": -129.0}"#),
                "argument `a`: invalid value: integer `-129`, expected i8",
            ),
            (
                refused::<One<u64>>(r#"{"a": 1.8446744073709552e19}"#),
                "argument `a`: invalid value: floating point `1.8446744073709552e+19`, expected u64",
            ),
            (
                refused::<One<i64>>(r#"{"a": 9.223372036854775808e18}"#),
                "argument `a`: invalid value: integer `9223372036854775808`, expected i64",
            ),
            (
                refused::<One<i64>>(r#"{"a": -1e19}"#),
                "argument `a`: invalid value: floating point `-1e+19`, expected i64",
            ),
            (
                refused::<One<u128>>(r#"{"a": 1e20}"#),
                "argument `a`: invalid value: floating point `1e+20`, expected u128",
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error.to_string(), expected);
            assert_eq!(error.path(), Some("a"));
        }
        // An integer spelling beyond u64, which serde_json reads as a (rounded) double,
        // is refused rather than rounded; with `arbitrary_precision` serde_json hands it
        // on exactly, as an integer.
        let beyond = decode::<One<u128>>(r#"{"a": 18446744073709551617}"#);
        if *ARBITRARY_PRECISION {
            assert_eq!(beyond, Ok(One { a: (1 << 64) + 1 }));
        } else {
            assert_eq!(
                beyond.unwrap_err().to_string(),
                "argument `a`: invalid value: floating point `1.8446744073709552e+19`, expected u128"
            );
        }
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Order {
        id: u64,
        items: Vec<Item>,
        note: Option<String>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Item {
        sku: String,
        qty: u32,
        discount: Option<i64>,
    }

    // pins D8: nested structs, options and sequences; errors name the path inside
    #[test]
    fn nested_values_read_integers_and_name_the_path() {
        let order: Order = decode(
            r#"{"id": 7.0, "note": null, "items": [
                {"sku": "a", "qty": 1.0, "discount": -5.0},
                {"sku": "b", "qty": 2, "discount": null},
                {"sku": "c", "qty": 3e0}
            ]}"#,
        )
        .unwrap();
        assert_eq!(order.id, 7);
        assert_eq!(
            order.items.iter().map(|i| i.qty).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(order.items[0].discount, Some(-5));
        assert_eq!(order.items[2].discount, None);

        let error = refused::<Order>(
            r#"{"id": 7, "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2},
                {"sku": "c", "qty": 2.5}]}"#,
        );
        assert_eq!(error.path(), Some("items[2].qty"));
        assert_eq!(
            error.to_string(),
            "argument `items[2].qty`: invalid type: floating point `2.5`, expected u32"
        );
        let error =
            refused::<Order>(r#"{"id": 7, "items": [{"sku": "a", "qty": 1, "discount": 0.5}]}"#);
        assert_eq!(error.path(), Some("items[0].discount"));
    }

    // pins D8: Option<u64>
    #[test]
    fn options_read_integers() {
        assert_eq!(one::<Option<u64>>("57.0"), Ok(Some(57)));
        assert_eq!(one::<Option<u64>>("null"), Ok(None));
        assert_eq!(
            decode::<One<Option<u64>>>(r#"{"a": 57.5}"#)
                .unwrap_err()
                .to_string(),
            "argument `a`: invalid type: floating point `57.5`, expected u64"
        );
    }

    // pins D8: Vec<u64>; the error names the element
    #[test]
    fn sequences_read_integers_and_name_the_index() {
        assert_eq!(one::<Vec<u64>>("[1.0, 2, 3e0]"), Ok(vec![1, 2, 3]));
        let error = refused::<One<Vec<u64>>>(r#"{"a": [1.0, 2.5]}"#);
        assert_eq!(error.path(), Some("a[1]"));
        assert_eq!(
            error.to_string(),
            "argument `a[1]`: invalid type: floating point `2.5`, expected u64"
        );
        // Arguments that are a sequence themselves (a tool whose `A` is a tuple or a Vec).
        assert_eq!(decode::<(u8, i16)>("[1.0, -2.0]"), Ok((1, -2)));
        let error = refused::<Vec<u64>>("[1.0, 2.5]");
        assert_eq!(error.path(), Some("[1]"));
    }

    // pins D8: map values; map keys stay as serde_json reads them
    #[test]
    fn maps_read_integers_and_name_the_key() {
        let map: HashMap<String, u32> = one(r#"{"x": 1.0, "y": 2}"#).unwrap();
        assert_eq!(map, HashMap::from([("x".into(), 1), ("y".into(), 2)]));
        let error = refused::<One<HashMap<String, u32>>>(r#"{"a": {"x": 1.0, "y": 2.5}}"#);
        assert_eq!(error.path(), Some("a.y"));
        assert_eq!(
            error.to_string(),
            "argument `a.y`: invalid type: floating point `2.5`, expected u32"
        );
        // Integer keys are read from the key strings by serde_json, as before.
        let map: BTreeMap<u64, u8> = one(r#"{"57": 1.0, "3": 4}"#).unwrap();
        assert_eq!(map, BTreeMap::from([(57, 1), (3, 4)]));
        let map: Map<String, Value> = one(r#"{"57": 1.0}"#).unwrap();
        assert!(map["57"].is_f64(), "a Value stays a float: {map:?}");
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Shape {
        Point,
        Circle(u64),
        Rect(u32, u32),
        Box { w: u16, h: u16 },
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Cents(u64);

    // pins D8: enum variants and newtype structs
    #[test]
    fn enum_variants_and_newtypes_read_integers() {
        assert_eq!(one::<Shape>(r#""point""#), Ok(Shape::Point));
        assert_eq!(one::<Shape>(r#"{"circle": 2.0}"#), Ok(Shape::Circle(2)));
        assert_eq!(
            one::<Shape>(r#"{"rect": [3.0, 4e0]}"#),
            Ok(Shape::Rect(3, 4))
        );
        assert_eq!(
            one::<Shape>(r#"{"box": {"w": 5.0, "h": 6}}"#),
            Ok(Shape::Box { w: 5, h: 6 })
        );
        let error = refused::<One<Shape>>(r#"{"a": {"circle": 2.5}}"#);
        assert_eq!(error.path(), Some("a.circle"));
        assert_eq!(
            error.to_string(),
            "argument `a.circle`: invalid type: floating point `2.5`, expected u64"
        );
        let error = refused::<One<Shape>>(r#"{"a": {"box": {"w": 5, "h": 70000.0}}}"#);
        assert_eq!(error.path(), Some("a.box.h"));
        assert_eq!(one::<Cents>("1250.0"), Ok(Cents(1250)));
    }

    // pins D8: other types see the number as it is; strings are never numbers
    #[test]
    fn other_types_are_unchanged() {
        assert_eq!(one::<f64>("57.5"), Ok(57.5));
        assert_eq!(one::<f64>("57.0"), Ok(57.0));
        assert_eq!(one::<f32>("57.5"), Ok(57.5));
        let value: Value = one("57.0").unwrap();
        assert!(value.is_f64(), "{value:?}");
        assert_eq!(value.as_f64(), Some(57.0));
        let whole: Value = decode(r#"{"a": 57.0, "b": [1.0], "c": "7"}"#).unwrap();
        assert!(whole["a"].is_f64() && whole["b"][0].is_f64(), "{whole:?}");
        assert_eq!(whole["c"], json!("7"));
        assert_eq!(one::<String>(r#""57""#), Ok("57".to_owned()));
        for (text, unexpected) in [
            (r#""57""#, r#"string "57""#),
            (r#""57.0""#, r#"string "57.0""#),
            ("true", "boolean `true`"),
            ("null", "null"),
            ("[57]", "sequence"),
            (r#"{"n": 57}"#, "map"),
        ] {
            assert_eq!(
                one::<u64>(text).unwrap_err().to_string(),
                format!("argument `a`: invalid type: {unexpected}, expected u64"),
                "{text}"
            );
        }
        assert_eq!(one::<bool>("true"), Ok(true));
        assert_eq!(one::<()>("null"), Ok(()));
    }

    // pins D8: serde_json's private number representation is a number only in a build
    // with `arbitrary_precision` (where parsing that object gives a number anyway)
    #[test]
    fn the_private_number_token_is_an_object_without_arbitrary_precision() {
        let mut token = Map::new();
        token.insert(NUMBER_TOKEN.to_owned(), json!("57"));
        let result = decode_arguments::<One<u64>>(json!({"a": Value::Object(token)}));
        if *ARBITRARY_PRECISION {
            assert_eq!(result, Ok(One { a: 57 }));
        } else {
            assert_eq!(
                result.unwrap_err().to_string(),
                "argument `a`: invalid type: map, expected u64"
            );
        }
    }

    // pins D2: a missing member or arguments of the wrong shape have no path; an unknown
    // member is its own path
    #[test]
    fn whole_argument_errors_have_no_path() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Two {
            a: u64,
            b: u64,
        }
        let missing = refused::<Two>(r#"{"a": 1.0}"#);
        assert_eq!(
            (missing.path(), missing.to_string().as_str()),
            (None, "missing field `b`")
        );
        // serde_path_to_error names the unknown member as the path.
        let unknown = refused::<Two>(r#"{"a": 1, "b": 2, "c": 3}"#);
        assert_eq!(unknown.path(), Some("c"));
        assert_eq!(
            unknown.to_string(),
            "argument `c`: unknown field `c`, expected `a` or `b`"
        );
        let not_object = refused::<Two>("[1.0]");
        assert_eq!(not_object.path(), None, "{not_object}");
    }

    // pins D8: one argument of an `#[idempotent]` companion: the path starts at its name
    #[test]
    fn an_argument_path_starts_at_its_name() {
        assert_eq!(decode_argument::<u64>("a", parse("57.0")), Ok(57));
        let error = decode_argument::<u64>("a", parse("57.5")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "argument `a`: invalid type: floating point `57.5`, expected u64"
        );
        let error = decode_argument::<Vec<Item>>(
            "items",
            parse(r#"[{"sku": "a", "qty": 1}, {"sku": "b", "qty": 1}, {"sku": "c", "qty": 2.5}]"#),
        )
        .unwrap_err();
        assert_eq!(error.path(), Some("items[2].qty"));
        let error = decode_argument::<Vec<u64>>("ids", parse("[1, 2.5]")).unwrap_err();
        assert_eq!(error.path(), Some("ids[1]"));
    }

    // pins D2: no panic on any number
    #[test]
    fn no_number_panics() {
        for text in [
            "1e308",
            "-1e308",
            "5e-324",
            "-5e-324",
            "1.7976931348623157e308",
            "0.1",
            "4294967296.0",
            "-4294967297.0",
            "3.4028236692093846e38",
        ] {
            let _ = one::<u64>(text);
            let _ = one::<i8>(text);
            let _ = one::<u128>(text);
            let _ = one::<i128>(text);
            let _ = one::<f32>(text);
        }
        // Not in JSON, but handed on as the floats they are, never cast.
        struct Integer;
        impl Visitor<'_> for Integer {
            type Value = u64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("u64")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
                Ok(v)
            }
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let refused: Result<u64, serde_json::Error> = visit_integral(Integer, v);
            assert!(refused
                .unwrap_err()
                .to_string()
                .starts_with("invalid type: floating point"));
        }
    }
}
