//! serde_json's private representations, recognised so that no serde_json feature turned
//! on anywhere in the build changes a key (K4).
//!
//! - `arbitrary_precision`: a `Number` serializes as a struct named
//!   `$serde_json::private::Number` with one field of the same name holding the number's
//!   text. The text is read as serde_json reads a number without the feature: an integer
//!   that fits `u64` or `i64` is that integer, `-0` and every other number is the nearest
//!   `f64` (correctly rounded, as with the workspace's `float_roundtrip`). So a `Value`
//!   parsed from the same JSON text captures to the same node with or without the feature.
//! - `raw_value`: a `RawValue` serializes as a struct named `$serde_json::private::RawValue`
//!   with one field holding its JSON text. The text is parsed as a `serde_json::Value` and
//!   captured: its whitespace and member order do not matter, and a repeated member name
//!   keeps the last value, as when the same text is parsed into a `Value`.

use serde::ser;

use super::capture::CaptureError;
use super::node::Number;

/// The struct and field name of a serde_json `Number` under `arbitrary_precision`.
pub(super) const NUMBER_TOKEN: &str = "$serde_json::private::Number";
/// The struct and field name of a serde_json `RawValue`.
pub(super) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Parses a `RawValue`'s JSON text.
pub(super) fn parse_raw_value(text: &str) -> Result<serde_json::Value, CaptureError> {
    serde_json::from_str(text).map_err(|e| {
        <CaptureError as ser::Error>::custom(format!("serde_json RawValue is not JSON: {e}"))
    })
}

/// Reads a JSON number's text as serde_json does without `arbitrary_precision`.
///
/// # Errors
/// The message of a [`CanonicalError::InvalidNumber`](super::CanonicalError::InvalidNumber)
/// for text that is not a JSON number (RFC 8259 §6) or whose magnitude is beyond the
/// largest finite double.
pub(super) fn parse_number(text: &str) -> Result<Number, String> {
    let Some(is_integer) = json_number_shape(text) else {
        return Err(format!("{text:?} is not a JSON number"));
    };
    if is_integer {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(digits) => (true, digits),
            None => (false, text),
        };
        if let Ok(magnitude) = digits.parse::<u64>() {
            match (negative, magnitude) {
                (false, m) => return Ok(Number::Int(m.into())),
                (true, 0) => return Ok(Number::F64(-0.0)),
                (true, m) if m <= 1 << 63 => return Ok(Number::Int(-i128::from(m))),
                // Below i64::MIN: a double, as serde_json reads it.
                (true, _) => {}
            }
        }
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Number::F64(v)),
        _ => Err(format!("{text} is beyond the range of an IEEE double")),
    }
}

/// `Some(true)` for a JSON integer (`-?(0|[1-9][0-9]*)`), `Some(false)` for any other
/// JSON number (with a fraction or an exponent), `None` for text that is not a JSON number.
fn json_number_shape(text: &str) -> Option<bool> {
    let b = text.as_bytes();
    let digits_from = |mut i: usize| {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    let mut i = usize::from(b.first() == Some(&b'-'));
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits_from(i)?,
        _ => return None,
    };
    let mut is_integer = true;
    if b.get(i) == Some(&b'.') {
        is_integer = false;
        i = digits_from(i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        is_integer = false;
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits_from(i)?;
    }
    (i == b.len()).then_some(is_integer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Number, String> {
        parse_number(text)
    }

    // pins K4: arbitrary_precision integers read as without the feature
    #[test]
    fn integers_read_as_serde_json_reads_them() {
        assert_eq!(parse("0"), Ok(Number::Int(0)));
        assert_eq!(
            parse("18446744073709551615"),
            Ok(Number::Int(u64::MAX.into()))
        );
        assert_eq!(
            parse("-9223372036854775808"),
            Ok(Number::Int(i64::MIN.into()))
        );
        assert_eq!(parse("-0"), Ok(Number::F64(-0.0)));
        assert_eq!(
            parse("18446744073709551616"),
            Ok(Number::F64(18446744073709551616.0))
        );
        assert_eq!(
            parse("-9223372036854775809"),
            Ok(Number::F64(-9223372036854775809.0))
        );
    }

    // pins K4: arbitrary_precision floats read as without the feature
    #[test]
    fn fractions_and_exponents_are_doubles() {
        assert_eq!(parse("1.0"), Ok(Number::F64(1.0)));
        assert_eq!(parse("1E21"), Ok(Number::F64(1e21)));
        assert_eq!(parse("-0.0"), Ok(Number::F64(-0.0)));
        assert_eq!(parse("5e-324"), Ok(Number::F64(5e-324)));
        assert_eq!(parse("1e-400"), Ok(Number::F64(0.0)));
    }

    // pins K3: number text that is no finite JSON number is an error
    #[test]
    fn bad_text_is_an_error() {
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "NaN", "inf", "0x10", "1 ", "1e400",
            "-1e400",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
