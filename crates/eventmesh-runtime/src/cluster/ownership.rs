//! The ownership loop: the only place that claims and releases
//! partitions. Each round it computes the partitions this instance should
//! own (rendezvous over the live instances), gives up the ones it should
//! not (dispatching stops, the runtime waits for the deliveries in hand up
//! to the grace and commits, then the claim is deleted at its revision),
//! and claims the free ones it should own (a create-if-absent bound to the
//! lease). A partition whose claim another instance still holds is left
//! until that claim goes: released by its holder, or deleted with its
//! lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use eventmesh_meta::{LeaseId, MetaError, MetaStore, Mirror};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::claims::{self, Claim};
use super::membership::{held_now, Registration, INSTANCES_PREFIX};
use super::{assignee, owner_key, ClaimRecord, ClusterSettings, Fence, Handover, OWNERS_PREFIX};
use crate::metrics::Metrics;

/// How soon to look again while a partition waits for its holder to let go.
const WAITING_RECHECK: Duration = Duration::from_millis(250);
/// How often to look again anyway.
const RECHECK: Duration = Duration::from_secs(2);

pub(super) struct Loop {
    pub meta: Arc<dyn MetaStore>,
    pub me: ClaimRecord,
    pub settings: ClusterSettings,
    pub fence: Arc<Fence>,
    pub registration: Registration,
    pub instances: watch::Receiver<Mirror>,
    pub owners: watch::Receiver<Mirror>,
    pub topics: watch::Receiver<BTreeMap<String, u32>>,
    pub handovers: mpsc::Sender<Handover>,
    pub metrics: Arc<Metrics>,
    pub stop: CancellationToken,
}

/// The ids of the registered instances.
pub(super) fn live_ids(entries: &BTreeMap<String, eventmesh_meta::KeyValue>) -> Vec<String> {
    entries
        .keys()
        .filter_map(|k| k.strip_prefix(INSTANCES_PREFIX))
        .map(str::to_string)
        .collect()
}

/// Topic and partition of a claim's key.
pub(super) fn parse_owner_key(key: &str) -> Option<(String, u32)> {
    let (topic, partition) = key.strip_prefix(OWNERS_PREFIX)?.rsplit_once('/')?;
    Some((topic.to_string(), partition.parse().ok()?))
}

/// This instance's claims: token of each, and the lease they are bound to.
#[derive(Default)]
struct Owned {
    tokens: BTreeMap<(String, u32), u64>,
    lease: Option<LeaseId>,
}

pub(super) async fn run(mut l: Loop) {
    let mut owned = Owned::default();
    loop {
        let wake = l.round(&mut owned).await;
        tokio::select! {
            _ = l.stop.cancelled() => break,
            r = l.registration.changed() => if r.is_err() { break },
            r = l.instances.changed() => if r.is_err() { break },
            r = l.owners.changed() => if r.is_err() { break },
            r = l.topics.changed() => if r.is_err() { break },
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
    // Leaving (shutdown): the runtime has stopped its dispatchers; the
    // lease ends next, and the claims with it.
    l.fence.forget_all();
    l.metrics.owned_partitions.set(0);
}

impl Loop {
    /// One pass; returns when to look again at the latest.
    async fn round(&mut self, owned: &mut Owned) -> Instant {
        let now = Instant::now();
        let Some(held) = held_now(&self.registration) else {
            if !owned.tokens.is_empty() {
                self.lose_all(owned, "the cluster lease cannot be vouched for")
                    .await;
            }
            return now + RECHECK;
        };
        if owned.lease.is_some_and(|l| l != held.lease) {
            // Claims of an earlier lease ended with it.
            self.lose_all(owned, "the cluster lease was renewed as a new one")
                .await;
        }
        owned.lease = Some(held.lease);
        let live = live_ids(&self.instances.borrow().entries);
        let topics = self.topics.borrow().clone();
        let mut target = BTreeSet::new();
        for (topic, &partitions) in &topics {
            for p in 0..partitions {
                if assignee(topic, p, live.iter().map(String::as_str)) == Some(&self.me.instance) {
                    target.insert((topic.clone(), p));
                }
            }
        }
        self.release_orphans(owned, &target).await;
        self.give_up(owned, &target).await;
        let waiting = self.claim(owned, &target, held.lease).await;
        self.metrics
            .owned_partitions
            .set(self.fence.owned_count() as i64);
        let next = now + if waiting { WAITING_RECHECK } else { RECHECK };
        next.min(held.until)
    }

    /// Stops dispatching every partition at once and forgets the claims
    /// (any write in their name is refused from now on).
    async fn lose_all(&self, owned: &mut Owned, why: &str) {
        let lost = self.fence.forget_all();
        tracing::warn!(
            partitions = lost.len(),
            "{why}: no longer handing out events of any partition"
        );
        owned.tokens.clear();
        owned.lease = None;
        self.metrics.owned_partitions.set(0);
        let topics = lost.into_iter().map(|(t, _)| t).collect();
        self.metrics.rebalances.inc();
        self.handover(topics, Some(Instant::now())).await;
    }

    /// Deletes the claims of this run that it no longer counts and that
    /// are assigned elsewhere now. Such a claim is left when the lease
    /// could not be vouched for (every claim forgotten at once) while the
    /// store kept the lease alive (etcd extends leases across its own
    /// restarts): nothing dispatches the partition any more, yet its
    /// assignee would wait for the claim for as long as this instance
    /// keeps its lease. (One still assigned here is dropped and claimed
    /// afresh by [`Loop::claim`].)
    async fn release_orphans(&self, owned: &Owned, target: &BTreeSet<(String, u32)>) {
        let orphans: Vec<(String, u32, String, u64)> = self
            .owners
            .borrow()
            .entries
            .values()
            .filter_map(|kv| {
                let (t, p) = parse_owner_key(&kv.key)?;
                let key = (t, p);
                let ours = claims::holder(kv) == self.me;
                (ours && !owned.tokens.contains_key(&key) && !target.contains(&key))
                    .then(|| (key.0, key.1, kv.key.clone(), kv.revision))
            })
            .collect();
        for (t, p, key, revision) in orphans {
            match claims::release(self.meta.as_ref(), &key, revision).await {
                Ok(true) => {
                    tracing::info!(topic = %t, partition = p, "released a claim this instance no longer counted");
                }
                // Gone already (the view lags the store), or claimed anew.
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(topic = %t, partition = p, error = %e, "cannot release a claim no longer counted; retrying");
                }
            }
        }
    }

    /// Hands over the partitions owned but no longer assigned here.
    async fn give_up(&self, owned: &mut Owned, target: &BTreeSet<(String, u32)>) {
        let leaving: Vec<(String, u32)> = owned
            .tokens
            .keys()
            .filter(|k| !target.contains(*k))
            .cloned()
            .collect();
        if leaving.is_empty() {
            return;
        }
        let started = Instant::now();
        for (t, p) in &leaving {
            self.fence.stop_dispatching(t, *p);
        }
        let topics = leaving.iter().map(|(t, _)| t.clone()).collect();
        self.handover(topics, Some(started + self.settings.handover_grace))
            .await;
        // Committed and out of every client's hands (or past the grace):
        // the next owner may start.
        for (t, p) in &leaving {
            let token = owned.tokens[&(t.clone(), *p)];
            match claims::release(self.meta.as_ref(), &owner_key(t, *p), token).await {
                Ok(_) => {
                    owned.tokens.remove(&(t.clone(), *p));
                    self.fence.forget(t, *p);
                    tracing::info!(topic = %t, partition = p, "partition handed over");
                }
                Err(e) => {
                    tracing::warn!(topic = %t, partition = p, error = %e, "cannot release a partition; retrying");
                }
            }
        }
        self.metrics.rebalances.inc();
        self.metrics
            .handover_seconds
            .observe(started.elapsed().as_secs_f64());
    }

    /// Claims the assigned partitions nobody holds; true while some wait
    /// for their holder to let go.
    async fn claim(
        &self,
        owned: &mut Owned,
        target: &BTreeSet<(String, u32)>,
        lease: LeaseId,
    ) -> bool {
        let owners = self.owners.borrow().entries.clone();
        let mut gained = BTreeSet::new();
        let mut waiting = false;
        let wanted: Vec<&(String, u32)> = target
            .iter()
            .filter(|k| !owned.tokens.contains_key(*k))
            .collect();
        for (t, p) in wanted {
            let key = owner_key(t, *p);
            if let Some(kv) = owners.get(&key) {
                let Some(old) = claims::held_by(kv, &self.me) else {
                    // Its holder is handing it over, or its lease has not
                    // ended.
                    waiting = true;
                    continue;
                };
                // A claim of this run that it no longer counts (forgotten
                // when the lease could not be vouched for, which the store
                // kept alive): given up, then claimed afresh.
                if let Err(e) = claims::release(self.meta.as_ref(), &old.key, old.token).await {
                    tracing::debug!(topic = %t, partition = p, error = %e, "cannot drop an old claim; retrying");
                    waiting = true;
                    continue;
                }
            }
            match claims::claim(self.meta.as_ref(), &key, &self.me, lease).await {
                Ok(Some(Claim { token, .. })) => {
                    owned.tokens.insert((t.clone(), *p), token);
                    self.fence.own(t, *p, token);
                    gained.insert(t.clone());
                    tracing::info!(topic = %t, partition = p, token, "partition claimed");
                }
                Ok(None) => waiting = true,
                Err(MetaError::LeaseNotFound(_)) => {
                    // The membership task registers again; claims follow.
                    waiting = true;
                    break;
                }
                Err(e) => {
                    tracing::debug!(topic = %t, partition = p, error = %e, "cannot claim a partition; retrying");
                    waiting = true;
                }
            }
        }
        if !gained.is_empty() {
            self.metrics.rebalances.inc();
            self.handover(gained, None).await;
        }
        waiting
    }

    /// Has the runtime apply a change of the dispatched partitions, and
    /// waits until it has.
    async fn handover(&self, topics: BTreeSet<String>, deadline: Option<Instant>) {
        let (done, rx) = oneshot::channel();
        let h = Handover {
            topics,
            deadline,
            done,
        };
        if self.handovers.send(h).await.is_ok() {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use eventmesh_meta::follow_prefix;
    use eventmesh_meta::memory::InMemoryMetaStore;

    /// Waits (up to 10 s) until the mirror's claims are `want`, as
    /// (partition, instance) pairs.
    async fn claims_are(owners: &watch::Receiver<Mirror>, want: &[(u32, &str)]) {
        let read = || -> Vec<(u32, String)> {
            owners
                .borrow()
                .entries
                .values()
                .filter_map(|kv| {
                    let (_, p) = parse_owner_key(&kv.key)?;
                    let c: ClaimRecord = serde_json::from_slice(&kv.value).ok()?;
                    Some((p, c.instance))
                })
                .collect()
        };
        let want: Vec<(u32, String)> = want.iter().map(|(p, i)| (*p, i.to_string())).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut owners = owners.clone();
        while read() != want {
            assert!(
                Instant::now() < deadline,
                "claims {:?}, not {want:?}",
                read()
            );
            let _ = tokio::time::timeout_at(deadline, owners.changed()).await;
        }
    }

    /// A lease the instance could not vouch for while the store kept it
    /// (etcd extends leases across its own restarts): its claims stay in
    /// the store after it forgot them. Those assigned elsewhere by then
    /// must be released, or their assignee waits for as long as this
    /// instance lives.
    #[tokio::test]
    async fn claims_forgotten_while_the_lease_lived_on_are_released() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        let stop = CancellationToken::new();
        let lease = meta.grant_lease(Duration::from_secs(3600)).await.unwrap();
        let reg = |lease| {
            Some(super::super::membership::Held {
                lease,
                until: Instant::now() + Duration::from_secs(3600),
            })
        };
        let (registration_tx, registration) = watch::channel(reg(lease));
        let instances = follow_prefix(meta.clone(), INSTANCES_PREFIX, stop.clone());
        let owners = follow_prefix(meta.clone(), OWNERS_PREFIX, stop.clone());
        let (_topics_tx, topics) = watch::channel(BTreeMap::from([("t".to_string(), 6u32)]));
        let (handovers, mut applied) = mpsc::channel::<Handover>(16);
        tokio::spawn(async move {
            while let Some(h) = applied.recv().await {
                let _ = h.done.send(());
            }
        });
        let mut l = Loop {
            meta: meta.clone(),
            me: ClaimRecord {
                instance: "a".into(),
                boot: "boot-1".into(),
            },
            settings: ClusterSettings {
                lease: Duration::from_secs(3600),
                handover_grace: Duration::from_millis(10),
                secret: "s".into(),
                internal_tls: None,
            },
            fence: Arc::new(Fence::default()),
            registration,
            instances,
            owners,
            topics,
            handovers,
            metrics: Arc::new(Metrics::new()),
            stop: stop.clone(),
        };
        let register = |id: &'static str| {
            let meta = meta.clone();
            async move {
                meta.put(
                    &format!("{INSTANCES_PREFIX}{id}"),
                    Bytes::from_static(b"{}"),
                )
                .await
                .unwrap();
            }
        };
        // Waits (up to 10 s) until the loop sees exactly these instances.
        async fn live_are(instances: &mut watch::Receiver<Mirror>, want: &[&str]) {
            let until = Instant::now() + Duration::from_secs(10);
            while live_ids(&instances.borrow().entries) != want {
                assert!(Instant::now() < until, "the loop does not see {want:?}");
                let _ = tokio::time::timeout_at(until, instances.changed()).await;
            }
        }
        register("a").await;
        live_are(&mut l.instances, &["a"]).await;
        // Alone: every partition is claimed here.
        let mut owned = Owned::default();
        l.round(&mut owned).await;
        let all: Vec<(u32, &str)> = (0..6).map(|p| (p, "a")).collect();
        claims_are(&l.owners, &all).await;
        // The lease cannot be vouched for: every claim forgotten, yet all
        // of them stay in the store.
        registration_tx.send(None).unwrap();
        l.round(&mut owned).await;
        assert!(owned.tokens.is_empty());
        claims_are(&l.owners, &all).await;
        // Vouched for again, and a second instance has joined: the claims
        // of the partitions that are its now go; those still assigned here
        // are claimed afresh.
        registration_tx.send(reg(lease)).unwrap();
        register("b").await;
        live_are(&mut l.instances, &["a", "b"]).await;
        let live = ["a", "b"];
        let mine: Vec<u32> = (0..6)
            .filter(|p| assignee("t", *p, live) == Some("a"))
            .collect();
        assert!(
            !mine.is_empty() && mine.len() < 6,
            "both instances get partitions: {mine:?}"
        );
        l.round(&mut owned).await;
        let want: Vec<(u32, &str)> = mine.iter().map(|p| (*p, "a")).collect();
        claims_are(&l.owners, &want).await;
        let counted: Vec<u32> = owned.tokens.keys().map(|(_, p)| *p).collect();
        assert_eq!(counted, mine);
        stop.cancel();
    }

    #[test]
    fn owner_keys_parse_back_even_with_slashes_in_the_topic() {
        assert_eq!(
            parse_owner_key(&owner_key("a/b", 7)),
            Some(("a/b".to_string(), 7))
        );
        assert_eq!(parse_owner_key("/em/owners/t/x"), None);
        assert_eq!(parse_owner_key("/em/other/t/1"), None);
    }
}
