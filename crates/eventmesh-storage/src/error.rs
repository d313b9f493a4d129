//! Storage errors.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum StorageError {
    /// The local RocksDB could not be opened; the runtime must not start.
    #[error("failed to open RocksDB local store at {}: {cause}", path.display())]
    Open { path: PathBuf, cause: String },
    /// The log's servers could not be reached at start (a remote log); the
    /// runtime must not start.
    #[error("cannot open the event log on {servers}: {cause}")]
    Connect { servers: String, cause: String },
    /// A read or write failed in the backend (disk full, I/O error, ...).
    #[error("storage I/O error: {0}")]
    Io(String),
    /// The disk is full: nothing was written. Writes resume by themselves
    /// once space is freed.
    #[error("no space left on the storage device: {0}")]
    NoSpace(String),
    /// The backend cannot be reached or did not answer in time (a remote
    /// log): the write may or may not have been stored; retrying later may
    /// work.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    #[error("topic {topic:?} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The log is shutting down and takes no more writes.
    #[error("storage is closed")]
    Closed,
}

impl From<rocksdb::Error> for StorageError {
    fn from(e: rocksdb::Error) -> Self {
        let text = e.into_string();
        // RocksDB reports ENOSPC as an IOError with the NoSpace subcode,
        // rendered as "No space left on device"; while its writes are
        // stopped after such an error, every write returns that same status.
        if text.contains("No space left on device") || text.contains("NoSpace") {
            StorageError::NoSpace(text)
        } else {
            StorageError::Io(text)
        }
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
