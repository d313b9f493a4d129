//! Server-sent events: `GET /events/stream`, with a `text/event-stream`
//! parser and automatic reconnection that resumes with `Last-Event-ID`.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::EventMeshClient;
use crate::error::{Error, Result};
use crate::types::{Delivery, StreamOptions};

/// One event of a `text/event-stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event id in force when this event was dispatched (its own
    /// `id:`, or the one before it).
    pub id: Option<String>,
    /// The `event:` name, when one was given.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// An incremental `text/event-stream` parser (the WHATWG rules): feed it
/// the body in chunks of any size; it returns the complete events.
///
/// ```
/// use eventmesh_client::sse::SseParser;
///
/// let mut p = SseParser::new();
/// assert!(p.feed(b": heartbeat\n\nid: d-1\nda").is_empty());
/// let events = p.feed(b"ta: {\"x\":1}\n\n");
/// assert_eq!(events[0].data, "{\"x\":1}");
/// assert_eq!(p.last_event_id(), Some("d-1"));
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` belongs to it.
    after_cr: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    /// The id buffer: set by `id:`, committed on dispatch.
    pending_id: Option<String>,
    last_id: Option<String>,
    retry: Option<Duration>,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feeds a chunk of the body; returns the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(r) = rest.strip_prefix(b"\n") {
                rest = r;
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let was_cr = rest[pos] == b'\r';
            rest = &rest[pos + 1..];
            if was_cr {
                if rest.is_empty() {
                    self.after_cr = true;
                } else if rest[0] == b'\n' {
                    rest = &rest[1..];
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(e) = self.line_done(&line) {
                out.push(e);
            }
        }
        self.line.extend_from_slice(rest);
        out
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            "id" if !value.contains('\0') => {
                self.pending_id = (!value.is_empty()).then(|| value.to_string());
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        self.last_id = self.pending_id.clone();
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            id: self.last_id.clone(),
            event,
            data: std::mem::take(&mut self.data),
        })
    }

    /// The id to send as `Last-Event-ID` when reconnecting: the id in force
    /// at the last dispatched event (an `id:` of an unfinished event does
    /// not count yet).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection delay the server asked for with `retry:`.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Forgets a half-received event (the connection broke); keeps the
    /// last event id and the retry delay.
    pub fn reset_connection(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.data.clear();
        self.has_data = false;
        self.event = None;
        self.pending_id = self.last_id.clone();
    }
}

/// The delivery an SSE event carries: `data: {"deliveryId","event"}`, or
/// (leniently) a bare event with the delivery id as the SSE id.
pub fn parse_delivery(e: &SseEvent) -> Option<Delivery> {
    if let Ok(d) = serde_json::from_str::<Delivery>(&e.data) {
        return Some(d);
    }
    let v: serde_json::Value = serde_json::from_str(&e.data).ok()?;
    if v.get("specversion").is_some() {
        return Some(Delivery {
            delivery_id: e.id.clone()?,
            topic: None,
            event: v,
        });
    }
    None
}

/// The wait before reconnect attempt `failures + 1`: the server's `retry:`
/// (default 1 s), doubled per failure in a row, at most 30 s.
pub fn backoff(retry: Option<Duration>, failures: u32) -> Duration {
    let base = retry.unwrap_or(Duration::from_secs(1));
    base.saturating_mul(1 << failures.min(5))
        .min(Duration::from_secs(30).max(base))
}

/// A live SSE subscription: a [`Stream`] of deliveries that reconnects by
/// itself (sending `Last-Event-ID`) when the connection breaks. It ends
/// with an error after [`StreamOptions::max_reconnects`] failed attempts
/// in a row, or at once on a non-transient error (such as `401`).
///
/// ```no_run
/// use eventmesh_client::{EventMeshClient, StreamOptions};
///
/// # async fn demo() -> eventmesh_client::Result<()> {
/// let client = EventMeshClient::new("http://127.0.0.1:10105")?;
/// let mut stream = client.sse(StreamOptions::new("viewer-1").topic("orders")).await?;
/// while let Some(d) = stream.next().await {
///     let d = d?;
///     println!("{}", d.event);
///     stream.ack(&d.delivery_id).await?;
/// }
/// # Ok(()) }
/// ```
pub struct SseStream {
    rx: mpsc::Receiver<Result<Delivery>>,
    task: JoinHandle<()>,
    client: EventMeshClient,
    last_id: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for SseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStream")
            .field("server", &self.client.server())
            .field("last_event_id", &self.last_event_id())
            .finish()
    }
}

impl EventMeshClient {
    /// Opens an SSE stream (`GET /events/stream`). Returns once the server
    /// accepted it; an unreachable server or an error answer fails here.
    pub async fn sse(&self, opts: StreamOptions) -> Result<SseStream> {
        let first = open(self, &opts, None).await?;
        let (tx, rx) = mpsc::channel(64);
        let last_id = Arc::new(Mutex::new(None));
        let task = tokio::spawn(run(self.clone(), opts, first, tx, last_id.clone()));
        Ok(SseStream {
            rx,
            task,
            client: self.clone(),
            last_id,
        })
    }
}

impl SseStream {
    /// The next delivery; `None` once the stream has ended.
    pub async fn next(&mut self) -> Option<Result<Delivery>> {
        self.rx.recv().await
    }

    /// Acknowledges a delivery (`POST /events/ack`); not needed with
    /// [`StreamOptions::auto_ack`].
    pub async fn ack(&self, delivery_id: &str) -> Result<()> {
        self.client.ack(delivery_id).await
    }

    /// Gives a delivery back for redelivery (`POST /events/nack`).
    pub async fn nack(&self, delivery_id: &str) -> Result<()> {
        self.client.nack(delivery_id).await
    }

    /// The id that a reconnect sends as `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<String> {
        self.last_id.lock().ok().and_then(|g| g.clone())
    }

    /// Closes the connection.
    pub fn close(self) {}
}

impl Drop for SseStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for SseStream {
    type Item = Result<Delivery>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

async fn open(
    client: &EventMeshClient,
    opts: &StreamOptions,
    last_id: Option<&str>,
) -> Result<reqwest::Response> {
    let q = opts.query();
    let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut rb = client
        .http
        .get(client.endpoint("events/stream", &q))
        .header(ACCEPT, "text/event-stream")
        .header(CACHE_CONTROL, "no-cache");
    if let Some(id) = last_id {
        rb = rb.header("Last-Event-ID", id);
    }
    // Only the answer's headers are bounded by a timeout; the body streams.
    let resp = tokio::time::timeout(client.request_timeout, client.send(rb))
        .await
        .map_err(|_| Error::Timeout)??;
    let ct = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.trim_start().starts_with("text/event-stream") {
        return Err(Error::Protocol(format!(
            "{} answered {ct:?}, not text/event-stream",
            client.endpoint("events/stream", &[])
        )));
    }
    Ok(resp)
}

async fn run(
    client: EventMeshClient,
    opts: StreamOptions,
    first: reqwest::Response,
    tx: mpsc::Sender<Result<Delivery>>,
    shared_last: Arc<Mutex<Option<String>>>,
) {
    let mut parser = SseParser::new();
    let mut next = Some(first);
    let mut failures = 0u32;
    loop {
        let resp = match next.take() {
            Some(r) => r,
            None => {
                let wait = backoff(parser.retry(), failures);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = tx.closed() => return,
                }
                match open(&client, &opts, parser.last_event_id()).await {
                    Ok(r) => {
                        tracing::debug!(server = client.server(), "SSE stream reconnected");
                        failures = 0;
                        r
                    }
                    Err(e) if e.is_transient() && failures < opts.max_reconnects => {
                        failures += 1;
                        tracing::warn!(
                            server = client.server(),
                            attempt = failures,
                            "SSE reconnect failed: {e}"
                        );
                        continue;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        };
        parser.reset_connection();
        let mut body = resp.bytes_stream();
        loop {
            let chunk = tokio::select! {
                c = tokio::time::timeout(client.idle_timeout, body.next()) => c,
                _ = tx.closed() => return,
            };
            let bytes = match chunk {
                Ok(Some(Ok(b))) => b,
                Ok(Some(Err(e))) => {
                    tracing::warn!(server = client.server(), "SSE stream broke: {e}");
                    break;
                }
                Ok(None) => {
                    tracing::debug!(server = client.server(), "SSE stream closed by the server");
                    break;
                }
                Err(_) => {
                    tracing::warn!(
                        server = client.server(),
                        "SSE stream silent for {:?}; reconnecting",
                        client.idle_timeout
                    );
                    break;
                }
            };
            for ev in parser.feed(&bytes) {
                if let Ok(mut g) = shared_last.lock() {
                    g.clone_from(&ev.id);
                }
                match parse_delivery(&ev) {
                    Some(d) => {
                        if tx.send(Ok(d)).await.is_err() {
                            return;
                        }
                    }
                    None => tracing::warn!(
                        event = ev.event.as_deref().unwrap_or("message"),
                        "ignoring an SSE message that is not a delivery: {}",
                        ev.data.chars().take(200).collect::<String>()
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(p: &mut SseParser, chunks: &[&[u8]]) -> Vec<SseEvent> {
        chunks.iter().flat_map(|c| p.feed(c)).collect()
    }

    #[test]
    fn ids_data_and_comments() {
        let mut p = SseParser::new();
        let body = b": heartbeat\n\nid: d-1\ndata: {\"deliveryId\":\"d-1\",\"event\":{}}\n\n: heartbeat\n\nid: d-2\nevent: delivery\ndata: two\n\n";
        let ev = p.feed(body);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].id.as_deref(), Some("d-1"));
        assert_eq!(ev[0].event, None);
        assert_eq!(ev[0].data, "{\"deliveryId\":\"d-1\",\"event\":{}}");
        assert_eq!(ev[1].id.as_deref(), Some("d-2"));
        assert_eq!(ev[1].event.as_deref(), Some("delivery"));
        assert_eq!(ev[1].data, "two");
        assert_eq!(p.last_event_id(), Some("d-2"));
    }

    #[test]
    fn multi_line_data_and_field_forms() {
        let mut p = SseParser::new();
        let ev = p.feed(b"data: a\ndata:b\ndata\ndata:  c\n\n");
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].data, "a\nb\n\n c");
        // Unknown fields and an event with no data dispatch nothing.
        assert!(p.feed(b"foo: bar\nevent: x\n\n").is_empty());
        // The event name does not leak into the next event.
        let ev = p.feed(b"data: y\n\n");
        assert_eq!(ev[0].event, None);
    }

    #[test]
    fn any_chunking_and_line_endings() {
        let body: &[u8] = b"id: 1\r\ndata: x\r\n\r\nid: 2\rdata: y\r\rid: 3\ndata: z\n\n";
        let whole = SseParser::new().feed(body);
        assert_eq!(whole.len(), 3);
        assert_eq!(
            whole.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
            ["x", "y", "z"]
        );
        // Byte by byte gives the same, CRLF split across chunks included.
        let mut p = SseParser::new();
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(feed_all(&mut p, &bytes), whole);
        // Every two-way split too.
        for cut in 0..body.len() {
            let mut p = SseParser::new();
            assert_eq!(
                feed_all(&mut p, &[&body[..cut], &body[cut..]]),
                whole,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn utf8_split_across_chunks() {
        let body = "data: café ☕\n\n".as_bytes();
        let mut p = SseParser::new();
        let ev = feed_all(&mut p, &[&body[..9], &body[9..13], &body[13..]]);
        assert_eq!(ev[0].data, "café ☕");
    }

    #[test]
    fn reconnect_id_bookkeeping() {
        let mut p = SseParser::new();
        assert_eq!(p.last_event_id(), None);
        p.feed(b"id: a\ndata: 1\n\n");
        assert_eq!(p.last_event_id(), Some("a"));
        // An id of an event that never completed does not count.
        p.feed(b"id: b\ndata: 2\n");
        assert_eq!(p.last_event_id(), Some("a"));
        p.reset_connection();
        assert_eq!(p.last_event_id(), Some("a"));
        // After the reconnect, an event without id keeps the last id.
        let ev = p.feed(b"data: 3\n\n");
        assert_eq!(
            ev,
            vec![SseEvent {
                id: Some("a".into()),
                event: None,
                data: "3".into()
            }]
        );
        // A heartbeat comment changes nothing; an id with NUL is ignored.
        p.feed(b": heartbeat\n\nid: x\0y\ndata: 4\n\n");
        assert_eq!(p.last_event_id(), Some("a"));
        // An empty id clears it.
        p.feed(b"id\ndata: 5\n\n");
        assert_eq!(p.last_event_id(), None);
        p.feed(b"retry: 2500\nretry: soon\n\n");
        assert_eq!(p.retry(), Some(Duration::from_millis(2500)));
    }

    #[test]
    fn deliveries_from_events() {
        let e = SseEvent {
            id: Some("d-9".into()),
            event: None,
            data: r#"{"deliveryId":"d-9","event":{"specversion":"1.0","id":"1"}}"#.into(),
        };
        let d = parse_delivery(&e).unwrap();
        assert_eq!(d.delivery_id, "d-9");
        assert_eq!(d.event["id"], "1");
        let bare = SseEvent {
            id: Some("d-10".into()),
            event: None,
            data: r#"{"specversion":"1.0","id":"2"}"#.into(),
        };
        assert_eq!(parse_delivery(&bare).unwrap().delivery_id, "d-10");
        let other = SseEvent {
            id: None,
            event: Some("error".into()),
            data: "oops".into(),
        };
        assert!(parse_delivery(&other).is_none());
    }

    fn delivery(id: &str) -> String {
        format!(
            "id: {id}\ndata: {{\"deliveryId\":\"{id}\",\"event\":{{\"specversion\":\"1.0\",\"id\":\"e-{id}\",\"source\":\"/s\",\"type\":\"t\"}}}}\n\n"
        )
    }

    #[tokio::test]
    async fn reconnects_with_last_event_id() {
        use crate::testutil::{http_server, Reply};
        let (d1, d2, d3) = (delivery("d-1"), delivery("d-2"), delivery("d-3"));
        let (base, mut seen) = http_server(move |_, n| match n {
            // The first connection breaks in the middle of an event.
            0 => Reply::sse(
                &[
                    "retry: 20\n: heartbeat\n\n",
                    &d1,
                    &d2[..10],
                    &d2[10..],
                    "id: d-x\ndata: {\"deliveryId\":\"d-x\"",
                ],
                false,
            ),
            1 => Reply::sse(&[": heartbeat\n\n", &d3], true),
            _ => Reply::json(500, r#"{"error":"boom","message":"too many connections"}"#),
        })
        .await;
        let client = EventMeshClient::new(&base).unwrap().with_token("tok");
        let mut stream = client
            .sse(
                StreamOptions::new("c1")
                    .topic("orders")
                    .from(crate::StartFrom::Earliest),
            )
            .await
            .unwrap();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let d = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("a delivery in time")
                .unwrap()
                .unwrap();
            assert_eq!(d.event["id"], format!("e-{}", d.delivery_id));
            ids.push(d.delivery_id);
        }
        assert_eq!(ids, ["d-1", "d-2", "d-3"]);
        assert_eq!(stream.last_event_id().as_deref(), Some("d-3"));
        let first = seen.recv().await.unwrap();
        assert_eq!(first.method, "GET");
        assert_eq!(
            first.target,
            "/events/stream?clientId=c1&topic=orders&from=earliest"
        );
        assert_eq!(first.header("accept"), Some("text/event-stream"));
        assert_eq!(first.header("authorization"), Some("Bearer tok"));
        assert_eq!(first.header("last-event-id"), None);
        let second = seen.recv().await.unwrap();
        assert_eq!(second.target, first.target);
        assert_eq!(second.header("last-event-id"), Some("d-2"));
        drop(stream);
    }

    #[tokio::test]
    async fn first_connection_errors_are_returned() {
        use crate::testutil::{http_server, Reply};
        let (base, _seen) = http_server(|_, _| {
            Reply::json(
                401,
                r#"{"error":"unauthorized","message":"token required"}"#,
            )
        })
        .await;
        let client = EventMeshClient::new(&base).unwrap();
        let e = client.sse(StreamOptions::new("c1")).await.unwrap_err();
        assert_eq!(e.code(), Some("unauthorized"));
        let (base, _seen) = http_server(|_, _| Reply::json(200, "[]")).await;
        let client = EventMeshClient::new(&base).unwrap();
        let e = client.sse(StreamOptions::new("c1")).await.unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    }

    #[tokio::test]
    async fn gives_up_after_max_reconnects() {
        use crate::testutil::{http_server, Reply};
        let (base, _seen) = http_server(|_, n| match n {
            0 => Reply::sse(&["retry: 1\n\n"], false),
            _ => Reply::json(503, r#"{"error":"shutting_down","message":"bye"}"#),
        })
        .await;
        let client = EventMeshClient::new(&base).unwrap();
        let mut stream = client
            .sse(StreamOptions::new("c1").max_reconnects(2))
            .await
            .unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap();
        let e = end.unwrap().unwrap_err();
        assert_eq!(e.code(), Some("shutting_down"));
        assert!(stream.next().await.is_none());
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(None, 0), Duration::from_secs(1));
        assert_eq!(backoff(None, 1), Duration::from_secs(2));
        assert_eq!(backoff(None, 3), Duration::from_secs(8));
        assert_eq!(backoff(None, 10), Duration::from_secs(30));
        assert_eq!(
            backoff(Some(Duration::from_millis(100)), 2),
            Duration::from_millis(400)
        );
    }
}
