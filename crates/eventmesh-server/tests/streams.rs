//! SSE, WebSocket and request-reply through the real binary, driven by the
//! Rust SDK (`eventmesh-client`), and the client commands of the binary.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use eventmesh_client::{json_event, Delivery, Error, EventMeshClient, StreamOptions};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

/// The next `n` deliveries of a stream, within [`WAIT`].
async fn take_sse(stream: &mut eventmesh_client::SseStream, n: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("a delivery in time")
            .expect("stream open")
            .expect("a delivery");
        out.push(next);
    }
    out
}

async fn take_ws(ws: &mut eventmesh_client::WsSession, n: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    while out.len() < n {
        let next = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a delivery in time")
            .expect("socket open")
            .expect("a delivery");
        out.push(next);
    }
    out
}

fn id_of(d: &Delivery) -> &str {
    d.event["id"].as_str().unwrap()
}

fn ev(id: &str) -> Value {
    event(id)
}

/// Reads raw SSE messages until `n` `data:` lines arrived.
async fn raw_sse(resp: reqwest::Response, n: usize) -> Vec<Value> {
    use futures::StreamExt;
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(WAIT, body.next())
            .await
            .expect("SSE data in time")
            .expect("stream open")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let message: String = text.drain(..end + 2).collect();
            for line in message.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    out.push(serde_json::from_str(data.trim()).unwrap());
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn sse_delivers_and_a_reconnect_with_last_event_id_gets_the_unacked_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A long ack timeout: redelivery below comes from the resume, not from it.
    let s = Server::start(dir.path(), &["eventmesh.delivery.ack.timeout.ms=120000"]);
    let c = client();
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut stream = sdk
        .sse(StreamOptions::new("sse-1").topic("sse-t"))
        .await
        .unwrap();
    for id in ["e0", "e1", "e2"] {
        sdk.publish("sse-t", &ev(id)).await.unwrap();
    }
    let mut got = take_sse(&mut stream, 3).await;
    got.sort_by(|a, b| id_of(a).cmp(id_of(b)));
    assert_eq!(
        got.iter().map(id_of).collect::<Vec<_>>(),
        ["e0", "e1", "e2"]
    );
    stream.ack(&got[0].delivery_id).await.unwrap();
    let last = stream.last_event_id().expect("ids are sent");
    drop(stream);

    let resumed = c
        .get(s.url("/events/stream?clientId=sse-1"))
        .header("last-event-id", last)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    assert!(resumed.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let again = raw_sse(resumed, 2).await;
    let ids: HashSet<&str> = again
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        HashSet::from(["e1", "e2"]),
        "acked e0 must not come again"
    );
    for d in &again {
        let old: Vec<&str> = got.iter().map(|g| g.delivery_id.as_str()).collect();
        assert!(!old.contains(&d["deliveryId"].as_str().unwrap()), "new ids");
    }
}

#[tokio::test]
async fn sse_auto_ack_acknowledges_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut stream = sdk
        .sse(StreamOptions::new("auto").topic("auto-t").auto_ack(true))
        .await
        .unwrap();
    sdk.publish("auto-t", &ev("a0")).await.unwrap();
    let got = take_sse(&mut stream, 1).await;
    assert_eq!(id_of(&got[0]), "a0");
    // Already acknowledged: an explicit ack finds nothing.
    assert_eq!(ack(&c, &s, &got[0].delivery_id).await, 404);
    assert!(
        wait_until_metric(&c, &s, "eventmesh_acks_total", 1.0).await,
        "{}",
        s.log_text()
    );
}

async fn wait_until_metric(c: &reqwest::Client, s: &Server, name: &str, want: f64) -> bool {
    for _ in 0..200 {
        if metric(c, s, name).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test]
async fn websocket_receives_acks_nacks_and_publishes_on_one_socket() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut ws = sdk
        .websocket(StreamOptions::new("ws-1").topic("ws-t"))
        .await
        .unwrap();
    let published = ws.publish("ws-t", &ev("w0")).await.unwrap();
    assert_eq!(published.topic, "ws-t");
    let first = take_ws(&mut ws, 1).await.remove(0);
    assert_eq!(id_of(&first), "w0");
    ws.nack(&first.delivery_id).unwrap();
    let second = take_ws(&mut ws, 1).await.remove(0);
    assert_eq!(id_of(&second), "w0");
    assert_ne!(second.delivery_id, first.delivery_id);
    ws.ack(&second.delivery_id).unwrap();
    // A publish that is refused comes back as an error on the socket.
    let bad = ws
        .publish("no spaces allowed", &ev("w1"))
        .await
        .unwrap_err();
    assert!(
        matches!(bad, Error::Api { ref code, .. } if code == "invalid_topic"),
        "{bad:?}"
    );
    let c = client();
    assert!(wait_until_metric(&c, &s, "eventmesh_acks_total", 1.0).await);
    assert_eq!(metric(&c, &s, "eventmesh_nacks_total").await, 1.0);
    ws.close().await;
}

/// Publishes pipelined on one socket are handled concurrently (they share
/// group commits) yet reach the log in the order they were sent.
#[tokio::test]
async fn websocket_publishes_pipeline_and_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let ws = sdk.websocket(StreamOptions::new("ws-pipe")).await.unwrap();
    // The first publish creates the topic (a write of its own).
    let mut first = ev("p-first");
    first["partitionkey"] = "k".into();
    let base = ws.publish("ws-pipe", &first).await.unwrap();
    let c = client();
    let commits_before = metric(&c, &s, "eventmesh_log_commit_seconds_count").await;
    const N: usize = 300;
    let events: Vec<Value> = (0..N)
        .map(|i| {
            let mut e = ev(&format!("p{i}"));
            e["partitionkey"] = "k".into();
            e
        })
        .collect();
    let answers = futures::future::join_all(events.iter().map(|e| ws.publish("ws-pipe", e))).await;
    for (i, a) in answers.into_iter().enumerate() {
        let a = a.unwrap();
        assert_eq!(a.id, format!("p{i}"));
        assert_eq!(a.partition, base.partition);
        assert_eq!(a.offset, base.offset + 1 + i as u64, "sent order kept");
    }
    let commits = metric(&c, &s, "eventmesh_log_commit_seconds_count").await - commits_before;
    assert!(
        commits >= 1.0 && commits < N as f64,
        "{N} pipelined publishes took {commits} commits: not handled concurrently"
    );
    ws.close().await;
}

#[tokio::test]
async fn a_dropped_websocket_hands_its_deliveries_to_another_member() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.ack.timeout.ms=120000"]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let opts = |id: &str| StreamOptions::new(id).topic("ws-group").group("crew");
    let mut a = sdk.websocket(opts("ws-a")).await.unwrap();
    sdk.publish("ws-group", &ev("g0")).await.unwrap();
    let held = take_ws(&mut a, 1).await.remove(0);
    assert_eq!(id_of(&held), "g0");
    let mut b = sdk.websocket(opts("ws-b")).await.unwrap();
    drop(a);
    let moved = take_ws(&mut b, 1).await.remove(0);
    assert_eq!(id_of(&moved), "g0");
    b.ack(&moved.delivery_id).unwrap();
    drop(s);
}

#[tokio::test]
async fn request_reply_across_http_and_websocket_and_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut replier = sdk
        .websocket(StreamOptions::new("pricing").topic("prices"))
        .await
        .unwrap();
    let asker = sdk.clone();
    let pending = tokio::spawn(async move {
        let ask = json_event("price.query", "/shop", json!({"sku": "A1"}));
        asker.request("prices", &ask, Duration::from_secs(10)).await
    });
    let request = take_ws(&mut replier, 1).await.remove(0);
    assert_eq!(request.event["data"], json!({"sku": "A1"}));
    assert!(request.correlation_id().is_some(), "{}", request.event);
    let answer = json_event("price.answer", "/pricing", json!({"eur": 12}));
    replier.reply_to(&request, &answer).await.unwrap();
    replier.ack(&request.delivery_id).unwrap();
    let reply = pending.await.unwrap().unwrap();
    assert_eq!(reply["data"], json!({"eur": 12}));
    assert_eq!(reply["type"], "price.answer");

    // Nobody answers: 408, the SDK's Timeout.
    let lonely = json_event("price.query", "/shop", json!({"sku": "B2"}));
    let err = sdk
        .request("nobody-listens", &lonely, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout), "{err:?}");
    // A reply nobody waits for.
    let mut stray = json_event("price.answer", "/pricing", json!({}));
    stray.set_extension(
        "correlationid",
        eventmesh_client::ExtValue::Str("nope".into()),
    );
    let err = sdk.reply(&stray).await.unwrap_err();
    assert!(
        matches!(err, Error::Api { status: 404, ref code, .. } if code == "unknown_correlation"),
        "{err:?}"
    );
}

/// Runs the binary's client command with a time limit; (exit code, stdout, stderr).
async fn cli(args: &[&str], server: &str) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(bin())
            .args(args)
            .env("EVENTMESH_SERVER", server)
            .output(),
    )
    .await
    .expect("the command finished in time")
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_cli_publishes_subscribes_and_reports_an_unreachable_server() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let (code, out, err) = cli(
        &[
            "publish",
            "--topic",
            "cli-t",
            "--data",
            r#"{"n": 1}"#,
            "--id",
            "c-1",
        ],
        &s.traffic,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(answer["id"], "c-1");
    for transport in ["sse", "ws", "poll"] {
        let (code, out, err) = cli(
            &[
                "subscribe",
                "--topic",
                "cli-t",
                "--from",
                "earliest",
                "--count",
                "1",
                "--transport",
                transport,
                "--group",
                transport,
            ],
            &s.traffic,
        )
        .await;
        assert_eq!(code, 0, "{transport}: {err}");
        let line: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(line["id"], "c-1", "{transport}");
        assert_eq!(line["data"], json!({"n": 1}), "{transport}");
    }
    let (code, _, err) = cli(
        &["publish", "--topic", "t", "--data", "x"],
        "http://127.0.0.1:9",
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot reach the eventmesh server at http://127.0.0.1:9"),
        "{err}"
    );
}

#[tokio::test]
async fn a_websocket_without_a_subscription_publishes_and_subscribes_later() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut ws = sdk.websocket(StreamOptions::new("late")).await.unwrap();
    ws.publish("late-t", &ev("before")).await.unwrap();
    let sub = eventmesh_client::SubscribeOptions::new("late", "late-t");
    ws.subscribe(sub).await.unwrap();
    ws.publish("late-t", &ev("after")).await.unwrap();
    let got = take_ws(&mut ws, 1).await.remove(0);
    // Subscribed from `latest`: only what came after the subscription.
    assert_eq!(id_of(&got), "after");
    ws.ack(&got.delivery_id).unwrap();
    ws.close().await;
}

#[tokio::test]
async fn sse_nack_redelivers_and_a_dropped_stream_hands_over_to_another_member() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.ack.timeout.ms=120000"]);
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let opts = |id: &str| StreamOptions::new(id).topic("sse-group").group("crew");
    let mut a = sdk.sse(opts("sse-a")).await.unwrap();
    sdk.publish("sse-group", &ev("n0")).await.unwrap();
    let first = take_sse(&mut a, 1).await.remove(0);
    a.nack(&first.delivery_id).await.unwrap();
    let again = take_sse(&mut a, 1).await.remove(0);
    assert_eq!(id_of(&again), "n0");
    assert_ne!(again.delivery_id, first.delivery_id);
    // `a` holds it unacked and goes away; `b` gets it at once.
    let mut b = sdk.sse(opts("sse-b")).await.unwrap();
    drop(a);
    let moved = take_sse(&mut b, 1).await.remove(0);
    assert_eq!(id_of(&moved), "n0");
    b.ack(&moved.delivery_id).await.unwrap();
}

#[tokio::test]
async fn open_streams_show_in_the_process_metrics_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let before = metrics(&c, &s).await;
    let (fds, tasks) = (
        before.get("process_open_fds"),
        before.get("eventmesh_tasks"),
    );
    assert!(before.get("process_resident_memory_bytes") > f64::from(1 << 20));
    assert!(tasks > 0.0, "{tasks}");
    const STREAMS: usize = 20;
    let mut open = Vec::new();
    for i in 0..STREAMS {
        let r = c
            .get(s.url(&format!("/events/stream?clientId=fd{i}&topic=fds")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        open.push(r);
    }
    let during = metrics(&c, &s).await;
    // A socket and a task (at least) for each stream.
    assert!(
        during.get("process_open_fds") >= fds + STREAMS as f64,
        "{fds} -> {}",
        during.get("process_open_fds")
    );
    assert!(
        during.get("eventmesh_tasks") >= tasks + STREAMS as f64,
        "{tasks} -> {}",
        during.get("eventmesh_tasks")
    );
    drop(open);
    // Closed: their sockets and tasks go.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let after = metrics(&c, &s).await;
        let back = after.get("process_open_fds") <= fds + 2.0
            && after.get("eventmesh_tasks") <= tasks + 2.0;
        if back {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "fds {fds} -> {}, tasks {tasks} -> {}",
            after.get("process_open_fds"),
            after.get("eventmesh_tasks")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
