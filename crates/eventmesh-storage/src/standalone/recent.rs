//! Which commit groups may hold a key appended within the window, in
//! memory: two generations of a hash table, each covering one window. An
//! entry is 8 bytes: a 32-bit fingerprint of the key and the low 32 bits
//! of the group's number in the journal (see `dedup`). A key is a
//! multimap key: keys of the same fingerprint keep one entry each, and a
//! look returns every group they point to, for the journal to settle.
//!
//! A generation is an array of buckets of 8 entries, one cache line each.
//! A fingerprint starts at its home bucket and goes on to the next while
//! the bucket is full (entries are never removed, so the first empty slot
//! ends every chain). A look at a new key, the common case, reads the
//! home bucket of each generation and seldom the one after; the writer
//! asks for those lines ahead ([`RecentKeys::prefetch`]) for a whole
//! commit's keys at once, so that their cache misses overlap rather than
//! come one after another.
//!
//! Invariant: a key inserted at time t is found until at least t + window
//! (it stays in the current generation until the next rotation and in the
//! previous one for a whole window after that).

use std::time::{Duration, Instant};

/// Entries per bucket: 8 of 8 bytes, a cache line.
const SLOTS: usize = 8;

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket([u64; SLOTS]);

/// The fingerprint as stored: never zero, which marks an empty slot (a
/// fingerprint of zero shares 1's entries; the journal tells them apart).
fn tag(fingerprint: u32) -> u32 {
    fingerprint.max(1)
}

/// One entry: fingerprint (high half) and group (low half).
fn entry(tag: u32, group: u64) -> u64 {
    u64::from(tag) << 32 | (group & 0xFFFF_FFFF)
}

/// One generation: a power of two of buckets (none while empty), at most
/// 7/8 full.
#[derive(Default)]
struct Table {
    buckets: Vec<Bucket>,
    len: usize,
}

impl Table {
    /// Room for `keys` without growing.
    fn with_capacity(keys: usize) -> Table {
        if keys == 0 {
            return Table::default();
        }
        let buckets = (keys * 8 / 7).div_ceil(SLOTS).next_power_of_two();
        Table {
            buckets: vec![Bucket::default(); buckets],
            len: 0,
        }
    }

    /// The home bucket of a tag (the golden-ratio product's high bits).
    fn home(&self, tag: u32) -> usize {
        let spread = u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (spread >> 32) as usize & (self.buckets.len() - 1)
    }

    fn insert(&mut self, e: u64) {
        if (self.len + 1) * 8 > self.buckets.len() * SLOTS * 7 {
            self.grow();
        }
        let mask = self.buckets.len() - 1;
        let mut b = self.home((e >> 32) as u32);
        loop {
            if let Some(slot) = self.buckets[b].0.iter_mut().find(|s| **s == 0) {
                *slot = e;
                self.len += 1;
                return;
            }
            b = (b + 1) & mask;
        }
    }

    /// Doubles the buckets and puts every entry in again.
    fn grow(&mut self) {
        let mut bigger = Table {
            buckets: vec![Bucket::default(); (self.buckets.len() * 2).max(1)],
            len: 0,
        };
        for e in self.buckets.iter().flat_map(|b| b.0).filter(|e| *e != 0) {
            bigger.insert(e);
        }
        *self = bigger;
    }

    /// The groups of the entries of `tag`.
    fn groups(&self, tag: u32) -> impl Iterator<Item = u32> + '_ {
        let n = self.buckets.len();
        let mut b = if n == 0 { 0 } else { self.home(tag) };
        let (mut slot, mut left) = (0, n);
        std::iter::from_fn(move || {
            while left > 0 {
                let e = self.buckets[b].0[slot];
                if e == 0 {
                    left = 0;
                    return None;
                }
                slot += 1;
                if slot == SLOTS {
                    slot = 0;
                    b = (b + 1) & (n - 1);
                    left -= 1;
                }
                if (e >> 32) as u32 == tag {
                    return Some(e as u32);
                }
            }
            None
        })
    }

    /// Asks for the tag's home bucket and the one after in the cache.
    fn prefetch(&self, tag: u32) {
        let n = self.buckets.len();
        if n == 0 {
            return;
        }
        let b = self.home(tag);
        prefetch_line(&self.buckets[b]);
        prefetch_line(&self.buckets[(b + 1) & (n - 1)]);
    }
}

/// A hint that `line` is read soon: nothing else changes.
#[allow(unsafe_code)]
fn prefetch_line(line: &Bucket) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; it never faults, reads
    // nothing into the program and writes nothing (the pointer is of a
    // live reference anyway).
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((line as *const Bucket).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

pub(crate) struct RecentKeys {
    window: Duration,
    current: Table,
    previous: Table,
    since: Instant,
}

impl RecentKeys {
    pub(crate) fn new(window: Duration, now: Instant) -> RecentKeys {
        RecentKeys {
            window,
            current: Table::default(),
            previous: Table::default(),
            since: now,
        }
    }

    /// Starts a new generation when the current one has covered a window
    /// (called once per group commit, with its time). The new one is sized
    /// for as many keys as the one before, so that it seldom grows (a
    /// growth moves every entry).
    pub(crate) fn rotate(&mut self, now: Instant) {
        if now.saturating_duration_since(self.since) >= self.window {
            let size = self.current.len + self.current.len / 8;
            self.previous = std::mem::replace(&mut self.current, Table::with_capacity(size));
            self.since = now;
        }
    }

    pub(crate) fn insert(&mut self, fingerprint: u32, group: u64) {
        self.current.insert(entry(tag(fingerprint), group));
    }

    /// The groups (low 32 bits) that may hold a key of this fingerprint,
    /// newest generation first.
    pub(crate) fn groups(&self, fingerprint: u32) -> impl Iterator<Item = u32> + '_ {
        let t = tag(fingerprint);
        self.current.groups(t).chain(self.previous.groups(t))
    }

    /// Asks for the cache lines a look at (or an insert of) this
    /// fingerprint reads, ahead of it.
    pub(crate) fn prefetch(&self, fingerprint: u32) {
        let t = tag(fingerprint);
        self.current.prefetch(t);
        self.previous.prefetch(t);
    }

    /// Keys held (both generations).
    pub(crate) fn len(&self) -> usize {
        self.current.len + self.previous.len
    }

    /// Bytes the two generations have allocated: 64 a bucket.
    pub(crate) fn allocated_bytes(&self) -> usize {
        (self.current.buckets.len() + self.previous.buckets.len()) * std::mem::size_of::<Bucket>()
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
        // (Fingerprint 0, of i = 0, is kept as 1.)
        assert_eq!(r.groups(3).count() + r.groups(5).count(), 0);
        assert_eq!(r.len(), 100_001);
        // 100,001 entries at most 7/8 full need 14,286 buckets of 8: the
        // next power of two, 16,384, of 64 bytes.
        assert_eq!(r.allocated_bytes(), 16_384 * 64);
    }

    #[test]
    fn full_buckets_chain_into_the_next_and_wrap_around() {
        let mut t = Table::with_capacity(14);
        assert_eq!(t.buckets.len(), 2);
        // Every tag of one home bucket: the first 8 fill it, the rest go
        // on to the other bucket (wrapping around from the last).
        let home = t.home(5);
        let same: Vec<u32> = (1..100_000u32)
            .filter(|x| t.home(*x) == home)
            .take(12)
            .collect();
        for (i, x) in same.iter().enumerate() {
            t.insert(entry(*x, i as u64));
        }
        assert_eq!(t.len, 12);
        for (i, x) in same.iter().enumerate() {
            assert!(t.groups(*x).eq([i as u32]), "tag {x}");
        }
        assert_eq!(t.buckets[home].0.iter().filter(|e| **e != 0).count(), 8);
        // Three more (15 of 16 slots) make it grow to 4 buckets; all are
        // still found.
        for x in same.iter().take(3) {
            t.insert(entry(*x, 1000));
        }
        assert_eq!(t.buckets.len(), 4);
        for (i, x) in same.iter().enumerate() {
            let mut got: Vec<u32> = t.groups(*x).collect();
            got.sort_unstable();
            let want = if i < 3 {
                vec![i as u32, 1000]
            } else {
                vec![i as u32]
            };
            assert_eq!(got, want, "tag {x}");
        }
        // A tag never inserted, and an empty table, find nothing.
        let absent = (1..u32::MAX).find(|x| !same.contains(x)).unwrap();
        assert_eq!(t.groups(absent).count(), 0);
        assert_eq!(Table::default().groups(absent).count(), 0);
        Table::default().prefetch(absent);
    }

    #[test]
    fn a_zero_fingerprint_is_kept_too() {
        let mut r = RecentKeys::new(Duration::from_secs(60), Instant::now());
        r.insert(0, 4);
        r.prefetch(0);
        assert!(r.groups(0).eq([4]));
        assert!(r.groups(1).eq([4]), "shares the entries of 1");
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
