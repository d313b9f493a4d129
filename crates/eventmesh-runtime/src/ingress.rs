//! The ingress service: every transport hands validated CloudEvents here to
//! be appended to the log.
//!
//! Topics are created on first use with the configured default partition
//! count. An event with a `partitionkey` always goes to the partition that
//! key hashes to; the others are spread round-robin, or by their
//! idempotency key when idempotent publishing is on. A batch is appended in
//! one atomic write, and the call returns only once it is durable. Each
//! write is traced as an `append` span (see [`crate::trace`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use eventmesh_core::{codec, topic, CloudEvent};
use eventmesh_storage::{
    Append, Enqueued, EventLog, IdempotencyKey, PendingAppend, Placed, Retention, Scheduled,
    TopicInfo,
};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::handoff::Handoffs;
use crate::metrics::Metrics;
use crate::trace;

/// Where one published event landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Published {
    pub id: String,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// Published before within the deduplication window: not stored again;
    /// `partition` and `offset` are the first one's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Held back until this time (RFC 3339), its `deliverat` or
    /// `deliverafter`: stored beside its partition, it gets its offset when
    /// it is released (`offset` is 0 until then).
    #[serde(rename = "scheduledFor", skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<String>,
}

impl Published {
    /// Its JSON, byte for byte what its `Serialize` writes, without a
    /// serializer: one per publish answered over TCP, where `serde_json`
    /// cost more than the rest of the answer.
    pub fn to_json(&self) -> Vec<u8> {
        use eventmesh_core::json_str::write as string;
        use std::io::Write as _;
        let mut out = Vec::with_capacity(96 + self.id.len() + self.topic.len());
        out.extend_from_slice(b"{\"id\":");
        string(&mut out, &self.id);
        out.extend_from_slice(b",\"topic\":");
        string(&mut out, &self.topic);
        // Writing numbers into a `Vec` cannot fail.
        let _ = write!(
            out,
            ",\"partition\":{},\"offset\":{}",
            self.partition, self.offset
        );
        if self.duplicate {
            out.extend_from_slice(b",\"duplicate\":true");
        }
        if let Some(at) = &self.scheduled_for {
            out.extend_from_slice(b",\"scheduledFor\":");
            string(&mut out, at);
        }
        out.push(b'}');
        // See `codec::encode`: a frame's payload is taken over as it is.
        out.shrink_to_fit();
        out
    }
}

/// How the ingress places events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngressSettings {
    /// Partitions of a topic created on first use.
    pub default_partitions: u32,
    /// Idempotent publishing: each event carries its `source` + `id` as a
    /// key, so the log stores a retried publish once (within its window).
    pub dedup: bool,
    /// Retention of topics without their own (the log applies it; shown by
    /// the admin API).
    pub retention: Retention,
    /// How often the runtime asks the log to apply retention.
    pub retention_check: std::time::Duration,
    /// How often pattern subscriptions list the topics for new and
    /// deleted ones, besides when the log's topic watch moves.
    pub pattern_rescan: std::time::Duration,
}

/// The idempotency key of an event: SHA-256 of its `source` and `id`, in
/// hex (64 characters whatever the two hold).
pub fn dedup_key(e: &CloudEvent) -> IdempotencyKey {
    keyed(e).0
}

/// [`dedup_key`], and the first 8 bytes of the digest: a hash of the key
/// that places an event without a partition key.
fn keyed(e: &CloudEvent) -> (IdempotencyKey, u64) {
    let mut h = Sha256::new();
    h.update(e.source.as_bytes());
    h.update([0u8]);
    h.update(e.id.as_bytes());
    let digest = h.finalize();
    // Into a buffer of its own size: a third of the cost of `hex::encode`,
    // which builds the string a character at a time.
    let mut hexed = [0u8; 64];
    hex::encode_to_slice(digest, &mut hexed).expect("64 digits for 32 bytes");
    let key = std::str::from_utf8(&hexed)
        .ok()
        .and_then(IdempotencyKey::new)
        .expect("64 hexadecimal digits");
    let place = u64::from_le_bytes(digest[..8].try_into().expect("8 of 32 bytes"));
    (key, place)
}

/// Events queued by [`IngressService::submit`], not yet durable.
pub struct PublishTicket {
    pending: PendingAppend,
    /// Each event's id, in input order.
    placed: Vec<String>,
    /// Each event's due time when it is held back, in input order.
    held: Vec<Option<u64>>,
    topic: String,
    started: Instant,
    metrics: Arc<Metrics>,
    /// The `append` span, ended with the ticket.
    span: tracing::Span,
}

impl PublishTicket {
    /// Waits for the write; where each event landed, in input order.
    pub async fn durable(self) -> Result<Vec<Published>> {
        let stored = match self.pending.durable().await {
            Ok(o) => o,
            Err(e) => {
                self.metrics.publish_failures.inc();
                trace::append_failed(&self.span, &e);
                return Err(e.into());
            }
        };
        self.metrics
            .events_published
            .inc_by(self.placed.len() as u64);
        self.metrics
            .publish_latency
            .observe(self.started.elapsed().as_secs_f64());
        let published: Vec<Published> = self
            .placed
            .into_iter()
            .zip(stored)
            .zip(self.held)
            .map(|((id, at), due)| Published {
                id,
                topic: self.topic.clone(),
                partition: at.partition,
                offset: at.offset,
                duplicate: at.duplicate,
                scheduled_for: due.map(eventmesh_core::time::format_rfc3339_ms),
            })
            .collect();
        trace::appended(&self.span, &published);
        Ok(published)
    }
}

pub struct IngressService {
    log: Arc<dyn EventLog>,
    settings: IngressSettings,
    round_robin: AtomicU64,
    metrics: Arc<Metrics>,
    /// Told of every event held back (see `crate::schedule`).
    held: Arc<crate::schedule::Held>,
    /// The consumers of topics kept in memory, offered each event as it
    /// is appended (see `crate::handoff`).
    handoffs: Arc<Handoffs>,
}

pub(crate) use eventmesh_core::time::now_ms;

impl IngressService {
    /// Queues the events of a request some of which are held back: those
    /// due now are appended (one atomic write, holding their place now),
    /// then the others are stored beside their partitions (one more
    /// write); answered, in input order, once both are durable.
    async fn hold(
        &self,
        topic: &str,
        records: Vec<Append>,
        held: Vec<Scheduled>,
        due: &[Option<u64>],
    ) -> std::result::Result<PendingAppend, eventmesh_storage::StorageError> {
        let now = if records.is_empty() {
            None
        } else {
            Some(self.log.enqueue(topic, records).await?)
        };
        let (log, notify, topic) = (self.log.clone(), self.held.clone(), topic.to_string());
        let held_at: Vec<(u32, u64)> = held.iter().map(|h| (h.partition, h.due_ms)).collect();
        let is_held: Vec<bool> = due.iter().map(Option::is_some).collect();
        Ok(PendingAppend::from_future(async move {
            let appended = match now {
                Some(p) => p.durable().await?,
                None => Vec::new(),
            };
            log.schedule(&topic, held).await?;
            for (p, at) in &held_at {
                notify.scheduled(&topic, *p, *at);
            }
            let mut appended = appended.into_iter();
            let mut held_at = held_at.into_iter();
            Ok(is_held
                .into_iter()
                .map(|h| {
                    if h {
                        let (partition, _) = held_at.next().expect("one per held event");
                        Placed {
                            partition,
                            offset: 0,
                            duplicate: false,
                        }
                    } else {
                        appended.next().expect("one per appended event")
                    }
                })
                .collect())
        }))
    }
}

impl IngressService {
    pub fn new(log: Arc<dyn EventLog>, settings: IngressSettings, metrics: Arc<Metrics>) -> Self {
        IngressService {
            log,
            settings,
            round_robin: AtomicU64::new(0),
            metrics,
            held: Arc::default(),
            handoffs: Arc::default(),
        }
    }

    /// The consumers of topics kept in memory (see `crate::handoff`).
    pub fn handoffs(&self) -> &Arc<Handoffs> {
        &self.handoffs
    }

    /// What is held back, as this instance has seen it scheduled.
    pub fn held(&self) -> &Arc<crate::schedule::Held> {
        &self.held
    }

    /// Appends events held back until now to their topic: each to the
    /// partition it was placed in, under its idempotency key (so a release
    /// made twice, around a crash, stores it once within the window), and
    /// with the release time as its append time. Durable on return.
    pub async fn release(&self, topic: &str, entries: &[Scheduled]) -> Result<Vec<Placed>> {
        let ingest = now_ms();
        let records: Vec<Append> = entries
            .iter()
            .map(|e| {
                let payload = match codec::decode(&e.payload) {
                    Ok(stored) => Bytes::from(codec::encode(&stored.event, ingest)),
                    Err(_) => e.payload.clone(),
                };
                Append {
                    partition: e.partition,
                    payload,
                    // Made by `dedup_key`: 64 digits. A longer one, which no
                    // release of the runtime stored, is released unkeyed.
                    key: IdempotencyKey::new(&e.key),
                }
            })
            .collect();
        let placed = self.log.enqueue(topic, records).await?.durable().await?;
        self.metrics.events_published.inc_by(placed.len() as u64);
        Ok(placed)
    }

    pub fn settings(&self) -> &IngressSettings {
        &self.settings
    }

    /// The topic, created with the default partition count when absent.
    pub async fn ensure_topic(&self, name: &str) -> Result<TopicInfo> {
        topic::validate_topic(name)?;
        match self.log.topic(name).await? {
            Some(t) => Ok(t),
            None => self.create(name).await,
        }
    }

    /// [`Self::ensure_topic`]'s partition count, read without the rest of
    /// the topic's description when it exists (a topic that exists was
    /// named validly when it was created).
    async fn ensure_partitions(&self, name: &str) -> Result<u32> {
        match self.log.partitions(name).await? {
            Some(partitions) => Ok(partitions),
            None => {
                topic::validate_topic(name)?;
                Ok(self.create(name).await?.partitions)
            }
        }
    }

    /// Creates a topic (validly named) with the default partition count;
    /// one that another caller created meanwhile is returned as it is.
    async fn create(&self, name: &str) -> Result<TopicInfo> {
        Ok(self
            .log
            .create_topic(name, self.settings.default_partitions)
            .await?)
    }

    /// Appends events to one topic atomically; answers once durable.
    pub async fn publish(&self, topic: &str, events: Vec<CloudEvent>) -> Result<Vec<Published>> {
        self.submit(topic, events).await?.durable().await
    }

    /// [`Self::publish`] without idempotency keys: events published before
    /// (a dead letter replayed) are stored again.
    pub async fn republish(&self, topic: &str, events: Vec<CloudEvent>) -> Result<Vec<Published>> {
        self.queue(topic, events, false).await?.durable().await
    }

    /// Queues events to one topic (atomically, as [`Self::publish`]) and
    /// returns once they hold their place in the log: events submitted one
    /// after another land in that order. [`PublishTicket::durable`] waits
    /// for the write.
    pub async fn submit(&self, topic: &str, events: Vec<CloudEvent>) -> Result<PublishTicket> {
        self.queue(topic, events, self.settings.dedup).await
    }

    async fn queue(
        &self,
        topic: &str,
        events: Vec<CloudEvent>,
        dedup: bool,
    ) -> Result<PublishTicket> {
        let started = Instant::now();
        let span = trace::append(topic, &events);
        let partitions = (self.ensure_partitions(topic).await)
            .inspect_err(|e| trace::append_failed(&span, e))?;
        let ingest = now_ms();
        let mut due = Vec::with_capacity(events.len());
        let mut held = Vec::new();
        let mut records = Vec::with_capacity(events.len());
        for e in &events {
            let keyed = dedup.then(|| keyed(e));
            // A keyed event without a partition key goes where its key
            // hashes to, so that a retry lands where the first one did.
            let p = match (e.partition_key(), &keyed) {
                (Some(k), _) => topic::partition_for_key(k, partitions),
                (None, Some((_, place))) => topic::partition_of(*place, partitions),
                (None, None) => topic::partition_of(
                    self.round_robin.fetch_add(1, Ordering::Relaxed),
                    partitions,
                ),
            };
            let key = keyed.map(|(key, _)| key);
            let payload = Bytes::from(codec::encode(e, ingest));
            let at = e.deliver_at_ms(ingest).filter(|at| *at > ingest);
            if let Some(at) = at {
                held.push(Scheduled {
                    partition: p,
                    due_ms: at,
                    key: key.unwrap_or_else(|| dedup_key(e)).to_string(),
                    payload,
                    handle: 0,
                });
            } else {
                records.push(Append {
                    partition: p,
                    payload,
                    key,
                });
            }
            due.push(at);
        }
        let ids = |events: Vec<CloudEvent>| events.into_iter().map(|e| e.id).collect();
        let (pending, placed) = if !held.is_empty() {
            (self.hold(topic, records, held, &due).await, ids(events))
        } else {
            match self.log.enqueue_quietly(topic, records).await {
                Ok(Enqueued::Pending(pending)) => (Ok(pending), ids(events)),
                Ok(Enqueued::Unannounced(at)) => {
                    let placed = events.iter().map(|e| e.id.clone()).collect();
                    let events: Vec<Arc<CloudEvent>> = events.into_iter().map(Arc::new).collect();
                    if !self.handoffs.offer(topic, &at, &events, ingest) {
                        self.log.announce();
                    }
                    let answer = PendingAppend::from_future(std::future::ready(Ok(at)));
                    (Ok(answer), placed)
                }
                Err(e) => (Err(e), Vec::new()),
            }
        };
        match pending {
            Ok(pending) => Ok(PublishTicket {
                pending,
                placed,
                held: due,
                topic: topic.to_string(),
                started,
                metrics: self.metrics.clone(),
                span,
            }),
            Err(e) => {
                self.metrics.publish_failures.inc();
                trace::append_failed(&span, &e);
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Published;

    #[test]
    fn a_publish_answer_is_written_as_serde_writes_it() {
        let plain = Published {
            id: "e-1".into(),
            topic: "orders/eu".into(),
            partition: 3,
            offset: u64::MAX,
            duplicate: false,
            scheduled_for: None,
        };
        let odd = Published {
            id: "a \"quoted\"\\ id\n\u{1}é".into(),
            duplicate: true,
            scheduled_for: Some("2026-12-07T10:00:00.000Z".into()),
            ..plain.clone()
        };
        for p in [plain, odd] {
            let written = String::from_utf8(p.to_json()).unwrap();
            assert_eq!(written, serde_json::to_string(&p).unwrap());
        }
    }
}
