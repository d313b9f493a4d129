//! The `standalone` backend: the log in the `log` column family of the
//! node's local RocksDB.
//!
//! Keys: `d | topic id (u32 BE) | partition (u32 BE) | offset (u64 BE)` for
//! records (see [`records`]), `t | name` for topic metadata (see
//! [`topics`]), `m | ...` for the marks retention cuts at (see
//! [`retention`]), `s | ...` for events
//! held back until their due time (see [`schedule`]). The idempotency index
//! is in its own column family (see [`dedup`]).
//!
//! Group commit: every append goes to one writer thread, which drains all
//! appends queued at that moment into one `WriteBatch`, writes it with one
//! WAL sync (when `sync` is on), and then answers them all. Offsets are
//! assigned by that thread alone, and a partition's end offset moves only
//! after its batch is written, so readers never see a record that is not
//! durable. With reading before the sync on
//! ([`StandaloneLog::set_read_before_sync`]), the end moves as soon as the
//! batch is written and a sync thread syncs and answers, while the writer
//! goes on with the next batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rocksdb::{Direction, IteratorMode, ReadTier, WriteBatch, WriteOptions};
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{Result, StorageError};
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::{
    Append, Durability, Enqueued, EventLog, PendingAppend, Placed, Record, Retention, Scheduled,
    ScheduledSummary, StoredBytes, TopicInfo,
};
use records::{read_records, record_key, scan_bounds, ReadRange};
use topics::{decode_meta, encode_meta, topic_key, PartitionState, TopicState, NEXT_ID_KEY};

mod dedup;
pub mod memory;
mod recent;
mod records;
mod retention;
mod schedule;
mod topics;
mod writer;

/// How long a keyed append is remembered, unless told otherwise.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(120);

/// Largest number of bytes one group commit gathers before writing.
const MAX_COMMIT_BYTES: usize = 32 << 20;
const QUEUE_DEPTH: usize = 8192;
const MAX_PARTITIONS: u32 = 1024;

/// A write batch's fixed header (sequence number and count).
const BATCH_HEADER: usize = 12;
/// What a put adds to a batch besides its value: tag, column family id,
/// the key and both lengths, at most.
const BATCH_RECORD_OVERHEAD: usize = 1 + 5 + 5 + 17 + 5;

struct AppendReq {
    topic: Arc<TopicState>,
    records: Vec<Append>,
    /// The answer goes back with the records: they are freed by the
    /// publisher's task that made them, not by the writer thread (a free
    /// across threads costs the allocator more, and the writer is the one
    /// serial stage of every append).
    reply: oneshot::Sender<Answer>,
}

/// Where each record is, and the records themselves (see [`AppendReq`]).
type Answer = (Result<Vec<Placed>>, Vec<Append>);

/// The pending append of a request sent to the writer.
fn pending(rx: oneshot::Receiver<Answer>) -> PendingAppend {
    PendingAppend::from_future(async move {
        match rx.await {
            Ok((placed, records)) => {
                drop(records);
                placed
            }
            Err(_) => Err(StorageError::Closed),
        }
    })
}

enum WriterMsg {
    Append(AppendReq),
    /// Deletes a topic after every append queued before it.
    Delete(Arc<TopicState>, oneshot::Sender<Result<()>>),
    Shutdown(oneshot::Sender<()>),
}

/// The standalone event log.
pub struct StandaloneLog {
    db: Arc<LocalDb>,
    topics: RwLock<HashMap<String, Arc<TopicState>>>,
    create_lock: tokio::sync::Mutex<()>,
    /// `None` only while dropping.
    writer: Option<mpsc::Sender<WriterMsg>>,
    /// Joined on drop, so the writer's handle on RocksDB is released before
    /// the log is gone (a RocksDB closed by a detached thread can race the
    /// process exit).
    writer_thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    watch_rx: watch::Receiver<u64>,
    /// The sender of `watch_rx`, shared with the writer thread: appends to
    /// memory topics bump it here.
    watch_tx: Arc<watch::Sender<u64>>,
    /// Bumped when a topic is created or deleted.
    topics_changed: watch::Sender<u64>,
    sync: bool,
    /// Appends are handed to readers once written, before their fsync.
    read_before_sync: Arc<AtomicBool>,
    stats: Arc<CommitStats>,
    /// Retention of topics without their own.
    default_retention: RwLock<Retention>,
    /// The id the next topic gets (under `create_lock`).
    next_id: AtomicU32,
    /// Held while records are dropped (retention, truncation), so two
    /// cuts of one partition never interleave.
    trim_lock: Arc<tokio::sync::Mutex<()>>,
    /// How many events each partition holds back (see [`schedule`]).
    scheduled: Arc<schedule::Counts>,
}

/// Told of every group commit: how long the write (and its sync) took and
/// how many append requests it carried. Called on the writer thread, so it
/// must be quick (a metric update).
pub type CommitObserver = Arc<dyn Fn(Duration, usize) + Send + Sync>;

/// Counters kept by the writer thread; `appends / commits` is the mean
/// number of appends that shared one write (and one sync).
#[derive(Debug, Default)]
pub struct CommitStats {
    pub commits: AtomicU64,
    pub appends: AtomicU64,
    /// Idempotency keys the index in memory holds (the last window or
    /// two), as of the last commit.
    pub dedup_keys: AtomicU64,
    /// The bytes that index has allocated.
    pub dedup_index_bytes: AtomicU64,
}

impl StandaloneLog {
    /// Loads topic metadata and end offsets, and starts the writer thread.
    /// With `sync` off, appends are acknowledged once written to the WAL
    /// without an fsync (faster, loses the last writes on a power cut).
    /// Keyed appends are deduplicated over [`DEFAULT_DEDUP_WINDOW`].
    pub fn open(db: Arc<LocalDb>, sync: bool) -> Result<Arc<Self>> {
        Self::open_observed(db, sync, DEFAULT_DEDUP_WINDOW, Arc::new(|_, _| {}))
    }

    /// [`StandaloneLog::open`] with the deduplication window of keyed
    /// appends (zero: none), telling `observer` of every group commit.
    pub fn open_observed(
        db: Arc<LocalDb>,
        sync: bool,
        dedup_window: Duration,
        observer: CommitObserver,
    ) -> Result<Arc<Self>> {
        dedup::forget_older_layout(&db);
        let mut topics = HashMap::new();
        let mut next_id = 1u32;
        {
            let cf = db.cf(CF_LOG);
            if let Some(v) = db.db().get_pinned_cf(cf, NEXT_ID_KEY)? {
                if let Ok(b) = <[u8; 4]>::try_from(&v[..]) {
                    next_id = u32::from_be_bytes(b);
                }
            }
            let iter = db
                .db()
                .iterator_cf(cf, IteratorMode::From(b"t", Direction::Forward));
            for item in iter {
                let (k, v) = item?;
                if k.first() != Some(&b't') {
                    break;
                }
                let name = String::from_utf8(k[1..].to_vec())
                    .map_err(|_| StorageError::Io("topic name is not UTF-8".into()))?;
                let topics::Meta {
                    id,
                    partitions,
                    retention: own,
                    ttl_ms,
                    durability,
                } = decode_meta(&name, &v)?;
                next_id = next_id.max(id + 1);
                let mut parts = Vec::with_capacity(partitions as usize);
                for p in 0..partitions {
                    if durability == Durability::Memory {
                        let start = memory::start_offset();
                        parts.push(PartitionState {
                            start: AtomicU64::new(start),
                            end: AtomicU64::new(start),
                            ..Default::default()
                        });
                        continue;
                    }
                    let (start, end) = scan_bounds(&db, id, p)?;
                    let part = PartitionState {
                        start: AtomicU64::new(start),
                        end: AtomicU64::new(end),
                        ..Default::default()
                    };
                    retention::load_partition(&db, id, p, &part)?;
                    parts.push(part);
                }
                let state = TopicState::new(
                    id,
                    name.clone(),
                    parts,
                    own,
                    ttl_ms,
                    Retention::FOREVER,
                    durability,
                );
                topics.insert(name, Arc::new(state));
            }
        }
        let dedup = dedup::Dedup::open(&db, dedup_window)?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (watch_tx, watch_rx) = watch::channel(0u64);
        let watch_tx = Arc::new(watch_tx);
        let thread_watch = watch_tx.clone();
        let thread_db = db.clone();
        let stats = Arc::new(CommitStats::default());
        let thread_stats = stats.clone();
        let read_before_sync = Arc::new(AtomicBool::new(false));
        let thread_early = read_before_sync.clone();
        let writer_thread = std::thread::Builder::new()
            .name("eventmesh-log-writer".into())
            .spawn(move || {
                writer::writer_loop(
                    thread_db,
                    rx,
                    thread_watch,
                    writer::Syncing {
                        fsync: sync,
                        read_early: thread_early,
                    },
                    dedup,
                    thread_stats,
                    observer,
                )
            })
            .map_err(|e| StorageError::Io(format!("cannot start writer thread: {e}")))?;
        Ok(Arc::new(StandaloneLog {
            db,
            topics: RwLock::new(topics),
            create_lock: tokio::sync::Mutex::new(()),
            writer: Some(tx),
            writer_thread: std::sync::Mutex::new(Some(writer_thread)),
            watch_rx,
            watch_tx,
            topics_changed: watch::channel(0).0,
            sync,
            read_before_sync,
            stats,
            default_retention: RwLock::new(Retention::FOREVER),
            next_id: AtomicU32::new(next_id),
            trim_lock: Arc::new(tokio::sync::Mutex::new(())),
            scheduled: Arc::default(),
        }))
    }

    /// With `on`, appends become readable once written to the WAL, before
    /// its fsync; their publishers are still answered only after it. A
    /// reader may then see an append that a power cut loses (and whose
    /// publisher was never answered); a process crash loses nothing either
    /// way. Without fsync (`sync` off) appends are readable at once anyway.
    pub fn set_read_before_sync(&self, on: bool) {
        self.read_before_sync.store(on, Ordering::Relaxed);
    }

    /// Sets the retention of topics without their own (the log opens with
    /// none: everything is kept).
    pub fn set_default_retention(&self, retention: Retention) {
        *self.default_retention.write().expect("retention lock") = retention;
        for t in self.topics.read().expect("topic map lock").values() {
            t.set_retention(t.own_retention(), retention);
        }
    }

    fn default_retention(&self) -> Retention {
        *self.default_retention.read().expect("retention lock")
    }

    /// Appends to a memory topic (partitions checked) without telling
    /// readers.
    fn append_in_memory(&self, state: &TopicState, records: Vec<Append>) -> Result<Vec<Placed>> {
        let mem = state.memory.as_ref().expect("a memory topic");
        if state.deleted.load(Ordering::Acquire) {
            return Err(StorageError::UnknownTopic(state.name.clone()));
        }
        let limit = memory::memory_limit(
            state
                .own_retention()
                .unwrap_or_else(|| self.default_retention()),
        );
        Ok(mem.append(&state.parts, records, limit))
    }

    fn state(&self, name: &str) -> Result<Arc<TopicState>> {
        self.topics
            .read()
            .expect("topic map lock")
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::UnknownTopic(name.to_string()))
    }

    /// Writes a topic's metadata record (synced).
    async fn write_meta(
        &self,
        name: &str,
        state: &TopicState,
        retention: Option<Retention>,
        ttl_ms: Option<u64>,
    ) -> Result<()> {
        let key = topic_key(name);
        let value = encode_meta(
            state.id,
            state.parts.len() as u32,
            retention,
            ttl_ms,
            state.durability(),
        );
        self.blocking(move |db| {
            let mut opts = WriteOptions::default();
            opts.set_sync(true);
            Ok(db.db().put_cf_opt(db.cf(CF_LOG), key, value, &opts)?)
        })
        .await
    }

    /// Runs `f` on the blocking pool with the log's store.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&LocalDb) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.db
            .blocking(f)
            .await
            .map_err(|e| StorageError::Io(e.to_string()))?
    }

    /// Whether appends are fsync'd before they are acknowledged.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Group-commit counters.
    pub fn commit_stats(&self) -> &Arc<CommitStats> {
        &self.stats
    }
}

impl Drop for StandaloneLog {
    fn drop(&mut self) {
        // Closing the queue ends the writer loop; wait for it to let go.
        drop(self.writer.take());
        let handle = self.writer_thread.get_mut().ok().and_then(Option::take);
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

#[async_trait]
impl EventLog for StandaloneLog {
    /// Not writable while the file system lacks the room RocksDB needs
    /// (it refuses writes then, and resumes by itself once there is room).
    fn status(&self) -> std::result::Result<(), String> {
        self.db.check_free_space()
    }

    async fn create_topic_as(
        &self,
        name: &str,
        partitions: u32,
        retention: Option<Retention>,
        durability: Durability,
    ) -> Result<(TopicInfo, bool)> {
        if let Some(t) = self.topics.read().expect("topic map lock").get(name) {
            return Ok((t.info(), false));
        }
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(StorageError::InvalidArgument(format!(
                "partition count {partitions} is outside 1..={MAX_PARTITIONS}"
            )));
        }
        // Creation is rare: serialize it, and do the synced write off the
        // async workers.
        let _guard = self.create_lock.lock().await;
        if let Some(t) = self.topics.read().expect("topic map lock").get(name) {
            return Ok((t.info(), false));
        }
        let id = self.next_id.load(Ordering::Acquire);
        let key = topic_key(name);
        let value = encode_meta(id, partitions, retention, None, durability);
        self.blocking(move |db| {
            let cf = db.cf(CF_LOG);
            let mut wb = WriteBatch::default();
            wb.put_cf(cf, key, value);
            wb.put_cf(cf, NEXT_ID_KEY, (id + 1).to_be_bytes());
            let mut opts = WriteOptions::default();
            opts.set_sync(true);
            Ok(db.db().write_opt(wb, &opts)?)
        })
        .await?;
        self.next_id.store(id + 1, Ordering::Release);
        let start = match durability {
            Durability::Disk => 0,
            Durability::Memory => memory::start_offset(),
        };
        let parts = (0..partitions)
            .map(|_| PartitionState {
                start: AtomicU64::new(start),
                end: AtomicU64::new(start),
                ..Default::default()
            })
            .collect();
        let state = TopicState::new(
            id,
            name.to_string(),
            parts,
            retention,
            None,
            self.default_retention(),
            durability,
        );
        let info = state.info();
        self.topics
            .write()
            .expect("topic map lock")
            .insert(name.to_string(), Arc::new(state));
        self.topics_changed.send_modify(|n| *n += 1);
        Ok((info, true))
    }

    async fn set_retention(&self, name: &str, retention: Option<Retention>) -> Result<TopicInfo> {
        let _guard = self.create_lock.lock().await;
        let state = self.state(name)?;
        self.write_meta(name, &state, retention, state.ttl_ms())
            .await?;
        state.set_retention(retention, self.default_retention());
        Ok(state.info())
    }

    async fn set_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicInfo> {
        let _guard = self.create_lock.lock().await;
        let state = self.state(name)?;
        self.write_meta(name, &state, state.own_retention(), ttl_ms)
            .await?;
        state.set_ttl(ttl_ms);
        Ok(state.info())
    }

    async fn delete_topic(&self, name: &str) -> Result<bool> {
        let _guard = self.create_lock.lock().await;
        let Some(state) = self.topics.write().expect("topic map lock").remove(name) else {
            return Ok(false);
        };
        let (reply, rx) = oneshot::channel();
        self.writer
            .as_ref()
            .ok_or(StorageError::Closed)?
            .send(WriterMsg::Delete(state.clone(), reply))
            .await
            .map_err(|_| StorageError::Closed)?;
        let deleted = rx.await.map_err(|_| StorageError::Closed)?;
        if let Err(e) = deleted {
            // Still stored: keep serving it.
            state.deleted.store(false, Ordering::Release);
            self.topics
                .write()
                .expect("topic map lock")
                .insert(name.to_string(), state);
            return Err(e);
        }
        self.topics_changed.send_modify(|n| *n += 1);
        self.scheduled.forget(state.id);
        // Give the space back now rather than at some later compaction.
        let id = state.id;
        self.blocking(move |db| {
            let from = record_key(id, 0, 0);
            let to = record_key(id.saturating_add(1), 0, 0);
            retention::compact_range(db, &from[..5], &to[..5]);
            Ok(())
        })
        .await?;
        Ok(true)
    }

    async fn stored_bytes(&self, topic: &str) -> Result<StoredBytes> {
        let state = self.state(topic)?;
        let partitions: Vec<u64> = state.parts.iter().map(|p| p.held_bytes()).collect();
        Ok(StoredBytes {
            total: partitions.iter().sum(),
            partitions: Some(partitions),
        })
    }

    async fn enforce_retention(&self) -> Result<()> {
        let default = self.default_retention();
        let mut topics: Vec<Arc<TopicState>> = self
            .topics
            .read()
            .expect("topic map lock")
            .values()
            .cloned()
            .collect();
        // Topics in memory are trimmed right here; those on disk with a
        // limit go to the pass below.
        topics.retain(|t| {
            let retention = t.own_retention().unwrap_or(default);
            match &t.memory {
                Some(mem) => {
                    mem.retain(&t.parts, retention);
                    false
                }
                None => !retention.is_forever(),
            }
        });
        if topics.is_empty() {
            return Ok(());
        }
        let held = self.trim_lock.clone().lock_owned().await;
        self.blocking(move |db| {
            let _held = held;
            let cuts = retention::pass(db, &topics, default)?;
            retention::compact(db, &cuts);
            Ok(())
        })
        .await
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>> {
        Ok(self
            .topics
            .read()
            .expect("topic map lock")
            .get(name)
            .map(|t| t.info()))
    }

    async fn partitions(&self, name: &str) -> Result<Option<u32>> {
        Ok(self
            .topics
            .read()
            .expect("topic map lock")
            .get(name)
            .map(|t| t.parts.len() as u32))
    }

    async fn topics(&self) -> Result<Vec<TopicInfo>> {
        let mut all: Vec<TopicInfo> = self
            .topics
            .read()
            .expect("topic map lock")
            .values()
            .map(|t| t.info())
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn enqueue(&self, topic: &str, records: Vec<Append>) -> Result<PendingAppend> {
        match self.enqueue_quietly(topic, records).await? {
            Enqueued::Pending(pending) => Ok(pending),
            Enqueued::Unannounced(placed) => {
                self.announce();
                Ok(PendingAppend::from_future(std::future::ready(Ok(placed))))
            }
        }
    }

    async fn enqueue_quietly(&self, topic: &str, records: Vec<Append>) -> Result<Enqueued> {
        let state = self.state(topic)?;
        for a in &records {
            state.part(a.partition)?;
        }
        if records.is_empty() {
            return Ok(Enqueued::Pending(PendingAppend::from_future(
                std::future::ready(Ok(Vec::new())),
            )));
        }
        if state.memory.is_some() {
            let placed = self.append_in_memory(&state, records)?;
            return Ok(Enqueued::Unannounced(placed));
        }
        let (reply, rx) = oneshot::channel();
        self.writer
            .as_ref()
            .ok_or(StorageError::Closed)?
            .send(WriterMsg::Append(AppendReq {
                topic: state,
                records,
                reply,
            }))
            .await
            .map_err(|_| StorageError::Closed)?;
        Ok(Enqueued::Pending(pending(rx)))
    }

    fn announce(&self) {
        self.watch_tx.send_modify(|n| *n += 1);
    }

    async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        let state = self.state(topic)?;
        let part = state.part(partition)?;
        let end = part.end.load(Ordering::Acquire);
        let from = from.max(part.start.load(Ordering::Acquire));
        if from >= end || max_records == 0 {
            return Ok(Vec::new());
        }
        if let Some(mem) = &state.memory {
            return Ok(mem.read(partition, from, max_records, max_bytes));
        }
        // Fresh records are in the memtables or the block cache: they are
        // read right here, without a trip through the blocking pool. Only a
        // read that needs the disk (an old backlog) goes there.
        let id = state.id;
        let range = ReadRange {
            id,
            partition,
            from,
            end,
            max_records,
            max_bytes,
        };
        if let Some(records) = read_records(&self.db, &range, ReadTier::BlockCache)? {
            return Ok(records);
        }
        self.db
            .blocking(move |db| read_records(db, &range, ReadTier::All))
            .await
            .map_err(|e| StorageError::Io(e.to_string()))?
            .map(Option::unwrap_or_default)
    }

    async fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let state = self.state(topic)?;
        Ok(state.part(partition)?.end.load(Ordering::Acquire))
    }

    async fn start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let state = self.state(topic)?;
        Ok(state.part(partition)?.start.load(Ordering::Acquire))
    }

    async fn truncate_before(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        let state = self.state(topic)?;
        state.part(partition)?;
        if let Some(mem) = &state.memory {
            mem.truncate(&state.parts, partition, offset);
            return Ok(());
        }
        let held = self.trim_lock.clone().lock_owned().await;
        self.blocking(move |db| {
            let _held = held;
            let part = &state.parts[partition as usize];
            retention::truncate(db, &state, partition, part, offset).map(|_| ())
        })
        .await
    }

    async fn schedule(&self, topic: &str, entries: Vec<Scheduled>) -> Result<()> {
        let state = self.state(topic)?;
        let counts = self.scheduled.clone();
        self.blocking(move |db| schedule::put(db, &counts, &state, entries))
            .await
    }

    async fn due(
        &self,
        topic: &str,
        partition: u32,
        until_ms: u64,
        max: usize,
    ) -> Result<Vec<Scheduled>> {
        let state = self.state(topic)?;
        state.part(partition)?;
        let id = state.id;
        self.blocking(move |db| schedule::due(db, id, partition, until_ms, max))
            .await
    }

    async fn unschedule(
        &self,
        topic: &str,
        partition: u32,
        entries: &[Scheduled],
    ) -> Result<usize> {
        let state = self.state(topic)?;
        state.part(partition)?;
        let entries: Vec<(u64, String)> =
            entries.iter().map(|e| (e.due_ms, e.key.clone())).collect();
        let (id, counts) = (state.id, self.scheduled.clone());
        self.blocking(move |db| schedule::remove(db, &counts, id, partition, &entries))
            .await
    }

    async fn scheduled(&self, topic: &str, partition: u32) -> Result<ScheduledSummary> {
        let state = self.state(topic)?;
        state.part(partition)?;
        let (id, counts) = (state.id, self.scheduled.clone());
        self.blocking(move |db| schedule::summary(db, &counts, id, partition))
            .await
    }

    /// Every topic of this log is created and deleted through it.
    fn topic_watch(&self) -> Option<watch::Receiver<u64>> {
        Some(self.topics_changed.subscribe())
    }

    fn append_watch(&self) -> watch::Receiver<u64> {
        self.watch_rx.clone()
    }

    async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        let Some(writer) = self.writer.as_ref() else {
            return;
        };
        if writer.send(WriterMsg::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod retention_tests;

#[cfg(test)]
mod memory_tests;
