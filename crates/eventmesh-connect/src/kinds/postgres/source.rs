//! `postgres-source`: an outbox table into the mesh, in id order, one row
//! one record.
//!
//! The source reads an *outbox* table in id order: an application inserts
//! a row in the same transaction as its own change, and the row becomes an
//! event once that transaction commits. Its shape (what `create_table`
//! makes):
//!
//! ```sql
//! CREATE TABLE outbox (
//!     id         bigserial PRIMARY KEY,  -- order and position
//!     type       text,                   -- event type (else the config's `type`)
//!     subject    text,                   -- event subject
//!     key        text,                   -- the `partitionkey` extension
//!     payload    jsonb,                  -- data; jsonb, json, text or bytea
//!     created_at timestamptz NOT NULL DEFAULT now()  -- event time
//! );
//! ```
//!
//! Only `id` (any integer type) and `payload` are required; the other
//! columns are used when the table has them (a view can rename another
//! table's columns, but is not locked by its writers: read tables). A
//! json/jsonb payload is JSON data as stored; a text or bytea one is read
//! like any outside payload (JSON if it parses, else text, else bytes);
//! NULL is no data. The event `id` is `<table>:<row id>`
//! (the table as configured), so a row read again after a crash is a
//! duplicate the mesh drops. The position after a row is `{"id": <row id>}`.
//!
//! Why an outbox and not logical decoding: it works on any PostgreSQL, with
//! no `wal_level=logical`, replication slot or replication privilege, and
//! the position is one integer.
//!
//! The catch with reading `id > last`: a transaction takes its id when it
//! inserts, not when it commits. If A takes id 5, B takes 6 and B commits
//! first, a naive reader returns 6, moves past it, and never sees 5. This
//! source returns only *settled* ids. On finding a new highest visible id
//! `hi`, it notes the transactions holding a write lock on the table at that
//! moment (`pg_locks`), waits until they have all ended, then reads
//! `last < id <= hi` with a fresh snapshot. Every transaction that took an
//! id `<= hi` took it before `hi` was read, while holding the table lock
//! (an INSERT locks the table before computing its defaults, and keeps the
//! lock to the end): it had either committed (visible) or was among the
//! noted ones (waited for). Later writers get ids above `hi`. Writers are
//! never blocked, and new ones cannot starve the source; a long-running
//! writer delays it until it ends. This needs what the default `bigserial`
//! gives: ids drawn by the INSERT itself, from a sequence without a
//! per-session cache (`CACHE 1`).
//!
//! `delete_after_commit` deletes the rows up to a position once the runtime
//! commits it (they are settled and read). `lag()` counts the rows after the
//! last one read (up to 1,000,000).
//!
//! Invariants: every id up to `settled` is final (committed, or never will
//! be) and the cursor never passes it, so no row is skipped; a position
//! returned was settled when it was read, so a source opened at one starts
//! with everything up to it settled. A poll that fails drops the
//! connection (the next call makes a new one and checks the table again).

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_core::event::{Data, ExtValue, PARTITION_KEY};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, Row, Statement};

use super::{
    check_names, connect, pg_error, quote_table, targets_of, PostgresSourceConfig, SqlError,
};
use crate::sdk::{
    data_of, event, ConnectorError, Position, Record, Source, SourceContext, SourceKind,
};

/// A payload cell of any supported type, as event data.
struct Payload(Data);

/// Reads a payload cell: json/jsonb as JSON, other types like any outside
/// payload.
fn decode_payload(ty: &Type, raw: &[u8]) -> Result<Data, String> {
    match raw.split_first() {
        _ if *ty == Type::JSON => Ok(Data::Json(Bytes::copy_from_slice(raw))),
        Some((1, json)) if *ty == Type::JSONB => Ok(Data::Json(Bytes::copy_from_slice(json))),
        _ if *ty == Type::JSONB => Err("unsupported jsonb format".into()),
        _ => Ok(data_of(raw)),
    }
}

impl<'a> FromSql<'a> for Payload {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, SqlError> {
        Ok(Payload(decode_payload(ty, raw)?))
    }
    fn accepts(ty: &Type) -> bool {
        let types = [
            Type::JSON,
            Type::JSONB,
            Type::TEXT,
            Type::VARCHAR,
            Type::BPCHAR,
            Type::BYTEA,
        ];
        types.contains(ty)
    }
}

/// `{"id": n}`.
fn parse_position(p: &Position) -> Result<i64, ConnectorError> {
    let id = p.get("id").and_then(serde_json::Value::as_i64);
    id.ok_or_else(|| ConnectorError::config(format!("position {p} is not {{\"id\": <integer>}}")))
}

/// The kind.
pub struct PostgresSource;

/// An open connection and the statements made for the table's shape.
struct SourceConn {
    client: Client,
    /// The table's oid, for `pg_locks`.
    oid: u32,
    read: Statement,
}

/// Waiting for the transactions that were writing when `hi` was seen.
struct Barrier {
    hi: i64,
    writers: Vec<String>,
}

struct PgSource {
    config: PostgresSourceConfig,
    connector: String,
    table: String,
    conn: Option<SourceConn>,
    /// The id of the last row returned (or of the end of a settled gap).
    cursor: i64,
    /// Every id up to here is final: committed, or never will be.
    settled: i64,
    barrier: Option<Barrier>,
}

/// The other sessions' transactions holding a write lock on table `$1`.
const WRITERS: &str = "SELECT DISTINCT virtualtransaction FROM pg_locks \
     WHERE locktype = 'relation' AND relation = $1::oid AND granted \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', \
     'AccessExclusiveLock') AND pid IS DISTINCT FROM pg_backend_pid()";

fn texts(rows: Vec<Row>) -> Result<Vec<String>, tokio_postgres::Error> {
    rows.iter().map(|r| r.try_get(0)).collect()
}

impl PgSource {
    async fn connection(&mut self) -> Result<&mut SourceConn, ConnectorError> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(self.open_conn().await?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| ConnectorError::unavailable("not connected"))
    }

    /// Connects, makes the table if asked, and checks its shape.
    async fn open_conn(&self) -> Result<SourceConn, ConnectorError> {
        let (t, name) = (&self.table, &self.config.table);
        let client = connect(&self.config.url, &self.connector).await?;
        if self.config.create_table {
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {t} (id bigserial PRIMARY KEY, type text, \
                 subject text, key text, payload jsonb, \
                 created_at timestamptz NOT NULL DEFAULT now())"
            );
            let made = client.batch_execute(&ddl).await;
            made.map_err(|e| pg_error("create table", e))?;
        }
        let lookup = |e| pg_error("look up the table", e);
        let oid = client.query_one("SELECT to_regclass($1)::oid", &[t]).await;
        let Some(oid) = oid
            .and_then(|r| r.try_get::<_, Option<u32>>(0))
            .map_err(lookup)?
        else {
            return Err(ConnectorError::config(format!(
                "table {name} does not exist"
            )));
        };
        let cols = client
            .query(
                "SELECT attname::text, format_type(atttypid, NULL) FROM pg_attribute \
                 WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped",
                &[&oid],
            )
            .await;
        let cols: Vec<(String, String)> = cols
            .and_then(|rows| {
                rows.iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect()
            })
            .map_err(lookup)?;
        let type_of = |n: &str| cols.iter().find(|(c, _)| c == n).map(|(_, t)| t.as_str());
        if !matches!(type_of("id"), Some("bigint" | "integer" | "smallint")) {
            let msg = format!("table {name} needs an integer id column");
            return Err(ConnectorError::Config(msg));
        }
        let text = |n: &str| match type_of(n) {
            Some(_) => format!("\"{n}\"::text"),
            None => "NULL::text".into(),
        };
        let (ty, subject, key) = (text("type"), text("subject"), text("key"));
        let time = match type_of("created_at") {
            Some("timestamp with time zone") => {
                "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
            }
            _ => "NULL::text",
        };
        let sql = format!(
            "SELECT id::int8, payload, {ty}, {subject}, {key}, {time} FROM {t} \
             WHERE id > $1::int8 AND id <= $2::int8 ORDER BY id LIMIT $3"
        );
        // A missing payload column fails here, as a Config error.
        let read = client.prepare(&sql).await.map_err(|e| pg_error(t, e))?;
        let payload = read.columns()[1].type_();
        if !<Payload as FromSql>::accepts(payload) {
            let msg = format!("table {name}: payload is {payload}, not jsonb, json, text or bytea");
            return Err(ConnectorError::Config(msg));
        }
        Ok(SourceConn { client, oid, read })
    }

    fn record(&self, row: &Row) -> Result<Record, tokio_postgres::Error> {
        let text = |i: usize| -> Result<Option<String>, _> {
            Ok(row
                .try_get::<_, Option<String>>(i)?
                .filter(|s| !s.is_empty()))
        };
        let id: i64 = row.try_get(0)?;
        let data = row
            .try_get::<_, Option<Payload>>(1)?
            .map_or(Data::None, |p| p.0);
        let ty = text(2)?.unwrap_or_else(|| self.config.ty.clone());
        let mut ev = event(
            &self.connector,
            format!("{}:{id}", self.config.table),
            &ty,
            data,
        );
        ev.subject = text(3)?;
        if let Some(key) = text(4)? {
            ev.set_extension(PARTITION_KEY, ExtValue::Str(key));
        }
        // Four-digit years only: RFC 3339 has no others.
        ev.time = text(5)?.filter(|t| t.len() == 27);
        let position = serde_json::json!({ "id": id });
        Ok(Record {
            event: ev,
            position,
            topic: None,
        })
    }

    /// Reads settled rows after the cursor.
    async fn read(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let (cursor, settled) = (self.cursor, self.settled);
        let limit = i64::from(self.config.batch_size.max(1));
        let conn = self.connection().await?;
        let rows = conn
            .client
            .query(&conn.read, &[&cursor, &settled, &limit])
            .await;
        let rows = rows.map_err(|e| pg_error("read", e))?;
        let records: Vec<Record> = rows
            .iter()
            .map(|r| self.record(r))
            .collect::<Result<_, _>>()
            .map_err(|e| pg_error("read", e))?;
        self.cursor = match records.last() {
            Some(r) => parse_position(&r.position)?,
            // Only ids rolled back: nothing will ever be there.
            None => settled,
        };
        Ok(records)
    }

    /// One step towards settling more ids; true when `settled` moved.
    async fn settle(&mut self) -> Result<bool, ConnectorError> {
        let (cursor, t) = (self.cursor, self.table.clone());
        let max_sql = format!("SELECT max(id)::int8 FROM {t} WHERE id > $1::int8");
        // Taken first: should this call fail, a fresh barrier is as good.
        let pending = self.barrier.take();
        let conn = self.connection().await?;
        let pg = |e| pg_error("poll", e);
        let mut barrier = match pending {
            Some(b) => b,
            None => {
                let row = conn
                    .client
                    .query_one(&max_sql, &[&cursor])
                    .await
                    .map_err(pg)?;
                let Some(hi) = row.try_get::<_, Option<i64>>(0).map_err(pg)? else {
                    return Ok(false);
                };
                let writers = conn.client.query(WRITERS, &[&conn.oid]).await;
                Barrier {
                    hi,
                    writers: writers.and_then(texts).map_err(pg)?,
                }
            }
        };
        if !barrier.writers.is_empty() {
            let sql = format!("SELECT * FROM ({WRITERS}) w WHERE virtualtransaction = ANY($2)");
            let still = conn
                .client
                .query(&sql, &[&conn.oid, &barrier.writers])
                .await;
            barrier.writers = still.and_then(texts).map_err(pg)?;
        }
        if barrier.writers.is_empty() {
            self.settled = self.settled.max(barrier.hi);
            return Ok(true);
        }
        self.barrier = Some(barrier);
        Ok(false)
    }

    async fn poll_once(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        let idle = Duration::from_millis(self.config.poll_interval_ms.max(1));
        loop {
            if self.settled > self.cursor {
                let records = self.read().await?;
                if !records.is_empty() {
                    return Ok(records);
                }
            } else if !self.settle().await? {
                // Writers usually end within milliseconds: look again soon.
                let soon = Duration::from_millis(20);
                let pause = if self.barrier.is_some() {
                    idle.min(soon)
                } else {
                    idle
                };
                if tokio::time::Instant::now() + pause > deadline {
                    return Ok(Vec::new());
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[async_trait]
impl Source for PgSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let reused = self.conn.as_ref().is_some_and(|c| !c.client.is_closed());
        let mut result = self.poll_once().await;
        let closed = self.conn.as_ref().is_none_or(|c| c.client.is_closed());
        if reused && closed && result.is_err() {
            // Lost while idle: once more on a new connection.
            self.conn = None;
            result = self.poll_once().await;
        }
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        if !self.config.delete_after_commit {
            return Ok(());
        }
        let upto = parse_position(position)?;
        let sql = format!("DELETE FROM {} WHERE id <= $1::int8", self.table);
        let conn = self.connection().await?;
        let deleted = conn.client.execute(&sql, &[&upto]).await;
        deleted.map(|_| ()).map_err(|e| pg_error("delete", e))
    }

    async fn lag(&mut self) -> Option<u64> {
        let t = &self.table;
        let sql =
            format!("SELECT count(*) FROM (SELECT FROM {t} WHERE id > $1::int8 LIMIT 1000000) s");
        let cursor = self.cursor;
        let conn = self.connection().await.ok()?;
        let row = conn.client.query_one(&sql, &[&cursor]).await.ok()?;
        u64::try_from(row.try_get::<_, i64>(0).ok()?).ok()
    }
}

#[async_trait]
impl SourceKind for PostgresSource {
    type Config = PostgresSourceConfig;
    const NAME: &'static str = "postgres-source";
    const DESCRIPTION: &'static str =
        "Reads an outbox table of a PostgreSQL database in id order, without skipping late commits";

    fn targets(config: &Self::Config) -> Vec<crate::sdk::Target> {
        targets_of(&config.url)
    }

    fn check(config: &Self::Config) -> Result<(), String> {
        check_names(&config.url, &config.table)?;
        if config.ty.is_empty() {
            return Err("type must not be empty".into());
        }
        if !(1..=60_000).contains(&config.poll_interval_ms) {
            return Err("poll_interval_ms must be 1..=60000".into());
        }
        if !(1..=10_000).contains(&config.batch_size) {
            return Err("batch_size must be 1..=10000".into());
        }
        Ok(())
    }

    async fn open(
        config: Self::Config,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        // A position returned was settled when it was read.
        let start = ctx.position.as_ref().map_or(Ok(i64::MIN), parse_position)?;
        let mut source = PgSource {
            table: quote_table(&config.table).unwrap_or_default(),
            config,
            connector: ctx.connector,
            conn: None,
            cursor: start,
            settled: start,
            barrier: None,
        };
        source.connection().await?;
        Ok(Box::new(source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payload_cells_become_data() {
        let json = |s: &'static [u8]| Ok(Data::Json(Bytes::from_static(s)));
        assert_eq!(decode_payload(&Type::JSONB, b"\x01[1]"), json(b"[1]"));
        assert!(decode_payload(&Type::JSONB, b"\x02[1]").is_err());
        assert_eq!(decode_payload(&Type::JSON, b"\"s\""), json(b"\"s\""));
        assert_eq!(decode_payload(&Type::TEXT, b"7"), json(b"7"));
        assert_eq!(
            decode_payload(&Type::TEXT, b"hello"),
            Ok(Data::Text("hello".into()))
        );
        let binary = Ok(Data::Binary(Bytes::from_static(&[0xff])));
        assert_eq!(decode_payload(&Type::BYTEA, &[0xff]), binary);
    }

    #[test]
    fn positions_are_row_ids() {
        assert_eq!(parse_position(&json!({"id": 42})), Ok(42));
        for bad in [json!({"id": "42"}), json!(42), json!({})] {
            assert!(matches!(
                parse_position(&bad),
                Err(ConnectorError::Config(_))
            ));
        }
    }
}
