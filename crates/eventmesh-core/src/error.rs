//! Errors raised while validating input at the edge of the system.

use thiserror::Error;

/// A rejected piece of client input. Each variant maps to one machine-readable
/// code that transports put in their `{"error","message"}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// The request body is not well-formed JSON.
    #[error("{0}")]
    MalformedJson(String),
    /// The body is JSON but not a valid CloudEvent 1.0.
    #[error("{0}")]
    InvalidEvent(String),
    /// A topic name outside `[A-Za-z0-9._/-]{1,255}`.
    #[error("{0}")]
    InvalidTopic(String),
    /// A topic pattern (with `*` or `>` tokens) that is malformed.
    #[error("{0}")]
    InvalidPattern(String),
    /// A stored record that cannot be decoded (corruption or a newer format).
    #[error("corrupt stored event: {0}")]
    Corrupt(String),
}

impl CoreError {
    /// The machine-readable code used in error answers.
    pub fn code(&self) -> &'static str {
        match self {
            CoreError::MalformedJson(_) => "malformed_json",
            CoreError::InvalidEvent(_) => "invalid_event",
            CoreError::InvalidTopic(_) => "invalid_topic",
            CoreError::InvalidPattern(_) => "invalid_pattern",
            CoreError::Corrupt(_) => "corrupt_event",
        }
    }
}
