//! The admin token (admin port) and the cluster secret (internal routes):
//! each refused attempt is logged at WARN with the remote address and the
//! route, counted (`eventmesh_auth_failures_total{listener,reason}`) and
//! audited, and wrong credentials are limited per remote address
//! (`eventmesh.auth.failures.burst` / `.interval.ms`, see
//! [`eventmesh_security::FailureLimiter`]).
//!
//! Invariants:
//! - an address that used up its allowance is answered
//!   `429 too_many_failures` with `Retry-After` on every guarded route of
//!   that listener, right credential or not, and the credential is not
//!   looked at: a guesser learns nothing until the allowance grows back;
//! - a request without a bearer credential is refused (`missing`) and
//!   counted, but spends no allowance: it guesses nothing;
//! - the credential presented is never logged or audited;
//! - the remote address is the connection's ([`ConnectInfo<Peer>`]); a
//!   request served without one counts under `0.0.0.0`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, StatusCode};
use eventmesh_core::config::AuthFailuresConfig;
use eventmesh_security::{CredentialFailure, FailureLimiter, SecurityGate};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::tls::Peer;
use eventmesh_api::ApiError;

/// `eventmesh_auth_failures_total{listener,reason}`.
pub type FailureMetrics = Family<Vec<(String, String)>, Counter>;

/// The guard of one listener's credential.
pub struct CredentialGuard {
    /// `admin` or `internal`.
    listener: &'static str,
    limiter: FailureLimiter,
    metrics: FailureMetrics,
    gate: Arc<SecurityGate>,
}

/// The guards of the admin port and of the internal routes, each with its
/// own allowance per address.
pub struct CredentialGuards {
    pub admin: CredentialGuard,
    pub internal: CredentialGuard,
}

impl CredentialGuards {
    pub fn new(cfg: &AuthFailuresConfig, metrics: FailureMetrics, gate: Arc<SecurityGate>) -> Self {
        let guard = |listener| CredentialGuard {
            listener,
            limiter: FailureLimiter::new(cfg.burst, cfg.interval),
            metrics: metrics.clone(),
            gate: gate.clone(),
        };
        CredentialGuards {
            admin: guard("admin"),
            internal: guard("internal"),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Missing,
    BadToken,
    Limited,
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::BadToken => "bad_token",
            Refusal::Limited => "limited",
        }
    }
}

impl CredentialGuard {
    /// Lets `req` through when its address is not limited and it carries
    /// `Authorization: Bearer <expected>`; else the refusal, counted,
    /// logged and audited. `what` names the credential in the 401's
    /// message.
    pub fn admit(&self, req: &Request, expected: &str, what: &str) -> Result<(), ApiError> {
        let remote = req
            .extensions()
            .get::<ConnectInfo<Peer>>()
            .map(|c| c.0.addr);
        let ip = remote.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
        let now = Instant::now();
        if let Some(wait) = self.limiter.limited_for(ip, now) {
            self.refused(req, remote, Refusal::Limited);
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_failures",
                format!(
                    "too many failed attempts from this address; try again in {} s",
                    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
                ),
            );
            e.retry_after = Some(wait);
            return Err(e);
        }
        if super::bearer_matches(req, expected) {
            return Ok(());
        }
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Bearer "));
        let refusal = if presented {
            self.limiter.fail(ip, now);
            Refusal::BadToken
        } else {
            Refusal::Missing
        };
        self.refused(req, remote, refusal);
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            match refusal {
                Refusal::Missing => format!("missing bearer token ({what})"),
                _ => format!("wrong bearer token ({what})"),
            },
        ))
    }

    fn refused(&self, req: &Request, remote: Option<SocketAddr>, refusal: Refusal) {
        let reason = refusal.reason();
        let route = req.uri().path();
        let shown = remote.map_or_else(|| "-".to_string(), |a| a.to_string());
        tracing::warn!(
            listener = self.listener,
            remote = %shown,
            route,
            reason,
            "credential refused"
        );
        self.metrics
            .get_or_create(&vec![
                ("listener".to_string(), self.listener.to_string()),
                ("reason".to_string(), reason.to_string()),
            ])
            .inc();
        self.gate.record_credential_failure(&CredentialFailure::new(
            self.listener,
            route,
            reason,
            remote.map(|a| a.to_string()),
        ));
    }
}
