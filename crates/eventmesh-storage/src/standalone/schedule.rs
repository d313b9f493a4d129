//! Events held back until their due time, beside their partition, in the
//! `log` column family: `s | topic id | partition | due ms (u64 BE) | key`
//! → the stored event. Keys sort by due time within a partition, so the
//! due ones are a range scan from the partition's start, and nothing is
//! kept in memory but each partition's count. Writes are synced before
//! they are answered, like appends.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use rocksdb::{WriteBatch, WriteOptions};

use super::topics::TopicState;
use crate::error::Result;
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::{Scheduled, ScheduledSummary};

const TAG: u8 = b's';
/// Tag, topic id, partition, due time.
const HEAD: usize = 17;

fn prefix(topic: u32, partition: u32) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = TAG;
    k[1..5].copy_from_slice(&topic.to_be_bytes());
    k[5..9].copy_from_slice(&partition.to_be_bytes());
    k
}

fn key(topic: u32, partition: u32, due_ms: u64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(HEAD + id.len());
    k.extend_from_slice(&prefix(topic, partition));
    k.extend_from_slice(&due_ms.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// The range of every held-back event of a topic (for its deletion).
pub(super) fn topic_range(topic: u32) -> ([u8; 5], [u8; 5]) {
    let (mut from, mut to) = ([TAG; 5], [TAG; 5]);
    from[1..5].copy_from_slice(&topic.to_be_bytes());
    to[1..5].copy_from_slice(&topic.saturating_add(1).to_be_bytes());
    (from, to)
}

/// Counts per partition, read from the store at first use; the lock also
/// makes each check-and-write one step.
#[derive(Default)]
pub(super) struct Counts(Mutex<HashMap<(u32, u32), u64>>);

fn synced() -> WriteOptions {
    let mut o = WriteOptions::default();
    o.set_sync(true);
    o
}

/// Calls `each` with the partition's held-back events from the earliest,
/// while it returns true and the due time is at most `until_ms`.
fn scan(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    until_ms: u64,
    mut each: impl FnMut(Scheduled) -> bool,
) -> Result<()> {
    let pre = prefix(topic, partition);
    let mut it = db.db().raw_iterator_cf(db.cf(CF_LOG));
    it.seek(pre);
    while let (Some(k), Some(v)) = (it.key(), it.value()) {
        if k.len() < HEAD || k[..9] != pre {
            break;
        }
        let due_ms = u64::from_be_bytes(k[9..17].try_into().expect("8 bytes"));
        if due_ms > until_ms {
            break;
        }
        let entry = Scheduled {
            partition,
            due_ms,
            key: String::from_utf8_lossy(&k[HEAD..]).into_owned(),
            payload: Bytes::copy_from_slice(v),
            handle: 0,
        };
        if !each(entry) {
            break;
        }
        it.next();
    }
    Ok(it.status()?)
}

impl Counts {
    fn with<T>(
        &self,
        db: &LocalDb,
        topic: u32,
        partition: u32,
        f: impl FnOnce(&mut u64) -> Result<T>,
    ) -> Result<T> {
        let mut counts = self.0.lock().expect("counts lock");
        let n = match counts.get_mut(&(topic, partition)) {
            Some(n) => n,
            None => {
                let mut n = 0u64;
                scan(db, topic, partition, u64::MAX, |_| {
                    n += 1;
                    true
                })?;
                counts.entry((topic, partition)).or_insert(n)
            }
        };
        f(n)
    }

    /// Forgets a deleted topic's counts.
    pub(super) fn forget(&self, topic: u32) {
        self.0
            .lock()
            .expect("counts lock")
            .retain(|(t, _), _| *t != topic);
    }
}

pub(super) fn put(
    db: &LocalDb,
    counts: &Counts,
    topic: &TopicState,
    entries: Vec<Scheduled>,
) -> Result<()> {
    let mut by_partition: HashMap<u32, Vec<Scheduled>> = HashMap::new();
    for e in entries {
        topic.part(e.partition)?;
        by_partition.entry(e.partition).or_default().push(e);
    }
    let cf = db.cf(CF_LOG);
    for (p, entries) in by_partition {
        counts.with(db, topic.id, p, |n| {
            let mut wb = WriteBatch::default();
            let mut added = 0;
            let mut seen = std::collections::HashSet::new();
            for e in entries {
                let k = key(topic.id, p, e.due_ms, &e.key);
                if db.db().get_pinned_cf(cf, &k)?.is_none() && seen.insert(k.clone()) {
                    added += 1;
                }
                wb.put_cf(cf, k, &e.payload);
            }
            db.db().write_opt(wb, &synced())?;
            *n += added;
            Ok(())
        })?;
    }
    Ok(())
}

pub(super) fn due(
    db: &LocalDb,
    topic: u32,
    partition: u32,
    until_ms: u64,
    max: usize,
) -> Result<Vec<Scheduled>> {
    let mut out = Vec::new();
    scan(db, topic, partition, until_ms, |e| {
        out.push(e);
        out.len() < max
    })?;
    Ok(out)
}

pub(super) fn remove(
    db: &LocalDb,
    counts: &Counts,
    topic: u32,
    partition: u32,
    entries: &[(u64, String)],
) -> Result<usize> {
    let cf = db.cf(CF_LOG);
    counts.with(db, topic, partition, |n| {
        let mut wb = WriteBatch::default();
        let mut removed = 0;
        for (due_ms, id) in entries {
            let k = key(topic, partition, *due_ms, id);
            if db.db().get_pinned_cf(cf, &k)?.is_some() {
                removed += 1;
                wb.delete_cf(cf, k);
            }
        }
        if removed > 0 {
            db.db().write_opt(wb, &synced())?;
        }
        *n = n.saturating_sub(removed as u64);
        Ok(removed)
    })
}

pub(super) fn summary(
    db: &LocalDb,
    counts: &Counts,
    topic: u32,
    partition: u32,
) -> Result<ScheduledSummary> {
    let count = counts.with(db, topic, partition, |n| Ok(*n))?;
    let mut next_due_ms = None;
    scan(db, topic, partition, u64::MAX, |e| {
        next_due_ms = Some(e.due_ms);
        false
    })?;
    Ok(ScheduledSummary { count, next_due_ms })
}
