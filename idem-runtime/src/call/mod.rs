//! The call protocol: key → claim → body → save, or replay (contract S1–S10, S12, L1,
//! F1, U1–U5).
//!
//! ```text
//! prepare:   context → scope value → canonical args → key, fingerprint  (or the carried key, K9)
//! claim:     claim, replay, take over, or wait                          (acquire.rs)
//! reconcile: after a takeover of an unknown outcome, if the tool has a reconcile function:
//!            done → save and return its outcome; not done → run; unknown → OutcomeUnknown
//! run:       the body, its lease renewed every heartbeat                (heartbeat.rs)
//! finish:    Ok / saved Err → complete (CAS on owner); outcome unknown → mark unknown;
//!            retryable or layer Err → release; each write finishes even if the caller
//!            goes away                                                  (detach.rs)
//! ```
//! A claim guard acts if the call is dropped or panics while it holds the claim (S7, U4):
//! before the body began it releases (or, after a takeover, keeps the outcome unknown);
//! once the body began it marks the outcome unknown, or releases with
//! [`OnCancel::Release`](crate::OnCancel::Release).
//!
//! Every call runs in its `idem.call` span and reports each path and store operation
//! through [`crate::telemetry`] (V1–V3).

mod acquire;
mod claimed;

pub use claimed::ClaimedCall;

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::args::ArgsBuilder;
use crate::canonical::CanonicalError;
use crate::context::{CallContext, DerivedKey};
use crate::engine::{default_engine, tool_engine, Engine};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::key::{derive_key_in, Fingerprint, IdempotencyKey};
use crate::label::RecordLabel;
use crate::outcome::{CallRecord, CallStatus, IdempotentError, OutcomeSource};
use crate::spec::ToolSpec;
use crate::store::{StoreError, StoreErrorKind};
use crate::telemetry::CallTrace;
use acquire::{Acquired, Lifetime};

/// One call, keyed and ready to run: the output of [`prepare`].
#[derive(Debug)]
pub struct PreparedCall {
    /// The tool's spec with the engine's run-time settings applied (E1).
    spec: ToolSpec,
    engine: Engine,
    context: Option<CallContext>,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    label: RecordLabel,
    /// Whether this call took its context's attempt slot (K9): its outcome is then the
    /// dispatched call's own (D11).
    carries: bool,
    /// The call's span (V1), from here to the call's end.
    trace: CallTrace,
}

/// Derives the key of a call to the tool `spec` made under `context` (else the context in
/// force): the carried key of the attempt record if it has one for this tool (K9),
/// otherwise scope value, then arguments (filled by `fill`), then key and fingerprint.
///
/// The call's settings are the engine's effective ones ([`Engine::effective_spec`], E1).
/// As soon as the key is derived (or carried), it is published on the context
/// ([`CallContext::last_key`], S13).
///
/// # Errors
/// [`Error::MissingScope`] (K7), [`Error::Canonical`] (K2, K3), [`Error::Config`] (E3), or
/// [`Error::Store`] when no engine is available. None of them runs the body.
pub fn prepare<F>(
    spec: &'static ToolSpec,
    context: Option<&CallContext>,
    fill: F,
) -> Result<PreparedCall, Error>
where
    F: FnOnce(&mut ArgsBuilder) -> Result<(), CanonicalError>,
{
    let context = context.cloned().or_else(CallContext::current);
    let trace = CallTrace::start(spec, context.as_ref());
    let in_span = trace.span().enter();
    let fail = |error: Error| {
        trace.failed(&error);
        error
    };
    if let Some(context) = &context {
        context.clear_last_outcome();
    }
    let context_engine = context.as_ref().and_then(CallContext::engine);
    let engine = match (spec.store, context_engine) {
        (Some(locator), fallback) => tool_engine(spec.name, locator, fallback),
        (None, Some(engine)) => Ok(engine.clone()),
        (None, None) => default_engine(),
    }
    .map_err(|source| {
        trace.store_error(None, &source);
        fail(Error::Store {
            tool: spec.name.to_owned(),
            source,
            key: None,
        })
    })?;
    trace.namespace(engine.namespace());
    let spec = engine.effective_spec(spec).map_err(fail)?;
    let attempt = context.as_ref().and_then(|c| c.take_attempt_for(spec.name));
    let carries = attempt.is_some();
    if let Some(carried) = attempt.and_then(|a| a.derived()) {
        trace.key(&carried.key);
        if let Some(context) = &context {
            context.set_last_key(&carried.key);
        }
        drop(in_span);
        return Ok(PreparedCall {
            spec,
            engine,
            context,
            key: carried.key,
            fingerprint: carried.fingerprint,
            label: carried.label,
            carries,
            trace,
        });
    }
    let scope = spec
        .scope
        .resolve(spec.name, context.as_ref())
        .map_err(fail)?;
    let mut args = ArgsBuilder::new();
    fill(&mut args).map_err(|source| {
        fail(Error::Canonical {
            tool: spec.name.to_owned(),
            source,
        })
    })?;
    // A1: a person approving the call sees every argument, fingerprint-only ones too.
    let (key_args, shown_args, fingerprint) = if spec.approval.is_some() {
        let (key_args, all, fingerprint) = args.finish_with_all();
        (key_args, Some(all), fingerprint)
    } else {
        let (key_args, fingerprint) = args.finish();
        let shown = spec.audit.then(|| key_args.clone());
        (key_args, shown, fingerprint)
    };
    let namespace = engine.namespace();
    let key =
        scope.with_component(|component| derive_key_in(namespace, component, spec.name, &key_args));
    let label = RecordLabel {
        tool: spec.name.to_owned(),
        namespace: namespace.map(str::to_owned),
        scope,
        key_args: shown_args.map(|args| args.as_str().to_owned()),
    };
    trace.key(&key);
    if let Some(context) = &context {
        context.set_last_key(&key);
    }
    if let Some(attempt) = attempt {
        attempt.remember(DerivedKey {
            tool: spec.name.to_owned(),
            key: key.clone(),
            fingerprint: fingerprint.clone(),
            label: label.clone(),
        });
    }
    drop(in_span);
    Ok(PreparedCall {
        spec,
        engine,
        context,
        key,
        fingerprint,
        label,
        carries,
        trace,
    })
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
    /// one (S2–S6, L1, U1–U5). Layer errors come back as `E::from(idem_agent::Error)`.
    ///
    /// A tool with a reconcile function uses [`claim`](Self::claim) instead, to reconcile
    /// between the claim and the body; called here, a claim that needs reconciling runs the
    /// body as if the answer had been [`Reconciled::NotDone`](crate::Reconciled::NotDone).
    pub async fn run<T, E, Fut>(self, body: Fut) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = self.trace.span().clone();
        async move {
            match self.claim().await {
                Ok(claimed) => claimed.run(body).await,
                Err(done) => done,
            }
        }
        .instrument(span)
        .await
    }

    /// [`run`](Self::run) for an async body that may block its thread inside a poll (a
    /// framework's handler running a sync fn inline): the lease is also renewed by idem's
    /// renewal thread while each poll runs (L1); see [`ClaimedCall::run_may_block`].
    pub async fn run_may_block<T, E, Fut>(self, body: Fut) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = self.trace.span().clone();
        async move {
            match self.claim().await {
                Ok(claimed) => claimed.run_may_block(body).await,
                Err(done) => done,
            }
        }
        .instrument(span)
        .await
    }

    /// [`run`](Self::run) for a sync tool: drives the protocol on this thread and runs the
    /// body on it; the body's lease is renewed by idem's renewal thread (L1). Stores whose
    /// futures are ready at once (memory) or run on their own threads (SQLite) never block
    /// on I/O here; waiting for a concurrent duplicate blocks this thread for at most the
    /// tool's `wait`.
    ///
    /// A store whose futures need a tokio runtime's I/O driver
    /// ([`Store::needs_runtime_io`](crate::Store::needs_runtime_io): PostgreSQL, Redis) cannot be waited for on a thread
    /// that runtime needs. On a multi-thread runtime the waits move off the worker
    /// (`tokio::task::block_in_place`); on a current-thread runtime, where the blocked
    /// thread is the only one that could drive the I/O, the call is refused with a
    /// [`StoreErrorKind::Unsupported`] store error and the body does not run (S10).
    /// Outside any runtime the store itself refuses the same way.
    pub fn run_blocking<T, E>(self, body: impl FnOnce() -> Result<T, E>) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: IdempotentError,
    {
        let span = self.trace.span().clone();
        let _in_span = span.enter();
        match self.claim_blocking() {
            Ok(claimed) => claimed.run_blocking(body),
            Err(done) => done,
        }
    }

    /// The first half of [`run`](Self::run): claims the key for this call, or answers it.
    /// `Ok`: this call holds the claim ([`ClaimedCall`]: reconcile if it
    /// [needs to](ClaimedCall::needs_reconcile), then run the body). `Err(outcome)`: the
    /// call is answered without running anything: a replayed outcome (S3), or a layer
    /// error (`Mismatch`, `InProgress`, `OutcomeUnknown`, a store error).
    pub async fn claim<T, E>(self) -> Result<ClaimedCall, Result<T, E>>
    where
        T: DeserializeOwned,
        E: IdempotentError,
    {
        let span = self.trace.span().clone();
        async move {
            match self.acquire().await {
                Err(error) => Err(Err(E::from(self.fail(error)))),
                Ok(Acquired::Replay(envelope, lifetime)) => Err(self.replay(&envelope, lifetime)),
                Ok(Acquired::Owner(ownership)) => Ok(ClaimedCall::new(self, ownership, false)),
            }
        }
        .instrument(span)
        .await
    }

    /// [`claim`](Self::claim) for a sync tool, with the rules of
    /// [`run_blocking`](Self::run_blocking); the claim's lease is renewed from a task of its
    /// own until the [`ClaimedCall`] finishes or is dropped.
    pub fn claim_blocking<T, E>(self) -> Result<ClaimedCall, Result<T, E>>
    where
        T: DeserializeOwned,
        E: IdempotentError,
    {
        let span = self.trace.span().clone();
        let _in_span = span.enter();
        let acquired = match self.drive_blocking(self.acquire()) {
            Ok(acquired) => acquired,
            Err(refused) => {
                self.trace.store_error(None, &refused);
                return Err(Err(E::from(self.fail(self.store_error(refused)))));
            }
        };
        match acquired {
            Err(error) => Err(Err(E::from(self.fail(error)))),
            Ok(Acquired::Replay(envelope, lifetime)) => Err(self.replay(&envelope, lifetime)),
            Ok(Acquired::Owner(ownership)) => Ok(ClaimedCall::new(self, ownership, true)),
        }
    }

    /// Drives a store step to completion on this thread (the sync path): on a multi-thread
    /// runtime a store that needs the runtime's I/O is waited for off the worker thread;
    /// on a current-thread runtime it is refused (see [`run_blocking`](Self::run_blocking)).
    fn drive_blocking<F: Future>(&self, step: F) -> Result<F::Output, StoreError> {
        let store = self.engine.store();
        if store.needs_runtime_io() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                    return Ok(tokio::task::block_in_place(|| runtime.block_on(step)));
                }
                let backend = store.backend();
                return Err(StoreError::new(
                    backend,
                    StoreErrorKind::Unsupported,
                    format!(
                        "a sync tool cannot use the {backend} store on a current-thread tokio \
                         runtime: waiting for the store would block the only thread that \
                         drives its I/O; make the tool async, or run it on a multi-thread \
                         runtime (where the wait moves off the worker thread)"
                    ),
                ));
            }
        }
        Ok(pollster::block_on(step))
    }

    /// Runs `section` (a sync body) on this thread; off the worker (`block_in_place`) when
    /// the store needs a multi-thread runtime's I/O, so the body's heartbeat and the
    /// store's connections keep being driven even on a runtime with one worker thread.
    fn blocking_section<R>(&self, section: impl FnOnce() -> R) -> R {
        if self.engine.store().needs_runtime_io() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                    return tokio::task::block_in_place(section);
                }
            }
        }
        section()
    }

    fn store_error(&self, source: StoreError) -> Error {
        Error::Store {
            tool: self.spec.name.to_owned(),
            source,
            key: Some(self.key.to_string()),
        }
    }

    /// The call ends with the layer error `error` (its span's status and event, V2).
    fn fail(&self, error: Error) -> Error {
        self.trace.failed(&error);
        error
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
            fence: lifetime.fence,
            source: match status {
                CallStatus::Reconciled => OutcomeSource::Reconciled,
                CallStatus::Executed => OutcomeSource::Executed,
                _ => lifetime.source,
            },
        };
        if let Some(context) = &self.context {
            if self.carries {
                context.set_carried_outcome(&record);
            }
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
                self.trace.replayed();
                self.record(CallStatus::Replayed, lifetime, true);
                outcome
            }
            Err(reason) => Err(E::from(self.fail(Error::Decode {
                tool: self.spec.name.to_owned(),
                key: self.key.to_string(),
                reason,
            }))),
        }
    }
}
