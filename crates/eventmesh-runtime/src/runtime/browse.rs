//! Browsing: reading a topic's events without a consumer. Nothing is
//! recorded for a browse (no subscription, group, committed offset,
//! ledger entry or mailbox): the reader carries its own position, a
//! [`Cursor`] naming the next offset of each partition it read, and
//! passes it back to read on. This is what a client reads with when it
//! wants to look at a topic rather than consume it (the MCP gateway's
//! `read_events`).
//!
//! Invariants:
//! - Bounded: at most [`MAX_BROWSE`] events and about
//!   [`MAX_BROWSE_BYTES`] of payload per answer (the first event always),
//!   at most [`MAX_BROWSE_TOPICS`] topics per read, and a wait for new
//!   events of at most [`MAX_BROWSE_WAIT`]; the wait ends at the first
//!   append that gives something to return.
//! - A browse sees what consumers see: events in the log (a held-back
//!   event once it is released), not those past their expiry (their
//!   `expirytime` or the topic's time to live) or undecodable ones.
//! - Within a partition events come in offset order; across partitions
//!   and topics in the order they were accepted. Reading again from the
//!   returned cursor neither repeats nor skips an event: a partition's
//!   next offset is the one after the last event returned from it, or
//!   after the last record looked at when every one of them was returned
//!   or skipped.
//! - A start (`latest`, a time) is resolved once, when the browse begins;
//!   a partition the cursor does not name starts there.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_core::codec::{self, StoredEvent};
use eventmesh_core::position::Position;
use eventmesh_core::CloudEvent;
use eventmesh_storage::StorageError;

use super::Runtime;
use crate::error::Result;

/// Events one browse answers with at most.
pub const MAX_BROWSE: usize = 100;
/// Payload bytes one browse answers with, about (the first event always).
pub const MAX_BROWSE_BYTES: usize = 4 << 20;
/// The longest a browse waits for new events.
pub const MAX_BROWSE_WAIT: Duration = Duration::from_secs(30);
/// Topics one browse reads at most.
pub const MAX_BROWSE_TOPICS: usize = 32;
/// Payload bytes read from one partition per pass.
const PARTITION_READ_BYTES: usize = 1 << 20;

/// Where a reader goes on: topic, then partition, then the next offset.
pub type Cursor = BTreeMap<String, BTreeMap<u32, u64>>;

/// One browse.
#[derive(Debug, Clone)]
pub struct BrowseRequest {
    /// The topics to read (each must exist).
    pub topics: Vec<String>,
    /// Where a partition the cursor does not name starts.
    pub from: Position,
    /// Where partitions named here go on.
    pub cursor: Cursor,
    /// Events to return at most (1 to [`MAX_BROWSE`]).
    pub max: usize,
    /// How long to wait when there is nothing to return yet.
    pub wait: Duration,
}

/// One event read.
#[derive(Debug, Clone)]
pub struct BrowsedEvent {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// When the runtime accepted it (ms since the epoch).
    pub ingest_ms: u64,
    pub event: CloudEvent,
}

/// What a browse read, and where to go on.
#[derive(Debug, Clone, Default)]
pub struct Browsed {
    pub events: Vec<BrowsedEvent>,
    /// Every partition read, with its next offset.
    pub next: Cursor,
}

/// One partition being read: where it starts, and its topic's time to live.
struct Start {
    topic: String,
    partition: u32,
    offset: u64,
    ttl_ms: Option<u64>,
}

/// What one pass over one partition found.
struct Found {
    /// Events worth returning, in offset order.
    events: Vec<(BrowsedEvent, usize)>,
    /// One past the last record looked at (the start when none was).
    looked_to: u64,
}

fn expired(event: &CloudEvent, ingest_ms: u64, ttl_ms: Option<u64>) -> bool {
    event
        .expires_at_ms()
        .or_else(|| ttl_ms.map(|t| ingest_ms.saturating_add(t)))
        .is_some_and(|at| at <= eventmesh_core::time::now_ms())
}

impl Runtime {
    /// Reads up to `req.max` events of `req.topics` from the cursor (or
    /// `req.from`), waiting up to `req.wait` for one when there is none.
    pub async fn browse(&self, req: BrowseRequest) -> Result<Browsed> {
        self.lifecycle.check_running()?;
        if req.topics.len() > MAX_BROWSE_TOPICS {
            return Err(super::bad(
                "too_many_topics",
                format!(
                    "{} topics to read; at most {MAX_BROWSE_TOPICS} are read at once",
                    req.topics.len()
                ),
            ));
        }
        let max = req.max.clamp(1, MAX_BROWSE);
        let deadline = tokio::time::Instant::now() + req.wait.min(MAX_BROWSE_WAIT);
        // Appends to topics kept in memory are announced while this
        // waits, whoever else takes them (see `crate::handoff`).
        let _watching = self.ingress.handoffs().watching();
        let mut appended = self.log.append_watch();
        let starts = self.starts(&req).await?;
        loop {
            // Seen before reading: an append from here on wakes the wait.
            appended.borrow_and_update();
            let got = self.browse_once(&starts, max).await?;
            if !got.events.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            tokio::select! {
                changed = appended.changed() => if changed.is_err() { return Ok(got) },
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Where each partition of the requested topics starts.
    async fn starts(&self, req: &BrowseRequest) -> Result<Vec<Start>> {
        let mut starts = Vec::new();
        for topic in &req.topics {
            let info = self
                .log
                .topic(topic)
                .await?
                .ok_or_else(|| StorageError::UnknownTopic(topic.clone()))?;
            let named = req.cursor.get(topic);
            for partition in 0..info.partitions {
                let offset = match named.and_then(|c| c.get(&partition)) {
                    Some(o) => *o,
                    None => super::rewind::resolve(req.from, &*self.log, topic, partition).await?,
                };
                starts.push(Start {
                    topic: topic.clone(),
                    partition,
                    offset,
                    ttl_ms: info.ttl_ms,
                });
            }
        }
        Ok(starts)
    }

    /// One pass over every partition: the first `max` events in the order
    /// they were accepted, and the cursor after them.
    async fn browse_once(&self, starts: &[Start], max: usize) -> Result<Browsed> {
        let mut found = Vec::with_capacity(starts.len());
        for s in starts {
            found.push(self.browse_partition(s, max).await?);
        }
        // The events to return: by acceptance time, then by place.
        let mut all: Vec<(usize, usize)> = found
            .iter()
            .enumerate()
            .flat_map(|(i, f)| (0..f.events.len()).map(move |j| (i, j)))
            .collect();
        all.sort_by(|a, b| {
            let (x, y) = (&found[a.0].events[a.1].0, &found[b.0].events[b.1].0);
            (x.ingest_ms, &x.topic, x.partition, x.offset).cmp(&(
                y.ingest_ms,
                &y.topic,
                y.partition,
                y.offset,
            ))
        });
        let mut taken = vec![0usize; found.len()];
        let mut bytes = 0usize;
        let mut chosen = Vec::new();
        for (i, j) in all {
            let size = found[i].events[j].1;
            if chosen.len() == max || (!chosen.is_empty() && bytes + size > MAX_BROWSE_BYTES) {
                break;
            }
            bytes += size;
            taken[i] += 1;
            chosen.push((i, j));
        }
        let mut next = Cursor::new();
        for (i, (s, f)) in starts.iter().zip(&found).enumerate() {
            // Events of one partition are taken in offset order, so the
            // first `taken[i]` of them went out.
            let offset = match f.events.get(taken[i]) {
                Some((first_left, _)) => first_left.offset,
                None => f.looked_to,
            };
            next.entry(s.topic.clone())
                .or_default()
                .insert(s.partition, offset);
        }
        let mut slots: Vec<Vec<Option<BrowsedEvent>>> = found
            .into_iter()
            .map(|f| f.events.into_iter().map(|(e, _)| Some(e)).collect())
            .collect();
        let events = chosen
            .into_iter()
            .filter_map(|(i, j)| slots[i][j].take())
            .collect();
        Ok(Browsed { events, next })
    }

    /// Up to `max` events of one partition from its start.
    async fn browse_partition(&self, s: &Start, max: usize) -> Result<Found> {
        let records = self
            .log
            .read(&s.topic, s.partition, s.offset, max, PARTITION_READ_BYTES)
            .await?;
        let looked_to = records.last().map_or(s.offset, |r| r.offset + 1);
        let events = records
            .into_iter()
            .filter_map(|r| {
                let size = r.payload.len();
                let event = self.browsed(s, r.offset, &r.payload)?;
                Some((event, size))
            })
            .collect();
        Ok(Found { events, looked_to })
    }

    /// The record at `offset` as an event to return, unless it is
    /// undecodable or expired.
    fn browsed(&self, s: &Start, offset: u64, payload: &Bytes) -> Option<BrowsedEvent> {
        let StoredEvent { ingest_ms, event } = match codec::decode(payload) {
            Ok(stored) => stored,
            Err(e) => {
                self.metrics.corrupt_records.inc();
                tracing::error!(topic = %s.topic, partition = s.partition, offset, error = %e, "browse skips an undecodable record");
                return None;
            }
        };
        if expired(&event, ingest_ms, s.ttl_ms) {
            return None;
        }
        Some(BrowsedEvent {
            topic: s.topic.clone(),
            partition: s.partition,
            offset,
            ingest_ms,
            event,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(extra: &str) -> CloudEvent {
        CloudEvent::from_json_slice(
            format!(r#"{{"specversion":"1.0","id":"1","source":"/t","type":"t"{extra}}}"#)
                .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn expiry_comes_from_the_event_else_the_topic() {
        let now = eventmesh_core::time::now_ms();
        assert!(!expired(&event(""), now, None));
        assert!(expired(&event(""), now - 2_000, Some(1_000)));
        assert!(!expired(&event(""), now, Some(60_000)));
        let past = r#","expirytime":"2001-01-01T00:00:00Z""#;
        assert!(expired(&event(past), now, Some(60_000)));
        let future = r#","expirytime":"2999-01-01T00:00:00Z""#;
        assert!(!expired(&event(future), now - 2_000, None));
    }
}
