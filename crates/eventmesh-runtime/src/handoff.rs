//! Events of topics kept in memory, handed to their consumers by the task
//! that published them.
//!
//! A topic with `durability: memory` keeps its records in this process
//! only, and an append to it is answered at once. Rather than tell the
//! log's watch, which wakes every dispatcher to read the record back and
//! decode it, the ingress offers each appended event, still decoded, to
//! the dispatchers of the topic's consumers (each through its [`Lane`]).
//! A dispatcher waiting for work takes the event when it is the next one
//! its consumer reads, and the event goes to its member's mailbox from
//! the publisher's task: the chain from a request to its responder is one
//! hand-over between tasks, not two. Whenever any consumer did not take
//! an event (its loop was at work, it was behind, filtered, draining or
//! full), or a reader waits on the watch itself (a browse), the log's
//! watch is told as for any append, and the loops read it as before.
//!
//! Invariants: a dispatcher is offered only what is appended from before
//! its first read on (it is registered before its loop starts), and no
//! more once it is stopped; an append no consumer took is always
//! announced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use eventmesh_core::CloudEvent;
use eventmesh_storage::Placed;

use crate::dispatcher::Lane;

/// The dispatchers of one topic, each by its id.
type Lanes = Vec<(u32, Arc<Lane>)>;

/// The dispatchers of topics kept in memory, by topic.
#[derive(Default)]
pub struct Handoffs {
    lanes: RwLock<HashMap<String, Lanes>>,
    /// Readers waiting on the log's watch themselves: while there is one,
    /// every append is announced.
    watching: AtomicUsize,
}

/// Held by a reader that waits on the log's watch (see
/// [`Handoffs::watching`]).
pub struct Watching<'a>(&'a Handoffs);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.watching.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Handoffs {
    /// Registers the dispatcher `id` of a consumer of `topic`.
    pub(crate) fn add(&self, topic: &str, id: u32, lane: Arc<Lane>) {
        let mut lanes = self.lanes.write().expect("handoff lock");
        lanes.entry(topic.to_string()).or_default().push((id, lane));
    }

    /// Forgets the dispatcher `id` (stopped).
    pub(crate) fn remove(&self, topic: &str, id: u32) {
        let mut lanes = self.lanes.write().expect("handoff lock");
        if let Some(of_topic) = lanes.get_mut(topic) {
            of_topic.retain(|(i, _)| *i != id);
            if of_topic.is_empty() {
                lanes.remove(topic);
            }
        }
    }

    /// Offers events just appended to `topic` (each where `placed` says,
    /// accepted at `ingest_ms`) to every consumer of the topic. True when
    /// every consumer took every event: the log's watch need not be told.
    pub fn offer(
        &self,
        topic: &str,
        placed: &[Placed],
        events: &[Arc<CloudEvent>],
        ingest_ms: u64,
    ) -> bool {
        // Against `watching`: either the reader's read sees the append, or
        // this sees the reader.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.watching.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let lanes = self.lanes.read().expect("handoff lock");
        let Some(of_topic) = lanes.get(topic) else {
            return false;
        };
        let mut all = true;
        for (at, event) in placed.iter().zip(events) {
            for (_, lane) in of_topic {
                all &= lane.offer(at.partition, at.offset, ingest_ms, event);
            }
        }
        all
    }

    /// Marks a reader waiting on the log's watch until the guard drops.
    pub fn watching(&self) -> Watching<'_> {
        self.watching.fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        Watching(self)
    }

    #[cfg(test)]
    pub(crate) fn registered(&self, topic: &str) -> usize {
        let lanes = self.lanes.read().expect("handoff lock");
        lanes.get(topic).map_or(0, Vec::len)
    }
}
