//! One read of the log for every filtered consumer of a topic: the sieve.
//!
//! A consumer with filters reads its partitions through the sieve of its
//! topic instead of reading the log itself. The sieve reads each stretch
//! of a partition once, decodes each record once, and evaluates the
//! filters of every consumer of the topic in one pass over the decoded
//! events: a filter that requires an attribute to have one value (an
//! `exact` filter, or a `sql` conjunction with `attr = 'literal'`, see
//! [`Filter::exact_requirements`]) is found through an index on that
//! attribute's value, so an event costs one lookup per indexed attribute
//! and an evaluation of only the filters it may match. Filters without
//! such a requirement are evaluated on every event, still once per sieve
//! rather than once per consumer. A thousand groups each taking the events
//! of one customer cost about what one group costs.
//!
//! What it keeps: per partition, *segments*, aligned stretches of
//! [`SEGMENT`] offsets, each with, per filter, the offsets in it that
//! matched and that raised evaluation errors, and (for the latest
//! [`DECODED_SEGMENTS`]) the decoded events. A consumer asks for its
//! matches from its read position on; the answer says up to where the
//! segment has been read, so the consumer reads past everything else (its
//! committed offset moves with it). A match in an older segment, whose
//! events are dropped, is read from the log again, one record.
//!
//! Who reads: a consumer reads what it asks for that is not read yet, and
//! the sieve's own task reads each new append at the tail of every
//! partition a consumer has read. Whoever reads wakes the consumers whose
//! filters matched something in it (their [`SieveHandle::waker`]); a
//! filtered consumer waits for that instead of for every append, and
//! reads past what it did not match at its next wake-up or flush tick.
//!
//! Invariants:
//! - a segment's matches are those of the filters registered when it was
//!   read: a filter registered since (a new group) makes every segment of
//!   the topic stale (`generation`), so it is read and evaluated again;
//!   unregistering a filter leaves segments as they are;
//! - consumers with the same filter (the same compiled [`Filter`], see
//!   [`crate::filters`]) share one entry;
//! - at most [`SEGMENTS_PER_PARTITION`] segments stay per partition, and
//!   only the latest [`DECODED_SEGMENTS`] made, within [`DECODED_BYTES`],
//!   keep their events (those made longest ago go first), so memory is
//!   bounded whatever the backlog: about 16 MiB of events and 64 Ki
//!   offsets of matches per partition read; a consumer behind every kept
//!   segment reads its stretch again;
//! - an event an index rules out (its indexed attribute is present with
//!   another value) is not evaluated, so evaluation errors its other terms
//!   would raise are not counted; an event without the attribute is
//!   evaluated, so the spec's missing-attribute error is counted;
//! - offsets the log no longer holds (retention) and undecodable records
//!   are *absent*: never matched, counted as neither skipped nor matched.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::Notify;

use eventmesh_core::codec::{self, StoredEvent};
use eventmesh_core::CloudEvent;
use eventmesh_filter::{Attributes, Filter};
use eventmesh_storage::{EventLog, StorageError};

type StorageResult<T> = Result<T, StorageError>;

use crate::metrics::Metrics;

/// Offsets per segment.
pub(crate) const SEGMENT: u64 = 1024;
/// Segments kept per partition, with their matches.
const SEGMENTS_PER_PARTITION: usize = 64;
/// Of those, the latest that keep their decoded events too, as long as
/// their records come to at most [`DECODED_BYTES`] (the latest two keep
/// them whatever their size).
const DECODED_SEGMENTS: usize = 16;
const DECODED_BYTES: usize = 16 << 20;
/// Bytes asked of the log per read while filling a segment.
const READ_MAX_BYTES: usize = 4 << 20;

/// An event as the sieve decoded it, shared by every consumer it matches.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub ingest_ms: u64,
    pub event: Arc<CloudEvent>,
}

/// The sieves of every topic that has filtered consumers.
#[derive(Default)]
pub struct Sieves {
    topics: Mutex<HashMap<String, Arc<TopicSieve>>>,
}

impl Sieves {
    /// Registers a consumer's filter on `topic`; the handle unregisters it
    /// when dropped. The first registration on a topic starts the task
    /// that reads its appends.
    pub(crate) fn register(
        self: &Arc<Self>,
        log: &Arc<dyn EventLog>,
        metrics: &Arc<Metrics>,
        topic: &str,
        filter: Arc<Filter>,
    ) -> SieveHandle {
        let sieve = self
            .topics
            .lock()
            .expect("sieves")
            .entry(topic.to_owned())
            .or_insert_with(|| {
                let sieve = Arc::new(TopicSieve::default());
                tokio::spawn(drive(
                    Arc::downgrade(&sieve),
                    log.clone(),
                    metrics.clone(),
                    topic.to_owned(),
                ));
                sieve
            })
            .clone();
        let waker = Arc::new(Notify::new());
        let id = sieve.add(filter, waker.clone());
        SieveHandle {
            sieves: Arc::downgrade(self),
            topic: topic.to_owned(),
            sieve,
            id,
            waker,
        }
    }

    /// Topics with a sieve (for tests and metrics).
    #[cfg(test)]
    fn topics(&self) -> usize {
        self.topics.lock().expect("sieves").len()
    }
}

/// Reads the appends of a topic's partitions that consumers read, as they
/// come, so that the consumers their events match are woken; ends once the
/// topic has no filtered consumer left.
async fn drive(
    sieve: Weak<TopicSieve>,
    log: Arc<dyn EventLog>,
    metrics: Arc<Metrics>,
    topic: String,
) {
    let mut appended = log.append_watch();
    while appended.changed().await.is_ok() {
        let Some(sieve) = sieve.upgrade() else { break };
        let parts: Vec<_> = {
            let parts = sieve.parts.lock().expect("parts");
            parts.iter().map(|(p, part)| (*p, part.clone())).collect()
        };
        for (partition, part) in parts {
            let end = match log.read_end(&topic, partition).await {
                Ok(end) => end,
                Err(_) => continue,
            };
            let mut part = part.lock().await;
            let mut from = part.tail.unwrap_or(end);
            while from < end {
                let index = sieve.index();
                let base = from - from % SEGMENT;
                let until = end.min(base + SEGMENT);
                let seg = part.segment(base, index.generation);
                if seg.filled < until {
                    let read = seg.fill(&*log, &metrics, &topic, partition, until, &index);
                    if let Err(e) = read.await {
                        tracing::debug!(topic, partition, error = %e, "the sieve could not read");
                        break;
                    }
                }
                from = seg.filled.max(until);
            }
            part.tail = Some(from);
        }
    }
}

/// A consumer's place in its topic's sieve.
pub(crate) struct SieveHandle {
    sieves: Weak<Sieves>,
    topic: String,
    sieve: Arc<TopicSieve>,
    id: u64,
    waker: Arc<Notify>,
}

impl Drop for SieveHandle {
    fn drop(&mut self) {
        let empty = self.sieve.remove(self.id, &self.waker);
        if let (true, Some(sieves)) = (empty, self.sieves.upgrade()) {
            let mut topics = sieves.topics.lock().expect("sieves");
            // Gone only if no consumer registered in between.
            if topics
                .get(&self.topic)
                .is_some_and(|s| Arc::ptr_eq(s, &self.sieve) && s.is_empty())
            {
                topics.remove(&self.topic);
            }
        }
    }
}

/// What a consumer gets from one read: its matches at and above `from`,
/// and how far the sieve has read (`upto`): every offset in `from..upto`
/// not among the matches is skipped (or absent).
pub(crate) struct Sifted {
    pub matched: Vec<(u64, Arc<Decoded>)>,
    pub upto: u64,
    /// Offsets in `from..upto` that are absent (retention, undecodable).
    pub absent: Vec<u64>,
    /// Offsets in `from..upto` whose evaluation raised an error.
    pub errored: Vec<u64>,
}

impl SieveHandle {
    /// Notified when an event read into the sieve matched the consumer's
    /// filter (or raised an error in it).
    pub(crate) fn waker(&self) -> Arc<Notify> {
        self.waker.clone()
    }

    /// The consumer's matches in `partition` from `from` on, reading the
    /// log up to `end` (exclusive) where the sieve has not yet.
    pub(crate) async fn read(
        &self,
        log: &dyn EventLog,
        metrics: &Metrics,
        partition: u32,
        from: u64,
        end: u64,
    ) -> StorageResult<Sifted> {
        let part = self.sieve.part(partition);
        let mut part = part.lock().await;
        let index = self.sieve.index();
        let base = from - from % SEGMENT;
        let until = end.min(base + SEGMENT);
        let seg = part.segment(base, index.generation);
        if seg.filled < until {
            seg.fill(log, metrics, &self.topic, partition, until, &index)
                .await?;
        }
        let filled = seg.filled;
        // The task reads on from the furthest anyone read.
        part.tail = Some(part.tail.map_or(filled, |t| t.max(filled)));
        let seg = &part.segments[&base];
        let (offsets, mut sifted) = seg.sifted(self.id, from);
        if let Some(events) = &seg.events {
            sifted.matched = offsets
                .iter()
                .map(|o| {
                    let e = events[(o - base) as usize].clone();
                    (*o, e.expect("a matched event is present"))
                })
                .collect();
            return Ok(sifted);
        }
        drop(part);
        // Its events are dropped: read the matches again.
        for o in offsets {
            let records = log.read_until(&self.topic, partition, o, o + 1, 1, READ_MAX_BYTES);
            let decoded = records.await?.first().and_then(|r| {
                let StoredEvent { ingest_ms, event } = codec::decode(&r.payload).ok()?;
                Some(Arc::new(Decoded {
                    ingest_ms,
                    event: Arc::new(event),
                }))
            });
            match decoded {
                Some(d) => sifted.matched.push((o, d)),
                // Gone since (retention).
                None => sifted.absent.push(o),
            }
        }
        sifted.absent.sort_unstable();
        Ok(sifted)
    }
}

/// The filters registered on one topic, and its partitions' segments.
#[derive(Default)]
struct TopicSieve {
    registry: RwLock<Registry>,
    parts: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<Part>>>>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    /// Per filter id: the filter and the wakers of the consumers using it.
    filters: HashMap<u64, (Arc<Filter>, Vec<Arc<Notify>>)>,
    index: Arc<Index>,
}

impl TopicSieve {
    fn add(&self, filter: Arc<Filter>, waker: Arc<Notify>) -> u64 {
        let mut r = self.registry.write().expect("registry");
        if let Some((id, (_, wakers))) = r
            .filters
            .iter_mut()
            .find(|(_, (f, _))| Arc::ptr_eq(f, &filter))
        {
            wakers.push(waker);
            let id = *id;
            let generation = r.index.generation;
            r.index = Arc::new(Index::build(&r.filters, generation));
            return id;
        }
        let id = r.next_id;
        r.next_id += 1;
        r.filters.insert(id, (filter, vec![waker]));
        // Every segment read so far lacks this filter's matches.
        let generation = r.index.generation + 1;
        r.index = Arc::new(Index::build(&r.filters, generation));
        id
    }

    /// True when no filter is left.
    fn remove(&self, id: u64, waker: &Arc<Notify>) -> bool {
        let mut r = self.registry.write().expect("registry");
        if let Some((_, wakers)) = r.filters.get_mut(&id) {
            wakers.retain(|w| !Arc::ptr_eq(w, waker));
            if wakers.is_empty() {
                r.filters.remove(&id);
            }
            let generation = r.index.generation;
            r.index = Arc::new(Index::build(&r.filters, generation));
        }
        r.filters.is_empty()
    }

    fn is_empty(&self) -> bool {
        self.registry.read().expect("registry").filters.is_empty()
    }

    fn index(&self) -> Arc<Index> {
        self.registry.read().expect("registry").index.clone()
    }

    fn part(&self, partition: u32) -> Arc<tokio::sync::Mutex<Part>> {
        self.parts
            .lock()
            .expect("parts")
            .entry(partition)
            .or_default()
            .clone()
    }
}

/// A registered filter: its id, and the wakers of its consumers.
type Entry = (u64, Arc<Filter>, Vec<Arc<Notify>>);

/// The registered filters, arranged for one pass over an event.
#[derive(Default)]
struct Index {
    generation: u64,
    /// Per indexed attribute, the filters by the value they require.
    by_value: Vec<(String, HashMap<String, Vec<Entry>>)>,
    /// Filters with nothing to index: evaluated on every event.
    scan: Vec<Entry>,
}

impl Index {
    fn build(filters: &HashMap<u64, (Arc<Filter>, Vec<Arc<Notify>>)>, generation: u64) -> Index {
        let mut index = Index {
            generation,
            ..Index::default()
        };
        let mut ids: Vec<_> = filters.iter().collect();
        ids.sort_unstable_by_key(|(id, _)| **id);
        for (id, (filter, wakers)) in ids {
            let entry = (*id, filter.clone(), wakers.clone());
            let Some(&(attr, value)) = filter.exact_requirements().first() else {
                index.scan.push(entry);
                continue;
            };
            let pos = match index.by_value.iter().position(|(a, _)| a == attr) {
                Some(p) => p,
                None => {
                    index.by_value.push((attr.to_owned(), HashMap::new()));
                    index.by_value.len() - 1
                }
            };
            index.by_value[pos]
                .1
                .entry(value.to_owned())
                .or_default()
                .push(entry);
        }
        index
    }

    /// Evaluates every filter the event may match; `hit` gets each filter
    /// that matched or raised an error, with which.
    fn sift<'a>(&'a self, event: &CloudEvent, mut hit: impl FnMut(&'a Entry, bool, bool)) {
        let mut eval = |entry: &'a Entry| {
            let o = entry.1.matches(event);
            if o.matched || o.errored {
                hit(entry, o.matched, o.errored);
            }
        };
        for (attr, table) in &self.by_value {
            match event.get(attr) {
                Some(v) => {
                    if let Some(candidates) = v.with_str(|s| table.get(s)) {
                        candidates.iter().for_each(&mut eval);
                    }
                }
                // Absent: each filter raises the spec's error (or not) on
                // its own.
                None => table.values().flatten().for_each(&mut eval),
            }
        }
        self.scan.iter().for_each(eval);
    }
}

/// The segments of one partition.
#[derive(Default)]
struct Part {
    segments: BTreeMap<u64, Segment>,
    /// How far the sieve's task, or any consumer, read at the tail (the
    /// task starts at the end if none has).
    tail: Option<u64>,
    /// Segments made so far: the order they were made in.
    made: u64,
}

impl Part {
    /// The segment at `base`, fresh when missing or read under an older
    /// set of filters. The segments made longest ago go first: their
    /// events beyond the latest [`DECODED_SEGMENTS`], and whole segments
    /// beyond [`SEGMENTS_PER_PARTITION`].
    fn segment(&mut self, base: u64, generation: u64) -> &mut Segment {
        if self
            .segments
            .get(&base)
            .is_some_and(|s| s.generation != generation)
        {
            self.segments.remove(&base);
        }
        if !self.segments.contains_key(&base) {
            while self.segments.len() >= SEGMENTS_PER_PARTITION {
                let oldest = self
                    .segments
                    .iter()
                    .min_by_key(|(_, s)| s.made)
                    .map(|(b, _)| *b)
                    .expect("not empty");
                self.segments.remove(&oldest);
            }
            self.made += 1;
            self.drop_events();
            self.segments
                .insert(base, Segment::new(base, generation, self.made));
        }
        self.segments.get_mut(&base).expect("inserted")
    }

    /// Drops the events of the segments made longest ago beyond the
    /// latest [`DECODED_SEGMENTS`] or [`DECODED_BYTES`].
    fn drop_events(&mut self) {
        let mut decoded: Vec<&mut Segment> = self
            .segments
            .values_mut()
            .filter(|s| s.events.is_some())
            .collect();
        decoded.sort_unstable_by_key(|s| std::cmp::Reverse(s.made));
        let mut bytes = 0;
        for (i, seg) in decoded.into_iter().enumerate() {
            bytes += seg.bytes;
            // The new segment is not among them yet: it takes one place.
            if i + 1 >= DECODED_SEGMENTS || (i >= 1 && bytes > DECODED_BYTES) {
                seg.events = None;
                seg.bytes = 0;
            }
        }
    }
}

/// Matches of one filter in a segment, as offsets from its base.
#[derive(Default)]
struct Hits {
    matched: Vec<u32>,
    errored: Vec<u32>,
}

struct Segment {
    base: u64,
    generation: u64,
    made: u64,
    /// Offsets `base..filled` are read.
    filled: u64,
    /// By offset from the base; `None`: absent. The whole `None` once
    /// dropped.
    events: Option<Vec<Option<Arc<Decoded>>>>,
    /// Bytes of the records whose events are kept.
    bytes: usize,
    hits: HashMap<u64, Hits>,
    /// Absent offsets, from the base, ascending.
    absent: Vec<u32>,
}

impl Segment {
    fn new(base: u64, generation: u64, made: u64) -> Segment {
        Segment {
            base,
            generation,
            made,
            filled: base,
            events: Some(Vec::new()),
            bytes: 0,
            hits: HashMap::new(),
            absent: Vec::new(),
        }
    }

    /// Reads `filled..until`, sifts it, and wakes the consumers whose
    /// filters matched something in it.
    async fn fill(
        &mut self,
        log: &dyn EventLog,
        metrics: &Metrics,
        topic: &str,
        partition: u32,
        until: u64,
        index: &Index,
    ) -> StorageResult<()> {
        let mut woken: HashMap<u64, &Entry> = HashMap::new();
        while self.filled < until {
            let want = (until - self.filled) as usize;
            let records = log
                .read_until(topic, partition, self.filled, until, want, READ_MAX_BYTES)
                .await?;
            if records.is_empty() {
                // Gone (retention) since the reader saw them.
                self.mark_absent(until);
                break;
            }
            for r in records {
                self.mark_absent(r.offset);
                let rel = (r.offset - self.base) as u32;
                let decoded = match codec::decode(&r.payload) {
                    Ok(StoredEvent { ingest_ms, event }) => {
                        index.sift(&event, |entry, matched, errored| {
                            let hits = self.hits.entry(entry.0).or_default();
                            if matched {
                                hits.matched.push(rel);
                            }
                            if errored {
                                hits.errored.push(rel);
                            }
                            woken.entry(entry.0).or_insert(entry);
                        });
                        Some(Arc::new(Decoded {
                            ingest_ms,
                            event: Arc::new(event),
                        }))
                    }
                    Err(e) => {
                        metrics.corrupt_records.inc();
                        tracing::error!(topic, partition, offset = r.offset, error = %e, "skipping undecodable record");
                        self.absent.push(rel);
                        None
                    }
                };
                if let Some(events) = &mut self.events {
                    events.push(decoded);
                    self.bytes += r.payload.len();
                }
                self.filled = r.offset + 1;
            }
        }
        for entry in woken.into_values() {
            entry.2.iter().for_each(|w| w.notify_one());
        }
        Ok(())
    }

    /// Offsets from `filled` up to `to` that no record filled: absent.
    fn mark_absent(&mut self, to: u64) {
        while self.filled < to {
            self.absent.push((self.filled - self.base) as u32);
            if let Some(events) = &mut self.events {
                events.push(None);
            }
            self.filled += 1;
        }
    }

    /// The offsets filter `id` matched from `from` on, in what is read,
    /// and the rest of the answer but the events.
    fn sifted(&self, id: u64, from: u64) -> (Vec<u64>, Sifted) {
        let rel = (from - self.base) as u32;
        let after = |v: &[u32]| -> Vec<u64> {
            let start = v.partition_point(|o| *o < rel);
            v[start..]
                .iter()
                .map(|o| self.base + u64::from(*o))
                .collect()
        };
        let (matched, errored) = match self.hits.get(&id) {
            Some(h) => (after(&h.matched), after(&h.errored)),
            None => (Vec::new(), Vec::new()),
        };
        let sifted = Sifted {
            matched: Vec::with_capacity(matched.len()),
            upto: self.filled.max(from),
            absent: after(&self.absent),
            errored,
        };
        (matched, sifted)
    }
}

#[cfg(test)]
#[path = "sieve_tests.rs"]
mod tests;
