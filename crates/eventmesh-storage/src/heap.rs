//! Giving back the memory of flushed memtables.
//!
//! RocksDB allocates a memtable with the C allocator, in blocks of an
//! eighth of its size. glibc serves blocks that large from its arenas once
//! one of them has been freed (its threshold for mapping a block of its
//! own rises to the largest block freed), and it keeps those pages when
//! the blocks are freed again: after a burst of writes the process stays at
//! the peak of its memtables (two per busy column family while one is
//! flushed) long after they were flushed. On a store with a 64 MiB write
//! buffer that is about 100 MB resident for nothing
//! (`docs/benchmarks-history.md`, "Memory the memtables left behind").
//!
//! A thread per store looks at its memtables and table files every second.
//! Once the memtables shrank or the files changed (a flush wrote a memtable
//! out and freed it, or a compaction ran), it asks glibc to return the free
//! pages of every arena, at most once per [`MIN_GAP`]: under a steady
//! load the pages are then given back and faulted in again a few times a
//! minute, not once per memtable (mapping every block on its own costs 6 %
//! more CPU per published event, in page faults). Elsewhere than on glibc
//! there is nothing to give back: other allocators return large blocks
//! themselves.
//!
//! When no write has come for [`QUIET`] and the memtables hold
//! [`IDLE_FLUSH_BYTES`] or more, the same thread also writes every
//! memtable out: a store at rest then holds no memtable of recent writes
//! in memory (up to a write buffer per column family), and no WAL file
//! (up to a write buffer each) stays on disk for a few records of a quiet
//! column family (offsets, the ledger), so a restart has little to replay.
//! What that flush freed goes back at the next look, without waiting for
//! the gap: it happens once per rest.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::localdb::LocalDb;

/// How often the memtables are looked at.
const POLL: Duration = Duration::from_secs(1);

/// The least time between two returns.
pub(crate) const MIN_GAP: Duration = Duration::from_secs(5);

/// What the store holds, as the policy looks at it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// Bytes in memtables.
    pub(crate) memtables: u64,
    /// Bytes in table and blob files.
    pub(crate) files: u64,
}

/// What the store's thread does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Wait,
    /// Write the memtables out: no write came for [`QUIET`].
    Flush,
    /// Give the allocator's free pages back.
    GiveBack,
}

/// Memtables of at least this many bytes are flushed once the store is
/// quiet; smaller ones wait for more writes (a table file each time a
/// trickle pauses would be many small files).
pub(crate) const IDLE_FLUSH_BYTES: u64 = 8 << 20;

/// How long without a write before the memtables are flushed.
pub(crate) const QUIET: Duration = Duration::from_secs(2);

/// When to flush and when to give memory back, from the store's sizes
/// over time.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    last: Sizes,
    /// Since when the memtables have not changed.
    quiet_since: Option<Instant>,
    /// Flushed since they last changed.
    flushed: bool,
    /// Memory was freed since the last return.
    pending: bool,
    /// The last step was a quiet flush: what it freed goes back without
    /// waiting for the gap (a store rests once after each burst, so this
    /// adds at most one return per rest).
    rested: bool,
    last_return: Option<Instant>,
}

impl Policy {
    /// Told the store's sizes at `now`: what to do.
    pub(crate) fn next(&mut self, sizes: Sizes, now: Instant) -> Step {
        if sizes.memtables < self.last.memtables || sizes.files != self.last.files {
            self.pending = true;
        }
        if sizes.memtables != self.last.memtables || self.quiet_since.is_none() {
            self.quiet_since = Some(now);
            self.flushed = false;
        }
        self.last = sizes;
        let quiet = self
            .quiet_since
            .is_some_and(|t| now.saturating_duration_since(t) >= QUIET);
        if quiet && !self.flushed && sizes.memtables >= IDLE_FLUSH_BYTES {
            self.flushed = true;
            self.rested = true;
            return Step::Flush;
        }
        let gap = self
            .last_return
            .is_none_or(|t| now.saturating_duration_since(t) >= MIN_GAP);
        let rested = std::mem::take(&mut self.rested);
        if self.pending && (gap || rested) {
            self.pending = false;
            self.last_return = Some(now);
            return Step::GiveBack;
        }
        Step::Wait
    }
}

/// Returns the allocator's free pages to the system; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn give_back() -> bool {
    // SAFETY: `malloc_trim` takes no pointer and touches only the
    // allocator's own free lists, under the locks of its arenas.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back() -> bool {
    false
}

/// Watches `db` until the store is closed, counting each return in its
/// `heap_returns`.
pub(crate) fn watch(db: Weak<LocalDb>) {
    let spawned = std::thread::Builder::new()
        .name("eventmesh-heap".into())
        .spawn(move || {
            let mut policy = Policy::default();
            loop {
                std::thread::sleep(POLL);
                let Some(db) = db.upgrade() else { return };
                match policy.next(db.heap_sizes(), Instant::now()) {
                    Step::Wait => {}
                    Step::Flush => {
                        if let Err(e) = db.flush() {
                            tracing::warn!(error = %e, "cannot flush the memtables of a quiet store");
                        }
                    }
                    Step::GiveBack => {
                        let freed = give_back();
                        db.heap_returns.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(freed, "returned the memory of flushed memtables");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the thread that returns flushed memtables' memory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(memtables: u64, files: u64) -> Sizes {
        Sizes { memtables, files }
    }

    #[test]
    fn memory_goes_back_after_a_flush_at_most_once_per_gap() {
        use Step::*;
        let t0 = Instant::now();
        let mut p = Policy::default();
        // Growing memtables, no files: nothing freed, nothing to return.
        assert_eq!(p.next(at(10, 0), t0), Wait);
        assert_eq!(p.next(at(20, 0), t0 + POLL), Wait);
        // A flush freed one: returned at once (none returned before).
        assert_eq!(p.next(at(5, 0), t0 + 2 * POLL), GiveBack);
        // A flush between two looks (the memtables grew past where they
        // were, but a file was written) waits for the gap...
        assert_eq!(p.next(at(30, 100), t0 + 3 * POLL), Wait);
        assert_eq!(p.next(at(40, 100), t0 + 2 * POLL + MIN_GAP - POLL), Wait);
        // ...and is returned once the gap has passed, once.
        assert_eq!(p.next(at(41, 100), t0 + 2 * POLL + MIN_GAP), GiveBack);
        assert_eq!(p.next(at(50, 100), t0 + 2 * POLL + 3 * MIN_GAP), Wait);
    }

    #[test]
    fn memory_goes_back_at_once_after_a_quiet_flush() {
        use Step::*;
        let t0 = Instant::now();
        let big = IDLE_FLUSH_BYTES;
        let mut p = Policy::default();
        assert_eq!(p.next(at(2 * big, 0), t0), Wait);
        // A flush under load: returned.
        assert_eq!(p.next(at(big, 1), t0 + POLL), GiveBack);
        assert_eq!(p.next(at(big, 1), t0 + POLL + QUIET), Flush);
        // What the quiet flush freed goes back at the next look, within
        // the gap of the last return.
        let after = t0 + 2 * POLL + QUIET;
        assert!(after < t0 + POLL + MIN_GAP);
        assert_eq!(p.next(at(0, 2), after), GiveBack);
        // Nothing more until something is freed again.
        assert_eq!(p.next(at(0, 2), after + POLL), Wait);
        // A quiet flush that freed nothing by the next look leaves the gap
        // to decide, as under load.
        let mut p = Policy::default();
        assert_eq!(p.next(at(2 * big, 0), t0), Wait);
        assert_eq!(p.next(at(big, 1), t0 + POLL), GiveBack);
        assert_eq!(p.next(at(big, 1), t0 + POLL + QUIET), Flush);
        assert_eq!(p.next(at(big, 1), t0 + 2 * POLL + QUIET), Wait);
        assert_eq!(p.next(at(0, 2), t0 + 3 * POLL + QUIET), Wait);
        assert_eq!(p.next(at(0, 2), t0 + POLL + MIN_GAP), GiveBack);
    }

    #[test]
    fn a_quiet_store_flushes_its_memtables_once() {
        use Step::*;
        let t0 = Instant::now();
        let big = IDLE_FLUSH_BYTES;
        let mut p = Policy::default();
        assert_eq!(p.next(at(big, 0), t0), Wait);
        // Unchanged, but not for long enough yet.
        assert_eq!(p.next(at(big, 0), t0 + QUIET - POLL), Wait);
        assert_eq!(p.next(at(big, 0), t0 + QUIET), Flush);
        // Not again while nothing changes.
        assert_eq!(p.next(at(big, 0), t0 + 2 * QUIET), Wait);
        // The flush freed them: given back.
        assert_eq!(p.next(at(0, 9), t0 + 2 * QUIET + POLL), GiveBack);
        // Small totals stay, however quiet.
        let small = IDLE_FLUSH_BYTES - 1;
        let t1 = t0 + 2 * QUIET + MIN_GAP;
        assert_eq!(p.next(at(small, 9), t1), Wait);
        assert_eq!(p.next(at(small, 9), t1 + 5 * QUIET), Wait);
        // Writes keep a store from being quiet.
        let mut p = Policy::default();
        for i in 0..10u32 {
            let step = p.next(at(big + u64::from(i), 0), t0 + i * POLL);
            assert_eq!(step, Wait, "look {i}");
        }
    }
}
