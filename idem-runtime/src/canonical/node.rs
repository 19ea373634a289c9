//! INTERIM capture through serde_json::Value; replaced by the guarded capture serializer.

use serde::{Serialize, Serializer};

use super::CanonicalError;

/// A captured JSON value with exact integers and finite floats.
#[derive(Debug, Clone, PartialEq)]
pub struct Node(serde_json::Value);

pub(super) fn capture<T: Serialize + ?Sized>(value: &T) -> Result<Node, CanonicalError> {
    serde_json::to_value(value)
        .map(Node)
        .map_err(|e| CanonicalError::Serialize {
            path: "$".into(),
            message: e.to_string(),
        })
}

impl Node {
    /// An object node from `(name, node)` members.
    pub fn object(members: Vec<(String, Node)>) -> Node {
        Node(serde_json::Value::Object(
            members.into_iter().map(|(k, v)| (k, v.0)).collect(),
        ))
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}
