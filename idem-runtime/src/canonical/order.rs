//! Member order of canonical objects: RFC 8785 §3.2.3 sorts member names by their UTF-16
//! code units, compared as unsigned integers, without any locale or normalisation.

use std::cmp::Ordering;

/// Compares two names by their UTF-16 code units (RFC 8785 §3.2.3), without allocating.
///
/// UTF-8 byte order equals code point order, and code point order equals UTF-16 order
/// except between a supplementary character (U+10000 and up, a surrogate pair starting
/// with 0xD800–0xDBFF) and a BMP character in U+E000–U+FFFF: UTF-16 puts the surrogate
/// first. So the bytes are compared up to the first difference, and the two characters
/// that differ there are compared by their first UTF-16 code unit.
pub(super) fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let Some(diff) = ab.iter().zip(bb).position(|(x, y)| x != y) else {
        return ab.len().cmp(&bb.len());
    };
    // The bytes before `diff` are equal, so both strings have a character starting at the
    // last character boundary at or before `diff`, and those two characters differ.
    let start = (0..=diff)
        .rev()
        .find(|&i| a.is_char_boundary(i))
        .unwrap_or(0);
    let first_char = |s: &str| s.get(start..).and_then(|rest| rest.chars().next());
    match (first_char(a), first_char(b)) {
        (Some(x), Some(y)) => first_unit(x).cmp(&first_unit(y)).then(x.cmp(&y)),
        // Unreachable: both strings extend past `diff`. Fall back to the exact rule.
        _ => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// The first UTF-16 code unit of `c`.
fn first_unit(c: char) -> u32 {
    let c = u32::from(c);
    if c >= 0x1_0000 {
        0xD800 + ((c - 0x1_0000) >> 10)
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(a: &str, b: &str) -> Ordering {
        a.encode_utf16().cmp(b.encode_utf16())
    }

    // pins K2: members sort by UTF-16 code units (RFC 8785 §3.2.3)
    #[test]
    fn agrees_with_utf16_on_tricky_pairs() {
        let names = [
            "",
            "a",
            "b",
            "ab",
            "aé",
            "é",
            "ê",
            "\u{e000}",
            "\u{ffff}",
            "\u{fb33}",
            "😂",
            "\u{10000}",
            "a😂",
            "a\u{ffff}",
            "\u{7f}",
            "\u{80}",
            "\u{7ff}",
            "\u{800}",
            "€",
            "\r",
            "\n",
            "1",
            "10",
            "\u{10ffff}",
            "\u{d7ff}",
        ];
        for a in names {
            for b in names {
                assert_eq!(cmp_utf16(a, b), exact(a, b), "{a:?} vs {b:?}");
            }
        }
    }

    // pins K2: UTF-16 order, not code point order
    #[test]
    fn supplementary_sorts_before_high_bmp() {
        assert_eq!(cmp_utf16("😂", "\u{fb33}"), Ordering::Less);
        assert_eq!("😂".cmp("\u{fb33}"), Ordering::Greater);
    }
}
