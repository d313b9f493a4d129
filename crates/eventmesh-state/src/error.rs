//! State store errors.

use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum StateError {
    /// A local RocksDB write or read failed (disk full, I/O error).
    #[error("local state I/O error: {0}")]
    Io(String),
    /// The meta store failed or was unreachable.
    #[error(transparent)]
    Meta(#[from] eventmesh_meta::MetaError),
    /// A write in a partition's name was refused: this instance no longer
    /// holds the partition's claim (another owns it now, or the lease ended).
    #[error("fenced: {0}")]
    Fenced(String),
    /// A stored entry could not be decoded.
    #[error("corrupt state entry {key}: {cause}")]
    Corrupt { key: String, cause: String },
}

pub type Result<T, E = StateError> = std::result::Result<T, E>;
