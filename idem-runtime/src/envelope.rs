//! The stored form of a saved outcome (contract S11).
//!
//! An envelope is one JSON object, versioned, with exactly one of `ok` / `err`:
//!
//! ```json
//! {"version":1,"ok":{"refund_id":"re_1","amount_cents":500}}
//! {"version":1,"err":{"Failed":"card declined"}}
//! ```
//!
//! `version` is [`Envelope::VERSION`]; `ok` holds the tool's `Ok` value, `err` its saved
//! `Err` value (S4), each as serde_json writes the tool's type, with two differences:
//! object members are written sorted (RFC 8785 order), and floats must be finite (a NaN
//! would be written as `null` and could not be replayed as the same value). Integers are
//! exact. A reader accepts the members in any order. What JSON cannot tell apart is not
//! kept apart: `Some(None)` and `None` of an `Option<Option<T>>` are both `null`, so both
//! replay as `None` (and, as arguments, share a key); use an enum when the difference
//! matters. `idem-runtime/tests/it/golden_envelope.rs`
//! pins this format.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::canonical::{capture, CanonicalError};

/// A saved outcome in its stored JSON form. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Envelope(Arc<str>);

impl Envelope {
    /// The envelope format version written by this build.
    pub const VERSION: u32 = 1;

    /// Encodes a tool's `Ok` value.
    ///
    /// # Errors
    /// [`CanonicalError`] when the value cannot round-trip through JSON (a non-finite float,
    /// an unsupported map key, a failing `Serialize` impl).
    pub fn encode_ok<T: Serialize + ?Sized>(value: &T) -> Result<Envelope, CanonicalError> {
        Self::encode("ok", value)
    }

    /// Encodes a tool's saved `Err` value (S4). Errors as [`Envelope::encode_ok`].
    pub fn encode_err<E: Serialize + ?Sized>(error: &E) -> Result<Envelope, CanonicalError> {
        Self::encode("err", error)
    }

    fn encode<T: Serialize + ?Sized>(member: &str, value: &T) -> Result<Envelope, CanonicalError> {
        let node = capture(value)?;
        let value = serde_json::to_string(&node).map_err(|e| CanonicalError::Serialize {
            path: "$".to_owned(),
            message: e.to_string(),
        })?;
        Ok(Envelope(Arc::from(format!(
            "{{\"version\":{},\"{member}\":{value}}}",
            Self::VERSION
        ))))
    }

    /// `value` as a replay will return it: encoded as the saved outcome is, then decoded.
    /// Equal to `value` except for the order of object members, which the envelope sorts:
    /// a build with serde_json's `preserve_order` (a dependency such as genai turns it on)
    /// keeps a live map's insertion order, and a replay's is sorted. Integrations whose
    /// caller compares the first answer with a replay byte for byte (MCP results, rig
    /// outputs) hand the first caller this form. `value` itself when it cannot round-trip
    /// (its saving failed too, and is reported there).
    pub fn as_replayed<T: Serialize + DeserializeOwned>(value: T) -> T {
        match Self::encode_ok(&value).map(|envelope| envelope.decode::<T, T>()) {
            Ok(Ok(Ok(replayed))) => replayed,
            _ => value,
        }
    }

    /// Decodes the saved outcome as the tool's `Result<T, E>`.
    ///
    /// # Errors
    /// A message naming what did not fit: malformed JSON, an unknown version, neither or
    /// both of `ok`/`err`, or a value that does not deserialize as `T` / `E`.
    pub fn decode<T: DeserializeOwned, E: DeserializeOwned>(&self) -> Result<Result<T, E>, String> {
        let mut de = serde_json::Deserializer::from_str(&self.0);
        let decoded = Decoded::<T, E>::deserialize(&mut de).map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(decoded.0)
    }

    /// The stored JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps JSON text read back from a store. It is checked when decoded.
    pub fn from_stored(json: impl Into<Arc<str>>) -> Envelope {
        Envelope(json.into())
    }
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Envelope({})", self.0)
    }
}

struct Decoded<T, E>(Result<T, E>);

impl<'de, T: DeserializeOwned, E: DeserializeOwned> Deserialize<'de> for Decoded<T, E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor(PhantomData))
    }
}

struct EnvelopeVisitor<T, E>(PhantomData<(T, E)>);

impl<'de, T: DeserializeOwned, E: DeserializeOwned> Visitor<'de> for EnvelopeVisitor<T, E> {
    type Value = Decoded<T, E>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an idem outcome envelope {\"version\":1,\"ok\"|\"err\":…}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version: Option<u32> = None;
        let mut outcome: Option<Result<T, E>> = None;
        while let Some(member) = map.next_key::<String>()? {
            match member.as_str() {
                "version" => version = Some(map.next_value()?),
                "ok" | "err" if outcome.is_some() => {
                    return Err(de::Error::custom("envelope has both `ok` and `err`"))
                }
                "ok" => outcome = Some(Ok(map.next_value()?)),
                "err" => outcome = Some(Err(map.next_value()?)),
                other => return Err(de::Error::unknown_field(other, &["version", "ok", "err"])),
            }
        }
        match version {
            Some(Envelope::VERSION) => {}
            Some(v) => return Err(de::Error::custom(format!("unknown envelope version {v}"))),
            None => return Err(de::Error::missing_field("version")),
        }
        outcome
            .map(Decoded)
            .ok_or_else(|| de::Error::custom("envelope has neither `ok` nor `err`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins S11: versioned envelope, member order free, bad input is an error
    #[test]
    fn envelope_round_trips_and_rejects_bad_input() {
        let e = Envelope::encode_ok(&vec![1u8, 2]).unwrap();
        assert_eq!(e.as_str(), r#"{"version":1,"ok":[1,2]}"#);
        assert_eq!(e.decode::<Vec<u8>, String>().unwrap(), Ok(vec![1, 2]));
        let e = Envelope::from_stored(r#"{"err":"no","version":1}"#);
        assert_eq!(e.decode::<u8, String>().unwrap(), Err("no".to_owned()));
        for bad in [
            r#"{"ok":1}"#,
            r#"{"version":2,"ok":1}"#,
            r#"{"version":1}"#,
            r#"{"version":1,"ok":1,"err":2}"#,
            "[]",
            "{",
        ] {
            assert!(
                Envelope::from_stored(bad).decode::<u8, u8>().is_err(),
                "{bad}"
            );
        }
    }
}
