//! A short smoke run of the load generator against the real runtime: it
//! completes and reports sane numbers (never a speed). The `eventmesh`
//! binary is the one `cargo test --workspace` builds beside this test.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Server {
    child: Child,
    http: String,
    tcp: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server_binary() -> PathBuf {
    // target/<profile>/deps/smoke-<hash> -> target/<profile>/eventmesh
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("eventmesh");
    assert!(
        path.exists(),
        "{} is missing: run the workspace's tests (cargo test --workspace), which build it",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let tcp_port = free_port();
    let mut child = Command::new(server_binary())
        .arg("serve")
        .args(["-D", "eventmesh.storage.type=standalone"])
        .args([
            "-D",
            &format!("eventmesh.data.dir={}", dir.path().display()),
        ])
        .args(["-D", "eventmesh.server.http.port=0"])
        .args(["-D", "eventmesh.server.admin.port=0"])
        .args(["-D", &format!("eventmesh.server.tcp.port={tcp_port}")])
        .current_dir(dir.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut http = None;
    while http.is_none() {
        assert!(Instant::now() < deadline, "the server did not start");
        let line = lines.next().expect("server log").unwrap();
        if let Some(at) = line.split("traffic HTTP listening on ").nth(1) {
            http = Some(format!("http://{}", at.trim()));
        }
    }
    // Keep draining the log so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        http: http.unwrap(),
        tcp: format!("127.0.0.1:{tcp_port}"),
        _dir: dir,
    }
}

fn bench(s: &Server, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_eventmesh-bench"))
        .args(args)
        .args(["--server", &s.http, "--tcp-server", &s.tcp])
        .args([
            "--duration",
            "2s",
            "--warmup",
            "1s",
            "--size",
            "256",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let f = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    assert!(f("events") > 0.0, "{args:?}: {v}");
    assert_eq!(v["errors"], serde_json::json!({}), "{args:?}");
    assert!(
        f("p50_ms") <= f("p99_ms") && f("p99_ms") <= f("p999_ms") && f("p999_ms") <= f("max_ms"),
        "{v}"
    );
    let mb = f("events_per_sec") * 256.0 / 1e6;
    assert!((f("mb_per_sec") - mb).abs() <= mb * 0.01 + 1e-9, "{v}");
    v
}

#[test]
fn the_load_generator_completes_against_the_runtime() {
    let s = start();
    let v = bench(
        &s,
        &[
            "pub",
            "--transport",
            "tcp",
            "--publishers",
            "4",
            "--window",
            "16",
        ],
    );
    assert_eq!(
        (v["target"].as_str(), v["transport"].as_str()),
        (Some("eventmesh"), Some("tcp"))
    );
    bench(
        &s,
        &[
            "pub",
            "--transport",
            "http",
            "--publishers",
            "4",
            "--batch",
            "10",
        ],
    );
    let e2e = bench(&s, &["pubsub", "--transport", "tcp", "--rate", "200"]);
    assert_eq!(e2e["workload"], "pubsub");
}
