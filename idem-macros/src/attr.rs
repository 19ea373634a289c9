//! The grammar of `#[idempotent(…)]`: options parsed into a typed value that keeps the
//! span of every token a later error may point at (contract C3, K6–K8, S8).
//!
//! ```text
//! options  := (option ("," option)* ","?)?
//! option   := "scope" "=" STRING | "ttl" "=" STRING | "lease" "=" STRING | "wait" "=" STRING
//!           | "name" "=" STRING | "store" "=" STRING | "dispatch" "=" BOOL
//!           | "skip" "(" idents ")" | "key" "(" idents ")"
//! ```
//!
//! Syntax errors stop the parse (one error). Errors in the values (an unknown or duplicate
//! option, a bad duration or scope name, an argument named twice) are collected, so a user
//! sees all of them at once; whatever parsed is still returned for the error output.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

/// A value and the span of the token it was written as.
#[derive(Debug, Clone)]
pub(crate) struct Spanned<T> {
    pub value: T,
    pub span: Span,
}

/// The scope option (K7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeKind {
    Conversation,
    Global,
    Call,
    Named(String),
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
    pub name: Option<Spanned<String>>,
    pub skip: Option<ArgList>,
    pub key: Option<ArgList>,
    pub dispatch: Option<Spanned<bool>>,
    pub store: Option<StoreOption>,
}

/// `store = "…"`: the tool's own store locator, and the backend (cargo feature) it needs.
#[derive(Debug, Clone)]
pub(crate) struct StoreOption {
    pub locator: LitStr,
    pub backend: &'static str,
}

const OPTIONS: &[&str] = &[
    "scope", "ttl", "lease", "wait", "name", "skip", "key", "dispatch", "store",
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
            "scope" | "ttl" | "lease" | "wait" | "name" | "dispatch" | "store" => {
                let value = parse_value(input, &option)?;
                if repeated {
                    errors.at(option.span(), duplicate(&option_name));
                } else if let Err(error) = set_value(options, &option_name, &value) {
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
            "name" => "name = \"send_refund\"",
            "store" => "store = \"sqlite:agent.db\"",
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
        }) if !lit.suffix().is_empty() => Err(syn::Error::new(
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

fn set_value(options: &mut Options, option: &str, value: &Expr) -> syn::Result<()> {
    match option {
        "scope" => {
            let lit = string_literal(value, option, "\"conversation\"")?;
            options.scope = Some(Spanned {
                value: parse_scope(&lit)?,
                span: lit.span(),
            });
        }
        "ttl" | "lease" | "wait" => {
            let example = match option {
                "ttl" => "\"24h\"",
                "lease" => "\"60s\"",
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
                _ => options.wait = Some(duration),
            }
        }
        "store" => {
            let lit = string_literal(value, option, "\"sqlite:agent.db\"")?;
            options.store = Some(StoreOption {
                backend: store_backend(&lit)?,
                locator: lit,
            });
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
    Ok(duration)
}

const BUILTIN_SCOPES: &[&str] = &["conversation", "global", "call"];

/// `conversation`, `global`, `call`, or a user-named scope (`tenant`): letters, digits,
/// `_`, `-` and `.`, starting with a letter.
fn parse_scope(lit: &LitStr) -> syn::Result<ScopeKind> {
    let text = lit.value();
    match text.as_str() {
        "conversation" => return Ok(ScopeKind::Conversation),
        "global" => return Ok(ScopeKind::Global),
        "call" => return Ok(ScopeKind::Call),
        _ => {}
    }
    if let Some(builtin) = BUILTIN_SCOPES
        .iter()
        .find(|b| b.eq_ignore_ascii_case(text.trim()))
    {
        return Err(syn::Error::new(
            lit.span(),
            format!("scope names are case-sensitive: did you mean `scope = \"{builtin}\"`?"),
        ));
    }
    let valid = text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "invalid scope name \"{}\": use \"conversation\" (the default), \"global\", \"call\", or a name of your own made of ASCII letters, digits, `_`, `-` and `.`, starting with a letter (like \"tenant\"), whose value is set with `CallContext::with_scope`",
                text.escape_default()
            ),
        ));
    }
    Ok(ScopeKind::Named(text))
}

/// A tool name as the providers accept it (OpenAI, Anthropic, Gemini, MCP): 1 to 64
/// ASCII letters, digits, `_`, `-` and `.`.
fn parse_tool_name(lit: &LitStr) -> syn::Result<String> {
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
    let ttl = options.ttl.as_ref().map_or(DEFAULT_TTL, |ttl| ttl.value);
    let lease = options
        .lease
        .as_ref()
        .map_or(DEFAULT_LEASE, |lease| lease.value);
    let at = match (&options.ttl, &options.lease) {
        (Some(ttl), _) => Some(ttl.span),
        (None, Some(lease)) => Some(lease.span),
        (None, None) => None,
    };
    if let (true, Some(span)) = (ttl < lease, at) {
        errors.at(
            span,
            format!(
                "the ttl ({}) is shorter than the lease ({}): a record could expire while its call still runs, and a retry would run the side effect again; make the ttl at least the lease",
                humantime::format_duration(ttl),
                humantime::format_duration(lease)
            ),
        );
    }
}

/// Mirror `idem::ToolSpec::DEFAULT_TTL` (24 h) and `DEFAULT_LEASE` (60 s) for the
/// ttl/lease check; the generated code itself names the runtime's constants.
const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= 2 && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

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

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(closest("lese", OPTIONS), Some("lease"));
        assert_eq!(closest("timeout", OPTIONS), None);
    }
}
