//! Boot behaviour of the real binary: help, configuration fail-fast cases
//! (exit code and message, before any port is bound), RocksDB open
//! failures, and graceful shutdown.

mod common;

use common::{run_to_exit, Server};

/// Every port on 0 (an ephemeral one): a case that should fail before
/// binding, but does not, must not take the default ports of a runtime
/// running on this machine, nor fail for want of them.
const FREE_PORTS: [&str; 6] = [
    "-D",
    "eventmesh.server.http.port=0",
    "-D",
    "eventmesh.server.admin.port=0",
    "-D",
    "eventmesh.server.tcp.port=0",
];

/// `serve` on free ports with the given settings (and nothing else).
fn serve_bare<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["serve"];
    v.extend(FREE_PORTS);
    for e in extra {
        v.push("-D");
        v.push(e);
    }
    v
}

/// `serve` on free ports with the standalone storage and the given settings.
fn serve_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = serve_bare(&["eventmesh.storage.type=standalone"]);
    for e in extra {
        v.push("-D");
        v.push(e);
    }
    v
}

#[test]
fn help_explains_commands_and_flags() {
    let (status, out) = run_to_exit(&["--help"], &[]);
    assert!(status.success(), "{out}");
    assert!(out.contains("serve"), "{out}");
    let (status, out) = run_to_exit(&["serve", "--help"], &[]);
    assert!(status.success(), "{out}");
    assert!(out.contains("--config") && out.contains("-D"), "{out}");
}

#[test]
fn unknown_topology_fails_fast_naming_value_and_choices() {
    let (status, err) = run_to_exit(
        &serve_args(&["eventmesh.delivery.topology=PARTITION_OWNER"]),
        &[],
    );
    assert!(!status.success());
    assert_eq!(status.code(), Some(2), "{err}");
    for needle in [
        "PARTITION_OWNER",
        "LOCAL_STICKY_PULL",
        "PARTITION_OWNED_PULL",
    ] {
        assert!(err.contains(needle), "missing {needle} in: {err}");
    }
    assert!(!err.contains("listening"), "no port may be bound: {err}");
}

#[test]
fn topology_from_environment_is_validated() {
    let (status, err) = run_to_exit(
        &serve_args(&[]),
        &[("EVENTMESH_DELIVERY_TOPOLOGY", "PARTITION_OWNER")],
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("PARTITION_OWNER"), "{err}");
}

#[test]
fn partition_owned_pull_requires_cluster_meta_store() {
    let (status, err) = run_to_exit(
        &serve_args(&["eventmesh.delivery.topology=PARTITION_OWNED_PULL"]),
        &[],
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("eventmesh.cluster.enabled"), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

#[test]
fn storage_type_must_be_set_and_supported() {
    let (status, err) = run_to_exit(&serve_bare(&[]), &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("eventmesh.storage.type") && err.contains("standalone"),
        "{err}"
    );
    let (status, err) = run_to_exit(&serve_bare(&["eventmesh.storage.type=kafka"]), &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("kafka") && err.contains("standalone"), "{err}");
}

#[test]
fn malformed_values_name_key_and_value() {
    for (kv, key, value) in [
        (
            "eventmesh.server.http.port=abc",
            "eventmesh.server.http.port",
            "abc",
        ),
        (
            "eventmesh.server.admin.port=70000",
            "eventmesh.server.admin.port",
            "70000",
        ),
        (
            "eventmesh.http.max.body.bytes=-5",
            "eventmesh.http.max.body.bytes",
            "-5",
        ),
        (
            "eventmesh.delivery.backoff.jitter=1.5",
            "eventmesh.delivery.backoff.jitter",
            "1.5",
        ),
    ] {
        let (status, err) = run_to_exit(&serve_args(&[kv]), &[]);
        assert_eq!(status.code(), Some(2), "{kv}: {err}");
        assert!(err.contains(key) && err.contains(value), "{kv}: {err}");
    }
    let (status, err) = run_to_exit(&serve_bare(&["novalue"]), &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("novalue"), "{err}");
}

#[test]
fn missing_explicit_config_file_fails() {
    let mut args = serve_bare(&[]);
    args.extend(["--config", "/nonexistent/em.properties"]);
    let (status, err) = run_to_exit(&args, &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/em.properties"), "{err}");
}

#[test]
fn default_topology_is_logged_and_unknown_keys_warned() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.topology=",
            "eventmesh.delivery.topolgy=X",
        ],
    );
    // The ready lines come after the topology line, so the log has it now.
    let log = s.log_text();
    assert!(log.contains("delivery topology=LOCAL_STICKY_PULL"), "{log}");
    assert!(
        log.contains("eventmesh.delivery.topolgy"),
        "typo guard: {log}"
    );
    assert!(s.stop().success(), "graceful stop exits 0");
    assert!(
        s.log_text().contains("shutdown complete"),
        "{}",
        s.log_text()
    );
}

#[test]
fn locked_data_dir_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let _running = Server::start(dir.path(), &[]);
    let data = format!("eventmesh.data.dir={}", dir.path().display());
    let (status, err) = run_to_exit(&serve_args(&[&data]), &[]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("failed to open RocksDB"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

#[test]
fn corrupted_data_dir_fails_fast_and_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = Server::start(dir.path(), &[]);
        assert!(s.stop().success());
    }
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("MANIFEST-")
        {
            std::fs::write(&p, b"this is not a manifest").unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    let data = format!("eventmesh.data.dir={}", dir.path().display());
    let (status, err) = run_to_exit(&serve_args(&[&data]), &[]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("failed to open RocksDB"), "{err}");
    // Still damaged: nothing was recreated in its place.
    let (status, _) = run_to_exit(&serve_args(&[&data]), &[]);
    assert_eq!(status.code(), Some(1));
}

/// The runtime's thread count follows `eventmesh.server.worker.threads`
/// (0: one per CPU), and one thread carries publish and delivery.
#[tokio::test]
async fn the_worker_thread_count_is_set_by_its_key() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    for (value, want) in [("1", 1), ("0", cpus), ("3", 3)] {
        let dir = tempfile::tempdir().unwrap();
        let setting = format!("eventmesh.server.worker.threads={value}");
        let s = Server::start(dir.path(), &[setting.as_str()]);
        assert!(
            s.wait_for_log(&["starting eventmesh", &format!("worker_threads={want} ")]),
            "{value}: {}",
            s.log_text()
        );
        if value == "1" {
            let c = common::client();
            let got = common::one_delivery(&c, &s, "w1", "workers", "g", "e-1").await;
            assert_eq!(got["event"]["id"], "e-1");
        }
    }
}

#[tokio::test]
async fn each_listener_binds_its_own_host() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.server.admin.host=127.0.0.2",
            "eventmesh.server.tcp.host=127.0.0.3",
            "eventmesh.server.tcp.port=0",
        ],
    );
    assert!(s.traffic.starts_with("http://127.0.0.1:"), "{}", s.traffic);
    assert!(s.admin.starts_with("http://127.0.0.2:"), "{}", s.admin);
    let c = common::client();
    assert_eq!(common::health(&c, &s).await["status"], "UP");
    // Readiness is open too (no admin token sent).
    assert_eq!(
        common::ready(&c, &s).await,
        (
            200,
            common::checks(&[("lifecycle", true), ("storage", true)])
        )
    );
    // The admin port is not open on the traffic host.
    let port: u16 = s.admin.rsplit(':').next().unwrap().parse().unwrap();
    let refused = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    let tcp = s.tcp.as_deref().unwrap();
    assert!(tcp.starts_with("127.0.0.3:"), "{tcp}");
}

#[test]
fn json_logs_are_one_object_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.log.format=json"]);
    let traffic = s.traffic.trim_start_matches("http://").to_string();
    assert!(s.stop().success());
    let text = s.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let listening = lines
        .iter()
        .find(|l| l["fields"]["message"] == format!("traffic HTTP listening on {traffic}"))
        .unwrap_or_else(|| panic!("no listening line in {text}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["target"], "eventmesh::boot");
    assert!(listening["timestamp"].is_string(), "{listening}");
}

/// The cluster's name as `/admin/health` reports it.
async fn cluster_name_of(s: &Server) -> String {
    let v = common::health(&common::client(), s).await;
    v["cluster"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn the_cluster_name_is_made_up_once_kept_and_replaced_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let made = cluster_name_of(&s).await;
    let hex = made
        .strip_prefix("mesh-")
        .unwrap_or_else(|| panic!("{made}"));
    assert!(
        hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{made}"
    );
    let mut s = s.restart();
    assert_eq!(cluster_name_of(&s).await, made, "kept across a restart");
    s.stop();
    let mut s = Server::start(dir.path(), &["eventmesh.cluster.name=eu-west"]);
    assert_eq!(cluster_name_of(&s).await, "eu-west");
    assert!(s.wait_for_log(&["the cluster's name changes", &made, "eu-west"]));
    s.stop();
    let s = Server::start(dir.path(), &[]);
    assert_eq!(
        cluster_name_of(&s).await,
        "eu-west",
        "the configured one is kept"
    );
}
