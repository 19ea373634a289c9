//! Code generation: the tool fn rewritten around `idem_agent::prepare` and the call protocol,
//! with checks whose errors point at the user's tokens (contract C1–C4, K6–K8, K10, S8).
//!
//! For
//!
//! ```text
//! #[idempotent(key(order))]
//! async fn send_refund(order: &str, amount: u64) -> Result<Receipt, ToolError> { BODY }
//! ```
//!
//! the output is, in outline:
//!
//! ```text
//! async fn send_refund(order: &str, amount: u64) -> Result<Receipt, ToolError> {
//!     static __IDEM_SPEC: ::idem_agent::ToolSpec = ::idem_agent::ToolSpec { name: "send_refund", … };
//!     ::idem_agent::__private::check_output::<Result<Receipt, ToolError>>();   // C2
//!     let __idem_prepared = ::idem_agent::prepare(&__IDEM_SPEC, None, |__idem_args| {
//!         // C1: a trait made for this argument, its message naming it; spanned at `&str`.
//!         { trait __IdemArgument {…} impl<T: Serialize> __IdemArgument for T {…}
//!           <&str as __IdemArgument>::__idem_add(&order, __idem_args)?; }
//!         { … <u64 as __IdemArgument>::__idem_add(&amount, __idem_args)?; }   // fingerprint
//!         Ok(())
//!     });
//!     ::idem_agent::__private::run::<Result<Receipt, ToolError>, _>(__idem_prepared, async move BODY).await
//! }
//! #[allow(non_camel_case_types)] pub struct send_refund { _private: () }   // the companion
//! impl send_refund { pub fn tool() -> ::idem_agent::dispatch::Tool { … } }
//! ```
//!
//! A sync fn calls `run_blocking::<Ret, _>(__idem_prepared, move || -> Ret BODY)` instead.
//! Both turn a failed `prepare` into the tool's error without running the body, and
//! otherwise run the body through `PreparedCall::run` / `run_blocking`. Pattern
//! parameters are rebound to `arg<index>` in the signature and destructured again at the
//! top of `BODY`.
//!
//! The spec also carries `heartbeat` (`Some(Duration::from_millis(N))`, or `None` for the
//! runtime's default, a third of the lease), `on_cancel` (`::idem_agent::OnCancel::Hold` unless
//! `on_cancel = "release"`), `on_unknown` (`::idem_agent::OnUnknown::Hold` unless
//! `on_unknown = "rerun"`), `reconcile` (whether `reconcile = PATH` is given) and `approval`
//! (`None`; `require_approval` alone gives `Some(::idem_agent::ToolSpec::DEFAULT_APPROVAL_VALID_FOR)`,
//! `require_approval = "30m"` gives `Some(Duration::from_millis(1800000))`, A1). With
//! `reconcile = check_refund`, the call is claimed first, and a record left
//! outcome-unknown is settled by the reconcile fn before the body may run (U3):
//!
//! ```text
//!     let __idem_call = match ::idem_agent::__private::begin::<Ret>(__idem_prepared).await {
//!         ::idem_agent::__private::Begun::Done(r) => return r,       // replay, layer error…
//!         ::idem_agent::__private::Begun::Claimed(c) => c,
//!     };
//!     let __idem_call = if __idem_call.needs_reconcile() {
//!         let __idem_attempt = __idem_call.attempt();
//!         // the receiver first (`&*self`), then every parameter, by shared reference
//!         let __idem_verdict = check_refund(&order, &amount, &__idem_attempt);
//!         match ::idem_agent::__private::settle::<Ret, _>(__idem_call, __idem_verdict).await {
//!             ::idem_agent::__private::Begun::Done(r) => return r,   // the effect happened (or not)
//!             ::idem_agent::__private::Begun::Claimed(c) => c,       // it did not: run the body
//!         }
//!     } else { __idem_call };
//!     ::idem_agent::__private::run_claimed::<Ret, _>(__idem_call, async move BODY).await
//! ```
//!
//! (sync: `begin_blocking`, `settle_blocking`, `run_claimed_blocking(__idem_call, move ||
//! -> Ret BODY)`). The verdict's borrows end before `BODY` moves the parameters.
//!
//! On any error in the attribute or the fn's shape, the output is the errors, the fn
//! unchanged, and a stub companion (C3).

use proc_macro2::{Delimiter, Group, Ident, Literal, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::{Item, ItemFn, TraitItemFn, Type};

use crate::attr::{self, Errors, OnCancel, OnUnknown, Options};
use crate::companion;
use crate::facade;
use crate::item::{self, Param, Role, ToolFn};
use crate::rmcp;
use crate::scope::ScopeKind;

/// The whole expansion: the rewritten fn and its companion, or, on any error, the errors
/// and the item unchanged (C3).
pub(crate) fn expand(args: TokenStream, input: TokenStream) -> TokenStream {
    let (mut options, attr_error) = attr::parse(args);
    options.facade = facade::path(options.krate.as_ref());
    let mut errors = Errors::default();
    if let Some(error) = attr_error {
        errors.push(error);
    }
    let item_fn = match syn::parse2::<Item>(input.clone()) {
        Ok(Item::Fn(item_fn)) if rmcp::is_tool(&item_fn) => {
            return rmcp::expand(&options, errors, item_fn);
        }
        Ok(Item::Fn(item_fn)) => {
            if let Some(error) = rmcp::wrong_order(&item_fn) {
                errors.push(error);
                return with_errors(errors, input, TokenStream::new());
            }
            item_fn
        }
        Ok(other) => {
            errors.push(item::unsupported_item(&other));
            return with_errors(errors, input, TokenStream::new());
        }
        Err(error) => {
            errors.push(match syn::parse2::<TraitItemFn>(input.clone()) {
                Ok(declaration) => syn::Error::new(
                    declaration.sig.ident.span(),
                    "#[idempotent] needs the fn's body: put it on the fn's definition (in an impl block for a trait method), not on a declaration",
                ),
                Err(_) => error,
            });
            return with_errors(errors, input, TokenStream::new());
        }
    };
    let tool = item::analyze(item_fn.clone(), &options, &mut errors);
    match (tool, errors.finish()) {
        (Some(tool), None) => {
            let mut errors = Errors::default();
            let tool_name = tool_name(&tool.item, &options);
            let function = rewrite(&tool, &options, &tool_name);
            let companion = companion::generate(&tool, &options, &tool_name, &mut errors);
            let mut output = function;
            output.extend(companion);
            if let Some(error) = errors.finish() {
                output.extend(error.to_compile_error());
            }
            output
        }
        (_, error) => {
            let mut errors = Errors::default();
            if let Some(error) = error {
                errors.push(error);
            }
            let stub = companion::stub(&item_fn, &options);
            with_errors(errors, input, stub)
        }
    }
}

fn with_errors(errors: Errors, item: TokenStream, stub: TokenStream) -> TokenStream {
    let mut output = errors
        .finish()
        .map(|e| e.to_compile_error())
        .unwrap_or_default();
    output.extend(item);
    output.extend(stub);
    output
}

/// K6: the `name = "…"` option, else the fn's name.
fn tool_name(item: &ItemFn, options: &Options) -> String {
    match &options.name {
        Some(name) => name.value.clone(),
        None => item.sig.ident.unraw().to_string(),
    }
}

/// The first and last token spans of `tokens`: a generated expression whose first token
/// is spanned `first` and last token `last` covers the user's tokens exactly, so its
/// errors point at them.
pub(crate) fn span_range(tokens: &impl ToTokens) -> (Span, Span) {
    let mut iter = tokens.to_token_stream().into_iter();
    let first = iter.next().map_or_else(Span::call_site, |t| t.span());
    let last = iter.last().map_or(first, |t| t.span());
    (first, last)
}

/// `path(args) suffix` with the argument group and the suffix spanned `last`; callers
/// build `path` with `quote_spanned!(first=> …)`. The expression then gets the span
/// `first..last`, whichever part of it rustc reports an error at.
pub(crate) fn spanned_call(
    (_, last): (Span, Span),
    path: TokenStream,
    args: TokenStream,
    suffix: TokenStream,
) -> TokenStream {
    let mut output = path;
    let mut group = Group::new(Delimiter::Parenthesis, args);
    group.set_span(last);
    output.extend([TokenTree::Group(group)]);
    output.extend(respan(suffix, last));
    output
}

fn duration(
    value: Option<&attr::Spanned<std::time::Duration>>,
    default: TokenStream,
) -> TokenStream {
    match value {
        Some(duration) => millis(duration.value),
        None => default,
    }
}

/// `::core::time::Duration::from_millis(N)`: a duration as the generated code writes it.
fn millis(duration: std::time::Duration) -> TokenStream {
    let millis = Literal::u64_unsuffixed(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    quote!(::core::time::Duration::from_millis(#millis))
}

/// `static __IDEM_SPEC: ToolSpec = …;`, after the check that the store option's backend
/// is compiled in.
pub(crate) fn spec(options: &Options, tool_name: &str) -> TokenStream {
    let idem = &options.facade;
    let (literal, store_check) = spec_literal(options, tool_name);
    quote! {
        #store_check
        static __IDEM_SPEC: #idem::ToolSpec = #literal;
    }
}

/// The `ToolSpec { … }` expression of the options, and the store check to emit with it.
pub(crate) fn spec_literal(options: &Options, tool_name: &str) -> (TokenStream, TokenStream) {
    let idem = &options.facade;
    let scope = scope_expr(
        idem,
        options
            .scope
            .as_ref()
            .map_or(&ScopeKind::Conversation, |s| &s.value),
    );
    let audit = options.audit.is_some();
    let ttl = duration(options.ttl.as_ref(), quote!(#idem::ToolSpec::DEFAULT_TTL));
    let lease = duration(
        options.lease.as_ref(),
        quote!(#idem::ToolSpec::DEFAULT_LEASE),
    );
    let wait = duration(options.wait.as_ref(), quote!(#idem::ToolSpec::DEFAULT_WAIT));
    let heartbeat = match options.heartbeat.as_ref() {
        Some(every) => {
            let every = duration(Some(every), TokenStream::new());
            quote!(::core::option::Option::Some(#every))
        }
        None => quote!(::core::option::Option::None),
    };
    let on_cancel = match options.on_cancel.as_ref().map(|o| o.value) {
        None | Some(OnCancel::Hold) => quote!(#idem::OnCancel::Hold),
        Some(OnCancel::Release) => quote!(#idem::OnCancel::Release),
    };
    let on_unknown = match options.on_unknown.as_ref().map(|o| o.value) {
        None | Some(OnUnknown::Hold) => quote!(#idem::OnUnknown::Hold),
        Some(OnUnknown::Rerun) => quote!(#idem::OnUnknown::Rerun),
    };
    let reconcile = options.reconcile.is_some();
    let approval = match options.require_approval.as_ref().map(|a| a.value) {
        None => quote!(::core::option::Option::None),
        Some(None) => {
            quote!(::core::option::Option::Some(#idem::ToolSpec::DEFAULT_APPROVAL_VALID_FOR))
        }
        Some(Some(valid_for)) => {
            let valid_for = millis(valid_for);
            quote!(::core::option::Option::Some(#valid_for))
        }
    };
    let (store, store_check) = match &options.store {
        Some(store) => {
            let locator = &store.locator;
            let check = Ident::new(store.backend, Span::call_site());
            let idem_at = respan(idem.clone(), locator.span());
            (
                quote!(::core::option::Option::Some(#locator)),
                quote_spanned!(locator.span()=>
                    const _: () = #idem_at::__private::store_feature::#check();
                ),
            )
        }
        None => (quote!(::core::option::Option::None), TokenStream::new()),
    };
    let literal = quote! {
        #idem::ToolSpec {
            name: #tool_name,
            scope: #scope,
            ttl: #ttl,
            lease: #lease,
            wait: #wait,
            heartbeat: #heartbeat,
            on_cancel: #on_cancel,
            on_unknown: #on_unknown,
            reconcile: #reconcile,
            store: #store,
            audit: #audit,
            approval: #approval,
        }
    };
    (literal, store_check)
}

/// The `Scope` expression of a scope option (K7).
fn scope_expr(idem: &TokenStream, scope: &ScopeKind) -> TokenStream {
    match scope {
        ScopeKind::Conversation => quote!(#idem::Scope::Conversation),
        ScopeKind::Global => quote!(#idem::Scope::Global),
        ScopeKind::Call => quote!(#idem::Scope::Call),
        ScopeKind::Named(name) => quote!(#idem::Scope::Named(#name)),
        ScopeKind::Composite(parts) => {
            let kind = scope.name();
            let parts = parts.iter().map(|part| scope_expr(idem, part));
            quote!(#idem::Scope::Composite { kind: #kind, parts: &[#(#parts),*] })
        }
    }
}

/// C1: adds one key or fingerprint argument through a trait defined on the spot, whose
/// `#[diagnostic::on_unimplemented]` names the argument and the tool. The check is the
/// call itself, spanned at the argument's type: one error per unserializable argument.
/// (The trait has no `Serialize` supertrait: rustc would report a supertrait bound with
/// serde's own message.)
/// `prepared, async move BODY`: the body's own block is the async block when no pattern
/// argument needs rebinding; otherwise the rebinds come first and the block's value is
/// bound then returned, so rustc sees no braces to call unnecessary (`unused_braces`).
fn async_body(prepared: &Ident, rebinds: Vec<TokenStream>, block: &syn::Block) -> TokenStream {
    if rebinds.is_empty() {
        return quote!(#prepared, async move #block);
    }
    let value = generated_local("__idem_value");
    quote!(#prepared, async move { #(#rebinds)* let #value = #block; #value })
}

/// A local of the generated code, with mixed-site hygiene: user code (the body, argument
/// names) can neither see it nor shadow it, whatever the user's names are (C4).
fn generated_local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

fn add_argument(param: &Param, tool_name: &str, idem: &TokenStream) -> TokenStream {
    let args = generated_local("__idem_args");
    let name = &param.name;
    let binding = &param.binding;
    let ty = &param.ty;
    let (method, label) = match param.role {
        Role::Key => (
            quote!(key),
            format!("argument `{name}` is serialized into the idempotency key"),
        ),
        _ => (
            quote!(fingerprint),
            format!("argument `{name}` is serialized into the call's fingerprint (it is not in `key(…)`)"),
        ),
    };
    let message = format!(
        "`{{Self}}` cannot be part of the idempotency key of tool `{tool_name}`: it does not implement `serde::Serialize`"
    );
    let note = format!(
        "every argument of an #[idempotent] tool is serialized into its key unless skipped: derive or implement `serde::Serialize` for the type, or leave the argument out with `#[idempotent(skip({name}))]` (a handle that cannot come from a tool call's JSON arguments also needs `dispatch = false`)"
    );
    let range = span_range(ty);
    let call = if param.impl_trait {
        // `impl Trait` cannot be named: the value is checked, through a binding located at
        // the type so that the error points there.
        let at = range.0;
        spanned_call(
            range,
            quote_spanned!(at=> __IdemArgument::__idem_add),
            quote_spanned!(at=> &#binding, #args),
            quote!(?;),
        )
    } else {
        spanned_call(
            range,
            quote_spanned!(range.0=> <#ty as __IdemArgument>::__idem_add),
            quote!(&#binding, #args),
            quote!(?;),
        )
    };
    quote! {
        {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait __IdemArgument {
                fn __idem_add(
                    &self,
                    args: &mut #idem::ArgsBuilder,
                ) -> ::core::result::Result<(), #idem::CanonicalError>;
            }
            impl<T: #idem::__private::serde::Serialize + ?::core::marker::Sized> __IdemArgument for T {
                fn __idem_add(
                    &self,
                    args: &mut #idem::ArgsBuilder,
                ) -> ::core::result::Result<(), #idem::CanonicalError> {
                    args.#method(#name, self)?;
                    ::core::result::Result::Ok(())
                }
            }
            #call
        }
    }
}

/// The return type as the generated checks name it, and the span they report at.
///
/// The checks of one return type are several calls (the check itself, the protocol, the
/// `.await`, the companion), and rustc reports each bound at a different part of a call
/// (a generic argument, a path segment, the `await` keyword). So the type and every
/// generated token of those calls get one span, the type's first token: rustc then drops
/// each repeated error, and a user sees one error per missing trait, at the return type.
pub(crate) struct CheckedOutput {
    pub tokens: TokenStream,
    pub range: (Span, Span),
    /// The facade's path, spanned like the checks.
    pub facade: TokenStream,
}

impl CheckedOutput {
    pub(crate) fn new(ty: &Type, facade: &TokenStream) -> Self {
        let (first, _) = span_range(ty);
        CheckedOutput {
            tokens: respan(ty.to_token_stream(), first),
            range: (first, first),
            facade: respan(facade.clone(), first),
        }
    }

    /// The span of every token of the checks.
    pub(crate) fn span(&self) -> Span {
        self.range.0
    }

    /// C2: `::idem_agent::__private::check_output::<Ret>();`, the first statement of the fn and
    /// of its companion's `tool()`.
    pub(crate) fn check(&self) -> TokenStream {
        let (tokens, idem_at) = (&self.tokens, &self.facade);
        spanned_call(
            self.range,
            quote_spanned!(self.span()=> #idem_at::__private::check_output::<#tokens>),
            TokenStream::new(),
            quote!(;),
        )
    }
}

pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            TokenTree::Group(group) => {
                let mut respanned = Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                TokenTree::Group(respanned)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// The fn with the same signature (pattern parameters rebound) and the protocol around
/// its original body.
fn rewrite(tool: &ToolFn, options: &Options, tool_name: &str) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = &tool.item;
    let idem = &options.facade;
    let spec = spec(options, tool_name);
    let context = match tool.params.iter().find(|p| p.role == Role::Context) {
        Some(param) => {
            let binding = &param.binding;
            quote!(::core::option::Option::Some(#binding))
        }
        None => quote!(::core::option::Option::None),
    };
    let adds = tool
        .params
        .iter()
        .filter(|p| matches!(p.role, Role::Key | Role::Fingerprint))
        .map(|p| add_argument(p, tool_name, idem));
    let rebinds = tool.params.iter().filter_map(|p| {
        p.pattern.as_ref().map(|pattern| {
            let binding = &p.binding;
            quote!(let #pattern = #binding;)
        })
    });
    let (prepared, args) = (
        generated_local("__idem_prepared"),
        generated_local("__idem_args"),
    );
    let output = &tool.output;
    let checked = CheckedOutput::new(output, idem);
    let (span, idem_at) = (checked.span(), &checked.facade);
    let check = checked.check();
    let (range, checked_output) = (checked.range, &checked.tokens);
    let is_async = sig.asyncness.is_some();
    // Without `reconcile`, the body runs straight from the prepared call; with it, the
    // claim comes first, then the reconcile fn when the record is outcome-unknown (U1, U3).
    let (protocol, claim) = match &options.reconcile {
        Some(path) => (
            reconcile(tool, path, &checked, is_async),
            generated_local("__idem_call"),
        ),
        None => (TokenStream::new(), prepared.clone()),
    };
    let (run, run_blocking) = match &options.reconcile {
        Some(_) => (quote!(run_claimed), quote!(run_claimed_blocking)),
        None => (quote!(run), quote!(run_blocking)),
    };
    let body = if is_async {
        spanned_call(
            range,
            quote_spanned!(span=> #idem_at::__private::#run::<#checked_output, _>),
            async_body(&claim, rebinds.collect(), block),
            quote!(.await),
        )
    } else {
        let closure_body = if tool.params.iter().any(|p| p.pattern.is_some()) {
            quote!({ #(#rebinds)* #block })
        } else {
            block.to_token_stream()
        };
        spanned_call(
            range,
            quote_spanned!(span=> #idem_at::__private::#run_blocking::<#checked_output, _>),
            quote!(#claim, move || -> #output #closure_body),
            TokenStream::new(),
        )
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #spec
            #check
            let #prepared = #idem::prepare(&__IDEM_SPEC, #context, |#args| {
                #(#adds)*
                ::core::result::Result::Ok(())
            });
            #protocol
            #body
        }
    }
}

/// U3: claims the call, and when the record is outcome-unknown asks the reconcile fn
/// whether the effect happened before the body may run again. Binds `__idem_call`, the
/// claimed call, or returns the settled outcome.
///
/// The reconcile fn gets the receiver (`&*self`, shared), every parameter by shared
/// reference, then `&AttemptInfo`; the borrows end with the verdict, before the body
/// moves the parameters. Its call is spanned at the path, and so is the part of `settle`
/// where rustc reports a verdict that does not fit: an error about the reconcile fn's
/// arguments or its return type points at the path.
fn reconcile(
    tool: &ToolFn,
    path: &syn::ExprPath,
    checked: &CheckedOutput,
    is_async: bool,
) -> TokenStream {
    let prepared = generated_local("__idem_prepared");
    let call = generated_local("__idem_call");
    let attempt = generated_local("__idem_attempt");
    let verdict = generated_local("__idem_verdict");
    let outcome = generated_local("__idem_outcome");
    let claimed = generated_local("__idem_claimed");
    let (span, output, idem_at) = (checked.span(), &checked.tokens, &checked.facade);
    let idem = idem_at;
    let (begin, settle, suffix) = if is_async {
        (quote!(begin), quote!(settle), quote!(.await))
    } else {
        (
            quote!(begin_blocking),
            quote!(settle_blocking),
            TokenStream::new(),
        )
    };

    let at = span_range(path);
    // The arguments are located at the path, so that an argument that does not fit is
    // reported there. They keep the macro's hygiene (the user's names resolve at the call
    // site, the rebound pattern arguments and the attempt at the mixed site): rustc then
    // treats them as generated and offers no edit of the attribute.
    let (here, generated) = (
        Span::call_site().located_at(at.1),
        Span::mixed_site().located_at(at.1),
    );
    let moved = |ident: &Ident, span: Span| {
        let mut ident = ident.clone();
        ident.set_span(span);
        ident
    };
    let mut args = Vec::new();
    if let Some(receiver) = tool.item.sig.receiver() {
        let this = Ident::new("self", here);
        let by_value = matches!(
            item::peel(&receiver.ty),
            Type::Path(p) if p.qself.is_none() && p.path.is_ident("Self")
        );
        args.push(if by_value {
            quote_spanned!(here=> &#this)
        } else {
            quote_spanned!(here=> &*#this)
        });
    }
    args.extend(tool.params.iter().map(|param| {
        let span = if param.pattern.is_some() {
            generated
        } else {
            here
        };
        let binding = moved(&param.binding, span);
        quote_spanned!(here=> &#binding)
    }));
    let attempt_arg = moved(&attempt, generated);
    args.push(quote_spanned!(here=> &#attempt_arg));
    let args = quote_spanned!(here=> #(#args),*);
    let check = spanned_call(at, path.to_token_stream(), args, TokenStream::new());

    // Where rustc reports a verdict that does not fit: at the explicit `_` of `settle_blocking`;
    // at the whole call of the async `settle` (its future carries the bounds). So the sync
    // call names the return type where the tool's other protocol calls do (a return type
    // that does not fit is reported once, there) and only `_` at the path; the async call is
    // at the path entirely.
    let infer = respan(quote!(_), at.0);
    let settled = if is_async {
        spanned_call(
            at,
            respan(quote!(#idem::__private::#settle::<#output, #infer>), at.0),
            quote!(#call, #verdict),
            suffix.clone(),
        )
    } else {
        spanned_call(
            checked.range,
            quote_spanned!(span=> #idem_at::__private::#settle::<#output, #infer>),
            quote!(#call, #verdict),
            TokenStream::new(),
        )
    };
    let begun = spanned_call(
        checked.range,
        quote_spanned!(span=> #idem_at::__private::#begin::<#output>),
        quote!(#prepared),
        suffix,
    );
    quote! {
        let #call = match #begun {
            #idem::__private::Begun::Done(#outcome) => return #outcome,
            #idem::__private::Begun::Claimed(#claimed) => #claimed,
        };
        let #call = if #call.needs_reconcile() {
            let #attempt = #call.attempt();
            let #verdict = #check;
            match #settled {
                #idem::__private::Begun::Done(#outcome) => return #outcome,
                #idem::__private::Begun::Claimed(#claimed) => #claimed,
            }
        } else {
            #call
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(args: TokenStream, item: TokenStream) -> String {
        expand(args, item).to_string()
    }

    // pins L1, U2–U4: the options reach the tool's spec
    #[test]
    fn spec_carries_the_outcome_options() {
        let output = expanded(
            quote!(
                heartbeat = "1500ms",
                on_cancel = "release",
                on_unknown = "rerun",
                reconcile = check
            ),
            quote!(
                fn f(a: u8) -> Result<u8, E> {
                    Ok(a)
                }
            ),
        );
        assert!(
            output.contains(
                "heartbeat : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (1500))"
            ),
            "{output}"
        );
        assert!(
            output.contains("on_cancel : :: idem_agent :: OnCancel :: Release"),
            "{output}"
        );
        assert!(
            output.contains("on_unknown : :: idem_agent :: OnUnknown :: Rerun"),
            "{output}"
        );
        assert!(output.contains("reconcile : true"), "{output}");
        let output = expanded(
            quote!(),
            quote!(
                fn f(a: u8) -> Result<u8, E> {
                    Ok(a)
                }
            ),
        );
        assert!(
            output.contains("heartbeat : :: core :: option :: Option :: None"),
            "{output}"
        );
        assert!(
            output.contains("on_cancel : :: idem_agent :: OnCancel :: Hold"),
            "{output}"
        );
        assert!(
            output.contains("on_unknown : :: idem_agent :: OnUnknown :: Hold"),
            "{output}"
        );
        assert!(output.contains("reconcile : false"), "{output}");
        assert!(
            output.contains(":: idem_agent :: __private :: run_blocking ::"),
            "{output}"
        );
        assert!(!output.contains("__private :: begin"), "{output}");
    }

    // pins A1: `require_approval` reaches the tool's spec: the runtime's default validity
    // for the flag, the written one in milliseconds, none without the option
    #[test]
    fn spec_carries_the_approval() {
        let item = quote!(
            fn f(a: u8) -> Result<u8, E> {
                Ok(a)
            }
        );
        for (args, approval) in [
            (
                quote!(require_approval),
                "approval : :: core :: option :: Option :: Some (:: idem_agent :: ToolSpec :: DEFAULT_APPROVAL_VALID_FOR)",
            ),
            (
                quote!(require_approval = "30m"),
                "approval : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (1800000))",
            ),
            (quote!(), "approval : :: core :: option :: Option :: None"),
        ] {
            let output = expanded(args, item.clone());
            assert!(output.contains(approval), "{output}");
        }
        let output = expanded(quote!(require_approval, crate = "my::idem"), item);
        assert!(
            output.contains("Some (my :: idem :: ToolSpec :: DEFAULT_APPROVAL_VALID_FOR)"),
            "{output}"
        );
    }

    // pins U3: a reconciling tool claims, reconciles an outcome-unknown record with every
    // parameter (receiver first, shared) by reference then the attempt, and runs the body
    // on the claimed call
    #[test]
    fn reconcile_protocol() {
        let output = expanded(
            quote!(skip(at), reconcile = Self::check),
            quote!(
                async fn f(
                    &mut self,
                    ctx: &CallContext,
                    (x, y): (u8, u8),
                    at: u64,
                ) -> Result<u8, E> {
                    Ok(x + y)
                }
            ),
        );
        let order = [
            ":: idem_agent :: prepare",
            ":: idem_agent :: __private :: begin :: < Result < u8 , E > > (__idem_prepared) . await",
            ":: idem_agent :: __private :: Begun :: Done (__idem_outcome) => return __idem_outcome",
            "if __idem_call . needs_reconcile ()",
            "let __idem_attempt = __idem_call . attempt () ;",
            "let __idem_verdict = Self :: check (& * self , & ctx , & arg1 , & at , & __idem_attempt) ;",
            ":: idem_agent :: __private :: settle :: < Result < u8 , E > , _ > (__idem_call , __idem_verdict) . await",
            "else { __idem_call }",
            ":: idem_agent :: __private :: run_claimed :: < Result < u8 , E > , _ > (__idem_call , async move",
        ];
        let mut from = 0;
        for part in order {
            let at = output[from..]
                .find(part)
                .unwrap_or_else(|| panic!("`{part}` missing, or out of order, in {output}"));
            from += at + part.len();
        }

        let output = expanded(
            quote!(reconcile = check),
            quote!(
                fn f(self, order: &str) -> Result<u8, E> {
                    Ok(1)
                }
            ),
        );
        for part in [
            ":: idem_agent :: __private :: begin_blocking :: < Result < u8 , E > > (__idem_prepared) {",
            "check (& self , & order , & __idem_attempt)",
            ":: idem_agent :: __private :: settle_blocking :: < Result < u8 , E > , _ > (__idem_call , __idem_verdict) {",
            ":: idem_agent :: __private :: run_claimed_blocking :: < Result < u8 , E > , _ > (__idem_call , move || -> Result < u8 , E >",
        ] {
            assert!(output.contains(part), "`{part}` missing in {output}");
        }
    }
}
