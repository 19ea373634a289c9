//! The static description of one `#[idempotent]` tool.

use std::time::Duration;

use crate::scope::Scope;

/// How one tool is keyed and stored; the attribute writes one as a `static` per tool.
///
/// All spans are [`Duration`]s and are applied in whole milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    /// The tool's name, part of every key (K6). Default: the fn's name.
    pub name: &'static str,
    /// Whose calls share keys (K7). Default: [`Scope::Conversation`].
    pub scope: Scope,
    /// How long a saved outcome is replayed, counted from the claim (S8). Default 24 h,
    /// Stripe's floor.
    pub ttl: Duration,
    /// How long a claim is held before another caller may take it over (S6). Zero means
    /// "already lapsed". Default 60 s.
    pub lease: Duration,
    /// How long a concurrent duplicate waits for the owner's outcome before it gets
    /// [`Error::InProgress`](crate::Error::InProgress) (S5). Default 5 s.
    pub wait: Duration,
    /// The tool's own store, as a [store locator](crate::store::locator)
    /// (`#[idempotent(store = "sqlite:agent.db")]`); `None` (the default): the engine of
    /// the call context, else the process default. See [`crate::engine`] for the order.
    pub store: Option<&'static str>,
}

impl ToolSpec {
    /// Default TTL: 24 hours (Stripe keeps keys at least this long).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    /// Default lease: 60 seconds.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// Default wait for a concurrent duplicate: 5 seconds.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

    /// A spec with the defaults: conversation scope, 24 h TTL, 60 s lease, 5 s wait.
    pub const fn new(name: &'static str) -> Self {
        ToolSpec {
            name,
            scope: Scope::Conversation,
            ttl: Self::DEFAULT_TTL,
            lease: Self::DEFAULT_LEASE,
            wait: Self::DEFAULT_WAIT,
            store: None,
        }
    }
}
