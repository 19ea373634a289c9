//! The capture serializer: a `serde::Serializer` that builds a [`Node`] straight from the
//! user's value, mapping serde's data model to JSON exactly as serde_json does, and
//! rejecting what canonical JSON cannot hold (K3) with the path where it was found.
//!
//! | serde                         | JSON (as serde_json writes it)                  |
//! |-------------------------------|-------------------------------------------------|
//! | unit, unit struct, `None`     | `null`                                          |
//! | `Some(v)`, newtype struct     | `v`                                             |
//! | bool, str, char               | boolean, string                                 |
//! | integers (to 128 bits)        | number, exact                                   |
//! | f32, f64                      | number; NaN/±Infinity → `NonFiniteNumber`       |
//! | bytes                         | array of numbers                                |
//! | seq, tuple, tuple struct      | array                                           |
//! | map, struct                   | object (map keys: see `key.rs`)                 |
//! | unit variant                  | `"Variant"`                                     |
//! | newtype/tuple/struct variant  | `{"Variant": value / array / object}`           |
//!
//! serde_json's private tokens are recognised whatever features are on (K4; see
//! `tokens.rs`).

use std::fmt;

use serde::ser::{self, Serialize};

use super::builder::Builder;
use super::compound::{
    MapCapture, SeqCapture, StructCapture, StructKind, StructVariantCapture, TupleVariantCapture,
};
use super::node::{Node, Number, Token};
use super::path::Path;
use super::tokens::{NUMBER_TOKEN, RAW_VALUE_TOKEN};
use super::CanonicalError;

/// Captures `value` as a whole node, error paths rooted at `root`.
pub(super) fn capture_root<T: Serialize + ?Sized>(
    value: &T,
    root: &str,
) -> Result<Node, CanonicalError> {
    let mut builder = Builder::default();
    capture_value(value, &mut builder, &Path::Root(root))?;
    Ok(builder.finish())
}

/// Captures one whole value at `path` into `builder`.
///
/// A serializer returns its `Ok` only after writing exactly one value, so every
/// `Serialize` impl appends exactly one value's tokens; checked rather than trusted.
pub(super) fn capture_value<T: Serialize + ?Sized>(
    value: &T,
    builder: &mut Builder,
    path: &Path<'_>,
) -> Result<(), CanonicalError> {
    let start = builder.tokens.len();
    capture_into(value, builder, path)?;
    let written = builder.tokens.len() - start;
    if builder.tokens.get(start).map(|t| t.span_len()) != Some(written) {
        return Err(CanonicalError::Serialize {
            path: path.render(&builder.text),
            message: "the Serialize impl did not write exactly one value".to_owned(),
        });
    }
    Ok(())
}

/// Captures `value` at `path`, appending its tokens to `builder`.
pub(super) fn capture_into<T: Serialize + ?Sized>(
    value: &T,
    builder: &mut Builder,
    path: &Path<'_>,
) -> Result<(), CanonicalError> {
    value
        .serialize(Capture {
            b: &mut *builder,
            path,
        })
        .map_err(|e| e.locate(path, &builder.text))
}

/// An error inside the capture: either already located, or a message from a `Serialize`
/// impl, located by the caller that knows where that impl was serializing.
#[derive(Debug)]
pub(super) enum CaptureError {
    Located(CanonicalError),
    Custom(String),
}

impl CaptureError {
    pub(super) fn locate(self, path: &Path<'_>, text: &str) -> CanonicalError {
        match self {
            CaptureError::Located(error) => error,
            CaptureError::Custom(message) => CanonicalError::Serialize {
                path: path.render(text),
                message,
            },
        }
    }
}

impl From<CanonicalError> for CaptureError {
    fn from(error: CanonicalError) -> Self {
        CaptureError::Located(error)
    }
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Located(error) => error.fmt(f),
            CaptureError::Custom(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CaptureError {}

impl ser::Error for CaptureError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        CaptureError::Custom(msg.to_string())
    }
}

/// The error for a NaN or infinite float at `path`.
pub(super) fn non_finite(path: &Path<'_>, text: &str, value: f64) -> CaptureError {
    CaptureError::Located(CanonicalError::NonFiniteNumber {
        path: path.render(text),
        value: value.to_string(),
    })
}

/// The capture serializer for one value at `path`.
pub(super) struct Capture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
}

/// What the capture serializer's methods return: the value is in the builder.
pub(super) type Done = Result<(), CaptureError>;

impl<'a> Capture<'a> {
    fn int(self, v: impl Into<i128>) -> Done {
        self.b.number(Number::Int(v.into()));
        Ok(())
    }

    fn float(self, n: Number, v: f64) -> Done {
        if v.is_finite() {
            self.b.number(n);
            Ok(())
        } else {
            Err(non_finite(self.path, &self.b.text, v))
        }
    }

    /// Opens `{"variant": …`; the caller closes it with `close_sorted_object(at, 1)`.
    fn open_variant(&mut self, variant: &str) -> usize {
        let at = self.b.open_object();
        self.b.name(variant);
        at
    }
}

impl<'a> ser::Serializer for Capture<'a> {
    type Ok = ();
    type Error = CaptureError;
    type SerializeSeq = SeqCapture<'a>;
    type SerializeTuple = SeqCapture<'a>;
    type SerializeTupleStruct = SeqCapture<'a>;
    type SerializeTupleVariant = TupleVariantCapture<'a>;
    type SerializeMap = MapCapture<'a>;
    type SerializeStruct = StructCapture<'a>;
    type SerializeStructVariant = StructVariantCapture<'a>;

    fn serialize_bool(self, v: bool) -> Done {
        self.b.push(Token::Bool(v));
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Done {
        self.int(v)
    }
    fn serialize_i16(self, v: i16) -> Done {
        self.int(v)
    }
    fn serialize_i32(self, v: i32) -> Done {
        self.int(v)
    }
    fn serialize_i64(self, v: i64) -> Done {
        self.int(v)
    }
    fn serialize_i128(self, v: i128) -> Done {
        self.int(v)
    }
    fn serialize_u8(self, v: u8) -> Done {
        self.int(v)
    }
    fn serialize_u16(self, v: u16) -> Done {
        self.int(v)
    }
    fn serialize_u32(self, v: u32) -> Done {
        self.int(v)
    }
    fn serialize_u64(self, v: u64) -> Done {
        self.int(v)
    }
    fn serialize_u128(self, v: u128) -> Done {
        self.b.number(Number::from_u128(v));
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Done {
        self.float(Number::F32(v), f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Done {
        self.float(Number::F64(v), v)
    }
    fn serialize_char(self, v: char) -> Done {
        self.b.string(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Done {
        self.b.string(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Done {
        let at = self.b.open_array();
        for &byte in v {
            self.b.number(Number::Int(byte.into()));
        }
        self.b.close_array(at, v.len());
        Ok(())
    }
    fn serialize_none(self) -> Done {
        self.b.push(Token::Null);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        self.b.push(Token::Null);
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Done {
        self.b.push(Token::Null);
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Done {
        self.b.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Done {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Done {
        let at = self.open_variant(variant);
        capture_into(value, self.b, &Path::Member(self.path, variant))?;
        self.b.close_sorted_object(at, 1);
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<SeqCapture<'a>, CaptureError> {
        Ok(SeqCapture::new(self))
    }
    fn serialize_tuple(self, _len: usize) -> Result<SeqCapture<'a>, CaptureError> {
        Ok(SeqCapture::new(self))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<SeqCapture<'a>, CaptureError> {
        Ok(SeqCapture::new(self))
    }
    fn serialize_tuple_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<TupleVariantCapture<'a>, CaptureError> {
        let outer = self.open_variant(variant);
        let inner = self.b.open_array();
        Ok(TupleVariantCapture {
            b: self.b,
            path: self.path,
            variant,
            outer,
            inner,
            count: 0,
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<MapCapture<'a>, CaptureError> {
        let at = self.b.open_object();
        Ok(MapCapture {
            b: self.b,
            path: self.path,
            at,
            count: 0,
            pending: None,
        })
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<StructCapture<'a>, CaptureError> {
        let kind = match name {
            NUMBER_TOKEN => StructKind::Number { done: false },
            RAW_VALUE_TOKEN => StructKind::RawValue { done: false },
            _ => StructKind::Fields {
                at: self.b.open_object(),
                count: 0,
                fields: self.b.fields.len(),
            },
        };
        Ok(StructCapture {
            b: self.b,
            path: self.path,
            kind,
        })
    }
    fn serialize_struct_variant(
        mut self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<StructVariantCapture<'a>, CaptureError> {
        let outer = self.open_variant(variant);
        let inner = self.b.open_object();
        let fields = self.b.fields.len();
        Ok(StructVariantCapture {
            b: self.b,
            path: self.path,
            variant,
            outer,
            inner,
            count: 0,
            fields,
        })
    }
}
