//! `postgres-source` and `postgres-sink`: PostgreSQL through `tokio-postgres`
//! (plain TCP, no TLS), configured by a connection `url` and a `table`.
//!
//! This module owns what the two kinds share: their configs, the checks on
//! the URL and the table name, the connection, and the mapping of driver
//! errors. The rest is one file each:
//! - `source`: `postgres-source`, an outbox table read in id order, only
//!   ids every writer has settled, so a late commit is never skipped;
//! - `sink`: `postgres-sink`, an upsert per event keyed by (`source`,
//!   `id`), one transaction per `write`.
//!
//! Table and column names must be identifiers (`[A-Za-z_][A-Za-z0-9_$]*`,
//! the table optionally `schema.table`); they are quoted, so they match as
//! written, case included.
//!
//! Errors: a missing table or column, refused credentials or a missing
//! database are `Config`; anything else (server down, connection lost, a row
//! the server rejects) is `Unavailable`. A lost connection is made again on
//! the next call, or at once when it is found closed on first use.
//!
//! Invariants: both kinds connect in `open`, so an opened connector's
//! config passed `check` (the registry checks it before `open`) and its
//! table was found usable. Each opened source or sink holds at most one connection,
//! named `eventmesh <connector>` unless the URL names it, its driver on a
//! task of its own.

mod sink;
mod source;

use std::error::Error as StdError;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio_postgres::{Client, NoTls};

use crate::kind::Kind;
use crate::sdk::{ConnectorError, Target};

pub use sink::PostgresSink;
pub use source::PostgresSource;

/// This module's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![
        Kind::source::<PostgresSource>(),
        Kind::sink::<PostgresSink>(),
    ]
}

type SqlError = Box<dyn StdError + Sync + Send>;

fn yes() -> bool {
    true
}
fn default_type() -> String {
    "postgres.outbox".into()
}
fn default_poll_ms() -> u64 {
    200
}
fn default_batch() -> u32 {
    500
}

/// The `config` of a `postgres-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresSourceConfig {
    /// Connection URL, `postgres://user:password@host:5432/db` (the
    /// password is redacted by the admin API).
    pub url: String,
    /// The outbox table, `name` or `schema.name`.
    pub table: String,
    /// Create the table in the default shape when missing. Off by default:
    /// a misspelt name then fails instead of waiting on a new empty table.
    #[serde(default)]
    pub create_table: bool,
    /// Delete the rows up to a position once the runtime commits it.
    #[serde(default)]
    pub delete_after_commit: bool,
    /// How often to look for new rows when idle, in milliseconds.
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    /// The most rows one poll returns.
    #[serde(default = "default_batch")]
    pub batch_size: u32,
    /// Event `type` of rows with no type column or value.
    #[serde(default = "default_type", rename = "type")]
    pub ty: String,
}

/// The `config` of a `postgres-sink`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// Connection URL, `postgres://user:password@host:5432/db` (the
    /// password is redacted by the admin API).
    pub url: String,
    /// The table written, `name` or `schema.name`: one row per event,
    /// upserted by (`source`, `id`).
    pub table: String,
    /// Create the table when missing (`CREATE TABLE IF NOT EXISTS`).
    #[serde(default = "yes")]
    pub create_table: bool,
}

/// A quoted identifier, or `None` when `name` is not one.
fn quote_ident(name: &str) -> Option<String> {
    let mut b = name.bytes();
    let first = b
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_');
    let rest = b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$');
    (first && rest && name.len() <= 63).then(|| format!("\"{name}\""))
}

/// A quoted `name` or `schema.name`, or `None`.
pub fn quote_table(name: &str) -> Option<String> {
    match name.split_once('.') {
        Some((schema, t)) => Some(format!("{}.{}", quote_ident(schema)?, quote_ident(t)?)),
        None => quote_ident(name),
    }
}

/// The hosts a connection URL reaches: its `hostaddr` addresses when it
/// sets them (connected to instead of resolving the hosts), else its TCP
/// hosts, each with its port (5432 by default). Unix sockets are local.
fn targets_of(url: &str) -> Vec<Target> {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else {
        return Vec::new();
    };
    let ports = config.get_ports();
    let port = |i: usize| match ports {
        [] => 5432,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(5432),
    };
    if !config.get_hostaddrs().is_empty() {
        return config
            .get_hostaddrs()
            .iter()
            .enumerate()
            .map(|(i, ip)| Target::new(ip.to_string(), port(i)))
            .collect();
    }
    config
        .get_hosts()
        .iter()
        .enumerate()
        .filter_map(|(i, h)| match h {
            tokio_postgres::config::Host::Tcp(name) => Some(Target::new(name.clone(), port(i))),
            _ => None,
        })
        .collect()
}

/// Checks the url and the table name; the message names the field.
fn check_names(url: &str, table: &str) -> Result<(), String> {
    if let Err(e) = url.parse::<tokio_postgres::Config>() {
        return Err(format!("url is not a PostgreSQL connection URL: {e}"));
    }
    match quote_table(table) {
        Some(_) => Ok(()),
        None => Err(format!("table {table:?} is not a name or schema.name")),
    }
}

/// Maps a driver error: what only a changed definition can fix is
/// `Config`, the rest `Unavailable`.
fn pg_error(what: &str, e: tokio_postgres::Error) -> ConnectorError {
    let msg = match e.as_db_error() {
        Some(db) => format!("{what}: {} ({})", db.message(), db.code().code()),
        None => format!("{what}: {e}"),
    };
    let config = match e.code() {
        // Credentials (28), a missing database (3D), schema, names and
        // privileges (42).
        Some(code) => ["28", "3D", "42"]
            .iter()
            .any(|c| code.code().starts_with(c)),
        // The driver's own (a password the server asks for and lacks).
        None => e.to_string().starts_with("invalid configuration"),
    };
    if config {
        ConnectorError::Config(msg)
    } else {
        ConnectorError::Unavailable(msg)
    }
}

/// Connects (10 s timeout unless the URL sets one) and drives the
/// connection on a task.
async fn connect(url: &str, connector: &str) -> Result<Client, ConnectorError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| ConnectorError::config(format!("url: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    if config.get_application_name().is_none() {
        config.application_name(format!("eventmesh {connector}"));
    }
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| pg_error("connect", e))?;
    let name = connector.to_string();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(connector = %name, "postgres connection ended: {e}");
        }
    });
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_quoted() {
        assert_eq!(quote_table("outbox").as_deref(), Some("\"outbox\""));
        assert_eq!(
            quote_table("app.Out_1$").as_deref(),
            Some("\"app\".\"Out_1$\"")
        );
        let long = "x".repeat(64);
        for bad in ["", "1x", "a b", "a;b", "a.b.c", ".a", "a\"b", "é", &long] {
            assert_eq!(quote_table(bad), None, "{bad:?}");
        }
    }
}
