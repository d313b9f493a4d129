//! Core types of the event mesh: CloudEvents, their stored encoding, topic
//! names, partition selection and configuration. It does no network or storage I/O; every
//! other crate builds on it; only configuration loading reads a file.

pub mod codec;
pub mod config;
pub mod error;
pub mod event;
pub mod json_str;
pub mod pattern;
pub mod pem;
pub mod position;
pub mod redact;
pub mod tcp_frame;
pub mod throttle;
pub mod time;
pub mod topic;

pub use error::CoreError;
pub use event::{CloudEvent, Data, ExtValue};
