//! The writer thread: group commit of queued appends (offsets assigned,
//! duplicates answered, marks and index entries written in the same
//! batch), and topic deletion in order with the appends.
//!
//! While appends are handed to readers before their fsync, the fsync and
//! the answers move to a second thread (the sync thread): the writer goes
//! on writing the next batch, and making it readable, while the one before
//! is being synced, so that a record never waits for an fsync to be
//! readable. The sync thread syncs everything written so far with one
//! fsync, then answers every batch that sync covered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hashbrown::HashTable;

use rocksdb::{WriteBatch, WriteOptions};
use tokio::sync::{mpsc, oneshot, watch};

use eventmesh_core::throttle::{FailureLog, Report};

use super::dedup::{now_ms, Dedup, Key};
use super::topics::{self, topic_key, TopicState};
use super::{
    record_key, retention, AppendReq, CommitObserver, CommitStats, WriterMsg, BATCH_HEADER,
    BATCH_RECORD_OVERHEAD, MAX_COMMIT_BYTES,
};
use crate::error::{Result, StorageError};
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::Placed;

/// When the writer fsyncs, and whether readers see a batch before that.
pub(super) struct Syncing {
    pub fsync: bool,
    /// Set while batches are handed to readers before their fsync.
    pub read_early: Arc<AtomicBool>,
}

/// What a commit does once its batch is written.
#[derive(Clone, Copy)]
enum AfterWrite<'a> {
    /// No fsync: readable and answered now.
    Answer,
    /// Fsync, then readable and answered.
    SyncThenRead,
    /// Readable now (waking the readers on this channel); the sync thread
    /// then syncs and answers.
    ReadThenSync(&'a watch::Sender<u64>, &'a SyncStage),
}

/// A batch written and readable, waiting for the fsync that makes it
/// durable before its publishers are answered.
struct Unsynced {
    began: Instant,
    reqs: Vec<AppendReq>,
    results: Vec<Result<Vec<Placed>>>,
}

/// The sync thread and the queue to it.
struct SyncStage {
    tx: std::sync::mpsc::Sender<Unsynced>,
    thread: std::thread::JoinHandle<()>,
}

impl SyncStage {
    fn start(db: Arc<LocalDb>, observer: CommitObserver) -> std::io::Result<SyncStage> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("eventmesh-log-sync".into())
            .spawn(move || sync_loop(&db, &rx, &observer))?;
        Ok(SyncStage { tx, thread })
    }

    /// Answers everything queued, then stops the thread.
    fn finish(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// Syncs the WAL once for every batch queued by then, and answers them.
fn sync_loop(db: &LocalDb, rx: &std::sync::mpsc::Receiver<Unsynced>, observer: &CommitObserver) {
    let mut faults = FailureLog::default();
    let mut group: Vec<Unsynced> = Vec::new();
    while let Ok(first) = rx.recv() {
        group.push(first);
        group.extend(rx.try_iter());
        let synced = db.db().flush_wal(true);
        for u in &group {
            observer(u.began.elapsed(), u.reqs.len());
        }
        match synced {
            Ok(()) => {
                for u in group.drain(..) {
                    answer(u.reqs, u.results);
                }
                recovered(&mut faults, "log syncs work again");
            }
            Err(e) => {
                let err = StorageError::from(e);
                if let Report::Failure { suppressed } = faults.failed() {
                    tracing::error!(error = %err, suppressed, "log sync failed");
                }
                for u in group.drain(..) {
                    refuse(u.reqs, &err);
                }
            }
        }
    }
}

pub(super) fn writer_loop(
    db: Arc<LocalDb>,
    mut rx: mpsc::Receiver<WriterMsg>,
    watch_tx: Arc<watch::Sender<u64>>,
    sync: Syncing,
    mut dedup: Dedup,
    stats: Arc<CommitStats>,
    observer: CommitObserver,
) {
    // The batch is written unsynced and the WAL synced right after: the
    // same durability before the answer, but a sync in progress does not
    // hold back other writers of the store (the delivery ledger, offsets),
    // as a synced write would: they queue behind a write group, and a
    // synced group lasts until its fsync is done.
    let opts = WriteOptions::default();
    let mut batch_reqs: Vec<AppendReq> = Vec::new();
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    let mut faults = FailureLog::default();
    // Started only where there is an fsync to move off this thread.
    let stage = if sync.fsync {
        match SyncStage::start(db.clone(), observer.clone()) {
            Ok(stage) => Some(stage),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the log's sync thread; syncing on the writer");
                None
            }
        }
    } else {
        None
    };
    dedup.report(&stats);
    while shutdown.is_none() {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut bytes = 0usize;
        let mut next = Some(first);
        let mut delete = None;
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Append(req) => {
                    bytes += req.records.iter().map(|a| a.payload.len()).sum::<usize>();
                    batch_reqs.push(req);
                }
                WriterMsg::Delete(topic, reply) => {
                    delete = Some((topic, reply));
                    break;
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
            let after = match (sync.fsync, sync.read_early.load(Ordering::Relaxed), &stage) {
                (false, _, _) => AfterWrite::Answer,
                (true, true, Some(stage)) => AfterWrite::ReadThenSync(&watch_tx, stage),
                (true, _, _) => AfterWrite::SyncThenRead,
            };
            commit(
                &db,
                &opts,
                after,
                &mut dedup,
                &mut batch_reqs,
                &mut faults,
                &observer,
            );
            watch_tx.send_modify(|v| *v += 1);
            dedup.report(&stats);
        }
        if let Some((topic, reply)) = delete {
            let _ = reply.send(delete_topic_records(&db, &topic));
        }
    }
    rx.close();
    // Batches written before the shutdown are synced and answered.
    if let Some(stage) = stage {
        stage.finish();
    }
    // Anything still queued after shutdown is refused, never dropped silently.
    while let Ok(msg) = rx.try_recv() {
        if let WriterMsg::Append(req) = msg {
            let _ = req.reply.send((Err(StorageError::Closed), req.records));
        }
    }
    // Release the store before confirming, so that a closed log holds no
    // handle on the RocksDB instance.
    drop(db);
    if let Some(done) = shutdown {
        let _ = done.send(());
    }
}

/// Deletes a topic's metadata, records, marks and held-back events in one
/// synced batch (on the writer thread, after every append queued before).
fn delete_topic_records(db: &LocalDb, topic: &TopicState) -> Result<()> {
    topic.deleted.store(true, Ordering::Release);
    let cf = db.cf(CF_LOG);
    let mut wb = WriteBatch::default();
    wb.delete_cf(cf, topic_key(&topic.name));
    let id = topic.id;
    for tag in [b'd', b'm'] {
        let mut from = record_key(id, 0, 0);
        let mut to = record_key(id.saturating_add(1), 0, 0);
        from[0] = tag;
        to[0] = tag;
        wb.delete_range_cf(cf, &from[..5], &to[..5]);
    }
    let (from, to) = super::schedule::topic_range(id);
    wb.delete_range_cf(cf, from, to);
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    db.db().write_opt(wb, &opts)?;
    Ok(())
}

/// What one commit writes to one partition.
struct PartWrite<'a> {
    topic: &'a TopicState,
    partition: u32,
    /// The partition's end before the commit.
    first: u64,
    /// Its end after.
    next: u64,
    /// Payload bytes written.
    bytes: u64,
}

impl PartWrite<'_> {
    /// Time and byte count of the mark this commit puts at `first`, when
    /// one is due: a second after the last, or past the topic's spacing.
    fn mark(&self, at_ms: u64) -> Option<(u64, u64)> {
        let part = &self.topic.parts[self.partition as usize];
        let last_ms = part.mark_ms.load(Ordering::Relaxed);
        let cum = part.bytes_end.load(Ordering::Acquire);
        // Marks keep their times in order even if the clock steps back.
        let at = at_ms.max(last_ms);
        let due = last_ms == 0
            || at - last_ms >= topics::MARK_MS
            || cum - part.mark_cum.load(Ordering::Relaxed)
                >= self.topic.mark_bytes.load(Ordering::Relaxed);
        due.then_some((at, cum))
    }
}

/// What a record's key says about it.
enum First {
    /// Stored: no key (or keys are off), or a key not seen within the
    /// window (journaled with the record).
    Stored,
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
    after: AfterWrite,
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
        .map(|a| a.payload.len() + BATCH_RECORD_OVERHEAD + dedup.journal_bytes(a))
        .sum();
    let mut wb = WriteBatch::with_capacity_bytes(capacity + BATCH_HEADER + Dedup::JOURNAL_OVERHEAD);
    // What this batch writes to each (topic id, partition).
    let mut next: HashMap<(u32, u32), PartWrite> = HashMap::new();
    let at_ms = now_ms();
    dedup.begin(began, at_ms);
    let mut results: Vec<Result<Vec<Placed>>> = Vec::with_capacity(reqs.len());
    // Every key of the commit, with the index's lines for it asked for
    // ahead: the looks below then find them in the cache.
    let all_keys: Vec<Option<Key>> = reqs
        .iter()
        .flat_map(|r| r.records.iter().map(|a| dedup.key(r.topic.id, a)))
        .collect();
    for k in all_keys.iter().flatten() {
        dedup.prefetch(k);
    }
    let mut rest: &[Option<Key>] = &all_keys;
    for req in reqs.iter() {
        let topic = req.topic.id;
        let keys;
        (keys, rest) = rest.split_at(req.records.len());
        if req.topic.deleted.load(Ordering::Acquire) {
            results.push(Err(StorageError::UnknownTopic(req.topic.name.clone())));
            continue;
        }
        // First which records are duplicates (nothing written yet, so a
        // failed lookup fails the request whole), then the writes.
        let mut first_of: Vec<First> = Vec::with_capacity(req.records.len());
        // New keys of this request (indexes into `keys`), for a key sent
        // twice in it; unused by a request of one record.
        let mut mine: HashTable<usize> = HashTable::new();
        let mut failed = None;
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = key else {
                first_of.push(First::Stored);
                continue;
            };
            let same = |j: &usize| keys[*j].as_ref() == Some(key);
            if let Some(&j) = mine.find(key.hash(), same) {
                first_of.push(First::InRequest(j));
                continue;
            }
            match dedup.earlier(db, key, at_ms) {
                Ok(Some(p)) => first_of.push(First::Before(p)),
                Ok(None) => {
                    if keys.len() > 1 {
                        mine.insert_unique(key.hash(), i, |j| {
                            keys[*j].as_ref().map_or(0, Key::hash)
                        });
                    }
                    first_of.push(First::Stored);
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
        for ((a, first), key) in req.records.iter().zip(first_of).zip(keys) {
            match first {
                First::Before(p) => placed.push(p),
                First::InRequest(j) => placed.push(Placed {
                    duplicate: true,
                    ..placed[j]
                }),
                First::Stored => {
                    let p = a.partition;
                    let w = next.entry((topic, p)).or_insert_with(|| {
                        let t: &TopicState = &req.topic;
                        let end = t.parts[p as usize].end.load(Ordering::Acquire);
                        PartWrite {
                            topic: t,
                            partition: p,
                            first: end,
                            next: end,
                            bytes: 0,
                        }
                    });
                    wb.put_cf(cf, record_key(topic, p, w.next), &a.payload);
                    let here = Placed {
                        partition: p,
                        offset: w.next,
                        duplicate: false,
                    };
                    w.next += 1;
                    w.bytes += a.payload.len() as u64;
                    if let Some(key) = key {
                        dedup.record(key, here);
                    }
                    placed.push(here);
                }
            }
        }
        results.push(Ok(placed));
    }
    dedup.finish(db, &mut wb);
    let marks: Vec<(&PartWrite, u64, u64)> = next
        .iter()
        .filter_map(|(&(id, p), w)| {
            let (at, cum) = w.mark(at_ms)?;
            wb.put_cf(
                cf,
                retention::mark_key(id, p, w.first),
                retention::mark_value(at, cum),
            );
            Some((w, at, cum))
        })
        .collect();
    // Moves the ends past what this batch wrote: readers see it from then.
    let readable = || {
        for (&(_, p), w) in &next {
            let part = &w.topic.parts[p as usize];
            part.bytes_end.fetch_add(w.bytes, Ordering::AcqRel);
            part.last_append_ms.store(at_ms, Ordering::Release);
            part.end.store(w.next, Ordering::Release);
        }
        for (w, at, cum) in &marks {
            let part = &w.topic.parts[w.partition as usize];
            part.mark_ms.store(*at, Ordering::Relaxed);
            part.mark_cum.store(*cum, Ordering::Relaxed);
        }
    };
    let written = db.db().write_opt(wb, opts).and_then(|()| match after {
        AfterWrite::SyncThenRead => db.db().flush_wal(true),
        AfterWrite::Answer | AfterWrite::ReadThenSync(..) => Ok(()),
    });
    if let (Ok(()), AfterWrite::ReadThenSync(wake, stage)) = (&written, after) {
        // Readers get the batch now; its publishers once it is synced.
        readable();
        wake.send_modify(|v| *v += 1);
        let unsynced = Unsynced {
            began,
            reqs: std::mem::take(reqs),
            results,
        };
        if let Err(std::sync::mpsc::SendError(u)) = stage.tx.send(unsynced) {
            // The sync thread is gone (it panicked): never answer unsynced.
            refuse(u.reqs, &StorageError::Closed);
        }
        recovered(faults, "log appends work again");
        return;
    }
    observer(began.elapsed(), reqs.len());
    match written {
        Ok(()) => {
            readable();
            answer(reqs.drain(..), results);
            recovered(faults, "log appends work again");
        }
        Err(e) => {
            let err = StorageError::from(e);
            if let Report::Failure { suppressed } = faults.failed() {
                tracing::error!(error = %err, suppressed, "log append failed");
            }
            refuse(reqs.drain(..), &err);
        }
    }
}

/// Logs `what` once after failures, when a success ends them.
fn recovered(faults: &mut FailureLog, what: &str) {
    if let Report::Recovered { failures } = faults.succeeded() {
        tracing::info!(failures, "{what}");
    }
}

/// Answers each request with its result.
fn answer(reqs: impl IntoIterator<Item = AppendReq>, results: Vec<Result<Vec<Placed>>>) {
    for (req, placed) in reqs.into_iter().zip(results) {
        let _ = req.reply.send((placed, req.records));
    }
}

/// Answers each request with `err`.
fn refuse(reqs: impl IntoIterator<Item = AppendReq>, err: &StorageError) {
    for req in reqs {
        let _ = req.reply.send((Err(err.clone()), req.records));
    }
}
