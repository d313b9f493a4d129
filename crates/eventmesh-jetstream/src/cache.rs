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
//!
//! The acknowledgement of this instance's own append usually arrives a
//! moment before the tail brings the record. A reader woken in between
//! would fetch the record from JetStream (a round trip) although the tail
//! is about to hand it over: [`Recent::read_end`] tells readers to stop at
//! what the tail brought while the tail is keeping up, and at the
//! acknowledged end once it has made no progress for [`GRACE`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use eventmesh_storage::Record;

/// Each partition keeps at least this many payload bytes, whatever the
/// topic's budget divided by its partitions.
const MIN_PER_PARTITION: usize = 64 * 1024;

/// How long readers wait for the tail to bring acknowledged records before
/// they read them from JetStream instead (a tail that is lost or stalled).
pub(crate) const GRACE: Duration = Duration::from_millis(50);

pub(crate) struct Recent {
    parts: Vec<Mutex<Part>>,
    per_partition: usize,
    /// Per partition: how far the tail is and whether it keeps up.
    follow: Vec<Follow>,
    epoch: Instant,
}

/// The tail in one partition.
struct Follow {
    /// One past the last offset the tail brought.
    brought: AtomicU64,
    /// When (µs after `epoch`) the tail last brought a record, or an
    /// acknowledgement found it caught up.
    fresh: AtomicU64,
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
            follow: (0..partitions)
                .map(|_| Follow {
                    brought: AtomicU64::new(since),
                    fresh: AtomicU64::new(0),
                })
                .collect(),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// An acknowledgement moved the partition's end from `before`: when
    /// the tail had brought everything up to it, the tail is keeping up and
    /// readers wait for it to bring the new records.
    pub(crate) fn acked(&self, partition: u32, before: u64) {
        self.acked_at(partition, before, self.now());
    }

    fn acked_at(&self, partition: u32, before: u64, now: u64) {
        let Some(f) = self.follow.get(partition as usize) else {
            return;
        };
        if f.brought.load(Ordering::Acquire) >= before {
            f.fresh.store(now, Ordering::Release);
        }
    }

    /// Where a reader of the partition should stop, given its acknowledged
    /// end: what the tail brought while it keeps up (the rest is on its
    /// way), else the acknowledged end.
    pub(crate) fn read_end(&self, partition: u32, acked: u64) -> u64 {
        self.read_end_at(partition, acked, self.now())
    }

    fn read_end_at(&self, partition: u32, acked: u64, now: u64) -> u64 {
        let Some(f) = self.follow.get(partition as usize) else {
            return acked;
        };
        let b = f.brought.load(Ordering::Acquire);
        if b >= acked {
            return acked;
        }
        if now.saturating_sub(f.fresh.load(Ordering::Acquire)) < GRACE.as_micros() as u64 {
            b
        } else {
            acked
        }
    }

    /// Adds the partition's next record (offsets arrive in order); the
    /// oldest ones go past the partition's share of the budget.
    pub(crate) fn push(&self, partition: u32, record: Record) {
        self.push_at(partition, record, self.now());
    }

    fn push_at(&self, partition: u32, record: Record, now: u64) {
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
        let f = &self.follow[partition as usize];
        f.brought.fetch_max(record.offset + 1, Ordering::AcqRel);
        f.fresh.store(now, Ordering::Release);
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
    fn readers_wait_for_the_tail_while_it_keeps_up() {
        let grace = GRACE.as_micros() as u64;
        let c = Recent::new(2, 1 << 20, 10);
        // Nothing acknowledged past the tail: the acknowledged end.
        assert_eq!(c.read_end_at(0, 10, 0), 10);
        assert_eq!(c.read_end_at(0, 7, 0), 7);
        // Offset 10 acknowledged while the tail had brought everything
        // before it: readers stop at 10 until the tail brings it.
        let t = 5 * grace;
        c.acked_at(0, 10, t);
        assert_eq!(c.read_end_at(0, 11, t + 10), 10);
        assert_eq!(c.read_end_at(0, 11, t + grace - 1), 10);
        c.push_at(0, rec(10, 1), t + 20);
        assert_eq!(c.read_end_at(0, 11, t + 30), 11);
        // The other partition's tail made no progress: its acknowledged end.
        assert_eq!(c.read_end_at(1, 12, t + 30), 12);
        // 11 and 12 acknowledged: the tail had brought 10, so it keeps up.
        c.acked_at(0, 11, t + 100);
        c.acked_at(0, 12, t + 100);
        assert_eq!(c.read_end_at(0, 13, t + 100 + grace - 1), 11);
        // Each record the tail brings restarts the grace.
        c.push_at(0, rec(11, 1), t + 100 + grace - 1);
        assert_eq!(c.read_end_at(0, 13, t + 100 + 2 * grace - 2), 12);
        // A tail that brings nothing for the grace: the acknowledged end,
        // and later acknowledgements (the tail behind) do not change that.
        assert_eq!(c.read_end_at(0, 13, t + 100 + 2 * grace), 13);
        c.acked_at(0, 13, t + 100 + 2 * grace);
        assert_eq!(c.read_end_at(0, 14, t + 100 + 2 * grace), 14);
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
