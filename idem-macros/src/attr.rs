//! The grammar of `#[idempotent(…)]`: options parsed into a typed value that keeps the
//! span of every token a later error may point at (contract C3, K6–K8, S8, L1, U2–U4, A1).
//!
//! ```text
//! options  := (option ("," option)* ","?)?
//! option   := "scope" "=" STRING | "ttl" "=" STRING | "lease" "=" STRING | "wait" "=" STRING
//!           | "heartbeat" "=" STRING | "on_cancel" "=" ("\"hold\"" | "\"release\"")
//!           | "on_unknown" "=" ("\"hold\"" | "\"rerun\"")
//!           | "reconcile" "=" PATH
//!           | "name" "=" STRING | "store" "=" STRING | "dispatch" "=" BOOL
//!           | "skip" "(" idents ")" | "key" "(" idents ")" | "audit"
//!           | "require_approval" ("=" STRING)?
//! ```
//!
//! A scope `STRING` is one scope name or several joined by `+`, outermost first
//! (`"tenant+conversation"`, K7).
//!
//! `require_approval` alone is a flag (approvals valid the runtime's
//! `ToolSpec::DEFAULT_APPROVAL_VALID_FOR`, 1 h); with a `STRING`, how long an approval is
//! valid (A1).
//!
//! `PATH` is an expression path naming a fn (`check_refund`, `Self::check_refund`,
//! `crate::bank::check_refund`), not a string.
//!
//! Syntax errors stop the parse (one error). Errors in the values (an unknown or duplicate
//! option, a bad duration or scope name, an argument named twice) are collected, so a user
//! sees all of them at once; whatever parsed is still returned for the error output.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitStr, Token};

use crate::scope::{parse_scope_option, ScopeKind};
use crate::typo::closest;

/// A value and the span of the token it was written as.
#[derive(Debug, Clone)]
pub(crate) struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

/// What happens to a claim whose body was cancelled (its future dropped) or panicked after
/// it began (U4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCancel {
    /// The outcome is unknown: what follows is [`OnUnknown`]'s choice.
    Hold,
    /// The claim is released at once: the next call runs the body again, at least once.
    Release,
}

/// What happens to an unknown outcome (U1) that no reconcile function settles (U2, U2a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnUnknown {
    /// Every call gets `OutcomeUnknown` until a person decides (`idem resolve`): at most
    /// once.
    Hold,
    /// Calls get `OutcomeUnknown` until the lease lapses, then the next call runs the body
    /// again: at least once.
    Rerun,
}

/// `skip(…)` or `key(…)`: argument names as written.
#[derive(Debug, Clone)]
pub(crate) struct ArgList {
    pub names: Vec<Ident>,
}

/// Everything `#[idempotent(…)]` can say; `None` means "not written" (the default applies).
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    pub scope: Option<Spanned<ScopeKind>>,
    pub ttl: Option<Spanned<Duration>>,
    pub lease: Option<Spanned<Duration>>,
    pub wait: Option<Spanned<Duration>>,
    /// L1: the time between two renewals of a running call's lease.
    pub heartbeat: Option<Spanned<Duration>>,
    /// U4: what a cancelled or panicked body leaves behind.
    pub on_cancel: Option<Spanned<OnCancel>>,
    /// U2, U2a: what happens to an unknown outcome that no reconcile function settles.
    pub on_unknown: Option<Spanned<OnUnknown>>,
    /// U3: the fn asked whether the effect of a call whose outcome is unknown (U1) happened.
    pub reconcile: Option<ExprPath>,
    pub name: Option<Spanned<String>>,
    pub skip: Option<ArgList>,
    pub key: Option<ArgList>,
    pub dispatch: Option<Spanned<bool>>,
    pub store: Option<StoreOption>,
    /// `audit`: records keep the canonical key arguments (P2).
    pub audit: Option<Span>,
    /// `require_approval` (A1): every key's first call waits for a person's approval. The
    /// value is how long an approval is valid: `None` for the flag alone (the runtime's
    /// default, 1 h), `Some` for `require_approval = "30m"`. The span is the literal's, or
    /// the option's for the flag.
    pub require_approval: Option<Spanned<Option<Duration>>>,
    /// `crate = "path"`: where the generated code finds the facade, instead of looking it
    /// up in the user's `Cargo.toml` (`facade.rs`).
    pub krate: Option<syn::Path>,
    /// The facade's path for this expansion: `krate`, else looked up (`facade.rs`). Set by
    /// `expand` after parsing.
    pub facade: TokenStream,
    /// Options written with a value that did not parse: relations involving them are not
    /// checked (their error is already reported; a default in their place could add a
    /// misleading one).
    pub invalid: Vec<String>,
}

/// `store = "…"`: the tool's own store locator, and the backend (cargo feature) it needs.
#[derive(Debug, Clone)]
pub(crate) struct StoreOption {
    pub locator: LitStr,
    pub backend: &'static str,
}

const OPTIONS: &[&str] = &[
    "scope",
    "ttl",
    "lease",
    "wait",
    "heartbeat",
    "on_cancel",
    "on_unknown",
    "reconcile",
    "name",
    "skip",
    "key",
    "dispatch",
    "store",
    "crate",
    "audit",
    "require_approval",
];

/// Parses the attribute's arguments. Returns what parsed, and the errors (combined) if
/// any.
pub(crate) fn parse(args: TokenStream) -> (Options, Option<syn::Error>) {
    let mut options = Options::default();
    let mut errors = Errors::default();
    let parser = |input: ParseStream| parse_options(input, &mut options, &mut errors);
    if let Err(error) = parser.parse2(args) {
        errors.push(error);
    }
    check_relations(&options, &mut errors);
    (options, errors.finish())
}

#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn at(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn count(&self) -> usize {
        self.0.as_ref().map_or(0, |e| e.clone().into_iter().count())
    }

    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.0
    }
}

fn parse_options(
    input: ParseStream,
    options: &mut Options,
    errors: &mut Errors,
) -> syn::Result<()> {
    // Options written so far, valid or not: a repeat is a duplicate either way.
    let mut seen: Vec<String> = Vec::new();
    while !input.is_empty() {
        let option = input.call(Ident::parse_any)?;
        let option_name = option.unraw().to_string();
        let known = OPTIONS.contains(&option_name.as_str());
        let repeated = known && seen.contains(&option_name);
        if known {
            seen.push(option_name.clone());
        }
        match option_name.as_str() {
            "audit" => {
                if repeated {
                    errors.at(option.span(), duplicate(&option_name));
                } else {
                    options.audit = Some(option.span());
                }
            }
            "require_approval" => {
                // A flag, or a flag with a value: `require_approval = "30m"`.
                let value = if input.peek(Token![=]) {
                    Some(parse_value(input, &option)?)
                } else {
                    None
                };
                if repeated {
                    errors.at(option.span(), duplicate(&option_name));
                } else if let Some(value) = value {
                    if let Err(error) = set_value(options, &option_name, &value) {
                        options.invalid.push(option_name);
                        errors.push(error);
                    }
                } else {
                    options.require_approval = Some(Spanned {
                        value: None,
                        span: option.span(),
                    });
                }
            }
            "skip" | "key" => {
                let list = parse_arg_list(input, &option)?;
                if repeated {
                    errors.at(option.span(), duplicate(&option_name));
                } else {
                    let list = check_list(&option_name, list, errors);
                    if option_name == "skip" {
                        options.skip = Some(list);
                    } else {
                        options.key = Some(list);
                    }
                }
            }
            "scope" | "ttl" | "lease" | "wait" | "heartbeat" | "on_cancel" | "on_unknown"
            | "reconcile" | "name" | "dispatch" | "store" | "crate" => {
                let value = parse_value(input, &option)?;
                if repeated {
                    errors.at(option.span(), duplicate(&option_name));
                } else if let Err(error) = set_value(options, &option_name, &value) {
                    options.invalid.push(option_name);
                    errors.push(error);
                }
            }
            _ => {
                errors.at(option.span(), unknown_option(&option_name));
                skip_value(input)?;
            }
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(())
}

fn duplicate(option: &str) -> String {
    format!("duplicate #[idempotent] option `{option}`: it is already set in this attribute")
}

fn unknown_option(option: &str) -> String {
    let mut message = format!(
        "unknown #[idempotent] option `{option}`; the options are: {}",
        OPTIONS.join(", ")
    );
    if let Some(close) = closest(option, OPTIONS) {
        message.push_str(&format!("; did you mean `{close}`?"));
    }
    message
}

/// `= value` after an option name; the value is an expression so that a missing quote
/// (`ttl = 24h`) gets a helpful message rather than a parse error.
fn parse_value(input: ParseStream, option: &Ident) -> syn::Result<Expr> {
    if !input.peek(Token![=]) {
        let example = match option.to_string().as_str() {
            "scope" => "scope = \"global\"",
            "ttl" => "ttl = \"24h\"",
            "lease" => "lease = \"60s\"",
            "wait" => "wait = \"5s\"",
            "heartbeat" => "heartbeat = \"20s\"",
            "on_cancel" => "on_cancel = \"hold\"",
            "on_unknown" => "on_unknown = \"hold\"",
            "reconcile" => "reconcile = check_refund",
            "name" => "name = \"send_refund\"",
            "store" => "store = \"sqlite:agent.db\"",
            "crate" => "crate = \"idem_agent\"",
            _ => "dispatch = false",
        };
        return Err(syn::Error::new(
            option.span(),
            format!("#[idempotent] option `{option}` takes a value: `{example}`"),
        ));
    }
    input.parse::<Token![=]>()?;
    input.parse::<Expr>()
}

fn parse_arg_list(input: ParseStream, option: &Ident) -> syn::Result<ArgList> {
    if !input.peek(syn::token::Paren) {
        return Err(syn::Error::new(
            option.span(),
            format!(
                "#[idempotent] option `{option}` takes a list of argument names: `{option}(a, b)`"
            ),
        ));
    }
    let content;
    syn::parenthesized!(content in input);
    let names = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, Ident::parse_any)?;
    Ok(ArgList {
        names: names.into_iter().collect(),
    })
}

/// Consumes the value of an unknown option, whatever its form, so parsing can go on.
fn skip_value(input: ParseStream) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        input.parse::<Expr>()?;
    } else if input.peek(syn::token::Paren) {
        let _content;
        syn::parenthesized!(_content in input);
        let _: TokenStream = _content.parse()?;
    }
    Ok(())
}

/// Reports an argument named twice in one list, and drops the repeat.
fn check_list(option: &str, list: ArgList, errors: &mut Errors) -> ArgList {
    let mut names: Vec<Ident> = Vec::with_capacity(list.names.len());
    for name in list.names {
        if names.iter().any(|n| n.unraw() == name.unraw()) {
            errors.at(
                name.span(),
                format!("`{}` is named twice in `{option}(…)`", name.unraw()),
            );
        } else {
            names.push(name);
        }
    }
    ArgList { names }
}

fn string_literal(value: &Expr, option: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) if !lit.suffix().is_empty() && DURATIONS.contains(&option) => Err(syn::Error::new(
            lit.span(),
            format!(
                "write the duration of `{option}` as a string: `{option} = \"{}\"`",
                lit
            ),
        )),
        other => Err(syn::Error::new_spanned(
            other,
            format!(
                "#[idempotent] option `{option}` takes a string literal: `{option} = {example}`"
            ),
        )),
    }
}

/// The options whose value is a duration.
const DURATIONS: &[&str] = &["ttl", "lease", "wait", "heartbeat", "require_approval"];

fn set_value(options: &mut Options, option: &str, value: &Expr) -> syn::Result<()> {
    match option {
        "scope" => {
            let lit = string_literal(value, option, "\"conversation\"")?;
            options.scope = Some(Spanned {
                value: parse_scope_option(&lit)?,
                span: lit.span(),
            });
        }
        "ttl" | "lease" | "wait" | "heartbeat" => {
            let example = match option {
                "ttl" => "\"24h\"",
                "lease" => "\"60s\"",
                "heartbeat" => "\"20s\"",
                _ => "\"5s\"",
            };
            let lit = string_literal(value, option, example)?;
            let duration = Spanned {
                value: parse_duration(&lit, option)?,
                span: lit.span(),
            };
            match option {
                "ttl" => options.ttl = Some(duration),
                "lease" => options.lease = Some(duration),
                "heartbeat" => options.heartbeat = Some(duration),
                _ => options.wait = Some(duration),
            }
        }
        "require_approval" => {
            if let Expr::Lit(ExprLit {
                lit: Lit::Bool(lit),
                ..
            }) = value
            {
                return Err(syn::Error::new(
                    lit.span,
                    format!(
                        "`require_approval` is a flag, not `{}`: write `require_approval` for approvals valid 1h (the default), or `require_approval = \"30m\"` for how long an approval lets a call run; leave it out for no approval",
                        lit.value
                    ),
                ));
            }
            let lit = string_literal(value, option, "\"30m\"")?;
            options.require_approval = Some(Spanned {
                value: Some(parse_duration(&lit, option)?),
                span: lit.span(),
            });
        }
        "on_cancel" => {
            let lit = string_literal(value, option, "\"hold\"")?;
            options.on_cancel = Some(Spanned {
                value: parse_on_cancel(&lit)?,
                span: lit.span(),
            });
        }
        "on_unknown" => {
            let lit = string_literal(value, option, "\"hold\"")?;
            options.on_unknown = Some(Spanned {
                value: parse_on_unknown(&lit)?,
                span: lit.span(),
            });
        }
        "reconcile" => options.reconcile = Some(reconcile_path(value)?),
        "store" => {
            let lit = string_literal(value, option, "\"sqlite:agent.db\"")?;
            options.store = Some(StoreOption {
                backend: store_backend(&lit)?,
                locator: lit,
            });
        }
        "crate" => {
            let lit = string_literal(value, option, "\"idem_agent\"")?;
            options.krate = Some(lit.parse::<syn::Path>().map_err(|_| {
                syn::Error::new(
                    lit.span(),
                    format!(
                        "invalid `crate` value \"{}\": write the path under which the `idem-agent` crate is reachable here, like \"idem_agent\", \"::my_idem\" or \"crate::reexports::idem\"",
                        lit.value()
                    ),
                )
            })?);
        }
        "name" => {
            let lit = string_literal(value, option, "\"send_refund\"")?;
            options.name = Some(Spanned {
                value: parse_tool_name(&lit)?,
                span: lit.span(),
            });
        }
        _ => match value {
            Expr::Lit(ExprLit {
                lit: Lit::Bool(lit),
                ..
            }) => {
                options.dispatch = Some(Spanned {
                    value: lit.value,
                    span: lit.span,
                });
            }
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "#[idempotent] option `dispatch` takes `true` or `false`: `dispatch = false` leaves out the companion `tool()`",
                ))
            }
        },
    }
    Ok(())
}

/// A duration written for humantime (`"24h"`, `"90s"`, `"1h 30m"`), in whole
/// milliseconds (S8: one time unit everywhere).
fn parse_duration(lit: &LitStr, option: &str) -> syn::Result<Duration> {
    let text = lit.value();
    let duration = humantime::parse_duration(text.trim()).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid duration \"{text}\" for `{option}`: {error}; write a number and a unit, like \"24h\", \"30m\", \"90s\", \"500ms\" or \"1h 30m\""
            ),
        )
    })?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(syn::Error::new(
            lit.span(),
            format!("`{option} = \"{text}\"` is not a whole number of milliseconds; idem measures time in milliseconds"),
        ));
    }
    if option == "ttl" && duration.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "`ttl` must be longer than zero: a zero TTL would replay nothing, so every retry would run the side effect again",
        ));
    }
    if option == "heartbeat" && duration.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "`heartbeat` must be longer than zero: it is the time between two renewals of a running call's lease; leave it out for the default, a third of the lease",
        ));
    }
    if option == "require_approval" && duration.is_zero() {
        return Err(syn::Error::new(
            lit.span(),
            "`require_approval` must be longer than zero: an approval valid for no time would let no call run; write `require_approval` alone for approvals valid 1h, or leave the option out for no approval",
        ));
    }
    Ok(duration)
}

/// `"hold"` or `"release"` (U4).
fn parse_on_cancel(lit: &LitStr) -> syn::Result<OnCancel> {
    let text = lit.value();
    match text.as_str() {
        "hold" => return Ok(OnCancel::Hold),
        "release" => return Ok(OnCancel::Release),
        _ => {}
    }
    let mut message = format!(
        "invalid `on_cancel` value \"{}\": use \"hold\" (the default: a call whose body was cancelled or panicked leaves its outcome unknown, and `on_unknown` decides what follows) or \"release\" (the claim is released at once and the next call runs the body again, so the effect happens at least once)",
        text.escape_default()
    );
    if let Some(value) = ["hold", "release"]
        .into_iter()
        .find(|v| v.eq_ignore_ascii_case(text.trim()))
    {
        message.push_str(&format!(
            "; the values are lower-case: did you mean `on_cancel = \"{value}\"`?"
        ));
    }
    Err(syn::Error::new(lit.span(), message))
}

/// `"hold"` or `"rerun"` (U2, U2a).
fn parse_on_unknown(lit: &LitStr) -> syn::Result<OnUnknown> {
    let text = lit.value();
    match text.as_str() {
        "hold" => return Ok(OnUnknown::Hold),
        "rerun" => return Ok(OnUnknown::Rerun),
        _ => {}
    }
    let mut message = format!(
        "invalid `on_unknown` value \"{}\": use \"hold\" (the default: a call whose outcome is unknown keeps its key held, every call getting `OutcomeUnknown`, until a person decides with `idem resolve`, so the effect happens at most once) or \"rerun\" (once the unknown call's lease lapses the next call runs the body again with the same key, so the effect happens at least once)",
        text.escape_default()
    );
    if let Some(value) = ["hold", "rerun"]
        .into_iter()
        .find(|v| v.eq_ignore_ascii_case(text.trim()))
    {
        message.push_str(&format!(
            "; the values are lower-case: did you mean `on_unknown = \"{value}\"`?"
        ));
    }
    Err(syn::Error::new(lit.span(), message))
}

/// `reconcile = some::path`: the path of a fn, as an expression the generated code calls
/// (U3).
fn reconcile_path(value: &Expr) -> syn::Result<ExprPath> {
    const SHAPE: &str = "#[idempotent] option `reconcile` takes the path of a fn, like `reconcile = check_refund` or `reconcile = Self::check_refund`";
    match value {
        Expr::Path(path) if path.attrs.is_empty() => Ok(path.clone()),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let text = lit.value();
            let unquoted = match syn::parse_str::<ExprPath>(text.trim()) {
                Ok(_) => text.trim(),
                Err(_) => "check_refund",
            };
            Err(syn::Error::new(
                lit.span(),
                format!("`reconcile` takes the path of a fn, not a string: write `reconcile = {unquoted}`, without quotes"),
            ))
        }
        Expr::Call(call) => Err(syn::Error::new_spanned(
            call,
            format!("{SHAPE}: name the fn without calling it; idem calls it with the tool's arguments, by reference, then the `&idem_agent::AttemptInfo`"),
        )),
        Expr::Field(_) | Expr::MethodCall(_) => Err(syn::Error::new_spanned(
            value,
            format!("{SHAPE}; for a method, write `Self::method`: idem passes the receiver first, as `&self`"),
        )),
        Expr::Closure(_) => Err(syn::Error::new_spanned(
            value,
            format!("{SHAPE}, not a closure: write the check as a fn and name it"),
        )),
        other => Err(syn::Error::new_spanned(other, SHAPE)),
    }
}

/// A tool name as the providers accept it (OpenAI, Anthropic, Gemini, MCP): 1 to 64
/// ASCII letters, digits, `_`, `-` and `.`.
pub(crate) fn parse_tool_name(lit: &LitStr) -> syn::Result<String> {
    let text = lit.value();
    let valid = !text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "invalid tool name \"{}\": use 1 to 64 ASCII letters, digits, `_`, `-` or `.` (what model providers accept as a tool name)",
                text.escape_default()
            ),
        ));
    }
    Ok(text)
}

/// Relations between options: an argument both skipped and keyed; a TTL shorter than
/// the lease (a record would expire while its call still runs).
fn check_relations(options: &Options, errors: &mut Errors) {
    if let (Some(skip), Some(key)) = (&options.skip, &options.key) {
        for name in &key.names {
            if skip.names.iter().any(|s| s.unraw() == name.unraw()) {
                errors.at(
                    name.span(),
                    format!(
                        "`{}` is in both `skip(…)` and `key(…)`: a skipped argument is left out of the key and the fingerprint, so it cannot identify the call",
                        name.unraw()
                    ),
                );
            }
        }
    }
    let invalid = |option: &str| options.invalid.iter().any(|o| o == option);
    if invalid("lease") {
        // Its error is reported; the default in its place would make up a relation.
        return;
    }
    let lease = options
        .lease
        .as_ref()
        .map_or(DEFAULT_LEASE, |lease| lease.value);
    let lease_text = match &options.lease {
        Some(_) => format!("{}", humantime::format_duration(lease)),
        None => format!("{}, the default", humantime::format_duration(lease)),
    };
    let ttl = options.ttl.as_ref().map_or(DEFAULT_TTL, |ttl| ttl.value);
    let at = match (&options.ttl, &options.lease) {
        (Some(ttl), _) => Some(ttl.span),
        (None, Some(lease)) => Some(lease.span),
        (None, None) => None,
    };
    if let (true, Some(span), false) = (ttl < lease, at, invalid("ttl")) {
        errors.at(
            span,
            format!(
                "the ttl ({}) is shorter than the lease ({}): a record could expire while its call still runs, and a retry would run the side effect again; make the ttl at least the lease",
                humantime::format_duration(ttl),
                humantime::format_duration(lease),
            ),
        );
    }
    // L1: a heartbeat renews the lease; renewals further apart than the lease let it lapse
    // while the call still runs.
    if let Some(heartbeat) = options.heartbeat.as_ref().filter(|h| h.value >= lease) {
        errors.at(
            heartbeat.span,
            format!(
                "the heartbeat ({}) is not shorter than the lease ({lease_text}): the lease would lapse between two renewals, and another caller could take the key over and run the side effect again while this call still runs; make the heartbeat shorter than the lease (leave it out for a third of the lease)",
                humantime::format_duration(heartbeat.value),
            ),
        );
    }
}

/// Mirror `idem_agent::ToolSpec::DEFAULT_TTL` (24 h) and `DEFAULT_LEASE` (60 s) for the
/// ttl/lease check; the generated code itself names the runtime's constants.
const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The backend a store locator names, by its scheme (the full syntax is checked by the
/// runtime's `StoreLocator`, which also reports a disabled cargo feature).
fn store_backend(lit: &LitStr) -> syn::Result<&'static str> {
    let text = lit.value();
    let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let backend = if text == "memory" {
        "memory"
    } else if let Some(path) = text.strip_prefix("sqlite:") {
        if path.is_empty() {
            return Err(syn::Error::new(
                lit.span(),
                "`store = \"sqlite:\"` names no file: write `store = \"sqlite:PATH\"`",
            ));
        }
        "sqlite"
    } else if text.starts_with("redis://") || text.starts_with("rediss://") {
        "redis"
    } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        "postgres"
    } else {
        return Err(syn::Error::new(
            lit.span(),
            "unknown store: expected `memory`, `sqlite:PATH`, `redis://…`, `rediss://…`, `postgres://…` or `postgresql://…`",
        ));
    };
    Ok(backend)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::{suggest_builtin, BUILTIN_SCOPES};
    use crate::typo::edit_distance;
    use quote::quote;

    fn ok(tokens: TokenStream) -> Options {
        let (options, error) = parse(tokens);
        if let Some(error) = error {
            panic!("unexpected error: {error}");
        }
        options
    }

    fn err(tokens: TokenStream) -> String {
        let (_, error) = parse(tokens);
        error
            .expect("an error")
            .into_iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    // pins K7, S8: every option parses into its typed value
    #[test]
    fn parses_every_option() {
        let options = ok(quote!(
            scope = "tenant",
            ttl = "1h 30m",
            lease = "0s",
            wait = "250ms",
            name = "refund.v2",
            skip(a, r#type),
            key(b),
            dispatch = false,
        ));
        assert_eq!(
            options.scope.unwrap().value,
            ScopeKind::Named("tenant".into())
        );
        assert_eq!(options.ttl.unwrap().value, Duration::from_secs(5400));
        assert_eq!(options.lease.unwrap().value, Duration::ZERO);
        assert_eq!(options.wait.unwrap().value, Duration::from_millis(250));
        assert_eq!(options.name.unwrap().value, "refund.v2");
        let skip: Vec<String> = options
            .skip
            .unwrap()
            .names
            .iter()
            .map(|n| n.unraw().to_string())
            .collect();
        assert_eq!(skip, ["a", "type"]);
        assert!(!options.dispatch.unwrap().value);
        assert!(ok(quote!()).scope.is_none());
        for (text, kind) in [
            ("conversation", ScopeKind::Conversation),
            ("global", ScopeKind::Global),
            ("call", ScopeKind::Call),
        ] {
            assert_eq!(ok(quote!(scope = #text)).scope.unwrap().value, kind);
        }
    }

    // pins C3: value errors are all collected, each with its own message
    #[test]
    fn reports_every_bad_option() {
        let message = err(quote!(
            tll = "1h",
            ttl = "soon",
            ttl = "1h",
            scope = "Global",
            name = ""
        ));
        assert!(
            message.contains("unknown #[idempotent] option `tll`"),
            "{message}"
        );
        assert!(message.contains("did you mean `ttl`?"), "{message}");
        assert!(message.contains("invalid duration \"soon\""), "{message}");
        assert!(
            message.contains("duplicate #[idempotent] option `ttl`"),
            "{message}"
        );
        assert!(
            message.contains("did you mean `scope = \"global\"`"),
            "{message}"
        );
        assert!(message.contains("invalid tool name \"\""), "{message}");
    }

    // pins S8: durations are whole milliseconds, the ttl is positive and covers the lease
    #[test]
    fn rejects_unusable_durations() {
        assert!(err(quote!(ttl = "0s")).contains("longer than zero"));
        assert!(err(quote!(wait = "1500us")).contains("whole number of milliseconds"));
        assert!(err(quote!(ttl = "30s")).contains("shorter than the lease"));
        assert!(err(quote!(lease = "25h")).contains("shorter than the lease"));
        assert!(err(quote!(ttl = 24h)).contains("as a string: `ttl = \"24h\"`"));
        ok(quote!(ttl = "30s", lease = "10s"));
    }

    // pins K8: an argument in both lists, or twice in one, is an error
    #[test]
    fn rejects_conflicting_argument_lists() {
        assert!(err(quote!(skip(a), key(a, b))).contains("in both `skip(…)` and `key(…)`"));
        assert!(err(quote!(skip(a, a))).contains("named twice"));
        assert!(err(quote!(skip(a), skip(b))).contains("duplicate"));
    }

    // pins L1, U2–U4: the four options of lease renewal and unknown outcomes parse into
    // their typed values; leaving them out leaves the runtime's defaults
    #[test]
    fn parses_the_outcome_options() {
        let options = ok(quote!(
            heartbeat = "20s",
            on_cancel = "release",
            on_unknown = "rerun",
            reconcile = Self::check_refund,
        ));
        let heartbeat = options.heartbeat.unwrap().value;
        assert_eq!(heartbeat, Duration::from_secs(20));
        assert_eq!(options.on_cancel.unwrap().value, OnCancel::Release);
        assert_eq!(options.on_unknown.unwrap().value, OnUnknown::Rerun);
        let path = options.reconcile.unwrap();
        assert_eq!(quote!(#path).to_string(), "Self :: check_refund");
        assert_eq!(
            ok(quote!(on_cancel = "hold")).on_cancel.unwrap().value,
            OnCancel::Hold
        );
        assert_eq!(
            ok(quote!(on_unknown = "hold")).on_unknown.unwrap().value,
            OnUnknown::Hold
        );
        for path in [
            quote!(check_refund),
            quote!(crate::bank::check_refund),
            quote!(<Self as Checks>::check),
            quote!(check::<u64>),
        ] {
            assert!(ok(quote!(reconcile = #path)).reconcile.is_some());
        }
        let defaults = ok(quote!());
        assert!(defaults.heartbeat.is_none());
        assert!(defaults.on_cancel.is_none());
        assert!(defaults.on_unknown.is_none());
        assert!(defaults.reconcile.is_none());
    }

    // pins L1, C3: the heartbeat is a positive whole number of milliseconds, shorter than the
    // lease written, else than the 60 s default
    #[test]
    fn heartbeat_is_shorter_than_the_lease() {
        assert_eq!(
            ok(quote!(heartbeat = "1500ms")).heartbeat.unwrap().value,
            Duration::from_millis(1500)
        );
        ok(quote!(heartbeat = "59s 999ms"));
        ok(quote!(lease = "5m", heartbeat = "2m"));
        ok(quote!(heartbeat = "2m", lease = "5m"));
        let message = err(quote!(heartbeat = "60s"));
        assert!(
            message.contains("the heartbeat (1m) is not shorter than the lease (1m, the default)"),
            "{message}"
        );
        assert!(message.contains("lapse between two renewals"), "{message}");
        let message = err(quote!(lease = "10s", heartbeat = "30s"));
        assert!(
            message.contains("the heartbeat (30s) is not shorter than the lease (10s)"),
            "{message}"
        );
        assert!(err(quote!(lease = "0s", heartbeat = "1ms")).contains("lease (0s)"));
        assert!(err(quote!(heartbeat = "0s")).contains("`heartbeat` must be longer than zero"));
        assert!(err(quote!(heartbeat = "0ms")).contains("longer than zero"));
        assert!(err(quote!(heartbeat = "1500us")).contains("whole number of milliseconds"));
        assert!(
            err(quote!(heartbeat = "often")).contains("invalid duration \"often\" for `heartbeat`")
        );
        assert!(err(quote!(heartbeat = 20s)).contains("`heartbeat = \"20s\"`"));
        assert!(
            err(quote!(heartbeat = 20)).contains("takes a string literal: `heartbeat = \"20s\"`")
        );
        // A lease that did not parse adds no made-up relation with the default.
        let message = err(quote!(lease = "soon", heartbeat = "90s"));
        assert!(!message.contains("heartbeat ("), "{message}");
    }

    // pins U4, C3: `on_cancel` is "hold" or "release", nothing else
    #[test]
    fn on_cancel_is_hold_or_release() {
        let message = err(quote!(on_cancel = "drop"));
        assert!(
            message.contains("invalid `on_cancel` value \"drop\": use \"hold\""),
            "{message}"
        );
        assert!(message.contains("or \"release\""), "{message}");
        assert!(!message.contains("did you mean"), "{message}");
        assert!(
            err(quote!(on_cancel = "Release")).contains("did you mean `on_cancel = \"release\"`?")
        );
        assert!(err(quote!(on_cancel = hold))
            .contains("takes a string literal: `on_cancel = \"hold\"`"));
        assert!(err(quote!(on_cancel)).contains("takes a value: `on_cancel = \"hold\"`"));
    }

    // pins U2, U2a, C3: `on_unknown` is "hold" or "rerun", nothing else
    #[test]
    fn on_unknown_is_hold_or_rerun() {
        let message = err(quote!(on_unknown = "retry"));
        assert!(
            message.contains("invalid `on_unknown` value \"retry\": use \"hold\""),
            "{message}"
        );
        assert!(message.contains("`idem resolve`"), "{message}");
        assert!(message.contains("or \"rerun\""), "{message}");
        assert!(message.contains("at least once"), "{message}");
        assert!(!message.contains("did you mean"), "{message}");
        // `on_cancel`'s values are not `on_unknown`'s
        assert!(err(quote!(on_unknown = "release")).contains("invalid `on_unknown` value"));
        assert!(
            err(quote!(on_unknown = "Rerun")).contains("did you mean `on_unknown = \"rerun\"`?")
        );
        assert!(
            err(quote!(on_unknown = " HOLD ")).contains("did you mean `on_unknown = \"hold\"`?")
        );
        assert!(err(quote!(on_unknown = rerun))
            .contains("takes a string literal: `on_unknown = \"hold\"`"));
        assert!(err(quote!(on_unknown)).contains("takes a value: `on_unknown = \"hold\"`"));
        // the two options are independent (U2b): every pair parses
        for on_cancel in ["hold", "release"] {
            for on_unknown in ["hold", "rerun"] {
                ok(quote!(on_cancel = #on_cancel, on_unknown = #on_unknown));
            }
        }
    }

    // pins U3, C3: `reconcile` names a fn by its path, never as a string or a call
    #[test]
    fn reconcile_is_a_path() {
        let message = err(quote!(reconcile = "check_refund"));
        assert!(
            message.contains("not a string: write `reconcile = check_refund`, without quotes"),
            "{message}"
        );
        assert!(err(quote!(reconcile = "Self::check")).contains("write `reconcile = Self::check`"));
        assert!(err(quote!(reconcile = "not a path")).contains("write `reconcile = check_refund`"));
        assert!(err(quote!(reconcile = check_refund())).contains("name the fn without calling it"));
        assert!(err(quote!(reconcile = self.check)).contains("write `Self::method`"));
        assert!(err(quote!(reconcile = |a| a)).contains("not a closure"));
        assert!(err(quote!(reconcile = 3)).contains("takes the path of a fn"));
        assert!(err(quote!(reconcile)).contains("takes a value: `reconcile = check_refund`"));
    }

    // pins C3: the new options are duplicates like the others, and typos of them are
    // suggested
    #[test]
    fn new_options_are_checked_like_the_others() {
        for tokens in [
            quote!(heartbeat = "10s", heartbeat = "20s"),
            quote!(on_cancel = "hold", on_cancel = "release"),
            quote!(on_unknown = "hold", on_unknown = "rerun"),
            quote!(reconcile = a, reconcile = b),
            // a repeat is a duplicate even when the first value was bad
            quote!(on_cancel = "x", on_cancel = "hold"),
            quote!(on_unknown = "x", on_unknown = "hold"),
        ] {
            let message = err(tokens);
            assert!(
                message.contains("duplicate #[idempotent] option"),
                "{message}"
            );
        }
        let (options, _) = parse(quote!(reconcile = a, reconcile = b));
        let first = options.reconcile.unwrap();
        assert_eq!(quote!(#first).to_string(), "a");
        for (typo, option) in [
            ("heartbeats", "heartbeat"),
            ("hearbeat", "heartbeat"),
            ("oncancel", "on_cancel"),
            ("on_cancle", "on_cancel"),
            ("onunknown", "on_unknown"),
            ("on_unkown", "on_unknown"),
            ("reconcil", "reconcile"),
            ("reconcle", "reconcile"),
        ] {
            let typo = Ident::new(typo, Span::call_site());
            let message = err(quote!(#typo = "x"));
            assert!(
                message.contains(&format!("did you mean `{option}`?")),
                "{message}"
            );
            assert!(
                message.contains("heartbeat, on_cancel, on_unknown, reconcile"),
                "the option list names the new options: {message}"
            );
        }
    }

    // pins A1, C3: `require_approval` alone is a flag (the runtime's default validity);
    // `require_approval = "…"` is how long an approval is valid, a humantime duration in
    // whole milliseconds, longer than zero; leaving it out requires no approval
    #[test]
    fn require_approval_is_a_flag_or_a_duration() {
        let flag = ok(quote!(require_approval)).require_approval.unwrap();
        assert_eq!(flag.value, None, "the flag keeps the runtime's default");
        let options = ok(quote!(require_approval = "30m", audit));
        assert_eq!(
            options.require_approval.unwrap().value,
            Some(Duration::from_secs(30 * 60))
        );
        assert!(options.audit.is_some());
        assert_eq!(
            ok(quote!(key(order), require_approval = "1h 30m", ttl = "48h"))
                .require_approval
                .unwrap()
                .value,
            Some(Duration::from_secs(90 * 60))
        );
        assert_eq!(
            ok(quote!(require_approval = " 1500ms "))
                .require_approval
                .unwrap()
                .value,
            Some(Duration::from_millis(1500))
        );
        assert!(ok(quote!()).require_approval.is_none());
        assert!(ok(quote!(require_approval,)).require_approval.is_some());
        assert!(ok(quote!(r#require_approval)).require_approval.is_some());

        let message = err(quote!(require_approval = "0s"));
        assert!(
            message.contains("`require_approval` must be longer than zero"),
            "{message}"
        );
        assert!(
            message.contains("leave the option out for no approval"),
            "{message}"
        );
        assert!(err(quote!(require_approval = "0ms")).contains("longer than zero"));
        assert!(err(quote!(require_approval = "1500us")).contains("whole number of milliseconds"));
        let message = err(quote!(require_approval = "soon"));
        assert!(
            message.contains("invalid duration \"soon\" for `require_approval`"),
            "{message}"
        );
        assert!(err(quote!(require_approval = 30m)).contains(
            "write the duration of `require_approval` as a string: `require_approval = \"30m\"`"
        ));
        assert!(err(quote!(require_approval = 30))
            .contains("takes a string literal: `require_approval = \"30m\"`"));
        for flag in [quote!(true), quote!(false)] {
            let message = err(quote!(require_approval = #flag));
            assert!(
                message.contains("`require_approval` is a flag, not `"),
                "{message}"
            );
            assert!(
                message.contains("`require_approval = \"30m\"`"),
                "{message}"
            );
        }
        // a value that did not parse is recorded as such, and leaves no requirement
        let (options, _) = parse(quote!(require_approval = "soon"));
        assert!(options.require_approval.is_none());
        assert_eq!(options.invalid, ["require_approval"]);
    }

    // pins A1, C3: `require_approval` is a duplicate like the other options, whether
    // written as a flag or with a value, and typos of it are suggested
    #[test]
    fn require_approval_is_checked_like_the_others() {
        for tokens in [
            quote!(require_approval, require_approval),
            quote!(require_approval, require_approval = "30m"),
            quote!(require_approval = "30m", require_approval),
            quote!(require_approval = "x", require_approval = "1h"),
        ] {
            let message = err(tokens);
            assert!(
                message.contains("duplicate #[idempotent] option `require_approval`"),
                "{message}"
            );
        }
        let (options, _) = parse(quote!(require_approval = "2h", require_approval = "1h"));
        assert_eq!(
            options.require_approval.unwrap().value,
            Some(Duration::from_secs(7200)),
            "the first value stays"
        );
        for typo in [
            "require_aproval",
            "requires_approval",
            "require_approvals",
            "requireapproval",
            "require_approva",
            "reqiure_approval",
        ] {
            let typo = Ident::new(typo, Span::call_site());
            for tokens in [quote!(#typo), quote!(#typo = "30m")] {
                let message = err(tokens);
                assert!(
                    message.contains("did you mean `require_approval`?"),
                    "{message}"
                );
                assert!(
                    message.contains("audit, require_approval"),
                    "the option list names it: {message}"
                );
            }
        }
    }

    // pins K12: a scope name within two edits of a built-in one is an error suggesting it
    #[test]
    fn scope_typos_suggest_the_builtin() {
        for (typo, builtin) in [
            ("conversaton", "conversation"),
            ("conversaiton", "conversation"),
            ("converstaion", "conversation"),
            ("conversations", "conversation"),
            ("convresaton", "conversation"),
            ("globl", "global"),
            ("glbal", "global"),
            ("local", "global"),
            ("goal", "global"),
            ("cal", "call"),
            ("calls", "call"),
            ("clal", "call"),
            ("all", "call"),
            ("cell", "call"),
            ("cart", "call"),
            ("Conversaton", "conversation"),
        ] {
            assert_eq!(suggest_builtin(typo), Some(builtin), "{typo}");
            let message = err(quote!(scope = #typo));
            assert_eq!(
                message,
                format!("unknown scope `{typo}`: did you mean `{builtin}`? (a scope name of your own must differ from the built-in ones by more than two edits)"),
            );
        }
        for own in [
            "tenant",
            "user",
            "org",
            "team",
            "session",
            "thread",
            "workspace",
            "region",
            "customer",
            "callee_id",
            "globals.v2",
            "conv",
        ] {
            assert_eq!(suggest_builtin(own), None, "{own}");
            assert_eq!(
                ok(quote!(scope = #own)).scope.unwrap().value,
                ScopeKind::Named(own.to_owned())
            );
        }
        for builtin in BUILTIN_SCOPES {
            assert_eq!(suggest_builtin(builtin), None);
        }
        assert_eq!(edit_distance("ca", "ac"), 1);
        assert_eq!(edit_distance("", "call"), 4);
        assert_eq!(edit_distance("tenant", "call"), 5);
    }

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(closest("lese", OPTIONS), Some("lease"));
        assert_eq!(closest("timeout", OPTIONS), None);
    }
}
