//! Unit tests of the NATS driver: the payload stamp, target URLs,
//! subjects and stream names without a server; an unreachable server and
//! a malformed URL as clear errors; and every workload run briefly
//! against a real `nats-server` with JetStream (its own, unless
//! `EVENTMESH_BENCH_NATS_URL` names one), checking that each completes
//! without errors, that a paced run holds its rate within 2%, that a
//! second run on the same topic starts from an empty stream, and that a
//! backlog of 3000 is drained exactly once.

use std::sync::Arc;
use std::time::Duration;

use super::conn::{check_subject, due_offset, server_addr, stamped_payload, stream_name};
use super::{publish, pubsub, request, sub, STAMP_LEN};
use crate::workload::{Recorder, Workload};

#[test]
fn stamp_round_trips_and_pads() {
    let d = Duration::from_nanos(12_345_678_901);
    let p = stamped_payload(d, 1024);
    assert_eq!(p.len(), 1024);
    assert_eq!(due_offset(&p), Some(d));
    assert!(p[STAMP_LEN..].iter().all(|&b| b == b'x'));
    // Too small for the stamp: grown to hold it.
    let p = stamped_payload(Duration::from_secs(3), 2);
    assert_eq!(p.len(), STAMP_LEN);
    assert_eq!(due_offset(&p), Some(Duration::from_secs(3)));
    assert_eq!(due_offset(b"short"), None);
    assert_eq!(
        due_offset(&[1, 0, 0, 0, 0, 0, 0, 0]),
        Some(Duration::from_nanos(1))
    );
}

#[test]
fn urls() {
    let a = server_addr("nats://127.0.0.1:4333").unwrap();
    assert_eq!((a.host(), a.port()), ("127.0.0.1", 4333));
    let a = server_addr(" nats://localhost:4333/ ").unwrap();
    assert_eq!((a.host(), a.port()), ("localhost", 4333));
    let a = server_addr("127.0.0.1:4333").unwrap();
    assert_eq!((a.host(), a.port()), ("127.0.0.1", 4333));
    let a = server_addr("nats://example.com").unwrap();
    assert_eq!(a.port(), 4222);
    assert!(server_addr("tls://example.com:4443")
        .unwrap()
        .tls_required());
    for bad in [
        "http://127.0.0.1:4222",
        "ws://127.0.0.1:8080",
        "nats://",
        "nats://h:4222/stream",
        "nats://h:4222?x=1",
        "nats://h:notaport",
    ] {
        assert!(server_addr(bad).is_err(), "{bad} should be rejected");
    }
}

#[test]
fn subjects_and_stream_names() {
    for ok in ["bench", "bench.e2e", "orders/v1", "a-b_c"] {
        assert!(check_subject(ok).is_ok(), "{ok}");
    }
    for bad in ["", "a b", "a..b", ".a", "a.", "a.*", ">", "a.>"] {
        assert!(check_subject(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        stream_name("bench.e2e/x y"),
        "eventmesh-bench-bench_e2e_x_y"
    );
    assert_eq!(stream_name("bench"), "eventmesh-bench-bench");
}

fn workload(topic: &str) -> Workload {
    Workload {
        size: 1024,
        publishers: 2,
        subscribers: 2,
        batch: 1,
        window: 32,
        count: None,
        duration: Some(Duration::from_millis(1500)),
        warmup: Duration::from_millis(500),
        rate: None,
        topic: topic.to_owned(),
        msg_ids: false,
        select: None,
        groups: None,
        links: None,
    }
}

#[tokio::test]
async fn unreachable_server_is_a_clear_error() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let w = workload("bench");
    let rec = Arc::new(Recorder::new(&w));
    let e = publish(&url, &w, &rec).await.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("cannot reach NATS at {url}: ")),
        "{e}"
    );
    let e = pubsub("http://x", &w, &rec).await.unwrap_err().to_string();
    assert!(e.contains("invalid NATS URL"), "{e}");
}

/// A `nats-server -js` of its own (loopback, a free port, a temporary
/// store), killed when dropped. Fails, never skips, when the binary is
/// missing (Debian/Ubuntu: `apt-get install nats-server`).
struct NatsServer {
    child: std::process::Child,
    url: String,
    _store: tempfile::TempDir,
}

impl NatsServer {
    fn start() -> NatsServer {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let bin = std::env::split_paths(&path)
            .chain([std::path::PathBuf::from("/usr/sbin")])
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
            .expect(
                "`nats-server` was not found on PATH or in /usr/sbin; this test needs a \
                 real NATS server with JetStream (Debian/Ubuntu: `apt-get install nats-server`)",
            );
        let store = tempfile::tempdir().expect("tempdir for the NATS store");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free localhost port")
            .port();
        let log = store.path().join("nats.log");
        let child = std::process::Command::new(&bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path())
            .arg("-l")
            .arg(&log)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let server = NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _store: store,
        };
        let ready = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Server is ready") {
                return server;
            }
            assert!(
                std::time::Instant::now() < ready,
                "nats-server did not become ready within 20 s; its log:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs every workload briefly against a real NATS server (JetStream
/// enabled, default sync policy: with `sync_interval: always` the rate
/// below is not sustained): the one named by `EVENTMESH_BENCH_NATS_URL`,
/// else one started for the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_real_server() {
    let (url, _own) = match std::env::var("EVENTMESH_BENCH_NATS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = NatsServer::start();
            (server.url.clone(), Some(server))
        }
    };

    let w = workload("eventmesh-bench.test.pub");
    let rec = Arc::new(Recorder::new(&w));
    publish(&url, &w, &rec).await.unwrap();
    let s = rec.summary();
    eprintln!("publish: {s}");
    assert!(s.events > 100, "{s:?}");
    assert!(s.errors.is_empty(), "{s:?}");
    assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);

    // Paced: the rate is held, one publisher, two subscribers sharing
    // the work queue.
    let mut w = workload("eventmesh-bench.test.e2e");
    w.publishers = 1;
    w.rate = Some(2000.0);
    let rec = Arc::new(Recorder::new(&w));
    pubsub(&url, &w, &rec).await.unwrap();
    let s = rec.summary();
    eprintln!("pubsub: {s}");
    assert!(s.errors.is_empty(), "{s:?}");
    let expected = 2000.0 * w.duration.unwrap().as_secs_f64();
    assert!(
        (s.events as f64 - expected).abs() <= expected * 0.02,
        "{s:?}"
    );
    assert!(s.p50_ms > 0.0 && s.p50_ms < 100.0, "{s:?}");

    // A second run on the same topic starts from an empty stream.
    let rec = Arc::new(Recorder::new(&w));
    pubsub(&url, &w, &rec).await.unwrap();
    let s2 = rec.summary();
    assert!(s2.errors.is_empty(), "{s2:?}");
    assert!(
        (s2.events as f64 - expected).abs() <= expected * 0.02,
        "{s2:?}"
    );

    // A backlog of 3000, drained by two subscribers.
    let mut w = workload("eventmesh-bench.test.sub");
    w.count = Some(3000);
    w.duration = Some(Duration::from_secs(20));
    let rec = Arc::new(Recorder::held(&w));
    sub(&url, &w, &rec).await.unwrap();
    let s = rec.summary();
    eprintln!("sub: {s}");
    assert!(s.errors.is_empty(), "{s:?}");
    assert_eq!(s.events, 3000, "{s:?}");
    assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);

    // Core request-reply.
    let w = workload("eventmesh-bench.test.request");
    let rec = Arc::new(Recorder::new(&w));
    request(&url, &w, &rec).await.unwrap();
    let s = rec.summary();
    eprintln!("request: {s}");
    assert!(s.events > 100, "{s:?}");
    assert!(s.errors.is_empty(), "{s:?}");
    assert!(s.p50_ms > 0.0 && s.p50_ms <= s.p99_ms && s.p99_ms <= s.max_ms);
}
