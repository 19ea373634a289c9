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
    /// How often the owner of a claim renews its lease while the body runs (L1): `None`
    /// (the default) means a third of [`lease`](Self::lease). Shorter than the lease, or the
    /// lease lapses between two renewals. See [`effective_heartbeat`](Self::effective_heartbeat).
    pub heartbeat: Option<Duration>,
    /// What a body that began and then was cancelled (its future dropped) or panicked leaves
    /// behind (U4). Default [`OnCancel::Hold`].
    pub on_cancel: OnCancel,
    /// What happens to an unknown outcome that no reconcile function settles (U2, U2a):
    /// held until a person decides (default, [`OnUnknown::Hold`]), or run again once its
    /// lease lapsed ([`OnUnknown::Rerun`]).
    pub on_unknown: OnUnknown,
    /// Whether the tool declares a reconcile function (`#[idempotent(reconcile = f)]`, U3):
    /// then a call that finds the key's outcome unknown takes it over at once and asks the
    /// reconcile function before running the body. Set by the attribute; default `false`.
    pub reconcile: bool,
    /// The tool's own store, as a [store locator](crate::store::locator)
    /// (`#[idempotent(store = "sqlite:agent.db")]`); `None` (the default): the engine of
    /// the call context, else the process default. See [`crate::engine`] for the order.
    pub store: Option<&'static str>,
    /// Whether records of this tool keep the canonical JSON of its key arguments, for audit
    /// (`#[idempotent(audit)]`, P2). Default `false`: records hold the tool, scope and
    /// times, never arguments. Fingerprint-only arguments are never stored either way.
    pub audit: bool,
    /// `Some(valid_for)`: every key's first call waits for a person's approval, which then
    /// lets one call run for `valid_for` (A1–A4); `None` (the default): no approval.
    pub approval: Option<Duration>,
}

impl ToolSpec {
    /// Default TTL: 24 hours (Stripe keeps keys at least this long).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    /// Default lease: 60 seconds.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// Default wait for a concurrent duplicate: 5 seconds.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);
    /// How long an approval lets a call run, unless the tool says otherwise (A1): 1 hour.
    pub const DEFAULT_APPROVAL_VALID_FOR: Duration = Duration::from_secs(60 * 60);

    /// A spec with the defaults: conversation scope, 24 h TTL, 60 s lease, 5 s wait, a
    /// heartbeat of a third of the lease, cancellation leaves the outcome unknown, unknown
    /// outcomes are held for a person's decision, no reconcile function.
    pub const fn new(name: &'static str) -> Self {
        ToolSpec {
            name,
            scope: Scope::Conversation,
            ttl: Self::DEFAULT_TTL,
            lease: Self::DEFAULT_LEASE,
            wait: Self::DEFAULT_WAIT,
            heartbeat: None,
            on_cancel: OnCancel::Hold,
            on_unknown: OnUnknown::Hold,
            reconcile: false,
            store: None,
            audit: false,
            approval: None,
        }
    }

    /// The renewal period in force (L1): [`heartbeat`](Self::heartbeat), else a third of
    /// the lease; at least 1 ms and at most the lease less 1 ms, so that a renewal always
    /// lands before the lease it extends lapses (a hand-built spec's heartbeat is clamped
    /// the same way). `None` when the lease is shorter than 2 ms (zero means already lapsed):
    /// there is no period to renew in.
    pub fn effective_heartbeat(&self) -> Option<Duration> {
        let millisecond = Duration::from_millis(1);
        if self.lease < 2 * millisecond {
            return None;
        }
        let every = self.heartbeat.unwrap_or(self.lease / 3);
        Some(every.clamp(millisecond, self.lease - millisecond))
    }
}

/// What a body that began and then was cancelled or panicked leaves behind (U4).
///
/// Once a body has begun, its effect may have happened, so by default a retry must not
/// run it blind: the claim is [held](OnCancel::Hold) as outcome unknown. A body dropped
/// before it began (while its call still waited for the claim) always releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnCancel {
    /// The key is marked outcome unknown (the default): a tool with a reconcile function
    /// reconciles on the next call; what other tools' calls get is [`OnUnknown`]'s choice.
    #[default]
    Hold,
    /// At least once (`#[idempotent(on_cancel = "release")]`): the claim is released at
    /// once and the next call runs the body again with the same key, as after a retryable
    /// error. For effects that are harmless to repeat or that the downstream API
    /// deduplicates by the forwarded key. A run that took over an unknown outcome is never
    /// released (U1): it leaves the key unknown; a run that claimed a key decided not
    /// applied leaves it not applied (U6).
    Release,
}

/// What happens to an unknown outcome (U1) that no reconcile function settles (U2, U2a).
///
/// `on_cancel` decides whether a cancelled body leaves an unknown outcome at all; this
/// decides what the next calls do about one (the matrix is CONTRACT U2b). Crashes (a lapsed
/// lease) and outcome-unknown errors are unknown outcomes under either `on_cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnknown {
    /// Held until a person decides (the default, U2): every call of the key gets
    /// [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown) with `held: true`, however
    /// long ago the lease lapsed, until `idem resolve` (or
    /// [`Engine::resolve`](crate::Engine::resolve)) records whether the effect happened,
    /// or the record is purged.
    #[default]
    Hold,
    /// At least once (`#[idempotent(on_unknown = "rerun")]`, U2a): calls get
    /// `OutcomeUnknown` until the claim's lease lapses, and then the next call takes over
    /// and runs the body again with the same key and a larger fence. For effects that are
    /// harmless to repeat or deduplicated downstream by the forwarded key (K10) or fence
    /// (F2).
    Rerun,
}
