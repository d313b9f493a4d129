//! Mesh links for the tests: sites (standalone instances, each a cluster
//! of its own name), links made and watched through `/admin/links`, and
//! what the links counted.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::topics::{admin, publish_batch};
use super::*;

pub const WAIT: Duration = Duration::from_secs(90);

/// One cluster: a standalone instance named `name`.
pub struct Site {
    pub name: &'static str,
    pub server: Server,
    _dir: tempfile::TempDir,
}

impl Site {
    pub fn start(name: &'static str, extra: &[String]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = vec![format!("eventmesh.cluster.name={name}")];
        settings.extend(extra.iter().cloned());
        let server = Server::start_with(dir.path(), &settings);
        Site {
            name,
            server,
            _dir: dir,
        }
    }
}

impl std::ops::Deref for Site {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

/// Creates the link `name` on `from` to the cluster `cluster` at `url`,
/// exporting `orders`, with `more` fields replacing those (`exports`,
/// `renamePrefix`, ...); its view.
pub async fn link(
    c: &reqwest::Client,
    from: &Server,
    name: &str,
    url: &str,
    cluster: &str,
    more: Value,
) -> Value {
    let mut body = json!({
        "name": name,
        "remote": {"url": url, "cluster": cluster},
        "exports": [{"topic": "orders"}],
        "targetGuard": false,
    });
    for (k, v) in more.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (code, v) = admin(c, from, reqwest::Method::POST, "/admin/links", Some(body)).await;
    assert_eq!(code, 201, "{v}");
    v
}

pub async fn link_view(c: &reqwest::Client, s: &Server, name: &str) -> Value {
    let (code, v) = admin(
        c,
        s,
        reqwest::Method::GET,
        &format!("/admin/links/{name}"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{v}");
    v
}

/// Waits until the link's view satisfies `cond`; the view.
pub async fn link_reaching(
    c: &reqwest::Client,
    s: &Server,
    name: &str,
    what: &str,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = link_view(c, s, name).await;
        if cond(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{}/{name}: not {what}: {v}",
            s.traffic
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a link's view says it is up with nothing waiting.
pub fn idle(v: &Value) -> bool {
    v["status"]["state"] == "UP" && v["status"]["lagEvents"] == 0
}

/// Waits until every link of `s` is up with nothing waiting.
pub async fn links_idle(c: &reqwest::Client, s: &Server) {
    let (code, all) = admin(c, s, reqwest::Method::GET, "/admin/links", None).await;
    assert_eq!(code, 200, "{all}");
    for l in all.as_array().unwrap() {
        let name = l["name"].as_str().unwrap();
        link_reaching(c, s, name, "idle", idle).await;
    }
}

/// `n` events published at `s` on `topic` in batches of 25, ids
/// `<site>-<k>`, source `/site/<site>`.
pub async fn publish_numbered(c: &reqwest::Client, s: &Site, topic: &str, n: usize) {
    publish_numbered_from(c, s, topic, 0, n).await;
}

/// [`publish_numbered`] of the events `from..to`.
pub async fn publish_numbered_from(
    c: &reqwest::Client,
    s: &Site,
    topic: &str,
    from: usize,
    to: usize,
) {
    let mut k = from;
    while k < to {
        let batch: Vec<Value> = (k..(k + 25).min(to))
            .map(|i| {
                let mut e = event(&format!("{}-{i}", s.name));
                e["source"] = json!(format!("/site/{}", s.name));
                e
            })
            .collect();
        publish_batch(c, s, topic, &batch).await;
        k += batch.len();
    }
}

/// The clusters an event has left.
pub fn path(ev: &Value) -> Vec<&str> {
    ev["meshpath"]
        .as_str()
        .map(|p| p.split(',').collect())
        .unwrap_or_default()
}

/// The sum of `eventmesh_link_events_total{link,outcome}` over `links`.
pub async fn link_events(c: &reqwest::Client, s: &Server, links: &[String], outcome: &str) -> f64 {
    let m = metrics(c, s).await;
    links
        .iter()
        .map(|l| {
            let series =
                format!("eventmesh_link_events_total{{link=\"{l}\",outcome=\"{outcome}\"}}");
            m.samples.get(&series).copied().unwrap_or(0.0)
        })
        .sum()
}

/// A client that sends `token` as its bearer credential.
pub fn authorized(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .unwrap()
}

/// The dead letters of `topic` once there are `n` (or what there is after
/// [`WAIT`]).
pub async fn dead_letters_reaching(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    n: usize,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let path = format!("/admin/dlq/browse?topic={topic}");
        let (code, d) = admin(c, s, reqwest::Method::GET, &path, None).await;
        assert_eq!(code, 200, "{d}");
        if d.as_array().is_some_and(|d| d.len() >= n) || Instant::now() >= deadline {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
