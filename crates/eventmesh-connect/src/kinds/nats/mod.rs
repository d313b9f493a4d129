//! `nats-source` and `nats-sink`: NATS subjects into the mesh and events
//! out to NATS, over core NATS or JetStream (`mode`), through `async-nats`.
//!
//! This module owns what the two kinds share: their configs and the checks
//! on them (subjects, stream and consumer names, servers and credentials),
//! the connection to the servers, and the error and timeout helpers. The
//! rest is one file each:
//! - `binding`: the CloudEvents NATS binding, from a message to its event
//!   and from an event to its message (structured or binary mode);
//! - `source`: `nats-source`, a core subscription or a JetStream durable
//!   pull consumer, with its positions, event ids and acknowledgements;
//! - `sink`: `nats-sink`, the subject rendered per event, publishing, and
//!   waiting for the flush or for the JetStream acknowledgements.
//!
//! In short: core NATS keeps nothing, so the source delivers into the mesh
//! at most once across outages and the sink writes at most once. In
//! JetStream mode the source acknowledges only on commit (at least once,
//! a redelivery keeping its id so the mesh drops it as a duplicate) and
//! the sink's writes are deduplicated by `Nats-Msg-Id` within the stream's
//! duplicate window.
//!
//! Invariants: an opened connector's config passed `check` (the registry
//! checks it before `open`). Each opened
//! source or sink holds its own client connection, named `eventmesh
//! <connector>`, whose events (a slow consumer dropping messages among
//! them) are logged as warnings. What the operator must fix (a bad server
//! URL, rejected credentials or authorization, TLS) is a `Config` error;
//! what may pass on its own (no server answering, a request running past
//! its limit) is `Unavailable`, so the runtime tries again.

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_nats::{Client, ConnectErrorKind, ConnectOptions};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::kind::Kind;
use crate::sdk::{ConnectorError, Target};

mod binding;
mod sink;
mod source;

pub use sink::NatsSink;
pub use source::NatsSource;

/// How long a connect, a JetStream API call or an ack confirmation may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The default `ack_wait_ms`.
pub const DEFAULT_ACK_WAIT_MS: u64 = 60_000;

/// Core NATS or JetStream.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Core,
    Jetstream,
}

/// How the sink puts an event in a message.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `ce-*` headers, the data as the body.
    #[default]
    Binary,
    /// The JSON event as the body.
    Structured,
}

fn default_type() -> String {
    "nats.message".to_string()
}
fn default_batch() -> usize {
    100
}
fn default_timeout_ms() -> u64 {
    10_000
}

/// The `config` of a `nats-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSourceConfig {
    /// Server URLs (`nats://host:port`, or `tls://`), tried in turn.
    pub servers: Vec<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// Authentication token (instead of `user`/`password`).
    pub token: Option<String>,
    /// The subject to read, `*` and `>` wildcards allowed; in JetStream
    /// mode the durable consumer's filter.
    pub subject: String,
    /// `core` (live messages only) or `jetstream` (a durable consumer).
    #[serde(default)]
    pub mode: Mode,
    /// Core mode: a queue group; the connectors of one group share the
    /// messages instead of each receiving all.
    pub queue: Option<String>,
    /// The `type` of events made from messages that are not CloudEvents.
    #[serde(default = "default_type", rename = "type")]
    pub ty: String,
    /// JetStream mode: the stream to read (required).
    pub stream: Option<String>,
    /// JetStream mode: the durable consumer; default `eventmesh-<connector>`.
    pub durable: Option<String>,
    /// JetStream mode: create `stream`, capturing `subject`, when missing.
    #[serde(default)]
    pub create_stream: bool,
    /// JetStream mode: how long a read message may stay unacknowledged
    /// before it is delivered again (default 60000): how long the messages
    /// a crashed source read but never committed wait.
    pub ack_wait_ms: Option<u64>,
    /// The most records one poll returns.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

/// The `config` of a `nats-sink`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// Server URLs (`nats://host:port`, or `tls://`), tried in turn.
    pub servers: Vec<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// Authentication token (instead of `user`/`password`).
    pub token: Option<String>,
    /// The subject to publish to; `{subject}` and `{type}` are replaced by
    /// the event's.
    pub subject: String,
    /// `core` (publish and flush) or `jetstream` (publish with
    /// `Nats-Msg-Id`, wait for every acknowledgement).
    #[serde(default)]
    pub mode: Mode,
    /// `binary` (`ce-*` headers, the data as the body) or `structured`
    /// (the JSON event as the body).
    #[serde(default)]
    pub format: Format,
    /// How long a write waits for its flush or acknowledgements.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

// ---------------------------------------------------------------- checks

/// Checks a subject: `wildcards` allows `*` tokens and a final `>`.
fn check_subject(s: &str, wildcards: bool) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} contains whitespace"));
    }
    let tokens: Vec<&str> = s.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err(format!("{s:?} has an empty token"));
        }
        if !t.contains(['*', '>']) {
            continue;
        }
        if !wildcards {
            return Err(format!("{s:?} contains a wildcard"));
        }
        if !(*t == "*" || (*t == ">" && i + 1 == tokens.len())) {
            return Err(format!(
                "{s:?}: wildcards are whole tokens, and > only the last"
            ));
        }
    }
    Ok(())
}

/// Whether `c` may not appear in a stream or consumer name.
fn bad_name_char(c: char) -> bool {
    c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>')
}

fn check_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().any(bad_name_char) {
        return Err(format!(
            "{field} {name:?} must be non-empty, without whitespace, '.', '*' or '>'"
        ));
    }
    Ok(())
}

fn check_connection(
    servers: &[String],
    user: &Option<String>,
    password: &Option<String>,
    token: &Option<String>,
) -> Result<(), String> {
    if servers.is_empty() {
        return Err("servers must list at least one URL".into());
    }
    for (i, s) in servers.iter().enumerate() {
        let addr =
            async_nats::ServerAddr::from_str(s).map_err(|e| format!("servers[{i}] {s:?}: {e}"))?;
        if !matches!(addr.scheme(), "nats" | "tls") || !s.contains("://") {
            return Err(format!(
                "servers[{i}] {s:?} must be a nats:// or tls:// URL"
            ));
        }
    }
    match (user, password, token) {
        (Some(_), _, Some(_)) => Err("token and user are exclusive".into()),
        (Some(_), None, _) => Err("user needs a password".into()),
        (None, Some(_), _) => Err("password needs a user".into()),
        (Some(u), Some(p), _) if u.is_empty() || p.is_empty() => {
            Err("user and password must not be empty".into())
        }
        (_, _, Some(t)) if t.is_empty() => Err("token must not be empty".into()),
        _ => Ok(()),
    }
}

fn default_durable(connector: &str) -> String {
    let safe: String = connector
        .chars()
        .map(|c| if bad_name_char(c) { '_' } else { c })
        .collect();
    format!("eventmesh-{safe}")
}

// ---------------------------------------------------------------- connecting

fn unavailable(what: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::unavailable(format!("{what}: {e}"))
}

/// `fut` within `limit`; its failure, or running late, is `Unavailable`.
async fn within<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, ConnectorError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| unavailable(what, e)),
        Err(_) => Err(unavailable(what, format!("no answer within {limit:?}"))),
    }
}

/// The servers a list of URLs reaches (4222 by default).
fn targets_of(servers: &[String]) -> Vec<Target> {
    servers
        .iter()
        .filter_map(|s| async_nats::ServerAddr::from_str(s).ok())
        .map(|a| Target::new(a.host(), a.port()))
        .collect()
}

async fn connect(
    connector: &str,
    servers: &[String],
    user: &Option<String>,
    password: &Option<String>,
    token: &Option<String>,
) -> Result<Client, ConnectorError> {
    let addrs = servers
        .iter()
        .map(|s| async_nats::ServerAddr::from_str(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConnectorError::config(format!("servers: {e}")))?;
    let name = connector.to_string();
    let mut options = ConnectOptions::new()
        .name(format!("eventmesh {connector}"))
        .connection_timeout(REQUEST_TIMEOUT)
        .event_callback(move |ev| {
            let name = name.clone();
            // Slow-consumer events say messages were dropped.
            async move { tracing::warn!(connector = %name, "NATS: {ev}") }
        });
    if let (Some(u), Some(p)) = (user, password) {
        options = options.user_and_password(u.clone(), p.clone());
    }
    if let Some(t) = token {
        options = options.token(t.clone());
    }
    options.connect(addrs).await.map_err(|e| match e.kind() {
        ConnectErrorKind::Authentication
        | ConnectErrorKind::AuthorizationViolation
        | ConnectErrorKind::ServerParse
        | ConnectErrorKind::Tls => ConnectorError::config(format!("NATS {servers:?}: {e}")),
        _ => unavailable(&format!("NATS {servers:?}"), e),
    })
}

/// The NATS kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<NatsSource>(), Kind::sink::<NatsSink>()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_checked_for_wildcards_and_tokens() {
        assert_eq!(check_subject("orders.*.created", true), Ok(()));
        assert_eq!(check_subject("orders.>", true), Ok(()));
        assert_eq!(check_subject("", true), Err("must not be empty".into()));
        assert_eq!(
            check_subject("a..b", true),
            Err("\"a..b\" has an empty token".into())
        );
        assert_eq!(
            check_subject("a b", true),
            Err("\"a b\" contains whitespace".into())
        );
        let misplaced = "\"a.>.b\": wildcards are whole tokens, and > only the last";
        assert_eq!(check_subject("a.>.b", true), Err(misplaced.into()));
        assert!(check_subject("a.b*", true).is_err());
        assert_eq!(
            check_subject("a.*", false),
            Err("\"a.*\" contains a wildcard".into())
        );
    }

    #[test]
    fn names_and_connections_are_checked() {
        assert_eq!(default_durable("orders in.eu"), "eventmesh-orders_in_eu");
        assert_eq!(check_name("durable", "ok-1"), Ok(()));
        assert!(check_name("stream", "a.b")
            .unwrap_err()
            .starts_with("stream \"a.b\""));
        let servers = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let check = |s: &[&str], u: Option<&str>, p: Option<&str>, t: Option<&str>| {
            let own = |x: Option<&str>| x.map(str::to_string);
            check_connection(&servers(s), &own(u), &own(p), &own(t))
        };
        assert_eq!(
            check(&["nats://h:4222", "tls://h2"], None, None, None),
            Ok(())
        );
        assert_eq!(check(&["nats://h"], None, None, Some("t")), Ok(()));
        assert_eq!(
            check(&[], None, None, None),
            Err("servers must list at least one URL".into())
        );
        let scheme = "servers[0] \"http://h\": invalid scheme for NATS server URL: http";
        assert_eq!(check(&["http://h"], None, None, None), Err(scheme.into()));
        let bare = "servers[0] \"h:4222\" must be a nats:// or tls:// URL";
        assert_eq!(check(&["h:4222"], None, None, None), Err(bare.into()));
        assert_eq!(
            check(&["nats://h"], Some("u"), None, None),
            Err("user needs a password".into())
        );
        let both = Err("token and user are exclusive".into());
        assert_eq!(check(&["nats://h"], Some("u"), Some("p"), Some("t")), both);
    }
}
