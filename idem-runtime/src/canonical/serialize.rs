//! `impl Serialize for Node`: the value as serde_json writes it (see [`Node`]), used to
//! store outcomes and to feed the node to other serializers.

use serde::ser::{self, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::node::{Node, Number, Token};

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        At { node: self, at: 0 }.serialize(serializer)
    }
}

/// The value starting at token `at` of `node`.
struct At<'a> {
    node: &'a Node,
    at: usize,
}

impl At<'_> {
    /// The index of the token after the value starting at `at`.
    fn after(&self, at: usize) -> usize {
        at.saturating_add(self.node.tokens.get(at).map_or(1, |t| t.span_len()))
    }
}

impl Serialize for At<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.node;
        let malformed = || <S::Error as ser::Error>::custom("malformed idem canonical Node");
        match node.tokens.get(self.at).copied().ok_or_else(malformed)? {
            Token::Null => serializer.serialize_unit(),
            Token::Bool(b) => serializer.serialize_bool(b),
            Token::Number(n) => n.serialize(serializer),
            Token::String(span) => serializer.serialize_str(node.str(span)),
            Token::Array { count, .. } => {
                let mut seq = serializer.serialize_seq(Some(count))?;
                let mut at = self.at + 1;
                for _ in 0..count {
                    seq.serialize_element(&At { node, at })?;
                    at = self.after(at);
                }
                seq.end()
            }
            Token::Object { count, .. } => {
                let mut map = serializer.serialize_map(Some(count))?;
                let mut at = self.at + 1;
                for _ in 0..count {
                    let Some(Token::Name(name)) = node.tokens.get(at).copied() else {
                        return Err(malformed());
                    };
                    map.serialize_entry(node.str(name), &At { node, at: at + 1 })?;
                    at = self.after(at + 1);
                }
                map.end()
            }
            Token::Name(_) => Err(malformed()),
        }
    }
}

impl Serialize for Number {
    /// Integers go out as `i64`/`u64` when they fit (as serde_json writes them), wider ones
    /// as `i128`/`u128`; floats as the `f64`/`f32` they were.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            Number::Int(v) => {
                if let Ok(v) = i64::try_from(v) {
                    serializer.serialize_i64(v)
                } else if let Ok(v) = u64::try_from(v) {
                    serializer.serialize_u64(v)
                } else {
                    serializer.serialize_i128(v)
                }
            }
            Number::Big(v) => serializer.serialize_u128(v),
            Number::F64(v) => serializer.serialize_f64(v),
            Number::F32(v) => serializer.serialize_f32(v),
        }
    }
}
