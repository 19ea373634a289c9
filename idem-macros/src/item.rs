//! What the attribute is on: checks that it is a fn the attribute supports, and sorts its
//! parameters into key, fingerprint, skipped and context arguments (contract K8, C3, C4).

use proc_macro2::Span;
use quote::format_ident;
use syn::ext::IdentExt;
use syn::spanned::Spanned as _;
use syn::visit::Visit;
use syn::{FnArg, Ident, Item, ItemFn, Pat, PatIdent, ReturnType, Type};

use crate::attr::{ArgList, Errors, Options};

/// How one argument takes part in the call's identity (K8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Part of the key.
    Key,
    /// Not part of the key; a later call with the same key and another value is a
    /// `Mismatch` (S9).
    Fingerprint,
    /// Left out of the key and the fingerprint.
    Skipped,
    /// The explicit `&CallContext`: passed to `prepare`, never part of the key.
    Context,
}

/// One non-receiver parameter of the tool fn.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    /// 0-based position among the non-receiver parameters.
    pub index: usize,
    /// The member name in the key object: the identifier, or `arg<index>` for a pattern.
    pub name: String,
    /// The variable the generated code reads: the user's identifier, or the fresh
    /// `arg<index>` a pattern argument is rebound to.
    pub binding: Ident,
    /// The user's pattern, when the parameter was rebound; destructured again at the top
    /// of the body.
    pub pattern: Option<Pat>,
    pub ty: Type,
    pub role: Role,
    /// The type mentions `impl Trait`: no turbofish check, a value-based one instead.
    pub impl_trait: bool,
}

/// The tool fn, its parameters sorted, and the (possibly rewritten) item to emit.
pub(crate) struct ToolFn {
    /// The fn with pattern parameters rebound to `arg<index>`; everything else unchanged.
    pub item: ItemFn,
    pub params: Vec<Param>,
    pub has_receiver: bool,
    /// The return type (the parser rejects a fn without one).
    pub output: Type,
}

/// The attribute only goes on fns: names the kind of item it was put on, at its keyword.
pub(crate) fn unsupported_item(item: &Item) -> syn::Error {
    let (what, span) = match item {
        Item::Struct(i) => ("a struct", i.struct_token.span),
        Item::Enum(i) => ("an enum", i.enum_token.span),
        Item::Union(i) => ("a union", i.union_token.span),
        Item::Const(i) => ("a const", i.const_token.span),
        Item::Static(i) => ("a static", i.static_token.span),
        Item::Impl(i) => ("an impl block", i.impl_token.span),
        Item::Trait(i) => ("a trait", i.trait_token.span),
        Item::Type(i) => ("a type alias", i.type_token.span),
        Item::Mod(i) => ("a module", i.mod_token.span),
        Item::Use(i) => ("a use declaration", i.use_token.span),
        Item::ForeignMod(i) => ("an extern block", i.abi.extern_token.span),
        Item::Macro(i) => ("a macro invocation", i.mac.path.span()),
        other => ("this item", other.span()),
    };
    syn::Error::new(
        span,
        format!("#[idempotent] goes on a tool fn, not on {what}: put it on a `fn` (or `async fn`) that returns `Result<T, E>`; for methods, put it on the method inside the impl block"),
    )
}

/// Checks the fn's shape and sorts its parameters. Errors are pushed to `errors`; `None`
/// when the fn cannot be expanded at all.
pub(crate) fn analyze(mut item: ItemFn, options: &Options, errors: &mut Errors) -> Option<ToolFn> {
    let before = errors.count();
    let sig = &item.sig;
    let fn_name = sig.ident.unraw().to_string();
    if let Some(constness) = &sig.constness {
        errors.at(
            constness.span,
            "#[idempotent] cannot go on a `const fn`: an idempotent call reads and writes its store when it runs",
        );
    }
    if let Some(abi) = &sig.abi {
        errors.at(
            abi.extern_token.span,
            "#[idempotent] cannot go on an `extern` fn: a tool is called from Rust, with Rust's calling convention",
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.at(
            variadic.dots.spans[0],
            "#[idempotent] cannot go on a variadic fn: every argument needs a name and a type",
        );
    }
    let output = match &sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => {
            errors.at(
                sig.ident.span(),
                format!("#[idempotent] tool `{fn_name}` has no return type: a tool returns `Result<T, E>`, whose outcome is saved and replayed to every retry (for example `-> Result<Receipt, idem_agent::ToolError>`)"),
            );
            None
        }
    };

    let mut params = Vec::new();
    let mut has_receiver = false;
    let mut context_seen = false;
    let mut index = 0;
    for input in item.sig.inputs.iter_mut() {
        let pat_type = match input {
            FnArg::Receiver(_) => {
                has_receiver = true;
                continue;
            }
            FnArg::Typed(pat_type) => pat_type,
        };
        let is_context = is_call_context(&pat_type.ty);
        if is_context {
            if context_seen {
                errors.at(
                    pat_type.ty.span(),
                    "a tool takes at most one `&CallContext` argument: it is the call's context",
                );
            }
            context_seen = true;
        }
        let (name, binding, pattern) = match &*pat_type.pat {
            Pat::Ident(PatIdent {
                by_ref: None,
                subpat: None,
                ident,
                ..
            }) => (ident.unraw().to_string(), ident.clone(), None),
            pattern => {
                let fresh = format_ident!("arg{}", index, span = Span::mixed_site());
                let pattern = pattern.clone();
                *pat_type.pat = Pat::Ident(PatIdent {
                    attrs: Vec::new(),
                    by_ref: None,
                    mutability: None,
                    ident: fresh.clone(),
                    subpat: None,
                });
                (format!("arg{index}"), fresh, Some(pattern))
            }
        };
        params.push(Param {
            index,
            name,
            binding,
            pattern,
            ty: (*pat_type.ty).clone(),
            role: if is_context { Role::Context } else { Role::Key },
            impl_trait: contains_impl_trait(&pat_type.ty),
        });
        index += 1;
    }

    check_pattern_names(&params, errors);
    resolve_roles(&mut params, options, &fn_name, errors);

    let output = output?;
    if errors.count() > before {
        return None;
    }
    Some(ToolFn {
        item,
        params,
        has_receiver,
        output,
    })
}

/// A pattern argument is named `arg<index>` in the key: that name must not be taken by
/// another argument.
fn check_pattern_names(params: &[Param], errors: &mut Errors) {
    for param in params.iter().filter(|p| p.pattern.is_some()) {
        if let Some(other) = params
            .iter()
            .find(|o| o.pattern.is_none() && o.name == param.name)
        {
            errors.at(
                other.binding.span(),
                format!(
                    "#[idempotent] names the pattern argument at position {} `{}` in the key, and this argument already has that name: rename it",
                    param.index, param.name
                ),
            );
        }
    }
}

/// Applies `skip(…)` and `key(…)` (K8): every name must be an argument; without `key(…)`
/// every non-skipped argument is in the key, with it the others are fingerprint-only.
fn resolve_roles(params: &mut [Param], options: &Options, fn_name: &str, errors: &mut Errors) {
    let lookup = |list: &ArgList, option: &str, errors: &mut Errors| -> Vec<usize> {
        let mut found = Vec::new();
        for name in &list.names {
            let wanted = name.unraw().to_string();
            if wanted == "self" {
                errors.at(
                    name.span(),
                    format!("`{option}(self)`: the receiver is never part of the key, so there is nothing to {}", if option == "skip" { "skip" } else { "key on" }),
                );
                continue;
            }
            match params.iter().position(|p| p.name == wanted) {
                Some(i) if params[i].role == Role::Context && option == "key" => errors.at(
                    name.span(),
                    format!("`{wanted}` is the call context: it is never part of the key"),
                ),
                Some(i) => found.push(i),
                None => errors.at(name.span(), missing_argument(params, fn_name, &wanted)),
            }
        }
        found
    };
    let skipped = options
        .skip
        .as_ref()
        .map(|list| lookup(list, "skip", errors))
        .unwrap_or_default();
    let keyed = options.key.as_ref().map(|list| lookup(list, "key", errors));
    for (i, param) in params.iter_mut().enumerate() {
        if param.role == Role::Context {
            continue;
        }
        param.role = if skipped.contains(&i) {
            Role::Skipped
        } else {
            match &keyed {
                Some(keyed) if !keyed.contains(&i) => Role::Fingerprint,
                _ => Role::Key,
            }
        };
    }
}

fn missing_argument(params: &[Param], fn_name: &str, wanted: &str) -> String {
    let mut message = format!("`{wanted}` is not an argument of `{fn_name}`");
    if let Some(holder) = params.iter().find(|p| {
        p.pattern
            .as_ref()
            .is_some_and(|pat| binds(pat).iter().any(|b| b == wanted))
    }) {
        message.push_str(&format!(
            "; it is bound inside the pattern argument at position {}, which the key names `{}`: name the whole argument as `{}`",
            holder.index, holder.name, holder.name
        ));
        return message;
    }
    let names: Vec<&str> = params
        .iter()
        .filter(|p| p.role != Role::Context)
        .map(|p| p.name.as_str())
        .collect();
    if names.is_empty() {
        message.push_str(": it takes no arguments that could be keyed");
    } else {
        message.push_str(&format!("; its arguments are: {}", names.join(", ")));
        if let Some(close) = crate::typo::closest(wanted, &names) {
            message.push_str(&format!("; did you mean `{close}`?"));
        }
    }
    message
}

/// The identifiers a pattern binds.
fn binds(pat: &Pat) -> Vec<String> {
    struct Bindings(Vec<String>);
    impl<'ast> Visit<'ast> for Bindings {
        fn visit_pat_ident(&mut self, node: &'ast PatIdent) {
            self.0.push(node.ident.unraw().to_string());
            syn::visit::visit_pat_ident(self, node);
        }
    }
    let mut bindings = Bindings(Vec::new());
    bindings.visit_pat(pat);
    bindings.0
}

/// `&CallContext`, `&idem_agent::CallContext`, `&'a ::idem_agent::CallContext`…: the explicit context
/// form (recognised by the last path segment).
pub(crate) fn is_call_context(ty: &Type) -> bool {
    match ty {
        Type::Group(group) => is_call_context(&group.elem),
        Type::Paren(paren) => is_call_context(&paren.elem),
        Type::Reference(reference) if reference.mutability.is_none() => {
            match peel(&reference.elem) {
                Type::Path(path) if path.qself.is_none() => {
                    path.path.segments.last().is_some_and(|segment| {
                        segment.ident == "CallContext" && segment.arguments.is_none()
                    })
                }
                _ => false,
            }
        }
        _ => false,
    }
}

/// Strips invisible groups and parentheses around a type.
pub(crate) fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => peel(&group.elem),
        Type::Paren(paren) => peel(&paren.elem),
        other => other,
    }
}

/// Whether `impl Trait` appears anywhere in the type.
pub(crate) fn contains_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    finder.visit_type(ty);
    finder.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn analyzed(item: ItemFn, options: &Options) -> Result<ToolFn, String> {
        let mut errors = Errors::default();
        let tool = analyze(item, options, &mut errors);
        match (tool, errors.finish()) {
            (Some(tool), None) => Ok(tool),
            (_, error) => Err(error.map(|e| e.to_string()).unwrap_or_default()),
        }
    }

    fn roles(tool: &ToolFn) -> Vec<(String, Role)> {
        tool.params
            .iter()
            .map(|p| (p.name.clone(), p.role))
            .collect()
    }

    // pins K8, C4: receiver out, context out, patterns named by position
    #[test]
    fn sorts_parameters() {
        let options = crate::attr::parse(quote::quote!(key(order), skip(at))).0;
        let tool = analyzed(
            parse_quote! {
                fn f(&self, ctx: &idem_agent::CallContext, order: &str, (a, b): (u8, u8), at: u64) -> R { todo!() }
            },
            &options,
        )
        .unwrap();
        assert!(tool.has_receiver);
        assert_eq!(
            roles(&tool),
            [
                ("ctx".to_owned(), Role::Context),
                ("order".to_owned(), Role::Key),
                ("arg2".to_owned(), Role::Fingerprint),
                ("at".to_owned(), Role::Skipped),
            ]
        );
        assert!(tool.params[2].pattern.is_some());
    }

    #[test]
    fn recognises_the_context_type() {
        for ty in [
            quote::quote!(&CallContext),
            quote::quote!(&idem_agent::CallContext),
            quote::quote!(&'a ::idem_agent::CallContext),
        ] {
            assert!(is_call_context(&syn::parse2(ty).unwrap()));
        }
        for ty in [
            quote::quote!(&mut CallContext),
            quote::quote!(CallContext),
            quote::quote!(&CallContext<T>),
        ] {
            assert!(!is_call_context(&syn::parse2(ty).unwrap()));
        }
        assert!(contains_impl_trait(&parse_quote!(Vec<impl Serialize>)));
        assert!(!contains_impl_trait(&parse_quote!(Vec<u8>)));
    }

    // pins C3: a pattern argument may not take another argument's name
    #[test]
    fn rejects_a_name_clash_with_a_pattern_argument() {
        let error = analyzed(
            parse_quote!(
                fn f((a, b): (u8, u8), arg0: u8) -> R {
                    todo!()
                }
            ),
            &Options::default(),
        )
        .err()
        .expect("an error");
        assert!(error.contains("already has that name"), "{error}");
    }
}
