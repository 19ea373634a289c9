//! Building a flat [`Node`]: tokens appended in document order, containers opened with a
//! placeholder and closed with their size, objects sorted when they close.

use std::cmp::Ordering;

use super::node::{Node, Number, Span, Token};
use super::order::cmp_utf16;
use super::path::Path;
use super::CanonicalError;

/// A node under construction.
#[derive(Default)]
pub(super) struct Builder {
    pub(super) tokens: Vec<Token>,
    pub(super) text: String,
    /// Scratch for sorting an object: each member's name and token range.
    order: Vec<(Span, usize, usize)>,
    /// Scratch for sorting an object: its tokens in sorted order.
    moved: Vec<Token>,
}

impl Builder {
    pub(super) fn finish(self) -> Node {
        Node {
            tokens: self.tokens,
            text: self.text,
        }
    }

    pub(super) fn push(&mut self, token: Token) {
        self.tokens.push(token);
    }

    pub(super) fn number(&mut self, n: Number) {
        self.tokens.push(Token::Number(n));
    }

    /// Appends `s` to the text.
    pub(super) fn text_span(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span {
            start,
            end: self.text.len(),
        }
    }

    pub(super) fn string(&mut self, s: &str) {
        let span = self.text_span(s);
        self.tokens.push(Token::String(span));
    }

    pub(super) fn name(&mut self, s: &str) {
        let span = self.text_span(s);
        self.tokens.push(Token::Name(span));
    }

    /// Appends a whole node's tokens (its spans moved to this builder's text).
    pub(super) fn append(&mut self, node: &Node) {
        let base = self.text.len();
        self.text.push_str(&node.text);
        let shift = |s: Span| Span {
            start: s.start + base,
            end: s.end + base,
        };
        self.tokens
            .extend(node.tokens.iter().map(|&token| match token {
                Token::String(s) => Token::String(shift(s)),
                Token::Name(s) => Token::Name(shift(s)),
                other => other,
            }));
    }

    /// Opens an array; returns its index for [`Builder::close_array`].
    pub(super) fn open_array(&mut self) -> usize {
        self.tokens.push(Token::Array { count: 0, len: 0 });
        self.tokens.len() - 1
    }

    /// Opens an object; returns its index for [`Builder::close_object`].
    pub(super) fn open_object(&mut self) -> usize {
        self.tokens.push(Token::Object { count: 0, len: 0 });
        self.tokens.len() - 1
    }

    fn len_after(&self, at: usize) -> usize {
        self.tokens.len().saturating_sub(at + 1)
    }

    pub(super) fn close_array(&mut self, at: usize, count: usize) {
        let len = self.len_after(at);
        if let Some(token) = self.tokens.get_mut(at) {
            *token = Token::Array { count, len };
        }
    }

    /// Closes an object whose members are known to be sorted and unique.
    pub(super) fn close_sorted_object(&mut self, at: usize, count: usize) {
        let len = self.len_after(at);
        if let Some(token) = self.tokens.get_mut(at) {
            *token = Token::Object { count, len };
        }
    }

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
            Some(name) => Err(CanonicalError::DuplicateMember {
                path: path.render(&self.text),
                name: self
                    .text
                    .get(name.start..name.end)
                    .unwrap_or_default()
                    .to_owned(),
            }),
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
        } = self;
        let name = |span: Span| text.get(span.start..span.end).unwrap_or_default();
        order.clear();
        let mut i = at + 1;
        while let Some(&Token::Name(span)) = tokens.get(i) {
            let end = i + 1 + tokens.get(i + 1).map_or(1, |t| t.span_len());
            order.push((span, i, end));
            i = end;
        }
        let mut sorted = true;
        for pair in order.windows(2) {
            match cmp_utf16(name(pair[0].0), name(pair[1].0)) {
                Ordering::Less => {}
                Ordering::Equal => return Some(pair[0].0),
                Ordering::Greater => sorted = false,
            }
        }
        if sorted {
            return None;
        }
        order.sort_unstable_by(|a, b| cmp_utf16(name(a.0), name(b.0)));
        if let Some(pair) = order.windows(2).find(|p| name(p[0].0) == name(p[1].0)) {
            return Some(pair[0].0);
        }
        moved.clear();
        for &(_, start, end) in order.iter() {
            moved.extend_from_slice(tokens.get(start..end).unwrap_or_default());
        }
        if let Some(members) = tokens.get_mut(at + 1..at + 1 + moved.len()) {
            members.copy_from_slice(moved);
        }
        None
    }
}
