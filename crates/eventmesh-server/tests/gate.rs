//! The security gate in front of the traffic routes, through the real
//! binary: credentials (static tokens and JWTs), ACL, a malformed ACL,
//! quotas, request signatures, both modes, audit, and the webhook SSRF
//! guard. A denied publish leaves the log as it was.

mod common;
#[path = "gate/door.rs"]
mod door;
#[path = "gate/holes.rs"]
mod holes;
#[path = "gate/reload.rs"]
mod reload;
#[path = "gate/transports.rs"]
mod transports;

use common::gate::{setting, start_closed, start_permissive, GateFiles};
use common::*;
use serde_json::{json, Value};

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";
/// A third tenant's principal.
const CAROL: &str = "carol-token";
/// A principal named like ALICE's, in another tenant.
const ALICE_GLOBEX: &str = "alice-globex-token";

/// The gate files of these tests: a token file with the four principals
/// above, in three tenants.
fn gate_files() -> GateFiles {
    GateFiles::new(&format!(
        "{ALICE} acme alice publisher\n{BOB} globex bob\n{CAROL} initech carol\n\
         {ALICE_GLOBEX} globex alice\n"
    ))
}

/// A fail-closed gate with the token file and an ACL file holding `acl`:
/// the files (rewrite them to change the gate) and the server.
fn start_with_acl(acl: &str) -> (GateFiles, Server) {
    let files = gate_files();
    let s = start_closed(&files, &[files.acl(acl)]);
    (files, s)
}

fn ev(id: &str) -> Vec<u8> {
    serde_json::to_vec(&event(id)).unwrap()
}

async fn publish_as(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    token: Option<&str>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // An id of its own: the same one twice would be stored once.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    call(
        c,
        reqwest::Method::POST,
        s.url(&format!("/events/publish?topic={topic}")),
        token,
        "application/cloudevents+json",
        ev(&format!("g{n}")),
        &[],
    )
    .await
}

async fn end_offsets(c: &reqwest::Client, s: &Server) -> Value {
    let topics: Vec<Value> = admin_json(c, s, "/admin/topics").await;
    Value::Array(topics)
}

async fn denied_metric(c: &reqwest::Client, s: &Server, reason: &str) -> f64 {
    let series = format!("eventmesh_gate_denied_total{{reason=\"{reason}\"}}");
    counter(c, s, &series).await
}

/// Every traffic route: (method, path, content type, body).
fn routes() -> Vec<(reqwest::Method, String, &'static str, Vec<u8>)> {
    use reqwest::Method;
    let batch = serde_json::to_vec(&json!([event("b1")])).unwrap();
    let j = |v: Value| serde_json::to_vec(&v).unwrap();
    vec![
        (
            Method::POST,
            "/events/publish?topic=orders.eu".into(),
            "application/cloudevents+json",
            ev("r1"),
        ),
        (
            Method::POST,
            "/events/publish-batch?topic=orders.eu".into(),
            "application/cloudevents-batch+json",
            batch,
        ),
        (
            Method::POST,
            "/events/subscribe".into(),
            "application/json",
            j(json!({"clientId": "c1", "topic": "orders.eu"})),
        ),
        (
            Method::GET,
            "/events/poll?clientId=c1&timeoutMs=10".into(),
            "application/json",
            Vec::new(),
        ),
        (
            Method::POST,
            "/events/ack".into(),
            "application/json",
            j(json!({"deliveryId": "x-1-1"})),
        ),
        (
            Method::POST,
            "/events/nack".into(),
            "application/json",
            j(json!({"deliveryId": "x-1-1"})),
        ),
        (
            Method::POST,
            "/events/unsubscribe".into(),
            "application/json",
            j(json!({"clientId": "c1"})),
        ),
        (
            Method::POST,
            "/subscriptions".into(),
            "application/json",
            j(
                json!({"source": "orders.eu", "sink": "http://127.0.0.1:9/hook", "protocol": "HTTP"}),
            ),
        ),
        (
            Method::GET,
            "/subscriptions".into(),
            "application/json",
            Vec::new(),
        ),
        (
            Method::GET,
            "/subscriptions/x".into(),
            "application/json",
            Vec::new(),
        ),
        (
            Method::DELETE,
            "/subscriptions/x".into(),
            "application/json",
            Vec::new(),
        ),
    ]
}

#[tokio::test]
async fn without_gate_keys_the_gate_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    assert_eq!(publish_as(&c, &s, "open", None).await.0, 202);
    assert!(
        s.log_text().contains("security gate off"),
        "{}",
        s.log_text()
    );
}

#[tokio::test]
async fn fail_closed_every_route_needs_a_valid_credential() {
    let files = gate_files();
    let s = start_closed(&files, &[]);
    let c = client();
    publish_as(&c, &s, "orders.eu", Some(ALICE)).await;
    let before = end_offsets(&c, &s).await;
    for (method, path, ct, body) in routes() {
        for (token, reason) in [
            (None, "missing_credential"),
            (Some("forged"), "invalid_token"),
        ] {
            let (st, v, h) = call(
                &c,
                method.clone(),
                s.url(&path),
                token,
                ct,
                body.clone(),
                &[],
            )
            .await;
            assert_eq!(
                (st, v["error"].as_str()),
                (401, Some(reason)),
                "{path}: {v}"
            );
            assert_eq!(h["www-authenticate"], "Bearer", "{path}");
        }
    }
    // Nothing denied reached the log.
    assert_eq!(end_offsets(&c, &s).await, before);
    assert!(admin_json::<Vec<Value>>(&c, &s, "/admin/subscriptions")
        .await
        .is_empty());
    // With a valid token every route works as without a gate.
    let expected = [202, 202, 200, 200, 404, 404, 200, 201, 200, 404, 404];
    for ((method, path, ct, body), want) in routes().into_iter().zip(expected) {
        let (st, v, _) = call(&c, method, s.url(&path), Some(ALICE), ct, body, &[]).await;
        assert_eq!(st, want, "{path}: {v}");
    }
    assert_eq!(denied_metric(&c, &s, "missing_credential").await, 11.0);
    assert_eq!(denied_metric(&c, &s, "invalid_token").await, 11.0);
}

/// The streaming and request/reply routes under a fail-closed gate, one
/// cell per credential: none, a forged token, the creator, another tenant,
/// and a principal the ACL denies. Each cell is an exact status and code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_sse_request_and_reply_answer_each_credential() {
    use reqwest::Method;
    let (_files, s) = start_with_acl("allow * * *\ndeny carol * *\n");
    let c = client();
    let sub = |client: &str, topic: &str| json!({"clientId": client, "topic": topic});
    // alice holds the client the stream is opened for, and the responder
    // the pending request went to.
    for (client, topic) in [("alices", "orders.eu"), ("pricer", "prices")] {
        let (st, v) = post_json_as(&c, &s, "/events/subscribe", ALICE, sub(client, topic)).await;
        assert_eq!(st, 200, "{v}");
    }
    let waiting = tokio::spawn({
        let (c, url) = (
            c.clone(),
            s.url("/events/request?topic=prices&timeoutMs=20000"),
        );
        async move {
            let r = c
                .post(url)
                .bearer_auth(BOB)
                .header("content-type", "application/cloudevents+json")
                .body(ev("ask"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let request = loop {
        let (st, v, _) = call(
            &c,
            Method::GET,
            s.url("/events/poll?clientId=pricer&timeoutMs=500"),
            Some(ALICE),
            "application/json",
            Vec::new(),
            &[],
        )
        .await;
        assert_eq!(st, 200, "{v}");
        if let Some(d) = v.as_array().and_then(|a| a.first()) {
            break d["event"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the request did not reach the responder"
        );
    };
    let correlation = request["correlationid"].as_str().expect("a correlationid");
    let reply = serde_json::to_vec(&json!({"specversion": "1.0", "id": "answer",
        "source": "/pricer", "type": "reply", "correlationid": correlation, "data": 7}))
    .unwrap();
    let before = end_offsets(&c, &s).await;

    let none = (401, "missing_credential");
    let forged = (401, "invalid_token");
    let acl = (403, "acl_denied");
    // (route, method, path, content type, body, cells for
    // [none, forged, bob, carol, alice]; 0 and "" for a success).
    let table = [
        (
            "stream",
            Method::GET,
            "/events/stream?clientId=alices".to_string(),
            "application/json",
            Vec::new(),
            [none, forged, (403, "not_owner"), acl, (200, "")],
        ),
        (
            "request",
            Method::POST,
            // No one consumes this topic: a request the gate lets in
            // waits its time out.
            "/events/request?topic=asks&timeoutMs=200".to_string(),
            "application/cloudevents+json",
            ev("q1"),
            [
                none,
                forged,
                (408, "request_timeout"),
                acl,
                (408, "request_timeout"),
            ],
        ),
        (
            "reply",
            Method::POST,
            "/events/reply".to_string(),
            "application/cloudevents+json",
            reply,
            // alice last: her answer completes the request. A reply the
            // ACL refuses looks like one to no request (no oracle); the
            // gate still counts it as `acl_denied`.
            [
                none,
                forged,
                (404, "unknown_correlation"),
                (404, "unknown_correlation"),
                (200, ""),
            ],
        ),
    ];
    let credentials = [None, Some("forged"), Some(BOB), Some(CAROL), Some(ALICE)];
    for (route, method, path, ct, body, cells) in table {
        for (token, (want_status, want_code)) in credentials.into_iter().zip(cells) {
            let mut r = c
                .request(method.clone(), s.url(&path))
                .header("content-type", ct);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            let resp = r.body(body.clone()).send().await.unwrap();
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            if route == "stream" && status == 200 {
                // The stream is open: its headers are all there is to see.
                assert_eq!(headers["content-type"], "text/event-stream", "{token:?}");
                drop(resp);
                continue;
            }
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            let got = (status, v["error"].as_str().unwrap_or(""));
            assert_eq!(got, (want_status, want_code), "{route} {token:?}: {v}");
            if want_status == 401 {
                assert_eq!(headers["www-authenticate"], "Bearer", "{route} {token:?}");
            }
            if route == "reply" && status == 200 {
                assert_eq!(v, json!({"status": "delivered"}));
            }
        }
    }
    // The requester got alice's answer, and only it.
    let (st, answer) = waiting.await.unwrap();
    assert_eq!((st, &answer["id"]), (200, &json!("answer")), "{answer}");
    // Only the requests the gate let in reached the log: the two carry the
    // same event (source and id), stored once.
    assert!(
        before
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != "asks"),
        "{before}"
    );
    let after = end_offsets(&c, &s).await;
    let asks: u64 = after
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "asks")
        .flat_map(|t| t["endOffsets"].as_array().unwrap().clone())
        .map(|o| o.as_u64().unwrap())
        .sum();
    assert_eq!(asks, 1, "{after}");
    let others: Vec<&Value> = after
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] != "asks")
        .collect();
    assert_eq!(
        Value::from(others.into_iter().cloned().collect::<Vec<_>>()),
        before
    );
    for (reason, n) in [
        ("missing_credential", 3.0),
        ("invalid_token", 3.0),
        ("acl_denied", 3.0),
        ("not_owner", 1.0),
        ("unknown_correlation", 1.0),
    ] {
        assert_eq!(denied_metric(&c, &s, reason).await, n, "{reason}");
    }
}

#[tokio::test]
async fn permissive_mode_counts_and_audits_but_lets_every_route_through() {
    let files = gate_files();
    let s = start_permissive(&files, &[files.audit_file()]);
    let c = client();
    let expected = [202, 202, 200, 200, 404, 404, 200, 201, 200, 404, 404];
    for ((method, path, ct, body), want) in routes().into_iter().zip(expected) {
        let (st, v, _) = call(&c, method, s.url(&path), None, ct, body, &[]).await;
        assert_eq!(st, want, "{path}: {v}");
    }
    assert_eq!(denied_metric(&c, &s, "missing_credential").await, 11.0);
    assert!(s.log_text().contains("permissive mode"), "{}", s.log_text());
    let lines = files.audit();
    assert_eq!(lines.len(), 11);
    assert!(lines
        .iter()
        .all(|l| l["verdict"] == "allow_permissive" && l["reason"] == "missing_credential"));
    assert_eq!(lines[0]["operation"], "PUBLISH");
    assert_eq!(lines[0]["topic"], "orders.eu");
    assert!(lines[0]["remote"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
}

#[tokio::test]
async fn permissive_mode_lets_acl_quota_and_signature_denials_through() {
    let files = gate_files();
    let s = start_permissive(
        &files,
        &[
            files.acl("deny * * *\n"),
            files.signature_secrets("acme s1gn1ng-key\n"),
        ],
    );
    let c = client();
    // alice's tenant needs signatures: unsigned is counted, not refused.
    for _ in 0..2 {
        assert_eq!(publish_as(&c, &s, "p", Some(ALICE)).await.0, 202);
    }
    // bob's tenant signs nothing: the ACL denies everything, counted.
    for _ in 0..2 {
        assert_eq!(publish_as(&c, &s, "p", Some(BOB)).await.0, 202);
    }
    assert_eq!(denied_metric(&c, &s, "missing_signature").await, 2.0);
    assert_eq!(denied_metric(&c, &s, "acl_denied").await, 2.0);
    let topics: Vec<Value> = admin_json(&c, &s, "/admin/topics").await;
    let appended: u64 = topics[0]["endOffsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .sum();
    assert_eq!(appended, 4);
}

#[tokio::test]
async fn permissive_mode_lets_quota_denials_through() {
    let files = gate_files();
    let s = start_permissive(
        &files,
        &[
            "eventmesh.security.gate.quota.publish.rate=1".into(),
            "eventmesh.security.gate.quota.publish.burst=1".into(),
        ],
    );
    let c = client();
    for _ in 0..3 {
        assert_eq!(publish_as(&c, &s, "q", Some(ALICE)).await.0, 202);
    }
    assert_eq!(denied_metric(&c, &s, "publish_rate").await, 2.0);
}

#[tokio::test]
async fn the_acl_allows_denies_and_deny_wins() {
    let (_files, s) = start_with_acl(
        "allow alice PUBLISH orders.*\ndeny alice PUBLISH orders.secret\nallow globex SUBSCRIBE *\nallow * ACK *\n",
    );
    let c = client();
    assert_eq!(publish_as(&c, &s, "orders.eu", Some(ALICE)).await.0, 202);
    let before = end_offsets(&c, &s).await;
    for (topic, token) in [
        ("orders.secret", ALICE),
        ("payments", ALICE),
        ("orders.eu", BOB),
    ] {
        let (st, v, _) = publish_as(&c, &s, topic, Some(token)).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (403, Some("acl_denied")),
            "{topic}: {v}"
        );
    }
    assert_eq!(end_offsets(&c, &s).await, before);
    // bob (tenant globex) may subscribe, alice may not.
    let sub = |client: &str| json!({"clientId": client, "topic": "orders.eu"});
    let (st, _) = post_json_as(&c, &s, "/events/subscribe", BOB, sub("bobs")).await;
    assert_eq!(st, 200);
    let (st, v) = post_json_as(&c, &s, "/events/subscribe", ALICE, sub("alices")).await;
    assert_eq!((st, v["error"].as_str()), (403, Some("acl_denied")));
    let subs: Vec<Value> = admin_json(&c, &s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(subs[0]["principal"], "bob");
    assert_eq!(subs[0]["tenant"], "globex");
    // The client bob subscribed is his: alice cannot poll or remove it.
    let (st, v, _) = call(
        &c,
        reqwest::Method::POST,
        s.url("/events/unsubscribe"),
        Some(ALICE),
        "application/json",
        serde_json::to_vec(&json!({"clientId": "bobs"})).unwrap(),
        &[],
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (403, Some("acl_denied")), "{v}");
}

#[tokio::test]
async fn a_principal_cannot_poll_anothers_client() {
    let files = gate_files();
    let s = start_closed(&files, &[]);
    let c = client();
    let body = json!({"clientId": "mine", "topic": "t"});
    assert_eq!(
        post_json_as(&c, &s, "/events/subscribe", ALICE, body)
            .await
            .0,
        200
    );
    let poll = |token: &'static str| {
        call(
            &c,
            reqwest::Method::GET,
            s.url("/events/poll?clientId=mine&timeoutMs=10"),
            Some(token),
            "application/json",
            Vec::new(),
            &[],
        )
    };
    assert_eq!(poll(ALICE).await.0, 200);
    let (st, v, _) = poll(BOB).await;
    assert_eq!((st, v["error"].as_str()), (403, Some("not_owner")), "{v}");
}

async fn post_json_as(
    c: &reqwest::Client,
    s: &Server,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let (st, v, _) = call(
        c,
        reqwest::Method::POST,
        s.url(path),
        Some(token),
        "application/json",
        serde_json::to_vec(&body).unwrap(),
        &[],
    )
    .await;
    (st, v)
}

#[tokio::test]
async fn a_malformed_acl_denies_every_request_and_is_counted() {
    let (_files, s) = start_with_acl("allow * * *\nallow alice PUBLISH\n");
    let c = client();
    for _ in 0..2 {
        let (st, v, _) = publish_as(&c, &s, "orders.eu", Some(ALICE)).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (403, Some("acl_malformed")),
            "{v}"
        );
    }
    assert_eq!(denied_metric(&c, &s, "acl_malformed").await, 2.0);
    let log = s.log_text();
    assert!(
        log.contains("WARN") && log.contains("malformed ACL entry") && log.contains("line=2"),
        "{log}"
    );
}

#[tokio::test]
async fn quotas_answer_429_with_retry_after() {
    let files = gate_files();
    let s = start_closed(
        &files,
        &[
            "eventmesh.security.gate.quota.publish.rate=1".into(),
            "eventmesh.security.gate.quota.publish.burst=2".into(),
            "eventmesh.security.gate.quota.subscriptions.max=1".into(),
            "eventmesh.security.gate.quota.connections.max=1".into(),
        ],
    );
    let c = client();
    assert_eq!(publish_as(&c, &s, "q", Some(ALICE)).await.0, 202);
    assert_eq!(publish_as(&c, &s, "q", Some(ALICE)).await.0, 202);
    let before = end_offsets(&c, &s).await;
    let (st, v, h) = publish_as(&c, &s, "q", Some(ALICE)).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (429, Some("publish_rate")),
        "{v}"
    );
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!(end_offsets(&c, &s).await, before);
    // Another tenant has its own allowance.
    assert_eq!(publish_as(&c, &s, "q", Some(BOB)).await.0, 202);

    let sub = |client: &str| json!({"clientId": client, "topic": "q"});
    assert_eq!(
        post_json_as(&c, &s, "/events/subscribe", ALICE, sub("one"))
            .await
            .0,
        200
    );
    // Updating the one it holds is fine; a second is not.
    assert_eq!(
        post_json_as(&c, &s, "/events/subscribe", ALICE, sub("one"))
            .await
            .0,
        200
    );
    let (st, v) = post_json_as(&c, &s, "/events/subscribe", ALICE, sub("two")).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (429, Some("subscriptions_max")),
        "{v}"
    );
    let (st, _) = post_json_as(
        &c,
        &s,
        "/events/unsubscribe",
        ALICE,
        json!({"clientId": "one"}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        post_json_as(&c, &s, "/events/subscribe", ALICE, sub("two"))
            .await
            .0,
        200
    );
    // A long poll holds acme's one connection: a second request waits its turn.
    let poll = tokio::spawn({
        let (c, url) = (c.clone(), s.url("/events/poll?clientId=two&timeoutMs=1500"));
        async move {
            c.get(url)
                .bearer_auth(ALICE)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (st, v) = post_json_as(&c, &s, "/events/subscribe", ALICE, sub("two")).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (429, Some("connections_max")),
        "{v}"
    );
    assert_eq!(poll.await.unwrap(), 200);
    assert_eq!(
        post_json_as(&c, &s, "/events/subscribe", ALICE, sub("two"))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn signed_requests_bad_signatures_and_replayed_timestamps() {
    let files = gate_files();
    let s = start_closed(&files, &[files.signature_secrets("acme s1gn1ng-key\n")]);
    let c = client();
    let body = ev("signed");
    let send = |ts: String, sig: Option<String>| {
        let mut extra = vec![("x-em-timestamp", ts)];
        if let Some(sig) = sig {
            extra.push(("x-em-signature", sig));
        }
        let body = body.clone();
        let c = c.clone();
        let url = s.url("/events/publish?topic=signed");
        async move {
            call(
                &c,
                reqwest::Method::POST,
                url,
                Some(ALICE),
                "application/cloudevents+json",
                body,
                &extra,
            )
            .await
        }
    };
    // What the signature covers: method, path, query and body (no ce-*
    // headers in structured mode).
    let frame = eventmesh_security::Frame {
        body: &body,
        method: Some("POST"),
        path: Some("/events/publish"),
        query: Some("topic=signed"),
        ..Default::default()
    };
    let sign = |key: &[u8], ts: &str| eventmesh_security::signature::sign(key, ts, &frame);
    let now = unix_now().to_string();
    let good = sign(b"s1gn1ng-key", &now);
    assert_eq!(send(now.clone(), Some(good.clone())).await.0, 202);
    let before = end_offsets(&c, &s).await;
    let wrong = sign(b"guess", &now);
    let (st, v, _) = send(now.clone(), Some(wrong)).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("bad_signature")),
        "{v}"
    );
    let (st, v, _) = send(now.clone(), None).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("missing_signature")),
        "{v}"
    );
    // A request captured an hour ago and sent again, signature and all.
    let old = (unix_now() - 3600).to_string();
    let replayed = sign(b"s1gn1ng-key", &old);
    let (st, v, _) = send(old, Some(replayed)).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("stale_timestamp")),
        "{v}"
    );
    assert_eq!(end_offsets(&c, &s).await, before);
    // bob's tenant has no secret: unsigned is fine.
    assert_eq!(publish_as(&c, &s, "signed", Some(BOB)).await.0, 202);
}

#[tokio::test]
async fn hs256_jwts_are_verified() {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.security.gate.jwt.hs256.secret=jwt-s3cret",
            "eventmesh.security.gate.jwt.issuer=https://id.example",
            "eventmesh.security.gate.failClosed=true",
        ],
    );
    let c = client();
    let sign = |claims: Value, key: &[u8]| {
        encode(&Header::default(), &claims, &EncodingKey::from_secret(key)).unwrap()
    };
    let exp = unix_now() + 600;
    let good = sign(
        json!({"sub": "erin", "tenant": "acme", "iss": "https://id.example", "exp": exp}),
        b"jwt-s3cret",
    );
    assert_eq!(publish_as(&c, &s, "jwt", Some(&good)).await.0, 202);
    let forged = sign(
        json!({"sub": "erin", "iss": "https://id.example", "exp": exp}),
        b"guess",
    );
    assert_eq!(
        publish_as(&c, &s, "jwt", Some(&forged)).await.1["error"],
        "invalid_token"
    );
    let expired = sign(
        json!({"sub": "erin", "iss": "https://id.example", "exp": exp - 1200}),
        b"jwt-s3cret",
    );
    assert_eq!(
        publish_as(&c, &s, "jwt", Some(&expired)).await.1["error"],
        "token_expired"
    );
    // The secret never shows in /admin/config.
    let cfg = admin_text(&c, &s, "/admin/config").await;
    assert!(!cfg.contains("jwt-s3cret"), "{cfg}");
}

#[tokio::test]
async fn an_unwritable_audit_file_is_logged_and_requests_proceed() {
    let files = gate_files();
    // A directory where the file should be: every write fails.
    let s = start_closed(
        &files,
        &[setting(
            "eventmesh.security.gate.audit.file",
            files.dir.path(),
        )],
    );
    let c = client();
    assert_eq!(publish_as(&c, &s, "audited", Some(ALICE)).await.0, 202);
    assert!(
        s.wait_for_log(&["ERROR", "audit sink failed"]),
        "{}",
        s.log_text()
    );
}

#[tokio::test]
async fn webhooks_into_denied_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &["eventmesh.webhook.denied.cidrs=10.0.0.0/8,169.254.0.0/16"],
    );
    let c = client();
    for url in [
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
    ] {
        webhook_refused(&c, &s, url).await;
    }
    let (st, v) = subscribe_webhook(&c, &s, "fine", "http://127.0.0.1:9/hook").await;
    assert_eq!(st, 200, "{v}");
}

#[test]
fn a_bad_gate_file_fails_boot_naming_it() {
    let (status, out) = run_serve(
        &[
            "eventmesh.storage.type=standalone",
            "eventmesh.security.gate.token.file=/nonexistent/tokens",
        ],
        &[],
    );
    assert!(!status.success());
    assert!(out.contains("/nonexistent/tokens"), "{out}");
    let (status, out) = run_serve(
        &[
            "eventmesh.storage.type=standalone",
            "eventmesh.webhook.denied.cidrs=10.0.0.0/33",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("eventmesh.webhook.denied.cidrs") && out.contains("10.0.0.0/33"),
        "{out}"
    );
}
