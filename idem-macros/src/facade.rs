//! Where the generated code finds the facade crate (`idem-agent`), whatever the user's
//! `Cargo.toml` calls it.
//!
//! In order:
//! 1. `#[idempotent(crate = "path")]`: that path, as written (serde's `#[serde(crate = …)]`);
//!    for a crate that re-exports the facade, or a build without Cargo.
//! 2. The dependency on the package `idem-agent` in the `Cargo.toml` of the crate being
//!    compiled, under its key: `idem-agent = "0.1"` gives `::idem_agent`,
//!    `idem = { package = "idem-agent", … }` gives `::idem` (looked up with
//!    `proc-macro-crate`, which also follows `workspace = true`).
//! 3. `::idem_agent` when the facade is the crate being compiled (its own tests, examples
//!    and doctests reach the library by its name) or when no such dependency is found (then
//!    rustc's "unresolved crate `idem_agent`" points at the attribute, and the `crate`
//!    option is the way out).

use proc_macro2::{Span, TokenStream};
use proc_macro_crate::FoundCrate;
use quote::{quote, ToTokens};

/// The facade's package name on crates.io.
pub(crate) const PACKAGE: &str = "idem-agent";

/// The path of the facade for this expansion, with call-site spans.
pub(crate) fn path(explicit: Option<&syn::Path>) -> TokenStream {
    if let Some(path) = explicit {
        return path.to_token_stream();
    }
    match proc_macro_crate::crate_name(PACKAGE) {
        Ok(FoundCrate::Name(name)) => {
            let ident = syn::Ident::new(&name, Span::call_site());
            quote!(::#ident)
        }
        Ok(FoundCrate::Itself) | Err(_) => quote!(::idem_agent),
    }
}
