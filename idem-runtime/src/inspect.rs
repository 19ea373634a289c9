//! Answering "did this call happen, and when?" without running anything (contract I1, I2).
//!
//! [`Engine::key_of`] derives the key a call would have from what a support request names
//! (tool, scope, arguments); [`Engine::lookup`] and [`Engine::lookup_call`] read its record.
//! Listing, purging and counting are the store's ([`Store::list`](crate::Store::list),
//! [`Store::purge`](crate::Store::purge), [`Store::stats`](crate::Store::stats)).
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use idem_agent::inspect::CallQuery;
//! use idem_agent::{Engine, ScopePath};
//! # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # runtime.block_on(async {
//! let engine = Engine::in_memory();
//! let call = CallQuery::new(
//!     "send_refund",
//!     ScopePath::new().with("conversation", "c-9"),
//!     serde_json::json!({"order_id": 4417, "amount_cents": 500}),
//! );
//! let key = engine.key_of(&call)?;
//! let found = engine.lookup_call(&call).await?;
//! assert_eq!(found.key, key);
//! assert!(found.record.is_none(), "nothing ran yet");
//! # Ok::<(), idem_agent::inspect::InspectError>(())
//! # }).unwrap();
//! ```

use crate::args::ArgsBuilder;
use crate::canonical::CanonicalError;
use crate::engine::Engine;
use crate::key::{derive_key_in, IdempotencyKey};
use crate::label::ScopePath;
use crate::store::{ListQuery, Record, StoreError};

/// A call named by what a person knows about it: tool, scope and arguments (I1).
#[derive(Debug, Clone, PartialEq)]
pub struct CallQuery {
    /// The tool's name (its `#[idempotent]` name: the fn name unless `name = "…"`).
    pub tool: String,
    /// The scope the call ran in: `conversation=c-9`; empty for a `global` tool.
    pub scope: ScopePath,
    /// The key arguments as a JSON object, by parameter name: every argument that is not
    /// skipped, or only those a tool names with `key(…)`. Skipped arguments and
    /// fingerprint-only ones must be left out; context arguments never count.
    pub args: serde_json::Value,
}

impl CallQuery {
    /// A call of `tool` in `scope` with the key arguments `args` (a JSON object).
    pub fn new(tool: impl Into<String>, scope: ScopePath, args: serde_json::Value) -> Self {
        CallQuery {
            tool: tool.into(),
            scope,
            args,
        }
    }
}

/// Why a call could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The arguments are not a JSON object.
    #[error("the arguments must be a JSON object of parameter names to values, not {found}")]
    ArgsNotObject {
        /// What they were: `an array`, `a string`, ….
        found: &'static str,
    },
    /// An argument has no canonical JSON (K2, K3).
    #[error("argument {0}")]
    Canonical(#[from] CanonicalError),
    /// The store failed (S10).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What [`Engine::lookup_call`] found (I2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The call's key.
    pub key: IdempotencyKey,
    /// Its live record, if any.
    pub record: Option<Record>,
    /// When there is no record: how many live records the same tool has in exactly the same
    /// scope (and namespace). More than zero means the call was probably made with other
    /// arguments (a mistyped or missing one), not never.
    pub same_scope: usize,
    /// When there is no record: how many live records the same tool has (in the same
    /// namespace) in scopes narrower than the call's, those that begin with its parts and
    /// have more (`conversation=c-9` under the global scope; `tenant=acme/conversation=c-1`
    /// under `tenant=acme`). More than zero means the call's scope may be missing parts.
    /// `same_scope` and `nested_scope` together count at most 1000 records.
    pub nested_scope: usize,
}

impl Engine {
    /// Counts the live records waiting for a person's decision (outcome unknown, U2, I7),
    /// by tool, and with the feature `metrics` sets the gauge
    /// [`idem.records.awaiting_decision`](crate::telemetry::AWAITING_DECISION) per tool.
    /// One [`Store::stats`](crate::Store::stats) call (its cost is the backend's, I5): run
    /// it on a schedule (every minute, say) from one process, not per call.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails or cannot count
    /// ([`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported)).
    pub async fn record_awaiting_decision(&self) -> Result<crate::store::StoreStats, StoreError> {
        let stats = self.store().stats(self.clock().now()).await?;
        crate::telemetry::awaiting_decision(&stats);
        Ok(stats)
    }

    /// The history of `key`'s live record (U7): its transitions, oldest first, at most
    /// [`HISTORY_LIMIT`](crate::store::HISTORY_LIMIT) of them; `None` without a live
    /// record. One round trip.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails, or does not keep histories
    /// ([`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported)).
    pub async fn history(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<crate::store::History>, StoreError> {
        self.store().history(key, self.clock().now()).await
    }

    /// The key a call of `call.tool` in `call.scope` with `call.args` derives through this
    /// engine (its namespace included), without running anything or touching the store
    /// (I1). It equals the key the call itself derives (K1).
    ///
    /// # Errors
    /// [`InspectError::ArgsNotObject`] when `call.args` is not a JSON object;
    /// [`InspectError::Canonical`] naming an argument without canonical JSON.
    pub fn key_of(&self, call: &CallQuery) -> Result<IdempotencyKey, InspectError> {
        let object = match &call.args {
            serde_json::Value::Object(object) => object,
            other => {
                return Err(InspectError::ArgsNotObject {
                    found: json_kind(other),
                })
            }
        };
        let mut args = ArgsBuilder::new();
        for (name, value) in object {
            args.key(name, value)?;
        }
        let (key_args, _) = args.finish();
        Ok(call.scope.with_component(|component| {
            derive_key_in(self.namespace(), component, &call.tool, &key_args)
        }))
    }

    /// The live record of `key` now, by this engine's clock (I2).
    ///
    /// # Errors
    /// The store's error (S10).
    pub async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.store().read(key, self.clock().now()).await
    }

    /// The key and live record of a call (I1, I2); with no record, how many live records
    /// the tool has in exactly the same scope and how many in narrower scopes, so that
    /// "never happened", "other arguments" and "a scope part missing" are told apart. The
    /// counts come from one [`Store::list`](crate::Store::list) page of at most 1000
    /// records whose scope begins with the call's: a store that cannot list reports its
    /// `Unsupported` error.
    ///
    /// # Errors
    /// As [`key_of`](Self::key_of), and the store's errors.
    pub async fn lookup_call(&self, call: &CallQuery) -> Result<Lookup, InspectError> {
        let key = self.key_of(call)?;
        let now = self.clock().now();
        let record = self.store().read(&key, now).await?;
        let (mut same_scope, mut nested_scope) = (0, 0);
        if record.is_none() {
            let query = ListQuery {
                tool: Some(call.tool.clone()),
                namespace: self.namespace().map(str::to_owned),
                scope: call.scope.clone(),
                limit: crate::store::LIST_LIMIT_MAX,
                ..ListQuery::default()
            };
            // The listing matches scopes that begin with the call's (I3), in any namespace
            // when the engine has none: only this namespace's records count, those of exactly
            // this scope apart from the narrower ones.
            for listed in self.store().list(&query, now).await?.records {
                let Some(label) = listed.record.label else {
                    continue;
                };
                if label.namespace.as_deref() != self.namespace() {
                    continue;
                }
                if label.scope == call.scope {
                    same_scope += 1;
                } else {
                    nested_scope += 1;
                }
            }
        }
        Ok(Lookup {
            key,
            record,
            same_scope,
            nested_scope,
        })
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
