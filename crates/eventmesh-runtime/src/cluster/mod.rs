//! Partition ownership across instances (`PARTITION_OWNED_PULL`).
//!
//! - `membership`: this instance's leased registration, `/em/instances/<id>`;
//! - `assign`: which live instance should own each partition (rendezvous);
//! - `claims`: leased claims, the one way an instance takes a key for
//!   itself (partitions here, connectors in the connector runtime);
//! - `ownership`: the one ownership loop that claims and releases
//!   partitions, `/em/owners/<topic>/<partition>`, by guarded writes bound
//!   to the lease;
//! - `offsets`: committed offsets in the meta store, each commit guarded
//!   by the committer's claim;
//! - `internal`: the client of the internal channel between instances.
//!
//! Invariants:
//! - A claim is a create-if-absent bound to the instance's lease; its
//!   fencing token is the store revision of that create, which only grows
//!   and involves no clock.
//! - Every write made in a partition's name (offset commit, dead letter)
//!   is guarded by the claim's revision on the store itself, and an ack is
//!   refused once the instance's own token for the partition is gone: a
//!   stale owner's writes fail and are counted
//!   (`eventmesh_fenced_writes_total{kind}`).
//! - The instance stops handing out events from every partition as soon
//!   as it can no longer be sure its lease lives, before the lease can end
//!   and anyone else can claim them.
//! - One loop per instance decides ownership; the dispatchers only read
//!   the [`Fence`] it maintains.

mod assign;
pub mod claims;
mod internal;
mod membership;
mod offsets;
mod ownership;

pub(crate) use internal::{internal_client, peer_post};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use eventmesh_meta::{follow_prefix, MetaStore, Mirror};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub use assign::assignee;
pub use claims::Claim;
pub use membership::{InstanceInfo, INSTANCES_PREFIX};
pub use offsets::FencedOffsetStore;

/// Where claims live.
pub const OWNERS_PREFIX: &str = "/em/owners/";
/// Where each pulling client's home instance (where it polls or streams) is
/// recorded, under that instance's lease.
pub const BINDINGS_PREFIX: &str = "/em/bindings/";
/// `/em/held/<topic>`: the topic holds events back (scheduled delivery),
/// so its partitions are owned, and released, with or without
/// subscriptions.
pub const HELD_PREFIX: &str = "/em/held/";

/// The key of a partition's claim.
pub fn owner_key(topic: &str, partition: u32) -> String {
    format!("{OWNERS_PREFIX}{topic}/{partition}")
}

/// What a claim says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ClaimRecord {
    pub instance: String,
    pub boot: String,
}

/// The instance's settings for ownership.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    pub lease: Duration,
    pub handover_grace: Duration,
    /// Secret of the internal channel between instances.
    pub secret: String,
    /// TLS of the internal channel's client (what it trusts, the
    /// certificate it presents), for instances whose traffic port serves
    /// TLS; `None`: the default roots, no client certificate.
    pub internal_tls: Option<Arc<rustls::ClientConfig>>,
}

/// This instance's claims, as the ownership loop keeps them: the token of
/// each partition it may write in the name of, and the partitions it
/// dispatches (those it owns and is not giving up).
#[derive(Default)]
pub struct Fence {
    state: RwLock<FenceState>,
    /// The instance's registration, read at every check: a claim counts
    /// only while the lease surely lives, even before the ownership loop
    /// has run again (a process resumed after a long pause must not act on
    /// its old claims first). Without one (unit tests), `until` decides.
    registration: Option<membership::Registration>,
}

#[derive(Default)]
struct FenceState {
    /// By topic, then partition (looked up without allocating: every
    /// hand-out checks it).
    tokens: HashMap<String, HashMap<u32, u64>>,
    dispatched: BTreeMap<String, BTreeSet<u32>>,
    /// Without a registration: until when claims count.
    until: Option<tokio::time::Instant>,
}

impl Fence {
    /// The fencing token of this instance's claim on the partition, while
    /// its lease surely lives.
    pub fn token(&self, topic: &str, partition: u32) -> Option<u64> {
        let s = self.state.read().expect("fence lock");
        let held = match &self.registration {
            Some(r) => membership::held_now(r).is_some(),
            None => s.until.is_some_and(|u| tokio::time::Instant::now() < u),
        };
        if !held {
            return None;
        }
        s.tokens.get(topic)?.get(&partition).copied()
    }

    /// Without a registration (unit tests): until when claims count.
    #[cfg(test)]
    pub(crate) fn hold_until(&self, until: Option<tokio::time::Instant>) {
        self.state.write().expect("fence lock").until = until;
    }

    /// The partitions of `topic` this instance dispatches, ascending.
    pub fn dispatched(&self, topic: &str) -> Vec<u32> {
        let s = self.state.read().expect("fence lock");
        s.dispatched
            .get(topic)
            .map(|ps| ps.iter().copied().collect())
            .unwrap_or_default()
    }

    /// How many partitions this instance dispatches.
    pub fn owned_count(&self) -> usize {
        let s = self.state.read().expect("fence lock");
        s.dispatched.values().map(BTreeSet::len).sum()
    }

    pub(crate) fn own(&self, topic: &str, partition: u32, token: u64) {
        let mut s = self.state.write().expect("fence lock");
        s.tokens
            .entry(topic.to_string())
            .or_default()
            .insert(partition, token);
        s.dispatched
            .entry(topic.to_string())
            .or_default()
            .insert(partition);
    }

    /// Stops dispatching the partition; its token stays for the last
    /// commits of the handover.
    pub(crate) fn stop_dispatching(&self, topic: &str, partition: u32) {
        let mut s = self.state.write().expect("fence lock");
        if let Some(ps) = s.dispatched.get_mut(topic) {
            ps.remove(&partition);
            if ps.is_empty() {
                s.dispatched.remove(topic);
            }
        }
    }

    fn forget(&self, topic: &str, partition: u32) {
        self.stop_dispatching(topic, partition);
        let mut s = self.state.write().expect("fence lock");
        if let Some(ps) = s.tokens.get_mut(topic) {
            ps.remove(&partition);
            if ps.is_empty() {
                s.tokens.remove(topic);
            }
        }
    }

    /// Forgets every claim at once (the lease cannot be vouched for).
    fn forget_all(&self) -> Vec<(String, u32)> {
        let mut s = self.state.write().expect("fence lock");
        s.dispatched.clear();
        s.tokens
            .drain()
            .flat_map(|(t, ps)| ps.into_keys().map(move |p| (t.clone(), p)))
            .collect()
    }
}

/// A change of the partitions this instance dispatches, for the runtime to
/// apply; answered once its dispatchers follow it.
#[derive(Debug)]
pub struct Handover {
    /// Topics whose dispatched partitions changed.
    pub topics: BTreeSet<String>,
    /// Some partitions were given up: their deliveries in clients' hands
    /// get until this deadline to be acknowledged.
    pub deadline: Option<tokio::time::Instant>,
    pub done: oneshot::Sender<()>,
}

/// One instance in the admin view.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    #[serde(flatten)]
    pub info: InstanceInfo,
    pub owned_partitions: usize,
}

/// One partition's owner in the admin view.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerView {
    pub topic: String,
    pub partition: u32,
    pub owner: String,
    /// The claim's revision: its fencing token.
    pub token: u64,
    /// Who should own it now (a handover is under way while it differs).
    pub assignee: Option<String>,
}

/// `GET /admin/cluster`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub instance: String,
    /// Whether this instance holds its lease now.
    pub registered: bool,
    pub instances: Vec<InstanceView>,
    pub partitions: Vec<OwnerView>,
    /// Partitions whose owner is not their assignee yet.
    pub handovers: usize,
}

/// The cluster as this instance takes part in it.
pub struct Cluster {
    id: String,
    boot: String,
    meta: Arc<dyn MetaStore>,
    secret: String,
    /// The client of calls on other instances' internal channel.
    internal: reqwest::Client,
    bindings: watch::Receiver<Mirror>,
    /// The topics that hold events back (`HELD_PREFIX`).
    held: watch::Receiver<Mirror>,
    /// Clients bound here, with the lease they were bound under.
    bound: std::sync::Mutex<HashMap<String, eventmesh_meta::LeaseId>>,
    fence: Arc<Fence>,
    registration: membership::Registration,
    instances: watch::Receiver<Mirror>,
    owners: watch::Receiver<Mirror>,
    topics: watch::Sender<BTreeMap<String, u32>>,
    stop: CancellationToken,
    /// The membership task, which ends the lease once stopped.
    membership: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// How long an instance's lease lives without renewal.
    lease_ttl: Duration,
}

impl Cluster {
    /// Registers the instance and starts its ownership loop. Handovers
    /// come on the returned receiver, for the runtime to apply.
    pub fn start(
        meta: Arc<dyn MetaStore>,
        info: InstanceInfo,
        settings: ClusterSettings,
        metrics: Arc<Metrics>,
    ) -> (Arc<Cluster>, mpsc::Receiver<Handover>) {
        let stop = CancellationToken::new();
        let (registration, member_task) =
            membership::start(meta.clone(), info.clone(), settings.lease, stop.clone());
        let instances = follow_prefix(meta.clone(), INSTANCES_PREFIX, stop.clone());
        let owners = follow_prefix(meta.clone(), OWNERS_PREFIX, stop.clone());
        let bindings = follow_prefix(meta.clone(), BINDINGS_PREFIX, stop.clone());
        let held = follow_prefix(meta.clone(), HELD_PREFIX, stop.clone());
        let (topics, topics_rx) = watch::channel(BTreeMap::new());
        let fence = Arc::new(Fence {
            registration: Some(registration.clone()),
            ..Fence::default()
        });
        let (handovers, rx) = mpsc::channel(16);
        let cluster = Arc::new(Cluster {
            id: info.id.clone(),
            boot: info.boot.clone(),
            meta: meta.clone(),
            secret: settings.secret.clone(),
            internal: internal_client(settings.internal_tls.clone()),
            bindings,
            held,
            bound: std::sync::Mutex::default(),
            fence: fence.clone(),
            registration: registration.clone(),
            instances: instances.clone(),
            owners: owners.clone(),
            topics,
            stop: stop.clone(),
            membership: tokio::sync::Mutex::new(Some(member_task)),
            lease_ttl: settings.lease,
        });
        tokio::spawn(ownership::run(ownership::Loop {
            meta,
            me: ClaimRecord {
                instance: info.id,
                boot: info.boot,
            },
            settings,
            fence,
            registration,
            instances,
            owners,
            topics: topics_rx,
            handovers,
            metrics,
            stop,
        }));
        (cluster, rx)
    }

    /// This run of the instance, as registered (delivery ids carry it).
    /// This instance's id (stable across its restarts).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn boot(&self) -> &str {
        &self.boot
    }

    /// The internal channel's secret.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The client of calls on other instances' internal channel.
    pub fn internal(&self) -> &reqwest::Client {
        &self.internal
    }

    /// Records this instance as the home of a pulling client (it polls or
    /// streams here), so that the owners of its partitions forward its
    /// deliveries here. Bound under the lease: it goes with this instance.
    pub async fn bind(&self, client: &str) {
        let Some(held) = membership::held_now(&self.registration) else {
            return;
        };
        let key = format!("{BINDINGS_PREFIX}{client}");
        let mine = self.bound.lock().expect("bound lock").get(client) == Some(&held.lease)
            && self
                .bindings
                .borrow()
                .entries
                .get(&key)
                .map(|kv| &kv.value[..])
                == Some(self.id.as_bytes());
        if mine {
            return;
        }
        let value = bytes::Bytes::from(self.id.clone());
        match self.meta.put_with_lease(&key, value, held.lease).await {
            Ok(_) => {
                self.bound
                    .lock()
                    .expect("bound lock")
                    .insert(client.to_string(), held.lease);
            }
            Err(e) => tracing::debug!(client, error = %e, "cannot record a client's home instance"),
        }
    }

    /// Drops the client's binding to this instance (it went away here),
    /// so that the owners serving it stop counting it as present; its next
    /// poll or stream here binds it again.
    pub async fn unbind(&self, client: &str) {
        self.bound.lock().expect("bound lock").remove(client);
        let key = format!("{BINDINGS_PREFIX}{client}");
        let ours = self
            .bindings
            .borrow()
            .entries
            .get(&key)
            .is_some_and(|kv| kv.value[..] == *self.id.as_bytes());
        if ours {
            if let Err(e) = self.meta.delete(&key).await {
                tracing::debug!(client, error = %e, "cannot drop a client's home binding");
            }
        }
    }

    /// The instance a pulling client is bound to, when it is another live
    /// one.
    pub fn home_of(&self, client: &str) -> Option<InstanceInfo> {
        let key = format!("{BINDINGS_PREFIX}{client}");
        let home = self.bindings.borrow().entries.get(&key)?.value.clone();
        let home = std::str::from_utf8(&home).ok()?;
        if home == self.id {
            return None;
        }
        self.instance(home)
    }

    /// Records that `topic` holds events back, for every instance to own
    /// its partitions (kept until the topic is deleted).
    pub async fn mark_held(&self, topic: &str) -> Result<(), eventmesh_meta::MetaError> {
        let key = format!("{HELD_PREFIX}{topic}");
        if self.held.borrow().entries.contains_key(&key) {
            return Ok(());
        }
        self.meta
            .put_if_absent(&key, bytes::Bytes::from_static(b"1"))
            .await
            .map(|_| ())
    }

    /// Forgets that a deleted topic held events back.
    pub async fn unmark_held(&self, topic: &str) {
        let _ = self.meta.delete(&format!("{HELD_PREFIX}{topic}")).await;
    }

    /// The topics some instance recorded as holding events back.
    pub fn held_topics(&self) -> Vec<String> {
        self.held
            .borrow()
            .entries
            .keys()
            .filter_map(|k| k.strip_prefix(HELD_PREFIX).map(str::to_string))
            .collect()
    }

    /// Who claims the partition now, as this instance last saw it; `None`
    /// while nobody does.
    pub fn owner_of(&self, topic: &str, partition: u32) -> Option<ClaimRecord> {
        let owners = self.owners.borrow();
        owners
            .entries
            .get(&owner_key(topic, partition))
            .map(claims::holder)
    }

    /// How long an instance's lease lives without renewal: the longest a
    /// dead instance's claims outlive it.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// A live instance by id.
    pub fn instance(&self, id: &str) -> Option<InstanceInfo> {
        let key = format!("{INSTANCES_PREFIX}{id}");
        let kv = self.instances.borrow().entries.get(&key)?.clone();
        serde_json::from_slice(&kv.value).ok()
    }

    /// The live instance running boot `boot`.
    pub fn instance_by_boot(&self, boot: &str) -> Option<InstanceInfo> {
        self.instances
            .borrow()
            .entries
            .values()
            .filter_map(|kv| serde_json::from_slice::<InstanceInfo>(&kv.value).ok())
            .find(|i| i.boot == boot)
    }

    /// The other live instances.
    pub fn others(&self) -> Vec<InstanceInfo> {
        self.instances
            .borrow()
            .entries
            .values()
            .filter_map(|kv| serde_json::from_slice::<InstanceInfo>(&kv.value).ok())
            .filter(|i| i.boot != self.boot)
            .collect()
    }

    /// Wakes on every change of the clients' homes.
    pub fn bindings_watch(&self) -> watch::Receiver<Mirror> {
        self.bindings.clone()
    }

    pub fn fence(&self) -> &Arc<Fence> {
        &self.fence
    }

    /// The topics whose partitions are to be owned, with their partition
    /// counts (the subscribed topics).
    pub fn set_topics(&self, topics: BTreeMap<String, u32>) {
        self.topics.send_if_modified(|t| {
            let changed = *t != topics;
            *t = topics;
            changed
        });
    }

    /// What this run of the instance writes in its claims.
    pub fn me(&self) -> ClaimRecord {
        ClaimRecord {
            instance: self.id.clone(),
            boot: self.boot.clone(),
        }
    }

    /// Claims `key` for this run of the instance under its lease: the
    /// claim when made; `None` when someone holds the key or the lease
    /// cannot be vouched for.
    pub async fn claim(&self, key: &str) -> Result<Option<Claim>, eventmesh_meta::MetaError> {
        let Some(lease) = self.lease() else {
            return Ok(None);
        };
        claims::claim(self.meta.as_ref(), key, &self.me(), lease).await
    }

    /// Releases a claim this instance made (see [`claims::release`]).
    pub async fn release(&self, claim: &Claim) -> Result<bool, eventmesh_meta::MetaError> {
        claims::release(self.meta.as_ref(), &claim.key, claim.token).await
    }

    /// The instance's lease, while it surely lives: keys written under it
    /// go when the instance does.
    pub fn lease(&self) -> Option<eventmesh_meta::LeaseId> {
        membership::held_now(&self.registration).map(|h| h.lease)
    }

    /// The ids of the live instances, this one included.
    pub fn live_ids(&self) -> Vec<String> {
        ownership::live_ids(&self.instances.borrow().entries)
    }

    /// Whether the instance holds its lease now.
    pub fn registered(&self) -> bool {
        membership::held_now(&self.registration).is_some()
    }

    /// Whether this instance has settled into the cluster: it holds its
    /// lease, and every partition of the subscribed topics assigned to it
    /// is claimed by it, unless the claim is still held by an instance
    /// that is no longer live (its claim goes with its lease; waiting for
    /// that does not make this instance unable to serve). `Err` names what
    /// is missing.
    pub fn settled(&self) -> Result<(), String> {
        if !self.registered() {
            return Err("not registered in the cluster (no live lease)".into());
        }
        let live = ownership::live_ids(&self.instances.borrow().entries);
        let owners = self.owners.borrow();
        let mut waiting = Vec::new();
        for (topic, partitions) in self.topics.borrow().iter() {
            for p in 0..*partitions {
                if assignee(topic, p, live.iter().map(String::as_str)) != Some(self.id.as_str()) {
                    continue;
                }
                let owner = owners
                    .entries
                    .get(&owner_key(topic, p))
                    .map(|kv| claims::holder(kv).instance);
                match owner {
                    Some(o) if o == self.id => {}
                    Some(o) if !live.contains(&o) => {}
                    _ => waiting.push(format!("{topic}/{p}")),
                }
            }
        }
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} partition(s) assigned here not claimed yet: {}",
                waiting.len(),
                waiting.join(", ")
            ))
        }
    }

    /// Instances, owners and handovers as this instance sees them.
    pub fn view(&self) -> ClusterView {
        let instances = self.instances.borrow().entries.clone();
        let owners = self.owners.borrow().entries.clone();
        let live: Vec<String> = ownership::live_ids(&instances);
        let mut owned: HashMap<String, usize> = HashMap::new();
        let mut partitions = Vec::new();
        for kv in owners.values() {
            let Some((topic, partition)) = ownership::parse_owner_key(&kv.key) else {
                continue;
            };
            let claim = claims::holder(kv);
            *owned.entry(claim.instance.clone()).or_default() += 1;
            partitions.push(OwnerView {
                assignee: assignee(&topic, partition, live.iter().map(String::as_str))
                    .map(str::to_string),
                topic,
                partition,
                owner: claim.instance,
                token: kv.revision,
            });
        }
        let handovers = partitions
            .iter()
            .filter(|p| p.assignee.as_deref() != Some(p.owner.as_str()))
            .count();
        let instances = instances
            .values()
            .filter_map(|kv| serde_json::from_slice::<InstanceInfo>(&kv.value).ok())
            .map(|info| InstanceView {
                owned_partitions: owned.get(&info.id).copied().unwrap_or(0),
                info,
            })
            .collect();
        ClusterView {
            instance: self.id.clone(),
            registered: self.registered(),
            instances,
            partitions,
            handovers,
        }
    }

    /// Leaves the cluster: the ownership loop stops and the lease ends, so
    /// the partitions go to the others at once. Called once the
    /// dispatchers have stopped and committed.
    pub async fn leave(&self) {
        self.stop.cancel();
        if let Some(task) = self.membership.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}
