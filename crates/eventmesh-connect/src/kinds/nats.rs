//! `nats-source` and `nats-sink`: NATS subjects into the mesh and events
//! out to NATS, over core NATS or JetStream (`mode`).
//!
//! **Reading.** A message following the CloudEvents NATS binding is the
//! event it carries, id included: structured mode (a `Content-Type`
//! starting `application/cloudevents`, the JSON event as the body) or
//! binary mode (`ce-<attribute>` headers in any case, values
//! percent-encoded; `ce-datacontenttype`, else `Content-Type`, types the
//! body). Any other message (or a CloudEvent that does not parse, which is
//! logged) becomes an event of the configured `type` from
//! `/connectors/<name>`, its `subject` the NATS subject, its data the body
//! (typed by a `Content-Type` header if any, else JSON as JSON, UTF-8 as
//! text, other bytes as binary; an empty body is no data).
//!
//! **Core mode** subscribes to `subject` (wildcards allowed; optionally in
//! a `queue` group). Core NATS keeps nothing: what is published while the
//! connector is stopped or disconnected is gone, so delivery into the mesh
//! is at most once across outages (and a reader falling further behind
//! than the client's buffer loses messages; a warning is logged). The
//! position `{"seq": n}` only counts received messages; a plain message's
//! id is `<random per opened source>-<n>`, new for every message.
//!
//! **JetStream mode** reads `stream` through a durable pull consumer
//! (`durable`, default `eventmesh-<connector>`, filtered by `subject`, ack
//! policy explicit). Nothing is acknowledged when read: `commit` acks, in
//! the order returned, every returned message up to the committed one, so
//! after a crash before the commit JetStream delivers them again to the
//! next source of that durable once `ack_wait_ms` has passed (make it
//! longer than a publish into the mesh may take; while records await
//! their commit each poll also tells JetStream they are in progress). A
//! plain message's id is `<stream>-<stream sequence>`, the same on every
//! delivery, so the mesh drops redeliveries as duplicates; one redelivered
//! to the source still holding it replaces the held one instead of being
//! returned twice. The position is `{"stream_seq": n}`: the durable holds
//! the real progress, and the position only starts a durable created anew
//! just after it. A redelivery that comes after later messages is returned
//! after them, so positions can go back. Each poll is one pull request
//! expiring after a second; a poll dropped mid-way leaves it open until
//! then, and what it still delivers comes again after `ack_wait_ms`.
//!
//! **Writing** (`nats-sink`) publishes each event, in order, to `subject`
//! with `{subject}` and `{type}` replaced by the event's (dots stay token
//! separators; whitespace, wildcards and empty tokens become `_`; no
//! subject gives `_`). `format: binary` (default) is the binding's binary
//! mode: `ce-*` headers, `ce-datacontenttype` and `Content-Type`, the data
//! as the body (an event without `datacontenttype` gains the one its data
//! implies); `structured` is the JSON event with `Content-Type:
//! application/cloudevents+json`. Core mode answers once the messages are
//! flushed into the connection: at most once (a server dying then loses
//! them), and a retried write may publish some twice. JetStream mode sets
//! `Nats-Msg-Id: <source>/<id>` (percent-encoded like a header value) and
//! answers once every message is acknowledged as stored, so a retried
//! write is stored once within the stream's duplicate window (2 minutes
//! by default).

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, FromConsumer};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::message::{Acker, PublishMessage};
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind, ErrorCode};
use async_nats::{Client, ConnectErrorKind, ConnectOptions, HeaderMap, HeaderName, HeaderValue};
use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_core::event::{decode_header_value, percent_encode, Data};
use eventmesh_core::CloudEvent;
use futures::{FutureExt, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::kind::Kind;
use crate::sdk::{
    data_of, event, ConnectorError, Position, Record, Sink, SinkContext, SinkKind, Source,
    SourceContext, SourceKind,
};

/// How long a poll waits for a first message.
const QUIET: Duration = Duration::from_secs(1);
/// How long a connect, a JetStream API call or an ack confirmation may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The default `ack_wait_ms`.
pub const DEFAULT_ACK_WAIT_MS: u64 = 60_000;

/// Core NATS or JetStream.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Core,
    Jetstream,
}

/// How the sink puts an event in a message.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `ce-*` headers, the data as the body.
    #[default]
    Binary,
    /// The JSON event as the body.
    Structured,
}

fn default_type() -> String {
    "nats.message".to_string()
}
fn default_batch() -> usize {
    100
}
fn default_timeout_ms() -> u64 {
    10_000
}

/// The `config` of a `nats-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSourceConfig {
    /// Server URLs (`nats://host:port`, or `tls://`), tried in turn.
    pub servers: Vec<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// Authentication token (instead of `user`/`password`).
    pub token: Option<String>,
    /// The subject to read, `*` and `>` wildcards allowed; in JetStream
    /// mode the durable consumer's filter.
    pub subject: String,
    /// `core` (live messages only) or `jetstream` (a durable consumer).
    #[serde(default)]
    pub mode: Mode,
    /// Core mode: a queue group; the connectors of one group share the
    /// messages instead of each receiving all.
    pub queue: Option<String>,
    /// The `type` of events made from messages that are not CloudEvents.
    #[serde(default = "default_type", rename = "type")]
    pub ty: String,
    /// JetStream mode: the stream to read (required).
    pub stream: Option<String>,
    /// JetStream mode: the durable consumer; default `eventmesh-<connector>`.
    pub durable: Option<String>,
    /// JetStream mode: create `stream`, capturing `subject`, when missing.
    #[serde(default)]
    pub create_stream: bool,
    /// JetStream mode: how long a read message may stay unacknowledged
    /// before it is delivered again (default 60000): how long the messages
    /// a crashed source read but never committed wait.
    pub ack_wait_ms: Option<u64>,
    /// The most records one poll returns.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

/// The `config` of a `nats-sink`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// Server URLs (`nats://host:port`, or `tls://`), tried in turn.
    pub servers: Vec<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password of `user`.
    pub password: Option<String>,
    /// Authentication token (instead of `user`/`password`).
    pub token: Option<String>,
    /// The subject to publish to; `{subject}` and `{type}` are replaced by
    /// the event's.
    pub subject: String,
    /// `core` (publish and flush) or `jetstream` (publish with
    /// `Nats-Msg-Id`, wait for every acknowledgement).
    #[serde(default)]
    pub mode: Mode,
    /// `binary` (`ce-*` headers, the data as the body) or `structured`
    /// (the JSON event as the body).
    #[serde(default)]
    pub format: Format,
    /// How long a write waits for its flush or acknowledgements.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

// ---------------------------------------------------------------- checks

/// Checks a subject: `wildcards` allows `*` tokens and a final `>`.
fn check_subject(s: &str, wildcards: bool) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} contains whitespace"));
    }
    let tokens: Vec<&str> = s.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err(format!("{s:?} has an empty token"));
        }
        if !t.contains(['*', '>']) {
            continue;
        }
        if !wildcards {
            return Err(format!("{s:?} contains a wildcard"));
        }
        if !(*t == "*" || (*t == ">" && i + 1 == tokens.len())) {
            return Err(format!(
                "{s:?}: wildcards are whole tokens, and > only the last"
            ));
        }
    }
    Ok(())
}

/// Whether `c` may not appear in a stream or consumer name.
fn bad_name_char(c: char) -> bool {
    c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>')
}

fn check_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().any(bad_name_char) {
        return Err(format!(
            "{field} {name:?} must be non-empty, without whitespace, '.', '*' or '>'"
        ));
    }
    Ok(())
}

fn check_connection(
    servers: &[String],
    user: &Option<String>,
    password: &Option<String>,
    token: &Option<String>,
) -> Result<(), String> {
    if servers.is_empty() {
        return Err("servers must list at least one URL".into());
    }
    for (i, s) in servers.iter().enumerate() {
        let addr =
            async_nats::ServerAddr::from_str(s).map_err(|e| format!("servers[{i}] {s:?}: {e}"))?;
        if !matches!(addr.scheme(), "nats" | "tls") || !s.contains("://") {
            return Err(format!(
                "servers[{i}] {s:?} must be a nats:// or tls:// URL"
            ));
        }
    }
    match (user, password, token) {
        (Some(_), _, Some(_)) => Err("token and user are exclusive".into()),
        (Some(_), None, _) => Err("user needs a password".into()),
        (None, Some(_), _) => Err("password needs a user".into()),
        (Some(u), Some(p), _) if u.is_empty() || p.is_empty() => {
            Err("user and password must not be empty".into())
        }
        (_, _, Some(t)) if t.is_empty() => Err("token must not be empty".into()),
        _ => Ok(()),
    }
}

/// A sink's subject for one event: `{subject}` and `{type}` replaced, any
/// other text kept.
fn render_subject(template: &str, subject: Option<&str>, ty: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let at = &rest[i..];
        if let Some(r) = at.strip_prefix("{subject}") {
            out.push_str(&token_safe(subject.unwrap_or("")));
            rest = r;
        } else if let Some(r) = at.strip_prefix("{type}") {
            out.push_str(&token_safe(ty));
            rest = r;
        } else {
            out.push('{');
            rest = &at[1..];
        }
    }
    out.push_str(rest);
    out
}

/// An attribute value fit for a subject: dots stay separators, empty
/// tokens, whitespace and wildcards become `_`.
fn token_safe(v: &str) -> String {
    let token = |t: &str| -> String {
        if t.is_empty() {
            return "_".into();
        }
        let bad = |c: char| c.is_whitespace() || c.is_control() || c == '*' || c == '>';
        t.chars().map(|c| if bad(c) { '_' } else { c }).collect()
    };
    v.split('.').map(token).collect::<Vec<_>>().join(".")
}

fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        let at = &rest[i..];
        let end = at.find('}').map_or(at.len(), |e| e + 1);
        if !matches!(&at[..end], "{subject}" | "{type}") {
            return Err(format!(
                "subject: unknown placeholder {:?}; use {{subject}} or {{type}}",
                &at[..end]
            ));
        }
        rest = &at[end..];
    }
    check_subject(&render_subject(template, Some("x"), "x"), false)
        .map_err(|e| format!("subject: {e}"))
}

fn default_durable(connector: &str) -> String {
    let safe: String = connector
        .chars()
        .map(|c| if bad_name_char(c) { '_' } else { c })
        .collect();
    format!("eventmesh-{safe}")
}

/// `n` of a position `{key: n}`.
fn position_number(position: &Position, key: &str) -> Option<u64> {
    position.get(key)?.as_u64()
}

// ---------------------------------------------------------------- mapping

/// A message's headers, names lower-cased, the first value of each.
fn header_pairs(headers: Option<&HeaderMap>) -> Vec<(String, String)> {
    let Some(h) = headers else {
        return Vec::new();
    };
    h.iter()
        .filter_map(|(n, vs)| Some((n.to_string().to_ascii_lowercase(), vs.first()?.to_string())))
        .collect()
}

fn header<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The CloudEvent a message carries in the binding's structured or binary
/// mode; `None` when it carries none.
fn carried_event(pairs: &[(String, String)], body: &Bytes) -> Option<Result<CloudEvent, String>> {
    let ct = header(pairs, "content-type");
    if let Some(lower) = ct.map(|c| c.trim().to_ascii_lowercase()) {
        if lower.starts_with("application/cloudevents")
            && !lower.starts_with("application/cloudevents-batch")
        {
            return Some(CloudEvent::from_json_slice(body).map_err(|e| e.to_string()));
        }
    }
    header(pairs, "ce-specversion")?;
    let ct = match header(pairs, "ce-datacontenttype").map(decode_header_value) {
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => return Some(Err(format!("header ce-datacontenttype: {e}"))),
        None => ct.map(str::to_string),
    };
    let headers = pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    Some(
        CloudEvent::from_binary_mode(headers, ct.as_deref(), body.clone())
            .map_err(|e| e.to_string()),
    )
}

/// The event made from one message (see the module docs).
fn message_event(connector: &str, ty: &str, id: String, m: async_nats::Message) -> CloudEvent {
    let pairs = header_pairs(m.headers.as_ref());
    match carried_event(&pairs, &m.payload) {
        Some(Ok(ev)) => return ev,
        Some(Err(e)) => tracing::warn!(
            connector, subject = %m.subject, error = %e,
            "a NATS message claims to be a CloudEvent but is not one; read as a plain message"
        ),
        None => {}
    }
    let data = if m.payload.is_empty() {
        Data::None
    } else {
        data_of(&m.payload)
    };
    let mut ev = event(connector, id, ty, data);
    ev.subject = Some(m.subject.to_string());
    if let Some(ct) = header(&pairs, "content-type") {
        // The core's binary-mode reader checks the media type and types the
        // body by it; the stand-in attributes are discarded.
        let stub = [
            ("ce-specversion", "1.0"),
            ("ce-id", "-"),
            ("ce-source", "-"),
            ("ce-type", "-"),
        ];
        if let Ok(typed) = CloudEvent::from_binary_mode(stub, Some(ct), m.payload) {
            (ev.data, ev.datacontenttype) = (typed.data, typed.datacontenttype);
        }
    }
    ev
}

fn put(h: &mut HeaderMap, name: &str, value: &str) -> Result<(), String> {
    let n = HeaderName::from_str(name).map_err(|e| format!("header {name}: {e}"))?;
    let v = HeaderValue::from_str(value).map_err(|e| format!("header {name}: {e}"))?;
    h.insert(n, v);
    Ok(())
}

/// The headers and body of the message for `ev`.
fn encode(ev: &CloudEvent, format: Format, msg_id: bool) -> Result<(HeaderMap, Bytes), String> {
    let mut h = HeaderMap::new();
    let body = match format {
        Format::Binary => {
            let (pairs, ct) = ev.binary_mode_headers();
            for (n, v) in &pairs {
                put(&mut h, n, v)?;
            }
            if let Some(ct) = ct {
                put(&mut h, "ce-datacontenttype", &percent_encode(&ct))?;
                put(&mut h, "Content-Type", &ct)?;
            }
            match &ev.data {
                Data::Json(b) | Data::Binary(b) => b.clone(),
                Data::Text(t) => Bytes::from(t.clone()),
                Data::None => Bytes::new(),
            }
        }
        Format::Structured => {
            put(&mut h, "Content-Type", "application/cloudevents+json")?;
            Bytes::from(ev.to_json())
        }
    };
    if msg_id {
        let id = percent_encode(&format!("{}/{}", ev.source, ev.id));
        put(&mut h, "Nats-Msg-Id", &id)?;
    }
    Ok((h, body))
}

// ---------------------------------------------------------------- connecting

fn unavailable(what: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::unavailable(format!("{what}: {e}"))
}

/// `fut` within `limit`; its failure, or running late, is `Unavailable`.
async fn within<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, ConnectorError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| unavailable(what, e)),
        Err(_) => Err(unavailable(what, format!("no answer within {limit:?}"))),
    }
}

async fn connect(
    connector: &str,
    servers: &[String],
    user: &Option<String>,
    password: &Option<String>,
    token: &Option<String>,
) -> Result<Client, ConnectorError> {
    let addrs = servers
        .iter()
        .map(|s| async_nats::ServerAddr::from_str(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConnectorError::config(format!("servers: {e}")))?;
    let name = connector.to_string();
    let mut options = ConnectOptions::new()
        .name(format!("eventmesh {connector}"))
        .connection_timeout(REQUEST_TIMEOUT)
        .event_callback(move |ev| {
            let name = name.clone();
            // Slow-consumer events say messages were dropped.
            async move { tracing::warn!(connector = %name, "NATS: {ev}") }
        });
    if let (Some(u), Some(p)) = (user, password) {
        options = options.user_and_password(u.clone(), p.clone());
    }
    if let Some(t) = token {
        options = options.token(t.clone());
    }
    options.connect(addrs).await.map_err(|e| match e.kind() {
        ConnectErrorKind::Authentication
        | ConnectErrorKind::AuthorizationViolation
        | ConnectErrorKind::ServerParse
        | ConnectErrorKind::Tls => ConnectorError::config(format!("NATS {servers:?}: {e}")),
        _ => unavailable(&format!("NATS {servers:?}"), e),
    })
}

/// The stream `name`; created capturing `subject` when missing and
/// `create` says so.
async fn open_stream(
    js: &jetstream::Context,
    name: &str,
    create: bool,
    subject: &str,
) -> Result<jetstream::stream::Stream, ConnectorError> {
    let err = match js.get_stream(name).await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    match err.kind() {
        GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND => {}
        _ => return Err(unavailable(&format!("stream {name}"), err)),
    }
    if !create {
        return Err(ConnectorError::config(format!(
            "JetStream stream {name} does not exist (create it, or set create_stream)"
        )));
    }
    let config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        ..Default::default()
    };
    js.create_stream(config).await.map_err(|e| {
        use jetstream::context::CreateStreamErrorKind as K;
        match e.kind() {
            K::JetStream(_) => ConnectorError::config(format!("create stream {name}: {e}")),
            _ => unavailable(&format!("create stream {name}"), e),
        }
    })
}

// ---------------------------------------------------------------- source

/// The kind `nats-source`.
pub struct NatsSource;

#[async_trait]
impl SourceKind for NatsSource {
    type Config = NatsSourceConfig;
    const NAME: &'static str = "nats-source";
    const DESCRIPTION: &'static str = "Reads a NATS subject: core NATS (live messages only) or \
        a JetStream stream through a durable pull consumer acknowledged on commit";

    fn check(c: &Self::Config) -> Result<(), String> {
        check_connection(&c.servers, &c.user, &c.password, &c.token)?;
        check_subject(&c.subject, true).map_err(|e| format!("subject: {e}"))?;
        if c.ty.is_empty() {
            return Err("type must not be empty".into());
        }
        if !(1..=10_000).contains(&c.batch) {
            return Err("batch must be between 1 and 10000".into());
        }
        if c.mode == Mode::Jetstream {
            if c.queue.is_some() {
                return Err("queue is for mode core (a durable is shared by its readers)".into());
            }
            let Some(stream) = &c.stream else {
                return Err("stream is required in mode jetstream".into());
            };
            check_name("stream", stream)?;
            if let Some(d) = &c.durable {
                check_name("durable", d)?;
            }
            if c.ack_wait_ms.is_some_and(|ms| ms < 100) {
                return Err("ack_wait_ms must be at least 100".into());
            }
            return Ok(());
        }
        let jetstream_only = [
            ("stream", c.stream.is_some()),
            ("durable", c.durable.is_some()),
            ("create_stream", c.create_stream),
            ("ack_wait_ms", c.ack_wait_ms.is_some()),
        ];
        if let Some((field, _)) = jetstream_only.iter().find(|(_, set)| *set) {
            return Err(format!("{field} is for mode jetstream"));
        }
        match &c.queue {
            Some(q) if q.is_empty() || q.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                Err(format!("queue {q:?} must be non-empty, without whitespace"))
            }
            _ => Ok(()),
        }
    }

    async fn open(c: Self::Config, ctx: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        Self::check(&c).map_err(ConnectorError::Config)?;
        let client = connect(&ctx.connector, &c.servers, &c.user, &c.password, &c.token).await?;
        let position = |key| ctx.position.as_ref().and_then(|p| position_number(p, key));
        if c.mode == Mode::Core {
            let sub = match &c.queue {
                Some(q) => client.queue_subscribe(c.subject.clone(), q.clone()).await,
                None => client.subscribe(c.subject.clone()).await,
            }
            .map_err(|e| ConnectorError::config(format!("subscribe {}: {e}", c.subject)))?;
            round_trip(&client).await;
            return Ok(Box::new(CoreSource {
                seq: position("seq").unwrap_or(0),
                instance: instance_id(&client),
                client,
                sub,
                connector: ctx.connector,
                ty: c.ty,
                batch: c.batch,
            }));
        }
        let stream_name = c.stream.clone().unwrap_or_default();
        let js = jetstream::ContextBuilder::new()
            .timeout(REQUEST_TIMEOUT)
            .build(client.clone());
        let stream = open_stream(&js, &stream_name, c.create_stream, &c.subject).await?;
        let durable = c
            .durable
            .clone()
            .unwrap_or_else(|| default_durable(&ctx.connector));
        let ack_wait = Duration::from_millis(c.ack_wait_ms.unwrap_or(DEFAULT_ACK_WAIT_MS));
        let start = position("stream_seq");
        let consumer = durable_consumer(&stream, &durable, &c.subject, ack_wait, start).await?;
        Ok(Box::new(JetStreamSource {
            client,
            consumer,
            connector: ctx.connector,
            ty: c.ty,
            stream: stream_name,
            batch: c.batch,
            ack_wait,
            held: VecDeque::new(),
            held_since: Instant::now(),
            lag: None,
        }))
    }
}

/// Makes sure the server has processed this client's subscriptions: a
/// message to a private inbox comes back only after them.
async fn round_trip(client: &Client) {
    let inbox = client.new_inbox();
    let echoed = async {
        let mut sub = client.subscribe(inbox.clone()).await.ok()?;
        client.publish(inbox, Bytes::new()).await.ok()?;
        let got = tokio::time::timeout(REQUEST_TIMEOUT, sub.next())
            .await
            .ok()?;
        let _ = sub.unsubscribe().await;
        got
    };
    if echoed.await.is_none() {
        tracing::warn!("NATS did not echo a message to this client's inbox");
    }
}

/// A random prefix for the ids of one opened core source: the unique
/// (NUID) part of a new inbox name.
fn instance_id(client: &Client) -> String {
    let inbox = client.new_inbox();
    inbox.rsplit('.').next().unwrap_or(&inbox).to_string()
}

/// The durable pull consumer, created (just after `start` when given) or
/// updated to the connector's settings.
async fn durable_consumer(
    stream: &jetstream::stream::Stream,
    durable: &str,
    subject: &str,
    ack_wait: Duration,
    start: Option<u64>,
) -> Result<PullConsumer, ConnectorError> {
    let mut config = match stream.consumer_info(durable).await {
        Ok(info) => pull::Config::try_from_consumer_config(info.config)
            .map_err(|_| ConnectorError::config(format!("durable {durable} is a push consumer")))?,
        Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::NotFound) => pull::Config {
            durable_name: Some(durable.to_string()),
            deliver_policy: match start {
                Some(seq) => DeliverPolicy::ByStartSequence {
                    start_sequence: seq + 1,
                },
                None => DeliverPolicy::All,
            },
            ..Default::default()
        },
        Err(e) => return Err(unavailable(&format!("consumer {durable}"), e)),
    };
    config.ack_policy = AckPolicy::Explicit;
    config.ack_wait = ack_wait;
    config.filter_subject = subject.to_string();
    config.filter_subjects = Vec::new();
    stream.create_consumer(config).await.map_err(|e| {
        if matches!(e.kind(), jetstream::stream::ConsumerErrorKind::JetStream(_)) {
            ConnectorError::config(format!("durable consumer {durable}: {e}"))
        } else {
            unavailable(&format!("durable consumer {durable}"), e)
        }
    })
}

fn disconnected() -> ConnectorError {
    ConnectorError::unavailable("disconnected from NATS")
}

struct CoreSource {
    client: Client,
    sub: async_nats::Subscriber,
    connector: String,
    ty: String,
    instance: String,
    seq: u64,
    batch: usize,
}

#[async_trait]
impl Source for CoreSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let first = match tokio::time::timeout(QUIET, self.sub.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ConnectorError::unavailable("the NATS subscription ended")),
            Err(_) if self.client.connection_state() == State::Disconnected => {
                return Err(disconnected())
            }
            Err(_) => return Ok(Vec::new()),
        };
        let mut messages = vec![first];
        while messages.len() < self.batch {
            match self.sub.next().now_or_never() {
                Some(Some(m)) => messages.push(m),
                _ => break,
            }
        }
        let mut records = Vec::with_capacity(messages.len());
        for m in messages {
            self.seq += 1;
            let id = format!("{}-{}", self.instance, self.seq);
            let event = message_event(&self.connector, &self.ty, id, m);
            records.push(Record {
                event,
                position: json!({ "seq": self.seq }),
            });
        }
        Ok(records)
    }
}

/// A message returned by `poll` and not yet acknowledged.
struct Held {
    seq: u64,
    acker: Acker,
}

struct JetStreamSource {
    client: Client,
    consumer: PullConsumer,
    connector: String,
    ty: String,
    stream: String,
    batch: usize,
    ack_wait: Duration,
    /// In the order returned.
    held: VecDeque<Held>,
    /// Since when the held messages' ack timers run.
    held_since: Instant,
    lag: Option<u64>,
}

/// Which held messages (their stream sequences, in the order returned) a
/// commit of `seq` acknowledges: all up to the one with that sequence;
/// when none has it, those with a sequence up to it.
fn to_acknowledge(held: &[u64], seq: u64) -> Vec<usize> {
    match held.iter().position(|&s| s == seq) {
        Some(i) => (0..=i).collect(),
        None => (0..held.len()).filter(|&i| held[i] <= seq).collect(),
    }
}

impl JetStreamSource {
    /// One pull (`no_wait` with an expiry): the messages there now, up to
    /// `batch`; when there are none, the first to come within `QUIET` and
    /// those there with it.
    async fn pull(&self) -> Result<Vec<jetstream::Message>, ConnectorError> {
        let what = || format!("pull from stream {}", self.stream);
        let fetch = self
            .consumer
            .fetch()
            .max_messages(self.batch)
            .expires(QUIET);
        let batch = fetch
            .messages()
            .await
            .map_err(|e| unavailable(&what(), e))?;
        let deadline = tokio::time::Instant::now() + QUIET + REQUEST_TIMEOUT;
        let mut batch = std::pin::pin!(batch);
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, batch.next()).await {
                Ok(Some(Ok(m))) => out.push(m),
                Ok(Some(Err(e))) if out.is_empty() => return Err(unavailable(&what(), e)),
                _ => return Ok(out),
            }
        }
    }

    /// Tells JetStream the held messages are in progress once half their
    /// ack wait has passed.
    async fn keep_held(&mut self) {
        if self.held.is_empty() || self.held_since.elapsed() < self.ack_wait / 2 {
            return;
        }
        for h in &self.held {
            if h.acker.ack_with(AckKind::Progress).await.is_err() {
                return;
            }
        }
        self.held_since = Instant::now();
    }
}

#[async_trait]
impl Source for JetStreamSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        // Pulls while disconnected would only wait for their timeouts.
        if self.client.connection_state() == State::Disconnected {
            return Err(disconnected());
        }
        self.keep_held().await;
        let messages = match self.pull().await {
            Ok(m) => m,
            // A pull refused while messages are held (a leader change, a
            // full ack window) is waited out: their commits may free it.
            Err(e) if !self.held.is_empty() => {
                tracing::debug!(connector = %self.connector, error = %e, "pull refused");
                tokio::time::sleep(QUIET).await;
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        if messages.is_empty() && self.client.connection_state() == State::Disconnected {
            return Err(disconnected());
        }
        if self.held.is_empty() {
            self.held_since = Instant::now();
        }
        let mut records = Vec::with_capacity(messages.len());
        for m in messages {
            let (seq, waiting) = match m.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(e) => {
                    tracing::warn!(connector = %self.connector, error = %e, "a JetStream message without metadata; skipped");
                    continue;
                }
            };
            self.lag = Some(waiting);
            let (msg, acker) = m.split();
            if let Some(h) = self.held.iter_mut().find(|h| h.seq == seq) {
                // Delivered again while its commit is awaited: acknowledge
                // this delivery instead.
                h.acker = acker;
                continue;
            }
            let event = message_event(
                &self.connector,
                &self.ty,
                format!("{}-{seq}", self.stream),
                msg,
            );
            self.held.push_back(Held { seq, acker });
            records.push(Record {
                event,
                position: json!({ "stream_seq": seq }),
            });
        }
        Ok(records)
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let Some(seq) = position_number(position, "stream_seq") else {
            tracing::warn!(connector = %self.connector, %position, "not a JetStream position; nothing acknowledged");
            return Ok(());
        };
        let held: Vec<u64> = self.held.iter().map(|h| h.seq).collect();
        let chosen = to_acknowledge(&held, seq);
        let Some((&last, rest)) = chosen.split_last() else {
            return Ok(());
        };
        for &i in rest {
            self.held[i]
                .acker
                .ack()
                .await
                .map_err(|e| unavailable("ack", e))?;
        }
        // A confirmed ack of the last: the server handles one connection's
        // messages in order, so every earlier ack is in too.
        within("ack", REQUEST_TIMEOUT, self.held[last].acker.double_ack()).await?;
        for &i in chosen.iter().rev() {
            self.held.remove(i);
        }
        Ok(())
    }

    async fn lag(&mut self) -> Option<u64> {
        self.lag
    }
}

// ---------------------------------------------------------------- sink

/// The kind `nats-sink`.
pub struct NatsSink;

#[async_trait]
impl SinkKind for NatsSink {
    type Config = NatsSinkConfig;
    const NAME: &'static str = "nats-sink";
    const DESCRIPTION: &'static str = "Publishes events to a NATS subject as CloudEvents \
        (binary or structured); in JetStream mode deduplicated by Nats-Msg-Id and acknowledged";

    fn check(c: &Self::Config) -> Result<(), String> {
        check_connection(&c.servers, &c.user, &c.password, &c.token)?;
        check_template(&c.subject)?;
        if c.timeout_ms == 0 {
            return Err("timeout_ms must be positive".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        Self::check(&c).map_err(ConnectorError::Config)?;
        let client = connect(&ctx.connector, &c.servers, &c.user, &c.password, &c.token).await?;
        let timeout = Duration::from_millis(c.timeout_ms);
        let js = (c.mode == Mode::Jetstream).then(|| {
            jetstream::ContextBuilder::new()
                .timeout(timeout)
                .build(client.clone())
        });
        let (subject, format) = (c.subject, c.format);
        Ok(Box::new(NatsSinkWriter {
            client,
            js,
            subject,
            format,
            timeout,
        }))
    }
}

struct NatsSinkWriter {
    client: Client,
    js: Option<jetstream::Context>,
    subject: String,
    format: Format,
    timeout: Duration,
}

#[async_trait]
impl Sink for NatsSinkWriter {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        if self.client.connection_state() != State::Connected {
            return Err(ConnectorError::unavailable("not connected to NATS"));
        }
        let mut acks = Vec::new();
        for ev in events {
            let subject = render_subject(&self.subject, ev.subject.as_deref(), &ev.ty);
            let what = format!("publish to {subject}");
            let (headers, body) = encode(ev, self.format, self.js.is_some())
                .map_err(|e| unavailable(&format!("event {}", ev.id), e))?;
            let Some(js) = &self.js else {
                let sent = self
                    .client
                    .publish_with_headers(subject, headers, body)
                    .await;
                sent.map_err(|e| unavailable(&what, e))?;
                continue;
            };
            let message = PublishMessage::build().headers(headers).payload(body);
            let ack = js.send_publish(subject, message).await;
            acks.push((what.clone(), ack.map_err(|e| unavailable(&what, e))?));
        }
        if self.js.is_none() {
            return within("flush to NATS", self.timeout, self.client.flush()).await;
        }
        for (what, ack) in acks {
            within(&what, self.timeout, ack.into_future()).await?;
        }
        Ok(())
    }
}

/// This file's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<NatsSource>(), Kind::sink::<NatsSink>()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_core::event::ExtValue;

    #[test]
    fn subjects_are_checked_for_wildcards_and_tokens() {
        assert_eq!(check_subject("orders.*.created", true), Ok(()));
        assert_eq!(check_subject("orders.>", true), Ok(()));
        assert_eq!(check_subject("", true), Err("must not be empty".into()));
        assert_eq!(
            check_subject("a..b", true),
            Err("\"a..b\" has an empty token".into())
        );
        assert_eq!(
            check_subject("a b", true),
            Err("\"a b\" contains whitespace".into())
        );
        let misplaced = "\"a.>.b\": wildcards are whole tokens, and > only the last";
        assert_eq!(check_subject("a.>.b", true), Err(misplaced.into()));
        assert!(check_subject("a.b*", true).is_err());
        assert_eq!(
            check_subject("a.*", false),
            Err("\"a.*\" contains a wildcard".into())
        );
    }

    #[test]
    fn sink_subjects_are_rendered_from_the_event() {
        let t = "events.{type}.{subject}";
        assert_eq!(
            render_subject(t, Some("eu/1"), "order.created"),
            "events.order.created.eu/1"
        );
        assert_eq!(render_subject(t, None, "a b"), "events.a_b._");
        assert_eq!(
            render_subject(t, Some(".x..y."), "*>"),
            "events.__._.x._.y._"
        );
        // A placeholder inside a value is not expanded again.
        assert_eq!(render_subject(t, Some("{type}"), "t"), "events.t.{type}");
        assert_eq!(render_subject("plain", None, "t"), "plain");
        assert_eq!(check_template(t), Ok(()));
        let unknown = "subject: unknown placeholder \"{id}\"; use {subject} or {type}";
        assert_eq!(check_template("a.{id}"), Err(unknown.into()));
        assert_eq!(
            check_template("a.*"),
            Err("subject: \"a.*\" contains a wildcard".into())
        );
        assert_eq!(check_template(""), Err("subject: must not be empty".into()));
    }

    #[test]
    fn commits_acknowledge_in_the_order_returned() {
        assert_eq!(to_acknowledge(&[4, 5, 6], 5), vec![0, 1]);
        assert_eq!(to_acknowledge(&[4, 5, 6], 6), vec![0, 1, 2]);
        // A redelivery returned after later messages.
        assert_eq!(to_acknowledge(&[7, 8, 2, 9], 2), vec![0, 1, 2]);
        // A position not held: the held ones at or below it.
        assert_eq!(to_acknowledge(&[7, 3, 9], 5), vec![1]);
        assert!(to_acknowledge(&[], 5).is_empty());
        assert_eq!(
            position_number(&json!({"stream_seq": 12}), "stream_seq"),
            Some(12)
        );
        assert_eq!(position_number(&json!({"seq": 3}), "stream_seq"), None);
        assert_eq!(position_number(&json!({"seq": -1}), "seq"), None);
        assert_eq!(position_number(&json!("x"), "seq"), None);
    }

    #[test]
    fn names_and_connections_are_checked() {
        assert_eq!(default_durable("orders in.eu"), "eventmesh-orders_in_eu");
        assert_eq!(check_name("durable", "ok-1"), Ok(()));
        assert!(check_name("stream", "a.b")
            .unwrap_err()
            .starts_with("stream \"a.b\""));
        let servers = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let check = |s: &[&str], u: Option<&str>, p: Option<&str>, t: Option<&str>| {
            let own = |x: Option<&str>| x.map(str::to_string);
            check_connection(&servers(s), &own(u), &own(p), &own(t))
        };
        assert_eq!(
            check(&["nats://h:4222", "tls://h2"], None, None, None),
            Ok(())
        );
        assert_eq!(check(&["nats://h"], None, None, Some("t")), Ok(()));
        assert_eq!(
            check(&[], None, None, None),
            Err("servers must list at least one URL".into())
        );
        let scheme = "servers[0] \"http://h\": invalid scheme for NATS server URL: http";
        assert_eq!(check(&["http://h"], None, None, None), Err(scheme.into()));
        let bare = "servers[0] \"h:4222\" must be a nats:// or tls:// URL";
        assert_eq!(check(&["h:4222"], None, None, None), Err(bare.into()));
        assert_eq!(
            check(&["nats://h"], Some("u"), None, None),
            Err("user needs a password".into())
        );
        let both = Err("token and user are exclusive".into());
        assert_eq!(check(&["nats://h"], Some("u"), Some("p"), Some("t")), both);
    }

    fn sample() -> CloudEvent {
        let mut ev = event(
            "c",
            "id 1",
            "order.created",
            Data::Json(Bytes::from_static(b"{\"n\":1}")),
        );
        ev.subject = Some("50% off".into());
        ev.time = Some("2024-01-02T03:04:05Z".into());
        ev.set_extension("region", ExtValue::Str("eu west".into()));
        ev
    }

    fn message(headers: Option<HeaderMap>, body: &'static [u8]) -> async_nats::Message {
        async_nats::Message {
            subject: "orders.eu".into(),
            reply: None,
            payload: Bytes::from_static(body),
            headers,
            status: None,
            description: None,
            length: body.len(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Option<HeaderMap> {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            put(&mut h, n, v).unwrap();
        }
        Some(h)
    }

    #[test]
    fn binary_and_structured_messages_read_back_as_the_event() {
        for format in [Format::Binary, Format::Structured] {
            let (h, body) = encode(&sample(), format, true).unwrap();
            let pairs = header_pairs(Some(&h));
            assert_eq!(header(&pairs, "nats-msg-id"), Some("/connectors/c/id%201"));
            let mut m = message(Some(h), b"");
            m.payload = body;
            assert_eq!(
                message_event("other", "t", "new".into(), m),
                sample(),
                "{format:?}"
            );
        }
        let (h, body) = encode(&sample(), Format::Binary, false).unwrap();
        let pairs = header_pairs(Some(&h));
        assert_eq!(header(&pairs, "ce-id"), Some("id%201"));
        assert_eq!(header(&pairs, "ce-subject"), Some("50%25%20off"));
        assert_eq!(
            header(&pairs, "ce-datacontenttype"),
            Some("application/json")
        );
        assert_eq!(header(&pairs, "content-type"), Some("application/json"));
        assert_eq!(header(&pairs, "nats-msg-id"), None);
        assert_eq!(&body[..], b"{\"n\":1}");
    }

    #[test]
    fn plain_messages_become_events_of_the_configured_type() {
        let ev = message_event("c", "nats.message", "s-7".into(), message(None, b"hello"));
        assert_eq!(
            (ev.id.as_str(), ev.source.as_str()),
            ("s-7", "/connectors/c")
        );
        assert_eq!(
            (ev.ty.as_str(), ev.subject.as_deref()),
            ("nats.message", Some("orders.eu"))
        );
        assert_eq!(ev.data, Data::Text("hello".into()));
        let empty = message_event("c", "t", "1".into(), message(None, b""));
        assert_eq!((empty.data, empty.datacontenttype), (Data::None, None));
        // A Content-Type header types the body.
        let xml = message(headers(&[("Content-Type", "application/xml")]), b"<a/>");
        let xml = message_event("c", "t", "1".into(), xml);
        assert_eq!(xml.data, Data::Binary(Bytes::from_static(b"<a/>")));
        assert_eq!(xml.datacontenttype.as_deref(), Some("application/xml"));
        // CloudEvent headers that do not make an event: a plain message.
        let bad = message(headers(&[("ce-specversion", "1.0"), ("ce-id", "x")]), b"1");
        let bad = message_event("c", "t", "9".into(), bad);
        assert_eq!(
            (bad.id.as_str(), bad.data),
            ("9", Data::Json(Bytes::from_static(b"1")))
        );
        // Header names in any case; Content-Type without ce-datacontenttype.
        let ce = headers(&[
            ("CE-SpecVersion", "1.0"),
            ("Ce-Id", "e1"),
            ("ce-source", "/x"),
            ("ce-type", "y"),
            ("content-type", "text/plain"),
        ]);
        let ce = message_event("c", "t", "9".into(), message(ce, b"hi"));
        assert_eq!(
            (ce.id.as_str(), ce.source.as_str(), ce.ty.as_str()),
            ("e1", "/x", "y")
        );
        assert_eq!(ce.data, Data::Text("hi".into()));
        assert_eq!(ce.datacontenttype.as_deref(), Some("text/plain"));
    }
}
