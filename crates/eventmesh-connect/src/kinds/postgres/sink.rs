//! `postgres-sink`: an upsert per event.
//!
//! Each event is one row keyed by its CloudEvent identity. `create_table`
//! (default true) makes:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS events (
//!     source text NOT NULL, id text NOT NULL, type text NOT NULL,
//!     subject text, time timestamptz, datacontenttype text,
//!     data jsonb,           -- JSON as is, text as a JSON string,
//!                           -- bytes as a base64 JSON string, none as NULL
//!     event jsonb NOT NULL, -- the whole event in the JSON format
//!     PRIMARY KEY (source, id)
//! );
//! ```
//!
//! One `write` is one transaction of `INSERT ... ON CONFLICT (source, id)
//! DO UPDATE`: a replayed event overwrites its row with the same values, so
//! redelivery has an exactly-once effect. A table made beforehand needs
//! these columns (other types work where PostgreSQL casts on assignment)
//! and a unique key on (`source`, `id`). jsonb cannot hold U+0000: an event
//! carrying it fails to write and is retried, then dead-lettered, like any
//! failed delivery.

use async_trait::async_trait;
use base64::Engine as _;
use bytes::{BufMut, BytesMut};
use eventmesh_core::event::Data;
use eventmesh_core::CloudEvent;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::{Client, Statement};

use super::{
    check_names, connect, pg_error, quote_table, targets_of, PostgresSinkConfig, SqlError,
};
use crate::sdk::{ConnectorError, Sink, SinkContext, SinkKind};

/// JSON text bound as a `json`/`jsonb` parameter, sent as is.
#[derive(Debug)]
struct JsonText(Vec<u8>);

impl ToSql for JsonText {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, SqlError> {
        if *ty == Type::JSONB {
            out.put_u8(1); // the jsonb binary format's version
        }
        out.put_slice(&self.0);
        Ok(IsNull::No)
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
    to_sql_checked!();
}

/// The `time` column's value: the event's RFC 3339 time, which
/// PostgreSQL reads in every form but year 0000 (left NULL; the `event`
/// column keeps it).
fn time_text(time: Option<&str>) -> Option<&str> {
    time.filter(|t| !t.starts_with("0000"))
}

/// The `data` column: JSON as is, text as a JSON string, bytes as a base64
/// JSON string, none as NULL.
fn data_json(data: &Data) -> Option<JsonText> {
    let string = |s: &str| JsonText(serde_json::to_vec(s).unwrap_or_default());
    match data {
        Data::None => None,
        Data::Json(b) => Some(JsonText(b.to_vec())),
        Data::Text(s) => Some(string(s)),
        Data::Binary(b) => Some(string(&base64::engine::general_purpose::STANDARD.encode(b))),
    }
}

/// The kind.
pub struct PostgresSink;

struct PgSink {
    config: PostgresSinkConfig,
    table: String,
    connector: String,
    conn: Option<(Client, Statement)>,
}

impl PgSink {
    async fn connection(&mut self) -> Result<&mut (Client, Statement), ConnectorError> {
        if self.conn.as_ref().is_some_and(|(c, _)| c.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(self.open_conn().await?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| ConnectorError::unavailable("not connected"))
    }

    /// Connects, makes the table if asked, and prepares the upsert.
    async fn open_conn(&self) -> Result<(Client, Statement), ConnectorError> {
        let client = connect(&self.config.url, &self.connector).await?;
        let t = &self.table;
        if self.config.create_table {
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {t} (source text NOT NULL, id text NOT NULL, \
                 type text NOT NULL, subject text, time timestamptz, datacontenttype text, \
                 data jsonb, event jsonb NOT NULL, PRIMARY KEY (source, id))"
            );
            client
                .batch_execute(&ddl)
                .await
                .map_err(|e| pg_error("create table", e))?;
        }
        let sql = format!(
            "INSERT INTO {t} (source, id, type, subject, time, datacontenttype, data, event) \
             VALUES ($1, $2, $3, $4, $5::text::timestamptz, $6, $7::jsonb, $8::jsonb) \
             ON CONFLICT (source, id) DO UPDATE SET type = EXCLUDED.type, \
             subject = EXCLUDED.subject, time = EXCLUDED.time, \
             datacontenttype = EXCLUDED.datacontenttype, data = EXCLUDED.data, \
             event = EXCLUDED.event"
        );
        let stmt = client.prepare(&sql).await.map_err(|e| pg_error(t, e))?;
        Ok((client, stmt))
    }

    async fn write_all(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        let table = self.table.clone();
        let (client, stmt) = self.connection().await?;
        let values: Vec<_> = events
            .iter()
            .map(|e| {
                let time = time_text(e.time.as_deref());
                (time, data_json(&e.data), JsonText(e.to_json()))
            })
            .collect();
        let params: Vec<[&(dyn ToSql + Sync); 8]> = events
            .iter()
            .zip(&values)
            .map(|(e, (time, data, whole))| -> [&(dyn ToSql + Sync); 8] {
                let ct = &e.datacontenttype;
                [&e.source, &e.id, &e.ty, &e.subject, time, ct, data, whole]
            })
            .collect();
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_error("begin", e))?;
        // Sent back to back (pipelined) on the one connection, in order.
        let stmt = &*stmt;
        futures::future::try_join_all(params.iter().map(|p| tx.execute(stmt, p)))
            .await
            .map_err(|e| pg_error(&table, e))?;
        tx.commit().await.map_err(|e| pg_error("commit", e))
    }
}

#[async_trait]
impl Sink for PgSink {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        if events.is_empty() {
            return Ok(());
        }
        let reused = self.conn.as_ref().is_some_and(|(c, _)| !c.is_closed());
        let mut result = self.write_all(events).await;
        let closed = self.conn.as_ref().is_none_or(|(c, _)| c.is_closed());
        if reused && closed && matches!(result, Err(ConnectorError::Unavailable(_))) {
            // A connection lost while idle shows only when used: once more
            // on a new one (the upsert makes a repeat harmless).
            self.conn = None;
            result = self.write_all(events).await;
        }
        if matches!(result, Err(ConnectorError::Config(_))) {
            // The table may have changed: prepare afresh next time.
            self.conn = None;
        }
        result
    }
}

#[async_trait]
impl SinkKind for PostgresSink {
    type Config = PostgresSinkConfig;
    const NAME: &'static str = "postgres-sink";
    const DESCRIPTION: &'static str =
        "Upserts each event as a row of a PostgreSQL table keyed by (source, id)";

    fn targets(config: &Self::Config) -> Vec<crate::sdk::Target> {
        targets_of(&config.url)
    }

    fn check(config: &Self::Config) -> Result<(), String> {
        check_names(&config.url, &config.table)
    }

    async fn open(config: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        let table = quote_table(&config.table).unwrap_or_default();
        let connector = ctx.connector;
        let mut sink = PgSink {
            config,
            table,
            connector,
            conn: None,
        };
        sink.connection().await?;
        Ok(Box::new(sink))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn times_go_as_text_but_year_zero() {
        let t = "2024-02-29t12:30:45.1234567+02:00";
        assert_eq!(time_text(Some(t)), Some(t));
        assert_eq!(time_text(Some("0000-01-01T00:00:00Z")), None);
        assert_eq!(time_text(None), None);
    }

    #[test]
    fn data_maps_to_the_json_column() {
        let text = |d: Data| data_json(&d).map(|j| String::from_utf8(j.0).unwrap());
        assert_eq!(text(Data::None), None);
        assert_eq!(
            text(Data::Json(Bytes::from_static(b"{\"a\":1}"))).unwrap(),
            "{\"a\":1}"
        );
        assert_eq!(
            text(Data::Text("hi \"x\"".into())).unwrap(),
            "\"hi \\\"x\\\"\""
        );
        assert_eq!(
            text(Data::Binary(Bytes::from_static(&[0, 255]))).unwrap(),
            "\"AP8=\""
        );
    }
}
