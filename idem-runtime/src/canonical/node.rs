//! [`Node`]: a captured JSON value with exact integers, finite floats, and objects whose
//! members are sorted and unique.
//!
//! A node is flat: its tokens in document order (pre-order, containers first, holding
//! the number of tokens inside them) and one text buffer holding every string and member
//! name. Capturing a value costs two growing buffers instead of one allocation per
//! string and per container, and writing it is one pass over contiguous memory.

use std::fmt;

use super::builder::Builder;
use super::capture::capture_value;
use super::path::Path;
use super::CanonicalError;

/// A captured JSON value: what [`capture`](super::capture) builds from a `Serialize`
/// value, and what the canonical form is written from ([`Node::to_canonical`]).
///
/// A `Node` holds only what canonical JSON can write, so every `Node` has a canonical
/// form:
/// - numbers are finite (K3); integers are exact over the whole range of serde's data
///   model (`i128::MIN ..= u128::MAX`), and an `f32` stays an `f32`;
/// - object members are sorted by the UTF-16 code units of their names (RFC 8785
///   §3.2.3), and names are unique.
///
/// Equality is structural: the integer `1` and the float `1.0` are different nodes though
/// their canonical forms agree; compare [`Node::to_canonical`] to compare keys.
///
/// Its `Serialize` impl writes what serde_json writes for the value the node was captured
/// from — the same JSON types, integers exact, floats as the `f64`/`f32` they were — except
/// that object members come in canonical order. It is how outcomes are stored, and reads
/// back through `serde_json::from_str::<T>` as the original `T`.
#[derive(Clone)]
pub struct Node {
    pub(super) tokens: Vec<Token>,
    pub(super) text: String,
}

/// One token of a [`Node`], in document order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Token {
    Null,
    Bool(bool),
    Number(Number),
    String(Span),
    /// An array of `count` elements, held in the next `len` tokens.
    Array {
        count: usize,
        len: usize,
    },
    /// An object of `count` members (a `Name` token, then the value's tokens), held in
    /// the next `len` tokens, sorted by name (UTF-16 code units), names unique.
    Object {
        count: usize,
        len: usize,
    },
    /// A member name.
    Name(Span),
}

/// A range of a node's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
}

/// A finite number. Integers are normalised, so the same integer captured from a `u8`, an
/// `i64` or a `u128` is the same token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Number {
    /// Every integer in `i128`'s range.
    Int(i128),
    /// An integer above `i128::MAX`.
    Big(u128),
    F64(f64),
    F32(f32),
}

/// `Number.MAX_SAFE_INTEGER`, 2^53 − 1: every integer of at most this magnitude is an IEEE
/// double exactly, and no other integer has a double of its own. Integers of larger
/// magnitude get the exactness annex (K3).
pub(super) const MAX_SAFE_INTEGER: u128 = (1 << 53) - 1;

impl Number {
    pub(super) fn from_u128(v: u128) -> Number {
        i128::try_from(v).map_or(Number::Big(v), Number::Int)
    }
}

impl Token {
    /// How many tokens this token's value spans, itself included.
    pub(super) fn span_len(self) -> usize {
        match self {
            Token::Array { len, .. } | Token::Object { len, .. } => len.saturating_add(1),
            _ => 1,
        }
    }
}

impl Node {
    /// The text of `span`; empty if the span is not in this node's text (never the case
    /// for spans the builder made).
    pub(super) fn str(&self, span: Span) -> &str {
        self.text.get(span.start..span.end).unwrap_or_default()
    }

    /// The bytes of `span` (UTF-8 of a `str`); empty if the span is not in this node's
    /// text.
    pub(super) fn bytes(&self, span: Span) -> &[u8] {
        self.text
            .as_bytes()
            .get(span.start..span.end)
            .unwrap_or_default()
    }

    /// An object node from `(name, node)` members, in any order: the members are sorted
    /// by the UTF-16 code units of their names (RFC 8785 §3.2.3). This is how a call's
    /// arguments become one `{argname: value, …}` object.
    ///
    /// # Errors
    /// [`CanonicalError::DuplicateMember`] (path `$`) when two members have the same name.
    pub fn object(members: Vec<(String, Node)>) -> Result<Node, CanonicalError> {
        let mut builder = Builder::default();
        let at = builder.open_object();
        for (name, node) in &members {
            builder.name(name);
            builder.append(node);
        }
        builder.close_object(at, members.len(), &Path::Root("$"))?;
        Ok(builder.finish())
    }
}

impl PartialEq for Node {
    /// Same tokens, same strings and names (wherever they sit in the text buffers).
    fn eq(&self, other: &Node) -> bool {
        self.tokens.len() == other.tokens.len()
            && self
                .tokens
                .iter()
                .zip(&other.tokens)
                .all(|(a, b)| match (a, b) {
                    (Token::String(x), Token::String(y)) | (Token::Name(x), Token::Name(y)) => {
                        self.str(*x) == other.str(*y)
                    }
                    _ => a == b,
                })
    }
}

impl fmt::Debug for Node {
    /// A JSON-like rendering: `Node({"a": Int(1), "b": [String("x"), Null]})`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Node(")?;
        let mut at = 0;
        while at < self.tokens.len() {
            at = self.fmt_at(at, f)?;
        }
        f.write_str(")")
    }
}

impl Node {
    /// Writes the value at token `at`; returns the index after it.
    fn fmt_at(&self, at: usize, f: &mut fmt::Formatter<'_>) -> Result<usize, fmt::Error> {
        let Some(&token) = self.tokens.get(at) else {
            return Ok(usize::MAX);
        };
        let mut next = at + 1;
        match token {
            Token::Null => f.write_str("Null")?,
            Token::Bool(b) => write!(f, "Bool({b})")?,
            Token::Number(n) => write!(f, "{n:?}")?,
            Token::String(s) => write!(f, "String({:?})", self.str(s))?,
            Token::Name(s) => write!(f, "{:?}: ", self.str(s))?,
            Token::Array { count, .. } | Token::Object { count, .. } => {
                let object = matches!(token, Token::Object { .. });
                f.write_str(if object { "{" } else { "[" })?;
                for i in 0..count {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if object {
                        next = self.fmt_at(next, f)?;
                    }
                    next = self.fmt_at(next, f)?;
                }
                f.write_str(if object { "}" } else { "]" })?;
            }
        }
        Ok(next)
    }
}

/// An object under construction whose members are captured straight into it: how a
/// call's arguments become one `{argname: value, …}` object (`ArgsBuilder`) without
/// copying each argument's node.
#[derive(Default)]
pub(crate) struct ObjectBuilder {
    builder: Builder,
    at: Option<usize>,
    count: usize,
}

impl fmt::Debug for ObjectBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectBuilder")
            .field("members", &self.count)
            .finish_non_exhaustive()
    }
}

impl ObjectBuilder {
    /// Captures `value` as the member `name`; error paths start at `name`.
    ///
    /// # Errors
    /// [`CanonicalError::DuplicateMember`] (path `$`) when `name` is already a member, or
    /// the capture's error. On error the object is as it was.
    pub(crate) fn member<T: serde::Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        let builder = &mut self.builder;
        let at = *self.at.get_or_insert_with(|| builder.open_object());
        let mut i = at + 1;
        while let Some(&Token::Name(span)) = builder.tokens.get(i) {
            if builder.text.get(span.start..span.end) == Some(name) {
                return Err(CanonicalError::DuplicateMember {
                    path: "$".to_owned(),
                    name: name.to_owned(),
                });
            }
            i += 1 + builder.tokens.get(i + 1).map_or(1, |t| t.span_len());
        }
        let before = (
            builder.tokens.len(),
            builder.text.len(),
            builder.fields.len(),
        );
        builder.name(name);
        match capture_value(value, builder, &Path::Root(name)) {
            Ok(()) => {
                self.count += 1;
                Ok(())
            }
            Err(error) => {
                builder.tokens.truncate(before.0);
                builder.text.truncate(before.1);
                builder.fields.truncate(before.2);
                Err(error)
            }
        }
    }

    /// True when no member was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The object node, members sorted (RFC 8785 §3.2.3).
    pub(crate) fn finish(mut self) -> Node {
        let at = *self.at.get_or_insert_with(|| self.builder.open_object());
        // Names were checked unique as they were added, so sorting finds no duplicate.
        let duplicate = self.builder.sort_object(at, self.count);
        debug_assert!(duplicate.is_none(), "ObjectBuilder names are unique");
        self.builder.finish()
    }
}
