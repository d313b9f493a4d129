//! The write-behind buffer of the in-flight ledger.
//!
//! The ledger (`DeliveryStateStore`) holds one entry per event in flight,
//! keyed by (consumer, topic, partition, offset); its one use is the
//! attempt count after a restart. It is written behind, at each flush:
//! entries of events admitted or whose attempts changed since the last
//! flush are written, entries of events retired since are deleted.
//! Invariants:
//! - an event settled between two flushes never touches the ledger (at a
//!   steady rate a delivery costs no state write at all);
//! - a new delivery id changes nothing here: only admission, a counted
//!   failure and retirement do;
//! - a retired event whose entry may be on disk (a flush took it, or the
//!   previous run left it) is deleted at a later flush; a failed flush
//!   gives its work back, to be done again by the next one;
//! - the previous run's entries stay until their events are retired again
//!   (or are found below the committed offset), so a crash before the
//!   first flush finds them where they were.

use std::collections::{HashMap, HashSet};

use eventmesh_state::LedgerEntry;

use super::ids::Slot;

#[derive(Debug, Default)]
pub(crate) struct LedgerBuffer {
    /// To write at the next flush.
    dirty: HashSet<Slot>,
    /// May have an entry on disk.
    stored: HashSet<Slot>,
    /// To delete at the next flush.
    deletes: HashSet<Slot>,
}

/// The work one flush takes.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub puts: Vec<Slot>,
    pub deletes: Vec<Slot>,
}

/// What the previous run left: attempts of the events still to come
/// again, and the buffer that knows their entries are on disk.
pub(crate) struct Recovered {
    pub attempts: HashMap<Slot, u32>,
    pub buffer: LedgerBuffer,
}

impl LedgerBuffer {
    /// Takes in the previous run's entries. `live` says whether an event
    /// can still come again (its partition is read and it is at or above
    /// the committed offset); the others are deleted at the first flush.
    pub(crate) fn recover(entries: Vec<LedgerEntry>, live: impl Fn(Slot) -> bool) -> Recovered {
        let mut r = Recovered {
            attempts: HashMap::new(),
            buffer: LedgerBuffer::default(),
        };
        for e in entries {
            let slot = Slot {
                partition: e.partition,
                offset: e.offset,
            };
            if live(slot) {
                r.attempts.insert(slot, e.attempts);
                r.buffer.stored.insert(slot);
            } else {
                r.buffer.deletes.insert(slot);
            }
        }
        r
    }

    /// The event went into flight, or its attempt count changed.
    pub(crate) fn touch(&mut self, slot: Slot) {
        self.dirty.insert(slot);
    }

    /// The event left flight.
    pub(crate) fn retire(&mut self, slot: Slot) {
        self.dirty.remove(&slot);
        if self.stored.remove(&slot) {
            self.deletes.insert(slot);
        }
    }

    pub(crate) fn is_clean(&self) -> bool {
        self.dirty.is_empty() && self.deletes.is_empty()
    }

    /// The work of the next flush; its puts count as on disk from now on.
    pub(crate) fn take(&mut self) -> Batch {
        let mut batch = Batch {
            puts: self.dirty.drain().collect(),
            deletes: self.deletes.drain().collect(),
        };
        batch.puts.sort_unstable();
        batch.deletes.sort_unstable();
        self.stored.extend(batch.puts.iter().copied());
        batch
    }

    /// A flush failed: its writes are done again by the next one, for the
    /// events still in flight.
    pub(crate) fn failed(&mut self, batch: Batch, in_flight: impl Fn(Slot) -> bool) {
        self.dirty
            .extend(batch.puts.into_iter().filter(|s| in_flight(*s)));
        self.deletes.extend(batch.deletes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(offset: u64) -> Slot {
        Slot {
            partition: 0,
            offset,
        }
    }

    fn entry(offset: u64, attempts: u32) -> LedgerEntry {
        LedgerEntry {
            consumer: "g".into(),
            topic: "t".into(),
            partition: 0,
            offset,
            member: "m".into(),
            attempts,
            sent_ms: 1,
        }
    }

    #[test]
    fn settled_between_flushes_never_written() {
        let mut b = LedgerBuffer::default();
        b.touch(s(1));
        b.touch(s(2));
        b.retire(s(1));
        let batch = b.take();
        assert_eq!(batch.puts, [s(2)]);
        assert!(batch.deletes.is_empty());
        assert!(b.is_clean());
    }

    #[test]
    fn a_flushed_entry_is_deleted_once_retired() {
        let mut b = LedgerBuffer::default();
        b.touch(s(1));
        b.take();
        // A counted failure rewrites the same entry.
        b.touch(s(1));
        assert_eq!(b.take().puts, [s(1)]);
        b.retire(s(1));
        let batch = b.take();
        assert_eq!((batch.puts, batch.deletes), (vec![], vec![s(1)]));
        // Nothing more to do for it.
        b.retire(s(1));
        assert!(b.is_clean());
    }

    #[test]
    fn a_failed_flush_is_done_again() {
        let mut b = LedgerBuffer::default();
        b.touch(s(1));
        b.touch(s(2));
        b.take();
        b.retire(s(2));
        b.touch(s(3));
        let batch = b.take();
        assert_eq!(
            (&batch.puts[..], &batch.deletes[..]),
            (&[s(3)][..], &[s(2)][..])
        );
        // s(3) was settled while the flush ran; s(1) stays in flight.
        b.retire(s(3));
        b.failed(batch, |slot| slot != s(3));
        let again = b.take();
        assert!(again.puts.is_empty(), "s(3) left flight: {:?}", again.puts);
        assert_eq!(again.deletes, [s(2), s(3)]);
    }

    #[test]
    fn the_previous_run_is_recovered_and_tidied() {
        let r = LedgerBuffer::recover(vec![entry(3, 1), entry(7, 2), entry(9, 0)], |slot| {
            slot.offset >= 5
        });
        assert_eq!(r.attempts, HashMap::from([(s(7), 2), (s(9), 0)]));
        let mut b = r.buffer;
        // Below the committed offset: deleted at the first flush; the
        // others stay until their events are settled again.
        b.touch(s(7));
        let batch = b.take();
        assert_eq!((batch.puts, batch.deletes), (vec![s(7)], vec![s(3)]));
        b.retire(s(9));
        b.retire(s(7));
        assert_eq!(b.take().deletes, [s(7), s(9)]);
    }
}
