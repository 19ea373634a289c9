//! Every RFC 8785 test vector of `tests/data/jcs-vectors` (see its `SOURCE.md`), through
//! `canonical::to_canonical` of the parsed input (contract K2).

use std::fs;
use std::path::{Path, PathBuf};

use idem_runtime::canonical::to_canonical;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs-vectors")
}

fn decode_hex(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .map(|pair| u8::from_str_radix(pair, 16).expect("outhex holds hex byte pairs"))
        .collect()
}

fn vector_names() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(vectors_dir().join("input"))
        .expect("input directory")
        .map(|entry| entry.expect("directory entry").file_name())
        .map(|name| name.to_string_lossy().trim_end_matches(".json").to_owned())
        .collect();
    names.sort();
    names
}

// pins K2: all vectors are present (a lost file would silently shrink the test)
#[test]
fn the_vector_set_is_complete() {
    assert_eq!(
        vector_names(),
        [
            "arrays",
            "french",
            "structures",
            "unicode",
            "values",
            "weird"
        ]
    );
}

// pins K2: canonical JSON is RFC 8785, byte for byte, on every vector
#[test]
fn every_vector_canonicalises_to_its_expected_bytes() {
    let dir = vectors_dir();
    for name in vector_names() {
        let input = fs::read_to_string(dir.join(format!("input/{name}.json"))).expect("input");
        let expected = fs::read(dir.join(format!("output/{name}.json"))).expect("output");
        let hex = fs::read_to_string(dir.join(format!("outhex/{name}.txt"))).expect("outhex");
        assert_eq!(
            decode_hex(&hex),
            expected,
            "{name}: output and outhex disagree"
        );

        let value: serde_json::Value = serde_json::from_str(&input).expect("input is JSON");
        let canonical = to_canonical(&value).expect("vector canonicalises");
        assert_eq!(
            canonical.as_str(),
            String::from_utf8_lossy(&expected),
            "{name}: canonical text differs"
        );
        assert_eq!(
            canonical.as_bytes(),
            expected,
            "{name}: canonical bytes differ"
        );
        assert_eq!(
            canonical.jcs_text(),
            canonical.as_str(),
            "{name}: no annex expected"
        );
    }
}
