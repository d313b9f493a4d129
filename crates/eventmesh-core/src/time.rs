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

/// An ISO 8601 duration of days, hours, minutes and seconds (`PT30S`,
/// `PT1H30M`, `P2DT12H`, `PT0.5S`, `P1W`) in milliseconds. Years and
/// months are refused: their length depends on the calendar.
pub fn parse_iso8601_duration_ms(d: &str) -> Result<u64, String> {
    let rest = d
        .strip_prefix('P')
        .ok_or("it does not start with P (PT30S is 30 seconds)")?;
    let (date, time) = match rest.split_once('T') {
        Some((date, "")) => return Err(format!("nothing follows T in P{date}T")),
        Some((date, time)) => (date, time),
        None => (rest, ""),
    };
    if date.is_empty() && time.is_empty() {
        return Err("it gives no amount".into());
    }
    let mut total = 0f64;
    let mut add = |part: &str, units: &[(char, f64)]| -> Result<(), String> {
        let mut number = String::new();
        let mut last = 0usize;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' || c == ',' {
                number.push(if c == ',' { '.' } else { c });
                continue;
            }
            let at = units
                .iter()
                .position(|(u, _)| *u == c)
                .ok_or_else(|| match c {
                    'Y' | 'M' if units[0].0 == 'W' => {
                        "years and months are not fixed lengths; give days (P30D)".to_string()
                    }
                    c => format!("{c:?} is not a unit here"),
                })?;
            if at < last || number.is_empty() {
                return Err(format!("{c} is out of order or has no number"));
            }
            last = at + 1;
            let n: f64 = number
                .parse()
                .map_err(|_| format!("{number:?} is not a number"))?;
            total += n * units[at].1;
            number.clear();
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(format!("{number} has no unit"))
        }
    };
    add(date, &[('W', 604_800_000.0), ('D', 86_400_000.0)])?;
    add(time, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)])?;
    if !total.is_finite() || total > 3.2e14 {
        return Err("it is longer than ten thousand years".into());
    }
    Ok(total.round() as u64)
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
    fn iso8601_durations() {
        for (d, ms) in [
            ("PT30S", 30_000),
            ("PT1H30M", 5_400_000),
            ("P2DT12H", 216_000_000),
            ("PT0.5S", 500),
            ("PT1,25S", 1_250),
            ("P1W", 604_800_000),
            ("P1D", 86_400_000),
            ("PT0S", 0),
        ] {
            assert_eq!(parse_iso8601_duration_ms(d), Ok(ms), "{d}");
        }
        for bad in [
            "", "30S", "P", "PT", "P1M", "P1Y", "PT1S30M", "PTS", "PT5", "P1H", "PT1X", "P1e9999D",
        ] {
            assert!(parse_iso8601_duration_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_iso8601_duration_ms("P1M"),
            Err("years and months are not fixed lengths; give days (P30D)".into())
        );
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
