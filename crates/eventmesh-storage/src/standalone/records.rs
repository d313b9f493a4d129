//! The records of the `log` column family: their keys, and the reads of a
//! partition's range of them.

use bytes::Bytes;
use rocksdb::{ReadOptions, ReadTier};

use crate::error::Result;
use crate::localdb::{LocalDb, CF_LOG};
use crate::log::Record;

/// A record's key: `d | topic id | partition | offset`, each big-endian,
/// so that a partition's records sort by offset.
pub(super) fn record_key(topic: u32, partition: u32, offset: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = b'd';
    k[1..5].copy_from_slice(&topic.to_be_bytes());
    k[5..9].copy_from_slice(&partition.to_be_bytes());
    k[9..17].copy_from_slice(&offset.to_be_bytes());
    k
}

/// Which records of one partition a read wants.
pub(super) struct ReadRange {
    pub(super) id: u32,
    pub(super) partition: u32,
    pub(super) from: u64,
    pub(super) end: u64,
    pub(super) max_records: usize,
    pub(super) max_bytes: usize,
}

/// Reads the records of `range` from the tier given; `None` when the tier
/// is the block cache and some record would have to come from the disk.
pub(super) fn read_records(
    db: &LocalDb,
    range: &ReadRange,
    tier: ReadTier,
) -> Result<Option<Vec<Record>>> {
    let mut ro = ReadOptions::default();
    ro.set_read_tier(tier);
    // A read that has to go to the disk is a backlog being caught up on,
    // read once and in order: putting its blobs and blocks in the cache
    // would cost an insert and an eviction per record and push out what
    // the readers at the tail need. The files stay in the page cache.
    ro.fill_cache(false);
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

/// First and next offset of a partition, from the stored keys.
pub(super) fn scan_bounds(db: &LocalDb, topic: u32, partition: u32) -> Result<(u64, u64)> {
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

#[cfg(test)]
mod tests {
    use super::record_key;

    /// The memtable's insert hints are kept per partition: the prefix
    /// they are kept by is what a partition's record keys share, no more.
    #[test]
    fn a_partitions_record_keys_share_the_hint_prefix() {
        use crate::localdb::LOG_PARTITION_PREFIX as P;
        let key = |t, p, o| record_key(t, p, o)[..P].to_vec();
        assert_eq!(key(7, 2, 0), key(7, 2, u64::MAX));
        assert_ne!(key(7, 2, 0), key(7, 3, 0));
        assert_ne!(key(7, 2, 0), key(8, 2, 0));
    }
}
