//! Request-reply across instances with `PARTITION_OWNED_PULL`: the
//! requester on one instance, the responder polling another, each request
//! handed out by the owner of its partition (any of the three), the reply
//! sent to the responder's instance or to a third one. A fail-closed gate
//! checks that only a holder of the request may answer, wherever the
//! answer arrives.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::mesh::*;
use common::*;
use serde_json::{json, Value};

const REQUESTER: &str = "requester-token";
const RESPONDER: &str = "responder-token";
const STRANGER: &str = "stranger-token";

async fn call(c: &reqwest::Client, url: String, token: &str, body: &Value) -> (u16, Value) {
    answer(c.post(url).bearer_auth(token).json(body)).await
}

/// Sends one event in structured mode (a request or a reply).
async fn send_event(c: &reqwest::Client, url: String, token: &str, event: &Value) -> (u16, Value) {
    let r = c
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/cloudevents+json")
        .body(event.to_string());
    answer(r).await
}

async fn answer(r: reqwest::RequestBuilder) -> (u16, Value) {
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls `client` on `s` until one delivery comes (bounded).
async fn poll_one(c: &reqwest::Client, s: &Server, client: &str, token: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .get(s.url(&format!(
                "/events/poll?clientId={client}&timeoutMs=500&max=1"
            )))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut batch: Vec<Value> = r.json().await.unwrap();
        if let Some(d) = batch.pop() {
            return d;
        }
        assert!(Instant::now() < deadline, "no request reached {client}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_reaches_its_request_on_another_instance() {
    let _one = SERIAL.lock().await;
    let files = tempfile::tempdir().unwrap();
    let tokens = files.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "{REQUESTER} acme requester publisher\n{RESPONDER} acme responder\n\
             {STRANGER} acme stranger\n"
        ),
    )
    .unwrap();
    let gate = [
        format!("eventmesh.security.gate.token.file={}", tokens.display()),
        "eventmesh.security.gate.failClosed=true".to_string(),
    ];
    let gate: Vec<&str> = gate.iter().map(String::as_str).collect();
    let mesh = Mesh::start_with(3, "OWNRR", 10_000, &gate).await;
    let c = client();
    // The responder polls i-2; a stranger has a subscription of its own on
    // i-1 (so it is a known client, just not a holder of any request).
    for (s, token, id, topic) in [
        (2, RESPONDER, "responder", "quotes"),
        (1, STRANGER, "stranger", "gossip"),
    ] {
        let (status, v) = call(
            &c,
            mesh.s(s).url("/events/subscribe"),
            token,
            &json!({"clientId": id, "group": id, "topic": topic}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
    }
    let owners = settled(
        &c,
        mesh.s(0),
        "quotes",
        &ids(&mesh),
        Duration::from_secs(30),
    )
    .await;
    let spread: BTreeSet<&String> = owners.values().collect();
    assert_eq!(spread.len(), 3, "every instance owns some: {owners:?}");

    // Twelve requests on i-0, on different partitions (so handed out by
    // each of the three owners), answered in turn through the responder's
    // instance, a third one and the requester's.
    for i in 0..12 {
        let requester = c.clone();
        let url = mesh
            .s(0)
            .url("/events/request?topic=quotes&timeoutMs=30000");
        let waiting = tokio::spawn(async move {
            let ask = json!({"specversion": "1.0", "id": format!("ask-{i}"), "source": "/desk",
                "type": "quote.asked", "partitionkey": format!("k{i}"), "data": {"n": i}});
            send_event(&requester, url, REQUESTER, &ask).await
        });
        let delivery = poll_one(&c, mesh.s(2), "responder", RESPONDER).await;
        let request = &delivery["event"];
        assert_eq!(request["id"], format!("ask-{i}"));
        let correlation = request["correlationid"].as_str().unwrap().to_string();
        let answer = |id: &str, data: Value| {
            json!({"specversion": "1.0", "id": id, "source": "/pricer", "type": "quote",
                "correlationid": correlation, "data": data})
        };
        if i == 0 {
            // Whoever learnt the correlation id cannot answer, wherever
            // it sends the answer.
            for k in 0..3 {
                let (status, v) = send_event(
                    &c,
                    mesh.s(k).url("/events/reply"),
                    STRANGER,
                    &answer("forged", json!("forged")),
                )
                .await;
                assert_eq!(status, 404, "via i-{k}: {v}");
                assert_eq!(v["error"], "unknown_correlation", "via i-{k}");
            }
        }
        let via = [2, 1, 0][i % 3];
        let (status, v) = send_event(
            &c,
            mesh.s(via).url("/events/reply"),
            RESPONDER,
            &answer(&format!("quote-{i}"), json!({"price": i * 10})),
        )
        .await;
        assert_eq!(status, 200, "reply {i} via i-{via}: {v}");
        let (status, reply) = waiting.await.unwrap();
        assert_eq!(status, 200, "request {i}: {reply}");
        assert_eq!(reply["id"], format!("quote-{i}"));
        assert_eq!(reply["data"], json!({"price": i * 10}));
        // Answered once: a second answer finds nothing waiting.
        let (status, v) = send_event(
            &c,
            mesh.s(2).url("/events/reply"),
            RESPONDER,
            &answer("again", json!(null)),
        )
        .await;
        assert_eq!(status, 404, "{v}");
        assert_eq!(v["error"], "unknown_correlation");
        let (status, v) = call(
            &c,
            mesh.s(2).url("/events/ack"),
            RESPONDER,
            &json!({"deliveryId": delivery["deliveryId"]}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
    }
}
