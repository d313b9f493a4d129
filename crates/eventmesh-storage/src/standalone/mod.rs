//! The `standalone` backend: the log in the `log` column family of the
//! node's local RocksDB.
//!
//! Keys: `d | topic id (u32 BE) | partition (u32 BE) | offset (u64 BE)` for
//! records, `t | name` for topic metadata (`id u32 BE | partitions u32 BE`).
//!
//! Group commit: every append goes to one writer thread, which drains all
//! appends queued at that moment into one `WriteBatch`, writes it with one
//! WAL sync (when `sync` is on), and then answers them all. Offsets are
//! assigned by that thread alone, and a partition's end offset moves only
//! after its batch is written, so readers never see a record that is not
//! durable.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use rocksdb::{Direction, IteratorMode, ReadOptions, ReadTier, WriteBatch, WriteOptions};
use tokio::sync::{mpsc, oneshot, watch};

use eventmesh_core::throttle::{FailureLog, Report};

use crate::error::{Result, StorageError};
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::{Append, EventLog, PendingAppend, Placed, Record, TopicInfo};
use dedup::{now_ms, Dedup};

mod dedup;
mod recent;

/// How long a keyed append is remembered, unless told otherwise.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(120);

/// Largest number of bytes one group commit gathers before writing.
const MAX_COMMIT_BYTES: usize = 32 << 20;
const QUEUE_DEPTH: usize = 8192;
const MAX_PARTITIONS: u32 = 1024;

struct TopicState {
    id: u32,
    name: String,
    /// Next offset per partition; moved only by the writer thread.
    ends: Vec<AtomicU64>,
    /// First stored offset per partition.
    starts: Vec<AtomicU64>,
}

impl TopicState {
    fn info(&self) -> TopicInfo {
        TopicInfo {
            name: self.name.clone(),
            partitions: self.ends.len() as u32,
        }
    }

    fn check_partition(&self, partition: u32) -> Result<()> {
        if (partition as usize) < self.ends.len() {
            Ok(())
        } else {
            Err(StorageError::UnknownPartition {
                topic: self.name.clone(),
                partition,
            })
        }
    }
}

/// Which records of one partition a read wants.
struct ReadRange {
    id: u32,
    partition: u32,
    from: u64,
    end: u64,
    max_records: usize,
    max_bytes: usize,
}

/// Reads the records of `range` from the tier given; `None` when the tier
/// is the block cache and some record would have to come from the disk.
fn read_records(db: &LocalDb, range: &ReadRange, tier: ReadTier) -> Result<Option<Vec<Record>>> {
    let mut ro = ReadOptions::default();
    ro.set_read_tier(tier);
    ro.set_iterate_upper_bound(record_key(range.id, range.partition, range.end).to_vec());
    let mut it = db.db().raw_iterator_cf_opt(db.cf(CF_LOG), ro);
    it.seek(record_key(range.id, range.partition, range.from));
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        if out.len() >= range.max_records || (!out.is_empty() && bytes + v.len() > range.max_bytes)
        {
            break;
        }
        let offset = u64::from_be_bytes(k[9..17].try_into().expect("8 bytes"));
        bytes += v.len();
        out.push(Record {
            offset,
            payload: Bytes::copy_from_slice(v),
        });
        it.next();
    }
    match it.status() {
        Ok(()) => Ok(Some(out)),
        Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A write batch's fixed header (sequence number and count).
const BATCH_HEADER: usize = 12;
/// What a put adds to a batch besides its value: tag, column family id,
/// the key and both lengths, at most.
const BATCH_RECORD_OVERHEAD: usize = 1 + 5 + 5 + 17 + 5;

fn record_key(topic: u32, partition: u32, offset: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = b'd';
    k[1..5].copy_from_slice(&topic.to_be_bytes());
    k[5..9].copy_from_slice(&partition.to_be_bytes());
    k[9..17].copy_from_slice(&offset.to_be_bytes());
    k
}

fn topic_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 1);
    k.push(b't');
    k.extend_from_slice(name.as_bytes());
    k
}

struct AppendReq {
    topic: Arc<TopicState>,
    records: Vec<Append>,
    reply: oneshot::Sender<Result<Vec<Placed>>>,
}

enum WriterMsg {
    Append(AppendReq),
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
    sync: bool,
    stats: Arc<CommitStats>,
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
        let mut topics = HashMap::new();
        {
            let cf = db.cf(CF_LOG);
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
                if v.len() != 8 {
                    return Err(StorageError::Io(format!("bad metadata for topic {name}")));
                }
                let id = u32::from_be_bytes(v[0..4].try_into().expect("4 bytes"));
                let partitions = u32::from_be_bytes(v[4..8].try_into().expect("4 bytes"));
                let mut ends = Vec::with_capacity(partitions as usize);
                let mut starts = Vec::with_capacity(partitions as usize);
                for p in 0..partitions {
                    let (start, end) = Self::scan_bounds(&db, id, p)?;
                    starts.push(AtomicU64::new(start));
                    ends.push(AtomicU64::new(end));
                }
                topics.insert(
                    name.clone(),
                    Arc::new(TopicState {
                        id,
                        name,
                        ends,
                        starts,
                    }),
                );
            }
        }
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (watch_tx, watch_rx) = watch::channel(0u64);
        let thread_db = db.clone();
        let stats = Arc::new(CommitStats::default());
        let thread_stats = stats.clone();
        let writer_thread = std::thread::Builder::new()
            .name("eventmesh-log-writer".into())
            .spawn(move || {
                writer_loop(
                    thread_db,
                    rx,
                    watch_tx,
                    sync,
                    dedup_window,
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
            sync,
            stats,
        }))
    }

    /// First and next offset of a partition, from the stored keys.
    fn scan_bounds(db: &LocalDb, topic: u32, partition: u32) -> Result<(u64, u64)> {
        let cf = db.cf(CF_LOG);
        let lo = record_key(topic, partition, 0);
        let hi = record_key(topic, partition, u64::MAX);
        let mut it = db.db().raw_iterator_cf(cf);
        it.seek_for_prev(hi);
        let end = match it.key() {
            Some(k) if k.len() == 17 && k[..9] == lo[..9] => {
                u64::from_be_bytes(k[9..17].try_into().expect("8 bytes")) + 1
            }
            _ => 0,
        };
        it.status()?;
        it.seek(lo);
        let start = match it.key() {
            Some(k) if k.len() == 17 && k[..9] == lo[..9] => {
                u64::from_be_bytes(k[9..17].try_into().expect("8 bytes"))
            }
            _ => end,
        };
        it.status()?;
        Ok((start, end))
    }

    fn state(&self, name: &str) -> Result<Arc<TopicState>> {
        self.topics
            .read()
            .expect("topic map lock")
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::UnknownTopic(name.to_string()))
    }

    /// Whether appends are fsync'd before they are acknowledged.
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Group-commit counters.
    pub fn commit_stats(&self) -> &CommitStats {
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

fn writer_loop(
    db: Arc<LocalDb>,
    mut rx: mpsc::Receiver<WriterMsg>,
    watch_tx: watch::Sender<u64>,
    sync: bool,
    dedup_window: Duration,
    stats: Arc<CommitStats>,
    observer: CommitObserver,
) {
    let mut dedup = Dedup::open(&db, dedup_window);
    // The batch is written unsynced and the WAL synced right after: the
    // same durability before the answer, but a sync in progress does not
    // hold back other writers of the store (the delivery ledger, offsets),
    // as a synced write would: they queue behind a write group, and a
    // synced group lasts until its fsync is done.
    let opts = WriteOptions::default();
    let mut batch_reqs: Vec<AppendReq> = Vec::new();
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    let mut faults = FailureLog::default();
    while shutdown.is_none() {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut bytes = 0usize;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Append(req) => {
                    bytes += req.records.iter().map(|a| a.payload.len()).sum::<usize>();
                    batch_reqs.push(req);
                }
                WriterMsg::Shutdown(done) => {
                    shutdown = Some(done);
                    break;
                }
            }
            if bytes < MAX_COMMIT_BYTES {
                next = rx.try_recv().ok();
            }
        }
        if !batch_reqs.is_empty() {
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats
                .appends
                .fetch_add(batch_reqs.len() as u64, Ordering::Relaxed);
            commit(
                &db,
                &opts,
                sync,
                &mut dedup,
                &mut batch_reqs,
                &mut faults,
                &observer,
            );
            watch_tx.send_modify(|v| *v += 1);
        }
        dedup.sweep_if_due(&db);
    }
    rx.close();
    // Anything still queued after shutdown is refused, never dropped silently.
    while let Ok(msg) = rx.try_recv() {
        if let WriterMsg::Append(req) = msg {
            let _ = req.reply.send(Err(StorageError::Closed));
        }
    }
    // Release the store before confirming, so that a closed log holds no
    // handle on the RocksDB instance.
    drop(db);
    if let Some(done) = shutdown {
        let _ = done.send(());
    }
}

/// The first record with a key this one repeats.
enum First {
    /// Appended before this request (or by an earlier one in this batch).
    Before(Placed),
    /// Earlier in the same request, at this index.
    InRequest(usize),
}

/// Writes every queued request in one batch, tells `observer` how long it
/// took (before any answer, so that whoever gets one sees the commit
/// counted) and answers each of them.
fn commit(
    db: &LocalDb,
    opts: &WriteOptions,
    sync: bool,
    dedup: &mut Dedup,
    reqs: &mut Vec<AppendReq>,
    faults: &mut FailureLog,
    observer: &CommitObserver,
) {
    let began = Instant::now();
    let cf = db.cf(CF_LOG);
    // Sized up front: growing the batch a record at a time copies it over
    // and over (about 1% of a flat-out publish run).
    let capacity: usize = reqs
        .iter()
        .flat_map(|r| r.records.iter())
        .map(|a| a.payload.len() + BATCH_RECORD_OVERHEAD)
        .sum();
    let mut wb = WriteBatch::with_capacity_bytes(capacity + BATCH_HEADER);
    // Next offset per (topic id, partition) as this batch assigns them,
    // with the topic whose end it moves.
    let mut next: HashMap<(u32, u32), (&TopicState, u64)> = HashMap::new();
    // Keys stored by this batch: where their record went.
    let mut keyed: HashMap<(u32, &str), Placed> = HashMap::new();
    let at_ms = now_ms();
    let mut results: Vec<Result<Vec<Placed>>> = Vec::with_capacity(reqs.len());
    for req in reqs.iter() {
        let topic = req.topic.id;
        // First which records are duplicates (nothing written yet, so a
        // failed lookup fails the request whole), then the writes.
        let mut first_of: Vec<Option<First>> = Vec::with_capacity(req.records.len());
        let mut mine: HashMap<&str, usize> = HashMap::new();
        let mut failed = None;
        for (i, a) in req.records.iter().enumerate() {
            let Some(key) = dedup.key(a) else {
                first_of.push(None);
                continue;
            };
            if let Some(&j) = mine.get(key) {
                first_of.push(Some(First::InRequest(j)));
                continue;
            }
            match dedup.earlier(db, &keyed, topic, key, at_ms) {
                Ok(Some(p)) => first_of.push(Some(First::Before(p))),
                Ok(None) => {
                    mine.insert(key, i);
                    first_of.push(None);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            results.push(Err(e));
            continue;
        }
        let mut placed: Vec<Placed> = Vec::with_capacity(req.records.len());
        for (a, first) in req.records.iter().zip(first_of) {
            match first {
                Some(First::Before(p)) => placed.push(p),
                Some(First::InRequest(j)) => placed.push(Placed {
                    duplicate: true,
                    ..placed[j]
                }),
                None => {
                    let p = a.partition;
                    let (_, slot) = next.entry((topic, p)).or_insert_with(|| {
                        let t: &TopicState = &req.topic;
                        (t, t.ends[p as usize].load(Ordering::Acquire))
                    });
                    wb.put_cf(cf, record_key(topic, p, *slot), &a.payload);
                    let here = Placed {
                        partition: p,
                        offset: *slot,
                        duplicate: false,
                    };
                    if let Some(key) = dedup.key(a) {
                        dedup.record(&mut wb, cf, topic, key, here, at_ms);
                        keyed.insert((topic, key), here);
                    }
                    placed.push(here);
                    *slot += 1;
                }
            }
        }
        results.push(Ok(placed));
    }
    let written = db.db().write_opt(wb, opts).and_then(|()| {
        if sync {
            db.db().flush_wal(true)
        } else {
            Ok(())
        }
    });
    observer(began.elapsed(), reqs.len());
    match written {
        Ok(()) => {
            for (&(_, p), &(topic, end)) in &next {
                topic.ends[p as usize].store(end, Ordering::Release);
            }
            for (req, placed) in reqs.drain(..).zip(results) {
                let _ = req.reply.send(placed);
            }
            if let Report::Recovered { failures } = faults.succeeded() {
                tracing::info!(failures, "log appends work again");
            }
        }
        Err(e) => {
            let err = StorageError::from(e);
            if let Report::Failure { suppressed } = faults.failed() {
                tracing::error!(error = %err, suppressed, "log append failed");
            }
            for req in reqs.drain(..) {
                let _ = req.reply.send(Err(err.clone()));
            }
        }
    }
}

#[async_trait]
impl EventLog for StandaloneLog {
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<TopicInfo> {
        if let Some(t) = self.topics.read().expect("topic map lock").get(name) {
            return Ok(t.info());
        }
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(StorageError::InvalidArgument(format!(
                "partition count {partitions} is outside 1..={MAX_PARTITIONS}"
            )));
        }
        let db = self.db.clone();
        let name = name.to_string();
        // Creation is rare: serialize it, and do the synced write off the
        // async workers.
        let _guard = self.create_lock.lock().await;
        if let Some(t) = self.topics.read().expect("topic map lock").get(&name) {
            return Ok(t.info());
        }
        let id = self
            .topics
            .read()
            .expect("topic map lock")
            .values()
            .map(|t| t.id + 1)
            .max()
            .unwrap_or(1);
        let mut value = Vec::with_capacity(8);
        value.extend_from_slice(&id.to_be_bytes());
        value.extend_from_slice(&partitions.to_be_bytes());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        let key = topic_key(&name);
        tokio::task::spawn_blocking(move || db.db().put_cf_opt(db.cf(CF_LOG), key, value, &opts))
            .await
            .map_err(|e| StorageError::Io(format!("create task failed: {e}")))??;
        let state = Arc::new(TopicState {
            id,
            name: name.clone(),
            ends: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
            starts: (0..partitions).map(|_| AtomicU64::new(0)).collect(),
        });
        let info = state.info();
        self.topics
            .write()
            .expect("topic map lock")
            .insert(name, state);
        Ok(info)
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>> {
        Ok(self
            .topics
            .read()
            .expect("topic map lock")
            .get(name)
            .map(|t| t.info()))
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
        let state = self.state(topic)?;
        for a in &records {
            state.check_partition(a.partition)?;
        }
        let (reply, rx) = oneshot::channel();
        if records.is_empty() {
            let _ = reply.send(Ok(Vec::new()));
            return Ok(PendingAppend::new(rx));
        }
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
        Ok(PendingAppend::new(rx))
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
        state.check_partition(partition)?;
        let end = state.ends[partition as usize].load(Ordering::Acquire);
        let from = from.max(state.starts[partition as usize].load(Ordering::Acquire));
        if from >= end || max_records == 0 {
            return Ok(Vec::new());
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
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || read_records(&db, &range, ReadTier::All))
            .await
            .map_err(|e| StorageError::Io(format!("read task failed: {e}")))?
            .map(Option::unwrap_or_default)
    }

    async fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let state = self.state(topic)?;
        state.check_partition(partition)?;
        Ok(state.ends[partition as usize].load(Ordering::Acquire))
    }

    async fn start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let state = self.state(topic)?;
        state.check_partition(partition)?;
        Ok(state.starts[partition as usize].load(Ordering::Acquire))
    }

    async fn truncate_before(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        let state = self.state(topic)?;
        state.check_partition(partition)?;
        let end = state.ends[partition as usize].load(Ordering::Acquire);
        let offset = offset.min(end);
        let start = &state.starts[partition as usize];
        if offset <= start.load(Ordering::Acquire) {
            return Ok(());
        }
        let db = self.db.clone();
        let id = state.id;
        tokio::task::spawn_blocking(move || {
            db.db().delete_range_cf(
                db.cf(CF_LOG),
                record_key(id, partition, 0),
                record_key(id, partition, offset),
            )
        })
        .await
        .map_err(|e| StorageError::Io(format!("truncate task failed: {e}")))??;
        start.fetch_max(offset, Ordering::AcqRel);
        Ok(())
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
