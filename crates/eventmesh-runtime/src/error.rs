//! Runtime errors. Transports map each to one HTTP status and code.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    /// Client input was refused; the message says what and why.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// The named thing does not exist.
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// The request conflicts with existing state.
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Storage(#[from] eventmesh_storage::StorageError),
    #[error(transparent)]
    State(#[from] eventmesh_state::StateError),
    /// No answer within the time the caller gave.
    #[error("{0}")]
    Timeout(String),
    /// The runtime is shutting down.
    #[error("the runtime is shutting down")]
    ShuttingDown,
}

impl From<eventmesh_core::CoreError> for RuntimeError {
    fn from(e: eventmesh_core::CoreError) -> Self {
        RuntimeError::BadRequest {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
