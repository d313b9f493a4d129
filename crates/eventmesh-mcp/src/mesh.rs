//! The mesh's own tools: `publish`, `list_topics`, `read_events` and
//! `request`. Each decodes its arguments, calls one operation of
//! [`eventmesh_api::Api`] as the HTTP request's caller (the gate runs
//! there), and encodes the answer as structured content (with its JSON
//! text).
//!
//! Reading is a browse (`Api::browse`): no subscription, group or offset
//! is left behind; the answer's `next` is the cursor to read on from.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_api::{Browse, Caller};
use eventmesh_core::position::Position;
use eventmesh_core::CloudEvent;
use eventmesh_runtime::runtime::{BrowsedEvent, Cursor, MAX_BROWSE, MAX_BROWSE_WAIT};
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::args::{json_result, object, Args, ToolError, ToolResult};
use crate::RequestCaller;

/// `read_events` returns this many events when not told.
const DEFAULT_READ_MAX: u64 = 10;
/// `request` waits this long for the reply when not told.
const DEFAULT_REQUEST_WAIT_MS: u64 = 10_000;
/// `request` waits this long at most.
const MAX_REQUEST_WAIT_MS: u64 = 60_000;
/// The `source` of events built from `data` and `type`.
const SOURCE: &str = "/mcp";

pub(crate) const PUBLISH: &str = "publish";
pub(crate) const LIST_TOPICS: &str = "list_topics";
pub(crate) const READ_EVENTS: &str = "read_events";
pub(crate) const REQUEST: &str = "request";

/// The schema of an event given as `event`, or as `data` and `type`.
fn event_properties() -> Value {
    json!({
        "event": {
            "type": "object",
            "description": "A whole CloudEvent in the structured JSON format (specversion, id, source, type, data, extensions...). specversion, id and source are filled in when missing. Give either event, or type (and data)."
        },
        "type": {"type": "string", "description": "The event's type, for an event built from data."},
        "data": {"description": "The event's data: any JSON value (a string is sent as text/plain)."},
        "source": {"type": "string", "description": "The event's source (default /mcp)."},
        "id": {"type": "string", "description": "The event's id (default: a new UUID)."},
        "subject": {"type": "string", "description": "The event's subject."},
        "extensions": {
            "type": "object",
            "description": "Extension attributes (lower-case names), e.g. {\"partitionkey\": \"order-7\"}.",
            "additionalProperties": {"type": ["string", "number", "boolean"]}
        }
    })
}

fn with_topic(mut properties: Value, topic_description: &str) -> Value {
    properties["topic"] = json!({"type": "string", "description": topic_description});
    properties
}

/// The mesh tools' definitions.
pub(crate) fn tools() -> Vec<Tool> {
    let publish = Tool::new(
        PUBLISH,
        "Publish one CloudEvent to a topic of the event mesh. Answers where it was stored (partition and offset) once it is durable.",
        Arc::new(object(json!({
            "type": "object",
            "properties": with_topic(event_properties(), "The topic to publish to."),
            "required": ["topic"],
        }))),
    )
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false));
    let list = Tool::new(
        LIST_TOPICS,
        "List the event mesh's topics this caller may read or publish to, with each partition's end offset.",
        Arc::new(object(json!({"type": "object", "properties": {}}))),
    )
    .with_annotations(ToolAnnotations::new().read_only(true));
    let read = Tool::new(
        READ_EVENTS,
        "Read events of a topic (or of the topics a pattern such as orders.* or orders.> matches) without consuming them. Answers the events, oldest first, and `next`, a cursor to pass as `from` to read on.",
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "topic": {"type": "string", "description": "A topic, or a pattern: * stands for one dot-separated token, > for the rest."},
                "from": {
                    "description": "Where to start: \"earliest\" (default), \"latest\", an RFC 3339 time, an offset (in every partition), or the `next` cursor of an earlier answer.",
                    "oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "object"}]
                },
                "max": {"type": "integer", "minimum": 1, "maximum": MAX_BROWSE, "description": "Events to return at most (default 10)."},
                "waitMs": {"type": "integer", "minimum": 0, "maximum": MAX_BROWSE_WAIT.as_millis() as u64, "description": "When there is nothing to return yet, how long to wait for an event (default 0)."}
            },
            "required": ["topic"],
        }))),
    )
    .with_annotations(ToolAnnotations::new().read_only(true));
    let request = Tool::new(
        REQUEST,
        "Request-reply: publish an event as a request to a topic and wait for its reply event (a responder answers it with the same correlationid).",
        Arc::new(object(json!({
            "type": "object",
            "properties": with_topic(
                {
                    let mut p = event_properties();
                    p["timeoutMs"] = json!({"type": "integer", "minimum": 1, "maximum": MAX_REQUEST_WAIT_MS, "description": "How long to wait for the reply (default 10000)."});
                    p
                },
                "The topic the request goes to."
            ),
            "required": ["topic"],
        }))),
    )
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false));
    vec![publish, list, read, request]
}

/// The event a `publish` or `request` call describes.
fn event_of(args: &Args) -> Result<CloudEvent, ToolError> {
    let mut fields = match args.object("event")? {
        Some(event) => {
            if ["type", "data", "id", "source", "subject", "extensions"]
                .iter()
                .any(|k| args.get(k).is_some())
            {
                return Err(ToolError::new(
                    "give either event (a whole CloudEvent) or type, data and the other attributes, not both",
                ));
            }
            event.clone()
        }
        None => {
            let ty = args.required_text("type").map_err(|_| {
                ToolError::new("argument type: required (or give a whole CloudEvent as event)")
            })?;
            let mut fields = object(json!({"type": ty}));
            for key in ["id", "source", "subject"] {
                if let Some(v) = args.text(key)? {
                    fields.insert(key.to_string(), json!(v));
                }
            }
            if let Some(data) = args.get("data") {
                let media = if data.is_string() {
                    "text/plain"
                } else {
                    "application/json"
                };
                fields.insert("datacontenttype".into(), json!(media));
                fields.insert("data".into(), data.clone());
            }
            for (name, value) in args.object("extensions")?.into_iter().flatten() {
                if fields.contains_key(name) || name == "specversion" {
                    return Err(ToolError::new(format!(
                        "argument extensions: {name} is an attribute, not an extension"
                    )));
                }
                fields.insert(name.clone(), value.clone());
            }
            fields
        }
    };
    fields.entry("specversion").or_insert_with(|| json!("1.0"));
    fields
        .entry("id")
        .or_insert_with(|| json!(uuid::Uuid::now_v7().to_string()));
    fields.entry("source").or_insert_with(|| json!(SOURCE));
    CloudEvent::from_json_value(Value::Object(fields))
        .map_err(|e| ToolError::new(format!("invalid event: {e}")))
}

/// An event as JSON (its structured format).
fn event_json(event: &CloudEvent) -> Value {
    serde_json::from_slice(&event.to_json()).unwrap_or(Value::Null)
}

pub(crate) async fn publish(
    api: &eventmesh_api::Api,
    rc: &RequestCaller,
    a: &Args<'_>,
) -> ToolResult {
    a.only(&[
        "topic",
        "event",
        "type",
        "data",
        "source",
        "id",
        "subject",
        "extensions",
    ])?;
    let topic = a.required_text("topic")?;
    let event = event_of(a)?;
    let mut out = api
        .publish(&rc.caller, Some(topic.to_string()), vec![event], &rc.raw)
        .await?;
    let published = out
        .pop()
        .ok_or_else(|| ToolError::new("nothing was published"))?;
    let value = serde_json::to_value(&published).unwrap_or(Value::Null);
    Ok(json_result(value))
}

pub(crate) async fn list_topics(
    api: &eventmesh_api::Api,
    rc: &RequestCaller,
    a: &Args<'_>,
) -> ToolResult {
    a.only(&[])?;
    let topics = api.visible_topics(&rc.caller, &rc.raw).await?;
    Ok(json_result(json!({ "topics": topics })))
}

/// `from` as a start position and a cursor.
fn start_of(a: &Args) -> Result<(Position, Cursor), ToolError> {
    let bad = |m: String| ToolError::new(format!("argument from: {m}"));
    match a.get("from") {
        None => Ok((Position::Earliest, Cursor::new())),
        Some(Value::Object(topics)) => {
            let mut cursor = Cursor::new();
            for (topic, partitions) in topics {
                let Value::Object(partitions) = partitions else {
                    return Err(bad(format!(
                        "a cursor maps each topic to {{\"<partition>\": <offset>}}; {topic:?} does not"
                    )));
                };
                let entry = cursor.entry(topic.clone()).or_default();
                for (p, offset) in partitions {
                    let (Ok(p), Some(offset)) = (p.parse::<u32>(), offset.as_u64()) else {
                        return Err(bad(format!(
                            "{topic:?}: {p:?} is not a partition number with an offset"
                        )));
                    };
                    entry.insert(p, offset);
                }
            }
            Ok((Position::Earliest, cursor))
        }
        Some(v) => Position::from_json(v)
            .map(|p| (p, Cursor::new()))
            .map_err(bad),
    }
}

pub(crate) fn browsed_json(e: &BrowsedEvent) -> Value {
    json!({
        "topic": e.topic,
        "partition": e.partition,
        "offset": e.offset,
        "acceptedAt": eventmesh_core::time::format_rfc3339_ms(e.ingest_ms),
        "event": event_json(&e.event),
    })
}

pub(crate) async fn read_events(
    api: &eventmesh_api::Api,
    rc: &RequestCaller,
    a: &Args<'_>,
) -> ToolResult {
    a.only(&["topic", "from", "max", "waitMs"])?;
    let topic = a.required_text("topic")?;
    let (from, cursor) = start_of(a)?;
    let max = a.number("max", 1, MAX_BROWSE as u64, DEFAULT_READ_MAX)?;
    let wait = a.number("waitMs", 0, MAX_BROWSE_WAIT.as_millis() as u64, 0)?;
    let got = api
        .browse(
            &rc.caller,
            Browse {
                topic: topic.to_string(),
                from,
                cursor,
                max: max as usize,
                wait: Duration::from_millis(wait),
            },
            &rc.raw,
        )
        .await?;
    let events: Vec<Value> = got.events.iter().map(browsed_json).collect();
    Ok(json_result(json!({"events": events, "next": got.next})))
}

pub(crate) async fn request(
    api: &eventmesh_api::Api,
    caller: &Caller,
    raw: &[u8],
    a: &Args<'_>,
) -> ToolResult {
    a.only(&[
        "topic",
        "event",
        "type",
        "data",
        "source",
        "id",
        "subject",
        "extensions",
        "timeoutMs",
    ])?;
    let topic = a.required_text("topic")?;
    let wait = a.number("timeoutMs", 1, MAX_REQUEST_WAIT_MS, DEFAULT_REQUEST_WAIT_MS)?;
    let event = event_of(a)?;
    let reply = api
        .request(
            caller,
            Some(topic.to_string()),
            event,
            Duration::from_millis(wait),
            raw,
        )
        .await?;
    Ok(json_result(json!({ "reply": event_json(&reply) })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonObject;

    fn args(v: Value) -> JsonObject {
        object(v)
    }

    #[test]
    fn events_are_built_from_data_and_type() {
        let o = args(
            json!({"topic": "t", "type": "order.created", "data": {"n": 1}, "id": "e1",
                            "extensions": {"partitionkey": "k"}}),
        );
        let e = event_json(&event_of(&Args(&o)).unwrap());
        assert_eq!(
            e,
            json!({"specversion": "1.0", "id": "e1", "source": "/mcp", "type": "order.created",
                   "datacontenttype": "application/json", "partitionkey": "k", "data": {"n": 1}})
        );
        let o = args(json!({"event": {"type": "x", "source": "/s", "data": "hi"}}));
        let e = event_json(&event_of(&Args(&o)).unwrap());
        assert_eq!(e["source"], "/s");
        assert_eq!(e["data"], "hi");
        assert_eq!(e["specversion"], "1.0");
    }

    #[test]
    fn an_event_is_given_one_way() {
        let o = args(json!({"event": {"type": "x"}, "type": "y"}));
        assert!(event_of(&Args(&o))
            .unwrap_err()
            .0
            .starts_with("give either event"));
        let o = args(json!({"data": 1}));
        assert_eq!(
            event_of(&Args(&o)).unwrap_err().0,
            "argument type: required (or give a whole CloudEvent as event)"
        );
        let o = args(json!({"type": "t", "extensions": {"type": "x"}}));
        assert!(event_of(&Args(&o)).is_err());
    }

    #[test]
    fn from_is_a_position_or_a_cursor() {
        let start = |v: Value| start_of(&Args(&args(json!({ "from": v }))));
        assert_eq!(start(json!("latest")).unwrap().0, Position::Latest);
        assert_eq!(start(json!(7)).unwrap().0, Position::Offset(7));
        let (p, c) = start(json!({"t": {"0": 3, "2": 9}})).unwrap();
        assert_eq!(p, Position::Earliest);
        assert_eq!(c["t"][&0], 3);
        assert_eq!(c["t"][&2], 9);
        assert!(start(json!({"t": {"x": 1}})).is_err());
        assert!(start(json!("yesterday")).is_err());
        assert_eq!(
            start_of(&Args(&args(json!({})))).unwrap().0,
            Position::Earliest
        );
    }
}
