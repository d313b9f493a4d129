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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};

use eventmesh_state::StartFrom;
use tokio::sync::mpsc;

use super::subscriptions::View;
use super::{Reapply, Runtime};
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

    /// Tells the ownership loop the subscribed topics: those named by
    /// subscriptions and those pattern subscriptions follow.
    pub(super) async fn publish_topics(&self, view: &View) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let mut topics = BTreeMap::new();
        // The subscribed topics, and those that hold events back (released
        // by the owners of their partitions, subscribed or not).
        let mut wanted = view.served_topics();
        wanted.extend(cluster.held_topics());
        for topic in wanted {
            match self.log.topic(&topic).await {
                Ok(Some(info)) => {
                    topics.insert(topic, info.partitions);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(topic = %topic, error = %e, "cannot read a subscribed topic; its partitions are not claimed for now");
                }
            }
        }
        cluster.set_topics(topics);
    }

    /// Applies a change of the dispatched partitions of `topics`; returns
    /// the topics it could not apply to every consumer (the offset store
    /// or the log unavailable for a moment), for the caller to apply again.
    async fn apply_handover(
        &self,
        topics: &BTreeSet<String>,
        deadline: Option<tokio::time::Instant>,
    ) -> BTreeSet<String> {
        let mut failed = BTreeSet::new();
        let mut view = self.view.lock().await;
        if !self.lifecycle.is_stopped() {
            for topic in topics {
                // Every consumer of the topic, a dispatcher running or not
                // (one that could not start at an earlier handover starts
                // now).
                let mut consumers: Vec<(String, StartFrom)> = Vec::new();
                for s in view.subs.values().filter(|s| view.serves(s, topic)) {
                    if !consumers.iter().any(|(c, _)| *c == s.consumer()) {
                        consumers.push((s.consumer(), view.start_of(s, topic)));
                    }
                }
                for (consumer, from) in consumers {
                    let done = match deadline {
                        Some(deadline) => {
                            self.registry
                                .retire(&mut view.consumers, &consumer, topic, Some(deadline))
                                .await;
                            self.sync_consumer(&mut view, &consumer, topic, from).await
                        }
                        None => self.extend(&mut view, &consumer, topic, from).await,
                    };
                    if let Err(e) = done {
                        tracing::warn!(consumer = %consumer, topic = %topic, error = %e, "cannot apply a partition handover to a consumer; trying again");
                        failed.insert(topic.clone());
                    }
                }
            }
        }
        failed
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
        if entry.handle.lane.command(Command::Extend(added)).await {
            entry.handle.partitions.extend(new);
        }
        Ok(())
    }
}

/// Applies handovers until the runtime is gone. The topics of a handover
/// that failed are brought in line again until they are: without that,
/// partitions this instance owns would stay undispatched for as long as
/// it keeps them (a retry starts the dispatchers on what the fence says
/// now, so it also covers the handovers that came in between).
pub(super) async fn apply_handovers(rt: Weak<Runtime>, mut rx: mpsc::Receiver<Handover>) {
    let mut failed: BTreeSet<String> = BTreeSet::new();
    let mut again = Reapply::new();
    loop {
        let next = tokio::select! {
            h = rx.recv() => match h {
                Some(h) => Some(h),
                None => return,
            },
            _ = tokio::time::sleep_until(again.at()), if !failed.is_empty() => None,
        };
        let Some(rt) = rt.upgrade() else {
            if let Some(h) = next {
                let _ = h.done.send(());
            }
            return;
        };
        let had_failures = !failed.is_empty();
        let retrying = next.is_none();
        match next {
            Some(h) => {
                let now_failed = rt.apply_handover(&h.topics, h.deadline).await;
                for t in &h.topics {
                    failed.remove(t);
                }
                failed.extend(now_failed);
                let _ = h.done.send(());
            }
            None => {
                let topics = std::mem::take(&mut failed);
                failed = rt.apply_handover(&topics, None).await;
            }
        }
        again.after(retrying, had_failures, !failed.is_empty());
    }
}
