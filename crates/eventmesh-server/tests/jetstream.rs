//! The event log on JetStream, with real processes: `eventmesh` binaries
//! against real `nats-server -js` (one, or a cluster of three), killed with
//! SIGKILL where the scenario says so.
//!
//! | scenario | test |
//! |---|---|
//! | publish and deliver through JetStream | [`publish_and_deliver_through_jetstream`] |
//! | unreachable servers at boot: exit 1 naming URL and cause | [`unreachable_nats_fails_the_boot`] |
//! | two instances share the log; B killed and restarted resumes after its commit | [`two_instances_share_one_log`] |
//! | NATS down: 503 `storage_unavailable` in time, health says so; back: resumes, no restart | [`nats_down_and_back`] |
//! | one of three NATS servers killed under load: no acknowledged publish lost | [`a_nats_server_killed_under_load_loses_no_acknowledged_publish`] |

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::*;
use eventmesh_jetstream::testutil::{free_port, NatsCluster, NatsServer};

fn js_settings(servers: &[String], replicas: usize, prefix: &str) -> Vec<String> {
    vec![
        "eventmesh.storage.type=jetstream".to_string(),
        format!("eventmesh.storage.jetstream.servers={}", servers.join(",")),
        format!("eventmesh.storage.jetstream.replicas={replicas}"),
        format!("eventmesh.storage.jetstream.stream.prefix={prefix}"),
        "eventmesh.storage.jetstream.timeout.ms=2000".to_string(),
    ]
}

fn start(dir: &std::path::Path, settings: &[String]) -> Server {
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    Server::start(dir, &refs)
}

fn event_id(d: &Value) -> String {
    d["event"]["id"].as_str().unwrap().to_string()
}

/// Publishes; the status and the answer.
async fn try_publish(c: &reqwest::Client, s: &Server, topic: &str, id: &str) -> (u16, Value) {
    let r = c
        .post(s.url(&format!("/events/publish?topic={topic}")))
        .header("content-type", "application/cloudevents+json")
        .body(serde_json::to_vec(&event(id)).unwrap())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls and acknowledges until `want` distinct events came or `within`
/// passed; every event id received, in order, duplicates included.
async fn drain(
    c: &reqwest::Client,
    s: &Server,
    client_id: &str,
    want: usize,
    within: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut distinct = BTreeSet::new();
    while distinct.len() < want && Instant::now() < deadline {
        for d in poll_n(c, s, client_id, 1, Duration::from_millis(500)).await {
            let id = event_id(&d);
            assert_eq!(ack(c, s, d["deliveryId"].as_str().unwrap()).await, 200);
            distinct.insert(id.clone());
            got.push(id);
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_deliver_through_jetstream() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &js_settings(&[nats.url()], 1, "EM1"));
    let c = client();
    assert_eq!(health(&c, &s).await["storage"], "jetstream");
    assert_eq!(health(&c, &s).await["storageStatus"], "UP");
    subscribe(&c, &s, json!({"clientId": "reader", "topic": "orders"})).await;
    let mut offsets = BTreeMap::new();
    for i in 0..20 {
        let answer = publish(&c, &s, "orders", &event(&format!("e{i}"))).await;
        let p = answer["partition"].as_u64().unwrap();
        let o = answer["offset"].as_u64().unwrap();
        // Offsets of one partition increase.
        if let Some(prev) = offsets.insert(p, o) {
            assert!(o > prev, "partition {p}: {o} after {prev}");
        }
    }
    let got = drain(&c, &s, "reader", 20, Duration::from_secs(20)).await;
    let want: BTreeSet<String> = (0..20).map(|i| format!("e{i}")).collect();
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(got.len(), 20, "each event once: {got:?}");
    assert!(caught_up(&c, &s, "orders", Duration::from_secs(10)).await);
    // The topic is a stream on the NATS server.
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    let names: Vec<&str> = topics.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["orders"]);
    let nc = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    let mut stream = js.get_stream("EM1_orders").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 20);
}

#[test]
fn unreachable_nats_fails_the_boot() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("nats://127.0.0.1:{}", free_port());
    let data = format!("eventmesh.data.dir={}", dir.path().display());
    let servers = format!("eventmesh.storage.jetstream.servers={url}");
    let started = Instant::now();
    let (status, err) = run_to_exit(
        &[
            "serve",
            "-D",
            "eventmesh.storage.type=jetstream",
            "-D",
            &servers,
            "-D",
            "eventmesh.storage.jetstream.timeout.ms=500",
            "-D",
            &data,
            "-D",
            "eventmesh.server.http.port=0",
            "-D",
            "eventmesh.server.admin.port=0",
            "-D",
            "eventmesh.server.tcp.port=0",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: cannot open the event log on {url}: cannot connect: "
        )),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_log() {
    let nats = NatsServer::start();
    let settings = js_settings(&[nats.url()], 1, "EM2");
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), &settings);
    let mut b = start(db.path(), &settings);
    let c = client();
    subscribe(&c, &b, json!({"clientId": "on-b", "topic": "shared"})).await;
    for i in 0..10 {
        publish(&c, &a, "shared", &event(&format!("s{i}"))).await;
    }
    // Published to A, delivered by B.
    let first = drain(&c, &b, "on-b", 10, Duration::from_secs(20)).await;
    assert_eq!(first.len(), 10, "{first:?}");
    assert!(caught_up(&c, &b, "shared", Duration::from_secs(10)).await);

    b.kill9();
    for i in 10..20 {
        publish(&c, &a, "shared", &event(&format!("s{i}"))).await;
    }
    let b = b.restart();
    // B resumes after its last committed offset: only what came since.
    let second = drain(&c, &b, "on-b", 10, Duration::from_secs(20)).await;
    let want: BTreeSet<String> = (10..20).map(|i| format!("s{i}")).collect();
    assert_eq!(second.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(second.len(), 10, "{second:?}");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_down_and_back() {
    let mut nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &js_settings(&[nats.url()], 1, "EM3"));
    let c = client();
    subscribe(&c, &s, json!({"clientId": "patient", "topic": "flaky"})).await;
    for i in 0..5 {
        publish(&c, &s, "flaky", &event(&format!("before{i}"))).await;
    }
    let before = drain(&c, &s, "patient", 5, Duration::from_secs(20)).await;
    assert_eq!(before.len(), 5);
    assert!(caught_up(&c, &s, "flaky", Duration::from_secs(10)).await);

    nats.kill();
    // Health reports the log unreachable once the client noticed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut h = health(&c, &s).await;
    while h["storageStatus"] != "DOWN" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        h = health(&c, &s).await;
    }
    assert_eq!(h["storageStatus"], "DOWN", "{h}");
    assert_eq!(h["status"], "UP", "liveness is unchanged: {h}");
    // Not ready for traffic meanwhile.
    assert_eq!(
        ready(&c, &s).await,
        (503, checks(&[("lifecycle", true), ("storage", false)]))
    );
    // A publish is refused within the timeout (2 s), never hangs.
    let mut refused = Vec::new();
    for i in 0..3 {
        let id = format!("down{i}");
        let started = Instant::now();
        let (status, body) = try_publish(&c, &s, "flaky", &id).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"], "storage_unavailable", "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        refused.push(id);
    }

    nats.restart();
    nats.wait_ready(Duration::from_secs(20));
    // Publishing resumes by itself (the client reconnects).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut accepted = Vec::new();
    while accepted.len() < 5 {
        assert!(Instant::now() < deadline, "publishing did not resume");
        let id = format!("after{}", accepted.len());
        if try_publish(&c, &s, "flaky", &id).await.0 == 202 {
            accepted.push(id);
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while health(&c, &s).await["storageStatus"] != "UP" {
        assert!(Instant::now() < deadline, "health did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let up = (200, checks(&[("lifecycle", true), ("storage", true)]));
    assert_eq!(
        ready_reaching(&c, &s, &up, Duration::from_secs(10)).await,
        up
    );
    // Deliveries resume: every accepted event comes, once; nothing acked
    // before comes again. A refused publish may have been stored (the
    // client sent it when NATS came back): then it comes too, once.
    // Refused publishes that were stored come in any order among them, so
    // deliveries are taken until every accepted one has come.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = Vec::new();
    while !accepted.iter().all(|id| after.contains(id)) {
        assert!(
            Instant::now() < deadline,
            "not every accepted event came: {after:?}"
        );
        after.extend(drain(&c, &s, "patient", 1, Duration::from_secs(1)).await);
    }
    let got: BTreeSet<String> = after.iter().cloned().collect();
    assert_eq!(got.len(), after.len(), "delivered twice: {after:?}");
    for id in &accepted {
        assert!(got.contains(id), "{id} lost: {after:?}");
    }
    for id in &got {
        assert!(
            accepted.contains(id) || refused.contains(id),
            "{id} delivered again: {after:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_killed_under_load_loses_no_acknowledged_publish() {
    let mut cluster = NatsCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path(), &js_settings(&cluster.urls(), 3, "EM4"));
    let c = client();
    subscribe(&c, &s, json!({"clientId": "tally", "topic": "ledger"})).await;
    // A topic on three servers exists once its stream has a leader and the
    // server this runtime publishes through routes publishes to it; a
    // loaded host may still see the new stream elect a leader again, when
    // a publish is refused (503, stored nowhere) and asked again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = try_publish(&c, &s, "ledger", "warm").await;
        match status {
            202 => break,
            503 if body["error"] == "storage_unavailable" => {
                assert!(
                    Instant::now() < deadline,
                    "the new stream took no publish: {body}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("the first publish: {other} {body}"),
        }
    }
    // The stream's leader is the server to kill.
    let nc = async_nats::connect(cluster.servers[0].url()).await.unwrap();
    let js = async_nats::jetstream::new(nc);
    // A loaded machine may let one request time out: asked again.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let info = match js.get_stream("EM4_ledger").await {
            Ok(mut stream) => stream.info().await.cloned().ok(),
            Err(_) => None,
        };
        if let Some(leader) = info.and_then(|i| i.cluster).and_then(|cl| cl.leader) {
            break leader;
        }
        assert!(Instant::now() < deadline, "the stream has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(js);

    let mut accepted = vec!["warm".to_string()];
    let mut refused = 0;
    let mut after_kill = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    // 100 publishes, the leader killed, then until 200 more are accepted.
    while after_kill < 200 {
        assert!(
            Instant::now() < deadline,
            "publishing did not resume after the election: {after_kill} accepted, {refused} refused"
        );
        if i == 100 {
            let victim = cluster
                .servers
                .iter_mut()
                .find(|n| n.name == leader)
                .expect("the leader is one of ours");
            victim.kill();
        }
        let id = format!("l{i}");
        let (status, body) = try_publish(&c, &s, "ledger", &id).await;
        match status {
            202 => {
                accepted.push(id);
                if i >= 100 {
                    after_kill += 1;
                }
            }
            503 => {
                assert_eq!(body["error"], "storage_unavailable", "{body}");
                refused += 1;
                // No leader yet: the election takes a moment.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("publish {id}: {other} {body}"),
        }
        i += 1;
    }
    // Every acknowledged publish is delivered.
    let got = drain(&c, &s, "tally", accepted.len(), Duration::from_secs(60)).await;
    let got: BTreeSet<String> = got.into_iter().collect();
    let lost: Vec<&String> = accepted.iter().filter(|id| !got.contains(*id)).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
}
