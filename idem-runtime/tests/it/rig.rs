//! The rig integration (`integrations::rig`, contract section R), driven through rig's own
//! types: a model's `ToolCall` message dispatched to a registered handler
//! (`ErasedHandler` over `ToolAdapter`, with the run's `ToolContext` as rig-agent passes
//! it), and direct typed calls of the `Tool` trait.
//!
//! Run: `cargo test -p idem-runtime --features rig --ignore-rust-version --test it rig::`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::integrations::rig::{Conversation, Idempotent, IdempotentToolError, Outcome};
use idem_runtime::{prepare, CallContext, CallStatus, Engine, Error, Scope, ToolError, ToolSpec};
use rig_core::effect::{Answered, EffectKind};
use rig_core::message::{CallId, ToolCall, ToolFunction, ToolName};
use rig_core::serve::adapters::ToolAdapter;
use rig_core::serve::{serve_inline_with, ErasedHandler};
use rig_core::tool::{
    tool_definition, PublishedContext, Tool, ToolContext, ToolErrorKind, ToolExecutionError,
    ToolResult,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Refund {
    refund_id: String,
    amount_cents: u64,
}

#[derive(Debug, thiserror::Error)]
enum BankError {
    #[error("card declined: {0}")]
    Declined(String),
    #[error("bank rate limited")]
    RateLimited,
    #[error("bank timed out after the request was sent")]
    TimedOut,
}

/// A rig tool that counts its executions and records the idem key each one ran under.
#[derive(Clone, Default)]
struct SendRefund {
    runs: Arc<AtomicUsize>,
    keys: Arc<Mutex<Vec<Option<String>>>>,
}

impl SendRefund {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

impl Tool for SendRefund {
    const NAME: &'static str = "send_refund";
    type Args = RefundArgs;
    type Output = Refund;
    type Error = BankError;

    fn description(&self) -> String {
        "Refunds an order".into()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "amount_cents": {"type": "integer"},
                "note": {"type": "string"}
            },
            "required": ["order_id", "amount_cents"]
        })
    }

    fn map_error(&self, error: BankError) -> ToolExecutionError {
        match error {
            BankError::Declined(_) => ToolExecutionError::permission_denied(error.to_string()),
            BankError::RateLimited => ToolExecutionError::rate_limited(error.to_string()),
            BankError::TimedOut => ToolExecutionError::timeout(error.to_string()),
        }
    }

    async fn call(
        &self,
        _context: &mut ToolContext,
        args: RefundArgs,
    ) -> Result<Refund, BankError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        self.keys
            .lock()
            .unwrap()
            .push(idem_runtime::current_key().map(|k| k.to_string()));
        match args.order_id.as_str() {
            "declined" => Err(BankError::Declined("insufficient funds".into())),
            "busy" => Err(BankError::RateLimited),
            "slow" => Err(BankError::TimedOut),
            _ => Ok(Refund {
                refund_id: format!("re_{run}"),
                amount_cents: args.amount_cents,
            }),
        }
    }
}

/// A model's tool call, as rig decodes it from a provider response.
fn tool_call(id: &str, args: Value) -> ToolCall {
    let name = ToolName::new("send_refund").unwrap();
    ToolCall::new(CallId::from_wire(id), ToolFunction::new(name, args))
}

/// Dispatches `call` to `handler` as rig-agent does: the effect carries the name and the
/// arguments' JSON text; the run's `ToolContext` travels beside it, and what the tool
/// published comes back in a `PublishedContext`.
async fn dispatch(
    handler: &ErasedHandler,
    call: &ToolCall,
    context: &ToolContext,
) -> (ToolResult, Option<Outcome>) {
    let kind = EffectKind::ToolCall {
        name: call.function.name.to_string(),
        args: call.function.arguments_value().to_string(),
    };
    let published = PublishedContext::new();
    let answered = serve_inline_with(
        handler,
        kind,
        vec![
            Arc::new(context.for_dispatch()),
            published.clone() as Arc<dyn std::any::Any + Send + Sync>,
        ],
    )
    .await
    .expect("the tool handler answers");
    let Answered::ToolResult { result } = answered else {
        panic!("a tool call answers a tool result");
    };
    let outcome = published
        .take()
        .and_then(|context| context.result::<Outcome>().unwrap());
    (result, outcome)
}

/// A handler over the wrapped tool, and a run context in conversation `conversation` with
/// its own in-memory engine (attached as a `CallContext` scope; R3 step 1).
fn setup(wrapped: Idempotent<SendRefund>, conversation: &str) -> (ErasedHandler, ToolContext) {
    let engine = CallContext::new().with_engine(Engine::in_memory());
    let mut context = ToolContext::new().with_scope(Arc::new(engine));
    context.insert(Conversation::new(conversation)).unwrap();
    (ErasedHandler::new(ToolAdapter::new(wrapped)), context)
}

fn output(result: &ToolResult) -> Value {
    result
        .output()
        .as_json()
        .cloned()
        .unwrap_or_else(|| panic!("a JSON output, got {result:?}"))
}

// pins R1, R6: a ToolCall dispatched twice in one conversation runs the tool once; the retry
// gets the same output, and the published outcome says executed, then replayed (S12)
#[tokio::test]
async fn same_call_twice_in_one_conversation_runs_once() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_1");
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let (first, first_outcome) = dispatch(&handler, &call, &context).await;
    // The model retries with a new provider call id: the same intent.
    let retry = tool_call("call_2", json!({"amount_cents": 500, "order_id": "ord_7"}));
    let (second, second_outcome) = dispatch(&handler, &retry, &context).await;
    assert_eq!(tool.runs(), 1);
    assert!(first.is_success() && second.is_success());
    assert_eq!(
        output(&first),
        json!({"refund_id": "re_1", "amount_cents": 500})
    );
    assert_eq!(output(&second), output(&first));
    let (first_outcome, second_outcome) = (first_outcome.unwrap().0, second_outcome.unwrap().0);
    assert_eq!(first_outcome.status, CallStatus::Executed);
    assert_eq!(second_outcome.status, CallStatus::Replayed);
    assert_eq!(first_outcome.key, second_outcome.key);
    // K10: the tool ran with the call's key in force.
    assert_eq!(
        tool.keys.lock().unwrap().as_slice(),
        &[Some(first_outcome.key.to_string())]
    );
}

// pins R1: other arguments are another intent: a new execution
#[tokio::test]
async fn other_arguments_run_again() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_1");
    let a = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let b = tool_call("call_2", json!({"order_id": "ord_7", "amount_cents": 501}));
    let (first, _) = dispatch(&handler, &a, &context).await;
    let (second, _) = dispatch(&handler, &b, &context).await;
    assert_eq!(tool.runs(), 2);
    assert_eq!(output(&first)["refund_id"], "re_1");
    assert_eq!(output(&second)["refund_id"], "re_2");
}

// pins R3, K7: the same call in another conversation is another intent: a new execution
#[tokio::test]
async fn another_conversation_runs_again() {
    let tool = SendRefund::default();
    let (handler, mut context) = setup(Idempotent::new(tool.clone()), "conv_1");
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let (_, first) = dispatch(&handler, &call, &context).await;
    context.insert(Conversation::new("conv_2")).unwrap();
    let (second, outcome) = dispatch(&handler, &call, &context).await;
    assert_eq!(tool.runs(), 2);
    assert_eq!(output(&second)["refund_id"], "re_2");
    assert_ne!(first.unwrap().0.key, outcome.unwrap().0.key);
}

// pins R2, K1, K8: the key is the one an `#[idempotent]` fn with the arguments' members as
// parameters derives (the attribute adds each parameter to an ArgsBuilder by name)
#[tokio::test]
async fn key_equals_the_attribute_key_of_the_same_call() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_k");
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let (_, outcome) = dispatch(&handler, &call, &context).await;
    static SPEC: ToolSpec = ToolSpec::new("send_refund");
    let ctx = CallContext::new().with_conversation("conv_k");
    let attribute = prepare(&SPEC, Some(&ctx), |args| {
        args.key("order_id", "ord_7")?;
        args.key("amount_cents", &500u64)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(&outcome.unwrap().0.key, attribute.key());
}

// pins R4, S4: a tool's final error is saved and replayed: the tool runs once, both
// callers get the same error, as rig normalized it (kind, message)
#[tokio::test]
async fn an_error_outcome_is_replayed() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_e");
    let call = tool_call(
        "call_1",
        json!({"order_id": "declined", "amount_cents": 500}),
    );
    let (first, first_outcome) = dispatch(&handler, &call, &context).await;
    let (second, second_outcome) = dispatch(&handler, &call, &context).await;
    assert_eq!(tool.runs(), 1);
    for result in [&first, &second] {
        let error = result.error().expect("an error result");
        assert_eq!(error.kind(), ToolErrorKind::PermissionDenied);
        assert_eq!(error.message(), "card declined: insufficient funds");
    }
    assert_eq!(first_outcome.unwrap().0.status, CallStatus::Executed);
    assert_eq!(second_outcome.unwrap().0.status, CallStatus::Replayed);
}

// pins R4, S4: an error rig calls retryable (rate limited: the effect did not happen) is
// not saved; the next call runs the tool again with the same key
#[tokio::test]
async fn a_retryable_error_is_not_saved() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_r");
    let call = tool_call("call_1", json!({"order_id": "busy", "amount_cents": 500}));
    let (first, _) = dispatch(&handler, &call, &context).await;
    let (second, _) = dispatch(&handler, &call, &context).await;
    assert_eq!(tool.runs(), 2);
    assert!(first.is_error_kind(ToolErrorKind::RateLimited));
    assert!(second.is_error_kind(ToolErrorKind::RateLimited));
    let keys = tool.keys.lock().unwrap();
    assert_eq!(keys[0], keys[1], "both runs carried the same key");
}

// pins R4, U1, U2: a timeout says nothing of whether the effect happened: the key is held
// as outcome unknown, and the next call gets `OutcomeUnknown` without running the tool
#[tokio::test]
async fn a_timeout_leaves_the_outcome_unknown() {
    let tool = SendRefund::default();
    let (handler, context) = setup(Idempotent::new(tool.clone()), "conv_t");
    let call = tool_call("call_1", json!({"order_id": "slow", "amount_cents": 500}));
    let (first, _) = dispatch(&handler, &call, &context).await;
    assert!(first.is_error_kind(ToolErrorKind::Timeout));
    let (second, outcome) = dispatch(&handler, &call, &context).await;
    assert_eq!(tool.runs(), 1);
    let error = second.error().expect("an error result");
    assert_eq!(error.code(), Some("idem.outcome_unknown"));
    assert_eq!(error.retryable(), Some(false));
    assert!(outcome.is_none(), "no outcome: the layer answered");
}

// pins R3, K7: no conversation from the host → MissingScope as the tool's error, the tool
// does not run, nothing panics
#[tokio::test]
async fn no_conversation_is_missing_scope() {
    let tool = SendRefund::default();
    let handler = ErasedHandler::new(ToolAdapter::new(Idempotent::new(tool.clone())));
    let context = ToolContext::new().with_scope(Arc::new(
        CallContext::new().with_engine(Engine::in_memory()),
    ));
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let (result, outcome) = dispatch(&handler, &call, &context).await;
    assert_eq!(tool.runs(), 0);
    assert!(outcome.is_none());
    let error = result.error().expect("an error result");
    assert_eq!(error.code(), Some("idem.missing_scope"));
    assert!(
        error.message().starts_with(
            "tool `send_refund` is keyed by scope `conversation`, but no conversation value is in force for this call"
        ),
        "{}",
        error.message()
    );
    // It says where a rig host names the conversation.
    assert!(
        error
            .message()
            .contains("context.insert(Conversation::new(")
            && error.message().contains(".conversation("),
        "{}",
        error.message()
    );
    assert_eq!(error.retryable(), Some(false));
    // Typed: the layer's own error.
    let direct = Tool::call(
        &Idempotent::new(tool.clone()),
        &mut ToolContext::new(),
        serde_json::from_value(json!({"order_id": "ord_7", "amount_cents": 500})).unwrap(),
    )
    .await;
    assert!(matches!(
        direct,
        Err(IdempotentToolError::Idem(Error::MissingScope { .. }))
    ));
    assert_eq!(tool.runs(), 0);
}

// pins R3, R6: the CallContext in force while rig polls the tool is the host's context
// (`ctx.run(agent.prompt(…))`); the host sees what the call did on it (S12)
#[tokio::test]
async fn the_context_in_force_is_the_host_context() {
    let tool = SendRefund::default();
    let handler = ErasedHandler::new(ToolAdapter::new(Idempotent::new(tool.clone())));
    let ctx = CallContext::new()
        .with_engine(Engine::in_memory())
        .with_conversation("conv_in_force");
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let empty = ToolContext::new();
    ctx.run(dispatch(&handler, &call, &empty)).await;
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    ctx.run(dispatch(&handler, &call, &empty)).await;
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(tool.runs(), 1);
    // A Conversation in rig's ToolContext sets the conversation over the one in force.
    let mut other = ToolContext::new();
    other.insert(Conversation::new("conv_other")).unwrap();
    ctx.run(dispatch(&handler, &call, &other)).await;
    assert_eq!(tool.runs(), 2);
}

// pins R3: a wrapper given its own conversation uses it when the host gives none
#[tokio::test]
async fn the_wrapper_conversation_is_the_fallback() {
    let tool = SendRefund::default();
    let wrapped = Idempotent::new(tool.clone())
        .context(CallContext::new().with_engine(Engine::in_memory()))
        .conversation("conv_fixed");
    let handler = ErasedHandler::new(ToolAdapter::new(wrapped));
    let call = tool_call("call_1", json!({"order_id": "ord_7", "amount_cents": 500}));
    let (_, first) = dispatch(&handler, &call, &ToolContext::new()).await;
    let (_, second) = dispatch(&handler, &call, &ToolContext::new()).await;
    assert_eq!(tool.runs(), 1);
    assert_eq!(first.unwrap().0.status, CallStatus::Executed);
    assert_eq!(second.unwrap().0.status, CallStatus::Replayed);
}

// pins R2, K8, S9: with key(order_id), the amount is the fingerprint: the same order with
// another amount is a Mismatch and does not run; skip(note) leaves the note out of both
#[tokio::test]
async fn key_selection_and_mismatch() {
    let tool = SendRefund::default();
    let wrapped = Idempotent::new(tool.clone())
        .key(["order_id"])
        .skip(["note"]);
    let (handler, context) = setup(wrapped, "conv_m");
    let call = |args: Value| tool_call("call_1", args);
    let (first, _) = dispatch(
        &handler,
        &call(json!({"order_id": "ord_7", "amount_cents": 500, "note": "first"})),
        &context,
    )
    .await;
    let (noted, outcome) = dispatch(
        &handler,
        &call(json!({"order_id": "ord_7", "amount_cents": 500, "note": "retry"})),
        &context,
    )
    .await;
    assert_eq!(output(&noted), output(&first));
    assert_eq!(outcome.unwrap().0.status, CallStatus::Replayed);
    let (other, _) = dispatch(
        &handler,
        &call(json!({"order_id": "ord_7", "amount_cents": 900})),
        &context,
    )
    .await;
    assert_eq!(tool.runs(), 1);
    let error = other.error().expect("a mismatch");
    assert_eq!(error.code(), Some("idem.mismatch"));
    assert!(
        error.message().contains("different arguments"),
        "{}",
        error.message()
    );
}

// pins R5: settings that cannot work fail every call with a Config error naming them
#[tokio::test]
async fn bad_settings_are_config_errors() {
    let tool = SendRefund::default();
    let args = || -> RefundArgs {
        serde_json::from_value(json!({"order_id": "ord_7", "amount_cents": 500})).unwrap()
    };
    let mut context = ToolContext::new();
    context.insert(Conversation::new("conv_c")).unwrap();
    let typo = Idempotent::new(tool.clone()).key(["order"]);
    let error = Tool::call(&typo, &mut context, args()).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, IdempotentToolError::Config { .. }));
    assert!(
        text.contains("`order`") && text.contains("order_id"),
        "{text}"
    );
    let short = Idempotent::new(tool.clone()).ttl(Duration::from_secs(1));
    let error = Tool::call(&short, &mut context, args()).await.unwrap_err();
    assert!(
        error.to_string().contains("shorter than the lease"),
        "{error}"
    );
    assert_eq!(
        short.map_error(error).code(),
        Some("idem.config"),
        "rig sees the code"
    );
    assert_eq!(tool.runs(), 0);
}

// pins R1, R6: called directly through rig's typed `Tool` trait, a replay returns the typed
// value the first call returned
#[tokio::test]
async fn typed_call_replays_the_typed_output() {
    let tool = SendRefund::default();
    let wrapped =
        Idempotent::new(tool.clone()).context(CallContext::new().with_engine(Engine::in_memory()));
    let mut context = ToolContext::new();
    context.insert(Conversation::new("conv_typed")).unwrap();
    let args = RefundArgs {
        order_id: "ord_7".into(),
        amount_cents: 500,
        note: None,
    };
    let first = Tool::call(&wrapped, &mut context, args.clone())
        .await
        .unwrap();
    let retry = Tool::call(&wrapped, &mut context, args).await.unwrap();
    assert_eq!(first, retry);
    assert_eq!(tool.runs(), 1);
    let outcome = context.result::<Outcome>().unwrap().unwrap();
    assert_eq!(outcome.0.status, CallStatus::Replayed);
}

// pins R1: the wrapper is the same tool to rig: name, description, parameters, annotations
#[test]
fn the_wrapper_has_the_tool_definition() {
    let tool = SendRefund::default();
    let wrapped = Idempotent::new(tool.clone());
    assert_eq!(<Idempotent<SendRefund> as Tool>::NAME, "send_refund");
    assert_eq!(tool_definition(&wrapped), tool_definition(&tool));
}

// pins R2, K3: arguments with no canonical JSON (NaN) are an error before the tool runs
#[tokio::test]
async fn arguments_without_canonical_json_do_not_run() {
    #[derive(Clone)]
    struct Price(Arc<AtomicUsize>);
    #[derive(Serialize, Deserialize)]
    struct PriceArgs {
        price: f64,
    }
    impl Tool for Price {
        const NAME: &'static str = "set_price";
        type Args = PriceArgs;
        type Output = f64;
        type Error = ToolError;
        fn description(&self) -> String {
            "Sets a price".into()
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {"price": {"type": "number"}}})
        }
        async fn call(&self, _: &mut ToolContext, args: PriceArgs) -> Result<f64, ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(args.price)
        }
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let wrapped = Idempotent::new(Price(runs.clone()))
        .scope(Scope::Global)
        .context(CallContext::new().with_engine(Engine::in_memory()));
    let error = Tool::call(
        &wrapped,
        &mut ToolContext::new(),
        PriceArgs { price: f64::NAN },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, IdempotentToolError::Idem(Error::Canonical { .. })),
        "{error:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// pins R1, S2: the same call twice in one assistant turn, run concurrently (rig-agent polls a
// turn's calls together): one execution, both callers get its output
#[tokio::test]
async fn concurrent_duplicates_run_once() {
    #[derive(Clone, Default)]
    struct Slow(Arc<AtomicUsize>);
    impl Tool for Slow {
        const NAME: &'static str = "send_refund";
        type Args = RefundArgs;
        type Output = String;
        type Error = ToolError;
        fn description(&self) -> String {
            "Refunds an order, slowly".into()
        }
        fn parameters(&self) -> Value {
            SendRefund::default().parameters()
        }
        async fn call(&self, _: &mut ToolContext, args: RefundArgs) -> Result<String, ToolError> {
            let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(format!("refund #{run} of {}", args.order_id))
        }
    }
    let tool = Slow::default();
    let engine = CallContext::new().with_engine(Engine::in_memory());
    let mut context = ToolContext::new().with_scope(Arc::new(engine));
    context.insert(Conversation::new("conv_par")).unwrap();
    let handler = ErasedHandler::new(ToolAdapter::new(Idempotent::new(tool.clone())));
    let a = tool_call("call_a", json!({"order_id": "ord_7", "amount_cents": 500}));
    let b = tool_call("call_b", json!({"order_id": "ord_7", "amount_cents": 500}));
    let ((first, _), (second, _)) = tokio::join!(
        dispatch(&handler, &a, &context),
        dispatch(&handler, &b, &context)
    );
    assert_eq!(tool.0.load(Ordering::SeqCst), 1);
    assert_eq!(first.output().as_text(), Some("refund #1 of ord_7"));
    assert_eq!(second.output().as_text(), first.output().as_text());
}

/// A handler over the wrapped tool, the run context, and the engine behind it (to decide).
fn setup_with_engine(
    wrapped: Idempotent<SendRefund>,
    conversation: &str,
) -> (ErasedHandler, ToolContext, Engine) {
    let engine = Engine::in_memory();
    let scope = CallContext::new().with_engine(engine.clone());
    let mut context = ToolContext::new().with_scope(Arc::new(scope));
    context.insert(Conversation::new(conversation)).unwrap();
    (
        ErasedHandler::new(ToolAdapter::new(wrapped)),
        context,
        engine,
    )
}

/// The key of the one record awaiting approval.
async fn awaiting_key(engine: &Engine) -> idem_runtime::IdempotencyKey {
    let query = idem_runtime::store::ListQuery::new()
        .state(idem_runtime::store::StateFilter::AwaitingApproval);
    let page = engine
        .store()
        .list(&query, idem_runtime::Timestamp::from_millis(u64::MAX / 2))
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1, "{page:?}");
    page.records[0].key.clone()
}

// pins R5, A2, A4, A5, D3: a rig tool that requires approval answers the model
// `idem.awaiting_approval` (not retryable, the tool did not run, the text says to call again
// later with the same arguments); approved, the same call runs once and replays; denied,
// the model gets `idem.denied` with who and why
#[tokio::test]
async fn approvals_reach_the_model_as_their_own_codes() {
    let tool = SendRefund::default();
    let wrapped = Idempotent::new(tool.clone()).require_approval(Some(Duration::from_secs(600)));
    let (handler, context, engine) = setup_with_engine(wrapped, "conv_approval");
    let call = tool_call("call_1", json!({"order_id": "ord_9", "amount_cents": 900}));
    let (first, outcome) = dispatch(&handler, &call, &context).await;
    let error = first.error().expect("an error result");
    assert_eq!(error.code(), Some("idem.awaiting_approval"));
    assert_eq!(error.retryable(), Some(false));
    assert!(error.to_string().contains("same arguments"), "{error}");
    assert!(outcome.is_none());
    assert_eq!(tool.runs(), 0, "nothing ran before the approval");
    let key = awaiting_key(&engine).await;
    let ana = idem_runtime::approval::Approval::new("ana").unwrap();
    engine.approve(&key, &ana).await.unwrap();
    let (ran, _) = dispatch(&handler, &call, &context).await;
    let (replayed, outcome) = dispatch(&handler, &call, &context).await;
    assert!(ran.is_success() && replayed.is_success());
    assert_eq!(output(&ran), output(&replayed));
    assert_eq!(outcome.unwrap().0.status, CallStatus::Replayed);
    assert_eq!(tool.runs(), 1);

    let other = tool_call("call_2", json!({"order_id": "ord_10", "amount_cents": 900}));
    dispatch(&handler, &other, &context).await;
    let key = awaiting_key(&engine).await;
    let bo = idem_runtime::approval::Approval::new("bo")
        .unwrap()
        .note("not this customer");
    engine.deny(&key, &bo).await.unwrap();
    let (denied, _) = dispatch(&handler, &other, &context).await;
    let error = denied.error().expect("an error result");
    assert_eq!(error.code(), Some("idem.denied"));
    assert_eq!(error.retryable(), Some(false));
    assert!(error.to_string().contains("not this customer"), "{error}");
    assert_eq!(tool.runs(), 1, "a denied call never runs");
}
