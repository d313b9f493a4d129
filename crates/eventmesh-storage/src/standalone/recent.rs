//! Which idempotency keys may have been appended within the window, in
//! memory: two generations of a Bloom filter, each covering one window.
//! "No" is certain, so nearly every new key is stored without a lookup in
//! the index on disk; "maybe" (a key seen, or a false positive, about 5 % at
//! ten million keys per window) is settled by the index.
//!
//! Invariant: a key inserted at time t answers "maybe" until at least
//! t + window (it stays in the current generation until the next rotation
//! and in the previous one for a whole window after that).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// Bits of one generation (8 MiB).
const BITS: usize = 1 << 26;
/// Bits set per key.
const HASHES: u64 = 7;

struct Bloom(Vec<u64>);

impl Bloom {
    fn new() -> Bloom {
        Bloom(vec![0; BITS / 64])
    }

    fn positions(h: (u64, u64)) -> impl Iterator<Item = usize> {
        (0..HASHES).map(move |i| (h.0.wrapping_add(i.wrapping_mul(h.1)) as usize) % BITS)
    }

    fn insert(&mut self, h: (u64, u64)) {
        for p in Self::positions(h) {
            self.0[p / 64] |= 1 << (p % 64);
        }
    }

    fn contains(&self, h: (u64, u64)) -> bool {
        Self::positions(h).all(|p| self.0[p / 64] & (1 << (p % 64)) != 0)
    }
}

pub(crate) struct RecentKeys {
    window: Duration,
    current: Bloom,
    previous: Bloom,
    since: Instant,
}

/// Two independent hashes of a topic's key (double hashing).
fn hashes(topic: u32, key: &str) -> (u64, u64) {
    let mut a = DefaultHasher::new();
    (topic, key).hash(&mut a);
    let first = a.finish();
    let mut b = DefaultHasher::new();
    (first, key).hash(&mut b);
    (first, b.finish() | 1)
}

impl RecentKeys {
    pub(crate) fn new(window: Duration) -> RecentKeys {
        RecentKeys {
            window,
            current: Bloom::new(),
            previous: Bloom::new(),
            since: Instant::now(),
        }
    }

    fn rotate(&mut self) {
        if self.since.elapsed() >= self.window {
            self.previous = std::mem::replace(&mut self.current, Bloom::new());
            self.since = Instant::now();
        }
    }

    pub(crate) fn insert(&mut self, topic: u32, key: &str) {
        self.rotate();
        self.current.insert(hashes(topic, key));
    }

    /// False: certainly not appended within the window.
    pub(crate) fn maybe(&mut self, topic: u32, key: &str) -> bool {
        self.rotate();
        let h = hashes(topic, key);
        self.current.contains(h) || self.previous.contains(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_remembered_and_others_are_not() {
        let mut r = RecentKeys::new(Duration::from_secs(60));
        for i in 0..10_000 {
            r.insert(1, &format!("k{i}"));
        }
        assert!((0..10_000).all(|i| r.maybe(1, &format!("k{i}"))));
        let false_positives = (0..10_000)
            .filter(|i| r.maybe(1, &format!("other{i}")))
            .count();
        assert_eq!(false_positives, 0, "10,000 keys in 64 Mibit");
        assert!(!r.maybe(2, "k1"), "keys are per topic");
    }

    #[test]
    fn a_key_outlives_one_rotation_and_not_two() {
        let mut r = RecentKeys::new(Duration::from_millis(50));
        r.insert(1, "k");
        std::thread::sleep(Duration::from_millis(60));
        assert!(r.maybe(1, "k"), "kept a whole window after the rotation");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!r.maybe(1, "k"));
    }
}
