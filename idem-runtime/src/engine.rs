//! The engine: the store and clock that `#[idempotent]` calls use, and how it is chosen.
//!
//! A call's engine is, from the most specific to the least:
//! 1. the tool's own store, from `#[idempotent(store = "…")]` (a [store
//!    locator](crate::store::locator)), with the clock of the engine below it — so that a
//!    tool whose outcomes must be shared by every worker is never silently moved to another
//!    store, while tests can still move its clock;
//! 2. the engine of the [`CallContext`](crate::CallContext) in force (set by
//!    [`CallContext::with_engine`](crate::CallContext::with_engine), a dispatcher or a
//!    conversation);
//! 3. the process-wide default ([`default_engine`]): the one given to
//!    [`set_default_engine`], else the store named by the `IDEM_STORE` environment
//!    variable (read once, on first use), else the in-memory store.
//!
//! Stores opened from a locator (`IDEM_STORE`, `store = "…"`) are kept for the life of the
//! process, one per locator text. Two consequences: a Redis or PostgreSQL store opened this
//! way connects inside the tokio runtime of its first call, and the Redis connection stays
//! bound to that runtime (a process that builds several runtimes in turn, as
//! `#[tokio::test]` does, sees the first call on each later runtime fail with an
//! `Unavailable` store error; give such code an engine per runtime with
//! [`CallContext::with_engine`](crate::CallContext::with_engine)); and an SQLite store named
//! by a tool is opened on the thread of that tool's first call, which waits for the file's
//! lock (up to the 5 s busy timeout) if another connection holds it then.
//!
//! An engine also carries run-time overrides of tools' settings ([`crate::settings`], E1,
//! E2): [`EngineBuilder::tool`], [`EngineBuilder::settings_from_env`], and for the default
//! engine the `IDEM_TOOL_<TOOL>_<SETTING>` variables (read once). A tool's own store keeps
//! the overrides of the engine below it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::clock::{Clock, SystemClock};
use crate::error::Error;
use crate::settings::{EngineConfigError, Overrides, ToolSettings};
use crate::spec::ToolSpec;
use crate::store::{Store, StoreConfigError, StoreError, StoreErrorKind, StoreLocator};

/// The environment variable that names the default store: a [store
/// locator](crate::store::locator) such as `sqlite:/var/lib/agent/idem.db`.
pub const STORE_ENV_VAR: &str = "IDEM_STORE";

/// The environment variable that names the default engine's namespace (K11); read by
/// [`default_engine`] and [`EngineBuilder::namespace_from_env`].
pub const NAMESPACE_ENV_VAR: &str = "IDEM_NAMESPACE";

/// The longest namespace, in bytes (K11).
pub const NAMESPACE_MAX_LEN: usize = 128;

/// A store, a clock, run-time overrides of tools' settings (E1) and a namespace (K11).
/// Cheap to clone (a few `Arc`s).
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{Engine, SystemClock};
/// let engine = Engine::builder().store_locator("memory").clock(SystemClock).build()?;
/// assert_eq!(engine.store().backend(), "memory");
/// # Ok::<(), idem_agent::EngineConfigError>(())
/// ```
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    namespace: Option<Arc<str>>,
    settings: Arc<Overrides>,
}

impl Engine {
    /// An engine over `store` and `clock`.
    pub fn new(store: impl Store, clock: impl Clock) -> Self {
        Engine {
            store: Arc::new(store),
            clock: Arc::new(clock),
            namespace: None,
            settings: Arc::default(),
        }
    }

    /// An engine over shared handles, for tests that inspect the store or move the clock.
    pub fn from_shared(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Engine {
            store,
            clock,
            namespace: None,
            settings: Arc::default(),
        }
    }

    /// An in-memory store with the system clock.
    #[cfg(feature = "memory")]
    pub fn in_memory() -> Self {
        Engine::new(crate::store::MemoryStore::new(), SystemClock)
    }

    /// A builder: choose the store by value, by locator or from `IDEM_STORE`, and the
    /// clock.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The store named by the locator `locator` (for example `sqlite:agent.db`), with the
    /// system clock.
    ///
    /// # Errors
    /// As [`EngineBuilder::build`]: [`EngineConfigError::Store`].
    pub fn from_locator(locator: &str) -> Result<Self, EngineConfigError> {
        Engine::builder().store_locator(locator).build()
    }

    /// The store named by `IDEM_STORE` (the in-memory store if it is unset), with the
    /// system clock. Reads the variable now; [`default_engine`] reads it once per process.
    ///
    /// Tools' settings are not read from the environment here; for that, use
    /// `Engine::builder().store_from_env().settings_from_env().build()`.
    ///
    /// # Errors
    /// As [`EngineBuilder::build`]: [`EngineConfigError::Store`], among them
    /// [`StoreConfigError::NotUnicode`].
    pub fn from_env() -> Result<Self, EngineConfigError> {
        Engine::builder().store_from_env().build()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The namespace that enters every key this engine derives (K11), if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The overrides of the tool named `name` in force on this engine (E1, E2): the
    /// builder's, else the environment's, per setting; `None` fields keep the attribute's.
    pub fn tool_settings(&self, name: &str) -> ToolSettings {
        self.settings.for_tool(name)
    }

    /// `spec` as calls through this engine see it (E1): its `ttl`, `lease`, `wait` and
    /// `heartbeat` overridden by [`tool_settings`](Self::tool_settings), every other
    /// field (and every setting not overridden) the attribute's. The call protocol reads
    /// the settings from here.
    ///
    /// # Errors
    /// [`Error::Config`] naming the tool when an override makes, together with a value of
    /// the attribute, a ttl shorter than the lease or a heartbeat not shorter than the
    /// lease (E3). Relations among the attribute's own values are not checked here (the
    /// attribute checks them at compile time).
    pub fn effective_spec(&self, spec: &ToolSpec) -> Result<ToolSpec, Error> {
        self.settings.apply(spec)
    }

    /// This engine's clock, settings and namespace with `store`.
    pub(crate) fn with_store(&self, store: Arc<dyn Store>) -> Self {
        Engine {
            store,
            clock: self.clock.clone(),
            namespace: self.namespace.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// Builds an [`Engine`]; see [`Engine::builder`]. Unset parts default to the in-memory
/// store and the system clock.
#[derive(Default)]
pub struct EngineBuilder {
    store: StoreChoice,
    clock: Option<Arc<dyn Clock>>,
    tools: HashMap<String, ToolSettings>,
    settings_from_env: bool,
    namespace: NamespaceChoice,
}

#[derive(Default)]
enum NamespaceChoice {
    #[default]
    None,
    Given(String),
    Env,
}

#[derive(Default)]
enum StoreChoice {
    #[default]
    Memory,
    Given(Arc<dyn Store>),
    Locator(String),
    Env,
}

impl EngineBuilder {
    /// Uses `store`.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = StoreChoice::Given(Arc::new(store));
        self
    }

    /// Uses a store already shared with other engines.
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = StoreChoice::Given(store);
        self
    }

    /// Uses the store named by a [locator](crate::store::locator), opened by
    /// [`build`](Self::build).
    pub fn store_locator(mut self, locator: impl Into<String>) -> Self {
        self.store = StoreChoice::Locator(locator.into());
        self
    }

    /// Uses the store named by the `IDEM_STORE` environment variable, read by
    /// [`build`](Self::build); the in-memory store if it is unset.
    pub fn store_from_env(mut self) -> Self {
        self.store = StoreChoice::Env;
        self
    }

    /// Derives every key in `namespace` (K11): two engines with different namespaces never
    /// share a record, even on one store. 1–[`NAMESPACE_MAX_LEN`] printable ASCII
    /// characters, checked by [`build`](Self::build).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = NamespaceChoice::Given(namespace.into());
        self
    }

    /// Uses the namespace named by `IDEM_NAMESPACE`, read by [`build`](Self::build); none
    /// if it is unset.
    pub fn namespace_from_env(mut self) -> Self {
        self.namespace = NamespaceChoice::Env;
        self
    }

    /// Uses `clock` (a [`ManualClock`](crate::testkit::ManualClock) in tests).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Overrides settings of the tool named `name` (its `#[idempotent]` name, K6) for
    /// every call through the engine (E1); what `settings` leaves `None` keeps the
    /// attribute's value (or the environment's, with
    /// [`settings_from_env`](Self::settings_from_env)). Called again for the same tool, the
    /// later call's `Some` values win. Checked by [`build`](Self::build).
    ///
    /// ```
    /// # extern crate idem_runtime as idem_agent;
    /// use std::time::Duration;
    /// use idem_agent::{Engine, ToolSettings};
    /// let engine = Engine::builder()
    ///     .tool("send_refund", ToolSettings::new().with_lease(Duration::from_secs(120)))
    ///     .build()?;
    /// assert_eq!(engine.tool_settings("send_refund").lease, Some(Duration::from_secs(120)));
    /// # Ok::<(), idem_agent::EngineConfigError>(())
    /// ```
    pub fn tool(mut self, name: impl Into<String>, settings: ToolSettings) -> Self {
        let entry = self.tools.entry(name.into()).or_default();
        *entry = settings.or(*entry);
        self
    }

    /// Also reads tools' settings from the `IDEM_TOOL_<TOOL>_<SETTING>` environment
    /// variables, when [`build`](Self::build) runs (E2; grammar in [`crate::settings`]).
    /// The values given with [`tool`](Self::tool) win over them.
    pub fn settings_from_env(mut self) -> Self {
        self.settings_from_env = true;
        self
    }

    /// The engine.
    ///
    /// # Errors
    /// Tools' settings (E3), checked before any store is opened:
    /// [`EngineConfigError::InvalidDuration`], [`EngineConfigError::InvalidApproval`] and
    /// [`EngineConfigError::UnknownSetting`]
    /// for an `IDEM_TOOL_…` variable (with [`settings_from_env`](Self::settings_from_env)),
    /// [`EngineConfigError::ZeroDuration`], [`EngineConfigError::TtlShorterThanLease`] and
    /// [`EngineConfigError::HeartbeatNotShorterThanLease`] among one tool's overrides.
    /// Then [`EngineConfigError::Store`] for a locator (given, or read from `IDEM_STORE`):
    /// every [`StoreConfigError`] of [`StoreLocator::parse`] and [`StoreLocator::open`],
    /// among them [`StoreConfigError::FeatureDisabled`] naming the cargo feature to
    /// enable. The memory store without the `memory` feature is `FeatureDisabled` too.
    /// Last, [`EngineConfigError::BadNamespace`] (or `NotUnicode` for `IDEM_NAMESPACE`)
    /// for a namespace that is not 1–128 printable ASCII characters (K11).
    pub fn build(self) -> Result<Engine, EngineConfigError> {
        let settings = Arc::new(Overrides::build(self.tools, self.settings_from_env)?);
        let store = match self.store {
            StoreChoice::Given(store) => store,
            StoreChoice::Memory => StoreLocator::Memory.open()?,
            StoreChoice::Locator(text) => StoreLocator::parse(&text)?.open()?,
            StoreChoice::Env => open_env_locator()?,
        };
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let namespace = match self.namespace {
            NamespaceChoice::None => None,
            NamespaceChoice::Given(text) => Some(check_namespace(text, "the builder")?),
            NamespaceChoice::Env => read_env_namespace()?,
        };
        Ok(Engine {
            store,
            clock,
            namespace,
            settings,
        })
    }
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match &self.store {
            StoreChoice::Memory => "memory (default)".to_owned(),
            StoreChoice::Given(store) => format!("{store:?}"),
            StoreChoice::Locator(text) => match StoreLocator::parse(text) {
                Ok(locator) => locator.to_string(),
                Err(_) => "(invalid locator)".to_owned(),
            },
            StoreChoice::Env => STORE_ENV_VAR.to_owned(),
        };
        f.debug_struct("EngineBuilder")
            .field("store", &store)
            .field("clock", &self.clock)
            .field("tools", &self.tools)
            .field("settings_from_env", &self.settings_from_env)
            .finish_non_exhaustive()
    }
}

/// `text` as a namespace, or the error naming where it came from (K11).
fn check_namespace(text: String, origin: &str) -> Result<Arc<str>, EngineConfigError> {
    let printable = text.bytes().all(|b| (0x20..0x7f).contains(&b));
    if text.is_empty() || text.len() > NAMESPACE_MAX_LEN || !printable {
        return Err(EngineConfigError::BadNamespace {
            origin: origin.to_owned(),
            namespace: text,
        });
    }
    Ok(Arc::from(text))
}

/// The namespace in `IDEM_NAMESPACE` now, checked; `None` when the variable is unset.
fn read_env_namespace() -> Result<Option<Arc<str>>, EngineConfigError> {
    match std::env::var(NAMESPACE_ENV_VAR) {
        Ok(text) => check_namespace(text, NAMESPACE_ENV_VAR).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EngineConfigError::NotUnicode {
            variable: NAMESPACE_ENV_VAR.to_owned(),
        }),
    }
}

/// The locator in `IDEM_STORE` now, opened; the memory store when the variable is unset.
fn open_env_locator() -> Result<Arc<dyn Store>, StoreConfigError> {
    read_env_locator()
        .and_then(|locator| locator.open())
        .map_err(|e| e.from_origin(STORE_ENV_VAR))
}

static DEFAULT_ENGINE: OnceLock<Engine> = OnceLock::new();

/// The parse of `IDEM_STORE`, read once per process.
static ENV_LOCATOR: OnceLock<Result<StoreLocator, StoreConfigError>> = OnceLock::new();

/// The `IDEM_TOOL_<TOOL>_<SETTING>` variables, read once per process (E2).
static ENV_SETTINGS: OnceLock<Result<Arc<Overrides>, EngineConfigError>> = OnceLock::new();

/// The default engine's overrides (E2), as a store error when a variable is invalid: no
/// call runs with settings other than those asked for.
fn env_settings() -> Result<Arc<Overrides>, StoreError> {
    ENV_SETTINGS
        .get_or_init(|| Overrides::from_env().map(Arc::new))
        .clone()
        .map_err(|e| StoreError::new("config", StoreErrorKind::Unsupported, e.to_string()))
}

/// The parse of `IDEM_NAMESPACE`, read once per process (K11).
static ENV_NAMESPACE: OnceLock<Result<Option<Arc<str>>, EngineConfigError>> = OnceLock::new();

/// The default engine's namespace (K11), read once per process, as a store error when the
/// variable is invalid: the same for the default engine and for tools with their own store
/// called outside any engine, so one call never gets two keys in one process.
fn env_namespace() -> Result<Option<Arc<str>>, StoreError> {
    ENV_NAMESPACE
        .get_or_init(read_env_namespace)
        .clone()
        .map_err(|e| StoreError::new("config", StoreErrorKind::Unsupported, e.to_string()))
}

/// Serialises the first opening of the default store, so that racing first calls share one
/// store (one pool, one connection) rather than each opening their own.
static DEFAULT_INIT: Mutex<()> = Mutex::new(());

/// Sets the process-wide default engine, once, before the first call that needs it.
///
/// It composes with `?` in a `main` (or any function) returning `Box<dyn Error>`:
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{set_default_engine, Engine};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let engine = Engine::from_locator("memory")?;
///     set_default_engine(engine)?;
///
///     // A second engine is refused, and given back.
///     let refused = set_default_engine(Engine::from_locator("memory")?).unwrap_err();
///     assert_eq!(refused.into_engine().store().backend(), "memory");
/// #   fn anyhow_ready<E: std::error::Error + Send + Sync + 'static>() {}
/// #   anyhow_ready::<idem_agent::DefaultEngineAlreadySet>();
///     Ok(())
/// }
/// ```
///
/// # Errors
/// [`DefaultEngineAlreadySet`], holding `engine`, if a default engine is already in force:
/// an earlier `set_default_engine` succeeded, or a call (or [`default_engine`]) already
/// opened the default from `IDEM_STORE` or the in-memory store. The default in force is
/// left as it was.
pub fn set_default_engine(engine: Engine) -> Result<(), DefaultEngineAlreadySet> {
    DEFAULT_ENGINE
        .set(engine)
        .map_err(|engine| DefaultEngineAlreadySet { engine })
}

/// The error of [`set_default_engine`] when the process already has a default engine: set
/// by an earlier `set_default_engine`, or opened by a call (or [`default_engine`]) from
/// `IDEM_STORE` or as the in-memory store. It holds the refused engine;
/// [`into_engine`](Self::into_engine) gives it back.
///
/// An ordinary error (`Send + Sync + 'static`), so `set_default_engine(engine)?` works in a
/// function returning `Box<dyn std::error::Error>` or `anyhow::Result`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the process-wide default engine is already set (by an earlier set_default_engine, or by a \
     call that opened the default from IDEM_STORE or the in-memory store); call \
     set_default_engine once, before the first call that needs it, or give this engine to \
     the calls with CallContext::with_engine or Dispatcher::builder().engine(…)"
)]
pub struct DefaultEngineAlreadySet {
    engine: Engine,
}

impl DefaultEngineAlreadySet {
    /// The engine that was refused (not the one in force: that is [`default_engine`]'s).
    pub fn into_engine(self) -> Engine {
        self.engine
    }
}

/// The process-wide default engine: the one set with [`set_default_engine`]; else the store
/// named by `IDEM_STORE` (read once per process), with the system clock; else, with the
/// variable unset, the in-memory store (feature `memory`). Unless set with
/// [`set_default_engine`], it overrides tools' settings from the
/// `IDEM_TOOL_<TOOL>_<SETTING>` variables, read once per process (E2, [`crate::settings`]).
///
/// A store that opened is kept for the life of the process. Redis and PostgreSQL stores
/// connect on first use, inside the tokio runtime of that use.
///
/// # Errors
/// A [`StoreError`] of kind `Unsupported` when `IDEM_STORE` is invalid or names a backend
/// whose cargo feature is off (the message names the feature), or when the variable is
/// unset and the `memory` feature is off, or when an `IDEM_TOOL_…` variable is invalid (the
/// message is the [`EngineConfigError`]'s); an open failure keeps its backend's kind. The
/// error repeats on every call: no body runs without its store (S10). An open failure
/// (say, an SQLite file in a directory not yet mounted) is retried by the next call.
pub fn default_engine() -> Result<Engine, StoreError> {
    if let Some(engine) = DEFAULT_ENGINE.get() {
        return Ok(engine.clone());
    }
    let _init = DEFAULT_INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(engine) = DEFAULT_ENGINE.get() {
        return Ok(engine.clone());
    }
    let locator = ENV_LOCATOR.get_or_init(read_env_locator).clone();
    let settings = env_settings()?;
    let store = locator
        .and_then(|locator| locator.open())
        .map_err(|e| e.from_origin(STORE_ENV_VAR).into_store_error())?;
    let namespace = env_namespace()?;
    let engine = Engine {
        store,
        clock: Arc::new(SystemClock),
        namespace,
        settings,
    };
    Ok(DEFAULT_ENGINE.get_or_init(|| engine).clone())
}

fn read_env_locator() -> Result<StoreLocator, StoreConfigError> {
    match std::env::var(STORE_ENV_VAR) {
        Ok(text) => StoreLocator::parse(&text),
        Err(std::env::VarError::NotPresent) => Ok(StoreLocator::Memory),
        Err(std::env::VarError::NotUnicode(_)) => Err(StoreConfigError::NotUnicode {
            variable: STORE_ENV_VAR.to_owned(),
        }),
    }
}

/// Stores opened for `#[idempotent(store = "…")]`, by locator text: every tool that names
/// the same locator shares one store.
static TOOL_STORES: OnceLock<RwLock<HashMap<&'static str, Arc<dyn Store>>>> = OnceLock::new();

/// The engine for a call to `tool` whose attribute names the store `locator`: that store,
/// with the clock and settings of `fallback` (the context's engine), else those of the
/// default engine (the system clock and the environment's settings if it is not set yet).
///
/// # Errors
/// The locator's [`StoreConfigError`] as a [`StoreError`], naming the tool. A failure to
/// open is not remembered: the next call tries again.
pub(crate) fn tool_engine(
    tool: &str,
    locator: &'static str,
    fallback: Option<&Engine>,
) -> Result<Engine, StoreError> {
    let stores = TOOL_STORES.get_or_init(Default::default);
    // Every call of such a tool looks its store up: a shared read lock, so concurrent calls
    // never queue behind each other; the write lock only for the first open.
    let known = stores
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(locator)
        .cloned();
    let store = match known {
        Some(store) => store,
        None => {
            let mut stores = stores.write().unwrap_or_else(|p| p.into_inner());
            match stores.get(locator) {
                Some(store) => store.clone(),
                None => {
                    let store = StoreLocator::parse(locator)
                        .and_then(|l| l.open())
                        .map_err(|e| {
                            e.from_origin(format!("store = … on the tool `{tool}`"))
                                .into_store_error()
                        })?;
                    stores.insert(locator, store.clone());
                    store
                }
            }
        }
    };
    Ok(match fallback {
        Some(engine) => engine.with_store(store),
        None => match DEFAULT_ENGINE.get() {
            Some(default) => default.with_store(store),
            None => Engine {
                store,
                clock: Arc::new(SystemClock),
                settings: env_settings()?,
                namespace: env_namespace()?,
            },
        },
    })
}
