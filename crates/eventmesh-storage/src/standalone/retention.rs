//! Retention on the standalone log: which records a partition's limits no
//! longer keep, found from *marks*, and dropping them.
//!
//! A mark `m | topic id | partition | offset` → `at ms u64 | bytes u64` says
//! that every record below `offset` was appended at `at` or before, and
//! that `bytes` of payload were appended to the partition below `offset`.
//! The writer thread puts one in the batch of a commit that touches a
//! partition when a second has passed since its last mark or the partition
//! took more than the topic's mark spacing in bytes, so marks cost a few
//! small keys per second. Retention cuts a partition at a mark (or at its
//! end when everything expired), deleting the record range and the marks
//! below with two range deletions, and compacts the range so the space is
//! given back.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocksdb::WriteBatch;

use super::dedup::now_ms;
use super::record_key;
use super::topics::{PartitionState, TopicState};
use crate::error::Result;
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::Retention;

pub(super) fn mark_key(topic: u32, partition: u32, offset: u64) -> [u8; 17] {
    let mut k = record_key(topic, partition, offset);
    k[0] = b'm';
    k
}

pub(super) fn mark_value(at_ms: u64, cum: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[0..8].copy_from_slice(&at_ms.to_be_bytes());
    v[8..16].copy_from_slice(&cum.to_be_bytes());
    v
}

/// A mark: offset, time, bytes below the offset.
#[derive(Debug, Clone, Copy)]
struct Mark {
    offset: u64,
    at_ms: u64,
    cum: u64,
}

fn parse_mark(k: &[u8], v: &[u8]) -> Option<Mark> {
    (k.len() == 17 && v.len() == 16).then(|| Mark {
        offset: u64::from_be_bytes(k[9..17].try_into().expect("8 bytes")),
        at_ms: u64::from_be_bytes(v[0..8].try_into().expect("8 bytes")),
        cum: u64::from_be_bytes(v[8..16].try_into().expect("8 bytes")),
    })
}

/// Calls `each` with the partition's marks from `from` upward, in offset
/// order, while it returns `true`.
fn scan_marks(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    from: u64,
    mut each: impl FnMut(Mark) -> bool,
) -> Result<()> {
    let mut it = db.db().raw_iterator_cf(db.cf(CF_LOG));
    let prefix = mark_key(topic, partition, 0);
    it.seek(mark_key(topic, partition, from));
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        if k.len() != 17 || k[..9] != prefix[..9] {
            break;
        }
        match parse_mark(k, v) {
            Some(m) if each(m) => it.next(),
            _ => break,
        }
    }
    Ok(it.status()?)
}

/// The partition's last mark.
fn last_mark(db: &LocalDb, topic: u32, partition: u32) -> Result<Option<Mark>> {
    let mut it = db.db().raw_iterator_cf(db.cf(CF_LOG));
    let prefix = mark_key(topic, partition, 0);
    it.seek_for_prev(mark_key(topic, partition, u64::MAX));
    let found = match (it.key(), it.value()) {
        (Some(k), Some(v)) if k.len() == 17 && k[..9] == prefix[..9] => parse_mark(k, v),
        _ => None,
    };
    it.status()?;
    Ok(found)
}

/// Payload bytes of the partition's records in `from..to`.
fn sum_bytes(db: &LocalDb, topic: u32, partition: u32, from: u64, to: u64) -> Result<u64> {
    if from >= to {
        return Ok(0);
    }
    let mut ro = rocksdb::ReadOptions::default();
    ro.set_iterate_upper_bound(record_key(topic, partition, to).to_vec());
    let mut it = db.db().raw_iterator_cf_opt(db.cf(CF_LOG), ro);
    it.seek(record_key(topic, partition, from));
    let mut sum = 0u64;
    while let Some(v) = it.value() {
        sum += v.len() as u64;
        it.next();
    }
    it.status()?;
    Ok(sum)
}

/// The partition's byte count below `offset` (see [`PartitionState`]).
fn cum_at(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    part: &PartitionState,
    offset: u64,
) -> Result<u64> {
    let mut first = None;
    scan_marks(db, topic, partition, offset, |m| {
        first = Some(m);
        false
    })?;
    Ok(match first {
        Some(m) if m.offset == offset => m.cum,
        Some(m) => m
            .cum
            .saturating_sub(sum_bytes(db, topic, partition, offset, m.offset)?),
        None => {
            let end = part.end.load(Ordering::Acquire);
            let bytes_end = part.bytes_end.load(Ordering::Acquire);
            bytes_end.saturating_sub(sum_bytes(db, topic, partition, offset, end)?)
        }
    })
}

/// Fills a partition's byte counts and last mark from the store (at open).
pub(super) fn load_partition(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    part: &PartitionState,
) -> Result<()> {
    let start = part.start.load(Ordering::Relaxed);
    let end = part.end.load(Ordering::Relaxed);
    let last = last_mark(db, topic, partition)?;
    let (from, cum) = match last {
        Some(m) => (m.offset.max(start), m.cum),
        None => (start, 0),
    };
    part.bytes_end.store(
        cum + sum_bytes(db, topic, partition, from, end)?,
        Ordering::Relaxed,
    );
    part.bytes_start.store(
        cum_at(db, topic, partition, part, start)?,
        Ordering::Relaxed,
    );
    if let Some(m) = last {
        part.mark_ms.store(m.at_ms, Ordering::Relaxed);
        part.mark_cum.store(m.cum, Ordering::Relaxed);
    }
    // The time of the records past the last mark is unknown: they count as
    // appended now, so they are kept a full retention period at least.
    if end > start {
        part.last_append_ms.store(now_ms(), Ordering::Relaxed);
    }
    Ok(())
}

/// Where retention cuts a partition now: every record below the offset
/// returned goes (the start offset itself when nothing does).
fn cut_point(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    part: &PartitionState,
    limits: Retention,
    now: u64,
) -> Result<u64> {
    let start = part.start.load(Ordering::Acquire);
    let end = part.end.load(Ordering::Acquire);
    let mut cut = start;
    if end <= start {
        return Ok(cut);
    }
    if limits.ms > 0 {
        let cutoff = now.saturating_sub(limits.ms);
        if part.last_append_ms.load(Ordering::Acquire) <= cutoff {
            cut = end;
        } else {
            scan_marks(db, topic, partition, start, |m| {
                if m.at_ms <= cutoff {
                    cut = cut.max(m.offset.min(end));
                    true
                } else {
                    false
                }
            })?;
        }
    }
    if limits.bytes > 0 && cut < end {
        let bytes_end = part.bytes_end.load(Ordering::Acquire);
        // The first mark from which the rest fits; else the last one, so
        // that the newest records stay even when one stretch is too large.
        let mut fit = None;
        let mut last = None;
        scan_marks(db, topic, partition, start, |m| {
            last = Some(m.offset);
            if bytes_end.saturating_sub(m.cum) <= limits.bytes {
                fit = Some(m.offset);
                false
            } else {
                true
            }
        })?;
        if let Some(o) = fit.or(last) {
            cut = cut.max(o.min(end));
        }
    }
    Ok(cut)
}

/// Drops the partition's records and marks below `cut`, and moves its start
/// and byte count. The caller holds the log's trim lock.
pub(super) fn truncate(
    db: &LocalDb,
    topic: &TopicState,
    partition: u32,
    part: &PartitionState,
    cut: u64,
) -> Result<bool> {
    let cut = cut.min(part.end.load(Ordering::Acquire));
    if cut <= part.start.load(Ordering::Acquire) {
        return Ok(false);
    }
    let cum = cum_at(db, topic.id, partition, part, cut)?;
    let cf = db.cf(CF_LOG);
    let mut wb = WriteBatch::default();
    wb.delete_range_cf(
        cf,
        record_key(topic.id, partition, 0),
        record_key(topic.id, partition, cut),
    );
    wb.delete_range_cf(
        cf,
        mark_key(topic.id, partition, 0),
        mark_key(topic.id, partition, cut),
    );
    db.db().write(wb)?;
    part.start.fetch_max(cut, Ordering::AcqRel);
    part.bytes_start.fetch_max(cum, Ordering::AcqRel);
    Ok(true)
}

/// A partition cut by a retention pass.
pub(super) struct Cut {
    pub(super) topic: u32,
    pub(super) partition: u32,
    pub(super) offset: u64,
}

/// One retention pass over `topics`: cuts each partition where its limits
/// say. Returns what was cut, for compaction.
pub(super) fn pass(
    db: &LocalDb,
    topics: &[Arc<TopicState>],
    default: Retention,
) -> Result<Vec<Cut>> {
    let now = now_ms();
    let mut cuts = Vec::new();
    for t in topics {
        let limits = t.own_retention().unwrap_or(default);
        if limits.is_forever() || t.deleted.load(Ordering::Acquire) {
            continue;
        }
        for (p, part) in t.parts.iter().enumerate() {
            let p = p as u32;
            let cut = cut_point(db, t.id, p, part, limits, now)?;
            if truncate(db, t, p, part, cut)? {
                tracing::debug!(topic = %t.name, partition = p, start = cut, "retention dropped records");
                cuts.push(Cut {
                    topic: t.id,
                    partition: p,
                    offset: cut,
                });
            }
        }
    }
    Ok(cuts)
}

/// Compacts the ranges retention dropped, so their files go. Automatic
/// compactions go on meanwhile (a manual compaction would otherwise hold
/// them back, and level 0 would fill up under a steady load).
pub(super) fn compact(db: &LocalDb, cuts: &[Cut]) {
    for c in cuts {
        compact_range(
            db,
            &record_key(c.topic, c.partition, 0),
            &record_key(c.topic, c.partition, c.offset),
        );
    }
}

/// Compacts one key range of the log, beside the automatic compactions.
pub(super) fn compact_range(db: &LocalDb, from: &[u8], to: &[u8]) {
    let mut opts = rocksdb::CompactOptions::default();
    opts.set_exclusive_manual_compaction(false);
    db.db()
        .compact_range_cf_opt(db.cf(CF_LOG), Some(from), Some(to), &opts);
}
