//! `mqtt-source` and `mqtt-sink`: MQTT 3.1.1 or 5 (`protocol`) over plain
//! TCP, through `rumqttc`. Each source or sink has one connection at a time,
//! its event loop driven by a task of its own that ends when the connector
//! is dropped.
//!
//! This module owns the two kinds' configs: the connection fields both
//! share, the protocol version and the sink's format. `client` is the
//! connection and event loop for both protocol versions, `topic` the topic
//! syntax, `source` and `sink` the connectors, each with its own
//! guarantees.

mod client;
mod sink;
mod source;
mod topic;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::kind::Kind;
use client::Broker;

pub use sink::MqttSink;
pub use source::MqttSource;

/// This module's kinds.
pub fn kinds() -> Vec<Kind> {
    vec![Kind::source::<MqttSource>(), Kind::sink::<MqttSink>()]
}

/// The content type of a CloudEvent in structured mode.
const STRUCTURED: &str = "application/cloudevents+json";

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
