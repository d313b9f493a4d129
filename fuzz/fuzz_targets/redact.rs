//! Fuzzes redaction: any text is scanned for URLs, query parameters and
//! connection-string pairs without panicking; a redacted string given back
//! against its original restores it; and a string with a password-bearing
//! URL appended never shows that password.

#![no_main]

use eventmesh_core::redact;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let shown = redact::text(text);
    assert_eq!(redact::restore(&shown, Some(text)).as_deref(), Some(text));
    // (Text that holds the word itself may show it: only the URL's copy
    // is a password.)
    if !text.contains("Zq9Secret") {
        let with_url = format!("{text} nats://u:Zq9Secret@h:4222");
        assert!(!redact::text(&with_url).contains("Zq9Secret"));
    }
    let _ = redact::message(text, &[text.to_string()]);
});
