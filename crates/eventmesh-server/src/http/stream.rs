//! Streaming transports on the traffic port, both reading the client's
//! mailbox through a [`StreamGuard`] (so deliveries, acks, caps, the ledger
//! and the shutdown drain work exactly as for long polls):
//!
//! - `GET /events/stream` (SSE): each delivery is a message with
//!   `id: <deliveryId>` and `data: {"deliveryId","event"}`, a `: heartbeat`
//!   comment every 15 s; acks by `POST /events/ack`, or `autoAck=true` acks
//!   each delivery as it is written. A reconnect carrying `Last-Event-ID`
//!   sends every unacknowledged delivery again at once.
//! - `GET /events/ws` (WebSocket): deliveries as text frames
//!   `{"deliveryId","event"}`; the client sends `ack`, `nack`, `publish`,
//!   `subscribe` and `reply` messages on the same socket. Pings every 15 s; a
//!   socket silent for 45 s is closed.
//!
//! Both may subscribe in the same call (`topic`, `group`, `mode`, `from`).
//! The gate runs when the stream opens (and for each publish, subscribe or
//! reply sent over a WebSocket); pushing is passive. When a client's last
//! stream closes, its unacknowledged deliveries go out again at once, to
//! another online member of its group when there is one.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{PolledDelivery, StreamGuard, SubscribeRequest};
use eventmesh_security::{Admission, Operation, Transport};
use eventmesh_state::{DeliveryMode, StartFrom};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::SinkExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::gate::{self, admit, check_owner, Ask, Caller};
use super::AppState;
use crate::tcp::MAX_PIPELINE;

const HEARTBEAT: Duration = Duration::from_secs(15);
/// A WebSocket that sent nothing (not even a pong) this long is dead.
const WS_SILENCE: Duration = Duration::from_secs(45);
const BATCH: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamQuery {
    client_id: String,
    topic: Option<String>,
    group: Option<String>,
    mode: Option<DeliveryMode>,
    from: Option<StartFrom>,
    #[serde(default)]
    auto_ack: bool,
}

/// `{"deliveryId": ..., "event": ...}` without re-parsing the event.
pub fn delivery_json(d: &PolledDelivery) -> String {
    let mut out = String::with_capacity(d.event_json.len() + d.delivery_id.len() + 32);
    out.push_str("{\"deliveryId\":");
    out.push_str(&Value::String(d.delivery_id.clone()).to_string());
    out.push_str(",\"event\":");
    out.push_str(&String::from_utf8_lossy(&d.event_json));
    out.push('}');
    out
}

/// Gates the stream and, with `topic`, subscribes the client in the same
/// call; then opens the stream on its mailbox.
async fn open(
    app: &AppState,
    caller: &Caller,
    q: &StreamQuery,
) -> Result<(StreamGuard, Admission), ApiError> {
    let admission = gate_stream(app, caller, q).await?;
    let guard = app.runtime.attach_stream(&q.client_id)?;
    Ok((guard, admission))
}

async fn gate_stream(
    app: &AppState,
    caller: &Caller,
    q: &StreamQuery,
) -> Result<Admission, ApiError> {
    let admission = match &q.topic {
        Some(topic) => {
            let req = SubscribeRequest {
                client_id: q.client_id.clone(),
                topic: topic.clone(),
                group: q.group.clone(),
                mode: q.mode,
                url: None,
                from: q.from,
            };
            gate::subscribe(app, caller, req, b"").await?.1
        }
        None => {
            let admission = admit(app, caller, Ask::new(Operation::Subscribe, None, b""))?;
            check_owner(app, &admission, &q.client_id).await?;
            admission
        }
    };
    Ok(admission)
}

pub async fn sse(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let q = super::traffic::query(q)?;
    let caller = Caller::http(&headers, remote).over(Transport::Sse);
    let (guard, admission) = open(&app, &caller, &q).await?;
    if headers.contains_key("last-event-id") {
        // The client lost its previous stream (maybe before this side
        // noticed): what it had not acknowledged goes out again now.
        app.runtime.release(&q.client_id).await;
    }
    struct Conn {
        guard: StreamGuard,
        _admission: Admission,
        app: AppState,
        auto_ack: bool,
        buffer: VecDeque<PolledDelivery>,
    }
    let conn = Conn {
        guard,
        _admission: admission,
        app,
        auto_ack: q.auto_ack,
        buffer: VecDeque::new(),
    };
    let events = futures::stream::unfold(conn, |mut c| async move {
        loop {
            if let Some(d) = c.buffer.pop_front() {
                if c.auto_ack {
                    c.app.runtime.ack(&d.delivery_id).await;
                }
                let event = Event::default()
                    .id(d.delivery_id.clone())
                    .data(delivery_json(&d));
                return Some((Ok::<_, Infallible>(event), c));
            }
            if c.guard.is_closed() {
                return None;
            }
            tokio::select! {
                got = c.guard.next(BATCH, HEARTBEAT) => c.buffer.extend(got),
                _ = c.app.shutdown.cancelled() => return None,
            }
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response())
}

pub async fn ws(
    State(app): State<AppState>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let q = super::traffic::query(q)?;
    let caller = Caller::http(&headers, remote).over(Transport::WebSocket);
    let admission = gate_stream(&app, &caller, &q).await?;
    // A client with no pull subscription yet may still publish, reply, and
    // subscribe later on the socket; deliveries start with its first
    // subscription.
    let guard = match app.runtime.attach_stream(&q.client_id) {
        Ok(g) => Some(g),
        Err(eventmesh_runtime::RuntimeError::NotFound { .. }) if q.topic.is_none() => None,
        Err(e) => return Err(e.into()),
    };
    let client = q.client_id.clone();
    Ok(upgrade
        .max_message_size(app.config.server.http.max_body_bytes + 4096)
        .on_upgrade(move |socket| session(app, socket, client, guard, admission, caller)))
}

enum Step {
    Incoming(Option<Result<Message, axum::Error>>),
    Answer(Option<Value>),
    Deliveries(Vec<PolledDelivery>),
    Ping,
    Stop,
}

/// The next deliveries of the stream; never, while there is none.
async fn next_of(guard: &Option<StreamGuard>) -> Vec<PolledDelivery> {
    match guard {
        Some(g) => g.next(BATCH, HEARTBEAT).await,
        None => std::future::pending().await,
    }
}

/// A client message being handled; its answer, if any.
type Handling = Pin<Box<dyn Future<Output = Option<Value>> + Send>>;

/// One WebSocket. Client messages are handled concurrently, up to
/// [`MAX_PIPELINE`] at a time (publishes share group commits, as on the
/// TCP port), and started in the order they arrived, so publishes from one
/// socket reach the log in that order; answers go out as they complete,
/// matched by `requestId`.
async fn session(
    app: AppState,
    mut socket: WebSocket,
    client: String,
    mut guard: Option<StreamGuard>,
    _admission: Admission,
    caller: Caller,
) {
    let mut ping = tokio::time::interval(HEARTBEAT);
    ping.tick().await;
    let mut last_heard = tokio::time::Instant::now();
    let mut handling: FuturesUnordered<Handling> = FuturesUnordered::new();
    loop {
        let closed = match &guard {
            Some(g) => g.is_closed(),
            None => app.runtime.is_draining(),
        };
        if closed {
            break;
        }
        let room = handling.len() < MAX_PIPELINE;
        let step = tokio::select! {
            m = socket.recv(), if room => Step::Incoming(m),
            Some(a) = handling.next(), if !handling.is_empty() => Step::Answer(a),
            got = next_of(&guard) => Step::Deliveries(got),
            _ = ping.tick() => Step::Ping,
            _ = app.shutdown.cancelled() => Step::Stop,
        };
        let sent = match step {
            Step::Incoming(Some(Ok(msg))) => {
                last_heard = tokio::time::Instant::now();
                match msg {
                    Message::Text(text) => {
                        let started = start(&app, &caller, &client, text.as_str()).await;
                        handling.push(started);
                        Ok(())
                    }
                    Message::Binary(_) => {
                        let e = error_json(None, "unsupported_message", "send JSON text messages");
                        socket.send(Message::Text(e.to_string().into())).await
                    }
                    Message::Close(_) => break,
                    // Pings are answered by the library; pongs only prove life.
                    _ => Ok(()),
                }
            }
            Step::Incoming(_) => break,
            Step::Answer(answer) => {
                let subscribed = answer.as_ref().is_some_and(|a| a["type"] == "subscribed");
                if guard.is_none() && subscribed {
                    guard = app.runtime.attach_stream(&client).ok();
                }
                match answer {
                    Some(a) => socket.send(Message::Text(a.to_string().into())).await,
                    None => Ok(()),
                }
            }
            Step::Deliveries(got) => {
                let mut result = Ok(());
                for d in &got {
                    result = socket.feed(Message::Text(delivery_json(d).into())).await;
                    if result.is_err() {
                        break;
                    }
                }
                match result {
                    Ok(()) => socket.flush().await,
                    e => e,
                }
            }
            Step::Ping => {
                if last_heard.elapsed() > WS_SILENCE {
                    tracing::info!(client, "WebSocket silent too long; closing");
                    break;
                }
                socket.send(Message::Ping(Default::default())).await
            }
            Step::Stop => break,
        };
        if sent.is_err() {
            break;
        }
    }
    // Messages already under way finish (a publish that reached the log is
    // answered when the socket still takes it).
    while let Some(answer) = handling.next().await {
        if let Some(a) = answer {
            if socket
                .send(Message::Text(a.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    // Dropping the guard releases what the client had not acknowledged.
}

fn error_json(request_id: Option<&Value>, code: &str, message: &str) -> Value {
    let mut v = json!({"type": "error", "error": code, "message": message});
    if let Some(id) = request_id {
        v["requestId"] = id.clone();
    }
    v
}

fn api_error_json(request_id: Option<&Value>, e: ApiError) -> Value {
    error_json(request_id, e.code, &e.message)
}

/// Starts handling one client message. A publish is parsed, admitted and
/// queued in the log right here, so publishes keep the order in which they
/// arrived; the returned future waits for its durability (or does the whole
/// work of any other message) and gives the answer to send back, if any.
async fn start(app: &AppState, caller: &Caller, client: &str, text: &str) -> Handling {
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let answer = error_json(None, "malformed_json", &e.to_string());
            return Box::pin(std::future::ready(Some(answer)));
        }
    };
    if msg.get("type").and_then(Value::as_str) == Some("publish") {
        let answer = publish(app, caller, &msg, text).await;
        return Box::pin(answer);
    }
    let (app, caller, client, text) = (
        app.clone(),
        caller.clone(),
        client.to_string(),
        text.to_string(),
    );
    Box::pin(async move { handle(&app, &caller, &client, &msg, &text).await })
}

/// `v` with the message's `requestId`, when it had one.
fn answering(request_id: Option<&Value>, mut v: Value) -> Option<Value> {
    if let Some(id) = request_id {
        v["requestId"] = id.clone();
    }
    Some(v)
}

/// A `publish` message: queued in the log before this returns; the future
/// answers once it is durable.
async fn publish(
    app: &AppState,
    caller: &Caller,
    msg: &Value,
    text: &str,
) -> impl Future<Output = Option<Value>> + Send + 'static {
    let rid = msg.get("requestId").cloned();
    let refused = |code: &str, message: &str| {
        futures::future::Either::Left(std::future::ready(Some(error_json(
            rid.as_ref(),
            code,
            message,
        ))))
    };
    let topic = msg.get("topic").and_then(Value::as_str);
    let (Some(topic), Some(event)) = (topic, msg.get("event")) else {
        return refused("invalid_request", "publish needs topic and event");
    };
    let event = match CloudEvent::from_json_value(event.clone()) {
        Ok(e) => e,
        Err(e) => return refused(e.code(), &e.to_string()),
    };
    let mut ask = Ask::new(Operation::Publish, Some(topic), text.as_bytes());
    ask.events = 1;
    if let Err(e) = admit(app, caller, ask) {
        return refused(e.code, &e.message);
    }
    let ticket = match app.runtime.ingress().submit(topic, vec![event]).await {
        Ok(t) => t,
        Err(e) => {
            let e = ApiError::from(e);
            return refused(e.code, &e.message);
        }
    };
    futures::future::Either::Right(async move {
        match ticket.durable().await {
            Ok(mut out) => {
                let p = out.remove(0);
                answering(
                    rid.as_ref(),
                    json!({"type": "published", "id": p.id, "topic": p.topic,
                        "partition": p.partition, "offset": p.offset}),
                )
            }
            Err(e) => Some(api_error_json(rid.as_ref(), e.into())),
        }
    })
}

/// Any client message but a publish; the answer to send back, if any.
async fn handle(
    app: &AppState,
    caller: &Caller,
    client: &str,
    msg: &Value,
    text: &str,
) -> Option<Value> {
    let rid = msg.get("requestId");
    let field = |name: &str| msg.get(name).and_then(Value::as_str);
    let answer = |v: Value| answering(rid, v);
    match field("type") {
        Some(kind @ ("ack" | "nack")) => {
            let Some(id) = field("deliveryId") else {
                return Some(error_json(rid, "invalid_request", "deliveryId is required"));
            };
            let ask = Ask::new(Operation::Ack, None, text.as_bytes());
            if let Err(e) = admit(app, caller, ask) {
                return Some(api_error_json(rid, e));
            }
            let done = if kind == "ack" {
                app.runtime.ack(id).await
            } else {
                app.runtime.nack(id).await
            };
            (!done).then(|| {
                error_json(
                    rid,
                    "unknown_delivery",
                    &format!("delivery {id:?} is unknown or already settled"),
                )
            })
        }
        Some("subscribe") => {
            let Some(topic) = field("topic") else {
                return Some(error_json(
                    rid,
                    "invalid_request",
                    "subscribe needs a topic",
                ));
            };
            let mode: Result<Option<DeliveryMode>, _> = msg
                .get("mode")
                .cloned()
                .map(serde_json::from_value)
                .transpose();
            let from: Result<Option<StartFrom>, _> = msg
                .get("from")
                .cloned()
                .map(serde_json::from_value)
                .transpose();
            let (Ok(mode), Ok(from)) = (mode, from) else {
                return Some(error_json(rid, "invalid_request", "bad mode or from"));
            };
            let req = SubscribeRequest {
                client_id: client.to_string(),
                topic: topic.to_string(),
                group: field("group").map(str::to_string),
                mode,
                url: None,
                from,
            };
            match gate::subscribe(app, caller, req, text.as_bytes()).await {
                Ok((sub, _)) => {
                    answer(json!({"type": "subscribed", "subscriptionId": sub.subscription_id}))
                }
                Err(e) => Some(api_error_json(rid, e)),
            }
        }
        Some("reply") => {
            let event = match msg.get("event").cloned().map(CloudEvent::from_json_value) {
                Some(Ok(e)) => e,
                Some(Err(e)) => return Some(error_json(rid, e.code(), &e.to_string())),
                None => return Some(error_json(rid, "invalid_request", "reply needs an event")),
            };
            let ask = Ask::new(Operation::Publish, None, text.as_bytes());
            if let Err(e) = admit(app, caller, ask) {
                return Some(api_error_json(rid, e));
            }
            match app.runtime.reply(event) {
                Ok(()) => answer(json!({"type": "replied"})),
                Err(e) => Some(api_error_json(rid, e.into())),
            }
        }
        other => Some(error_json(
            rid,
            "invalid_request",
            &format!(
                "unknown message type {other:?}; expected ack, nack, publish, subscribe or reply"
            ),
        )),
    }
}
