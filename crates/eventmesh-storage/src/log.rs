//! The [`EventLog`] trait: a set of named topics, each split into a fixed
//! number of partitions, each partition an append-only sequence of opaque
//! records addressed by offset. Offsets increase within a partition and are
//! never reused; they may have gaps (a reader goes from one record to the
//! next stored, never by adding one).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use crate::error::{Result, StorageError};

/// One record to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub partition: u32,
    pub payload: Bytes,
    /// Idempotency key: when a record with the same key was appended to the
    /// topic within the log's deduplication window, this one is not stored
    /// and the answer is where the first one is.
    pub key: Option<IdempotencyKey>,
}

/// An append's idempotency key: at most [`IdempotencyKey::MAX`] bytes
/// (the runtime's are the 64 hexadecimal digits of a SHA-256; a log may
/// ask for `[A-Za-z0-9_-]`, as JetStream's message ids do), held inline:
/// a published event makes one, and a key on the heap cost an allocation
/// on the publishing thread and a free on the log's writer.
#[derive(Clone, Copy)]
pub struct IdempotencyKey {
    len: u8,
    bytes: [u8; IdempotencyKey::MAX],
}

impl IdempotencyKey {
    /// The longest key, in bytes.
    pub const MAX: usize = 64;

    /// `key`, or `None` when it is longer than [`Self::MAX`] bytes.
    pub fn new(key: &str) -> Option<IdempotencyKey> {
        let len = key.len();
        if len > Self::MAX {
            return None;
        }
        let mut bytes = [0u8; Self::MAX];
        bytes[..len].copy_from_slice(key.as_bytes());
        Some(IdempotencyKey {
            len: len as u8,
            bytes,
        })
    }

    pub fn as_str(&self) -> &str {
        // Made from a whole `&str`: always valid UTF-8.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// The key's bytes, unchecked: what a log that only compares keys
    /// reads on its hot path.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl PartialEq for IdempotencyKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for IdempotencyKey {}

impl std::hash::Hash for IdempotencyKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<(u32, Bytes)> for Append {
    fn from((partition, payload): (u32, Bytes)) -> Self {
        Append {
            partition,
            payload,
            key: None,
        }
    }
}

/// Where an appended record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub partition: u32,
    pub offset: u64,
    /// The record's key had been appended within the window: nothing was
    /// stored, and this is where the first one is.
    pub duplicate: bool,
}

/// What [`EventLog::enqueue_quietly`] did.
pub enum Enqueued {
    /// Queued, and readers are told once it is stored.
    Pending(PendingAppend),
    /// Appended to a topic kept in memory, and no reader told: where each
    /// record landed, in input order.
    Unannounced(Vec<Placed>),
}

/// An append queued by [`EventLog::enqueue`], not yet durable.
pub struct PendingAppend(Pin<Box<dyn Future<Output = Result<Vec<Placed>>> + Send>>);

impl fmt::Debug for PendingAppend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingAppend")
    }
}

impl PendingAppend {
    /// Wraps the future that answers the append.
    pub fn from_future(answer: impl Future<Output = Result<Vec<Placed>>> + Send + 'static) -> Self {
        PendingAppend(Box::pin(answer))
    }

    /// Waits until the append is durable; where each record is, in input
    /// order.
    pub async fn durable(self) -> Result<Vec<Placed>> {
        self.0.await
    }
}

/// How much of a partition the log keeps: records older than `ms`
/// milliseconds, and the oldest records past `bytes` of payload, are
/// dropped. Zero is no limit on that side; both zero keeps everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    pub ms: u64,
    pub bytes: u64,
}

impl Retention {
    /// Keeps every record forever.
    pub const FOREVER: Retention = Retention { ms: 0, bytes: 0 };

    pub fn is_forever(&self) -> bool {
        self.ms == 0 && self.bytes == 0
    }
}

/// Where a topic keeps its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Durability {
    /// In the log's store, under its durability setting (the default).
    #[default]
    Disk,
    /// In the memory of the process (or of the backend's servers) only: a
    /// crash or a restart loses what the topic held. For events that need
    /// no durability (requests and their like).
    Memory,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Disk => "disk",
            Durability::Memory => "memory",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "disk" => Ok(Durability::Disk),
            "memory" => Ok(Durability::Memory),
            other => Err(format!(
                "durability {other:?} is neither \"disk\" nor \"memory\""
            )),
        }
    }
}

/// A topic, its partition count, its own retention (`None`: the log's
/// default applies), the time to live of its events that carry no
/// `expirytime` of their own (`None`: they do not expire) and where it
/// keeps its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: u32,
    pub retention: Option<Retention>,
    pub ttl_ms: Option<u64>,
    pub durability: Durability,
}

/// Payload bytes a topic holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBytes {
    pub total: u64,
    /// Per partition, when the backend keeps that count (the standalone
    /// log does; a JetStream stream counts the topic as a whole).
    pub partitions: Option<Vec<u64>>,
}

/// One record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub payload: Bytes,
}

impl Record {
    /// Drops the records at `until` and above from records in offset order.
    pub fn keep_below(records: &mut Vec<Record>, until: u64) {
        records.truncate(records.partition_point(|r| r.offset < until));
    }
}

/// An event held back until its due time, beside a partition of its topic
/// (see [`EventLog::schedule`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    pub partition: u32,
    /// When it is due, in ms since the epoch.
    pub due_ms: u64,
    /// Its identity: scheduling the same key for the same time again keeps
    /// one (the idempotency key of its `source` and `id`).
    pub key: String,
    /// The stored event, as an append would store it.
    pub payload: Bytes,
    /// Where the log keeps it, for a log that needs more than the due time
    /// and key to find it again; 0 otherwise.
    pub handle: u64,
}

/// What a partition holds back: how many, and when the first is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScheduledSummary {
    pub count: u64,
    pub next_due_ms: Option<u64>,
}

#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Creates a topic, or returns the existing one unchanged (its partition
    /// count is kept) when the name is taken.
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<TopicInfo> {
        Ok(self.create_topic_with(name, partitions, None).await?.0)
    }

    /// Creates a topic with its own retention (`None`: the log's default),
    /// on disk; an existing topic is returned unchanged. The flag says
    /// whether this call created it.
    async fn create_topic_with(
        &self,
        name: &str,
        partitions: u32,
        retention: Option<Retention>,
    ) -> Result<(TopicInfo, bool)> {
        self.create_topic_as(name, partitions, retention, Durability::Disk)
            .await
    }

    /// Creates a topic as [`EventLog::create_topic_with`] does, keeping its
    /// records as `durability` says; an existing topic is returned
    /// unchanged (its durability too).
    async fn create_topic_as(
        &self,
        name: &str,
        partitions: u32,
        retention: Option<Retention>,
        durability: Durability,
    ) -> Result<(TopicInfo, bool)>;

    /// Sets a topic's own retention (`None`: back to the log's default).
    async fn set_retention(&self, name: &str, retention: Option<Retention>) -> Result<TopicInfo>;

    /// Sets the time to live of a topic's events without an `expirytime`
    /// (`None`: they do not expire). Recorded with the topic, so every
    /// instance reads it back.
    async fn set_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicInfo>;

    /// Deletes a topic with every record it holds; `false` when there was
    /// no such topic. Appends queued before the call are stored and then
    /// deleted with the rest; appends after it fail with an unknown topic.
    async fn delete_topic(&self, name: &str) -> Result<bool>;

    /// The payload bytes a topic holds (approximately: counted at the
    /// granularity retention drops records at).
    async fn stored_bytes(&self, topic: &str) -> Result<StoredBytes>;

    /// Applies retention once: drops what the limits no longer keep and
    /// refreshes [`EventLog::floor_offset`]. Called periodically by the
    /// runtime; a backend whose server enforces the limits by itself only
    /// refreshes what it knows.
    async fn enforce_retention(&self) -> Result<()> {
        Ok(())
    }

    /// Every offset of the partition below this one is gone (retention or
    /// truncation); answered from memory, so it may lag the log by one
    /// retention pass. A reader whose next offset is below it has lost
    /// records it never read.
    async fn floor_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        self.start_offset(topic, partition).await
    }

    /// One topic, if it exists.
    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>>;

    /// A topic's partition count, if it exists: all that placing a
    /// publish's events needs, read without building a [`TopicInfo`].
    async fn partitions(&self, name: &str) -> Result<Option<u32>> {
        Ok(self.topic(name).await?.map(|t| t.partitions))
    }

    /// Every topic, sorted by name.
    async fn topics(&self) -> Result<Vec<TopicInfo>>;

    /// Appends records, each to its partition, atomically: either every
    /// record is stored or none is. Returns each record's offset, in input
    /// order. Returns only once the batch is durable. (Records without
    /// keys: [`EventLog::enqueue`] takes keyed ones.)
    async fn append(&self, topic: &str, records: Vec<(u32, Bytes)>) -> Result<Vec<u64>> {
        let records = records.into_iter().map(Append::from).collect();
        let placed = self.enqueue(topic, records).await?.durable().await?;
        Ok(placed.into_iter().map(|p| p.offset).collect())
    }

    /// Queues an append (as [`EventLog::append`]) and returns once it holds
    /// its place in the log's order, before it is durable: appends queued
    /// one after another get increasing offsets in each partition, so a
    /// connection can pipeline publishes and keep their order.
    ///
    /// A record with a key already appended to the topic within the
    /// deduplication window (or earlier in the same batch) is not stored:
    /// its answer is where the first one is, marked `duplicate`. The rest of
    /// the batch is stored atomically as usual.
    async fn enqueue(&self, topic: &str, records: Vec<Append>) -> Result<PendingAppend>;

    /// Queues an append as [`EventLog::enqueue`] does; but a topic whose
    /// records this process keeps in memory (`durability: memory` on the
    /// standalone log) is appended to at once without bumping
    /// [`EventLog::append_watch`] ([`Enqueued::Unannounced`]): the caller
    /// hands the records to their readers itself and calls
    /// [`EventLog::announce`] unless every reader took them.
    async fn enqueue_quietly(&self, topic: &str, records: Vec<Append>) -> Result<Enqueued> {
        Ok(Enqueued::Pending(self.enqueue(topic, records).await?))
    }

    /// Bumps [`EventLog::append_watch`] for records appended by
    /// [`EventLog::enqueue_quietly`] without it.
    fn announce(&self) {}

    /// Reads records at offsets `from` and above, in order: at most `max_records`, and at most
    /// `max_bytes` of payload except that the first record is always returned.
    async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>>;

    /// One past the partition's last stored record: every record appended
    /// to the partition from now on gets this offset or a higher one.
    async fn end_offset(&self, topic: &str, partition: u32) -> Result<u64>;

    /// Where a reader that keeps up with the partition should stop for now:
    /// the end offset, or below it while the log is about to hand the
    /// records in between to its readers more cheaply than a read would
    /// fetch them (a JetStream topic's tail brings each record a moment
    /// after its acknowledgement). Never above the end offset; the log
    /// bumps [`EventLog::append_watch`] when it moves.
    async fn read_end(&self, topic: &str, partition: u32) -> Result<u64> {
        self.end_offset(topic, partition).await
    }

    /// Reads as [`EventLog::read`] does, but only records below `until` (a
    /// [`EventLog::read_end`]).
    async fn read_until(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        until: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        let mut got = self
            .read(topic, partition, from, max_records, max_bytes)
            .await?;
        Record::keep_below(&mut got, until);
        Ok(got)
    }

    /// The first offset still stored (after retention); the end offset when
    /// the partition holds nothing.
    async fn start_offset(&self, topic: &str, partition: u32) -> Result<u64>;

    /// Where a reader starts to read what was appended at or after `at_ms`
    /// (ms since the epoch): the first offset whose record the runtime
    /// accepted then or later, or the end offset when every stored record
    /// is older. Records are stored in the order they were accepted and
    /// carry that time, so the log is its own time index: this default
    /// finds the offset by bisection, a few reads of one record each
    /// (about 25 for ten million records), whatever the partition holds.
    /// Publishes accepted in parallel within the same millisecond or two
    /// may fall on either side of the answer.
    async fn offset_at_time(&self, topic: &str, partition: u32, at_ms: u64) -> Result<u64> {
        let mut hi = self.end_offset(topic, partition).await?;
        let mut lo = self.start_offset(topic, partition).await?.min(hi);
        // Invariant: every stored record below `lo` is older than `at_ms`,
        // and the answer is at or below `hi` (the end, or a position with
        // no readable record between it and one that is not older).
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let got = self
                .read_until(topic, partition, mid, hi, 4, 64 << 10)
                .await?;
            let first = got
                .iter()
                .find_map(|r| Some((r.offset, eventmesh_core::codec::ingest_ms(&r.payload)?)));
            match first {
                Some((offset, at)) if at < at_ms => lo = offset + 1,
                // Nothing older between `mid` and `hi`: starting at `mid`
                // reads the same records as starting at the one found.
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// How many records the partition stores at offsets `from..until` (what
    /// a reader moved back from `until` to `from` reads again). This
    /// default is for logs whose offsets are dense above the start.
    async fn count_between(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        until: u64,
    ) -> Result<u64> {
        let start = self.start_offset(topic, partition).await?;
        let end = self.end_offset(topic, partition).await?;
        Ok(until.min(end).saturating_sub(from.max(start)))
    }

    /// Drops records below `offset` (retention).
    async fn truncate_before(&self, topic: &str, partition: u32, offset: u64) -> Result<()>;

    /// Holds events back beside their partitions until their due times;
    /// returns once they are durable. They are not records of the
    /// partition (no offset, not read) until [`EventLog::due`] hands them
    /// to whoever releases them.
    async fn schedule(&self, topic: &str, entries: Vec<Scheduled>) -> Result<()> {
        let _ = entries;
        Err(StorageError::InvalidArgument(format!(
            "this log cannot hold events back (topic {topic:?})"
        )))
    }

    /// The partition's held-back events due at `until_ms` or before,
    /// earliest first, at most `max`.
    async fn due(
        &self,
        topic: &str,
        partition: u32,
        until_ms: u64,
        max: usize,
    ) -> Result<Vec<Scheduled>> {
        let _ = (topic, partition, until_ms, max);
        Ok(Vec::new())
    }

    /// Forgets held-back events (released, or cancelled), as
    /// [`EventLog::due`] gave them; how many were still held.
    async fn unschedule(
        &self,
        topic: &str,
        partition: u32,
        entries: &[Scheduled],
    ) -> Result<usize> {
        let _ = (topic, partition, entries);
        Ok(0)
    }

    /// How many events the partition holds back, and the first due time.
    async fn scheduled(&self, topic: &str, partition: u32) -> Result<ScheduledSummary> {
        let _ = (topic, partition);
        Ok(ScheduledSummary::default())
    }

    /// A counter bumped after every completed append, so readers can wait
    /// for new data instead of polling on a timer.
    fn append_watch(&self) -> watch::Receiver<u64>;

    /// A counter bumped whenever the log learns that a topic was created
    /// or deleted: through this process, or, on a log shared by several
    /// instances, through another one as far as the backend tells. Readers
    /// following the set of topics (pattern subscriptions) list
    /// [`EventLog::topics`] when it moves instead of on a short timer.
    /// `None` when the backend cannot tell.
    fn topic_watch(&self) -> Option<watch::Receiver<u64>> {
        None
    }

    /// Whether the backend can serve now, as far as it knows without a
    /// round trip: `Err` says why not (a remote log's servers unreachable).
    fn status(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Stops taking writes and waits for those queued to finish.
    async fn close(&self);
}

#[cfg(test)]
mod tests {
    use super::IdempotencyKey;

    #[test]
    fn idempotency_keys_hold_up_to_64_bytes() {
        let longest = "f".repeat(IdempotencyKey::MAX);
        let key = IdempotencyKey::new(&longest).unwrap();
        assert_eq!(key.as_str(), longest);
        assert_eq!(IdempotencyKey::new(&format!("{longest}f")), None);
        let short = IdempotencyKey::new("k-1").unwrap();
        assert_eq!(short.as_str(), "k-1");
        assert_eq!(short.to_string(), "k-1");
        assert_eq!(format!("{short:?}"), "\"k-1\"");
        assert_eq!(short, IdempotencyKey::new("k-1").unwrap());
        assert_ne!(short, IdempotencyKey::new("k-10").unwrap());
        assert_eq!(IdempotencyKey::new("").unwrap().as_str(), "");
    }
}
