//! The compound states of the capture serializer: arrays, enum variants with data, maps,
//! and structs (including serde_json's private number and raw-value structs, see
//! `tokens.rs`). Each appends its members' tokens to the builder as they come, and sizes
//! (and, for objects, sorts) its container when it ends.

use serde::ser::{self, Serialize};

use super::builder::Builder;
use super::capture::{capture_into, Capture, CaptureError, Done};
use super::key::MapKeyCapture;
use super::node::{Span, Token};
use super::path::Path;
use super::tokens::{self, NUMBER_TOKEN, RAW_VALUE_TOKEN};
use super::CanonicalError;

/// Elements of an array (seq, tuple, tuple struct).
pub(super) struct SeqCapture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
    pub(super) at: usize,
    pub(super) count: usize,
}

impl<'a> SeqCapture<'a> {
    pub(super) fn new(capture: Capture<'a>) -> Self {
        let at = capture.b.open_array();
        SeqCapture {
            b: capture.b,
            path: capture.path,
            at,
            count: 0,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        capture_into(value, self.b, &Path::Index(self.path, self.count))?;
        self.count += 1;
        Ok(())
    }

    fn close(self) -> Done {
        self.b.close_array(self.at, self.count);
        Ok(())
    }
}

impl ser::SerializeSeq for SeqCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.close()
    }
}

impl ser::SerializeTuple for SeqCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.close()
    }
}

impl ser::SerializeTupleStruct for SeqCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.element(value)
    }
    fn end(self) -> Done {
        self.close()
    }
}

/// `{"Variant": [elements]}`.
pub(super) struct TupleVariantCapture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
    pub(super) variant: &'static str,
    pub(super) outer: usize,
    pub(super) inner: usize,
    pub(super) count: usize,
}

impl ser::SerializeTupleVariant for TupleVariantCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        let variant = Path::Member(self.path, self.variant);
        capture_into(value, self.b, &Path::Index(&variant, self.count))?;
        self.count += 1;
        Ok(())
    }
    fn end(self) -> Done {
        self.b.close_array(self.inner, self.count);
        self.b.close_sorted_object(self.outer, 1);
        Ok(())
    }
}

/// An object from a map: keys through [`MapKeyCapture`].
pub(super) struct MapCapture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
    pub(super) at: usize,
    pub(super) count: usize,
    /// The name of the member whose value comes next.
    pub(super) pending: Option<Span>,
}

impl ser::SerializeMap for MapCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        if self.pending.is_some() {
            return Err(ser::Error::custom(
                "map key serialized twice without its value",
            ));
        }
        let start = self.b.text.len();
        key.serialize(MapKeyCapture {
            out: &mut self.b.text,
            path: self.path,
        })
        .map_err(|e| e.locate(self.path, &self.b.text))?;
        let span = Span {
            start,
            end: self.b.text.len(),
        };
        self.b.push(Token::Name(span));
        self.pending = Some(span);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        let Some(name) = self.pending.take() else {
            return Err(ser::Error::custom("map value serialized before its key"));
        };
        capture_into(value, self.b, &Path::Key(self.path, name))?;
        self.count += 1;
        Ok(())
    }
    fn end(self) -> Done {
        if self.pending.is_some() {
            return Err(ser::Error::custom("map key serialized without its value"));
        }
        Ok(self.b.close_object(self.at, self.count, self.path)?)
    }
}

/// A struct's fields, or one of serde_json's private token structs.
pub(super) struct StructCapture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
    pub(super) kind: StructKind,
}

pub(super) enum StructKind {
    /// An object; its field names are pushed on the builder's field stack from `fields`.
    Fields {
        at: usize,
        count: usize,
        fields: usize,
    },
    /// `$serde_json::private::Number`; `done` once its text field was captured.
    Number { done: bool },
    /// `$serde_json::private::RawValue`; `done` once its text field was captured.
    RawValue { done: bool },
}

impl ser::SerializeStruct for StructCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Done {
        match &mut self.kind {
            StructKind::Fields { count, .. } => {
                self.b.name(key);
                self.b.fields.push(key);
                capture_into(value, self.b, &Path::Member(self.path, key))?;
                *count += 1;
            }
            StructKind::Number { done } if key == NUMBER_TOKEN && !*done => {
                let number = {
                    let text = token_text(value, self.b, self.path)?;
                    tokens::parse_number(text)
                };
                let number = number.map_err(|message| CanonicalError::InvalidNumber {
                    path: self.path.render(&self.b.text),
                    message,
                })?;
                drop_token_text(self.b);
                self.b.number(number);
                *done = true;
            }
            StructKind::RawValue { done } if key == RAW_VALUE_TOKEN && !*done => {
                let value = tokens::parse_raw_value(token_text(value, self.b, self.path)?)?;
                drop_token_text(self.b);
                capture_into(&value, self.b, self.path)?;
                *done = true;
            }
            StructKind::Number { .. } | StructKind::RawValue { .. } => {
                return Err(ser::Error::custom(format!(
                    "serde_json private value has an unexpected field `{key}`"
                )))
            }
        }
        Ok(())
    }
    fn end(self) -> Done {
        match self.kind {
            StructKind::Fields { at, count, fields } => {
                Ok(self.b.close_struct(at, count, fields, self.path)?)
            }
            StructKind::Number { done: true } | StructKind::RawValue { done: true } => Ok(()),
            StructKind::Number { done: false } | StructKind::RawValue { done: false } => Err(
                ser::Error::custom("serde_json private value without its text"),
            ),
        }
    }
}

/// Captures the text field of a token struct (a string) and returns its text, which
/// stays as the builder's last token until [`drop_token_text`].
fn token_text<'b, T: Serialize + ?Sized>(
    value: &T,
    b: &'b mut Builder,
    path: &Path<'_>,
) -> Result<&'b str, CaptureError> {
    let before = b.tokens.len();
    capture_into(value, b, path)?;
    match b.tokens.get(before..) {
        Some([Token::String(span)]) => Ok(b.text.get(span.start..span.end).unwrap_or_default()),
        _ => Err(ser::Error::custom(
            "serde_json private value whose text is not a string",
        )),
    }
}

/// Removes the string token [`token_text`] left, and its text.
fn drop_token_text(b: &mut Builder) {
    if let Some(Token::String(span)) = b.tokens.last().copied() {
        b.tokens.pop();
        b.text.truncate(span.start);
    }
}

/// `{"Variant": {fields}}`.
pub(super) struct StructVariantCapture<'a> {
    pub(super) b: &'a mut Builder,
    pub(super) path: &'a Path<'a>,
    pub(super) variant: &'static str,
    pub(super) outer: usize,
    pub(super) inner: usize,
    pub(super) count: usize,
    /// Where this variant's field names start on the builder's field stack.
    pub(super) fields: usize,
}

impl ser::SerializeStructVariant for StructVariantCapture<'_> {
    type Ok = ();
    type Error = CaptureError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Done {
        let variant = Path::Member(self.path, self.variant);
        self.b.name(key);
        self.b.fields.push(key);
        capture_into(value, self.b, &Path::Member(&variant, key))?;
        self.count += 1;
        Ok(())
    }
    fn end(self) -> Done {
        let variant = Path::Member(self.path, self.variant);
        self.b
            .close_struct(self.inner, self.count, self.fields, &variant)?;
        self.b.close_sorted_object(self.outer, 1);
        Ok(())
    }
}
