//! Exit statuses (contract X3) and the errors that end a command with one of them.

use std::process::ExitCode;

use idem_runtime::inspect::InspectError;
use idem_runtime::store::StoreConfigError;
use idem_runtime::{EngineConfigError, StoreError, StoreErrorKind};

/// What `idem` exits with (X3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: found, or done.
    Done = 0,
    /// 1: not found or nothing done: nothing to show, purge or decide (a purge that deleted
    /// nothing; a decision refused, or lost to a change of the record).
    NotFound = 1,
    /// 2: bad usage or input; the message names the option or value.
    Usage = 2,
    /// 3: the store is unavailable or refused the operation; the message is the backend's.
    Store = 3,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Why a command did not end with [`Exit::Done`]. The message is what `idem` prints on
/// stderr after `idem: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// Nothing to show, purge or decide (exit 1).
    #[error("{0}")]
    NotFound(String),
    /// Bad usage or input, naming the option or value (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The store is unavailable, could not be opened, or refused the operation (exit 3).
    #[error("{0}")]
    Store(String),
}

impl CliError {
    /// The exit status for this error.
    pub fn exit(&self) -> Exit {
        match self {
            CliError::NotFound(_) => Exit::NotFound,
            CliError::Usage(_) => Exit::Usage,
            CliError::Store(_) => Exit::Store,
        }
    }

    /// A store error that does not name the store yet, followed by `(store LOCATOR)`;
    /// `shown` has its passwords as `***`.
    pub fn naming_store(self, shown: &str) -> Self {
        match self {
            CliError::Store(message)
                if !message.contains(shown.split('?').next().unwrap_or(shown)) =>
            {
                CliError::Store(format!("{message} (store {shown})"))
            }
            other => other,
        }
    }

    /// A bad value of `option`: `--args: expected a JSON object`.
    pub fn usage(option: &str, what: impl std::fmt::Display) -> Self {
        CliError::Usage(format!("{option}: {what}"))
    }
}

impl From<StoreError> for CliError {
    /// Every store error is exit 3 with the backend's message: `Unavailable` (the server
    /// cannot be reached), `Unsupported` (the store cannot list, purge, count, keep
    /// histories or record decisions, or its schema is of another version) and `Corrupt` (a
    /// record the store cannot read back).
    fn from(error: StoreError) -> Self {
        let hint = match error.kind {
            StoreErrorKind::Unavailable => "the store is unavailable",
            StoreErrorKind::Unsupported => "the store refused the operation",
            _ => "the store failed",
        };
        CliError::Store(format!("{hint}: {error}"))
    }
}

impl From<InspectError> for CliError {
    fn from(error: InspectError) -> Self {
        match error {
            InspectError::Store(e) => e.into(),
            other => CliError::usage("--args", other),
        }
    }
}

/// A store locator that cannot be parsed, is malformed (a URL the backend's client does not
/// parse, a bad schema name) or names a backend this build lacks: bad input, exit 2 naming
/// `origin`; or a store that cannot be opened: exit 3. `origin` is where the locator came
/// from: `--store` or `IDEM_STORE`.
pub fn locator_error(error: StoreConfigError, origin: &str) -> CliError {
    match error {
        StoreConfigError::Open { ref source, .. } => CliError::Store(match source.kind {
            StoreErrorKind::Unavailable => format!("the store is unavailable: {error}"),
            _ => format!("the store cannot be used: {error}"),
        }),
        StoreConfigError::FeatureDisabled { given, feature, .. } => CliError::Usage(format!(
            "{origin}: store `{given}` needs the `{feature}` backend, which this idem was built \
             without: reinstall with `cargo install idem-cli --features {feature}`"
        )),
        other => CliError::usage(origin, other),
    }
}

/// An engine that cannot be built: its store as [`locator_error`], a bad namespace as bad
/// usage naming `--namespace` and `IDEM_NAMESPACE`.
pub fn engine_error(error: EngineConfigError, origin: &str) -> CliError {
    match error {
        EngineConfigError::Store(e) => locator_error(e, origin),
        EngineConfigError::BadNamespace { namespace, .. } => CliError::Usage(format!(
            "--namespace (or IDEM_NAMESPACE): {namespace:?} must be 1 to 128 printable ASCII \
             characters"
        )),
        other => CliError::Usage(other.to_string()),
    }
}
