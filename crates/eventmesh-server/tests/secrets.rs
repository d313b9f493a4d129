//! Secrets stay secret, against the real binary: passwords inside URLs
//! and connection strings are redacted in `eventmesh config`, in boot logs
//! and boot errors, in connector definitions and in a connector's
//! `status.lastError`; a definition read back with its secrets redacted and
//! put back unchanged keeps them; and an `http-source`'s timestamped
//! signature cannot be replayed.

mod common;

use std::time::Duration;

use common::connectors::{create, get, stored, wait_status};
use common::topics::admin;
use common::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn eventmesh_config_hides_passwords_inside_urls() {
    let (status, out) = run_to_exit(
        &[
            "config",
            "-D",
            "eventmesh.storage.type=jetstream",
            "-D",
            "eventmesh.storage.jetstream.servers=nats://user:NatsPass1@n1:4222,nats://NatsToken2@n2:4222",
            "-D",
            "eventmesh.meta.etcd.endpoints=http://root:EtcdPass3@[::1]:2379,http://e2:2379",
            "-D",
            "eventmesh.tracing.otlp.endpoint=https://otel:Otlp%40Pass4@collector:4318",
        ],
        &[],
    );
    assert!(status.success(), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    for line in [
        "eventmesh.storage.jetstream.servers=nats://user:***@n1:4222,nats://***@n2:4222",
        "eventmesh.meta.etcd.endpoints=http://root:***@[::1]:2379,http://e2:2379",
        "eventmesh.tracing.otlp.endpoint=https://otel:***@collector:4318",
    ] {
        assert!(lines.contains(&line), "{line} not in:\n{out}");
    }
    for secret in [
        "NatsPass1",
        "NatsToken2",
        "EtcdPass3",
        "Otlp%40Pass4",
        "Otlp@Pass4",
    ] {
        assert!(!out.contains(secret), "{secret} shown:\n{out}");
    }
}

/// Boots with `settings` on a fresh data directory and ephemeral ports,
/// logging at INFO: the boot fails with exit code 1; what it wrote.
fn failed_boot(settings: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("eventmesh.data.dir={}", dir.path().display());
    let ports = [
        "eventmesh.server.http.port=0",
        "eventmesh.server.admin.port=0",
        "eventmesh.server.tcp.port=off",
    ];
    let all: Vec<&str> = settings
        .iter()
        .copied()
        .chain([data.as_str()])
        .chain(ports)
        .collect();
    let (status, out) = run_serve(&all, &[("RUST_LOG", "info")]);
    assert_eq!(status.code(), Some(1), "{out}");
    out
}

#[test]
fn a_jetstream_boot_error_and_log_hide_the_url_password() {
    let port = free_port();
    let servers =
        format!("eventmesh.storage.jetstream.servers=nats://user:NatsPass1@127.0.0.1:{port}");
    let out = failed_boot(&[
        "eventmesh.storage.type=jetstream",
        &servers,
        "eventmesh.storage.jetstream.timeout.ms=500",
    ]);
    let shown = format!("nats://user:***@127.0.0.1:{port}");
    assert!(
        out.contains(&format!(
            "error: cannot open the event log on {shown}: cannot connect: "
        )),
        "{out}"
    );
    assert!(out.contains(&format!("servers={shown}")), "{out}");
    assert!(!out.contains("NatsPass1"), "{out}");
}

#[test]
fn an_etcd_boot_error_and_log_hide_the_url_password() {
    let port = free_port();
    let endpoints = format!("eventmesh.meta.etcd.endpoints=http://root:EtcdPass3@127.0.0.1:{port}");
    let out = failed_boot(&[
        "eventmesh.storage.type=standalone",
        "eventmesh.meta.type=etcd",
        &endpoints,
        // With a user the client logs in while connecting, so the
        // closed port fails the boot at once.
        "eventmesh.meta.etcd.user=root",
        "eventmesh.meta.etcd.password=EtcdKeyPass",
        "eventmesh.meta.etcd.timeout.ms=500",
    ]);
    let shown = format!("http://root:***@127.0.0.1:{port}");
    assert!(
        out.contains(&format!("meta store: etcd at {shown}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("error: cannot connect to etcd at {shown}: ")),
        "{out}"
    );
    assert!(!out.contains("EtcdPass3"), "{out}");
    assert!(!out.contains("EtcdKeyPass"), "{out}");
}

#[tokio::test]
async fn a_postgres_connector_shows_no_password_in_its_definition_or_last_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let port = free_port();
    let url = format!("postgres://app:Pg%40Pass1@127.0.0.1:{port}/shop?connect_timeout=2");
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "outbox", "kind": "postgres-source", "topic": "orders",
            "config": {"url": url, "table": "outbox"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let shown = format!("postgres://app:***@127.0.0.1:{port}/shop?connect_timeout=2");
    assert_eq!(v["config"]["url"], shown);
    let conninfo = format!(
        "host=127.0.0.1 port={port} user=app password='Conn Pass2' dbname=shop connect_timeout=2"
    );
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "archive", "kind": "postgres-sink", "subscription": {"topic": "orders"},
            "config": {"url": conninfo, "table": "archive"}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["config"]["url"],
        format!("host=127.0.0.1 port={port} user=app password=*** dbname=shop connect_timeout=2")
    );
    // Nothing listens on the port: each connector records why it waits.
    for name in ["outbox", "archive"] {
        let v = wait_status(&c, &s, name, WAIT, |v| v["status"]["lastError"].is_string()).await;
        let error = v["status"]["lastError"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"));
        assert!(error.starts_with("open: "), "{v}");
        let (code, v) = get(&c, &s, name).await;
        assert_eq!(code, 200);
        let text = v.to_string();
        for secret in ["Pg%40Pass1", "Pg@Pass1", "Conn Pass2"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    let (code, list) = admin(&c, &s, reqwest::Method::GET, "/admin/connectors", None).await;
    assert_eq!(code, 200);
    let log = s.log_text();
    for secret in ["Pg%40Pass1", "Pg@Pass1", "Conn Pass2"] {
        assert!(!list.to_string().contains(secret), "{secret} in {list}");
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

/// `x-em-timestamp` and `x-em-signature` of the `eventmesh` scheme.
fn em_sign(secret: &str, at: u64, body: &[u8]) -> (String, String) {
    let t = at.to_string();
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(t.as_bytes());
    m.update(b".");
    m.update(body);
    (
        t,
        format!("sha256={}", hex::encode(m.finalize().into_bytes())),
    )
}

/// Posts `body` to the `http-source` connector `name` with a timestamp
/// and signature: the status and the answer.
async fn post_signed(
    c: &reqwest::Client,
    s: &Server,
    name: &str,
    (t, sig): &(String, String),
    body: &'static [u8],
) -> (u16, Value) {
    let (code, v, _) = call(
        c,
        reqwest::Method::POST,
        s.url(&format!("/connectors/{name}/events")),
        None,
        "application/json",
        body.to_vec(),
        &[
            ("x-em-timestamp", t.clone()),
            ("x-em-signature", sig.clone()),
        ],
    )
    .await;
    (code, v)
}

#[tokio::test]
async fn a_definition_put_back_redacted_keeps_its_secret() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "hooks", "kind": "http-source", "topic": "payments",
            "config": {"signature": {"secret": "s3cret"}}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    // New definitions sign a time with the body.
    assert_eq!(
        v["config"]["signature"],
        json!({"scheme": "eventmesh", "secret": "***"})
    );
    let (_, shown) = get(&c, &s, "hooks").await;
    let back = json!({
        "name": shown["name"], "kind": shown["kind"], "config": shown["config"],
        "topic": shown["topic"], "principal": shown["principal"], "paused": shown["paused"],
    });
    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::PUT,
        "/admin/connectors/hooks",
        Some(back),
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["generation"], 2);
    assert_eq!(v["config"]["signature"]["secret"], "***");
    let body: &[u8] = br#"{"amount":1}"#;
    let (code, v) = post_signed(&c, &s, "hooks", &em_sign("s3cret", unix_now(), body), body).await;
    assert_eq!(code, 202, "{v}");
    let (code, v) = post_signed(
        &c,
        &s,
        "hooks",
        &em_sign("***", unix_now(), br#"{"amount":2}"#),
        br#"{"amount":2}"#,
    )
    .await;
    assert_eq!(code, 401, "{v}");
    assert_eq!(v["error"], "invalid_signature");
    // A placeholder where nothing is stored is refused, naming the field.
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "open", "kind": "http-source", "topic": "payments"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let (code, v) = admin(
        &c,
        &s,
        reqwest::Method::PUT,
        "/admin/connectors/open",
        Some(json!({"kind": "http-source", "topic": "payments",
            "config": {"signature": {"secret": "***"}}})),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v,
        json!({"error": "invalid_connector",
            "message": "config.signature.secret: \"***\" stands for a stored secret, and none is stored there; give the value"})
    );
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "fresh", "kind": "http-source", "topic": "payments",
            "config": {"signature": {"secret": "***"}}}),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"], "invalid_connector");
}

#[tokio::test]
async fn a_signed_request_is_taken_once_and_a_stale_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "hooks", "kind": "http-source", "topic": "payments",
            "config": {"signature": {"scheme": "eventmesh", "secret": "s3cret", "tolerance_s": 60}}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let body: &[u8] = br#"{"amount":42}"#;
    let signed = em_sign("s3cret", unix_now(), body);
    let (code, first) = post_signed(&c, &s, "hooks", &signed, body).await;
    assert_eq!(code, 202, "{first}");
    // The same bytes again: refused.
    let (code, v) = post_signed(&c, &s, "hooks", &signed, body).await;
    assert_eq!(code, 409, "{v}");
    assert_eq!(v["error"], "replayed_signature");
    // Outside the window, either way: refused.
    // (Well past the 60 s tolerance: the server reads its clock a moment
    // after the test does, and a second may tick over in between.)
    for at in [unix_now() - 120, unix_now() + 120] {
        let (code, v) = post_signed(&c, &s, "hooks", &em_sign("s3cret", at, body), body).await;
        assert_eq!(code, 401, "{v}");
        assert_eq!(v["error"], "stale_timestamp");
    }
    // The body changed under the signature: refused.
    let (code, v) = post_signed(&c, &s, "hooks", &signed, br#"{"amount":43}"#).await;
    assert_eq!(code, 401, "{v}");
    assert_eq!(v["error"], "invalid_signature");
    assert_eq!(stored(&c, &s, "payments").await, 1);
}
