//! The etcd backend over TLS, against a real etcd that serves its clients
//! over TLS only and requires a client certificate of its own CA
//! (`--client-cert-auth`): the conformance suite passes with a client
//! certificate, and every way of getting the certificates wrong is refused
//! at connect with [`MetaError::Tls`] or [`MetaError::Config`], naming the
//! cause.

// Parts of it serve the plain-text tests only.
#[allow(dead_code)]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use eventmesh_meta::tck::{self, TckOptions};
use eventmesh_meta::{EtcdMetaStore, EtcdSettings, MetaError, MetaStore};
use eventmesh_testpki::TestPki;
use support::Etcd;

const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// A config for `etcd` with its CA and the given client certificate.
fn config(etcd: &Etcd, client: Option<(PathBuf, PathBuf)>) -> EtcdSettings {
    let mut config = EtcdSettings::new([etcd.endpoint()]);
    config.timeout = CALL_TIMEOUT;
    config.tls_ca_file = Some(etcd.tls().ca_file());
    if let Some((cert, key)) = client {
        config.tls_cert_file = Some(cert);
        config.tls_key_file = Some(key);
    }
    config
}

fn accepted_client(etcd: &Etcd) -> Option<(PathBuf, PathBuf)> {
    let pair = &etcd.tls().client;
    Some((pair.cert.clone(), pair.key.clone()))
}

/// Connecting must fail, within the timeout plus a margin; the error.
async fn refused(config: EtcdSettings) -> MetaError {
    let outcome = tokio::time::timeout(CALL_TIMEOUT * 3, EtcdMetaStore::connect(config))
        .await
        .expect("connect gives up on its own");
    match outcome {
        Ok(_) => panic!("connected although the certificates are wrong"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn etcd_over_tls_with_a_client_certificate_passes_the_tck() {
    let etcd = Etcd::start_tls().await;
    assert!(etcd.endpoint().starts_with("https://127.0.0.1:"));
    let store = EtcdMetaStore::connect(config(&etcd, accepted_client(&etcd)))
        .await
        .expect("connects over TLS with a client certificate");
    let opts = TckOptions {
        lease_ttl: Duration::from_secs(2),
    };
    tck::run_all_with(&store, opts).await;
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_with_a_tls_error() {
    let etcd = Etcd::start_tls().await;
    let e = refused(config(&etcd, None)).await;
    // etcd's answer to a handshake without a client certificate is a
    // bad_certificate alert (certificate_required with newer Go).
    assert!(
        matches!(&e, MetaError::Tls(cause)
            if (cause.contains("received fatal alert: BadCertificate")
                || cause.contains("received fatal alert: CertificateRequired"))
                && cause.ends_with("(this client presented no certificate; etcd requires one)")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_client_certificate_of_another_ca_is_refused_with_a_tls_error() {
    let etcd = Etcd::start_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let other = TestPki::new(dir.path(), "other");
    let stranger = other.client("stranger", "eventmesh", None);
    let e = refused(config(&etcd, Some((stranger.cert.clone(), stranger.key)))).await;
    // etcd answers a client certificate of an unknown CA with a
    // bad_certificate alert.
    let expected = format!(
        "etcd: received fatal alert: BadCertificate (etcd did not accept the client \
         certificate {})",
        stranger.cert.display()
    );
    assert!(
        matches!(&e, MetaError::Tls(cause) if *cause == expected),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_server_certificate_of_an_untrusted_ca_is_refused_with_a_tls_error() {
    let etcd = Etcd::start_tls().await;
    let dir = tempfile::tempdir().unwrap();
    let other = TestPki::new(dir.path(), "other");
    let mut with_other_ca = config(&etcd, accepted_client(&etcd));
    with_other_ca.tls_ca_file = Some(other.ca_file().to_path_buf());
    // Without a CA file the system's roots are used, which do not hold the
    // test CA either.
    let mut with_system_roots = config(&etcd, accepted_client(&etcd));
    with_system_roots.tls_ca_file = None;
    for config in [with_other_ca, with_system_roots] {
        let e = refused(config).await;
        assert!(
            matches!(&e, MetaError::Tls(cause) if cause == "etcd: invalid peer certificate: UnknownIssuer"),
            "{e:?}"
        );
    }
}

#[tokio::test]
async fn unusable_pem_files_and_plain_endpoints_fail_before_connecting() {
    let etcd = Etcd::start_tls().await;
    let dir = tempfile::tempdir().unwrap();
    // A key file that holds a certificate, not a key.
    let mut c = config(&etcd, accepted_client(&etcd));
    c.tls_key_file = Some(etcd.tls().client.cert.clone());
    let e = refused(c).await;
    let key = etcd.tls().client.cert.display().to_string();
    assert!(
        matches!(&e, MetaError::Config(m)
            if m.contains(&format!("the etcd client key file {key} holds no usable PEM private key"))),
        "{e:?}"
    );
    // A CA file that does not exist.
    let mut c = config(&etcd, accepted_client(&etcd));
    let missing = dir.path().join("missing-ca.pem");
    c.tls_ca_file = Some(missing.clone());
    let e = refused(c).await;
    assert!(
        matches!(&e, MetaError::Config(m)
            if m.starts_with(&format!("cannot read the etcd CA file {}: ", missing.display()))),
        "{e:?}"
    );
    // TLS files with an http:// endpoint.
    let mut c = config(&etcd, accepted_client(&etcd));
    let plain = etcd.endpoint().replace("https://", "http://");
    c.endpoints = vec![plain.clone()];
    let e = refused(c).await;
    assert!(
        matches!(&e, MetaError::Config(m) if m.starts_with(&format!("etcd endpoint {plain} is not https://"))),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_tls_store_keeps_working_across_an_etcd_restart() {
    let mut etcd = Etcd::start_tls().await;
    let store = EtcdMetaStore::connect(config(&etcd, accepted_client(&etcd)))
        .await
        .unwrap();
    store.put("/tls/k", "v".into()).await.unwrap();
    etcd.restart().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match store.get("/tls/k").await {
            Ok(Some(kv)) => {
                assert_eq!(&kv.value[..], b"v");
                break;
            }
            Ok(None) => panic!("the key was lost across the restart"),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                panic!("the store did not reconnect over TLS: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
