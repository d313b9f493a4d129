//! The configuration error type. Every message a user can meet names what
//! went wrong precisely: the file and line of a syntax error, or the key,
//! the offending value and what would have been allowed.

use std::path::PathBuf;

/// A configuration problem; `Display` gives the full human-readable message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {} does not exist", path.display())]
    FileNotFound { path: PathBuf },
    #[error("cannot read configuration file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}, line {line}: {message}")]
    Parse {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("invalid -D argument \"{arg}\": {reason}")]
    MalformedOverride { arg: String, reason: String },
    #[error("{key} is not set; {hint}")]
    Missing { key: &'static str, hint: String },
    #[error("invalid value \"{value}\" for {key}: expected {expected}")]
    InvalidValue {
        key: &'static str,
        value: String,
        expected: String,
    },
    /// Values that are individually valid but do not fit together.
    #[error("{0}")]
    Conflict(String),
    /// A valid setting that this build cannot honour.
    #[error("{0}")]
    Unsupported(String),
}
