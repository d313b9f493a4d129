//! WebSocket: `GET /events/ws`. One socket carries deliveries from the
//! server and, the other way, acks, nacks, publishes, subscribes and replies.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{SinkExt, Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::UrlError;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::client::EventMeshClient;
use crate::error::{Error, Result};
use crate::types::{AsEvent, Delivery, Published, StreamOptions, SubscribeOptions};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value>>>>>;

/// A WebSocket session with the server. Deliveries come out of
/// [`WsSession::next`] (or the [`Stream`] impl); the other methods write
/// on the same socket. Requests (`publish`, `subscribe`, `reply`) wait for
/// the answer with the same `requestId`; `ack` and `nack` do not wait.
///
/// The server opens a WebSocket only for a client that has a pull
/// subscription, or that subscribes in the same call
/// ([`StreamOptions::topic`]); otherwise the handshake fails with
/// [`Error::Api`] `404 unknown_client`.
///
/// ```no_run
/// use eventmesh_client::{json_event, EventMeshClient, StreamOptions};
///
/// # async fn demo() -> eventmesh_client::Result<()> {
/// let client = EventMeshClient::new("http://127.0.0.1:10105")?;
/// let mut ws = client.websocket(StreamOptions::new("app-1").topic("orders")).await?;
/// ws.publish("orders", &json_event("order.created", "/shop", serde_json::json!({"n": 1}))).await?;
/// if let Some(d) = ws.next().await {
///     let d = d?;
///     println!("{}", d.event);
///     ws.ack(&d.delivery_id)?;
/// }
/// ws.close().await;
/// # Ok(()) }
/// ```
pub struct WsSession {
    out: mpsc::UnboundedSender<Message>,
    pending: Pending,
    deliveries: mpsc::UnboundedReceiver<Result<Delivery>>,
    next_request: AtomicU64,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
    timeout: Duration,
}

impl std::fmt::Debug for WsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsSession")
            .field("closed", &self.out.is_closed())
            .finish()
    }
}

/// Maps a failed WebSocket handshake.
pub(crate) fn handshake_error(server: &str, e: WsError) -> Error {
    match e {
        WsError::Io(io) => Error::connect_io(server, io),
        WsError::Http(resp) => {
            let status = resp.status().as_u16();
            Error::from_api_body(status, resp.body().as_deref().unwrap_or_default())
        }
        WsError::Url(UrlError::TlsFeatureNotEnabled) => Error::InvalidArgument(
            "wss:// (an https server) is not supported by this build's WebSocket client".into(),
        ),
        WsError::Url(u) => Error::InvalidArgument(format!("WebSocket URL: {u}")),
        other => Error::Protocol(format!("WebSocket handshake with {server} failed: {other}")),
    }
}

impl EventMeshClient {
    /// Opens a WebSocket session (`GET /events/ws`), subscribing in the
    /// same call when `opts` names a topic.
    pub async fn websocket(&self, opts: StreamOptions) -> Result<WsSession> {
        let q = opts.query();
        let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let url = self.ws_endpoint("events/ws", &q);
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| handshake_error(self.server(), e))?;
        if let Some(v) = self.bearer() {
            req.headers_mut().insert(AUTHORIZATION, v);
        }
        let connector = self.tls.clone().map(tokio_tungstenite::Connector::Rustls);
        let connect = tokio_tungstenite::connect_async_tls_with_config(req, None, false, connector);
        let (socket, _) =
            tokio::time::timeout(self.connect_timeout + self.request_timeout, connect)
                .await
                .map_err(|_| Error::Unreachable {
                    server: self.server().to_string(),
                    cause: "WebSocket handshake timed out".into(),
                })?
                .map_err(|e| handshake_error(self.server(), e))?;
        let (mut sink, mut source) = socket.split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
        let writer = tokio::spawn(async move {
            while let Some(m) = out_rx.recv().await {
                let close = matches!(m, Message::Close(_));
                if let Err(e) = sink.send(m).await {
                    tracing::debug!("WebSocket write failed: {e}");
                    return;
                }
                if close {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let pending: Pending = Arc::default();
        // Unbounded on purpose: the reader must never wait for the
        // application to take a delivery, or the answer to a call the
        // application is awaiting would sit unread behind it. The server's
        // in-flight caps bound what can pile up here.
        let (tx, deliveries) = mpsc::unbounded_channel();
        let reader = {
            let pending = pending.clone();
            tokio::spawn(async move {
                let end = loop {
                    match source.next().await {
                        None | Some(Ok(Message::Close(_))) => break None,
                        Some(Ok(Message::Text(t))) => {
                            if let Some(d) = route(&pending, t.as_str()) {
                                if tx.send(Ok(d)).is_err() {
                                    break None;
                                }
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => {
                            break None
                        }
                        Some(Err(e)) => break Some(format!("WebSocket connection broke: {e}")),
                    }
                };
                let waiting: Vec<_> = pending
                    .lock()
                    .map(|mut p| p.drain().collect())
                    .unwrap_or_default();
                let why = end
                    .clone()
                    .unwrap_or_else(|| "the WebSocket connection was closed".into());
                for (_, w) in waiting {
                    let _ = w.send(Err(Error::Protocol(why.clone())));
                }
                if let Some(msg) = end {
                    let _ = tx.send(Err(Error::Protocol(msg)));
                }
            })
        };
        Ok(WsSession {
            out,
            pending,
            deliveries,
            next_request: AtomicU64::new(1),
            reader,
            writer,
            timeout: self.request_timeout,
        })
    }
}

/// Handles one server text frame: answers go to their waiting request,
/// deliveries are returned.
fn route(pending: &Pending, text: &str) -> Option<Delivery> {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("ignoring a WebSocket frame that is not JSON: {e}");
            return None;
        }
    };
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return match serde_json::from_value::<Delivery>(v) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!("ignoring a WebSocket frame that is not a delivery: {e}");
                None
            }
        };
    };
    let result = if kind == "error" {
        Err(ws_error(&v))
    } else {
        Ok(v.clone())
    };
    let waiter = v
        .get("requestId")
        .and_then(Value::as_str)
        .and_then(|id| pending.lock().ok()?.remove(id));
    match waiter {
        Some(w) => {
            let _ = w.send(result);
        }
        None => match result {
            Err(e) => tracing::warn!("WebSocket error from the server: {e}"),
            Ok(_) => tracing::debug!(kind, "unsolicited WebSocket answer"),
        },
    }
    None
}

/// `{"type":"error","error","message"}` as [`Error::Api`] (status 0: it
/// did not come as an HTTP answer).
fn ws_error(v: &Value) -> Error {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let code = s("error");
    let message = s("message");
    Error::Api {
        status: 0,
        message: if message.is_empty() {
            code.clone()
        } else {
            message
        },
        code,
    }
}

impl WsSession {
    /// The next delivery; `None` once the socket is closed. A broken
    /// connection yields one error first.
    pub async fn next(&mut self) -> Option<Result<Delivery>> {
        self.deliveries.recv().await
    }

    fn send(&self, v: &Value) -> Result<()> {
        self.out
            .send(Message::text(v.to_string()))
            .map_err(|_| Error::Protocol("the WebSocket connection is closed".into()))
    }

    async fn call(&self, mut msg: Value) -> Result<Value> {
        let id = format!("r{}", self.next_request.fetch_add(1, Ordering::Relaxed));
        msg["requestId"] = Value::String(id.clone());
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id.clone(), tx);
        }
        if let Err(e) = self.send(&msg) {
            self.forget(&id);
            return Err(e);
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(Error::Protocol(
                "the WebSocket connection was closed".into(),
            )),
            Err(_) => {
                self.forget(&id);
                Err(Error::Timeout)
            }
        }
    }

    fn forget(&self, id: &str) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(id);
        }
    }

    /// Acknowledges a delivery (does not wait for an answer; an unknown id
    /// is reported by the server as an error frame, logged).
    pub fn ack(&self, delivery_id: &str) -> Result<()> {
        self.send(&json!({"type": "ack", "deliveryId": delivery_id}))
    }

    /// Gives a delivery back for redelivery.
    pub fn nack(&self, delivery_id: &str) -> Result<()> {
        self.send(&json!({"type": "nack", "deliveryId": delivery_id}))
    }

    /// Acknowledges a delivery and waits for the server's answer (an
    /// unknown or foreign id is an [`Error::Api`] `unknown_delivery`).
    pub async fn ack_confirmed(&self, delivery_id: &str) -> Result<()> {
        self.call(json!({"type": "ack", "deliveryId": delivery_id}))
            .await
            .map(drop)
    }

    /// Gives a delivery back and waits for the server's answer.
    pub async fn nack_confirmed(&self, delivery_id: &str) -> Result<()> {
        self.call(json!({"type": "nack", "deliveryId": delivery_id}))
            .await
            .map(drop)
    }

    /// Publishes an event over the socket.
    pub async fn publish<E: AsEvent + ?Sized>(&self, topic: &str, event: &E) -> Result<Published> {
        let v = self
            .call(json!({"type": "publish", "topic": topic, "event": event.event_value()?}))
            .await?;
        serde_json::from_value(v)
            .map_err(|e| Error::Protocol(format!("unexpected publish answer: {e}")))
    }

    /// Subscribes this session's client to one more topic; returns the
    /// subscription id. (`client_id` and `url` of `opts` are not sent: the
    /// session's client id applies, and the socket is the delivery path.)
    pub async fn subscribe(&self, opts: SubscribeOptions) -> Result<String> {
        let mut msg = json!({"type": "subscribe", "topic": opts.topic});
        if let Some(g) = opts.group {
            msg["group"] = Value::String(g);
        }
        if let Some(m) = opts.mode {
            msg["mode"] = Value::String(m.as_str().into());
        }
        if let Some(f) = opts.from {
            msg["from"] = Value::String(f.wire());
        }
        if !opts.filters.is_empty() {
            msg["filters"] = Value::Array(opts.filters);
        }
        let v = self.call(msg).await?;
        v.get("subscriptionId")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| Error::Protocol(format!("unexpected subscribe answer: {v}")))
    }

    /// Sends a reply to a request (the event carries its `correlationid`).
    pub async fn reply<E: AsEvent + ?Sized>(&self, event: &E) -> Result<()> {
        self.call(json!({"type": "reply", "event": event.event_value()?}))
            .await?;
        Ok(())
    }

    /// Answers the request `request` with `event`, copying its `correlationid`.
    pub async fn reply_to<E: AsEvent + ?Sized>(&self, request: &Delivery, event: &E) -> Result<()> {
        let v = crate::client::with_correlation(request, event)?;
        self.reply(&v).await
    }

    /// Closes the socket cleanly (waits briefly for the close to go out).
    pub async fn close(mut self) {
        let _ = self.out.send(Message::Close(None));
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.writer).await;
    }
}

impl Drop for WsSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Stream for WsSession {
    type Item = Result<Delivery>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.deliveries.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_answers_and_deliveries() {
        let pending: Pending = Arc::default();
        let (tx, mut rx) = oneshot::channel();
        pending.lock().unwrap().insert("r1".into(), tx);
        let (etx, mut erx) = oneshot::channel();
        pending.lock().unwrap().insert("r2".into(), etx);
        assert!(route(
            &pending,
            r#"{"type":"published","requestId":"r1","id":"e","topic":"t","partition":0,"offset":7}"#
        )
        .is_none());
        let v = rx.try_recv().unwrap().unwrap();
        let p: Published = serde_json::from_value(v).unwrap();
        assert_eq!(p.offset, 7);
        route(
            &pending,
            r#"{"type":"error","requestId":"r2","error":"forbidden","message":"no"}"#,
        );
        let e = erx.try_recv().unwrap().unwrap_err();
        assert_eq!(e.code(), Some("forbidden"));
        assert!(pending.lock().unwrap().is_empty());
        let d = route(&pending, r#"{"deliveryId":"d1","event":{"id":"x"}}"#).unwrap();
        assert_eq!(d.delivery_id, "d1");
        assert!(route(&pending, "not json").is_none());
        assert!(route(&pending, r#"{"type":"error","error":"unknown_delivery"}"#).is_none());
    }

    #[tokio::test]
    // The handshake callback's signature is tungstenite's.
    #[allow(clippy::result_large_err)]
    async fn session_over_a_fake_server() {
        use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (seen_tx, mut seen) = mpsc::unbounded_channel::<Value>();
        let server = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let (uri_tx, uri_rx) = std::sync::mpsc::channel();
            let mut ws =
                tokio_tungstenite::accept_hdr_async(sock, |req: &Request, resp: Response| {
                    let auth = req
                        .headers()
                        .get("authorization")
                        .map(|v| v.to_str().unwrap().to_string());
                    uri_tx.send((req.uri().to_string(), auth)).unwrap();
                    Ok(resp)
                })
                .await
                .unwrap();
            let (uri, auth) = uri_rx.recv().unwrap();
            assert_eq!(uri, "/events/ws?clientId=c1&topic=orders&group=g");
            assert_eq!(auth.as_deref(), Some("Bearer tok"));
            ws.send(Message::text(
                r#"{"deliveryId":"d1","event":{"specversion":"1.0","id":"e1","source":"/s","type":"t"}}"#,
            ))
            .await
            .unwrap();
            while let Some(Ok(m)) = ws.next().await {
                let Message::Text(t) = m else { continue };
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                let rid = v.get("requestId").cloned().unwrap_or(Value::Null);
                let answer = match v["type"].as_str().unwrap() {
                    "publish" if v["topic"] == "forbidden" => Some(json!({
                        "type": "error", "requestId": rid, "error": "forbidden", "message": "no publish on forbidden"
                    })),
                    "publish" => Some(json!({
                        "type": "published", "requestId": rid, "id": v["event"]["id"], "topic": v["topic"], "partition": 0, "offset": 3
                    })),
                    "subscribe" => Some(
                        json!({"type": "subscribed", "requestId": rid, "subscriptionId": "s2"}),
                    ),
                    "reply" => Some(json!({"type": "replied", "requestId": rid})),
                    _ => None,
                };
                seen_tx.send(v).unwrap();
                if let Some(a) = answer {
                    ws.send(Message::text(a.to_string())).await.unwrap();
                }
            }
        });

        let client = EventMeshClient::new(&base).unwrap().with_token("tok");
        let mut ws = client
            .websocket(StreamOptions::new("c1").topic("orders").group("g"))
            .await
            .unwrap();
        let d = ws.next().await.unwrap().unwrap();
        assert_eq!(d.delivery_id, "d1");
        ws.ack(&d.delivery_id).unwrap();
        assert_eq!(
            seen.recv().await.unwrap(),
            json!({"type": "ack", "deliveryId": "d1"})
        );
        ws.nack("d2").unwrap();
        assert_eq!(seen.recv().await.unwrap()["type"], "nack");

        let ev = crate::json_event("t", "/s", json!({"k": 1}));
        let p = ws.publish("orders", &ev).await.unwrap();
        assert_eq!((p.id.as_str(), p.offset), (ev.id.as_str(), 3));
        let sent = seen.recv().await.unwrap();
        assert_eq!(sent["event"]["data"], json!({"k": 1}));
        assert!(sent["requestId"].is_string());

        let e = ws.publish("forbidden", &ev).await.unwrap_err();
        assert_eq!(e.code(), Some("forbidden"));
        assert_eq!(e.to_string(), "no publish on forbidden (forbidden)");
        seen.recv().await.unwrap();

        let sub = ws
            .subscribe(SubscribeOptions::new("ignored", "more").from(crate::StartFrom::Earliest))
            .await
            .unwrap();
        assert_eq!(sub, "s2");
        let sent = seen.recv().await.unwrap();
        assert_eq!(sent["topic"], "more");
        assert_eq!(sent["from"], "earliest");
        assert!(sent.get("clientId").is_none());

        let mut answer = ev.event_value().unwrap();
        answer["correlationid"] = "c-1".into();
        ws.reply(&answer).await.unwrap();
        assert_eq!(seen.recv().await.unwrap()["event"]["correlationid"], "c-1");

        ws.close().await;
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn refused_websocket_is_unreachable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = EventMeshClient::new(format!("http://127.0.0.1:{port}")).unwrap();
        let e = client.websocket(StreamOptions::new("c")).await.unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        assert!(e.to_string().starts_with(&format!(
            "cannot reach the eventmesh server at http://127.0.0.1:{port}: "
        )));
    }

    #[test]
    fn handshake_errors() {
        let e = handshake_error(
            "http://h",
            WsError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "Connection refused",
            )),
        );
        assert!(e.is_unreachable());
        let resp = tokio_tungstenite::tungstenite::http::Response::builder()
            .status(401)
            .body(Some(
                br#"{"error":"unauthorized","message":"token required"}"#.to_vec(),
            ))
            .unwrap();
        let e = handshake_error("http://h", WsError::Http(Box::new(resp)));
        assert_eq!(e.status(), Some(401));
        assert_eq!(e.code(), Some("unauthorized"));
    }
}
