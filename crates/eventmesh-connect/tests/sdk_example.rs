//! The connector written from scratch in docs/connectors.md, compiled and
//! run: the document shows this file's code between its markers.

// example:begin
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_connect::{
    event, ConnectorError, Kind, Position, Record, Source, SourceContext, SourceKind,
};
use eventmesh_core::event::Data;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The `config` of a `heartbeat-source`; the doc comments become the
/// JSON Schema that `GET /admin/connector-kinds` shows.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Milliseconds between beats.
    #[serde(default = "default_every_ms")]
    pub every_ms: u64,
}

fn default_every_ms() -> u64 {
    1000
}

/// The kind: its name, its config and how to open it.
pub struct HeartbeatSource;

#[async_trait]
impl SourceKind for HeartbeatSource {
    type Config = HeartbeatConfig;
    const NAME: &'static str = "heartbeat-source";
    const DESCRIPTION: &'static str = "One event every `every_ms` milliseconds";

    fn check(config: &HeartbeatConfig) -> Result<(), String> {
        match config.every_ms {
            1..=3_600_000 => Ok(()),
            n => Err(format!("every_ms {n} must be 1..=3600000")),
        }
    }

    async fn open(
        config: HeartbeatConfig,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        // The position is the number of the last beat published.
        let beat = match &ctx.position {
            None => 0,
            Some(p) => p["beat"]
                .as_u64()
                .ok_or_else(|| ConnectorError::config(format!("bad position {p}")))?,
        };
        Ok(Box::new(Heartbeat {
            connector: ctx.connector,
            every: Duration::from_millis(config.every_ms),
            beat,
        }))
    }
}

/// A running heartbeat.
struct Heartbeat {
    connector: String,
    every: Duration,
    beat: u64,
}

#[async_trait]
impl Source for Heartbeat {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        tokio::time::sleep(self.every).await;
        self.beat += 1;
        let position: Position = json!({"beat": self.beat});
        // The id comes from the position: a beat published again after a
        // crash is the same event, and the mesh drops the copy.
        let data = Data::Json(json!({"beat": self.beat}).to_string().into());
        let ev = event(
            &self.connector,
            format!("beat-{}", self.beat),
            "heartbeat",
            data,
        );
        Ok(vec![Record {
            event: ev,
            position,
            topic: None,
        }])
    }
}

/// What the runtime registers.
pub fn kind() -> Kind {
    Kind::source::<HeartbeatSource>()
}
// example:end

#[tokio::test]
async fn the_documented_connector_works() {
    let k = kind();
    assert_eq!(k.name(), "heartbeat-source");
    assert_eq!(k.schema()["properties"]["every_ms"]["default"], json!(1000));
    assert_eq!(
        k.check(&json!({"every_ms": 0})),
        Err("config: every_ms 0 must be 1..=3600000".to_string())
    );
    let ctx = |position| SourceContext {
        connector: "hb".into(),
        topic: "beats".into(),
        position,
        cluster: "test".into(),
    };
    let mut s = k
        .open_source(json!({"every_ms": 1}), ctx(Some(json!({"beat": 41}))))
        .await
        .unwrap();
    let got = s.poll().await.unwrap();
    assert_eq!(got[0].event.id, "beat-42");
    assert_eq!(got[0].event.source, "/connectors/hb");
    assert_eq!(got[0].position, json!({"beat": 42}));
}

/// docs/connectors.md shows exactly the code above.
#[test]
fn the_document_shows_this_code() {
    let this = include_str!("sdk_example.rs");
    let doc = include_str!("../../../docs/connectors.md");
    let between = |text: &'static str, begin: &str, end: &str| -> &'static str {
        let start = text.find(begin).expect("begin marker") + begin.len();
        let len = text[start..].find(end).expect("end marker");
        text[start..start + len].trim()
    };
    let code = between(this, "// example:begin\n", "// example:end");
    let shown = between(
        doc,
        "<!-- example:begin -->\n```rust\n",
        "```\n<!-- example:end -->",
    );
    assert_eq!(
        shown, code,
        "update docs/connectors.md from tests/sdk_example.rs"
    );
}
