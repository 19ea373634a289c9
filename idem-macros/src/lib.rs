//! The `#[idempotent]` attribute of [`idem-agent`](https://docs.rs/idem-agent). Depend on `idem-agent`, which
//! re-exports it: the generated code finds it under the name your `Cargo.toml` gives it
//! (a renamed dependency too), or at `#[idempotent(crate = "path")]`.
//!
//! Layout: `attr` parses the attribute's options (`scope` the scope option, `typo` the
//! suggestions for misspelt names), `item` checks the fn and sorts its
//! arguments, `expand` writes the fn around the call protocol, `companion` writes the
//! dispatch companion.

#![forbid(unsafe_code)]

mod attr;
mod companion;
mod expand;
mod facade;
mod item;
mod rmcp;
mod scope;
mod typo;

use proc_macro::TokenStream;

/// Makes a side-effecting tool fn safe to retry: a repeated call with the same key does
/// not run the body again but returns the first call's saved outcome.
///
/// ```ignore
/// use idem_agent::{idempotent, ToolError};
///
/// #[idempotent(key(order), skip(requested_at), ttl = "24h")]
/// async fn send_refund(order: &str, amount_cents: u64, requested_at: u64) -> Result<Refund, ToolError> {
///     // Runs at most once per (conversation, order) within 24 hours.
///     bank.refund(order, amount_cents, idem_agent::current_key()).await
/// }
/// ```
///
/// Runnable examples are on the front page of the `idem-agent` crate (a proc-macro crate cannot
/// run its own attribute in doctests).
///
/// # What a call does
///
/// 1. Derives the call's idempotency key from the tool name, the scope's value (the
///    conversation id by default) and the canonical JSON of the key arguments; a scope
///    without a value in force is an `idem_agent::Error::MissingScope`, before the body runs.
/// 2. Claims the key in the store of the `CallContext` in force (or the default engine).
/// 3. Runs the body once, saves its `Ok` or `Err` outcome, and returns it; a later call
///    with the key, within the TTL, gets the saved outcome back without running the body.
///    Whether a call executed or replayed is on `ctx.last_outcome()`.
///
/// Errors of the idempotency layer itself come back through the tool's error type
/// (`From<idem_agent::Error>`), and are never saved.
///
/// # Options
///
/// | option | default | meaning |
/// |---|---|---|
/// | `scope = "conversation"` | `"conversation"` | Whose calls share keys: `"conversation"` (the conversation id of the call's `CallContext`), `"global"` (no scope value: everyone who shares the store), `"call"` (the provider's tool-call id: only retries of one tool call replay, for tools whose equal calls are distinct intents, like rolling a die), or a name of your own (`"tenant"`: the value set with `CallContext::with_scope("tenant", …)`). Own names are ASCII letters, digits, `_`, `-`, `.`, starting with a letter, and differ from every built-in name by more than two edits: a name within two (`conversaton`, `globl`, but also `local` or `cell`) is a compile error suggesting the built-in (K12). |
/// | `ttl = "24h"` | `"24h"` | How long a saved outcome is replayed, from the claim. |
/// | `lease = "60s"` | `"60s"` | How long a claim is held before a caller may take it over (when the owner died). `"0s"` means already lapsed. |
/// | `wait = "5s"` | `"5s"` | How long a concurrent duplicate waits for the owner's outcome before it gets a retryable `InProgress` error. |
/// | `heartbeat = "20s"` | a third of the lease | How often a running call renews its lease (L1), so that a body running longer than the lease keeps its claim and no caller takes it over. Longer than zero and shorter than the lease. |
/// | `on_cancel = "hold"` | `"hold"` | What a body leaves behind when it began and then was cancelled (its future dropped) or panicked (U4). `"hold"`: its outcome is unknown, and `on_unknown` decides what follows. `"release"`: the claim is released at once and the next call runs the body again: at least once, for effects that are harmless to repeat or deduplicated downstream by the forwarded key. |
/// | `on_unknown = "hold"` | `"hold"` | What happens to an unknown outcome that no reconcile function settles (U2, U2a). `"hold"`: held for a person's decision (`idem resolve`): every call gets a non-retryable `OutcomeUnknown` until then, so the effect happens at most once. `"rerun"`: at least once: calls get `OutcomeUnknown` until the lease of the unknown call lapses, then the next call runs the body again with the same key, for effects that are harmless to repeat or deduplicated downstream by the forwarded key or fence. |
/// | `reconcile = check_refund` | none | The fn that finds out whether the effect of a run whose outcome is unknown happened (U3), called instead of the body first: a path, not a string (`Self::check_refund` for an associated fn or method). Below. |
/// | `name = "…"` | the fn's name | The tool name, part of every key and the name a model calls. 1 to 64 ASCII letters, digits, `_`, `-`, `.`. |
/// | `skip(a, b)` | none | Arguments left out of the key and the fingerprint: timestamps, handles, anything that differs between retries of one intent. |
/// | `key(a, b)` | all arguments | The identity arguments. The other non-skipped arguments form the fingerprint only: a later call with the same key and another fingerprint is an `idem_agent::Error::Mismatch` and does not run. `key()` keys on the scope alone. |
/// | `store = "sqlite:agent.db"` | none | The tool's own store, as a store locator (`memory`, `sqlite:PATH`, `redis://…`, `postgres://…`; syntax in `idem_agent::store::locator`), opened on first use and shared by every tool naming the same locator. It wins over the call context's engine and the process default (the context's clock is still used). The scheme is checked at expansion; a backend whose cargo feature is off is a compile error naming the feature. |
/// | `dispatch = false` | `true` | Leaves out the dispatch companion (below). |
/// | `crate = "path"` | looked up | Where the generated code reaches the `idem-agent` facade. By default the attribute reads the `Cargo.toml` of the crate being compiled and uses the dependency's name there (`idem-agent = "0.1"` gives `idem_agent`; `idem = { package = "idem-agent", … }` gives `idem`; `workspace = true` is followed); this option overrides the look-up, for a crate that reaches the facade through a re-export (`crate = "my_platform::idem"`), as serde's `#[serde(crate = "…")]` does. |
/// | `audit` | off | Records also keep the canonical JSON of the key arguments (never the fingerprint-only ones), for `idem show` and `idem ls --json` (P2); off, records hold no arguments. |
/// | `require_approval`, `require_approval = "30m"` | off | A person approves each key before its body runs (A1–A6): the key's first call records a request and gets a non-retryable `idem_agent::Error::AwaitingApproval`; once a person approves it (`idem approve KEY`, `Engine::approve`) the next call runs the body once, while the approval is valid: the written duration, 1 h (`idem_agent::ToolSpec::DEFAULT_APPROVAL_VALID_FOR`) for the flag alone, or less if the approver says so. A denial (`idem deny KEY`) is saved and replayed as `idem_agent::Error::Denied`. Records keep every argument, fingerprint-only ones too, so the person sees what they approve. |
///
/// Durations (`ttl`, `lease`, `wait`, `heartbeat`, `require_approval = "…"`) are
/// [humantime](https://docs.rs/humantime) strings (`"90s"`, `"30m"`, `"1h 30m"`, `"7d"`,
/// `"500ms"`), parsed when the attribute expands and applied in whole milliseconds
/// (`"1500us"` is an error). The TTL must be positive and at least the lease; the heartbeat
/// positive and shorter than the lease written, else than the 60 s default: with renewals
/// further apart than the lease, the lease would lapse between two of them; an approval's
/// validity positive. All of these are defaults: an engine may override them at run time
/// per tool (`EngineBuilder::tool`, or the `IDEM_TOOL_<TOOL>_<SETTING>` environment
/// variables; approval is turned on or off with `ToolSettings::require_approval` /
/// `without_approval` or `IDEM_TOOL_<TOOL>_APPROVAL` = `required`, `off` or a duration;
/// contract E1, E2, see `idem_agent::settings`).
///
/// # Long calls and unknown outcomes
///
/// While the body runs, the call renews its claim's lease every `heartbeat` (L1), so a
/// body may run longer than the lease. A run can end without an outcome (U1): the body
/// returned an error marked outcome-unknown (`idem_agent::ToolError::outcome_unknown`), it was
/// cancelled (its future dropped) or panicked after it began (with `on_cancel = "hold"`,
/// U4), or its owner died and the lease lapsed. The effect may or may not have happened.
///
/// Without `reconcile`, a call that finds the key unknown gets a non-retryable
/// `idem_agent::Error::OutcomeUnknown`. With `on_unknown = "hold"` (the default, U2) every
/// call gets it until a person records what happened (`idem resolve`): the body never runs
/// again on its own. With `on_unknown = "rerun"` (U2a) calls get it until the claim's lease
/// lapses; then the next call runs the body again with the same key
/// (`idem_agent::AttemptInfo::is_takeover` tells the body).
///
/// With `reconcile = check_refund` (U3), such a call takes the key over at once and calls
/// `check_refund` instead of the body. It gets the receiver first for a method (as
/// `&Self`), then every parameter of the tool in order, each by shared reference (skipped
/// ones, pattern ones and a `&CallContext` too), then the attempt's `&idem_agent::AttemptInfo`
/// (the key, the fence, the earlier run), and returns an `idem_agent::Reconciled<T, E>` for the
/// tool's `Result<T, E>`, or is an `async fn` returning one (a sync tool may name an async
/// reconcile fn: its future is driven to completion). The parameters' borrows end before
/// the body runs.
///
/// (Outline; a runnable version is in the `idem-agent` crate's docs, "Unknown outcomes".)
///
/// ```text
/// #[idempotent(key(order), reconcile = check_refund)]
/// async fn send_refund(order: &str, amount: u64) -> Result<Refund, ToolError> { … }
///
/// async fn check_refund(order: &str, amount: &u64, attempt: &idem_agent::AttemptInfo)
///     -> idem_agent::Reconciled<Refund, ToolError>
/// {
///     match bank.find_refund(order, attempt.key()).await {
///         Ok(Some(refund)) => idem_agent::Reconciled::Done(Ok(refund)), // it happened: saved, replayed
///         Ok(None) => idem_agent::Reconciled::NotDone,                  // it did not: the body runs now
///         Err(_) => idem_agent::Reconciled::Unknown,                    // cannot tell: OutcomeUnknown
///     }
/// }
/// ```
///
/// Only a key whose outcome is unknown calls the reconcile fn: a first call runs the body
/// straight away, and a replay returns the saved outcome.
///
/// # What goes in the key
///
/// The key arguments form one JSON object whose members are named by the parameters'
/// identifiers (`r#type` is `type`), so reordering parameters does not change a key and
/// renaming one does. A pattern parameter (`(x, y): (i32, i32)`, `Point { x, y }: Point`)
/// is named `arg<index>`, its 0-based position among the parameters after the receiver;
/// `skip(…)` and `key(…)` name it that way too. Never in the key: the receiver (`self`,
/// `&self`, `&mut self`), and a `&CallContext` parameter (any type written
/// `&…::CallContext`), which is the call's context instead of the one in force.
///
/// # Requirements, checked at compile time
///
/// - Every key and fingerprint argument implements `serde::Serialize` (generic parameters
///   and `impl Trait` arguments included); otherwise an error at the argument's type
///   names it and suggests `skip(…)`.
/// - The fn returns `Result<T, E>` with `T: Serialize + DeserializeOwned` and
///   `E: idem_agent::IdempotentError` (`idem_agent::ToolError` is ready-made); otherwise an error at
///   the return type says which part is missing.
/// - The options are well formed: an unknown or repeated option, a bad duration or scope
///   or tool name, a heartbeat not shorter than the lease, a `require_approval` of zero
///   or of `true`/`false` (it is a flag), an `on_cancel` other than `"hold"` or
///   `"release"`, an `on_unknown` other than `"hold"` or `"rerun"`, a `reconcile` that is
///   not a path, and a `skip`/`key` name that is not an argument are
///   errors at the offending token. The fn is then still emitted unchanged, so its callers
///   get no secondary errors.
/// - A reconcile fn that does not exist is rustc's "cannot find function" at its path; one
///   whose parameters or return type do not fit is an error at its path, saying what it
///   should take and return.
/// - It goes on a fn with a body: not on a struct or other item, a `const fn`, an
///   `extern` fn, or a variadic fn.
///
/// Supported: sync and async fns, free or methods (`&self`, `&mut self`, `self`), in
/// trait impls too; `&str`, `&[T]`, `&T`, `Option<&T>`, `mut x: T`, pattern, generic and
/// `impl Serialize` arguments. The fn keeps its signature, attributes and docs. In the
/// body, `return` and `?` work as before, and `idem_agent::current_key()` gives the call's key
/// (to forward as a payment API's `Idempotency-Key`, for example). An async tool's future
/// is `Send` whenever its body's is.
///
/// # The dispatch companion
///
/// For a free fn that is not generic over types or consts and has no `impl Trait`
/// argument, the attribute also declares, in the type namespace, a struct with the fn's
/// name and visibility, so that registering the tool with a dispatcher is one line:
///
/// ```ignore
/// let tool: idem_agent::dispatch::Tool = send_refund::tool();
/// ```
///
/// `tool()` deserializes a call's JSON arguments object into the parameters' owned forms
/// (`&str` → `String`, `&[T]` → `Vec<T>`, `&T` → `T`, `Option<&T>` → `Option<T>`; a
/// pattern parameter is the member `arg<index>`), calls the fn with references where it
/// takes them, and so derives the same key as a direct call. A missing member reads as
/// `null` (`None` for an `Option`); an unknown member, a missing required one or a value of
/// the wrong type is a `BadArguments` reply and the tool does not run. A `&CallContext`
/// parameter receives the call's context.
///
/// Skipped arguments are read from the JSON arguments too. Write `dispatch = false` for a
/// tool with an argument a model cannot send (a database handle), an async tool whose
/// future is not `Send`, a tool whose error type is not `Display`, and an associated fn
/// without receiver whose signature does not mention `Self` (it looks like a free fn, and a
/// struct cannot be declared in an impl block); then build its tool with
/// `idem_agent::dispatch::Tool::from_async` or `from_sync`, capturing what it needs.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}
