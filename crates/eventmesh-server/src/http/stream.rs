//! Streaming transports on the traffic port. Both open a stream through
//! [`eventmesh_api::Api::attach`] (the gate, the creator check, and with
//! `topic` a subscribe in the same call) and read the client's mailbox, so
//! deliveries, acks, caps, the ledger and the shutdown drain work exactly
//! as for long polls:
//!
//! - `GET /events/stream` (SSE): each delivery is a message with
//!   `id: <deliveryId>` and `data: {"deliveryId","event"}`, a `: heartbeat`
//!   comment every 15 s; acks by `POST /events/ack`, or `autoAck=true` acks
//!   each delivery as it is written. A reconnect carrying `Last-Event-ID`
//!   sends every unacknowledged delivery again at once.
//! - `GET /events/ws` (WebSocket): deliveries as text frames
//!   `{"deliveryId","event"}`; the client sends `ack`, `nack`, `publish`,
//!   `subscribe` and `reply` messages on the same socket, each one decoded
//!   into the same operation as its HTTP route. The socket authenticates
//!   once, at the upgrade; each message is still checked by the ACL and
//!   quotas and audited. Pings every 15 s; a socket silent for 45 s is
//!   closed.
//!
//! When a client's last stream closes, its unacknowledged deliveries go
//! out again at once, to another online member of its group when there is
//! one.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{PolledDelivery, Settle, StreamGuard, SubscribeRequest};
use eventmesh_security::Transport;
use eventmesh_state::{DeliveryMode, StartFrom};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::{FutureExt, SinkExt};
use serde::Deserialize;
use serde_json::{json, Value};

use super::traffic::{query, Req};
use super::AppState;
use eventmesh_api::wire::{self, SubscribeBody};
use eventmesh_api::{Api, ApiError, Caller, Stream, MAX_PIPELINE};

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
    /// The subscription's filters: a JSON array of filter objects.
    filters: Option<String>,
    #[serde(default)]
    auto_ack: bool,
}

impl StreamQuery {
    /// The subscribe the stream asks for, when it names a topic.
    fn subscribe(&self) -> Result<Option<SubscribeRequest>, ApiError> {
        let Some(topic) = self.topic.clone() else {
            return Ok(None);
        };
        let filters = match &self.filters {
            None => Vec::new(),
            Some(text) => serde_json::from_str::<Vec<serde_json::Value>>(text).map_err(|e| {
                ApiError::bad_request(
                    "invalid_filter",
                    format!("filters: not a JSON array of filter objects: {e}"),
                )
            })?,
        };
        Ok(Some(SubscribeRequest {
            client_id: self.client_id.clone(),
            topic,
            group: self.group.clone(),
            mode: self.mode,
            url: None,
            from: self.from,
            filters,
            ..Default::default()
        }))
    }
}

fn text(d: &PolledDelivery) -> String {
    String::from_utf8_lossy(&wire::delivery_json(d)).into_owned()
}

pub async fn sse(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let (mut caller, headers) = (r.caller, r.headers);
    caller.transport = Transport::Sse;
    let opened = tokio::time::Instant::now();
    let stream = app
        .api
        .attach(&caller, &q.client_id, q.subscribe()?, true)
        .await?;
    if headers.contains_key("last-event-id") {
        // The client lost its previous stream (maybe before this side
        // noticed): what it took there and did not acknowledge goes out
        // again now.
        app.api.resume(&q.client_id, opened).await;
    }
    struct Conn {
        guard: StreamGuard,
        _stream: Stream,
        api: Api,
        auto_ack: bool,
        buffer: VecDeque<PolledDelivery>,
    }
    let mut stream = stream;
    let conn = Conn {
        guard: stream.guard.take().expect("required"),
        _stream: stream,
        api: app.api.clone(),
        auto_ack: q.auto_ack,
        buffer: VecDeque::new(),
    };
    let events = futures::stream::unfold(conn, |mut c| async move {
        loop {
            if let Some(d) = c.buffer.pop_front() {
                if c.auto_ack {
                    c.api.auto_ack(&d.delivery_id).await;
                }
                let event = Event::default().id(d.delivery_id.clone()).data(text(&d));
                return Some((Ok::<_, Infallible>(event), c));
            }
            if c.guard.is_closed() {
                return None;
            }
            tokio::select! {
                got = c.guard.next(BATCH, HEARTBEAT) => c.buffer.extend(got),
                _ = c.api.shutdown().cancelled() => return None,
            }
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response())
}

pub async fn ws(
    State(app): State<AppState>,
    r: Req,
    q: Result<Query<StreamQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|r| {
        ApiError::new(
            r.status(),
            "websocket_upgrade_required",
            format!(
                "{}: open /events/ws with a WebSocket handshake",
                r.body_text()
            ),
        )
    })?;
    let q = query(q)?;
    let mut caller = r.caller;
    caller.transport = Transport::WebSocket;
    // A client with no pull subscription yet may still publish, reply, and
    // subscribe later on the socket; deliveries start with its first
    // subscription.
    let stream = app
        .api
        .attach(&caller, &q.client_id, q.subscribe()?, false)
        .await?;
    let session = caller.in_session(Transport::WebSocket, stream.admitted.identity().clone());
    let client = q.client_id.clone();
    Ok(upgrade
        .max_message_size(app.config.server.http.max_body_bytes + 4096)
        .on_upgrade(move |socket| session_loop(app.api, socket, client, stream, session)))
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
async fn session_loop(
    api: Api,
    mut socket: WebSocket,
    client: String,
    mut stream: Stream,
    caller: Caller,
) {
    let mut ping = tokio::time::interval(HEARTBEAT);
    ping.tick().await;
    let mut last_heard = tokio::time::Instant::now();
    let mut handling: FuturesUnordered<Handling> = FuturesUnordered::new();
    loop {
        let closed = match &stream.guard {
            Some(g) => g.is_closed(),
            None => api.admin().is_draining(),
        };
        if closed {
            break;
        }
        let room = handling.len() < MAX_PIPELINE;
        let step = tokio::select! {
            m = socket.recv(), if room => Step::Incoming(m),
            Some(a) = handling.next(), if !handling.is_empty() => Step::Answer(a),
            got = next_of(&stream.guard) => Step::Deliveries(got),
            _ = ping.tick() => Step::Ping,
            _ = api.shutdown().cancelled() => Step::Stop,
        };
        let sent = match step {
            Step::Incoming(Some(Ok(msg))) => {
                last_heard = tokio::time::Instant::now();
                match msg {
                    Message::Text(text) => {
                        let started = start(&api, &caller, &client, text.as_str()).await;
                        handling.push(started);
                        Ok(())
                    }
                    Message::Binary(_) => {
                        let e =
                            ApiError::bad_request("unsupported_message", "send JSON text messages");
                        socket
                            .send(Message::Text(e.ws_json(None).to_string().into()))
                            .await
                    }
                    Message::Close(_) => break,
                    // Pings are answered by the library; pongs only prove life.
                    _ => Ok(()),
                }
            }
            Step::Incoming(_) => break,
            Step::Answer(answer) => {
                // Every answer ready by now goes out in one flush.
                let mut result = Ok(());
                let mut next = Some(answer);
                while let Some(answer) = next.take() {
                    let subscribed = answer.as_ref().is_some_and(|a| a["type"] == "subscribed");
                    if stream.guard.is_none() && subscribed {
                        stream.guard = api.stream_of(&client).ok();
                    }
                    if let Some(a) = answer {
                        result = socket.feed(Message::Text(a.to_string().into())).await;
                        if result.is_err() {
                            break;
                        }
                    }
                    if let Some(Some(more)) = handling.next().now_or_never() {
                        next = Some(more);
                    }
                }
                match result {
                    Ok(()) => socket.flush().await,
                    e => e,
                }
            }
            Step::Deliveries(got) => {
                let mut result = Ok(());
                for d in &got {
                    result = socket.feed(Message::Text(text(d).into())).await;
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
    // Dropping the stream's guard releases what the client had not
    // acknowledged.
}

/// `v` with the message's `requestId`, when it had one.
fn answering(request_id: Option<&Value>, mut v: Value) -> Value {
    if let Some(id) = request_id {
        v["requestId"] = id.clone();
    }
    v
}

fn ready(v: Value) -> Handling {
    Box::pin(std::future::ready(Some(v)))
}

/// Starts handling one client message. A publish is parsed, admitted and
/// queued in the log right here, so publishes keep the order in which they
/// arrived; the returned future waits for its durability (or does the whole
/// work of any other message) and gives the answer to send back, if any.
async fn start(api: &Api, caller: &Caller, client: &str, text: &str) -> Handling {
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return ready(ApiError::bad_request("malformed_json", e.to_string()).ws_json(None))
        }
    };
    let rid = msg.get("requestId").cloned();
    if msg.get("type").and_then(Value::as_str) == Some("publish") {
        let queued = async {
            let topic = msg.get("topic").and_then(Value::as_str);
            let (Some(topic), Some(event)) = (topic, msg.get("event")) else {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    "publish needs topic and event",
                ));
            };
            let event = CloudEvent::from_json_value(event.clone())?;
            api.submit(
                caller,
                Some(topic.to_string()),
                vec![event],
                text.as_bytes(),
            )
            .await
        };
        return match queued.await {
            Ok(queued) => Box::pin(async move {
                Some(match queued.durable().await {
                    Ok(mut out) => {
                        let p = out.remove(0);
                        answering(
                            rid.as_ref(),
                            json!({"type": "published", "id": p.id, "topic": p.topic,
                                "partition": p.partition, "offset": p.offset}),
                        )
                    }
                    Err(e) => e.ws_json(rid.as_ref()),
                })
            }),
            Err(e) => ready(e.ws_json(rid.as_ref())),
        };
    }
    let (api, caller, client, text) = (
        api.clone(),
        caller.clone(),
        client.to_string(),
        text.to_string(),
    );
    Box::pin(async move {
        match handle(&api, &caller, &client, &msg, &text).await {
            Ok(Some(v)) => Some(answering(rid.as_ref(), v)),
            Ok(None) => None,
            Err(e) => Some(e.ws_json(rid.as_ref())),
        }
    })
}

/// Any client message but a publish; the answer to send back, if any.
async fn handle(
    api: &Api,
    caller: &Caller,
    client: &str,
    msg: &Value,
    text: &str,
) -> Result<Option<Value>, ApiError> {
    let field = |name: &str| msg.get(name).and_then(Value::as_str);
    let raw = text.as_bytes();
    match field("type") {
        Some(kind @ ("ack" | "nack")) => {
            let id = field("deliveryId").ok_or_else(|| {
                ApiError::bad_request("invalid_request", "deliveryId is required")
            })?;
            let how = if kind == "ack" {
                Settle::Ack
            } else {
                Settle::Nack
            };
            api.settle(caller, id, how, raw).await?;
            // Answered only when the client asked for it (a `requestId`).
            let done = if kind == "ack" { "acked" } else { "nacked" };
            Ok(msg.get("requestId").map(|_| json!({"type": done})))
        }
        Some("subscribe") => {
            let mut body = msg.clone();
            if let Some(o) = body.as_object_mut() {
                o.remove("type");
                o.remove("requestId");
            }
            let body: SubscribeBody = serde_json::from_value(body)
                .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
            if body.url.is_some() || body.client_id.as_deref().is_some_and(|c| c != client) {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    "a WebSocket subscribes its own client, without a url",
                ));
            }
            let (sub, _) = api
                .subscribe(caller, body.into_request(Some(client))?, raw)
                .await?;
            Ok(Some(
                json!({"type": "subscribed", "subscriptionId": sub.subscription_id}),
            ))
        }
        Some("reply") => {
            let event = msg
                .get("event")
                .cloned()
                .ok_or_else(|| ApiError::bad_request("invalid_request", "reply needs an event"))?;
            api.reply(caller, CloudEvent::from_json_value(event)?, raw)
                .await?;
            Ok(Some(json!({"type": "replied"})))
        }
        other => Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "unknown message type {other:?}; expected ack, nack, publish, subscribe or reply"
            ),
        )),
    }
}
