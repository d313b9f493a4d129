//! Value kinds: how the text of one key becomes a typed value, and how that
//! value is written back as text. A kind owns the whole of a key's
//! validation (range, syntax, closed set of names) and the "expected ..."
//! phrase of its error; rendering a parsed value gives text that parses to
//! the same value again, so `eventmesh config` output can be fed back in.
//!
//! Every kind receives the effective text: trimmed, and the declared default
//! when the sources left the key blank.

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

/// Why a text is not a valid value of a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// `part` is the offending item of a list (`None`: the whole text);
    /// `expected` says what is allowed.
    Value {
        part: Option<String>,
        expected: String,
    },
    /// A required key without a value; `hint` names the valid values.
    Missing { hint: String },
}

impl Invalid {
    fn expected(expected: impl Into<String>) -> Self {
        Invalid::Value {
            part: None,
            expected: expected.into(),
        }
    }
}

/// Parses and renders the values of one key.
pub(crate) trait Kind: Sync {
    type Value;
    fn parse(&self, text: &str) -> Result<Self::Value, Invalid>;
    fn render(&self, value: &Self::Value) -> String;
    /// A blank value set on purpose is a value of its own, not "use the
    /// default" as for every other kind.
    fn blank_is_a_value(&self) -> bool {
        false
    }
}

/// Any non-empty text.
pub(crate) struct Text(pub &'static str);

impl Kind for Text {
    type Value = String;
    fn parse(&self, text: &str) -> Result<String, Invalid> {
        match text {
            "" => Err(Invalid::expected(self.0)),
            t => Ok(t.to_string()),
        }
    }
    fn render(&self, value: &String) -> String {
        value.clone()
    }
}

/// A name of 1 to 32 letters, digits, `-` and `_` (safe in NATS subjects,
/// stream names and file names alike).
pub(crate) struct Word;

impl Kind for Word {
    type Value = String;
    fn parse(&self, text: &str) -> Result<String, Invalid> {
        let ok = (1..=32).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| text.to_string())
            .ok_or_else(|| Invalid::expected("1 to 32 letters, digits, '-' or '_'"))
    }
    fn render(&self, value: &String) -> String {
        value.clone()
    }
}

/// A [`Word`], or nothing (empty).
pub(crate) struct OptionalWord;

impl Kind for OptionalWord {
    type Value = Option<String>;
    fn parse(&self, text: &str) -> Result<Option<String>, Invalid> {
        match text {
            "" => Ok(None),
            t => Word.parse(t).map(Some),
        }
    }
    fn render(&self, value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// A DNS-like name of 1 to 253 letters, digits, `.`, `-` and `_` (a
/// webhook request origin), or nothing (empty).
pub(crate) struct OptionalHostName;

impl Kind for OptionalHostName {
    type Value = Option<String>;
    fn parse(&self, text: &str) -> Result<Option<String>, Invalid> {
        if text.is_empty() {
            return Ok(None);
        }
        let ok = text.len() <= 253
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        ok.then(|| Some(text.to_string()))
            .ok_or_else(|| Invalid::expected("a name of 1 to 253 letters, digits, '.', '-' or '_'"))
    }
    fn render(&self, value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// Text where empty is a meaningful value of its own.
pub(crate) struct MaybeEmpty;

impl Kind for MaybeEmpty {
    type Value = String;
    fn parse(&self, text: &str) -> Result<String, Invalid> {
        Ok(text.to_string())
    }
    fn render(&self, value: &String) -> String {
        value.clone()
    }
    fn blank_is_a_value(&self) -> bool {
        true
    }
}

/// Text that may be left empty (`None`).
pub(crate) struct Optional;

impl Kind for Optional {
    type Value = Option<String>;
    fn parse(&self, text: &str) -> Result<Option<String>, Invalid> {
        Ok(Some(text.to_string()).filter(|t| !t.is_empty()))
    }
    fn render(&self, value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// A non-empty file system path.
pub(crate) struct Path(pub &'static str);

impl Kind for Path {
    type Value = PathBuf;
    fn parse(&self, text: &str) -> Result<PathBuf, Invalid> {
        Text(self.0).parse(text).map(PathBuf::from)
    }
    fn render(&self, value: &PathBuf) -> String {
        value.display().to_string()
    }
}

/// A file system path that may be left empty (`None`).
pub(crate) struct OptionalPath;

impl Kind for OptionalPath {
    type Value = Option<PathBuf>;
    fn parse(&self, text: &str) -> Result<Option<PathBuf>, Invalid> {
        Ok(Optional.parse(text)?.map(PathBuf::from))
    }
    fn render(&self, value: &Option<PathBuf>) -> String {
        value
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string())
    }
}

/// `true` or `false`, in any case.
pub(crate) struct Flag;

impl Kind for Flag {
    type Value = bool;
    fn parse(&self, text: &str) -> Result<bool, Invalid> {
        match text {
            v if v.eq_ignore_ascii_case("true") => Ok(true),
            v if v.eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(Invalid::expected("true or false")),
        }
    }
    fn render(&self, value: &bool) -> String {
        value.to_string()
    }
}

/// A decimal integer written with digits only (no sign) within
/// `min..=max`, held as `T`.
pub(crate) struct Int<T> {
    min: u64,
    max: u64,
    expected: &'static str,
    ty: PhantomData<fn() -> T>,
}

impl<T> Int<T> {
    pub const fn new(min: u64, max: u64, expected: &'static str) -> Self {
        Int {
            min,
            max,
            expected,
            ty: PhantomData,
        }
    }
}

impl<T: TryFrom<u64> + fmt::Display> Kind for Int<T> {
    type Value = T;
    fn parse(&self, text: &str) -> Result<T, Invalid> {
        text.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| text.parse::<u64>().ok())
            .flatten()
            .filter(|n| (self.min..=self.max).contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| Invalid::expected(self.expected))
    }
    fn render(&self, value: &T) -> String {
        value.to_string()
    }
}

/// A TCP port, 0 included.
pub(crate) const PORT: Int<u16> = Int::new(0, 65535, "a port number 0-65535");

/// A port, or `off` for a listener that is disabled (`None`); `0` picks a
/// free port, like the other ports.
pub(crate) struct PortOrOff;

impl Kind for PortOrOff {
    type Value = Option<u16>;
    fn parse(&self, text: &str) -> Result<Option<u16>, Invalid> {
        if text == "off" {
            return Ok(None);
        }
        PORT.parse(text)
            .map(Some)
            .map_err(|_| Invalid::expected("a port number 0-65535, or off"))
    }
    fn render(&self, value: &Option<u16>) -> String {
        value.map_or_else(|| "off".to_string(), |p| p.to_string())
    }
}

/// A duration written as a whole number of milliseconds.
pub(crate) struct Millis(pub Int<u64>);

/// Milliseconds, at least 1.
pub(crate) const MILLIS: Millis = Millis(Int::new(
    1,
    u64::MAX,
    "a duration in milliseconds of at least 1",
));

impl Kind for Millis {
    type Value = Duration;
    fn parse(&self, text: &str) -> Result<Duration, Invalid> {
        self.0.parse(text).map(Duration::from_millis)
    }
    fn render(&self, value: &Duration) -> String {
        value.as_millis().to_string()
    }
}

/// A duration written as a whole number of seconds.
pub(crate) struct Seconds(pub Int<u64>);

impl Kind for Seconds {
    type Value = Duration;
    fn parse(&self, text: &str) -> Result<Duration, Invalid> {
        self.0.parse(text).map(Duration::from_secs)
    }
    fn render(&self, value: &Duration) -> String {
        value.as_secs().to_string()
    }
}

/// A fraction from 0 to 1.
pub(crate) struct Fraction;

impl Kind for Fraction {
    type Value = f64;
    fn parse(&self, text: &str) -> Result<f64, Invalid> {
        match text.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
            _ => Err(Invalid::expected("a fraction from 0 to 1, e.g. 0.2")),
        }
    }
    fn render(&self, value: &f64) -> String {
        value.to_string()
    }
}

/// One of a closed set of names (a `text_enum`), compared exactly or
/// ignoring ASCII case.
pub(crate) struct OneOf<T: 'static> {
    pub all: &'static [T],
    pub ignore_case: bool,
}

impl<T: Copy + fmt::Display + Sync> Kind for OneOf<T> {
    type Value = T;
    fn parse(&self, text: &str) -> Result<T, Invalid> {
        let matches = |t: &&T| {
            let name = t.to_string();
            name == text || (self.ignore_case && name.eq_ignore_ascii_case(text))
        };
        self.all.iter().find(matches).copied().ok_or_else(|| {
            let names: Vec<String> = self.all.iter().map(T::to_string).collect();
            let case = if self.ignore_case {
                ""
            } else {
                " (exact, upper case)"
            };
            Invalid::expected(format!("one of: {}{case}", names.join(", ")))
        })
    }
    fn render(&self, value: &T) -> String {
        value.to_string()
    }
}

/// A key without a default that must be set; `hint` names the valid values.
pub(crate) struct Required<K> {
    pub kind: K,
    pub hint: &'static str,
}

impl<K: Kind> Kind for Required<K> {
    type Value = K::Value;
    fn parse(&self, text: &str) -> Result<K::Value, Invalid> {
        if text.is_empty() {
            return Err(Invalid::Missing {
                hint: self.hint.to_string(),
            });
        }
        self.kind.parse(text)
    }
    fn render(&self, value: &K::Value) -> String {
        self.kind.render(value)
    }
}

/// The items of a comma-separated list, trimmed, empty ones dropped.
fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|t| !t.is_empty())
}

/// A comma-separated list of URLs, at least one, each with one of the
/// schemes given (`"http"`, `"nats"`, ...).
pub(crate) struct Urls(pub &'static [&'static str]);

/// http:// or https:// URLs.
pub(crate) const HTTP_URLS: Urls = Urls(&["http", "https"]);
/// nats:// or tls:// URLs.
pub(crate) const NATS_URLS: Urls = Urls(&["nats", "tls"]);

impl Kind for Urls {
    type Value = Vec<String>;
    fn parse(&self, text: &str) -> Result<Vec<String>, Invalid> {
        let list: Vec<String> = items(text).map(str::to_string).collect();
        let bad = list.iter().find(|e| {
            !self.0.iter().any(|scheme| {
                e.strip_prefix(scheme)
                    .and_then(|rest| rest.strip_prefix("://"))
                    .is_some_and(|host| !host.is_empty())
            })
        });
        if list.is_empty() || bad.is_some() {
            let schemes: Vec<String> = self.0.iter().map(|s| format!("{s}://")).collect();
            return Err(Invalid::Value {
                part: bad.cloned(),
                expected: format!("comma-separated {} URLs", schemes.join(" or ")),
            });
        }
        Ok(list)
    }
    fn render(&self, value: &Vec<String>) -> String {
        value.join(",")
    }
}

/// One URL with one of the schemes given, or nothing (empty: `None`).
pub(crate) struct OptionalUrl(pub &'static [&'static str]);

/// One http:// or https:// URL, or nothing.
pub(crate) const OPTIONAL_HTTP_URL: OptionalUrl = OptionalUrl(&["http", "https"]);

impl Kind for OptionalUrl {
    type Value = Option<String>;
    fn parse(&self, text: &str) -> Result<Option<String>, Invalid> {
        if text.is_empty() {
            return Ok(None);
        }
        let single = !text.contains(|c: char| c == ',' || c.is_whitespace());
        match Urls(self.0).parse(text) {
            Ok(mut list) if single && list.len() == 1 => Ok(list.pop()),
            _ => {
                let schemes: Vec<String> = self.0.iter().map(|s| format!("{s}://")).collect();
                Err(Invalid::expected(format!(
                    "one {} URL, or nothing",
                    schemes.join(" or ")
                )))
            }
        }
    }
    fn render(&self, value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// A comma-separated list of CIDR ranges (`address/prefix`), possibly empty.
pub(crate) struct Cidrs;

/// The ranges `production` stands for in a list of CIDR ranges (see
/// [`Cidrs`]): loopback, the private and shared ranges, link-local, the
/// unspecified network, unique local IPv6, and the IPv6 ranges that embed
/// an IPv4 address (IPv4-compatible, IPv4-translated, NAT64, 6to4).
pub const PRODUCTION_DENIED_CIDRS: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "::1/128",
    "::/96",
    "::ffff:0:0:0/96",
    "64:ff9b::/96",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
];

/// Comma-separated CIDR ranges. The item `production` stands for every
/// range of [`PRODUCTION_DENIED_CIDRS`]; the whole value `none` is the
/// empty list (a blank value means the key's default).
impl Kind for Cidrs {
    type Value = Vec<IpNet>;
    fn parse(&self, text: &str) -> Result<Vec<IpNet>, Invalid> {
        if text.eq_ignore_ascii_case("none") {
            return Ok(Vec::new());
        }
        let mut nets = Vec::new();
        for item in items(text) {
            if item.eq_ignore_ascii_case("production") {
                nets.extend(
                    PRODUCTION_DENIED_CIDRS
                        .iter()
                        .map(|r| r.parse::<IpNet>().expect("a valid range")),
                );
                continue;
            }
            nets.push(item.parse::<IpNet>().map_err(|_| {
                Invalid::Value {
                    part: Some(item.to_string()),
                    expected: "comma-separated CIDR ranges such as 10.0.0.0/8 or fd00::/8, \
                           `production`, or `none`"
                        .to_string(),
                }
            })?);
        }
        Ok(nets)
    }
    fn render(&self, value: &Vec<IpNet>) -> String {
        if value.is_empty() {
            return "none".to_string();
        }
        let texts: Vec<String> = value.iter().map(IpNet::to_string).collect();
        texts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(e: Invalid) -> String {
        match e {
            Invalid::Value { expected, .. } => expected,
            Invalid::Missing { hint } => hint,
        }
    }

    #[test]
    fn integers_take_digits_only_within_their_range() {
        let kind: Int<u32> = Int::new(1, 10, "one to ten");
        assert_eq!(kind.parse("10"), Ok(10));
        for bad in ["0", "11", "-1", "+5", "1.0", "", "99999999999999999999999"] {
            assert_eq!(kind.parse(bad).map_err(expected), Err("one to ten".into()));
        }
        // A value in range that the target type cannot hold is refused too.
        let narrow: Int<u16> = Int::new(0, u64::MAX, "small");
        assert!(narrow.parse("65536").is_err());
        assert_eq!(PortOrOff.parse("off"), Ok(None));
        assert_eq!(PortOrOff.render(&None), "off");
        assert_eq!(PortOrOff.parse("0"), Ok(Some(0)));
        assert_eq!(PortOrOff.render(&Some(0)), "0");
        assert_eq!(PortOrOff.parse("80"), Ok(Some(80)));
        for bad in ["", "OFF", "none", "65536", "-1"] {
            assert_eq!(
                PortOrOff.parse(bad).map_err(expected),
                Err("a port number 0-65535, or off".into())
            );
        }
    }

    #[test]
    fn lists_name_the_bad_item() {
        assert_eq!(Cidrs.parse(" , "), Ok(vec![]));
        assert_eq!(Cidrs.parse("NONE"), Ok(vec![]));
        assert_eq!(Cidrs.render(&vec![]), "none");
        let nets = Cidrs.parse("10.0.0.0/8, ::1/128").unwrap();
        assert_eq!(Cidrs.render(&nets), "10.0.0.0/8,::1/128");
        let production = Cidrs.parse("production").unwrap();
        assert_eq!(production.len(), PRODUCTION_DENIED_CIDRS.len());
        assert_eq!(Cidrs.parse(&Cidrs.render(&production)), Ok(production));
        let more = Cidrs.parse("production, 203.0.113.0/24").unwrap();
        assert_eq!(more.len(), PRODUCTION_DENIED_CIDRS.len() + 1);
        assert_eq!(
            more[PRODUCTION_DENIED_CIDRS.len()].to_string(),
            "203.0.113.0/24"
        );
        assert!(Cidrs.parse("none,10.0.0.0/8").is_err());
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "fd00::/129",
            "host/8",
            "10.0.0.0/x",
        ] {
            let err = Cidrs.parse(&format!("127.0.0.0/8,{bad}")).unwrap_err();
            assert!(
                matches!(&err, Invalid::Value { part: Some(p), .. } if p == bad),
                "{bad}: {err:?}"
            );
        }
        let err = HTTP_URLS.parse("http://a:1, b:2").unwrap_err();
        assert!(matches!(&err, Invalid::Value { part: Some(p), .. } if p == "b:2"));
        let err = HTTP_URLS.parse(" , ").unwrap_err();
        assert!(matches!(err, Invalid::Value { part: None, .. }));
        let err = NATS_URLS.parse("nats://a:4222,http://b:4222").unwrap_err();
        assert!(
            matches!(&err, Invalid::Value { part: Some(p), expected } if p == "http://b:4222" && expected == "comma-separated nats:// or tls:// URLs"),
            "{err:?}"
        );
        assert_eq!(
            NATS_URLS.parse("nats://a:4222, tls://b:4222"),
            Ok(vec![
                "nats://a:4222".to_string(),
                "tls://b:4222".to_string()
            ])
        );
        assert!(NATS_URLS.parse("nats://").is_err());
    }

    #[test]
    fn durations_and_fractions_round_trip() {
        assert_eq!(MILLIS.parse("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(MILLIS.render(&Duration::from_millis(1500)), "1500");
        assert!(MILLIS.parse("0").is_err());
        assert_eq!(Fraction.parse("0.25"), Ok(0.25));
        assert_eq!(Fraction.render(&0.25), "0.25");
        for bad in ["1.5", "-0.1", "NaN", "x"] {
            assert!(Fraction.parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_optional_url_is_one_url_or_nothing() {
        let kind = OPTIONAL_HTTP_URL;
        assert_eq!(kind.parse(""), Ok(None));
        let url = "https://collector:4318";
        assert_eq!(kind.parse(url), Ok(Some(url.to_string())));
        assert_eq!(kind.render(&Some(url.to_string())), url);
        assert_eq!(kind.render(&None), "");
        for bad in [
            "collector:4318",
            "grpc://collector:4317",
            "http://",
            "http://a:1,http://b:2",
            "http://a b",
        ] {
            assert_eq!(
                kind.parse(bad).map_err(expected),
                Err("one http:// or https:// URL, or nothing".into()),
                "{bad}"
            );
        }
    }
}
