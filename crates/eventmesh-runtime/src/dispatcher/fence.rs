//! Partition ownership (`PARTITION_OWNED_PULL`): the partitions a
//! dispatcher reads, more of them as this instance gains some, and the
//! fencing token of the claim each one was read under.
//!
//! Invariant: once a partition's claim is no longer the one it was read
//! under (another instance owns it, or the lease ended), nothing more is
//! done in its name: it is not read, its events are not handed out (they
//! stay queued until the handover restarts the dispatcher), settles of its
//! deliveries are answered `Fenced` and a webhook's success is not taken,
//! and its dead letters are written under the token it was read under
//! (see `dead_letter`), so a stale write is refused. Without ownership
//! every partition read counts as owned.

use std::collections::HashMap;

use super::cursor::Cursor;
use super::{Dispatcher, DispatcherDeps};

impl Dispatcher {
    /// Starts reading partitions this instance now owns as well.
    pub(super) fn extend(&mut self, added: Vec<(u32, u64)>) {
        let mut new = Vec::new();
        for (p, committed) in added {
            if self.cursors.contains_key(&p) {
                continue;
            }
            self.cursors.insert(p, Cursor::new(committed));
            self.partitions.push(p);
            new.push(p);
        }
        self.partitions.sort_unstable();
        self.tokens.extend(tokens_of(&self.deps, &self.topic, &new));
        if !new.is_empty() {
            tracing::info!(consumer = %self.consumer, topic = %self.topic, partitions = ?new, "reading more partitions");
        }
    }

    /// False once this instance's claim on the partition is no longer the
    /// one it read it under (another instance owns it, or the lease ended).
    /// A partition started while no claim counted (the lease between two
    /// renewals it could vouch for) takes the claim that counts now.
    pub(super) fn still_owns(&mut self, partition: u32) -> bool {
        let Some(f) = &self.deps.fence else {
            return true;
        };
        let now = f.token(&self.topic, partition);
        match (self.tokens.get(&partition), now) {
            (Some(mine), Some(now)) => *mine == now,
            (None, Some(now)) if self.cursors.contains_key(&partition) => {
                self.tokens.insert(partition, now);
                true
            }
            _ => false,
        }
    }
}

/// The fencing tokens of `partitions` now (none without ownership).
pub(super) fn tokens_of(
    deps: &DispatcherDeps,
    topic: &str,
    partitions: &[u32],
) -> HashMap<u32, u64> {
    let Some(fence) = &deps.fence else {
        return HashMap::new();
    };
    partitions
        .iter()
        .filter_map(|p| Some((*p, fence.token(topic, *p)?)))
        .collect()
}
