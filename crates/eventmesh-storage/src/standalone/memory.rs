//! Topics kept in memory (`durability: memory`): their records live in a
//! queue per partition in this process and nowhere else, while their
//! definition (name, partitions, retention, time to live) is stored like
//! any other topic's. Appends are answered as soon as they are queued: no
//! write, no fsync, no writer thread.
//!
//! What a memory topic gives up: a crash or a restart loses every record
//! it held; keyed appends are not deduplicated (a re-sent event is stored
//! again). Its size is bounded: by its retention, and per partition by
//! [`DEFAULT_MEMORY_BYTES`] when its retention sets no byte limit, the
//! oldest records dropped first.
//!
//! Offsets: each time the log opens, a memory partition starts empty at
//! the time of day in milliseconds times 1,000, so that its offsets never
//! repeat those of a run before (unless that run appended more than 1,000
//! records per millisecond to the partition on average, or the clock went
//! back). A consumer whose committed offset lies below that start has lost
//! what it had not read, and is told so as for any records retention
//! dropped.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use bytes::Bytes;

use super::dedup::now_ms;
use super::topics::PartitionState;
use crate::log::{Append, Placed, Record, Retention};

/// Payload bytes a memory partition holds at most when its retention
/// names no byte limit.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;

/// Where the partitions of a memory topic start when the log opens.
pub(super) fn start_offset() -> u64 {
    now_ms().saturating_mul(1000)
}

/// One memory partition's records, oldest first, with consecutive offsets
/// from `first`.
#[derive(Debug, Default)]
pub(super) struct MemPartition {
    records: VecDeque<Bytes>,
    first: u64,
}

impl MemPartition {
    pub(super) fn starting_at(offset: u64) -> Self {
        MemPartition {
            records: VecDeque::new(),
            first: offset,
        }
    }
}

/// A memory topic's partitions.
#[derive(Debug)]
pub(super) struct MemTopic {
    parts: Vec<Mutex<MemPartition>>,
}

impl MemTopic {
    pub(super) fn new(parts: &[PartitionState]) -> Self {
        MemTopic {
            parts: parts
                .iter()
                .map(|p| Mutex::new(MemPartition::starting_at(p.end.load(Ordering::Acquire))))
                .collect(),
        }
    }

    /// Appends the records (each partition already checked), dropping the
    /// oldest past `limit_bytes` in each partition appended to.
    pub(super) fn append(
        &self,
        states: &[PartitionState],
        records: Vec<Append>,
        limit_bytes: u64,
    ) -> Vec<Placed> {
        let now = now_ms();
        let mut placed = Vec::with_capacity(records.len());
        for a in records {
            let i = a.partition as usize;
            let state = &states[i];
            let mut part = self.parts[i].lock().expect("memory partition lock");
            let offset = part.first + part.records.len() as u64;
            let len = a.payload.len() as u64;
            part.records.push_back(a.payload);
            state.bytes_end.fetch_add(len, Ordering::AcqRel);
            state.last_append_ms.store(now, Ordering::Release);
            state.end.store(offset + 1, Ordering::Release);
            trim(&mut part, state, |p, held| {
                held > limit_bytes && p.records.len() > 1
            });
            placed.push(Placed {
                partition: a.partition,
                offset,
                duplicate: false,
            });
        }
        placed
    }

    /// Records at `from` and above, as [`crate::EventLog::read`] reads them.
    pub(super) fn read(
        &self,
        partition: u32,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Vec<Record> {
        let part = self.parts[partition as usize]
            .lock()
            .expect("memory partition lock");
        let skip = from.saturating_sub(part.first) as usize;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for (i, payload) in part.records.iter().enumerate().skip(skip) {
            if out.len() >= max_records || (!out.is_empty() && bytes + payload.len() > max_bytes) {
                break;
            }
            bytes += payload.len();
            out.push(Record {
                offset: part.first + i as u64,
                payload: payload.clone(),
            });
        }
        out
    }

    /// Drops the records below `offset` of one partition.
    pub(super) fn truncate(&self, states: &[PartitionState], partition: u32, offset: u64) {
        let i = partition as usize;
        let mut part = self.parts[i].lock().expect("memory partition lock");
        trim(&mut part, &states[i], |p, _| p.first < offset);
    }

    /// Applies a retention to every partition: the oldest records past its
    /// byte limit (or `limit_bytes` when it has none), and those accepted
    /// longer ago than its age limit.
    pub(super) fn retain(&self, states: &[PartitionState], retention: Retention) {
        let limit = memory_limit(retention);
        let cutoff = (retention.ms > 0).then(|| now_ms().saturating_sub(retention.ms));
        for (part, state) in self.parts.iter().zip(states) {
            let mut part = part.lock().expect("memory partition lock");
            trim(&mut part, state, |p, held| {
                held > limit
                    || cutoff.is_some_and(|cutoff| {
                        p.records
                            .front()
                            .and_then(eventmesh_core::codec::ingest_ms)
                            .is_some_and(|at| at < cutoff)
                    })
            });
        }
    }
}

/// The byte limit of a memory partition under a retention.
pub(super) fn memory_limit(retention: Retention) -> u64 {
    if retention.bytes > 0 {
        retention.bytes
    } else {
        DEFAULT_MEMORY_BYTES
    }
}

/// Drops the oldest records while `more` says so (given the partition and
/// the bytes it holds), moving the partition's start and byte count.
fn trim(
    part: &mut MemPartition,
    state: &PartitionState,
    more: impl Fn(&MemPartition, u64) -> bool,
) {
    let mut dropped = 0u64;
    while !part.records.is_empty() && more(part, state.held_bytes() - dropped) {
        let r = part.records.pop_front().expect("not empty");
        part.first += 1;
        dropped += r.len() as u64;
    }
    if dropped > 0 {
        state.bytes_start.fetch_add(dropped, Ordering::AcqRel);
    }
    state.start.store(part.first, Ordering::Release);
}
