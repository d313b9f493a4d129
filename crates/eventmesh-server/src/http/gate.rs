//! The traffic routes' side of the security gate: builds the request
//! context from HTTP (bearer credential, what a request signature covers,
//! remote address), runs [`SecurityGate::check`], and turns a denial into
//! a 401, 403 or 429 answer. Also the subscribe-time webhook SSRF check.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use eventmesh_runtime::SubscribeRequest;
use eventmesh_security::{Admission, Denial, Frame, Operation, RequestContext, Transport};
use eventmesh_state::Subscription;

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

/// Who is calling, as every transport tells the gate.
#[derive(Debug, Clone)]
pub struct Caller {
    pub credential: Option<String>,
    pub remote: SocketAddr,
    pub transport: Transport,
    /// `x-em-timestamp` and `x-em-signature` (HTTP only).
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    /// What the signature covers besides the body (HTTP only): method,
    /// path, raw query, and every `ce-*` header (name lower-case).
    pub method: Option<String>,
    pub path: Option<String>,
    pub query: Option<String>,
    pub ce_headers: Vec<(String, String)>,
}

impl Caller {
    pub fn http(method: &Method, uri: &Uri, headers: &HeaderMap, remote: SocketAddr) -> Caller {
        Caller {
            credential: bearer(headers),
            remote,
            transport: Transport::Http,
            timestamp: header_text(headers, "x-em-timestamp").map(str::to_string),
            signature: header_text(headers, "x-em-signature").map(str::to_string),
            method: Some(method.as_str().to_string()),
            path: Some(uri.path().to_string()),
            query: uri.query().map(str::to_string),
            // Header names come lower-case from the HTTP parser.
            ce_headers: headers
                .iter()
                .filter(|(name, _)| name.as_str().starts_with("ce-"))
                .map(|(name, value)| {
                    let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.as_str().to_string(), value)
                })
                .collect(),
        }
    }

    /// The same caller over another transport (a stream it upgraded to).
    pub fn over(&self, transport: Transport) -> Caller {
        Caller {
            transport,
            timestamp: None,
            signature: None,
            method: None,
            path: None,
            query: None,
            ce_headers: Vec::new(),
            ..self.clone()
        }
    }
}

/// Runs the gate for one request; the admission must be held until the
/// answer is sent (it holds the tenant's connection slot).
pub fn admit(app: &AppState, caller: &Caller, ask: Ask) -> Result<Admission, ApiError> {
    if !app.gate.is_enabled() {
        return Ok(Admission::default());
    }
    let mut ctx = RequestContext::new(caller.transport, ask.operation);
    ctx.credential = caller.credential.clone();
    ctx.remote = Some(caller.remote);
    ctx.topic = ask.topic.map(str::to_string);
    ctx.subscription = ask.subscription;
    let frame = Frame {
        body: ask.body,
        timestamp: caller.timestamp.as_deref(),
        signature: caller.signature.as_deref(),
        events: ask.events,
        method: caller.method.as_deref(),
        path: caller.path.as_deref(),
        query: caller.query.as_deref(),
        headers: caller
            .ce_headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect(),
    };
    app.gate.check(&ctx, &frame).map_err(denial_error)
}

/// Gates and makes a subscription for any transport: the gate (with the
/// tenant's subscription quota), the owner check, the webhook guard, then
/// the runtime. The returned admission holds the connection slot.
pub async fn subscribe(
    app: &AppState,
    caller: &Caller,
    req: SubscribeRequest,
    body: &[u8],
) -> Result<(Subscription, Admission), ApiError> {
    let key = quota_key(
        req.group.as_deref().unwrap_or("default"),
        &req.topic,
        &req.client_id,
    );
    let mut ask = Ask::new(Operation::Subscribe, Some(&req.topic), body);
    ask.subscription = Some(key.clone());
    let admission = admit(app, caller, ask)?;
    check_owner(app, &admission, &req.client_id).await?;
    if let Some(url) = &req.url {
        check_webhook_target(app, url).await?;
    }
    let (tenant, principal) = if app.gate.is_enabled() {
        let id = &admission.identity;
        (
            Some(id.tenant_or_default().to_string()),
            id.principal.clone(),
        )
    } else {
        (None, None)
    };
    let sub = app
        .runtime
        .subscribe_as(req, tenant.clone(), principal)
        .await?;
    if let Some(t) = &tenant {
        app.gate.track_subscription(t, &key);
    }
    Ok((sub, admission))
}

/// With a fail-closed gate, a client subscribed by one principal is polled
/// and changed only by that principal.
pub async fn check_owner(
    app: &AppState,
    admission: &Admission,
    client: &str,
) -> Result<(), ApiError> {
    if !app.gate.is_fail_closed() {
        return Ok(());
    }
    let Some(me) = admission.identity.principal.as_deref() else {
        return Ok(());
    };
    let owners = app.runtime.client_principals(client).await;
    if let Some(other) = owners.iter().flatten().find(|p| p.as_str() != me) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_owner",
            format!("client {client:?} belongs to principal {other:?}"),
        ));
    }
    Ok(())
}

/// Refuses a webhook URL that is not valid (400) or whose host is, or
/// resolves into, a denied range (403); pushes are checked again.
pub async fn check_webhook_target(app: &AppState, url: &str) -> Result<(), ApiError> {
    eventmesh_runtime::push::validate_url(url)
        .map_err(|m| ApiError::bad_request("invalid_url", m))?;
    app.webhook_guard
        .check_url(url)
        .await
        .map_err(|m| ApiError::new(StatusCode::FORBIDDEN, "webhook_denied", m))
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
