//! Meta store errors.

use thiserror::Error;

#[derive(Debug, Clone, Error)]
pub enum MetaError {
    /// The backend could not be reached or refused the call.
    #[error("meta store unavailable: {0}")]
    Unavailable(String),
    /// The backend did not answer within the configured timeout.
    #[error("meta store call timed out after {0} ms")]
    Timeout(u64),
    /// A stored entry could not be read back.
    #[error("meta store data error: {0}")]
    Corrupt(String),
}

pub type Result<T, E = MetaError> = std::result::Result<T, E>;
