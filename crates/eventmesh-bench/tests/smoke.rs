//! Short runs of every workload of the load generator against the real
//! runtime, over each transport: they complete and report sane numbers
//! (never a speed). The `eventmesh` binary is the one `cargo test
//! --workspace` builds beside this test.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Server {
    child: Child,
    http: String,
    admin: String,
    tcp: String,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        // Bounded: a drop must not hang the test.
        let _ = wait_child(&mut self.child, Duration::from_secs(10));
    }
}

/// Waits up to `within` for `child` to exit; `None` if it is still running.
fn wait_child(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Runs `cmd` to completion with its output captured; kills it and panics
/// if it takes longer than `within`.
fn run_within(cmd: &mut Command, within: Duration) -> std::process::Output {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let Some(status) = wait_child(&mut child, within) else {
        let _ = child.kill();
        let _ = wait_child(&mut child, Duration::from_secs(10));
        panic!("{cmd:?} did not finish within {within:?}");
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
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

fn start() -> Server {
    start_with(&[], &[])
}

/// Starts the runtime with `-D` `settings` and `env` added.
fn start_with(settings: &[&str], env: &[(&str, &str)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(server_binary())
        .arg("serve")
        .args(["-D", "eventmesh.storage.type=standalone"])
        .args([
            "-D",
            &format!("eventmesh.data.dir={}", dir.path().display()),
        ])
        .args(["-D", "eventmesh.server.http.port=0"])
        .args(["-D", "eventmesh.server.admin.port=0"])
        .args(["-D", "eventmesh.server.tcp.port=0"])
        .args(settings.iter().flat_map(|s| ["-D", s]))
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The log is read on a thread (and drained to its end, so the server
    // never blocks on it); the wait for the ready line is bounded.
    let stderr = child.stderr.take().unwrap();
    let (tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut http, mut admin, mut tcp, mut sent) = (None, None, None, false);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let at = |what: &str| line.split(what).nth(1).map(|a| a.trim().to_string());
            let url = |what: &str| at(what).map(|a| format!("http://{a}"));
            http = http.or_else(|| url("traffic HTTP listening on "));
            admin = admin.or_else(|| url("admin HTTP listening on "));
            tcp = tcp.or_else(|| at("TCP listening on "));
            if let (false, Some(h), Some(a), Some(t)) = (sent, &http, &admin, &tcp) {
                let _ = tx.send((h.clone(), a.clone(), t.clone()));
                sent = true;
            }
        }
    });
    let Ok((http, admin, tcp)) = ready.recv_timeout(Duration::from_secs(60)) else {
        let _ = child.kill();
        let _ = wait_child(&mut child, Duration::from_secs(10));
        panic!("the server did not start within 60 s");
    };
    Server {
        child,
        http,
        admin,
        tcp,
        dir,
    }
}

/// Runs the load generator (1 KiB-less events: 256 B; 1 s measured after
/// 0.5 s of warm-up unless `args` say otherwise) and checks what any run
/// must report: it succeeded, measured events, no error, positive and
/// ordered percentiles, MB/s consistent with events/s.
fn bench(s: &Server, args: &[&str]) -> Value {
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["--server", &s.http, "--tcp-server", &s.tcp]);
    argv.extend(["--size", "256", "--json"]);
    for (flag, default) in [("--duration", "1s"), ("--warmup", "0.5s")] {
        if !args.contains(&flag) {
            argv.extend([flag, default]);
        }
    }
    let started = Instant::now();
    let out = run_within(
        Command::new(env!("CARGO_BIN_EXE_eventmesh-bench")).args(&argv),
        Duration::from_secs(120),
    );
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
    eprintln!("{args:?} ({:.1} s): {v}", started.elapsed().as_secs_f64());
    let f = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    assert!(f("events") > 0.0, "{args:?}: {v}");
    assert_eq!(v["errors"], serde_json::json!({}), "{args:?}: {v}");
    assert!(
        0.0 < f("p50_ms")
            && f("p50_ms") <= f("p99_ms")
            && f("p99_ms") <= f("p999_ms")
            && f("p999_ms") <= f("max_ms"),
        "{args:?}: {v}"
    );
    let mb = f("events_per_sec") * 256.0 / 1e6;
    assert!((f("mb_per_sec") - mb).abs() <= mb * 0.01 + 1e-9, "{v}");
    assert_eq!(v["target"], "eventmesh", "{v}");
    assert_eq!(v["workload"], args[0], "{v}");
    let transport = args
        .iter()
        .position(|a| *a == "--transport")
        .map(|i| args[i + 1]);
    assert_eq!(v["transport"].as_str(), transport, "{v}");
    v
}

#[test]
fn the_load_generator_completes_against_the_runtime() {
    let s = start();
    let started = Instant::now();

    // pub, over each transport.
    let tcp = ["--publishers", "4", "--window", "16"];
    bench(&s, &[&["pub", "--transport", "tcp"][..], &tcp].concat());
    let batch = ["--publishers", "4", "--batch", "10"];
    bench(&s, &[&["pub", "--transport", "http"][..], &batch].concat());
    let ws = ["--publishers", "2", "--window", "8"];
    let v = bench(&s, &[&["pub", "--transport", "ws"][..], &ws].concat());
    assert_eq!(v["latency"], "publish_to_ack");

    // pubsub, at a fixed rate, over each transport (never more events
    // than were due in the measured second).
    for t in ["tcp", "http", "ws"] {
        let v = bench(&s, &["pubsub", "--transport", t, "--rate", "200"]);
        assert!(v["events"].as_u64() <= Some(200), "{t}: {v}");
        assert_eq!(v["latency"], "publish_to_receive");
    }

    // sub: the whole backlog is drained, each event once.
    for (t, latency) in [("tcp", "ack_round_trip"), ("ws", "publish_to_receive")] {
        let argv = [
            "sub",
            "--transport",
            t,
            "--count",
            "2000",
            "--subscribers",
            "2",
        ];
        let v = bench(&s, &[&argv[..], &["--duration", "20s"]].concat());
        assert_eq!(
            (v["events"].as_u64(), v["prefilled"].as_u64()),
            (Some(2000), Some(2000))
        );
        assert_eq!(v["latency"], latency);
    }

    // request-reply: requests over HTTP, responders over HTTP.
    let argv = ["request", "--transport", "http", "--publishers", "2"];
    let v = bench(
        &s,
        &[&argv[..], &["--window", "4", "--subscribers", "2"]].concat(),
    );
    assert_eq!(v["latency"], "request_to_reply");

    eprintln!("all runs: {:.1} s", started.elapsed().as_secs_f64());
}

/// A short soak (10 s at 200 events/s, a sample a second) against the real
/// runtime: it runs to its verdict, writes one line per sample and the
/// verdict last, and every group settled every published event. The
/// resource rules are loosened: ten seconds say nothing about leaks, and
/// this test checks the tool, not the server.
#[test]
fn a_short_soak_runs_to_its_verdict() {
    let token = "soak-smoke-admin-token";
    let s = start_with(
        &["eventmesh.webhook.denied.cidrs="],
        &[("EVENTMESH_ADMIN_TOKEN", token)],
    );
    let out_file = s.dir.path().join("samples.jsonl");
    let data = s.dir.path().display().to_string();
    let argv = [
        "soak",
        "--server",
        &s.http,
        "--tcp-server",
        &s.tcp,
        "--admin",
        &s.admin,
        "--admin-token",
        token,
        "--duration",
        "10s",
        "--rate",
        "200",
        "--sample",
        "1s",
        "--drain",
        "20s",
        "--data-dir",
        &data,
        "--out",
        &out_file.display().to_string(),
        "--rss-tolerance",
        "100",
        "--disk-tolerance",
        "100",
        "--fd-slack",
        "100000",
        "--task-slack",
        "100000",
        // Ten seconds on a shared two-core host say little about the rate
        // either: this checks that the rule is applied, not the host.
        "--rate-share",
        "0.5",
    ];
    let out = run_within(
        Command::new(env!("CARGO_BIN_EXE_eventmesh-bench")).args(argv),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (verdict, samples) = lines.split_last().unwrap();
    assert_eq!(samples.len(), 10, "{stderr}");
    assert_eq!(verdict["verdict"], "pass", "{verdict}");
    assert_eq!(verdict["samples"], 10, "{verdict}");
    assert_eq!(verdict["publish_errors"], 0, "{verdict}");
    // The log may hold a few more than were counted as published: an
    // interval counts the publishes answered before it ended.
    let published = verdict["published"].as_u64().unwrap();
    let stored = verdict["stored"].as_u64().unwrap();
    assert!(published > 0 && stored >= published, "{verdict}");
    for g in ["webhook", "poll", "sse"] {
        assert_eq!(
            verdict["delivered"][g].as_u64(),
            Some(stored),
            "{g}: {verdict}"
        );
        assert_eq!(verdict["final_lag"][g], 0, "{g}: {verdict}");
    }
    // Each sample carries the server's resources and a growing count.
    let mut before = 0;
    for s in samples {
        for k in [
            "rss_bytes",
            "storage_memory_bytes",
            "rss_outside_storage_bytes",
            "open_fds",
            "tasks",
            "disk_bytes",
            "disk_peak_bytes",
        ] {
            assert!(s[k].as_f64().is_some_and(|v| v > 0.0), "{k}: {s}");
        }
        assert_eq!(
            s["rss_outside_storage_bytes"].as_f64(),
            Some(s["rss_bytes"].as_f64().unwrap() - s["storage_memory_bytes"].as_f64().unwrap()),
            "{s}"
        );
        let n = s["published"].as_u64().unwrap();
        assert!(n >= before, "{s}");
        before = n;
    }
    assert_eq!(before, published);
}

/// The bare append-and-sync loop writes exactly rate x duration records,
/// times its syncs and each record from its due time, removes its file,
/// and refuses a size of zero by name.
#[test]
fn the_sync_loop_appends_at_its_rate_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    // 500 records in 1 s with `writers` threads; its JSON report.
    let sync_loop = |writers: &str| -> Value {
        let argv = [
            "fsync",
            "--dir",
            &d,
            "--rate",
            "500",
            "--duration",
            "1s",
            "--writers",
            writers,
            "--json",
        ];
        let out = run_within(
            Command::new(env!("CARGO_BIN_EXE_eventmesh-bench")).args(argv),
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = sync_loop("1");
    assert_eq!(v["kind"], "fsync");
    assert_eq!(v["appends"], 500, "{v}");
    assert_eq!(v["size"], 1100, "{v}");
    let (p50, p99, max) = (
        v["p50_ms"].as_f64().unwrap(),
        v["p99_ms"].as_f64().unwrap(),
        v["max_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{v}");
    // Each record's own figure, from its due time, covers its whole sync.
    let syncs = v["syncs"].as_u64().unwrap();
    assert!((1..=500).contains(&syncs), "{v}");
    let (due_p50, due_p99, due_max) = (
        v["due_p50_ms"].as_f64().unwrap(),
        v["due_p99_ms"].as_f64().unwrap(),
        v["due_max_ms"].as_f64().unwrap(),
    );
    assert!(
        0.0 < due_p50 && due_p50 <= due_p99 && due_p99 <= due_max,
        "{v}"
    );
    assert!(due_max >= max, "{v}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Several writers: every record synced on its own, each writer's file
    // removed.
    let v = sync_loop("3");
    assert_eq!(v["writers"], 3, "{v}");
    assert_eq!(v["appends"], 500, "{v}");
    assert_eq!(v["syncs"], 500, "{v}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    for (flag, message) in [
        ("--size", "Error: --size must be at least 1 byte, got 0"),
        ("--writers", "Error: --writers must be at least 1, got 0"),
    ] {
        let argv = ["fsync", "--dir", &d, flag, "0"];
        let out = run_within(
            Command::new(env!("CARGO_BIN_EXE_eventmesh-bench")).args(argv),
            Duration::from_secs(60),
        );
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.lines().any(|l| l == message), "{stderr}");
    }
}

/// The relay copies bytes both ways between each client and its target,
/// and prints the address it listens on first.
#[test]
fn the_relay_copies_bytes_both_ways() {
    use std::io::{Read, Write};
    // The target: upper-cases what it reads and sends it back.
    let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = target.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = target.accept().unwrap();
        let mut buf = [0u8; 64];
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return;
            }
            s.write_all(&buf[..n].to_ascii_uppercase()).unwrap();
        }
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventmesh-bench"))
        .args(["relay", "--to", &to])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = Killed(&mut child);
    let mut line = String::new();
    BufReader::new(guard.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut client = std::net::TcpStream::connect(line.trim()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for word in ["hello", "relay"] {
        client.write_all(word.as_bytes()).unwrap();
        let mut back = vec![0u8; word.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, word.to_ascii_uppercase().as_bytes());
    }
    guard.stop();
}

/// Kills the child when dropped (a failed assertion included).
struct Killed<'a>(&'a mut Child);

impl Killed<'_> {
    fn stop(&mut self) {
        let _ = self.0.kill();
        assert!(
            wait_child(self.0, Duration::from_secs(10)).is_some(),
            "the relay did not stop"
        );
    }
}

impl Drop for Killed<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = wait_child(self.0, Duration::from_secs(10));
    }
}
