//! `IdempotentServer` implements every method of rmcp's `ServerHandler` (contract M10): a
//! method it left out would fall back to the trait's default and hide the inner handler's
//! own implementation. The trait's methods are read from the rmcp source this workspace
//! builds (its path from `cargo metadata`), so an rmcp release that adds one fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The names of the fns declared in `text` (`fn name(` or `async fn name(`, one a line).
fn fn_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("async fn ")
                .or_else(|| line.strip_prefix("fn "))?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// This machine's target triple, from `rustc -vV` (the packages of other platforms, such as
/// clap's Windows-only `anstyle-wincon`, are not downloaded, and `--offline` metadata would
/// fail on them).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

fn rmcp_source_dir() -> PathBuf {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            &host_triple(),
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rmcp = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|package| package["name"] == "rmcp")
        .expect("rmcp in the dependency graph");
    PathBuf::from(rmcp["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_owned()
}

// pins M10: every ServerHandler method is implemented by the wrapper (delegated, or keyed /
// advertised), none left to the trait's default
#[test]
fn idempotent_server_implements_every_server_handler_method() {
    let server_rs =
        std::fs::read_to_string(rmcp_source_dir().join("src/handler/server.rs")).unwrap();
    let start = server_rs
        .find("macro_rules! server_handler_methods")
        .expect("rmcp declares the trait's methods in server_handler_methods!");
    let end = start
        + server_rs[start..]
            .find("pub trait ServerHandler")
            .expect("the trait follows the method list");
    let trait_methods = fn_names(&server_rs[start..end]);
    assert!(trait_methods.len() >= 30, "{trait_methods:?}");
    assert!(trait_methods.contains("call_tool") && trait_methods.contains("get_tool"));

    let handler_rs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../idem-runtime/src/integrations/rmcp/handler.rs"
    ))
    .unwrap();
    let implemented = fn_names(&handler_rs);
    let missing: Vec<_> = trait_methods.difference(&implemented).collect();
    let unknown: Vec<_> = implemented.difference(&trait_methods).collect();
    assert!(
        missing.is_empty(),
        "IdempotentServer does not implement {missing:?}: delegate them to the inner handler in handler.rs"
    );
    assert!(
        unknown.is_empty(),
        "handler.rs has fns the trait lacks: {unknown:?}"
    );
}
