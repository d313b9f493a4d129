//! Meshes of `eventmesh` instances with `PARTITION_OWNED_PULL` for the
//! tests: a real etcd, a three-node NATS JetStream cluster, and instances
//! `i-0`, `i-1`, ... on them, with the helpers that watch ownership settle
//! and events arrive.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::hook::{start_hook, Hook, HookMode};
use super::topics::try_publish_batch;
use super::*;
use eventmesh_jetstream::testutil::NatsCluster;

#[allow(dead_code)]
#[path = "../../../eventmesh-meta/tests/support/mod.rs"]
mod etcd_support;
pub use etcd_support::Etcd;

/// The lease of the tests that kill or freeze an owner (short, so that
/// they end soon); the steady-state test keeps the default.
pub const LEASE_MS: u64 = 3000;
pub const PARTITIONS: u32 = 12;

/// One mesh at a time: three of them at once would starve a small
/// machine's leases.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Mesh {
    pub etcd: Etcd,
    _nats: NatsCluster,
    settings: Vec<String>,
    dirs: Vec<tempfile::TempDir>,
    pub servers: Vec<Option<Server>>,
}

impl Mesh {
    pub async fn start(n: usize, prefix: &str, lease_ms: u64) -> Mesh {
        Self::start_with(n, prefix, lease_ms, &[]).await
    }

    /// [`Mesh::start`] with more `key=value` settings for every instance.
    pub async fn start_with(n: usize, prefix: &str, lease_ms: u64, extra: &[&str]) -> Mesh {
        let etcd = Etcd::start().await;
        let nats = NatsCluster::start(3);
        let settings = vec![
            "eventmesh.storage.type=jetstream".to_string(),
            format!(
                "eventmesh.storage.jetstream.servers={}",
                nats.urls().join(",")
            ),
            "eventmesh.storage.jetstream.replicas=3".to_string(),
            format!("eventmesh.storage.jetstream.stream.prefix={prefix}"),
            "eventmesh.storage.jetstream.timeout.ms=3000".to_string(),
            "eventmesh.meta.type=etcd".to_string(),
            format!("eventmesh.meta.etcd.endpoints={}", etcd.endpoint()),
            "eventmesh.meta.etcd.timeout.ms=1000".to_string(),
            "eventmesh.cluster.enabled=true".to_string(),
            "eventmesh.delivery.topology=PARTITION_OWNED_PULL".to_string(),
            format!("eventmesh.cluster.lease.ms={lease_ms}"),
            "eventmesh.cluster.handover.grace.ms=2000".to_string(),
            "eventmesh.cluster.secret=mesh-s3cret-0123456789".to_string(),
            format!("eventmesh.topic.default.partitions={PARTITIONS}"),
        ];
        let settings = settings
            .into_iter()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        let mut mesh = Mesh {
            etcd,
            _nats: nats,
            settings,
            dirs: Vec::new(),
            servers: Vec::new(),
        };
        for _ in 0..n {
            mesh.add();
        }
        mesh
    }

    /// Starts one more instance, `i-<k>`.
    pub fn add(&mut self) -> usize {
        let k = self.servers.len();
        let dir = tempfile::tempdir().unwrap();
        let mut extra = self.settings.clone();
        extra.push(format!("eventmesh.cluster.instance.id=i-{k}"));
        let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
        self.servers.push(Some(Server::start(dir.path(), &refs)));
        self.dirs.push(dir);
        k
    }

    /// The NATS servers' client URLs.
    pub fn nats_urls(&self) -> Vec<String> {
        self._nats.urls()
    }

    pub fn s(&self, k: usize) -> &Server {
        self.servers[k].as_ref().expect("running")
    }

    pub fn live(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|k| self.servers[*k].is_some())
            .collect()
    }
}

pub async fn cluster_view(c: &reqwest::Client, s: &Server) -> Value {
    admin_json(c, s, "/admin/cluster").await
}

/// Owner of each partition of `topic`, as `s` sees it.
pub fn owners_of(view: &Value, topic: &str) -> BTreeMap<u32, String> {
    view["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["topic"] == topic)
        .map(|p| {
            (
                p["partition"].as_u64().unwrap() as u32,
                p["owner"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until every partition of `topic` has an owner among `ids`, each
/// its assignee (no handover under way); the owners.
pub async fn settled(
    c: &reqwest::Client,
    s: &Server,
    topic: &str,
    ids: &[String],
    within: Duration,
) -> BTreeMap<u32, String> {
    let deadline = Instant::now() + within;
    loop {
        let view = cluster_view(c, s).await;
        let owners = owners_of(&view, topic);
        let live: BTreeSet<&str> = view["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        let want: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        if owners.len() == PARTITIONS as usize
            && view["handovers"] == 0
            && live == want
            && owners.values().all(|o| want.contains(o.as_str()))
        {
            return owners;
        }
        assert!(
            Instant::now() < deadline,
            "ownership of {topic} did not settle on {ids:?}: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn ids(mesh: &Mesh) -> Vec<String> {
    mesh.live().iter().map(|k| format!("i-{k}")).collect()
}

/// Publishes events `from..to` as batches of 50, spread over the live
/// instances; the ids accepted.
pub async fn publish_spread(
    c: &reqwest::Client,
    mesh: &Mesh,
    topic: &str,
    from: usize,
    to: usize,
) -> Vec<String> {
    let live = mesh.live();
    let mut accepted = Vec::new();
    let mut n = from;
    let mut turn = 0;
    while n < to {
        let end = (n + 50).min(to);
        let batch: Vec<Value> = (n..end).map(|i| event(&format!("e{i}"))).collect();
        let s = mesh.s(live[turn % live.len()]);
        turn += 1;
        publish_retrying(c, s, topic, &batch).await;
        accepted.extend((n..end).map(|i| format!("e{i}")));
        n = end;
    }
    accepted
}

/// Publishes one batch, again while the answer is `503` (the log was busy
/// electing a leader, or slow to answer in time): a retried batch is
/// stored once, as idempotent publishing promises.
pub async fn publish_retrying(c: &reqwest::Client, s: &Server, topic: &str, batch: &[Value]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = try_publish_batch(c, s, topic, batch).await;
        match status {
            202 => return,
            503 if Instant::now() < deadline => {
                eprintln!("publish answered 503, retrying: {body}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => panic!("publish answered {status}: {body}"),
        }
    }
}

/// How many ids were delivered more than once.
pub fn duplicates(counts: &BTreeMap<String, usize>) -> usize {
    counts.values().filter(|n| **n > 1).count()
}

/// Waits until the hook accepted every id of `want`; the accepted ids with
/// their counts.
pub async fn hook_has(hook: &Hook, want: &[String], within: Duration) -> BTreeMap<String, usize> {
    match hook_gets(hook, want, within).await {
        Ok(counts) => counts,
        Err(missing) => panic!(
            "{} of {} events never delivered, among them {:?}",
            missing.len(),
            want.len(),
            &missing[..missing.len().min(20)]
        ),
    }
}

/// [`hook_has`] that answers the ids still missing at the deadline instead
/// of failing, for a test to say more about them.
pub async fn hook_gets(
    hook: &Hook,
    want: &[String],
    within: Duration,
) -> Result<BTreeMap<String, usize>, Vec<String>> {
    let deadline = Instant::now() + within;
    loop {
        let counts: BTreeMap<String, usize> =
            hook.lock()
                .unwrap()
                .accepted
                .iter()
                .fold(BTreeMap::new(), |mut m, a| {
                    *m.entry(a.0.clone()).or_default() += 1;
                    m
                });
        let missing: Vec<String> = want
            .iter()
            .filter(|id| !counts.contains_key(*id))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(counts);
        }
        if Instant::now() >= deadline {
            return Err(missing);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three instances with a webhook group on `topic`, its ownership settled;
/// the mesh, a client, the hook and the owners.
pub async fn hooked_mesh(
    prefix: &str,
    lease_ms: u64,
    topic: &str,
    mode: HookMode,
) -> (Mesh, reqwest::Client, Hook, BTreeMap<u32, String>) {
    let mesh = Mesh::start(3, prefix, lease_ms).await;
    let c = client();
    let (url, hook) = start_hook(mode).await;
    subscribe(
        &c,
        mesh.s(0),
        json!({"clientId": "hook", "group": "hooks", "topic": topic, "url": url}),
    )
    .await;
    let owners = settled(&c, mesh.s(0), topic, &ids(&mesh), Duration::from_secs(30)).await;
    (mesh, c, hook, owners)
}
