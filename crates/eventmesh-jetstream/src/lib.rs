//! The `jetstream` backend: the event log on NATS JetStream, shared by every
//! instance that points at the same servers and stream prefix.
//!
//! Mapping (see docs/architecture.md for why):
//! - one stream per topic, `<prefix>_<topic>`, with one subject per
//!   partition, `<prefix>.<topic>.<partition>` (names escaped, [`names`]);
//! - a record's offset is its stream sequence minus one. Sequences are per
//!   stream, so a partition's offsets increase but have gaps where the
//!   other partitions' records sit; the [`EventLog`] contract allows that;
//! - a batch of several records is one JetStream atomic batch (all stored
//!   or none), which the server stores at consecutive sequences; one record
//!   is a plain publish ([`writer`]). An append is durable once JetStream
//!   acknowledged it (stored on a quorum of the stream's replicas); the
//!   acknowledgements come on one subscription of the log's own ([`acks`]);
//! - reads come from the topic's read cache ([`cache`]) when it reaches
//!   back far enough, else batched direct gets (many records of one
//!   subject per round trip); dispatchers read only what the tail brought
//!   while it keeps up ([`EventLog::read_end`]);
//! - each partition's end offset is kept in memory: read from the stream
//!   when the topic is opened, then moved by this instance's own
//!   acknowledgements and by a headers-only ordered consumer that follows
//!   the stream ([`tail`]), which also wakes the readers when another
//!   instance appends;
//! - retention is the streams' limits, enforced by the servers
//!   ([`retention`]: `max_bytes` is per stream, so per topic, not per
//!   partition);
//! - the topic watch moves on this instance's creates and deletes and on
//!   the servers' stream advisories of every other instance's
//!   ([`advisories`]).

mod acks;
mod advisories;
mod cache;
mod create;
mod direct;
mod held;
mod names;
mod read;
mod retention;
mod tail;
pub mod testutil;
mod time;
mod tls;
mod writer;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::stream;
use async_nats::jetstream::{self as js};
use async_nats::ServerAddr;
use async_trait::async_trait;
use futures::TryStreamExt;
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;

pub use eventmesh_core::config::JetStreamSettings;
use eventmesh_storage::{
    Append, Durability, EventLog, PendingAppend, Placed, Record, Retention, StorageError,
    StoredBytes, TopicInfo,
};

use acks::Acks;
use names::Names;
use writer::Writer;

type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Metadata keys on each stream.
const META_TOPIC: &str = "eventmesh.topic";
const META_PARTITIONS: &str = "eventmesh.partitions";
const MAX_PARTITIONS: u32 = 1024;
/// Most records one atomic batch may hold (the server's limit).
pub const MAX_BATCH: usize = 1000;

/// One topic as this instance knows it.
pub(crate) struct Topic {
    pub name: String,
    pub names: Names,
    /// The subject of each partition.
    pub subjects: Vec<async_nats::Subject>,
    pub partitions: u32,
    /// Per partition: one past its last known offset (the sequence of its
    /// last known record). Only ever moves up.
    pub ends: Vec<AtomicU64>,
    /// When the stream was created: a stream of the same name created
    /// another time is another topic.
    pub created: async_nats::datetime::DateTime,
    /// The topic's own retention as last read from its stream.
    pub own: RwLock<Option<Retention>>,
    /// Its events' time to live as last read from its stream.
    pub ttl_ms: RwLock<Option<u64>>,
    /// A stream on the servers' disks or in their memory.
    pub durability: Durability,
    /// Every offset below it is gone, in every partition (the stream's
    /// first sequence − 1 as last read). Only ever moves up.
    pub floor: AtomicU64,
    /// Per partition: every offset below it was truncated by this instance.
    pub truncated: Vec<AtomicU64>,
    /// Serializes this instance's changes to the stream's configuration.
    pub configuring: Arc<Mutex<()>>,
    /// Stops the topic's tail.
    pub stop: CancellationToken,
    /// Set once the ends are read and the tail follows the stream: on the
    /// first read or end offset asked for, so an instance that only
    /// publishes to a topic never receives its records back.
    pub followed: tokio::sync::OnceCell<()>,
    /// The latest records of each partition, filled by the tail once the
    /// topic is followed (unless the read cache is off).
    pub recent: std::sync::OnceLock<cache::Recent>,
}

impl Topic {
    fn check(&self, partition: u32) -> Result<()> {
        if partition < self.partitions {
            Ok(())
        } else {
            Err(StorageError::UnknownPartition {
                topic: self.name.clone(),
                partition,
            })
        }
    }
}

/// The event log on JetStream.
pub struct JetStreamLog {
    /// The connection, JetStream context and append notifier, shared with
    /// every pending append.
    writer: Arc<Writer>,
    prefix: String,
    replicas: usize,
    timeout: Duration,
    /// Per followed topic, payload bytes of its latest records kept for
    /// readers (zero: none).
    read_cache_bytes: usize,
    /// Streams' duplicate window (message ids); zero: the server's default.
    dedup_window: Duration,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serializes opening (and deleting) topics (one tail per topic).
    opening: Mutex<()>,
    /// The retention of topics without their own.
    default_retention: RwLock<Retention>,
    /// The last retention pass could not refresh every topic.
    retention_failing: AtomicBool,
    /// Bumped when a topic is created or deleted, here or (told by the
    /// servers' stream advisories) by another instance.
    topics_changed: watch::Sender<u64>,
    closed: AtomicBool,
    stop: CancellationToken,
    /// Events held back until their due time (see [`held`]).
    held: held::Held,
}

pub(crate) fn unavailable(message: impl Into<String>) -> StorageError {
    StorageError::Unavailable(message.into())
}

impl JetStreamLog {
    /// Connects to the servers and checks that JetStream answers; fails
    /// fast naming the servers and the cause.
    /// Keyed appends are deduplicated over `dedup_window` (the streams'
    /// duplicate window).
    pub async fn connect(
        opts: &JetStreamSettings,
        dedup_window: Duration,
    ) -> Result<Arc<JetStreamLog>> {
        let servers = eventmesh_core::redact::urls(&opts.servers);
        let refuse = |cause: String| StorageError::Connect {
            servers: servers.clone(),
            cause,
        };
        let addrs = opts
            .servers
            .iter()
            .map(|s| {
                ServerAddr::from_str(s)
                    .map_err(|e| refuse(eventmesh_core::redact::text(&format!("bad URL {s}: {e}"))))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut connect = async_nats::ConnectOptions::new()
            .name("eventmesh")
            .connection_timeout(opts.timeout)
            .request_timeout(Some(opts.timeout))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 100).min(2000))
            });
        if let (Some(user), Some(password)) = (&opts.user, &opts.password) {
            connect = connect.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &opts.token {
            connect = connect.token(token.clone());
        }
        if let Some(file) = &opts.creds_file {
            connect = connect.credentials_file(file).await.map_err(|e| {
                refuse(format!(
                    "cannot read credentials file {}: {e}",
                    file.display()
                ))
            })?;
        }
        connect = tls::apply(connect, opts).map_err(refuse)?;
        let client = tokio::time::timeout(opts.timeout * 2, connect.connect(addrs))
            .await
            .map_err(|_| {
                refuse(format!(
                    "no connection within {} ms",
                    (opts.timeout * 2).as_millis()
                ))
            })?
            .map_err(|e| {
                refuse(eventmesh_core::redact::text(&format!(
                    "cannot connect: {e}"
                )))
            })?;
        let context = js::ContextBuilder::new()
            .timeout(opts.timeout)
            .max_ack_inflight(1 << 16)
            .backpressure_on_inflight(true)
            .build(client.clone());
        context
            .query_account()
            .await
            .map_err(|e| refuse(format!("JetStream does not answer (is it enabled?): {e}")))?;
        let acks = Acks::start(&client, opts.timeout)
            .await
            .map_err(|e| refuse(format!("cannot subscribe to acknowledgements: {e}")))?;
        let (appended, _) = watch::channel(0);
        let (topics_changed, _) = watch::channel(0);
        let stop = CancellationToken::new();
        advisories::spawn(
            &client,
            opts.prefix.clone(),
            topics_changed.clone(),
            stop.clone(),
        )
        .await;
        Ok(Arc::new(JetStreamLog {
            writer: Arc::new(Writer {
                client,
                js: context,
                acks,
                appended,
            }),
            prefix: opts.prefix.clone(),
            replicas: opts.replicas.max(1),
            timeout: opts.timeout,
            read_cache_bytes: opts.read_cache_bytes,
            dedup_window,
            topics: RwLock::new(HashMap::new()),
            opening: Mutex::new(()),
            default_retention: RwLock::new(Retention::FOREVER),
            retention_failing: AtomicBool::new(false),
            topics_changed,
            closed: AtomicBool::new(false),
            stop,
            held: held::Held::default(),
        }))
    }

    fn names(&self, topic: &str) -> Names {
        Names::new(&self.prefix, topic)
    }

    fn cached(&self, topic: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .expect("topic map poisoned")
            .get(topic)
            .cloned()
    }

    /// The topic, opened (its ends read, its tail started) on first use.
    async fn open(&self, topic: &str) -> Result<Option<Arc<Topic>>> {
        if let Some(t) = self.cached(topic) {
            return Ok(Some(t));
        }
        let _one = self.opening.lock().await;
        if let Some(t) = self.cached(topic) {
            return Ok(Some(t));
        }
        let names = self.names(topic);
        let stream = match self.writer.js.get_stream(&names.stream).await {
            Ok(s) => s,
            Err(e)
                if matches!(e.kind(), js::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == js::ErrorCode::STREAM_NOT_FOUND) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(unavailable(format!("cannot look up topic {topic:?}: {e}"))),
        };
        let info = stream.cached_info().clone();
        let partitions = partitions_of(&info.config, topic)?;
        let t = Arc::new(Topic {
            name: topic.to_string(),
            subjects: (0..partitions).map(|p| names.subject(p).into()).collect(),
            names,
            partitions,
            ends: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            created: info.created,
            own: RwLock::new(retention::own_retention(&info.config)),
            ttl_ms: RwLock::new(retention::ttl_of(&info.config)),
            durability: durability_of(&info.config),
            floor: AtomicU64::new(0),
            truncated: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            configuring: Arc::new(Mutex::new(())),
            stop: self.stop.child_token(),
            followed: tokio::sync::OnceCell::new(),
            recent: std::sync::OnceLock::new(),
        });
        t.raise_floor(&info);
        self.topics
            .write()
            .expect("topic map poisoned")
            .insert(topic.to_string(), t.clone());
        Ok(Some(t))
    }

    /// The sequence of the message of `partition` that `lookup` names, as
    /// the stream's leader has it (see `direct`).
    async fn leader_seq(
        &self,
        t: &Topic,
        partition: u32,
        lookup: direct::Lookup,
    ) -> Result<Option<u64>> {
        let subject = t.names.subject(partition);
        direct::leader_seq(
            &self.writer.client,
            &t.names.stream,
            &subject,
            lookup,
            self.timeout,
        )
        .await
    }

    /// The offset of the first record of `partition` that `lookup` names,
    /// at most the partition's end; the end when there is none. The end is
    /// read before the leader is asked, so "none" means none up to it.
    pub(crate) async fn first_offset(
        &self,
        t: &Topic,
        partition: u32,
        lookup: direct::Lookup,
    ) -> Result<u64> {
        let end = t.ends[partition as usize].load(Ordering::Acquire);
        let found = self.leader_seq(t, partition, lookup).await?;
        Ok(found.map_or(end, |seq| (seq - 1).min(end)))
    }

    /// The topic, its ends read and its tail following the stream (done
    /// once, by the first reader).
    async fn followed(&self, topic: &str) -> Result<Arc<Topic>> {
        let t = self.existing(topic).await?;
        t.followed
            .get_or_try_init(|| async {
                // The last sequence first: every record after it reaches the
                // tail, every one up to it is in the ends read next.
                let stream = self
                    .writer
                    .js
                    .get_stream(&t.names.stream)
                    .await
                    .map_err(|e| unavailable(format!("cannot follow topic {topic:?}: {e}")))?;
                let info = stream.cached_info().clone();
                // Each partition's end as the leader has it: a lagging
                // follower would give an end below records that the tail,
                // starting after the stream's last sequence, never brings.
                // A stream just created on a cluster answers only once it
                // has a leader: asked again until the timeout.
                let deadline = tokio::time::Instant::now() + self.timeout;
                for p in 0..t.partitions {
                    let end = loop {
                        match self.leader_seq(&t, p, direct::Lookup::Last).await {
                            Ok(seq) => break seq.unwrap_or(0),
                            Err(_) if tokio::time::Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            Err(e) => {
                                return Err(unavailable(format!(
                                    "cannot read the end of {topic:?} partition {p}: {e}"
                                )))
                            }
                        }
                    };
                    t.ends[p as usize].fetch_max(end, Ordering::AcqRel);
                }
                t.raise_floor(&info);
                if self.read_cache_bytes > 0 {
                    let since = info.state.last_sequence;
                    let recent = cache::Recent::new(t.partitions, self.read_cache_bytes, since);
                    let _ = t.recent.set(recent);
                }
                tail::spawn(
                    self.writer.js.clone(),
                    t.clone(),
                    info.state.last_sequence + 1,
                    self.writer.appended.clone(),
                    t.stop.clone(),
                );
                Ok(())
            })
            .await?;
        Ok(t)
    }

    async fn existing(&self, topic: &str) -> Result<Arc<Topic>> {
        self.open(topic)
            .await?
            .ok_or_else(|| StorageError::UnknownTopic(topic.to_string()))
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StorageError::Closed)
        } else {
            Ok(())
        }
    }
}

/// The partition count a stream's metadata records.
fn partitions_of(config: &stream::Config, topic: &str) -> Result<u32> {
    config
        .metadata
        .get(META_PARTITIONS)
        .and_then(|p| p.parse().ok())
        .filter(|p| (1..=MAX_PARTITIONS).contains(p))
        .ok_or_else(|| {
            StorageError::Io(format!(
                "stream {} of topic {topic:?} has no valid {META_PARTITIONS} metadata",
                config.name
            ))
        })
}

/// Where a topic's stream keeps its messages.
fn durability_of(config: &stream::Config) -> Durability {
    match config.storage {
        stream::StorageType::Memory => Durability::Memory,
        stream::StorageType::File => Durability::Disk,
    }
}

#[async_trait]
impl EventLog for JetStreamLog {
    /// The stream's limits come from the retention ([`retention`]):
    /// `max_age` is its `ms`, `max_bytes` its `bytes` times the partition
    /// count, as JetStream limits the bytes of a stream, not of each of its
    /// subjects (a busy partition may push out a quiet one's records).
    /// A topic in memory is a stream with memory storage: the servers
    /// keep it in their memory (replicated as a file stream is), so it
    /// survives the loss of a server of several but not a restart of all.
    async fn create_topic_as(
        &self,
        name: &str,
        partitions: u32,
        retention: Option<Retention>,
        durability: Durability,
    ) -> Result<(TopicInfo, bool)> {
        self.create(name, partitions, retention, durability).await
    }

    async fn set_retention(&self, name: &str, retention: Option<Retention>) -> Result<TopicInfo> {
        self.reconfigure(name, retention).await
    }

    async fn set_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicInfo> {
        self.set_topic_ttl(name, ttl_ms).await
    }

    async fn delete_topic(&self, name: &str) -> Result<bool> {
        let deleted = self.delete(name).await?;
        if deleted {
            held::delete_stream(&self.writer.js, &self.names(name)).await;
            self.held.forget(name);
            self.topics_changed.send_modify(|n| *n += 1);
        }
        Ok(deleted)
    }

    /// The stream's bytes as the servers count them (each message with its
    /// subject, headers and overhead); no per-partition count.
    async fn stored_bytes(&self, topic: &str) -> Result<StoredBytes> {
        self.stream_bytes(topic).await
    }

    /// The servers drop what the limits no longer keep by themselves: this
    /// refreshes the floor and own retention of every topic this instance
    /// has open, forgets those whose stream is gone, and moves the limits
    /// of those following the default to the current default.
    async fn enforce_retention(&self) -> Result<()> {
        self.enforce().await
    }

    /// From memory: the higher of the stream's first sequence − 1 (as of
    /// the last retention pass) and this instance's truncation of the
    /// partition, at most the partition's end.
    async fn floor_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        Ok(t.floor_of(partition))
    }

    /// From memory once the topic is open: its own retention as of the
    /// last retention pass when another instance changed it.
    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>> {
        Ok(self.open(name).await?.map(|t| t.info()))
    }

    async fn partitions(&self, name: &str) -> Result<Option<u32>> {
        Ok(self.open(name).await?.map(|t| t.partitions))
    }

    async fn topics(&self) -> Result<Vec<TopicInfo>> {
        let mut out = Vec::new();
        let mut streams = self.writer.js.streams();
        let own = format!("{}_", self.prefix);
        while let Some(info) = streams
            .try_next()
            .await
            .map_err(|e| unavailable(format!("cannot list streams: {e}")))?
        {
            let c = &info.config;
            let Some(topic) = c.metadata.get(META_TOPIC) else {
                continue;
            };
            if !c.name.starts_with(&own) || self.names(topic).stream != c.name {
                continue;
            }
            if let Ok(partitions) = partitions_of(c, topic) {
                out.push(TopicInfo {
                    name: topic.clone(),
                    partitions,
                    retention: retention::own_retention(c),
                    ttl_ms: retention::ttl_of(c),
                    durability: durability_of(c),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn enqueue(&self, topic: &str, records: Vec<Append>) -> Result<PendingAppend> {
        self.check_open()?;
        if records.is_empty() {
            return Ok(PendingAppend::from_future(async { Ok(Vec::new()) }));
        }
        if records.len() > MAX_BATCH {
            return Err(StorageError::InvalidArgument(format!(
                "a batch holds at most {MAX_BATCH} events on the jetstream backend, got {}",
                records.len()
            )));
        }
        let t = self.existing(topic).await?;
        for a in &records {
            t.check(a.partition)?;
        }
        let writer = Arc::clone(&self.writer);
        if records.len() == 1 {
            // Queued on the connection now: the order of appends is the
            // order of these calls. The acknowledgement is awaited by the
            // caller.
            let ack = writer.send(&t, &records).await?;
            return Ok(PendingAppend::from_future(writer.settle(t, records, ack)));
        }
        // A key repeated within the batch: the first is sent, the others
        // answer where it went (JetStream refuses a batch repeating an id).
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut source = Vec::with_capacity(records.len());
        let mut unique = Vec::with_capacity(records.len());
        for a in &records {
            match a.key.as_ref().and_then(|k| first.get(k.as_str())) {
                Some(&u) => source.push((u, true)),
                None => {
                    if let Some(k) = &a.key {
                        first.insert(k.as_str(), unique.len());
                    }
                    source.push((unique.len(), false));
                    unique.push(a.clone());
                }
            }
        }
        let ack = writer.send(&t, &unique).await?;
        let pending = writer.settle(t, unique, ack);
        Ok(PendingAppend::from_future(async move {
            let placed = pending.await?;
            Ok(source
                .into_iter()
                .map(|(u, repeat)| Placed {
                    duplicate: placed[u].duplicate || repeat,
                    ..placed[u]
                })
                .collect())
        }))
    }

    async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        self.read_until(topic, partition, from, u64::MAX, max_records, max_bytes)
            .await
    }

    async fn read_until(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        until: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        if max_records == 0 || from >= until {
            return Ok(Vec::new());
        }
        read::partition(
            &self.writer.client,
            &t,
            partition,
            from..until,
            max_records,
            max_bytes,
            self.timeout,
        )
        .await
    }

    async fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        Ok(t.ends[partition as usize].load(Ordering::Acquire))
    }

    /// While the tail keeps up, what it brought: the records acknowledged
    /// past it reach the read cache a moment later, and the tail wakes the
    /// readers then (no read round trip to JetStream for them).
    async fn read_end(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        let acked = t.ends[partition as usize].load(Ordering::Acquire);
        Ok(match t.recent.get() {
            Some(recent) => recent.read_end(partition, acked),
            None => acked,
        })
    }

    async fn start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        // Nothing is stored below the floor: the search starts there.
        let from = direct::Lookup::From(t.floor_of(partition) + 1);
        self.first_offset(&t, partition, from).await
    }

    /// By the stream's own time lookup (a direct get from a start time):
    /// one request, whatever the stream holds.
    async fn offset_at_time(&self, topic: &str, partition: u32, at_ms: u64) -> Result<u64> {
        self.time_offset(topic, partition, at_ms).await
    }

    async fn schedule(
        &self,
        topic: &str,
        entries: Vec<eventmesh_storage::Scheduled>,
    ) -> Result<()> {
        self.hold(topic, entries).await
    }

    async fn due(
        &self,
        topic: &str,
        partition: u32,
        until_ms: u64,
        max: usize,
    ) -> Result<Vec<eventmesh_storage::Scheduled>> {
        self.held_due(topic, partition, until_ms, max).await
    }

    async fn unschedule(
        &self,
        topic: &str,
        partition: u32,
        entries: &[eventmesh_storage::Scheduled],
    ) -> Result<usize> {
        self.unhold(topic, partition, entries).await
    }

    async fn scheduled(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<eventmesh_storage::ScheduledSummary> {
        self.held_summary(topic, partition).await
    }

    /// Offsets are stream sequences, shared by every partition of the
    /// topic: the stream counts those of the partition's subject.
    async fn count_between(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        until: u64,
    ) -> Result<u64> {
        self.count_of(topic, partition, from, until).await
    }

    async fn truncate_before(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        let t = self.existing(topic).await?;
        t.check(partition)?;
        let stream = self
            .writer
            .js
            .get_stream_no_info(&t.names.stream)
            .await
            .map_err(|e| unavailable(format!("cannot truncate {topic:?}: {e}")))?;
        // Purges sequences below offset + 1, that is offsets below `offset`.
        stream
            .purge()
            .filter(t.names.subject(partition))
            .sequence(offset.saturating_add(1))
            .await
            .map_err(|e| unavailable(format!("cannot truncate {topic:?}: {e}")))?;
        // Records appended later may get offsets below `offset` (sequences
        // are per stream), never below the partition's end now.
        let end = t.ends[partition as usize].load(Ordering::Acquire);
        t.truncated[partition as usize].fetch_max(offset.min(end), Ordering::AcqRel);
        Ok(())
    }

    fn append_watch(&self) -> watch::Receiver<u64> {
        self.writer.appended.subscribe()
    }

    /// Moved by this instance's creates and deletes and by the servers'
    /// stream advisories of every other instance's ([`advisories`]).
    fn topic_watch(&self) -> Option<watch::Receiver<u64>> {
        Some(self.topics_changed.subscribe())
    }

    fn status(&self) -> std::result::Result<(), String> {
        match self.writer.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(format!("NATS connection {state}")),
        }
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stop.cancel();
        // Publishes already handed to the client go out before returning.
        let _ = tokio::time::timeout(self.timeout, self.writer.client.flush()).await;
    }
}
