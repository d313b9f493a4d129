//! The connection layer both kinds share: where and how to connect
//! ([`Broker`]), and one `rumqttc` client and event loop per connection,
//! MQTT 3.1.1 or 5 behind one interface: [`Client`] sends (subscriptions,
//! acknowledgements, publishes), [`Driver`] polls the loop and reduces what
//! it reports to the [`Note`]s the connectors use.
//!
//! Invariants: a refused `CONNECT` is a `Config` error when configuration
//! is the cause (credentials, client id, protocol version), any other
//! failure `Unavailable`; an event loop runs in a [`Task`] that is aborted,
//! closing its connection, when dropped.

use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::v5 as p5;
use rumqttc::Outgoing as O;
use tokio::time::{timeout_at, Instant};

use super::Protocol;
use crate::sdk::ConnectorError;

/// Requests (acks, publishes) queued towards an event loop.
const REQUESTS: usize = 1024;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub(super) struct Broker {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) protocol: Protocol,
    pub(super) client_id: String,
    pub(super) login: Option<(String, Option<String>)>,
    pub(super) keep_alive: u16,
    pub(super) timeout: Duration,
    pub(super) max_packet_size: u32,
}

impl Broker {
    pub(super) fn check(&self) -> Result<(), String> {
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

    pub(super) fn unavailable(&self, what: impl std::fmt::Display) -> ConnectorError {
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

pub(super) enum Client {
    V4(rumqttc::AsyncClient),
    V5(rumqttc::v5::AsyncClient),
}

pub(super) enum Driver {
    V4(Box<rumqttc::EventLoop>),
    V5(Box<rumqttc::v5::EventLoop>),
}

/// One incoming publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Msg {
    pub(super) topic: String,
    pub(super) payload: Bytes,
    pub(super) qos: u8,
    pub(super) pkid: u16,
    pub(super) content_type: Option<String>,
    pub(super) properties: Vec<(String, String)>,
}

/// One message to publish.
#[derive(Debug, PartialEq)]
pub(super) struct Out {
    pub(super) topic: String,
    pub(super) payload: Bytes,
    pub(super) content_type: Option<String>,
    pub(super) properties: Vec<(String, String)>,
}

/// What an event loop reported, reduced to what the connectors use.
pub(super) enum Note {
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
pub(super) fn client(b: &Broker, persistent: Option<u32>, manual_acks: bool) -> (Client, Driver) {
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
    pub(super) async fn next(&mut self, b: &Broker) -> Result<Note, ConnectorError> {
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
    pub(super) async fn until(
        &mut self,
        b: &Broker,
        deadline: Instant,
    ) -> Result<Note, ConnectorError> {
        let late = || b.unavailable("no answer in time");
        timeout_at(deadline, self.next(b))
            .await
            .map_err(|_| late())?
    }
}

impl Client {
    pub(super) async fn subscribe(&self, filters: &[String]) -> bool {
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

    pub(super) async fn unsubscribe(&self, filter: &str) -> bool {
        match self {
            Client::V4(c) => c.unsubscribe(filter).await.is_ok(),
            Client::V5(c) => c.unsubscribe(filter).await.is_ok(),
        }
    }

    /// Acknowledges an incoming publish; `false` when the loop has ended.
    pub(super) async fn ack(&self, qos: u8, pkid: u16) -> bool {
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

    pub(super) async fn publish(&self, out: Out, qos: u8, retain: bool) -> bool {
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
pub(super) struct Task(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}
