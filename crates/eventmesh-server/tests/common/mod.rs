//! Test harness: starts the real `eventmesh` binary on ephemeral ports with
//! a temporary data directory, finds its ports in its log, and drives it
//! over HTTP. Stopping is a real SIGTERM (graceful) or SIGKILL (crash).

#![allow(dead_code)]

pub mod hook;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "test-admin-token";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_eventmesh")
}

/// Runs the binary to completion (for fail-fast cases) in an empty working
/// directory, returning its exit status and stderr.
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(cwd.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run eventmesh");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

pub struct Server {
    child: Option<Child>,
    pub data_dir: PathBuf,
    pub traffic: String,
    pub admin: String,
    pub log: Arc<Mutex<Vec<String>>>,
    defines: Vec<String>,
    _cwd: tempfile::TempDir,
}

fn find_addr(line: &str, what: &str) -> Option<String> {
    let marker = format!("{what} HTTP listening on ");
    let i = line.find(&marker)?;
    Some(
        line[i + marker.len()..]
            .split_whitespace()
            .next()?
            .to_string(),
    )
}

impl Server {
    /// Starts a server on `data_dir` with extra `key=value` settings.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let mut defines: Vec<String> = vec![
            "eventmesh.storage.type=standalone".into(),
            "eventmesh.server.http.port=0".into(),
            "eventmesh.server.admin.port=0".into(),
            "eventmesh.server.tcp.port=0".into(),
            format!("eventmesh.data.dir={}", data_dir.display()),
            format!("eventmesh.admin.token={TOKEN}"),
            "eventmesh.delivery.backoff.initial.ms=50".into(),
            "eventmesh.delivery.backoff.max.ms=200".into(),
            "eventmesh.offset.flush.interval.ms=50".into(),
            // A test that stops with deliveries in hand waits this long.
            "eventmesh.shutdown.grace.ms=1000".into(),
        ];
        defines.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(data_dir, defines)
    }

    fn spawn(data_dir: &Path, defines: Vec<String>) -> Server {
        let cwd = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(bin());
        cmd.arg("serve").current_dir(cwd.path());
        for d in &defines {
            cmd.arg("-D").arg(d);
        }
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn eventmesh");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut traffic, mut admin) = (None, None);
        while traffic.is_none() || admin.is_none() {
            for line in log.lock().unwrap().iter() {
                traffic = traffic.or_else(|| find_addr(line, "traffic"));
                admin = admin.or_else(|| find_addr(line, "admin"));
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "eventmesh exited early with {status}:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
            assert!(Instant::now() < deadline, "eventmesh did not start in time");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            traffic: format!("http://{}", traffic.unwrap()),
            admin: format!("http://{}", admin.unwrap()),
            log,
            defines,
            _cwd: cwd,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to 10 s) for a log line containing every one of `parts`;
    /// the log is read by a thread, so a line may lag the answer it
    /// accompanies.
    pub fn wait_for_log(&self, parts: &[&str]) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| parts.iter().all(|p| l.contains(p)));
            if found || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.wait()
    }

    /// SIGKILL: no graceful close at all.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("eventmesh did not stop in time:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a new process on the same data dir and settings.
    pub fn restart(&mut self) -> Server {
        if self.child.is_some() {
            self.stop();
        }
        Self::spawn(&self.data_dir.clone(), self.defines.clone())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.traffic)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("{}{path}", self.admin)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A minimal valid structured event.
pub fn event(id: &str) -> serde_json::Value {
    serde_json::json!({
        "specversion": "1.0",
        "id": id,
        "source": "/tests",
        "type": "test.event",
        "datacontenttype": "application/json",
        "data": {"n": id},
    })
}

pub async fn publish(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    ev: &serde_json::Value,
) -> serde_json::Value {
    let r = c
        .post(s.url(&format!("/events/publish?topic={topic}")))
        .header("content-type", "application/cloudevents+json")
        .body(serde_json::to_vec(ev).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    r.json().await.unwrap()
}

pub async fn post_json(
    c: &reqwest::Client,
    url: String,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

pub async fn subscribe(c: &reqwest::Client, s: &Server, body: serde_json::Value) -> String {
    let (status, v) = post_json(c, s.url("/events/subscribe"), body).await;
    assert_eq!(status, 200, "{v}");
    v["subscriptionId"].as_str().unwrap().to_string()
}

/// Polls until `want` deliveries arrived or `within` passed.
pub async fn poll_n(
    c: &reqwest::Client,
    s: &Server,
    client_id: &str,
    want: usize,
    within: Duration,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let r = c
            .get(s.url(&format!(
                "/events/poll?clientId={client_id}&timeoutMs=500&max=100"
            )))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let batch: Vec<serde_json::Value> = r.json().await.unwrap();
        got.extend(batch);
    }
    got
}

pub async fn nack(c: &reqwest::Client, s: &Server, delivery_id: &str) -> u16 {
    post_json(
        c,
        s.url("/events/nack"),
        serde_json::json!({"deliveryId": delivery_id}),
    )
    .await
    .0
}

/// The value of one unlabelled metric (`name` as rendered, e.g.
/// `eventmesh_acks_total`), from `/metrics`.
pub async fn metric(c: &reqwest::Client, s: &Server, name: &str) -> f64 {
    let text = admin_text(c, s, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

/// Waits until `cond` holds, checking every 20 ms; its last value.
pub async fn wait_until(mut cond: impl FnMut() -> bool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// A signal to the server process (`STOP`, `CONT`, `TERM`, ...).
impl Server {
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig}");
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.wait()
    }
}

pub async fn ack(c: &reqwest::Client, s: &Server, delivery_id: &str) -> u16 {
    post_json(
        c,
        s.url("/events/ack"),
        serde_json::json!({"deliveryId": delivery_id}),
    )
    .await
    .0
}

/// GET on the admin port with the test token; the body as text.
pub async fn admin_text(c: &reqwest::Client, s: &Server, path: &str) -> String {
    let r = c
        .get(s.admin_url(path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.text().await.unwrap()
}

/// GET on the admin port with the test token; the body as JSON.
pub async fn admin_json<T: serde::de::DeserializeOwned>(
    c: &reqwest::Client,
    s: &Server,
    path: &str,
) -> T {
    serde_json::from_str(&admin_text(c, s, path).await).unwrap()
}

/// `GET /admin/health` (no credentials needed).
pub async fn health(c: &reqwest::Client, s: &Server) -> serde_json::Value {
    c.get(s.admin_url("/admin/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
