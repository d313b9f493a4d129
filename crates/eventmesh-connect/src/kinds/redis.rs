//! `redis-source` and `redis-sink`: Redis Streams in and out of the mesh,
//! over one async multiplexed connection each (re-made after a connection
//! failure).
//!
//! **Source.** Reads one stream key through a consumer group (`group`,
//! default `eventmesh-<connector>`; consumer `consumer`, default
//! `eventmesh`). The group is created if missing (`XGROUP CREATE ...
//! MKSTREAM`, from `start`: `0` the whole stream, `$` only new entries). A
//! source first reads its consumer's own pending entries (`XREADGROUP ...
//! 0`: delivered before a crash and never acknowledged), then new ones
//! (`>`, `BLOCK` 1 s, `COUNT` `batch`). Entries are acknowledged (`XACK`)
//! only in `commit`, all of those returned up to and including the
//! committed entry; the ids returned and not yet acknowledged are kept in
//! order for that.
//!
//! Mapping of an entry: when it has the payload field (`field`, default
//! `data`), that field's value is the event `data` (JSON kept as JSON,
//! other UTF-8 as text, else bytes) and the other fields are not carried;
//! without it (or with `field: null`) the whole entry becomes a JSON object
//! of its fields, each value a string, or `{"base64": "..."}` for a value
//! that is not UTF-8 (a field given twice keeps its last value, as does
//! the payload field). The event `id` is `<stream>-<entry id>`, stable
//! across redelivery so a replay is dropped by the mesh's deduplication;
//! `type` is the configured `type`; extensions `redisstream` (the key) and
//! `redisid` (the entry id).
//!
//! Position: `{"id": "<entry id>"}`, the entry just returned. What resumes
//! after a crash is the consumer group (its last-delivered id and this
//! consumer's pending list), not the position, which is mostly there for
//! status. A source opened with a position acknowledges, without returning
//! them, entries at or before it (their commit was stored but the `XACK`
//! may have been lost), so a committed position is never read again.
//! Delivery into the mesh is at least once.
//!
//! Invariants: an entry leaves the pending list only after its position was
//! committed, or when it can never be delivered (deleted from the stream
//! while pending: acknowledged when met); a read cut off at an await (or
//! failed) makes the next poll read the pending list again from after the
//! last entry returned, so an entry the server delivered but the source
//! never saw is not stranded.
//!
//! **Sink.** `XADD`s each event to `stream`, all events of one `write` in
//! one `MULTI`/`EXEC` and answered after `EXEC`'s reply. `format: fields`
//! (default) writes the attributes as fields `id`, `source`, `type`,
//! `datacontenttype`, `dataschema`, `subject`, `time` (those present),
//! extensions as `ce_<name>` (their text form), then the payload bytes as
//! `field` (default `data`; none for an event without data). `format: json`
//! writes the whole event in the CloudEvents JSON format as the one field
//! `field`. `maxlen` trims the stream approximately (`MAXLEN ~`). Streams
//! have no deduplication: a write retried after an error may append an
//! entry twice (at least once); readers that care dedupe by `source` + `id`.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::kind::Kind;
use crate::sdk::{
    data_of, event, ConnectorError, Position, Record, Sink, SinkContext, SinkKind, Source,
    SourceContext, SourceKind,
};

/// This file's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<RedisSource>(), Kind::sink::<RedisSink>()]
}

const BLOCK_MS: u64 = 1000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const ACK_CHUNK: usize = 1000;
const MAX_BATCH: u32 = 10_000;

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

/// The attribute fields the sink writes in `fields` format.
const ATTRIBUTE_FIELDS: &str = "id specversion source type datacontenttype dataschema subject time";

fn check_url(url: &str) -> Result<Client, String> {
    Client::open(url).map_err(|e| format!("url: {}", e.detail().unwrap_or(&e.to_string())))
}

/// An entry id, `<milliseconds>-<sequence>`, ordered as the stream orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntryId {
    pub ms: u64,
    pub seq: u64,
}

fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl EntryId {
    /// Parses `<ms>-<seq>`.
    pub fn parse(s: &str) -> Option<EntryId> {
        let (ms, seq) = s.split_once('-')?;
        Some(EntryId {
            ms: digits(ms)?,
            seq: digits(seq)?,
        })
    }
}

/// The entry id of a source position `{"id": "<entry id>"}`.
pub fn position_id(position: &Position) -> Option<EntryId> {
    EntryId::parse(position.get("id")?.as_str()?)
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

// ---- reading replies -------------------------------------------------------

/// One stream entry as read; `fields` is `None` for an entry deleted while
/// pending.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: String,
    pub key: EntryId,
    pub fields: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone().into()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// A flat `[name, value, ...]` list (or a RESP3 map) of strings.
fn pairs_of(v: &Value) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let flat: Vec<&Value> = match v {
        Value::Array(items) => items.iter().collect(),
        Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => return None,
    };
    if flat.len() % 2 != 0 {
        return None;
    }
    flat.chunks(2)
        .map(|p| Some((bytes_of(p[0])?, bytes_of(p[1])?)))
        .collect()
}

fn parse_entry(v: &Value) -> Result<Entry, String> {
    let Value::Array(parts) = v else {
        return Err("a stream entry is not an array".into());
    };
    let id = parts.first().and_then(bytes_of).unwrap_or_default();
    let id = String::from_utf8_lossy(&id).into_owned();
    let key = EntryId::parse(&id).ok_or_else(|| format!("entry id {id:?} is not <ms>-<seq>"))?;
    let fields = match parts.get(1) {
        None | Some(Value::Nil) => None,
        Some(f) => Some(pairs_of(f).ok_or_else(|| format!("entry {id}: fields are not strings"))?),
    };
    Ok(Entry { id, key, fields })
}

/// The entries of an `XREADGROUP` reply (RESP2 array or RESP3 map of
/// streams; nil when nothing came).
pub fn parse_read_reply(v: &Value) -> Result<Vec<Entry>, String> {
    let lists: Vec<&Value> = match v {
        Value::Nil => Vec::new(),
        Value::Array(streams) => streams
            .iter()
            .map(|s| match s {
                Value::Array(pair) if pair.len() == 2 => Ok(&pair[1]),
                _ => Err("a stream in the reply is not [key, entries]".to_string()),
            })
            .collect::<Result<_, _>>()?,
        Value::Map(streams) => streams.iter().map(|(_, entries)| entries).collect(),
        _ => return Err("the reply is not a list of streams".into()),
    };
    let mut out = Vec::new();
    for list in lists {
        match list {
            Value::Array(items) => out.extend(
                items
                    .iter()
                    .map(parse_entry)
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Value::Nil => {}
            _ => return Err("a stream's entries are not an array".into()),
        }
    }
    Ok(out)
}

// ---- the source -------------------------------------------------------------

/// How an entry becomes an event (see the module docs).
#[derive(Debug, Clone)]
pub struct Mapping {
    pub connector: String,
    pub stream: String,
    pub field: Option<String>,
    pub ty: String,
}

impl Mapping {
    /// The event for entry `id` with `fields`.
    pub fn event(&self, id: &str, fields: &[(Vec<u8>, Vec<u8>)]) -> CloudEvent {
        let payload = self.field.as_ref().and_then(|name| {
            fields
                .iter()
                .rev()
                .find(|(k, _)| k.as_slice() == name.as_bytes())
        });
        let data = match payload {
            Some((_, value)) => data_of(value),
            None => {
                let mut object = serde_json::Map::new();
                for (k, v) in fields {
                    let value = match std::str::from_utf8(v) {
                        Ok(text) => json!(text),
                        Err(_) => json!({
                            "base64": base64::engine::general_purpose::STANDARD.encode(v)
                        }),
                    };
                    object.insert(String::from_utf8_lossy(k).into_owned(), value);
                }
                let text = serde_json::Value::Object(object).to_string();
                Data::Json(bytes::Bytes::from(text.into_bytes()))
            }
        };
        let mut ev = event(
            &self.connector,
            format!("{}-{id}", self.stream),
            &self.ty,
            data,
        );
        ev.set_extension("redisstream", ExtValue::Str(self.stream.clone()));
        ev.set_extension("redisid", ExtValue::Str(id.to_string()));
        ev
    }
}

/// The kind.
pub struct RedisSource;

/// Which entries the next read asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// This consumer's pending entries after the given id.
    Pending(String),
    /// Entries never delivered to the group (`>`).
    New,
}

struct StreamSource {
    link: Link,
    stream: String,
    group: String,
    consumer: String,
    start: String,
    batch: u32,
    mapping: Mapping,
    group_ready: bool,
    stage: Stage,
    /// Returned and not yet acknowledged, in stream order.
    unacked: VecDeque<(EntryId, String)>,
    last_returned: Option<String>,
    /// Entries at or before this were committed by an earlier source.
    floor: Option<EntryId>,
    /// Set while a read is in flight, cleared when it succeeds: set at the
    /// start of a poll means the last read was cut off or failed.
    reading: bool,
}

impl StreamSource {
    async fn ensure_group(&mut self) -> Result<(), ConnectorError> {
        if self.group_ready {
            return Ok(());
        }
        let mut conn = self.link.get().await?;
        let created: Result<Value, RedisError> = redis::cmd("XGROUP")
            .arg(&["CREATE", &self.stream, &self.group, &self.start, "MKSTREAM"])
            .query_async(&mut conn)
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            // A plain `ERR` here is the server refusing our arguments.
            Err(e) if e.code() == Some("ERR") => {
                return Err(ConnectorError::config(format!(
                    "redis XGROUP CREATE {} {}: {e}",
                    self.stream, self.group
                )))
            }
            Err(e) => return Err(self.link.failed("XGROUP CREATE", &e)),
        }
        self.group_ready = true;
        Ok(())
    }

    /// Runs one command, mapping its failure.
    async fn run<T: redis::FromRedisValue>(
        &mut self,
        what: &str,
        cmd: &redis::Cmd,
    ) -> Result<T, ConnectorError> {
        let mut conn = self.link.get().await?;
        let result = cmd.query_async(&mut conn).await;
        result.map_err(|e| self.failed(what, &e))
    }

    fn failed(&mut self, what: &str, e: &RedisError) -> ConnectorError {
        if e.code() == Some("NOGROUP") {
            // The group (or the whole key) was removed: make it again.
            tracing::warn!(stream = %self.stream, group = %self.group, "consumer group is gone; creating it again");
            self.group_ready = false;
        }
        self.link.failed(what, e)
    }

    /// `XREADGROUP`: this consumer's pending entries after `after`, or new
    /// ones (waiting up to the block time).
    async fn read_group(&mut self, after: Option<&str>) -> Result<Vec<Entry>, ConnectorError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg(&["GROUP", &self.group, &self.consumer])
            .arg("COUNT")
            .arg(self.batch);
        if after.is_none() {
            cmd.arg("BLOCK").arg(BLOCK_MS);
        }
        cmd.arg(&["STREAMS", &self.stream, after.unwrap_or(">")]);
        let reply: Value = self.run("XREADGROUP", &cmd).await?;
        parse_read_reply(&reply)
            .map_err(|e| ConnectorError::unavailable(format!("redis XREADGROUP: {e}")))
    }

    async fn ack(&mut self, ids: &[String]) -> Result<(), ConnectorError> {
        for chunk in ids.chunks(ACK_CHUNK) {
            let mut cmd = redis::cmd("XACK");
            cmd.arg(&[&self.stream, &self.group]).arg(chunk);
            self.run::<Value>("XACK", &cmd).await?;
        }
        Ok(())
    }

    /// One read: records, or none after the block time.
    async fn read(&mut self) -> Result<Vec<Record>, ConnectorError> {
        loop {
            let entries = match self.stage.clone() {
                Stage::Pending(after) => {
                    let entries = self.read_group(Some(&after)).await?;
                    if entries.is_empty() {
                        self.stage = Stage::New;
                        continue;
                    }
                    entries
                }
                Stage::New => self.read_group(None).await?,
            };
            let Some(last) = entries.last().map(|e| e.id.clone()) else {
                return Ok(Vec::new());
            };
            let mut settled = Vec::new();
            let mut records = Vec::new();
            for entry in entries {
                match entry.fields {
                    Some(fields) if self.floor.is_none_or(|f| entry.key > f) => {
                        records.push((entry.key, entry.id, fields));
                    }
                    _ => settled.push(entry.id),
                }
            }
            if !settled.is_empty() {
                self.ack(&settled).await?;
            }
            if matches!(self.stage, Stage::Pending(_)) {
                self.stage = Stage::Pending(last);
            }
            if records.is_empty() {
                continue;
            }
            let mut out = Vec::with_capacity(records.len());
            for (key, id, fields) in records {
                let event = self.mapping.event(&id, &fields);
                out.push(Record {
                    event,
                    position: json!({ "id": id }),
                });
                self.unacked.push_back((key, id.clone()));
                self.last_returned = Some(id);
            }
            return Ok(out);
        }
    }
}

#[async_trait]
impl Source for StreamSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        if self.reading {
            let after = self.last_returned.clone().unwrap_or_else(|| "0".into());
            self.stage = Stage::Pending(after);
        }
        self.ensure_group().await?;
        self.reading = true;
        let records = self.read().await?;
        self.reading = false;
        Ok(records)
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let Some(upto) = position_id(position) else {
            return Err(ConnectorError::config(format!(
                "redis-source position {position} is not {{\"id\": \"<ms>-<seq>\"}}"
            )));
        };
        let done = self.unacked.iter().take_while(|(k, _)| *k <= upto);
        let ids: Vec<String> = done.map(|(_, id)| id.clone()).collect();
        if !ids.is_empty() {
            self.ack(&ids).await?;
            self.unacked.drain(..ids.len());
        }
        Ok(())
    }

    async fn lag(&mut self) -> Option<u64> {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg(&["GROUPS", &self.stream]);
        let info: redis::streams::StreamInfoGroupsReply = self.run("XINFO", &cmd).await.ok()?;
        let group = info.groups.into_iter().find(|g| g.name == self.group)?;
        if let Some(lag) = group.lag {
            return Some(lag as u64);
        }
        // Without the server's count (before Redis 7, or after deletions)
        // only "nothing delivered yet" can be told: then every entry waits.
        if group.last_delivered_id != "0-0" {
            return None;
        }
        self.run("XLEN", redis::cmd("XLEN").arg(&self.stream))
            .await
            .ok()
    }
}

fn check_name(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    Ok(())
}

#[async_trait]
impl SourceKind for RedisSource {
    type Config = RedisSourceConfig;
    const NAME: &'static str = "redis-source";
    const DESCRIPTION: &'static str =
        "Reads a Redis stream through a consumer group; entries are XACKed once durable in the mesh";

    fn check(c: &Self::Config) -> Result<(), String> {
        check_url(&c.url)?;
        check_name("stream", &c.stream)?;
        if let Some(group) = &c.group {
            check_name("group", group)?;
        }
        check_name("consumer", &c.consumer)?;
        let start_ok = c.start == "0"
            || c.start == "$"
            || digits(&c.start).is_some()
            || EntryId::parse(&c.start).is_some();
        if !start_ok {
            return Err(format!(
                "start {:?} is not \"0\", \"$\" or an entry id <ms>-<seq>",
                c.start
            ));
        }
        if c.batch == 0 || c.batch > MAX_BATCH {
            return Err(format!("batch must be 1 to {MAX_BATCH}, not {}", c.batch));
        }
        if let Some(field) = &c.field {
            check_name("field", field)?;
        }
        check_name("type", &c.ty)
    }

    async fn open(
        config: Self::Config,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        Self::check(&config).map_err(ConnectorError::Config)?;
        let client = check_url(&config.url).map_err(ConnectorError::Config)?;
        let floor = ctx.position.as_ref().and_then(position_id);
        if floor.is_none() && ctx.position.is_some() {
            tracing::warn!(connector = %ctx.connector, "ignoring a position that is not {{\"id\": ...}}");
        }
        let mut source = StreamSource {
            link: Link::new(client),
            group: config
                .group
                .unwrap_or_else(|| format!("eventmesh-{}", ctx.connector)),
            consumer: config.consumer,
            start: config.start,
            batch: config.batch,
            mapping: Mapping {
                connector: ctx.connector,
                stream: config.stream.clone(),
                field: config.field,
                ty: config.ty,
            },
            stream: config.stream,
            group_ready: false,
            stage: Stage::Pending("0".into()),
            unacked: VecDeque::new(),
            last_returned: None,
            floor,
            reading: false,
        };
        source.ensure_group().await?;
        Ok(Box::new(source))
    }
}

// ---- the sink ---------------------------------------------------------------

/// The kind.
pub struct RedisSink;

/// The field-value pairs of one event's entry.
pub fn entry_fields(format: Format, field: &str, ev: &CloudEvent) -> Vec<(String, Vec<u8>)> {
    if format == Format::Json {
        return vec![(field.to_string(), ev.to_json())];
    }
    let mut out: Vec<(String, Vec<u8>)> = vec![
        ("id".into(), ev.id.clone().into_bytes()),
        ("source".into(), ev.source.clone().into_bytes()),
        ("type".into(), ev.ty.clone().into_bytes()),
    ];
    let optional = [
        ("datacontenttype", &ev.datacontenttype),
        ("dataschema", &ev.dataschema),
        ("subject", &ev.subject),
        ("time", &ev.time),
    ];
    for (name, value) in optional {
        if let Some(v) = value {
            out.push((name.to_string(), v.clone().into_bytes()));
        }
    }
    for (name, value) in &ev.extensions {
        out.push((format!("ce_{name}"), value.to_text().into_bytes()));
    }
    if !matches!(ev.data, Data::None) {
        out.push((field.to_string(), ev.data.as_bytes().to_vec()));
    }
    out
}

struct StreamSink {
    link: Link,
    stream: String,
    format: Format,
    field: String,
    maxlen: Option<u64>,
}

#[async_trait]
impl Sink for StreamSink {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for ev in events {
            pipe.cmd("XADD").arg(&self.stream);
            if let Some(n) = self.maxlen {
                pipe.arg("MAXLEN").arg("~").arg(n);
            }
            pipe.arg("*");
            for (name, value) in entry_fields(self.format, &self.field, ev) {
                pipe.arg(name).arg(value);
            }
        }
        let mut conn = self.link.get().await?;
        let added: Result<Vec<Value>, RedisError> = pipe.query_async(&mut conn).await;
        match added {
            Ok(ids) if ids.len() == events.len() => Ok(()),
            Ok(ids) => Err(ConnectorError::unavailable(format!(
                "redis XADD: {} replies for {} events",
                ids.len(),
                events.len()
            ))),
            Err(e) => Err(self.link.failed("XADD", &e)),
        }
    }
}

#[async_trait]
impl SinkKind for RedisSink {
    type Config = RedisSinkConfig;
    const NAME: &'static str = "redis-sink";
    const DESCRIPTION: &'static str =
        "Appends events to a Redis stream (XADD), attributes as fields or the whole CloudEvent JSON";

    fn check(c: &Self::Config) -> Result<(), String> {
        check_url(&c.url)?;
        check_name("stream", &c.stream)?;
        check_name("field", &c.field)?;
        if c.format == Format::Fields
            && (ATTRIBUTE_FIELDS.split(' ').any(|a| a == c.field) || c.field.starts_with("ce_"))
        {
            return Err(format!(
                "field {:?} is taken by an attribute in the fields format",
                c.field
            ));
        }
        if c.maxlen == Some(0) {
            return Err("maxlen must be at least 1".into());
        }
        Ok(())
    }

    async fn open(
        config: Self::Config,
        _ctx: SinkContext,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        Self::check(&config).map_err(ConnectorError::Config)?;
        let client = check_url(&config.url).map_err(ConnectorError::Config)?;
        let mut link = Link::new(client);
        let mut conn = link.get().await?;
        let ty: Result<String, RedisError> = redis::cmd("TYPE")
            .arg(&config.stream)
            .query_async(&mut conn)
            .await;
        match ty {
            Ok(t) if t == "stream" || t == "none" => {}
            Ok(t) => {
                return Err(ConnectorError::config(format!(
                    "redis key {:?} holds a {t}, not a stream",
                    config.stream
                )))
            }
            Err(e) => return Err(link.failed("TYPE", &e)),
        }
        Ok(Box::new(StreamSink {
            link,
            stream: config.stream,
            format: config.format,
            field: config.field,
            maxlen: config.maxlen,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn mapping(field: Option<&str>) -> Mapping {
        let (connector, stream, ty) = ("c1".into(), "orders".into(), default_type());
        let field = field.map(str::to_string);
        Mapping {
            connector,
            stream,
            field,
            ty,
        }
    }

    fn pairs(list: &[(&str, &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        list.iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec()))
            .collect()
    }

    fn reply(entries: Vec<Value>) -> Value {
        Value::Array(vec![Value::Array(vec![bulk("s"), Value::Array(entries)])])
    }

    #[test]
    fn entry_ids_parse_and_order_as_the_stream() {
        let id = |s| EntryId::parse(s).unwrap();
        assert!(id("1700000000000-2") < id("1700000000000-10"));
        assert!(id("1700000000000-10") < id("1700000000001-0"));
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "+1-0",
            "1-0-0",
            "a-1",
            "1-18446744073709551616",
        ] {
            assert_eq!(EntryId::parse(bad), None, "{bad}");
        }
        assert_eq!(
            position_id(&json!({"id": "5-1"})),
            Some(EntryId { ms: 5, seq: 1 })
        );
        assert_eq!(position_id(&json!({"id": 5})), None);
        assert_eq!(position_id(&json!("5-1")), None);
    }

    #[test]
    fn read_replies_parse_in_both_protocols() {
        let fields = Value::Array(vec![bulk("data"), bulk("{}"), bulk("k"), Value::Int(7)]);
        let entries = vec![
            Value::Array(vec![bulk("1-0"), fields]),
            Value::Array(vec![bulk("2-0"), Value::Nil]),
        ];
        let resp3 = Value::Map(vec![(bulk("s"), Value::Array(entries.clone()))]);
        let want = vec![
            Entry {
                id: "1-0".into(),
                key: EntryId { ms: 1, seq: 0 },
                fields: Some(pairs(&[("data", b"{}"), ("k", b"7")])),
            },
            Entry {
                id: "2-0".into(),
                key: EntryId { ms: 2, seq: 0 },
                fields: None,
            },
        ];
        assert_eq!(parse_read_reply(&reply(entries)).unwrap(), want);
        assert_eq!(parse_read_reply(&resp3).unwrap(), want);
        assert_eq!(parse_read_reply(&Value::Nil).unwrap(), vec![]);
        let odd = Value::Array(vec![bulk("1-0"), Value::Array(vec![bulk("x")])]);
        assert!(parse_read_reply(&reply(vec![odd])).is_err());
        let bad_id = Value::Array(vec![bulk("x"), Value::Nil]);
        assert!(parse_read_reply(&reply(vec![bad_id])).is_err());
        assert!(parse_read_reply(&Value::Int(3)).is_err());
    }

    #[test]
    fn the_payload_field_becomes_the_data() {
        let m = mapping(Some("data"));
        let ev = m.event("7-1", &pairs(&[("data", b"{\"n\":1}"), ("other", b"x")]));
        assert_eq!(
            (ev.id.as_str(), ev.source.as_str()),
            ("orders-7-1", "/connectors/c1")
        );
        assert_eq!(ev.ty, "redis.stream.entry");
        assert_eq!(ev.data, Data::Json(bytes::Bytes::from_static(b"{\"n\":1}")));
        assert_eq!(ev.datacontenttype.as_deref(), Some("application/json"));
        let ext = |v: &str| ExtValue::Str(v.into());
        let want = vec![
            ("redisid".into(), ext("7-1")),
            ("redisstream".into(), ext("orders")),
        ];
        assert_eq!(ev.extensions, want);
        let text = m.event("7-2", &pairs(&[("data", b"hello"), ("data", b"again")]));
        assert_eq!(text.data, Data::Text("again".into()));
        let bin = m.event("7-3", &pairs(&[("data", &[0xff, 0x00])]));
        assert_eq!(
            bin.data,
            Data::Binary(bytes::Bytes::from_static(&[0xff, 0x00]))
        );
    }

    #[test]
    fn an_entry_without_the_payload_field_becomes_an_object() {
        for m in [mapping(Some("data")), mapping(None)] {
            let ev = m.event("9-0", &pairs(&[("a", b"1"), ("b", &[0xff]), ("a", b"2")]));
            let Data::Json(body) = &ev.data else {
                panic!("{:?}", ev.data)
            };
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            assert_eq!(v, json!({"a": "2", "b": {"base64": "/w=="}}));
        }
        let whole = mapping(None).event("9-1", &pairs(&[("data", b"x")]));
        assert_eq!(
            whole.data,
            Data::Json(bytes::Bytes::from_static(b"{\"data\":\"x\"}"))
        );
    }
}
