//! The proxy's configuration file (TOML): which tools are keyed and how (contract Y2, Y4).
//!
//! ```toml
//! conversation_meta = "conversationId"   # the _meta member holding the conversation id
//! session_as_conversation = false        # HTTP: no conversation in _meta → the session
//! ttl = "24h"                            # defaults for every keyed tool
//! lease = "60s"
//! cancel_wait = "30s"
//! audit = false                          # true: records keep the key arguments (P2)
//!
//! [tools.send_refund]
//! key = ["order_id"]                     # the other arguments are fingerprint
//! ttl = "7d"
//! require_approval = "30m"
//!
//! [tools.search_orders]
//! keyed = false                          # never keyed, whatever its annotations say
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use idem_runtime::integrations::rmcp::ForwardedCall;
use idem_runtime::{OnCancel, OnUnknown, Scope, ToolSpec};
use serde::Deserialize;

/// The `_meta` member a conversation id is read from unless the file names another (M3).
pub const DEFAULT_CONVERSATION_META: &str = "conversationId";

/// How long a cancelled keyed call still waits for the server's answer (Y7), by default.
pub const DEFAULT_CANCEL_WAIT: Duration = Duration::from_secs(30);

/// The file as written: every member optional, unknown members refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    conversation_meta: Option<String>,
    session_as_conversation: Option<bool>,
    cancel_wait: Option<Span>,
    ttl: Option<Span>,
    lease: Option<Span>,
    wait: Option<Span>,
    heartbeat: Option<Span>,
    on_unknown: Option<UnknownPolicy>,
    on_cancel: Option<CancelPolicy>,
    audit: Option<bool>,
    #[serde(default)]
    tools: BTreeMap<String, ToolFile>,
}

/// The settings a `[tools.NAME]` table may hold besides the defaults'.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    keyed: Option<bool>,
    scope: Option<String>,
    key: Option<Vec<String>>,
    require_approval: Option<Approval>,
    ttl: Option<Span>,
    lease: Option<Span>,
    wait: Option<Span>,
    heartbeat: Option<Span>,
    on_unknown: Option<UnknownPolicy>,
    on_cancel: Option<CancelPolicy>,
    audit: Option<bool>,
}

impl ToolFile {
    /// The names of the settings given that only a keyed call uses.
    fn keyed_settings(&self) -> Vec<&'static str> {
        [
            ("key", self.key.is_some()),
            ("scope", self.scope.is_some()),
            ("require_approval", self.require_approval.is_some()),
            ("ttl", self.ttl.is_some()),
            ("lease", self.lease.is_some()),
            ("wait", self.wait.is_some()),
            ("heartbeat", self.heartbeat.is_some()),
            ("on_unknown", self.on_unknown.is_some()),
            ("on_cancel", self.on_cancel.is_some()),
            ("audit", self.audit.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

/// The call-protocol settings, at the top level (defaults) or per tool (serde cannot refuse
/// unknown members of a flattened struct, so both tables list them and hand them over).
#[derive(Debug, Default, Clone, Copy)]
struct Settings {
    ttl: Option<Span>,
    lease: Option<Span>,
    wait: Option<Span>,
    heartbeat: Option<Span>,
    on_unknown: Option<UnknownPolicy>,
    on_cancel: Option<CancelPolicy>,
    audit: Option<bool>,
}

/// A humantime span (`"30s"`, `"7d"`).
#[derive(Debug, Clone, Copy)]
struct Span(Duration);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map(Span).map_err(|e| {
            serde::de::Error::custom(format!(
                "{text:?} is not a span ({e}): write a humantime span such as \"30s\", \"5m\" or \"7d\""
            ))
        })
    }
}

/// `on_unknown = "hold" | "rerun"` (U2, U2a).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum UnknownPolicy {
    Hold,
    Rerun,
}

/// `on_cancel = "hold" | "release"` (U4).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum CancelPolicy {
    Hold,
    Release,
}

/// `require_approval = true | false | "30m"`.
#[derive(Debug, Clone, Copy)]
enum Approval {
    Required(bool),
    ValidFor(Span),
}

impl<'de> Deserialize<'de> for Approval {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Approval;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false, or how long an approval lets a call run (a humantime span such as \"30m\")")
            }
            fn visit_bool<E: serde::de::Error>(self, required: bool) -> Result<Approval, E> {
                Ok(Approval::Required(required))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Approval, E> {
                humantime::parse_duration(text)
                    .map(|span| Approval::ValidFor(Span(span)))
                    .map_err(|e| {
                        E::custom(format!(
                            "{text:?} is not a span ({e}): write true, false, or how long an approval lets a call run, such as \"30m\""
                        ))
                    })
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// How the proxy treats one tool (Y2, Y3).
#[derive(Debug, Clone, Copy)]
pub struct ToolPlan {
    /// The spec its calls run under.
    pub spec: &'static ToolSpec,
    /// The identity members; `None`: every member.
    pub key: Option<&'static [&'static str]>,
}

/// A `[tools.NAME]` table, as the check against the server's listing sees it (Y4).
#[derive(Debug, Clone, Copy)]
pub struct NamedTool<'c> {
    /// The tool's name.
    pub name: &'c str,
    /// The identity members it names (empty: none named).
    pub key: &'c [&'static str],
    /// Its `keyed` line, if any.
    pub keyed: Option<bool>,
    /// The settings of a keyed call it gives, by name.
    pub keyed_settings: &'c [&'static str],
}

/// The configuration, checked (Y4).
#[derive(Debug, Clone)]
pub struct Config {
    /// The `_meta` member holding the conversation id.
    pub conversation_meta: String,
    /// How long a cancelled keyed call waits for the server's answer (Y7).
    pub cancel_wait: Duration,
    /// Over streamable HTTP, a call without a conversation in `_meta` takes its MCP
    /// session as the conversation (Y10); stdio has no session.
    pub session_as_conversation: bool,
    defaults: ToolSpec,
    tools: BTreeMap<String, ToolOverride>,
}

#[derive(Debug, Clone)]
struct ToolOverride {
    keyed: Option<bool>,
    spec: ToolSpec,
    key: Option<&'static [&'static str]>,
    /// The settings of a keyed call the table gives (`key`, `scope`, `require_approval`,
    /// spans, policies), by name: each would be ignored on a tool that is passed through.
    keyed_settings: Vec<&'static str>,
}

/// A configuration that cannot be used: the message names the file, the member and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
    /// The configuration without a file: every tool keyed unless annotated read-only, with
    /// the runtime's defaults.
    pub fn defaults() -> Self {
        Config::from_file(File::default(), "the defaults")
            .expect("the defaults are a valid configuration")
    }

    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read the config file {shown}: {e}")))?;
        Self::parse(&text, &shown)
    }

    /// Checks the TOML text `text` (from `origin`, for messages).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text)
            .map_err(|e| ConfigError(format!("the config file {origin} is not valid: {e}")))?;
        Self::from_file(file, origin)
    }

    fn from_file(file: File, origin: &str) -> Result<Self, ConfigError> {
        let bad = |what: String| ConfigError(format!("the config file {origin}: {what}"));
        let conversation_meta = file
            .conversation_meta
            .unwrap_or_else(|| DEFAULT_CONVERSATION_META.to_owned());
        ForwardedCall::check_conversation_meta_key(&conversation_meta)
            .map_err(|e| bad(format!("conversation_meta: {e}")))?;
        let top = Settings {
            ttl: file.ttl,
            lease: file.lease,
            wait: file.wait,
            heartbeat: file.heartbeat,
            on_unknown: file.on_unknown,
            on_cancel: file.on_cancel,
            audit: file.audit,
        };
        let defaults = apply(ToolSpec::new(""), &top);
        ForwardedCall::spec("default", &defaults)
            .map_err(|e| bad(e.to_string().replace("tool `default`", "the defaults")))?;
        let mut tools = BTreeMap::new();
        for (name, tool) in file.tools {
            let at = |what: String| bad(format!("[tools.{name}] {what}"));
            let keyed_settings = tool.keyed_settings();
            if let (Some(false), Some(first)) = (tool.keyed, keyed_settings.first()) {
                return Err(at(format!(
                    "keyed = false passes every call through unkeyed, so `{first}` would never apply: remove it, or the line `keyed = false`"
                )));
            }
            let own = Settings {
                ttl: tool.ttl,
                lease: tool.lease,
                wait: tool.wait,
                heartbeat: tool.heartbeat,
                on_unknown: tool.on_unknown,
                on_cancel: tool.on_cancel,
                audit: tool.audit,
            };
            let mut spec = apply(defaults, &own);
            if let Some(scope) = &tool.scope {
                spec.scope = parse_scope(scope).map_err(|e| at(format!("scope: {e}")))?;
            }
            spec.approval = match tool.require_approval {
                None | Some(Approval::Required(false)) => None,
                Some(Approval::Required(true)) => Some(ToolSpec::DEFAULT_APPROVAL_VALID_FOR),
                Some(Approval::ValidFor(Span(valid_for))) if valid_for.is_zero() => {
                    return Err(at(
                        "require_approval: a zero validity would let no approved call run"
                            .to_owned(),
                    ))
                }
                Some(Approval::ValidFor(Span(valid_for))) => Some(valid_for),
            };
            ForwardedCall::spec(&name, &spec).map_err(|e| bad(e.to_string()))?;
            let key = match tool.key {
                None => None,
                Some(members) => {
                    if members.is_empty() {
                        return Err(at("key: [] names no argument, so every call of the tool in one scope would share one key: name the arguments that say which call it is, or remove `key` to key by all of them".to_owned()));
                    }
                    if let Some(empty) = members.iter().find(|m| m.is_empty()) {
                        return Err(at(format!("key: {empty:?} is not an argument name")));
                    }
                    if let Some(twice) = members
                        .iter()
                        .enumerate()
                        .find_map(|(at, m)| members[..at].contains(m).then_some(m))
                    {
                        return Err(at(format!("key: {twice:?} is named twice")));
                    }
                    let leaked: Vec<&'static str> = members
                        .into_iter()
                        .map(|m| &*Box::leak(m.into_boxed_str()))
                        .collect();
                    Some(&*Box::leak(leaked.into_boxed_slice()))
                }
            };
            tools.insert(
                name,
                ToolOverride {
                    keyed: tool.keyed,
                    spec,
                    key,
                    keyed_settings,
                },
            );
        }
        Ok(Config {
            conversation_meta,
            cancel_wait: file.cancel_wait.map_or(DEFAULT_CANCEL_WAIT, |s| s.0),
            session_as_conversation: file.session_as_conversation.unwrap_or(false),
            defaults,
            tools,
        })
    }

    /// The tools the file names, each with what the listing must agree with (Y4).
    pub fn named_tools(&self) -> impl Iterator<Item = NamedTool<'_>> {
        self.tools.iter().map(|(name, tool)| NamedTool {
            name,
            key: tool.key.unwrap_or_default(),
            keyed: tool.keyed,
            keyed_settings: &tool.keyed_settings,
        })
    }

    /// How a call of `tool` is handled: `None` passes it through unkeyed (the file says
    /// `keyed = false`, or it says nothing and the server annotated the tool read-only).
    pub fn plan(&self, tool: &str, read_only: bool) -> Option<ToolPlan> {
        let own = self.tools.get(tool);
        let keyed = own.and_then(|t| t.keyed).unwrap_or(!read_only);
        if !keyed || tool.is_empty() {
            return None;
        }
        let (spec, key) = match own {
            Some(own) => (&own.spec, own.key),
            None => (&self.defaults, None),
        };
        // Checked when the file was read; the name is non-empty.
        let spec = ForwardedCall::spec(tool, spec).ok()?;
        Some(ToolPlan { spec, key })
    }
}

/// `spec` with the settings the file gives.
fn apply(mut spec: ToolSpec, settings: &Settings) -> ToolSpec {
    if let Some(Span(ttl)) = settings.ttl {
        spec.ttl = ttl;
    }
    if let Some(Span(lease)) = settings.lease {
        spec.lease = lease;
    }
    if let Some(Span(wait)) = settings.wait {
        spec.wait = wait;
    }
    if let Some(Span(heartbeat)) = settings.heartbeat {
        spec.heartbeat = Some(heartbeat);
    }
    spec.on_unknown = match settings.on_unknown {
        None => spec.on_unknown,
        Some(UnknownPolicy::Hold) => OnUnknown::Hold,
        Some(UnknownPolicy::Rerun) => OnUnknown::Rerun,
    };
    spec.on_cancel = match settings.on_cancel {
        None => spec.on_cancel,
        Some(CancelPolicy::Hold) => OnCancel::Hold,
        Some(CancelPolicy::Release) => OnCancel::Release,
    };
    if let Some(audit) = settings.audit {
        spec.audit = audit;
    }
    spec
}

/// The built-in scopes' names.
const BUILT_IN_SCOPES: [&str; 3] = ["conversation", "global", "call"];

/// `conversation`, `global`, `call`, or the name of a `_meta` member (K7's scope names); a
/// name within two edits of a built-in one is taken for a misspelling of it (K12).
fn parse_scope(text: &str) -> Result<Scope, String> {
    match text {
        "conversation" => Ok(Scope::Conversation),
        "global" => Ok(Scope::Global),
        "call" => Ok(Scope::Call),
        misspelt if BUILT_IN_SCOPES.iter().any(|built_in| {
            let edits = strsim::osa_distance(misspelt, built_in);
            edits <= 2 && edits < built_in.len()
        }) => {
            let closest = BUILT_IN_SCOPES
                .iter()
                .min_by_key(|built_in| strsim::osa_distance(misspelt, built_in))
                .copied()
                .unwrap_or("conversation");
            Err(format!(
                "{misspelt:?} looks like a misspelling of the built-in scope {closest:?}: write \"{closest}\" (a `_meta` member's name must differ from every built-in scope by more than two edits)"
            ))
        }
        name if name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
        {
            Ok(Scope::Named(Box::leak(name.to_owned().into_boxed_str())))
        }
        other => Err(format!(
            "{other:?} is not a scope: write \"conversation\", \"global\", \"call\", or the name of the `_meta` member that holds the scope value (ASCII letters, digits, `_`, `-`, `.`, starting with a letter)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins Y4: a file's settings reach the specs; unset tools get the defaults
    #[test]
    fn settings_reach_the_specs() {
        let config = Config::parse(
            r#"
            lease = "2s"
            cancel_wait = "1s"
            [tools.send_refund]
            key = ["order_id"]
            ttl = "7d"
            scope = "tenant"
            on_cancel = "release"
            require_approval = "30m"
            audit = true
            [tools.search]
            keyed = false
            "#,
            "t.toml",
        )
        .unwrap();
        assert_eq!(config.cancel_wait, Duration::from_secs(1));
        let plan = config.plan("send_refund", false).unwrap();
        assert_eq!(plan.key, Some(&["order_id"][..]));
        assert_eq!(plan.spec.ttl, Duration::from_secs(7 * 86_400));
        assert_eq!(plan.spec.lease, Duration::from_secs(2));
        assert_eq!(plan.spec.scope, Scope::Named("tenant"));
        assert_eq!(plan.spec.on_cancel, OnCancel::Release);
        assert_eq!(plan.spec.approval, Some(Duration::from_secs(1800)));
        assert!(plan.spec.audit);
        assert!(config.plan("search", false).is_none());
        let other = config.plan("other", false).unwrap();
        assert_eq!(other.spec.lease, Duration::from_secs(2));
        assert!(other.key.is_none());
        assert!(!other.spec.audit);
    }

    // pins Y2: read-only tools pass through unless the file keys them
    #[test]
    fn read_only_hints_decide_unless_the_file_does() {
        let config = Config::parse("[tools.lookup]\nkeyed = true\n", "t.toml").unwrap();
        assert!(config.plan("lookup", true).is_some());
        assert!(config.plan("other", true).is_none());
        assert!(config.plan("other", false).is_some());
        assert!(Config::defaults().plan("x", true).is_none());
    }

    // pins Y4: every refusal names the file and what is wrong
    #[test]
    fn bad_files_are_refused_by_name() {
        let refused = |text: &str| Config::parse(text, "p.toml").unwrap_err().0;
        let e = refused("leese = \"1s\"\n");
        assert!(e.contains("p.toml") && e.contains("leese"), "{e}");
        let e = refused("[tools.x]\nttl = \"soon\"\n");
        assert!(e.contains("not a span"), "{e}");
        let e = refused("[tools.x]\nttl = \"1s\"\n");
        assert!(e.contains("shorter than its lease"), "{e}");
        let e = refused("[tools.x]\nscope = \"a b\"\n");
        assert!(e.contains("[tools.x] scope"), "{e}");
        let e = refused("conversation_meta = \"idempotencyKey\"\n");
        assert!(e.contains("conversation_meta"), "{e}");
        let e = refused("on_unknown = \"release\"\n");
        assert!(
            e.contains("on_unknown") && e.contains("expected `hold` or `rerun`"),
            "{e}"
        );
        let e = refused("[tools.x]\non_cancel = \"rerun\"\n");
        assert!(e.contains("expected `hold` or `release`"), "{e}");
        let e = refused("[tools.x]\nrequire_approval = \"soon\"\n");
        assert!(
            e.contains("require_approval") && e.contains("\"soon\" is not a span"),
            "{e}"
        );
        let e = refused("[tools.x]\nrequire_approval = 3\n");
        assert!(e.contains("true, false, or how long"), "{e}");
        let e = refused("[tools.x]\nrequire_approval = \"0s\"\n");
        assert!(e.contains("require_approval"), "{e}");
        let e = refused("[tools.x]\nkey = [\"\"]\n");
        assert!(e.contains("key"), "{e}");
        let e = refused("[tools.x]\nkey = []\n");
        assert!(e.contains("names no argument"), "{e}");
        let e = refused("[tools.x]\nkey = [\"a\", \"b\", \"a\"]\n");
        assert!(e.contains("\"a\" is named twice"), "{e}");
        for typo in ["conversaton", "globl", "cal", "Global"] {
            let e = refused(&format!("[tools.x]\nscope = \"{typo}\"\n"));
            assert!(
                e.contains("misspelling of the built-in scope"),
                "{typo}: {e}"
            );
        }
        assert!(Config::parse("[tools.x]\nscope = \"tenant\"\n", "t").is_ok());
        let e = refused("[tools.x]\nkeyed = false\nrequire_approval = true\n");
        assert!(
            e.contains("[tools.x]") && e.contains("`require_approval` would never apply"),
            "{e}"
        );
    }
}
