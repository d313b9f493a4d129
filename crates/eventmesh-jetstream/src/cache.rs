//! The latest records of each partition of a followed topic, as the tail
//! receives them, so that a reader keeping up is answered from memory
//! instead of by a read round trip to JetStream.
//!
//! The tail sees every record of the stream from where it started, in
//! sequence order and without gaps (it is an ordered consumer), so each
//! partition's cache holds *every* record of the partition from an offset
//! on (`since`). A read from `since` or above is answered from the cache
//! alone; a read from below goes to JetStream. Evicting the oldest record
//! moves `since` past it.

use std::collections::VecDeque;
use std::sync::Mutex;

use eventmesh_storage::Record;

/// Each partition keeps at least this many payload bytes, whatever the
/// topic's budget divided by its partitions.
const MIN_PER_PARTITION: usize = 64 * 1024;

pub(crate) struct Recent {
    parts: Vec<Mutex<Part>>,
    per_partition: usize,
}

struct Part {
    /// Every record of the partition at this offset or above is here.
    since: u64,
    records: VecDeque<Record>,
    bytes: usize,
}

impl Recent {
    /// A cache of about `budget` payload bytes over `partitions`, complete
    /// from offset `since` on (the tail's first sequence − 1).
    pub(crate) fn new(partitions: u32, budget: usize, since: u64) -> Recent {
        let per_partition = (budget / partitions.max(1) as usize).max(MIN_PER_PARTITION);
        Recent {
            parts: (0..partitions)
                .map(|_| {
                    Mutex::new(Part {
                        since,
                        records: VecDeque::new(),
                        bytes: 0,
                    })
                })
                .collect(),
            per_partition,
        }
    }

    /// Adds the partition's next record (offsets arrive in order); the
    /// oldest ones go past the partition's share of the budget.
    pub(crate) fn push(&self, partition: u32, record: Record) {
        let Some(part) = self.parts.get(partition as usize) else {
            return;
        };
        let mut part = part.lock().expect("cache lock");
        if record.offset < part.since
            || part
                .records
                .back()
                .is_some_and(|r| r.offset >= record.offset)
        {
            // Already known (a consumer recreated from an earlier sequence).
            return;
        }
        part.bytes += record.payload.len();
        part.records.push_back(record);
        while part.bytes > self.per_partition && part.records.len() > 1 {
            let old = part.records.pop_front().expect("a record to evict");
            part.bytes -= old.payload.len();
            part.since = old.offset + 1;
        }
    }

    /// The partition's records at offset `from` and above, at most `max`
    /// and about `max_bytes` (at least one when any is cached); `None` when
    /// the cache does not reach back to `from`.
    pub(crate) fn read(
        &self,
        partition: u32,
        from: u64,
        max: usize,
        max_bytes: usize,
    ) -> Option<Vec<Record>> {
        let part = self
            .parts
            .get(partition as usize)?
            .lock()
            .expect("cache lock");
        if from < part.since {
            return None;
        }
        let start = part.records.partition_point(|r| r.offset < from);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for r in part.records.range(start..).take(max) {
            if !out.is_empty() && bytes.saturating_add(r.payload.len()) > max_bytes {
                break;
            }
            bytes = bytes.saturating_add(r.payload.len());
            out.push(r.clone());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec(offset: u64, len: usize) -> Record {
        Record {
            offset,
            payload: Bytes::from(vec![b'x'; len]),
        }
    }

    fn offsets(v: Option<Vec<Record>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|r| r.offset).collect())
    }

    #[test]
    fn answers_from_since_on_and_refuses_below() {
        let c = Recent::new(2, 1 << 20, 10);
        c.push(0, rec(10, 1));
        c.push(0, rec(13, 1));
        c.push(1, rec(11, 1));
        assert_eq!(offsets(c.read(0, 10, 10, 1 << 20)), Some(vec![10, 13]));
        assert_eq!(offsets(c.read(0, 11, 10, 1 << 20)), Some(vec![13]));
        assert_eq!(offsets(c.read(0, 14, 10, 1 << 20)), Some(vec![]));
        assert_eq!(offsets(c.read(1, 10, 10, 1 << 20)), Some(vec![11]));
        assert_eq!(offsets(c.read(0, 9, 10, 1 << 20)), None);
        assert_eq!(offsets(c.read(2, 10, 10, 1 << 20)), None);
    }

    #[test]
    fn limits_count_and_bytes_but_returns_one() {
        let c = Recent::new(1, 1 << 20, 0);
        for o in 0..5 {
            c.push(0, rec(o, 100));
        }
        assert_eq!(offsets(c.read(0, 1, 2, 1 << 20)), Some(vec![1, 2]));
        assert_eq!(offsets(c.read(0, 0, 10, 250)), Some(vec![0, 1]));
        assert_eq!(offsets(c.read(0, 0, 10, 10)), Some(vec![0]));
    }

    #[test]
    fn eviction_moves_since_and_repeats_are_ignored() {
        let c = Recent::new(1, 0, 0); // the per-partition minimum applies
        let big = MIN_PER_PARTITION / 2;
        c.push(0, rec(0, big));
        c.push(0, rec(1, big));
        c.push(0, rec(2, big));
        assert_eq!(offsets(c.read(0, 0, 10, usize::MAX)), None);
        assert_eq!(offsets(c.read(0, 1, 10, usize::MAX)), Some(vec![1, 2]));
        c.push(0, rec(2, big));
        c.push(0, rec(0, big));
        assert_eq!(offsets(c.read(0, 1, 10, usize::MAX)), Some(vec![1, 2]));
    }
}
