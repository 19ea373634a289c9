//! What a `tools/call` request says about its own identity: the `_meta` values a scope or a
//! client key is read from, and the MCP session (contract M3, M4).

use ::rmcp::model::{Extensions, RequestMetaObject};
use serde_json::Value;

use super::names::{IDEMPOTENCY_KEY, MAX_CLIENT_KEY_CHARS};

/// A `_meta` member that is present but unusable: the call gets a tool error naming it
/// and does not run (M3, M4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetaProblem {
    /// Not a string (a number, an object, `null`…): `kind` names what it was.
    NotAString { name: String, kind: &'static str },
    /// The empty string.
    Empty { name: String },
    /// A client key longer than [`MAX_CLIENT_KEY_CHARS`] characters.
    TooLong { name: String, chars: usize },
    /// A conversation id in the form idem gives the MCP session's (`mcp-session:…`), which
    /// a client may not choose: it would name another session's conversation (M3).
    Reserved { name: String, prefix: &'static str },
}

impl MetaProblem {
    /// The text of the tool error, for the client (and its model) to act on.
    pub(crate) fn message(&self) -> String {
        match self {
            MetaProblem::NotAString { name, kind } => format!(
                "`_meta.{name}` must be a non-empty string, not {kind}; the tool did not run"
            ),
            MetaProblem::Empty { name } => format!(
                "`_meta.{name}` must be a non-empty string, not \"\"; the tool did not run"
            ),
            MetaProblem::TooLong { name, chars } => format!(
                "`_meta.{name}` is {chars} characters long; an idempotency key has at most {MAX_CLIENT_KEY_CHARS}; the tool did not run"
            ),
            MetaProblem::Reserved { name, prefix } => format!(
                "`_meta.{name}` may not start with `{prefix}`: that form names an MCP session's own conversation; choose another id; the tool did not run"
            ),
        }
    }
}

/// The non-empty string `_meta[name]`, `None` when the member is absent.
pub(crate) fn meta_string<'m>(
    meta: &'m RequestMetaObject,
    name: &str,
) -> Result<Option<&'m str>, MetaProblem> {
    match meta.get(name) {
        None => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Err(MetaProblem::Empty {
            name: name.to_owned(),
        }),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(MetaProblem::NotAString {
            name: name.to_owned(),
            kind: crate::dispatch::parse::kind(other),
        }),
    }
}

/// The client's idempotency key, `_meta.idempotencyKey` (M4): a non-empty string of at
/// most [`MAX_CLIENT_KEY_CHARS`] characters, `None` when absent.
pub(crate) fn client_key(meta: &RequestMetaObject) -> Result<Option<&str>, MetaProblem> {
    let key = meta_string(meta, IDEMPOTENCY_KEY)?;
    match key.map(|k| k.chars().count()) {
        Some(chars) if chars > MAX_CLIENT_KEY_CHARS => Err(MetaProblem::TooLong {
            name: IDEMPOTENCY_KEY.to_owned(),
            chars,
        }),
        _ => Ok(key),
    }
}

/// The MCP session id of the request, if its transport has sessions: rmcp's streamable HTTP
/// server puts the request's [`http::request::Parts`] in the extensions, and a session's
/// requests carry its id in the `Mcp-Session-Id` header. stdio and other byte-stream
/// transports have no session id (their connection is the session, but rmcp gives it no
/// name), nor does a stateless HTTP server.
pub(crate) fn session_id(extensions: &Extensions) -> Option<String> {
    let parts = extensions.get::<http::request::Parts>()?;
    let value = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    (!value.is_empty()).then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> RequestMetaObject {
        RequestMetaObject::from(value.as_object().unwrap().clone())
    }

    // pins M3: a present but unusable _meta value is named, never ignored
    #[test]
    fn meta_strings_are_non_empty_strings() {
        let m = meta(json!({"conversationId": "c1", "n": 7, "e": ""}));
        assert_eq!(meta_string(&m, "conversationId"), Ok(Some("c1")));
        assert_eq!(meta_string(&m, "absent"), Ok(None));
        let problem = meta_string(&m, "n").unwrap_err();
        assert_eq!(
            problem.message(),
            "`_meta.n` must be a non-empty string, not a number; the tool did not run"
        );
        assert!(matches!(
            meta_string(&m, "e"),
            Err(MetaProblem::Empty { .. })
        ));
    }

    // pins M4: a client key is a non-empty string of at most 255 characters
    #[test]
    fn client_keys_are_bounded() {
        let ok = "é".repeat(255);
        assert_eq!(
            client_key(&meta(json!({ "idempotencyKey": ok }))),
            Ok(Some(ok.as_str()))
        );
        let long = "k".repeat(256);
        let problem = client_key(&meta(json!({ "idempotencyKey": long }))).unwrap_err();
        assert!(
            problem.message().contains("is 256 characters long"),
            "{problem:?}"
        );
        assert!(client_key(&meta(json!({ "idempotencyKey": 12 }))).is_err());
        assert_eq!(client_key(&meta(json!({}))), Ok(None));
    }

    // pins M3: the session id is the streamable HTTP request's Mcp-Session-Id header
    #[test]
    fn session_id_comes_from_the_http_parts() {
        let mut extensions = Extensions::new();
        assert_eq!(session_id(&extensions), None);
        let (parts, ()) = http::Request::builder()
            .header("Mcp-Session-Id", "sess-1")
            .body(())
            .unwrap()
            .into_parts();
        extensions.insert(parts);
        assert_eq!(session_id(&extensions).as_deref(), Some("sess-1"));
        let (parts, ()) = http::Request::builder().body(()).unwrap().into_parts();
        extensions.insert(parts);
        assert_eq!(session_id(&extensions), None);
    }
}
