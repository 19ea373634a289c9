//! The golden table `keys.json` (contract K5), and deriving its rows. Shared by
//! `golden_keys.rs` and by the `idem-k4` crate's tests, which run the same rows with
//! serde_json's `preserve_order`, `arbitrary_precision` and `raw_value` features on (K4).
//!
//! Changing any expected string of the table is a breaking change of the key format that
//! must bump `KEY_FORMAT_VERSION` (and the table's `key_format_version`).

use std::path::Path;

use idem_runtime::canonical::to_canonical;
use idem_runtime::key::{derive_key, ScopeComponent};
use idem_runtime::ArgsBuilder;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The whole table.
#[derive(Debug, Deserialize)]
pub struct Table {
    /// What the table is; not read.
    #[allow(dead_code)]
    pub about: Vec<String>,
    /// Must equal `KEY_FORMAT_VERSION`.
    pub key_format_version: u32,
    /// Calls and the keys they must derive.
    pub keys: Vec<KeyRow>,
    /// JSON texts and the canonical forms of the `Value`s they parse to.
    pub values: Vec<ValueRow>,
}

/// One call.
#[derive(Debug, Deserialize)]
pub struct KeyRow {
    pub name: String,
    pub scope: ScopeRow,
    pub tool: String,
    /// Argument name → value, added with `ArgsBuilder::key` (in the order the build's
    /// `Map` iterates: sorted, or file order under `preserve_order`).
    pub key_args: Map<String, Value>,
    /// Argument name → value, added with `ArgsBuilder::fingerprint`.
    #[serde(default)]
    pub fingerprint_args: Map<String, Value>,
    pub canonical: String,
    pub key: String,
    pub fingerprint: String,
}

#[derive(Debug, Deserialize)]
pub struct ScopeRow {
    pub kind: String,
    pub value: Option<String>,
    /// For `call`: the conversation the call belongs to.
    #[serde(default)]
    pub within: Option<String>,
}

/// One JSON text.
#[derive(Debug, Deserialize)]
pub struct ValueRow {
    pub name: String,
    pub json: String,
    pub canonical: String,
}

/// What a row derives.
#[derive(Debug, PartialEq, Eq)]
pub struct Derived {
    pub canonical: String,
    pub key: String,
    pub fingerprint: String,
}

impl KeyRow {
    /// What the row's call derives in this build.
    pub fn derive(&self) -> Derived {
        let mut args = ArgsBuilder::new();
        for (name, value) in &self.key_args {
            args.key(name, value)
                .expect("golden key argument canonicalises");
        }
        for (name, value) in &self.fingerprint_args {
            args.fingerprint(name, value)
                .expect("golden fingerprint argument canonicalises");
        }
        let (canonical, fingerprint) = args.finish();
        let scope = ScopeComponent {
            kind: &self.scope.kind,
            value: self.scope.value.as_deref(),
            within: self.scope.within.as_deref(),
        };
        Derived {
            canonical: canonical.as_str().to_owned(),
            key: derive_key(scope, &self.tool, &canonical).to_string(),
            fingerprint: fingerprint.to_string(),
        }
    }

    /// What the row expects.
    pub fn expected(&self) -> Derived {
        Derived {
            canonical: self.canonical.clone(),
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}

impl ValueRow {
    /// The canonical form of the `Value` the row's JSON parses to, in this build.
    pub fn canonical_of_value(&self) -> String {
        let value: Value = serde_json::from_str(&self.json).expect("golden JSON parses");
        to_canonical(&value)
            .expect("golden value canonicalises")
            .as_str()
            .to_owned()
    }
}

/// Reads the table from `idem-runtime/tests/golden/keys.json`, given the idem-runtime
/// directory.
pub fn load(runtime_dir: &Path) -> Table {
    let path = runtime_dir.join("tests/golden/keys.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is malformed: {e}", path.display()))
}

/// Every key row whose derivation differs from the table, described.
pub fn key_mismatches(table: &Table) -> Vec<String> {
    table
        .keys
        .iter()
        .filter_map(|row| {
            let derived = row.derive();
            (derived != row.expected()).then(|| {
                format!(
                    "row {:?}:\n  expected {:?}\n  derived  {:?}",
                    row.name,
                    row.expected(),
                    derived
                )
            })
        })
        .collect()
}

/// Every value row whose canonical form differs from the table, described.
pub fn value_mismatches(table: &Table) -> Vec<String> {
    table
        .values
        .iter()
        .filter_map(|row| {
            let derived = row.canonical_of_value();
            (derived != row.canonical).then(|| {
                format!(
                    "value {:?}:\n  expected {:?}\n  derived  {:?}",
                    row.name, row.canonical, derived
                )
            })
        })
        .collect()
}
