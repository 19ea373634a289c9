//! Metrics of the call protocol (contract V3, feature `metrics`): the counter `idem.calls`,
//! the histograms `idem.call.duration`, `idem.store.operation.duration` and
//! `idem.decision.delay`, and the gauge `idem.records.awaiting_decision`, with their labels,
//! units and descriptions, read back from `metrics-util`'s `DebuggingRecorder`.
//!
//! One test: the recorder is process-wide and a snapshot resets the counters it reads.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use idem_runtime::resolve::{Decision, Resolution};
use idem_runtime::telemetry::{
    AWAITING_DECISION, CALLS, CALL_DURATION, DECISION_DELAY, STORE_OPERATION_DURATION,
};
use idem_runtime::testkit::ManualClock;
use idem_runtime::{CallContext, Engine, Error, ToolError, ToolSpec};
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use support::{refund, FaultyStore, Harness};

/// One metric of the snapshot: its kind, name and sorted labels.
type Series = (MetricKind, String, BTreeMap<String, String>);

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

// pins V3, U6
#[tokio::test]
async fn calls_and_store_operations_are_counted_and_timed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder");

    let h = Harness::new();
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec::new("v3_refund")));
    let ctx = h.ctx("conv_metrics");
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100)); // executed
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100)); // replayed
    assert_eq!(refund(spec, &ctx, &h.log, 2).await, Ok(200)); // executed

    let faulty = Arc::new(FaultyStore::default());
    faulty.fail_claim.store(true, Ordering::SeqCst);
    let engine = Engine::from_shared(faulty.clone(), Arc::new(ManualClock::new()));
    let failing = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_metrics");
    let outcome = refund(spec, &failing, &h.log, 3).await;
    assert!(matches!(outcome, Err(ToolError::Idem(Error::Store { .. }))));

    // A crashed claim of another tool waits for a decision: counted by the gauge; decided
    // 90 s after its claim (60 s lease + 30 s), which the delay histogram records.
    let held: &'static ToolSpec = Box::leak(Box::new(ToolSpec::new("v3_held")));
    let prepared =
        idem_runtime::prepare(held, Some(&ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
    let key = prepared.key().clone();
    std::mem::forget(prepared.claim::<u64, ToolError>().await.ok().unwrap());
    h.clock.advance(std::time::Duration::from_secs(60));
    let stats = h.engine.record_awaiting_decision().await.unwrap();
    assert_eq!(stats.by_tool["v3_held"].outcome_unknown, 1);
    h.clock.advance(std::time::Duration::from_secs(30));
    let decision = Resolution::new(Decision::not_applied(), "ana").unwrap();
    h.engine.resolve(&key, &decision).await.unwrap();

    let snapshot: BTreeMap<Series, (Option<Unit>, Option<String>, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, description, value)| {
            let (kind, key) = key.into_parts();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let series = (kind, key.name().to_owned(), labels);
            (series, (unit, description.map(|d| d.to_string()), value))
        })
        .collect();
    let get = |kind: MetricKind, name: &str, pairs: &[(&str, &str)]| {
        snapshot
            .get(&(kind, name.to_owned(), labels(pairs)))
            .unwrap_or_else(|| panic!("no {kind:?} {name} {pairs:?} in {snapshot:#?}"))
    };
    let samples = |value: &DebugValue| match value {
        DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()).collect::<Vec<_>>(),
        other => panic!("not a histogram: {other:?}"),
    };

    // idem.calls: one per call, by tool and status.
    let executed = [("tool", "v3_refund"), ("status", "executed")];
    let (unit, description, value) = get(MetricKind::Counter, CALLS, &executed);
    assert_eq!(value, &DebugValue::Counter(2));
    assert_eq!(unit, &Some(Unit::Count));
    assert!(description.as_deref().is_some_and(|d| d.contains("status")));
    let replayed = [("tool", "v3_refund"), ("status", "replayed")];
    assert_eq!(
        get(MetricKind::Counter, CALLS, &replayed).2,
        DebugValue::Counter(1)
    );
    let store_error = [("tool", "v3_refund"), ("status", "store_error")];
    assert_eq!(
        get(MetricKind::Counter, CALLS, &store_error).2,
        DebugValue::Counter(1)
    );

    // idem.call.duration: seconds, by tool and status.
    let (unit, description, value) = get(MetricKind::Histogram, CALL_DURATION, &executed);
    assert_eq!(unit, &Some(Unit::Seconds));
    assert!(description
        .as_deref()
        .is_some_and(|d| d.contains("seconds")));
    let durations = samples(value);
    assert_eq!(durations.len(), 2);
    assert!(
        durations.iter().all(|s| (0.0..60.0).contains(s)),
        "{durations:?}"
    );
    assert_eq!(
        samples(&get(MetricKind::Histogram, CALL_DURATION, &replayed).2).len(),
        1
    );

    // idem.store.operation.duration: seconds, by operation, backend and outcome.
    let claims = [
        ("operation", "claim"),
        ("backend", "memory"),
        ("outcome", "ok"),
    ];
    let (unit, description, value) = get(MetricKind::Histogram, STORE_OPERATION_DURATION, &claims);
    assert_eq!(unit, &Some(Unit::Seconds));
    assert!(description
        .as_deref()
        .is_some_and(|d| d.contains("seconds")));
    assert_eq!(samples(value).len(), 4, "four claims on the memory store");
    let completes = [
        ("operation", "complete"),
        ("backend", "memory"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        samples(&get(MetricKind::Histogram, STORE_OPERATION_DURATION, &completes).2).len(),
        2
    );
    let failed = [
        ("operation", "claim"),
        ("backend", "faulty"),
        ("outcome", "error"),
    ];
    assert_eq!(
        samples(&get(MetricKind::Histogram, STORE_OPERATION_DURATION, &failed).2).len(),
        1
    );

    // idem.records.awaiting_decision: by tool, as last counted.
    let (unit, _, value) = get(MetricKind::Gauge, AWAITING_DECISION, &[("tool", "v3_held")]);
    assert_eq!(unit, &Some(Unit::Count));
    assert_eq!(value, &DebugValue::Gauge(1.0.into()));
    // idem.decision.delay: seconds from the unknown outcome (the claim of the crashed run)
    // to the decision, by the engine's clock.
    let decided = [("tool", "v3_held"), ("decision", "not_applied")];
    let (unit, _, value) = get(MetricKind::Histogram, DECISION_DELAY, &decided);
    assert_eq!(unit, &Some(Unit::Seconds));
    assert_eq!(samples(value), [90.0]);
}
