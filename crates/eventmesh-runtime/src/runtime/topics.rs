//! Topic management for the admin API: create a topic with its own
//! partition count and retention, change its retention, show its offsets,
//! bytes and consumers, delete it; and the loop that has the log apply
//! retention.

use std::sync::Weak;
use std::time::Duration;

use eventmesh_core::throttle::{FailureLog, Report};
use eventmesh_storage::{Durability, Retention, TopicInfo};
use serde::Serialize;

use super::Runtime;
use crate::error::{Result, RuntimeError};

/// A topic's retention as the admin API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionView {
    /// Age limit in milliseconds; 0: none.
    pub ms: u64,
    /// Size limit per partition in payload bytes; 0: none.
    pub bytes: u64,
    /// `topic` when the topic has its own, `default` when the
    /// configuration's applies.
    pub source: &'static str,
}

/// One partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionView {
    pub partition: u32,
    /// First offset still stored.
    pub start_offset: u64,
    /// One past the last offset.
    pub end_offset: u64,
    /// Payload bytes held, when the log counts them per partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// One consumer's position on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerPartition {
    pub partition: u32,
    pub committed: u64,
    /// Offsets from the committed one (or the start, when retention passed
    /// it) to the end.
    pub lag: u64,
}

/// A consumer (one load-balanced group, or one broadcast client) of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerView {
    pub consumer: String,
    /// The sum over partitions.
    pub lag: u64,
    pub partitions: Vec<ConsumerPartition>,
}

/// `GET /admin/topics/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicDetail {
    pub name: String,
    pub partitions: u32,
    pub retention: RetentionView,
    /// The time to live of its events without an `expirytime` of their
    /// own, in milliseconds (`null`: they do not expire).
    pub ttl_ms: Option<u64>,
    /// `disk` (the default) or `memory`: its records only in memory, lost
    /// on a crash or restart.
    pub durability: &'static str,
    /// Payload bytes the topic holds.
    pub bytes: u64,
    pub offsets: Vec<PartitionView>,
    pub consumers: Vec<ConsumerView>,
    /// Subscriptions on the topic (what a delete without `force` refuses
    /// on).
    pub subscriptions: usize,
    /// Events held back until their `deliverat` or `deliverafter` time.
    pub scheduled: super::ScheduledView,
}

pub(super) fn unknown_topic(name: &str) -> RuntimeError {
    RuntimeError::NotFound {
        code: "unknown_topic",
        message: format!("topic {name:?} does not exist"),
    }
}

impl Runtime {
    fn retention_view(&self, info: &TopicInfo) -> RetentionView {
        let (r, source) = match info.retention {
            Some(r) => (r, "topic"),
            None => (self.ingress.settings().retention, "default"),
        };
        RetentionView {
            ms: r.ms,
            bytes: r.bytes,
            source,
        }
    }

    /// Creates a topic (default partition count when `None`; retention of
    /// its own, or the default; a time to live for its events, or none;
    /// its records on disk or in memory). `Conflict` when the name is
    /// taken.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: Option<u32>,
        retention: Option<Retention>,
        ttl_ms: Option<u64>,
        durability: Durability,
    ) -> Result<TopicDetail> {
        eventmesh_core::topic::validate_topic(name)?;
        let partitions = partitions.unwrap_or(self.ingress.settings().default_partitions);
        let (_, created) = self
            .log
            .create_topic_as(name, partitions, retention, durability)
            .await?;
        if !created {
            return Err(RuntimeError::Conflict {
                code: "topic_exists",
                message: format!("topic {name:?} already exists"),
            });
        }
        if ttl_ms.is_some() {
            self.log.set_ttl(name, ttl_ms).await?;
        }
        tracing::info!(
            topic = name,
            partitions,
            ?retention,
            ?ttl_ms,
            durability = durability.as_str(),
            "topic created"
        );
        self.topic_detail(name).await
    }

    /// Sets the time to live of a topic's events without an `expirytime`
    /// (`None`: they do not expire). Dispatchers take it up at their next
    /// offset flush.
    pub async fn set_topic_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicDetail> {
        if self.log.topic(name).await?.is_none() {
            return Err(unknown_topic(name));
        }
        self.log.set_ttl(name, ttl_ms).await?;
        tracing::info!(topic = name, ?ttl_ms, "topic time to live changed");
        self.topic_detail(name).await
    }

    /// Sets a topic's own retention (`None`: back to the default).
    pub async fn set_topic_retention(
        &self,
        name: &str,
        retention: Option<Retention>,
    ) -> Result<TopicDetail> {
        if self.log.topic(name).await?.is_none() {
            return Err(unknown_topic(name));
        }
        self.log.set_retention(name, retention).await?;
        tracing::info!(topic = name, ?retention, "topic retention changed");
        self.topic_detail(name).await
    }

    /// Partitions, offsets, bytes, retention and consumers of one topic.
    pub async fn topic_detail(&self, name: &str) -> Result<TopicDetail> {
        let Some(info) = self.log.topic(name).await? else {
            return Err(unknown_topic(name));
        };
        let stored = self.log.stored_bytes(name).await?;
        let mut offsets = Vec::with_capacity(info.partitions as usize);
        for p in 0..info.partitions {
            offsets.push(PartitionView {
                partition: p,
                start_offset: self.log.start_offset(name, p).await?,
                end_offset: self.log.end_offset(name, p).await?,
                bytes: stored
                    .partitions
                    .as_ref()
                    .and_then(|b| b.get(p as usize).copied()),
            });
        }
        let subs = self.subscriptions(Some(name)).await;
        let names = self.consumers_of(name).await;
        let mut consumers = Vec::with_capacity(names.len());
        for consumer in names {
            let committed = self.deps.offsets.load(&consumer, name).await?;
            let partitions: Vec<ConsumerPartition> = offsets
                .iter()
                .map(|o| {
                    let c = committed.get(&o.partition).copied().unwrap_or(0);
                    ConsumerPartition {
                        partition: o.partition,
                        committed: c,
                        lag: o.end_offset.saturating_sub(c.max(o.start_offset)),
                    }
                })
                .collect();
            consumers.push(ConsumerView {
                consumer,
                lag: partitions.iter().map(|p| p.lag).sum(),
                partitions,
            });
        }
        let scheduled = self.scheduled_of(&info.name, info.partitions).await?;
        Ok(TopicDetail {
            scheduled,
            retention: self.retention_view(&info),
            ttl_ms: info.ttl_ms,
            durability: info.durability.as_str(),
            name: info.name,
            partitions: info.partitions,
            bytes: stored.total,
            offsets,
            consumers,
            subscriptions: subs.len(),
        })
    }

    /// Deletes a topic and everything it holds. While subscriptions name
    /// it, it is refused (`Conflict`), unless `force`, which removes them
    /// first; pattern subscriptions following it are detached (they stay,
    /// and follow a topic of that name created again from its start).
    /// Committed offsets and in-flight records of the topic go too, so a
    /// new topic of the same name starts from its beginning; its dead
    /// letters stay (they can still be browsed and replayed).
    pub async fn delete_topic(&self, name: &str, force: bool) -> Result<()> {
        if self.log.topic(name).await?.is_none() {
            return Err(unknown_topic(name));
        }
        let subs = self.subscriptions(Some(name)).await;
        if !subs.is_empty() && !force {
            return Err(RuntimeError::Conflict {
                code: "topic_in_use",
                message: format!(
                    "topic {name:?} has {} subscription(s); remove them first or delete with force=true",
                    subs.len()
                ),
            });
        }
        let consumers = self.consumers_of(name).await;
        for sub in &subs {
            self.unsubscribe_all(&sub.client_id, Some(name)).await?;
        }
        {
            // Under the view's lock: no pattern pass attaches it again
            // before it is gone.
            let mut view = self.view.lock().await;
            self.detach_topic(&mut view, name).await?;
            if !self.log.delete_topic(name).await? {
                return Err(unknown_topic(name));
            }
        }
        self.deps.offsets.forget_topic(name).await?;
        // Its held-back events went with it.
        self.ingress.held().forget(name);
        if let Some(cluster) = &self.cluster {
            cluster.unmark_held(name).await;
        }
        for consumer in consumers {
            let left = self.deps.ledger.list(&consumer, name).await?;
            let events: Vec<(u32, u64)> = left.iter().map(|e| (e.partition, e.offset)).collect();
            self.deps
                .ledger
                .remove_batch(&consumer, name, &events)
                .await?;
        }
        tracing::info!(topic = name, subscriptions = subs.len(), "topic deleted");
        Ok(())
    }
}

/// Has the log apply retention every `every` while the runtime lives.
pub(super) async fn enforce_retention(rt: Weak<Runtime>, every: Duration) {
    let mut faults = FailureLog::default();
    loop {
        tokio::time::sleep(every).await;
        let Some(rt) = rt.upgrade() else { return };
        if rt.lifecycle.is_stopped() {
            return;
        }
        match rt.log.enforce_retention().await {
            Ok(()) => {
                if let Report::Recovered { failures } = faults.succeeded() {
                    tracing::info!(failures, "retention runs again");
                }
            }
            Err(e) => {
                if let Report::Failure { suppressed } = faults.failed() {
                    tracing::warn!(error = %e, suppressed, "retention pass failed");
                }
            }
        }
    }
}
