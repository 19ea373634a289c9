//! The `#[idempotent]` attribute of [`idem`](https://docs.rs/idem). Depend on `idem`, which
//! re-exports it: the generated code refers to `::idem` paths only.
//!
//! Layout: `attr` parses the attribute's options, `item` checks the fn and sorts its
//! arguments, `expand` writes the fn around the call protocol, `companion` writes the
//! dispatch companion.

#![forbid(unsafe_code)]

mod attr;
mod companion;
mod expand;
mod item;

use proc_macro::TokenStream;

/// Makes a side-effecting tool fn safe to retry: a repeated call with the same
/// idempotency key returns the first call's saved outcome instead of running the body.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(args.into(), item.into()).into()
}
