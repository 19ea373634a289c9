//! Helpers shared by the dispatch tests.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use serde_json::Value;

/// The folder of recorded provider transcripts (`examples/transcripts` at the workspace
/// root).
pub fn transcripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/transcripts")
}

/// The path of the transcript `name` (without `.json`).
pub fn transcript_path(name: &str) -> PathBuf {
    transcripts_dir().join(format!("{name}.json"))
}

/// The transcript `name` (without `.json`), parsed as JSON.
pub fn transcript(name: &str) -> Value {
    let path = transcript_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}
