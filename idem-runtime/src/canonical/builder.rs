//! Building a flat [`Node`]: tokens appended in document order, containers opened with a
//! placeholder and closed with their size; objects are sorted when they close (`sort.rs`).

use super::node::{Node, Number, Span, Token};
use super::sort::{Member, StructOrders};

/// A node under construction.
#[derive(Default)]
pub(super) struct Builder {
    pub(super) tokens: Vec<Token>,
    pub(super) text: String,
    /// Scratch for sorting an object: each member's name and token range.
    pub(super) order: Vec<Member>,
    /// Scratch for sorting an object: its tokens in sorted order.
    pub(super) moved: Vec<Token>,
    /// The field names of the structs being captured, innermost last.
    pub(super) fields: Vec<&'static str>,
    /// The member order of struct types already sorted in this capture.
    pub(super) struct_orders: StructOrders,
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
}
