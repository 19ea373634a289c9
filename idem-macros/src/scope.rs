//! The scope option (contract K7, K12): one scope name, or a composite of several joined by
//! `+`, checked at the literal.

use syn::LitStr;

use crate::typo::edit_distance;

/// The scope option (K7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScopeKind {
    Conversation,
    Global,
    Call,
    Named(String),
    /// `tenant+conversation`: two or more of `conversation` and named scopes (K7).
    Composite(Vec<ScopeKind>),
}

impl ScopeKind {
    /// The name as written: `conversation`, `tenant`, `tenant+conversation`.
    pub(crate) fn name(&self) -> String {
        match self {
            ScopeKind::Conversation => "conversation".to_owned(),
            ScopeKind::Global => "global".to_owned(),
            ScopeKind::Call => "call".to_owned(),
            ScopeKind::Named(name) => name.clone(),
            ScopeKind::Composite(parts) => parts
                .iter()
                .map(ScopeKind::name)
                .collect::<Vec<_>>()
                .join("+"),
        }
    }
}

pub(crate) const BUILTIN_SCOPES: &[&str] = &["conversation", "global", "call"];

/// One scope name, or a composite of several joined by `+` (K7): each part is a scope name
/// ([`parse_scope`]), `conversation` or user-named, each at most once.
pub(crate) fn parse_scope_option(lit: &LitStr) -> syn::Result<ScopeKind> {
    let text = lit.value();
    if !text.contains('+') {
        return parse_scope(lit);
    }
    let mut parts = Vec::new();
    for name in text.split('+') {
        let part = parse_scope(&LitStr::new(name, lit.span()))?;
        let refused = match part {
            ScopeKind::Global => Some("`global` has no value"),
            ScopeKind::Call => Some("`call` is keyed within its conversation already"),
            _ => None,
        };
        if let Some(why) = refused {
            return Err(syn::Error::new(
                lit.span(),
                format!("`{name}` cannot be part of a composite scope ({why}); compose `conversation` and scopes of your own, like \"tenant+conversation\""),
            ));
        }
        if parts.contains(&part) {
            return Err(syn::Error::new(
                lit.span(),
                format!("scope `{name}` is named twice in \"{text}\""),
            ));
        }
        parts.push(part);
    }
    Ok(ScopeKind::Composite(parts))
}

/// The built-in scope that `name` is probably a typo of (K12): one within two edits
/// (insertions, deletions, substitutions or swaps of two neighbours, ignoring ASCII case)
/// of `conversation`, `global` or `call`, without being it. A scope name of the user's own
/// must be further away than that from every built-in: short names near `call` (`all`,
/// `cell`, `cart`, `cat`) or `global` (`local`, `goal`) are rejected on purpose, since a
/// typo of a built-in would otherwise silently key the tool on a value nobody sets.
///
/// Applied to each scope name on its own, so that it applies to every part of a scope
/// written as several.
pub(crate) fn suggest_builtin(name: &str) -> Option<&'static str> {
    if BUILTIN_SCOPES.contains(&name) {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    BUILTIN_SCOPES
        .iter()
        .map(|builtin| (edit_distance(&lower, builtin), *builtin))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, builtin)| builtin)
}

/// `conversation`, `global`, `call`, or a user-named scope (`tenant`): letters, digits,
/// `_`, `-` and `.`, starting with a letter, more than two edits from every built-in
/// (K12).
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
    if let Some(builtin) = suggest_builtin(&text) {
        return Err(syn::Error::new(lit.span(), scope_typo(&text, builtin)));
    }
    Ok(ScopeKind::Named(text))
}

/// The error of a scope name `name` within two edits of the built-in `builtin` (K12).
fn scope_typo(name: &str, builtin: &str) -> String {
    format!(
        "unknown scope `{name}`: did you mean `{builtin}`? (a scope name of your own must differ from the built-in ones by more than two edits)"
    )
}
