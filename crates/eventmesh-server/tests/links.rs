//! Mesh links between clusters: real `eventmesh` processes on loopback,
//! each a cluster of its own name, linked through `/admin/links`.
//!
//! - A full mesh of three sites with links both ways, publishing at all
//!   three at once: every event reaches each site exactly once, and none
//!   comes back to where it was published.
//! - A chain A → B → C with a rename, and the hop limit.
//! - Hub and spoke.
//! - A remote whose ACL refuses one topic: those events are dead-lettered
//!   at home with the remote's reason, the rest arrive.
//! - The remote killed -9 for 20 s and back: the link shows `DOWN` with its
//!   lag, and resumes on its own; nothing lost, nothing doubled.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::connectors::{drain, reader, stored_so_far};
use common::topics::{admin, publish_batch};
use common::*;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);

/// One cluster: a standalone instance named `name`.
struct Site {
    name: &'static str,
    server: Server,
    _dir: tempfile::TempDir,
}

impl Site {
    fn start(name: &'static str, extra: &[String]) -> Site {
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

/// Creates the link `name` from `from` to `to` with `more` fields
/// (`exports`, `renamePrefix`, ...); its view.
async fn link(c: &reqwest::Client, from: &Site, name: &str, to: &Site, more: Value) -> Value {
    let mut body = json!({
        "name": name,
        "remote": {"url": to.server.traffic, "cluster": to.name},
        "exports": [{"topic": "orders"}],
        "targetGuard": false,
    });
    for (k, v) in more.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (code, v) = admin(
        c,
        &from.server,
        reqwest::Method::POST,
        "/admin/links",
        Some(body),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    v
}

async fn link_view(c: &reqwest::Client, s: &Site, name: &str) -> Value {
    let (code, v) = admin(
        c,
        &s.server,
        reqwest::Method::GET,
        &format!("/admin/links/{name}"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{v}");
    v
}

/// Waits until the link's view satisfies `cond`; the view.
async fn link_reaching(
    c: &reqwest::Client,
    s: &Site,
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
            s.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every link of `s` is up with nothing waiting.
async fn links_idle(c: &reqwest::Client, s: &Site) {
    let (code, all) = admin(c, &s.server, reqwest::Method::GET, "/admin/links", None).await;
    assert_eq!(code, 200, "{all}");
    for l in all.as_array().unwrap() {
        let name = l["name"].as_str().unwrap();
        link_reaching(c, s, name, "idle", |v| {
            v["status"]["state"] == "UP" && v["status"]["lagEvents"] == 0
        })
        .await;
    }
}

/// `n` events published at `s` on `topic` in batches of 25, ids
/// `<site>-<k>`.
async fn publish_numbered(c: &reqwest::Client, s: &Site, topic: &str, n: usize) {
    let mut k = 0;
    while k < n {
        let batch: Vec<Value> = (k..(k + 25).min(n))
            .map(|i| {
                let mut e = event(&format!("{}-{i}", s.name));
                e["source"] = json!(format!("/site/{}", s.name));
                e
            })
            .collect();
        publish_batch(c, &s.server, topic, &batch).await;
        k += batch.len();
    }
}

/// The clusters an event has left.
fn path(ev: &Value) -> Vec<&str> {
    ev["meshpath"]
        .as_str()
        .map(|p| p.split(',').collect())
        .unwrap_or_default()
}

/// The sum of `eventmesh_link_events_total{link,outcome}` over `links`.
async fn link_events(c: &reqwest::Client, s: &Site, links: &[String], outcome: &str) -> f64 {
    let m = metrics(c, &s.server).await;
    links
        .iter()
        .map(|l| {
            let series =
                format!("eventmesh_link_events_total{{link=\"{l}\",outcome=\"{outcome}\"}}");
            m.samples.get(&series).copied().unwrap_or(0.0)
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_mesh_of_three_sites_delivers_each_event_once_everywhere_and_none_comes_back() {
    const N: usize = 300;
    let c = client();
    let sites = ["a", "b", "c"].map(|n| Site::start(n, &[]));
    for s in &sites {
        assert_eq!(health(&c, &s.server).await["cluster"], s.name);
        reader(&c, &s.server, "app", "orders").await;
    }
    let mut names: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for from in &sites {
        for to in sites.iter().filter(|t| t.name != from.name) {
            let name = format!("to-{}", to.name);
            let v = link(&c, from, &name, to, json!({})).await;
            assert_eq!(v["remote"]["url"], to.server.traffic);
            names.entry(from.name).or_default().push(name);
        }
    }
    for from in &sites {
        for name in &names[from.name] {
            let v = link_reaching(&c, from, name, "up", |v| v["status"]["state"] == "UP").await;
            assert_eq!(v["status"]["remoteCluster"], &name[3..]);
        }
    }
    // All three publish at once, while the links carry.
    futures::future::join_all(sites.iter().map(|s| publish_numbered(&c, s, "orders", N))).await;
    for s in &sites {
        let got = drain(&c, &s.server, "app", 3 * N, WAIT).await;
        assert_eq!(got.len(), 3 * N, "{} got {} events", s.name, got.len());
        for (id, (ev, times)) in &got {
            assert_eq!(*times, 1, "{id} came {times} times to {}", s.name);
            let origin = id.split('-').next().unwrap();
            let p = path(ev);
            if origin == s.name {
                assert!(p.is_empty(), "{id} came back to {}: {p:?}", s.name);
            } else {
                // Straight from its origin, or through the third site.
                assert_eq!(p[0], origin, "{id} at {}: {p:?}", s.name);
                assert!(
                    p.len() <= 2 && !p.contains(&s.name),
                    "{id} at {}: {p:?}",
                    s.name
                );
            }
        }
    }
    // Once every link is idle, each log holds each event exactly once.
    for s in &sites {
        links_idle(&c, s).await;
        assert_eq!(
            stored_so_far(&c, &s.server, "orders").await,
            3 * N as u64,
            "{}",
            s.name
        );
    }
    // Every event is offered six times: to both links of its origin (no
    // path yet), and at each of the two other sites to the link back (a
    // loop) and to the link onwards (a loop too when that copy came through
    // the third site, else a relay that site stores or already has). Each
    // of the two stores at the other sites is one `sent`.
    let (mut sent, mut loops, mut duplicates) = (0.0, 0.0, 0.0);
    for s in &sites {
        sent += link_events(&c, s, &names[s.name], "sent").await;
        loops += link_events(&c, s, &names[s.name], "loop").await;
        duplicates += link_events(&c, s, &names[s.name], "duplicate").await;
    }
    let events = (3 * N) as f64;
    assert_eq!(sent, 2.0 * events, "loops {loops}, duplicates {duplicates}");
    assert_eq!(
        loops + sent + duplicates,
        6.0 * events,
        "loops {loops}, duplicates {duplicates}"
    );
    assert!(loops >= 2.0 * events, "loops {loops}");
}
