//! The partitioned event log: the [`EventLog`] trait every storage backend
//! implements, the `standalone` backend on the node's local RocksDB, and the
//! conformance suite ([`tck`]) each backend must pass.
//!
//! Invariants kept by every backend:
//! 1. `append` returns only once the whole batch is durable under the
//!    backend's durability setting, and it is atomic: all events or none.
//! 2. Offsets in a partition increase with every append and are never
//!    reused, also after truncation. They need not be contiguous: the
//!    standalone backend numbers each partition 0, 1, 2, ...; JetStream
//!    numbers all partitions of a topic in one sequence, so a partition's
//!    offsets have gaps where other partitions' records sit.
//! 3. A record becomes readable only after its append has completed.

pub mod error;
mod heap;
pub mod localdb;
pub mod log;
pub mod standalone;
pub mod tck;

pub use error::StorageError;
pub use localdb::{BlockingFailed, LocalDb, LocalDbOptions, MemoryUsage};
pub use log::{
    Append, Durability, Enqueued, EventLog, IdempotencyKey, PendingAppend, Placed, Record,
    Retention, Scheduled, ScheduledSummary, StoredBytes, TopicInfo,
};
pub use standalone::{CommitObserver, CommitStats, StandaloneLog};
