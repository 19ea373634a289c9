//! Run-time settings of tools (contract E1–E3): a deployment changes a tool's `ttl`,
//! `lease`, `wait` and `heartbeat`, and whether it requires a person's approval (A1), without
//! recompiling.
//!
//! The attribute's values (`#[idempotent(ttl = "24h")]`, `#[idempotent(require_approval)]`, or a hand-built
//! [`ToolSpec`]) are the defaults. An [`Engine`](crate::Engine) may override them per tool,
//! most specific first:
//!
//! 1. [`EngineBuilder::tool`](crate::EngineBuilder::tool) with a [`ToolSettings`];
//! 2. the environment, read when the engine is built if
//!    [`EngineBuilder::settings_from_env`](crate::EngineBuilder::settings_from_env) was
//!    asked, and once per process by the [default engine](crate::default_engine):
//!    `IDEM_TOOL_<TOOL>_<SETTING>=<value>`, where
//!    - `<TOOL>` is the tool's name (K6) upper-cased, every character that is not an ASCII
//!      letter or digit written as `_` (`send_refund` and `send.refund` are both
//!      `SEND_REFUND`, and share the variables);
//!    - `<SETTING>` is `TTL`, `LEASE`, `WAIT`, `HEARTBEAT` or `APPROVAL` (the text after
//!      the last `_`);
//!    - `<value>`, for `TTL`, `LEASE`, `WAIT` and `HEARTBEAT`, is a humantime duration in
//!      whole milliseconds, as in the attribute: `48h`, `90s`, `500ms`, `1h 30m`;
//!    - `<value>`, for `APPROVAL`, is `required` (approval required, each approval valid
//!      [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`], 1 h), `off` (no approval, whatever the
//!      attribute says), or a duration as above (approval required, each approval valid
//!      that long); `required` and `off` in any case.
//!
//!    For example `IDEM_TOOL_SEND_REFUND_TTL=48h`, `IDEM_TOOL_SEND_REFUND_LEASE=2m` and
//!    `IDEM_TOOL_SEND_REFUND_APPROVAL=30m`;
//! 3. the attribute.
//!
//! Each setting is taken from the first place that sets it: an approval override turns
//! approval on or off whatever the attribute says. Invalid overrides are an
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
//!     .tool(
//!         "send_refund",
//!         ToolSettings::new()
//!             .with_ttl(Duration::from_secs(48 * 3600))
//!             .require_approval(Duration::from_secs(30 * 60)),
//!     )
//!     .build()?;
//! static SPEC: ToolSpec = ToolSpec::new("send_refund");
//! let effective = engine.effective_spec(&SPEC)?;
//! assert_eq!(effective.ttl, Duration::from_secs(48 * 3600));
//! assert_eq!(effective.lease, ToolSpec::DEFAULT_LEASE); // not overridden: the attribute's
//! assert_eq!(effective.approval, Some(Duration::from_secs(30 * 60)));
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

/// Overrides of one tool's settings (E1, A1); `None` keeps the attribute's value.
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
    /// Whether the tool requires a person's approval, and how long an approval lets a call
    /// run (A1, [`ToolSpec::approval`]): either way it wins over the attribute's
    /// `require_approval`. A validity is not zero.
    pub approval: Option<ApprovalSetting>,
}

/// A tool's approval requirement set at run time (A1, E1): it wins over the attribute's
/// `#[idempotent(require_approval)]`, turning approval on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalSetting {
    /// No approval, even if the attribute requires one (`IDEM_TOOL_<TOOL>_APPROVAL=off`).
    Off,
    /// A person approves each key's first call; an approval lets one call run for
    /// `valid_for` (`IDEM_TOOL_<TOOL>_APPROVAL=required` for
    /// [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`], or `=30m`).
    Required {
        /// How long an approval lets a call run, counted from the decision (A3). Not zero.
        valid_for: Duration,
    },
}

impl ApprovalSetting {
    /// What the setting makes of [`ToolSpec::approval`]: `None` for [`Off`](Self::Off),
    /// `Some(valid_for)` for [`Required`](Self::Required).
    pub const fn valid_for(self) -> Option<Duration> {
        match self {
            ApprovalSetting::Off => None,
            ApprovalSetting::Required { valid_for } => Some(valid_for),
        }
    }
}

impl ToolSettings {
    /// No overrides: every setting is the attribute's.
    pub const fn new() -> Self {
        ToolSettings {
            ttl: None,
            lease: None,
            wait: None,
            heartbeat: None,
            approval: None,
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

    /// Requires a person's approval of each key's first call, whatever the attribute says;
    /// an approval lets one call run for `valid_for` (A1;
    /// [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`] is the attribute's default).
    pub const fn require_approval(mut self, valid_for: Duration) -> Self {
        self.approval = Some(ApprovalSetting::Required { valid_for });
        self
    }

    /// Requires no approval, even if the attribute does (A1).
    pub const fn without_approval(mut self) -> Self {
        self.approval = Some(ApprovalSetting::Off);
        self
    }

    /// Whether nothing is overridden.
    pub const fn is_empty(&self) -> bool {
        self.ttl.is_none()
            && self.lease.is_none()
            && self.wait.is_none()
            && self.heartbeat.is_none()
            && self.approval.is_none()
    }

    /// Each setting from `self`, else from `other`.
    pub(crate) fn or(self, other: ToolSettings) -> ToolSettings {
        ToolSettings {
            ttl: self.ttl.or(other.ttl),
            lease: self.lease.or(other.lease),
            wait: self.wait.or(other.wait),
            heartbeat: self.heartbeat.or(other.heartbeat),
            approval: self.approval.or(other.approval),
        }
    }

    /// The duration `setting` overrides: for [`Setting::Approval`], the validity of a
    /// required approval.
    fn get(&self, setting: Setting) -> Option<Duration> {
        match setting {
            Setting::Ttl => self.ttl,
            Setting::Lease => self.lease,
            Setting::Wait => self.wait,
            Setting::Heartbeat => self.heartbeat,
            Setting::Approval => self.approval.and_then(ApprovalSetting::valid_for),
        }
    }

    /// Overrides `setting` with `value`: for [`Setting::Approval`], approval required and
    /// valid `value`.
    fn set(&mut self, setting: Setting, value: Duration) {
        let slot = match setting {
            Setting::Ttl => &mut self.ttl,
            Setting::Lease => &mut self.lease,
            Setting::Wait => &mut self.wait,
            Setting::Heartbeat => &mut self.heartbeat,
            Setting::Approval => {
                self.approval = Some(ApprovalSetting::Required { valid_for: value });
                return;
            }
        };
        *slot = Some(value);
    }
}

/// One of the settings a [`ToolSettings`] overrides: four durations, and the approval
/// requirement.
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
    /// [`ToolSettings::approval`]; `APPROVAL` in an environment variable, whose value is
    /// `required`, `off` or a duration rather than a duration alone.
    Approval,
}

impl Setting {
    const ALL: [Setting; 5] = [
        Setting::Ttl,
        Setting::Lease,
        Setting::Wait,
        Setting::Heartbeat,
        Setting::Approval,
    ];

    /// The setting's name as the attribute writes it: `ttl`, `lease`, `wait`, `heartbeat`,
    /// `require_approval`.
    pub const fn name(self) -> &'static str {
        match self {
            Setting::Ttl => "ttl",
            Setting::Lease => "lease",
            Setting::Wait => "wait",
            Setting::Heartbeat => "heartbeat",
            Setting::Approval => "require_approval",
        }
    }

    /// The setting's suffix in an environment variable: `TTL`, `LEASE`, `WAIT`,
    /// `HEARTBEAT`, `APPROVAL`.
    pub const fn env_suffix(self) -> &'static str {
        match self {
            Setting::Ttl => "TTL",
            Setting::Lease => "LEASE",
            Setting::Wait => "WAIT",
            Setting::Heartbeat => "HEARTBEAT",
            Setting::Approval => "APPROVAL",
        }
    }
}

/// Every `<SETTING>` of an environment variable, for messages: `TTL, LEASE, WAIT, HEARTBEAT
/// or APPROVAL`.
fn env_suffixes() -> String {
    let suffixes: Vec<&str> = Setting::ALL.iter().map(|s| s.env_suffix()).collect();
    match suffixes.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
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

    /// An `IDEM_TOOL_<TOOL>_<SETTING>` variable of a duration (`TTL`, `LEASE`, `WAIT`,
    /// `HEARTBEAT`) holds no duration idem can use: not a humantime duration, not a whole
    /// number of milliseconds, or not UTF-8 (E2, E3).
    #[error("the environment variable {variable} holds \"{text}\", which is not a usable duration: {reason}; write a number and a unit, like \"48h\", \"30m\", \"90s\" or \"500ms\"")]
    InvalidDuration {
        /// The variable's name (it names the tool and the setting).
        variable: String,
        /// Its value (lossily converted if it was not UTF-8).
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An `IDEM_TOOL_<TOOL>_APPROVAL` variable holds neither `required`, `off` nor a
    /// duration idem can use (a humantime duration in whole milliseconds), or is not UTF-8
    /// (A1, E2, E3).
    #[error("the environment variable {variable} holds \"{text}\", which is not an approval setting: {reason}; write `required` (approval required, each approval valid {}), `off` (no approval), or how long an approval is valid, like \"30m\" or \"2h\" (approval required)", fmt_duration(ToolSpec::DEFAULT_APPROVAL_VALID_FOR))]
    InvalidApproval {
        /// The variable's name (it names the tool).
        variable: String,
        /// Its value (lossily converted if it was not UTF-8).
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A variable that starts with `IDEM_TOOL_` names no tool or no known setting: its
    /// text after the last `_` is not `TTL`, `LEASE`, `WAIT`, `HEARTBEAT` or `APPROVAL`
    /// (E3).
    #[error("the environment variable {variable} is not a setting idem knows: write IDEM_TOOL_<TOOL>_<SETTING>, where <TOOL> is the tool's name upper-cased (every character other than a letter or digit as `_`) and <SETTING> is {}", env_suffixes())]
    UnknownSetting {
        /// The variable's name.
        variable: String,
    },

    /// An overridden duration is zero, or shorter than the millisecond idem measures time
    /// in; for [`Setting::Approval`], the validity of a required approval (E3).
    #[error("the {}{origin} is zero: {}", zero_subject(*.setting, .tool), zero_hint(*.setting), origin = shown_variable(.variable))]
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

/// What [`EngineConfigError::ZeroDuration`] says is zero: `ttl of tool `send_refund``.
fn zero_subject(setting: Setting, tool: &str) -> String {
    match setting {
        Setting::Approval => format!("approval validity ({setting}) of tool `{tool}`"),
        _ => format!("{setting} of tool `{tool}`"),
    }
}

fn zero_hint(setting: Setting) -> String {
    match setting {
        Setting::Approval => format!(
            "an approval valid for no time would let no call run; give a validity of at least 1 ms (`required` in the environment is {}), or turn approval off (`off`, `ToolSettings::without_approval`)",
            fmt_duration(ToolSpec::DEFAULT_APPROVAL_VALID_FOR)
        ),
        _ => "give a duration of at least 1 ms, or leave it out to keep the attribute's".to_owned(),
    }
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

    /// `spec` with this engine's overrides applied (E1); an approval override turns the
    /// attribute's approval on or off (A1).
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
        effective.approval = match over.approval {
            Some(approval) => approval.valid_for(),
            None => spec.approval,
        };
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
        // The error for a value of this setting that idem cannot use.
        let invalid = |text: String, reason: String| {
            let variable = variable.clone();
            match setting {
                Setting::Approval => EngineConfigError::InvalidApproval {
                    variable,
                    text,
                    reason,
                },
                _ => EngineConfigError::InvalidDuration {
                    variable,
                    text,
                    reason,
                },
            }
        };
        let text = value.into_string().map_err(|raw| {
            invalid(
                raw.to_string_lossy().into_owned(),
                "it is not valid UTF-8".to_owned(),
            )
        })?;
        let settings = tools.entry(tool.clone()).or_default();
        match setting {
            Setting::Approval => {
                settings.approval =
                    Some(parse_env_approval(&text).map_err(|reason| invalid(text, reason))?);
            }
            _ => {
                let duration = parse_env_duration(&text).map_err(|reason| invalid(text, reason))?;
                settings.set(setting, duration);
            }
        }
        if settings.get(setting).is_some_and(|d| d.is_zero()) {
            return Err(EngineConfigError::ZeroDuration {
                tool,
                setting,
                variable: Some(variable),
            });
        }
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

/// The value of an `IDEM_TOOL_<TOOL>_APPROVAL` variable (A1, E2): `required` (valid
/// [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`]), `off`, in any case, or a duration (required,
/// valid that long; a zero one is refused by the caller).
fn parse_env_approval(text: &str) -> Result<ApprovalSetting, String> {
    let word = text.trim();
    if word.eq_ignore_ascii_case("required") {
        return Ok(ApprovalSetting::Required {
            valid_for: ToolSpec::DEFAULT_APPROVAL_VALID_FOR,
        });
    }
    if word.eq_ignore_ascii_case("off") {
        return Ok(ApprovalSetting::Off);
    }
    if !word.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("it is neither `required`, `off` nor a duration".to_owned());
    }
    let valid_for = parse_env_duration(word)?;
    Ok(ApprovalSetting::Required { valid_for })
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

    // pins A1, E2: `APPROVAL` is a setting of the variables' grammar; its value is
    // `required`, `off` (any case) or a positive duration in whole milliseconds
    #[test]
    fn approval_variables_take_required_off_or_a_duration() {
        assert_eq!(
            env_variable("send.refund", Setting::Approval),
            "IDEM_TOOL_SEND_REFUND_APPROVAL"
        );
        assert_eq!(
            parse_variable("IDEM_TOOL_SEND_REFUND_APPROVAL").unwrap(),
            ("SEND_REFUND".to_owned(), Setting::Approval)
        );
        assert_eq!(Setting::Approval.name(), "require_approval");
        assert_eq!(env_suffixes(), "TTL, LEASE, WAIT, HEARTBEAT or APPROVAL");
        let required = |valid_for| Ok(ApprovalSetting::Required { valid_for });
        let hour = ToolSpec::DEFAULT_APPROVAL_VALID_FOR;
        assert_eq!(hour, Duration::from_secs(3600));
        for (text, expected) in [
            ("required", required(hour)),
            (" REQUIRED ", required(hour)),
            ("Required", required(hour)),
            ("off", Ok(ApprovalSetting::Off)),
            ("OFF", Ok(ApprovalSetting::Off)),
            ("30m", required(Duration::from_secs(1800))),
            (" 1h 30m ", required(Duration::from_secs(5400))),
            ("1500ms", required(Duration::from_millis(1500))),
            // zero parses; `read_env` refuses it as `ZeroDuration`, naming the variable
            ("0s", required(Duration::ZERO)),
        ] {
            assert_eq!(parse_env_approval(text), expected, "{text:?}");
        }
        for bad in ["yes", "true", "on", "", "requir", "never"] {
            let reason = parse_env_approval(bad).unwrap_err();
            assert_eq!(
                reason, "it is neither `required`, `off` nor a duration",
                "{bad:?}"
            );
        }
        assert!(parse_env_approval("1500us")
            .unwrap_err()
            .contains("whole number of milliseconds"));
        assert!(parse_env_approval("30 minutez").is_err());

        let error = EngineConfigError::InvalidApproval {
            variable: "IDEM_TOOL_SEND_REFUND_APPROVAL".into(),
            text: "yes".into(),
            reason: parse_env_approval("yes").unwrap_err(),
        };
        assert_eq!(
            error.to_string(),
            "the environment variable IDEM_TOOL_SEND_REFUND_APPROVAL holds \"yes\", which is not an approval setting: it is neither `required`, `off` nor a duration; write `required` (approval required, each approval valid 1h), `off` (no approval), or how long an approval is valid, like \"30m\" or \"2h\" (approval required)"
        );
        let error = EngineConfigError::UnknownSetting {
            variable: "IDEM_TOOL_SEND_REFUND_APPROVE".into(),
        };
        assert!(
            error
                .to_string()
                .ends_with("<SETTING> is TTL, LEASE, WAIT, HEARTBEAT or APPROVAL"),
            "{error}"
        );
        let error = EngineConfigError::ZeroDuration {
            tool: "SEND_REFUND".into(),
            setting: Setting::Approval,
            variable: Some("IDEM_TOOL_SEND_REFUND_APPROVAL".into()),
        };
        assert!(
            error.to_string().starts_with("the approval validity (require_approval) of tool `SEND_REFUND` (from the environment variable IDEM_TOOL_SEND_REFUND_APPROVAL) is zero: an approval valid for no time would let no call run"),
            "{error}"
        );
    }

    // pins A1, E1: an approval override turns the attribute's approval on or off, with its
    // own validity; the builder's beats the environment's; it counts as an override
    #[test]
    fn approval_override_wins_over_the_attribute() {
        let hour = ToolSpec::DEFAULT_APPROVAL_VALID_FOR;
        let half_hour = Duration::from_secs(1800);
        assert!(!ToolSettings::new().without_approval().is_empty());
        assert!(!ToolSettings::new().require_approval(hour).is_empty());
        assert_eq!(
            ToolSettings::new().require_approval(half_hour).approval,
            Some(ApprovalSetting::Required {
                valid_for: half_hour
            })
        );
        assert_eq!(
            ToolSettings::new()
                .require_approval(half_hour)
                .without_approval()
                .approval,
            Some(ApprovalSetting::Off),
            "the later call wins"
        );
        assert_eq!(ApprovalSetting::Off.valid_for(), None);

        let plain = ToolSpec::new("send_refund");
        let mut approving = ToolSpec::new("send_refund");
        approving.approval = Some(hour);
        let with = |settings: ToolSettings| {
            Overrides::checked(
                HashMap::from([("send_refund".to_owned(), settings)]),
                HashMap::new(),
            )
            .unwrap()
        };
        let on = with(ToolSettings::new().require_approval(half_hour));
        assert_eq!(on.apply(&plain).unwrap().approval, Some(half_hour));
        assert_eq!(on.apply(&approving).unwrap().approval, Some(half_hour));
        let off = with(ToolSettings::new().without_approval());
        assert_eq!(off.apply(&approving).unwrap().approval, None);
        assert_eq!(off.apply(&plain).unwrap().approval, None);
        // Other overrides leave the attribute's approval as it is.
        let ttl = with(ToolSettings::new().with_ttl(Duration::from_secs(3600 * 48)));
        assert_eq!(ttl.apply(&approving).unwrap().approval, Some(hour));
        assert_eq!(ttl.apply(&plain).unwrap().approval, None);
        // And an approval override leaves the other settings as they are.
        let effective = on.apply(&approving).unwrap();
        assert_eq!(
            effective,
            ToolSpec {
                approval: Some(half_hour),
                ..approving
            }
        );

        // The builder's approval beats the environment's, the environment's fills the rest.
        let overrides = Overrides::checked(
            HashMap::from([(
                "send_refund".to_owned(),
                ToolSettings::new().without_approval(),
            )]),
            HashMap::from([(
                "SEND_REFUND".to_owned(),
                ToolSettings::new()
                    .require_approval(half_hour)
                    .with_wait(Duration::from_secs(1)),
            )]),
        )
        .unwrap();
        let over = overrides.for_tool("send_refund");
        assert_eq!(over.approval, Some(ApprovalSetting::Off));
        assert_eq!(over.wait, Some(Duration::from_secs(1)));
        // The builder's entries are by exact name; the environment's by `<TOOL>`.
        for other_name in ["send.refund", "SEND_REFUND"] {
            assert_eq!(
                overrides.for_tool(other_name).approval,
                Some(ApprovalSetting::Required {
                    valid_for: half_hour
                }),
                "{other_name}: no builder entry by that name, the environment's"
            );
        }

        // A zero validity given in code is `ZeroDuration` for `Setting::Approval`.
        let by_name = HashMap::from([(
            "send_refund".to_owned(),
            ToolSettings::new().require_approval(Duration::from_micros(999)),
        )]);
        assert_eq!(
            Overrides::checked(by_name, HashMap::new()).unwrap_err(),
            EngineConfigError::ZeroDuration {
                tool: "send_refund".into(),
                setting: Setting::Approval,
                variable: None,
            }
        );
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
