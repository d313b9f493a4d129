//! Idempotent appends: the index of keys appended within the window, in
//! its own column family (`dedup`), written in the batch of the records it
//! points to, and the in-memory filter in front of it ([`RecentKeys`]).
//!
//! An entry is `topic id (u32 BE) | form | key` → partition (u32 BE), offset (u64
//! BE), expiry (ms since the epoch, u64 BE); a key of 64 hexadecimal digits
//! (a SHA-256, as the ingress makes them) is stored as its 32 bytes (form 1),
//! any other as it is (form 0). A
//! lookup ignores an entry past its expiry, and the column family drops its
//! table files once a window old (FIFO compaction with a time to live, see
//! `localdb`): nothing sweeps the index, so it costs one small write per
//! keyed record, whatever the publish rate.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rocksdb::WriteBatch;

use super::recent::RecentKeys;
use crate::error::Result;
use crate::localdb::{LocalDb, CF_DEDUP, CF_LOG};
use crate::log::{Append, Placed};

pub(super) fn dedup_key(topic: u32, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + key.len());
    k.extend_from_slice(&topic.to_be_bytes());
    // A tag keeps a decoded key apart from a stored one of the same bytes.
    match hex32(key) {
        Some(raw) => {
            k.push(1);
            k.extend_from_slice(&raw);
        }
        None => {
            k.push(0);
            k.extend_from_slice(key.as_bytes());
        }
    }
    k
}

/// The 32 bytes a key of 64 lower-case hexadecimal digits spells.
fn hex32(key: &str) -> Option<[u8; 32]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let b = key.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn dedup_value(partition: u32, offset: u64, expires_ms: u64) -> [u8; 20] {
    let mut v = [0u8; 20];
    v[0..4].copy_from_slice(&partition.to_be_bytes());
    v[4..12].copy_from_slice(&offset.to_be_bytes());
    v[12..20].copy_from_slice(&expires_ms.to_be_bytes());
    v
}

/// Partition, offset and expiry of an index entry.
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

/// The writer thread's idempotency state.
pub(super) struct Dedup {
    /// Zero: keys are ignored.
    window_ms: u64,
    recent: RecentKeys,
    /// Until then the filter has not seen a whole window of keys (they were
    /// appended before the log opened): every keyed append looks in the
    /// index.
    filter_trusted_at: Instant,
}

impl Dedup {
    /// The filter starts empty: when the index holds entries, keyed appends
    /// are checked in it for one window after the log opens (a miss costs a
    /// look at the tables' filters), instead of reading the whole index at
    /// open.
    pub(super) fn open(db: &LocalDb, window: Duration) -> Dedup {
        let mut it = db.db().raw_iterator_cf(db.cf(CF_DEDUP));
        it.seek_to_first();
        let empty = it.key().is_none() && it.status().is_ok();
        Dedup {
            window_ms: window.as_millis() as u64,
            recent: RecentKeys::new(window),
            filter_trusted_at: if empty {
                Instant::now()
            } else {
                Instant::now() + window
            },
        }
    }

    /// The record's key, when keys count.
    pub(super) fn key<'a>(&self, a: &'a Append) -> Option<&'a str> {
        a.key.as_deref().filter(|_| self.window_ms > 0)
    }

    /// Starts the filter's next generation when due; once per commit.
    pub(super) fn tick(&mut self, now: Instant) {
        if self.window_ms > 0 {
            self.recent.rotate(now);
        }
    }

    /// Where an earlier record with `key` is, when one was appended within
    /// the window: in this batch (`batch`), or before (the index). Else
    /// the key's index entry, for [`Dedup::record`].
    pub(super) fn earlier(
        &mut self,
        db: &LocalDb,
        batch: &HashMap<(u32, &str), Placed>,
        topic: u32,
        key: &str,
        now_ms: u64,
    ) -> Result<Result<Placed, Vec<u8>>> {
        if let Some(p) = batch.get(&(topic, key)) {
            return Ok(Ok(Placed {
                duplicate: true,
                ..*p
            }));
        }
        let entry = dedup_key(topic, key);
        if !self.recent.maybe(&entry) && Instant::now() >= self.filter_trusted_at {
            return Ok(Err(entry));
        }
        let Some(v) = db.db().get_pinned_cf(db.cf(CF_DEDUP), &entry)? else {
            return Ok(Err(entry));
        };
        Ok(parse_dedup_value(&v)
            .filter(|(_, _, expires)| now_ms < *expires)
            .map(|(partition, offset, _)| Placed {
                partition,
                offset,
                duplicate: true,
            })
            .ok_or(entry))
    }

    /// Adds a key's index `entry` (from [`Dedup::earlier`]), in the batch
    /// that stores its record.
    pub(super) fn record(
        &mut self,
        db: &LocalDb,
        wb: &mut WriteBatch,
        entry: &[u8],
        at: Placed,
        at_ms: u64,
    ) {
        wb.put_cf(
            db.cf(CF_DEDUP),
            entry,
            dedup_value(at.partition, at.offset, at_ms + self.window_ms),
        );
        self.recent.insert(entry);
    }
}

/// Drops the index of an earlier layout, kept in the `log` column family
/// under `k` and `K` (two range deletions; nothing when absent).
pub(super) fn forget_older_layout(db: &LocalDb) {
    let cf = db.cf(CF_LOG);
    let mut it = db.db().raw_iterator_cf(cf);
    it.seek(b"K");
    let found = it.key().is_some_and(|k| k[0] == b'K');
    it.seek(b"k");
    let found = found || it.key().is_some_and(|k| k[0] == b'k');
    if !found {
        return;
    }
    let mut wb = WriteBatch::default();
    wb.delete_range_cf(cf, b"K", b"L");
    wb.delete_range_cf(cf, b"k", b"l");
    if let Err(e) = db.db().write(wb) {
        tracing::warn!(error = %e, "cannot drop the older idempotency index");
    }
}
