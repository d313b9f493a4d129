//! The traffic API on the traffic port:
//! - `POST /events/publish`: one CloudEvent, structured or binary mode;
//! - `POST /events/publish-batch`: `application/cloudevents-batch+json`;
//! - `POST /events/subscribe`, `POST /events/unsubscribe`;
//! - `GET /events/poll` (long poll), `POST /events/ack`, `POST /events/nack`.
//!
//! A publish is answered 202 only after the event is durable in the log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::SubscribeRequest;
use eventmesh_security::Operation;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::error::{rejection, ApiError};
use super::gate::{self, admit, check_owner, quota_key, Ask, Caller};
use super::AppState;

const STRUCTURED: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";
const DEFAULT_POLL_WAIT_MS: u64 = 30_000;
const DEFAULT_POLL_MAX: usize = 100;

pub fn traffic_router(state: AppState) -> Router {
    let limit = state.config.server.http.max_body_bytes;
    Router::new()
        .route("/events/publish", post(publish))
        .route("/events/publish-batch", post(publish_batch))
        .route("/events/subscribe", post(subscribe))
        .route("/events/unsubscribe", post(unsubscribe))
        .route("/events/poll", get(poll))
        .route("/events/ack", post(ack))
        .route("/events/nack", post(nack))
        .route("/events/request", post(request))
        .route("/events/reply", post(reply))
        .route("/events/stream", get(super::stream::sse))
        .route("/events/ws", get(super::stream::ws))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|r| rejection(r.status(), r.body_text()))
}

pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|r| rejection(StatusCode::BAD_REQUEST, r.body_text()))
}

fn json<T: DeserializeOwned>(b: &[u8]) -> Result<T, ApiError> {
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
fn essence(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

#[derive(Deserialize)]
struct TopicQuery {
    topic: Option<String>,
}

fn parse_single(headers: &HeaderMap, body: Bytes) -> Result<CloudEvent, ApiError> {
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
                let v = value.to_str().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_event",
                        format!("header {name} is not valid text (percent-encode it)"),
                    )
                })?;
                ce.push((name.as_str(), v));
            }
        }
        return Ok(CloudEvent::from_binary_mode(ce, content_type, body)?);
    }
    match essence(headers).as_deref() {
        Some(STRUCTURED) => Ok(CloudEvent::from_json_slice(&body)?),
        Some(BATCH) => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "batches go to /events/publish-batch",
        )),
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "content type {} is not accepted; send {STRUCTURED} (structured mode) \
                 or ce-* headers (binary mode)",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

fn missing_topic() -> ApiError {
    ApiError::bad_request(
        "missing_topic",
        "no topic: pass ?topic= or set the event's subject",
    )
}

/// One event (structured or binary mode), its topic (`?topic=` or its
/// subject), and the gate's admission to publish it.
fn gated_event(
    app: &AppState,
    remote: SocketAddr,
    headers: &HeaderMap,
    topic: Option<String>,
    raw: Bytes,
) -> Result<(CloudEvent, String, eventmesh_security::Admission), ApiError> {
    let event = parse_single(headers, raw.clone())?;
    let topic = topic
        .or_else(|| event.subject.clone())
        .ok_or_else(missing_topic)?;
    let mut ask = Ask::new(Operation::Publish, Some(&topic), &raw);
    ask.events = 1;
    let admission = admit(app, &Caller::http(headers, remote), ask)?;
    Ok((event, topic, admission))
}

async fn publish(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    q: Result<Query<TopicQuery>, QueryRejection>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (event, topic, _admission) = gated_event(&app, remote, &headers, q.topic, body(b)?)?;
    let mut out = app.runtime.ingress().publish(&topic, vec![event]).await?;
    Ok((StatusCode::ACCEPTED, Json(out.remove(0))).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestQuery {
    topic: Option<String>,
    timeout_ms: Option<u64>,
}

/// Longest a request may wait for its reply.
const MAX_REQUEST_WAIT: Duration = Duration::from_secs(300);

/// Publishes the event as a request (with a `correlationid` extension) and
/// answers with the reply event, or 408 when none came in time.
async fn request(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    q: Result<Query<RequestQuery>, QueryRejection>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (event, topic, _admission) = gated_event(&app, remote, &headers, q.topic, body(b)?)?;
    let wait = Duration::from_millis(q.timeout_ms.unwrap_or(30_000)).min(MAX_REQUEST_WAIT);
    let reply = tokio::select! {
        r = app.runtime.request(&topic, event, wait) => r?,
        _ = app.shutdown.cancelled() => return Err(eventmesh_runtime::RuntimeError::ShuttingDown.into()),
    };
    Ok(([(header::CONTENT_TYPE, STRUCTURED)], reply.to_json()).into_response())
}

/// Completes the request whose `correlationid` the reply event carries.
async fn reply(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let event = parse_single(&headers, raw.clone())?;
    let _admission = admit(
        &app,
        &Caller::http(&headers, remote),
        Ask::new(Operation::Publish, None, &raw),
    )?;
    app.runtime.reply(event)?;
    Ok(Json(serde_json::json!({"status": "delivered"})).into_response())
}

async fn publish_batch(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    q: Result<Query<TopicQuery>, QueryRejection>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let body = body(b)?;
    if essence(&headers).as_deref() != Some(BATCH) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("a batch must be sent as {BATCH}"),
        ));
    }
    let events = CloudEvent::batch_from_json_slice(&body)?;
    let topic = match q.topic {
        Some(t) => t,
        None => {
            let first = events[0].subject.clone().ok_or_else(missing_topic)?;
            if events.iter().any(|e| e.subject.as_deref() != Some(&first)) {
                return Err(ApiError::bad_request(
                    "missing_topic",
                    "without ?topic= every event of a batch must carry the same subject",
                ));
            }
            first
        }
    };
    let mut ask = Ask::new(Operation::Publish, Some(&topic), &body);
    ask.events = u32::try_from(events.len()).unwrap_or(u32::MAX);
    let _admission = admit(&app, &Caller::http(&headers, remote), ask)?;
    let out = app.runtime.ingress().publish(&topic, events).await?;
    Ok((StatusCode::ACCEPTED, Json(out)).into_response())
}

async fn subscribe(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let req: SubscribeRequest = json(&raw)?;
    let (sub, _admission) =
        gate::subscribe(&app, &Caller::http(&headers, remote), req, &raw).await?;
    Ok(Json(serde_json::json!({
        "subscriptionId": sub.subscription_id,
        "clientId": sub.client_id,
        "topic": sub.topic,
        "group": sub.group,
        "mode": sub.mode,
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UnsubscribeBody {
    client_id: String,
    topic: Option<String>,
}

async fn unsubscribe(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let req: UnsubscribeBody = json(&raw)?;
    let ask = Ask::new(Operation::Subscribe, req.topic.as_deref(), &raw);
    let admission = admit(&app, &Caller::http(&headers, remote), ask)?;
    check_owner(&app, &admission, &req.client_id).await?;
    let removed = app
        .runtime
        .unsubscribe_all(&req.client_id, req.topic.as_deref())
        .await?;
    for sub in &removed {
        app.gate
            .untrack_subscription(&quota_key(&sub.group, &sub.topic, &sub.client_id));
    }
    Ok(Json(serde_json::json!({ "removed": !removed.is_empty() })).into_response())
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
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let client = q
        .get("clientId")
        .ok_or_else(|| ApiError::bad_request("invalid_request", "clientId is required"))?;
    let admission = admit(
        &app,
        &Caller::http(&headers, remote),
        Ask::new(Operation::Subscribe, None, b""),
    )?;
    check_owner(&app, &admission, client).await?;
    let wait = Duration::from_millis(number(&q, "timeoutMs")?.unwrap_or(DEFAULT_POLL_WAIT_MS));
    let max = number(&q, "max")?.unwrap_or(DEFAULT_POLL_MAX);
    let got = tokio::select! {
        r = app.runtime.poll(client, max, wait) => r?,
        _ = app.shutdown.cancelled() => Vec::new(),
    };
    // The events are already JSON; splice them in rather than re-parse.
    let mut out =
        Vec::with_capacity(got.iter().map(|d| d.event_json.len() + 64).sum::<usize>() + 2);
    out.push(b'[');
    for (i, d) in got.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"deliveryId\":");
        out.extend_from_slice(&serde_json::to_vec(&d.delivery_id).unwrap_or_default());
        out.extend_from_slice(b",\"event\":");
        out.extend_from_slice(&d.event_json);
        out.push(b'}');
    }
    out.push(b']');
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AckBody {
    delivery_id: String,
}

async fn ack(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    settle(&app, remote, &headers, b, false).await
}

/// Gives a polled delivery back: it counts as a failed attempt and is sent
/// again after the backoff (or dead-lettered after the last attempt).
async fn nack(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    settle(&app, remote, &headers, b, true).await
}

/// Acks (or nacks) the delivery named in the body.
async fn settle(
    app: &AppState,
    remote: SocketAddr,
    headers: &HeaderMap,
    b: Result<Bytes, BytesRejection>,
    nack: bool,
) -> Result<Response, ApiError> {
    let raw = body(b)?;
    let _admission = admit(
        app,
        &Caller::http(headers, remote),
        Ask::new(Operation::Ack, None, &raw),
    )?;
    let req: AckBody = json(&raw)?;
    let (done, status) = if nack {
        (app.runtime.nack(&req.delivery_id).await, "nacked")
    } else {
        (app.runtime.ack(&req.delivery_id).await, "acked")
    };
    settled(done, status, &req.delivery_id)
}

fn settled(done: bool, status: &str, delivery_id: &str) -> Result<Response, ApiError> {
    if done {
        Ok(Json(serde_json::json!({ "status": status })).into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_delivery",
            format!("delivery {delivery_id:?} is unknown or already settled"),
        ))
    }
}
