//! The binary's outbound connections over TLS, with certificates made by a
//! test CA at test time:
//! - etcd serving TLS only with `--client-cert-auth`: the binary starts on
//!   it with `eventmesh.meta.etcd.tls.*` and is ready; with a CA that did
//!   not sign etcd's certificate it exits non-zero naming the endpoint and
//!   the cause;
//! - an HTTPS webhook receiver with a test-CA certificate: the binary with
//!   `eventmesh.webhook.ca.file` delivers to it, without it every attempt
//!   fails on the certificate and the event is dead-lettered; a receiver
//!   requiring mutual TLS gets the certificate of
//!   `eventmesh.webhook.tls.cert.file`.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::mesh::Etcd;
use common::*;
use eventmesh_testpki::{Pair, TestPki};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

fn define(key: &str, value: impl AsRef<Path>) -> String {
    format!("{key}={}", value.as_ref().display())
}

/// The settings of a binary on the TLS etcd with the client certificate
/// etcd accepts, and `ca` as the CA etcd's certificate is checked against.
fn etcd_settings(etcd: &Etcd, ca: &Path) -> Vec<String> {
    let client = &etcd.tls().client;
    vec![
        "eventmesh.meta.type=etcd".to_string(),
        format!("eventmesh.meta.etcd.endpoints={}", etcd.endpoint()),
        "eventmesh.meta.etcd.timeout.ms=2000".to_string(),
        define("eventmesh.meta.etcd.tls.ca.file", ca),
        define("eventmesh.meta.etcd.tls.cert.file", &client.cert),
        define("eventmesh.meta.etcd.tls.key.file", &client.key),
    ]
}

#[tokio::test]
async fn the_binary_starts_on_a_tls_etcd_with_a_client_certificate_and_is_ready() {
    let etcd = Etcd::start_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = etcd_settings(&etcd, &etcd.tls().ca_file());
    let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &extra);
    let c = client();
    let (status, checks) = ready(&c, &s).await;
    assert_eq!(status, 200, "{checks:?}\n{}", s.log_text());
    assert!(checks.iter().all(|(_, ok)| *ok), "{checks:?}");
    // The meta store works over TLS: a subscription is stored in etcd.
    subscribe(
        &c,
        &s,
        json!({"clientId": "over-tls", "topic": "tls-meta", "url": "http://127.0.0.1:9/hook"}),
    )
    .await;
    let mut kv = etcd_client::Client::connect(
        [etcd.endpoint()],
        Some(etcd_client::ConnectOptions::new().with_tls(etcd_tls_options(&etcd))),
    )
    .await
    .unwrap();
    let stored = kv
        .get(
            "/em/subs/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    let keys: Vec<String> = stored
        .kvs()
        .iter()
        .map(|k| k.key_str().unwrap().to_string())
        .collect();
    assert!(
        keys.iter().any(|k| k.ends_with("/tls-meta/over-tls")),
        "{keys:?}"
    );
}

/// The client options of a test reading etcd directly.
fn etcd_tls_options(etcd: &Etcd) -> etcd_client::TlsOptions {
    let tls = etcd.tls();
    let read = |p: &Path| std::fs::read(p).unwrap();
    etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca_file())))
        .identity(etcd_client::Identity::from_pem(
            read(&tls.client.cert),
            read(&tls.client.key),
        ))
}

#[tokio::test]
async fn with_a_ca_that_did_not_sign_etcd_the_binary_exits_naming_the_endpoint() {
    let etcd = Etcd::start_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let other = TestPki::new(dir.path(), "other");
    let data = dir.path().join("data");
    let mut args = vec![
        "serve".to_string(),
        "-D".to_string(),
        "eventmesh.storage.type=standalone".to_string(),
        "-D".to_string(),
        define("eventmesh.data.dir", &data),
    ];
    for port in ["http", "admin", "tcp"] {
        args.push("-D".to_string());
        args.push(format!("eventmesh.server.{port}.port=0"));
    }
    for setting in etcd_settings(&etcd, other.ca_file()) {
        args.push("-D".to_string());
        args.push(setting);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, out) = run_to_exit(&args, &[]);
    assert!(!status.success(), "{out}");
    let expected = format!(
        "cannot connect to etcd at {}: TLS with the meta store failed: etcd: invalid peer \
         certificate: UnknownIssuer",
        etcd.endpoint()
    );
    assert!(out.contains(&expected), "{out}");
}

/// What the HTTPS webhook receiver saw.
#[derive(Default)]
struct Receiver {
    /// (`ce-id`, body) of every push, in order.
    pushes: Vec<(String, Vec<u8>)>,
    /// Handshakes that failed, with the reason.
    refused: Vec<String>,
    /// The client certificate of each accepted connection, if any.
    client_certs: Vec<Option<CertificateDer<'static>>>,
}

type Seen = Arc<Mutex<Receiver>>;

/// A TLS listener for axum: the handshake is part of accepting, and a
/// connection whose handshake fails is recorded and dropped.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    seen: Seen,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, peer)) = self.tcp.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            match tokio::time::timeout(Duration::from_secs(5), handshake).await {
                Ok(Ok(tls)) => {
                    let cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first().cloned());
                    self.seen.lock().unwrap().client_certs.push(cert);
                    return (tls, peer);
                }
                Ok(Err(e)) => self.seen.lock().unwrap().refused.push(e.to_string()),
                Err(_) => self
                    .seen
                    .lock()
                    .unwrap()
                    .refused
                    .push("handshake timed out".into()),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn record(
    State(seen): State<Seen>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let id = headers
        .get("ce-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    seen.lock().unwrap().pushes.push((id, body.to_vec()));
    StatusCode::OK
}

/// Starts an HTTPS receiver at `https://127.0.0.1:<port>/hook` with the
/// certificate `server`; with `client_ca`, it requires a client
/// certificate of that CA.
async fn start_https_hook(server: &Pair, client_ca: Option<&Path>) -> (String, Seen) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&server.cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&server.key).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let config = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(chain, key)
    .unwrap();
    let seen: Seen = Arc::default();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        seen: seen.clone(),
    };
    let app = axum::Router::new()
        .route(
            "/hook",
            post(record).options(common::hook::allow_any_origin),
        )
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("https://{addr}/hook"), seen)
}

/// Waits (up to 15 s) for the receiver to have `n` pushes; what it has.
async fn pushes(seen: &Seen, n: usize) -> Vec<(String, Vec<u8>)> {
    wait_until(
        || seen.lock().unwrap().pushes.len() >= n,
        Duration::from_secs(15),
    )
    .await;
    seen.lock().unwrap().pushes.clone()
}

/// Publishes one event to `topic` and checks that it arrives at the
/// receiver as sent: its id, and its data as the body.
async fn delivers(s: &Server, hook_url: &str, seen: &Seen, topic: &str, id: &str) {
    let c = client();
    subscribe(
        &c,
        s,
        json!({"clientId": format!("{topic}-hook"), "topic": topic, "url": hook_url}),
    )
    .await;
    publish(&c, s, topic, &event(id)).await;
    let got = pushes(seen, 1).await;
    assert_eq!(got.len(), 1, "{got:?}\n{}", s.log_text());
    let (ce_id, body) = &got[0];
    assert_eq!(ce_id, id);
    assert_eq!(
        serde_json::from_slice::<Value>(body).unwrap(),
        json!({"n": id})
    );
    assert_eq!(body.as_slice(), format!(r#"{{"n":"{id}"}}"#).as_bytes());
}

#[tokio::test]
async fn a_webhook_with_a_certificate_of_the_configured_ca_gets_the_event() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "hooks");
    let (hook_url, seen) = start_https_hook(&pki.server("hook", "hook"), None).await;
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(
        data.path(),
        &[&define("eventmesh.webhook.ca.file", pki.ca_file())],
    );
    delivers(&s, &hook_url, &seen, "tls-hook", "tls-1").await;
    let state = seen.lock().unwrap();
    assert!(state.refused.is_empty(), "{:?}", state.refused);
    // No client certificate was configured, none was shown.
    assert!(state.client_certs.iter().all(Option::is_none));
}

#[tokio::test]
async fn without_the_ca_every_attempt_fails_on_the_certificate_and_the_event_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "hooks");
    let (hook_url, seen) = start_https_hook(&pki.server("hook", "hook"), None).await;
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &["eventmesh.delivery.max.attempts=2"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "untrusting", "topic": "no-ca", "url": hook_url}),
    )
    .await;
    publish(&c, &s, "no-ca", &event("no-ca-1")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let dead: Vec<Value> = loop {
        let dead: Vec<Value> = admin_json(&c, &s, "/admin/dlq/browse?topic=no-ca&max=10").await;
        if !dead.is_empty() {
            break dead;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letter:\n{}",
            s.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(dead.len(), 1, "{dead:?}");
    let letter = &dead[0];
    assert_eq!(letter["attempts"], 2, "{letter}");
    let event: Value = serde_json::from_str(letter["eventJson"].as_str().unwrap()).unwrap();
    assert_eq!(event["id"], "no-ca-1");
    let last_error = letter["lastError"].as_str().unwrap();
    assert!(
        last_error.contains("invalid peer certificate: UnknownIssuer"),
        "{last_error}"
    );
    // Counted once the dead letter is confirmed.
    let dead_count = metric_reaching(
        &c,
        &s,
        "eventmesh_dead_letters_total",
        1.0,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(dead_count, 1.0);
    let m = metrics(&c, &s).await;
    assert_eq!(m.get("eventmesh_push_failures_total"), 2.0, "{}", m.text);
    assert_eq!(m.get("eventmesh_acks_total"), 0.0, "{}", m.text);
    // The receiver saw both handshakes fail and never a request.
    let state = seen.lock().unwrap();
    assert!(state.pushes.is_empty(), "{:?}", state.pushes);
    assert_eq!(state.refused.len(), 2, "{:?}", state.refused);
}

#[tokio::test]
async fn a_webhook_requiring_mutual_tls_gets_the_configured_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "hooks");
    let mesh = pki.client("mesh-client", "eventmesh", Some("mesh"));
    let (hook_url, seen) = start_https_hook(&pki.server("hook", "hook"), Some(pki.ca_file())).await;
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(
        data.path(),
        &[
            &define("eventmesh.webhook.ca.file", pki.ca_file()),
            &define("eventmesh.webhook.tls.cert.file", &mesh.cert),
            &define("eventmesh.webhook.tls.key.file", &mesh.key),
        ],
    );
    delivers(&s, &hook_url, &seen, "mtls-hook", "mtls-1").await;
    let expected = CertificateDer::from_pem_file(&mesh.cert).unwrap();
    let state = seen.lock().unwrap();
    assert!(state.refused.is_empty(), "{:?}", state.refused);
    assert!(!state.client_certs.is_empty());
    assert!(
        state
            .client_certs
            .iter()
            .all(|c| c.as_ref() == Some(&expected)),
        "a connection without the configured client certificate"
    );
}

#[tokio::test]
async fn an_unreadable_webhook_ca_file_stops_the_boot_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-ca.pem");
    let data = dir.path().join("data");
    let (status, out) = run_to_exit(
        &[
            "serve",
            "-D",
            "eventmesh.storage.type=standalone",
            "-D",
            &define("eventmesh.data.dir", &data),
            "-D",
            "eventmesh.server.http.port=0",
            "-D",
            "eventmesh.server.admin.port=0",
            "-D",
            "eventmesh.server.tcp.port=0",
            "-D",
            &define("eventmesh.webhook.ca.file", &missing),
        ],
        &[],
    );
    assert!(!status.success(), "{out}");
    let expected = format!("cannot read the webhook CA file {}: ", missing.display());
    assert!(out.contains(&expected), "{out}");
}
