//! Traces of the call protocol (contract V1, V2): every call runs in an `idem.call` span
//! with its fields, and every path emits its event in that span; every store operation a
//! `store` event.
//!
//! A capturing `Layer`, installed once as the process's global subscriber (the renewals of
//! sync bodies and detached writes report from other threads), records every span with its
//! fields and every event with its parent span. Tests run in parallel: each uses a tool
//! name of its own and looks only at the spans of that tool.

mod support;

use std::collections::BTreeMap;
use std::fmt;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use idem_runtime::testkit::ManualClock;
use idem_runtime::{
    prepare, CallContext, Engine, Error, MemoryStore, Reconciled, Scope, ToolError, ToolSpec,
};
use support::{rerun, FaultyStore, Harness};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// ---------------------------------------------------------------------------------------
// The capturing subscriber.

type Fields = BTreeMap<String, String>;

#[derive(Debug, Clone)]
struct SpanRec {
    serial: usize,
    name: &'static str,
    target: String,
    fields: Fields,
}

#[derive(Debug, Clone)]
struct EventRec {
    name: &'static str,
    target: String,
    level: Level,
    fields: Fields,
    /// The serial of the span the event is in (explicit parent, else the current span).
    span: Option<usize>,
}

#[derive(Default)]
struct Captured {
    spans: Vec<SpanRec>,
    events: Vec<EventRec>,
}

struct Capture(Arc<Mutex<Captured>>);

/// A span's index in `Captured::spans` (span ids are reused once spans close).
struct Serial(usize);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl Capture {
    fn lock(&self) -> MutexGuard<'_, Captured> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        let serial = {
            let mut captured = self.lock();
            let serial = captured.spans.len();
            captured.spans.push(SpanRec {
                serial,
                name: attrs.metadata().name(),
                target: attrs.metadata().target().to_owned(),
                fields,
            });
            serial
        };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Serial(serial));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(serial) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<Serial>().map(|s| s.0))
        else {
            return;
        };
        let mut captured = self.lock();
        values.record(&mut Visitor(&mut captured.spans[serial].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let span = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<Serial>().map(|s| s.0));
        self.lock().events.push(EventRec {
            name: event.metadata().name(),
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            fields,
            span,
        });
    }
}

fn captured() -> &'static Arc<Mutex<Captured>> {
    static CAPTURED: OnceLock<Arc<Mutex<Captured>>> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Arc::new(Mutex::new(Captured::default()));
        let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&captured)));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

fn lock() -> MutexGuard<'static, Captured> {
    captured().lock().unwrap_or_else(|e| e.into_inner())
}

/// The `idem.call` spans of `tool`, oldest first.
fn spans(tool: &str) -> Vec<SpanRec> {
    lock()
        .spans
        .iter()
        .filter(|s| s.name == "idem.call" && s.fields.get("tool").map(String::as_str) == Some(tool))
        .cloned()
        .collect()
}

/// The `n`-th `idem.call` span of `tool`.
fn nth_span(tool: &str, n: usize) -> SpanRec {
    let all = spans(tool);
    assert!(all.len() > n, "{} span(s) of {tool}: {all:#?}", all.len());
    all[n].clone()
}

/// The events inside span `serial`.
fn events(span: &SpanRec) -> Vec<EventRec> {
    lock()
        .events
        .iter()
        .filter(|e| e.span == Some(span.serial))
        .cloned()
        .collect()
}

/// The events named `name` inside `span`.
fn named(span: &SpanRec, name: &str) -> Vec<EventRec> {
    events(span)
        .into_iter()
        .filter(|e| e.name == name)
        .collect()
}

/// The one event named `name` inside `span`, with target `idem` and level `level`.
fn one(span: &SpanRec, name: &str, level: Level) -> EventRec {
    let found = named(span, name);
    assert_eq!(
        found.len(),
        1,
        "one {name} event expected in {span:#?}: {:#?}",
        events(span)
    );
    let event = found.into_iter().next().unwrap();
    assert_eq!(event.target, "idem");
    assert_eq!(event.level, level, "{event:?}");
    assert_eq!(event.fields.get("message").map(String::as_str), Some(name));
    event
}

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.get(name).map(String::as_str)
}

/// Lets other tasks of a current-thread runtime run until `done` holds (bounded by a number
/// of turns, not by time).
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

/// Waits on this thread until `done` holds, for work done by other threads (idem's renewal
/// thread): polls every millisecond, gives up after a minute.
fn until_blocking(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------------------------------
// Tools.

/// A `'static` spec: conversation scope, 24 h TTL, the given lease (heartbeat a third of
/// it) and wait.
fn spec(name: &'static str, lease_ms: u64, wait_ms: u64) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        lease: Duration::from_millis(lease_ms),
        wait: Duration::from_millis(wait_ms),
        ..ToolSpec::new(name)
    }))
}

fn reconciling(name: &'static str) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        reconcile: true,
        ..ToolSpec::new(name)
    }))
}

/// A call of `spec` keyed on `order`, with `amount` as fingerprint.
fn call(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    order: u64,
    amount: u64,
) -> idem_runtime::PreparedCall {
    captured();
    prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &amount).map(drop)
    })
    .expect("prepared")
}

fn ok(value: u64) -> Result<u64, ToolError> {
    Ok(value)
}

/// The span's `key` field: the first 16 hex digits of the call's key.
fn key16(prepared: &idem_runtime::PreparedCall) -> String {
    prepared.key().as_str()[..16].to_owned()
}

// ---------------------------------------------------------------------------------------
// V1: the span.

// pins V1
#[tokio::test]
async fn an_executed_call_has_its_span_with_every_field() {
    let h = Harness::new();
    let tool = spec("v1_executed", 60_000, 5_000);
    let ctx = h.ctx("conv_v1");
    let prepared = call(tool, &ctx, 7, 100);
    let key = key16(&prepared);
    assert_eq!(prepared.run(async { ok(1) }).await, Ok(1));

    let span = nth_span("v1_executed", 0);
    assert_eq!(span.name, "idem.call");
    assert_eq!(span.target, "idem");
    let expected: Fields = [
        ("tool", "v1_executed"),
        ("key", key.as_str()),
        ("scope.kind", "conversation"),
        ("conversation", "conv_v1"),
        ("status", "executed"),
        ("attempt", "1"),
        ("fence", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // `namespace` is declared and stays empty: this engine has no namespace.
    assert_eq!(span.fields, expected);
    assert_eq!(key.len(), 16);
    let executed = one(&span, "executed", Level::DEBUG);
    assert_eq!(field(&executed.fields, "recorded"), Some("true"));
}

// pins V1
#[tokio::test]
async fn global_and_call_scopes_name_their_kind_and_the_conversation_in_force() {
    let h = Harness::new();
    let global = Box::leak(Box::new(ToolSpec {
        scope: Scope::Global,
        ..ToolSpec::new("v1_global")
    }));
    // No conversation in force: the field is absent.
    let ctx = CallContext::new().with_engine(h.engine.clone());
    assert_eq!(call(global, &ctx, 1, 1).run(async { ok(1) }).await, Ok(1));
    let span = nth_span("v1_global", 0);
    assert_eq!(field(&span.fields, "scope.kind"), Some("global"));
    assert_eq!(field(&span.fields, "conversation"), None);

    let per_call = Box::leak(Box::new(ToolSpec {
        scope: Scope::Call,
        ..ToolSpec::new("v1_call")
    }));
    let ctx = h.ctx("conv_c").with_tool_call("call_1");
    assert_eq!(call(per_call, &ctx, 1, 1).run(async { ok(1) }).await, Ok(1));
    let span = nth_span("v1_call", 0);
    assert_eq!(field(&span.fields, "scope.kind"), Some("call"));
    assert_eq!(field(&span.fields, "conversation"), Some("conv_c"));
}

// pins V1: an engine's namespace (K11) is the span's `namespace`
#[tokio::test]
async fn the_engines_namespace_is_recorded() {
    let engine = Engine::builder()
        .store(MemoryStore::new())
        .clock(ManualClock::new())
        .namespace("deploy-a")
        .build()
        .expect("a valid namespace");
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_ns");
    let tool = spec("v1_namespace", 60_000, 5_000);
    assert_eq!(call(tool, &ctx, 1, 1).run(async { ok(1) }).await, Ok(1));
    let span = nth_span("v1_namespace", 0);
    assert_eq!(field(&span.fields, "namespace"), Some("deploy-a"));
    assert_eq!(field(&span.fields, "status"), Some("executed"));
}

// pins V1: the span stays current across the body's awaits, on whichever worker thread
// polls it, and the body's own events are inside it
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_body_runs_inside_the_span_across_awaits() {
    let h = Harness::new();
    let tool = spec("v1_async_body", 60_000, 5_000);
    let ctx = h.ctx("conv_body");
    let prepared = call(tool, &ctx, 1, 1);
    let outcome = prepared
        .run(async {
            for round in 0..5u32 {
                tokio::task::yield_now().await;
                tokio::spawn(async {}).await.unwrap();
                tracing::info!(round, "inside the body");
            }
            ok(5)
        })
        .await;
    assert_eq!(outcome, Ok(5));
    let span = nth_span("v1_async_body", 0);
    let inside = events(&span)
        .iter()
        .filter(|e| field(&e.fields, "message") == Some("inside the body"))
        .count();
    assert_eq!(inside, 5, "{:#?}", events(&span));
    assert_eq!(field(&span.fields, "status"), Some("executed"));
}

// pins V1: the sync path (`run_blocking`) enters the same span, its body's events are in it
#[test]
fn a_sync_call_runs_inside_its_span() {
    let h = Harness::new();
    let tool = spec("v1_sync", 60_000, 5_000);
    let ctx = h.ctx("conv_sync");
    let prepared = call(tool, &ctx, 3, 3);
    let key = key16(&prepared);
    let outcome = prepared.run_blocking(|| {
        tracing::info!("inside the sync body");
        ok(3)
    });
    assert_eq!(outcome, Ok(3));
    let span = nth_span("v1_sync", 0);
    assert_eq!(field(&span.fields, "key"), Some(key.as_str()));
    assert_eq!(field(&span.fields, "status"), Some("executed"));
    assert_eq!(field(&span.fields, "attempt"), Some("1"));
    assert!(events(&span)
        .iter()
        .any(|e| field(&e.fields, "message") == Some("inside the sync body")));
    one(&span, "executed", Level::DEBUG);
    let operations: Vec<_> = named(&span, "store")
        .iter()
        .map(|e| field(&e.fields, "operation").unwrap().to_owned())
        .collect();
    assert_eq!(operations, ["claim", "complete"]);
}

// pins V1, V2: a missing scope fails in `prepare`, before any key: the span has no key,
// its status is missing_scope, and no store operation ran
#[test]
fn missing_scope_has_its_span_without_a_key() {
    let h = Harness::new();
    let tool = spec("v2_missing_scope", 60_000, 5_000);
    let ctx = CallContext::new().with_engine(h.engine.clone());
    captured();
    let error = prepare(tool, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap_err();
    assert!(matches!(error, Error::MissingScope { .. }), "{error:?}");
    let span = nth_span("v2_missing_scope", 0);
    assert_eq!(field(&span.fields, "key"), None);
    assert_eq!(field(&span.fields, "status"), Some("missing_scope"));
    assert_eq!(field(&span.fields, "scope.kind"), Some("conversation"));
    assert_eq!(field(&span.fields, "attempt"), None);
    let event = one(&span, "missing_scope", Level::DEBUG);
    assert_eq!(field(&event.fields, "scope"), Some("conversation"));
    assert!(named(&span, "store").is_empty());
}

// pins V2, E3: a run-time override that conflicts with the attribute is bad_configuration,
// before any key or store operation
#[test]
fn a_conflicting_override_is_bad_configuration() {
    let tool = spec("v2_bad_configuration", 60_000, 5_000);
    let engine = Engine::builder()
        .clock(ManualClock::new())
        .tool(
            "v2_bad_configuration",
            idem_runtime::ToolSettings::new().with_lease(std::time::Duration::from_secs(90_000)),
        )
        .build()
        .unwrap();
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_config");
    captured();
    let error = prepare(tool, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap_err();
    assert!(matches!(error, Error::Config { .. }), "{error:?}");
    let span = nth_span("v2_bad_configuration", 0);
    assert_eq!(field(&span.fields, "status"), Some("bad_configuration"));
    assert_eq!(field(&span.fields, "key"), None);
    let event = one(&span, "bad_configuration", Level::WARN);
    assert!(field(&event.fields, "error").is_some());
    assert!(named(&span, "store").is_empty());
}

// pins V2
#[test]
fn arguments_that_cannot_be_keyed_are_bad_arguments() {
    let h = Harness::new();
    let tool = spec("v2_bad_arguments", 60_000, 5_000);
    let ctx = h.ctx("conv_bad");
    captured();
    let error = prepare(tool, Some(&ctx), |a| a.key("amount", &f64::NAN).map(drop)).unwrap_err();
    assert!(matches!(error, Error::Canonical { .. }), "{error:?}");
    let span = nth_span("v2_bad_arguments", 0);
    assert_eq!(field(&span.fields, "status"), Some("bad_arguments"));
    let event = one(&span, "bad_arguments", Level::DEBUG);
    assert!(field(&event.fields, "error").is_some());
}

// ---------------------------------------------------------------------------------------
// V2: one event per path.

// pins V2: every store operation has its `store` event: name, backend, latency (µs), outcome
#[tokio::test]
async fn every_store_operation_has_a_store_event() {
    let h = Harness::new();
    let tool = spec("v2_store", 60_000, 5_000);
    let ctx = h.ctx("conv_store");
    assert_eq!(call(tool, &ctx, 1, 1).run(async { ok(1) }).await, Ok(1));
    let span = nth_span("v2_store", 0);
    let stores = named(&span, "store");
    assert_eq!(stores.len(), 2, "{stores:#?}");
    for (event, operation) in stores.iter().zip(["claim", "complete"]) {
        assert_eq!(event.level, Level::TRACE);
        assert_eq!(event.target, "idem");
        assert_eq!(field(&event.fields, "operation"), Some(operation));
        assert_eq!(field(&event.fields, "backend"), Some("memory"));
        assert_eq!(field(&event.fields, "outcome"), Some("ok"));
        let latency: u64 = field(&event.fields, "latency_us").unwrap().parse().unwrap();
        assert!(latency < 60_000_000, "{latency} µs");
    }
}

// pins V2
#[tokio::test]
async fn a_replay_emits_replayed() {
    let h = Harness::new();
    let tool = spec("v2_replayed", 60_000, 5_000);
    let ctx = h.ctx("conv_replay");
    assert_eq!(call(tool, &ctx, 1, 1).run(async { ok(10) }).await, Ok(10));
    let again = call(tool, &ctx, 1, 1);
    let key = key16(&again);
    assert_eq!(again.run(async { ok(99) }).await, Ok(10));
    let span = nth_span("v2_replayed", 1);
    assert_eq!(field(&span.fields, "key"), Some(key.as_str()));
    assert_eq!(field(&span.fields, "status"), Some("replayed"));
    assert_eq!(
        field(&span.fields, "fence"),
        Some("1"),
        "the saved run's fence"
    );
    assert_eq!(
        field(&span.fields, "attempt"),
        None,
        "a replay claims nothing"
    );
    one(&span, "replayed", Level::DEBUG);
    assert!(named(&span, "executed").is_empty());
}

// pins V2
#[tokio::test]
async fn other_arguments_under_one_key_emit_mismatch() {
    let h = Harness::new();
    let tool = spec("v2_mismatch", 60_000, 5_000);
    let ctx = h.ctx("conv_mismatch");
    assert_eq!(call(tool, &ctx, 1, 100).run(async { ok(1) }).await, Ok(1));
    let outcome = call(tool, &ctx, 1, 200).run(async { ok(2) }).await;
    assert!(
        matches!(outcome, Err(ToolError::Idem(Error::Mismatch { .. }))),
        "{outcome:?}"
    );
    let span = nth_span("v2_mismatch", 1);
    assert_eq!(field(&span.fields, "status"), Some("mismatch"));
    assert_eq!(field(&span.fields, "fence"), Some("1"));
    one(&span, "mismatch", Level::DEBUG);
}

// pins V2: a concurrent duplicate that waited out its bound emits in_progress with how long
// it waited (engine clock, ms)
#[tokio::test]
async fn a_duplicate_past_the_wait_bound_emits_in_progress_with_waited_ms() {
    let h = Harness::new();
    let tool = spec("v2_in_progress", 60_000, 100);
    let ctx = h.ctx("conv_wait");
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let owner = tokio::spawn(call(tool, &ctx, 1, 1).run(async move {
        released.await.unwrap();
        ok(1)
    }));
    until("the owner claimed", || {
        spans("v2_in_progress")
            .first()
            .is_some_and(|s| s.fields.contains_key("attempt"))
    })
    .await;

    let mut waiter = pin!(call(tool, &ctx, 1, 1).run(async { ok(2) }));
    assert!(futures_util::poll!(waiter.as_mut()).is_pending());
    h.clock.advance(Duration::from_millis(100));
    let outcome = waiter.await;
    assert!(
        matches!(
            outcome,
            Err(ToolError::Idem(Error::InProgress { waited_ms: 100, .. }))
        ),
        "{outcome:?}"
    );
    let span = nth_span("v2_in_progress", 1);
    assert_eq!(field(&span.fields, "status"), Some("in_progress"));
    assert_eq!(
        field(&span.fields, "fence"),
        Some("1"),
        "the holder's fence"
    );
    let event = one(&span, "in_progress", Level::DEBUG);
    assert_eq!(field(&event.fields, "waited_ms"), Some("100"));
    assert!(field(&event.fields, "retry_after_ms").is_some());

    release.send(()).unwrap();
    assert_eq!(owner.await.unwrap(), Ok(1));
}

// pins V2, U2a: outcome_unknown (WARN) with its cause: the body's error, a held unknown
// outcome, a call dropped after its body began; then (`on_unknown = "rerun"`) a takeover
// emits taken_over
#[tokio::test]
async fn unknown_outcomes_emit_outcome_unknown_and_a_takeover_taken_over() {
    let h = Harness::new();
    let tool = rerun(spec("v2_unknown", 60_000, 5_000));
    let ctx = h.ctx("conv_unknown");
    let outcome = call(tool, &ctx, 1, 1)
        .run(async { Err::<u64, _>(ToolError::outcome_unknown("bank timed out")) })
        .await;
    assert!(matches!(outcome, Err(ToolError::OutcomeUnknown(_))));
    let first = nth_span("v2_unknown", 0);
    assert_eq!(field(&first.fields, "status"), Some("outcome_unknown"));
    let event = one(&first, "outcome_unknown", Level::WARN);
    assert_eq!(field(&event.fields, "cause"), Some("error"));
    assert_eq!(
        named(&first, "store")
            .iter()
            .map(|e| field(&e.fields, "operation").unwrap())
            .collect::<Vec<_>>(),
        ["claim", "mark_unknown"]
    );

    // Held: the lease is still live.
    let outcome = call(tool, &ctx, 1, 1).run(async { ok(2) }).await;
    assert!(
        matches!(outcome, Err(ToolError::Idem(Error::OutcomeUnknown { .. }))),
        "{outcome:?}"
    );
    let held = nth_span("v2_unknown", 1);
    assert_eq!(field(&held.fields, "status"), Some("outcome_unknown"));
    assert_eq!(field(&held.fields, "fence"), Some("1"));
    let event = one(&held, "outcome_unknown", Level::WARN);
    assert_eq!(field(&event.fields, "cause"), Some("held"));
    assert_eq!(field(&event.fields, "retry_after_ms"), Some("60000"));

    // Once the lease lapsed, the next call takes over and runs the body again.
    h.clock.advance(Duration::from_millis(60_000));
    let outcome = call(tool, &ctx, 1, 1).run(async { ok(3) }).await;
    assert_eq!(outcome, Ok(3));
    let taker = nth_span("v2_unknown", 2);
    assert_eq!(field(&taker.fields, "status"), Some("executed"));
    assert_eq!(field(&taker.fields, "attempt"), Some("2"));
    assert_eq!(field(&taker.fields, "fence"), Some("2"));
    let event = one(&taker, "taken_over", Level::WARN);
    assert_eq!(field(&event.fields, "previous_fence"), Some("1"));
    assert_eq!(field(&event.fields, "cause"), Some("gave_up"));
    assert_eq!(field(&event.fields, "reconcile"), Some("false"));
    one(&taker, "executed", Level::DEBUG);
    assert!(named(&taker, "store")
        .iter()
        .any(|e| field(&e.fields, "operation") == Some("take_over")));
}

// pins V2: a call dropped once its body began leaves the outcome unknown (cause dropped)
#[tokio::test]
async fn a_call_dropped_after_its_body_began_emits_outcome_unknown() {
    let h = Harness::new();
    let tool = spec("v2_dropped_unknown", 60_000, 5_000);
    let ctx = h.ctx("conv_dropped");
    let mut running =
        Box::pin(call(tool, &ctx, 1, 1).run(std::future::pending::<Result<u64, ToolError>>()));
    assert!(futures_util::poll!(running.as_mut()).is_pending());
    drop(running);
    let span = nth_span("v2_dropped_unknown", 0);
    assert_eq!(field(&span.fields, "status"), Some("outcome_unknown"));
    let event = one(&span, "outcome_unknown", Level::WARN);
    assert_eq!(field(&event.fields, "cause"), Some("dropped"));
}

// pins V2: released, with its cause: the body's retryable error, or a claim dropped before
// its body began
#[tokio::test]
async fn released_claims_emit_released() {
    let h = Harness::new();
    let tool = spec("v2_released", 60_000, 5_000);
    let ctx = h.ctx("conv_released");
    let outcome = call(tool, &ctx, 1, 1)
        .run(async { Err::<u64, _>(ToolError::retryable("not sent")) })
        .await;
    assert!(matches!(outcome, Err(ToolError::Retryable(_))));
    let span = nth_span("v2_released", 0);
    assert_eq!(field(&span.fields, "status"), Some("released"));
    let event = one(&span, "released", Level::DEBUG);
    assert_eq!(field(&event.fields, "cause"), Some("error"));
    assert!(named(&span, "store")
        .iter()
        .any(|e| field(&e.fields, "operation") == Some("release")));

    let claimed = call(tool, &ctx, 2, 1).claim::<u64, ToolError>().await;
    drop(claimed.expect("claimed"));
    let span = nth_span("v2_released", 1);
    assert_eq!(field(&span.fields, "status"), Some("released"));
    let event = one(&span, "released", Level::DEBUG);
    assert_eq!(field(&event.fields, "cause"), Some("dropped"));
}

// pins V2: a reconcile function's answers: unknown (the key stays unknown), then done
// (status reconciled)
#[tokio::test]
async fn reconcile_answers_emit_reconciled() {
    let h = Harness::new();
    let tool = reconciling("v2_reconciled");
    let ctx = h.ctx("conv_reconcile");
    let outcome = call(tool, &ctx, 1, 1)
        .run(async { Err::<u64, _>(ToolError::outcome_unknown("timed out")) })
        .await;
    assert!(matches!(outcome, Err(ToolError::OutcomeUnknown(_))));

    let claimed = call(tool, &ctx, 1, 1)
        .claim::<u64, ToolError>()
        .await
        .expect("takes over at once to reconcile");
    assert!(claimed.needs_reconcile());
    let answer = claimed.settle(Reconciled::<u64, ToolError>::Unknown).await;
    assert!(matches!(
        answer.err(),
        Some(Err(ToolError::Idem(Error::OutcomeUnknown { .. })))
    ));
    let unsure = nth_span("v2_reconciled", 1);
    assert_eq!(field(&unsure.fields, "status"), Some("outcome_unknown"));
    let taken = one(&unsure, "taken_over", Level::WARN);
    assert_eq!(field(&taken.fields, "reconcile"), Some("true"));
    let event = one(&unsure, "reconciled", Level::DEBUG);
    assert_eq!(field(&event.fields, "verdict"), Some("unknown"));
    let event = one(&unsure, "outcome_unknown", Level::WARN);
    assert_eq!(field(&event.fields, "cause"), Some("reconcile"));

    let claimed = call(tool, &ctx, 1, 1)
        .claim::<u64, ToolError>()
        .await
        .expect("takes over again");
    let answer = claimed
        .settle(Reconciled::<u64, ToolError>::Done(Ok(7)))
        .await;
    assert!(matches!(answer.err(), Some(Ok(7))));
    let done = nth_span("v2_reconciled", 2);
    assert_eq!(field(&done.fields, "status"), Some("reconciled"));
    assert_eq!(field(&done.fields, "attempt"), Some("3"));
    assert_eq!(field(&done.fields, "fence"), Some("3"));
    let event = one(&done, "reconciled", Level::DEBUG);
    assert_eq!(field(&event.fields, "verdict"), Some("done"));
    assert_eq!(field(&event.fields, "recorded"), Some("true"));
    assert!(named(&done, "executed").is_empty());
}

// pins V2: a heartbeat renewal of an async body emits renewed (TRACE) with the new lease
// deadline, and a store event for the renewal
#[tokio::test]
async fn an_async_renewal_emits_renewed() {
    let h = Harness::new();
    let tool = spec("v2_renewed_async", 3_000, 5_000);
    let ctx = h.ctx("conv_renew");
    let start = h.now().as_millis();
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(call(tool, &ctx, 1, 1).run(async move {
        finished.await.unwrap();
        ok(1)
    }));
    until("the owner claimed", || {
        spans("v2_renewed_async")
            .first()
            .is_some_and(|s| s.fields.contains_key("attempt"))
    })
    .await;
    h.clock.advance(Duration::from_millis(1_000)); // one heartbeat (a third of the lease)
    until("a renewal", || {
        spans("v2_renewed_async")
            .first()
            .is_some_and(|s| !named(s, "renewed").is_empty())
    })
    .await;
    finish.send(()).unwrap();
    assert_eq!(running.await.unwrap(), Ok(1));
    let span = nth_span("v2_renewed_async", 0);
    let event = one(&span, "renewed", Level::TRACE);
    let deadline = (start + 1_000 + 3_000).to_string();
    assert_eq!(
        field(&event.fields, "lease_until_ms"),
        Some(deadline.as_str())
    );
    assert!(named(&span, "store")
        .iter()
        .any(|e| field(&e.fields, "operation") == Some("renew")));
    assert_eq!(field(&span.fields, "status"), Some("executed"));
}

// pins V2: a sync body's renewals come from idem's renewal thread, still inside the call's
// span
#[test]
fn a_sync_renewal_emits_renewed_in_the_calls_span() {
    let h = Harness::new();
    let tool = spec("v2_renewed_sync", 3_000, 5_000);
    let ctx = h.ctx("conv_renew_sync");
    let clock = h.clock.clone();
    let outcome = call(tool, &ctx, 1, 1).run_blocking(|| {
        clock.advance(Duration::from_millis(1_000));
        until_blocking("a renewal from the renewal thread", || {
            spans("v2_renewed_sync")
                .first()
                .is_some_and(|s| !named(s, "renewed").is_empty())
        });
        ok(1)
    });
    assert_eq!(outcome, Ok(1));
    let span = nth_span("v2_renewed_sync", 0);
    one(&span, "renewed", Level::TRACE);
    assert_eq!(field(&span.fields, "status"), Some("executed"));
}

// pins V2, U2a: an owner that stalled past its lease and was taken over (`on_unknown =
// "rerun"`) finds its claim lost at its next renewal (lease_lost, WARN) and at its finishing
// write
#[tokio::test]
async fn a_taken_over_owner_emits_lease_lost() {
    let h = Harness::new();
    let tool = rerun(spec("v2_lease_lost", 3_000, 5_000));
    let ctx = h.ctx("conv_lost");
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let stalled = tokio::spawn(call(tool, &ctx, 1, 1).run(async move {
        finished.await.unwrap();
        ok(1)
    }));
    until("the owner claimed", || {
        spans("v2_lease_lost")
            .first()
            .is_some_and(|s| s.fields.contains_key("attempt"))
    })
    .await;
    // The owner is not polled from here until the takeover is done (this task does not
    // yield): it stalls past its lease.
    h.clock.advance(Duration::from_millis(3_001));
    let taker = call(tool, &ctx, 1, 1).run_blocking(|| ok(2));
    assert_eq!(taker, Ok(2));
    let second = nth_span("v2_lease_lost", 1);
    let event = one(&second, "taken_over", Level::WARN);
    assert_eq!(field(&event.fields, "cause"), Some("lease_lapsed"));

    until("the stalled owner's renewal", || {
        !named(&nth_span("v2_lease_lost", 0), "lease_lost").is_empty()
    })
    .await;
    finish.send(()).unwrap();
    assert_eq!(stalled.await.unwrap(), Ok(1));
    let first = nth_span("v2_lease_lost", 0);
    let lost: Vec<_> = named(&first, "lease_lost")
        .iter()
        .map(|e| {
            assert_eq!(e.level, Level::WARN);
            field(&e.fields, "operation").unwrap().to_owned()
        })
        .collect();
    assert_eq!(lost, ["renew", "complete"]);
    assert_eq!(field(&first.fields, "status"), Some("executed"));
    let executed = one(&first, "executed", Level::DEBUG);
    assert_eq!(field(&executed.fields, "recorded"), Some("false"));
}

// pins V2: a failing store: store_error (WARN) with the error's kind; a failed claim ends
// the call with status store_error, a failed save keeps status executed, not recorded
#[tokio::test]
async fn store_failures_emit_store_error_with_its_kind() {
    let faulty = Arc::new(FaultyStore::default());
    let engine = Engine::from_shared(faulty.clone(), Arc::new(ManualClock::new()));
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_faulty");
    let tool = spec("v2_store_error", 60_000, 5_000);

    faulty
        .fail_claim
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let outcome = call(tool, &ctx, 1, 1).run(async { ok(1) }).await;
    assert!(
        matches!(outcome, Err(ToolError::Idem(Error::Store { .. }))),
        "{outcome:?}"
    );
    let span = nth_span("v2_store_error", 0);
    assert_eq!(field(&span.fields, "status"), Some("store_error"));
    let event = one(&span, "store_error", Level::WARN);
    assert_eq!(field(&event.fields, "error.kind"), Some("unavailable"));
    assert_eq!(field(&event.fields, "operation"), Some("claim"));
    assert_eq!(field(&event.fields, "backend"), Some("faulty"));
    assert_eq!(
        field(&event.fields, "error.message"),
        Some("connection refused")
    );
    let store = one(&span, "store", Level::TRACE);
    assert_eq!(field(&store.fields, "outcome"), Some("error"));
    assert_eq!(field(&store.fields, "backend"), Some("faulty"));

    faulty
        .fail_claim
        .store(false, std::sync::atomic::Ordering::SeqCst);
    faulty
        .fail_complete
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let outcome = call(tool, &ctx, 2, 1).run(async { ok(2) }).await;
    assert_eq!(outcome, Ok(2), "the caller still learns the body's outcome");
    let span = nth_span("v2_store_error", 1);
    assert_eq!(field(&span.fields, "status"), Some("executed"));
    let event = one(&span, "store_error", Level::WARN);
    assert_eq!(field(&event.fields, "operation"), Some("complete"));
    let executed = one(&span, "executed", Level::DEBUG);
    assert_eq!(field(&executed.fields, "recorded"), Some("false"));
}

// pins V2: a store refused before any operation (no engine can be opened) is store_error
// with its kind and no operation
#[test]
fn a_store_that_cannot_be_opened_emits_store_error() {
    let tool = Box::leak(Box::new(ToolSpec {
        store: Some("nosuchbackend:somewhere"),
        ..ToolSpec::new("v2_no_store")
    }));
    let ctx = CallContext::new()
        .with_engine(Engine::new(MemoryStore::new(), ManualClock::new()))
        .with_conversation("conv_no_store");
    captured();
    let error = prepare(tool, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap_err();
    assert!(matches!(error, Error::Store { .. }), "{error:?}");
    let span = nth_span("v2_no_store", 0);
    assert_eq!(field(&span.fields, "status"), Some("store_error"));
    let event = one(&span, "store_error", Level::WARN);
    assert_eq!(field(&event.fields, "operation"), None);
    assert!(field(&event.fields, "error.kind").is_some());
}
