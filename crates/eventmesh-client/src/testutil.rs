//! Scripted in-process servers for tests: HTTP/1.1 and the legacy TCP
//! protocol.
//!
//! Every wait is bounded by [`WAIT`]: a connection that sends nothing, a
//! client that never connects, or a request that never arrives ends the
//! wait (the connection is dropped, or the test panics) instead of hanging
//! the test.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// The longest any wait of these servers, or of a test on them, lasts.
pub const WAIT: Duration = Duration::from_secs(10);

/// The requests a scripted HTTP server saw, in arrival order.
pub struct Seen(mpsc::UnboundedReceiver<Req>);

impl Seen {
    /// The next request, waiting at most [`WAIT`] for it (panics past
    /// that); `None` once the server is gone.
    pub async fn recv(&mut self) -> Option<Req> {
        timeout(WAIT, self.0.recv())
            .await
            .unwrap_or_else(|_| panic!("no request reached the test server within {WAIT:?}"))
    }

    /// A request already seen, without waiting.
    pub fn try_recv(&mut self) -> Result<Req, mpsc::error::TryRecvError> {
        self.0.try_recv()
    }
}

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What to send back: chunks written in order with a short pause between,
/// then the connection is closed (unless `hold`).
pub struct Reply {
    pub chunks: Vec<Vec<u8>>,
    pub hold: bool,
}

impl Reply {
    /// A complete response with a JSON body.
    pub fn json(status: u16, body: &str) -> Reply {
        Reply {
            chunks: vec![format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()],
            hold: false,
        }
    }

    /// An event stream: the head, then each chunk.
    pub fn sse(chunks: &[&str], hold: bool) -> Reply {
        let mut all = vec![b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n".to_vec()];
        all.extend(chunks.iter().map(|c| c.as_bytes().to_vec()));
        Reply { chunks: all, hold }
    }
}

/// Serves one request per connection; `respond(req, n)` answers the n-th
/// connection (from 0). Returns the base URL and the requests seen. A
/// connection whose request does not arrive within [`WAIT`] is dropped.
pub async fn http_server<F>(respond: F) -> (String, Seen)
where
    F: Fn(&Req, usize) -> Reply + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let i = n;
            n += 1;
            let respond = respond.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let head_end = loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(Ok(k)) = timeout(WAIT, sock.read(&mut chunk)).await else {
                        return;
                    };
                    if k == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..k]);
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.split("\r\n");
                let mut first = lines.next().unwrap_or("").split(' ');
                let method = first.next().unwrap_or("").to_string();
                let target = first.next().unwrap_or("").to_string();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = buf[head_end + 4..].to_vec();
                while body.len() < len {
                    let mut chunk = [0u8; 4096];
                    let Ok(Ok(k)) = timeout(WAIT, sock.read(&mut chunk)).await else {
                        return;
                    };
                    if k == 0 {
                        break;
                    }
                    body.extend_from_slice(&chunk[..k]);
                }
                let req = Req {
                    method,
                    target,
                    headers,
                    body,
                };
                let reply = respond(&req, i);
                let _ = tx.send(req);
                for c in reply.chunks {
                    if sock.write_all(&c).await.is_err() {
                        return;
                    }
                    let _ = sock.flush().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if reply.hold {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            });
        }
    });
    (base, Seen(rx))
}

/// A scripted legacy-TCP server speaking [`eventmesh_core::tcp_frame`]:
/// it answers every request as the real server would, pushes one delivery
/// (`d1`) and sends one heartbeat (correlation 7) after a subscribe, and
/// asks for heartbeats every `heartbeat_ms`. The task returns every frame
/// it received, once the client says goodbye, disconnects or sends nothing
/// for [`WAIT`]; it panics if no client connects within [`WAIT`].
pub async fn tcp_server(
    heartbeat_ms: u64,
) -> (
    String,
    tokio::task::JoinHandle<Vec<eventmesh_core::tcp_frame::Frame>>,
) {
    use bytes::BytesMut;
    use eventmesh_core::tcp_frame::{self, Frame, FrameType};

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut sock, _) = timeout(WAIT, listener.accept())
            .await
            .unwrap_or_else(|_| panic!("no client connected within {WAIT:?}"))
            .unwrap();
        let mut buf = BytesMut::new();
        let mut seen = Vec::new();
        let event = br#"{"specversion":"1.0","id":"e1","source":"/s","type":"t","data":{"n":1}}"#;
        loop {
            let frame = loop {
                if let Some(f) = tcp_frame::decode(&mut buf, tcp_frame::DEFAULT_MAX_FRAME).unwrap()
                {
                    break Some(f);
                }
                match timeout(WAIT, sock.read_buf(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) | Err(_) => break None,
                    Ok(Ok(_)) => {}
                }
            };
            let Some(f) = frame else { return seen };
            let c = f.correlation;
            let mut answers = Vec::new();
            let mut bye = false;
            match f.kind {
                FrameType::Hello => {
                    let hello: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
                    if hello["token"] == "bad" {
                        answers.push(Frame::error(c, "unauthorized", "bad token"));
                    } else {
                        answers.push(Frame::json(
                            FrameType::HelloOk,
                            c,
                            &serde_json::json!({ "heartbeatMs": heartbeat_ms }),
                        ));
                    }
                }
                FrameType::Subscribe => {
                    answers.push(Frame::json(
                        FrameType::SubscribeOk,
                        c,
                        &serde_json::json!({"subscriptionId": "s1"}),
                    ));
                    answers.push(Frame::new(
                        FrameType::Push,
                        0,
                        tcp_frame::push_payload("d1", event),
                    ));
                    answers.push(Frame::new(FrameType::Heartbeat, 7, bytes::Bytes::new()));
                }
                FrameType::Publish => {
                    let (topic, ev) = tcp_frame::parse_publish(&f.payload).unwrap();
                    let ev: serde_json::Value = serde_json::from_slice(&ev).unwrap();
                    if topic == "bad" {
                        answers.push(Frame::error(
                            c,
                            "invalid_topic",
                            "topic \"bad\" is not allowed",
                        ));
                    } else {
                        answers.push(Frame::json(
                            FrameType::PublishAck,
                            c,
                            &serde_json::json!({"id": ev["id"], "topic": topic, "partition": 0, "offset": 5}),
                        ));
                    }
                }
                FrameType::Ack | FrameType::Nack | FrameType::Reply | FrameType::Unsubscribe => {
                    answers.push(Frame::new(FrameType::Ok, c, bytes::Bytes::new()));
                }
                FrameType::Heartbeat if c == 7 => {}
                FrameType::Heartbeat => {
                    answers.push(Frame::new(FrameType::Heartbeat, c, bytes::Bytes::new()));
                }
                FrameType::Goodbye => {
                    answers.push(Frame::new(FrameType::Goodbye, c, bytes::Bytes::new()));
                    bye = true;
                }
                other => answers.push(Frame::error(c, "unexpected", other.name())),
            }
            seen.push(f);
            for a in answers {
                sock.write_all(&a.to_bytes()).await.unwrap();
            }
            if bye {
                return seen;
            }
        }
    });
    (addr, task)
}
