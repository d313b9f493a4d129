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

/// Blocks of one generation: 8 MiB of 512-bit blocks.
const BLOCKS: usize = (8 << 20) / 64;
/// Bits set per key, all in one block (one cache line per look).
const HASHES: u32 = 7;

/// A blocked Bloom filter: each key sets its bits in one 64-byte block, so
/// an insert or a look costs one cache miss, not one per bit (at a false
/// positive rate a little above an unblocked filter of the same size).
struct Bloom(Vec<[u64; 8]>);

impl Bloom {
    fn new() -> Bloom {
        Bloom(vec![[0; 8]; BLOCKS])
    }

    /// The block of a key and the bits it sets there.
    fn probe(h: (u64, u64)) -> (usize, [u64; 8]) {
        let mut mask = [0u64; 8];
        for i in 0..HASHES {
            let bit = (h.1 >> (9 * i)) & 511;
            mask[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        ((h.0 % BLOCKS as u64) as usize, mask)
    }

    fn insert(&mut self, h: (u64, u64)) {
        let (b, mask) = Self::probe(h);
        for (w, m) in self.0[b].iter_mut().zip(mask) {
            *w |= m;
        }
    }

    fn contains(&self, h: (u64, u64)) -> bool {
        let (b, mask) = Self::probe(h);
        self.0[b].iter().zip(mask).all(|(w, m)| w & m == m)
    }
}

pub(crate) struct RecentKeys {
    window: Duration,
    current: Bloom,
    previous: Bloom,
    since: Instant,
}

/// Two independent hashes of an index key (`topic | form | key`, see
/// `dedup`). A key that is a decoded SHA-256 (form 1) is random already:
/// its own bytes are the hashes, mixed with the topic.
fn hashes(entry: &[u8]) -> (u64, u64) {
    if entry.len() == 37 && entry[4] == 1 {
        let topic = u64::from(u32::from_be_bytes(entry[0..4].try_into().expect("4 bytes")));
        let word = |i: usize| u64::from_le_bytes(entry[i..i + 8].try_into().expect("8 bytes"));
        return (
            word(5) ^ topic.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            word(13),
        );
    }
    let mut a = DefaultHasher::new();
    entry.hash(&mut a);
    let first = a.finish();
    let mut b = DefaultHasher::new();
    (first, entry).hash(&mut b);
    (first, b.finish())
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

    /// Starts a new generation when the current one has covered a window
    /// (called once per group commit, with its time).
    pub(crate) fn rotate(&mut self, now: Instant) {
        if now.saturating_duration_since(self.since) >= self.window {
            self.previous = std::mem::replace(&mut self.current, Bloom::new());
            self.since = now;
        }
    }

    pub(crate) fn insert(&mut self, entry: &[u8]) {
        self.current.insert(hashes(entry));
    }

    /// False: certainly not appended within the window.
    pub(crate) fn maybe(&self, entry: &[u8]) -> bool {
        let h = hashes(entry);
        self.current.contains(h) || self.previous.contains(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::standalone::dedup::dedup_key;

    fn sha(i: u32) -> String {
        // Distinct, evenly spread 64-digit keys, as the ingress makes them.
        let mut h = DefaultHasher::new();
        i.hash(&mut h);
        let a = h.finish();
        format!("{:016x}{:016x}{:032x}", a, a.rotate_left(17), i)
    }

    #[test]
    fn a_key_is_remembered_and_others_are_not() {
        let mut r = RecentKeys::new(Duration::from_secs(60));
        for i in 0..10_000 {
            r.insert(&dedup_key(1, &format!("k{i}")));
            r.insert(&dedup_key(1, &sha(i)));
        }
        assert!((0..10_000).all(|i| r.maybe(&dedup_key(1, &format!("k{i}")))));
        assert!((0..10_000).all(|i| r.maybe(&dedup_key(1, &sha(i)))));
        let false_positives = (0..10_000)
            .filter(|i| r.maybe(&dedup_key(1, &format!("other{i}"))))
            .count()
            + (10_000..20_000)
                .filter(|&i| r.maybe(&dedup_key(1, &sha(i))))
                .count();
        assert_eq!(false_positives, 0, "20,000 keys in 64 Mibit");
        assert!(!r.maybe(&dedup_key(2, "k1")), "keys are per topic");
        assert!(!r.maybe(&dedup_key(2, &sha(1))), "keys are per topic");
    }

    #[test]
    fn a_key_outlives_one_rotation_and_not_two() {
        let window = Duration::from_millis(50);
        let mut r = RecentKeys::new(window);
        let t0 = Instant::now();
        r.insert(&dedup_key(1, "k"));
        r.rotate(t0 + window);
        assert!(
            r.maybe(&dedup_key(1, "k")),
            "kept a whole window after the rotation"
        );
        r.rotate(t0 + 2 * window);
        assert!(!r.maybe(&dedup_key(1, "k")));
    }
}
