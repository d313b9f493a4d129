//! The legacy TCP port through the real binary, spoken with raw frames:
//! hello and its token, publish, subscribe, push, ack, nack, and bad input
//! (garbage, oversized, truncated, unknown type, bad version) answered with
//! an error frame on that connection only.

mod common;

#[path = "tcp/liveness.rs"]
mod liveness;
#[path = "tcp/threads.rs"]
mod threads;

use std::time::Duration;

use bytes::BytesMut;
use common::*;
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn start_tcp(dir: &std::path::Path, extra: &[&str]) -> (Server, u16) {
    let mut all = vec!["eventmesh.server.tcp.port=0"];
    all.extend_from_slice(extra);
    let s = Server::start(dir, &all);
    let port = port_of(s.tcp.as_deref().expect("the TCP listener's address"));
    (s, port)
}

struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(port: u16) -> Conn {
        Conn {
            stream: TcpStream::connect(("127.0.0.1", port)).await.unwrap(),
            buf: BytesMut::new(),
        }
    }

    async fn send(&mut self, f: Frame) {
        self.stream.write_all(&f.to_bytes()).await.unwrap();
    }

    /// The next frame, or None when the server closed the connection.
    async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = tcp_frame::decode(&mut self.buf, usize::MAX).unwrap() {
                return Some(f);
            }
            let n =
                tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("a frame or a close within 10 s")
                    .unwrap_or(0);
            if n == 0 {
                return None;
            }
        }
    }

    async fn call(&mut self, f: Frame) -> Frame {
        let c = f.correlation;
        self.send(f).await;
        loop {
            let got = self.recv().await.expect("an answer");
            if got.correlation == c {
                return got;
            }
        }
    }

    async fn hello(port: u16, client: &str, token: Option<&str>) -> (Conn, Frame) {
        let mut c = Conn::open(port).await;
        let ok = c.greet(client, token).await;
        (c, ok)
    }

    /// Sends the `HELLO`; its answer.
    async fn greet(&mut self, client: &str, token: Option<&str>) -> Frame {
        self.call(Frame::json(
            FrameType::Hello,
            1,
            &json!({"clientId": client, "token": token}),
        ))
        .await
    }

    /// Subscribes the session's client as `sub` says; it must be taken.
    async fn subscribe(&mut self, sub: &Value) {
        assert_eq!(
            self.call(Frame::json(FrameType::Subscribe, 2, sub))
                .await
                .kind,
            FrameType::SubscribeOk
        );
    }
}

fn body(f: &Frame) -> Value {
    serde_json::from_slice(&f.payload).unwrap_or(Value::Null)
}

fn publish_frame(correlation: u64, topic: &str, id: &str) -> Frame {
    let ev = serde_json::to_vec(&event(id)).unwrap();
    Frame::new(
        FrameType::Publish,
        correlation,
        tcp_frame::publish_payload(topic, &ev).unwrap(),
    )
}

#[tokio::test]
async fn publish_subscribe_push_ack_and_nack_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &["eventmesh.delivery.max.attempts=3"]);
    let (mut sub, ok) = Conn::hello(port, "tcp-sub", None).await;
    assert_eq!(ok.kind, FrameType::HelloOk, "{:?}", body(&ok));
    assert_eq!(body(&ok)["heartbeatMs"], 15000);
    let ok = sub
        .call(Frame::json(
            FrameType::Subscribe,
            2,
            &json!({"topic": "tcp-t"}),
        ))
        .await;
    assert_eq!(ok.kind, FrameType::SubscribeOk, "{:?}", body(&ok));

    let (mut publisher, _) = Conn::hello(port, "tcp-pub", None).await;
    for (i, id) in ["t0", "t1"].iter().enumerate() {
        let ack = publisher
            .call(publish_frame(10 + i as u64, "tcp-t", id))
            .await;
        assert_eq!(ack.kind, FrameType::PublishAck, "{:?}", body(&ack));
        assert_eq!(body(&ack)["topic"], "tcp-t");
    }
    // A publish of a broken event is answered, and the connection lives on.
    let bad = publisher
        .call(Frame::new(
            FrameType::Publish,
            20,
            tcp_frame::publish_payload("tcp-t", b"{\"id\":1}").unwrap(),
        ))
        .await;
    assert_eq!(
        (bad.kind, body(&bad)["error"].as_str()),
        (FrameType::Error, Some("invalid_event"))
    );
    let hb = publisher
        .call(Frame::new(FrameType::Heartbeat, 21, Vec::new()))
        .await;
    assert_eq!(hb.kind, FrameType::Heartbeat);

    // Both arrive as pushes; ack one, nack the other: it comes again.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let push = sub.recv().await.unwrap();
        assert_eq!((push.kind, push.correlation), (FrameType::Push, 0));
        let (delivery, ev) = tcp_frame::parse_push(&push.payload).unwrap();
        let ev: Value = serde_json::from_slice(&ev).unwrap();
        ids.push((delivery, ev["id"].as_str().unwrap().to_string()));
    }
    ids.sort_by(|a, b| a.1.cmp(&b.1));
    let ok = sub
        .call(Frame::new(
            FrameType::Ack,
            30,
            ids[0].0.clone().into_bytes(),
        ))
        .await;
    assert_eq!(ok.kind, FrameType::Ok);
    let again = sub
        .call(Frame::new(
            FrameType::Ack,
            31,
            ids[0].0.clone().into_bytes(),
        ))
        .await;
    assert_eq!(body(&again)["error"], "unknown_delivery");
    let ok = sub
        .call(Frame::new(
            FrameType::Nack,
            32,
            ids[1].0.clone().into_bytes(),
        ))
        .await;
    assert_eq!(ok.kind, FrameType::Ok);
    let push = sub.recv().await.unwrap();
    let (delivery, ev) = tcp_frame::parse_push(&push.payload).unwrap();
    assert_ne!(delivery, ids[1].0, "a redelivery has a new id");
    assert_eq!(serde_json::from_slice::<Value>(&ev).unwrap()["id"], "t1");
    let bye = sub
        .call(Frame::new(FrameType::Goodbye, 40, Vec::new()))
        .await;
    assert_eq!(bye.kind, FrameType::Goodbye);
    assert!(sub.recv().await.is_none(), "closed after goodbye");
    drop(s);
}

/// Publishes pipelined on one connection share group commits and still
/// reach the log in the order they were sent.
#[tokio::test]
async fn pipelined_publishes_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let (mut c, _) = Conn::hello(port, "tcp-pipe", None).await;
    let keyed = |correlation: u64, id: &str| {
        let mut ev = event(id);
        ev["partitionkey"] = "k".into();
        let ev = serde_json::to_vec(&ev).unwrap();
        Frame::new(
            FrameType::Publish,
            correlation,
            tcp_frame::publish_payload("tcp-pipe", &ev).unwrap(),
        )
    };
    // The first publish creates the topic.
    let first = c.call(keyed(1, "first")).await;
    let base = body(&first)["offset"].as_u64().expect("an offset");
    let http = client();
    let commits_before = metric(&http, &s, "eventmesh_log_commit_seconds_count").await;
    const N: u64 = 300;
    let mut all = BytesMut::new();
    for i in 0..N {
        keyed(100 + i, &format!("p{i}")).encode(&mut all);
    }
    c.stream.write_all(&all).await.unwrap();
    let mut offsets = std::collections::HashMap::new();
    while (offsets.len() as u64) < N {
        let ack = c.recv().await.expect("an ack");
        assert_eq!(ack.kind, FrameType::PublishAck, "{:?}", body(&ack));
        offsets.insert(ack.correlation, body(&ack)["offset"].as_u64().unwrap());
    }
    for i in 0..N {
        assert_eq!(
            offsets[&(100 + i)],
            base + 1 + i,
            "publish {i} out of order"
        );
    }
    let commits = metric(&http, &s, "eventmesh_log_commit_seconds_count").await - commits_before;
    assert!(
        commits >= 1.0 && commits < N as f64,
        "{N} pipelined publishes took {commits} commits"
    );
}

/// A subscriber that awaits each ack's answer before taking the next
/// delivery drains a backlog far larger than any client-side buffer: the
/// answers are never stuck behind deliveries it has not taken yet.
#[tokio::test]
async fn the_sdk_drains_a_backlog_acking_each_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let http = client();
    const N: usize = 600;
    let batch: Vec<Value> = (0..N).map(|i| event(&format!("b{i}"))).collect();
    let r = http
        .post(s.url("/events/publish-batch?topic=backlog"))
        .header("content-type", "application/cloudevents-batch+json")
        .json(&batch)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let sdk = eventmesh_client::EventMeshClient::builder()
        .server(s.traffic.clone())
        .tcp_addr(format!("127.0.0.1:{port}"))
        .build()
        .unwrap();
    let mut tcp = sdk.tcp("drainer").await.unwrap();
    tcp.subscribe(
        eventmesh_client::SubscribeOptions::new("drainer", "backlog")
            .from(eventmesh_client::StartFrom::Earliest),
    )
    .await
    .unwrap();
    let mut seen = std::collections::HashSet::new();
    while seen.len() < N {
        let d = tokio::time::timeout(Duration::from_secs(10), tcp.next())
            .await
            .expect("a delivery within 10 s")
            .expect("connection open")
            .expect("a delivery");
        tokio::time::timeout(Duration::from_secs(10), tcp.ack(&d.delivery_id))
            .await
            .expect("the ack answered within 10 s")
            .unwrap();
        seen.insert(d.event["id"].as_str().unwrap().to_string());
    }
    assert_eq!(metric(&http, &s, "eventmesh_acks_total").await, N as f64);
}

#[tokio::test]
async fn a_dropped_tcp_connection_hands_its_deliveries_to_another_member() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let (mut a, _) = Conn::hello(port, "member-a", None).await;
    let sub = json!({"topic": "handover", "group": "crew"});
    a.subscribe(&sub).await;
    // Only `a` is a member when the event arrives.
    let (mut p, _) = Conn::hello(port, "pub", None).await;
    p.call(publish_frame(3, "handover", "h0")).await;
    let push = a.recv().await.unwrap();
    assert_eq!(push.kind, FrameType::Push);
    let (mut b, _) = Conn::hello(port, "member-b", None).await;
    b.subscribe(&sub).await;
    // `a` vanishes without acking: `b` gets the event at once, well before
    // the 30 s ack timeout.
    drop(a);
    let push = b.recv().await.expect("the released delivery");
    let (_, ev) = tcp_frame::parse_push(&push.payload).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&ev).unwrap()["id"], "h0");
    drop(s);
}

#[tokio::test]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(
        dir.path(),
        &[
            "eventmesh.server.tcp.max.frame.bytes=4096",
            "eventmesh.server.tcp.token=tcp-s3cret",
        ],
    );
    // No or a wrong token.
    let (mut c, ok) = Conn::hello(port, "x", None).await;
    assert_eq!(
        (ok.kind, body(&ok)["error"].as_str()),
        (FrameType::Error, Some("unauthorized"))
    );
    assert!(c.recv().await.is_none());
    let (_, ok) = Conn::hello(port, "x", Some("guess")).await;
    assert_eq!(body(&ok)["error"], "unauthorized");

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            "frame_too_large",
        ),
        (
            "oversized",
            {
                let mut v = 4097u32.to_be_bytes().to_vec();
                v.extend_from_slice(&[1, 1]);
                v
            },
            "frame_too_large",
        ),
        ("too short", vec![0, 0, 0, 3, 1, 1, 0], "frame_too_short"),
        (
            "unknown type",
            {
                let mut v = 10u32.to_be_bytes().to_vec();
                v.extend_from_slice(&[1, 0x7f, 0, 0, 0, 0, 0, 0, 0, 9]);
                v
            },
            "unknown_frame_type",
        ),
        (
            "bad version",
            {
                let mut v = 10u32.to_be_bytes().to_vec();
                v.extend_from_slice(&[9, 0x0a, 0, 0, 0, 0, 0, 0, 0, 9]);
                v
            },
            "bad_version",
        ),
        (
            "publish before hello",
            publish_frame(5, "t", "e").to_bytes().to_vec(),
            "hello_required",
        ),
    ];
    for (name, bytes, code) in cases {
        let mut c = Conn::open(port).await;
        c.stream.write_all(&bytes).await.unwrap();
        let err = c
            .recv()
            .await
            .unwrap_or_else(|| panic!("{name}: no error frame"));
        assert_eq!(
            (err.kind, body(&err)["error"].as_str()),
            (FrameType::Error, Some(code)),
            "{name}"
        );
        assert!(c.recv().await.is_none(), "{name}: the connection is closed");
    }
    // A truncated frame, then the client goes away: nothing breaks.
    let mut c = Conn::open(port).await;
    c.stream.write_all(&[0, 0, 0, 50, 1, 3, 0]).await.unwrap();
    drop(c);
    // A bad publish payload (topic length beyond the payload) is answered
    // and the connection stays open.
    let (mut c, ok) = Conn::hello(port, "ok", Some("tcp-s3cret")).await;
    assert_eq!(ok.kind, FrameType::HelloOk);
    let err = c
        .call(Frame::new(FrameType::Publish, 7, vec![0xff, 0xff, b'a']))
        .await;
    assert_eq!(body(&err)["error"], "bad_payload");
    let ack = c.call(publish_frame(8, "after", "fine")).await;
    assert_eq!(ack.kind, FrameType::PublishAck, "{:?}", body(&ack));
    let h = health(&client(), &s).await;
    assert_eq!(h["status"], "UP");
}

#[tokio::test]
async fn the_cli_publishes_and_subscribes_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let tcp = format!("127.0.0.1:{port}");
    let run = |args: Vec<&str>| {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.args(args)
            .env("EVENTMESH_SERVER", &s.traffic)
            .env("EVENTMESH_TCP_SERVER", &tcp);
        async move {
            let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
                .await
                .expect("the command finished in time")
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (code, out, err) = run(vec![
        "publish",
        "--topic",
        "cli-tcp",
        "--transport",
        "tcp",
        "--data",
        "hello",
        "--id",
        "ct-1",
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap()["id"],
        "ct-1"
    );
    let (code, out, err) = run(vec![
        "subscribe",
        "--topic",
        "cli-tcp",
        "--transport",
        "tcp",
        "--from",
        "earliest",
        "--count",
        "1",
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    let line: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        (line["id"].as_str(), line["data"].as_str()),
        (Some("ct-1"), Some("hello"))
    );
}

/// The `error` code of an `ERROR` frame.
fn error_code(f: &Frame) -> String {
    let v: Value = serde_json::from_slice(&f.payload).unwrap_or(Value::Null);
    v["error"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_request_over_tcp_is_answered_by_a_responder_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let (mut responder, asker) = asker_and_responder(&s, port, "memory").await;
    let ask = eventmesh_client::json_event("price.query", "/shop", json!({"sku": "A1"}));
    let (reply, ()) = tokio::join!(
        asker.request("asks", &ask, Duration::from_secs(10)),
        async {
            let d = tokio::time::timeout(Duration::from_secs(10), responder.next())
                .await
                .expect("the request within 10 s")
                .expect("connection open")
                .expect("a delivery");
            assert_eq!(d.event["data"], json!({"sku": "A1"}));
            assert!(d.correlation_id().is_some(), "{}", d.event);
            let answer =
                eventmesh_client::json_event("price.answer", "/pricing", json!({"eur": 12}));
            responder.reply_to(&d, &answer).await.unwrap();
            responder.ack(&d.delivery_id).await.unwrap();
        }
    );
    let reply = reply.unwrap();
    assert_eq!(
        (&reply["type"], &reply["data"]),
        (&json!("price.answer"), &json!({"eur": 12}))
    );
    // Nobody answers within the wait: the SDK's Timeout.
    let err = asker
        .request("nobody-listens", &ask, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, eventmesh_client::Error::Timeout), "{err:?}");

    // Raw frames: a truncated payload and a bad event are refused on that
    // request only; the connection goes on.
    let mut c = Conn::open(port).await;
    let hello = c
        .call(Frame::new(
            FrameType::Hello,
            1,
            &br#"{"clientId":"raw"}"#[..],
        ))
        .await;
    assert_eq!(hello.kind, FrameType::HelloOk);
    let bad = c
        .call(Frame::new(FrameType::Request, 2, &[0u8, 0, 1][..]))
        .await;
    assert_eq!(
        (bad.kind, error_code(&bad)),
        (FrameType::Error, "bad_payload".into())
    );
    let payload = tcp_frame::request_payload(200, "asks", b"{\"id\":1}").unwrap();
    let bad = c.call(Frame::new(FrameType::Request, 3, payload)).await;
    assert_eq!(bad.kind, FrameType::Error);
    let timed_out = c
        .call(Frame::new(
            FrameType::Request,
            4,
            tcp_frame::request_payload(200, "asks", &serde_json::to_vec(&event("q")).unwrap())
                .unwrap(),
        ))
        .await;
    assert_eq!(
        (timed_out.kind, error_code(&timed_out)),
        (FrameType::Error, "request_timeout".into())
    );
    // A RESPONSE is the server's to send.
    let wrong = c.call(Frame::new(FrameType::Response, 5, &b"{}"[..])).await;
    assert_eq!(
        (wrong.kind, error_code(&wrong)),
        (FrameType::Error, "unexpected_frame".into())
    );
}

/// `REPLY_ACK`: the reply and the ack of the request's delivery in one
/// frame; a refused reply leaves the delivery held.
#[tokio::test]
async fn a_reply_ack_answers_a_request_and_acks_its_delivery_in_one_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let (mut responder, asker) = asker_and_responder(&s, port, "disk").await;
    let ask = eventmesh_client::json_event("price.query", "/shop", json!({"sku": "A1"}));
    let answer = eventmesh_client::json_event("price.answer", "/pricing", json!({"eur": 12}));
    let (reply, held) = tokio::join!(
        asker.request("asks", &ask, Duration::from_secs(10)),
        async {
            let d = next_request(&mut responder).await;
            responder.reply_and_ack(&d, &answer).await.unwrap();
            d
        }
    );
    let reply = reply.unwrap();
    assert_eq!(
        (&reply["type"], &reply["data"]),
        (&json!("price.answer"), &json!({"eur": 12}))
    );
    // Acked already: a second ack names a settled delivery.
    let again = responder.ack(&held.delivery_id).await.unwrap_err();
    assert_api_error(&again, "unknown_delivery");

    // The asker stops waiting before the answer: the reply is refused and
    // the delivery stays held, so the responder can still ack it.
    // (A new event: the same one again would be dropped as a duplicate.)
    let d = late_request(&asker, &mut responder, "B2").await;
    let refused = responder.reply_and_ack(&d, &answer).await.unwrap_err();
    assert_api_error(&refused, "unknown_correlation");
    responder.ack(&d.delivery_id).await.unwrap();

    // A truncated payload is refused on that frame only.
    let mut c = Conn::open(port).await;
    let hello = c
        .call(Frame::new(
            FrameType::Hello,
            1,
            &br#"{"clientId":"raw-reply"}"#[..],
        ))
        .await;
    assert_eq!(hello.kind, FrameType::HelloOk);
    let bad = c
        .call(Frame::new(FrameType::ReplyAck, 2, &[0u8, 9, b'x'][..]))
        .await;
    assert_eq!(
        (bad.kind, bad.correlation, error_code(&bad)),
        (FrameType::Error, 2, "bad_payload".into())
    );
    let beat = c.call(Frame::new(FrameType::Heartbeat, 3, &b""[..])).await;
    assert_eq!(beat.kind, FrameType::Heartbeat);
}

async fn next_request(r: &mut eventmesh_client::TcpClient) -> eventmesh_client::Delivery {
    tokio::time::timeout(Duration::from_secs(10), r.next())
        .await
        .expect("a request within 10 s")
        .expect("connection open")
        .expect("a delivery")
}

/// The topic `asks` (kept on `durability`), a TCP responder subscribed to
/// it in the group `answering`, and a TCP asker.
async fn asker_and_responder(
    s: &Server,
    port: u16,
    durability: &str,
) -> (eventmesh_client::TcpClient, eventmesh_client::TcpClient) {
    let (st, v) = common::topics::admin(
        &client(),
        s,
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "asks", "durability": durability})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let sdk = eventmesh_client::EventMeshClient::builder()
        .server(s.traffic.clone())
        .tcp_addr(format!("127.0.0.1:{port}"))
        .build()
        .unwrap();
    let responder = sdk.tcp("responder").await.unwrap();
    responder
        .subscribe(eventmesh_client::SubscribeOptions::new("responder", "asks").group("answering"))
        .await
        .unwrap();
    let asker = sdk.tcp("asker").await.unwrap();
    (responder, asker)
}

/// A frame whose correlation has the quiet bit gets no `OK`: only a
/// failure is answered (with that correlation).
#[tokio::test]
async fn quiet_frames_are_answered_only_when_they_fail() {
    const QUIET: u64 = tcp_frame::QUIET;
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &[]);
    let (mut sub, ok) = Conn::hello(port, "quiet-sub", None).await;
    assert_eq!(ok.kind, FrameType::HelloOk, "{:?}", body(&ok));
    let ok = sub
        .call(Frame::json(
            FrameType::Subscribe,
            2,
            &json!({"topic": "quiet"}),
        ))
        .await;
    assert_eq!(ok.kind, FrameType::SubscribeOk, "{:?}", body(&ok));
    let (mut publisher, _) = Conn::hello(port, "quiet-pub", None).await;
    let ack = publisher.call(publish_frame(10, "quiet", "q1")).await;
    assert_eq!(ack.kind, FrameType::PublishAck, "{:?}", body(&ack));
    let push = sub.recv().await.expect("a push");
    assert_eq!(push.kind, FrameType::Push);
    let (delivery, _) = tcp_frame::parse_push(&push.payload).unwrap();

    // A quiet ACK, then a plain one of the same delivery: the first frame
    // back is the second's error, so the first took effect unanswered (its
    // answer, had there been one, would have come first).
    let id = delivery.as_bytes().to_vec();
    sub.send(Frame::new(FrameType::Ack, QUIET | 3, id.clone()))
        .await;
    sub.send(Frame::new(FrameType::Ack, 4, id)).await;
    let next = sub.recv().await.expect("an answer");
    assert_eq!(
        (next.kind, next.correlation, error_code(&next)),
        (FrameType::Error, 4, "unknown_delivery".into())
    );
    // A quiet frame that fails is answered, with its own correlation.
    let next = sub
        .call(Frame::new(FrameType::Ack, QUIET | 5, &b"nope"[..]))
        .await;
    assert_eq!(
        (next.kind, error_code(&next)),
        (FrameType::Error, "unknown_delivery".into())
    );
    drop((sub, publisher));

    // Through the client: a quiet REPLY_ACK answers the request and acks
    // its delivery; a quiet one that fails comes out of `next`.
    let (mut responder, asker) = asker_and_responder(&s, port, "memory").await;
    let answer = eventmesh_client::json_event("price.answer", "/pricing", json!({"eur": 3}));
    let ask = eventmesh_client::json_event("price.query", "/shop", json!({"sku": "Q1"}));
    let (reply, held) = tokio::join!(
        asker.request("asks", &ask, Duration::from_secs(10)),
        async {
            let d = next_request(&mut responder).await;
            responder.reply_and_ack_quietly(&d, &answer).unwrap();
            d
        }
    );
    assert_eq!(reply.unwrap()["data"], json!({"eur": 3}));
    let again = responder.ack(&held.delivery_id).await.unwrap_err();
    assert_api_error(&again, "unknown_delivery");
    let d = late_request(&asker, &mut responder, "Q2").await;
    responder.reply_and_ack_quietly(&d, &answer).unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(10), responder.next())
        .await
        .expect("the refusal within 10 s")
        .expect("connection open")
        .unwrap_err();
    assert_api_error(&refused, "unknown_correlation");
    // The delivery is still held: a quiet ack takes it, unanswered.
    responder.ack_quietly(&d.delivery_id).unwrap();
    let gone = responder.ack(&d.delivery_id).await.unwrap_err();
    assert_api_error(&gone, "unknown_delivery");
}

fn assert_api_error(e: &eventmesh_client::Error, want: &str) {
    assert!(
        matches!(e, eventmesh_client::Error::Api { code, .. } if code == want),
        "{e:?}"
    );
}

/// A request (of `sku`) whose asker stops waiting before it is answered;
/// the responder's delivery of it.
async fn late_request(
    asker: &eventmesh_client::TcpClient,
    responder: &mut eventmesh_client::TcpClient,
    sku: &str,
) -> eventmesh_client::Delivery {
    let ask = eventmesh_client::json_event("price.query", "/shop", json!({"sku": sku}));
    let (late, d) = tokio::join!(
        asker.request("asks", &ask, Duration::from_millis(300)),
        next_request(responder)
    );
    assert!(
        matches!(late, Err(eventmesh_client::Error::Timeout)),
        "{late:?}"
    );
    d
}
