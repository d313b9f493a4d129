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
pub mod interop;
pub mod links;
pub mod mesh;
mod metrics;
pub mod routing;
pub mod sdk;
mod server;
pub mod topics;

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use metrics::*;
#[allow(unused_imports)]
pub use server::{port_of, Server};

use std::io::Read;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
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

/// A small xorshift generator: a fault test's schedule is reproducible
/// from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The seed in the environment variable `var`, else one from the
    /// clock (odd, so never 0).
    pub fn seeded(var: &str) -> (Rng, u64) {
        let seed: u64 = std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        (Rng(seed), seed)
    }

    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}
