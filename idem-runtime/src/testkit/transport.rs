//! Transports that fail on chosen attempts (T2).
//!
//! Two different failures, two types:
//! - [`LosingTransport`]: the request reaches the tool, the effect lands and the outcome
//!   is saved, and then the reply is lost: the caller sees a timeout. This is the case
//!   idempotency exists for: the retry must replay, not run again.
//! - [`FailBeforeEffectTransport`]: the request never reaches the tool. The easier case
//!   (nothing happened, running again is harmless); it does not replace the first.
//!
//! Both count and log every invocation ([`Invocation`]), with the key the attempt
//! carried.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use crate::dispatch::{
    InProcess, ToolReply, ToolRequest, Transport, TransportError, TransportFuture,
};
use crate::key::IdempotencyKey;

/// Which attempts a failing transport fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailOn {
    /// The first attempt of every call.
    FirstAttempt,
    /// Attempts with these numbers (from 1), of every call.
    AttemptNumbers(BTreeSet<u32>),
    /// These `(call id, attempt number)` pairs.
    Attempts(BTreeSet<(String, u32)>),
    /// Every attempt: the dispatcher gives up at its bound.
    Always,
}

impl FailOn {
    /// The given `(call id, attempt number)` pairs.
    pub fn attempts<'a>(pairs: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        FailOn::Attempts(
            pairs
                .into_iter()
                .map(|(id, n)| (id.to_owned(), n))
                .collect(),
        )
    }

    /// Whether attempt `attempt` of call `call_id` fails.
    pub fn matches(&self, call_id: &str, attempt: u32) -> bool {
        match self {
            FailOn::FirstAttempt => attempt == 1,
            FailOn::AttemptNumbers(numbers) => numbers.contains(&attempt),
            FailOn::Attempts(pairs) => pairs.contains(&(call_id.to_owned(), attempt)),
            FailOn::Always => true,
        }
    }
}

/// One attempt as a test transport saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The provider's id of the call.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Which attempt, from 1.
    pub attempt: u32,
    /// The key the attempt carried: the one in the tool's reply record (the key the store
    /// used), else the one on the call's attempt record (K9); `None` when the attempt
    /// never got as far as deriving one (or never reached the tool).
    pub key: Option<IdempotencyKey>,
    /// Whether the request reached the tool.
    pub reached_tool: bool,
    /// Whether the transport failed this attempt (lost the reply, or never sent it).
    pub failed: bool,
    /// The tool's reply, also when it was then lost; `None` when the tool was not reached
    /// or the inner transport failed.
    pub reply: Option<ToolReply>,
}

/// The shared, ordered log of a test transport (completion order).
#[derive(Debug, Clone, Default)]
struct InvocationLog(Arc<Mutex<Vec<Invocation>>>);

impl InvocationLog {
    fn push(&self, invocation: Invocation) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(invocation);
    }

    fn all(&self) -> Vec<Invocation> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A transport that lets chosen attempts run (the effect lands, the outcome is saved)
/// and then drops their reply and reports [`TransportError::Timeout`] (T2).
///
/// Clones share the log, so keep a clone to inspect after giving one to the dispatcher.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{parse_turns_str, Conversation, Dispatcher, RetryPolicy, Tool};
/// use idem_agent::testkit::{FailOn, LosingTransport};
/// use idem_agent::{prepare, Engine, ToolError, ToolSpec};
///
/// static SPEC: ToolSpec = ToolSpec::new("charge");
/// #[derive(serde::Deserialize)]
/// struct Args { cents: u64 }
/// let charge = Tool::from_async("charge", |a: Args, _ctx| async move {
///     prepare(&SPEC, None, |b| b.key("cents", &a.cents).map(drop))?
///         .run(async move { Ok::<_, ToolError>(format!("charged {}", a.cents)) })
///         .await
/// });
/// let transport = LosingTransport::new(FailOn::FirstAttempt);
/// let dispatcher = Dispatcher::builder()
///     .tool(charge)
///     .engine(Engine::in_memory())
///     .transport(transport.clone())
///     .retry(RetryPolicy::immediate(3))
///     .build()?;
/// let turns = parse_turns_str(r#"{"type":"function_call","call_id":"c1","name":"charge","arguments":"{\"cents\":500}"}"#)?;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let outcome = dispatcher.dispatch_turn(&turns[0], &Conversation::new("conv")).await;
/// let seen = transport.invocations();
/// assert_eq!(seen.len(), 2);                      // the retry happened
/// assert_eq!(seen[0].key, seen[1].key);           // both attempts carried one key
/// assert!(outcome.calls[0].is_ok());              // the agent was told success
/// # });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LosingTransport {
    inner: Arc<dyn Transport>,
    fail_on: FailOn,
    log: InvocationLog,
}

impl LosingTransport {
    /// Calls tools in process ([`InProcess`]) and loses the replies of `fail_on`.
    pub fn new(fail_on: FailOn) -> Self {
        Self::wrapping(InProcess, fail_on)
    }

    /// Sends through `inner` and loses the replies of `fail_on`.
    pub fn wrapping(inner: impl Transport, fail_on: FailOn) -> Self {
        LosingTransport {
            inner: Arc::new(inner),
            fail_on,
            log: InvocationLog::default(),
        }
    }

    /// Every invocation so far, in completion order.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.log.all()
    }

    /// How many times the transport was invoked.
    pub fn invocation_count(&self) -> usize {
        self.log.all().len()
    }

    /// How many replies it lost.
    pub fn lost_count(&self) -> usize {
        self.log.all().iter().filter(|i| i.failed).count()
    }
}

impl Transport for LosingTransport {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        let lose = self.fail_on.matches(&request.call_id, request.attempt);
        relay(&self.inner, request, &self.log, lose)
    }
}

/// A transport that fails chosen attempts *before* they reach the tool, with
/// [`TransportError::Unreachable`]: no effect, no key derived. The easy case; see
/// [`LosingTransport`] for the one idempotency is for.
#[derive(Debug, Clone)]
pub struct FailBeforeEffectTransport {
    inner: Arc<dyn Transport>,
    fail_on: FailOn,
    log: InvocationLog,
}

impl FailBeforeEffectTransport {
    /// Calls tools in process ([`InProcess`]) except on `fail_on`.
    pub fn new(fail_on: FailOn) -> Self {
        Self::wrapping(InProcess, fail_on)
    }

    /// Sends through `inner` except on `fail_on`.
    pub fn wrapping(inner: impl Transport, fail_on: FailOn) -> Self {
        FailBeforeEffectTransport {
            inner: Arc::new(inner),
            fail_on,
            log: InvocationLog::default(),
        }
    }

    /// Every invocation so far, in completion order.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.log.all()
    }

    /// How many times the transport was invoked.
    pub fn invocation_count(&self) -> usize {
        self.log.all().len()
    }
}

impl Transport for FailBeforeEffectTransport {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        let (call_id, tool, attempt) = (
            request.call_id.clone(),
            request.tool.name().to_owned(),
            request.attempt,
        );
        if self.fail_on.matches(&call_id, attempt) {
            let key = request
                .context
                .attempt()
                .and_then(|r| r.derived())
                .map(|d| d.key);
            self.log.push(Invocation {
                call_id: call_id.clone(),
                tool,
                attempt,
                key,
                reached_tool: false,
                failed: true,
                reply: None,
            });
            return Box::pin(std::future::ready(Err(TransportError::Unreachable {
                message: format!(
                    "FailBeforeEffectTransport refused call {call_id}, attempt {attempt}"
                ),
            })));
        }
        relay(&self.inner, request, &self.log, false)
    }
}

/// Sends `request` through `inner`, logs the invocation with the key the attempt
/// carried, and, when `lose`, drops the reply and reports a timeout instead.
fn relay(
    inner: &Arc<dyn Transport>,
    request: ToolRequest,
    log: &InvocationLog,
    lose: bool,
) -> TransportFuture {
    let (call_id, tool, attempt) = (
        request.call_id.clone(),
        request.tool.name().to_owned(),
        request.attempt,
    );
    let record = request.context.attempt().cloned();
    let reply = inner.invoke(request);
    let log = log.clone();
    Box::pin(async move {
        let outcome = reply.await;
        let reply = outcome.as_ref().ok().cloned();
        let key = reply
            .as_ref()
            .and_then(|r| r.record.as_ref())
            .map(|r| r.key.clone())
            .or_else(|| record.and_then(|r| r.derived()).map(|d| d.key));
        log.push(Invocation {
            call_id: call_id.clone(),
            tool,
            attempt,
            key,
            reached_tool: true,
            failed: lose,
            reply,
        });
        if lose {
            return Err(TransportError::Timeout {
                message: format!(
                    "LosingTransport dropped the reply of call {call_id}, attempt {attempt}"
                ),
            });
        }
        outcome
    })
}
