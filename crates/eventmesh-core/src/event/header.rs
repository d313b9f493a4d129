//! Binary-mode header values as the CloudEvents HTTP protocol binding 1.0.2
//! writes and reads them (section 3.1.3.2).
//!
//! Invariant: `decode_header_value(&percent_encode(v)) == Ok(v)` for every
//! string `v`, and an encoded value is printable ASCII without space, `"` or
//! a `%` that is not an escape, so it needs no further quoting in a header.

/// Percent-encodes a binary-mode header value as the CloudEvents HTTP
/// binding 1.0.2 requires (section 3.1.3.2): space, `"`, `%` and every
/// character outside printable ASCII (U+0021..U+007E) are written as the
/// `%XY` escapes (upper-case hex) of their UTF-8 bytes; the rest is kept.
pub fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        // Every byte of a multi-byte UTF-8 character is 0x80 or above, so
        // looking at bytes encodes whole characters.
        if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a binary-mode header value (CloudEvents HTTP binding 1.0.2,
/// section 3.1.3.2): one round of percent-decoding (hex in either case).
/// The decoded bytes must be UTF-8 (an overlong sequence such as `%C0%A0`
/// is refused). A `%` that does not start an escape is kept as it is, and
/// so is every other character: raw UTF-8 (which the CloudEvents SDKs'
/// binary writers send), spaces and double quotes arrive unchanged.
/// Reverses [`percent_encode`].
pub fn decode_header_value(v: &str) -> Result<String, String> {
    if !v.contains('%') {
        return Ok(v.to_string());
    }
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{v:?} percent-decodes to bytes that are not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_percent_encoded_as_the_http_binding_says() {
        // The binding's own example (HTTP protocol binding 1.0.2, 3.1.3.2).
        assert_eq!(
            percent_encode("Euro \u{20AC} \u{1F600}"),
            "Euro%20%E2%82%AC%20%F0%9F%98%80"
        );
        // Space, double quote and percent; everything else printable stays.
        assert_eq!(percent_encode("a b\"%é"), "a%20b%22%25%C3%A9");
        assert_eq!(percent_encode(" "), "%20");
        assert_eq!(percent_encode("\t\r\n\u{0}\u{7f}"), "%09%0D%0A%00%7F");
        assert_eq!(percent_encode("\u{80}\u{9f}"), "%C2%80%C2%9F");
        let printable: String = (0x21u8..=0x7e)
            .map(char::from)
            .filter(|c| *c != '"' && *c != '%')
            .collect();
        assert_eq!(percent_encode(&printable), printable);
        assert_eq!(percent_encode(""), "");
    }

    #[test]
    fn header_values_are_unquoted_then_percent_decoded() {
        let ok = |v: &str| decode_header_value(v).unwrap();
        assert_eq!(
            ok("Euro%20%E2%82%AC%20%F0%9F%98%80"),
            "Euro \u{20AC} \u{1F600}"
        );
        // Lower-case hex is accepted; needless escapes too.
        assert_eq!(ok("caf%c3%a9"), "café");
        assert_eq!(ok("%61%62c"), "abc");
        // Nothing but escapes is decoded: double quotes, backslashes,
        // spaces and raw UTF-8 stay as they came.
        assert_eq!(ok("\"a b\""), "\"a b\"");
        assert_eq!(ok(r#"say "hi" now"#), r#"say "hi" now"#);
        assert_eq!(ok(r"a\b"), r"a\b");
        assert_eq!(ok("größe \"q\" 100%"), "größe \"q\" 100%");
        assert_eq!(ok("gr%C3%B6%C3%9Fe"), "größe");
        // A `%` that starts no escape is kept.
        assert_eq!(ok("100%"), "100%");
        assert_eq!(ok("%zz"), "%zz");
        assert_eq!(ok("%4"), "%4");
        // One round only.
        assert_eq!(ok("%2520"), "%20");

        // Overlong encoding of U+0020, a lone continuation byte, and a
        // truncated sequence: not UTF-8.
        for bad in ["%C0%A0", "%80", "%E2%82", "x%FF"] {
            let e = decode_header_value(bad).unwrap_err();
            assert_eq!(
                e,
                format!("{bad:?} percent-decodes to bytes that are not UTF-8")
            );
        }
    }

    #[test]
    fn header_values_round_trip() {
        for v in [
            "plain",
            "a b",
            "quote \" and percent %",
            "100%",
            "%20 looks encoded",
            "\"quoted\"",
            "back\\slash",
            "tab\there",
            "é € 😀 \u{0}",
            "",
        ] {
            assert_eq!(decode_header_value(&percent_encode(v)).unwrap(), v, "{v:?}");
        }
    }
}
