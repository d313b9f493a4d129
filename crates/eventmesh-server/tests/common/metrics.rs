//! `/metrics` parsed, so that tests compare exact samples, and waits on
//! a series reaching a value.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{admin_text, Server};

/// The samples of a Prometheus text exposition, keyed by series exactly as
/// rendered: the name with its label set, if any (`eventmesh_acks_total`,
/// `eventmesh_storage_memory_bytes{kind="block_cache"}`).
#[derive(Debug, Clone)]
pub struct Metrics {
    pub samples: BTreeMap<String, f64>,
    pub text: String,
}

impl Metrics {
    /// Parses the text format; panics on a sample line it cannot read.
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, rest) =
                split_series(line).unwrap_or_else(|| panic!("unreadable metrics line {line:?}"));
            let raw = rest.split_whitespace().next().unwrap_or("");
            let value = match raw {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value {v:?} in metrics line {line:?}")),
            };
            let before = samples.insert(series.to_string(), value);
            assert!(before.is_none(), "series {series} appears twice:\n{text}");
        }
        Metrics {
            samples,
            text: text.to_string(),
        }
    }

    /// The value of one series; panics (showing the whole text) when absent.
    pub fn get(&self, series: &str) -> f64 {
        self.samples
            .get(series)
            .copied()
            .unwrap_or_else(|| panic!("{series} not in /metrics:\n{}", self.text))
    }
}

/// Splits a sample line into its series (name and label set) and the rest;
/// label values may hold spaces, braces and escaped quotes.
fn split_series(line: &str) -> Option<(&str, &str)> {
    let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    if !line[name_end..].starts_with('{') {
        return Some((&line[..name_end], &line[name_end..]));
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, ch) in line.char_indices().filter(|(i, _)| *i > name_end) {
        match ch {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some((&line[..=i], &line[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Every sample of `/metrics`.
pub async fn metrics(c: &reqwest::Client, s: &Server) -> Metrics {
    Metrics::parse(&admin_text(c, s, "/metrics").await)
}

/// The value of one series (`name` or `name{labels}` exactly as rendered,
/// e.g. `eventmesh_acks_total`), from `/metrics`.
pub async fn metric(c: &reqwest::Client, s: &Server, series: &str) -> f64 {
    metrics(c, s).await.get(series)
}

/// The value of a counter (`name{labels}` exactly as rendered), 0 while
/// it has not been counted yet.
pub async fn counter(c: &reqwest::Client, s: &Server, series: &str) -> f64 {
    metrics(c, s)
        .await
        .samples
        .get(series)
        .copied()
        .unwrap_or(0.0)
}

/// Reads a [`counter`] until it is `want` or `within` passed; the last
/// value read.
pub async fn counter_reaching(
    c: &reqwest::Client,
    s: &Server,
    series: &str,
    want: f64,
    within: Duration,
) -> f64 {
    reaching(|| counter(c, s, series), want, within).await
}

/// Reads one series until it equals `want` or `within` passed; the last
/// value read (compare it with `want`).
pub async fn metric_reaching(
    c: &reqwest::Client,
    s: &Server,
    series: &str,
    want: f64,
    within: Duration,
) -> f64 {
    reaching(|| metric(c, s, series), want, within).await
}

/// Reads a value every 20 ms until it is `want` or `within` passed; the
/// last value read.
async fn reaching<F: std::future::Future<Output = f64>>(
    mut read: impl FnMut() -> F,
    want: f64,
    within: Duration,
) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let v = read().await;
        if v == want || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
