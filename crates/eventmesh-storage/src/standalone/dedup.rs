//! Idempotent appends: the index of keys appended within the window, kept
//! in the `log` column family with the records it points to, and the
//! in-memory filter in front of it ([`RecentKeys`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rocksdb::{ColumnFamily, WriteBatch};

use super::recent::RecentKeys;
use crate::error::Result;
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::{Append, Placed};

/// Idempotency index, in the `log` column family: `k | topic id | key` →
/// partition (u32 BE), offset (u64 BE), append time (ms, u64 BE); and, to
/// find what expired, `K | append time | topic id | key` → nothing. Both
/// are written in the same batch as the record.
fn dedup_key(topic: u32, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + key.len());
    k.push(b'k');
    k.extend_from_slice(&topic.to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

fn dedup_time_key(at_ms: u64, topic: u32, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + key.len());
    k.push(b'K');
    k.extend_from_slice(&at_ms.to_be_bytes());
    k.extend_from_slice(&topic.to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

fn dedup_value(partition: u32, offset: u64, at_ms: u64) -> [u8; 20] {
    let mut v = [0u8; 20];
    v[0..4].copy_from_slice(&partition.to_be_bytes());
    v[4..12].copy_from_slice(&offset.to_be_bytes());
    v[12..20].copy_from_slice(&at_ms.to_be_bytes());
    v
}

/// Partition, offset and append time of an index entry.
fn parse_dedup_value(v: &[u8]) -> Option<(u32, u64, u64)> {
    (v.len() == 20).then(|| {
        (
            u32::from_be_bytes(v[0..4].try_into().expect("4 bytes")),
            u64::from_be_bytes(v[4..12].try_into().expect("8 bytes")),
            u64::from_be_bytes(v[12..20].try_into().expect("8 bytes")),
        )
    })
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Most expired index entries one sweep removes (a sweep runs at most once a
/// second, on the writer thread, between commits).
const SWEEP_MAX: usize = 10_000;

/// Removes index entries older than the window: each time key below the
/// cut, and its entry when the entry still has that time (a key appended
/// again since has a newer entry, which stays).
pub(super) fn sweep(db: &LocalDb, window_ms: u64) -> Result<usize> {
    let cut = now_ms().saturating_sub(window_ms);
    let cf = db.cf(CF_LOG);
    let mut it = db.db().raw_iterator_cf(cf);
    it.seek(b"K");
    let mut wb = WriteBatch::default();
    let mut removed = 0;
    while let Some(k) = it.key() {
        if k.first() != Some(&b'K') || k.len() < 13 || removed >= SWEEP_MAX {
            break;
        }
        let at = u64::from_be_bytes(k[1..9].try_into().expect("8 bytes"));
        if at >= cut {
            break;
        }
        let topic = u32::from_be_bytes(k[9..13].try_into().expect("4 bytes"));
        let key = String::from_utf8_lossy(&k[13..]).to_string();
        let entry = dedup_key(topic, &key);
        if let Some(v) = db.db().get_pinned_cf(cf, &entry)? {
            if parse_dedup_value(&v).is_some_and(|(_, _, t)| t == at) {
                wb.delete_cf(cf, &entry);
            }
        }
        wb.delete_cf(cf, k);
        removed += 1;
        it.next();
    }
    it.status()?;
    if removed > 0 {
        db.db().write(wb)?;
    }
    Ok(removed)
}

/// The writer thread's idempotency state.
pub(super) struct Dedup {
    /// Zero: keys are ignored.
    window_ms: u64,
    recent: RecentKeys,
    last_sweep: Instant,
}

impl Dedup {
    /// Fills the filter with the keys the index holds from within the window.
    pub(super) fn open(db: &LocalDb, window: Duration) -> Dedup {
        let mut d = Dedup {
            window_ms: window.as_millis() as u64,
            recent: RecentKeys::new(window),
            last_sweep: Instant::now(),
        };
        if d.window_ms > 0 {
            if let Err(e) = d.load(db) {
                tracing::warn!(error = %e, "cannot read the idempotency index; every keyed append checks it");
            }
        }
        d
    }

    fn load(&mut self, db: &LocalDb) -> Result<()> {
        let from = now_ms().saturating_sub(self.window_ms);
        let mut start = vec![b'K'];
        start.extend_from_slice(&from.to_be_bytes());
        let mut it = db.db().raw_iterator_cf(db.cf(CF_LOG));
        it.seek(&start);
        while let Some(k) = it.key() {
            if k.first() != Some(&b'K') || k.len() < 13 {
                break;
            }
            let topic = u32::from_be_bytes(k[9..13].try_into().expect("4 bytes"));
            self.recent
                .insert(topic, &String::from_utf8_lossy(&k[13..]));
            it.next();
        }
        Ok(it.status()?)
    }

    /// The record's key, when keys count.
    pub(super) fn key<'a>(&self, a: &'a Append) -> Option<&'a str> {
        a.key.as_deref().filter(|_| self.window_ms > 0)
    }

    /// Where an earlier record with `key` is, when one was appended within
    /// the window: in this batch (`batch`), or before (the index).
    pub(super) fn earlier(
        &mut self,
        db: &LocalDb,
        batch: &HashMap<(u32, &str), Placed>,
        topic: u32,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<Placed>> {
        if let Some(p) = batch.get(&(topic, key)) {
            return Ok(Some(Placed {
                duplicate: true,
                ..*p
            }));
        }
        if !self.recent.maybe(topic, key) {
            return Ok(None);
        }
        let Some(v) = db
            .db()
            .get_pinned_cf(db.cf(CF_LOG), dedup_key(topic, key))?
        else {
            return Ok(None);
        };
        Ok(parse_dedup_value(&v)
            .filter(|(_, _, at)| now_ms.saturating_sub(*at) < self.window_ms)
            .map(|(partition, offset, _)| Placed {
                partition,
                offset,
                duplicate: true,
            }))
    }

    /// Adds `key` to the index, in the batch that stores its record.
    pub(super) fn record(
        &mut self,
        wb: &mut WriteBatch,
        cf: &ColumnFamily,
        topic: u32,
        key: &str,
        at: Placed,
        at_ms: u64,
    ) {
        wb.put_cf(
            cf,
            dedup_key(topic, key),
            dedup_value(at.partition, at.offset, at_ms),
        );
        wb.put_cf(cf, dedup_time_key(at_ms, topic, key), []);
        self.recent.insert(topic, key);
    }

    /// At most once a second: removes what expired.
    pub(super) fn sweep_if_due(&mut self, db: &LocalDb) {
        if self.window_ms == 0 || self.last_sweep.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_sweep = Instant::now();
        if let Err(e) = sweep(db, self.window_ms) {
            tracing::warn!(error = %e, "cannot remove expired idempotency keys");
        }
    }
}
