//! The dispatcher's timers, all on tokio's clock.
//!
//! One timer per key at most: setting a key's timer replaces the one it
//! had, and cancelling removes it, so a timer that fires is always the
//! current one (a superseded timer is gone, not skipped when it comes
//! due). Due timers come out in deadline order, ties by key.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use tokio::time::Instant;

pub(crate) struct Timers<K> {
    due: BTreeSet<(Instant, K)>,
    by_key: HashMap<K, Instant>,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Timers {
            due: BTreeSet::new(),
            by_key: HashMap::new(),
        }
    }
}

impl<K: Ord + Hash + Copy> Timers<K> {
    /// Sets `key`'s timer to `at`, replacing the one it had.
    pub(crate) fn set(&mut self, key: K, at: Instant) {
        if let Some(old) = self.by_key.insert(key, at) {
            self.due.remove(&(old, key));
        }
        self.due.insert((at, key));
    }

    /// Removes `key`'s timer, if it has one.
    pub(crate) fn cancel(&mut self, key: K) {
        if let Some(old) = self.by_key.remove(&key) {
            self.due.remove(&(old, key));
        }
    }

    /// When the next timer comes due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Removes and returns a timer due at `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<K> {
        let (at, key) = *self.due.first()?;
        if at > now {
            return None;
        }
        self.due.pop_first();
        self.by_key.remove(&key);
        Some(key)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, key: K) -> Option<Instant> {
        self.by_key.get(&key).copied()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn drain(t: &mut Timers<u32>) -> Vec<u32> {
        std::iter::from_fn(|| t.pop_due(Instant::now())).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn fire_in_deadline_order_once_due() {
        let start = Instant::now();
        let mut t = Timers::default();
        t.set(1, start + Duration::from_secs(3));
        t.set(2, start + Duration::from_secs(1));
        t.set(3, start + Duration::from_secs(2));
        assert_eq!(t.next(), Some(start + Duration::from_secs(1)));
        assert!(drain(&mut t).is_empty());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(drain(&mut t), [2, 3]);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(drain(&mut t), [1]);
        assert_eq!(t.next(), None);
        assert_eq!(t.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_superseded_timer_is_removed() {
        let start = Instant::now();
        let mut t = Timers::default();
        t.set(1, start + Duration::from_secs(1));
        t.set(1, start + Duration::from_secs(5));
        assert_eq!(t.len(), 1);
        assert_eq!(t.next(), Some(start + Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(drain(&mut t).is_empty(), "the earlier deadline is gone");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(drain(&mut t), [1]);
        assert!(drain(&mut t).is_empty(), "fires once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_timer_never_fires() {
        let start = Instant::now();
        let mut t = Timers::default();
        t.set(1, start + Duration::from_secs(1));
        t.set(2, start + Duration::from_secs(1));
        t.cancel(1);
        t.cancel(9);
        assert_eq!(t.get(1), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(drain(&mut t), [2]);
    }
}
