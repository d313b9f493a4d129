//! `redis-source`: one stream key into the mesh through a consumer group,
//! each entry one record whose event `entry` makes.
//!
//! Reads the stream through a consumer group (`group`, default
//! `eventmesh-<connector>`; consumer `consumer`, default `eventmesh`). The
//! group is created if missing (`XGROUP CREATE ... MKSTREAM`, from `start`:
//! `0` the whole stream, `$` only new entries). A source first reads its
//! consumer's own pending entries (`XREADGROUP ... 0`: delivered before a
//! crash and never acknowledged), then new ones (`>`, `BLOCK` 1 s, `COUNT`
//! `batch`). Entries are acknowledged (`XACK`) only in `commit`, all of
//! those returned up to and including the committed entry; the ids
//! returned and not yet acknowledged are kept in order for that. A group
//! found gone (`NOGROUP`) is created again before the next read.
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

use std::collections::VecDeque;

use async_trait::async_trait;
use redis::{RedisError, Value};
use serde_json::json;

use super::entry::{digits, parse_read_reply, position_id, Entry, EntryId, Mapping};
use super::{check_name, check_url, targets_of, Link, RedisSourceConfig};
use crate::sdk::{ConnectorError, Position, Record, Source, SourceContext, SourceKind};

const BLOCK_MS: u64 = 1000;
const ACK_CHUNK: usize = 1000;
const MAX_BATCH: u32 = 10_000;

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
                    topic: None,
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

#[async_trait]
impl SourceKind for RedisSource {
    type Config = RedisSourceConfig;
    const NAME: &'static str = "redis-source";
    const DESCRIPTION: &'static str =
        "Reads a Redis stream through a consumer group; entries are XACKed once durable in the mesh";

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        targets_of(&c.url)
    }

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
