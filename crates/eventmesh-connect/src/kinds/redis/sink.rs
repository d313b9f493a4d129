//! `redis-sink`: events out of the mesh, appended to one Redis stream.
//!
//! `XADD`s each event to `stream`, all events of one `write` in one
//! `MULTI`/`EXEC` and answered after `EXEC`'s reply. `format: fields`
//! (default) writes the attributes as fields `id`, `source`, `type`,
//! `datacontenttype`, `dataschema`, `subject`, `time` (those present),
//! extensions as `ce_<name>` (their text form), then the payload bytes as
//! `field` (default `data`; none for an event without data). `format: json`
//! writes the whole event in the CloudEvents JSON format as the one field
//! `field`. `maxlen` trims the stream approximately (`MAXLEN ~`).
//!
//! Invariants: `open` refuses a key holding anything but a stream (or
//! nothing); in `fields` format the payload field never takes an
//! attribute's name. Streams have no deduplication: a write retried after
//! an error may append an entry twice (at least once); readers that care
//! dedupe by `source` + `id`.

use async_trait::async_trait;
use eventmesh_core::event::Data;
use eventmesh_core::CloudEvent;
use redis::{RedisError, Value};

use super::{check_name, check_url, targets_of, Format, Link, RedisSinkConfig};
use crate::sdk::{ConnectorError, Sink, SinkContext, SinkKind};

/// The attribute fields the sink writes in `fields` format.
const ATTRIBUTE_FIELDS: &str = "id specversion source type datacontenttype dataschema subject time";

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

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        targets_of(&c.url)
    }

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
