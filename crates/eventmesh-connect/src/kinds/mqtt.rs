//! `mqtt-source` and `mqtt-sink`: MQTT 3.1.1 or 5 (`protocol`) over plain
//! TCP, through `rumqttc`. Each source or sink has one connection at a time,
//! its event loop driven by a task of its own that ends when the connector
//! is dropped.
//!
//! **Source.** Subscribes to `topics` at QoS 1 in a persistent session
//! (clean session/start off, MQTT 5 session expiry `session_expiry_secs`)
//! with manual acknowledgements: a message is `PUBACK`ed only in
//! [`Source::commit`], once durable in the mesh, so a crash before that
//! leaves it in the broker's session, which sends it again to the next
//! connection with the same `client_id`. A lost connection fails the poll;
//! the next poll reconnects as a reopen would.
//!
//! *Positions* (`{"session": id, "seq": n, "topics": [..]}`). MQTT has no
//! replayable position: the broker's session is what resumes. A position
//! numbers the messages of one session. Reconnecting to a session the
//! broker kept, numbering restarts after the committed `seq`, and the broker
//! resends the unacknowledged messages first, in order, so each gets its
//! number again. When the broker has no session (first start, expiry, a
//! broker that lost it), a new session id starts at 0, so no number is
//! reused. `topics` are the session's subscriptions: on a kept session only
//! the difference to the configured filters is (un)subscribed, so a reopen
//! does not make the broker resend retained messages.
//!
//! *Event ids.* A packet id is reused once acknowledged and identifies
//! nothing. A message that is a CloudEvent keeps its `id` and `source`; any
//! other gets `<session>-<seq>-<digest>` (12 hex digits of SHA-256 over
//! topic and payload), the same when redelivered, so the mesh's publish
//! deduplication drops the copy. Should numbering shift (the broker dropped
//! an unacknowledged message, a `PUBACK` was lost in a crash), the digest
//! makes a shifted id differ from the one already used: a duplicate, not a
//! message dropped as one.
//!
//! *Mapping* (CloudEvents MQTT binding, with `cloudevents` on): content type
//! `application/cloudevents+json`, or no content type and a payload that
//! parses as a JSON event (structured mode, the only one in 3.1.1), or an
//! MQTT 5 `specversion` user property (binary mode: attributes as user
//! properties under their own names, `datacontenttype` the content type,
//! the payload `data`) is the event it carries. Any other message becomes
//! an event of `type` with the payload as data, typed by an MQTT 5 content
//! type when there is one. The subject is the topic unless the event has one.
//!
//! **Sink.** Publishes each event to `topic`, where `{subject}` and `{type}`
//! become the event's (`+`, `#`, NUL as `_`; missing as `_`), at `qos`, with
//! `retain`. `structured` sends the JSON event (MQTT 5 content type
//! `application/cloudevents+json`); `binary` (MQTT 5) sends `data` with the
//! attributes as user properties. `write` returns once every message is
//! acknowledged (`PUBACK`; `PUBCOMP` at QoS 2; at QoS 0 once sent). MQTT has
//! no idempotent publish: events written again after an error may reach
//! subscribers twice. An event that cannot be sent (over `max_packet_size`,
//! NUL in a binary-mode attribute) fails as `Unavailable`, so the runtime
//! retries it alone and dead-letters it. A lost connection fails the write;
//! the next one reconnects.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_core::event::{percent_encode, valid_extension_name};
use eventmesh_core::CloudEvent;
use rumqttc::v5::mqttbytes::v5 as p5;
use rumqttc::Outgoing as O;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{timeout_at, Instant};

use crate::kind::Kind;
use crate::sdk::{self, ConnectorError, Position, Record, Sink, SinkContext, SinkKind};
use crate::sdk::{Source, SourceContext, SourceKind};

/// This file's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<MqttSource>(), Kind::sink::<MqttSink>()]
}

const STRUCTURED: &str = "application/cloudevents+json";
/// Requests (acks, publishes) queued towards an event loop.
const REQUESTS: usize = 1024;
const BATCH: usize = 1000;

/// The MQTT protocol version.
#[derive(Debug, Clone, Copy, Default, JsonSchema, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    #[serde(rename = "3.1.1")]
    V311,
    #[serde(rename = "5")]
    V5,
}

/// How the sink carries an event.
#[derive(Debug, Clone, Copy, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `data` as the payload, attributes as MQTT 5 user properties.
    Binary,
    /// The whole event as CloudEvents JSON.
    Structured,
}

/// Reads a string choice; the error names the field.
fn choice<'de, D: serde::Deserializer<'de>, T: Copy>(
    d: D,
    field: &str,
    choices: [(&str, T); 2],
) -> Result<T, D::Error> {
    let s = String::deserialize(d)?;
    let found = choices.iter().find(|(n, _)| *n == s).map(|(_, v)| *v);
    found.ok_or_else(|| {
        let [(a, _), (b, _)] = choices;
        serde::de::Error::custom(format!("{field} must be {a:?} or {b:?}, not {s:?}"))
    })
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        choice(
            d,
            "protocol",
            [("3.1.1", Protocol::V311), ("5", Protocol::V5)],
        )
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        choice(
            d,
            "format",
            [
                ("binary", Format::Binary),
                ("structured", Format::Structured),
            ],
        )
    }
}

fn default_port() -> u16 {
    1883
}
fn default_keep_alive() -> u16 {
    30
}
fn default_timeout() -> u64 {
    10
}
fn default_max_packet() -> u32 {
    1 << 20
}
fn default_type() -> String {
    "mqtt.message".into()
}
fn default_true() -> bool {
    true
}
fn default_expiry() -> u32 {
    u32::MAX
}
fn default_qos() -> u8 {
    1
}

/// A config struct with the connection fields both kinds share.
macro_rules! with_connection {
    ($(#[$m:meta])* pub struct $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The broker's host name or IP address.
            pub host: String,
            /// The broker's TCP port.
            #[serde(default = "default_port")]
            pub port: u16,
            /// `3.1.1` (default) or `5`.
            #[serde(default)]
            pub protocol: Protocol,
            /// The MQTT client id, default `eventmesh-<connector>`; a
            /// source's names its persistent session. No other client may
            /// use it at the same time.
            #[serde(default)]
            pub client_id: Option<String>,
            /// User name to connect with.
            #[serde(default)]
            pub username: Option<String>,
            /// Password to connect with (needs `username`).
            #[serde(default)]
            pub password: Option<String>,
            /// Keep-alive interval in seconds, at least 5.
            #[serde(default = "default_keep_alive")]
            pub keep_alive_secs: u16,
            /// Seconds to wait for the broker to accept the connection and
            /// subscriptions, or to acknowledge a write.
            #[serde(default = "default_timeout")]
            pub timeout_secs: u64,
            /// The largest MQTT packet sent or accepted, in bytes. An MQTT 5
            /// broker drops larger messages for a source; a 3.1.1 one cannot
            /// be told, and one fails the connection until this is raised.
            #[serde(default = "default_max_packet")]
            pub max_packet_size: u32,
            $($body)*
        }

        impl $name {
            fn broker(&self, connector: &str) -> Broker {
                let id = self.client_id.clone();
                Broker {
                    host: self.host.clone(),
                    port: self.port,
                    protocol: self.protocol,
                    client_id: id.unwrap_or_else(|| format!("eventmesh-{connector}")),
                    login: (self.username.clone())
                        .or_else(|| self.password.as_ref().map(|_| String::new()))
                        .map(|u| (u, self.password.clone())),
                    keep_alive: self.keep_alive_secs,
                    timeout: Duration::from_secs(self.timeout_secs),
                    max_packet_size: self.max_packet_size,
                }
            }
        }
    };
}

with_connection! {
    /// The `config` of an `mqtt-source`.
    pub struct MqttSourceConfig {
        /// Topic filters to subscribe to (`+` and `#` wildcards allowed).
        pub topics: Vec<String>,
        /// The `type` of events made from messages that are not CloudEvents.
        #[serde(default = "default_type", rename = "type")]
        pub ty: String,
        /// Read messages that are CloudEvents (structured JSON, or MQTT 5
        /// binary mode) as the events they carry; `false` wraps every one.
        #[serde(default = "default_true")]
        pub cloudevents: bool,
        /// MQTT 5: seconds the broker keeps the session while disconnected
        /// (default 4294967295: never expires).
        #[serde(default = "default_expiry")]
        pub session_expiry_secs: u32,
    }
}

with_connection! {
    /// The `config` of an `mqtt-sink`.
    pub struct MqttSinkConfig {
        /// The topic to publish to; `{subject}` and `{type}` are replaced
        /// by the event's.
        pub topic: String,
        /// QoS of the messages: 0, 1 (default) or 2.
        #[serde(default = "default_qos")]
        pub qos: u8,
        /// Publish the messages as retained.
        #[serde(default)]
        pub retain: bool,
        /// `structured` (the JSON event; default for 3.1.1) or `binary`
        /// (data as payload, attributes as user properties; MQTT 5 only,
        /// its default).
        #[serde(default)]
        pub format: Option<Format>,
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
struct Broker {
    host: String,
    port: u16,
    protocol: Protocol,
    client_id: String,
    login: Option<(String, Option<String>)>,
    keep_alive: u16,
    timeout: Duration,
    max_packet_size: u32,
}

impl Broker {
    fn check(&self) -> Result<(), String> {
        let id = &self.client_id;
        let fault = if self.host.trim().is_empty() {
            "host must not be empty"
        } else if self.port == 0 {
            "port must not be 0"
        } else if id.is_empty() || id.len() > 65535 || id.contains('\0') {
            "client_id must be 1 to 65535 bytes without NUL"
        } else if self.login.as_ref().is_some_and(|(u, _)| u.is_empty()) {
            "username must not be empty (a password needs one)"
        } else if self.keep_alive < 5 {
            "keep_alive_secs must be at least 5"
        } else if !(1..=3600).contains(&self.timeout.as_secs()) {
            "timeout_secs must be 1 to 3600"
        } else if !(128..=268_435_455).contains(&self.max_packet_size) {
            "max_packet_size must be 128 to 268435455"
        } else {
            return Ok(());
        };
        Err(fault.into())
    }

    fn unavailable(&self, what: impl std::fmt::Display) -> ConnectorError {
        ConnectorError::unavailable(format!("mqtt broker {}:{}: {what}", self.host, self.port))
    }

    /// A refused `CONNECT`: a matter of configuration unless the broker is
    /// busy or away.
    fn refused(&self, code: impl std::fmt::Debug) -> ConnectorError {
        let code = format!("{code:?}");
        let config = [
            "BadUserNamePassword",
            "NotAuthorized",
            "BadClientId",
            "ClientIdentifierNotValid",
            "RefusedProtocolVersion",
            "UnsupportedProtocolVersion",
            "Banned",
            "BadAuthenticationMethod",
        ]
        .contains(&code.as_str());
        let msg = format!(
            "mqtt broker {}:{} refused the connection: {code}",
            self.host, self.port
        );
        if config {
            ConnectorError::Config(msg)
        } else {
            ConnectorError::Unavailable(msg)
        }
    }
}

/// Why a topic filter is invalid (MQTT 3.1.1 section 4.7).
fn filter_fault(f: &str) -> Option<&'static str> {
    if f.is_empty() || f.len() > 65535 || f.contains('\0') {
        return Some("must be 1 to 65535 bytes without NUL");
    }
    let levels: Vec<&str> = f.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return Some("has a '#' that is not the whole last level");
        }
        if level.contains('+') && *level != "+" {
            return Some("has a '+' that is not a whole level");
        }
    }
    None
}

/// Why a topic name cannot be published to.
fn topic_fault(t: &str) -> Option<&'static str> {
    if t.is_empty() || t.len() > 65535 || t.contains('\0') {
        Some("must be 1 to 65535 bytes without NUL")
    } else if t.contains(['+', '#']) {
        Some("must not contain the wildcards '+' or '#'")
    } else {
        None
    }
}

/// `template` with `{subject}` and `{type}` replaced, in one pass.
fn fill(template: &str, subject: Option<&str>, ty: &str) -> String {
    let clean = |v: Option<&str>| match v {
        Some(v) if !v.is_empty() => v.replace(['+', '#', '\0'], "_"),
        _ => "_".to_string(),
    };
    let (mut out, mut rest) = (String::new(), template);
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("{subject}") {
            (out, rest) = (out + &clean(subject), r);
        } else if let Some(r) = rest.strip_prefix("{type}") {
            (out, rest) = (out + &clean(Some(ty)), r);
        } else {
            (out, rest) = (out + "{", &rest[1..]);
        }
    }
    out + rest
}

// ---- The event loop, for both protocol versions ----

enum Client {
    V4(rumqttc::AsyncClient),
    V5(rumqttc::v5::AsyncClient),
}

enum Driver {
    V4(Box<rumqttc::EventLoop>),
    V5(Box<rumqttc::v5::EventLoop>),
}

/// One incoming publish.
#[derive(Debug, Clone, Default, PartialEq)]
struct Msg {
    topic: String,
    payload: Bytes,
    qos: u8,
    pkid: u16,
    content_type: Option<String>,
    properties: Vec<(String, String)>,
}

/// What an event loop reported, reduced to what the connectors use.
enum Note {
    ConnAck(bool),
    Message(Msg),
    SubAck(Option<String>),
    UnsubAck,
    /// A publish went out with this packet id (0 at QoS 0).
    Sent(u16),
    /// The broker completed the publish with this packet id.
    Done(u16),
    Refused(u16, String),
    /// One of our acknowledgements went out.
    AckSent,
    Other,
}

fn qos4(q: u8) -> rumqttc::QoS {
    use rumqttc::QoS;
    match q {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

fn qos5(q: u8) -> rumqttc::v5::mqttbytes::QoS {
    use rumqttc::v5::mqttbytes::QoS;
    match q {
        0 => QoS::AtMostOnce,
        1 => QoS::AtLeastOnce,
        _ => QoS::ExactlyOnce,
    }
}

/// A client and its event loop: `persistent` is the session expiry of a
/// persistent session, `None` for a clean one.
fn client(b: &Broker, persistent: Option<u32>, manual_acks: bool) -> (Client, Driver) {
    let keep_alive = Duration::from_secs(u64::from(b.keep_alive.max(5)));
    let (id, host, secs) = (&b.client_id, &b.host, b.timeout.as_secs().max(1));
    let login = b.login.clone().map(|(u, p)| (u, p.unwrap_or_default()));
    match b.protocol {
        Protocol::V311 => {
            let mut o = rumqttc::MqttOptions::new(id, host, b.port);
            let size = b.max_packet_size as usize;
            o.set_keep_alive(keep_alive)
                .set_clean_session(persistent.is_none() || id.is_empty())
                .set_manual_acks(manual_acks)
                .set_max_packet_size(size, size)
                .set_request_channel_capacity(REQUESTS);
            if let Some((u, p)) = login {
                o.set_credentials(u, p);
            }
            let (c, mut l) = rumqttc::AsyncClient::new(o, REQUESTS);
            let mut net = rumqttc::NetworkOptions::new();
            net.set_connection_timeout(secs);
            l.set_network_options(net);
            (Client::V4(c), Driver::V4(Box::new(l)))
        }
        Protocol::V5 => {
            let mut o = rumqttc::v5::MqttOptions::new(id, host, b.port);
            o.set_keep_alive(keep_alive)
                .set_clean_start(persistent.is_none())
                .set_manual_acks(manual_acks)
                .set_max_packet_size(Some(b.max_packet_size))
                .set_connection_timeout(secs)
                .set_request_channel_capacity(REQUESTS);
            if persistent.is_some() {
                o.set_session_expiry_interval(persistent);
            }
            if let Some((u, p)) = login {
                o.set_credentials(u, p);
            }
            let (c, l) = rumqttc::v5::AsyncClient::new(o, REQUESTS);
            (Client::V5(c), Driver::V5(Box::new(l)))
        }
    }
}

impl Driver {
    async fn next(&mut self, b: &Broker) -> Result<Note, ConnectorError> {
        match self {
            Driver::V4(l) => {
                use rumqttc::{ConnectionError as E, Event, Packet as P};
                let event = l.poll().await.map_err(|e| match e {
                    E::ConnectionRefused(code) => b.refused(code),
                    e => b.unavailable(e),
                })?;
                Ok(match event {
                    Event::Incoming(P::ConnAck(c)) => Note::ConnAck(c.session_present),
                    Event::Incoming(P::Publish(p)) => Note::Message(Msg {
                        topic: p.topic,
                        payload: p.payload,
                        qos: p.qos as u8,
                        pkid: p.pkid,
                        ..Msg::default()
                    }),
                    Event::Incoming(P::SubAck(s)) => Note::SubAck(
                        s.return_codes
                            .iter()
                            .find(|c| matches!(c, rumqttc::SubscribeReasonCode::Failure))
                            .map(|c| format!("{c:?}")),
                    ),
                    Event::Incoming(P::UnsubAck(_)) => Note::UnsubAck,
                    Event::Incoming(P::PubAck(a)) => Note::Done(a.pkid),
                    Event::Incoming(P::PubComp(a)) => Note::Done(a.pkid),
                    Event::Outgoing(O::Publish(id)) => Note::Sent(id),
                    Event::Outgoing(O::PubAck(_) | O::PubRec(_)) => Note::AckSent,
                    _ => Note::Other,
                })
            }
            Driver::V5(l) => {
                use p5::{PubAckReason as A, PubRecReason as R};
                use rumqttc::v5::Incoming as P;
                use rumqttc::v5::{ConnectionError as E, Event, StateError};
                let event = l.poll().await.map_err(|e| match e {
                    E::ConnectionRefused(code) => b.refused(code),
                    E::MqttState(StateError::ConnFail { reason }) => b.refused(reason),
                    e => b.unavailable(e),
                })?;
                Ok(match event {
                    Event::Incoming(P::ConnAck(c)) => Note::ConnAck(c.session_present),
                    Event::Incoming(P::Publish(p)) => {
                        let props = p.properties.unwrap_or_default();
                        Note::Message(Msg {
                            topic: String::from_utf8_lossy(&p.topic).into_owned(),
                            payload: p.payload,
                            qos: p.qos as u8,
                            pkid: p.pkid,
                            content_type: props.content_type,
                            properties: props.user_properties,
                        })
                    }
                    Event::Incoming(P::SubAck(s)) => Note::SubAck(
                        s.return_codes
                            .iter()
                            .find(|c| !matches!(c, p5::SubscribeReasonCode::Success(_)))
                            .map(|c| format!("{c:?}")),
                    ),
                    Event::Incoming(P::UnsubAck(_)) => Note::UnsubAck,
                    Event::Incoming(P::PubAck(a)) => match a.reason {
                        A::Success | A::NoMatchingSubscribers => Note::Done(a.pkid),
                        r => Note::Refused(a.pkid, format!("{r:?}")),
                    },
                    Event::Incoming(P::PubRec(a)) => match a.reason {
                        R::Success | R::NoMatchingSubscribers => Note::Other,
                        r => Note::Refused(a.pkid, format!("{r:?}")),
                    },
                    Event::Incoming(P::PubComp(a)) => Note::Done(a.pkid),
                    Event::Outgoing(O::Publish(id)) => Note::Sent(id),
                    Event::Outgoing(O::PubAck(_) | O::PubRec(_)) => Note::AckSent,
                    _ => Note::Other,
                })
            }
        }
    }

    /// The next note before `deadline`.
    async fn until(&mut self, b: &Broker, deadline: Instant) -> Result<Note, ConnectorError> {
        let late = || b.unavailable("no answer in time");
        timeout_at(deadline, self.next(b))
            .await
            .map_err(|_| late())?
    }
}

impl Client {
    async fn subscribe(&self, filters: &[String]) -> bool {
        match self {
            Client::V4(c) => {
                let f = |f: &String| rumqttc::SubscribeFilter::new(f.clone(), qos4(1));
                c.subscribe_many(filters.iter().map(f)).await.is_ok()
            }
            Client::V5(c) => {
                let f = |f: &String| {
                    let mut f = p5::Filter::new(f.clone(), qos5(1));
                    f.retain_forward_rule = p5::RetainForwardRule::OnNewSubscribe;
                    f
                };
                c.subscribe_many(filters.iter().map(f)).await.is_ok()
            }
        }
    }

    async fn unsubscribe(&self, filter: &str) -> bool {
        match self {
            Client::V4(c) => c.unsubscribe(filter).await.is_ok(),
            Client::V5(c) => c.unsubscribe(filter).await.is_ok(),
        }
    }

    /// Acknowledges an incoming publish; `false` when the loop has ended.
    async fn ack(&self, qos: u8, pkid: u16) -> bool {
        match self {
            Client::V4(c) => {
                let mut p = rumqttc::Publish::new("", qos4(qos), Vec::new());
                p.pkid = pkid;
                c.try_ack(&p).is_ok() || c.ack(&p).await.is_ok()
            }
            Client::V5(c) => {
                let mut p = p5::Publish::new("", qos5(qos), Bytes::new(), None);
                p.pkid = pkid;
                c.try_ack(&p).is_ok() || c.ack(&p).await.is_ok()
            }
        }
    }

    async fn publish(&self, out: Out, qos: u8, retain: bool) -> bool {
        let Out {
            topic,
            payload,
            content_type,
            properties,
        } = out;
        match self {
            Client::V4(c) => c
                .publish_bytes(topic, qos4(qos), retain, payload)
                .await
                .is_ok(),
            Client::V5(c) => {
                let user_properties = properties;
                let props = p5::PublishProperties {
                    content_type,
                    user_properties,
                    ..Default::default()
                };
                let qos = qos5(qos);
                c.publish_bytes_with_properties(topic, qos, retain, payload, props)
                    .await
                    .is_ok()
            }
        }
    }
}

/// An event loop's task, aborted (closing the connection) when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// ---- mqtt-source ----

/// The `mqtt-source` kind.
pub struct MqttSource;

#[async_trait]
impl SourceKind for MqttSource {
    type Config = MqttSourceConfig;
    const NAME: &'static str = "mqtt-source";
    const DESCRIPTION: &'static str = "Subscribes to MQTT 3.1.1 or 5 topic filters in a persistent session, acknowledging each message once it is durable in the mesh";

    fn check(c: &Self::Config) -> Result<(), String> {
        c.broker("x").check()?;
        if c.topics.is_empty() {
            return Err("topics must name at least one topic filter".into());
        }
        for (i, f) in c.topics.iter().enumerate() {
            if let Some(why) = filter_fault(f) {
                return Err(format!("topics[{i}] {f:?} is not a topic filter: it {why}"));
            }
        }
        if c.ty.trim().is_empty() {
            return Err("type must not be empty".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        Self::check(&c).map_err(ConnectorError::Config)?;
        let mut topics = c.topics.clone();
        topics.sort();
        topics.dedup();
        let mark = ctx.position.as_ref().and_then(read_position);
        let mut reader = Reader {
            broker: c.broker(&ctx.connector),
            connector: ctx.connector,
            topics,
            ty: c.ty,
            cloudevents: c.cloudevents,
            expiry: c.session_expiry_secs,
            known: mark.is_some(),
            session: String::new(),
            seq: 0,
            committed: 0,
            subscribed: None,
            unacked: VecDeque::new(),
            link: None,
            failure: None,
        };
        if let Some(m) = mark {
            (reader.session, reader.committed, reader.subscribed) = (m.session, m.seq, m.topics);
        }
        reader.attach().await?;
        Ok(Box::new(reader))
    }
}

/// A position read back.
#[derive(Debug, PartialEq)]
struct Mark {
    session: String,
    seq: u64,
    topics: Option<Vec<String>>,
}

fn read_position(p: &Position) -> Option<Mark> {
    Some(Mark {
        session: p.get("session")?.as_str()?.to_string(),
        seq: p.get("seq")?.as_u64()?,
        topics: p
            .get("topics")
            .and_then(|t| serde_json::from_value(t.clone()).ok()),
    })
}

fn new_session(connector: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let mut h = Sha256::new();
    h.update(connector.as_bytes());
    h.update(now.map(|d| d.as_nanos()).unwrap_or_default().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hex::encode(&h.finalize()[..6])
}

/// The id of a message that is not a CloudEvent.
fn message_id(session: &str, seq: u64, m: &Msg) -> String {
    let digest = Sha256::new()
        .chain_update(&m.topic)
        .chain_update([0])
        .chain_update(&m.payload);
    format!("{session}-{seq}-{}", hex::encode(&digest.finalize()[..6]))
}

struct Reader {
    broker: Broker,
    connector: String,
    topics: Vec<String>,
    ty: String,
    cloudevents: bool,
    expiry: u32,
    /// Whether `session` names a session this source had.
    known: bool,
    session: String,
    /// The last number handed out, and the last committed.
    seq: u64,
    committed: u64,
    /// The filters the broker's session is subscribed to, when known.
    subscribed: Option<Vec<String>>,
    /// `(seq, qos, packet id)` of messages returned and not acknowledged.
    unacked: VecDeque<(u64, u8, u16)>,
    link: Option<SourceLink>,
    /// A connection failure found behind the last batch.
    failure: Option<ConnectorError>,
}

struct SourceLink {
    client: Client,
    rx: mpsc::UnboundedReceiver<Result<Msg, ConnectorError>>,
    /// How many acknowledgements the loop has sent, and we asked for.
    acks_sent: watch::Receiver<u64>,
    acks_asked: u64,
    _task: Task,
}

impl Reader {
    /// Connects, brings the subscriptions in line and starts the loop.
    async fn attach(&mut self) -> Result<(), ConnectorError> {
        let b = self.broker.clone();
        let deadline = Instant::now() + b.timeout;
        let (client, mut driver) = client(&b, Some(self.expiry), true);
        let kept = loop {
            if let Note::ConnAck(present) = driver.until(&b, deadline).await? {
                break present;
            }
        };
        if kept && self.known {
            self.seq = self.committed;
        } else {
            self.session = new_session(&self.connector);
            (self.seq, self.committed, self.subscribed, self.known) = (0, 0, None, true);
        }
        self.unacked.clear();
        let old = self.subscribed.clone().unwrap_or_default();
        let add: Vec<String> = self
            .topics
            .iter()
            .filter(|t| !old.contains(t))
            .cloned()
            .collect();
        let remove: Vec<&String> = old.iter().filter(|t| !self.topics.contains(t)).collect();
        let ended = || ConnectorError::unavailable("mqtt: the event loop ended");
        if !add.is_empty() && !client.subscribe(&add).await {
            return Err(ended());
        }
        for f in &remove {
            if !client.unsubscribe(f).await {
                return Err(ended());
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut waiting = remove.len() + usize::from(!add.is_empty());
        while waiting > 0 {
            match driver.until(&b, deadline).await? {
                Note::Message(m) => {
                    let _ = tx.send(Ok(m));
                }
                Note::SubAck(Some(why)) => {
                    let msg = format!("the broker refused to subscribe to {add:?}: {why}");
                    return Err(ConnectorError::Config(msg));
                }
                Note::SubAck(None) | Note::UnsubAck => waiting -= 1,
                _ => {}
            }
        }
        self.subscribed = Some(self.topics.clone());
        let (acks_tx, acks_sent) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            loop {
                match driver.next(&b).await {
                    Ok(Note::Message(m)) => {
                        if tx.send(Ok(m)).is_err() {
                            return;
                        }
                    }
                    Ok(Note::AckSent) => acks_tx.send_modify(|n| *n += 1),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        let _task = Task(task);
        self.link = Some(SourceLink {
            client,
            rx,
            acks_sent,
            acks_asked: 0,
            _task,
        });
        Ok(())
    }

    fn record(&mut self, m: Msg) -> Record {
        self.seq += 1;
        let seq = self.seq;
        let carried = if self.cloudevents {
            carried_event(&m)
        } else {
            None
        };
        let mut event = carried.unwrap_or_else(|| {
            let id = message_id(&self.session, seq, &m);
            plain_event(&m, &self.connector, &self.ty, id)
        });
        if event.subject.is_none() {
            event.subject = Some(m.topic.clone());
        }
        if m.qos > 0 {
            self.unacked.push_back((seq, m.qos, m.pkid));
        }
        let position = json!({"session": self.session, "seq": seq, "topics": self.topics});
        Record { event, position }
    }
}

#[async_trait]
impl Source for Reader {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        if let Some(e) = self.failure.take() {
            self.link = None;
            return Err(e);
        }
        if self.link.is_none() {
            self.attach().await?;
        }
        let Some(link) = self.link.as_mut() else {
            return Ok(Vec::new());
        };
        let first = match tokio::time::timeout(Duration::from_secs(1), link.rx.recv()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(m))) => m,
            Ok(failed) => {
                self.link = None;
                let ended = || ConnectorError::unavailable("mqtt: the connection ended");
                return Err(failed.and_then(Result::err).unwrap_or_else(ended));
            }
        };
        let mut msgs = vec![first];
        while msgs.len() < BATCH {
            match link.rx.try_recv() {
                Ok(Ok(m)) => msgs.push(m),
                Ok(Err(e)) => {
                    self.failure = Some(e);
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(msgs.into_iter().map(|m| self.record(m)).collect())
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let Some(mark) = read_position(position) else {
            let msg = format!("not an mqtt-source position: {position}");
            return Err(ConnectorError::Config(msg));
        };
        // A position of a session the broker no longer has acks nothing.
        if mark.session != self.session {
            return Ok(());
        }
        self.committed = self.committed.max(mark.seq);
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        while let Some(&(seq, qos, pkid)) = self.unacked.front() {
            if seq > self.committed || !link.client.ack(qos, pkid).await {
                break;
            }
            self.unacked.pop_front();
            link.acks_asked += 1;
        }
        // Wait until the acknowledgements are on the wire, so that a source
        // dropped right after a commit does not get them again.
        let (target, mut sent) = (link.acks_asked, link.acks_sent.clone());
        let _ = tokio::time::timeout(self.broker.timeout, sent.wait_for(|n| *n >= target)).await;
        Ok(())
    }
}

/// The CloudEvent a message carries, if it is one (see the module docs).
fn carried_event(m: &Msg) -> Option<CloudEvent> {
    let ct = m
        .content_type
        .as_deref()
        .map(|c| c.trim().to_ascii_lowercase());
    let structured = || CloudEvent::from_json_slice(&m.payload).ok();
    match ct.as_deref() {
        // Another event format (`+avro`...) is not read: the payload is data.
        Some(c) if c.starts_with("application/cloudevents") => {
            let essence = c.split(';').next().unwrap_or_default().trim();
            (essence == STRUCTURED).then(structured).flatten()
        }
        _ if m.properties.iter().any(|(k, _)| k == "specversion") => {
            let mut ct = m.content_type.clone();
            let mut headers = Vec::new();
            for (k, v) in &m.properties {
                if k == "datacontenttype" {
                    ct = ct.or_else(|| Some(v.clone()));
                } else if valid_extension_name(k) {
                    headers.push((format!("ce-{k}"), percent_encode(v)));
                }
            }
            let headers = headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            CloudEvent::from_binary_mode(headers, ct.as_deref(), m.payload.clone()).ok()
        }
        None if m.payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
            && m.payload.windows(13).any(|w| w == b"\"specversion\"") =>
        {
            structured()
        }
        _ => None,
    }
}

/// A message that is not a CloudEvent, as a new event: its data typed by
/// the content type when there is a valid one, else as `data_of` reads it.
fn plain_event(m: &Msg, connector: &str, ty: &str, id: String) -> CloudEvent {
    let e = sdk::event(connector, id, ty, sdk::data_of(&m.payload));
    let Some(ct) = m.content_type.as_deref() else {
        return e;
    };
    let (id, source, ty) = (
        percent_encode(&e.id),
        percent_encode(&e.source),
        percent_encode(ty),
    );
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", &*id),
        ("ce-source", &source),
        ("ce-type", &ty),
    ];
    CloudEvent::from_binary_mode(headers, Some(ct), m.payload.clone()).unwrap_or(e)
}

// ---- mqtt-sink ----

/// The `mqtt-sink` kind.
pub struct MqttSink;

fn format_of(c: &MqttSinkConfig) -> Format {
    let default = match c.protocol {
        Protocol::V311 => Format::Structured,
        Protocol::V5 => Format::Binary,
    };
    c.format.unwrap_or(default)
}

#[async_trait]
impl SinkKind for MqttSink {
    type Config = MqttSinkConfig;
    const NAME: &'static str = "mqtt-sink";
    const DESCRIPTION: &'static str = "Publishes events to an MQTT 3.1.1 or 5 topic (structured JSON, or MQTT 5 binary mode), waiting for the broker's acknowledgements";

    fn check(c: &Self::Config) -> Result<(), String> {
        c.broker("x").check()?;
        if let Some(why) = topic_fault(&fill(&c.topic, Some("x"), "x")) {
            return Err(format!("topic {:?} {why}", c.topic));
        }
        if c.qos > 2 {
            return Err(format!("qos must be 0, 1 or 2, not {}", c.qos));
        }
        if c.protocol == Protocol::V311 && format_of(c) == Format::Binary {
            return Err("format binary needs protocol 5 (3.1.1 has no user properties)".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        Self::check(&c).map_err(ConnectorError::Config)?;
        let broker = c.broker(&ctx.connector);
        let link = Some(SinkLink::attach(&broker).await?);
        let (topic, qos, retain, format) = (c.topic.clone(), c.qos, c.retain, format_of(&c));
        Ok(Box::new(Writer {
            broker,
            topic,
            qos,
            retain,
            format,
            link,
        }))
    }
}

/// One message to publish.
#[derive(Debug, PartialEq)]
struct Out {
    topic: String,
    payload: Bytes,
    content_type: Option<String>,
    properties: Vec<(String, String)>,
}

/// The binary-mode user properties and content type of an event.
fn attributes(e: &CloudEvent) -> (Vec<(String, String)>, Option<String>) {
    let fixed = [
        ("specversion", Some("1.0")),
        ("id", Some(&*e.id)),
        ("source", Some(&*e.source)),
    ];
    let more = [
        ("type", Some(&*e.ty)),
        ("dataschema", e.dataschema.as_deref()),
    ];
    let last = [
        ("subject", e.subject.as_deref()),
        ("time", e.time.as_deref()),
    ];
    let mut p: Vec<(String, String)> = (fixed.into_iter().chain(more).chain(last))
        .filter_map(|(k, v)| Some((k.to_string(), v?.to_string())))
        .collect();
    p.extend(e.extensions.iter().map(|(k, v)| (k.clone(), v.to_text())));
    (p, e.binary_mode_headers().1)
}

struct Writer {
    broker: Broker,
    topic: String,
    qos: u8,
    retain: bool,
    format: Format,
    link: Option<SinkLink>,
}

type Waiter = oneshot::Sender<Result<(), ConnectorError>>;

struct SinkLink {
    client: Client,
    /// Publishes handed to the loop, in order, not yet given a packet id.
    queued: Arc<Mutex<VecDeque<Waiter>>>,
    task: Task,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SinkLink {
    async fn attach(b: &Broker) -> Result<SinkLink, ConnectorError> {
        let (client, mut driver) = client(b, None, false);
        let deadline = Instant::now() + b.timeout;
        while !matches!(driver.until(b, deadline).await?, Note::ConnAck(_)) {}
        let queued: Arc<Mutex<VecDeque<Waiter>>> = Arc::default();
        let (q, b) = (queued.clone(), b.clone());
        // The loop reports each publish's packet id in the order they were
        // queued (a packet id collision only delays the report), then its
        // acknowledgement by that id.
        let task = tokio::spawn(async move {
            let mut inflight: HashMap<u16, Waiter> = HashMap::new();
            let failure = loop {
                let (pkid, result) = match driver.next(&b).await {
                    Ok(Note::Sent(pkid)) => {
                        let Some(w) = lock(&q).pop_front() else {
                            continue;
                        };
                        inflight.insert(pkid, w);
                        (pkid, (pkid == 0).then_some(Ok(())))
                    }
                    Ok(Note::Done(pkid)) => (pkid, Some(Ok(()))),
                    Ok(Note::Refused(pkid, why)) => {
                        let msg = format!("the broker refused a message: {why}");
                        let e = if why == "NotAuthorized" {
                            ConnectorError::Config(msg)
                        } else {
                            ConnectorError::Unavailable(msg)
                        };
                        (pkid, Some(Err(e)))
                    }
                    Ok(_) => continue,
                    Err(e) => break e,
                };
                let done = result.and_then(|r| Some((r, inflight.remove(&pkid)?)));
                if let Some((result, w)) = done {
                    let _ = w.send(result);
                }
            };
            let waiting: Vec<Waiter> = lock(&q).drain(..).collect();
            for w in inflight.into_values().chain(waiting) {
                let _ = w.send(Err(failure.clone()));
            }
        });
        Ok(SinkLink {
            client,
            queued,
            task: Task(task),
        })
    }
}

impl Writer {
    fn render(&self, e: &CloudEvent) -> Result<Out, ConnectorError> {
        let topic = fill(&self.topic, e.subject.as_deref(), &e.ty);
        let bad = |why: String| ConnectorError::unavailable(format!("event {}: {why}", e.id));
        if let Some(why) = topic_fault(&topic) {
            return Err(bad(format!("topic {topic:?} {why}")));
        }
        let out = match self.format {
            Format::Structured => Out {
                topic,
                payload: Bytes::from(e.to_json()),
                content_type: (self.broker.protocol == Protocol::V5).then(|| STRUCTURED.into()),
                properties: Vec::new(),
            },
            Format::Binary => {
                let (properties, content_type) = attributes(e);
                if properties.iter().any(|(_, v)| v.contains('\0')) {
                    return Err(bad("NUL in an attribute; use format structured".into()));
                }
                let payload = Bytes::copy_from_slice(e.data.as_bytes());
                Out {
                    topic,
                    payload,
                    content_type,
                    properties,
                }
            }
        };
        let props: usize = out
            .properties
            .iter()
            .map(|(k, v)| k.len() + v.len() + 5)
            .sum();
        let size = 16 + out.topic.len() + out.payload.len() + props;
        let size = size + out.content_type.as_ref().map_or(0, |c| c.len() + 3);
        if size > self.broker.max_packet_size as usize {
            let max = self.broker.max_packet_size;
            return Err(bad(format!(
                "{size} bytes as MQTT, over max_packet_size {max}"
            )));
        }
        Ok(out)
    }
}

#[async_trait]
impl Sink for Writer {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        let outs = events
            .iter()
            .map(|e| self.render(e))
            .collect::<Result<Vec<_>, _>>()?;
        if outs.is_empty() {
            return Ok(());
        }
        // Taken out while the write runs: a write dropped halfway leaves no
        // link whose queue is out of step with its loop.
        let link = match self.link.take() {
            Some(l) if !l.task.0.is_finished() => l,
            _ => SinkLink::attach(&self.broker).await?,
        };
        let lost = || ConnectorError::unavailable("mqtt: the connection ended");
        let mut acks = Vec::with_capacity(outs.len());
        for out in outs {
            let (tx, rx) = oneshot::channel();
            lock(&link.queued).push_back(tx);
            if !link.client.publish(out, self.qos, self.retain).await {
                return Err(lost());
            }
            acks.push(rx);
        }
        let deadline = Instant::now() + self.broker.timeout;
        let mut first_error = None;
        for rx in acks {
            match timeout_at(deadline, rx).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Ok(Err(_)) => return Err(lost()),
                Err(_) => return Err(self.broker.unavailable("no acknowledgement in time")),
            }
        }
        if !link.task.0.is_finished() {
            self.link = Some(link);
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_core::event::{Data, ExtValue};

    fn msg(topic: &str, payload: &[u8], content_type: Option<&str>) -> Msg {
        let content_type = content_type.map(str::to_string);
        let payload = Bytes::copy_from_slice(payload);
        Msg {
            topic: topic.into(),
            payload,
            qos: 1,
            pkid: 7,
            content_type,
            ..Msg::default()
        }
    }

    #[test]
    fn topics_filters_and_templates() {
        for ok in [
            "a",
            "a/b",
            "+",
            "#",
            "a/+/c",
            "a/#",
            "/",
            "$share/g/a/#",
            "+/+",
        ] {
            assert_eq!(filter_fault(ok), None, "{ok}");
        }
        for bad in ["", "a#", "a/#/b", "a+", "a/b+/c", "#/a", "a\0"] {
            assert!(filter_fault(bad).is_some(), "{bad:?}");
        }
        assert_eq!(
            (topic_fault("a/b"), topic_fault("a/+").is_some()),
            (None, true)
        );
        assert_eq!(
            fill("ev/{type}/{subject}", Some("o/1"), "t.x"),
            "ev/t.x/o/1"
        );
        assert_eq!(fill("ev/{subject}", None, "t"), "ev/_");
        assert_eq!(fill("ev/{subject}", Some("a+#\0"), "t"), "ev/a___");
        assert_eq!(fill("{subject}/{x}/{", Some("{type}"), "t"), "{type}/{x}/{");
    }

    #[test]
    fn plain_messages_get_ids_from_session_number_and_content() {
        let m = msg("s/1", br#"{"t":21.5}"#, None);
        let id = message_id("abc", 4, &m);
        assert!(
            id.starts_with("abc-4-") && id.len() == "abc-4-".len() + 12,
            "{id}"
        );
        assert_ne!(
            id,
            message_id("abc", 4, &msg("s/2", br#"{"t":21.5}"#, None))
        );
        assert_ne!(id, message_id("abc", 5, &m));
        let e = plain_event(&m, "c", "mqtt.message", id.clone());
        assert_eq!(
            (e.id.as_str(), e.source.as_str()),
            (id.as_str(), "/connectors/c")
        );
        assert_eq!(e.data, Data::Json(Bytes::from_static(br#"{"t":21.5}"#)));
        let e = plain_event(&msg("s", b"123", Some("text/plain")), "c", "t", id.clone());
        assert_eq!(
            (e.data, e.datacontenttype),
            (Data::Text("123".into()), Some("text/plain".into()))
        );
        let e = plain_event(&msg("s", b"x", Some("not a type")), "c", "t", id);
        assert_eq!(
            (e.data, e.datacontenttype),
            (Data::Text("x".into()), Some("text/plain".into()))
        );
    }

    #[test]
    fn cloudevents_are_recognised_in_both_modes() {
        let ce = br#"{"specversion":"1.0","id":"e1","source":"/dev","type":"t","data":{"a":1}}"#;
        let got = carried_event(&msg("x", ce, None)).expect("structured");
        assert_eq!((got.id.as_str(), got.source.as_str()), ("e1", "/dev"));
        let mut bin = msg("x", b"hello", Some("text/plain"));
        let props = [
            ("specversion", "1.0"),
            ("id", "e2"),
            ("source", "/d"),
            ("type", "t"),
        ];
        let props = props
            .into_iter()
            .chain([("color", "red"), ("X-Other", "1")]);
        bin.properties = props.map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let got = carried_event(&bin).expect("binary");
        assert_eq!(
            (got.id.as_str(), got.data),
            ("e2", Data::Text("hello".into()))
        );
        assert_eq!(
            got.extensions,
            vec![("color".to_string(), ExtValue::Str("red".into()))]
        );
        // Not CloudEvents: plain JSON, a broken event, another event format.
        assert_eq!(carried_event(&msg("x", br#"{"a":1}"#, None)), None);
        assert_eq!(
            carried_event(&msg("x", br#"{"specversion":"1.0"}"#, None)),
            None
        );
        assert_eq!(
            carried_event(&msg("x", ce, Some("application/cloudevents+avro"))),
            None
        );
    }

    #[test]
    fn binary_attributes_round_trip() {
        let mut e = sdk::event("c", "i1", "t", Data::Json(Bytes::from_static(b"[1]")));
        e.subject = Some("s".into());
        e.set_extension("n", ExtValue::Int(3));
        let (properties, content_type) = attributes(&e);
        let m = Msg {
            properties,
            content_type,
            ..msg("x", b"[1]", None)
        };
        let mut back = carried_event(&m).expect("an event");
        assert_eq!(back.extension("n"), Some(&ExtValue::Str("3".into())));
        back.extensions = e.extensions.clone();
        assert_eq!(back, e);
    }

    #[test]
    fn positions_read_back() {
        let p = json!({"session": "s1", "seq": 9, "topics": ["a/#"]});
        let want = Mark {
            session: "s1".into(),
            seq: 9,
            topics: Some(vec!["a/#".into()]),
        };
        assert_eq!(read_position(&p), Some(want));
        assert_eq!(read_position(&json!({"seq": 1})), None);
        assert_ne!(new_session("c"), new_session("c"));
    }
}
