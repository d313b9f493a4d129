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
//! unacknowledged deliveries go out again at once. So is one whose peer
//! stopped reading: a write that makes no progress for three heartbeat
//! intervals ends the connection (a slow reader is waited for as long as
//! it keeps reading).

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
use futures::FutureExt;
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::either::Either;

use crate::limits::Refusal;
use crate::shards::Shards;
use crate::tls::{Handshake, Incoming, Peer};
use eventmesh_api::wire::SubscribeBody;
use eventmesh_api::{Api, ApiError, Caller, Session, DEFAULT_REQUEST_WAIT_MS, MAX_PIPELINE};

/// Starts serving the bound TCP port; logs where it listens (the line the
/// port is found by). Connections are served on `shards` when there are
/// any, else on the worker threads.
pub fn start(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<crate::tls::ServerTls>>,
    admission: crate::limits::Admission,
    api: Api,
    cfg: &eventmesh_core::config::Config,
    shards: Option<Shards>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let over = if tls.is_some() { " (TLS)" } else { "" };
    let incoming = Incoming::unshaken(listener, tls, admission)?;
    tracing::info!("TCP listening on {}{over}", incoming.local_addr());
    Ok(tokio::spawn(serve(
        incoming,
        api,
        cfg.server.tcp.clone(),
        shards,
    )))
}

/// Serves accepted connections until the API's shutdown token is
/// cancelled, each on the least loaded of `shards` (on the worker threads
/// without any). A TLS connection makes its handshake there, so that its
/// session lives where the connection is served.
pub async fn serve(mut incoming: Incoming, api: Api, settings: TcpConfig, shards: Option<Shards>) {
    loop {
        tokio::select! {
            accepted = incoming.next_unshaken() => match accepted {
                Some(((stream, peer, permit), handshake)) => {
                    let one = One {
                        peer,
                        api: api.clone(),
                        settings: settings.clone(),
                        admission: incoming.admission().clone(),
                        permit,
                    };
                    match (stream, &shards) {
                        (Either::Left(tcp), Some(shards)) => one.on_thread(tcp, handshake, shards),
                        (Either::Left(tcp), None) => {
                            tokio::spawn(one.shake_and_serve(tcp, handshake));
                        }
                        (Either::Right(tls), _) => {
                            let (r, w) = tokio::io::split(tls);
                            tokio::spawn(one.serve(r, w));
                        }
                    }
                }
                None => return,
            },
            _ = api.shutdown().cancelled() => return,
        }
    }
}

/// An accepted connection, to be served.
struct One {
    peer: Peer,
    api: Api,
    settings: TcpConfig,
    admission: crate::limits::Admission,
    permit: crate::limits::Permit,
}

impl One {
    /// Serves the connection on the least loaded of `shards`: its socket
    /// taken off this reactor and registered with the thread's.
    fn on_thread(self, tcp: tokio::net::TcpStream, handshake: Option<Handshake>, shards: &Shards) {
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(remote = %self.peer.addr, error = %e, "cannot hand a TCP connection to its thread");
                return;
            }
        };
        shards.spawn(move || async move {
            match tokio::net::TcpStream::from_std(tcp) {
                Ok(tcp) => self.shake_and_serve(tcp, handshake).await,
                Err(e) => {
                    tracing::debug!(remote = %self.peer.addr, error = %e, "cannot register a TCP connection on its thread");
                }
            }
        });
    }

    /// Makes the connection's TLS handshake, if it has one to make, and
    /// serves it. A plain stream splits without a lock between its
    /// halves; a TLS one shares its session.
    async fn shake_and_serve(mut self, tcp: tokio::net::TcpStream, handshake: Option<Handshake>) {
        let Some(handshake) = handshake else {
            let (r, w) = tcp.into_split();
            return self.serve(r, w).await;
        };
        if let Some((tls, peer)) = handshake.make(tcp, self.peer.addr, &self.permit).await {
            self.peer = peer;
            let (r, w) = tokio::io::split(tls);
            self.serve(r, w).await;
        }
    }

    /// Serves the connection to its end; counts and logs how it ended.
    async fn serve<R, W>(self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let remote = self.peer.addr;
        let hello_by = self.permit.accepted() + self.settings.hello_timeout;
        let ended = connection(reader, writer, self.peer, self.api, self.settings, hello_by).await;
        match ended {
            Ok(Ended::HelloTimeout) => self.admission.refused(Refusal::TimeoutHello),
            Ok(Ended::Other) => {}
            Err(e) => tracing::debug!(%remote, error = %e, "TCP connection ended with an error"),
        }
        drop(self.permit);
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
    /// Frames encoded and not yet written, in the order they were queued.
    out: BytesMut,
    /// A closing frame (`GOODBYE`, or an `ERROR` about the connection) is
    /// queued: nothing is queued after it, and the connection ends once it
    /// is written.
    closing: bool,
    /// The client's deliveries, once it subscribed: written as `PUSH`
    /// frames by the connection's own loop, so a delivery crosses no
    /// channel between the mailbox and the socket.
    stream: Option<StreamGuard>,
    /// Whether the stream was asked for (at the first `SUBSCRIBE`).
    stream_asked: bool,
    /// A write failed or made no progress in time: nothing more is written.
    broken: bool,
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
    Read(std::io::Result<usize>),
    /// The idle timer went off (it may have been pushed back since).
    Idle,
    Pushes(Vec<eventmesh_runtime::PolledDelivery>),
    Shutdown,
}

/// False when a read ended the connection: the peer closed it, or the read
/// failed.
fn read_went_on(read: std::io::Result<usize>, remote: SocketAddr) -> bool {
    match read {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(%remote, error = %e, "TCP read failed");
            false
        }
    }
}

/// How a connection ended, when that is worth counting.
enum Ended {
    HelloTimeout,
    Other,
}

/// Deliveries written in one go at most.
const PUSHES_AT_ONCE: usize = 100;

/// What the output buffer may keep between writes; a burst of large
/// frames that grew it past this gives the memory back.
const OUT_KEPT_BYTES: usize = 256 << 10;

/// One task per connection: it reads frames, starts their operations,
/// and writes their answers and the client's deliveries itself, so an
/// answer or a delivery wakes one task, not a reader and then a writer.
async fn connection<R, W>(
    mut reader: R,
    mut writer: W,
    peer: Peer,
    api: Api,
    settings: TcpConfig,
    hello_by: Instant,
) -> std::io::Result<Ended>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let remote = peer.addr;
    let shutdown = api.shutdown().clone();
    let mut conn = Conn {
        api,
        remote,
        certificate: peer.certificate,
        session: None,
        out: BytesMut::with_capacity(16 << 10),
        closing: false,
        stream: None,
        stream_asked: false,
        broken: false,
    };
    let idle = settings.heartbeat * 3;
    let mut ended = Ended::Other;
    let mut buf = BytesMut::with_capacity(8 << 10);
    // Publishes are queued in the log in the order they arrived, then wait
    // for durability concurrently (sharing group commits with every other
    // publisher); acks and nacks also run concurrently (a dispatcher takes
    // them in bursts); other frames are handled in order.
    let mut under_way: FuturesUnordered<Pending> = FuturesUnordered::new();
    // The connection is idle once nothing was read for `idle` (and, before
    // the HELLO, at `hello_by` in any case). One timer serves the whole
    // connection: a read only notes its time, and the timer, when it goes
    // off early, is set again from that.
    let mut last_read = Instant::now();
    let idle_at = |last_read: Instant, greeted: bool| {
        if greeted {
            last_read + idle
        } else {
            (last_read + idle).min(hello_by)
        }
    };
    let idle_timer = tokio::time::sleep_until(idle_at(last_read, false));
    tokio::pin!(idle_timer);
    loop {
        // Every complete frame already buffered, while the pipeline has room.
        while under_way.len() < MAX_PIPELINE && !conn.closing {
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
                        conn.closing = true;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::info!(%remote, error = %e, "bad TCP frame; closing the connection");
                    conn.queue(Frame::error(0, e.code(), &e.to_string()));
                }
            }
        }
        // Answers that are ready go out with the rest, in one write.
        while let Some(Some(answer)) = under_way.next().now_or_never() {
            conn.queue_answer(answer);
        }
        if !conn.out.is_empty() && !conn.write_out(&mut writer, idle).await {
            tracing::debug!(%remote, "TCP write failed or made no progress; closing the connection");
            break;
        }
        if conn.closing {
            break;
        }
        let room = under_way.len() < MAX_PIPELINE;
        let pushes = async {
            match &conn.stream {
                Some(guard) => guard.wait(PUSHES_AT_ONCE).await,
                None => std::future::pending().await,
            }
        };
        let step = tokio::select! {
            Some(answer) = under_way.next(), if !under_way.is_empty() => Step::Answer(answer),
            got = pushes => Step::Pushes(got),
            r = reader.read_buf(&mut buf), if room => Step::Read(r),
            () = &mut idle_timer, if room => Step::Idle,
            _ = shutdown.cancelled() => Step::Shutdown,
        };
        match step {
            Step::Answer(answer) => conn.queue_answer(answer),
            Step::Pushes(got) => {
                if got.is_empty() && conn.stream.as_ref().is_some_and(StreamGuard::is_closed) {
                    conn.stream = None;
                }
                for d in got {
                    tcp_frame::encode_push(&mut conn.out, &d.delivery_id, &d.event_json);
                }
            }
            Step::Shutdown => conn.queue(Frame::new(FrameType::Goodbye, 0, Vec::new())),
            Step::Read(r) => {
                if !read_went_on(r, remote) {
                    break;
                }
                last_read = Instant::now();
            }
            Step::Idle => {
                let now = Instant::now();
                let due = idle_at(last_read, conn.session.is_some());
                if now < due {
                    idle_timer.as_mut().reset(due);
                    continue;
                }
                // Bytes may have come while this side was busy (writing,
                // or with a full pipeline): then it is not idle.
                let waiting = (conn.session.is_some() || now < hello_by)
                    .then(|| reader.read_buf(&mut buf).now_or_never())
                    .flatten();
                if let Some(r) = waiting {
                    if !read_went_on(r, remote) {
                        break;
                    }
                    last_read = now;
                    idle_timer
                        .as_mut()
                        .reset(idle_at(now, conn.session.is_some()));
                    continue;
                }
                if conn.session.is_none() && now >= hello_by {
                    tracing::debug!(%remote, "no HELLO in time; closing the connection");
                    conn.queue(Frame::error(
                        0,
                        "hello_timeout",
                        "no complete HELLO within the time allowed after connecting",
                    ));
                    ended = Ended::HelloTimeout;
                } else {
                    conn.queue(Frame::error(
                        0,
                        "idle_timeout",
                        "no frame for three heartbeat intervals",
                    ));
                }
            }
        }
    }
    // The client's deliveries go back (the stream guard releases what it
    // had not acknowledged) before the rest is answered.
    conn.stream = None;
    if !conn.closing && !conn.broken {
        // Frames already under way finish and are answered, each write
        // given a moment only: a peer that stopped reading does not hold
        // the connection.
        while let Some(answer) = under_way.next().await {
            conn.queue_answer(answer);
            if !conn.out.is_empty() && !conn.write_out(&mut writer, WRITER_GRACE).await {
                break;
            }
        }
    }
    if conn.closing && !conn.broken {
        let _ = tokio::time::timeout(WRITER_GRACE, writer.shutdown()).await;
    }
    Ok(ended)
}

impl Conn {
    /// Queues a frame to be written; a closing frame (`GOODBYE`, or an
    /// `ERROR` about the connection rather than a frame) is the last one.
    fn queue(&mut self, frame: Frame) {
        if self.closing {
            return;
        }
        self.closing = frame.kind == FrameType::Goodbye
            || (frame.kind == FrameType::Error && frame.correlation == 0);
        frame.encode(&mut self.out);
    }

    fn queue_answer(&mut self, answer: Option<Frame>) {
        if let Some(answer) = answer {
            self.queue(answer);
        }
    }

    /// Writes what is queued, then flushes (a TLS session may hold the
    /// end of it). False, and the connection is broken, if a write fails
    /// or a single write makes no progress `within`: a slow reader is
    /// waited for as long as it keeps reading.
    async fn write_out<W: AsyncWrite + Unpin>(&mut self, writer: &mut W, within: Duration) -> bool {
        let mut at = 0;
        while at < self.out.len() {
            match tokio::time::timeout(within, writer.write(&self.out[at..])).await {
                Ok(Ok(n)) if n > 0 => at += n,
                _ => {
                    self.broken = true;
                    break;
                }
            }
        }
        if !self.broken
            && !matches!(
                tokio::time::timeout(within, writer.flush()).await,
                Ok(Ok(()))
            )
        {
            self.broken = true;
        }
        if self.out.capacity() > OUT_KEPT_BYTES {
            self.out = BytesMut::with_capacity(16 << 10);
        } else {
            self.out.clear();
        }
        !self.broken
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
            self.queue(Frame::error(
                0,
                "hello_required",
                "the first frame must be HELLO",
            ));
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
                self.queue(Frame::new(FrameType::Goodbye, c, Vec::new()));
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
        self.queue_answer(answer);
        true
    }

    /// Refuses the hello with `code` and ends the connection.
    fn refuse(&mut self, c: u64, e: &ApiError) -> bool {
        self.queue(error_frame(c, e));
        false
    }

    async fn hello(&mut self, c: u64, payload: &[u8], settings: &TcpConfig) -> bool {
        if self.session.is_some() {
            self.queue(Frame::error(
                c,
                "unexpected_frame",
                "HELLO was already received",
            ));
            return true;
        }
        let hello: Hello = match serde_json::from_slice(payload) {
            Ok(h) => h,
            Err(e) => {
                let e = ApiError::bad_request("bad_payload", format!("HELLO: {e}"));
                return self.refuse(c, &e);
            }
        };
        if let Some(expected) = &settings.token {
            let given = hello.token.as_deref().unwrap_or_default();
            if !bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
                let e = ApiError::unauthorized("missing or wrong connection token");
                return self.refuse(c, &e);
            }
        }
        if hello.client_id.is_empty() {
            let e = ApiError::bad_request("bad_payload", "HELLO needs a clientId");
            return self.refuse(c, &e);
        }
        let credential = hello.credential.or(hello.token);
        let mut caller = Caller::new(Transport::Tcp, credential, Some(self.remote));
        caller.certificate = self.certificate.clone();
        match self.api.open_session(&caller, &hello.client_id).await {
            Ok(session) => self.session = Some(session),
            Err(e) => return self.refuse(c, &e),
        }
        let ms = settings.heartbeat.as_millis() as u64;
        self.queue(Frame::json(
            FrameType::HelloOk,
            c,
            &json!({ "heartbeatMs": ms }),
        ));
        true
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
        if !self.stream_asked {
            match self.api.stream_of(self.client()) {
                Ok(guard) => {
                    self.stream = Some(guard);
                    self.stream_asked = true;
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

/// How long a closing connection's writer may take to write what is queued.
const WRITER_GRACE: Duration = Duration::from_secs(1);
