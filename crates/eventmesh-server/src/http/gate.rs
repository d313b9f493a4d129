//! The traffic routes' side of the security gate: builds the request
//! context from HTTP (bearer credential, signature headers, remote
//! address), runs [`SecurityGate::check`], and turns a denial into a 401,
//! 403 or 429 answer. Also the webhook SSRF guard.

use std::net::{IpAddr, SocketAddr};

use axum::http::{header, HeaderMap, StatusCode};
use eventmesh_security::{Admission, Denial, Frame, Operation, RequestContext, Transport};

use super::error::ApiError;
use super::AppState;

/// What a route asks the gate about.
pub struct Ask<'a> {
    pub operation: Operation,
    pub topic: Option<&'a str>,
    /// For a subscribe: the subscription's quota key.
    pub subscription: Option<String>,
    pub body: &'a [u8],
    /// Events published by the request.
    pub events: u32,
}

impl<'a> Ask<'a> {
    pub fn new(operation: Operation, topic: Option<&'a str>, body: &'a [u8]) -> Self {
        Ask {
            operation,
            topic,
            subscription: None,
            body,
            events: 0,
        }
    }
}

/// The quota key of a subscription.
pub fn quota_key(group: &str, topic: &str, client: &str) -> String {
    format!("{group}/{topic}/{client}")
}

fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = header_text(headers, header::AUTHORIZATION.as_str())?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

pub fn denial_error(d: Denial) -> ApiError {
    let status = StatusCode::from_u16(d.status()).unwrap_or(StatusCode::FORBIDDEN);
    let mut e = ApiError::new(status, d.reason, d.message);
    if status == StatusCode::UNAUTHORIZED {
        e.headers
            .push((header::WWW_AUTHENTICATE, "Bearer".to_string()));
    }
    if let Some(wait) = d.retry_after {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        e.headers
            .push((header::RETRY_AFTER, secs.max(1).to_string()));
    }
    e
}

/// Runs the gate for one request; the admission must be held until the
/// answer is sent (it holds the tenant's connection slot).
pub fn admit(
    app: &AppState,
    headers: &HeaderMap,
    remote: SocketAddr,
    ask: Ask,
) -> Result<Admission, ApiError> {
    if !app.gate.is_enabled() {
        return Ok(Admission::default());
    }
    let mut ctx = RequestContext::new(Transport::Http, ask.operation);
    ctx.credential = bearer(headers);
    ctx.remote = Some(remote);
    ctx.topic = ask.topic.map(str::to_string);
    ctx.subscription = ask.subscription;
    let frame = Frame {
        body: ask.body,
        timestamp: header_text(headers, "x-em-timestamp"),
        signature: header_text(headers, "x-em-signature"),
        events: ask.events,
    };
    app.gate.check(&ctx, &frame).map_err(denial_error)
}

/// Refuses a webhook URL whose host resolves into a denied range.
pub async fn check_webhook_target(app: &AppState, url: &str) -> Result<(), ApiError> {
    if app.denied_cidrs.is_empty() {
        return Ok(());
    }
    let invalid = |m: String| ApiError::bad_request("invalid_url", m);
    let parsed = eventmesh_runtime::push::host_and_port(url)
        .ok_or_else(|| invalid(format!("cannot parse {url:?}")))?;
    let addrs: Vec<IpAddr> = match parsed.0.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((parsed.0.as_str(), parsed.1))
            .await
            .map_err(|e| {
                invalid(format!(
                    "cannot resolve the webhook host {:?}: {e}",
                    parsed.0
                ))
            })?
            .map(|a| a.ip())
            .collect(),
    };
    for ip in addrs {
        if let Some(net) = app.denied_cidrs.iter().find(|n| n.contains(&ip)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "webhook_denied",
                format!("the webhook host resolves to {ip}, inside the denied range {net} (eventmesh.webhook.denied.cidrs)"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc ".parse().unwrap());
        assert_eq!(bearer(&h).as_deref(), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }
}
