//! The built-in connector kinds, one file per system. (The `http-source`
//! is served by the runtime's traffic port, which owns its endpoint; it is
//! listed here for its schema.)

pub mod file;
pub mod http;
pub mod mqtt;
pub mod nats;
pub mod postgres;
pub mod redis;

use crate::kind::Kind;

/// Every built-in kind, sorted by name.
pub fn all() -> Vec<Kind> {
    let mut kinds = vec![
        Kind::source::<file::FileSource>(),
        Kind::sink::<file::FileSink>(),
        Kind::source::<http::HttpSource>(),
    ];
    kinds.extend(mqtt::kinds());
    kinds.extend(nats::kinds());
    kinds.extend(postgres::kinds());
    kinds.extend(redis::kinds());
    kinds.sort_by_key(|k| k.name());
    kinds
}
