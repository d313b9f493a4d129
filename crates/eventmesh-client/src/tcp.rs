//! The legacy TCP transport: length-prefixed binary frames
//! ([`eventmesh_core::tcp_frame`]) on the TCP port (default 10000).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use eventmesh_core::tcp_frame::{self, Frame, FrameType};

/// Largest frame accepted from the server. Larger than the server's own
/// inbound limit: a pushed event's JSON form can be several times its
/// published size (binary data as base64, control characters escaped).
const MAX_SERVER_FRAME: usize = 64 << 20;
use futures::Stream;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::client::EventMeshClient;
use crate::error::{Error, Result};
use crate::types::{AsEvent, Delivery, Published, SubscribeOptions};

/// Our correlation ids start high so that they do not meet the server's own
/// (for its heartbeats), which count from small numbers.
const FIRST_CORRELATION: u64 = 1 << 40;

struct Shared {
    /// Frames to write; `None` shuts the socket down.
    out: mpsc::UnboundedSender<Option<Bytes>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Frame>>>>,
    next: AtomicU64,
    timeout: Duration,
}

impl Shared {
    fn send(&self, frame: &Frame) -> Result<()> {
        self.out
            .send(Some(frame.to_bytes()))
            .map_err(|_| Error::Protocol("the TCP connection is closed".into()))
    }

    /// Sends a request frame and waits for the frame with its correlation.
    /// An `Error` answer is [`Error::Api`] (status 0).
    async fn call(&self, kind: FrameType, payload: Bytes) -> Result<Frame> {
        self.call_within(kind, payload, self.timeout).await
    }

    /// [`Shared::call`], waiting up to `within` for the answer.
    async fn call_within(
        &self,
        kind: FrameType,
        payload: Bytes,
        within: Duration,
    ) -> Result<Frame> {
        let correlation = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(correlation, tx);
        }
        if let Err(e) = self.send(&Frame::new(kind, correlation, payload)) {
            self.forget(correlation);
            return Err(e);
        }
        match tokio::time::timeout(within, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Protocol("the TCP connection was closed".into())),
            Err(_) => {
                self.forget(correlation);
                Err(Error::Timeout)
            }
        }
    }

    /// Sends a frame that is answered only if it fails (its correlation
    /// has [`tcp_frame::QUIET`] set); the `ERROR` of a failure comes out of
    /// [`TcpClient::next`].
    fn send_quiet(&self, kind: FrameType, payload: Bytes) -> Result<()> {
        let correlation = self.next.fetch_add(1, Ordering::Relaxed) | tcp_frame::QUIET;
        self.send(&Frame::new(kind, correlation, payload))
    }

    fn forget(&self, correlation: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&correlation);
        }
    }

    fn take(&self, correlation: u64) -> Option<oneshot::Sender<Result<Frame>>> {
        self.pending.lock().ok()?.remove(&correlation)
    }

    fn fail_all(&self, why: &str) {
        let waiting: Vec<_> = self
            .pending
            .lock()
            .map(|mut p| p.drain().collect())
            .unwrap_or_default();
        for (_, w) in waiting {
            let _ = w.send(Err(Error::Protocol(why.to_string())));
        }
    }
}

/// `{"error","message"}` of an `Error` frame as [`Error::Api`] (status 0:
/// it did not come as an HTTP answer).
fn frame_error(payload: &[u8]) -> Error {
    match Error::from_api_body(0, payload) {
        Error::Api { code, message, .. } if code == "http_0" => Error::Api {
            status: 0,
            code: "error".into(),
            message,
        },
        e => e,
    }
}

fn expect(frame: Frame, kind: FrameType) -> Result<Frame> {
    if frame.kind == kind {
        Ok(frame)
    } else {
        Err(Error::Protocol(format!(
            "expected a {} frame, got {}",
            kind.name(),
            frame.kind.name()
        )))
    }
}

fn json_payload(frame: &Frame) -> Result<Value> {
    if frame.payload.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&frame.payload)
        .map_err(|e| Error::Protocol(format!("{} payload is not JSON: {e}", frame.kind.name())))
}

/// A session on the legacy TCP port. [`TcpClient::connect`] (or
/// [`EventMeshClient::tcp`]) says hello; then deliveries of the
/// connection's subscriptions come out of [`TcpClient::next`] (or the
/// [`Stream`] impl), and the other methods are requests answered on the
/// same connection. A background task sends heartbeats at the interval
/// the server asks for (`heartbeatMs` in its hello answer), and at least
/// three times per idle timeout.
///
/// ```no_run
/// use eventmesh_client::{json_event, EventMeshClient, SubscribeOptions};
///
/// # async fn demo() -> eventmesh_client::Result<()> {
/// let client = EventMeshClient::new("http://127.0.0.1:10105")?.with_tcp("127.0.0.1:10000");
/// let mut tcp = client.tcp("legacy-app-1").await?;
/// tcp.subscribe(SubscribeOptions::new("legacy-app-1", "orders")).await?;
/// tcp.publish("orders", &json_event("order.created", "/shop", serde_json::json!({"n": 1}))).await?;
/// if let Some(d) = tcp.next().await {
///     let d = d?;
///     println!("{}", d.event);
///     tcp.ack(&d.delivery_id).await?;
/// }
/// tcp.goodbye().await?;
/// # Ok(()) }
/// ```
pub struct TcpClient {
    shared: Arc<Shared>,
    deliveries: mpsc::UnboundedReceiver<Result<Delivery>>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
    keepalive: JoinHandle<()>,
    heartbeat: Option<Duration>,
    server: String,
}

impl std::fmt::Debug for TcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpClient")
            .field("server", &self.server)
            .field("heartbeat", &self.heartbeat)
            .finish()
    }
}

/// A connection to the TCP port, plain or TLS.
trait Link: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Link for S {}

impl EventMeshClient {
    /// Connects to the TCP transport at [`EventMeshClient::tcp_addr`] and
    /// says hello as `client_id` (with the client's token, if any).
    pub async fn tcp(&self, client_id: &str) -> Result<TcpClient> {
        TcpClient::connect_with(
            &self.tcp_addr,
            self.tls.clone(),
            client_id,
            self.token.as_deref(),
            self.connect_timeout,
            self.request_timeout,
            self.idle_timeout,
        )
        .await
    }
}

impl TcpClient {
    /// Connects to `addr` (`host:port`) with default timeouts and says hello.
    pub async fn connect(addr: &str, client_id: &str, token: Option<&str>) -> Result<TcpClient> {
        Self::connect_with(
            addr,
            None,
            client_id,
            token,
            Duration::from_secs(5),
            Duration::from_secs(30),
            Duration::from_secs(90),
        )
        .await
    }

    async fn connect_with(
        addr: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
        client_id: &str,
        token: Option<&str>,
        connect_timeout: Duration,
        request_timeout: Duration,
        idle_timeout: Duration,
    ) -> Result<TcpClient> {
        let server = addr.to_string();
        let (secure, addr) = crate::tls::tcp_target(addr);
        let connect = async {
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| Error::connect_io(&server, e))?;
            let _ = stream.set_nodelay(true);
            let stream: Box<dyn Link> = if secure {
                let config = match tls {
                    Some(c) => c,
                    None => crate::TlsFiles::default().client_config()?,
                };
                Box::new(crate::tls::handshake(config, addr, stream).await?)
            } else {
                Box::new(stream)
            };
            Ok::<_, Error>(stream)
        };
        let stream = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| Error::Unreachable {
                server: server.clone(),
                cause: "connect timed out".into(),
            })??;
        let (mut rd, mut wr) = tokio::io::split(stream);

        let (out, mut out_rx) = mpsc::unbounded_channel::<Option<Bytes>>();
        let writer = tokio::spawn(async move {
            while let Some(Some(b)) = out_rx.recv().await {
                if let Err(e) = wr.write_all(&b).await {
                    tracing::debug!("TCP write failed: {e}");
                    return;
                }
            }
            let _ = wr.shutdown().await;
        });
        let shared = Arc::new(Shared {
            out,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(FIRST_CORRELATION),
            timeout: request_timeout,
        });
        // Unbounded on purpose: the reader must never wait for the
        // application to take a delivery, or the answer to an ack the
        // application is awaiting would sit unread behind it. The server's
        // in-flight caps bound what can pile up here.
        let (tx, deliveries) = mpsc::unbounded_channel();
        let reader = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::with_capacity(16 * 1024);
                let end: Option<String> = 'conn: loop {
                    loop {
                        match tcp_frame::decode(&mut buf, MAX_SERVER_FRAME) {
                            Ok(Some(f)) => {
                                if !handle(&shared, &tx, f) {
                                    break 'conn None;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => break 'conn Some(format!("bad frame from the server: {e}")),
                        }
                    }
                    match tokio::time::timeout(idle_timeout, rd.read_buf(&mut buf)).await {
                        Ok(Ok(0)) => break None,
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            break Some(match crate::error::tls_failure(&e) {
                                Some(tls) => tls,
                                None => format!("TCP connection broke: {e}"),
                            })
                        }
                        Err(_) => {
                            break Some(format!("the server was silent for {idle_timeout:?}"))
                        }
                    }
                };
                let why = end
                    .clone()
                    .unwrap_or_else(|| "the TCP connection was closed".into());
                shared.fail_all(&why);
                if let Some(msg) = end {
                    let _ = tx.send(Err(Error::Protocol(msg)));
                }
            })
        };

        let mut hello = json!({ "clientId": client_id });
        if let Some(t) = token {
            hello["token"] = Value::String(t.to_string());
        }
        let answer = shared
            .call(FrameType::Hello, Bytes::from(hello.to_string()))
            .await;
        let answer = match answer.and_then(|f| expect(f, FrameType::HelloOk)) {
            Ok(a) => a,
            Err(e) => {
                reader.abort();
                writer.abort();
                return Err(match e {
                    // The server refused the handshake (with TLS 1.3 that
                    // is only seen once the hello went out).
                    Error::Protocol(m) if m.starts_with("TLS: ") => {
                        Error::Unreachable { server, cause: m }
                    }
                    e => e,
                });
            }
        };
        let heartbeat = json_payload(&answer)
            .ok()
            .and_then(|v| v.get("heartbeatMs").and_then(Value::as_u64))
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis);
        // The server closes a connection silent for three of its heartbeat
        // intervals, and this side one silent for `idle_timeout`: a
        // heartbeat (echoed by the server) keeps both content.
        let every = heartbeat
            .unwrap_or(idle_timeout / 3)
            .min(idle_timeout / 3)
            .max(Duration::from_millis(10));
        let keepalive = {
            let weak = Arc::downgrade(&shared);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    let Some(s) = weak.upgrade() else { return };
                    if let Err(e) = s.call(FrameType::Heartbeat, Bytes::new()).await {
                        tracing::debug!("TCP heartbeat failed: {e}");
                        if !matches!(e, Error::Timeout) {
                            return;
                        }
                    }
                }
            })
        };
        Ok(TcpClient {
            shared,
            deliveries,
            reader,
            writer,
            keepalive,
            heartbeat,
            server,
        })
    }

    /// The heartbeat interval the server asked for in its hello answer.
    pub fn heartbeat_interval(&self) -> Option<Duration> {
        self.heartbeat
    }

    /// The next delivery; `None` once the connection is closed. A broken
    /// connection yields one error first.
    pub async fn next(&mut self) -> Option<Result<Delivery>> {
        self.deliveries.recv().await
    }

    /// Publishes an event; answers once it is durable.
    pub async fn publish<E: AsEvent + ?Sized>(&self, topic: &str, event: &E) -> Result<Published> {
        let payload = tcp_frame::publish_payload(topic, &event.event_bytes()?)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let f = expect(
            self.shared.call(FrameType::Publish, payload).await?,
            FrameType::PublishAck,
        )?;
        serde_json::from_value(json_payload(&f)?)
            .map_err(|e| Error::Protocol(format!("unexpected PUBLISH_ACK payload: {e}")))
    }

    /// Subscribes this connection's client to a topic; returns the
    /// subscription id. (`client_id` and `url` of `opts` are not sent: the
    /// hello's client id applies and deliveries come on this connection.)
    pub async fn subscribe(&self, opts: SubscribeOptions) -> Result<String> {
        let mut body = json!({ "topic": opts.topic });
        if let Some(g) = opts.group {
            body["group"] = Value::String(g);
        }
        if let Some(m) = opts.mode {
            body["mode"] = Value::String(m.as_str().into());
        }
        if let Some(f) = opts.from {
            body["from"] = Value::String(f.wire());
        }
        if !opts.filters.is_empty() {
            body["filters"] = Value::Array(opts.filters);
        }
        let f = expect(
            self.shared
                .call(FrameType::Subscribe, Bytes::from(body.to_string()))
                .await?,
            FrameType::SubscribeOk,
        )?;
        let v = json_payload(&f)?;
        v.get("subscriptionId")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Error::Protocol(format!("unexpected SUBSCRIBE_OK payload: {v}")))
    }

    /// Removes this connection's subscription to `topic`, or all of them.
    pub async fn unsubscribe(&self, topic: Option<&str>) -> Result<()> {
        let body = match topic {
            Some(t) => json!({ "topic": t }),
            None => json!({}),
        };
        expect(
            self.shared
                .call(FrameType::Unsubscribe, Bytes::from(body.to_string()))
                .await?,
            FrameType::Ok,
        )?;
        Ok(())
    }

    /// Acknowledges a delivery.
    pub async fn ack(&self, delivery_id: &str) -> Result<()> {
        self.settle(FrameType::Ack, delivery_id).await
    }

    /// Gives a delivery back for redelivery.
    pub async fn nack(&self, delivery_id: &str) -> Result<()> {
        self.settle(FrameType::Nack, delivery_id).await
    }

    async fn settle(&self, kind: FrameType, delivery_id: &str) -> Result<()> {
        let payload = Bytes::copy_from_slice(delivery_id.as_bytes());
        expect(self.shared.call(kind, payload).await?, FrameType::Ok)?;
        Ok(())
    }

    /// Sends a request-reply request to `topic` and waits up to `wait`
    /// (at most 300 s) for its reply, which it returns (the server answers
    /// `request_timeout` when none came in time).
    pub async fn request<E: AsEvent + ?Sized>(
        &self,
        topic: &str,
        event: &E,
        wait: Duration,
    ) -> Result<Value> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1);
        let payload = tcp_frame::request_payload(wait_ms, topic, &event.event_bytes()?)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        // The server's answer comes at the end of the wait at the latest.
        let within = wait.min(Duration::from_secs(300)) + self.shared.timeout;
        let answer = self
            .shared
            .call_within(FrameType::Request, payload, within)
            .await;
        let f = match answer {
            Err(Error::Api { code, .. }) if code == "request_timeout" => {
                return Err(Error::Timeout)
            }
            answer => expect(answer?, FrameType::Response)?,
        };
        json_payload(&f)
    }

    /// Answers a request-reply request (the event carries its `correlationid`).
    pub async fn reply<E: AsEvent + ?Sized>(&self, event: &E) -> Result<()> {
        let payload = Bytes::from(event.event_bytes()?);
        expect(
            self.shared.call(FrameType::Reply, payload).await?,
            FrameType::Ok,
        )?;
        Ok(())
    }

    /// Answers the request `request` with `event`, copying its `correlationid`.
    pub async fn reply_to<E: AsEvent + ?Sized>(&self, request: &Delivery, event: &E) -> Result<()> {
        let v = crate::client::with_correlation(request, event)?;
        self.reply(&v).await
    }

    /// Answers the request `request` with `event` (copying its
    /// `correlationid`) and acknowledges the request's delivery, in one
    /// frame (`REPLY_ACK`). A refused reply leaves the delivery held: it
    /// can still be acked or nacked.
    pub async fn reply_and_ack<E: AsEvent + ?Sized>(
        &self,
        request: &Delivery,
        event: &E,
    ) -> Result<()> {
        let payload = reply_ack_payload(request, event)?;
        expect(
            self.shared.call(FrameType::ReplyAck, payload).await?,
            FrameType::Ok,
        )?;
        Ok(())
    }

    /// Acknowledges a delivery without waiting for an answer: the server
    /// answers only a failure, which [`TcpClient::next`] returns as an
    /// error. Returns once the frame is queued.
    pub fn ack_quietly(&self, delivery_id: &str) -> Result<()> {
        let payload = Bytes::copy_from_slice(delivery_id.as_bytes());
        self.shared.send_quiet(FrameType::Ack, payload)
    }

    /// [`TcpClient::reply_and_ack`] without waiting for an answer: the
    /// server answers only a failure, which [`TcpClient::next`] returns as
    /// an error. Returns once the frame is queued.
    pub fn reply_and_ack_quietly<E: AsEvent + ?Sized>(
        &self,
        request: &Delivery,
        event: &E,
    ) -> Result<()> {
        self.shared
            .send_quiet(FrameType::ReplyAck, reply_ack_payload(request, event)?)
    }

    /// Sends a heartbeat and waits for its echo; returns the round trip.
    pub async fn heartbeat(&self) -> Result<Duration> {
        let start = Instant::now();
        expect(
            self.shared.call(FrameType::Heartbeat, Bytes::new()).await?,
            FrameType::Heartbeat,
        )?;
        Ok(start.elapsed())
    }

    /// Announces an orderly close, waits for the answer (or the server
    /// closing), and closes the connection.
    pub async fn goodbye(mut self) -> Result<()> {
        let r = match self.shared.call(FrameType::Goodbye, Bytes::new()).await {
            Ok(_) => Ok(()),
            // The server may close without answering.
            Err(Error::Protocol(_)) => Ok(()),
            Err(e) => Err(e),
        };
        self.shutdown().await;
        r
    }

    async fn shutdown(&mut self) {
        self.keepalive.abort();
        let _ = self.shared.out.send(None);
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.writer).await;
        self.reader.abort();
    }
}

/// The payload of a `REPLY_ACK` answering `request` with `event` (given
/// the request's `correlationid`).
fn reply_ack_payload<E: AsEvent + ?Sized>(request: &Delivery, event: &E) -> Result<Bytes> {
    let v = crate::client::with_correlation(request, event)?;
    Ok(tcp_frame::push_payload(
        &request.delivery_id,
        &v.event_bytes()?,
    ))
}

/// Handles one frame from the server; false ends the connection.
fn handle(shared: &Shared, tx: &mpsc::UnboundedSender<Result<Delivery>>, f: Frame) -> bool {
    match f.kind {
        FrameType::Push => {
            let item = tcp_frame::parse_push(&f.payload)
                .map_err(|e| Error::Protocol(format!("bad PUSH payload: {e}")))
                .and_then(|(delivery_id, event)| {
                    let event = serde_json::from_slice(&event)
                        .map_err(|e| Error::Protocol(format!("pushed event is not JSON: {e}")))?;
                    Ok(Delivery {
                        delivery_id,
                        topic: None,
                        event,
                    })
                });
            tx.send(item).is_ok()
        }
        FrameType::Heartbeat => {
            match shared.take(f.correlation) {
                Some(w) => {
                    let _ = w.send(Ok(f));
                }
                // The server's heartbeat: echo it.
                None => {
                    let _ = shared.send(&Frame::new(
                        FrameType::Heartbeat,
                        f.correlation,
                        Bytes::new(),
                    ));
                }
            }
            true
        }
        FrameType::Goodbye if shared.take(f.correlation).is_none() => {
            tracing::debug!("the server said goodbye");
            false
        }
        kind => {
            let result = if kind == FrameType::Error {
                Err(frame_error(&f.payload))
            } else {
                Ok(f.clone())
            };
            match shared.take(f.correlation) {
                Some(w) => {
                    let _ = w.send(result);
                    true
                }
                None => match result {
                    // An error about the connection itself.
                    Err(e) => tx.send(Err(e)).is_ok(),
                    Ok(_) => {
                        tracing::debug!(kind = kind.name(), "unsolicited TCP frame ignored");
                        true
                    }
                },
            }
        }
    }
}

impl Drop for TcpClient {
    fn drop(&mut self) {
        self.keepalive.abort();
        let _ = self.shared.out.send(None);
        self.reader.abort();
    }
}

impl Stream for TcpClient {
    type Item = Result<Delivery>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.deliveries.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::tcp_server;

    #[tokio::test]
    async fn speaks_the_frame_protocol() {
        let (addr, server) = tcp_server(50).await;
        let client = EventMeshClient::new("http://127.0.0.1:1")
            .unwrap()
            .with_tcp(&addr)
            .with_token("tok");
        let mut tcp = client.tcp("c1").await.unwrap();
        assert_eq!(tcp.heartbeat_interval(), Some(Duration::from_millis(50)));

        let sub = tcp
            .subscribe(SubscribeOptions::new("c1", "orders").group("g"))
            .await
            .unwrap();
        assert_eq!(sub, "s1");
        let d = tokio::time::timeout(Duration::from_secs(5), tcp.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(d.delivery_id, "d1");
        assert_eq!(d.event["data"], json!({"n": 1}));
        tcp.ack("d1").await.unwrap();
        tcp.nack("d1").await.unwrap();

        let ev = crate::json_event("t", "/s", json!("x"));
        let p = tcp.publish("orders", &ev).await.unwrap();
        assert_eq!(p.id, ev.id);
        assert_eq!((p.topic.as_str(), p.partition, p.offset), ("orders", 0, 5));
        let e = tcp.publish("bad", &ev).await.unwrap_err();
        assert_eq!(e.code(), Some("invalid_topic"));
        assert_eq!(e.status(), Some(0));
        assert_eq!(
            e.to_string(),
            "topic \"bad\" is not allowed (invalid_topic)"
        );

        tcp.heartbeat().await.unwrap();
        let mut answer = ev.event_value().unwrap();
        answer["correlationid"] = "c-9".into();
        tcp.reply(&answer).await.unwrap();
        tcp.unsubscribe(Some("orders")).await.unwrap();
        // Let the keepalive run a few times.
        tokio::time::sleep(Duration::from_millis(200)).await;
        tcp.goodbye().await.unwrap();

        let frames = tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
        let kinds: Vec<FrameType> = frames.iter().map(|f| f.kind).collect();
        assert_eq!(kinds[0], FrameType::Hello);
        let hello: Value = serde_json::from_slice(&frames[0].payload).unwrap();
        assert_eq!(hello, json!({"clientId": "c1", "token": "tok"}));
        let sub = frames
            .iter()
            .find(|f| f.kind == FrameType::Subscribe)
            .unwrap();
        let sub: Value = serde_json::from_slice(&sub.payload).unwrap();
        assert_eq!(sub, json!({"topic": "orders", "group": "g"}));
        let ack = frames.iter().find(|f| f.kind == FrameType::Ack).unwrap();
        assert_eq!(&ack.payload[..], b"d1");
        assert!(kinds.contains(&FrameType::Nack));
        assert!(kinds.contains(&FrameType::Reply));
        assert!(kinds.contains(&FrameType::Unsubscribe));
        assert_eq!(kinds.last(), Some(&FrameType::Goodbye));
        // The server's heartbeat (correlation 7) was echoed ...
        assert!(frames
            .iter()
            .any(|f| f.kind == FrameType::Heartbeat && f.correlation == 7));
        // ... and besides the explicit one, the keepalive sent some.
        let ours = frames
            .iter()
            .filter(|f| f.kind == FrameType::Heartbeat && f.correlation != 7)
            .count();
        assert!(ours >= 2, "{ours} heartbeats");
        // Every request used its own correlation id.
        let mut ids: Vec<u64> = frames
            .iter()
            .filter(|f| f.correlation != 7)
            .map(|f| f.correlation)
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }

    #[tokio::test]
    async fn rejected_hello_is_an_api_error() {
        let (addr, _server) = tcp_server(0).await;
        let e = TcpClient::connect(&addr, "c1", Some("bad"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some("unauthorized"));
    }

    #[tokio::test]
    async fn refused_tcp_is_unreachable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr = format!("127.0.0.1:{port}");
        let e = TcpClient::connect(&addr, "c1", None).await.unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        assert!(e
            .to_string()
            .starts_with(&format!("cannot reach the eventmesh server at {addr}: ")));
    }

    #[test]
    fn error_frames_map_to_api_errors() {
        let e = frame_error(br#"{"error":"frame_too_large","message":"too big"}"#);
        assert_eq!(e.code(), Some("frame_too_large"));
        let e = frame_error(b"not json");
        assert_eq!(e.code(), Some("error"));
        assert_eq!(e.to_string(), "not json (error)");
    }
}
