//! The memory of admitted request signatures, which refuses an exact replay
//! of a signed request while its timestamp is still inside the window (the
//! gate's signatures, and the timestamped signatures of `http-source`
//! connectors).
//!
//! Invariants:
//! - an entry is `(timestamp seconds, MAC)`; it is kept until its timestamp
//!   leaves the window (`timestamp + window < now`), after which the
//!   timestamp check alone refuses the request;
//! - there are never more than `capacity` entries. When a new one would
//!   exceed it, the entry with the oldest timestamp is dropped and the
//!   *floor* rises to that timestamp: from then on a request signed at or
//!   before the floor is refused. So every admitted signature whose
//!   timestamp is above the floor and inside the window is still here, and
//!   no exact replay is ever admitted; under a flood the accepted window
//!   narrows instead of the memory growing.

use std::collections::BTreeSet;

/// Why a verified signature is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This exact signature was admitted before.
    Replayed,
    /// Signed at or before the floor: older than every signature still
    /// remembered, so a replay could not be told apart.
    BelowFloor,
}

pub struct SeenSignatures {
    entries: BTreeSet<(u64, [u8; 32])>,
    floor: Option<u64>,
    capacity: usize,
}

impl SeenSignatures {
    pub fn new(capacity: usize) -> Self {
        SeenSignatures {
            entries: BTreeSet::new(),
            floor: None,
            capacity: capacity.max(1),
        }
    }

    /// Records a verified signature made at `at` (Unix seconds), or says
    /// why it must be refused. `window` is the signature tolerance.
    pub fn admit(&mut self, at: u64, mac: [u8; 32], now: u64, window: u64) -> Result<(), Refusal> {
        while let Some(&(ts, _)) = self.entries.first() {
            if ts.saturating_add(window) >= now {
                break;
            }
            self.entries.pop_first();
        }
        if self.floor.is_some_and(|f| at <= f) {
            return Err(Refusal::BelowFloor);
        }
        if !self.entries.insert((at, mac)) {
            return Err(Refusal::Replayed);
        }
        if self.entries.len() > self.capacity {
            if let Some((ts, _)) = self.entries.pop_first() {
                self.floor = Some(self.floor.map_or(ts, |f| f.max(ts)));
            }
        }
        Ok(())
    }

    /// Forgets a signature admitted before whose request then failed, so
    /// that the sender's retry of the same bytes is admitted.
    pub fn forget(&mut self, at: u64, mac: [u8; 32]) {
        self.entries.remove(&(at, mac));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> [u8; 32] {
        [n; 32]
    }

    #[test]
    fn an_exact_replay_is_refused_until_its_timestamp_leaves_the_window() {
        let mut s = SeenSignatures::new(10);
        assert_eq!(s.admit(1000, mac(1), 1000, 300), Ok(()));
        assert_eq!(s.admit(1000, mac(1), 1000, 300), Err(Refusal::Replayed));
        assert_eq!(s.admit(1000, mac(1), 1300, 300), Err(Refusal::Replayed));
        // Another signature, or the same MAC at another time, is new.
        assert_eq!(s.admit(1000, mac(2), 1000, 300), Ok(()));
        assert_eq!(s.admit(1001, mac(1), 1001, 300), Ok(()));
        assert_eq!(s.len(), 3);
        // Past the window the entries go (the timestamp check refuses
        // those requests from then on).
        assert_eq!(s.admit(1301, mac(3), 1301, 300), Ok(()));
        assert_eq!(s.len(), 2);
        assert_eq!(s.admit(1400, mac(4), 1400, 300), Ok(()));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_full_cache_drops_the_oldest_and_refuses_from_its_timestamp_down() {
        let mut s = SeenSignatures::new(3);
        for (i, at) in [(1, 100), (2, 101), (3, 102)] {
            assert_eq!(s.admit(at, mac(i), 102, 300), Ok(()));
        }
        // A fourth: the entry at 100 goes and the floor becomes 100.
        assert_eq!(s.admit(103, mac(4), 103, 300), Ok(()));
        assert_eq!(s.len(), 3);
        // The dropped signature cannot come back, nor anything else signed
        // at or before 100.
        assert_eq!(s.admit(100, mac(1), 103, 300), Err(Refusal::BelowFloor));
        assert_eq!(s.admit(99, mac(9), 103, 300), Err(Refusal::BelowFloor));
        // Newer ones are still told apart exactly.
        assert_eq!(s.admit(101, mac(2), 103, 300), Err(Refusal::Replayed));
        assert_eq!(s.admit(104, mac(5), 104, 300), Ok(()));
        assert_eq!(s.admit(101, mac(2), 104, 300), Err(Refusal::BelowFloor));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_new_entry_older_than_all_others_is_the_one_dropped() {
        let mut s = SeenSignatures::new(2);
        assert_eq!(s.admit(200, mac(1), 200, 300), Ok(()));
        assert_eq!(s.admit(201, mac(2), 200, 300), Ok(()));
        // Admitted, then dropped at once: the floor covers its replay.
        assert_eq!(s.admit(150, mac(3), 200, 300), Ok(()));
        assert_eq!(s.admit(150, mac(3), 200, 300), Err(Refusal::BelowFloor));
        assert_eq!(s.admit(200, mac(1), 200, 300), Err(Refusal::Replayed));
    }
}
