//! Run-time settings (contract E1–E3): an engine overrides a tool's ttl, lease, wait and
//! heartbeat, and whether it requires approval (A1); the attribute's values are the
//! defaults; invalid settings are typed errors.
//!
//! Time moves on a manual clock only. The environment is process-wide: only
//! `environment_settings` touches it (one test fn, so no other test of this binary sees a
//! half-set environment), and no other test here reads it.

mod support;

use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::settings::env_variable;
use idem_runtime::{
    prepare, ApprovalSetting, CallContext, CallStatus, ClaimedCall, Engine, EngineConfigError,
    Error, Setting, ToolError, ToolSettings, ToolSpec,
};
use support::{key_of, refund, rerun, spec, Harness};

/// An engine over the harness's store and clock, with `settings` for `tool`.
fn engine_with(h: &Harness, tool: &str, settings: ToolSettings) -> Engine {
    Engine::builder()
        .shared_store(h.store.clone())
        .clock(h.clock.clone())
        .tool(tool, settings)
        .build()
        .unwrap()
}

fn ctx(engine: &Engine, conversation: &str) -> CallContext {
    CallContext::new()
        .with_engine(engine.clone())
        .with_conversation(conversation)
}

// pins E1, S8: a ttl override beats the attribute's: the record expires at the overridden
// ttl (replayed at ttl − 1 ms, run again at ttl), while an engine without the override
// still replays
#[tokio::test]
async fn ttl_override_makes_the_record_expire_sooner() {
    let h = Harness::new();
    let tool = spec("send_refund", 86_400_000, 1_000, 5_000);
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_ttl(Duration::from_secs(10)),
    );
    let ctx = ctx(&engine, "c1");
    refund(tool, &ctx, &h.log, 7).await.unwrap();
    let first = ctx.last_outcome().unwrap();
    assert_eq!(first.status, CallStatus::Executed);
    assert_eq!(
        first.expires_at,
        first.created_at.saturating_add(Duration::from_secs(10))
    );
    h.clock.advance(Duration::from_millis(9_999));
    refund(tool, &ctx, &h.log, 7).await.unwrap();
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(h.log.len(), 1);
    h.clock.advance(Duration::from_millis(1));
    refund(tool, &ctx, &h.log, 7).await.unwrap();
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    assert_eq!(h.log.len(), 2, "expired at the overridden ttl");

    // Without the override, the attribute's 24 h apply: the same wait replays.
    let plain = h.ctx("c2");
    refund(tool, &plain, &h.log, 7).await.unwrap();
    h.clock.advance(Duration::from_secs(10));
    refund(tool, &plain, &h.log, 7).await.unwrap();
    assert_eq!(plain.last_outcome().unwrap().status, CallStatus::Replayed);
    // Another tool is not overridden.
    let other = spec("send_invoice", 86_400_000, 60_000, 5_000);
    refund(other, &ctx, &h.log, 7).await.unwrap();
    h.clock.advance(Duration::from_secs(10));
    refund(other, &ctx, &h.log, 7).await.unwrap();
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
}

/// Claims order 1's key under `ctx` and holds the claim without running anything (the
/// owner stalls: no renewal).
async fn hold_claim(tool: &'static ToolSpec, ctx: &CallContext) -> ClaimedCall {
    let prepared = prepare(tool, Some(ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    match prepared.claim::<u64, ToolError>().await {
        Ok(claimed) => claimed,
        Err(_) => panic!("the first call claims"),
    }
}

// pins E1, S6, U2a: a lease override changes when a stalled owner is taken over (under
// `on_unknown = "rerun"`): at the overridden lease, not the attribute's
#[tokio::test]
async fn lease_override_changes_when_a_takeover_happens() {
    let h = Harness::new();
    // wait 0: a duplicate answers at once instead of waiting on the manual clock.
    let tool = rerun(spec("send_refund", 86_400_000, 60_000, 0));
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_lease(Duration::from_secs(5)),
    );
    let ctx = ctx(&engine, "c1");
    let held = hold_claim(tool, &ctx).await;
    h.clock.advance(Duration::from_millis(4_999));
    match refund(tool, &ctx, &h.log, 1).await {
        Err(ToolError::Idem(Error::InProgress { retry_after_ms, .. })) => {
            // one heartbeat (a third of the overridden lease) or the lease's lapse
            assert_eq!(retry_after_ms, 1);
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(refund(tool, &ctx, &h.log, 1).await, Ok(100));
    let record = ctx.last_outcome().unwrap();
    assert!(record.takeover, "taken over at the overridden lease");
    assert_eq!(record.fence, 2);
    drop(held);

    // Without the override the attribute's 60 s lease holds at the same point.
    let plain = h.ctx("c2");
    let held = hold_claim(tool, &plain).await;
    h.clock.advance(Duration::from_secs(5));
    match refund(tool, &plain, &h.log, 1).await {
        Err(ToolError::Idem(Error::InProgress { retry_after_ms, .. })) => {
            assert_eq!(retry_after_ms, 20_000, "a third of the attribute's lease");
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(held);
}

// pins E1, S5: a wait override changes how long a concurrent duplicate waits for the
// owner before InProgress
#[tokio::test]
async fn wait_override_changes_how_long_a_duplicate_waits() {
    let h = Harness::new();
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_wait(Duration::from_secs(3)),
    );
    let ctx = ctx(&engine, "c1");
    let held = hold_claim(tool, &ctx).await;
    let mut duplicate = Box::pin(refund(tool, &ctx, &h.log, 1));
    assert!(
        futures_util::poll!(duplicate.as_mut()).is_pending(),
        "waits"
    );
    h.clock.advance(Duration::from_millis(2_999));
    assert!(
        futures_util::poll!(duplicate.as_mut()).is_pending(),
        "still within the overridden wait"
    );
    h.clock.advance(Duration::from_millis(1));
    match duplicate.await {
        Err(ToolError::Idem(Error::InProgress { waited_ms, .. })) => assert_eq!(waited_ms, 3_000),
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(held);

    // The attribute's wait of 0: no waiting at all.
    let plain = h.ctx("c2");
    let held = hold_claim(tool, &plain).await;
    match refund(tool, &plain, &h.log, 1).await {
        Err(ToolError::Idem(Error::InProgress { waited_ms, .. })) => assert_eq!(waited_ms, 0),
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(held);
    assert!(h.log.is_empty());
}

// pins E1, L1: a heartbeat override is the renewal period (and the retry hint of S5)
#[tokio::test]
async fn heartbeat_override_is_the_renewal_period() {
    let h = Harness::new();
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_heartbeat(Duration::from_secs(7)),
    );
    let effective = engine.effective_spec(tool).unwrap();
    assert_eq!(effective.heartbeat, Some(Duration::from_secs(7)));
    assert_eq!(
        effective.effective_heartbeat(),
        Some(Duration::from_secs(7))
    );
    assert_eq!(effective.lease, tool.lease);
    assert_eq!(effective.ttl, tool.ttl);
    assert_eq!(effective.wait, tool.wait);
    let ctx = ctx(&engine, "c1");
    let held = hold_claim(tool, &ctx).await;
    match refund(tool, &ctx, &h.log, 1).await {
        Err(ToolError::Idem(Error::InProgress { retry_after_ms, .. })) => {
            assert_eq!(retry_after_ms, 7_000)
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(held);
}

/// `tool` with the attribute's `require_approval` validity `approval`.
fn approving(tool: &'static ToolSpec, approval: Option<Duration>) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec { approval, ..*tool }))
}

// pins A1, A2, E1: `ToolSettings::require_approval` makes a tool whose attribute requires
// none wait for a person: the first call records the request and the body does not run;
// the overridden validity is the tool's own (an approval used after it expired waits again)
#[tokio::test]
async fn approval_override_requires_approval() {
    let h = Harness::new();
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    assert_eq!(tool.approval, None);
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().require_approval(Duration::from_secs(10)),
    );
    assert_eq!(
        engine.effective_spec(tool).unwrap().approval,
        Some(Duration::from_secs(10))
    );
    let ctx = ctx(&engine, "c1");
    for order in [1, 2] {
        for _ in 0..2 {
            match refund(tool, &ctx, &h.log, order).await {
                Err(ToolError::Idem(Error::AwaitingApproval { tool, expired, .. })) => {
                    assert_eq!(tool, "send_refund");
                    assert!(!expired);
                }
                other => panic!("expected AwaitingApproval, got {other:?}"),
            }
        }
    }
    assert!(h.log.is_empty(), "the body waits for a person");

    // Approved (for the approver's default hour): the tool's overridden 10 s apply.
    let approval = Approval::new("ops@example.com").unwrap();
    let first = key_of(tool, &ctx, 1);
    let second = key_of(tool, &ctx, 2);
    engine.approve(&first, &approval).await.unwrap();
    engine.approve(&second, &approval).await.unwrap();
    h.clock.advance(Duration::from_millis(9_999));
    assert_eq!(refund(tool, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    h.clock.advance(Duration::from_millis(1));
    match refund(tool, &ctx, &h.log, 2).await {
        Err(ToolError::Idem(Error::AwaitingApproval { expired, .. })) => assert!(expired),
        other => panic!("expected an expired approval, got {other:?}"),
    }
    assert_eq!(h.log.len(), 1);

    // Without the override the attribute's (none) applies: the call runs.
    let plain = h.ctx("c2");
    assert_eq!(refund(tool, &plain, &h.log, 1).await, Ok(100));
    assert_eq!(h.log.len(), 2);
}

// pins A1, E1: `ToolSettings::without_approval` lets a tool whose attribute requires
// approval run at once; other overrides keep the attribute's approval
#[tokio::test]
async fn approval_override_turns_approval_off() {
    let h = Harness::new();
    let tool = approving(
        spec("send_refund", 86_400_000, 60_000, 0),
        Some(ToolSpec::DEFAULT_APPROVAL_VALID_FOR),
    );
    let engine = engine_with(&h, "send_refund", ToolSettings::new().without_approval());
    assert_eq!(engine.effective_spec(tool).unwrap().approval, None);
    let ctx = ctx(&engine, "c1");
    assert_eq!(refund(tool, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    assert_eq!(refund(tool, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(h.log.len(), 1);

    // An engine overriding only the ttl keeps the attribute's approval.
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_ttl(Duration::from_secs(3600)),
    );
    assert_eq!(
        engine.effective_spec(tool).unwrap().approval,
        Some(ToolSpec::DEFAULT_APPROVAL_VALID_FOR)
    );
    let ctx = self::ctx(&engine, "c2");
    assert!(matches!(
        refund(tool, &ctx, &h.log, 1).await,
        Err(ToolError::Idem(Error::AwaitingApproval { .. }))
    ));
    assert_eq!(h.log.len(), 1, "the body did not run");

    // Given in two `tool` calls, the later approval wins and the other settings stay.
    let engine = Engine::builder()
        .tool(
            "send_refund",
            ToolSettings::new()
                .without_approval()
                .with_wait(Duration::from_secs(2)),
        )
        .tool(
            "send_refund",
            ToolSettings::new().require_approval(Duration::from_secs(60)),
        )
        .build()
        .unwrap();
    let settings = engine.tool_settings("send_refund");
    assert_eq!(
        settings.approval,
        Some(ApprovalSetting::Required {
            valid_for: Duration::from_secs(60)
        })
    );
    assert_eq!(settings.wait, Some(Duration::from_secs(2)));
}

fn build_with(settings: ToolSettings) -> Result<Engine, EngineConfigError> {
    Engine::builder().tool("send_refund", settings).build()
}

// pins E3: zero durations and invalid relations among one tool's overrides are typed
// errors of `build`
#[test]
fn invalid_overrides_are_build_errors() {
    let s = Duration::from_secs;
    for (setting, settings) in [
        (Setting::Ttl, ToolSettings::new().with_ttl(Duration::ZERO)),
        (
            Setting::Lease,
            ToolSettings::new().with_lease(Duration::ZERO),
        ),
        (Setting::Wait, ToolSettings::new().with_wait(Duration::ZERO)),
        (
            Setting::Heartbeat,
            ToolSettings::new().with_heartbeat(Duration::from_micros(999)),
        ),
        (
            Setting::Approval,
            ToolSettings::new().require_approval(Duration::ZERO),
        ),
    ] {
        let error = build_with(settings).unwrap_err();
        assert_eq!(
            error,
            EngineConfigError::ZeroDuration {
                tool: "send_refund".into(),
                setting,
                variable: None,
            }
        );
        let what = match setting {
            Setting::Approval => "approval validity (require_approval)".to_owned(),
            _ => setting.to_string(),
        };
        assert!(
            error
                .to_string()
                .contains(&format!("the {what} of tool `send_refund` is zero")),
            "{error}"
        );
    }
    // Approval off, or required for any positive time, is valid with any other override.
    build_with(
        ToolSettings::new()
            .without_approval()
            .with_ttl(s(60))
            .with_lease(s(60)),
    )
    .unwrap();
    build_with(ToolSettings::new().require_approval(Duration::from_millis(1))).unwrap();
    let error = build_with(ToolSettings::new().with_ttl(s(30)).with_lease(s(60))).unwrap_err();
    assert_eq!(
        error,
        EngineConfigError::TtlShorterThanLease {
            tool: "send_refund".into(),
            ttl: s(30),
            lease: s(60),
        }
    );
    assert!(
        error
            .to_string()
            .contains("(30s) is shorter than its overridden lease (1m)"),
        "{error}"
    );
    for heartbeat in [s(60), s(61)] {
        assert_eq!(
            build_with(
                ToolSettings::new()
                    .with_lease(s(60))
                    .with_heartbeat(heartbeat)
            )
            .unwrap_err(),
            EngineConfigError::HeartbeatNotShorterThanLease {
                tool: "send_refund".into(),
                heartbeat,
                lease: s(60),
            }
        );
    }
    // Settings given in two calls for one tool are checked together.
    let error = Engine::builder()
        .tool("send_refund", ToolSettings::new().with_ttl(s(30)))
        .tool("send_refund", ToolSettings::new().with_lease(s(60)))
        .build()
        .unwrap_err();
    assert!(
        matches!(error, EngineConfigError::TtlShorterThanLease { .. }),
        "{error:?}"
    );
    // Valid: equal ttl and lease, a heartbeat just under the lease, a lone override.
    build_with(
        ToolSettings::new()
            .with_ttl(s(60))
            .with_lease(s(60))
            .with_heartbeat(Duration::from_millis(59_999)),
    )
    .unwrap();
    build_with(ToolSettings::new().with_lease(s(600))).unwrap();
    // A store error is still a store error.
    assert!(matches!(
        Engine::builder()
            .store_locator("nosuch:x")
            .build()
            .unwrap_err(),
        EngineConfigError::Store(_)
    ));
    assert!(matches!(
        Engine::from_locator(""),
        Err(EngineConfigError::Store(_))
    ));
}

// pins E3, S4: a combination invalid only with the attribute's values is `Error::Config`
// naming the tool, for every call, before the body runs; it is not retryable, not saved,
// and no key is derived
#[tokio::test]
async fn invalid_with_the_attribute_is_a_config_error_at_call_time() {
    let h = Harness::new();
    let tool = spec("send_refund", 30_000, 10_000, 0);
    // An overridden lease longer than the attribute's ttl.
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_lease(Duration::from_secs(120)),
    );
    let ctx = ctx(&engine, "c1");
    for _ in 0..2 {
        match refund(tool, &ctx, &h.log, 1).await {
            Err(ToolError::Idem(error @ Error::Config { .. })) => {
                let Error::Config { tool, message } = &error else {
                    unreachable!()
                };
                assert_eq!(tool, "send_refund");
                assert!(
                    message.contains(
                        "the ttl (30s, the attribute's) is shorter than the lease (2m, overridden)"
                    ),
                    "{message}"
                );
                assert!(!error.is_transient());
                assert_eq!(error.key(), None);
            }
            other => panic!("expected Error::Config, got {other:?}"),
        }
        assert_eq!(ctx.last_key(), None, "no key was derived");
        assert_eq!(ctx.last_outcome(), None);
    }
    assert!(h.log.is_empty(), "the body never ran");
    let key = key_of(tool, &h.ctx("c1"), 1);
    assert_eq!(
        h.store.read(&key, h.now()).await.unwrap(),
        None,
        "nothing claimed"
    );

    // The attribute's heartbeat not shorter than an overridden lease.
    let mut with_heartbeat = *spec("send_refund", 86_400_000, 60_000, 0);
    with_heartbeat.heartbeat = Some(Duration::from_secs(20));
    let with_heartbeat: &'static ToolSpec = Box::leak(Box::new(with_heartbeat));
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_lease(Duration::from_secs(15)),
    );
    match engine.effective_spec(with_heartbeat) {
        Err(Error::Config { message, .. }) => assert!(
            message.contains("the heartbeat (20s, the attribute's) is not shorter than the lease (15s, overridden)"),
            "{message}"
        ),
        other => panic!("expected Error::Config, got {other:?}"),
    }
    // An overridden ttl that covers the overridden lease is fine; a hand-built spec whose
    // own values are odd (lease 0) is not judged when nothing relevant is overridden.
    let odd = spec("send_refund", 30_000, 0, 0);
    let engine = engine_with(
        &h,
        "send_refund",
        ToolSettings::new().with_wait(Duration::from_secs(1)),
    );
    assert_eq!(engine.effective_spec(odd).unwrap().lease, Duration::ZERO);
}

// pins E2, E3: `IDEM_TOOL_<TOOL>_<SETTING>` variables are read by `settings_from_env()`
// (and by the default engine, once); the builder's values win; invalid ones are typed
// errors naming the variable. The only test of this binary that touches the environment.
#[test]
fn environment_settings() {
    let clear = || {
        for (name, _) in std::env::vars() {
            if name.starts_with("IDEM_TOOL_") {
                std::env::remove_var(name);
            }
        }
    };
    clear();
    assert_eq!(
        env_variable("send.refund", Setting::Ttl),
        "IDEM_TOOL_SEND_REFUND_TTL"
    );
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TTL", "48h");
    std::env::set_var("IDEM_TOOL_SEND_REFUND_LEASE", "2m");
    std::env::set_var("IDEM_TOOL_SEND_REFUND_HEARTBEAT", "500ms");
    std::env::set_var("IDEM_TOOL_BOOK_TABLE_V2_WAIT", " 1m 30s ");
    std::env::set_var("IDEM_TOOL_SEND_REFUND_APPROVAL", "required");
    std::env::set_var("IDEM_TOOL_BOOK_TABLE_V2_APPROVAL", "Off");

    // The default engine reads them once, on first use.
    let default = idem_runtime::default_engine().unwrap();
    assert_eq!(
        default.tool_settings("send_refund").ttl,
        Some(Duration::from_secs(48 * 3600))
    );
    assert_eq!(
        default.tool_settings("send_refund").approval,
        Some(ApprovalSetting::Required {
            valid_for: ToolSpec::DEFAULT_APPROVAL_VALID_FOR
        })
    );

    // Without `settings_from_env` the builder ignores them.
    let plain = Engine::builder().build().unwrap();
    assert!(plain.tool_settings("send_refund").is_empty());

    let engine = Engine::builder()
        .settings_from_env()
        .tool(
            "send_refund",
            ToolSettings::new().with_lease(Duration::from_secs(90)),
        )
        .build()
        .unwrap();
    assert_eq!(
        engine.tool_settings("send_refund"),
        ToolSettings {
            ttl: Some(Duration::from_secs(48 * 3600)),
            lease: Some(Duration::from_secs(90)), // the builder's value wins
            wait: None,
            heartbeat: Some(Duration::from_millis(500)),
            approval: Some(ApprovalSetting::Required {
                valid_for: ToolSpec::DEFAULT_APPROVAL_VALID_FOR
            }),
        }
    );
    // `<TOOL>` matches every name that upper-cases to it, `.` and `-` as `_`.
    assert_eq!(
        engine.tool_settings("book.table-v2").wait,
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        engine.tool_settings("book.table-v2").approval,
        Some(ApprovalSetting::Off)
    );
    assert!(engine.tool_settings("send_invoice").is_empty());
    static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");
    let effective = engine.effective_spec(&SEND_REFUND).unwrap();
    assert_eq!(effective.ttl, Duration::from_secs(48 * 3600));
    assert_eq!(effective.lease, Duration::from_secs(90));
    assert_eq!(effective.wait, ToolSpec::DEFAULT_WAIT);
    assert_eq!(
        effective.effective_heartbeat(),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        effective.approval,
        Some(ToolSpec::DEFAULT_APPROVAL_VALID_FOR)
    );
    // `off` turns the attribute's approval off.
    let book_table = ToolSpec {
        approval: Some(Duration::from_secs(60)),
        ..ToolSpec::new("book.table-v2")
    };
    assert_eq!(engine.effective_spec(&book_table).unwrap().approval, None);
    // The builder's approval wins over the environment's.
    let engine = Engine::builder()
        .settings_from_env()
        .tool("send_refund", ToolSettings::new().without_approval())
        .build()
        .unwrap();
    assert_eq!(engine.effective_spec(&SEND_REFUND).unwrap().approval, None);
    assert_eq!(
        engine.effective_spec(&SEND_REFUND).unwrap().ttl,
        Duration::from_secs(48 * 3600)
    );

    // The builder's and the environment's values are checked together.
    let error = Engine::builder()
        .settings_from_env()
        .tool(
            "send_refund",
            ToolSettings::new().with_ttl(Duration::from_secs(60)),
        )
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        EngineConfigError::TtlShorterThanLease {
            tool: "send_refund".into(),
            ttl: Duration::from_secs(60),
            lease: Duration::from_secs(120),
        }
    );
    clear();

    let from_env = || Engine::builder().settings_from_env().build().unwrap_err();
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TTL", "two days");
    let error = from_env();
    assert!(
        matches!(&error, EngineConfigError::InvalidDuration { variable, text, .. }
            if variable == "IDEM_TOOL_SEND_REFUND_TTL" && text == "two days"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("IDEM_TOOL_SEND_REFUND_TTL holds \"two days\""),
        "{error}"
    );
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TTL", "1500us");
    assert!(
        matches!(from_env(), EngineConfigError::InvalidDuration { reason, .. } if reason.contains("whole number of milliseconds"))
    );
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TTL", "0s");
    assert_eq!(
        from_env(),
        EngineConfigError::ZeroDuration {
            tool: "SEND_REFUND".into(),
            setting: Setting::Ttl,
            variable: Some("IDEM_TOOL_SEND_REFUND_TTL".into()),
        }
    );
    clear();
    // APPROVAL: a duration is required, valid that long; anything but `required`, `off`
    // or a positive duration is a typed error naming the variable and what is allowed.
    std::env::set_var("IDEM_TOOL_SEND_REFUND_APPROVAL", " 30m ");
    let engine = Engine::builder().settings_from_env().build().unwrap();
    assert_eq!(
        engine.tool_settings("send_refund").approval,
        Some(ApprovalSetting::Required {
            valid_for: Duration::from_secs(1800)
        })
    );
    assert_eq!(
        engine.effective_spec(&SEND_REFUND).unwrap().approval,
        Some(Duration::from_secs(1800))
    );
    for bad in ["yes", "true", "2 fortnights", "1500us", ""] {
        std::env::set_var("IDEM_TOOL_SEND_REFUND_APPROVAL", bad);
        let error = from_env();
        assert!(
            matches!(&error, EngineConfigError::InvalidApproval { variable, text, .. }
                if variable == "IDEM_TOOL_SEND_REFUND_APPROVAL" && text == bad),
            "{bad:?}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!(
                "IDEM_TOOL_SEND_REFUND_APPROVAL holds \"{bad}\", which is not an approval setting"
            )),
            "{message}"
        );
        assert!(
            message.contains("write `required` (approval required, each approval valid 1h), `off` (no approval), or how long an approval is valid"),
            "{message}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::env::set_var(
            "IDEM_TOOL_SEND_REFUND_APPROVAL",
            std::ffi::OsStr::from_bytes(b"re\xffquired"),
        );
        assert!(
            matches!(from_env(), EngineConfigError::InvalidApproval { reason, .. } if reason.contains("not valid UTF-8"))
        );
    }
    std::env::set_var("IDEM_TOOL_SEND_REFUND_APPROVAL", "0s");
    let error = from_env();
    assert_eq!(
        error,
        EngineConfigError::ZeroDuration {
            tool: "SEND_REFUND".into(),
            setting: Setting::Approval,
            variable: Some("IDEM_TOOL_SEND_REFUND_APPROVAL".into()),
        }
    );
    assert!(
        error
            .to_string()
            .contains("(from the environment variable IDEM_TOOL_SEND_REFUND_APPROVAL) is zero"),
        "{error}"
    );
    clear();
    std::env::set_var("IDEM_TOOL_SEND_REFUND_APPROVE", "required");
    let error = from_env();
    assert_eq!(
        error,
        EngineConfigError::UnknownSetting {
            variable: "IDEM_TOOL_SEND_REFUND_APPROVE".into()
        }
    );
    assert!(
        error
            .to_string()
            .contains("<SETTING> is TTL, LEASE, WAIT, HEARTBEAT or APPROVAL"),
        "{error}"
    );
    clear();
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TIMEOUT", "5s");
    let error = from_env();
    assert_eq!(
        error,
        EngineConfigError::UnknownSetting {
            variable: "IDEM_TOOL_SEND_REFUND_TIMEOUT".into()
        }
    );
    assert!(
        error.to_string().contains("IDEM_TOOL_SEND_REFUND_TIMEOUT"),
        "{error}"
    );
    clear();
    std::env::set_var("IDEM_TOOL_SEND_REFUND_TTL", "30s");
    std::env::set_var("IDEM_TOOL_SEND_REFUND_LEASE", "1m");
    assert!(matches!(
        from_env(),
        EngineConfigError::TtlShorterThanLease { tool, .. } if tool == "SEND_REFUND"
    ));
    clear();
    std::env::set_var("IDEM_TOOL_SEND_REFUND_LEASE", "1m");
    std::env::set_var("IDEM_TOOL_SEND_REFUND_HEARTBEAT", "1m");
    assert!(matches!(
        from_env(),
        EngineConfigError::HeartbeatNotShorterThanLease { .. }
    ));
    clear();

    // Read once: the default engine keeps what it read first.
    let again = idem_runtime::default_engine().unwrap();
    assert_eq!(
        again.tool_settings("send_refund").ttl,
        Some(Duration::from_secs(48 * 3600))
    );
}
