//! Topics as MCP resources: `eventmesh://topics/<name>` for each topic the
//! caller may read or publish to, read as the topic's latest events (at
//! most [`RECENT`], oldest first) in the same shape as `read_events`.
//!
//! A topic the caller may not see reads exactly like one that does not
//! exist.

use std::time::Duration;

use eventmesh_api::{Api, Browse};
use eventmesh_core::position::Position;
use eventmesh_runtime::runtime::{Cursor, MAX_BROWSE};
use rmcp::model::{Resource, ResourceContents};
use rmcp::ErrorData as McpError;
use serde_json::json;

use crate::args::ToolError;
use crate::RequestCaller;

const PREFIX: &str = "eventmesh://topics/";
/// Events a topic's resource shows.
const RECENT: u64 = 10;

fn failed(e: ToolError) -> McpError {
    McpError::internal_error(e.0, None)
}

pub(crate) async fn list(api: &Api, rc: &RequestCaller) -> Result<Vec<Resource>, McpError> {
    let topics = api
        .visible_topics(&rc.caller, &rc.raw)
        .await
        .map_err(|e| failed(e.into()))?;
    Ok(topics
        .into_iter()
        .map(|t| {
            Resource::new(format!("{PREFIX}{}", t.name), t.name.clone())
                .with_title(format!("Topic {}", t.name))
                .with_description(format!(
                    "The latest events of topic {} ({} partitions)",
                    t.name, t.partitions
                ))
                .with_mime_type("application/json")
        })
        .collect())
}

pub(crate) async fn read(
    api: &Api,
    rc: &RequestCaller,
    uri: &str,
) -> Result<ResourceContents, McpError> {
    let unknown = || McpError::resource_not_found(format!("no readable topic at {uri}"), None);
    let name = uri.strip_prefix(PREFIX).ok_or_else(unknown)?;
    let topics = api
        .visible_topics(&rc.caller, &rc.raw)
        .await
        .map_err(|e| failed(e.into()))?;
    let topic = topics
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(unknown)?;
    // The last RECENT offsets of every partition; the latest RECENT of
    // those, whichever partitions they are in.
    let mut cursor = Cursor::new();
    let starts = cursor.entry(topic.name.clone()).or_default();
    for (p, end) in topic.end_offsets.iter().enumerate() {
        starts.insert(p as u32, end.saturating_sub(RECENT));
    }
    let got = api
        .browse(
            &rc.caller,
            Browse {
                topic: topic.name.clone(),
                from: Position::Latest,
                cursor,
                max: MAX_BROWSE,
                wait: Duration::ZERO,
            },
            &rc.raw,
        )
        .await
        .map_err(|e| match e.status {
            eventmesh_api::StatusCode::FORBIDDEN | eventmesh_api::StatusCode::NOT_FOUND => {
                unknown()
            }
            _ => failed(e.into()),
        })?;
    let skip = got.events.len().saturating_sub(RECENT as usize);
    let events: Vec<_> = got.events[skip..]
        .iter()
        .map(crate::mesh::browsed_json)
        .collect();
    let text = json!({ "topic": topic.name, "events": events }).to_string();
    Ok(ResourceContents::text(text, uri).with_mime_type("application/json"))
}
