//! A position in a partition as an operator names it: its oldest event,
//! its end, the first event appended at or after a time, or an offset. The
//! admin API, the SDK and the CLI read and write it the same way:
//! `"earliest"`, `"latest"`, an RFC 3339 time, or an offset (a JSON number,
//! or a string of digits).

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// The first event still stored.
    Earliest,
    /// The end: only events appended from now on.
    Latest,
    /// The first event appended at or after this time (ms since the epoch).
    TimeMs(u64),
    /// This offset.
    Offset(u64),
}

impl Position {
    /// `earliest`, `latest`, digits (an offset) or an RFC 3339 time; the
    /// reason when it is none of them.
    pub fn parse(v: &str) -> Result<Position, String> {
        match v {
            "earliest" => Ok(Position::Earliest),
            "latest" => Ok(Position::Latest),
            v if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
                .parse()
                .map(Position::Offset)
                .map_err(|_| format!("{v:?} is too large for an offset")),
            v => crate::time::parse_rfc3339_ms(v)
                .map(Position::TimeMs)
                .map_err(|e| {
                    format!("{v:?} is not earliest, latest, an offset or an RFC 3339 time ({e})")
                }),
        }
    }

    /// [`Position::parse`] of a JSON string, or an offset as a number.
    pub fn from_json(v: &Value) -> Result<Position, String> {
        match v {
            Value::Number(n) => n
                .as_u64()
                .map(Position::Offset)
                .ok_or_else(|| format!("{n} is not an offset (a whole number)")),
            Value::String(s) => Position::parse(s),
            v => Err(format!(
                "{v} is not earliest, latest, an offset or an RFC 3339 time"
            )),
        }
    }

    /// The JSON form: a string, or a number for an offset.
    pub fn to_json(self) -> Value {
        match self {
            Position::Earliest => Value::from("earliest"),
            Position::Latest => Value::from("latest"),
            Position::TimeMs(ms) => Value::from(crate::time::format_rfc3339_ms(ms)),
            Position::Offset(o) => Value::from(o),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_form_reads_and_writes_back() {
        for (text, p) in [
            ("earliest", Position::Earliest),
            ("latest", Position::Latest),
            ("42", Position::Offset(42)),
            (
                "2026-12-05T09:00:00.250Z",
                Position::TimeMs(1_796_461_200_250),
            ),
        ] {
            assert_eq!(Position::parse(text), Ok(p), "{text}");
            assert_eq!(Position::from_json(&p.to_json()), Ok(p), "{text}");
        }
        assert_eq!(Position::from_json(&json!(7)), Ok(Position::Offset(7)));
        assert_eq!(Position::Offset(7).to_json(), json!(7));
        for bad in [json!("soon"), json!(-1), json!(1.5), json!(null), json!("")] {
            assert!(Position::from_json(&bad).is_err(), "{bad}");
        }
        assert!(Position::parse("99999999999999999999999").is_err());
    }
}
