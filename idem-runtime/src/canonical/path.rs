//! Locations inside a captured value, for error messages.
//!
//! A [`Path`] is a linked list on the capture's call stack: building one costs nothing,
//! and it is rendered to text only when an error names it.

use std::fmt::Write as _;

use super::node::Span;

/// Where the capture currently is: the root name, then members and array indexes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Path<'a> {
    /// The root: `$`, or an argument's name.
    Root(&'a str),
    /// A member of the object at the parent path.
    Member(&'a Path<'a>, &'a str),
    /// A member of the map at the parent path, named by a span of the capture's text.
    Key(&'a Path<'a>, Span),
    /// An element of the array at the parent path.
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// The path as text: `$.items[2].price`, `amount["odd name"]`. `text` is the text of
    /// the capture that made the path, where [`Path::Key`] names are.
    ///
    /// A member name that is an identifier (`[A-Za-z_][A-Za-z0-9_]*`) is written after a
    /// dot; any other name is written as a JSON string in brackets, so every path reads
    /// back unambiguously.
    pub(super) fn render(&self, text: &str) -> String {
        let mut out = String::new();
        self.render_into(text, &mut out);
        out
    }

    fn render_into(&self, text: &str, out: &mut String) {
        match *self {
            Path::Root(root) => out.push_str(root),
            Path::Member(parent, name) => {
                parent.render_into(text, out);
                push_member(out, name);
            }
            Path::Key(parent, span) => {
                parent.render_into(text, out);
                push_member(out, text.get(span.start..span.end).unwrap_or_default());
            }
            Path::Index(parent, index) => {
                parent.render_into(text, out);
                // Writing to a String cannot fail.
                let _ = write!(out, "[{index}]");
            }
        }
    }
}

fn push_member(out: &mut String, name: &str) {
    if is_identifier(name) {
        out.push('.');
        out.push_str(name);
    } else {
        out.push('[');
        push_quoted(out, name);
        out.push(']');
    }
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Writes `name` as a JSON string literal (escaping `"`, `\` and control characters).
fn push_quoted(out: &mut String, name: &str) {
    out.push('"');
    for c in name.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins K3: error paths name where the offending value is
    #[test]
    fn renders_members_indexes_and_odd_names() {
        let root = Path::Root("amount");
        let items = Path::Member(&root, "items");
        let second = Path::Index(&items, 2);
        let price = Path::Member(&second, "price");
        assert_eq!(price.render(""), "amount.items[2].price");
        let odd = Path::Member(&root, "a \"b\"\n");
        assert_eq!(odd.render(""), r#"amount["a \"b\"\n"]"#);
        assert_eq!(Path::Member(&root, "").render(""), r#"amount[""]"#);
        assert_eq!(Path::Member(&root, "1a").render(""), r#"amount["1a"]"#);
        assert_eq!(Path::Root("$").render(""), "$");
        let key = Path::Key(&root, Span { start: 3, end: 8 });
        assert_eq!(key.render("xx.tax_1,"), "amount.tax_1");
        assert_eq!(
            Path::Key(&root, Span { start: 3, end: 99 }).render("x"),
            r#"amount[""]"#
        );
    }
}
