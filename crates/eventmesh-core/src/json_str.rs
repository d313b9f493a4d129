//! JSON string literals written eight bytes at a time.
//!
//! An event's `data`, when it is text, is written into every delivery as a
//! JSON string: each byte must be checked for a quote, a backslash or a
//! control character. Checking one byte at a time made that the largest
//! single cost of a delivery of a 1 KiB event. Here a word of eight bytes
//! is tested at once and runs of plain bytes are copied whole; the output
//! is byte for byte what `serde_json` writes for the same string.

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// Non-zero if any byte of `w` is below `n` (`n` ≤ 128).
#[inline]
fn any_below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * n as u64) & !w & HIGHS
}

/// Non-zero if any byte of `w` equals `b`.
#[inline]
fn any_equal(w: u64, b: u8) -> u64 {
    any_below(w ^ (ONES * b as u64), 1)
}

/// Whether any of the eight bytes needs an escape.
#[inline]
fn needs_escape(w: u64) -> bool {
    (any_below(w, 0x20) | any_equal(w, b'"') | any_equal(w, b'\\')) != 0
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes the escape of `b`, a byte below 0x20, a quote or a backslash.
#[inline]
fn escape(out: &mut Vec<u8>, b: u8) {
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        _ => {
            let (hi, lo) = (HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]);
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hi, lo]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// Appends `s` as a JSON string literal, quotes included.
pub fn write(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `copied`: where the bytes not yet written start.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let end = (i + 8).min(bytes.len());
        if end - i == 8 {
            let word = u64::from_le_bytes(bytes[i..end].try_into().expect("eight bytes"));
            if !needs_escape(word) {
                i = end;
                continue;
            }
        }
        while i < end {
            let b = bytes[i];
            if b < 0x20 || b == b'"' || b == b'\\' {
                out.extend_from_slice(&bytes[copied..i]);
                escape(out, b);
                copied = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        write(&mut out, s);
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn every_ascii_byte_is_written_as_serde_json_writes_it() {
        for b in 0u8..0x80 {
            let s = (b as char).to_string();
            assert_eq!(
                ours(&s),
                serde_json::to_string(&s).unwrap(),
                "byte {b:#04x}"
            );
            // The same byte at each place of a word and in the tail.
            for at in 0..19 {
                let mut t = "abcdefghijklmnopqrs".to_string();
                t.replace_range(at..at + 1, &s);
                assert_eq!(
                    ours(&t),
                    serde_json::to_string(&t).unwrap(),
                    "byte {b:#04x} at {at}"
                );
            }
        }
    }

    #[test]
    fn mixed_strings_match_serde_json() {
        // A fixed pseudo-random sequence (xorshift): plain ASCII, the bytes
        // that need escapes, and characters of two to four bytes.
        let alphabet = [
            "a", "Z", "0", " ", "\"", "\\", "\n", "\r", "\t", "\u{8}", "\u{c}", "\u{1}", "\u{1f}",
            "\u{7f}", "/", "é", "€", "𝄞", "~",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300 {
            let mut s = String::new();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly plain bytes, so that whole clean words occur.
                let pick = if x % 4 == 0 {
                    (x >> 8) as usize % alphabet.len()
                } else {
                    0
                };
                s.push_str(alphabet[pick]);
            }
            assert_eq!(ours(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn an_empty_string_and_a_long_clean_one() {
        assert_eq!(ours(""), "\"\"");
        let long = "x".repeat(4099);
        assert_eq!(ours(&long), format!("\"{long}\""));
    }
}
