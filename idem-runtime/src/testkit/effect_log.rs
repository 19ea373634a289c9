//! A log of real side effects (T3).

use std::sync::{Arc, Mutex, PoisonError};

use crate::key::IdempotencyKey;

/// One real effect: what happened, and the idempotency key it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The tool (or effect) name.
    pub tool: String,
    /// A description of the effect (for example the arguments, as JSON).
    pub detail: String,
    /// The key in force when the effect happened ([`crate::current_key`]), if any.
    pub key: Option<IdempotencyKey>,
}

/// Records each real side effect with the key it carried (T3). Clones share one log.
///
/// Call [`record`](EffectLog::record) where the side effect lands (in a demo tool's body,
/// or in a fake downstream API); assert on [`len`](EffectLog::len) and the keys.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::testkit::EffectLog;
/// let log = EffectLog::new();
/// log.record("send_refund", "order 7");
/// assert_eq!(log.len(), 1);
/// assert_eq!(log.effects()[0].key, None); // recorded outside an #[idempotent] body
/// ```
#[derive(Debug, Clone, Default)]
pub struct EffectLog {
    effects: Arc<Mutex<Vec<Effect>>>,
}

impl EffectLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one effect, with the key in force ([`crate::current_key`]).
    pub fn record(&self, tool: impl Into<String>, detail: impl Into<String>) {
        let effect = Effect {
            tool: tool.into(),
            detail: detail.into(),
            key: crate::current_key(),
        };
        self.lock().push(effect);
    }

    /// All effects so far, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.lock().clone()
    }

    /// How many effects happened.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no effect happened.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many effects carried `key`.
    pub fn count_for(&self, key: &IdempotencyKey) -> usize {
        self.lock()
            .iter()
            .filter(|e| e.key.as_ref() == Some(key))
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Effect>> {
        self.effects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
