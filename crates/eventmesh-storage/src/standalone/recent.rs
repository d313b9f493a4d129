//! Which commit groups may hold a key appended within the window, in
//! memory: two generations of a hash table, each covering one window. An
//! entry is 8 bytes: a 32-bit fingerprint of the key and the low 32 bits
//! of the group's number in the journal (see `dedup`). A key is a
//! multimap key: keys of the same fingerprint keep one entry each, and a
//! look returns every group they point to, for the journal to settle.
//!
//! Invariant: a key inserted at time t is found until at least t + window
//! (it stays in the current generation until the next rotation and in the
//! previous one for a whole window after that).

use std::time::{Duration, Instant};

use hashbrown::HashTable;

/// One entry: fingerprint (high half) and group (low half).
fn entry(fingerprint: u32, group: u64) -> u64 {
    u64::from(fingerprint) << 32 | (group & 0xFFFF_FFFF)
}

/// The table's hash of a fingerprint: the fingerprint spread over 64 bits
/// (the table takes its buckets from the low bits and its tags from the
/// high ones).
fn spread(fingerprint: u32) -> u64 {
    u64::from(fingerprint).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn rehash(e: &u64) -> u64 {
    spread((e >> 32) as u32)
}

pub(crate) struct RecentKeys {
    window: Duration,
    current: HashTable<u64>,
    previous: HashTable<u64>,
    since: Instant,
}

impl RecentKeys {
    pub(crate) fn new(window: Duration, now: Instant) -> RecentKeys {
        RecentKeys {
            window,
            current: HashTable::new(),
            previous: HashTable::new(),
            since: now,
        }
    }

    /// Starts a new generation when the current one has covered a window
    /// (called once per group commit, with its time). The new one is sized
    /// for as many keys as the one before, so that it seldom grows (a
    /// growth moves every entry).
    pub(crate) fn rotate(&mut self, now: Instant) {
        if now.saturating_duration_since(self.since) >= self.window {
            let size = self.current.len() + self.current.len() / 8;
            self.previous = std::mem::replace(&mut self.current, HashTable::with_capacity(size));
            self.since = now;
        }
    }

    pub(crate) fn insert(&mut self, fingerprint: u32, group: u64) {
        self.current
            .insert_unique(spread(fingerprint), entry(fingerprint, group), rehash);
    }

    /// The groups (low 32 bits) that may hold a key of this fingerprint,
    /// newest generation first.
    pub(crate) fn groups(&self, fingerprint: u32) -> impl Iterator<Item = u32> + '_ {
        let h = spread(fingerprint);
        self.current
            .iter_hash(h)
            .chain(self.previous.iter_hash(h))
            .filter(move |e| (**e >> 32) as u32 == fingerprint)
            .map(|e| *e as u32)
    }

    /// Keys held (both generations).
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    /// Bytes the two generations have allocated: their buckets (a table
    /// keeps at most 7 entries in 8 buckets and has a power of two of
    /// them) and a control byte per bucket.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.current.allocation_size() + self.previous.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_of_a_fingerprint_is_found() {
        let now = Instant::now();
        let mut r = RecentKeys::new(Duration::from_secs(60), now);
        for i in 0..100_000u32 {
            r.insert(i.wrapping_mul(2_654_435_761), u64::from(i));
        }
        assert!((0..100_000u32).all(|i| r.groups(i.wrapping_mul(2_654_435_761)).eq([i])));
        // Two keys of one fingerprint: both groups come back.
        r.insert(7u32.wrapping_mul(2_654_435_761), 1 << 40 | 99);
        let mut both: Vec<u32> = r.groups(7u32.wrapping_mul(2_654_435_761)).collect();
        both.sort_unstable();
        assert_eq!(both, vec![7, 99]);
        assert_eq!(r.groups(1).count() + r.groups(3).count(), 0);
        assert_eq!(r.len(), 100_001);
        // 100,001 entries need 2^17 buckets of 8 bytes and a control byte.
        let buckets = 1 << 17;
        assert!(
            (buckets * 9..buckets * 9 + 64).contains(&r.allocated_bytes()),
            "{}",
            r.allocated_bytes()
        );
    }

    #[test]
    fn a_key_outlives_one_rotation_and_not_two() {
        let window = Duration::from_millis(50);
        let t0 = Instant::now();
        let mut r = RecentKeys::new(window, t0);
        r.insert(42, 5);
        r.rotate(t0 + window / 2);
        assert!(r.groups(42).eq([5]), "no rotation within a window");
        r.rotate(t0 + window);
        assert!(
            r.groups(42).eq([5]),
            "kept a whole window after the rotation"
        );
        r.rotate(t0 + 2 * window);
        assert_eq!(r.groups(42).count(), 0);
        assert_eq!(r.len(), 0);
        // The new generation was sized for the one before it (one key).
        assert!(r.allocated_bytes() > 0);
        r.rotate(t0 + 3 * window);
        r.rotate(t0 + 4 * window);
        assert_eq!(r.allocated_bytes(), 0, "two empty generations hold nothing");
    }
}
