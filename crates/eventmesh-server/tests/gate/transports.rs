//! Every gated operation over HTTP, WebSocket and TCP, in both gate modes:
//! no, wrong and valid credentials, ACL allow and deny, quotas, and the
//! TCP port refusing an unauthenticated hello under a fail-closed gate.

use std::time::Duration;

use eventmesh_client::{Error, EventMeshClient, StreamOptions, SubscribeOptions};
use serde_json::Value;

use crate::common::gate::GateFiles;
use crate::common::*;
use crate::{denied_metric, end_offsets, gate_files, ALICE, BOB, CAROL};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Via {
    Http,
    Ws,
    Tcp,
}

pub const ALL: [Via; 3] = [Via::Http, Via::Ws, Via::Tcp];

/// A server with its TCP port open.
pub struct Mesh {
    pub s: Server,
    pub tcp: u16,
}

/// A server on `files`' data directory with `settings` and its TCP port
/// open.
pub fn start_mesh(files: &GateFiles, settings: &[String]) -> Mesh {
    let tcp = free_port();
    let mut all = vec![format!("eventmesh.server.tcp.port={tcp}")];
    all.extend_from_slice(settings);
    Mesh {
        s: Server::start_with(&files.data(), &all),
        tcp,
    }
}

/// [`start_mesh`] behind a fail-closed gate with the test tokens, plus
/// `settings`.
pub fn start_closed_mesh(files: &GateFiles, settings: &[String]) -> Mesh {
    start_mesh(files, &[files.fail_closed(), settings.to_vec()].concat())
}

pub fn sdk(m: &Mesh, token: Option<&str>) -> EventMeshClient {
    let c = EventMeshClient::new(m.s.traffic.clone())
        .unwrap()
        .with_tcp(format!("127.0.0.1:{}", m.tcp))
        .with_request_timeout(WAIT);
    match token {
        Some(t) => c.with_token(t),
        None => c,
    }
}

/// The error code of a call that must fail with an API error.
pub fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::Api { code, .. }) => code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Publishes one event over `via` as client `client_id`.
pub async fn publish_via(
    m: &Mesh,
    via: Via,
    token: Option<&str>,
    client_id: &str,
    topic: &str,
) -> Result<(), Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sdk = sdk(m, token);
    // An id of its own: the same one twice would be stored once.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ev = event(&format!("{client_id}-{n}"));
    match via {
        Via::Http => sdk.publish(topic, &ev).await.map(drop),
        Via::Ws => {
            let ws = sdk.websocket(StreamOptions::new(client_id)).await?;
            let r = ws.publish(topic, &ev).await.map(drop);
            ws.close().await;
            r
        }
        Via::Tcp => {
            let t = sdk.tcp(client_id).await?;
            let r = t.publish(topic, &ev).await.map(drop);
            let _ = t.goodbye().await;
            r
        }
    }
}

/// Subscribes `client_id` to `topic` (from the earliest event) over `via`.
pub async fn subscribe_via(
    m: &Mesh,
    via: Via,
    token: Option<&str>,
    client_id: &str,
    topic: &str,
) -> Result<(), Error> {
    let sdk = sdk(m, token);
    let opts = SubscribeOptions::new(client_id, topic).from(eventmesh_client::StartFrom::Earliest);
    match via {
        Via::Http => sdk.subscribe(opts).await.map(drop),
        Via::Ws => {
            let ws = sdk.websocket(StreamOptions::new(client_id)).await?;
            let r = ws.subscribe(opts).await.map(drop);
            ws.close().await;
            r
        }
        Via::Tcp => {
            let t = sdk.tcp(client_id).await?;
            let r = t.subscribe(opts).await.map(drop);
            let _ = t.goodbye().await;
            r
        }
    }
}

fn appended(topics: &Value) -> u64 {
    topics
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["endOffsets"].as_array().unwrap().clone())
        .map(|o| o.as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn fail_closed_every_transport_needs_a_valid_credential() {
    let files = gate_files();
    let m = start_closed_mesh(&files, &[]);
    let c = client();
    for via in ALL {
        for (token, reason) in [
            (None, "missing_credential"),
            (Some("forged"), "invalid_token"),
        ] {
            let r = publish_via(&m, via, token, "c-anon", "orders.eu").await;
            assert_eq!(code(r), reason, "{via:?} {token:?}");
            let r = subscribe_via(&m, via, token, "c-anon", "orders.eu").await;
            assert_eq!(code(r), reason, "{via:?} {token:?}");
        }
    }
    // Nothing denied reached the log or the subscriptions; each denial was
    // counted once: two per transport and credential.
    assert_eq!(appended(&end_offsets(&c, &m.s).await), 0);
    assert!(admin_json::<Vec<Value>>(&c, &m.s, "/admin/subscriptions")
        .await
        .is_empty());
    assert_eq!(denied_metric(&c, &m.s, "missing_credential").await, 6.0);
    assert_eq!(denied_metric(&c, &m.s, "invalid_token").await, 6.0);
    // With a valid token every transport publishes and subscribes.
    for (i, via) in ALL.into_iter().enumerate() {
        let client_id = format!("alice-{i}");
        publish_via(&m, via, Some(ALICE), &client_id, "orders.eu")
            .await
            .unwrap();
        subscribe_via(&m, via, Some(ALICE), &client_id, "orders.eu")
            .await
            .unwrap();
    }
    assert_eq!(appended(&end_offsets(&c, &m.s).await), 3);
    let subs: Vec<Value> = admin_json(&c, &m.s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 3);
    assert!(
        subs.iter()
            .all(|s| s["tenant"] == "acme" && s["principal"] == "alice"),
        "{subs:?}"
    );
}

#[tokio::test]
async fn the_tcp_port_refuses_an_unauthenticated_hello() {
    let files = gate_files();
    // A connection token alone no longer opens the port under a gate.
    let m = start_closed_mesh(&files, &["eventmesh.server.tcp.token=shared".into()]);
    let addr = format!("127.0.0.1:{}", m.tcp);
    let r = eventmesh_client::TcpClient::connect(&addr, "c1", None).await;
    assert_eq!(code(r), "unauthorized");
    let r = eventmesh_client::TcpClient::connect(&addr, "c1", Some("shared")).await;
    assert_eq!(code(r), "invalid_token");
    let r = eventmesh_client::TcpClient::connect(&addr, "c1", Some(ALICE)).await;
    assert_eq!(
        code(r),
        "unauthorized",
        "the connection token is still required"
    );
    // Both: the connection token and the gate credential.
    let t = tcp_hello(
        m.tcp,
        serde_json::json!({"clientId": "c1", "token": "shared", "credential": ALICE}),
    )
    .await;
    assert_eq!(t["kind"], "HELLO_OK", "{t}");
}

/// Sends one HELLO frame and reads the answer: `{"kind", "payload"}`.
pub async fn tcp_hello(port: u16, hello: Value) -> Value {
    use eventmesh_core::tcp_frame::{self, Frame, FrameType};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let f = Frame::new(FrameType::Hello, 1, serde_json::to_vec(&hello).unwrap());
    s.write_all(&f.to_bytes()).await.unwrap();
    let mut buf = bytes::BytesMut::new();
    let frame = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(f) = tcp_frame::decode(&mut buf, usize::MAX).unwrap() {
                return f;
            }
            assert!(
                s.read_buf(&mut buf).await.unwrap() > 0,
                "closed without an answer"
            );
        }
    })
    .await
    .expect("an answer to HELLO");
    serde_json::json!({
        "kind": frame.kind.name(),
        "payload": serde_json::from_slice::<Value>(&frame.payload).unwrap_or(Value::Null),
    })
}

#[tokio::test]
async fn the_acl_and_quotas_apply_to_every_transport() {
    let files = gate_files();
    let m = start_closed_mesh(
        &files,
        &[
            files.acl("allow * * *\ndeny * PUBLISH secret.*\ndeny * SUBSCRIBE secret.*\n"),
            "eventmesh.security.gate.quota.publish.rate=1".into(),
            "eventmesh.security.gate.quota.publish.burst=1".into(),
        ],
    );
    let c = client();
    for (i, via) in ALL.into_iter().enumerate() {
        let client_id = format!("c{i}");
        let r = publish_via(&m, via, Some(BOB), &client_id, "secret.plans").await;
        assert_eq!(code(r), "acl_denied", "{via:?}");
        let r = subscribe_via(&m, via, Some(BOB), &client_id, "secret.plans").await;
        assert_eq!(code(r), "acl_denied", "{via:?}");
    }
    assert_eq!(appended(&end_offsets(&c, &m.s).await), 0);
    assert_eq!(denied_metric(&c, &m.s, "acl_denied").await, 6.0);
    // One event a second per tenant, burst 1: each transport's first
    // publish passes, an immediate second one is refused (one tenant per
    // transport, so no bucket is shared).
    for (i, via) in ALL.into_iter().enumerate() {
        let client_id = format!("q{i}");
        let token = [ALICE, BOB, CAROL][i];
        let sdk = sdk(&m, Some(token));
        let ev = event(&client_id);
        let (first, second) = match via {
            Via::Http => (
                sdk.publish("open", &ev).await,
                sdk.publish("open", &ev).await,
            ),
            Via::Ws => {
                let ws = sdk
                    .websocket(StreamOptions::new(client_id.as_str()))
                    .await
                    .unwrap();
                let r = (ws.publish("open", &ev).await, ws.publish("open", &ev).await);
                ws.close().await;
                r
            }
            Via::Tcp => {
                let t = sdk.tcp(&client_id).await.unwrap();
                let r = (t.publish("open", &ev).await, t.publish("open", &ev).await);
                let _ = t.goodbye().await;
                r
            }
        };
        first.unwrap_or_else(|e| panic!("{via:?}: {e}"));
        assert_eq!(code(second), "publish_rate", "{via:?}");
    }
    assert_eq!(denied_metric(&c, &m.s, "publish_rate").await, 3.0);
}

#[tokio::test]
async fn permissive_mode_counts_and_audits_tcp_and_websocket_but_lets_them_through() {
    let files = gate_files();
    let m = start_mesh(
        &files,
        &[
            files.token_file(),
            files.audit_file(),
            files.acl("deny * * *\n"),
        ],
    );
    let c = client();
    for via in [Via::Ws, Via::Tcp] {
        publish_via(&m, via, None, "anon", "p").await.unwrap();
        publish_via(&m, via, Some(BOB), "bobs", "p").await.unwrap();
    }
    assert_eq!(appended(&end_offsets(&c, &m.s).await), 4);
    let lines = files.audit();
    let tcp: Vec<&Value> = lines.iter().filter(|l| l["transport"] == "tcp").collect();
    // Per connection: the hello (authentication), then the publish (ACL).
    let seen: Vec<(&str, &str, &str)> = tcp
        .iter()
        .map(|l| {
            (
                l["operation"].as_str().unwrap(),
                l["verdict"].as_str().unwrap(),
                l["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("SUBSCRIBE", "allow_permissive", "missing_credential"),
            ("PUBLISH", "allow_permissive", "acl_denied"),
            ("SUBSCRIBE", "allow", ""),
            ("PUBLISH", "allow_permissive", "acl_denied"),
        ]
    );
    assert_eq!(tcp[3]["principal"], "bob");
    assert_eq!(tcp[3]["topic"], "p");
    let ws: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["transport"] == "websocket")
        .map(|l| {
            (
                l["verdict"].as_str().unwrap(),
                l["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ws,
        [
            ("allow_permissive", "missing_credential"),
            ("allow_permissive", "acl_denied"),
            ("allow", ""),
            ("allow_permissive", "acl_denied"),
        ],
        "the upgrade and the publish of each socket"
    );
    // One per publish: opening a session checks only the credential.
    assert_eq!(denied_metric(&c, &m.s, "acl_denied").await, 4.0);
    assert_eq!(denied_metric(&c, &m.s, "missing_credential").await, 2.0);
}
