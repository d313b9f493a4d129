//! A mesh link to a remote that serves TLS and asks for client
//! certificates: with the remote's authority and a client certificate the
//! link comes up and its events arrive, the certificate naming the link's
//! principal at the remote; without the certificate, or without trusting
//! the remote's authority, it stays `DOWN` with the handshake's reason and
//! its events wait.

mod common;

use std::path::Path;

use common::connectors::{drain, reader};
use common::links::*;
use common::topics::admin;
use common::*;
use eventmesh_testpki::TestPki;
use serde_json::json;

fn key(k: &str, path: &Path) -> String {
    format!("{k}={}", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_link_speaks_mutual_tls_to_its_remote() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mesh");
    let server = pki.server("server", "eventmesh");
    let linker = pki.client("linker", "linker", Some("acme"));
    let c = client();
    // B: TLS on the traffic port, client certificates required, and an ACL
    // that lets the certificate's principal publish `orders` only.
    let acl = dir.path().join("acl");
    std::fs::write(&acl, "allow linker PUBLISH orders\nallow app * *\n").unwrap();
    let b = Site::start(
        "b",
        &[
            key("eventmesh.server.tls.cert.file", &server.cert),
            key("eventmesh.server.tls.key.file", &server.key),
            key("eventmesh.server.tls.client.ca.file", pki.ca_file()),
            "eventmesh.server.admin.tls.enabled=false".to_string(),
            key("eventmesh.security.gate.acl.file", &acl),
            "eventmesh.security.gate.failClosed=true".to_string(),
        ],
    );
    assert!(b.traffic.starts_with("https://"), "{}", b.traffic);
    let a = Site::start("a", &[]);
    let ca = pki.ca_file().display().to_string();
    let remote = |cert: bool, trust: bool| {
        let mut r = json!({"url": b.traffic, "cluster": "b"});
        if trust {
            r["caFile"] = json!(ca);
        }
        if cert {
            r["certFile"] = json!(linker.cert.display().to_string());
            r["keyFile"] = json!(linker.key.display().to_string());
        }
        r
    };
    // Without a client certificate, and without trusting B's authority.
    link(
        &c,
        &a,
        "no-cert",
        &b.traffic,
        b.name,
        json!({"remote": remote(false, true)}),
    )
    .await;
    link(
        &c,
        &a,
        "no-trust",
        &b.traffic,
        b.name,
        json!({"remote": remote(true, false)}),
    )
    .await;
    for (name, why) in [
        ("no-cert", "TLS: received fatal alert: CertificateRequired"),
        ("no-trust", "invalid peer certificate: UnknownIssuer"),
    ] {
        let v = link_reaching(&c, &a, name, "down", |v| v["status"]["state"] == "DOWN").await;
        assert_eq!(
            v["status"]["lastError"],
            format!(
                "open: cannot learn the remote's cluster name: cannot reach the eventmesh server at {}: {why}",
                b.traffic
            )
        );
    }
    // With both: up, and what it sends arrives as the certificate's principal.
    let v = link(
        &c,
        &a,
        "to-b",
        &b.traffic,
        b.name,
        json!({"remote": remote(true, true)}),
    )
    .await;
    assert_eq!(v["remote"]["certFile"], linker.cert.display().to_string());
    link_reaching(&c, &a, "to-b", "up", |v| v["status"]["state"] == "UP").await;
    let app = pki.client("app", "app", Some("acme"));
    let as_app = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(pki.ca_file()).unwrap()).unwrap(),
        )
        .identity(
            reqwest::Identity::from_pem(
                &[
                    std::fs::read(&app.cert).unwrap(),
                    std::fs::read(&app.key).unwrap(),
                ]
                .concat(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    reader(&as_app, &b, "app", "orders").await;
    publish_numbered(&c, &a, "orders", 30).await;
    let got = drain(&as_app, &b, "app", 30, WAIT).await;
    assert_eq!(got.len(), 30);
    assert!(got.values().all(|(ev, n)| *n == 1 && path(ev) == ["a"]));
    for name in ["no-cert", "no-trust"] {
        let v = link_view(&c, &a, name).await;
        assert_eq!(v["status"]["state"], "DOWN", "{v}");
    }
    let (code, _) = admin(
        &c,
        &a,
        reqwest::Method::DELETE,
        "/admin/links/no-cert",
        None,
    )
    .await;
    assert_eq!(code, 204);
}
