//! The traffic routes' edges: a wrong method, a plain GET of the WebSocket
//! route, and a delivery whose stream closed before it was acknowledged.

mod common;

use std::time::Duration;

use common::*;
use eventmesh_client::{EventMeshClient, StreamOptions};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

async fn answer(r: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_wrong_method_answers_405_and_an_unknown_route_404_both_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (st, v) = answer(c.get(s.url("/events/publish"))).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (405, Some("method_not_allowed")),
        "{v}"
    );
    assert_eq!(v["message"], "/events/publish does not take GET");
    let (st, v) = answer(c.delete(s.url("/events/ack"))).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (405, Some("method_not_allowed")),
        "{v}"
    );
    let (st, v) = answer(c.post(s.url("/events/poll"))).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (405, Some("method_not_allowed")),
        "{v}"
    );
    let (st, v) = answer(c.get(s.url("/events/nothing"))).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
}

#[tokio::test]
async fn a_plain_get_of_the_websocket_route_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let (st, v) = answer(client().get(s.url("/events/ws?clientId=c1"))).await;
    assert!((400..500).contains(&st), "{st}");
    assert_eq!(v["error"], "websocket_upgrade_required", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("WebSocket handshake"),
        "{v}"
    );
}

#[tokio::test]
async fn a_delivery_released_by_a_closed_stream_can_still_be_acked_over_http() {
    let dir = tempfile::tempdir().unwrap();
    // A long ack timeout: nothing comes again because of it.
    let s = Server::start(dir.path(), &["eventmesh.delivery.ack.timeout.ms=120000"]);
    let c = client();
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut stream = sdk
        .sse(StreamOptions::new("reader").topic("released"))
        .await
        .unwrap();
    for i in 0..3 {
        sdk.publish("released", &event(&format!("r{i}")))
            .await
            .unwrap();
    }
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let d = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("a delivery in time")
            .expect("the stream is open")
            .unwrap();
        ids.push(d.delivery_id);
    }
    // The reader goes away, as a new user's script would, and acks over
    // HTTP afterwards: every ack settles its event.
    drop(stream);
    for id in &ids {
        let (st, v) = post_json(&c, s.url("/events/ack"), json!({"deliveryId": id})).await;
        assert_eq!((st, &v["status"]), (200, &json!("acked")), "{id}: {v}");
    }
    assert_eq!(metric(&c, &s, "eventmesh_acks_total").await, 3.0);
    // Nothing is left to deliver: a poll of the client finds its mailbox empty.
    let (st, v) = answer(c.get(s.url("/events/poll?clientId=reader&timeoutMs=300"))).await;
    assert_eq!((st, v), (200, json!([])));
}
