//! The TCP port's own threads: connections spread over them, requests
//! crossing between them, their tasks counted in `eventmesh_tasks` and
//! their connections in `eventmesh_tcp_thread_connections`.

use std::time::Duration;

use eventmesh_core::tcp_frame::{Frame, FrameType};
use serde_json::json;

use super::common::{client, metric_reaching, metrics};
use super::{asker_and_responder, next_request, start_tcp, Conn};

/// Each thread's series of `eventmesh_tcp_thread_connections`.
const THREADS: [&str; 2] = [
    r#"eventmesh_tcp_thread_connections{thread="0"}"#,
    r#"eventmesh_tcp_thread_connections{thread="1"}"#,
];

/// With two connection threads, the responder's connection and the
/// asker's are served on different ones: requests and replies cross
/// between them, on a memory topic (handed over by the publisher) and on
/// a topic on disk.
#[tokio::test]
async fn requests_cross_between_connection_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (s, port) = start_tcp(dir.path(), &["eventmesh.server.tcp.threads=2"]);
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", s.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .filter(|c| c.starts_with("eventmesh-tcp-"))
        .collect();
    names.sort();
    assert_eq!(names, ["eventmesh-tcp-0", "eventmesh-tcp-1"]);
    // The connections' tasks, on those threads, are counted with the rest.
    let c = client();
    let tasks = metrics(&c, &s).await.get("eventmesh_tasks");
    let mut open = Vec::new();
    for i in 0..8 {
        let mut conn = Conn::open(port).await;
        let hello = format!(r#"{{"clientId":"counted{i}"}}"#);
        let ok = conn
            .call(Frame::new(FrameType::Hello, 1, hello.into_bytes()))
            .await;
        assert_eq!(ok.kind, FrameType::HelloOk);
        open.push(conn);
    }
    let during = metrics(&c, &s).await;
    let more = during.get("eventmesh_tasks");
    assert!(more >= tasks + 8.0, "{tasks} -> {more}");
    // Each went to the thread serving fewer: four on each.
    for thread in THREADS {
        assert_eq!(during.get(thread), 4.0, "{thread}");
    }
    drop(open);
    for thread in THREADS {
        let left = metric_reaching(&c, &s, thread, 0.0, Duration::from_secs(10)).await;
        assert_eq!(left, 0.0, "{thread}");
    }
    // The first connection goes to one thread, the second to the other.
    let (mut responder, asker) = asker_and_responder(&s, port, "memory").await;
    for topic in ["asks", "asks-on-disk"] {
        if topic != "asks" {
            responder
                .subscribe(
                    eventmesh_client::SubscribeOptions::new("responder", topic).group("answering"),
                )
                .await
                .unwrap();
        }
        for i in 0..20 {
            let ask = eventmesh_client::json_event("q", "/t", json!({ "i": i }));
            let (reply, ()) =
                tokio::join!(asker.request(topic, &ask, Duration::from_secs(10)), async {
                    let d = next_request(&mut responder).await;
                    let answer = eventmesh_client::json_event(
                        "a",
                        "/t",
                        json!({ "twice": 2 * d.event["data"]["i"].as_i64().unwrap() }),
                    );
                    responder.reply_to(&d, &answer).await.unwrap();
                    responder.ack(&d.delivery_id).await.unwrap();
                });
            assert_eq!(
                reply.unwrap()["data"],
                json!({ "twice": 2 * i }),
                "{topic} #{i}"
            );
        }
    }
}
