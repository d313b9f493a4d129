//! A topic's state in memory and its metadata record.
//!
//! Metadata: `t | name` → `id u32 | partitions u32`, followed by the topic's
//! own retention (`ms u64 | bytes u64`) when it has one, then its events'
//! time to live (`ms u64`) when it has one: 8, 16 (time to live only), 24
//! (retention only) or 32 bytes; then one byte, 1, when the topic keeps
//! its records in memory (see [`super::memory`]). `n` holds the next
//! topic id, so an id is never given twice (a deleted topic's leftovers can
//! never show up in a new one).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

use super::memory::MemTopic;
use crate::error::{Result, StorageError};
use crate::log::{Durability, Retention, TopicInfo};

pub(super) const NEXT_ID_KEY: &[u8] = b"n";

/// Marks are written at least this often per partition while it takes
/// appends: the granularity of retention by age.
pub(super) const MARK_MS: u64 = 1000;

/// Bytes between two marks of a partition when retention by size asks for
/// nothing finer: the granularity of retention by size and of byte counts.
const MARK_BYTES_MAX: u64 = 1 << 20;
const MARK_BYTES_MIN: u64 = 4 << 10;

pub(super) fn mark_bytes(effective: Retention) -> u64 {
    if effective.bytes > 0 {
        (effective.bytes / 16).clamp(MARK_BYTES_MIN, MARK_BYTES_MAX)
    } else {
        MARK_BYTES_MAX
    }
}

pub(super) fn topic_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 1);
    k.push(b't');
    k.extend_from_slice(name.as_bytes());
    k
}

pub(super) fn encode_meta(
    id: u32,
    partitions: u32,
    retention: Option<Retention>,
    ttl_ms: Option<u64>,
    durability: Durability,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(33);
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&partitions.to_be_bytes());
    if let Some(r) = retention {
        v.extend_from_slice(&r.ms.to_be_bytes());
        v.extend_from_slice(&r.bytes.to_be_bytes());
    }
    if let Some(ttl) = ttl_ms {
        v.extend_from_slice(&ttl.to_be_bytes());
    }
    if durability == Durability::Memory {
        v.push(1);
    }
    v
}

/// What a topic's metadata record holds.
pub(super) struct Meta {
    pub id: u32,
    pub partitions: u32,
    pub retention: Option<Retention>,
    pub ttl_ms: Option<u64>,
    pub durability: Durability,
}

/// Decodes a metadata record.
pub(super) fn decode_meta(name: &str, v: &[u8]) -> Result<Meta> {
    let (v, durability) = match v.split_last() {
        Some((&1, rest)) if v.len() % 8 == 1 => (rest, Durability::Memory),
        _ => (v, Durability::Disk),
    };
    let u32_at = |i: usize| u32::from_be_bytes(v[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_be_bytes(v[i..i + 8].try_into().expect("8 bytes"));
    let retention = |at: usize| Retention {
        ms: u64_at(at),
        bytes: u64_at(at + 8),
    };
    let (retention, ttl_ms) = match v.len() {
        8 => (None, None),
        16 => (None, Some(u64_at(8))),
        24 => (Some(retention(8)), None),
        32 => (Some(retention(8)), Some(u64_at(24))),
        _ => return Err(StorageError::Io(format!("bad metadata for topic {name}"))),
    };
    Ok(Meta {
        id: u32_at(0),
        partitions: u32_at(4),
        retention,
        ttl_ms,
        durability,
    })
}

/// What the log knows of one partition; the writer thread alone moves
/// `end`, `bytes_end`, `last_append_ms` and the last mark (of a memory
/// topic: the appender, under its partition's lock).
#[derive(Debug, Default)]
pub(super) struct PartitionState {
    /// Next offset.
    pub(super) end: AtomicU64,
    /// First stored offset.
    pub(super) start: AtomicU64,
    /// Payload bytes appended to the partition since it was created (or
    /// since the first record the log counted), up to `end`.
    pub(super) bytes_end: AtomicU64,
    /// The same count up to `start`: the partition holds the difference.
    pub(super) bytes_start: AtomicU64,
    /// When the last append was written (ms since the epoch).
    pub(super) last_append_ms: AtomicU64,
    /// Time and byte count of the last mark written (0: none yet).
    pub(super) mark_ms: AtomicU64,
    pub(super) mark_cum: AtomicU64,
}

impl PartitionState {
    pub(super) fn held_bytes(&self) -> u64 {
        self.bytes_end
            .load(Ordering::Acquire)
            .saturating_sub(self.bytes_start.load(Ordering::Acquire))
    }
}

pub(super) struct TopicState {
    pub(super) id: u32,
    pub(super) name: String,
    pub(super) parts: Vec<PartitionState>,
    /// The topic's own retention; `None`: the log's default.
    pub(super) retention: RwLock<Option<Retention>>,
    /// Its events' time to live; `None`: none.
    pub(super) ttl_ms: RwLock<Option<u64>>,
    /// Bytes between marks (see [`mark_bytes`]).
    pub(super) mark_bytes: AtomicU64,
    /// Set by the writer thread when the topic is deleted: later appends
    /// that still hold the state are refused.
    pub(super) deleted: AtomicBool,
    /// The records of a topic kept in memory; `None`: on disk.
    pub(super) memory: Option<MemTopic>,
}

impl TopicState {
    pub(super) fn new(
        id: u32,
        name: String,
        parts: Vec<PartitionState>,
        retention: Option<Retention>,
        ttl_ms: Option<u64>,
        default: Retention,
        durability: Durability,
    ) -> Self {
        let memory = (durability == Durability::Memory).then(|| MemTopic::new(&parts));
        TopicState {
            memory,
            id,
            name,
            parts,
            retention: RwLock::new(retention),
            ttl_ms: RwLock::new(ttl_ms),
            mark_bytes: AtomicU64::new(mark_bytes(retention.unwrap_or(default))),
            deleted: AtomicBool::new(false),
        }
    }

    pub(super) fn own_retention(&self) -> Option<Retention> {
        *self.retention.read().expect("retention lock")
    }

    /// Sets the topic's own retention and the mark spacing that follows.
    pub(super) fn set_retention(&self, retention: Option<Retention>, default: Retention) {
        *self.retention.write().expect("retention lock") = retention;
        self.mark_bytes
            .store(mark_bytes(retention.unwrap_or(default)), Ordering::Relaxed);
    }

    pub(super) fn ttl_ms(&self) -> Option<u64> {
        *self.ttl_ms.read().expect("ttl lock")
    }

    pub(super) fn set_ttl(&self, ttl_ms: Option<u64>) {
        *self.ttl_ms.write().expect("ttl lock") = ttl_ms;
    }

    pub(super) fn info(&self) -> TopicInfo {
        TopicInfo {
            name: self.name.clone(),
            partitions: self.parts.len() as u32,
            retention: self.own_retention(),
            ttl_ms: self.ttl_ms(),
            durability: self.durability(),
        }
    }

    pub(super) fn durability(&self) -> Durability {
        match self.memory {
            Some(_) => Durability::Memory,
            None => Durability::Disk,
        }
    }

    pub(super) fn part(&self, partition: u32) -> Result<&PartitionState> {
        self.parts
            .get(partition as usize)
            .ok_or_else(|| StorageError::UnknownPartition {
                topic: self.name.clone(),
                partition,
            })
    }
}
