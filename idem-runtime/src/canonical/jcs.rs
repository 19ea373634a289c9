//! Writing a [`Node`]'s canonical form (see the [module docs](super)): the RFC 8785 text,
//! then the exactness annex, in one walk of the node.
//!
//! Member order comes from the node (sorted by UTF-16 code units when it was built,
//! RFC 8785 §3.2.3) and the punctuation (`{`, `:`, `,`, `[`) is written here. The text of
//! every number and of every string that needs an escape is written by
//! `serde_json_canonicalizer`. Two kinds of token have a text that no JCS rule changes
//! and are copied directly, which keeps the crate's per-token allocations off the common
//! path:
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
    /// The exactness annex so far: `\n` + digits per unsafe integer, in text order.
    annex: Vec<u8>,
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
        match n {
            Number::Int(v) if v.unsigned_abs() <= MAX_SAFE_INTEGER => {
                push_int(&mut self.out, v);
                Ok(())
            }
            Number::Int(v) => {
                self.annex.push(b'\n');
                push_int(&mut self.annex, v);
                self.by_crate(&n)
            }
            Number::Big(v) => {
                self.annex.push(b'\n');
                self.annex.extend_from_slice(v.to_string().as_bytes());
                self.by_crate(&n)
            }
            Number::F64(_) | Number::F32(_) => self.by_crate(&n),
        }
    }

    /// Appends the crate's JCS text of one token.
    fn by_crate<T: serde::Serialize>(&mut self, token: &T) -> Result<(), Refused> {
        serde_json_canonicalizer::to_writer(token, &mut self.out).map_err(|_| Refused)
    }
}

/// True when `bytes` holds `"`, `\\` or a control character (below 0x20): the bytes JSON
/// strings escape. Eight bytes at a time (the last eight overlapping the previous ones),
/// byte by byte below eight.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `x` is zero (exact, byte by byte).
    let has_zero = |x: u64| ((x & !HIGHS).wrapping_add(!HIGHS) | x) & HIGHS != HIGHS;
    // Whether some byte of `x` is below 0x20 (exact as a yes/no answer).
    let has_below_0x20 = |x: u64| x.wrapping_sub(ONES * 0x20) & !x & HIGHS != 0;
    let special = |word: &[u8]| {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            return true;
        };
        let x = u64::from_ne_bytes(word);
        has_below_0x20(x)
            || has_zero(x ^ (ONES * u64::from(b'"')))
            || has_zero(x ^ (ONES * u64::from(b'\\')))
    };
    if bytes.len() < 8 {
        return bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    }
    let mut chunks = bytes.chunks_exact(8);
    if chunks.any(special) {
        return true;
    }
    !chunks.remainder().is_empty() && special(bytes.get(bytes.len() - 8..).unwrap_or_default())
}

/// Appends the decimal digits of `v` (with `-` if negative).
fn push_int(out: &mut Vec<u8>, v: i128) {
    if v < 0 {
        out.push(b'-');
    }
    match u64::try_from(v.unsigned_abs()) {
        Ok(magnitude) => push_u64(out, magnitude),
        Err(_) => out.extend_from_slice(v.unsigned_abs().to_string().as_bytes()),
    }
}

/// Appends the decimal digits of `v`.
fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(buf.get(at..).unwrap_or_default());
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
