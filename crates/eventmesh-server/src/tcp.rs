//! The legacy TCP port: the length-prefixed frame protocol of
//! `eventmesh_core::tcp_frame` (documented byte by byte in
//! docs/tcp-protocol.md).
//!
//! A connection starts with `Hello` (checked against the connection-level
//! token `eventmesh.server.tcp.token`, separate from the HTTP gate), then
//! publishes, subscribes, acks and nacks; deliveries arrive as `Push`
//! frames read from the client's mailbox, like every other transport, so
//! acks, caps, the ledger and the shutdown drain behave the same. A
//! malformed, oversized or unknown frame is answered with an `Error` frame
//! and closes that connection only. A connection silent for three
//! heartbeat intervals is closed; its unacknowledged deliveries go out
//! again at once.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Runtime, RuntimeError, StreamGuard, SubscribeRequest};
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::http::ApiError;

#[derive(Clone)]
pub struct TcpSettings {
    pub token: Option<String>,
    pub max_frame: usize,
    pub heartbeat: Duration,
}

/// Accepts connections until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    runtime: Arc<Runtime>,
    settings: TcpSettings,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, remote)) => {
                    let (rt, s, stop) = (runtime.clone(), settings.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, remote, rt, s, stop).await {
                            tracing::debug!(%remote, error = %e, "TCP connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.cancelled() => return,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Hello {
    client_id: String,
    token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Subscribe {
    topic: String,
    group: Option<String>,
    mode: Option<eventmesh_state::DeliveryMode>,
    from: Option<eventmesh_state::StartFrom>,
}

#[derive(Deserialize, Default)]
struct Unsubscribe {
    topic: Option<String>,
}

/// An error answer for a runtime failure, with the HTTP API's codes.
fn runtime_error(correlation: u64, e: RuntimeError) -> Frame {
    let api = ApiError::from(e);
    Frame::error(correlation, api.code, &api.message)
}

struct Session {
    runtime: Arc<Runtime>,
    client: Option<String>,
    tx: mpsc::Sender<Frame>,
    /// Reads the client's mailbox into `Push` frames once it subscribed.
    pusher: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Stopping the pusher drops its stream guard, which releases what
        // the client had not acknowledged.
        if let Some(p) = self.pusher.take() {
            p.abort();
        }
    }
}

async fn connection(
    stream: TcpStream,
    remote: SocketAddr,
    runtime: Arc<Runtime>,
    settings: TcpSettings,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (mut reader, writer) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Frame>(1024);
    // One writer: replies and pushes interleave frame by frame; the buffer
    // is flushed whenever nothing more is queued.
    let writing = tokio::spawn(async move {
        let mut w = BufWriter::new(writer);
        let mut buf = BytesMut::with_capacity(64 << 10);
        while let Some(frame) = rx.recv().await {
            let closing = frame.kind == FrameType::Goodbye
                || (frame.kind == FrameType::Error && frame.correlation == 0);
            buf.clear();
            frame.encode(&mut buf);
            if w.write_all(&buf).await.is_err() {
                return;
            }
            if (rx.is_empty() || closing) && w.flush().await.is_err() {
                return;
            }
            if closing {
                let _ = w.shutdown().await;
                return;
            }
        }
        let _ = w.flush().await;
    });
    let mut session = Session {
        runtime,
        client: None,
        tx: tx.clone(),
        pusher: None,
    };
    let idle = settings.heartbeat * 3;
    let mut buf = BytesMut::with_capacity(8 << 10);
    // Publishes are queued in the log in the order they arrived, then wait
    // for durability concurrently (sharing group commits with every other
    // publisher); acks and nacks also run concurrently (a dispatcher takes
    // them in bursts); other frames are handled in order.
    let mut under_way: FuturesUnordered<Pending> = FuturesUnordered::new();
    'conn: loop {
        // Every complete frame already buffered, while the pipeline has room.
        while under_way.len() < MAX_PIPELINE {
            match tcp_frame::decode(&mut buf, settings.max_frame) {
                Ok(Some(frame)) if frame.kind == FrameType::Publish && session.client.is_some() => {
                    let answer = start_publish(&session.runtime, frame).await;
                    under_way.push(answer);
                }
                Ok(Some(frame))
                    if matches!(frame.kind, FrameType::Ack | FrameType::Nack)
                        && session.client.is_some() =>
                {
                    under_way.push(Box::pin(settle(session.runtime.clone(), frame)));
                }
                Ok(Some(frame)) => {
                    if !session.handle(frame, &settings).await {
                        break 'conn;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(%remote, error = %e, "bad TCP frame; closing the connection");
                    let _ = tx.send(Frame::error(0, e.code(), &e.to_string())).await;
                    break 'conn;
                }
            }
        }
        let room = under_way.len() < MAX_PIPELINE;
        let step = tokio::select! {
            Some(answer) = under_way.next(), if !under_way.is_empty() => Step::Answer(answer),
            r = tokio::time::timeout(idle, reader.read_buf(&mut buf)), if room => Step::Read(r),
            _ = shutdown.cancelled() => Step::Shutdown,
        };
        match step {
            Step::Answer(answer) => {
                if tx.send(answer).await.is_err() {
                    break;
                }
            }
            Step::Shutdown => {
                let _ = tx.send(Frame::new(FrameType::Goodbye, 0, Vec::new())).await;
                break;
            }
            Step::Read(Ok(Ok(0))) => break,
            Step::Read(Ok(Ok(_))) => {}
            Step::Read(Ok(Err(e))) => {
                tracing::debug!(%remote, error = %e, "TCP read failed");
                break;
            }
            Step::Read(Err(_)) => {
                let _ = tx
                    .send(Frame::error(
                        0,
                        "idle_timeout",
                        "no frame for three heartbeat intervals",
                    ))
                    .await;
                break;
            }
        }
    }
    // Publishes already under way finish and are answered.
    while let Some(answer) = under_way.next().await {
        if tx.send(answer).await.is_err() {
            break;
        }
    }
    drop(session);
    drop(tx);
    let _ = writing.await;
    Ok(())
}

impl Session {
    async fn send(&self, frame: Frame) -> bool {
        self.tx.send(frame).await.is_ok()
    }

    /// Handles one frame; false ends the connection.
    async fn handle(&mut self, frame: Frame, settings: &TcpSettings) -> bool {
        let c = frame.correlation;
        if self.client.is_none() && frame.kind != FrameType::Hello {
            let _ = self
                .send(Frame::error(
                    0,
                    "hello_required",
                    "the first frame must be HELLO",
                ))
                .await;
            return false;
        }
        match frame.kind {
            FrameType::Hello => self.hello(c, &frame.payload, settings).await,
            FrameType::Publish => {
                let answer = start_publish(&self.runtime, frame).await.await;
                self.send(answer).await
            }
            FrameType::Subscribe => {
                let answer = self.subscribe(c, &frame.payload).await;
                self.send(answer).await
            }
            FrameType::Unsubscribe => {
                let req: Unsubscribe = serde_json::from_slice(&frame.payload).unwrap_or_default();
                let client = self.client.clone().unwrap_or_default();
                let answer = match self
                    .runtime
                    .unsubscribe(&client, req.topic.as_deref())
                    .await
                {
                    Ok(removed) => Frame::json(FrameType::Ok, c, &json!({ "removed": removed })),
                    Err(e) => runtime_error(c, e),
                };
                self.send(answer).await
            }
            FrameType::Ack | FrameType::Nack => {
                let answer = settle(self.runtime.clone(), frame).await;
                self.send(answer).await
            }
            FrameType::Reply => {
                let answer = match CloudEvent::from_json_slice(&frame.payload) {
                    Ok(event) => match self.runtime.reply(event) {
                        Ok(()) => Frame::new(FrameType::Ok, c, Vec::new()),
                        Err(e) => runtime_error(c, e),
                    },
                    Err(e) => Frame::error(c, e.code(), &e.to_string()),
                };
                self.send(answer).await
            }
            FrameType::Heartbeat => {
                self.send(Frame::new(FrameType::Heartbeat, c, Vec::new()))
                    .await
            }
            FrameType::Goodbye => {
                let _ = self
                    .send(Frame::new(FrameType::Goodbye, c, Vec::new()))
                    .await;
                false
            }
            // A client's own error report needs no answer.
            FrameType::Error => true,
            other => {
                self.send(Frame::error(
                    c,
                    "unexpected_frame",
                    &format!("{} frames are sent by the server, not to it", other.name()),
                ))
                .await
            }
        }
    }

    async fn hello(&mut self, c: u64, payload: &[u8], settings: &TcpSettings) -> bool {
        if self.client.is_some() {
            return self
                .send(Frame::error(
                    c,
                    "unexpected_frame",
                    "HELLO was already received",
                ))
                .await;
        }
        let hello: Hello = match serde_json::from_slice(payload) {
            Ok(h) => h,
            Err(e) => {
                let _ = self
                    .send(Frame::error(c, "bad_payload", &format!("HELLO: {e}")))
                    .await;
                return false;
            }
        };
        if let Some(expected) = &settings.token {
            let given = hello.token.unwrap_or_default();
            if !bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
                let _ = self
                    .send(Frame::error(
                        c,
                        "unauthorized",
                        "missing or wrong connection token",
                    ))
                    .await;
                return false;
            }
        }
        if hello.client_id.is_empty() {
            let _ = self
                .send(Frame::error(c, "bad_payload", "HELLO needs a clientId"))
                .await;
            return false;
        }
        self.client = Some(hello.client_id);
        let ms = settings.heartbeat.as_millis() as u64;
        self.send(Frame::json(
            FrameType::HelloOk,
            c,
            &json!({ "heartbeatMs": ms }),
        ))
        .await
    }

    async fn subscribe(&mut self, c: u64, payload: &[u8]) -> Frame {
        let req: Subscribe = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => return Frame::error(c, "invalid_request", &format!("SUBSCRIBE: {e}")),
        };
        let client = self.client.clone().unwrap_or_default();
        let sub = match self
            .runtime
            .subscribe(SubscribeRequest {
                client_id: client.clone(),
                topic: req.topic,
                group: req.group,
                mode: req.mode,
                url: None,
                from: req.from,
            })
            .await
        {
            Ok(s) => s,
            Err(e) => return runtime_error(c, e),
        };
        if self.pusher.is_none() {
            match self.runtime.attach_stream(&client) {
                Ok(guard) => self.pusher = Some(tokio::spawn(push(guard, self.tx.clone()))),
                Err(e) => return runtime_error(c, e),
            }
        }
        Frame::json(
            FrameType::SubscribeOk,
            c,
            &json!({ "subscriptionId": sub.subscription_id }),
        )
    }
}

/// Publishes most one connection has under way; reading pauses at the limit.
/// Requests one connection may have under way at once (TCP and WebSocket).
pub(crate) const MAX_PIPELINE: usize = 1024;

type Pending = Pin<Box<dyn Future<Output = Frame> + Send>>;

enum Step {
    Answer(Frame),
    Read(Result<std::io::Result<usize>, tokio::time::error::Elapsed>),
    Shutdown,
}

/// Appends one `PUBLISH` frame's event; the answer to send back.
/// An `ACK` or `NACK` frame; its answer.
async fn settle(runtime: Arc<Runtime>, frame: Frame) -> Frame {
    let c = frame.correlation;
    let id = String::from_utf8_lossy(&frame.payload);
    let done = if frame.kind == FrameType::Ack {
        runtime.ack(&id).await
    } else {
        runtime.nack(&id).await
    };
    if done {
        Frame::new(FrameType::Ok, c, Vec::new())
    } else {
        Frame::error(
            c,
            "unknown_delivery",
            &format!("delivery {id:?} is unknown or already settled"),
        )
    }
}

/// Parses a publish and queues it in the log, in the order the frames
/// arrived; the returned future answers it once it is durable.
async fn start_publish(runtime: &Runtime, frame: Frame) -> Pending {
    let c = frame.correlation;
    let parsed = tcp_frame::parse_publish(&frame.payload)
        .map_err(|e| Frame::error(c, e.code(), &e.to_string()))
        .and_then(|(topic, json)| {
            CloudEvent::from_json_slice(&json)
                .map(|event| (topic, event))
                .map_err(|e| Frame::error(c, e.code(), &e.to_string()))
        });
    let (topic, event) = match parsed {
        Ok(p) => p,
        Err(answer) => return Box::pin(std::future::ready(answer)),
    };
    match runtime.ingress().submit(&topic, vec![event]).await {
        Ok(ticket) => Box::pin(async move {
            match ticket.durable().await {
                Ok(mut out) => Frame::json(FrameType::PublishAck, c, &out.remove(0)),
                Err(e) => runtime_error(c, e),
            }
        }),
        Err(e) => Box::pin(std::future::ready(runtime_error(c, e))),
    }
}

/// Writes the client's deliveries as `Push` frames until the connection or
/// the runtime closes.
async fn push(guard: StreamGuard, tx: mpsc::Sender<Frame>) {
    while !guard.is_closed() {
        for d in guard.next(100, Duration::from_secs(5)).await {
            let frame = Frame::new(
                FrameType::Push,
                0,
                tcp_frame::push_payload(&d.delivery_id, &d.event_json),
            );
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    }
}
