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
    /// A watch asked to resume from a revision whose changes are no longer
    /// kept; re-read the prefix and watch from the snapshot's revision.
    #[error("changes after revision {requested} are no longer available (kept from {compacted}); re-read and watch again")]
    Compacted { requested: u64, compacted: u64 },
    /// The lease expired or never existed.
    #[error("lease {0} not found or expired")]
    LeaseNotFound(i64),
    /// The store's settings cannot be used (a TLS file that cannot be read
    /// or parsed, TLS asked for over a plain-text endpoint); names the file
    /// or setting at fault.
    #[error("meta store configuration: {0}")]
    Config(String),
    /// The TLS handshake with the backend failed: a certificate one side
    /// did not accept (an unknown authority, a missing or refused client
    /// certificate). Retrying does not help until the certificates change.
    #[error("TLS with the meta store failed: {0}")]
    Tls(String),
}

pub type Result<T, E = MetaError> = std::result::Result<T, E>;
