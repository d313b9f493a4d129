//! The runtime's TCP port (`docs/tcp-protocol.md`): `HELLO`, then frames
//! pipelined both ways. A writer task coalesces whatever operations are
//! queued into one write; a reader task turns `PUBLISH_ACK`, `OK` and
//! `ERROR` frames into answers by their correlation, and `PUSH` frames
//! into deliveries. Closing unsubscribes (`UNSUBSCRIBE {}`) and says
//! `GOODBYE`.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::link::{error_code, In, Link, Op, Subscription};

/// Correlations of the link's own frames (workload ids stay below).
const SUBSCRIBE_ID: u64 = u64::MAX - 2;
const UNSUBSCRIBE_ID: u64 = u64::MAX - 1;
const HEARTBEAT_ID: u64 = u64::MAX;
/// Largest frame accepted from the server: a `PUSH` may exceed the
/// server's own inbound limit (see the protocol's "Limits").
const MAX_FRAME: usize = 64 << 20;
/// Operations encoded into one write, at most.
const COALESCE: usize = 512;

/// Connects as `client_id`, subscribing to `topic` in each of `subs`.
pub async fn connect(
    addr: &str,
    token: Option<&str>,
    client_id: &str,
    topic: &str,
    subs: &[Subscription],
) -> Result<Link> {
    let mut stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot reach the eventmesh TCP port at {addr}"))?;
    stream.set_nodelay(true)?;
    let mut buf = BytesMut::with_capacity(64 << 10);
    let hello = Frame::json(
        FrameType::Hello,
        0,
        &serde_json::json!({"clientId": client_id, "token": token}),
    );
    let answer = call(&mut stream, &mut buf, hello)
        .await
        .with_context(|| format!("HELLO to {addr}"))?;
    let heartbeat = match answer.kind {
        FrameType::HelloOk => serde_json::from_slice::<serde_json::Value>(&answer.payload)
            .ok()
            .and_then(|v| v["heartbeatMs"].as_u64())
            .map_or(Duration::from_secs(15), Duration::from_millis),
        _ => bail!("{addr} refused HELLO: {}", refusal(&answer)),
    };
    for s in subs {
        let frame = Frame::json(FrameType::Subscribe, SUBSCRIBE_ID, &{
            let mut body = serde_json::json!({"topic": topic, "group": s.group, "from": s.from});
            if let Some(f) = &s.filters {
                body["filters"] = f.clone();
            }
            body
        });
        let answer = call(&mut stream, &mut buf, frame)
            .await
            .with_context(|| format!("SUBSCRIBE to {addr}"))?;
        if answer.kind != FrameType::SubscribeOk {
            bail!(
                "{addr} refused SUBSCRIBE to {topic:?}: {}",
                refusal(&answer)
            );
        }
    }
    let topic_prefix = tcp_frame::publish_payload(topic, b"")
        .with_context(|| format!("topic {topic:?} does not fit a PUBLISH frame"))?;

    let (ops_tx, ops) = mpsc::unbounded_channel();
    let (answers, answers_rx) = mpsc::unbounded_channel();
    let (pongs_tx, pongs) = mpsc::unbounded_channel();
    let (rd, wr) = stream.into_split();
    let writer = tokio::spawn(write(
        wr,
        ops,
        pongs,
        answers.clone(),
        topic_prefix.to_vec(),
        heartbeat,
        !subs.is_empty(),
    ));
    let reader = tokio::spawn(read(rd, buf, answers, pongs_tx));
    Ok(Link::new(ops_tx, answers_rx, true)
        .with_reply_acks()
        .task(writer)
        .task(reader))
}

/// Sends one frame and reads the next (before the session pipelines).
async fn call(stream: &mut TcpStream, buf: &mut BytesMut, frame: Frame) -> Result<Frame> {
    stream.write_all(&frame.to_bytes()).await?;
    read_frame(stream, buf)
        .await?
        .context("the server closed the connection")
}

/// `code: message` of an `ERROR` frame, or the frame's name.
fn refusal(f: &Frame) -> String {
    match f.kind {
        FrameType::Error => String::from_utf8_lossy(&f.payload).into_owned(),
        other => format!("unexpected {} frame", other.name()),
    }
}

/// The next frame; `None` at the end of the stream.
async fn read_frame(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
) -> Result<Option<Frame>> {
    loop {
        if let Some(f) = tcp_frame::decode(buf, MAX_FRAME)? {
            return Ok(Some(f));
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// The frame of one operation.
fn encode(op: Op, topic_prefix: &[u8], out: &mut BytesMut) -> Result<(), (u64, &'static str)> {
    let frame = match op {
        Op::Publish {
            id,
            events: 1,
            body,
        } => {
            let mut payload = Vec::with_capacity(topic_prefix.len() + body.len());
            payload.extend_from_slice(topic_prefix);
            payload.extend_from_slice(&body);
            Frame::new(FrameType::Publish, id, payload)
        }
        Op::Publish { id, .. } => return Err((id, "batch_unsupported")),
        Op::Request { id, body } => {
            // A wait of 0: the server's default.
            let mut payload = Vec::with_capacity(4 + topic_prefix.len() + body.len());
            payload.extend_from_slice(&0u32.to_be_bytes());
            payload.extend_from_slice(topic_prefix);
            payload.extend_from_slice(&body);
            Frame::new(FrameType::Request, id, payload)
        }
        Op::Reply { id, event } => Frame::new(FrameType::Reply, id, event),
        Op::Ack { id, delivery } => Frame::new(FrameType::Ack, id, delivery.into_bytes()),
        Op::ReplyAck {
            id,
            delivery,
            event,
        } => Frame::new(
            // Answered only if it fails: nothing waits on its success.
            FrameType::ReplyAck,
            id | tcp_frame::QUIET,
            tcp_frame::push_payload(&delivery, &event),
        ),
    };
    frame.encode(out);
    Ok(())
}

/// Writes queued operations (coalesced), echoes the server's heartbeats
/// and sends one when idle; once the link closes: unsubscribe, goodbye.
async fn write(
    mut wr: OwnedWriteHalf,
    mut ops: mpsc::UnboundedReceiver<Op>,
    mut pongs: mpsc::UnboundedReceiver<u64>,
    answers: mpsc::UnboundedSender<In>,
    topic_prefix: Vec<u8>,
    heartbeat: Duration,
    subscribed: bool,
) {
    let mut batch = Vec::with_capacity(COALESCE);
    let mut out = BytesMut::with_capacity(256 << 10);
    loop {
        out.clear();
        let open = tokio::select! {
            n = ops.recv_many(&mut batch, COALESCE) => n > 0,
            Some(c) = pongs.recv() => {
                Frame::new(FrameType::Heartbeat, c, Vec::new()).encode(&mut out);
                true
            }
            _ = tokio::time::sleep(heartbeat) => {
                Frame::new(FrameType::Heartbeat, HEARTBEAT_ID, Vec::new()).encode(&mut out);
                true
            }
        };
        if !open {
            break;
        }
        for op in batch.drain(..) {
            if let Err((id, code)) = encode(op, &topic_prefix, &mut out) {
                let _ = answers.send(In::Done {
                    id,
                    result: Err(code.into()),
                });
            }
        }
        if wr.write_all(&out).await.is_err() {
            return;
        }
    }
    out.clear();
    if subscribed {
        Frame::new(FrameType::Unsubscribe, UNSUBSCRIBE_ID, &b"{}"[..]).encode(&mut out);
    }
    Frame::new(FrameType::Goodbye, 0, Vec::new()).encode(&mut out);
    let _ = wr.write_all(&out).await;
}

/// Turns frames into answers and deliveries until the connection ends.
async fn read(
    mut rd: OwnedReadHalf,
    mut buf: BytesMut,
    answers: mpsc::UnboundedSender<In>,
    pongs: mpsc::UnboundedSender<u64>,
) {
    let end = loop {
        let frame = match read_frame(&mut rd, &mut buf).await {
            Ok(Some(f)) => f,
            Ok(None) => break None,
            Err(_) => break Some("connection_broken".to_owned()),
        };
        // A quiet frame's error carries its correlation with the quiet bit.
        let c = frame.correlation & !tcp_frame::QUIET;
        let got = match frame.kind {
            FrameType::PublishAck | FrameType::Response | FrameType::Ok if c < SUBSCRIBE_ID => {
                In::Done {
                    id: c,
                    result: Ok(()),
                }
            }
            FrameType::Error => {
                let code = error_code(&frame.payload).unwrap_or_else(|| "error".into());
                match c {
                    0 => In::Error(code),
                    c if c < SUBSCRIBE_ID => In::Done {
                        id: c,
                        result: Err(code),
                    },
                    _ => continue,
                }
            }
            FrameType::Push => match tcp_frame::parse_push(&frame.payload) {
                Ok((delivery, event)) => In::Delivery { delivery, event },
                Err(e) => In::Error(e.code().into()),
            },
            FrameType::Heartbeat if c == 0 => {
                let _ = pongs.send(0);
                continue;
            }
            FrameType::Goodbye => break None,
            _ => continue,
        };
        if answers.send(got).is_err() {
            break None;
        }
    };
    let _ = answers.send(In::Closed(end));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn operations_become_frames() {
        let prefix = tcp_frame::publish_payload("t", b"").unwrap();
        let mut out = BytesMut::new();
        let body = Bytes::from_static(br#"{"id":"1"}"#);
        encode(
            Op::Publish {
                id: 7,
                body: body.clone(),
                events: 1,
            },
            &prefix,
            &mut out,
        )
        .unwrap();
        encode(
            Op::Ack {
                id: 8,
                delivery: "d-1".into(),
            },
            &prefix,
            &mut out,
        )
        .unwrap();
        let f = tcp_frame::decode(&mut out, MAX_FRAME).unwrap().unwrap();
        assert_eq!((f.kind, f.correlation), (FrameType::Publish, 7));
        let (topic, event) = tcp_frame::parse_publish(&f.payload).unwrap();
        assert_eq!((topic.as_str(), event), ("t", body.clone()));
        let f = tcp_frame::decode(&mut out, MAX_FRAME).unwrap().unwrap();
        assert_eq!((f.kind, f.correlation), (FrameType::Ack, 8));
        assert_eq!(&f.payload[..], b"d-1");
        encode(
            Op::Request {
                id: 10,
                body: body.clone(),
            },
            &prefix,
            &mut out,
        )
        .unwrap();
        let f = tcp_frame::decode(&mut out, MAX_FRAME).unwrap().unwrap();
        assert_eq!((f.kind, f.correlation), (FrameType::Request, 10));
        let (wait, topic, event) = tcp_frame::parse_request(&f.payload).unwrap();
        assert_eq!((wait, topic.as_str(), event), (0, "t", body.clone()));
        // What TCP cannot carry is answered as an error, not sent.
        let batch = Op::Publish {
            id: 9,
            body: Bytes::new(),
            events: 2,
        };
        assert_eq!(
            encode(batch, &prefix, &mut out),
            Err((9, "batch_unsupported"))
        );
        assert!(out.is_empty());
    }
}
