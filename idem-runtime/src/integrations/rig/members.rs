//! A rig tool's typed arguments as the members of idem's key object (R2, K8).
//!
//! A `#[idempotent]` fn is keyed by one JSON object whose members are its parameters, each
//! serialized from its typed value ([`ArgsBuilder`]). A rig tool takes one arguments value
//! whose JSON is the object the model sent; so its top-level members play the parameters:
//! each is added to the [`ArgsBuilder`] by name, serialized from the typed value (never
//! through a `serde_json::Value`, which would write NaN as `null`, K3). The key is then the
//! one idem's own dispatcher derives for a fn whose parameters are those members.

use std::fmt;

use serde::ser::{self, Impossible, Serialize, Serializer};

use crate::args::ArgsBuilder;
use crate::canonical::CanonicalError;

/// The member name a non-object arguments value (`Args = i64`, a sequence, an enum) is
/// keyed under: the key object is `{"args": value}`.
pub(super) const WHOLE: &str = "args";

/// Which members are in the key, in the fingerprint only, or left out (K8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Selection {
    /// `Some`: only these members are in the key, the others in the fingerprint.
    pub(super) key: Option<Vec<String>>,
    /// Members in neither.
    pub(super) skip: Vec<String>,
}

enum Role {
    Key,
    Fingerprint,
    Skip,
}

impl Selection {
    fn role(&self, name: &str) -> Role {
        if self.skip.iter().any(|s| s == name) {
            return Role::Skip;
        }
        match &self.key {
            Some(key) if !key.iter().any(|k| k == name) => Role::Fingerprint,
            _ => Role::Key,
        }
    }

    /// Every name the selection mentions.
    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.key
            .iter()
            .flatten()
            .chain(&self.skip)
            .map(String::as_str)
    }

    fn add<T: Serialize + ?Sized>(
        &self,
        builder: &mut ArgsBuilder,
        name: &str,
        value: &T,
    ) -> Result<(), CanonicalError> {
        match self.role(name) {
            Role::Key => builder.key(name, value).map(drop),
            Role::Fingerprint => builder.fingerprint(name, value).map(drop),
            Role::Skip => Ok(()),
        }
    }

    /// Adds the members of `args` to `builder`: each top-level member of an object (a
    /// struct, a map, a flattened struct) by its name; nothing for a unit value or `None`
    /// (the key object of a tool without arguments is `{}`); any other value whole, as the
    /// member [`WHOLE`].
    ///
    /// # Errors
    /// [`CanonicalError`] naming the member whose value has no canonical JSON (NaN, a
    /// duplicate member, a failing `Serialize` impl), or a map key JSON cannot hold.
    pub(super) fn fill<A: Serialize + ?Sized>(
        &self,
        builder: &mut ArgsBuilder,
        args: &A,
    ) -> Result<(), CanonicalError> {
        let members = Members {
            builder: &mut *builder,
            selection: self,
        };
        match args.serialize(members) {
            Ok(()) => Ok(()),
            Err(MembersError::NotAnObject) => self.add(builder, WHOLE, args),
            Err(MembersError::Canonical(error)) => Err(error),
            Err(MembersError::Custom(message)) => Err(CanonicalError::Serialize {
                path: "$".to_owned(),
                message,
            }),
        }
    }
}

#[derive(Debug)]
enum MembersError {
    /// The value is not a JSON object: keyed whole. Raised before any member is added.
    NotAnObject,
    Canonical(CanonicalError),
    Custom(String),
}

impl fmt::Display for MembersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MembersError::NotAnObject => f.write_str("the arguments are not a JSON object"),
            MembersError::Canonical(error) => error.fmt(f),
            MembersError::Custom(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for MembersError {}

impl ser::Error for MembersError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        MembersError::Custom(msg.to_string())
    }
}

impl From<CanonicalError> for MembersError {
    fn from(error: CanonicalError) -> Self {
        MembersError::Canonical(error)
    }
}

/// The top-level serializer: objects are split into members, a newtype or `Some` is looked
/// through, unit and `None` have no members, everything else is [`MembersError::NotAnObject`].
struct Members<'a> {
    builder: &'a mut ArgsBuilder,
    selection: &'a Selection,
}

/// The members of a map: each key is written as JSON text first.
struct MapMembers<'a> {
    members: Members<'a>,
    name: Option<String>,
}

macro_rules! not_an_object {
    ($($method:ident($($ty:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $ty),*) -> Result<(), MembersError> {
            Err(MembersError::NotAnObject)
        })*
    };
}

impl<'a> Serializer for Members<'a> {
    type Ok = ();
    type Error = MembersError;
    type SerializeSeq = Impossible<(), MembersError>;
    type SerializeTuple = Impossible<(), MembersError>;
    type SerializeTupleStruct = Impossible<(), MembersError>;
    type SerializeTupleVariant = Impossible<(), MembersError>;
    type SerializeMap = MapMembers<'a>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), MembersError>;

    not_an_object!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_none(self) -> Result<(), MembersError> {
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), MembersError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), MembersError> {
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), MembersError> {
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), MembersError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), MembersError> {
        Err(MembersError::NotAnObject)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, MembersError> {
        Err(MembersError::NotAnObject)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, MembersError> {
        Err(MembersError::NotAnObject)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, MembersError> {
        Err(MembersError::NotAnObject)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, MembersError> {
        Err(MembersError::NotAnObject)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, MembersError> {
        Ok(MapMembers {
            members: self,
            name: None,
        })
    }

    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, MembersError> {
        Ok(self)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, MembersError> {
        Err(MembersError::NotAnObject)
    }
}

impl ser::SerializeStruct for Members<'_> {
    type Ok = ();
    type Error = MembersError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), MembersError> {
        Ok(self.selection.add(self.builder, name, value)?)
    }

    fn end(self) -> Result<(), MembersError> {
        Ok(())
    }
}

impl ser::SerializeMap for MapMembers<'_> {
    type Ok = ();
    type Error = MembersError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), MembersError> {
        // A member name as serde_json writes a map key: strings as they are, numbers and
        // bools as their JSON text.
        let name = match serde_json::to_value(key) {
            Ok(serde_json::Value::String(name)) => name,
            Ok(serde_json::Value::Number(number)) => number.to_string(),
            Ok(serde_json::Value::Bool(flag)) => flag.to_string(),
            Ok(other) => {
                return Err(MembersError::Canonical(CanonicalError::UnsupportedMapKey {
                    path: "$".to_owned(),
                    key_kind: json_kind(&other).to_owned(),
                }))
            }
            Err(error) => return Err(MembersError::Custom(error.to_string())),
        };
        self.name = Some(name);
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), MembersError> {
        let name = self.name.take().ok_or_else(|| {
            MembersError::Custom("a map value was serialized before its key".to_owned())
        })?;
        Ok(self
            .members
            .selection
            .add(self.members.builder, &name, value)?)
    }

    fn end(self) -> Result<(), MembersError> {
        Ok(())
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "none",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "sequence",
        serde_json::Value::Object(_) => "map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    fn key_text<A: Serialize + ?Sized>(selection: &Selection, args: &A) -> String {
        let mut builder = ArgsBuilder::new();
        selection.fill(&mut builder, args).unwrap();
        builder.finish().0.as_str().to_owned()
    }

    fn builder_text(fill: impl FnOnce(&mut ArgsBuilder)) -> String {
        let mut builder = ArgsBuilder::new();
        fill(&mut builder);
        builder.finish().0.as_str().to_owned()
    }

    #[derive(Serialize)]
    struct Refund {
        order_id: String,
        amount_cents: u64,
    }

    #[derive(Serialize)]
    struct Wrapped(Refund);

    // pins R2: a struct's fields are the key object's members, as a fn's parameters are
    #[test]
    fn struct_fields_are_members() {
        let refund = Refund {
            order_id: "o".into(),
            amount_cents: 5,
        };
        let expected = builder_text(|b| {
            b.key("order_id", "o").unwrap();
            b.key("amount_cents", &5u64).unwrap();
        });
        assert_eq!(key_text(&Selection::default(), &refund), expected);
        assert_eq!(key_text(&Selection::default(), &Wrapped(refund)), expected);
        let map: BTreeMap<&str, u64> = [("b", 1), ("a", 2)].into();
        assert_eq!(
            key_text(&Selection::default(), &map),
            builder_text(|b| {
                b.key("a", &2u64).unwrap();
                b.key("b", &1u64).unwrap();
            })
        );
    }

    // pins R2: a value that is not an object is the member `args`; unit has no members
    #[test]
    fn other_values_are_keyed_whole() {
        assert_eq!(key_text(&Selection::default(), &21i64), r#"{"args":21}"#);
        assert_eq!(
            key_text(&Selection::default(), &[1, 2]),
            r#"{"args":[1,2]}"#
        );
        assert_eq!(key_text(&Selection::default(), &()), "{}");
        assert_eq!(key_text(&Selection::default(), &None::<Refund>), "{}");
    }

    // pins K3: a NaN member is an error naming the member, never `null`
    #[test]
    fn nan_is_an_error() {
        #[derive(Serialize)]
        struct Price {
            price: f64,
        }
        let mut builder = ArgsBuilder::new();
        let error = Selection::default()
            .fill(&mut builder, &Price { price: f64::NAN })
            .unwrap_err();
        assert!(
            matches!(&error, CanonicalError::NonFiniteNumber { path, .. } if path.starts_with("price")),
            "{error:?}"
        );
    }

    // pins K8: key(…) members form the key, the others the fingerprint; skip(…) neither
    #[test]
    fn selection_splits_members() {
        let selection = Selection {
            key: Some(vec!["order_id".into()]),
            skip: vec![],
        };
        let refund = Refund {
            order_id: "o".into(),
            amount_cents: 5,
        };
        let mut builder = ArgsBuilder::new();
        selection.fill(&mut builder, &refund).unwrap();
        let (key, fingerprint) = builder.finish();
        assert_eq!(key.as_str(), r#"{"order_id":"o"}"#);
        let (_, other) = ArgsBuilder::new().finish();
        assert_ne!(fingerprint, other);
        let skipped = Selection {
            key: None,
            skip: vec!["amount_cents".into()],
        };
        assert_eq!(key_text(&skipped, &refund), r#"{"order_id":"o"}"#);
    }
}
