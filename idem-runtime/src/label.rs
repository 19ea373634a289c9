//! What a record says about its call, for the people who read it (contract P1, P2, K7).
//!
//! A key is a hash: it says nothing about the call it stands for. Every record a claim or
//! takeover writes therefore also carries a [`RecordLabel`]: the tool name, the engine's
//! namespace (K11) and the scope the key was derived in, as a [`ScopePath`] of
//! `kind=value` parts, outermost first. Arguments are never part of a label unless the
//! tool opted in to audit them (P2).
//!
//! A scope path is also how the inspection API and the `idem` command name a scope
//! (`--scope conversation=c-9`), and it determines the key component exactly: the key of a
//! call can be derived from its tool, its scope path and its arguments alone
//! ([`Engine::key_of`](crate::Engine::key_of)).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::key::ScopeComponent;
use crate::scope::{is_scope_name, CALL, CONVERSATION, GLOBAL, TURN_PART};

/// One part of a scope: its kind (`conversation`, `call`, `tenant`, …) and its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ScopePart {
    /// The scope's name: `conversation`, `call`, or a user-named scope.
    pub kind: String,
    /// The value in force for the call (a conversation id, a tool-call id, a tenant id).
    pub value: String,
}

/// A scope as parts, outermost first (P1): empty for `global`; `conversation=c-9`;
/// `conversation=c-9/call=call_1` for a `call` scope within a conversation;
/// `tenant=acme/conversation=c-1` for the composite scope `tenant+conversation`.
///
/// Its text form ([`Display`](fmt::Display), [`FromStr`]) joins the parts with `/` and
/// percent-encodes `%`, `/`, `=` and ASCII control characters (NUL, which PostgreSQL text
/// cannot hold, among them) inside values, so the text is unambiguous and one
/// path's text is a prefix of another's exactly when its parts are a prefix of the other's
/// (what list filters match on, I3). The empty path's text is the empty string.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::label::ScopePath;
/// let path = ScopePath::new().with("tenant", "acme").with("conversation", "c/1");
/// assert_eq!(path.to_string(), "tenant=acme/conversation=c%2F1");
/// assert_eq!(path.kind(), "tenant+conversation");
/// assert_eq!("tenant=acme/conversation=c%2F1".parse::<ScopePath>()?, path);
/// # Ok::<(), idem_agent::label::ScopePathError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopePath {
    parts: Vec<ScopePart>,
}

/// A scope path's text that is not `kind=value` parts joined by `/` (see [`ScopePath`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopePathError {
    /// A part without `=`.
    #[error("scope part {part:?} is not KIND=VALUE")]
    NotKindValue {
        /// The part as written.
        part: String,
    },
    /// A kind that is not a scope name (ASCII letters, digits, `_`, `-`, `.`, starting with
    /// a letter).
    #[error("scope kind {kind:?} is not a scope name (ASCII letters, digits, `_`, `-` and `.`, starting with a letter)")]
    BadKind {
        /// The kind as written.
        kind: String,
    },
    /// A `%` not followed by two hex digits, or an escape that is not UTF-8.
    #[error("scope value {value:?} has a bad percent escape")]
    BadEscape {
        /// The value as written.
        value: String,
    },
    /// An empty value: no call is keyed by one (K7).
    #[error("scope `{kind}` has an empty value")]
    EmptyValue {
        /// The part's kind.
        kind: String,
    },
    /// `call` anywhere but last, `global` as a part, or the same kind twice.
    #[error("{0}")]
    BadShape(String),
}

impl ScopePath {
    /// The empty path: the `global` scope.
    pub fn new() -> Self {
        ScopePath::default()
    }

    /// This path with `kind=value` appended as its innermost part.
    pub fn with(mut self, kind: impl Into<String>, value: impl Into<String>) -> Self {
        self.parts.push(ScopePart {
            kind: kind.into(),
            value: value.into(),
        });
        self
    }

    /// A path from parts, outermost first, checked as [`FromStr`] checks text.
    ///
    /// # Errors
    /// [`ScopePathError`] naming the part: a bad kind, an empty value, `global` as a part,
    /// `call` anywhere but last, a kind twice.
    pub fn from_parts(parts: Vec<ScopePart>) -> Result<Self, ScopePathError> {
        let path = ScopePath { parts };
        path.check()?;
        Ok(path)
    }

    /// The parts, outermost first.
    pub fn parts(&self) -> &[ScopePart] {
        &self.parts
    }

    /// Whether this is the `global` scope (no parts).
    pub fn is_global(&self) -> bool {
        self.parts.is_empty()
    }

    /// The value of the part of `kind`, if any.
    pub fn value_of(&self, kind: &str) -> Option<&str> {
        self.parts
            .iter()
            .find(|p| p.kind == kind)
            .map(|p| p.value.as_str())
    }

    /// Whether `prefix`'s parts are the first parts of this path (every path begins with
    /// the empty one).
    pub fn starts_with(&self, prefix: &ScopePath) -> bool {
        self.parts.starts_with(&prefix.parts)
    }

    /// The scope's kind as a tool declares it: `global`, `conversation`, `call`, a named
    /// scope, or a composite's parts joined by `+` (`tenant+conversation`). A `call` scope
    /// within a conversation is `call`; within a turn too (D10) it is the joined
    /// `conversation+turn+call` (or `turn+call`), the kind its key is derived from.
    pub fn kind(&self) -> Cow<'_, str> {
        match self.parts.as_slice() {
            [] => Cow::Borrowed(GLOBAL),
            [only] => Cow::Borrowed(&only.kind),
            [within, call] if within.kind == CONVERSATION && call.kind == CALL => {
                Cow::Borrowed(CALL)
            }
            parts => Cow::Owned(
                parts
                    .iter()
                    .map(|p| p.kind.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
            ),
        }
    }

    /// The key component this path stands for (K1, K7): `global` has no value; one part is
    /// that scope's kind and value; `conversation` then `call` is the `call` scope within
    /// the conversation; two or more other parts are the composite scope, whose kind is the
    /// parts' kinds joined by `+` and whose value is the JSON array of the parts' values.
    pub fn with_component<R>(&self, derive: impl FnOnce(ScopeComponent<'_>) -> R) -> R {
        match self.parts.as_slice() {
            [] => derive(ScopeComponent::new(GLOBAL, None)),
            [only] => derive(ScopeComponent::new(&only.kind, Some(&only.value))),
            [within, call] if within.kind == CONVERSATION && call.kind == CALL => {
                derive(ScopeComponent {
                    kind: CALL,
                    value: Some(&call.value),
                    within: Some(&within.value),
                })
            }
            parts => {
                let kind = self.kind();
                let values: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
                // An array of strings always serializes.
                let value = serde_json::to_string(&values).unwrap_or_default();
                derive(ScopeComponent::new(&kind, Some(&value)))
            }
        }
    }

    fn check(&self) -> Result<(), ScopePathError> {
        for (i, part) in self.parts.iter().enumerate() {
            if !is_scope_name(&part.kind) {
                return Err(ScopePathError::BadKind {
                    kind: part.kind.clone(),
                });
            }
            if part.value.is_empty() {
                return Err(ScopePathError::EmptyValue {
                    kind: part.kind.clone(),
                });
            }
            if part.kind == GLOBAL {
                return Err(ScopePathError::BadShape(
                    "`global` has no value: leave --scope out for a global tool".to_owned(),
                ));
            }
            if part.kind == CALL && i + 1 != self.parts.len() {
                return Err(ScopePathError::BadShape(
                    "`call` must be the last (innermost) scope part".to_owned(),
                ));
            }
            if self.parts[..i].iter().any(|p| p.kind == part.kind) {
                return Err(ScopePathError::BadShape(format!(
                    "scope `{}` named twice",
                    part.kind
                )));
            }
        }
        if let Some((last, within)) = self.parts.split_last() {
            let within: Vec<&str> = within.iter().map(|p| p.kind.as_str()).collect();
            let call_shape = matches!(
                within.as_slice(),
                [] | [CONVERSATION] | [TURN_PART] | [CONVERSATION, TURN_PART]
            );
            if last.kind == CALL && !call_shape {
                return Err(ScopePathError::BadShape(
                    "a `call` scope is written `call=ID`, after `conversation=ID` and `turn=ID` \
                     when the call had them (`conversation=ID/turn=ID/call=ID`, contract D10)"
                        .to_owned(),
                ));
            }
        }
        Ok(())
    }
}

impl ScopePath {
    /// The path a store kept as text ([`Display`](fmt::Display)), read without judging it:
    /// every `/`-separated piece is a part, its kind the text before the first `=`, its value
    /// the rest, percent-decoded where that decodes (else kept as written). Never fails, so
    /// that a label written by another build, or for a hand-built scope whose name the
    /// attribute would refuse, never makes its record unreadable (P1, P4): the record's
    /// outcome matters more than its label.
    pub fn from_stored(text: &str) -> Self {
        if text.is_empty() {
            return ScopePath::new();
        }
        let parts = text
            .split('/')
            .map(|piece| {
                let (kind, raw) = piece.split_once('=').unwrap_or((piece, ""));
                ScopePart {
                    kind: kind.to_owned(),
                    value: percent_decode(raw).unwrap_or_else(|| raw.to_owned()),
                }
            })
            .collect();
        ScopePath { parts }
    }
}

impl fmt::Display for ScopePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            f.write_str(&part.kind)?;
            f.write_str("=")?;
            for c in part.value.chars() {
                match c {
                    '%' => f.write_str("%25")?,
                    '/' => f.write_str("%2F")?,
                    '=' => f.write_str("%3D")?,
                    c if c.is_ascii_control() => write!(f, "%{:02X}", c as u8)?,
                    c => write!(f, "{c}")?,
                }
            }
        }
        Ok(())
    }
}

impl FromStr for ScopePath {
    type Err = ScopePathError;

    /// Parses the text form: empty for `global`, else `kind=value` parts joined by `/`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Ok(ScopePath::new());
        }
        let parts = text
            .split('/')
            .map(ScopePart::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        ScopePath::from_parts(parts)
    }
}

impl FromStr for ScopePart {
    type Err = ScopePathError;

    /// Parses one `kind=value` part; `%25`, `%2F` and `%3D` (any `%XX`) in the value decode.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (kind, raw) = text
            .split_once('=')
            .ok_or_else(|| ScopePathError::NotKindValue {
                part: text.to_owned(),
            })?;
        let value = percent_decode(raw).ok_or_else(|| ScopePathError::BadEscape {
            value: raw.to_owned(),
        })?;
        Ok(ScopePart {
            kind: kind.to_owned(),
            value,
        })
    }
}

fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Serialize for ScopePath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ScopePath {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What a record says about its call (P1, P2): written with every claim and takeover.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordLabel {
    /// The tool's name (K6).
    pub tool: String,
    /// The namespace of the engine that derived the key (K11), if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The scope the key was derived in.
    pub scope: ScopePath,
    /// The canonical JSON of the key arguments, only for a tool that opted in to audit
    /// (`#[idempotent(audit)]`, P2); `None` otherwise. Fingerprint-only arguments are never
    /// stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_args: Option<String>,
}

impl RecordLabel {
    /// A label of `tool` in `scope`, without namespace or audited arguments.
    pub fn new(tool: impl Into<String>, scope: ScopePath) -> Self {
        RecordLabel {
            tool: tool.into(),
            namespace: None,
            scope,
            key_args: None,
        }
    }

    /// Whether this label is empty: what a record written before labels existed reads as
    /// (P4).
    pub fn is_empty(&self) -> bool {
        self.tool.is_empty() && self.scope.is_global() && self.namespace.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::to_canonical;
    use crate::key::derive_key;

    fn path(text: &str) -> ScopePath {
        text.parse().unwrap()
    }

    // pins P1: the text form round-trips and escapes only %, / and = in values
    #[test]
    fn text_form_round_trips() {
        for text in [
            "",
            "conversation=c-9",
            "conversation=c-9/call=call_1",
            "tenant=acme/conversation=c%2F1%3Dx%25",
            "call=bash:0",
        ] {
            assert_eq!(path(text).to_string(), text);
        }
        let tricky = ScopePath::new().with("conversation", "a/b=c%d é\0\n\u{7f}");
        assert_eq!(tricky.to_string(), "conversation=a%2Fb%3Dc%25d é%00%0A%7F");
        assert_eq!(path(&tricky.to_string()), tricky);
        assert_eq!(ScopePath::from_stored(&tricky.to_string()), tricky);
        let client_key = ScopePath::new().with("mcp:idempotencyKey", "k-1");
        assert_eq!(path(&client_key.to_string()), client_key);
    }

    // pins P1: a prefix of parts is a prefix of the text, never a false one
    #[test]
    fn prefixes_follow_parts() {
        let long = path("tenant=acme/conversation=c-1");
        assert!(long.starts_with(&path("tenant=acme")));
        assert!(long.starts_with(&ScopePath::new()));
        assert!(!long.starts_with(&path("tenant=ac")));
        assert!(!path("tenant=acme%2Fx").starts_with(&path("tenant=acme")));
    }

    // pins P1, P4: a stored scope text is read whatever it holds, never failing its record
    #[test]
    fn stored_text_is_read_leniently() {
        let odd = ScopePath::from_stored("a+b=x/no-equals/=v/k=%zz");
        let parts: Vec<(&str, &str)> = odd
            .parts()
            .iter()
            .map(|p| (p.kind.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            parts,
            [("a+b", "x"), ("no-equals", ""), ("", "v"), ("k", "%zz")]
        );
        assert!(ScopePath::from_stored("").is_global());
    }

    // pins D10, P1, K1: the scope paths a call-scoped call is keyed under all parse; a turn
    // path's key component is its joined kind and the JSON array of its values, so it never
    // meets a call id that is written like that array
    #[test]
    fn call_paths_may_name_the_turn() {
        for (text, kind) in [
            ("call=a", "call"),
            ("conversation=c/call=a", "call"),
            ("turn=t/call=a", "turn+call"),
            ("conversation=c/turn=%23t/call=a", "conversation+turn+call"),
            ("turn=t", "turn"),
        ] {
            let path: ScopePath = text.parse().unwrap();
            assert_eq!(path.kind(), kind, "{text}");
        }
        let args = to_canonical(&serde_json::json!({})).unwrap();
        let key = |text: &str| path(text).with_component(|c| derive_key(c, "cat", &args));
        assert_ne!(key("turn=t/call=a"), key(r#"call=["t","a"]"#));
        assert_ne!(key("turn=t/call=a"), key("conversation=t/call=a"));
    }

    // pins P1, K7: bad paths are typed errors naming the part
    #[test]
    fn bad_paths_are_refused() {
        for (text, needle) in [
            ("conversation", "KIND=VALUE"),
            ("1x=a", "not a scope name"),
            ("conversation=", "empty value"),
            ("global=x", "global"),
            ("call=a/conversation=b", "last"),
            ("tenant=a/call=b", "conversation=ID/turn=ID/call=ID"),
            (
                "conversation=c/tenant=a/call=b",
                "conversation=ID/turn=ID/call=ID",
            ),
            (
                "turn=t/conversation=c/call=b",
                "conversation=ID/turn=ID/call=ID",
            ),
            ("tenant=a/tenant=b", "twice"),
            ("tenant=%zz", "percent escape"),
            ("tenant=%c3", "percent escape"),
        ] {
            let error = text.parse::<ScopePath>().unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    // pins K7, K1: a path gives the same key component as the scope it names; a composite's
    // key differs from every single scope's
    #[test]
    fn components_match_the_scopes() {
        let args = to_canonical(&serde_json::json!({"order_id": 4417})).unwrap();
        let key = |p: &ScopePath| p.with_component(|c| derive_key(c, "send_refund", &args));
        assert_eq!(
            key(&path("conversation=c-9")),
            derive_key(
                ScopeComponent::new("conversation", Some("c-9")),
                "send_refund",
                &args
            )
        );
        assert_eq!(
            key(&path("conversation=c-9/call=call_1")),
            derive_key(
                ScopeComponent {
                    kind: "call",
                    value: Some("call_1"),
                    within: Some("c-9")
                },
                "send_refund",
                &args
            )
        );
        assert_eq!(
            key(&ScopePath::new()),
            derive_key(ScopeComponent::new("global", None), "send_refund", &args)
        );
        let composite = path("tenant=acme/conversation=c-1");
        assert_eq!(composite.kind(), "tenant+conversation");
        assert_eq!(
            key(&composite),
            derive_key(
                ScopeComponent::new("tenant+conversation", Some(r#"["acme","c-1"]"#)),
                "send_refund",
                &args
            )
        );
        assert_ne!(key(&composite), key(&path("conversation=c-1")));
        assert_ne!(key(&composite), key(&path("tenant=acme")));
        assert_ne!(
            key(&composite),
            key(&path("tenant=globex/conversation=c-1"))
        );
    }
}
