//! Writing a [`Node`]'s canonical form (see the [module docs](super)): the RFC 8785 text,
//! then the exactness annex, in one walk of the node.
//!
//! Member order comes from the node (sorted by UTF-16 code units when it was built,
//! RFC 8785 §3.2.3) and the punctuation (`{`, `:`, `,`, `[`) is written here. The text of
//! every string that needs an escape is written by `serde_json_canonicalizer`; floats are
//! written by `ryu-js`, the ECMAScript number formatter that crate itself calls. Two kinds
//! of token have a text that no JCS rule changes and are copied directly, which keeps the
//! crate's per-token allocations off the common path:
//! - a string with no `"`, `\` or control character: RFC 8785 §3.2.2.2 writes every other
//!   character as itself, so its text is the string between quotes;
//! - an integer of magnitude at most 2^53 − 1: it is a double exactly, and ECMAScript
//!   writes such doubles as their decimal digits (§3.2.2.3; no exponent below 1e21).
//!
//! `tests/canonical_props.rs` checks the whole text against `serde_json_canonicalizer`
//! run on the value itself, and `tests/jcs_vectors.rs` against the RFC's vectors.

use super::node::{Node, Number, Token, MAX_SAFE_INTEGER};
use super::CanonicalJson;

impl Node {
    /// The canonical form of this node: RFC 8785 text, then the exactness annex when the
    /// node holds integers of magnitude above 2^53 − 1 (K2, K3; see the
    /// [module docs](super)). Infallible: a `Node` holds only what JCS can write.
    pub fn to_canonical(&self) -> CanonicalJson {
        let mut writer = Writer {
            node: self,
            out: Vec::with_capacity(self.text.len() + 4 * self.tokens.len() + 8),
            annex: Vec::new(),
            numbers: 0,
        };
        let text = match writer.write().and_then(|()| writer.finish()) {
            Ok(text) => text,
            // The crate refuses only NaN/±Infinity, non-string keys and duplicate keys,
            // none of which a `Node` holds, and writes only UTF-8. Should it refuse
            // anyway, the text is a NUL byte and the node's debug rendering: never a JCS
            // text and still different for different nodes, so the failure can neither
            // panic nor make two values share a key.
            Err(Refused) => format!("\0{self:?}"),
        };
        CanonicalJson { text }
    }
}

/// `serde_json_canonicalizer` refused a token, or the text is not UTF-8.
struct Refused;

struct Writer<'a> {
    node: &'a Node,
    /// The JCS text so far (UTF-8: copied from `str`s, ASCII, or the crate's output).
    out: Vec<u8>,
    /// The exactness annex so far: `\n` ordinal `:` digits per unsafe integer, in text
    /// order.
    annex: Vec<u8>,
    /// How many numbers the text has so far.
    numbers: usize,
}

impl Writer<'_> {
    /// The JCS text and the annex, as one string.
    fn finish(mut self) -> Result<String, Refused> {
        self.out.extend_from_slice(&self.annex);
        String::from_utf8(self.out).map_err(|_| Refused)
    }

    /// One pass over the tokens, which are in document order already.
    fn write(&mut self) -> Result<(), Refused> {
        let node = self.node;
        // The open containers: the index where each ends, and its closing bracket.
        let mut open: Vec<(usize, u8)> = Vec::new();
        // Whether the next value or name needs a comma before it.
        let mut comma = false;
        for (at, &token) in node.tokens.iter().enumerate() {
            while let Some(&(end, closer)) = open.last() {
                if at < end {
                    break;
                }
                self.out.push(closer);
                open.pop();
                comma = true;
            }
            if comma {
                self.out.push(b',');
            }
            comma = true;
            match token {
                Token::Null => self.out.extend_from_slice(b"null"),
                Token::Bool(true) => self.out.extend_from_slice(b"true"),
                Token::Bool(false) => self.out.extend_from_slice(b"false"),
                Token::Number(n) => self.number(n)?,
                Token::String(span) => self.string(node.bytes(span))?,
                Token::Name(span) => {
                    self.string(node.bytes(span))?;
                    self.out.push(b':');
                    comma = false;
                }
                Token::Array { len, .. } => {
                    self.out.push(b'[');
                    open.push((at + 1 + len, b']'));
                    comma = false;
                }
                Token::Object { len, .. } => {
                    self.out.push(b'{');
                    open.push((at + 1 + len, b'}'));
                    comma = false;
                }
            }
        }
        while let Some((_, closer)) = open.pop() {
            self.out.push(closer);
        }
        Ok(())
    }

    /// A string, given as the UTF-8 bytes of a `str` of the node's text.
    fn string(&mut self, s: &[u8]) -> Result<(), Refused> {
        if needs_escape(s) {
            let s = std::str::from_utf8(s).map_err(|_| Refused)?;
            self.by_crate(&s)
        } else {
            self.out.push(b'"');
            self.out.extend_from_slice(s);
            self.out.push(b'"');
            Ok(())
        }
    }

    fn number(&mut self, n: Number) -> Result<(), Refused> {
        let ordinal = self.numbers;
        self.numbers += 1;
        match n {
            Number::Int(v) if v.unsigned_abs() <= MAX_SAFE_INTEGER => {
                push_int(&mut self.out, v);
                Ok(())
            }
            Number::Int(v) => {
                self.annex_line(ordinal);
                push_int(&mut self.annex, v);
                self.by_crate(&n)
            }
            Number::Big(v) => {
                self.annex_line(ordinal);
                self.annex.extend_from_slice(v.to_string().as_bytes());
                self.by_crate(&n)
            }
            Number::F64(v) => self.float(v),
            Number::F32(v) => self.float(f64::from(v)),
        }
    }

    /// Starts an annex line for the number at `ordinal` (its 0-based position among the
    /// text's numbers): `\n`, the ordinal, `:`. The ordinal says which number the exact
    /// digits belong to, so an unsafe integer and a float of equal JCS text that trade
    /// places give different forms.
    fn annex_line(&mut self, ordinal: usize) {
        self.annex.push(b'\n');
        let mut buffer = itoa::Buffer::new();
        self.annex
            .extend_from_slice(buffer.format(ordinal).as_bytes());
        self.annex.push(b':');
    }

    /// A finite double in ECMAScript `Number.prototype.toString` form (RFC 8785 §3.2.2.3),
    /// by `ryu-js`, the formatter `serde_json_canonicalizer` itself uses (`-0` → `0`,
    /// `1e21` → `1e+21`). A `Node` holds only finite floats.
    fn float(&mut self, v: f64) -> Result<(), Refused> {
        if !v.is_finite() {
            return Err(Refused);
        }
        let mut buffer = ryu_js::Buffer::new();
        self.out
            .extend_from_slice(buffer.format_finite(v).as_bytes());
        Ok(())
    }

    /// Appends the crate's JCS text of one token.
    fn by_crate<T: serde::Serialize>(&mut self, token: &T) -> Result<(), Refused> {
        serde_json_canonicalizer::to_writer(token, &mut self.out).map_err(|_| Refused)
    }
}

/// True when `bytes` holds `"`, `\\` or a control character (below 0x20): the bytes JSON
/// strings escape (RFC 8785 §3.2.2.2); every other character is written as itself.
/// No early exit: a branch-free fold the compiler vectorises (most strings need no escape,
/// so the whole string is read either way).
fn needs_escape(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |found, &b| {
        found | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// Appends the decimal digits of `v` (with `-` if negative), by `itoa`.
fn push_int(out: &mut Vec<u8>, v: i128) {
    let mut buffer = itoa::Buffer::new();
    out.extend_from_slice(buffer.format(v).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins K2: strings copied verbatim are exactly those JCS writes verbatim
    #[test]
    fn escape_scan_agrees_with_the_byte_rule() {
        let plain = |b: u8| b >= 0x20 && b != b'"' && b != b'\\';
        for len in 0..40 {
            for pos in 0..len {
                for special in (0u8..=0x7f).chain([0x80, 0xc3, 0xff]) {
                    let mut bytes = vec![b'a'; len];
                    bytes[pos] = special;
                    assert_eq!(needs_escape(&bytes), !plain(special), "{bytes:?}");
                }
            }
        }
    }

    // pins K2, K3: safe integers and annex lines are exact decimal digits
    #[test]
    fn integers_print_as_digits() {
        for v in [
            0i128,
            7,
            -7,
            10,
            9_007_199_254_740_991,
            -9_007_199_254_740_991,
            u64::MAX.into(),
            -i128::from(u64::MAX),
            i128::from(u64::MAX) + 1,
            i128::MIN,
            i128::MAX,
        ] {
            let mut out = Vec::new();
            push_int(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }
}
