//! The read cursor and contiguous watermark of one partition.
//!
//! Offsets go through three sets: *pending* (admitted into flight, not
//! settled), *retired* (acknowledged or dead-lettered, but the committed
//! offset does not cover them yet) and done. Invariants:
//! - the watermark is the lowest pending offset, or the next offset to read
//!   when none is pending: it never passes an offset still in flight;
//! - the cursor only moves forward (`admit`, `skip` and `seek` never lower
//!   it), so an offset is admitted at most once per run;
//! - `committed` never goes down, and a retired offset stays counted until
//!   a committed watermark passes it (so a failing offset write shows as
//!   deliveries that stay pending).

use std::collections::BTreeSet;

#[derive(Debug)]
pub(crate) struct Cursor {
    next: u64,
    pending: BTreeSet<u64>,
    retired: BTreeSet<u64>,
    committed: u64,
}

impl Cursor {
    /// A cursor reading from the committed offset.
    pub(crate) fn new(committed: u64) -> Self {
        Cursor {
            next: committed,
            pending: BTreeSet::new(),
            retired: BTreeSet::new(),
            committed,
        }
    }

    /// The next offset to read.
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    pub(crate) fn committed(&self) -> u64 {
        self.committed
    }

    /// `offset` went into flight.
    pub(crate) fn admit(&mut self, offset: u64) {
        self.pending.insert(offset);
        self.next = self.next.max(offset + 1);
    }

    /// `offset` can never be delivered (undecodable): read past it.
    pub(crate) fn skip(&mut self, offset: u64) {
        self.next = self.next.max(offset + 1);
    }

    /// The log no longer holds offsets below `start` (retention).
    pub(crate) fn seek(&mut self, start: u64) {
        self.next = self.next.max(start);
    }

    /// `offset` left flight (acknowledged or dead-lettered).
    pub(crate) fn retire(&mut self, offset: u64) {
        if self.pending.remove(&offset) {
            self.retired.insert(offset);
        }
    }

    /// Everything below it is settled.
    pub(crate) fn watermark(&self) -> u64 {
        self.pending.first().copied().unwrap_or(self.next)
    }

    /// The watermark, when it is past the committed offset.
    pub(crate) fn advanced(&self) -> Option<u64> {
        let w = self.watermark();
        (w > self.committed).then_some(w)
    }

    /// The watermark `w` is written: returns how many retired offsets it
    /// covers (they are done now).
    pub(crate) fn commit(&mut self, w: u64) -> usize {
        self.committed = self.committed.max(w);
        let above = self.retired.split_off(&self.committed);
        std::mem::replace(&mut self.retired, above).len()
    }

    /// Retired offsets the committed offset does not cover yet.
    pub(crate) fn uncommitted(&self) -> usize {
        self.retired.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_waits_for_the_lowest_pending_offset() {
        let mut c = Cursor::new(10);
        assert_eq!((c.next(), c.watermark(), c.advanced()), (10, 10, None));
        for o in 10..14 {
            c.admit(o);
        }
        assert_eq!((c.next(), c.watermark()), (14, 10));
        c.retire(11);
        c.retire(12);
        assert_eq!(c.watermark(), 10, "10 is still in flight");
        assert_eq!(c.advanced(), None);
        c.retire(10);
        assert_eq!(c.watermark(), 13);
        assert_eq!(c.advanced(), Some(13));
        c.retire(13);
        assert_eq!(
            c.watermark(),
            14,
            "nothing pending: the next offset to read"
        );
    }

    #[test]
    fn retired_offsets_count_until_a_commit_covers_them() {
        let mut c = Cursor::new(0);
        for o in 0..4 {
            c.admit(o);
        }
        c.retire(0);
        c.retire(2);
        assert_eq!(c.uncommitted(), 2);
        let w = c.advanced().unwrap();
        assert_eq!(w, 1);
        assert_eq!(c.commit(w), 1, "offset 0 is covered; 2 is not");
        assert_eq!((c.committed(), c.uncommitted(), c.advanced()), (1, 1, None));
        c.retire(1);
        c.retire(3);
        assert_eq!(c.commit(c.advanced().unwrap()), 3);
        assert_eq!((c.committed(), c.uncommitted()), (4, 0));
        // An older watermark written late moves nothing back.
        assert_eq!(c.commit(2), 0);
        assert_eq!(c.committed(), 4);
    }

    #[test]
    fn the_cursor_only_moves_forward() {
        let mut c = Cursor::new(5);
        c.skip(5);
        assert_eq!(
            (c.next(), c.watermark()),
            (6, 6),
            "an undecodable record is passed"
        );
        c.seek(20);
        assert_eq!(c.next(), 20, "retention dropped 6..20");
        c.seek(8);
        c.skip(9);
        c.admit(20);
        assert_eq!((c.next(), c.watermark()), (21, 20));
        // Retiring an offset never admitted changes nothing.
        c.retire(3);
        assert_eq!((c.uncommitted(), c.watermark()), (0, 20));
    }
}
