//! `&'static ToolSpec`s for the tools an [`IdempotentServer`](super::IdempotentServer) keys
//! itself (contract M10).
//!
//! The call protocol takes a `&'static ToolSpec`. A server learns its tools' names at run
//! time, so it leaks one spec per distinct (tool name, settings) pair, process-wide: servers
//! built anew for every streamable HTTP session share them. Only names the inner handler's
//! `get_tool` confirms are ever interned, so a client calling made-up tool names cannot grow
//! this table.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::spec::ToolSpec;

static SPECS: LazyLock<Mutex<HashMap<String, Vec<&'static ToolSpec>>>> =
    LazyLock::new(Mutex::default);

/// The interned spec named `name` with the settings of `template` (whose own name is
/// ignored).
pub(crate) fn intern(name: &str, template: &ToolSpec) -> &'static ToolSpec {
    let wanted = ToolSpec {
        name: "",
        ..*template
    };
    let mut specs = SPECS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = specs.get(name).and_then(|known| {
        known.iter().find(|spec| {
            ToolSpec {
                name: "",
                ..***spec
            } == wanted
        })
    }) {
        return found;
    }
    let leaked_name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        name: leaked_name,
        ..wanted
    }));
    specs.entry(name.to_owned()).or_default().push(spec);
    spec
}

/// How many specs servers have interned in this process (for tests and monitoring: it
/// grows with distinct tool names and settings, never with calls).
#[doc(hidden)]
pub fn interned_tool_specs() -> usize {
    SPECS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .map(Vec::len)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // pins M10: one leaked spec per (name, settings), however many calls
    #[test]
    fn equal_specs_are_interned_once() {
        let template = ToolSpec::new("ignored");
        let a = intern("intern_test_tool", &template);
        let b = intern("intern_test_tool", &template);
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.name, "intern_test_tool");
        let longer = ToolSpec {
            ttl: Duration::from_secs(7 * 24 * 3600),
            ..template
        };
        let c = intern("intern_test_tool", &longer);
        assert!(!std::ptr::eq(a, c));
        assert_eq!(c.ttl, longer.ttl);
        assert!(std::ptr::eq(c, intern("intern_test_tool", &longer)));
    }
}
