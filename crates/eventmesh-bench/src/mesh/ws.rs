//! The runtime's WebSocket, `GET /events/ws?clientId=C` (subscribing in
//! the same call with `&topic=T&group=G&from=F`): one persistent socket
//! per connection. Operations go out as JSON text messages carrying a
//! numeric `requestId` (`publish`, `reply`, `ack`), pipelined; answers
//! (`published`, `replied`, or `error` with its code) are matched by that
//! `requestId`, in whatever order they come. Deliveries arrive as
//! `{"deliveryId", "event"}`. A successful ack is not answered. Closing
//! sends a close frame and removes the client's subscription over HTTP
//! (the WebSocket has no unsubscribe message).

use std::borrow::Cow;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::link::{error_code, In, Link, Op, Subscription, Unsubscribe};
use crate::stats;

/// Operations written before one flush, at most.
const COALESCE: usize = 256;

/// Opens a socket as `client_id`, subscribed to `topic` when `sub` is
/// given; `server` is the runtime's HTTP base URL.
pub async fn connect(
    server: &str,
    http: &reqwest::Client,
    token: Option<&str>,
    client_id: &str,
    topic: &str,
    sub: Option<&Subscription>,
) -> Result<Link> {
    let url = ws_url(server, client_id, topic, sub)?;
    let mut req = url
        .as_str()
        .into_client_request()
        .with_context(|| format!("WebSocket URL {url}"))?;
    if let Some(t) = token {
        let v = format!("Bearer {t}")
            .parse()
            .context("the token is not a valid header value")?;
        req.headers_mut().insert(AUTHORIZATION, v);
    }
    let (socket, _) = tokio_tungstenite::connect_async_with_config(req, None, true)
        .await
        .map_err(|e| handshake_error(&url, e))?;
    let (sink, source) = socket.split();
    let (ops_tx, ops) = mpsc::unbounded_channel();
    let (answers, answers_rx) = mpsc::unbounded_channel();
    let topic_json = serde_json::to_string(topic)?;
    let writer = tokio::spawn(write(sink, ops, answers.clone(), topic_json));
    let reader = tokio::spawn(read(source, answers));
    let unsubscribe = match sub {
        Some(_) => Some(Unsubscribe {
            http: http.clone(),
            url: stats::endpoint(server, "events/unsubscribe")?,
            token: token.map(str::to_owned),
            client_id: client_id.to_owned(),
        }),
        None => None,
    };
    Ok(Link::new(ops_tx, answers_rx, false)
        .task(writer)
        .task(reader)
        .unsubscribe_on_close(unsubscribe))
}

/// `ws://.../events/ws?clientId=..[&topic=..&group=..&from=..]` from the
/// HTTP base URL.
fn ws_url(
    server: &str,
    client_id: &str,
    topic: &str,
    sub: Option<&Subscription>,
) -> Result<reqwest::Url> {
    let mut url = stats::endpoint(server, "events/ws")?;
    let scheme = match url.scheme() {
        "http" => "ws",
        "https" => bail!(
            "{server}: WebSocket over TLS (wss) is not supported by eventmesh-bench; use an http:// server"
        ),
        other => bail!("{server}: expected an http:// URL, not {other}://"),
    };
    url.set_scheme(scheme)
        .map_err(|()| anyhow!("{server}: cannot make a WebSocket URL of it"))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("clientId", client_id);
        if let Some(s) = sub {
            q.append_pair("topic", topic)
                .append_pair("group", &s.group)
                .append_pair("from", s.from);
            if let Some(f) = &s.filters {
                q.append_pair("filters", &f.to_string());
            }
        }
    }
    Ok(url)
}

fn handshake_error(url: &reqwest::Url, e: WsError) -> anyhow::Error {
    match e {
        WsError::Io(io) => anyhow!("cannot reach the eventmesh WebSocket at {url}: {io}"),
        WsError::Http(resp) => {
            let body = resp.body().as_deref().unwrap_or_default();
            let code = error_code(body).unwrap_or_else(|| String::from_utf8_lossy(body).into());
            anyhow!(
                "{url} refused the WebSocket upgrade: {} {code}",
                resp.status()
            )
        }
        other => anyhow!("WebSocket handshake with {url} failed: {other}"),
    }
}

/// The text message of one operation.
fn encode(op: Op, topic_json: &str) -> Result<String, (u64, &'static str)> {
    fn text(id: u64, b: &Bytes) -> Result<&str, (u64, &'static str)> {
        std::str::from_utf8(b).map_err(|_| (id, "bad_event"))
    }
    Ok(match op {
        Op::Publish {
            id,
            events: 1,
            body,
        } => {
            let event = text(id, &body)?;
            format!(r#"{{"type":"publish","requestId":{id},"topic":{topic_json},"event":{event}}}"#)
        }
        Op::Publish { id, .. } => return Err((id, "batch_unsupported")),
        Op::Request { id, .. } => return Err((id, "request_unsupported")),
        Op::Reply { id, event } => {
            let event = text(id, &event)?;
            format!(r#"{{"type":"reply","requestId":{id},"event":{event}}}"#)
        }
        Op::Ack { id, delivery } => {
            let delivery = serde_json::Value::String(delivery);
            format!(r#"{{"type":"ack","requestId":{id},"deliveryId":{delivery}}}"#)
        }
        Op::ReplyAck { id, .. } => return Err((id, "reply_ack_unsupported")),
    })
}

async fn write<S>(
    mut sink: S,
    mut ops: mpsc::UnboundedReceiver<Op>,
    answers: mpsc::UnboundedSender<In>,
    topic_json: String,
) where
    S: futures::Sink<Message> + Unpin,
{
    let mut batch = Vec::with_capacity(COALESCE);
    while ops.recv_many(&mut batch, COALESCE).await > 0 {
        for op in batch.drain(..) {
            match encode(op, &topic_json) {
                Ok(text) => {
                    if sink.feed(Message::text(text)).await.is_err() {
                        return;
                    }
                }
                Err((id, code)) => {
                    let _ = answers.send(In::Done {
                        id,
                        result: Err(code.into()),
                    });
                }
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
    let _ = sink.send(Message::Close(None)).await;
    let _ = sink.close().await;
}

/// A server message: an answer (`type`, `requestId`, `error`) or a
/// delivery (`deliveryId`, `event`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Incoming<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    request_id: Option<u64>,
    #[serde(default)]
    delivery_id: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(borrow, default)]
    event: Option<&'a RawValue>,
}

/// What one server text message means; `None` for nothing of interest.
fn route(text: &str) -> Option<In> {
    let Ok(m) = serde_json::from_str::<Incoming>(text) else {
        return Some(In::Error("bad_message".into()));
    };
    match (m.kind.as_deref(), m.request_id) {
        (None, _) => match (m.delivery_id, m.event) {
            (Some(delivery), Some(event)) => Some(In::Delivery {
                delivery,
                event: Bytes::copy_from_slice(event.get().as_bytes()),
            }),
            _ => Some(In::Error("bad_message".into())),
        },
        (Some("error"), id) => {
            let code = m.error.unwrap_or_else(|| "error".into());
            Some(match id {
                Some(id) => In::Done {
                    id,
                    result: Err(code),
                },
                None => In::Error(code),
            })
        }
        (Some(_), Some(id)) => Some(In::Done { id, result: Ok(()) }),
        (Some(_), None) => None,
    }
}

async fn read<S>(mut source: S, answers: mpsc::UnboundedSender<In>)
where
    S: futures::Stream<Item = Result<Message, WsError>> + Unpin,
{
    let end = loop {
        match source.next().await {
            None | Some(Ok(Message::Close(_))) => break None,
            Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => break None,
            Some(Err(_)) => break Some("connection_broken".to_owned()),
            Some(Ok(Message::Text(t))) => {
                if let Some(got) = route(t.as_str()) {
                    if answers.send(got).is_err() {
                        break None;
                    }
                }
            }
            // Pings are answered by the library.
            Some(Ok(_)) => {}
        }
    };
    let _ = answers.send(In::Closed(end));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_http_base() {
        let sub = Subscription {
            group: "g".into(),
            from: "earliest",
            filters: None,
        };
        let u = ws_url("http://127.0.0.1:10105/", "c-1", "a/b", Some(&sub)).unwrap();
        assert_eq!(
            u.as_str(),
            "ws://127.0.0.1:10105/events/ws?clientId=c-1&topic=a%2Fb&group=g&from=earliest"
        );
        let u = ws_url("http://h:1/mesh", "c", "t", None).unwrap();
        assert_eq!(u.as_str(), "ws://h:1/mesh/events/ws?clientId=c");
        assert!(ws_url("https://h", "c", "t", None).is_err());
        assert!(ws_url("ftp://h", "c", "t", None).is_err());
    }

    #[test]
    fn operations_become_json_messages() {
        let topic = serde_json::to_string("t").unwrap();
        let event = Bytes::from_static(br#"{"id":"1"}"#);
        let v = |s: String| serde_json::from_str::<serde_json::Value>(&s).unwrap();
        let m = v(encode(
            Op::Publish {
                id: 3,
                body: event.clone(),
                events: 1,
            },
            &topic,
        )
        .unwrap());
        assert_eq!(
            m,
            serde_json::json!({"type":"publish","requestId":3,"topic":"t","event":{"id":"1"}})
        );
        let m = v(encode(
            Op::Ack {
                id: 4,
                delivery: "d\"1".into(),
            },
            &topic,
        )
        .unwrap());
        assert_eq!(
            m,
            serde_json::json!({"type":"ack","requestId":4,"deliveryId":"d\"1"})
        );
        let m = v(encode(Op::Reply { id: 5, event }, &topic).unwrap());
        assert_eq!(m["type"], "reply");
        assert_eq!(m["event"]["id"], "1");
        let req = Op::Request {
            id: 6,
            body: Bytes::new(),
        };
        assert_eq!(encode(req, &topic), Err((6, "request_unsupported")));
    }

    #[test]
    fn server_messages_route_by_request_id() {
        let done = |text: &str| match route(text) {
            Some(In::Done { id, result }) => (id, result),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(
            done(
                r#"{"type":"published","id":"e","topic":"t","partition":0,"offset":1,"requestId":9}"#
            ),
            (9, Ok(()))
        );
        assert_eq!(
            done(r#"{"type":"error","error":"unknown_delivery","message":"m","requestId":2}"#),
            (2, Err("unknown_delivery".into()))
        );
        match route(r#"{"deliveryId":"d-1","event":{"specversion":"1.0","id":"x"}}"#) {
            Some(In::Delivery { delivery, event }) => {
                assert_eq!(delivery, "d-1");
                assert_eq!(&event[..], br#"{"specversion":"1.0","id":"x"}"#);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            route(r#"{"type":"error","error":"malformed_json","message":"m"}"#),
            Some(In::Error(c)) if c == "malformed_json"
        ));
        assert!(matches!(route("not json"), Some(In::Error(_))));
        assert!(route(r#"{"type":"subscribed","subscriptionId":"s"}"#).is_none());
    }
}
