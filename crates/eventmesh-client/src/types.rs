//! The values the SDK sends and receives.

use eventmesh_core::{CloudEvent, Data};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The extension attribute that ties a reply to its request.
pub const CORRELATION_ID: &str = "correlationid";

/// Where one published event landed (the `202` answer of a publish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub id: String,
    pub topic: String,
    pub partition: u32,
    /// 0 for an event held back (`scheduled_for`): it gets its offset when
    /// it is released.
    pub offset: u64,
    /// Published before within the server's deduplication window: stored
    /// once, `partition` and `offset` are the first one's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// When an event with a `deliverat` or `deliverafter` still ahead is
    /// due (RFC 3339): it is held back until then.
    #[serde(
        rename = "scheduledFor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scheduled_for: Option<String>,
}

/// How the members of a group share a topic's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryMode {
    /// Each event goes to one member of the group (the server's default).
    LoadBalance,
    /// Every member gets every event.
    Broadcast,
}

impl DeliveryMode {
    /// The wire form: `LOAD_BALANCE` or `BROADCAST`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::LoadBalance => "LOAD_BALANCE",
            DeliveryMode::Broadcast => "BROADCAST",
        }
    }
}

/// Where a new consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// Only events published from now on (the server's default).
    Latest,
    /// Everything still in the log.
    Earliest,
    /// The first event appended at or after this time (milliseconds since
    /// the Unix epoch).
    TimeMs(u64),
}

impl StartFrom {
    /// The wire form: `latest`, `earliest` or an RFC 3339 timestamp.
    pub fn wire(self) -> String {
        match self {
            StartFrom::Latest => "latest".into(),
            StartFrom::Earliest => "earliest".into(),
            StartFrom::TimeMs(ms) => eventmesh_core::time::format_rfc3339_ms(ms),
        }
    }
}

impl Serialize for StartFrom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.wire())
    }
}

impl<'de> Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = String::deserialize(d)?;
        match v.as_str() {
            "latest" => Ok(StartFrom::Latest),
            "earliest" => Ok(StartFrom::Earliest),
            t => eventmesh_core::time::parse_rfc3339_ms(t)
                .map(StartFrom::TimeMs)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A subscribe request (`POST /events/subscribe`).
///
/// ```
/// use eventmesh_client::{DeliveryMode, StartFrom, SubscribeOptions};
///
/// let opts = SubscribeOptions::new("worker-1", "orders")
///     .group("billing")
///     .mode(DeliveryMode::LoadBalance)
///     .from(StartFrom::Earliest);
/// assert_eq!(opts.group.as_deref(), Some("billing"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeOptions {
    pub client_id: String,
    pub topic: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DeliveryMode>,
    /// A webhook: the server POSTs each event there. Without it the client
    /// pulls (poll, SSE, WebSocket or TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<StartFrom>,
    /// Only events every filter matches are delivered: CloudEvents
    /// Subscriptions API filter objects (`{"exact": {"type": "…"}}`,
    /// `prefix`, `suffix`, `all`, `any`, `not`, `{"sql": "<CESQL>"}`). The
    /// filters belong to the group: every member sends the same ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Value>,
}

impl SubscribeOptions {
    pub fn new(client_id: impl Into<String>, topic: impl Into<String>) -> Self {
        SubscribeOptions {
            client_id: client_id.into(),
            topic: topic.into(),
            group: None,
            mode: None,
            url: None,
            from: None,
            filters: Vec::new(),
        }
    }

    /// Adds a filter object (see [`SubscribeOptions::filters`]).
    pub fn filter(mut self, filter: Value) -> Self {
        self.filters.push(filter);
        self
    }

    /// Adds a CESQL filter (`{"sql": expression}`).
    pub fn sql(self, expression: impl Into<String>) -> Self {
        self.filter(serde_json::json!({ "sql": expression.into() }))
    }

    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    pub fn mode(mut self, mode: DeliveryMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Push delivery to this webhook URL instead of pulling.
    pub fn webhook(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    pub fn from(mut self, from: StartFrom) -> Self {
        self.from = Some(from);
        self
    }
}

/// The answer to a subscribe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub subscription_id: String,
    pub client_id: String,
    pub topic: String,
    pub group: String,
    pub mode: DeliveryMode,
}

/// One event handed to a pulling client. Settle it with `ack` (done) or
/// `nack` (give it back for redelivery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub delivery_id: String,
    /// The topic the event was read from (what a pattern subscription
    /// matched); absent from servers that do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// The CloudEvent in structured JSON.
    pub event: Value,
}

impl Delivery {
    /// The event's `correlationid` extension (set on request-reply requests).
    pub fn correlation_id(&self) -> Option<&str> {
        self.event.get(CORRELATION_ID).and_then(Value::as_str)
    }

    /// The event parsed and validated as a [`CloudEvent`].
    pub fn cloud_event(&self) -> Result<CloudEvent> {
        CloudEvent::from_json_value(self.event.clone())
            .map_err(|e| Error::Protocol(format!("delivered event is invalid: {e}")))
    }
}

/// Options of a streaming subscription (SSE or WebSocket). With a topic,
/// the stream subscribes in the same call; without, it attaches to the
/// client's existing pull subscriptions.
///
/// ```
/// use eventmesh_client::{StartFrom, StreamOptions};
///
/// let opts = StreamOptions::new("dashboard-1").topic("orders").from(StartFrom::Earliest);
/// assert_eq!(opts.topic.as_deref(), Some("orders"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOptions {
    pub client_id: String,
    pub topic: Option<String>,
    pub group: Option<String>,
    pub mode: Option<DeliveryMode>,
    pub from: Option<StartFrom>,
    /// Filters of the subscription the stream makes (see
    /// [`SubscribeOptions::filters`]); sent as the `filters` query
    /// parameter, a JSON array.
    pub filters: Vec<Value>,
    /// The server settles each delivery as it sends it (no acks needed).
    pub auto_ack: bool,
    /// SSE only: how many reconnects in a row may fail before the stream
    /// gives up and yields the error (default 10).
    pub max_reconnects: u32,
}

impl StreamOptions {
    pub fn new(client_id: impl Into<String>) -> Self {
        StreamOptions {
            client_id: client_id.into(),
            topic: None,
            group: None,
            mode: None,
            from: None,
            filters: Vec::new(),
            auto_ack: false,
            max_reconnects: 10,
        }
    }

    /// Adds a filter object (see [`SubscribeOptions::filters`]).
    pub fn filter(mut self, filter: Value) -> Self {
        self.filters.push(filter);
        self
    }

    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    pub fn mode(mut self, mode: DeliveryMode) -> Self {
        self.mode = Some(mode);
        self
    }

    pub fn from(mut self, from: StartFrom) -> Self {
        self.from = Some(from);
        self
    }

    pub fn auto_ack(mut self, auto_ack: bool) -> Self {
        self.auto_ack = auto_ack;
        self
    }

    pub fn max_reconnects(mut self, n: u32) -> Self {
        self.max_reconnects = n;
        self
    }

    /// The query parameters of `/events/stream` and `/events/ws`.
    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("clientId", self.client_id.clone())];
        if let Some(t) = &self.topic {
            q.push(("topic", t.clone()));
        }
        if let Some(g) = &self.group {
            q.push(("group", g.clone()));
        }
        if let Some(m) = self.mode {
            q.push(("mode", m.as_str().to_string()));
        }
        if let Some(f) = self.from {
            q.push(("from", f.wire()));
        }
        if !self.filters.is_empty() {
            q.push(("filters", Value::Array(self.filters.clone()).to_string()));
        }
        if self.auto_ack {
            q.push(("autoAck", "true".to_string()));
        }
        q
    }
}

impl From<SubscribeOptions> for StreamOptions {
    fn from(s: SubscribeOptions) -> Self {
        StreamOptions {
            client_id: s.client_id,
            topic: Some(s.topic),
            group: s.group,
            mode: s.mode,
            from: s.from,
            filters: s.filters,
            auto_ack: false,
            max_reconnects: 10,
        }
    }
}

/// Something that can be sent as a structured CloudEvent: a
/// [`CloudEvent`] or a `serde_json::Value` holding one (validated by the
/// server, not here).
pub trait AsEvent {
    /// The structured JSON as bytes.
    fn event_bytes(&self) -> Result<Vec<u8>>;
    /// The structured JSON as a value.
    fn event_value(&self) -> Result<Value>;
}

impl AsEvent for CloudEvent {
    fn event_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.to_json())
    }

    fn event_value(&self) -> Result<Value> {
        serde_json::from_slice(&self.to_json())
            .map_err(|e| Error::InvalidArgument(format!("event does not serialize: {e}")))
    }
}

impl AsEvent for Value {
    fn event_bytes(&self) -> Result<Vec<u8>> {
        if !self.is_object() {
            return Err(Error::InvalidArgument(
                "an event must be a JSON object".into(),
            ));
        }
        serde_json::to_vec(self)
            .map_err(|e| Error::InvalidArgument(format!("event does not serialize: {e}")))
    }

    fn event_value(&self) -> Result<Value> {
        if !self.is_object() {
            return Err(Error::InvalidArgument(
                "an event must be a JSON object".into(),
            ));
        }
        Ok(self.clone())
    }
}

impl<T: AsEvent + ?Sized> AsEvent for &T {
    fn event_bytes(&self) -> Result<Vec<u8>> {
        (**self).event_bytes()
    }

    fn event_value(&self) -> Result<Value> {
        (**self).event_value()
    }
}

/// A new CloudEvent with a fresh UUID id and a JSON payload.
///
/// ```
/// let e = eventmesh_client::json_event("order.created", "/shop", serde_json::json!({"n": 1}));
/// assert_eq!(e.ty, "order.created");
/// assert_eq!(e.datacontenttype.as_deref(), Some("application/json"));
/// ```
pub fn json_event(ty: &str, source: &str, data: Value) -> CloudEvent {
    CloudEvent {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.to_string(),
        ty: ty.to_string(),
        datacontenttype: Some("application/json".into()),
        data: Data::Json(serde_json::to_vec(&data).unwrap_or_default().into()),
        ..CloudEvent::default()
    }
}

/// A new CloudEvent with a fresh UUID id and a `text/plain` payload.
pub fn text_event(ty: &str, source: &str, text: impl Into<String>) -> CloudEvent {
    CloudEvent {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.to_string(),
        ty: ty.to_string(),
        datacontenttype: Some("text/plain".into()),
        data: Data::Text(text.into()),
        ..CloudEvent::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_body_skips_absent_fields() {
        let v = serde_json::to_value(SubscribeOptions::new("c1", "t")).unwrap();
        assert_eq!(v, serde_json::json!({"clientId":"c1","topic":"t"}));
        let v = serde_json::to_value(
            SubscribeOptions::new("c1", "t")
                .group("g")
                .mode(DeliveryMode::Broadcast)
                .from(StartFrom::Earliest)
                .webhook("http://h/x"),
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"clientId":"c1","topic":"t","group":"g","mode":"BROADCAST","from":"earliest","url":"http://h/x"})
        );
    }

    #[test]
    fn stream_query() {
        let q = StreamOptions::new("c")
            .topic("t")
            .mode(DeliveryMode::LoadBalance)
            .auto_ack(true)
            .query();
        assert_eq!(
            q,
            vec![
                ("clientId", "c".to_string()),
                ("topic", "t".to_string()),
                ("mode", "LOAD_BALANCE".to_string()),
                ("autoAck", "true".to_string())
            ]
        );
    }

    #[test]
    fn events_as_json() {
        let e = json_event("t", "/s", serde_json::json!({"a": 1}));
        let v = e.event_value().unwrap();
        assert_eq!(v["data"], serde_json::json!({"a": 1}));
        assert_eq!(v["specversion"], "1.0");
        assert!(CloudEvent::from_json_slice(&e.event_bytes().unwrap()).is_ok());
        assert!(serde_json::json!([1]).event_bytes().is_err());
        let d = Delivery {
            delivery_id: "d".into(),
            topic: None,
            event: serde_json::json!({"specversion":"1.0","id":"1","source":"/s","type":"t","correlationid":"c-1"}),
        };
        assert_eq!(d.correlation_id(), Some("c-1"));
        assert_eq!(d.cloud_event().unwrap().id, "1");
    }
}
