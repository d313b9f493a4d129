//! Test harness: starts the real `eventmesh` binary on ephemeral ports with
//! a temporary data directory, finds its ports in its log, and drives it
//! over HTTP. Stopping is a real SIGTERM (graceful) or SIGKILL (crash).
//!
//! Every wait here is bounded: on a child process (start, exit, a command
//! run to completion), on a read (HTTP calls through [`client`] time out
//! after 30 s, the log is read by a thread), and on a condition. A hang
//! fails the test with what was seen instead of stalling the run.
//! [`metrics`] parses `/metrics` so that tests compare exact samples.

#![allow(dead_code)]

pub mod a2a;
pub mod connectors;
pub mod gate;
pub mod hook;
pub mod mesh;
pub mod routing;
pub mod sdk;
pub mod topics;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const TOKEN: &str = "test-admin-token";

/// How long a command run to completion may take.
pub const COMMAND_WITHIN: Duration = Duration::from_secs(60);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_eventmesh")
}

/// Waits up to `within` for `child` to exit; `None` if it is still running.
pub fn wait_child(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("query the child process") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL, then waits (up to 10 s) for the process to be gone.
pub fn kill_and_reap(child: &mut Child) -> ExitStatus {
    // An error here means it has exited already; the wait below says so.
    let _ = child.kill();
    wait_child(child, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("process {} outlived SIGKILL by 10 s", child.id()))
}

/// Reads a pipe to its end on a thread; the receiver gets the whole text.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut text);
        }
        let _ = tx.send(String::from_utf8_lossy(&text).into_owned());
    });
    rx
}

/// Runs `cmd` to completion within `within`, its stdout and stderr
/// captured; kills it and panics (with what it wrote) if it takes longer.
pub fn output_within(cmd: &mut Command, within: Duration) -> (ExitStatus, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let status = wait_child(&mut child, within);
    let status = status.unwrap_or_else(|| {
        kill_and_reap(&mut child);
        panic!(
            "{cmd:?} did not finish within {within:?}:\n{}{}",
            err.recv_timeout(Duration::from_secs(5)).unwrap_or_default(),
            out.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
        )
    });
    // The pipes close when the process exits (unless it left children
    // holding them: then what was read so far is not waited for).
    let read =
        |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    (status, read(out), read(err))
}

/// Runs the binary to completion (for fail-fast cases) in an empty working
/// directory, within [`COMMAND_WITHIN`]; its exit status and stderr followed
/// by its stdout.
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
    let (status, out, err) = output_within(&mut cmd, COMMAND_WITHIN);
    (status, err + &out)
}

/// Runs `serve` with each of `settings` as a `-D` flag (and nothing
/// else) to completion, like [`run_to_exit`]: for boots that must fail.
pub fn run_serve(settings: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut args = vec!["serve"];
    for s in settings {
        args.extend(["-D", s]);
    }
    run_to_exit(&args, env)
}

/// Sends a signal (`TERM`, `STOP`, ...) to a process with `kill(1)`.
pub fn send_signal(pid: u32, sig: &str) {
    let mut cmd = Command::new("kill");
    cmd.args([&format!("-{sig}"), &pid.to_string()])
        .stdin(Stdio::null());
    let (status, _, err) = output_within(&mut cmd, Duration::from_secs(10));
    assert!(status.success(), "kill -{sig} {pid}: {err}");
}

pub struct Server {
    child: Option<Child>,
    pub data_dir: PathBuf,
    pub traffic: String,
    pub admin: String,
    /// `HOST:PORT` of the TCP protocol when it is on.
    pub tcp: Option<String>,
    pub log: Arc<Mutex<Vec<String>>>,
    defines: Vec<String>,
    _cwd: tempfile::TempDir,
}

/// The URL of the `what` HTTP listener, from its log line: `https://` when
/// the line says it serves TLS.
fn find_addr(line: &str, what: &str) -> Option<String> {
    let marker = format!("{what} HTTP listening on ");
    let i = line.find(&marker)?;
    let rest = &line[i + marker.len()..];
    // Ends where the address does (a space, or a quote in a JSON line).
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    let scheme = if rest[addr.len()..].starts_with(" (TLS)") {
        "https"
    } else {
        "http"
    };
    (!addr.is_empty()).then(|| format!("{scheme}://{addr}"))
}

/// `HOST:PORT` from the TCP listener's log line.
fn find_tcp_addr(line: &str) -> Option<String> {
    let marker = "TCP listening on ";
    let rest = &line[line.find(marker)? + marker.len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    (!addr.is_empty()).then_some(addr)
}

/// The port of an `http(s)://HOST:PORT` or `HOST:PORT` address.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

impl Server {
    /// Starts a server on `data_dir` with extra `key=value` settings.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::spawn(data_dir, Self::defines(data_dir, extra))
    }

    /// [`Server::start`] with settings held as `String`s (or `&str`s).
    pub fn start_with(data_dir: &Path, settings: &[impl AsRef<str>]) -> Server {
        let extra: Vec<&str> = settings.iter().map(AsRef::as_ref).collect();
        Self::start(data_dir, &extra)
    }

    /// The settings of a test server: ephemeral ports, the data dir, the
    /// admin token, short delivery timers, then `extra`.
    fn defines(data_dir: &Path, extra: &[&str]) -> Vec<String> {
        let mut defines: Vec<String> = vec![
            "eventmesh.storage.type=standalone".into(),
            "eventmesh.server.http.port=0".into(),
            "eventmesh.server.admin.port=0".into(),
            "eventmesh.server.tcp.port=off".into(),
            format!("eventmesh.data.dir={}", data_dir.display()),
            format!("eventmesh.admin.token={TOKEN}"),
            "eventmesh.delivery.backoff.initial.ms=50".into(),
            "eventmesh.delivery.backoff.max.ms=200".into(),
            "eventmesh.offset.flush.interval.ms=50".into(),
            // A test that stops with deliveries in hand waits this long.
            "eventmesh.shutdown.grace.ms=1000".into(),
        ];
        defines.extend(extra.iter().map(|s| s.to_string()));
        defines
    }

    /// Starts a server like [`Server::start`] under the descriptor limits
    /// `soft` and `hard` (`RLIMIT_NOFILE`, set by the shell that execs it).
    pub fn start_with_nofile(data_dir: &Path, extra: &[&str], soft: u64, hard: u64) -> Server {
        Self::spawn_with(data_dir, Self::defines(data_dir, extra), Some((soft, hard)))
    }

    fn spawn(data_dir: &Path, defines: Vec<String>) -> Server {
        Self::spawn_with(data_dir, defines, None)
    }

    fn spawn_with(data_dir: &Path, defines: Vec<String>, nofile: Option<(u64, u64)>) -> Server {
        let cwd = tempfile::tempdir().unwrap();
        let mut cmd = match nofile {
            None => Command::new(bin()),
            Some((soft, hard)) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!(
                        "ulimit -S -n {soft} && ulimit -H -n {hard} && exec \"$0\" \"$@\""
                    ))
                    .arg(bin());
                sh
            }
        };
        cmd.arg("serve").current_dir(cwd.path());
        for d in &defines {
            cmd.arg("-D").arg(d);
        }
        // `EVENTMESH_TEST_RUST_LOG` raises the level when chasing a rare
        // failure; `EVENTMESH_TEST_LOG_DIR` keeps every process's log in a
        // file of its own there (named after its pid).
        let level = std::env::var("EVENTMESH_TEST_RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut child = cmd
            .env("RUST_LOG", level)
            // The harness's own settings: not the server's to warn about.
            .env_remove("EVENTMESH_TEST_RUST_LOG")
            .env_remove("EVENTMESH_TEST_LOG_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn eventmesh");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let mut copy = std::env::var_os("EVENTMESH_TEST_LOG_DIR").map(|d| {
            let path = Path::new(&d).join(format!("eventmesh-{}.log", child.id()));
            std::io::BufWriter::new(std::fs::File::create(path).expect("a log file"))
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = copy.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                    let _ = f.flush();
                }
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let tcp_on = defines
            .iter()
            .rev()
            .find_map(|d| d.strip_prefix("eventmesh.server.tcp.port="))
            .is_some_and(|v| v != "off");
        let (mut traffic, mut admin, mut tcp) = (None, None, None);
        while traffic.is_none() || admin.is_none() || (tcp_on && tcp.is_none()) {
            for line in log.lock().unwrap().iter() {
                traffic = traffic.or_else(|| find_addr(line, "traffic"));
                admin = admin.or_else(|| find_addr(line, "admin"));
                tcp = tcp.or_else(|| find_tcp_addr(line));
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
            traffic: traffic.unwrap(),
            admin: admin.unwrap(),
            tcp,
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
        self.signal("TERM");
        self.wait()
    }

    /// SIGKILL: no graceful close at all.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        kill_and_reap(&mut child);
    }

    /// Waits up to 30 s for the exit; kills and panics past that.
    fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        match wait_child(&mut child, Duration::from_secs(30)) {
            Some(status) => status,
            None => {
                kill_and_reap(&mut child);
                panic!("eventmesh did not stop in time:\n{}", self.log_text());
            }
        }
    }

    /// Starts a new process on the same data dir and settings.
    pub fn restart(&mut self) -> Server {
        if self.child.is_some() {
            self.stop();
        }
        Self::spawn(&self.data_dir.clone(), self.defines.clone())
    }

    /// Starts a new process on the same data dir and settings, listening
    /// on the ports the previous one had (so clients that hold its URLs
    /// reconnect to the new one).
    pub fn restart_on_same_ports(&mut self) -> Server {
        if self.child.is_some() {
            self.stop();
        }
        let mut defines = self.defines.clone();
        defines.push(format!(
            "eventmesh.server.http.port={}",
            port_of(&self.traffic)
        ));
        defines.push(format!(
            "eventmesh.server.admin.port={}",
            port_of(&self.admin)
        ));
        if let Some(tcp) = &self.tcp {
            defines.push(format!("eventmesh.server.tcp.port={}", port_of(tcp)));
        }
        Self::spawn(&self.data_dir.clone(), defines)
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
            // Bounded: a drop must not hang the test either.
            let _ = wait_child(&mut c, Duration::from_secs(10));
        }
    }
}

/// An HTTP client whose requests time out after 30 s.
pub fn client() -> reqwest::Client {
    client_builder().build().unwrap()
}

/// A [`client`] that connects from `local` (another loopback address than
/// 127.0.0.1, say, to be told apart by the server).
pub fn client_from(local: IpAddr) -> reqwest::Client {
    client_builder().local_address(local).build().unwrap()
}

fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().timeout(Duration::from_secs(30))
}

/// One request with a content type, the `token` as a bearer credential
/// (if any) and `extra` headers: the status, the JSON body (`null` when
/// there is none) and the response headers.
pub async fn call(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
    content_type: &str,
    body: Vec<u8>,
    extra: &[(&str, String)],
) -> (u16, serde_json::Value, reqwest::header::HeaderMap) {
    let mut r = c.request(method, url).header("content-type", content_type);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    for (k, v) in extra {
        r = r.header(*k, v);
    }
    let resp = r.body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (
        status,
        resp.json().await.unwrap_or(serde_json::Value::Null),
        headers,
    )
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The JSON values of a file of JSON lines (an audit file's records).
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
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

/// Subscribes `client_id` to topic `t` with a webhook at `url`: the status
/// and the answer.
pub async fn subscribe_webhook(
    c: &reqwest::Client,
    s: &Server,
    client_id: &str,
    url: &str,
) -> (u16, serde_json::Value) {
    post_json(
        c,
        s.url("/events/subscribe"),
        serde_json::json!({"clientId": client_id, "topic": "t", "url": url}),
    )
    .await
}

/// Subscribing a webhook at `url` is refused with 403 `webhook_denied`;
/// the answer.
pub async fn webhook_refused(c: &reqwest::Client, s: &Server, url: &str) -> serde_json::Value {
    let (st, v) = subscribe_webhook(c, s, "ssrf", url).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (403, Some("webhook_denied")),
        "{url}: {v}"
    );
    v
}

/// Subscribes `client` (in `group`) to `topic`, publishes the event `id`
/// there and polls it: the delivery, not acknowledged.
pub async fn one_delivery(
    c: &reqwest::Client,
    s: &Server,
    client: &str,
    topic: &str,
    group: &str,
    id: &str,
) -> serde_json::Value {
    subscribe(
        c,
        s,
        serde_json::json!({"clientId": client, "topic": topic, "group": group}),
    )
    .await;
    publish(c, s, topic, &event(id)).await;
    let mut got = poll_n(c, s, client, 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "{id} was not delivered");
    got.remove(0)
}

/// The event ids of polled deliveries, sorted (order holds within a
/// partition, not across a topic's partitions).
pub fn polled_ids(got: &[serde_json::Value]) -> Vec<String> {
    let mut ids: Vec<String> = got
        .iter()
        .map(|d| d["event"]["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
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

/// The samples of a Prometheus text exposition, keyed by series exactly as
/// rendered: the name with its label set, if any (`eventmesh_acks_total`,
/// `eventmesh_storage_memory_bytes{kind="block_cache"}`).
#[derive(Debug, Clone)]
pub struct Metrics {
    pub samples: BTreeMap<String, f64>,
    pub text: String,
}

impl Metrics {
    /// Parses the text format; panics on a sample line it cannot read.
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, rest) =
                split_series(line).unwrap_or_else(|| panic!("unreadable metrics line {line:?}"));
            let raw = rest.split_whitespace().next().unwrap_or("");
            let value = match raw {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value {v:?} in metrics line {line:?}")),
            };
            let before = samples.insert(series.to_string(), value);
            assert!(before.is_none(), "series {series} appears twice:\n{text}");
        }
        Metrics {
            samples,
            text: text.to_string(),
        }
    }

    /// The value of one series; panics (showing the whole text) when absent.
    pub fn get(&self, series: &str) -> f64 {
        self.samples
            .get(series)
            .copied()
            .unwrap_or_else(|| panic!("{series} not in /metrics:\n{}", self.text))
    }
}

/// Splits a sample line into its series (name and label set) and the rest;
/// label values may hold spaces, braces and escaped quotes.
fn split_series(line: &str) -> Option<(&str, &str)> {
    let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    if !line[name_end..].starts_with('{') {
        return Some((&line[..name_end], &line[name_end..]));
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, ch) in line.char_indices().filter(|(i, _)| *i > name_end) {
        match ch {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some((&line[..=i], &line[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Every sample of `/metrics`.
pub async fn metrics(c: &reqwest::Client, s: &Server) -> Metrics {
    Metrics::parse(&admin_text(c, s, "/metrics").await)
}

/// The value of one series (`name` or `name{labels}` exactly as rendered,
/// e.g. `eventmesh_acks_total`), from `/metrics`.
pub async fn metric(c: &reqwest::Client, s: &Server, series: &str) -> f64 {
    metrics(c, s).await.get(series)
}

/// The value of a counter (`name{labels}` exactly as rendered), 0 while
/// it has not been counted yet.
pub async fn counter(c: &reqwest::Client, s: &Server, series: &str) -> f64 {
    metrics(c, s)
        .await
        .samples
        .get(series)
        .copied()
        .unwrap_or(0.0)
}

/// Reads a [`counter`] until it is `want` or `within` passed; the last
/// value read.
pub async fn counter_reaching(
    c: &reqwest::Client,
    s: &Server,
    series: &str,
    want: f64,
    within: Duration,
) -> f64 {
    reaching(|| counter(c, s, series), want, within).await
}

/// Reads one series until it equals `want` or `within` passed; the last
/// value read (compare it with `want`).
pub async fn metric_reaching(
    c: &reqwest::Client,
    s: &Server,
    series: &str,
    want: f64,
    within: Duration,
) -> f64 {
    reaching(|| metric(c, s, series), want, within).await
}

/// Reads a value every 20 ms until it is `want` or `within` passed; the
/// last value read.
async fn reaching<F: std::future::Future<Output = f64>>(
    mut read: impl FnMut() -> F,
    want: f64,
    within: Duration,
) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let v = read().await;
        if v == want || Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The consumer's committed offsets of `topic`, summed over partitions,
/// as `/admin/offsets` reports them (read from the offset store).
pub async fn committed_total(c: &reqwest::Client, s: &Server, topic: &str) -> u64 {
    let rows: Vec<serde_json::Value> =
        admin_json(c, s, &format!("/admin/offsets?topic={topic}")).await;
    rows.iter()
        .map(|r| r["committed"].as_u64().expect("committed offset"))
        .sum()
}

/// Waits until every partition of `topic` is committed up to its end.
pub async fn caught_up(c: &reqwest::Client, s: &Server, topic: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let rows: Vec<serde_json::Value> =
            admin_json(c, s, &format!("/admin/offsets?topic={topic}")).await;
        if !rows.is_empty() && rows.iter().all(|r| r["lag"] == 0) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the committed offsets of `topic` add up to `want` (they are
/// written at every offset flush); false if not within `within`.
pub async fn committed_reaches(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    want: u64,
    within: Duration,
) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if committed_total(c, s, topic).await == want {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

impl Server {
    /// A signal to the server process (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, sig: &str) {
        send_signal(self.pid(), sig);
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

/// `GET /admin/ready` without a token: the status code, and each check's
/// name with whether it passes.
pub async fn ready(c: &reqwest::Client, s: &Server) -> (u16, Vec<(String, bool)>) {
    let r = c.get(s.admin_url("/admin/ready")).send().await.unwrap();
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap();
    let checks = body["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks in {body}"))
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["ok"] == true))
        .collect();
    (status, checks)
}

/// Checks named `names`, each passing or not as `ok` says.
pub fn checks(names: &[(&str, bool)]) -> Vec<(String, bool)> {
    names.iter().map(|(n, ok)| (n.to_string(), *ok)).collect()
}

/// Polls `/admin/ready` until its answer is `want` (bounded by `within`);
/// the last answer.
pub async fn ready_reaching(
    c: &reqwest::Client,
    s: &Server,
    want: &(u16, Vec<(String, bool)>),
    within: Duration,
) -> (u16, Vec<(String, bool)>) {
    let deadline = Instant::now() + within;
    loop {
        let got = ready(c, s).await;
        if &got == want || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// `HOST:PORT` of the gRPC listener (`eventmesh.server.grpc.port`) and
    /// whether it serves TLS, from its log line; `None` when the server
    /// is ready without one (the listener is off). Waits up to 30 s.
    pub fn grpc_addr(&self) -> Option<(String, bool)> {
        let marker = "gRPC listening on ";
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (found, ready) = {
                let log = self.log.lock().unwrap();
                let found = log.iter().find_map(|line| {
                    let rest = &line[line.find(marker)? + marker.len()..];
                    let addr: String = rest
                        .chars()
                        .take_while(|c| {
                            c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')
                        })
                        .collect();
                    let tls = rest[addr.len()..].starts_with(" (TLS)");
                    (!addr.is_empty()).then_some((addr, tls))
                });
                (found, log.iter().any(|l| l.contains("eventmesh ready")))
            };
            if found.is_some() || ready {
                return found;
            }
            assert!(Instant::now() < deadline, "no gRPC listener line in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port of the gRPC listener; panics when it is off.
    pub fn grpc_port(&self) -> u16 {
        let (addr, _) = self.grpc_addr().expect("the gRPC listener is on");
        port_of(&addr)
    }
}
