//! Runtime errors. Each one has a [`ErrorKind`] and a machine code, so that
//! transports map errors to their wire answers without looking inside the
//! storage or state errors.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RuntimeError {
    /// Client input was refused; the message says what and why.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// The named thing does not exist.
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// The caller may not act on the named thing (it belongs to another
    /// tenant or principal).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// The request conflicts with existing state.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
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
    /// Another instance of the cluster cannot be reached.
    #[error("{0}")]
    Peer(String),
    /// A setting the runtime cannot use (a TLS file that cannot be read or
    /// parsed); met at start, never by a request.
    #[error("{0}")]
    Config(String),
}

/// What kind of failure an error is, independent of any wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong; sending it again will not help.
    Invalid,
    NotFound,
    Forbidden,
    Conflict,
    Timeout,
    /// The disk is full: nothing was stored, retry once space is freed.
    NoSpace,
    /// A dependency (storage, meta store) or the runtime itself cannot
    /// serve now; retrying later may work.
    Unavailable,
}

impl RuntimeError {
    pub fn kind(&self) -> ErrorKind {
        use eventmesh_storage::StorageError as S;
        match self {
            RuntimeError::BadRequest { .. } => ErrorKind::Invalid,
            RuntimeError::NotFound { .. } => ErrorKind::NotFound,
            RuntimeError::Forbidden { .. } => ErrorKind::Forbidden,
            RuntimeError::Conflict { .. } => ErrorKind::Conflict,
            RuntimeError::Timeout(_) => ErrorKind::Timeout,
            RuntimeError::ShuttingDown | RuntimeError::Peer(_) => ErrorKind::Unavailable,
            RuntimeError::Config(_) => ErrorKind::Invalid,
            RuntimeError::Storage(s) => match s {
                S::UnknownTopic(_) | S::UnknownPartition { .. } => ErrorKind::NotFound,
                S::InvalidArgument(_) => ErrorKind::Invalid,
                S::NoSpace(_) => ErrorKind::NoSpace,
                S::Closed | S::Io(_) | S::Open { .. } | S::Connect { .. } | S::Unavailable(_) => {
                    ErrorKind::Unavailable
                }
            },
            RuntimeError::State(_) => ErrorKind::Unavailable,
        }
    }

    /// The machine-readable code answered to clients.
    pub fn code(&self) -> &'static str {
        use eventmesh_storage::StorageError as S;
        match self {
            RuntimeError::BadRequest { code, .. }
            | RuntimeError::NotFound { code, .. }
            | RuntimeError::Forbidden { code, .. }
            | RuntimeError::Conflict { code, .. } => code,
            RuntimeError::Timeout(_) => "request_timeout",
            RuntimeError::ShuttingDown => "shutting_down",
            RuntimeError::Peer(_) => "instance_unavailable",
            RuntimeError::Config(_) => "invalid_config",
            RuntimeError::Storage(s) => match s {
                S::UnknownTopic(_) | S::UnknownPartition { .. } => "unknown_topic",
                S::InvalidArgument(_) => "invalid_request",
                S::NoSpace(_) => "insufficient_storage",
                S::Closed => "shutting_down",
                S::Io(_) | S::Open { .. } | S::Connect { .. } | S::Unavailable(_) => {
                    "storage_unavailable"
                }
            },
            RuntimeError::State(eventmesh_state::StateError::Meta(_)) => "meta_unavailable",
            RuntimeError::State(_) => "state_unavailable",
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_storage::StorageError;

    #[test]
    fn storage_errors_are_classified_without_the_caller_matching_them() {
        let e = RuntimeError::from(StorageError::NoSpace("disk full".into()));
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::NoSpace, "insufficient_storage")
        );
        let e = RuntimeError::from(StorageError::UnknownTopic("t".into()));
        assert_eq!((e.kind(), e.code()), (ErrorKind::NotFound, "unknown_topic"));
        let e = RuntimeError::from(StorageError::Closed);
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Unavailable, "shutting_down")
        );
        let e = RuntimeError::Forbidden {
            code: "not_owner",
            message: "x".into(),
        };
        assert_eq!((e.kind(), e.code()), (ErrorKind::Forbidden, "not_owner"));
    }
}
