//! Sorting an object's members when it closes (RFC 8785 §3.2.3): by the UTF-16 code units
//! of their names, moving each member's tokens (its name, then its value) into place.
//!
//! Struct types repeat (a `Vec<Order>` closes one `Order` object per element) with the
//! same field names in the same order, so the order found for a struct's fields is kept
//! for the rest of the capture and reused without comparing names again.

use std::cmp::Ordering;

use super::builder::Builder;
use super::node::{Span, Token};
use super::order::cmp_utf16;
use super::path::Path;
use super::CanonicalError;

/// One member of an object being sorted.
pub(super) struct Member {
    name: Span,
    /// See [`byte_order_prefix`].
    prefix: Option<u64>,
    /// The member's position in the object as serialized.
    index: usize,
    /// The member's tokens: its name, then its value.
    start: usize,
    end: usize,
}

/// The member order of struct types, found once per capture.
#[derive(Default)]
pub(super) struct StructOrders(Vec<StructOrder>);

struct StructOrder {
    /// The struct's field names as serialized (`&'static str`s from its `Serialize`
    /// impl, compared by address: equal addresses are equal names).
    fields: Vec<&'static str>,
    /// The serialized positions of the members in sorted order; `None` when already
    /// sorted.
    sorted: Option<Vec<usize>>,
}

/// How many struct types a capture remembers.
const MAX_STRUCT_ORDERS: usize = 64;

impl StructOrders {
    fn find(&self, fields: &[&'static str]) -> Option<&StructOrder> {
        self.0.iter().find(|order| {
            order.fields.len() == fields.len()
                && order
                    .fields
                    .iter()
                    .zip(fields)
                    .all(|(a, b)| std::ptr::eq(*a, *b))
        })
    }
}

impl Builder {
    /// Closes the object opened at `at` with `count` members: sorts the members by the
    /// UTF-16 code units of their names (RFC 8785 §3.2.3), moving their tokens.
    ///
    /// # Errors
    /// [`CanonicalError::DuplicateMember`] at `path` when two names are equal.
    pub(super) fn close_object(
        &mut self,
        at: usize,
        count: usize,
        path: &Path<'_>,
    ) -> Result<(), CanonicalError> {
        match self.sort_object(at, count) {
            None => Ok(()),
            Some(name) => Err(self.duplicate(path, name)),
        }
    }

    /// Closes the object opened at `at` with `count` members and sorts its members (see
    /// [`Builder::close_object`]). Returns the first repeated name, if any, in which case
    /// the members may be left unsorted.
    pub(super) fn sort_object(&mut self, at: usize, count: usize) -> Option<Span> {
        self.close_sorted_object(at, count);
        if count < 2 {
            return None;
        }
        let Builder {
            tokens,
            text,
            order,
            moved,
            ..
        } = self;
        let name = |m: &Member| text.get(m.name.start..m.name.end).unwrap_or_default();
        let cmp = |a: &Member, b: &Member| match (a.prefix, b.prefix) {
            (Some(x), Some(y)) if x != y => x.cmp(&y),
            _ => cmp_utf16(name(a), name(b)),
        };
        collect_members(tokens, at, order);
        for member in order.iter_mut() {
            let bytes = text.as_bytes().get(member.name.start..member.name.end);
            member.prefix = byte_order_prefix(bytes.unwrap_or_default());
        }
        let mut sorted = true;
        for pair in order.windows(2) {
            match cmp(&pair[0], &pair[1]) {
                Ordering::Less => {}
                Ordering::Equal => return Some(pair[0].name),
                Ordering::Greater => sorted = false,
            }
        }
        if sorted {
            return None;
        }
        order.sort_unstable_by(cmp);
        if let Some(pair) = order.windows(2).find(|p| cmp(&p[0], &p[1]).is_eq()) {
            return Some(pair[0].name);
        }
        move_members(tokens, moved, at, order.iter());
        None
    }

    /// Closes a struct's object (see [`Builder::close_object`]) whose field names are
    /// `self.fields[fields..]`, reusing the order found for the same fields before.
    ///
    /// # Errors
    /// [`CanonicalError::DuplicateMember`] at `path` when two names are equal.
    pub(super) fn close_struct(
        &mut self,
        at: usize,
        count: usize,
        fields: usize,
        path: &Path<'_>,
    ) -> Result<(), CanonicalError> {
        let result = self.sort_struct(at, count, fields);
        self.fields.truncate(fields);
        match result {
            None => Ok(()),
            Some(name) => Err(self.duplicate(path, name)),
        }
    }

    fn duplicate(&self, path: &Path<'_>, name: Span) -> CanonicalError {
        CanonicalError::DuplicateMember {
            path: path.render(&self.text),
            name: self
                .text
                .get(name.start..name.end)
                .unwrap_or_default()
                .to_owned(),
        }
    }

    fn sort_struct(&mut self, at: usize, count: usize, fields: usize) -> Option<Span> {
        self.close_sorted_object(at, count);
        let names = self.fields.get(fields..).unwrap_or_default();
        if count < 2 || names.len() != count {
            return self.sort_object(at, count);
        }
        let Some(known) = self.struct_orders.find(names) else {
            let duplicate = self.sort_object(at, count);
            if duplicate.is_none() && self.struct_orders.0.len() < MAX_STRUCT_ORDERS {
                let identity = self.order.iter().enumerate().all(|(i, m)| m.index == i);
                let sorted = (!identity).then(|| self.order.iter().map(|m| m.index).collect());
                let fields = self.fields.get(fields..).unwrap_or_default().to_vec();
                self.struct_orders.0.push(StructOrder { fields, sorted });
            }
            return duplicate;
        };
        let Builder {
            tokens,
            order,
            moved,
            ..
        } = self;
        if let Some(sorted) = &known.sorted {
            collect_members(tokens, at, order);
            move_members(
                tokens,
                moved,
                at,
                sorted.iter().filter_map(|&i| order.get(i)),
            );
        }
        None
    }
}

/// Rewrites the members of the object at `at` in the order of `members`, through `moved`.
fn move_members<'m>(
    tokens: &mut [Token],
    moved: &mut Vec<Token>,
    at: usize,
    members: impl Iterator<Item = &'m Member>,
) {
    moved.clear();
    for member in members {
        moved.extend_from_slice(tokens.get(member.start..member.end).unwrap_or_default());
    }
    if let Some(slots) = tokens.get_mut(at + 1..at + 1 + moved.len()) {
        slots.copy_from_slice(moved);
    }
}

/// Collects the members of the object at `at` into `order`, as serialized (without
/// their prefixes).
fn collect_members(tokens: &[Token], at: usize, order: &mut Vec<Member>) {
    order.clear();
    let mut i = at + 1;
    while let Some(&Token::Name(span)) = tokens.get(i) {
        let end = i + 1 + tokens.get(i + 1).map_or(1, |t| t.span_len());
        order.push(Member {
            name: span,
            prefix: None,
            index: order.len(),
            start: i,
            end,
        });
        i = end;
    }
}

/// The first 8 bytes of a name, big-endian, zero-padded: two names whose prefixes differ
/// compare as their prefixes do. `None` when those bytes include one of 0xEE and up:
/// there, byte order and UTF-16 order can disagree (see [`cmp_utf16`]), so such names
/// are always compared in full. Equal prefixes are compared in full too.
fn byte_order_prefix(name: &[u8]) -> Option<u64> {
    let mut prefix = 0u64;
    let mut special = false;
    for (i, &b) in name.iter().take(8).enumerate() {
        prefix |= u64::from(b) << (56 - 8 * i);
        special |= b >= 0xEE;
    }
    (!special).then_some(prefix)
}
