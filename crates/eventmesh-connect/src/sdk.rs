//! The connector SDK: the traits a connector implements and the types they
//! exchange with the runtime.

use async_trait::async_trait;
use eventmesh_core::event::Data;
use eventmesh_core::CloudEvent;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

/// Where a source stands in its outside system, as JSON the source defines
/// (a byte offset, a row id, a stream entry id). The runtime stores it
/// as given and hands it back when the connector opens again.
pub type Position = serde_json::Value;

/// One record read by a source: the event to publish and the position
/// just after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub event: CloudEvent,
    pub position: Position,
    /// The topic to publish it to, when not the connector's own (a mesh
    /// link pulling several topics from another cluster).
    pub topic: Option<String>,
}

/// Why a connector call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectorError {
    /// The configuration cannot work (a table that does not exist, a
    /// path that is a directory): the connector stops as failed until its
    /// definition changes.
    #[error("{0}")]
    Config(String),
    /// The outside system failed or is unreachable: the runtime tries
    /// again after a backoff.
    #[error("{0}")]
    Unavailable(String),
}

impl ConnectorError {
    pub fn config(msg: impl std::fmt::Display) -> Self {
        ConnectorError::Config(msg.to_string())
    }

    pub fn unavailable(msg: impl std::fmt::Display) -> Self {
        ConnectorError::Unavailable(msg.to_string())
    }

    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ConnectorError::Unavailable(_))
    }
}

/// What a source is opened with.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// The connector's name (unique in the mesh).
    pub connector: String,
    /// The topic its events are published to.
    pub topic: String,
    /// The last committed position; `None` the first time.
    pub position: Option<Position>,
    /// The name of the cluster it runs in (`eventmesh.cluster.name`).
    pub cluster: String,
}

/// What a sink is opened with.
#[derive(Debug, Clone)]
pub struct SinkContext {
    pub connector: String,
    /// The topic its events come from.
    pub topic: String,
    /// The name of the cluster it runs in (`eventmesh.cluster.name`).
    pub cluster: String,
}

/// A running source.
#[async_trait]
pub trait Source: Send + 'static {
    /// The next records, in order, after the last ones returned. Waits for
    /// at least one, or returns none after about a second of quiet (the
    /// runtime calls again). The runtime may drop the call at any await
    /// (stopping the connector); it then opens a new source from the last
    /// committed position.
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError>;

    /// Every record up to and including `position` is durable in the mesh
    /// and the position is committed: the source may acknowledge them to
    /// its system. The default does nothing.
    async fn commit(&mut self, _position: &Position) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Records waiting in the outside system, when it can say.
    async fn lag(&mut self) -> Option<u64> {
        None
    }
}

/// A running sink.
#[async_trait]
pub trait Sink: Send + 'static {
    /// Writes `events` in order. `Ok` once every one is written as durably
    /// as the sink's settings say; after an `Err` the runtime may give any
    /// of them again (alone, to find the one at fault).
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError>;

    /// Writes `events`, each read from the topic at the same place in
    /// `topics`, and says what became of each: a sink that routes by topic
    /// or can refuse single events overrides it. `json` holds each event's
    /// structured JSON as it was delivered, for a sink that passes events
    /// on whole (it need not encode them again). By default, [`Sink::write`]
    /// of them all.
    async fn write_routed(
        &mut self,
        topics: &[std::sync::Arc<str>],
        events: &[CloudEvent],
        json: &[bytes::Bytes],
    ) -> Result<Vec<Verdict>, ConnectorError> {
        let _ = (topics, json);
        self.write(events).await?;
        Ok(vec![Verdict::Written; events.len()])
    }

    /// Whether a transient error keeps the events waiting in the mesh
    /// without counting an attempt (the sink is a route that must lose
    /// nothing to an outage, such as a mesh link), instead of retrying them
    /// up to the delivery attempts.
    fn keeps_backlog(&self) -> bool {
        false
    }

    /// The name of what it writes to, when it has one worth showing (a
    /// mesh link's remote cluster).
    fn peer(&self) -> Option<String> {
        None
    }
}

/// What became of one event given to [`Sink::write_routed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Written,
    /// Not written, and rightly so (the reason is counted): acknowledged.
    Skipped(&'static str),
    /// Refused for good with this reason: dead-lettered now.
    Refused(String),
    /// Not written for now, with the reason (the other side is busy): given
    /// back to wait in the log, no attempt counted, and the sink backs off.
    Later(String),
}

/// A kind of source: its configuration and how to open it.
#[async_trait]
pub trait SourceKind: Send + Sync + 'static {
    /// The `config` object of a definition; its JSON Schema is what
    /// `GET /admin/connector-kinds` shows.
    type Config: DeserializeOwned + JsonSchema + Send;
    /// `<system>-source`.
    const NAME: &'static str;
    const DESCRIPTION: &'static str;

    /// Checks what the schema cannot say, at create (the message becomes
    /// the 400's).
    fn check(_config: &Self::Config) -> Result<(), String> {
        Ok(())
    }

    /// The network addresses the kind connects out to (none for one that
    /// does not); the runtime checks them against its outbound guard at
    /// create and before each open.
    fn targets(_config: &Self::Config) -> Vec<Target> {
        Vec::new()
    }

    async fn open(
        config: Self::Config,
        ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError>;
}

/// A kind of sink.
#[async_trait]
pub trait SinkKind: Send + Sync + 'static {
    type Config: DeserializeOwned + JsonSchema + Send;
    /// `<system>-sink`.
    const NAME: &'static str;
    const DESCRIPTION: &'static str;

    fn check(_config: &Self::Config) -> Result<(), String> {
        Ok(())
    }

    /// The network addresses the kind connects out to (see
    /// [`SourceKind::targets`]).
    fn targets(_config: &Self::Config) -> Vec<Target> {
        Vec::new()
    }

    async fn open(config: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError>;
}

/// A host and port a connector connects to: a name, or an IP address
/// (IPv6 without brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Target {
            host: host.into(),
            port,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The `source` attribute of the events a connector publishes.
pub fn source_uri(connector: &str) -> String {
    format!("/connectors/{connector}")
}

/// An event published by `connector`: `id` should be derived from the
/// record's place in its system, so that a record read again after a crash
/// carries the same `source` + `id` and is dropped as a duplicate.
pub fn event(connector: &str, id: impl Into<String>, ty: &str, data: Data) -> CloudEvent {
    let datacontenttype = match &data {
        Data::None => None,
        Data::Json(_) => Some("application/json"),
        Data::Text(_) => Some("text/plain"),
        Data::Binary(_) => Some("application/octet-stream"),
    };
    CloudEvent {
        id: id.into(),
        source: source_uri(connector),
        ty: ty.to_string(),
        datacontenttype: datacontenttype.map(str::to_string),
        data,
        ..CloudEvent::default()
    }
}

/// A payload read from outside: JSON kept as JSON, other UTF-8 as text,
/// anything else as bytes.
pub fn data_of(bytes: &[u8]) -> Data {
    if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
        return Data::Json(bytes::Bytes::copy_from_slice(bytes));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Data::Text(text.to_string()),
        Err(_) => Data::Binary(bytes::Bytes::copy_from_slice(bytes)),
    }
}
