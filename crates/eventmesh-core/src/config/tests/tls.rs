//! The TLS keys: the listeners' certificate and client CA, and the files
//! of the outbound connections (etcd, NATS, webhooks).

use super::*;

#[test]
fn listener_tls_keys_default_plain_and_must_fit_together() {
    let c = cfg(&[]);
    assert!(!c.server.tls.configured());
    assert_eq!(c.server.tls.client_auth, ClientAuth::Required);
    assert_eq!(c.server.tls.watch, Duration::from_millis(5000));
    assert!(c.server.http.tls && c.server.admin.tls && c.server.tcp.tls);
    let c = cfg(&[
        ("eventmesh.server.tls.cert.file", "/etc/em/server.pem"),
        ("eventmesh.server.tls.key.file", "/etc/em/server-key.pem"),
        ("eventmesh.server.tls.client.ca.file", "/etc/em/ca.pem"),
        ("eventmesh.server.tls.client.auth", "OPTIONAL"),
        ("eventmesh.server.admin.tls.enabled", "false"),
        ("eventmesh.server.tls.watch.ms", "0"),
    ]);
    assert!(c.server.tls.configured());
    assert_eq!(c.server.tls.client_auth, ClientAuth::Optional);
    assert_eq!(c.server.tls.watch, Duration::ZERO);
    assert!(c.server.http.tls && !c.server.admin.tls && c.server.tcp.tls);
    fails(
        &[("eventmesh.server.tls.key.file", "/k.pem")],
        &["eventmesh.server.tls.cert.file and eventmesh.server.tls.key.file must be set together"],
    );
    fails(
        &[("eventmesh.server.tls.client.ca.file", "/ca.pem")],
        &["eventmesh.server.tls.client.ca.file needs eventmesh.server.tls.cert.file"],
    );
    fails(
        &[("eventmesh.server.tls.client.auth", "sometimes")],
        &[
            "eventmesh.server.tls.client.auth",
            "sometimes",
            "required, optional",
        ],
    );
}

#[test]
fn outbound_tls_files_are_typed_and_checked() {
    const CA: &str = "eventmesh.meta.etcd.tls.ca.file";
    const CERT: &str = "eventmesh.meta.etcd.tls.cert.file";
    const KEY: &str = "eventmesh.meta.etcd.tls.key.file";
    const ENDPOINTS: &str = "eventmesh.meta.etcd.endpoints";
    let c = cfg(&[
        (META, "etcd"),
        (ENDPOINTS, "https://a:2379,https://b:2379"),
        (CA, "/pki/ca.pem"),
        (CERT, "/pki/mesh.pem"),
        (KEY, "/pki/mesh-key.pem"),
        ("eventmesh.storage.jetstream.tls.cert.file", "/pki/nats.pem"),
        (
            "eventmesh.storage.jetstream.tls.key.file",
            "/pki/nats-key.pem",
        ),
        ("eventmesh.webhook.ca.file", "/pki/hooks-ca.pem"),
        ("eventmesh.webhook.tls.cert.file", "/pki/hooks.pem"),
        ("eventmesh.webhook.tls.key.file", "/pki/hooks-key.pem"),
    ]);
    let etcd = &c.meta.etcd;
    assert_eq!(etcd.tls_ca_file, Some(PathBuf::from("/pki/ca.pem")));
    assert_eq!(etcd.tls_cert_file, Some(PathBuf::from("/pki/mesh.pem")));
    assert_eq!(etcd.tls_key_file, Some(PathBuf::from("/pki/mesh-key.pem")));
    assert!(etcd.tls_files());
    let js = &c.storage.jetstream;
    assert_eq!(js.tls_cert_file, Some(PathBuf::from("/pki/nats.pem")));
    assert_eq!(js.tls_key_file, Some(PathBuf::from("/pki/nats-key.pem")));
    assert_eq!(
        c.delivery.webhook_tls,
        WebhookTlsConfig {
            ca_file: Some(PathBuf::from("/pki/hooks-ca.pem")),
            cert_file: Some(PathBuf::from("/pki/hooks.pem")),
            key_file: Some(PathBuf::from("/pki/hooks-key.pem")),
        }
    );
    // Nothing set: no TLS files anywhere.
    let plain = cfg(&[]);
    assert!(!plain.meta.etcd.tls_files());
    assert_eq!(plain.delivery.webhook_tls, WebhookTlsConfig::default());
    // https:// endpoints alone are fine (the system's roots).
    cfg(&[(ENDPOINTS, "https://a:2379")]);

    // A certificate without its key, or a key without its certificate.
    let https = (ENDPOINTS, "https://a:2379");
    assert_eq!(
        err(&[https, (CERT, "/pki/mesh.pem")]),
        "eventmesh.meta.etcd.tls.cert.file is set but eventmesh.meta.etcd.tls.key.file is not; \
         a client certificate needs its private key (set both, or neither)"
    );
    assert_eq!(
        err(&[https, (KEY, "/pki/mesh-key.pem")]),
        "eventmesh.meta.etcd.tls.key.file is set but eventmesh.meta.etcd.tls.cert.file is not; \
         a private key needs its certificate (set both, or neither)"
    );
    fails(
        &[("eventmesh.storage.jetstream.tls.cert.file", "/pki/n.pem")],
        &[
            "eventmesh.storage.jetstream.tls.cert.file is set but",
            "eventmesh.storage.jetstream.tls.key.file is not",
        ],
    );
    fails(
        &[("eventmesh.webhook.tls.key.file", "/pki/h-key.pem")],
        &[
            "eventmesh.webhook.tls.key.file is set but",
            "eventmesh.webhook.tls.cert.file is not",
        ],
    );
    // TLS files with a plain-text endpoint: the endpoint and the keys named.
    assert_eq!(
        err(&[
            (ENDPOINTS, "https://a:2379,http://b:2379"),
            (CA, "/pki/ca.pem")
        ]),
        "eventmesh.meta.etcd.endpoints has the plain-text endpoint http://b:2379 while \
         eventmesh.meta.etcd.tls.ca.file is set; TLS to etcd needs https:// endpoints"
    );
    assert_eq!(
        err(&[(CERT, "/pki/mesh.pem"), (KEY, "/pki/mesh-key.pem")]),
        "eventmesh.meta.etcd.endpoints has the plain-text endpoint http://127.0.0.1:2379 while \
         eventmesh.meta.etcd.tls.cert.file and eventmesh.meta.etcd.tls.key.file are set; \
         TLS to etcd needs https:// endpoints"
    );
    // Without TLS files, one scheme for all endpoints all the same.
    assert_eq!(
        err(&[(ENDPOINTS, "http://a:2379,https://b:2379")]),
        "eventmesh.meta.etcd.endpoints mixes http:// (http://a:2379) and https:// \
         (https://b:2379) endpoints; use one scheme for all of them"
    );
}
