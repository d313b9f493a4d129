//! The releaser of held-back events (scheduled delivery, see
//! `crate::schedule`), and the admin views of them.
//!
//! One task per runtime. It looks at every topic that holds events back,
//! partition by partition: those it dispatches (every partition on one
//! node; with `PARTITION_OWNED_PULL`, the partitions this instance owns
//! now), takes what is due from the log, appends it to the partition under
//! its idempotency key, and only then forgets it. Then it sleeps until the
//! soonest due time, at most a second (held-back events scheduled on other
//! instances are seen that way), or until something sooner is scheduled
//! here.
//!
//! Invariants: an event is forgotten only after its append is durable, so
//! a crash in between releases it again, and the log's idempotency window
//! stores it once; it is never released before its due time; a partition
//! is released only by its owner, checked before each batch, and the
//! unscheduled events of the partition never wait for held-back ones (they
//! are not in the partition until released).

use std::sync::Weak;
use std::time::Duration;

use eventmesh_core::codec;
use eventmesh_core::time::{format_rfc3339_ms, now_ms};
use eventmesh_storage::Scheduled;
use serde::Serialize;

use super::Runtime;
use crate::error::{Result, RuntimeError};

/// Events released in one batch (within every backend's batch limit).
const RELEASE_BATCH: usize = 500;
/// The longest the releaser sleeps.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What a topic holds back, as `GET /admin/topics/{name}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledView {
    pub count: u64,
    /// The first due time (RFC 3339), when one is held back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due: Option<String>,
}

/// One held-back event in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldEvent {
    pub id: String,
    pub source: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub partition: u32,
    /// When it is due (RFC 3339).
    pub due: String,
    pub due_ms: u64,
}

pub(super) async fn release_loop(rt: Weak<Runtime>) {
    if let Some(rt) = rt.upgrade() {
        rt.find_held_topics().await;
    }
    // With partition ownership: the held topics recorded for every
    // instance, and those whose partitions the ownership loop was told of.
    let mut marked = std::collections::BTreeSet::new();
    let mut claimed = std::collections::BTreeSet::new();
    loop {
        let Some(rt) = rt.upgrade() else { return };
        if rt.lifecycle.check_running().is_err() {
            return;
        }
        if let Some(cluster) = rt.cluster.clone() {
            rt.share_held_topics(&cluster, &mut marked, &mut claimed)
                .await;
        }
        let held = rt.ingress.held().clone();
        held.take_soonest();
        let next = rt.release_due().await;
        drop(rt);
        let wait = next.map_or(LOOK_EVERY, |at| {
            Duration::from_millis(at.saturating_sub(now_ms())).min(LOOK_EVERY)
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = held.woken() => {}
        }
    }
}

impl Runtime {
    /// Records the topics held back here for every instance, learns those
    /// held back elsewhere, and has the ownership loop claim their
    /// partitions when that set changed.
    async fn share_held_topics(
        &self,
        cluster: &crate::cluster::Cluster,
        marked: &mut std::collections::BTreeSet<String>,
        claimed: &mut std::collections::BTreeSet<String>,
    ) {
        for topic in self.ingress.held().topics() {
            if !marked.contains(&topic) {
                match cluster.mark_held(&topic).await {
                    Ok(()) => {
                        marked.insert(topic);
                    }
                    Err(e) => {
                        tracing::debug!(topic = %topic, error = %e, "cannot record a topic holding events back; trying again")
                    }
                }
            }
        }
        let everywhere: std::collections::BTreeSet<String> =
            cluster.held_topics().into_iter().collect();
        for topic in &everywhere {
            self.ingress.held().know(topic);
        }
        if everywhere != *claimed {
            let view = self.view.lock().await;
            self.publish_topics(&view).await;
            *claimed = everywhere;
        }
    }

    /// The topics that hold events back, read from the log at start.
    async fn find_held_topics(&self) {
        let Ok(topics) = self.log.topics().await else {
            return;
        };
        for t in topics {
            for p in 0..t.partitions {
                if matches!(self.log.scheduled(&t.name, p).await, Ok(s) if s.count > 0) {
                    self.ingress.held().know(&t.name);
                    break;
                }
            }
        }
    }

    /// Whether this instance releases the partition now.
    fn releases(&self, topic: &str, partition: u32) -> bool {
        match &self.deps.fence {
            Some(fence) => fence.token(topic, partition).is_some(),
            None => true,
        }
    }

    /// Releases what is due in the partitions this instance releases; the
    /// soonest due time left among them.
    async fn release_due(&self) -> Option<u64> {
        let mut soonest: Option<u64> = None;
        for topic in self.ingress.held().topics() {
            let partitions = match self.log.topic(&topic).await {
                Ok(Some(info)) => info.partitions,
                Ok(None) => {
                    self.ingress.held().forget(&topic);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(topic = %topic, error = %e, "cannot read a topic holding events back");
                    continue;
                }
            };
            let mut holds = false;
            for p in 0..partitions {
                if !self.releases(&topic, p) {
                    continue;
                }
                if let Err(e) = self.release_partition(&topic, p).await {
                    tracing::warn!(topic = %topic, partition = p, error = %e, "cannot release held-back events; trying again");
                }
                match self.log.scheduled(&topic, p).await {
                    Ok(s) => {
                        holds |= s.count > 0;
                        if let Some(at) = s.next_due_ms {
                            soonest = Some(soonest.map_or(at, |s| s.min(at)));
                        }
                    }
                    Err(_) => holds = true,
                }
            }
            if !holds && self.cluster.is_none() {
                self.ingress.held().forget(&topic);
            }
        }
        soonest
    }

    async fn release_partition(&self, topic: &str, partition: u32) -> Result<()> {
        loop {
            let now = now_ms();
            let due = self.log.due(topic, partition, now, RELEASE_BATCH).await?;
            if due.is_empty() || !self.releases(topic, partition) {
                return Ok(());
            }
            self.ingress.release(topic, &due).await?;
            self.log.unschedule(topic, partition, &due).await?;
            let released = now_ms();
            self.metrics.scheduled_released.inc_by(due.len() as u64);
            for e in &due {
                let late = released.saturating_sub(e.due_ms);
                self.metrics
                    .scheduled_lateness
                    .observe(late as f64 / 1000.0);
            }
            if due.len() < RELEASE_BATCH {
                return Ok(());
            }
        }
    }

    /// What a topic holds back over its partitions.
    pub async fn scheduled_of(&self, topic: &str, partitions: u32) -> Result<ScheduledView> {
        let mut count = 0;
        let mut next: Option<u64> = None;
        for p in 0..partitions {
            let s = self.log.scheduled(topic, p).await?;
            count += s.count;
            if let Some(at) = s.next_due_ms {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        Ok(ScheduledView {
            count,
            next_due: next.map(format_rfc3339_ms),
        })
    }

    /// Up to `max` of a topic's held-back events, soonest first.
    pub async fn held_events(&self, topic: &str, max: usize) -> Result<Vec<HeldEvent>> {
        let info = self.topic_info(topic).await?;
        let mut out = Vec::new();
        for p in 0..info.partitions {
            for e in self.log.due(topic, p, u64::MAX, max).await? {
                if let Some(h) = held_event(&e) {
                    out.push(h);
                }
            }
        }
        out.sort_by(|a, b| (a.due_ms, &a.id).cmp(&(b.due_ms, &b.id)));
        out.truncate(max);
        Ok(out)
    }

    /// Cancels a topic's held-back events of id `id` (and `source`, when
    /// given): how many were still held.
    pub async fn cancel_held(&self, topic: &str, id: &str, source: Option<&str>) -> Result<usize> {
        let info = self.topic_info(topic).await?;
        let mut cancelled = 0;
        for p in 0..info.partitions {
            let all = self.log.due(topic, p, u64::MAX, usize::MAX).await?;
            let mine: Vec<Scheduled> = all
                .into_iter()
                .filter(|e| {
                    held_event(e)
                        .is_some_and(|h| h.id == id && source.is_none_or(|s| h.source == s))
                })
                .collect();
            if !mine.is_empty() {
                cancelled += self.log.unschedule(topic, p, &mine).await?;
            }
        }
        if cancelled == 0 {
            return Err(RuntimeError::NotFound {
                code: "unknown_scheduled_event",
                message: format!("topic {topic:?} holds back no event with id {id:?}"),
            });
        }
        tracing::info!(topic, id, cancelled, "held-back events cancelled");
        Ok(cancelled)
    }

    async fn topic_info(&self, topic: &str) -> Result<eventmesh_storage::TopicInfo> {
        self.log
            .topic(topic)
            .await?
            .ok_or_else(|| RuntimeError::NotFound {
                code: "unknown_topic",
                message: format!("topic {topic:?} does not exist"),
            })
    }
}

fn held_event(e: &Scheduled) -> Option<HeldEvent> {
    let stored = codec::decode(&e.payload).ok()?;
    Some(HeldEvent {
        id: stored.event.id,
        source: stored.event.source,
        ty: stored.event.ty,
        partition: e.partition,
        due: format_rfc3339_ms(e.due_ms),
        due_ms: e.due_ms,
    })
}
