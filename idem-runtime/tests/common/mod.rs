//! Helpers shared by the dispatch tests.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use serde_json::Value;

/// The folder of recorded provider transcripts (`examples/transcripts` at the workspace
/// root).
pub fn transcripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/transcripts")
}

/// The path of the transcript `name` (without `.json`).
pub fn transcript_path(name: &str) -> PathBuf {
    transcripts_dir().join(format!("{name}.json"))
}

/// The transcript `name` (without `.json`), parsed as JSON.
pub fn transcript(name: &str) -> Value {
    let path = transcript_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

pub mod tools {
    //! Tools with real, logged effects, written the way `#[idempotent]` expands them:
    //! `prepare(&SPEC, None, fill)?.run(body)` inside the tool's future.

    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use idem_runtime::dispatch::Tool;
    use idem_runtime::store::MemoryStore;
    use idem_runtime::testkit::{EffectLog, ManualClock};
    use idem_runtime::{prepare, Engine, Scope, ToolError, ToolSpec};
    use serde::Deserialize;
    use serde_json::{json, Map, Value};

    /// A fresh in-memory store with a manual clock (nothing in these tests waits on time).
    pub fn engine() -> Engine {
        Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new()))
    }

    /// A future that is pending once (waking itself) and then ready: lets the other calls
    /// of a turn run while a body is "in flight", so duplicates really meet in progress.
    pub struct YieldOnce(bool);

    pub fn yield_once() -> YieldOnce {
        YieldOnce(false)
    }

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// A spec for `name` with `scope`, for tests that need many tools (leaked: test-only).
    pub fn spec(name: &'static str, scope: Scope) -> &'static ToolSpec {
        Box::leak(Box::new(ToolSpec {
            scope,
            ..ToolSpec::new(name)
        }))
    }

    /// A tool keyed by its whole arguments object whose body logs one effect, yields once,
    /// and returns `{"tool": name, "args": arguments}`.
    pub fn logged(spec: &'static ToolSpec, log: &EffectLog) -> Tool {
        let log = log.clone();
        Tool::from_async(spec.name, move |args: Map<String, Value>, _ctx| {
            let log = log.clone();
            async move {
                prepare(spec, None, |b| b.key("args", &args).map(drop))?
                    .run(async move {
                        log.record(spec.name, Value::Object(args.clone()).to_string());
                        yield_once().await;
                        Ok::<_, ToolError>(json!({"tool": spec.name, "args": args}))
                    })
                    .await
            }
        })
    }

    pub static REFUND: ToolSpec = ToolSpec::new("send_refund");

    /// `send_refund` as a tool that requires a person's approval (A1), valid 10 minutes.
    pub static APPROVED_REFUND: ToolSpec = ToolSpec {
        approval: Some(std::time::Duration::from_secs(600)),
        ..ToolSpec::new("send_refund")
    };

    /// `send_refund`'s typed parameters.
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RefundArgs {
        pub order: u64,
        pub cents: u64,
    }

    /// `send_refund(order, cents)`: logs the refund and returns its id.
    pub fn send_refund(log: &EffectLog) -> Tool {
        refund_tool(&REFUND, log)
    }

    /// `send_refund` as [`send_refund`], requiring approval ([`APPROVED_REFUND`]).
    pub fn send_refund_with_approval(log: &EffectLog) -> Tool {
        refund_tool(&APPROVED_REFUND, log)
    }

    fn refund_tool(spec: &'static ToolSpec, log: &EffectLog) -> Tool {
        let log = log.clone();
        Tool::from_async("send_refund", move |a: RefundArgs, _ctx| {
            let log = log.clone();
            async move {
                prepare(spec, None, |b| {
                    b.key("order", &a.order)?.key("cents", &a.cents)?;
                    Ok(())
                })?
                .run(async move {
                    log.record(
                        "send_refund",
                        format!("order {} cents {}", a.order, a.cents),
                    );
                    Ok::<_, ToolError>(
                        json!({"refund_id": format!("re_{}", a.order), "cents": a.cents}),
                    )
                })
                .await
            }
        })
    }

    /// When the first dispatch of the replay-marker tests runs: 2026-12-01T20:33:33.123Z.
    pub const FIRST_RUN_MS: u64 = 1_796_157_213_123;
    /// [`FIRST_RUN_MS`] in RFC 3339, as a replay marker writes it.
    pub const FIRST_RUN: &str = "2026-12-01T20:33:33.123Z";

    /// A fresh in-memory store whose manual clock starts at [`FIRST_RUN_MS`].
    pub fn engine_at_first_run() -> (Engine, ManualClock) {
        let clock = ManualClock::starting_at(idem_runtime::Timestamp::from_millis(FIRST_RUN_MS));
        let engine = Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(clock.clone()));
        (engine, clock)
    }

    pub static GREET: ToolSpec = ToolSpec::new("greet");
    pub static CHARGE_CARD: ToolSpec = ToolSpec::new("charge_card");

    #[derive(Deserialize)]
    pub struct GreetArgs {
        pub name: String,
    }

    #[derive(Deserialize)]
    pub struct OrderArgs {
        pub order: u64,
    }

    /// `greet(name)`: a string value (sent to the model as text), one logged effect per run;
    /// the body yields once, so equal calls of one turn meet in progress.
    pub fn greet(log: &EffectLog) -> Tool {
        let log = log.clone();
        Tool::from_async("greet", move |a: GreetArgs, _ctx| {
            let log = log.clone();
            async move {
                prepare(&GREET, None, |b| b.key("name", &a.name).map(drop))?
                    .run(async move {
                        log.record("greet", a.name.clone());
                        yield_once().await;
                        Ok::<_, ToolError>(format!("hello {}", a.name))
                    })
                    .await
            }
        })
    }

    /// `charge_card(order)`: fails for good (not retryable: saved and replayed, S4).
    pub fn charge_card(log: &EffectLog) -> Tool {
        let log = log.clone();
        Tool::from_async("charge_card", move |a: OrderArgs, _ctx| {
            let log = log.clone();
            async move {
                prepare(&CHARGE_CARD, None, |b| b.key("order", &a.order).map(drop))?
                    .run(async move {
                        log.record("charge_card", a.order.to_string());
                        Err::<Value, _>(ToolError::failed("card declined"))
                    })
                    .await
            }
        })
    }
}

pub mod chat {
    //! OpenAI Chat Completions documents for dispatch tests, and the parallel wrapper (D7).

    use idem_runtime::dispatch::{parse_turns, Turn};
    use serde_json::{json, Value};

    /// The parallel wrapper's name (D7).
    pub const WRAPPER: &str = "multi_tool_use.parallel";

    /// A Chat Completions tool call.
    pub fn chat_call(id: &str, name: &str, arguments: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
    }

    /// A `tool_uses` entry calling `functions.<name>`.
    pub fn entry(name: &str, parameters: Value) -> Value {
        json!({"recipient_name": format!("functions.{name}"), "parameters": parameters})
    }

    /// A Chat Completions `multi_tool_use.parallel` call holding `entries`.
    pub fn chat_wrapper(id: &str, entries: Vec<Value>) -> Value {
        chat_call(id, WRAPPER, &json!({ "tool_uses": entries }).to_string())
    }

    /// An assistant message with `calls`.
    pub fn chat_message(calls: Vec<Value>) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }

    /// A Chat Completions response `id` holding `message`.
    pub fn chat_response(id: &str, message: Value) -> Value {
        json!({"id": id, "object": "chat.completion", "choices": [
            {"index": 0, "finish_reason": "tool_calls", "message": message}]})
    }

    /// The one turn of `document`.
    pub fn one_turn(document: &Value) -> Turn {
        let mut turns = parse_turns(document).unwrap();
        assert_eq!(turns.len(), 1, "{document}");
        turns.remove(0)
    }
}
