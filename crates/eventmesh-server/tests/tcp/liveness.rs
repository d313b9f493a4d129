//! A connection's liveness: the heartbeat rule (what the client sends
//! keeps it open) and the rule for a peer that stops reading.

use std::time::Duration;

use bytes::BytesMut;
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::{body, publish_frame, start_tcp, Conn};

/// The heartbeat rule counts what the client sends, not what it is sent:
/// a subscriber that sends nothing is closed after three heartbeat
/// intervals although deliveries keep reaching it, while one that beats
/// stays open.
#[tokio::test]
async fn a_client_that_sends_nothing_is_closed_however_much_it_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &["eventmesh.server.tcp.heartbeat.ms=500"]);
    // `beating` sends a heartbeat every 100 ms from its HELLO on.
    let (beating, _) = Conn::hello(port, "beating", None).await;
    let (from_beating, mut to_beating) = beating.stream.into_split();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let beats = tokio::spawn(async move {
        let beat = Frame::new(FrameType::Heartbeat, 0, Vec::new()).to_bytes();
        loop {
            to_beating.write_all(&beat).await.unwrap();
            tokio::select! {
                _ = &mut stopped => return to_beating,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    let (mut quiet, _) = Conn::hello(port, "quiet", None).await;
    quiet
        .subscribe(&json!({"topic": "beats", "group": "quiet"}))
        .await;
    // An event every 100 ms: a delivery reaches `quiet` far more often
    // than the 1.5 s after which a silent client is closed.
    let (mut p, _) = Conn::hello(port, "pub", None).await;
    let publishing = tokio::spawn(async move {
        for i in 0..100u64 {
            let id = format!("b{i}");
            p.send(publish_frame(tcp_frame::QUIET | (10 + i), "beats", &id))
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let started = tokio::time::Instant::now();
    let mut pushes = 0;
    let closing = loop {
        let f = quiet.recv().await.expect("an ERROR frame before the close");
        if f.kind != FrameType::Push {
            break f;
        }
        pushes += 1;
    };
    assert_eq!(closing.kind, FrameType::Error, "{}", body(&closing));
    assert_eq!(
        body(&closing)["error"],
        "idle_timeout",
        "{}",
        body(&closing)
    );
    assert!(quiet.recv().await.is_none(), "closed after the ERROR frame");
    assert!(pushes >= 2, "{pushes} deliveries reached the quiet client");
    // Closed while deliveries were still coming, not once they stopped.
    assert!(
        !publishing.is_finished(),
        "closed only after all {pushes} deliveries"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    // `beating`, as silent otherwise, is open a second later: its
    // publish is answered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.send(()).unwrap();
    let to_beating = beats.await.unwrap();
    let mut beating = Conn {
        stream: from_beating.reunite(to_beating).unwrap(),
        buf: BytesMut::new(),
    };
    let ack = beating.call(publish_frame(7, "beats", "late")).await;
    assert_eq!(ack.kind, FrameType::PublishAck, "{}", body(&ack));
    publishing.abort();
    drop(s);
}

/// A subscriber that stops reading while it goes on sending heartbeats
/// holds nothing forever: once a write to it has made no progress for
/// three heartbeat intervals its connection is closed, and what it had
/// not acknowledged goes to another member of its group at once, well
/// before the 30 s ack timeout.
#[tokio::test]
async fn a_subscriber_that_stops_reading_is_closed_and_its_deliveries_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &["eventmesh.server.tcp.heartbeat.ms=300"]);
    // `a` takes what a small receive buffer holds, and then reads no more.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let mut a = Conn {
        stream,
        buf: BytesMut::new(),
    };
    assert_eq!(a.greet("stalled", None).await.kind, FrameType::HelloOk);
    let sub = json!({"topic": "stall", "group": "crew"});
    a.subscribe(&sub).await;
    // 200 events of 64 KiB: far more than the socket buffers between the
    // server and `a` hold.
    let (mut p, _) = Conn::hello(port, "pub", None).await;
    let data = "x".repeat(64 << 10);
    for i in 0..200u64 {
        let ev = json!({"specversion": "1.0", "id": format!("s{i}"), "source": "/stall",
                        "type": "t", "data": data});
        let payload = tcp_frame::publish_payload("stall", &serde_json::to_vec(&ev).unwrap());
        let ack = p
            .call(Frame::new(FrameType::Publish, 10 + i, payload.unwrap()))
            .await;
        assert_eq!(ack.kind, FrameType::PublishAck, "{}", body(&ack));
    }
    // `a` keeps its session alive, so only the stalled writes can end it.
    let (from_a, mut to_a) = a.stream.into_split();
    let beating = tokio::spawn(async move {
        let beat = Frame::new(FrameType::Heartbeat, 0, Vec::new()).to_bytes();
        loop {
            if to_a.write_all(&beat).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (mut b, _) = Conn::hello(port, "member-b", None).await;
    b.subscribe(&sub).await;
    // `b` beats too while it waits; all 200 reach it well within the 30 s
    // after which unacknowledged deliveries would go out again anyway.
    let mut seen = std::collections::BTreeSet::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < 200 {
        assert!(
            tokio::time::Instant::now() < until,
            "{} of 200 delivered to the other member",
            seen.len()
        );
        let Ok(got) = tokio::time::timeout(Duration::from_millis(200), b.recv()).await else {
            b.send(Frame::new(FrameType::Heartbeat, 0, Vec::new()))
                .await;
            continue;
        };
        let push = got.expect("b's connection open");
        if push.kind == FrameType::Heartbeat {
            continue;
        }
        assert_eq!(push.kind, FrameType::Push, "{}", body(&push));
        let (id, ev) = tcp_frame::parse_push(&push.payload).unwrap();
        let ev: Value = serde_json::from_slice(&ev).unwrap();
        seen.insert(ev["id"].as_str().unwrap().to_string());
        let quiet = tcp_frame::QUIET | (1000 + seen.len() as u64);
        b.send(Frame::new(FrameType::Ack, quiet, id.into_bytes()))
            .await;
    }
    // The server closed `a`: its heartbeats can no longer be written.
    tokio::time::timeout(Duration::from_secs(10), beating)
        .await
        .expect("the stalled connection closed by the server")
        .unwrap();
    drop(from_a);
    drop(s);
}
