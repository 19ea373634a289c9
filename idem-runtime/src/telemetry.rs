//! Traces and metrics of every call (contract V1–V3).
//!
//! Every call runs inside one [`tracing`] span, `idem.call` (target `idem`), from
//! [`prepare`](crate::prepare) to its end — the finishing store write included, even when it
//! finishes on a task of its own after the caller went away (U5), and the lease renewals of
//! sync bodies, which run on idem's renewal thread. The body runs inside the span too (its
//! own events are children of it). Each path of the protocol emits one event inside the
//! span, and every store operation a `store` event. With the cargo feature `metrics`, the
//! same points feed the [`metrics`](https://docs.rs/metrics/0.24) facade; without it no
//! metrics code is compiled.
//!
//! Units: `*_ms` fields are milliseconds of the engine's clock (a
//! [`ManualClock`](crate::testkit::ManualClock) in tests), `latency_us` is microseconds of
//! wall-clock time ([`std::time::Instant`]), and the histograms are seconds of wall-clock
//! time (an `f64`).
//!
//! | kind | name | level / unit | fields or labels | when |
//! |---|---|---|---|---|
//! | span | `idem.call` | INFO | `tool`; `key` (first 16 hex digits; absent when the call failed before its key was derived); `scope.kind` (`conversation`, `global`, `call`, a user-named scope); `conversation` (the non-empty conversation id in force, if any); `namespace` (the engine's namespace, K11; absent without one); `status` (once known: `executed`, `replayed`, `reconciled`, `mismatch`, `in_progress`, `outcome_unknown`, `missing_scope`, `released`, `store_error`, `bad_arguments`, `bad_configuration`, `undecodable_outcome`); `attempt` (the fencing token this call's own claim or takeover got, F1 — how many times the key was claimed since its record was created; absent when the call did not claim); `fence` (the fencing token of the record that answered the call: this call's own claim, the saved run a replay returns, the holder of an `in_progress` or `mismatch`) | every call |
//! | event | `executed` | DEBUG | `recorded` (bool: the outcome was saved) | the body ran and its outcome was saved, or could not be (`recorded = false`: a store error, a lost lease, an outcome that cannot be serialized); status `executed` |
//! | event | `replayed` | DEBUG | — | a saved outcome was returned without running the body (S3); status `replayed` |
//! | event | `reconciled` | DEBUG | `verdict` (`done`, `not_done`, `unknown`); `recorded` (bool, `done` only) | a reconcile function answered (U3); `done` ends the call with status `reconciled` once its outcome is written |
//! | event | `mismatch` | DEBUG | — | the key was first used with other fingerprint arguments (S9); status `mismatch` |
//! | event | `in_progress` | DEBUG | `waited_ms` (ms, engine clock); `retry_after_ms` (ms) | another call held the key past the wait bound (S5); status `in_progress` |
//! | event | `outcome_unknown` | WARN | `cause` (`held`: another run's unknown outcome, its lease still live; `error`: the body's error said so, or a run that took over ended with an error that would release; `reconcile`: the reconcile function could not tell; `dropped`: the call was dropped or panicked after its body began, or before it began after a takeover); `retry_after_ms` (ms, `held` only, and only under `on_unknown = "rerun"`); `awaiting_decision` (bool, `held` only: nothing runs the body until a person decides, U2) | status `outcome_unknown` (U1, U2, U4) |
//! | event | `lease_lapsed` | WARN | `fence` (the crashed run's) | this call found a claim whose lease lapsed and marked its outcome unknown, held for a person's decision (U1, U2); an `outcome_unknown` event follows |
//! | event | `missing_scope` | DEBUG | `scope` (the scope with no value) | no scope value in force (K7), before any key exists; status `missing_scope` |
//! | event | `released` | DEBUG | `cause` (`error`: the body's error said the effect did not happen, or was a layer error; `dropped`: the call was dropped or panicked before its body began, or after with `on_cancel = "release"`) | the claim was given back (S4, U4); status `released` |
//! | event | `taken_over` | WARN | `previous_fence`; `cause` (`lease_lapsed`, `gave_up`); `reconcile` (bool: a reconcile function is asked next) | this call took over a claim whose outcome is unknown (S6, U2) |
//! | event | `renewed` | TRACE | `lease_until_ms` (engine clock, ms since the epoch) | a heartbeat extended the lease (L1) |
//! | event | `lease_lost` | WARN | `operation` (`renew`, `complete`, `mark_unknown`) | a renewal or a finishing write found the claim taken over (L2, S6) |
//! | event | `store_error` | WARN | `operation` (absent when the call was refused before any store operation: no engine, a sync tool on a current-thread runtime); `backend`; `error.kind` (`unavailable`, `corrupt`, `unsupported`); `error.message` | a store operation failed or was refused (S10); status `store_error` when the call ends on it (its claim or takeover failed: the body did not run) |
//! | event | `store` | TRACE | `operation` (`claim`, `take_over`, `renew`, `mark_unknown`, `complete`, `release`, `read`); `backend` (`memory`, `sqlite`, `postgres`, `redis`, …); `latency_us` (µs, wall clock); `outcome` (`ok`, `error`) | every store operation of a call |
//! | event | `bad_arguments` | DEBUG | `error` | the arguments cannot be canonicalised (K2, K3); status `bad_arguments` |
//! | event | `bad_configuration` | WARN | `error` | a run-time override conflicts with the attribute's settings (E3, `Error::Config`); status `bad_configuration` |
//! | event | `undecodable_outcome` | WARN | `error` | a saved outcome cannot be decoded as the tool's type; status `undecodable_outcome` |
//! | counter | `idem.calls` | calls | `tool`, `status` | +1 when a call's status is known |
//! | histogram | `idem.call.duration` | seconds | `tool`, `status` | wall-clock time from `prepare` to the status |
//! | histogram | `idem.store.operation.duration` | seconds | `operation`, `backend`, `outcome` | every store operation (the `store` event's latency) |
//!
//! Every event has target `idem`, its name as its [metadata
//! name](tracing::Metadata::name) and as its message, and the call's span as its parent. A
//! call that is prepared and dropped before it claimed (its caller gave up while it waited)
//! ends without a status. Filter with `RUST_LOG=idem=debug` (the calls and their
//! statuses), `idem=trace` (with renewals and store latencies) or `idem=warn` (what needs a
//! look).
//!
//! With the feature `metrics`, install any `metrics` recorder (Prometheus,
//! OpenTelemetry, …); the metrics are described (unit and text) to the recorder in force at
//! the first call of the process, or again with `describe_metrics`.

use std::future::Future;
#[cfg(feature = "metrics")]
use std::time::Duration;
use std::time::Instant;

use tracing::field::Empty;
use tracing::{Level, Span};

use crate::attempt::UnknownCause;
use crate::clock::Timestamp;
use crate::context::CallContext;
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::spec::ToolSpec;
use crate::store::{StoreError, StoreErrorKind};

/// The target of idem's span and events: filter with `RUST_LOG=idem=debug`.
pub const TARGET: &str = "idem";
/// The name of the span every call runs in.
pub const SPAN_NAME: &str = "idem.call";
/// Counter of calls, labelled `tool` and `status` (+1 per call once its status is known).
pub const CALLS: &str = "idem.calls";
/// Histogram of call durations in seconds (wall clock, `prepare` to status), labelled `tool`
/// and `status`.
pub const CALL_DURATION: &str = "idem.call.duration";
/// Histogram of store operation durations in seconds (wall clock), labelled `operation`,
/// `backend` and `outcome`.
pub const STORE_OPERATION_DURATION: &str = "idem.store.operation.duration";
/// Gauge of live records waiting for a person's decision (outcome unknown, U2), labelled
/// `tool`; set by [`Engine::record_awaiting_decision`](crate::Engine::record_awaiting_decision).
pub const AWAITING_DECISION: &str = "idem.records.awaiting_decision";
/// Histogram of the time from an unknown outcome to its decision in seconds (the record's
/// unknown-since to the decision, by the decider's clock), labelled `tool` and `decision`
/// (`applied`, `error`, `not_applied`); recorded by every decision (U6).
pub const DECISION_DELAY: &str = "idem.decision.delay";

/// Describes idem's five metrics (unit and text) to the `metrics` recorder in force. Done
/// once by itself at the first call of the process; call this again after installing a
/// recorder later than that.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    metrics::describe_counter!(
        CALLS,
        metrics::Unit::Count,
        "Idempotent tool calls, by tool and status (executed, replayed, reconciled, mismatch, \
         in_progress, outcome_unknown, missing_scope, released, store_error, bad_arguments, \
         bad_configuration, undecodable_outcome)."
    );
    metrics::describe_histogram!(
        CALL_DURATION,
        metrics::Unit::Seconds,
        "Wall-clock duration of idempotent tool calls in seconds, from prepare to the status, \
         by tool and status."
    );
    metrics::describe_histogram!(
        STORE_OPERATION_DURATION,
        metrics::Unit::Seconds,
        "Wall-clock duration of idempotency store operations in seconds, by operation \
         (claim, take_over, renew, mark_unknown, complete, release, read), backend and \
         outcome (ok, error)."
    );
    metrics::describe_gauge!(
        AWAITING_DECISION,
        metrics::Unit::Count,
        "Live idempotency records whose outcome is unknown and waits for a person's decision, \
         by tool, as last counted by Engine::record_awaiting_decision."
    );
    metrics::describe_histogram!(
        DECISION_DELAY,
        metrics::Unit::Seconds,
        "Time in seconds from an unknown outcome to a person's decision about it, by tool and \
         decision (applied, error, not_applied)."
    );
}

/// Sets [`AWAITING_DECISION`] per tool from `stats` (feature `metrics`; nothing without it).
pub(crate) fn awaiting_decision(stats: &crate::store::StoreStats) {
    #[cfg(feature = "metrics")]
    for (tool, counts) in &stats.by_tool {
        metrics::gauge!(AWAITING_DECISION, "tool" => tool.clone())
            .set((counts.outcome_unknown + counts.awaiting_approval) as f64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = stats;
}

/// Records a decision's delay in [`DECISION_DELAY`] (feature `metrics`; nothing without it).
pub(crate) fn decision_delay(tool: &str, decision: &'static str, delay: std::time::Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(DECISION_DELAY, "tool" => tool.to_owned(), "decision" => decision)
        .record(delay.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (tool, decision, delay);
}

/// A store operation, as named in the `store` event and the `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOperation {
    Claim,
    TakeOver,
    Renew,
    MarkUnknown,
    Complete,
    Release,
    /// A compare-and-set between states (approvals, A2, A4).
    Transition,
    /// Reading a record; the call protocol itself never reads (the inspection API does).
    #[allow(dead_code)]
    Read,
}

impl StoreOperation {
    fn as_str(self) -> &'static str {
        match self {
            StoreOperation::Claim => "claim",
            StoreOperation::TakeOver => "take_over",
            StoreOperation::Renew => "renew",
            StoreOperation::MarkUnknown => "mark_unknown",
            StoreOperation::Complete => "complete",
            StoreOperation::Release => "release",
            StoreOperation::Transition => "transition",
            StoreOperation::Read => "read",
        }
    }
}

/// How a call ended: the span's `status` and the metrics' `status` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Executed,
    Replayed,
    Reconciled,
    Mismatch,
    InProgress,
    OutcomeUnknown,
    AwaitingApproval,
    Denied,
    MissingScope,
    Released,
    StoreError,
    BadArguments,
    BadConfiguration,
    UndecodableOutcome,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Executed => "executed",
            Status::Replayed => "replayed",
            Status::Reconciled => "reconciled",
            Status::Mismatch => "mismatch",
            Status::InProgress => "in_progress",
            Status::OutcomeUnknown => "outcome_unknown",
            Status::AwaitingApproval => "awaiting_approval",
            Status::Denied => "denied",
            Status::MissingScope => "missing_scope",
            Status::Released => "released",
            Status::StoreError => "store_error",
            Status::BadArguments => "bad_arguments",
            Status::BadConfiguration => "bad_configuration",
            Status::UndecodableOutcome => "undecodable_outcome",
        }
    }
}

/// Why a call's key was left outcome unknown (the `cause` of `outcome_unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnknownBecause {
    /// The body's error said whether the effect happened is unknown, or a run that took
    /// over ended with an error that would release.
    Error,
    /// The reconcile function could not tell.
    Reconcile,
    /// The call was dropped or panicked holding the claim.
    Dropped,
}

impl UnknownBecause {
    /// The cause the record's history names (U7).
    pub(crate) fn reason(self) -> crate::store::UnknownReason {
        use crate::store::UnknownReason;
        match self {
            UnknownBecause::Error => UnknownReason::Error,
            UnknownBecause::Reconcile => UnknownReason::ReconcileUnknown,
            UnknownBecause::Dropped => UnknownReason::Cancelled,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            UnknownBecause::Error => "error",
            UnknownBecause::Reconcile => "reconcile",
            UnknownBecause::Dropped => "dropped",
        }
    }
}

/// Why a call released its claim (the `cause` of `released`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleasedBecause {
    /// The body's error said the effect did not happen (or was a layer error).
    Error,
    /// The call was dropped or panicked holding the claim.
    Dropped,
}

/// One call's span, and the events and metrics of its paths. Cheap to clone (a span
/// handle); clones go with the call's heartbeat and finishing writes.
#[derive(Debug, Clone)]
pub(crate) struct CallTrace {
    span: Span,
    #[cfg(feature = "metrics")]
    tool: &'static str,
    #[cfg(feature = "metrics")]
    started: Instant,
}

/// Emits a named event with the call's span as its parent.
macro_rules! call_event {
    ($trace:expr, $level:expr, $name:literal $(, $($fields:tt)+)?) => {
        tracing::event!(name: $name, target: "idem", parent: &$trace.span, $level, $($($fields)+,)? $name)
    };
}

impl CallTrace {
    /// The span of a call of `spec` under `context` (the context in force), before its key
    /// is known.
    pub(crate) fn start(spec: &ToolSpec, context: Option<&CallContext>) -> Self {
        let conversation = context
            .and_then(CallContext::conversation_id)
            .filter(|id| !id.is_empty());
        let span = tracing::info_span!(
            target: "idem",
            "idem.call",
            tool = spec.name,
            key = Empty,
            scope.kind = spec.scope.kind(),
            conversation,
            namespace = Empty,
            status = Empty,
            attempt = Empty,
            fence = Empty,
        );
        CallTrace {
            span,
            #[cfg(feature = "metrics")]
            tool: spec.name,
            #[cfg(feature = "metrics")]
            started: Instant::now(),
        }
    }

    /// The span, to instrument the call's futures with or enter on the sync path.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The engine's namespace (K11), if it has one.
    pub(crate) fn namespace(&self, namespace: Option<&str>) {
        if let Some(namespace) = namespace {
            self.span.record("namespace", namespace);
        }
    }

    /// The key is derived.
    pub(crate) fn key(&self, key: &IdempotencyKey) {
        self.span.record("key", key.prefix(16));
    }

    /// The store holds a live record of the key with fencing token `fence`.
    pub(crate) fn seen(&self, fence: u64) {
        self.span.record("fence", fence);
    }

    /// This call claimed (or took over) the key with fencing token `fence`.
    pub(crate) fn claimed(&self, fence: u64) {
        self.span.record("attempt", fence);
        self.span.record("fence", fence);
    }

    /// The call's status is known: record it on the span and count it.
    fn end(&self, status: Status) {
        self.span.record("status", status.as_str());
        #[cfg(feature = "metrics")]
        recorded::call(self.tool, status, self.started.elapsed());
    }

    /// The body ran; `recorded`: its outcome was saved.
    pub(crate) fn executed(&self, recorded: bool) {
        self.end(Status::Executed);
        call_event!(self, Level::DEBUG, "executed", recorded);
    }

    /// A saved outcome was returned.
    pub(crate) fn replayed(&self) {
        self.end(Status::Replayed);
        call_event!(self, Level::DEBUG, "replayed");
    }

    /// A reconcile function answered done and its outcome was written (`recorded`: saved).
    pub(crate) fn reconciled(&self, recorded: bool) {
        self.end(Status::Reconciled);
        call_event!(self, Level::DEBUG, "reconciled", verdict = "done", recorded);
    }

    /// A reconcile function answered not done (`done = false`: the body runs next) or could
    /// not tell.
    pub(crate) fn reconcile_answered(&self, not_done: bool) {
        let verdict = if not_done { "not_done" } else { "unknown" };
        call_event!(self, Level::DEBUG, "reconciled", verdict);
    }

    /// The key's outcome was left (or found) unknown.
    pub(crate) fn outcome_unknown(&self, cause: UnknownBecause) {
        self.end(Status::OutcomeUnknown);
        call_event!(self, Level::WARN, "outcome_unknown", cause = cause.as_str());
    }

    /// This call found a claim whose lease lapsed (its owner crashed) and marked its
    /// outcome unknown, to be held for a person's decision (U2).
    pub(crate) fn lapse_marked(&self, fence: u64) {
        call_event!(self, Level::WARN, "lease_lapsed", fence);
    }

    /// The claim was given back.
    pub(crate) fn released(&self, cause: ReleasedBecause) {
        self.end(Status::Released);
        let cause = match cause {
            ReleasedBecause::Error => "error",
            ReleasedBecause::Dropped => "dropped",
        };
        call_event!(self, Level::DEBUG, "released", cause);
    }

    /// This call took over a claim whose outcome is unknown.
    pub(crate) fn taken_over(&self, previous_fence: u64, cause: UnknownCause, reconcile: bool) {
        let cause = match cause {
            UnknownCause::LeaseLapsed => "lease_lapsed",
            UnknownCause::GaveUp => "gave_up",
        };
        call_event!(
            self,
            Level::WARN,
            "taken_over",
            previous_fence,
            cause,
            reconcile
        );
    }

    /// A heartbeat extended the lease to `lease_until`.
    pub(crate) fn renewed(&self, lease_until: Timestamp) {
        call_event!(
            self,
            Level::TRACE,
            "renewed",
            lease_until_ms = lease_until.as_millis()
        );
    }

    /// `operation` found the claim taken over by another caller.
    pub(crate) fn lease_lost(&self, operation: StoreOperation) {
        call_event!(
            self,
            Level::WARN,
            "lease_lost",
            operation = operation.as_str()
        );
    }

    /// A store operation failed, or (`operation` `None`) the store refused the call before
    /// any operation.
    pub(crate) fn store_error(&self, operation: Option<StoreOperation>, error: &StoreError) {
        call_event!(
            self,
            Level::WARN,
            "store_error",
            operation = operation.map(StoreOperation::as_str),
            backend = error.backend.as_str(),
            error.kind = kind_name(error.kind),
            error.message = error.message.as_str()
        );
    }

    /// The call ends with the layer error `error`, raised before it held a claim (or, for
    /// `OutcomeUnknown`, on finding another run's unknown outcome). A store error's event
    /// was emitted where it happened; this records its status.
    pub(crate) fn failed(&self, error: &Error) {
        match error {
            Error::MissingScope { scope, .. } => {
                self.end(Status::MissingScope);
                call_event!(self, Level::DEBUG, "missing_scope", scope = scope.as_str());
            }
            Error::Mismatch { .. } => {
                self.end(Status::Mismatch);
                call_event!(self, Level::DEBUG, "mismatch");
            }
            Error::AwaitingApproval { expired, .. } => {
                self.end(Status::AwaitingApproval);
                call_event!(self, Level::INFO, "awaiting_approval", expired);
            }
            Error::Denied { actor, .. } => {
                self.end(Status::Denied);
                call_event!(self, Level::DEBUG, "denied", actor = actor.as_str());
            }
            Error::InProgress {
                waited_ms,
                retry_after_ms,
                ..
            } => {
                self.end(Status::InProgress);
                call_event!(self, Level::DEBUG, "in_progress", waited_ms, retry_after_ms);
            }
            Error::OutcomeUnknown {
                retry_after_ms,
                held,
                ..
            } => {
                self.end(Status::OutcomeUnknown);
                call_event!(
                    self,
                    Level::WARN,
                    "outcome_unknown",
                    cause = "held",
                    retry_after_ms,
                    awaiting_decision = *held
                );
            }
            Error::Canonical { source, .. } => {
                self.end(Status::BadArguments);
                call_event!(self, Level::DEBUG, "bad_arguments", error = %source);
            }
            Error::Store { .. } => self.end(Status::StoreError),
            Error::Config { message, .. } => {
                self.end(Status::BadConfiguration);
                call_event!(
                    self,
                    Level::WARN,
                    "bad_configuration",
                    error = message.as_str()
                );
            }
            Error::Decode { reason, .. } => {
                self.end(Status::UndecodableOutcome);
                call_event!(
                    self,
                    Level::WARN,
                    "undecodable_outcome",
                    error = reason.as_str()
                );
            }
        }
    }

    /// Runs the store operation `step` of `backend`: a `store` event with its latency (µs)
    /// and outcome, the `idem.store.operation.duration` histogram (seconds), and a
    /// `store_error` event if it failed.
    pub(crate) async fn timed<T>(
        &self,
        operation: StoreOperation,
        backend: &'static str,
        step: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        // The clock is read only when something uses the latency.
        let started = (cfg!(feature = "metrics")
            || tracing::enabled!(target: "idem", Level::TRACE))
        .then(Instant::now);
        let result = step.await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        if let Some(started) = started {
            let elapsed = started.elapsed();
            call_event!(
                self,
                Level::TRACE,
                "store",
                operation = operation.as_str(),
                backend,
                latency_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                outcome
            );
            #[cfg(feature = "metrics")]
            recorded::store(operation, backend, outcome, elapsed);
        }
        if let Err(error) = &result {
            self.store_error(Some(operation), error);
        }
        result
    }
}

/// The `error.kind` of a store error: its kind's serialized name.
fn kind_name(kind: StoreErrorKind) -> &'static str {
    match kind {
        StoreErrorKind::Unavailable => "unavailable",
        StoreErrorKind::Corrupt => "corrupt",
        StoreErrorKind::Unsupported => "unsupported",
    }
}

/// The metrics (feature `metrics`).
#[cfg(feature = "metrics")]
mod recorded {
    use super::*;

    fn described() {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(describe_metrics);
    }

    pub(super) fn call(tool: &'static str, status: Status, elapsed: Duration) {
        described();
        let status = status.as_str();
        metrics::counter!(CALLS, "tool" => tool, "status" => status).increment(1);
        metrics::histogram!(CALL_DURATION, "tool" => tool, "status" => status)
            .record(elapsed.as_secs_f64());
    }

    pub(super) fn store(
        operation: StoreOperation,
        backend: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        described();
        metrics::histogram!(
            STORE_OPERATION_DURATION,
            "operation" => operation.as_str(),
            "backend" => backend,
            "outcome" => outcome
        )
        .record(elapsed.as_secs_f64());
    }
}
