//! Retry a side-effecting AI-agent tool call without repeating the side effect.
//!
//! An agent calls `send_refund`, the call times out, the agent tries again. A timeout is
//! an unknown: the refund may never have started, may have failed, or may have gone
//! through with the answer lost. Refusing to retry turns a possible duplicate into a
//! certain failure; retrying blindly refunds twice. `idem` makes the retry safe the way
//! payment APIs do with an `Idempotency-Key`: every attempt of one intent derives the same
//! key, the first attempt's outcome is saved under it, and every later attempt gets that
//! outcome back without running the side effect again.
//!
//! # One attribute
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use idem_agent::{idempotent, CallContext, CallStatus, ToolError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! pub struct Refund {
//!     pub id: String,
//!     pub amount_cents: u64,
//! }
//!
//! static REFUNDS_SENT: AtomicUsize = AtomicUsize::new(0);
//!
//! /// Refunds an order (the side effect).
//! #[idempotent]
//! pub async fn send_refund(order: &str, amount_cents: u64) -> Result<Refund, ToolError> {
//!     // The call's key, to forward as the payment API's `Idempotency-Key`.
//!     let key = idem_agent::current_key().expect("inside an #[idempotent] body");
//!     REFUNDS_SENT.fetch_add(1, Ordering::SeqCst);
//!     Ok(Refund { id: format!("re_{}", key.prefix(8)), amount_cents })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! // Keys are scoped to a conversation by default: say which one.
//! let ctx = CallContext::new().with_conversation("conv_42");
//!
//! let first = ctx.run(send_refund("ord_7", 500)).await?;
//! assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
//!
//! // The agent retries after a timeout: same arguments, same conversation, same key.
//! let retry = ctx.run(send_refund("ord_7", 500)).await?;
//! let outcome = ctx.last_outcome().unwrap();
//! assert_eq!(outcome.status, CallStatus::Replayed);
//! assert_eq!(retry, first, "the retry gets the first refund back");
//! assert_eq!(REFUNDS_SENT.load(Ordering::SeqCst), 1, "and no second refund was sent");
//! # Ok(())
//! # }
//! ```
//!
//! The tool keeps its signature. Replays are success-shaped: the agent is told the refund
//! worked, and the call's [`CallRecord`] (from [`CallContext::last_outcome`]) says it was
//! replayed, with the key and timestamps. A saved `Err` is replayed too, unless the tool
//! marks it retryable ([`ToolError::retryable`]: the effect did not happen, run again).
//!
//! [`#[idempotent]`](idempotent) documents every option: `scope` (`"conversation"`,
//! `"global"`, `"call"` or your own), `ttl`, `lease`, `wait`, `heartbeat` (how often a
//! running call renews its lease, L1; a third of the lease by default), `on_cancel`
//! (`"hold"`, the default, or `"release"`: what a cancelled or panicked body leaves, U4),
//! `on_unknown` (`"hold"`, the default: an unknown outcome is held for a person's decision,
//! `idem resolve`, U2; or `"rerun"`: at least once, re-run after the lease lapses, U2a),
//! `reconcile` (the fn asked whether the effect of a run whose outcome is unknown happened,
//! U3), `name`, `skip(…)`, `key(…)`, `store`, `dispatch`, `audit` and `require_approval`
//! (a person approves each key before its body runs, A1; approvals valid 1 h, or as long as
//! `require_approval = "30m"` says), and what it checks at compile time: an argument that
//! cannot be part of a key, or a return type that cannot be saved, is an error at that type.
//! Durations are humantime strings applied in whole milliseconds.
//!
//! # Sync tools, choosing the key, an explicit context
//!
//! ```
//! use idem_agent::{idempotent, CallContext, CallStatus, Error, ToolError};
//!
//! /// `order` identifies the charge; `amount_cents` must match on a retry;
//! /// `requested_at` differs between retries and stays out of both.
//! #[idempotent(key(order), skip(requested_at))]
//! fn charge(ctx: &CallContext, order: String, amount_cents: u64, requested_at: u64) -> Result<u64, ToolError> {
//!     let _ = (ctx, requested_at);
//!     Ok(amount_cents)
//! }
//!
//! let ctx = CallContext::new().with_conversation("conv_42");
//! assert_eq!(charge(&ctx, "ord_7".into(), 500, 1_000), Ok(500));
//! assert_eq!(charge(&ctx, "ord_7".into(), 500, 2_000), Ok(500));
//! assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
//!
//! // Same key, other amount: refused, and the first charge's record is untouched.
//! let other = charge(&ctx, "ord_7".into(), 900, 3_000);
//! assert!(matches!(other, Err(ToolError::Idem(Error::Mismatch { .. }))));
//!
//! // No conversation in force: an error before the body runs, never a shared key.
//! let nowhere = CallContext::new();
//! assert!(matches!(
//!     charge(&nowhere, "ord_8".into(), 500, 0),
//!     Err(ToolError::Idem(Error::MissingScope { .. }))
//! ));
//! ```
//!
//! # Dispatching a model's tool calls
//!
//! Every free, non-generic tool also gets a companion of the same name whose `tool()` is
//! the tool as a [`dispatch::Tool`], taking the model's JSON arguments:
//!
//! ```
//! use idem_agent::{idempotent, CallContext, CallStatus, ToolError};
//! use serde_json::json;
//!
//! #[idempotent]
//! async fn send_refund(order: &str, amount_cents: u64) -> Result<String, ToolError> {
//!     Ok(format!("refunded {amount_cents} on {order}"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let tool = send_refund::tool();
//! let ctx = CallContext::new().with_conversation("conv_42");
//! let arguments = json!({"order": "ord_7", "amount_cents": 500});
//! let first = tool.call(arguments.clone(), ctx.clone()).await;
//! let retry = tool.call(arguments, ctx.clone()).await;
//! assert_eq!(first.result, retry.result);
//! assert_eq!(retry.record.unwrap().status, CallStatus::Replayed);
//! # }
//! ```
//!
//! # Long calls and unknown outcomes
//!
//! While a body runs, its lease is renewed every `heartbeat` (a third of the lease by
//! default), so a slow body is never taken over while its process lives. When a run ends
//! without an outcome — its body returned [`ToolError::outcome_unknown`], was cancelled or
//! panicked after it began, or its process died — the effect may or may not have happened.
//! A tool with a reconcile function is asked first on the next call:
//!
//! ```
//! use idem_agent::{idempotent, AttemptInfo, CallContext, CallStatus, Reconciled, ToolError};
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! static CHARGED: AtomicBool = AtomicBool::new(false); // the bank's side
//!
//! /// Asks the bank whether a charge with this attempt's key went through.
//! async fn check_charge(card: &str, cents: &u64, attempt: &AttemptInfo) -> Reconciled<u64, ToolError> {
//!     let _ = (card, attempt.key()); // look the charge up by the key sent with it
//!     if CHARGED.load(Ordering::SeqCst) { Reconciled::Done(Ok(*cents)) } else { Reconciled::NotDone }
//! }
//!
//! #[idempotent(reconcile = check_charge, lease = "30s")]
//! async fn charge(card: &str, cents: u64) -> Result<u64, ToolError> {
//!     let _ = (card, idem_agent::current_attempt().unwrap().fence()); // forward key and fence
//!     CHARGED.store(true, Ordering::SeqCst);
//!     Err(ToolError::outcome_unknown("the bank timed out after the charge was sent"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let ctx = CallContext::new().with_conversation("conv_7");
//! assert!(ctx.run(charge("card_1", 900)).await.is_err()); // timed out: outcome unknown
//! assert_eq!(ctx.run(charge("card_1", 900)).await, Ok(900)); // reconciled: it went through
//! assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Reconciled);
//! # }
//! ```
//!
//! A tool without one answers [`Error::OutcomeUnknown`] until the held lease lapses, then
//! runs again with the same key. [`current_attempt`] gives the body the key, the fencing
//! token and whether it took over an unknown run (contract L1, F1, U1–U4).
//!
//! # Where outcomes are kept
//!
//! A call's [`Engine`] (a [`Store`] and a [`Clock`]) is, most specific first: the tool's own
//! `store = "…"`; the engine of the [`CallContext`] in force; the process-wide
//! [`default_engine`] — the one given to [`set_default_engine`], else the store the
//! `IDEM_STORE` environment variable names (read once), else an in-memory [`MemoryStore`].
//! Stores are named by [locators](store::locator): `memory`, `sqlite:PATH`, `redis://…`,
//! `postgres://…`, each backend behind the cargo feature of its name; a locator whose
//! feature is off is an error naming the feature. [`Engine::builder`] does the same in
//! code:
//!
//! ```
//! let engine = idem_agent::Engine::builder().store_locator("memory").build()?;
//! // or: let engine = idem_agent::Engine::from_env()?;   // IDEM_STORE, memory if unset
//! assert_eq!(engine.store().backend(), "memory");
//! # Ok::<(), idem_agent::EngineConfigError>(())
//! ```
//!
//! Tests use [`testkit::ManualClock`] to move time instead of sleeping, and
//! [`testkit::EffectLog`] to count real effects and the keys they carried.
//!
//! # The package and its features
//!
//! This crate is the package `idem-agent` on crates.io (the crate named `idem` there is
//! unrelated); code reaches it as `idem_agent`, or under the name a renamed dependency gives
//! it (`idem = { package = "idem-agent", … }`): the attribute follows (contract C5).
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `memory` | on | [`MemoryStore`] |
//! | `sqlite`, `postgres`, `redis` | off | the store of that name |
//! | `rmcp` | off | MCP servers built with rmcp 3.11: `#[idempotent]` above rmcp's `#[tool]`, and `integrations::rmcp::IdempotentServer` (contract section M) |
//! | `rig` | off | `integrations::rig::Idempotent<T>`, any rig-core 0.46 `Tool` made idempotent (section R) |
//! | `async-openai` | off | `Dispatcher::dispatch_chat_completion` / `dispatch_response` on async-openai 0.43's types (section O) |
//! | `genai` | off | `Dispatcher::dispatch_genai` on genai 0.7's types (section O) |
//!
//! The integrations live under [`integrations`], named after the crates they integrate,
//! and are not re-exported at the root: `use idem_agent::*;` then brings no module that
//! could shadow the `rmcp`, `async_openai` or `genai` crate itself.
#![forbid(unsafe_code)]

pub use idem_macros::idempotent;
pub use idem_runtime::*;

/// What the code generated by `#[idempotent]` uses; not a public API.
#[doc(hidden)]
pub use idem_runtime::macro_support as __private;

// The README's and the guide's code blocks, compiled and run as doctests so that what they
// show stays true. A chapter whose blocks need a cargo feature is compiled with it:
// `cargo test --doc -p idem-agent --features rmcp` (MCP servers), `--features sqlite`
// (stores), `--features rig,async-openai,genai --ignore-rust-version` (frameworks).

/// The README's code blocks.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guide's index (docs/guide/README.md).
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/README.md")]
struct GuideIndexDoctests;

/// docs/guide/keys-and-scopes.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/keys-and-scopes.md")]
struct GuideKeysAndScopesDoctests;

/// docs/guide/unknown-outcomes.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/unknown-outcomes.md")]
struct GuideUnknownOutcomesDoctests;

/// docs/guide/dispatch.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/dispatch.md")]
struct GuideDispatchDoctests;

/// docs/guide/mcp.md: needs the `rmcp` feature.
#[cfg(all(doctest, feature = "rmcp"))]
#[doc = include_str!("../docs/guide/mcp.md")]
struct GuideMcpDoctests;

/// docs/guide/frameworks.md: needs the `rig`, `async-openai` and `genai` features (and, on
/// the pinned toolchain, `--ignore-rust-version` for rig-core).
#[cfg(all(doctest, feature = "rig", feature = "async-openai", feature = "genai"))]
#[doc = include_str!("../docs/guide/frameworks.md")]
struct GuideFrameworksDoctests;

/// docs/guide/stores.md: needs the `sqlite` feature.
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../docs/guide/stores.md")]
struct GuideStoresDoctests;

/// docs/guide/operating.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/operating.md")]
struct GuideOperatingDoctests;

/// docs/guide/settings.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/settings.md")]
struct GuideSettingsDoctests;

/// docs/guide/performance.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/performance.md")]
struct GuidePerformanceDoctests;

/// docs/guide/testing.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/testing.md")]
struct GuideTestingDoctests;
