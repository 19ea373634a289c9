//! The call protocol: key → claim → body → save, or replay (contract S1–S10, S12).
//!
//! ```text
//! prepare:  context → scope value → canonical args → key, fingerprint   (or the carried key, K9)
//! acquire:  claim ─ Acquired ───────────────────────────────→ run the body as owner
//!                 └ Existing ─ other fingerprint ─────────────→ Mismatch (S9)
//!                            ├ Completed ─────────────────────→ replay (S3, S4)
//!                            └ InProgress ─ lease lapsed ─────→ take over (CAS), run (S6)
//!                                          └ lease live ──────→ wait ≤ `wait`, look again,
//!                                                               then InProgress (S5)
//! finish:   Ok / saved Err → complete (CAS on owner) ; retryable or layer Err → release
//! ```
//! A claim guard releases the claim if the body panics or its future is dropped (S7).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::args::ArgsBuilder;
use crate::canonical::CanonicalError;
use crate::clock::{duration_millis, Timestamp};
use crate::context::{CallContext, DerivedKey};
use crate::engine::{default_engine, tool_engine, Engine};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::key::{derive_key, Fingerprint, IdempotencyKey};
use crate::outcome::{CallRecord, CallStatus, IdempotentError};
use crate::spec::ToolSpec;
use crate::store::{
    Claim, ClaimRequest, Completion, OwnerToken, RecordState, Store, StoreError, TakeoverRequest,
};

/// Shortest and longest pause between two looks at an in-progress key when the store
/// cannot signal changes (S5: no tighter polling than needed).
const POLL_MIN: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(250);

/// One call, keyed and ready to run: the output of [`prepare`].
#[derive(Debug)]
pub struct PreparedCall {
    spec: &'static ToolSpec,
    engine: Engine,
    context: Option<CallContext>,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
}

/// Derives the key of a call to the tool `spec` made under `context` (else the context in
/// force): the carried key of the attempt record if it has one for this tool (K9),
/// otherwise scope value, then arguments (filled by `fill`), then key and fingerprint.
///
/// # Errors
/// [`Error::MissingScope`] (K7), [`Error::Canonical`] (K2, K3), or [`Error::Store`] when
/// no engine is available. None of them runs the body.
pub fn prepare<F>(
    spec: &'static ToolSpec,
    context: Option<&CallContext>,
    fill: F,
) -> Result<PreparedCall, Error>
where
    F: FnOnce(&mut ArgsBuilder) -> Result<(), CanonicalError>,
{
    let context = context.cloned().or_else(CallContext::current);
    if let Some(context) = &context {
        context.clear_last_outcome();
    }
    let context_engine = context.as_ref().and_then(CallContext::engine);
    let engine = match (spec.store, context_engine) {
        (Some(locator), fallback) => tool_engine(spec.name, locator, fallback),
        (None, Some(engine)) => Ok(engine.clone()),
        (None, None) => default_engine(),
    }
    .map_err(|source| Error::Store {
        tool: spec.name.to_owned(),
        source,
    })?;
    let attempt = context.as_ref().and_then(|c| c.take_attempt_for(spec.name));
    if let Some(carried) = attempt.and_then(|a| a.derived()) {
        return Ok(PreparedCall {
            spec,
            engine,
            context,
            key: carried.key,
            fingerprint: carried.fingerprint,
        });
    }
    let scope = spec.scope.resolve(spec.name, context.as_ref())?;
    let mut args = ArgsBuilder::new();
    fill(&mut args).map_err(|source| Error::Canonical {
        tool: spec.name.to_owned(),
        source,
    })?;
    let (key_args, fingerprint) = args.finish();
    let key = derive_key(scope, spec.name, &key_args);
    if let Some(attempt) = attempt {
        attempt.remember(DerivedKey {
            tool: spec.name.to_owned(),
            key: key.clone(),
            fingerprint: fingerprint.clone(),
        });
    }
    Ok(PreparedCall {
        spec,
        engine,
        context,
        key,
        fingerprint,
    })
}

/// What [`PreparedCall::acquire`] obtained.
enum Acquired {
    Owner(ClaimGuard, Lifetime),
    Replay(Envelope, Lifetime),
}

#[derive(Clone, Copy)]
struct Lifetime {
    created_at: Timestamp,
    expires_at: Timestamp,
    takeover: bool,
}

impl PreparedCall {
    /// The call's idempotency key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The call's fingerprint.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Runs `body` at most once for this key and returns its outcome, or replays the saved
    /// one (S2–S6). Layer errors come back as `E::from(idem::Error)`.
    pub async fn run<T, E, Fut>(self, body: Fut) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        match self.acquire().await {
            Err(error) => Err(E::from(error)),
            Ok(Acquired::Replay(envelope, lifetime)) => self.replay(&envelope, lifetime),
            Ok(Acquired::Owner(guard, lifetime)) => {
                let body_context = self
                    .context
                    .clone()
                    .unwrap_or_default()
                    .for_body(self.key.clone());
                let outcome = body_context.run(body).await;
                self.finish(guard, lifetime, outcome).await
            }
        }
    }

    /// [`run`](Self::run) for a sync tool: drives the protocol on this thread. Stores whose
    /// futures are ready at once (memory) or run on their own threads (SQLite) never block
    /// on I/O here; waiting for a concurrent duplicate blocks this thread for at most the
    /// tool's `wait`.
    ///
    /// A store whose futures need a tokio runtime's I/O driver
    /// ([`Store::needs_runtime_io`]: PostgreSQL, Redis) cannot be waited for on a thread
    /// that runtime needs. On a multi-thread runtime the wait moves off the worker
    /// (`tokio::task::block_in_place`); on a current-thread runtime, where the blocked
    /// thread is the only one that could drive the I/O, the call is refused with a
    /// [`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported) store error and
    /// the body does not run (S10). Outside any runtime the store itself refuses the same way.
    pub fn run_blocking<T, E>(self, body: impl FnOnce() -> Result<T, E>) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: IdempotentError,
    {
        if self.engine.store().needs_runtime_io() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                    return tokio::task::block_in_place(|| {
                        runtime.block_on(self.run(async move { body() }))
                    });
                }
                let backend = self.engine.store().backend();
                let refused = StoreError::new(
                    backend,
                    crate::StoreErrorKind::Unsupported,
                    format!(
                        "a sync tool cannot use the {backend} store on a current-thread tokio \
                         runtime: waiting for the store would block the only thread that \
                         drives its I/O; make the tool async, or run it on a multi-thread \
                         runtime (where the wait moves off the worker thread)"
                    ),
                );
                return Err(E::from(self.store_error(refused)));
            }
        }
        pollster::block_on(self.run(async move { body() }))
    }

    fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.spec.name.to_owned(),
            source,
        }
    }

    async fn acquire(&self) -> Result<Acquired, Error> {
        let (store, clock) = (self.engine.store(), self.engine.clock());
        let started = clock.now();
        let wait_until = started.saturating_add(self.spec.wait);
        let mut poll = POLL_MIN;
        // Subscribed only once the key is seen in progress (then looked at again before
        // waiting), so the common paths pay nothing for it.
        let mut change: Option<Option<crate::store::ChangeSignal>> = None;
        // Consecutive takeovers refused by the store's compare-and-set.
        let mut failed_takeovers = 0u32;
        loop {
            let now = clock.now();
            let owner = OwnerToken::random();
            let lease_until = now.saturating_add(self.spec.lease);
            let expires_at = now.saturating_add(self.spec.ttl);
            let request = ClaimRequest {
                key: &self.key,
                fingerprint: &self.fingerprint,
                owner,
                now,
                lease_until,
                expires_at,
            };
            let record = match store
                .claim(request)
                .await
                .map_err(|e| self.store_error(e))?
            {
                Claim::Acquired { .. } => {
                    let lifetime = Lifetime {
                        created_at: now,
                        expires_at,
                        takeover: false,
                    };
                    return Ok(Acquired::Owner(
                        ClaimGuard::new(store, &self.key, owner),
                        lifetime,
                    ));
                }
                Claim::Existing(record) => record,
            };
            if record.fingerprint != self.fingerprint {
                return Err(Error::Mismatch {
                    tool: self.spec.name.to_owned(),
                    key: self.key.to_string(),
                    stored: record.fingerprint.to_string(),
                    given: self.fingerprint.to_string(),
                });
            }
            let (seen_owner, seen_lease_until) = match record.state {
                RecordState::Completed { outcome, .. } => {
                    let lifetime = Lifetime {
                        created_at: record.created_at,
                        expires_at: record.expires_at,
                        takeover: false,
                    };
                    return Ok(Acquired::Replay(outcome, lifetime));
                }
                RecordState::InProgress { owner, lease_until }
                | RecordState::OutcomeUnknown {
                    owner, lease_until, ..
                } => (owner, lease_until),
            };
            if now >= seen_lease_until {
                let takeover = TakeoverRequest {
                    key: &self.key,
                    seen_owner,
                    seen_lease_until,
                    owner,
                    now,
                    lease_until,
                    expires_at,
                    fence: record.fence + 1,
                };
                if store
                    .take_over(takeover)
                    .await
                    .map_err(|e| self.store_error(e))?
                {
                    tracing::warn!(tool = self.spec.name, key = %self.key, "lease lapsed; took over the claim and runs the body again");
                    let lifetime = Lifetime {
                        created_at: now,
                        expires_at,
                        takeover: true,
                    };
                    return Ok(Acquired::Owner(
                        ClaimGuard::new(store, &self.key, owner),
                        lifetime,
                    ));
                }
                // The record changed under us (another caller took over first): look again
                // at once. A takeover that keeps failing means the store does not hold
                // what it returned; from the second failure on, behave like a waiter:
                // answer InProgress once the wait bound has passed, else pause first (S5).
                failed_takeovers += 1;
                if failed_takeovers < 2 {
                    continue;
                }
                if now >= wait_until {
                    return Err(Error::InProgress {
                        tool: self.spec.name.to_owned(),
                        key: self.key.to_string(),
                        waited_ms: duration_millis(now.saturating_since(started)),
                    });
                }
                let tick = futures_timer::Delay::new(poll);
                poll = (poll * 2).min(POLL_MAX);
                drop(select(tick, clock.sleep_until(wait_until)).await);
                continue;
            }
            failed_takeovers = 0;
            if now >= wait_until {
                return Err(Error::InProgress {
                    tool: self.spec.name.to_owned(),
                    key: self.key.to_string(),
                    waited_ms: duration_millis(now.saturating_since(started)),
                });
            }
            let Some(signal) = change.take() else {
                change = Some(store.watch(&self.key));
                continue; // subscribed: look once more before waiting, so no change is missed
            };
            let deadline = clock.sleep_until(wait_until.min(seen_lease_until));
            match signal {
                Some(signal) => drop(select(signal, deadline).await),
                None => {
                    let tick = futures_timer::Delay::new(poll);
                    poll = (poll * 2).min(POLL_MAX);
                    drop(select(tick, deadline).await);
                }
            }
            change = Some(store.watch(&self.key)); // before the next look
        }
    }

    fn record(&self, status: CallStatus, lifetime: Lifetime, recorded: bool) {
        let record = CallRecord {
            tool: self.spec.name.to_owned(),
            key: self.key.clone(),
            status,
            created_at: lifetime.created_at,
            expires_at: lifetime.expires_at,
            recorded,
            takeover: lifetime.takeover,
        };
        tracing::debug!(tool = self.spec.name, key = %self.key, ?status, recorded, "idempotent call finished");
        if let Some(context) = &self.context {
            context.set_last_outcome(record);
        }
    }

    fn replay<T: DeserializeOwned, E: IdempotentError>(
        &self,
        envelope: &Envelope,
        lifetime: Lifetime,
    ) -> Result<T, E> {
        match envelope.decode::<T, E>() {
            Ok(outcome) => {
                self.record(CallStatus::Replayed, lifetime, true);
                outcome
            }
            Err(reason) => Err(E::from(Error::Decode {
                tool: self.spec.name.to_owned(),
                key: self.key.to_string(),
                reason,
            })),
        }
    }

    async fn finish<T: Serialize, E: IdempotentError>(
        &self,
        mut guard: ClaimGuard,
        lifetime: Lifetime,
        outcome: Result<T, E>,
    ) -> Result<T, E> {
        // The body returned, so its effect may have happened: from here nothing releases
        // the claim early, not even a panic in the outcome's `Serialize` or the error's
        // methods (S7, S10); only the explicit release of an unsaved error below.
        guard.disarm();
        let envelope = match &outcome {
            Err(error) if error.idem_error().is_some() || error.is_retryable() => {
                // S4: not saved; the next attempt runs the body with the same key.
                if let Err(e) = self.engine.store().release(&self.key, guard.owner).await {
                    tracing::warn!(tool = self.spec.name, key = %self.key, error = %e, "could not release the claim; it lapses with its lease");
                }
                return outcome;
            }
            Ok(value) => Envelope::encode_ok(value),
            Err(error) => Envelope::encode_err(error),
        };
        let envelope = match envelope {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::error!(tool = self.spec.name, key = %self.key, error = %e, "the outcome cannot be saved; the key stays in progress until its lease lapses");
                self.record(CallStatus::Executed, lifetime, false);
                return outcome;
            }
        };
        let now = self.engine.clock().now();
        let recorded = match self
            .engine
            .store()
            .complete(&self.key, guard.owner, &envelope, now)
            .await
        {
            Ok(Completion::Saved) => true,
            Ok(Completion::Fenced) => {
                tracing::warn!(tool = self.spec.name, key = %self.key, "outcome not saved: the lease lapsed and another caller took over");
                false
            }
            Err(e) => {
                tracing::error!(tool = self.spec.name, key = %self.key, error = %e, "the effect happened but its outcome was not saved; the key stays in progress until its lease lapses");
                false
            }
        };
        self.record(CallStatus::Executed, lifetime, recorded);
        outcome
    }
}

/// Releases a claim on drop unless disarmed: the body panicked or its future was dropped
/// before it finished (S7).
struct ClaimGuard {
    store: Arc<dyn Store>,
    key: IdempotencyKey,
    owner: OwnerToken,
    armed: bool,
}

impl ClaimGuard {
    fn new(store: &Arc<dyn Store>, key: &IdempotencyKey, owner: OwnerToken) -> Self {
        ClaimGuard {
            store: Arc::clone(store),
            key: key.clone(),
            owner,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(key = %self.key, "body did not finish (panic or cancellation); releasing the claim");
            let (store, key, owner) = (Arc::clone(&self.store), self.key.clone(), self.owner);
            let release = async move { drop(store.release(&key, owner).await) };
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(release)),
                Err(_) => pollster::block_on(release),
            }
        }
    }
}
