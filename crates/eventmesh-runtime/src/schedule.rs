//! Scheduled delivery: events published with a `deliverat` (an RFC 3339
//! time) or a `deliverafter` (an ISO 8601 duration) still ahead are held
//! back beside their partition (see `EventLog::schedule`) and released to
//! it, as ordinary appends, once due.
//!
//! This file holds [`Held`], what the ingress tells the releaser: the
//! topics that hold events back and the soonest due time it has seen
//! scheduled, with a wake-up. The releaser itself is in
//! `runtime/release.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

/// The topics known to hold events back, and the wake-up of the releaser.
#[derive(Default)]
pub struct Held {
    topics: Mutex<BTreeSet<String>>,
    /// The soonest due time scheduled since the releaser last looked
    /// (`u64::MAX`: none; 0 before any).
    soonest: AtomicU64,
    wake: Notify,
}

impl Held {
    /// An event of `topic` was held back until `due_ms`.
    pub fn scheduled(&self, topic: &str, _partition: u32, due_ms: u64) {
        let new = {
            let mut topics = self.topics.lock().expect("held topics lock");
            !topics.contains(topic) && topics.insert(topic.to_string())
        };
        let before = self.soonest.fetch_min(due_ms, Ordering::AcqRel);
        if new || before == 0 || due_ms < before {
            self.wake.notify_one();
        }
    }

    /// `topic` holds events back (found at start, or told by another
    /// instance).
    pub fn know(&self, topic: &str) -> bool {
        self.topics
            .lock()
            .expect("held topics lock")
            .insert(topic.to_string())
    }

    /// `topic` holds nothing back any more (or is gone).
    pub fn forget(&self, topic: &str) {
        self.topics.lock().expect("held topics lock").remove(topic);
    }

    pub fn topics(&self) -> Vec<String> {
        self.topics
            .lock()
            .expect("held topics lock")
            .iter()
            .cloned()
            .collect()
    }

    /// Takes the soonest due time told since the last call.
    pub(crate) fn take_soonest(&self) -> Option<u64> {
        match self.soonest.swap(u64::MAX, Ordering::AcqRel) {
            0 | u64::MAX => None,
            at => Some(at),
        }
    }

    /// Wakes when something is scheduled sooner than what was known.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}
