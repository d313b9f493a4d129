//! TLS on the listeners, against the real binary with certificates made at
//! test time: every transport (HTTP, WebSocket, TCP) over TLS through the
//! SDK and the CLI, client certificates naming the caller for the ACL,
//! handshakes refused without a trusted client certificate (the admin port
//! too, as `eventmesh.server.tls.client.auth` asks), certificates
//! replaced under a live connection (by reload and by the file watch), and
//! files that do not load refused at boot and at reload.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use eventmesh_client::{Error, EventMeshClient, StreamOptions, SubscribeOptions, TlsFiles};
use eventmesh_testpki::{Pair, TestPki};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

const WAIT: Duration = Duration::from_secs(10);

fn key(k: &str, path: &Path) -> String {
    format!("{k}={}", path.display())
}

fn tls_settings(server: &Pair) -> Vec<String> {
    vec![
        key("eventmesh.server.tls.cert.file", &server.cert),
        key("eventmesh.server.tls.key.file", &server.key),
    ]
}

fn sdk(s: &Server, tcp: u16, ca: &Path, cert: Option<&Pair>) -> EventMeshClient {
    EventMeshClient::builder()
        .server(&s.traffic)
        .tcp_addr(format!("tls://localhost:{tcp}"))
        .request_timeout(WAIT)
        .tls(TlsFiles {
            ca_file: Some(ca.to_path_buf()),
            cert_file: cert.map(|c| c.cert.clone()),
            key_file: cert.map(|c| c.key.clone()),
        })
        .build()
        .unwrap()
}

fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::Api { code, .. }) => code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn every_transport_speaks_tls_and_a_client_certificate_names_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let server_cert = pki.server("server", "eventmesh");
    let alice = pki.client("alice", "alice", Some("acme"));
    let bob = pki.client("bob", "bob", Some("globex"));
    // The same subject as alice, signed by an authority the server does
    // not trust.
    let rogue = TestPki::new(dir.path(), "rogue").client("rogue", "alice", Some("acme"));
    let acl = dir.path().join("acl");
    std::fs::write(
        &acl,
        "allow alice PUBLISH orders\nallow alice SUBSCRIBE orders\nallow * ACK *\n",
    )
    .unwrap();
    let mut settings = tls_settings(&server_cert);
    settings.extend([
        key("eventmesh.server.tls.client.ca.file", pki.ca_file()),
        "eventmesh.server.admin.tls.enabled=false".to_string(),
        "eventmesh.server.tcp.port=0".to_string(),
        key("eventmesh.security.gate.acl.file", &acl),
        "eventmesh.security.gate.failClosed=true".to_string(),
    ]);
    let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
    let data = dir.path().join("data");
    let s = Server::start(&data, &extra);
    assert!(s.traffic.starts_with("https://"), "{}", s.traffic);
    assert!(s.admin.starts_with("http://"), "{}", s.admin);
    assert!(s.wait_for_log(&["TCP listening on", "(TLS)"]));
    let tcp = port_of(s.tcp.as_deref().unwrap());

    // Plain text on the TLS port gets no answer.
    let plain = s.traffic.replacen("https://", "http://", 1);
    assert!(client()
        .get(format!("{plain}/events/poll"))
        .send()
        .await
        .is_err());
    // The admin port stayed plain, and says so.
    assert_eq!(health(&client(), &s).await["status"], "UP");

    let ev = |id: &str| event(id);
    let alice_sdk = sdk(&s, tcp, pki.ca_file(), Some(&alice));
    // HTTPS.
    let p = alice_sdk.publish("orders", &ev("https-1")).await.unwrap();
    assert_eq!((p.id.as_str(), p.topic.as_str()), ("https-1", "orders"));
    // TCP over TLS.
    let t = alice_sdk.tcp("alice-tcp").await.unwrap();
    t.publish("orders", &ev("tcp-1")).await.unwrap();
    let _ = t.goodbye().await;
    // WebSocket over TLS (wss://): subscribe and receive the two events.
    let mut ws = alice_sdk
        .websocket(StreamOptions::new("alice-ws"))
        .await
        .unwrap();
    ws.subscribe(
        SubscribeOptions::new("alice-ws", "orders").from(eventmesh_client::StartFrom::Earliest),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let d = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a delivery within the wait")
            .expect("the session is open")
            .unwrap();
        got.push(d.event["id"].as_str().unwrap().to_string());
        ws.ack_confirmed(&d.delivery_id).await.unwrap();
    }
    got.sort();
    assert_eq!(got, ["https-1", "tcp-1"]);
    ws.close().await;

    // bob's certificate is valid, and names bob: the ACL refuses him on
    // every transport.
    let bob_sdk = sdk(&s, tcp, pki.ca_file(), Some(&bob));
    assert_eq!(
        code(bob_sdk.publish("orders", &ev("b-1")).await),
        "acl_denied"
    );
    let t = bob_sdk.tcp("bob-tcp").await.unwrap();
    assert_eq!(code(t.publish("orders", &ev("b-2")).await), "acl_denied");
    let _ = t.goodbye().await;
    let subs: Vec<Value> = admin_json(&client(), &s, "/admin/subscriptions").await;
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert_eq!(
        (&subs[0]["principal"], &subs[0]["tenant"]),
        (&Value::from("alice"), &Value::from("acme"))
    );

    // No client certificate, or one from another authority: no handshake.
    for (who, cert) in [("none", None), ("rogue", Some(&rogue))] {
        let c = sdk(&s, tcp, pki.ca_file(), cert);
        let e = c.publish("orders", &ev("x")).await.unwrap_err();
        assert!(e.is_unreachable(), "{who}: {e:?}");
        assert!(c.tcp("x").await.unwrap_err().is_unreachable(), "{who}");
    }
    // A client that does not trust the server's authority refuses it.
    let untrusting = EventMeshClient::builder()
        .server(&s.traffic)
        .build()
        .unwrap();
    assert!(untrusting
        .publish("orders", &ev("y"))
        .await
        .unwrap_err()
        .is_unreachable());
    assert_eq!(
        end_offsets_sum(&s).await,
        2,
        "only alice's two events were stored"
    );

    // The CLI takes the same files (flags and environment).
    let (status, out) = run_to_exit(
        &[
            "publish",
            "--topic",
            "orders",
            "--id",
            "cli-1",
            "--data",
            "{\"n\":1}",
            "--server",
            &s.traffic,
            "--cert-file",
            alice.cert.to_str().unwrap(),
            "--key-file",
            alice.key.to_str().unwrap(),
        ],
        &[("EVENTMESH_CA_FILE", pki.ca_file().to_str().unwrap())],
    );
    assert!(status.success(), "{out}");
    let line: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (&line["id"], &line["topic"]),
        (&Value::from("cli-1"), &Value::from("orders"))
    );
    let (status, out) = run_to_exit(
        &[
            "publish", "--topic", "orders", "--data", "x", "--server", &s.traffic,
        ],
        &[("EVENTMESH_CA_FILE", pki.ca_file().to_str().unwrap())],
    );
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.starts_with("error: cannot reach the eventmesh server"),
        "{out}"
    );
}

async fn end_offsets_sum(s: &Server) -> u64 {
    let topics: Value = admin_json(&client(), s, "/admin/topics").await;
    topics
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["endOffsets"].as_array().unwrap().clone())
        .map(|o| o.as_u64().unwrap())
        .sum()
}

/// A TLS connection trusting `ca`, made by hand so the test sees the
/// certificate the server presented and can keep the connection open.
async fn connect(addr: &str, ca: &Path) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio::time::timeout(
        WAIT,
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp),
    )
    .await
    .expect("handshake within the wait")
    .unwrap()
}

/// The subject CN of the certificate the server presented.
fn presented(stream: &TlsStream<TcpStream>) -> String {
    let cert = &stream.get_ref().1.peer_certificates().unwrap()[0];
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).unwrap();
    let cn = parsed.subject().iter_common_name().next().unwrap();
    cn.as_str().unwrap().to_string()
}

/// One HTTP/1.1 request on a kept-alive connection: the status and body.
async fn request(
    stream: &mut TlsStream<TcpStream>,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, Value) {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head =
        format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\n{auth}content-length: 0\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let deadline = Instant::now() + WAIT;
    let (header_end, length) = loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk))
            .await
            .expect("an answer within the wait")
            .unwrap();
        assert!(n > 0, "the connection closed");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap())
                .expect("a content-length");
            break (end + 4, length);
        }
    };
    while buf.len() < header_end + length {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk))
            .await
            .expect("the body within the wait")
            .unwrap();
        assert!(n > 0, "the connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    let status: u16 = String::from_utf8_lossy(&buf[9..12]).parse().unwrap();
    let body = serde_json::from_slice(&buf[header_end..header_end + length]).unwrap_or(Value::Null);
    (status, body)
}

fn addr_of(url: &str) -> String {
    url.split("://").nth(1).unwrap().to_string()
}

#[tokio::test]
async fn a_certificate_replaced_under_a_live_connection_serves_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let cert = pki.server("server", "first");
    let mut settings = tls_settings(&cert);
    settings.push("eventmesh.server.tls.watch.ms=100".to_string());
    let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
    let s = Server::start(&dir.path().join("data"), &extra);
    let admin = addr_of(&s.admin);
    assert!(s.admin.starts_with("https://"));

    let mut live = connect(&admin, pki.ca_file()).await;
    assert_eq!(presented(&live), "first");
    assert_eq!(
        request(&mut live, "GET", "/admin/health", None).await.0,
        200
    );

    // Replaced, then reloaded on request.
    pki.server("server", "second");
    let mut other = connect(&admin, pki.ca_file()).await;
    let (status, body) = request(&mut other, "POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &Value::from("reloaded")),
        "{body}"
    );
    let fresh = connect(&admin, pki.ca_file()).await;
    assert_eq!(presented(&fresh), "second");
    // The live connection keeps its session and still serves requests.
    assert_eq!(
        request(&mut live, "GET", "/admin/health", None).await.0,
        200
    );
    assert_eq!(presented(&live), "first");

    // Replaced again: the watch notices without being asked.
    pki.server("server", "third");
    let deadline = Instant::now() + WAIT;
    loop {
        let c = connect(&admin, pki.ca_file()).await;
        if presented(&c) == "third" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watch did not load the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        request(&mut live, "GET", "/admin/health", None).await.0,
        200
    );

    // A key that does not load: the reload is refused, nothing changes.
    std::fs::write(&cert.key, "not a key").unwrap();
    let (status, body) = request(&mut other, "POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(
        (status, &body["error"]),
        (400, &Value::from("reload_failed")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the TLS key file {} holds no usable PEM private key",
            cert.key.display()
        )),
        "{message}"
    );
    assert!(s.wait_for_log(&["TLS files changed but do not load"]));
    assert_eq!(presented(&connect(&admin, pki.ca_file()).await), "third");
    assert_eq!(
        request(&mut live, "GET", "/admin/health", None).await.0,
        200
    );
}

#[test]
fn tls_files_that_do_not_fit_stop_the_boot() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let a = pki.server("a", "a");
    let b = pki.server("b", "b");
    let data = dir.path().join("data");
    let base = [
        "serve".to_string(),
        "-D".to_string(),
        "eventmesh.storage.type=standalone".to_string(),
        "-D".to_string(),
        format!("eventmesh.data.dir={}", data.display()),
        "-D".to_string(),
        "eventmesh.server.http.port=0".to_string(),
        "-D".to_string(),
        "eventmesh.server.admin.port=0".to_string(),
        "-D".to_string(),
        "eventmesh.server.tcp.port=0".to_string(),
    ];
    let run = |more: &[String]| {
        let mut args = base.to_vec();
        for m in more {
            args.push("-D".to_string());
            args.push(m.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_to_exit(&args, &[])
    };
    // A certificate without its key.
    let (status, out) = run(&[key("eventmesh.server.tls.cert.file", &a.cert)]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains(
            "eventmesh.server.tls.cert.file and eventmesh.server.tls.key.file must be set together"
        ),
        "{out}"
    );
    // Another certificate's key.
    let (status, out) = run(&[
        key("eventmesh.server.tls.cert.file", &a.cert),
        key("eventmesh.server.tls.key.file", &b.key),
    ]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "the key in {} does not serve the certificate in {}",
            b.key.display(),
            a.cert.display()
        )),
        "{out}"
    );
    // A client CA that is not a certificate file.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "junk").unwrap();
    let (status, out) = run(&[
        key("eventmesh.server.tls.cert.file", &a.cert),
        key("eventmesh.server.tls.key.file", &a.key),
        key("eventmesh.server.tls.client.ca.file", &junk),
    ]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "the client CA file {} holds no PEM certificate",
            junk.display()
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_call_each_other_over_mutual_tls() {
    use common::mesh::{ids, settled, Mesh, LEASE_MS, SERIAL};
    let _one = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let server_cert = pki.server("server", "eventmesh");
    let alice = pki.client("alice", "alice", Some("acme"));
    let mut settings = tls_settings(&server_cert);
    settings.extend([
        key("eventmesh.server.tls.client.ca.file", pki.ca_file()),
        "eventmesh.server.admin.tls.enabled=false".to_string(),
    ]);
    let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
    let mesh = Mesh::start_with(2, "TLSMESH", LEASE_MS, &extra).await;
    let c = client();
    // alice polls on i-1; half the partitions are owned by i-0, whose
    // deliveries reach her over the internal channel, and whose acks go
    // back over it: both over mutual TLS.
    let on = |k: usize| {
        EventMeshClient::builder()
            .server(&mesh.s(k).traffic)
            .request_timeout(WAIT)
            .tls(TlsFiles {
                ca_file: Some(pki.ca_file().to_path_buf()),
                cert_file: Some(alice.cert.clone()),
                key_file: Some(alice.key.clone()),
            })
            .build()
            .unwrap()
    };
    let (home, publisher) = (on(1), on(0));
    home.subscribe(SubscribeOptions::new("alice-poll", "orders"))
        .await
        .unwrap();
    let owners = settled(
        &c,
        mesh.s(0),
        "orders",
        &ids(&mesh),
        Duration::from_secs(30),
    )
    .await;
    assert!(
        owners.values().any(|o| o == "i-0") && owners.values().any(|o| o == "i-1"),
        "both instances own partitions: {owners:?}"
    );
    const N: usize = 60;
    let batch: Vec<Value> = (0..N).map(|i| event(&format!("m{i}"))).collect();
    publisher.publish_batch("orders", &batch).await.unwrap();
    let mut got = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < N {
        assert!(
            Instant::now() < deadline,
            "only {} of {N} arrived",
            got.len()
        );
        for d in home
            .poll("alice-poll", Duration::from_secs(1), 100)
            .await
            .unwrap()
        {
            home.ack(&d.delivery_id).await.unwrap();
            assert!(got.insert(d.event["id"].as_str().unwrap().to_string()));
        }
    }
    // Every acknowledgement reached the partition's owner: nothing is
    // left to commit anywhere.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows: Vec<Value> = admin_json(&c, mesh.s(0), "/admin/offsets?topic=orders").await;
        if rows.len() == common::mesh::PARTITIONS as usize && rows.iter().all(|r| r["lag"] == 0) {
            break;
        }
        assert!(Instant::now() < deadline, "not all committed: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One request on a new TLS connection trusting `ca` and presenting
/// `cert` (if any): the status and body, or the error that ended the
/// connection (a refused handshake shows as the alert the server sent,
/// which TLS 1.3 lets the client see only at its first read).
async fn tls_call(
    addr: &str,
    ca: &Path,
    cert: Option<&Pair>,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, Value), String> {
    use rustls::pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some(p) => {
            let chain = CertificateDer::pem_file_iter(&p.cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(&p.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut stream = tokio::time::timeout(
        WAIT,
        connector.connect(ServerName::try_from("localhost").unwrap(), tcp),
    )
    .await
    .expect("a handshake within the wait")
    .map_err(|e| e.to_string())?;
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n{auth}content-length: 0\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse::<usize>().unwrap())
                .expect("a content-length");
            if buf.len() >= end + 4 + length {
                let status: u16 = String::from_utf8_lossy(&buf[9..12]).parse().unwrap();
                let body = &buf[end + 4..end + 4 + length];
                return Ok((status, serde_json::from_slice(body).unwrap_or(Value::Null)));
            }
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), stream.read(&mut chunk))
            .await
            .expect("an answer within the wait")
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed without an answer".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_asks_for_client_certificates_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let server_cert = pki.server("server", "eventmesh");
    let ops = pki.client("ops", "ops", Some("acme"));
    let rogue = TestPki::new(dir.path(), "rogue").client("rogue", "ops", Some("acme"));
    let unauthorized = |message: &str| {
        Ok((
            401,
            serde_json::json!({"error": "unauthorized", "message": message}),
        ))
    };
    let missing = unauthorized("missing bearer token (the admin token)");
    let wrong = unauthorized("wrong bearer token (the admin token)");
    for auth in ["required", "optional"] {
        let mut settings = tls_settings(&server_cert);
        settings.extend([
            key("eventmesh.server.tls.client.ca.file", pki.ca_file()),
            format!("eventmesh.server.tls.client.auth={auth}"),
            "eventmesh.server.admin.tls.enabled=true".to_string(),
        ]);
        let extra: Vec<&str> = settings.iter().map(String::as_str).collect();
        let s = Server::start(&dir.path().join(auth), &extra);
        assert!(s.admin.starts_with("https://"), "{auth}: {}", s.admin);
        let admin = addr_of(&s.admin);
        let ca = pki.ca_file();
        let call = |cert: Option<&'static str>, token: Option<&'static str>| {
            let cert = match cert {
                Some("ops") => Some(ops.clone()),
                Some(_) => Some(rogue.clone()),
                None => None,
            };
            let admin = admin.clone();
            async move { tls_call(&admin, ca, cert.as_ref(), "/admin/topics", token).await }
        };
        // A certificate of the client CA: in, and the token is still needed.
        assert_eq!(
            call(Some("ops"), Some(TOKEN)).await,
            Ok((200, serde_json::json!([]))),
            "{auth}"
        );
        assert_eq!(call(Some("ops"), None).await, missing, "{auth}");
        assert_eq!(
            call(Some("ops"), Some("wrong-token-16-bytes")).await,
            wrong,
            "{auth}"
        );
        // A certificate of another authority: refused either way.
        let refused = call(Some("rogue"), Some(TOKEN)).await;
        assert!(
            refused.as_ref().is_err_and(|e| e.contains("UnknownCA")),
            "{auth}: {refused:?}"
        );
        // No certificate at all.
        let bare = call(None, Some(TOKEN)).await;
        if auth == "required" {
            assert!(
                bare.as_ref()
                    .is_err_and(|e| e.contains("CertificateRequired")),
                "{auth}: {bare:?}"
            );
            let health = tls_call(&admin, ca, None, "/admin/health", None).await;
            assert!(health.is_err(), "not even health: {health:?}");
        } else {
            assert_eq!(bare, Ok((200, serde_json::json!([]))), "{auth}");
            assert_eq!(call(None, None).await, missing, "{auth}");
            let health = tls_call(&admin, ca, None, "/admin/health", None).await;
            assert_eq!(
                health.map(|(st, v)| (st, v["status"].clone())),
                Ok((200, "UP".into()))
            );
        }
    }
}
