//! The TCP port: the length-prefixed frame protocol of
//! `eventmesh_core::tcp_frame` (documented byte by byte in
//! docs/tcp-protocol.md), decoded into operations of [`eventmesh_api::Api`].
//!
//! A connection starts with `HELLO`, which opens a session: the connection
//! token `eventmesh.server.tcp.token` when one is configured, then the
//! security gate authenticates the hello's credential (a static token or a
//! JWT) once and checks that the client id belongs to the caller. Every
//! later `PUBLISH`, `SUBSCRIBE`, `UNSUBSCRIBE`, `ACK`, `NACK`, `REQUEST`
//! and `REPLY` is the same operation as over HTTP, checked by the ACL and
//! quotas and audited. Deliveries arrive as `PUSH` frames read from the client's
//! mailbox, like every other transport. A malformed, oversized or unknown
//! frame is answered with an `ERROR` frame and closes that connection only.
//! A connection that has not completed its `HELLO` by
//! `eventmesh.server.tcp.hello.timeout.ms` after its accept is closed (a
//! deadline: bytes trickling in do not extend it). After the `HELLO`, a
//! connection silent for three heartbeat intervals is closed; its
//! unacknowledged deliveries go out again at once.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use eventmesh_core::config::TcpConfig;
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Settle, StreamGuard};
use eventmesh_security::{Identity, Transport};
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::either::Either;

use crate::limits::Refusal;
use crate::tls::{Incoming, Peer};
use eventmesh_api::wire::SubscribeBody;
use eventmesh_api::{Api, ApiError, Caller, Session, DEFAULT_REQUEST_WAIT_MS, MAX_PIPELINE};

/// Starts serving the bound TCP port; logs where it listens (the line the
/// port is found by).
pub fn start(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<crate::tls::ServerTls>>,
    admission: crate::limits::Admission,
    api: Api,
    cfg: &eventmesh_core::config::Config,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let over = if tls.is_some() { " (TLS)" } else { "" };
    let incoming = Incoming::new(listener, tls, admission)?;
    tracing::info!("TCP listening on {}{over}", incoming.local_addr());
    Ok(tokio::spawn(serve(incoming, api, cfg.server.tcp.clone())))
}

/// Serves accepted connections (plain or TLS) until the API's shutdown
/// token is cancelled.
pub async fn serve(mut incoming: Incoming, api: Api, settings: TcpConfig) {
    loop {
        tokio::select! {
            accepted = incoming.next() => match accepted {
                Some((stream, peer, permit)) => {
                    let (api, s) = (api.clone(), settings.clone());
                    let admission = incoming.admission().clone();
                    tokio::spawn(async move {
                        let remote = peer.addr;
                        let hello_by = permit.accepted() + s.hello_timeout;
                        // A plain stream splits without a lock between its
                        // halves; a TLS one shares its session.
                        let ended = match stream {
                            Either::Left(tcp) => {
                                let (r, w) = tcp.into_split();
                                connection(r, w, peer, api, s, hello_by).await
                            }
                            Either::Right(tls) => {
                                let (r, w) = tokio::io::split(tls);
                                connection(r, w, peer, api, s, hello_by).await
                            }
                        };
                        if matches!(ended, Ok(Ended::HelloTimeout)) {
                            admission.refused(Refusal::TimeoutHello);
                        }
                        drop(permit);
                        if let Err(e) = ended {
                            tracing::debug!(%remote, error = %e, "TCP connection ended with an error");
                        }
                    });
                }
                None => return,
            },
            _ = api.shutdown().cancelled() => return,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Hello {
    client_id: String,
    /// The connection token, and the gate credential unless `credential`
    /// is given.
    token: Option<String>,
    /// The gate credential (static token or JWT).
    credential: Option<String>,
}

#[derive(Deserialize, Default)]
struct Unsubscribe {
    topic: Option<String>,
}

fn error_frame(correlation: u64, e: &ApiError) -> Frame {
    Frame::error(correlation, e.code, &e.message)
}

struct Conn {
    api: Api,
    remote: SocketAddr,
    /// Who the connection's verified client certificate names.
    certificate: Option<Arc<Identity>>,
    session: Option<Session>,
    tx: mpsc::Sender<Frame>,
    /// Hands the client's stream to the writing task, which then writes
    /// its deliveries as `PUSH` frames (`None` once handed).
    stream: Option<oneshot::Sender<StreamGuard>>,
}

/// A frame under way; its answer, if it gets one (a quiet frame that
/// succeeded gets none).
type Pending = Pin<Box<dyn Future<Output = Option<Frame>> + Send>>;

/// The answer to a frame that succeeded: `OK`, unless the client asked for
/// none (a correlation with [`tcp_frame::QUIET`] set).
fn done(c: u64) -> Option<Frame> {
    (c & tcp_frame::QUIET == 0).then(|| Frame::new(FrameType::Ok, c, Vec::new()))
}

enum Step {
    Answer(Option<Frame>),
    Read(Result<std::io::Result<usize>, tokio::time::error::Elapsed>),
    Shutdown,
}

/// How a connection ended, when that is worth counting.
enum Ended {
    HelloTimeout,
    Other,
}

async fn connection<R, W>(
    mut reader: R,
    writer: W,
    peer: Peer,
    api: Api,
    settings: TcpConfig,
    hello_by: Instant,
) -> std::io::Result<Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let remote = peer.addr;
    let (tx, rx) = mpsc::channel::<Frame>(1024);
    let (stream_tx, stream_rx) = oneshot::channel::<StreamGuard>();
    let writing = tokio::spawn(write_frames(writer, rx, stream_rx));
    let shutdown = api.shutdown().clone();
    let mut conn = Conn {
        api,
        remote,
        certificate: peer.certificate,
        session: None,
        tx: tx.clone(),
        stream: Some(stream_tx),
    };
    let idle = settings.heartbeat * 3;
    let mut ended = Ended::Other;
    let mut buf = BytesMut::with_capacity(8 << 10);
    // Publishes are queued in the log in the order they arrived, then wait
    // for durability concurrently (sharing group commits with every other
    // publisher); acks and nacks also run concurrently (a dispatcher takes
    // them in bursts); other frames are handled in order.
    let mut under_way: FuturesUnordered<Pending> = FuturesUnordered::new();
    'conn: loop {
        // Every complete frame already buffered, while the pipeline has room.
        while under_way.len() < MAX_PIPELINE {
            match tcp_frame::decode(&mut buf, settings.max_frame_bytes) {
                Ok(Some(frame)) if conn.session.is_some() && frame.kind == FrameType::Publish => {
                    let started = conn.start_publish(frame).await;
                    under_way.push(started);
                }
                Ok(Some(frame))
                    if conn.session.is_some()
                        && matches!(frame.kind, FrameType::Ack | FrameType::Nack) =>
                {
                    under_way.push(conn.settle(frame));
                }
                Ok(Some(frame)) if conn.session.is_some() && frame.kind == FrameType::ReplyAck => {
                    under_way.push(conn.reply_ack(frame));
                }
                Ok(Some(frame)) if conn.session.is_some() && frame.kind == FrameType::Request => {
                    under_way.push(conn.start_request(frame));
                }
                Ok(Some(frame)) => {
                    if !conn.handle(frame, &settings).await {
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
        // Before the HELLO, the read may not go past the deadline set at
        // the accept, however often bytes arrive.
        let read_for = match conn.session {
            Some(_) => idle,
            None => hello_by.saturating_duration_since(Instant::now()).min(idle),
        };
        let step = tokio::select! {
            Some(answer) = under_way.next(), if !under_way.is_empty() => Step::Answer(answer),
            r = tokio::time::timeout(read_for, reader.read_buf(&mut buf)), if room => Step::Read(r),
            _ = shutdown.cancelled() => Step::Shutdown,
        };
        match step {
            Step::Answer(None) => {}
            Step::Answer(Some(answer)) => {
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
            Step::Read(Err(_)) if conn.session.is_none() && Instant::now() >= hello_by => {
                tracing::debug!(%remote, "no HELLO in time; closing the connection");
                let _ = tx
                    .send(Frame::error(
                        0,
                        "hello_timeout",
                        "no complete HELLO within the time allowed after connecting",
                    ))
                    .await;
                ended = Ended::HelloTimeout;
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
        if let Some(answer) = answer {
            if tx.send(answer).await.is_err() {
                break;
            }
        }
    }
    drop(conn);
    drop(tx);
    // The writer ends once it wrote what is queued; a peer that stopped
    // reading would hold it (and the stream guard, with the deliveries the
    // client had not acknowledged) forever, so it gets a moment only.
    let mut writing = writing;
    if tokio::time::timeout(WRITER_GRACE, &mut writing)
        .await
        .is_err()
    {
        writing.abort();
    }
    Ok(ended)
}

impl Conn {
    async fn send(&self, frame: Frame) -> bool {
        self.tx.send(frame).await.is_ok()
    }

    fn caller(&self) -> &Arc<Caller> {
        &self
            .session
            .as_ref()
            .expect("frames after HELLO only")
            .caller
    }

    fn client(&self) -> &str {
        self.session.as_ref().map_or("", |s| s.client.as_str())
    }

    /// Handles one frame in order; false ends the connection.
    async fn handle(&mut self, frame: Frame, settings: &TcpConfig) -> bool {
        let c = frame.correlation;
        if self.session.is_none() && frame.kind != FrameType::Hello {
            let _ = self
                .send(Frame::error(
                    0,
                    "hello_required",
                    "the first frame must be HELLO",
                ))
                .await;
            return false;
        }
        let answer = match frame.kind {
            FrameType::Hello => return self.hello(c, &frame.payload, settings).await,
            FrameType::Publish => self.start_publish(frame).await.await,
            FrameType::Ack | FrameType::Nack => self.settle(frame).await,
            FrameType::Subscribe => Some(self.subscribe(c, &frame.payload).await),
            FrameType::Unsubscribe => {
                let req: Unsubscribe = serde_json::from_slice(&frame.payload).unwrap_or_default();
                match self
                    .api
                    .unsubscribe(
                        self.caller(),
                        self.client(),
                        req.topic.as_deref(),
                        &frame.payload,
                    )
                    .await
                {
                    Ok(removed) => Some(Frame::json(
                        FrameType::Ok,
                        c,
                        &json!({ "removed": removed }),
                    )),
                    Err(e) => Some(error_frame(c, &e)),
                }
            }
            FrameType::Reply => {
                let replied = match CloudEvent::from_json_slice(&frame.payload) {
                    Ok(event) => self.api.reply(self.caller(), event, &frame.payload).await,
                    Err(e) => Err(e.into()),
                };
                match replied {
                    Ok(()) => done(c),
                    Err(e) => Some(error_frame(c, &e)),
                }
            }
            FrameType::ReplyAck => self.reply_ack(frame).await,
            FrameType::Heartbeat => Some(Frame::new(FrameType::Heartbeat, c, Vec::new())),
            FrameType::Goodbye => {
                let _ = self
                    .send(Frame::new(FrameType::Goodbye, c, Vec::new()))
                    .await;
                return false;
            }
            // A client's own error report needs no answer.
            FrameType::Error => return true,
            other => Some(Frame::error(
                c,
                "unexpected_frame",
                &format!("{} frames are sent by the server, not to it", other.name()),
            )),
        };
        match answer {
            Some(answer) => self.send(answer).await,
            None => true,
        }
    }

    /// Refuses the hello with `code` and ends the connection.
    async fn refuse(&self, c: u64, e: &ApiError) -> bool {
        let _ = self.send(error_frame(c, e)).await;
        false
    }

    async fn hello(&mut self, c: u64, payload: &[u8], settings: &TcpConfig) -> bool {
        if self.session.is_some() {
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
                let e = ApiError::bad_request("bad_payload", format!("HELLO: {e}"));
                return self.refuse(c, &e).await;
            }
        };
        if let Some(expected) = &settings.token {
            let given = hello.token.as_deref().unwrap_or_default();
            if !bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
                let e = ApiError::unauthorized("missing or wrong connection token");
                return self.refuse(c, &e).await;
            }
        }
        if hello.client_id.is_empty() {
            let e = ApiError::bad_request("bad_payload", "HELLO needs a clientId");
            return self.refuse(c, &e).await;
        }
        let credential = hello.credential.or(hello.token);
        let mut caller = Caller::new(Transport::Tcp, credential, Some(self.remote));
        caller.certificate = self.certificate.clone();
        match self.api.open_session(&caller, &hello.client_id).await {
            Ok(session) => self.session = Some(session),
            Err(e) => return self.refuse(c, &e).await,
        }
        let ms = settings.heartbeat.as_millis() as u64;
        self.send(Frame::json(
            FrameType::HelloOk,
            c,
            &json!({ "heartbeatMs": ms }),
        ))
        .await
    }

    async fn subscribe(&mut self, c: u64, payload: &[u8]) -> Frame {
        let body: SubscribeBody = match serde_json::from_slice(payload) {
            Ok(b) => b,
            Err(e) => return Frame::error(c, "invalid_request", &format!("SUBSCRIBE: {e}")),
        };
        if body.url.is_some() || body.client_id.is_some() {
            return Frame::error(
                c,
                "invalid_request",
                "SUBSCRIBE: a TCP session subscribes its own client (HELLO), without a url",
            );
        }
        let req = match body.into_request(Some(self.client())) {
            Ok(req) => req,
            Err(e) => return error_frame(c, &e),
        };
        let sub = match self.api.subscribe(self.caller(), req, payload).await {
            Ok((sub, _)) => sub,
            Err(e) => return error_frame(c, &e),
        };
        if self.stream.is_some() {
            match self.api.stream_of(self.client()) {
                Ok(guard) => {
                    if let Some(to_writer) = self.stream.take() {
                        // The writer is gone only with the connection.
                        let _ = to_writer.send(guard);
                    }
                }
                Err(e) => return error_frame(c, &e),
            }
        }
        Frame::json(
            FrameType::SubscribeOk,
            c,
            &json!({ "subscriptionId": sub.subscription_id }),
        )
    }

    /// An `ACK` or `NACK` frame; its answer.
    fn settle(&self, frame: Frame) -> Pending {
        let (api, caller) = (self.api.clone(), self.caller().clone());
        Box::pin(async move {
            let c = frame.correlation;
            let id = String::from_utf8_lossy(&frame.payload);
            let how = if frame.kind == FrameType::Ack {
                Settle::Ack
            } else {
                Settle::Nack
            };
            match api.settle(&caller, &id, how, &frame.payload).await {
                Ok(()) => done(c),
                Err(e) => Some(error_frame(c, &e)),
            }
        })
    }

    /// A `REPLY_ACK` frame: the reply, then, only once the reply was taken,
    /// the ack of the request's delivery; its answer. A refused reply leaves
    /// the delivery held (the client may still ack or nack it); an
    /// `ERROR` about the delivery (`unknown_delivery`, `fenced_delivery`)
    /// means the reply went through and the ack did not.
    fn reply_ack(&self, frame: Frame) -> Pending {
        let (api, caller) = (self.api.clone(), self.caller().clone());
        Box::pin(async move {
            let c = frame.correlation;
            let replied = async {
                let (id, json) = tcp_frame::parse_push(&frame.payload)
                    .map_err(|e| ApiError::bad_request(e.code(), e.to_string()))?;
                let event = CloudEvent::from_json_slice(&json)?;
                api.reply(&caller, event, &frame.payload).await?;
                api.settle(&caller, &id, Settle::Ack, &frame.payload).await
            };
            match replied.await {
                Ok(()) => done(c),
                Err(e) => Some(error_frame(c, &e)),
            }
        })
    }

    /// Starts a request-reply request: its `RESPONSE` (or `ERROR`) comes
    /// once the reply does, while the connection goes on with other frames.
    fn start_request(&self, frame: Frame) -> Pending {
        let c = frame.correlation;
        let (api, caller) = (self.api.clone(), self.caller().clone());
        Box::pin(async move {
            let asked = async {
                let (wait_ms, topic, json) = tcp_frame::parse_request(&frame.payload)
                    .map_err(|e| ApiError::bad_request(e.code(), e.to_string()))?;
                let event = CloudEvent::from_json_slice(&json)?;
                let wait = match wait_ms {
                    0 => DEFAULT_REQUEST_WAIT_MS,
                    ms => u64::from(ms),
                };
                api.request(
                    &caller,
                    Some(topic),
                    event,
                    Duration::from_millis(wait),
                    &frame.payload,
                )
                .await
            };
            Some(match asked.await {
                Ok(reply) => Frame::new(FrameType::Response, c, reply.to_json()),
                Err(e) => error_frame(c, &e),
            })
        })
    }

    /// Parses a publish and queues it in the log, in the order the frames
    /// arrived; the returned future answers it once it is durable.
    async fn start_publish(&self, frame: Frame) -> Pending {
        let c = frame.correlation;
        let queued = async {
            let (topic, json) = tcp_frame::parse_publish(&frame.payload)
                .map_err(|e| ApiError::bad_request(e.code(), e.to_string()))?;
            let event = CloudEvent::from_json_slice(&json)?;
            self.api
                .submit(self.caller(), Some(topic), vec![event], &frame.payload)
                .await
        };
        match queued.await {
            Ok(queued) => Box::pin(async move {
                Some(match queued.durable().await {
                    // One event in, one answer out.
                    Ok(out) => match out.first() {
                        Some(placed) => Frame::new(FrameType::PublishAck, c, placed.to_json()),
                        None => Frame::error(c, "internal_error", "the publish was not placed"),
                    },
                    Err(e) => error_frame(c, &e),
                })
            }),
            Err(e) => Box::pin(std::future::ready(Some(error_frame(c, &e)))),
        }
    }
}

/// The connection's one writer: replies and, once the client subscribed,
/// its deliveries as `PUSH` frames, interleaved frame by frame. Pushes are
/// read from the client's mailbox here, not by a task of their own, so a
/// delivery crosses no channel between the mailbox and the socket. The
/// buffer is flushed whenever nothing more is ready. Ends when every sender
/// of replies is gone, or after a closing frame; the stream guard goes with
/// it, which releases what the client had not acknowledged.
async fn write_frames<W>(
    writer: W,
    mut rx: mpsc::Receiver<Frame>,
    mut stream_rx: oneshot::Receiver<StreamGuard>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut w = BufWriter::new(writer);
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut stream: Option<StreamGuard> = None;
    let mut waiting_for_stream = true;
    loop {
        let pushes = async {
            match &stream {
                Some(guard) => guard.next(100, Duration::from_secs(5)).await,
                None => std::future::pending().await,
            }
        };
        // Replies first: an answer the client waits on is not held back by
        // a burst of deliveries.
        let ready = tokio::select! {
            biased;
            frame = rx.recv() => match frame {
                Some(frame) => Ready::Reply(frame),
                None => break,
            },
            got = pushes => Ready::Pushes(got),
            guard = &mut stream_rx, if waiting_for_stream => {
                waiting_for_stream = false;
                stream = guard.ok();
                continue;
            }
        };
        buf.clear();
        let closing = match ready {
            Ready::Reply(frame) => {
                let closing = frame.kind == FrameType::Goodbye
                    || (frame.kind == FrameType::Error && frame.correlation == 0);
                frame.encode(&mut buf);
                closing
            }
            Ready::Pushes(got) => {
                if got.is_empty() && stream.as_ref().is_some_and(StreamGuard::is_closed) {
                    stream = None;
                }
                for d in got {
                    Frame::new(
                        FrameType::Push,
                        0,
                        tcp_frame::push_payload(&d.delivery_id, &d.event_json),
                    )
                    .encode(&mut buf);
                }
                false
            }
        };
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
}

/// How long a closing connection's writer may take to write what is queued.
const WRITER_GRACE: Duration = Duration::from_secs(1);

enum Ready {
    Reply(Frame),
    Pushes(Vec<eventmesh_runtime::PolledDelivery>),
}
