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
//!    Dependencies of a build script (`[build-dependencies]`) are not looked up
//!    (proc-macro-crate reads `[dependencies]` and `[dev-dependencies]`): a build script
//!    that renames the facade says where it is with `crate = "…"`.
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
        Ok(FoundCrate::Name(name)) => dependency_path(&name),
        Ok(FoundCrate::Itself) | Err(_) => quote!(::idem_agent),
    }
}

/// `::name` for a dependency's name as Cargo passes it to rustc. The key may be a keyword
/// (`match = { package = "idem-agent", … }`), which code reaches as `r#match`.
fn dependency_path(name: &str) -> TokenStream {
    let ident = syn::parse_str::<syn::Ident>(name)
        .map(|mut ident| {
            ident.set_span(Span::call_site());
            ident
        })
        .unwrap_or_else(|_| syn::Ident::new_raw(name, Span::call_site()));
    quote!(::#ident)
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins C5: a renamed dependency's key is the path; a keyword key is a raw identifier;
    // `crate = "…"` wins over the look-up
    #[test]
    fn names_become_paths() {
        assert_eq!(dependency_path("idem").to_string(), ":: idem");
        assert_eq!(dependency_path("match").to_string(), ":: r#match");
        let explicit: syn::Path = syn::parse_quote!(crate::platform::idem);
        assert_eq!(
            path(Some(&explicit)).to_string(),
            "crate :: platform :: idem"
        );
    }
}
