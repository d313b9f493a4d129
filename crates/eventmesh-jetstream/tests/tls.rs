//! The event log over TLS, against a real `nats-server -js` whose client
//! port speaks TLS only and verifies client certificates (`verify: true`):
//! the storage conformance suite passes with a client certificate, and a
//! client that does not trust the server, or shows no certificate, fails
//! fast with the URL and the cause.

use std::time::{Duration, Instant};

use eventmesh_jetstream::testutil::{NatsServer, NatsTls};
use eventmesh_jetstream::{JetStreamLog, JetStreamSettings};
use eventmesh_storage::{tck, EventLog, StorageError};
use eventmesh_testpki::{Pair, TestPki};

const TIMEOUT: Duration = Duration::from_secs(3);

/// A server with TLS from `pki`, and a client certificate it accepts.
struct Fixture {
    nats: NatsServer,
    pki: TestPki,
    client: Pair,
    _dir: tempfile::TempDir,
}

fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "nats");
    let server = pki.server("nats-server", "nats");
    let client = pki.client("nats-client", "eventmesh", None);
    let nats = NatsServer::start_tls(NatsTls {
        cert_file: server.cert,
        key_file: server.key,
        ca_file: pki.ca_file().to_path_buf(),
        verify: true,
    });
    Fixture {
        nats,
        pki,
        client,
        _dir: dir,
    }
}

fn settings(f: &Fixture, prefix: &str) -> JetStreamSettings {
    JetStreamSettings {
        servers: vec![f.nats.url()],
        replicas: 1,
        prefix: prefix.to_string(),
        timeout: TIMEOUT,
        read_cache_bytes: 8 << 20,
        tls_ca_file: Some(f.pki.ca_file().to_path_buf()),
        tls_cert_file: Some(f.client.cert.clone()),
        tls_key_file: Some(f.client.key.clone()),
        ..Default::default()
    }
}

/// Connecting must fail, and within the connect bound; the servers and
/// cause of the error.
async fn refused(opts: &JetStreamSettings) -> (String, String) {
    let started = Instant::now();
    let outcome = JetStreamLog::connect(opts, Duration::from_secs(120)).await;
    let took = started.elapsed();
    assert!(
        took < TIMEOUT * 2 + Duration::from_secs(1),
        "a refused connect took {took:?}"
    );
    match outcome {
        Ok(_) => panic!("connected although the certificates are wrong"),
        Err(StorageError::Connect { servers, cause }) => (servers, cause),
        Err(other) => panic!("not a connect error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_tck_passes_over_tls_with_a_client_certificate() {
    let f = start();
    assert!(f.nats.url().starts_with("tls://127.0.0.1:"));
    let log = JetStreamLog::connect(&settings(&f, "TLSTCK"), Duration::from_secs(120))
        .await
        .expect("connects over TLS with a client certificate");
    tck::run_all(&*log).await;
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_an_untrusted_ca_fails_fast_with_the_url_and_cause() {
    let f = start();
    let dir = tempfile::tempdir().unwrap();
    let other = TestPki::new(dir.path(), "other");
    let mut opts = settings(&f, "WRONGCA");
    opts.tls_ca_file = Some(other.ca_file().to_path_buf());
    let (servers, cause) = refused(&opts).await;
    assert_eq!(servers, f.nats.url());
    assert_eq!(
        cause,
        "cannot connect: IO error: invalid peer certificate: UnknownIssuer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused() {
    let f = start();
    let mut opts = settings(&f, "NOCERT");
    opts.tls_cert_file = None;
    opts.tls_key_file = None;
    let (servers, cause) = refused(&opts).await;
    assert_eq!(servers, f.nats.url());
    assert_eq!(
        cause,
        "cannot connect: IO error: received fatal alert: CertificateRequired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_of_another_ca_is_refused() {
    let f = start();
    let dir = tempfile::tempdir().unwrap();
    let other = TestPki::new(dir.path(), "other");
    let stranger = other.client("stranger", "eventmesh", None);
    let mut opts = settings(&f, "STRANGER");
    opts.tls_cert_file = Some(stranger.cert);
    opts.tls_key_file = Some(stranger.key);
    let (servers, cause) = refused(&opts).await;
    assert_eq!(servers, f.nats.url());
    assert_eq!(
        cause,
        "cannot connect: IO error: received fatal alert: UnknownCA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_pem_files_fail_before_connecting_with_the_path() {
    let f = start();
    let mut opts = settings(&f, "BADPEM");
    // The key file holds a certificate, not a key.
    opts.tls_key_file = Some(f.client.cert.clone());
    let (servers, cause) = refused(&opts).await;
    assert_eq!(servers, f.nats.url());
    assert!(
        cause.starts_with(&format!(
            "the NATS client key file {} holds no usable PEM private key",
            f.client.cert.display()
        )),
        "{cause}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_over_tls_read_back_whole() {
    let f = start();
    let log = JetStreamLog::connect(&settings(&f, "TLSRW"), Duration::from_secs(120))
        .await
        .unwrap();
    log.create_topic("t", 2).await.unwrap();
    let offsets = log
        .append("t", vec![(0, "a".into()), (1, "b".into()), (0, "c".into())])
        .await
        .unwrap();
    let read = log.read("t", 0, 0, 10, usize::MAX).await.unwrap();
    let got: Vec<(u64, Vec<u8>)> = read
        .iter()
        .map(|r| (r.offset, r.payload.to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![(offsets[0], b"a".to_vec()), (offsets[2], b"c".to_vec())]
    );
    log.close().await;
}
