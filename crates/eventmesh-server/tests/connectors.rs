//! The connector runtime on one instance, end to end against the real
//! binary: the admin API (kinds, create with validation, status, pause,
//! resume, update, delete), the file source and sink, the HTTP source with
//! its signature check, the gate as the connector's principal, and kill -9
//! in the middle of a source's and of a sink's stream.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use common::connectors::{
    create, drain, get, ids_in, reader, stored, stored_reaching, wait_status,
};
use common::topics::admin;
use common::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn append_lines(path: &std::path::Path, from: usize, to: usize) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for n in from..to {
        writeln!(f, "{}", json!({"n": n})).unwrap();
    }
    f.sync_all().unwrap();
}

#[tokio::test]
async fn kinds_are_listed_with_the_json_schema_of_their_config() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (code, kinds) = admin(&c, &s, reqwest::Method::GET, "/admin/connector-kinds", None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = kinds
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "file-sink",
            "file-source",
            "http-source",
            "mesh-link",
            "mesh-pull",
            "mqtt-sink",
            "mqtt-source",
            "nats-sink",
            "nats-source",
            "postgres-sink",
            "postgres-source",
            "redis-sink",
            "redis-source"
        ]
    );
    let file = kinds
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "file-source")
        .unwrap();
    assert_eq!(file["role"], "source");
    assert_eq!(file["schema"]["required"], json!(["path"]));
    assert_eq!(file["schema"]["properties"]["path"]["type"], "string");
    assert_eq!(
        file["schema"]["properties"]["poll_ms"]["default"],
        json!(200)
    );
}

#[tokio::test]
async fn definitions_are_checked_and_managed_through_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let lines = dir.path().join("in.jsonl");
    let bad = |body: Value, message: &'static str| {
        let (c, s) = (&c, &s);
        async move {
            let (code, v) = create(c, s, body).await;
            assert_eq!(code, 400, "{v}");
            assert_eq!(v, json!({"error": "invalid_connector", "message": message}));
        }
    };
    bad(
        json!({"name": "in", "kind": "file-source", "config": {}, "topic": "lines"}),
        "config: missing field `path`",
    )
    .await;
    bad(
        json!({"name": "in", "kind": "file-source", "config": {"path": "/x", "poll_ms": 0}, "topic": "lines"}),
        "config: poll_ms 0 must be 1..=60000",
    )
    .await;
    bad(
        json!({"name": "in", "kind": "file-source", "config": {"path": "/x"}}),
        "topic: missing",
    )
    .await;
    bad(
        json!({"name": "no/slash", "kind": "file-source", "config": {"path": "/x"}, "topic": "t"}),
        "name: \"no/slash\" must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)",
    )
    .await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "in", "kind": "ftp-source", "topic": "t"}),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("invalid_connector"))
    );
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "in", "kind": "file-source", "topic": "t", "extra": 1}),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("invalid_request")),
        "{v}"
    );

    let def = json!({"name": "in", "kind": "file-source",
        "config": {"path": lines.display().to_string()}, "topic": "lines"});
    let (code, v) = create(&c, &s, def.clone()).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["principal"], "connector:in");
    assert_eq!(v["generation"], 1);
    let (code, v) = create(&c, &s, def).await;
    assert_eq!((code, v["error"].as_str()), (409, Some("connector_exists")));

    let v = wait_status(&c, &s, "in", WAIT, |v| v["status"]["state"] == "running").await;
    assert_eq!(v["status"]["state"], "running", "{v}");
    assert_eq!(v["status"]["instance"], "local");

    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/connectors/in/pause",
        None,
    )
    .await;
    assert_eq!((code, &v["status"]["state"]), (200, &json!("paused")));
    assert_eq!(v["generation"], 2);
    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/connectors/in/resume",
        None,
    )
    .await;
    assert_eq!((code, v["paused"].as_bool()), (200, Some(false)));
    let v = wait_status(&c, &s, "in", WAIT, |v| {
        v["status"]["state"] == "running" && v["generation"] == 3
    })
    .await;
    assert_eq!(v["status"]["state"], "running", "{v}");

    // A kind cannot change; the rest can.
    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::PUT,
        "/admin/connectors/in",
        Some(json!({"kind": "file-sink", "config": {"path": "/tmp/x"}, "topic": "lines"})),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "kind: file-source cannot become file-sink; delete and create it"
    );
    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::PUT,
        "/admin/connectors/in",
        Some(json!({"kind": "file-source", "config": {"path": lines.display().to_string(), "type": "line.v2"}, "topic": "lines2"})),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["topic"].as_str(), v["generation"].as_u64()),
        (Some("lines2"), Some(4))
    );

    let (code, list) = admin(&c, &s, reqwest::Method::GET, "/admin/connectors", None).await;
    assert_eq!(code, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);

    let (code, _) = admin(
        &c,
        &s,
        reqwest::Method::DELETE,
        "/admin/connectors/in",
        None,
    )
    .await;
    assert_eq!(code, 204);
    let (code, v) = get(&c, &s, "in").await;
    assert_eq!(
        v,
        json!({"error": "unknown_connector", "message": "no connector named in"})
    );
    assert_eq!(code, 404);
    // Admin routes need the admin token.
    let r = c
        .get(s.admin_url("/admin/connectors"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn a_file_source_publishes_each_line_and_follows_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.connector.offset.store=rocksdb"]);
    let c = client();
    let path = dir.path().join("app.jsonl");
    append_lines(&path, 0, 3);
    reader(&c, &s, "r", "lines").await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "tail", "kind": "file-source",
            "config": {"path": path.display().to_string(), "poll_ms": 20}, "topic": "lines"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let got = drain(&c, &s, "r", 3, WAIT).await;
    assert_eq!(got.len(), 3);
    let datas: BTreeSet<i64> = got
        .values()
        .map(|(e, _)| e["data"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(datas, BTreeSet::from([0, 1, 2]));
    let (ev, _) = got.values().next().unwrap();
    assert_eq!(ev["source"], "/connectors/tail");
    assert_eq!(ev["type"], "file.line");
    // Rotation: the old file gets one more line, moves away, and a new
    // file starts; both are read, the old one first.
    append_lines(&path, 3, 4);
    std::fs::rename(&path, dir.path().join("app.jsonl.1")).unwrap();
    append_lines(&path, 4, 6);
    let got = drain(&c, &s, "r", 3, WAIT).await;
    let datas: BTreeSet<i64> = got
        .values()
        .map(|(e, _)| e["data"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(datas, BTreeSet::from([3, 4, 5]));
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    let v = wait_status(&c, &s, "tail", WAIT, |v| v["status"]["events"] == 6).await;
    assert_eq!(v["status"]["events"], 6, "{v}");
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        v["status"]["position"],
        json!({"file": ino, "offset": size})
    );
    assert_eq!(stored(&c, &s, "lines").await, 6);
}

#[tokio::test]
async fn a_file_sink_appends_each_event_as_a_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let out = dir.path().join("out.jsonl");
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "archive", "kind": "file-sink",
            "config": {"path": out.display().to_string()}, "topic": "orders"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    wait_status(&c, &s, "archive", WAIT, |v| {
        v["status"]["state"] == "running"
    })
    .await;
    // One partition key: the sink keeps the order of a partition, not
    // across partitions.
    for n in 0..5 {
        let mut e = event(&format!("o{n}"));
        e["partitionkey"] = json!("one");
        publish(&c, &s, "orders", &e).await;
    }
    let v = wait_status(&c, &s, "archive", WAIT, |v| v["status"]["events"] == 5).await;
    assert_eq!(v["status"]["events"], 5, "{v}");
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["o0", "o1", "o2", "o3", "o4"]);
    assert_eq!(lines[2]["data"], json!({"n": "o2"}));
    assert_eq!(lines[2]["source"], "/tests");
    // The sink's group committed everything, and its status says so.
    assert!(committed_reaches(&c, &s, "orders", 5, WAIT).await);
    let v = wait_status(&c, &s, "archive", WAIT, |v| v["status"]["lag"] == 0).await;
    assert_eq!(v["status"]["lag"], 0, "{v}");
}

#[tokio::test]
async fn a_sink_with_filters_writes_only_what_they_match() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let out = dir.path().join("kept.jsonl");
    // A malformed filter, and filters on a source, are refused.
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "kept", "kind": "file-sink", "config": {"path": out.display().to_string()},
            "topic": "orders", "filters": [{"sql": "subject ="}]}),
    )
    .await;
    assert_eq!(
        (code, v["error"].as_str()),
        (400, Some("invalid_connector")),
        "{v}"
    );
    let message = v["message"].as_str().unwrap();
    assert!(message.starts_with("filters[0].sql"), "{message}");
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "src", "kind": "file-source", "config": {"path": "/x"},
            "topic": "orders", "filters": [{"exact": {"type": "a"}}]}),
    )
    .await;
    assert_eq!(
        (code, v["message"].as_str()),
        (400, Some("filters: only a sink's subscription has filters")),
        "{v}"
    );

    let (code, v) = create(
        &c,
        &s,
        json!({"name": "kept", "kind": "file-sink", "config": {"path": out.display().to_string()},
            "subscription": {"topic": "orders", "filters": [{"exact": {"subject": "keep"}}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["filters"], json!([{"exact": {"subject": "keep"}}]));
    wait_status(&c, &s, "kept", WAIT, |v| v["status"]["state"] == "running").await;
    for n in 0..6 {
        let mut e = event(&format!("o{n}"));
        e["subject"] = json!(if n % 2 == 0 { "keep" } else { "skip" });
        publish(&c, &s, "orders", &e).await;
    }
    let v = wait_status(&c, &s, "kept", WAIT, |v| v["status"]["events"] == 3).await;
    assert_eq!(v["status"]["events"], 3, "{v}");
    assert!(committed_reaches(&c, &s, "orders", 6, WAIT).await);
    let text = std::fs::read_to_string(&out).unwrap();
    let ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // Order holds within a partition, not across the topic's four.
    let mut ids = ids;
    ids.sort();
    assert_eq!(ids, ["o0", "o2", "o4"]);
}

fn sign(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

#[tokio::test]
async fn an_http_source_takes_signed_posts_and_deduplicates_retries() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "hooks", "kind": "http-source", "topic": "payments",
            "config": {"signature": {"scheme": "body", "secret": "s3cret", "header": "x-hub-signature-256", "prefix": "sha256="},
                       "type": "payment.received"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["config"]["signature"]["secret"], "***");
    assert_eq!(v["status"]["state"], "running");
    reader(&c, &s, "r", "payments").await;
    let body = br#"{"amount":42}"#;
    let url = s.url("/connectors/hooks/events");
    // Unsigned and wrongly signed: refused.
    let r = c
        .post(&url)
        .header("content-type", "application/json")
        .body(&body[..])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"error": "invalid_signature", "message": "no x-hub-signature-256 header"})
    );
    let r = c
        .post(&url)
        .header("content-type", "application/json")
        .header("x-hub-signature-256", sign("other", body))
        .body(&body[..])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Signed, twice with the same idempotency key: stored once.
    let mut answers = Vec::new();
    for _ in 0..2 {
        let r = c
            .post(&url)
            .header("content-type", "application/json")
            .header("x-hub-signature-256", sign("s3cret", body))
            .header("idempotency-key", "pay-1")
            .body(&body[..])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        answers.push(r.json::<Value>().await.unwrap());
    }
    assert_eq!(answers[0]["offset"], answers[1]["offset"]);
    assert_eq!(answers[1]["duplicate"], true);
    let got = drain(&c, &s, "r", 1, WAIT).await;
    let (ev, n) = &got["pay-1"];
    assert_eq!(*n, 1);
    assert_eq!(ev["type"], "payment.received");
    assert_eq!(ev["source"], "/connectors/hooks");
    assert_eq!(ev["data"], json!({"amount": 42}));
    // An unknown connector, and a paused one.
    let r = c
        .post(s.url("/connectors/nope/events"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    admin(
        &c,
        &s,
        reqwest::Method::POST,
        "/admin/connectors/hooks/pause",
        None,
    )
    .await;
    assert!(
        wait_until_async(|| async {
            let r = c
                .post(&url)
                .header("x-hub-signature-256", sign("s3cret", b"x"))
                .body("x")
                .send()
                .await
                .unwrap();
            r.status() == 503
        })
        .await
    );
}

/// Waits until an async condition holds (30 s at most).
async fn wait_until_async<F, Fut>(mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn a_source_killed_mid_stream_resumes_after_its_last_durable_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.connector.offset.store=rocksdb"]);
    let c = client();
    let path = dir.path().join("big.jsonl");
    const N: usize = 100_000;
    append_lines(&path, 0, N);
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "bulk", "kind": "file-source",
            "config": {"path": path.display().to_string(), "batch": 50}, "topic": "bulk"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // Killed once some, not all, are in the log.
    let before = stored_reaching(&c, &s, "bulk", 2_000).await;
    s.kill9();
    assert!(
        before < N as u64,
        "all {N} were in before the kill: make the file bigger"
    );
    let s = s.restart();
    let v = wait_status(&c, &s, "bulk", Duration::from_secs(120), |v| {
        v["status"]["position"]["offset"].as_u64() == Some(std::fs::metadata(&path).unwrap().len())
    })
    .await;
    assert_eq!(
        v["status"]["position"]["offset"].as_u64(),
        Some(std::fs::metadata(&path).unwrap().len()),
        "{v}"
    );
    // Every line is in the log exactly once: the re-read ones were
    // dropped as duplicates.
    assert_eq!(stored(&c, &s, "bulk").await, N as u64);
}

#[tokio::test]
async fn a_sink_killed_mid_stream_writes_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    let out = dir.path().join("out.jsonl");
    const N: usize = 5_000;
    common::topics::publish_range(&c, &s, "feed", 0, N).await;
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "dump", "kind": "file-sink",
            "config": {"path": out.display().to_string()}, "topic": "feed"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    wait_status(&c, &s, "dump", WAIT, |v| {
        v["status"]["events"].as_u64() >= Some(200)
    })
    .await;
    s.kill9();
    let s = s.restart();
    assert!(committed_reaches(&c, &s, "feed", N as u64, Duration::from_secs(120)).await);
    let (ids, _) = ids_in(&out);
    assert_eq!(ids.len(), N, "every event reached the file");
    let expected: BTreeSet<String> = (0..N).map(|n| format!("e{n}")).collect();
    assert_eq!(ids, expected);
}

/// Under a fail-closed gate a connector is created only when its own
/// principal may act as a connector on its topic (`CONNECTOR`), and its
/// events are published under that principal: a connector allowed to be
/// created but not to publish stays failed with the gate's answer.
#[tokio::test]
async fn the_gate_checks_a_connector_as_its_own_principal() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("acl");
    std::fs::write(
        &acl,
        "allow connector:in CONNECTOR lines\nallow connector:in PUBLISH lines\n\
         allow mute CONNECTOR lines\n",
    )
    .unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.security.gate.failClosed=true",
            &format!("eventmesh.security.gate.acl.file={}", acl.display()),
        ],
    );
    let c = client();
    let path = dir.path().join("in.jsonl");
    append_lines(&path, 0, 2);
    let def = |name: &str, principal: Option<&str>, topic: &str| {
        let mut d = json!({"name": name, "kind": "file-source", "topic": topic,
            "config": {"path": path.display().to_string()}});
        if let Some(p) = principal {
            d["principal"] = json!(p);
        }
        d
    };
    // Another principal, or another topic: refused, nothing stored.
    for body in [
        def("other", None, "lines"),
        def("in2", Some("connector:in"), "secret"),
    ] {
        let (code, v) = create(&c, &s, body).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (403, Some("acl_denied")),
            "{v}"
        );
    }
    let (_, list) = admin(&c, &s, reqwest::Method::GET, "/admin/connectors", None).await;
    assert_eq!(list, json!([]));
    // Allowed: it publishes as itself.
    let (code, v) = create(&c, &s, def("in", None, "lines")).await;
    assert_eq!(code, 201, "{v}");
    let v = wait_status(&c, &s, "in", WAIT, |v| v["status"]["events"] == 2).await;
    assert_eq!(v["status"]["events"], 2, "{v}");
    assert_eq!(stored(&c, &s, "lines").await, 2);
    // May be created, may not publish: failed, with the gate's reason.
    let (code, v) = create(&c, &s, def("quiet", Some("mute"), "lines")).await;
    assert_eq!(code, 201, "{v}");
    let v = wait_status(&c, &s, "quiet", WAIT, |v| v["status"]["state"] == "failed").await;
    assert_eq!(v["status"]["state"], "failed", "{v}");
    assert!(
        v["status"]["lastError"]
            .as_str()
            .unwrap()
            .starts_with("publish refused (acl_denied)"),
        "{v}"
    );
    assert_eq!(stored(&c, &s, "lines").await, 2);
}
