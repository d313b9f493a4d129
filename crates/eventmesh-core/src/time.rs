//! Wall-clock time as the mesh records and checks it: milliseconds since
//! the Unix epoch (record times, dedup windows, timestamps of tasks), and
//! the Unix-seconds timestamps that signed requests carry. Deadlines and
//! timers use tokio's monotonic clock instead, never these.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 on a clock set before it.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// An RFC 3339 timestamp as milliseconds since the epoch (a time before
/// the epoch is 0); the parser's complaint when it is not one.
pub fn parse_rfc3339_ms(t: &str) -> Result<u64, String> {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
        .map_err(|e| e.to_string())
}

/// Milliseconds since the epoch as an RFC 3339 timestamp in UTC, to the
/// millisecond.
pub fn format_rfc3339_ms(ms: u64) -> String {
    let t = i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .unwrap_or_default();
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The whole seconds of a signature timestamp, `<seconds>[.<1-9 digits>]`;
/// `None` for anything else (signs, spaces, exponents, over 20 digits).
pub fn parse_unix_seconds(ts: &str) -> Option<u64> {
    let (secs, fraction) = match ts.split_once('.') {
        Some((s, f)) => (s, Some(f)),
        None => (ts, None),
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(secs, 20) || fraction.is_some_and(|f| !digits(f, 9)) {
        return None;
    }
    secs.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_timestamps() {
        assert_eq!(parse_unix_seconds("1700000000"), Some(1_700_000_000));
        assert_eq!(
            parse_unix_seconds("1700000000.123456789"),
            Some(1_700_000_000)
        );
        for bad in [
            "",
            ".5",
            "17.",
            "-1",
            "+1",
            " 1",
            "1e9",
            "1.1234567890",
            "x",
        ] {
            assert_eq!(parse_unix_seconds(bad), None, "{bad:?}");
        }
        assert_eq!(parse_unix_seconds(&"9".repeat(21)), None);
        assert!(now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn rfc3339_round_trips_to_the_millisecond() {
        let ms = 1_764_927_000_123;
        assert_eq!(format_rfc3339_ms(ms), "2025-12-05T09:30:00.123Z");
        assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Ok(ms));
        assert_eq!(parse_rfc3339_ms("2025-12-05T10:30:00.123+01:00"), Ok(ms));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), Ok(0));
        assert!(parse_rfc3339_ms("yesterday").is_err());
    }
}
