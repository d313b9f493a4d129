//! The runtime's side of partition ownership (`PARTITION_OWNED_PULL`): it
//! tells the ownership loop which topics are subscribed, and applies the
//! loop's handovers to the dispatchers.
//!
//! A partition gained is added to each dispatcher of its topic, read from
//! its committed offset, with no pause for the others. A partition given up
//! (or all of them, when the lease cannot be vouched for) restarts the
//! dispatchers of its topic: each drains until the handover's deadline
//! (nothing new is handed out; deliveries in clients' hands may still be
//! acknowledged), commits, stops, and starts again on the partitions still
//! dispatched here.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use eventmesh_state::StartFrom;
use tokio::sync::mpsc;

use super::subscriptions::View;
use super::Runtime;
use crate::cluster::{Cluster, ClusterView, Handover};
use crate::dispatcher::{starting_offsets, Command};

/// Partition ownership as the runtime is given it.
pub struct Ownership {
    pub cluster: Arc<Cluster>,
    pub handovers: mpsc::Receiver<Handover>,
}

impl Runtime {
    /// This instance's id in the cluster (`None` without ownership).
    pub fn instance_id(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.id())
    }

    /// The cluster this instance takes part in (`None` without ownership).
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.cluster.as_ref()
    }

    /// The cluster as this instance sees it (`None` without ownership).
    pub fn cluster_view(&self) -> Option<ClusterView> {
        self.cluster.as_ref().map(|c| c.view())
    }

    /// Tells the ownership loop the subscribed topics.
    pub(super) async fn publish_topics(&self, view: &View) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let mut topics = BTreeMap::new();
        for sub in view.subs.values() {
            if topics.contains_key(&sub.topic) {
                continue;
            }
            match self.log.topic(&sub.topic).await {
                Ok(Some(info)) => {
                    topics.insert(sub.topic.clone(), info.partitions);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(topic = %sub.topic, error = %e, "cannot read a subscribed topic; its partitions are not claimed for now");
                }
            }
        }
        cluster.set_topics(topics);
    }

    async fn apply_handover(&self, h: Handover) {
        let mut view = self.view.lock().await;
        if !self.lifecycle.is_stopped() {
            for topic in &h.topics {
                // Every consumer of the topic, a dispatcher running or not
                // (one that could not start at an earlier handover starts
                // now).
                let mut consumers: Vec<(String, StartFrom)> = Vec::new();
                for s in view.subs.values().filter(|s| &s.topic == topic) {
                    if !consumers.iter().any(|(c, _)| *c == s.consumer()) {
                        consumers.push((s.consumer(), s.from));
                    }
                }
                for (consumer, from) in consumers {
                    let done = match h.deadline {
                        Some(deadline) => {
                            self.registry
                                .retire(&mut view.consumers, &consumer, topic, Some(deadline))
                                .await;
                            self.sync_consumer(&mut view, &consumer, topic, from).await
                        }
                        None => self.extend(&mut view, &consumer, topic, from).await,
                    };
                    if let Err(e) = done {
                        tracing::warn!(consumer = %consumer, topic = %topic, error = %e, "cannot apply a partition handover to a consumer");
                    }
                }
            }
        }
        let _ = h.done.send(());
    }

    /// Adds the partitions of `topic` dispatched here that the consumer's
    /// dispatcher does not read yet.
    async fn extend(
        &self,
        view: &mut View,
        consumer: &str,
        topic: &str,
        from: StartFrom,
    ) -> crate::error::Result<()> {
        let Some(fence) = &self.deps.fence else {
            return Ok(());
        };
        let key = (consumer.to_string(), topic.to_string());
        let Some(entry) = view.consumers.get_mut(&key) else {
            return self.sync_consumer(view, consumer, topic, from).await;
        };
        let new: Vec<u32> = fence
            .dispatched(topic)
            .into_iter()
            .filter(|p| !entry.handle.partitions.contains(p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let committed = starting_offsets(&self.deps, consumer, topic, from, &new).await?;
        let added: Vec<(u32, u64)> = new.iter().map(|p| (*p, committed[p])).collect();
        if entry.handle.tx.send(Command::Extend(added)).await.is_ok() {
            entry.handle.partitions.extend(new);
        }
        Ok(())
    }
}

/// Applies handovers until the runtime is gone.
pub(super) async fn apply_handovers(rt: Weak<Runtime>, mut rx: mpsc::Receiver<Handover>) {
    while let Some(h) = rx.recv().await {
        let Some(rt) = rt.upgrade() else {
            let _ = h.done.send(());
            return;
        };
        rt.apply_handover(h).await;
    }
}
