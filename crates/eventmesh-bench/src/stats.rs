//! Shared helpers: latency histograms, error tallies, URLs and the HTTP
//! client.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use reqwest::Url;

/// Error count by kind: `http_<status>`, `timeout`, `connect`, `request`, ...
pub type Errors = BTreeMap<String, u64>;

/// Largest latency the histograms track precisely (one hour); larger values
/// are clamped.
const MAX_US: u64 = 3_600_000_000;

/// The CPU time (user + system, all threads) process `pid` has used so
/// far, from `/proc/<pid>/stat` (clock ticks of 10 ms); `None` when the
/// process is gone or the file is unreadable.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces and ')'.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// A microsecond histogram with 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static histogram bounds are valid")
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn merge(into: &mut Errors, from: Errors) {
    for (kind, n) in from {
        *into.entry(kind).or_default() += n;
    }
}

/// A short, stable name for a failed request.
pub fn error_kind(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    };
    kind.to_owned()
}

pub fn format_errors(errors: &Errors) -> String {
    if errors.is_empty() {
        return "none".to_owned();
    }
    errors
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `{base}/{path}` with the base's own path kept (`http://h:1/x` + `events/poll`
/// gives `http://h:1/x/events/poll`).
pub fn endpoint(base: &str, path: &str) -> Result<Url> {
    let joined = format!("{}/{}", base.trim_end_matches('/'), path);
    Url::parse(&joined).with_context(|| format!("invalid server URL {base:?}"))
}

pub fn client(pool: usize, timeout: Duration) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(pool)
        .timeout(timeout)
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let u = endpoint("http://127.0.0.1:10105/", "events/publish").unwrap();
        assert_eq!(u.as_str(), "http://127.0.0.1:10105/events/publish");
        let u = endpoint("http://h:1/mesh", "events/poll").unwrap();
        assert_eq!(u.as_str(), "http://h:1/mesh/events/poll");
        assert!(endpoint("not a url", "events/poll").is_err());
    }
}
