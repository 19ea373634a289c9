//! Run-time settings of tools (contract E1–E3): a deployment changes a tool's `ttl`,
//! `lease`, `wait` and `heartbeat` without recompiling.
//!
//! The attribute's values (`#[idempotent(ttl = "24h")]`, or a hand-built
//! [`ToolSpec`]) are the defaults. An [`Engine`](crate::Engine) may override them per tool,
//! most specific first:
//!
//! 1. [`EngineBuilder::tool`](crate::EngineBuilder::tool) with a [`ToolSettings`];
//! 2. the environment, read when the engine is built if
//!    [`EngineBuilder::settings_from_env`](crate::EngineBuilder::settings_from_env) was
//!    asked, and once per process by the [default engine](crate::default_engine):
//!    `IDEM_TOOL_<TOOL>_<SETTING>=<duration>`, where
//!    - `<TOOL>` is the tool's name (K6) upper-cased, every character that is not an ASCII
//!      letter or digit written as `_` (`send_refund` and `send.refund` are both
//!      `SEND_REFUND`, and share the variables);
//!    - `<SETTING>` is `TTL`, `LEASE`, `WAIT` or `HEARTBEAT` (the text after the last `_`);
//!    - `<duration>` is a humantime duration in whole milliseconds, as in the attribute:
//!      `48h`, `90s`, `500ms`, `1h 30m`.
//!
//!    For example `IDEM_TOOL_SEND_REFUND_TTL=48h` and `IDEM_TOOL_SEND_REFUND_LEASE=2m`;
//! 3. the attribute.
//!
//! Each setting is taken from the first place that sets it. Invalid overrides are an
//! [`EngineConfigError`] when the engine is built (E3); a combination that is invalid only
//! together with the attribute's values (an overridden lease longer than the attribute's
//! ttl) is an [`Error::Config`] for every call of that tool, before its body runs.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use std::time::Duration;
//! use idem_agent::{Engine, ToolSettings, ToolSpec};
//!
//! let engine = Engine::builder()
//!     .tool("send_refund", ToolSettings::new().with_ttl(Duration::from_secs(48 * 3600)))
//!     .build()?;
//! static SPEC: ToolSpec = ToolSpec::new("send_refund");
//! let effective = engine.effective_spec(&SPEC)?;
//! assert_eq!(effective.ttl, Duration::from_secs(48 * 3600));
//! assert_eq!(effective.lease, ToolSpec::DEFAULT_LEASE); // not overridden: the attribute's
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::error::Error;
use crate::spec::ToolSpec;
use crate::store::StoreConfigError;

/// The prefix of the environment variables that override a tool's settings (E2).
pub const TOOL_ENV_PREFIX: &str = "IDEM_TOOL_";

/// Overrides of one tool's settings (E1); `None` keeps the attribute's value.
///
/// Every span is a [`Duration`], applied in whole milliseconds (a part below a millisecond
/// is dropped). Give it to [`EngineBuilder::tool`](crate::EngineBuilder::tool).
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use std::time::Duration;
/// use idem_agent::ToolSettings;
/// let settings = ToolSettings::new()
///     .with_lease(Duration::from_secs(120))
///     .with_heartbeat(Duration::from_secs(30));
/// assert_eq!(settings.ttl, None);
/// assert_eq!(settings.lease, Some(Duration::from_secs(120)));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ToolSettings {
    /// How long a saved outcome is replayed, counted from the claim (S8,
    /// [`ToolSpec::ttl`]). At least the lease, and not zero.
    pub ttl: Option<Duration>,
    /// How long a claim is held before another caller may take it over (S6,
    /// [`ToolSpec::lease`]). Not zero (a lease of zero, "already lapsed", can only be
    /// written in the attribute).
    pub lease: Option<Duration>,
    /// How long a concurrent duplicate waits for the owner's outcome before it gets
    /// [`Error::InProgress`] (S5, [`ToolSpec::wait`]). Not zero.
    pub wait: Option<Duration>,
    /// How often the owner renews its lease while the body runs (L1,
    /// [`ToolSpec::heartbeat`]). Shorter than the lease, and not zero.
    pub heartbeat: Option<Duration>,
}

impl ToolSettings {
    /// No overrides: every setting is the attribute's.
    pub const fn new() -> Self {
        ToolSettings {
            ttl: None,
            lease: None,
            wait: None,
            heartbeat: None,
        }
    }

    /// Overrides the ttl (S8).
    pub const fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Overrides the lease (S6).
    pub const fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Overrides the wait of a concurrent duplicate (S5).
    pub const fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Overrides the heartbeat (L1).
    pub const fn with_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = Some(heartbeat);
        self
    }

    /// Whether nothing is overridden.
    pub const fn is_empty(&self) -> bool {
        self.ttl.is_none()
            && self.lease.is_none()
            && self.wait.is_none()
            && self.heartbeat.is_none()
    }

    /// Each setting from `self`, else from `other`.
    fn or(self, other: ToolSettings) -> ToolSettings {
        ToolSettings {
            ttl: self.ttl.or(other.ttl),
            lease: self.lease.or(other.lease),
            wait: self.wait.or(other.wait),
            heartbeat: self.heartbeat.or(other.heartbeat),
        }
    }

    fn get(&self, setting: Setting) -> Option<Duration> {
        match setting {
            Setting::Ttl => self.ttl,
            Setting::Lease => self.lease,
            Setting::Wait => self.wait,
            Setting::Heartbeat => self.heartbeat,
        }
    }

    fn set(&mut self, setting: Setting, value: Duration) {
        let slot = match setting {
            Setting::Ttl => &mut self.ttl,
            Setting::Lease => &mut self.lease,
            Setting::Wait => &mut self.wait,
            Setting::Heartbeat => &mut self.heartbeat,
        };
        *slot = Some(value);
    }
}

/// One of the four settings a [`ToolSettings`] overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Setting {
    /// [`ToolSettings::ttl`]; `TTL` in an environment variable.
    Ttl,
    /// [`ToolSettings::lease`]; `LEASE` in an environment variable.
    Lease,
    /// [`ToolSettings::wait`]; `WAIT` in an environment variable.
    Wait,
    /// [`ToolSettings::heartbeat`]; `HEARTBEAT` in an environment variable.
    Heartbeat,
}

impl Setting {
    const ALL: [Setting; 4] = [
        Setting::Ttl,
        Setting::Lease,
        Setting::Wait,
        Setting::Heartbeat,
    ];

    /// The setting's name as the attribute writes it: `ttl`, `lease`, `wait`, `heartbeat`.
    pub const fn name(self) -> &'static str {
        match self {
            Setting::Ttl => "ttl",
            Setting::Lease => "lease",
            Setting::Wait => "wait",
            Setting::Heartbeat => "heartbeat",
        }
    }

    /// The setting's suffix in an environment variable: `TTL`, `LEASE`, `WAIT`,
    /// `HEARTBEAT`.
    pub const fn env_suffix(self) -> &'static str {
        match self {
            Setting::Ttl => "TTL",
            Setting::Lease => "LEASE",
            Setting::Wait => "WAIT",
            Setting::Heartbeat => "HEARTBEAT",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an [`Engine`](crate::Engine) could not be built (E3): its store, or a tool's
/// run-time settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// The store's locator (given, or read from `IDEM_STORE`) is invalid, names a backend
    /// whose cargo feature is off, or its store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreConfigError),

    /// A namespace (K11) that is empty, longer than
    /// [`NAMESPACE_MAX_LEN`](crate::engine::NAMESPACE_MAX_LEN) bytes, or not printable
    /// ASCII.
    #[error("namespace {namespace:?} from {origin} must be 1 to 128 printable ASCII characters")]
    BadNamespace {
        /// Where it came from: `the builder` or `IDEM_NAMESPACE`.
        origin: String,
        /// The namespace as given.
        namespace: String,
    },

    /// `IDEM_NAMESPACE` holds bytes that are not UTF-8.
    #[error("the environment variable {variable} is not valid UTF-8")]
    NotUnicode {
        /// The variable's name.
        variable: String,
    },

    /// An `IDEM_TOOL_<TOOL>_<SETTING>` variable holds no duration idem can use: not a
    /// humantime duration, not a whole number of milliseconds, or not UTF-8 (E2, E3).
    #[error("the environment variable {variable} holds \"{text}\", which is not a usable duration: {reason}; write a number and a unit, like \"48h\", \"30m\", \"90s\" or \"500ms\"")]
    InvalidDuration {
        /// The variable's name (it names the tool and the setting).
        variable: String,
        /// Its value (lossily converted if it was not UTF-8).
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A variable that starts with `IDEM_TOOL_` names no tool or no known setting: its
    /// text after the last `_` is not `TTL`, `LEASE`, `WAIT` or `HEARTBEAT` (E3).
    #[error("the environment variable {variable} is not a setting idem knows: write IDEM_TOOL_<TOOL>_<SETTING>, where <TOOL> is the tool's name upper-cased (every character other than a letter or digit as `_`) and <SETTING> is TTL, LEASE, WAIT or HEARTBEAT")]
    UnknownSetting {
        /// The variable's name.
        variable: String,
    },

    /// An overridden duration is zero, or shorter than the millisecond idem measures time
    /// in (E3).
    #[error("the {setting} of tool `{tool}`{origin} is zero: give a duration of at least 1 ms, or leave it out to keep the attribute's", origin = shown_variable(.variable))]
    ZeroDuration {
        /// The tool: its name as given to [`EngineBuilder::tool`](crate::EngineBuilder::tool),
        /// or, for a variable that no such tool matches, the `<TOOL>` part of the variable.
        tool: String,
        /// Which setting.
        setting: Setting,
        /// The environment variable it came from; `None` when it was given in code.
        variable: Option<String>,
    },

    /// One tool's overrides give it a ttl shorter than its lease: a record could expire
    /// while its call still runs, and a retry would run the side effect again (E3, S8).
    #[error("the overridden ttl of tool `{tool}` ({}) is shorter than its overridden lease ({}): a record could expire while its call still runs, and a retry would run the side effect again; make the ttl at least the lease", fmt_duration(*.ttl), fmt_duration(*.lease))]
    TtlShorterThanLease {
        /// The tool (as in [`ZeroDuration`](Self::ZeroDuration)).
        tool: String,
        /// The ttl.
        ttl: Duration,
        /// The lease.
        lease: Duration,
    },

    /// One tool's overrides give it a heartbeat not shorter than its lease: the lease would
    /// lapse between two renewals (E3, L1).
    #[error("the overridden heartbeat of tool `{tool}` ({}) is not shorter than its overridden lease ({}): the lease would lapse between two renewals, and another caller could take the key over while the call still runs; make the heartbeat shorter than the lease", fmt_duration(*.heartbeat), fmt_duration(*.lease))]
    HeartbeatNotShorterThanLease {
        /// The tool (as in [`ZeroDuration`](Self::ZeroDuration)).
        tool: String,
        /// The heartbeat.
        heartbeat: Duration,
        /// The lease.
        lease: Duration,
    },
}

fn shown_variable(variable: &Option<String>) -> String {
    match variable {
        Some(variable) => format!(" (from the environment variable {variable})"),
        None => String::new(),
    }
}

fn fmt_duration(span: Duration) -> String {
    humantime::format_duration(span).to_string()
}

/// `<TOOL>` of a tool name: upper-cased, every character that is not an ASCII letter or
/// digit as `_` (E2).
pub fn env_tool_name(tool: &str) -> String {
    tool.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The name of the environment variable that overrides `setting` of the tool named `tool`:
/// `IDEM_TOOL_SEND_REFUND_TTL` for `send_refund`'s ttl (E2).
pub fn env_variable(tool: &str, setting: Setting) -> String {
    format!(
        "{TOOL_ENV_PREFIX}{}_{}",
        env_tool_name(tool),
        setting.env_suffix()
    )
}

/// The overrides an engine applies (E1, E2): cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    /// From [`EngineBuilder::tool`](crate::EngineBuilder::tool), by tool name.
    by_name: HashMap<String, ToolSettings>,
    /// From the environment, by `<TOOL>` ([`env_tool_name`]).
    by_env_name: HashMap<String, ToolSettings>,
}

impl Overrides {
    /// Checks the builder's overrides (`tools`) and, if `from_env`, the environment's (E3),
    /// and keeps them.
    pub(crate) fn build(
        tools: HashMap<String, ToolSettings>,
        from_env: bool,
    ) -> Result<Overrides, EngineConfigError> {
        let by_env_name = if from_env {
            read_env()?
        } else {
            HashMap::new()
        };
        Overrides::checked(tools, by_env_name)
    }

    /// The environment's overrides alone (the default engine's), checked.
    pub(crate) fn from_env() -> Result<Overrides, EngineConfigError> {
        Overrides::checked(HashMap::new(), read_env()?)
    }

    fn checked(
        by_name: HashMap<String, ToolSettings>,
        by_env_name: HashMap<String, ToolSettings>,
    ) -> Result<Overrides, EngineConfigError> {
        let mut named: Vec<_> = by_name.iter().collect();
        named.sort_by(|a, b| a.0.cmp(b.0));
        for (tool, settings) in named {
            check_zero(tool, settings, None)?;
            let env = by_env_name.get(&env_tool_name(tool)).copied();
            check_relations(tool, &settings.or(env.unwrap_or_default()))?;
        }
        let mut from_env: Vec<_> = by_env_name.iter().collect();
        from_env.sort_by(|a, b| a.0.cmp(b.0));
        for (env_tool, settings) in from_env {
            let matched = by_name.keys().any(|name| env_tool_name(name) == *env_tool);
            if !matched {
                check_relations(env_tool, settings)?;
            }
        }
        Ok(Overrides {
            by_name,
            by_env_name,
        })
    }

    /// The overrides in force for the tool named `tool`.
    pub(crate) fn for_tool(&self, tool: &str) -> ToolSettings {
        let given = self.by_name.get(tool).copied().unwrap_or_default();
        if self.by_env_name.is_empty() {
            return given;
        }
        let env = self
            .by_env_name
            .get(&env_tool_name(tool))
            .copied()
            .unwrap_or_default();
        given.or(env)
    }

    /// `spec` with this engine's overrides applied (E1).
    ///
    /// # Errors
    /// [`Error::Config`] when an override together with a value of the attribute makes a
    /// ttl shorter than the lease, or a heartbeat not shorter than the lease (E3).
    pub(crate) fn apply(&self, spec: &ToolSpec) -> Result<ToolSpec, Error> {
        if self.by_name.is_empty() && self.by_env_name.is_empty() {
            return Ok(*spec);
        }
        let over = self.for_tool(spec.name);
        if over.is_empty() {
            return Ok(*spec);
        }
        let mut effective = *spec;
        effective.ttl = over.ttl.unwrap_or(spec.ttl);
        effective.lease = over.lease.unwrap_or(spec.lease);
        effective.wait = over.wait.unwrap_or(spec.wait);
        effective.heartbeat = over.heartbeat.or(spec.heartbeat);
        let origin = |overridden: bool| {
            if overridden {
                "overridden"
            } else {
                "the attribute's"
            }
        };
        let config = |message: String| Error::Config {
            tool: spec.name.to_owned(),
            message,
        };
        if (over.ttl.is_some() || over.lease.is_some()) && effective.ttl < effective.lease {
            return Err(config(format!(
                "the ttl ({}, {}) is shorter than the lease ({}, {}): a record could expire while its call still runs, and a retry would run the side effect again; override both, or make the ttl at least the lease",
                fmt_duration(effective.ttl),
                origin(over.ttl.is_some()),
                fmt_duration(effective.lease),
                origin(over.lease.is_some()),
            )));
        }
        if let Some(heartbeat) = effective.heartbeat {
            if (over.heartbeat.is_some() || over.lease.is_some()) && heartbeat >= effective.lease {
                return Err(config(format!(
                    "the heartbeat ({}, {}) is not shorter than the lease ({}, {}): the lease would lapse between two renewals; override both, or make the heartbeat shorter than the lease",
                    fmt_duration(heartbeat),
                    origin(over.heartbeat.is_some()),
                    fmt_duration(effective.lease),
                    origin(over.lease.is_some()),
                )));
            }
        }
        Ok(effective)
    }
}

fn check_zero(
    tool: &str,
    settings: &ToolSettings,
    variable: Option<String>,
) -> Result<(), EngineConfigError> {
    for setting in Setting::ALL {
        if settings
            .get(setting)
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            return Err(EngineConfigError::ZeroDuration {
                tool: tool.to_owned(),
                setting,
                variable,
            });
        }
    }
    Ok(())
}

/// The relations among one tool's overrides (E3): only between values both overridden.
fn check_relations(tool: &str, settings: &ToolSettings) -> Result<(), EngineConfigError> {
    if let (Some(ttl), Some(lease)) = (settings.ttl, settings.lease) {
        if ttl < lease {
            return Err(EngineConfigError::TtlShorterThanLease {
                tool: tool.to_owned(),
                ttl,
                lease,
            });
        }
    }
    if let (Some(heartbeat), Some(lease)) = (settings.heartbeat, settings.lease) {
        if heartbeat >= lease {
            return Err(EngineConfigError::HeartbeatNotShorterThanLease {
                tool: tool.to_owned(),
                heartbeat,
                lease,
            });
        }
    }
    Ok(())
}

/// Every `IDEM_TOOL_*` variable now, parsed, by `<TOOL>`; in the order of their names, so
/// that the error reported is the same on every run.
fn read_env() -> Result<HashMap<String, ToolSettings>, EngineConfigError> {
    let mut variables: Vec<(String, std::ffi::OsString)> = std::env::vars_os()
        .filter_map(|(name, value)| {
            let name = name.into_string().ok()?;
            name.starts_with(TOOL_ENV_PREFIX).then_some((name, value))
        })
        .collect();
    variables.sort();
    let mut tools: HashMap<String, ToolSettings> = HashMap::new();
    for (variable, value) in variables {
        let (tool, setting) = parse_variable(&variable)?;
        let text = match value.into_string() {
            Ok(text) => text,
            Err(raw) => {
                return Err(EngineConfigError::InvalidDuration {
                    text: raw.to_string_lossy().into_owned(),
                    variable,
                    reason: "it is not valid UTF-8".to_owned(),
                })
            }
        };
        let duration =
            parse_env_duration(&text).map_err(|reason| EngineConfigError::InvalidDuration {
                variable: variable.clone(),
                text: text.clone(),
                reason,
            })?;
        if duration.is_zero() {
            return Err(EngineConfigError::ZeroDuration {
                tool,
                setting,
                variable: Some(variable),
            });
        }
        tools.entry(tool).or_default().set(setting, duration);
    }
    Ok(tools)
}

/// `IDEM_TOOL_<TOOL>_<SETTING>` → (`<TOOL>` as [`env_tool_name`] writes it, the setting).
fn parse_variable(variable: &str) -> Result<(String, Setting), EngineConfigError> {
    let unknown = || EngineConfigError::UnknownSetting {
        variable: variable.to_owned(),
    };
    let rest = &variable[TOOL_ENV_PREFIX.len()..];
    let (tool, suffix) = rest.rsplit_once('_').ok_or_else(unknown)?;
    let setting = Setting::ALL
        .into_iter()
        .find(|s| s.env_suffix() == suffix)
        .ok_or_else(unknown)?;
    if tool.is_empty() {
        return Err(unknown());
    }
    Ok((env_tool_name(tool), setting))
}

/// A humantime duration in whole milliseconds, as the attribute takes it (S8).
fn parse_env_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim()).map_err(|e| e.to_string())?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(
            "it is not a whole number of milliseconds; idem measures time in milliseconds"
                .to_owned(),
        );
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins E2: the variable's grammar
    #[test]
    fn variables_name_a_tool_and_a_setting() {
        assert_eq!(
            env_variable("send.refund-v2", Setting::Heartbeat),
            "IDEM_TOOL_SEND_REFUND_V2_HEARTBEAT"
        );
        assert_eq!(
            parse_variable("IDEM_TOOL_CACHE_TTL_LEASE").unwrap(),
            ("CACHE_TTL".to_owned(), Setting::Lease)
        );
        for bad in [
            "IDEM_TOOL_SEND_REFUND_TIMEOUT",
            "IDEM_TOOL_TTL",
            "IDEM_TOOL__TTL",
            "IDEM_TOOL_SEND_REFUND_ttl",
        ] {
            assert_eq!(
                parse_variable(bad),
                Err(EngineConfigError::UnknownSetting {
                    variable: bad.to_owned()
                }),
                "{bad}"
            );
        }
        assert_eq!(
            parse_env_duration(" 48h ").unwrap(),
            Duration::from_secs(48 * 3600)
        );
        assert_eq!(
            parse_env_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(parse_env_duration("1500us")
            .unwrap_err()
            .contains("whole number"));
        assert!(parse_env_duration("soon").is_err());
    }

    // pins E1, E3: builder overrides beat the environment's, field by field; relations are
    // checked among overrides only
    #[test]
    fn builder_beats_environment_and_relations_are_checked() {
        let by_name = HashMap::from([(
            "send_refund".to_owned(),
            ToolSettings::new().with_lease(Duration::from_secs(10)),
        )]);
        let by_env_name = HashMap::from([(
            "SEND_REFUND".to_owned(),
            ToolSettings::new()
                .with_lease(Duration::from_secs(600))
                .with_ttl(Duration::from_secs(60)),
        )]);
        let overrides = Overrides::checked(by_name, by_env_name.clone()).unwrap();
        let over = overrides.for_tool("send_refund");
        assert_eq!(over.lease, Some(Duration::from_secs(10)));
        assert_eq!(over.ttl, Some(Duration::from_secs(60)));
        // The environment alone would be invalid for another tool of that `<TOOL>`: it is
        // reported when no builder entry covers it.
        assert!(matches!(
            Overrides::checked(HashMap::new(), by_env_name),
            Err(EngineConfigError::TtlShorterThanLease { tool, .. }) if tool == "SEND_REFUND"
        ));
    }
}
