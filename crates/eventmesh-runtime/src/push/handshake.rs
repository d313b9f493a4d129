//! The CloudEvents webhook validation handshake ("abuse protection"):
//! before the first push to a webhook origin (scheme, host and port), an
//! `OPTIONS` request to the webhook's URL asks for permission with
//! `WebHook-Request-Origin` (this runtime's name) and
//! `WebHook-Request-Rate` (pushes per minute). The answer grants it when
//! it is a 2xx carrying `WebHook-Allowed-Origin` equal to our origin or
//! `*`; its `WebHook-Allowed-Rate` (a positive integer, or `*` or absent
//! for no limit) caps the pushes to that origin.
//!
//! One [`OriginGate`] per origin, for the runtime's life:
//! ```text
//!   Unknown ──OPTIONS granted──▶ Allowed { rate limiter }
//!      │  ▲                          (every push takes a token, waiting for it)
//!      │  └──no answer (connection error, timeout): the push fails its attempt
//!      └──OPTIONS refused──▶ Refused { reason, retry at } ──due──▶ OPTIONS again
//! ```
//!
//! Invariants:
//! - At most one `OPTIONS` per origin is under way (the gate's lock is held
//!   while asking), so a burst of pushes to a new origin asks once.
//! - A refusal is not a failed attempt: pushes to a refused origin wait
//!   (their deliveries stay in flight, nothing is dropped or dead-lettered)
//!   until the origin is asked again after a doubling wait (1 s, or
//!   `retry_max` when less, up to `retry_max`) and grants it. An
//!   unreachable receiver is a failed attempt of the push, as a failed
//!   POST is.
//! - The `OPTIONS` goes through the same guarded client as the pushes.
//! - A granted rate is kept with a token bucket per origin: one token per
//!   POST, refilled at the allowed rate, holding at most one second's worth
//!   (at least one token).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Serialize;
use tokio::time::Instant;

use crate::ssrf::WebhookGuard;

pub const REQUEST_ORIGIN: &str = "webhook-request-origin";
pub const REQUEST_RATE: &str = "webhook-request-rate";
pub const ALLOWED_ORIGIN: &str = "webhook-allowed-origin";
pub const ALLOWED_RATE: &str = "webhook-allowed-rate";

/// The first wait before a refused origin is asked again.
const RETRY_FIRST: Duration = Duration::from_secs(1);

/// What an origin's answer granted: the pushes per minute allowed
/// (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub rate: Option<u32>,
}

/// Judges a handshake's answer: its status, `WebHook-Allowed-Origin` and
/// `WebHook-Allowed-Rate`, against `ours`. The reason when it does not
/// grant permission.
pub fn judge(
    status: u16,
    allowed_origin: Option<&str>,
    allowed_rate: Option<&str>,
    ours: &str,
) -> Result<Granted, String> {
    if !(200..300).contains(&status) {
        return Err(format!(
            "the receiver answered the handshake (OPTIONS) with status {status}"
        ));
    }
    let origin = allowed_origin.map(str::trim).ok_or_else(|| {
        "the receiver's handshake answer has no WebHook-Allowed-Origin".to_string()
    })?;
    if origin != "*" && !origin.eq_ignore_ascii_case(ours) {
        return Err(format!(
            "the receiver allows the origin {origin:?}, not {ours:?} (WebHook-Allowed-Origin)"
        ));
    }
    let rate = match allowed_rate.map(str::trim) {
        None | Some("*") => None,
        Some(r) => match r.parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(format!(
                    "the receiver's WebHook-Allowed-Rate {r:?} is neither * nor a positive number of requests per minute"
                ))
            }
        },
    };
    Ok(Granted { rate })
}

/// The token bucket of an allowed rate (pushes per minute): refilled at
/// that rate, holding one second's worth (at least one).
fn limiter(per_minute: u32) -> DefaultDirectRateLimiter {
    let rate = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(per_minute / 60).unwrap_or(NonZeroU32::MIN);
    let period = Duration::from_secs(60) / rate.get();
    let quota = Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_minute(rate))
        .allow_burst(burst);
    RateLimiter::direct(quota)
}

/// The scheme, host and port of a URL: what a handshake answers for.
pub fn origin_of(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
}

enum State {
    Unknown,
    Allowed {
        limiter: Option<Arc<DefaultDirectRateLimiter>>,
    },
    Refused {
        retry_at: Instant,
        wait: Duration,
    },
}

/// One origin's handshake: its state (locked while asking) and what
/// operators see of it.
struct OriginGate {
    state: tokio::sync::Mutex<State>,
    shown: Mutex<HandshakeStatus>,
}

/// A webhook origin's handshake as `/admin/subscriptions` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HandshakeStatus {
    /// `pending` (not asked yet, or no answer), `allowed`, or `refused`
    /// (pushes wait until it is asked again and allows them).
    pub state: &'static str,
    /// Why it is refused (or why the last ask got no answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The pushes per minute the receiver allows (`None`: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_rate: Option<u32>,
    /// Since when (ms since the epoch) it is in this state.
    pub since_ms: u64,
}

impl HandshakeStatus {
    fn new(state: &'static str, reason: Option<String>, allowed_rate: Option<u32>) -> Self {
        HandshakeStatus {
            state,
            reason,
            allowed_rate,
            since_ms: eventmesh_core::time::now_ms(),
        }
    }
}

/// The handshakes of this runtime, one gate per webhook origin.
pub struct Handshakes {
    origin: String,
    request_rate: u32,
    retry_max: Duration,
    gates: Mutex<HashMap<String, Arc<OriginGate>>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Handshakes {
    /// `origin`: sent as `WebHook-Request-Origin`; `request_rate`: pushes
    /// per minute asked for; `retry_max`: the longest wait before a
    /// refused origin is asked again.
    pub fn new(origin: impl Into<String>, request_rate: u32, retry_max: Duration) -> Self {
        Handshakes {
            origin: origin.into(),
            request_rate: request_rate.max(1),
            retry_max,
            gates: Mutex::default(),
            metrics: None,
        }
    }

    /// Counts each handshake's outcome and the refused origins in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Counts a handshake's `outcome`; `refused` says whether its origin is
    /// refused now, `was` whether it was before.
    fn count(&self, outcome: &str, was: bool, refused: bool) {
        let Some(m) = &self.metrics else { return };
        m.webhook_handshake(outcome);
        if refused && !was {
            m.webhook_origins_refused.inc();
        } else if was && !refused {
            m.webhook_origins_refused.dec();
        }
    }

    /// The name sent as `WebHook-Request-Origin`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    fn gate(&self, origin: &str) -> Arc<OriginGate> {
        let mut gates = self.gates.lock().expect("handshake gates");
        gates
            .entry(origin.to_string())
            .or_insert_with(|| {
                Arc::new(OriginGate {
                    state: tokio::sync::Mutex::new(State::Unknown),
                    shown: Mutex::new(HandshakeStatus::new("pending", None, None)),
                })
            })
            .clone()
    }

    /// The handshake of `url`'s origin as operators see it (`None`: never
    /// asked).
    pub fn status(&self, url: &str) -> Option<HandshakeStatus> {
        let origin = origin_of(url)?;
        let gates = self.gates.lock().expect("handshake gates");
        let gate = gates.get(&origin)?;
        let shown = gate.shown.lock().expect("handshake status").clone();
        Some(shown)
    }

    /// Waits until a push to `url` may go: its origin granted permission
    /// (asking it first if need be, or again once a refusal's wait is
    /// over) and, with an allowed rate, a token is free. `Err` (a failed
    /// attempt) only when the origin could not be asked.
    pub async fn admit(
        &self,
        client: &reqwest::Client,
        guard: &WebhookGuard,
        url: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let origin = origin_of(url).ok_or_else(|| format!("url {url:?} is not valid"))?;
        let gate = self.gate(&origin);
        loop {
            let mut state = gate.state.lock().await;
            match &*state {
                State::Allowed { limiter } => {
                    let limiter = limiter.clone();
                    drop(state);
                    if let Some(l) = limiter {
                        l.until_ready().await;
                    }
                    return Ok(());
                }
                State::Refused { retry_at, .. } if Instant::now() < *retry_at => {
                    let at = *retry_at;
                    drop(state);
                    tokio::time::sleep_until(at).await;
                    continue;
                }
                _ => {}
            }
            let answer = self.ask(client, guard, url, timeout).await;
            let was_refused = matches!(&*state, State::Refused { .. });
            let shown = match answer {
                Asked::Granted(g) => {
                    self.count("allowed", was_refused, false);
                    tracing::info!(%origin, allowed_rate = ?g.rate, "webhook handshake: the receiver allows pushes");
                    *state = State::Allowed {
                        limiter: g.rate.map(|r| Arc::new(limiter(r))),
                    };
                    HandshakeStatus::new("allowed", None, g.rate)
                }
                Asked::Refused(reason) => {
                    self.count("refused", was_refused, true);
                    let wait = match &*state {
                        State::Refused { wait, .. } => (*wait * 2).min(self.retry_max),
                        _ => RETRY_FIRST.min(self.retry_max),
                    };
                    tracing::warn!(%origin, reason, retry_in_ms = wait.as_millis() as u64, "webhook handshake refused: pushes to this origin wait until it allows them");
                    *state = State::Refused {
                        retry_at: Instant::now() + wait,
                        wait,
                    };
                    HandshakeStatus::new("refused", Some(reason), None)
                }
                Asked::NoAnswer(reason) => {
                    self.count("no_answer", was_refused, false);
                    *state = State::Unknown;
                    *gate.shown.lock().expect("handshake status") =
                        HandshakeStatus::new("pending", Some(reason.clone()), None);
                    return Err(format!("webhook handshake: {reason}"));
                }
            };
            *gate.shown.lock().expect("handshake status") = shown;
        }
    }

    /// Sends the `OPTIONS` request of `url` and judges the answer.
    async fn ask(
        &self,
        client: &reqwest::Client,
        guard: &WebhookGuard,
        url: &str,
        timeout: Duration,
    ) -> Asked {
        let parsed = match reqwest::Url::parse(url) {
            Ok(u) => u,
            Err(e) => return Asked::NoAnswer(format!("url {url:?} is not valid: {e}")),
        };
        if let Err(e) = guard.check_host(&parsed) {
            return Asked::NoAnswer(e);
        }
        let sent = client
            .request(reqwest::Method::OPTIONS, parsed)
            .timeout(timeout)
            .header(REQUEST_ORIGIN, &self.origin)
            .header(REQUEST_RATE, self.request_rate.to_string())
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Asked::NoAnswer(format!(
                    "OPTIONS timed out after {} ms",
                    timeout.as_millis()
                ))
            }
            Err(e) => {
                return Asked::NoAnswer(format!("OPTIONS failed: {}", super::with_causes(&e)))
            }
        };
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        match judge(
            resp.status().as_u16(),
            header(ALLOWED_ORIGIN).as_deref(),
            header(ALLOWED_RATE).as_deref(),
            &self.origin,
        ) {
            Ok(g) => Asked::Granted(g),
            Err(reason) => Asked::Refused(reason),
        }
    }
}

enum Asked {
    Granted(Granted),
    Refused(String),
    NoAnswer(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_the_specification() {
        let ok = |o, r| judge(200, o, r, "mesh.example.com");
        assert_eq!(ok(Some("*"), None), Ok(Granted { rate: None }));
        assert_eq!(
            ok(Some("Mesh.Example.com"), Some("120")),
            Ok(Granted { rate: Some(120) })
        );
        assert_eq!(ok(Some("*"), Some("*")), Ok(Granted { rate: None }));
        assert_eq!(
            ok(Some("other.example.com"), None).unwrap_err(),
            "the receiver allows the origin \"other.example.com\", not \"mesh.example.com\" (WebHook-Allowed-Origin)"
        );
        assert_eq!(
            ok(None, Some("10")).unwrap_err(),
            "the receiver's handshake answer has no WebHook-Allowed-Origin"
        );
        for bad in ["0", "-1", "ten"] {
            assert!(ok(Some("*"), Some(bad)).unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(
            judge(405, Some("*"), None, "m").unwrap_err(),
            "the receiver answered the handshake (OPTIONS) with status 405"
        );
        assert!(judge(204, Some("*"), None, "m").is_ok());
    }

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert_eq!(
            origin_of("http://Example.com/a/b?c").as_deref(),
            Some("http://example.com:80")
        );
        assert_eq!(
            origin_of("https://example.com:8443/x").as_deref(),
            Some("https://example.com:8443")
        );
        assert_eq!(
            origin_of("http://[::1]:9/h").as_deref(),
            Some("http://[::1]:9")
        );
        assert_eq!(origin_of("nope"), None);
    }

    #[test]
    fn the_bucket_holds_a_second_of_the_allowed_rate() {
        let l = limiter(60);
        assert!(l.check().is_ok());
        assert!(l.check().is_err(), "one token at 60 a minute");
        let l = limiter(600);
        for _ in 0..10 {
            assert!(l.check().is_ok());
        }
        assert!(l.check().is_err(), "ten tokens at 600 a minute");
    }
}
