//! Code generation for a method of an rmcp MCP server: `#[idempotent]` written above rmcp's
//! `#[tool]` (contract M-rules, `idem_agent::integrations::rmcp`).
//!
//! rmcp's `#[tool_router]` finds the methods marked `#[tool]`, and `#[tool]` then turns each
//! into a route whose parameters are extractors (`Parameters<T>`, `RequestContext`, …) and
//! whose return value is anything rmcp can turn into a tool result. Written above `#[tool]`,
//! `#[idempotent]` sees the method first and rewrites it, in outline, for
//!
//! ```text
//! #[idempotent(ttl = "24h")]
//! #[tool(description = "Refund an order")]
//! async fn send_refund(&self, Parameters(args): Parameters<Refund>) -> Result<String, String> { BODY }
//! ```
//!
//! into
//!
//! ```text
//! #[tool(description = "Refund an order", meta = ::idem_agent::integrations::rmcp::tool_meta(None, &ToolSpec { … }))]
//! async fn send_refund(&self, __idem_mcp: ::idem_agent::integrations::rmcp::McpCall, Parameters(args): Parameters<Refund>)
//!     -> ::idem_agent::integrations::rmcp::ToolResult
//! {
//!     static __IDEM_SPEC: ::idem_agent::ToolSpec = ::idem_agent::ToolSpec { name: "send_refund", … };
//!     ::idem_agent::integrations::rmcp::McpCall::run::<Result<String, String>, _>(
//!         __idem_mcp, &__IDEM_SPEC, ArgumentSelection { key: None, skip: &[] }, async move BODY,
//!     ).await
//! }
//! ```
//!
//! The added extractor reads the call's name, arguments and `_meta` before rmcp's
//! `Parameters<T>` takes the arguments; the key is over the arguments' JSON members, so
//! `key(…)` and `skip(…)` name members, not parameters. The body's value is whatever it was
//! (a `String`, a `Result`, a `CallToolResult`, …): rmcp's `IntoCallToolResult` turns it into
//! the result idem saves and replays. A sync method becomes async. The `meta` added to
//! `#[tool]` marks the tool as handled by its own attribute, for `IdempotentServer`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ItemFn, Meta, ReturnType, Token};

use crate::attr::{self, Errors, Options};
use crate::expand;

/// Whether the fn is an rmcp tool: it carries an attribute whose path ends in `tool`, the
/// test rmcp's own `#[tool_router]` applies.
pub(crate) fn is_tool(item: &ItemFn) -> bool {
    item.attrs.iter().any(is_tool_attribute)
}

fn is_tool_attribute(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "tool")
}

/// The rewritten method, or, on an error, the errors and the method unchanged (C3).
pub(crate) fn expand(options: &Options, mut errors: Errors, item: ItemFn) -> TokenStream {
    if let Some(path) = &options.reconcile {
        errors.push(syn::Error::new_spanned(
            path,
            "`reconcile` is not supported on an rmcp #[tool] method yet: check the earlier run's effect in the body with `idem_agent::current_attempt()` instead",
        ));
    }
    if let Some(dispatch) = &options.dispatch {
        errors.at(
            dispatch.span,
            "`dispatch` does not apply to an rmcp #[tool] method: rmcp's router dispatches it",
        );
    }
    let tool_name = match tool_name(&item, options) {
        Ok(name) => name,
        Err(error) => {
            errors.push(error);
            String::new()
        }
    };
    if let Some(error) = errors.finish() {
        let mut output = error.to_compile_error();
        output.extend(item.to_token_stream());
        return output;
    }
    rewrite(options, item, &tool_name)
}

/// K6: `name = "…"`, else the name rmcp gives the tool (`#[tool(name = "…")]`), else the
/// fn's name: the name the client calls is the name in the key.
fn tool_name(item: &ItemFn, options: &Options) -> syn::Result<String> {
    if let Some(name) = &options.name {
        return Ok(name.value.clone());
    }
    for attr in item.attrs.iter().filter(|a| is_tool_attribute(a)) {
        for meta in tool_arguments(attr).into_iter().flatten() {
            if let Meta::NameValue(pair) = meta {
                if pair.path.is_ident("name") {
                    if let Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(lit),
                        ..
                    }) = &pair.value
                    {
                        return attr::parse_tool_name(lit).map_err(|error| {
                            syn::Error::new(
                                lit.span(),
                                format!("{error}; give idem a valid name with #[idempotent(name = \"…\")]"),
                            )
                        });
                    }
                }
            }
        }
    }
    // rmcp names the tool by the identifier as written (`r#type` for a raw identifier),
    // which is not a valid idem tool name: the two names must agree, so ask for one.
    let written = item.sig.ident.to_string();
    if written.starts_with("r#") {
        return Err(syn::Error::new(
            item.sig.ident.span(),
            format!(
                "rmcp names this tool `{written}` (the raw identifier as written), which idem cannot key by; give it a name both agree on: #[tool(name = \"{}\")]",
                item.sig.ident.unraw()
            ),
        ));
    }
    Ok(written)
}

/// The arguments of a `#[tool(…)]` attribute as rmcp parses them (`name = value` pairs,
/// nested lists, flags); `None` when they are not of that form (rmcp reports it).
fn tool_arguments(attr: &Attribute) -> Option<Punctuated<Meta, Token![,]>> {
    match &attr.meta {
        Meta::Path(_) => Some(Punctuated::new()),
        Meta::List(list) => list
            .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            .ok(),
        Meta::NameValue(_) => None,
    }
}

fn rewrite(options: &Options, item: ItemFn, tool_name: &str) -> TokenStream {
    let idem = &options.facade;
    let ItemFn {
        attrs,
        vis,
        mut sig,
        block,
    } = item;
    let spec = expand::spec(options, tool_name);
    let (literal, _) = expand::spec_literal(options, tool_name);
    let output_schema = match &sig.output {
        ReturnType::Type(_, ty) => output_schema(ty),
        ReturnType::Default => None,
    };
    let attrs: Vec<Attribute> = attrs
        .into_iter()
        .map(|attr| {
            if is_tool_attribute(&attr) {
                with_idem_meta(attr, idem, &literal, output_schema.as_ref())
            } else {
                attr
            }
        })
        .collect();

    let output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) => ty.to_token_stream(),
    };
    let call = syn::Ident::new("__idem_mcp", Span::mixed_site());
    let position = usize::from(sig.receiver().is_some());
    sig.inputs.insert(
        position,
        syn::parse_quote!(#call: #idem::integrations::rmcp::McpCall),
    );
    sig.asyncness = Some(Token![async](sig.fn_token.span()));
    sig.output = syn::parse_quote!(-> #idem::integrations::rmcp::ToolResult);

    let names = |list: &Option<attr::ArgList>| -> Vec<String> {
        list.iter()
            .flat_map(|l| l.names.iter().map(|n| n.unraw().to_string()))
            .collect()
    };
    let key = match &options.key {
        Some(_) => {
            let key = names(&options.key);
            quote!(::core::option::Option::Some(&[#(#key),*]))
        }
        None => quote!(::core::option::Option::None),
    };
    let skip = names(&options.skip);
    // With `key(…)` or `skip(…)`, the names are checked against the schema of the
    // arguments' type, `T` of the `Parameters<T>` parameter, before the tool runs (M2).
    let schema = match (&options.key, &options.skip, parameters_type(&sig)) {
        (None, None, _) | (_, _, None) => quote!(::core::option::Option::None),
        (_, _, Some(ty)) => quote!(::core::option::Option::Some(
            rmcp::handler::server::common::schema_for_type::<#ty>
        )),
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #spec
            #idem::integrations::rmcp::McpCall::run::<#output, _>(
                #call,
                &__IDEM_SPEC,
                #idem::integrations::rmcp::ArgumentSelection {
                    key: #key,
                    skip: &[#(#skip),*],
                    schema: #schema,
                },
                async move #block,
            )
            .await
        }
    }
}

/// `T` of the method's `Parameters<T>` parameter, if it has one.
fn parameters_type(sig: &syn::Signature) -> Option<syn::Type> {
    sig.inputs.iter().find_map(|input| {
        let syn::FnArg::Typed(typed) = input else {
            return None;
        };
        let syn::Type::Path(path) = &*typed.ty else {
            return None;
        };
        let last = path.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        match (last.ident == "Parameters", args.args.first()) {
            (true, Some(syn::GenericArgument::Type(ty))) => Some(ty.clone()),
            _ => None,
        }
    })
}

/// `#[tool(…, meta = idem_agent::integrations::rmcp::tool_meta(…))]`: the user's own `meta` (if any),
/// with idem's marker added.
fn with_idem_meta(
    attr: Attribute,
    idem: &TokenStream,
    spec: &TokenStream,
    output_schema: Option<&TokenStream>,
) -> Attribute {
    let Some(mut arguments) = tool_arguments(&attr) else {
        return attr;
    };
    let given = |name: &str| {
        arguments
            .iter()
            .any(|meta| matches!(meta, Meta::NameValue(pair) if pair.path.is_ident(name)))
    };
    if let (Some(schema), false) = (output_schema, given("output_schema")) {
        arguments.push(syn::parse_quote!(output_schema = #schema));
    }
    let mut found = false;
    for meta in arguments.iter_mut() {
        if let Meta::NameValue(pair) = meta {
            if pair.path.is_ident("meta") {
                let existing = &pair.value;
                pair.value = syn::parse_quote!(
                    #idem::integrations::rmcp::tool_meta(::core::option::Option::Some(#existing), &#spec)
                );
                found = true;
            }
        }
    }
    if !found {
        arguments.push(syn::parse_quote!(
            meta = #idem::integrations::rmcp::tool_meta(::core::option::Option::None, &#spec)
        ));
    }
    let path = attr.path();
    let pound = attr.pound_token;
    let bracket = attr.bracket_token;
    let mut rebuilt: Attribute = syn::parse_quote!(#[#path(#arguments)]);
    rebuilt.pound_token = pound;
    rebuilt.bracket_token = bracket;
    rebuilt
}

/// The output schema rmcp's `#[tool]` derives from a `Json<T>` or `Result<Json<T>, E>`
/// return type, which it no longer sees once the return type is rewritten: the same
/// expression rmcp writes.
fn output_schema(ty: &syn::Type) -> Option<TokenStream> {
    fn json_inner(ty: &syn::Type) -> Option<&syn::Type> {
        let syn::Type::Path(path) = ty else {
            return None;
        };
        let last = path.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        match (last.ident == "Json", args.args.first()) {
            (true, Some(syn::GenericArgument::Type(inner))) => Some(inner),
            _ => None,
        }
    }
    fn ok_type(ty: &syn::Type) -> Option<&syn::Type> {
        let syn::Type::Path(path) = ty else {
            return None;
        };
        let last = path.path.segments.last()?;
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        match (last.ident == "Result", args.args.first()) {
            (true, Some(syn::GenericArgument::Type(ok))) => Some(ok),
            _ => None,
        }
    }
    let inner = json_inner(ty).or_else(|| ok_type(ty).and_then(json_inner))?;
    Some(quote!(rmcp::handler::server::tool::schema_for_output::<#inner>()))
}

/// A method already expanded by rmcp's `#[tool]` (written above `#[idempotent]`): say
/// which order works instead of C1/C2's messages. rmcp turns an async fn into one returning
/// `Pin<Box<dyn Future …>>`; a sync fn keeps its shape, but a method taking rmcp's
/// `Parameters<T>` extractor is an rmcp tool.
pub(crate) fn wrong_order(item: &ItemFn) -> Option<syn::Error> {
    let takes_parameters = item.sig.receiver().is_some()
        && item.sig.inputs.iter().any(|input| match input {
            syn::FnArg::Typed(typed) => matches!(
                &*typed.ty,
                syn::Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "Parameters"
                    && matches!(s.arguments, syn::PathArguments::AngleBracketed(_)))
            ),
            syn::FnArg::Receiver(_) => false,
        });
    if takes_parameters {
        return Some(syn::Error::new(
            item.sig.ident.span(),
            "this method takes rmcp's `Parameters<T>` but has no #[tool] attribute left to see: if rmcp's #[tool] is written above #[idempotent], write #[idempotent] above #[tool] instead, so that it sees the method as you wrote it",
        ));
    }
    if item.sig.asyncness.is_some() {
        return None;
    }
    let ReturnType::Type(_, ty) = &item.sig.output else {
        return None;
    };
    let syn::Type::Path(path) = &**ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    let boxed_future = last.ident == "Pin"
        && last
            .arguments
            .to_token_stream()
            .to_string()
            .contains("Future");
    boxed_future.then(|| {
        syn::Error::new(
            ty.span(),
            "this fn returns a boxed future, as rmcp's #[tool] rewrites an async fn: write #[idempotent] above #[tool], so that it sees the method as you wrote it",
        )
    })
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use crate::expand::expand;

    fn expanded(args: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> String {
        expand(args, item).to_string()
    }

    // pins M12: above `#[tool]`, the method gets the extractor after the receiver, becomes
    // async, returns rmcp's result, runs its body through `McpCall::run` with the spec, and
    // its `#[tool]` gains idem's meta (the user's own kept) and rmcp's output schema
    #[test]
    fn a_tool_method_is_rewritten_for_rmcp() {
        let out = expanded(
            quote!(key(order_id), skip(note)),
            quote! {
                #[tool(name = "send-refund", meta = my_meta())]
                fn send_refund(&self, Parameters(r): Parameters<Refund>) -> Result<Json<Receipt>, String> { todo!() }
            },
        );
        for piece in [
            "async fn send_refund (& self , __idem_mcp : :: idem_agent :: integrations :: rmcp :: McpCall , Parameters (r) : Parameters < Refund >) -> :: idem_agent :: integrations :: rmcp :: ToolResult",
            "name : \"send-refund\"",
            "meta = :: idem_agent :: integrations :: rmcp :: tool_meta (:: core :: option :: Option :: Some (my_meta ()) ,",
            "output_schema = rmcp :: handler :: server :: tool :: schema_for_output :: < Receipt > ()",
            ":: idem_agent :: integrations :: rmcp :: McpCall :: run :: < Result < Json < Receipt > , String > , _ > (__idem_mcp , & __IDEM_SPEC ,",
            "key : :: core :: option :: Option :: Some (& [\"order_id\"]) , skip : & [\"note\"] , schema : :: core :: option :: Option :: Some (rmcp :: handler :: server :: common :: schema_for_type :: < Refund >)",
        ] {
            assert!(out.contains(piece), "missing `{piece}` in {out}");
        }
    }

    // pins M12, U2a, U4: `on_cancel` and `on_unknown` reach the spec of an rmcp tool
    #[test]
    fn outcome_options_reach_an_rmcp_tool_spec() {
        let out = expanded(
            quote!(on_cancel = "release", on_unknown = "rerun"),
            quote! {
                #[tool]
                async fn send_refund(&self) -> String { String::new() }
            },
        );
        for piece in [
            "static __IDEM_SPEC : :: idem_agent :: ToolSpec",
            "on_cancel : :: idem_agent :: OnCancel :: Release",
            "on_unknown : :: idem_agent :: OnUnknown :: Rerun",
        ] {
            assert!(out.contains(piece), "missing `{piece}` in {out}");
        }
    }

    // pins A1: `require_approval` reaches an rmcp tool's spec, in the static and in the
    // `meta` of `#[tool]` alike
    #[test]
    fn require_approval_reaches_an_rmcp_tool_spec() {
        let out = expanded(
            quote!(require_approval = "10m"),
            quote! {
                #[tool]
                async fn send_refund(&self) -> String { String::new() }
            },
        );
        let approval = "approval : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (600000))";
        assert_eq!(out.matches(approval).count(), 2, "{out}");
    }

    // pins M12, C3: `reconcile` and `dispatch` are errors on an rmcp tool, and the method
    // is emitted unchanged
    #[test]
    fn unsupported_options_are_errors_at_their_tokens() {
        let out = expanded(
            quote!(reconcile = check, dispatch = false),
            quote! {
                #[tool]
                async fn send_refund(&self) -> String { String::new() }
            },
        );
        assert!(
            out.contains("`reconcile` is not supported on an rmcp #[tool] method"),
            "{out}"
        );
        assert!(
            out.contains("`dispatch` does not apply to an rmcp #[tool] method"),
            "{out}"
        );
        assert!(
            out.contains("async fn send_refund (& self) -> String"),
            "{out}"
        );
    }

    // pins M12, K6: a raw identifier is named `r#type` by rmcp, which idem cannot key by:
    // an error asks for a name both agree on
    #[test]
    fn a_raw_identifier_needs_a_name() {
        let out = expanded(
            quote!(),
            quote! {
                #[tool]
                async fn r#type(&self) -> String { String::new() }
            },
        );
        assert!(out.contains("rmcp names this tool `r#type`"), "{out}");
        assert!(out.contains(r#"#[tool(name = \"type\")]"#), "{out}");
    }

    // pins M12: a sync method taking `Parameters<T>` whose `#[tool]` expanded first gets
    // the order error, not C1/C2's
    #[test]
    fn the_wrong_order_on_a_sync_method_says_which_order_works() {
        let out = expanded(
            quote!(),
            quote! {
                fn send_refund(&self, Parameters(r): Parameters<Refund>) -> String { String::new() }
            },
        );
        assert!(out.contains("write #[idempotent] above #[tool]"), "{out}");
    }

    // pins M12: written below `#[tool]`, the attribute sees rmcp's boxed future and says
    // which order works
    #[test]
    fn the_wrong_order_says_which_order_works() {
        let out = expanded(
            quote!(),
            quote! {
                fn send_refund(&self) -> ::std::pin::Pin<Box<dyn ::std::future::Future<Output = String> + Send + '_>> {
                    Box::pin(async move { String::new() })
                }
            },
        );
        assert!(out.contains("write #[idempotent] above #[tool]"), "{out}");
    }
}
