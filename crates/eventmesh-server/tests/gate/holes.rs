//! One regression test per hole a black-box probe found: TCP outside the
//! gate, client ids taken over, deliveries settled by anyone, creators told
//! apart by principal name only, and replies not bound to their request.

use std::time::Duration;

use eventmesh_client::{Delivery, StartFrom, StreamOptions, SubscribeOptions};
use serde_json::{json, Value};

use super::transports::{code, sdk, start_closed_mesh, start_mesh, Mesh, Via, ALL};
use crate::common::sdk::{hold, request_at_responder};
use crate::common::*;
use crate::{denied_metric, end_offsets, gate_files, ALICE, ALICE_GLOBEX, BOB, CAROL};

/// Subscribes `client` for `token` over HTTP (a pulling client, from the
/// earliest event), publishes `n` events to `topic`, and polls them.
async fn holder(m: &Mesh, token: &str, client: &str, topic: &str, n: usize) -> Vec<Delivery> {
    hold(&sdk(m, Some(token)), client, topic, n).await
}

#[tokio::test]
async fn tcp_frames_pass_the_acl_and_the_audit() {
    // Default TCP settings (no connection token), a fail-closed gate whose
    // ACL keeps acme's topics to acme.
    let files = gate_files();
    let m = start_closed_mesh(
        &files,
        &[
            files.acl("allow acme * acme.*\nallow * * public.*\n"),
            files.audit_file(),
        ],
    );
    let c = client();
    holder(&m, ALICE, "alices", "acme.orders", 2).await;
    let before = end_offsets(&c, &m.s).await;
    let bob = sdk(&m, Some(BOB)).tcp("bobs").await.unwrap();
    let ev = event("intruder");
    assert_eq!(code(bob.publish("acme.orders", &ev).await), "acl_denied");
    let earliest = SubscribeOptions::new("ignored", "acme.orders")
        .group("new-group")
        .from(StartFrom::Earliest);
    assert_eq!(code(bob.subscribe(earliest).await), "acl_denied");
    bob.publish("public.news", &ev).await.unwrap();
    let _ = bob.goodbye().await;
    let after: Vec<Value> = admin_json(&c, &m.s, "/admin/topics").await;
    let orders = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "acme.orders")
            .cloned()
    };
    assert_eq!(orders(&Value::Array(after)), orders(&before));
    let subs: Vec<Value> = admin_json(&c, &m.s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1, "{subs:?}");
    let audited: Vec<Value> = files
        .audit()
        .into_iter()
        .filter(|l| l["transport"] == "tcp")
        .collect();
    let seen: Vec<(&str, &str, &str)> = audited
        .iter()
        .map(|l| {
            (
                l["operation"].as_str().unwrap(),
                l["topic"].as_str().unwrap_or(""),
                l["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("SUBSCRIBE", "", "allow"),
            ("PUBLISH", "acme.orders", "deny"),
            ("SUBSCRIBE", "acme.orders", "deny"),
            ("PUBLISH", "public.news", "allow"),
        ]
    );
    assert!(audited.iter().all(|l| l["principal"] == "bob"));
}

#[tokio::test]
async fn a_client_id_cannot_be_taken_over_on_any_transport() {
    let files = gate_files();
    let m = start_closed_mesh(&files, &[]);
    let c = client();
    holder(&m, ALICE, "alices", "t", 1).await;
    let bob = sdk(&m, Some(BOB));
    // TCP: the hello itself is refused.
    assert_eq!(code(bob.tcp("alices").await), "not_owner");
    // WebSocket and SSE: the stream is refused.
    assert_eq!(
        code(bob.websocket(StreamOptions::new("alices")).await),
        "not_owner"
    );
    assert_eq!(
        code(bob.sse(StreamOptions::new("alices")).await),
        "not_owner"
    );
    // HTTP: poll, subscribe and unsubscribe are refused.
    assert_eq!(
        code(bob.poll("alices", Duration::from_millis(10), 10).await),
        "not_owner"
    );
    assert_eq!(
        code(
            bob.subscribe(SubscribeOptions::new("alices", "other"))
                .await
        ),
        "not_owner"
    );
    assert_eq!(code(bob.unsubscribe("alices", None).await), "not_owner");
    // The client is still alice's, with its subscription.
    let subs: Vec<Value> = admin_json(&c, &m.s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
    assert_eq!(
        (&subs[0]["tenant"], &subs[0]["principal"]),
        (&json!("acme"), &json!("alice"))
    );
    assert_eq!(denied_metric(&c, &m.s, "not_owner").await, 6.0);
}

#[tokio::test]
async fn a_permissive_gate_never_hands_a_client_id_to_another_creator() {
    let files = gate_files();
    let mut m = start_mesh(&files, &[files.token_file()]);
    let c = client();
    holder(&m, ALICE, "alices", "t", 1).await;
    // Let through, counted, and the creator stays alice over a restart.
    let bob = sdk(&m, Some(BOB)).tcp("alices").await.unwrap();
    bob.subscribe(SubscribeOptions::new("ignored", "t2"))
        .await
        .unwrap();
    let _ = bob.goodbye().await;
    assert_eq!(denied_metric(&c, &m.s, "not_owner").await, 2.0);
    m.s = m.s.restart();
    let subs: Vec<Value> = admin_json(&c, &m.s, "/admin/subscriptions").await;
    let creators: Vec<(&str, &str, &str)> = subs
        .iter()
        .map(|s| {
            (
                s["topic"].as_str().unwrap(),
                s["tenant"].as_str().unwrap(),
                s["principal"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(creators, [("t", "acme", "alice"), ("t2", "acme", "alice")]);
}

#[tokio::test]
async fn deliveries_are_settled_only_by_the_client_they_were_handed_to() {
    let files = gate_files();
    let m = start_closed_mesh(&files, &[]);
    let got = holder(&m, ALICE, "alices", "t", 3).await;
    let unknown = |r: Result<(), eventmesh_client::Error>| code(r);
    for (via, d) in ALL.into_iter().zip(&got) {
        for token in [BOB, ALICE_GLOBEX] {
            let other = sdk(&m, Some(token));
            let (ack, nack) = match via {
                Via::Http => (
                    other.ack(&d.delivery_id).await,
                    other.nack(&d.delivery_id).await,
                ),
                Via::Ws => {
                    let ws = other.websocket(StreamOptions::new("others")).await.unwrap();
                    let r = (
                        ws.ack_confirmed(&d.delivery_id).await,
                        ws.nack_confirmed(&d.delivery_id).await,
                    );
                    ws.close().await;
                    r
                }
                Via::Tcp => {
                    let t = other.tcp("others").await.unwrap();
                    let r = (t.ack(&d.delivery_id).await, t.nack(&d.delivery_id).await);
                    let _ = t.goodbye().await;
                    r
                }
            };
            assert_eq!(unknown(ack), "unknown_delivery", "{via:?} {token}");
            assert_eq!(unknown(nack), "unknown_delivery", "{via:?} {token}");
        }
    }
    // A guessed id: the real one with its last digit changed.
    let real = &got[0].delivery_id;
    let last = real.chars().last().unwrap();
    let guessed = format!(
        "{}{}",
        &real[..real.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    let alice = sdk(&m, Some(ALICE));
    assert_eq!(unknown(alice.ack(&guessed).await), "unknown_delivery");
    // Nothing was settled by the others: alice still holds all three.
    for d in &got {
        alice.ack(&d.delivery_id).await.unwrap();
    }
    let c = client();
    assert_eq!(metric(&c, &m.s, "eventmesh_acks_total").await, 3.0);
    assert_eq!(metric(&c, &m.s, "eventmesh_nacks_total").await, 0.0);
}

#[tokio::test]
async fn creator_checks_compare_tenant_and_principal() {
    let files = gate_files();
    let m = start_closed_mesh(&files, &[]);
    holder(&m, ALICE, "alices", "t", 1).await;
    // Principal "alice" of tenant globex is not acme's alice.
    let twin = sdk(&m, Some(ALICE_GLOBEX));
    assert_eq!(
        code(twin.poll("alices", Duration::from_millis(10), 1).await),
        "not_owner"
    );
    assert_eq!(code(twin.unsubscribe("alices", None).await), "not_owner");
    assert_eq!(code(twin.tcp("alices").await), "not_owner");
    let subs: Vec<Value> = admin_json(&client(), &m.s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1);
}

#[tokio::test]
async fn replies_are_bound_to_the_request() {
    let files = gate_files();
    // A topic-specific deny on PUBLISH must not refuse replies (they are
    // checked against the request's topic, as a consumer of it).
    let m = start_closed_mesh(
        &files,
        &[files.acl("allow * * *\ndeny * PUBLISH secret.*\n")],
    );
    let carol = sdk(&m, Some(CAROL));
    let (request, waiting) = request_at_responder(&carol, sdk(&m, Some(ALICE))).await;
    let forged = json!({"specversion": "1.0", "id": "forged", "source": "/x", "type": "reply",
        "data": "forged"});
    // Someone who learnt the correlation id cannot answer, on any transport.
    for via in ALL {
        let bob = sdk(&m, Some(BOB));
        let r = match via {
            Via::Http => bob.reply_to(&request, &forged).await,
            Via::Ws => {
                let ws = bob.websocket(StreamOptions::new("bobs")).await.unwrap();
                let r = ws.reply_to(&request, &forged).await;
                ws.close().await;
                r
            }
            Via::Tcp => {
                let t = bob.tcp("bobs").await.unwrap();
                let r = t.reply_to(&request, &forged).await;
                let _ = t.goodbye().await;
                r
            }
        };
        assert_eq!(code(r), "unknown_correlation", "{via:?}");
    }
    let answer = json!({"specversion": "1.0", "id": "real", "source": "/pricer", "type": "reply",
        "data": {"price": 7}});
    carol.reply_to(&request, &answer).await.unwrap();
    let reply = waiting.await.unwrap().unwrap();
    assert_eq!(reply["id"], "real");
    assert_eq!(reply["data"], json!({"price": 7}));
}
