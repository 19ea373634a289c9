//! Map keys as object member names, exactly as serde_json's writer turns them into text.
//!
//! Strings and chars are themselves; bools are `"true"`/`"false"`; integers their
//! decimal digits; finite floats the text serde_json writes for them (`1.5`, `1.0`); unit
//! enum variants their name; newtype structs and `Some` their inner key. A serde_json
//! `Number` under `arbitrary_precision` (a `$serde_json::private::Number` struct, which
//! serde_json's own writer rejects as a key) is the text serde_json writes for that number
//! without the feature, so the name does not depend on it (K4). Anything else (`None`,
//! unit, bytes, sequences, maps, structs, variants with data) is
//! [`CanonicalError::UnsupportedMapKey`]; a NaN or infinite float key is
//! [`CanonicalError::NonFiniteNumber`].

use std::fmt::{Display, Write as _};

use serde::ser::{self, Impossible, Serialize};

use super::capture::{non_finite, CaptureError};
use super::node::Number;
use super::path::Path;
use super::tokens::{self, NUMBER_TOKEN};
use super::CanonicalError;

/// Appends one map key's member name to `out` (the capture's text). `path` is the map's
/// location.
pub(super) struct MapKeyCapture<'a> {
    pub(super) out: &'a mut String,
    pub(super) path: &'a Path<'a>,
}

type Done = Result<(), CaptureError>;
type Unsupported = Impossible<(), CaptureError>;

impl MapKeyCapture<'_> {
    fn unsupported(&self, key_kind: &str) -> CaptureError {
        CaptureError::Located(CanonicalError::UnsupportedMapKey {
            path: self.path.render(self.out),
            key_kind: key_kind.to_owned(),
        })
    }

    fn display(self, value: impl Display) -> Done {
        // Writing to a String cannot fail.
        let _ = write!(self.out, "{value}");
        Ok(())
    }

    /// Finite floats as serde_json writes them.
    fn float<F: Serialize>(self, value: F, as_f64: f64) -> Done {
        if !as_f64.is_finite() {
            return Err(non_finite(self.path, self.out, as_f64));
        }
        let text = serde_json::to_string(&value).map_err(<CaptureError as ser::Error>::custom)?;
        self.out.push_str(&text);
        Ok(())
    }
}

impl<'a> ser::Serializer for MapKeyCapture<'a> {
    type Ok = ();
    type Error = CaptureError;
    type SerializeSeq = Unsupported;
    type SerializeTuple = Unsupported;
    type SerializeTupleStruct = Unsupported;
    type SerializeTupleVariant = Unsupported;
    type SerializeMap = Unsupported;
    type SerializeStruct = NumberKeyCapture<'a>;
    type SerializeStructVariant = Unsupported;

    fn serialize_bool(self, v: bool) -> Done {
        self.display(v)
    }
    fn serialize_i8(self, v: i8) -> Done {
        self.display(v)
    }
    fn serialize_i16(self, v: i16) -> Done {
        self.display(v)
    }
    fn serialize_i32(self, v: i32) -> Done {
        self.display(v)
    }
    fn serialize_i64(self, v: i64) -> Done {
        self.display(v)
    }
    fn serialize_i128(self, v: i128) -> Done {
        self.display(v)
    }
    fn serialize_u8(self, v: u8) -> Done {
        self.display(v)
    }
    fn serialize_u16(self, v: u16) -> Done {
        self.display(v)
    }
    fn serialize_u32(self, v: u32) -> Done {
        self.display(v)
    }
    fn serialize_u64(self, v: u64) -> Done {
        self.display(v)
    }
    fn serialize_u128(self, v: u128) -> Done {
        self.display(v)
    }
    fn serialize_f32(self, v: f32) -> Done {
        self.float(v, f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Done {
        self.float(v, v)
    }
    fn serialize_char(self, v: char) -> Done {
        self.out.push(v);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Done {
        self.out.push_str(v);
        Ok(())
    }
    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Done {
        self.display(value)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Done {
        Err(self.unsupported("bytes"))
    }
    fn serialize_none(self) -> Done {
        Err(self.unsupported("none"))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Done {
        Err(self.unsupported("unit"))
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Done {
        Err(self.unsupported("unit struct"))
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Done {
        self.out.push_str(variant);
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
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Done {
        Err(self.unsupported("newtype variant"))
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("sequence"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("tuple"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("tuple struct"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("tuple variant"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("map"))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<NumberKeyCapture<'a>, CaptureError> {
        if name != NUMBER_TOKEN {
            return Err(self.unsupported("struct"));
        }
        let start = self.out.len();
        Ok(NumberKeyCapture {
            out: self.out,
            path: self.path,
            start,
            done: false,
        })
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Unsupported, CaptureError> {
        Err(self.unsupported("struct variant"))
    }
}

/// A serde_json `Number` key under `arbitrary_precision`: its text is read as the number
/// serde_json reads without the feature, then replaced by that number's key text.
pub(super) struct NumberKeyCapture<'a> {
    out: &'a mut String,
    path: &'a Path<'a>,
    /// Where the key's text starts in `out`.
    start: usize,
    done: bool,
}

impl ser::SerializeStruct for NumberKeyCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Done {
        if key != NUMBER_TOKEN || self.done {
            return Err(ser::Error::custom(format!(
                "serde_json private value has an unexpected field `{key}`"
            )));
        }
        value.serialize(MapKeyCapture {
            out: &mut *self.out,
            path: self.path,
        })?;
        let number = tokens::parse_number(self.out.get(self.start..).unwrap_or_default());
        self.out.truncate(self.start);
        let key = MapKeyCapture {
            out: &mut *self.out,
            path: self.path,
        };
        match number {
            Ok(Number::Int(v)) => key.display(v)?,
            Ok(Number::Big(v)) => key.display(v)?,
            Ok(Number::F64(v)) => key.float(v, v)?,
            Ok(Number::F32(v)) => key.float(v, f64::from(v))?,
            Err(message) => {
                return Err(CaptureError::Located(CanonicalError::InvalidNumber {
                    path: self.path.render(self.out),
                    message,
                }))
            }
        }
        self.done = true;
        Ok(())
    }
    fn end(self) -> Done {
        if self.done {
            Ok(())
        } else {
            Err(ser::Error::custom(
                "serde_json private value without its text",
            ))
        }
    }
}
