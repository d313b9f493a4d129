//! `redis-source` and `redis-sink`: Redis Streams in and out of the mesh,
//! over one async multiplexed connection each (re-made after a connection
//! failure).
//!
//! This module owns what the two kinds share: their configs and the checks
//! on them (the server URL, non-empty names), the connection, and the
//! mapping of server errors. The rest is one file each:
//! - `entry`: a stream entry, its id and ordering, reading entries out of
//!   an `XREADGROUP` reply, and the event an entry becomes;
//! - `source`: `redis-source`, a consumer group read with its pending list,
//!   acknowledged only on commit (at least once into the mesh);
//! - `sink`: `redis-sink`, each `write` one `MULTI`/`EXEC` of `XADD`s (at
//!   least once, Streams having no deduplication).
//!
//! Invariants: an opened connector's config passed `check` (the registry
//! checks it before `open`). Each opened
//! source or sink holds one connection (a `Link`), forgotten after a
//! failure that is not the server's own answer, so the next call connects
//! again. A server error that no retry fixes (bad credentials, missing
//! permissions, a key holding another type) is a `Config` error; what may
//! pass on its own (no server, a lost connection, a timeout) is
//! `Unavailable`, so the runtime tries again.

mod entry;
mod sink;
mod source;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::kind::Kind;
use crate::sdk::{ConnectorError, Target};

pub use entry::{parse_read_reply, position_id, Entry, EntryId, Mapping};
pub use sink::{entry_fields, RedisSink};
pub use source::RedisSource;

/// This module's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<RedisSource>(), Kind::sink::<RedisSink>()]
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

fn default_consumer() -> String {
    "eventmesh".to_string()
}

fn default_start() -> String {
    "0".to_string()
}

fn default_batch() -> u32 {
    100
}

fn default_field() -> Option<String> {
    Some("data".to_string())
}

fn default_sink_field() -> String {
    "data".to_string()
}

fn default_type() -> String {
    "redis.stream.entry".to_string()
}

/// The `config` of a `redis-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisSourceConfig {
    /// The server, `redis://[:password@]host:port/db` (the password in the
    /// URL is never shown back by the admin API).
    pub url: String,
    /// The stream key to read.
    pub stream: String,
    /// The consumer group; default `eventmesh-<connector name>`.
    #[serde(default)]
    pub group: Option<String>,
    /// The consumer name within the group.
    #[serde(default = "default_consumer")]
    pub consumer: String,
    /// Where a group this source creates starts: `0` (the whole stream),
    /// `$` (only entries added from now on) or an entry id. An existing
    /// group is used as it stands.
    #[serde(default = "default_start")]
    pub start: String,
    /// The most entries read per call (1 to 10000).
    #[serde(default = "default_batch")]
    pub batch: u32,
    /// The entry field whose value is the event data; an entry without it,
    /// or every entry when null, becomes a JSON object of its fields.
    #[serde(default = "default_field")]
    pub field: Option<String>,
    /// The `type` of the events published.
    #[serde(default = "default_type", rename = "type")]
    pub ty: String,
}

/// How the sink lays an event out in a stream entry.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Attributes as fields (`id`, `source`, `type`, ..., `ce_<extension>`)
    /// and the payload bytes as `field`.
    #[default]
    Fields,
    /// The whole event in the CloudEvents JSON format as `field`.
    Json,
}

/// The `config` of a `redis-sink`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisSinkConfig {
    /// The server, `redis://[:password@]host:port/db` (the password in the
    /// URL is never shown back by the admin API).
    pub url: String,
    /// The stream key to append to (created by the first write).
    pub stream: String,
    /// `fields`: attributes as entry fields plus the payload; `json`: the
    /// whole CloudEvent JSON in one field.
    #[serde(default)]
    pub format: Format,
    /// The field holding the payload (`fields`) or the event JSON (`json`).
    #[serde(default = "default_sink_field")]
    pub field: String,
    /// Trim the stream to about this many entries on each append
    /// (`MAXLEN ~`); unbounded when absent.
    #[serde(default)]
    pub maxlen: Option<u64>,
}

/// The server a URL reaches (none for a Unix socket).
fn targets_of(url: &str) -> Vec<Target> {
    let Ok(client) = Client::open(url) else {
        return Vec::new();
    };
    match &client.get_connection_info().addr {
        redis::ConnectionAddr::Tcp(host, port) => vec![Target::new(host.clone(), *port)],
        redis::ConnectionAddr::TcpTls { host, port, .. } => vec![Target::new(host.clone(), *port)],
        _ => Vec::new(),
    }
}

fn check_url(url: &str) -> Result<Client, String> {
    Client::open(url).map_err(|e| format!("url: {}", e.detail().unwrap_or(&e.to_string())))
}

fn check_name(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    Ok(())
}

/// A server error that no retry fixes: bad credentials, missing
/// permissions, a key holding another type.
fn is_config_error(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::InvalidClientConfig
    ) || matches!(
        e.code(),
        Some("NOAUTH" | "WRONGPASS" | "NOPERM" | "WRONGTYPE")
    )
}

fn classify(what: &str, e: &RedisError) -> ConnectorError {
    if is_config_error(e) {
        ConnectorError::config(format!("redis {what}: {e}"))
    } else {
        ConnectorError::unavailable(format!("redis {what}: {e}"))
    }
}

/// One lazily made multiplexed connection, dropped after a failure that is
/// not the server's answer (so the next call connects again).
struct Link {
    client: Client,
    conn: Option<MultiplexedConnection>,
}

impl Link {
    fn new(client: Client) -> Link {
        Link { client, conn: None }
    }

    async fn get(&mut self) -> Result<MultiplexedConnection, ConnectorError> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| classify("connect", &e))?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Maps a failed call, forgetting the connection unless the server
    /// itself answered with the error.
    fn failed(&mut self, what: &str, e: &RedisError) -> ConnectorError {
        if e.code().is_none() {
            self.conn = None;
        }
        classify(what, e)
    }
}
