//! The engine: the store and clock that `#[idempotent]` calls use.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::clock::{Clock, SystemClock};
use crate::store::Store;

/// A store and a clock. Cheap to clone (two `Arc`s).
///
/// Calls use the engine of the [`CallContext`](crate::CallContext) in force, else the
/// process-wide default ([`default_engine`]).
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl Engine {
    /// An engine over `store` and `clock`.
    pub fn new(store: impl Store, clock: impl Clock) -> Self {
        Engine {
            store: Arc::new(store),
            clock: Arc::new(clock),
        }
    }

    /// An engine over shared handles, for tests that inspect the store or move the clock.
    pub fn from_shared(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Engine { store, clock }
    }

    /// An in-memory store with the system clock.
    #[cfg(feature = "memory")]
    pub fn in_memory() -> Self {
        Engine::new(crate::store::MemoryStore::new(), SystemClock)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .finish()
    }
}

static DEFAULT_ENGINE: OnceLock<Engine> = OnceLock::new();

/// Sets the process-wide default engine, once, before the first call that needs it.
///
/// # Errors
/// Gives `engine` back if a default was already set or already used.
pub fn set_default_engine(engine: Engine) -> Result<(), Engine> {
    DEFAULT_ENGINE.set(engine)
}

/// The process-wide default engine: the one set with [`set_default_engine`], else an
/// in-memory store with the system clock (feature `memory`).
///
/// # Errors
/// Without the `memory` feature and with no default set: a
/// [`StoreError`](crate::StoreError) of kind `Unsupported` naming the fix.
pub fn default_engine() -> Result<Engine, crate::StoreError> {
    #[cfg(feature = "memory")]
    {
        Ok(DEFAULT_ENGINE.get_or_init(Engine::in_memory).clone())
    }
    #[cfg(not(feature = "memory"))]
    {
        DEFAULT_ENGINE.get().cloned().ok_or_else(|| {
            crate::StoreError::new(
                "none",
                crate::store::StoreErrorKind::Unsupported,
                "no store configured: enable the `memory` feature, call idem::set_default_engine, or set an engine on the CallContext",
            )
        })
    }
}
