//! The traffic API on the traffic port, decoded into operations of
//! [`eventmesh_api::Api`] and encoded back:
//! - `POST /events/publish`: one CloudEvent, structured or binary mode;
//! - `POST /events/publish-batch`: `application/cloudevents-batch+json`;
//! - `POST /events/subscribe`, `POST /events/unsubscribe`;
//! - `GET /events/poll` (long poll), `POST /events/ack`, `POST /events/nack`;
//! - `POST /events/request`, `POST /events/reply`;
//! - `GET /cluster`: the cluster's name (what mesh links record);
//! - `GET /events/stream` (SSE) and `GET /events/ws` (WebSocket), in
//!   `stream.rs`;
//! - `/subscriptions` and `/subscriptions/{id}`: the CloudEvents
//!   Subscriptions API, in `subscriptions.rs`.
//!
//! A publish is answered 202 only after the event is durable in the log.
//! Unknown routes answer 404 and known routes called with the wrong method
//! 405, both with the JSON error shape.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::trace::TransportContext;
use eventmesh_runtime::Settle;
use eventmesh_security::Transport;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::error::rejection;
use super::AppState;
use crate::tls::Peer;
use eventmesh_api::wire::{self, SettleBody, SubscribeBody, UnsubscribeBody};
use eventmesh_api::{ApiError, Caller, Signed, DEFAULT_REQUEST_WAIT_MS};

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";
const DEFAULT_POLL_WAIT_MS: u64 = 30_000;
const DEFAULT_POLL_MAX: usize = 100;

pub fn traffic_router(state: AppState) -> Router {
    let limit = state.config.server.http.max_body_bytes;
    Router::new()
        .merge(super::internal_router(state.clone()))
        .route("/events/publish", post(publish))
        .route("/events/publish-batch", post(publish_batch))
        .route("/events/subscribe", post(subscribe))
        .route("/events/unsubscribe", post(unsubscribe))
        .route("/events/poll", get(poll))
        .route(
            "/events/ack",
            post(|State(app), r, b| settle(app, r, b, Settle::Ack)),
        )
        .route(
            "/events/nack",
            post(|State(app), r, b| settle(app, r, b, Settle::Nack)),
        )
        .route("/events/request", post(request))
        .route(
            "/connectors/{name}/events",
            post(super::connectors::inbound),
        )
        .route("/events/reply", post(reply))
        .route("/cluster", get(cluster))
        .route("/events/stream", get(super::stream::sse))
        .route("/events/ws", get(super::stream::ws))
        .merge(super::a2a::routes())
        .merge(super::mcp::routes(&state))
        .merge(super::mqtt_ws::routes())
        .merge(super::subscriptions::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such route")
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
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

/// The caller of an HTTP request: its bearer credential, its address, and
/// what its signature covers.
fn caller(
    transport: Transport,
    headers: &HeaderMap,
    remote: SocketAddr,
    method: &Method,
    uri: &Uri,
) -> Caller {
    let mut c = Caller::new(transport, bearer(headers), Some(remote));
    c.signed = Some(Signed {
        timestamp: header_text(headers, "x-em-timestamp").map(str::to_string),
        signature: header_text(headers, "x-em-signature").map(str::to_string),
        method: method.as_str().to_string(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers: headers
            .iter()
            .filter(|(n, _)| n.as_str().starts_with("ce-"))
            .map(|(n, v)| {
                let text = header_text_liberal(v.as_bytes()).into_owned();
                (n.as_str().to_string(), text)
            })
            .collect(),
    });
    c.trace = header_text(headers, "traceparent").map(|traceparent| TransportContext {
        traceparent: traceparent.to_string(),
        tracestate: header_text(headers, "tracestate").map(str::to_string),
    });
    c
}

/// What every traffic handler takes from a request besides its body: the
/// caller (credential, address, signature material) and the headers.
pub(super) struct Req {
    pub caller: Caller,
    pub headers: HeaderMap,
}

impl<S: Send + Sync> FromRequestParts<S> for Req {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<Peer>>()
            .map(|c| &c.0)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "no peer address",
                )
            })?;
        let mut caller = caller(
            Transport::Http,
            &parts.headers,
            peer.addr,
            &parts.method,
            &parts.uri,
        );
        caller.certificate = peer.certificate.clone();
        Ok(Req {
            caller,
            headers: parts.headers.clone(),
        })
    }
}

pub(super) fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|r| rejection(r.status(), r.body_text()))
}

pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|r| rejection(StatusCode::BAD_REQUEST, r.body_text()))
}

pub(super) fn json<T: DeserializeOwned>(b: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(b).map_err(|e| {
        let code = if e.is_syntax() || e.is_eof() {
            "malformed_json"
        } else {
            "invalid_request"
        };
        ApiError::bad_request(code, e.to_string())
    })
}

/// The media type without parameters, lower-cased.
pub(super) fn essence(headers: &HeaderMap) -> Option<String> {
    header_text(headers, header::CONTENT_TYPE.as_str()).map(|v| {
        v.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    })
}

fn unsupported(message: String) -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        message,
    )
}

/// A `ce-*` header value as text: percent-encoded ASCII as the binding
/// writes it, raw UTF-8 as some CloudEvents SDKs' transports send it, or,
/// when the bytes are not UTF-8, ISO-8859-1 (what browsers' and Node's
/// `fetch` and Python's `http.client` put on the wire for characters up to
/// U+00FF). The percent-decoding follows in the event's parser.
fn header_text_liberal(value: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(value) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => std::borrow::Cow::Owned(value.iter().map(|&b| char::from(b)).collect()),
    }
}

/// One event in structured or binary mode.
pub(super) fn parse_single(headers: &HeaderMap, body: Bytes) -> Result<CloudEvent, ApiError> {
    if headers.contains_key("ce-specversion") {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .map(|v| {
                v.to_str().map_err(|_| {
                    ApiError::bad_request("invalid_event", "content-type is not valid text")
                })
            })
            .transpose()?;
        let mut ce = Vec::new();
        for (name, value) in headers {
            if name.as_str().starts_with("ce-") {
                ce.push((name.as_str(), header_text_liberal(value.as_bytes())));
            }
        }
        let ce: Vec<(&str, &str)> = ce.iter().map(|(n, v)| (*n, v.as_ref())).collect();
        return Ok(CloudEvent::from_binary_mode(ce, content_type, body)?);
    }
    match essence(headers).as_deref() {
        Some(STRUCTURED) => Ok(CloudEvent::from_json_slice(&body)?),
        Some(BATCH) => Err(unsupported("batches go to /events/publish-batch".into())),
        other => Err(unsupported(format!(
            "content type {} is not accepted; send {STRUCTURED} (structured mode) \
             or ce-* headers (binary mode)",
            other.unwrap_or("(none)")
        ))),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TopicQuery {
    topic: Option<String>,
    timeout_ms: Option<u64>,
}

async fn publish(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<TopicQuery>, QueryRejection>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (q, raw) = (query(q)?, body(b)?);
    let event = parse_single(&r.headers, raw.clone())?;
    let mut out = app
        .api
        .publish(&r.caller, q.topic, vec![event], &raw)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(out.remove(0))).into_response())
}

async fn publish_batch(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<TopicQuery>, QueryRejection>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (q, raw) = (query(q)?, body(b)?);
    if essence(&r.headers).as_deref() != Some(BATCH) {
        return Err(unsupported(format!("a batch must be sent as {BATCH}")));
    }
    let events = CloudEvent::batch_from_json_slice(&raw)?;
    let out = app.api.publish(&r.caller, q.topic, events, &raw).await?;
    Ok((StatusCode::ACCEPTED, Json(out)).into_response())
}

/// Publishes the event as a request (with a `correlationid` extension) and
/// answers with the reply event, or 408 when none came in time.
async fn request(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<TopicQuery>, QueryRejection>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (q, raw) = (query(q)?, body(b)?);
    let event = parse_single(&r.headers, raw.clone())?;
    let wait = Duration::from_millis(q.timeout_ms.unwrap_or(DEFAULT_REQUEST_WAIT_MS));
    let reply = app
        .api
        .request(&r.caller, q.topic, event, wait, &raw)
        .await?;
    Ok(([(header::CONTENT_TYPE, STRUCTURED)], reply.to_json()).into_response())
}

/// The name of this cluster, to an authenticated caller: mesh links of
/// other clusters read it to keep events off clusters they passed.
async fn cluster(State(app): State<AppState>, r: Req) -> Result<Response, ApiError> {
    if !app.api.authenticates(&r.caller, b"") {
        return Err(ApiError::unauthorized(
            "authentication required (bearer token, JWT or client certificate)",
        ));
    }
    Ok(Json(serde_json::json!({ "cluster": &*app.cluster_name })).into_response())
}

/// Completes the request whose `correlationid` the reply event carries.
async fn reply(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let event = parse_single(&r.headers, raw.clone())?;
    app.api.reply(&r.caller, event, &raw).await?;
    Ok(Json(serde_json::json!({"status": "delivered"})).into_response())
}

async fn subscribe(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let body: SubscribeBody = json(&raw)?;
    if body.client_id.is_none() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "clientId is required",
        ));
    }
    let (sub, _admitted) = app
        .api
        .subscribe(&r.caller, body.into_request(None)?, &raw)
        .await?;
    Ok(Json(wire::subscribed(&sub)).into_response())
}

async fn unsubscribe(
    State(app): State<AppState>,
    r: Req,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let body: UnsubscribeBody = json(&raw)?;
    let removed = app
        .api
        .unsubscribe(&r.caller, &body.client_id, body.topic.as_deref(), &raw)
        .await?;
    Ok(Json(serde_json::json!({ "removed": removed })).into_response())
}

fn number<T: std::str::FromStr>(
    q: &HashMap<String, String>,
    key: &str,
) -> Result<Option<T>, ApiError> {
    q.get(key)
        .map(|v| {
            v.parse().map_err(|_| {
                ApiError::bad_request(
                    "invalid_request",
                    format!("{key}={v:?} is not a non-negative integer"),
                )
            })
        })
        .transpose()
}

async fn poll(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let client = q
        .get("clientId")
        .ok_or_else(|| ApiError::bad_request("invalid_request", "clientId is required"))?;
    let wait = Duration::from_millis(number(&q, "timeoutMs")?.unwrap_or(DEFAULT_POLL_WAIT_MS));
    let max = number(&q, "max")?.unwrap_or(DEFAULT_POLL_MAX);
    let got = app.api.poll(&r.caller, client, max, wait).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        wire::deliveries_json(&got),
    )
        .into_response())
}

/// `POST /events/ack` and `POST /events/nack`. A nack gives a polled
/// delivery back: it counts as a failed attempt and is sent again after the
/// backoff (or dead-lettered after the last attempt).
async fn settle(
    app: AppState,
    r: Req,
    b: Result<Bytes, BytesRejection>,
    how: Settle,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let body: SettleBody = json(&raw)?;
    let status = match how {
        Settle::Ack => "acked",
        _ => "nacked",
    };
    app.api
        .settle(&r.caller, &body.delivery_id, how, &raw)
        .await?;
    Ok(Json(serde_json::json!({ "status": status })).into_response())
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
