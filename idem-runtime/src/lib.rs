//! Runtime of [`idem-agent`](https://docs.rs/idem-agent): retry a side-effecting AI-agent tool call
//! without repeating the side effect.
//!
//! Users depend on the `idem-agent` crate, which re-exports everything here together with the
//! `#[idempotent]` attribute. The rules this crate implements are the ids of the project's
//! `CONTRACT.md` (K: keys, S: store semantics, D: dispatch, T: test kit), cited in each
//! item's documentation.
//!
//! # Layers
//!
//! A call's data flows call → key → store → body → store, and the modules are layered the
//! same way: each imports only from the layers below it (`.ci/module-cycles.py` fails CI on
//! an import cycle between top-level modules, or between the modules inside a folder module
//! other than `canonical`, and prints these layers).
//!
//! | layer | modules | what |
//! | --- | --- | --- |
//! | values | [`canonical`], [`clock`], [`reconcile`], [`scope`], [`key`], [`envelope`], [`spec`], [`args`], [`label`] | canonical JSON, keys, scopes, tool specs, record labels |
//! | storage | [`store`], then [`error`], [`outcome`], [`settings`] | the `Store` trait and backends; errors and outcomes that carry store errors; run-time settings |
//! | engine | [`engine`], then [`context`], [`inspect`] | store + clock + settings; the call context (which resolves a scope for a call, and carries the running [`attempt`]) |
//! | protocol | [`dispatch`], [`telemetry`], [`testkit`], heartbeats, [`call`] | provider dispatch, spans and metrics, the test kit, the claim → body → save protocol |
//! | edges | [`integrations`], `macro_support` | rmcp, rig, async-openai, genai; what `#[idempotent]` expands to |

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod approval;
pub mod args;
pub mod attempt;
pub mod call;
pub mod canonical;
pub mod clock;
pub mod context;
mod detach;
pub mod dispatch;
pub mod engine;
pub mod envelope;
pub mod error;
mod heartbeat;
pub mod inspect;
/// Integrations with agent frameworks, each behind its own cargo feature (off by default).
pub mod integrations;
pub mod key;
pub mod label;
#[doc(hidden)]
pub mod macro_support;
pub mod outcome;
pub mod reconcile;
pub mod resolve;
pub mod scope;
pub mod settings;
pub mod spec;
pub mod store;
pub mod telemetry;
pub mod testkit;

pub use args::ArgsBuilder;
pub use attempt::{current_attempt, AttemptInfo, PreviousRun, UnknownCause};
pub use call::{prepare, ClaimedCall, PreparedCall};
pub use canonical::{CanonicalError, CanonicalJson};
pub use clock::{Clock, SystemClock, Timestamp};
pub use context::{current_key, AttemptRecord, CallContext, DerivedKey};
pub use engine::{
    default_engine, set_default_engine, DefaultEngineAlreadySet, Engine, EngineBuilder,
    STORE_ENV_VAR,
};
pub use envelope::Envelope;
pub use error::Error;
pub use key::{Fingerprint, IdempotencyKey, KEY_FORMAT_VERSION};
pub use label::{RecordLabel, ScopePart, ScopePath};
pub use outcome::{CallRecord, CallStatus, IdempotentError, OutcomeSource, ToolError, ToolOutput};
pub use reconcile::{ReconcileVerdict, Reconciled};
pub use scope::Scope;
pub use settings::{ApprovalSetting, EngineConfigError, Setting, ToolSettings};
pub use spec::{OnCancel, OnUnknown, ToolSpec};
#[cfg(feature = "memory")]
pub use store::MemoryStore;
#[cfg(feature = "postgres")]
pub use store::{PostgresConnectError, PostgresStore};
#[cfg(feature = "redis")]
pub use store::{RedisConnectError, RedisStore};
#[cfg(feature = "sqlite")]
pub use store::{SqliteOpenError, SqliteStore};
pub use store::{Store, StoreError, StoreErrorKind};
