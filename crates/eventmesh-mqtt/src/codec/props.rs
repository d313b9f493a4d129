//! MQTT 5.0 properties: which packet may carry which, reading them with
//! the duplicate and value checks, and writing them.

use bytes::Bytes;

use super::reader::Reader;
use super::write::Out;
use super::{DecodeError, PublishProps};

pub(super) const PAYLOAD_FORMAT: u8 = 0x01;
pub(super) const MESSAGE_EXPIRY: u8 = 0x02;
pub(super) const CONTENT_TYPE: u8 = 0x03;
pub(super) const RESPONSE_TOPIC: u8 = 0x08;
pub(super) const CORRELATION_DATA: u8 = 0x09;
pub(super) const SUBSCRIPTION_ID: u8 = 0x0B;
pub(super) const SESSION_EXPIRY: u8 = 0x11;
pub(super) const ASSIGNED_CLIENT_ID: u8 = 0x12;
pub(super) const SERVER_KEEP_ALIVE: u8 = 0x13;
pub(super) const AUTH_METHOD: u8 = 0x15;
pub(super) const AUTH_DATA: u8 = 0x16;
pub(super) const REQUEST_PROBLEM_INFO: u8 = 0x17;
pub(super) const WILL_DELAY: u8 = 0x18;
pub(super) const REQUEST_RESPONSE_INFO: u8 = 0x19;
pub(super) const RESPONSE_INFO: u8 = 0x1A;
pub(super) const SERVER_REFERENCE: u8 = 0x1C;
pub(super) const REASON_STRING: u8 = 0x1F;
pub(super) const RECEIVE_MAXIMUM: u8 = 0x21;
pub(super) const TOPIC_ALIAS_MAX: u8 = 0x22;
pub(super) const TOPIC_ALIAS: u8 = 0x23;
pub(super) const MAXIMUM_QOS: u8 = 0x24;
pub(super) const RETAIN_AVAILABLE: u8 = 0x25;
pub(super) const USER: u8 = 0x26;
pub(super) const MAXIMUM_PACKET_SIZE: u8 = 0x27;
pub(super) const WILDCARD_AVAILABLE: u8 = 0x28;
pub(super) const SUBSCRIPTION_IDS_AVAILABLE: u8 = 0x29;
pub(super) const SHARED_AVAILABLE: u8 = 0x2A;

/// The largest value of a variable byte integer (four bytes).
pub(super) const MAX_VARINT: u32 = 268_435_455;

/// The specification's name of a property, for error messages.
pub(super) fn name(id: &u8) -> &'static str {
    match *id {
        PAYLOAD_FORMAT => "Payload Format Indicator",
        MESSAGE_EXPIRY => "Message Expiry Interval",
        CONTENT_TYPE => "Content Type",
        RESPONSE_TOPIC => "Response Topic",
        CORRELATION_DATA => "Correlation Data",
        SUBSCRIPTION_ID => "Subscription Identifier",
        SESSION_EXPIRY => "Session Expiry Interval",
        ASSIGNED_CLIENT_ID => "Assigned Client Identifier",
        SERVER_KEEP_ALIVE => "Server Keep Alive",
        AUTH_METHOD => "Authentication Method",
        AUTH_DATA => "Authentication Data",
        REQUEST_PROBLEM_INFO => "Request Problem Information",
        WILL_DELAY => "Will Delay Interval",
        REQUEST_RESPONSE_INFO => "Request Response Information",
        RESPONSE_INFO => "Response Information",
        SERVER_REFERENCE => "Server Reference",
        REASON_STRING => "Reason String",
        RECEIVE_MAXIMUM => "Receive Maximum",
        TOPIC_ALIAS_MAX => "Topic Alias Maximum",
        TOPIC_ALIAS => "Topic Alias",
        MAXIMUM_QOS => "Maximum QoS",
        RETAIN_AVAILABLE => "Retain Available",
        USER => "User Property",
        MAXIMUM_PACKET_SIZE => "Maximum Packet Size",
        WILDCARD_AVAILABLE => "Wildcard Subscription Available",
        SUBSCRIPTION_IDS_AVAILABLE => "Subscription Identifier Available",
        SHARED_AVAILABLE => "Shared Subscription Available",
        _ => "unknown",
    }
}

/// The packets (and the will) that carry properties: each has its own set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PropSet {
    Connect,
    Will,
    ConnAck,
    Publish,
    /// PUBACK, PUBREC, PUBREL, PUBCOMP.
    Ack,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
}

impl PropSet {
    /// The identifiers allowed besides User Property (allowed everywhere).
    fn ids(self) -> &'static [u8] {
        match self {
            PropSet::Connect => &[
                SESSION_EXPIRY,
                RECEIVE_MAXIMUM,
                MAXIMUM_PACKET_SIZE,
                TOPIC_ALIAS_MAX,
                REQUEST_RESPONSE_INFO,
                REQUEST_PROBLEM_INFO,
                AUTH_METHOD,
                AUTH_DATA,
            ],
            PropSet::Will => &[
                WILL_DELAY,
                PAYLOAD_FORMAT,
                MESSAGE_EXPIRY,
                CONTENT_TYPE,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
            ],
            PropSet::ConnAck => &[
                SESSION_EXPIRY,
                RECEIVE_MAXIMUM,
                MAXIMUM_QOS,
                RETAIN_AVAILABLE,
                MAXIMUM_PACKET_SIZE,
                ASSIGNED_CLIENT_ID,
                TOPIC_ALIAS_MAX,
                REASON_STRING,
                WILDCARD_AVAILABLE,
                SUBSCRIPTION_IDS_AVAILABLE,
                SHARED_AVAILABLE,
                SERVER_KEEP_ALIVE,
                RESPONSE_INFO,
                SERVER_REFERENCE,
                AUTH_METHOD,
                AUTH_DATA,
            ],
            PropSet::Publish => &[
                PAYLOAD_FORMAT,
                MESSAGE_EXPIRY,
                TOPIC_ALIAS,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
                SUBSCRIPTION_ID,
                CONTENT_TYPE,
            ],
            PropSet::Ack | PropSet::SubAck | PropSet::UnsubAck => &[REASON_STRING],
            PropSet::Subscribe => &[SUBSCRIPTION_ID],
            PropSet::Unsubscribe => &[],
            PropSet::Disconnect => &[SESSION_EXPIRY, REASON_STRING, SERVER_REFERENCE],
            PropSet::Auth => &[AUTH_METHOD, AUTH_DATA, REASON_STRING],
        }
    }

    fn allows(self, id: u8) -> bool {
        id == USER || self.ids().contains(&id)
    }

    /// Whether the property may appear more than once.
    fn repeatable(self, id: u8) -> bool {
        id == USER || (id == SUBSCRIPTION_ID && self == PropSet::Publish)
    }
}

/// Every property any packet may carry, as read; what a packet does not
/// allow stays empty.
#[derive(Debug, Default)]
pub(super) struct Props {
    pub payload_utf8: Option<bool>,
    pub message_expiry: Option<u32>,
    pub content_type: Option<String>,
    pub response_topic: Option<String>,
    pub correlation_data: Option<Bytes>,
    pub subscription_ids: Vec<u32>,
    pub session_expiry: Option<u32>,
    pub assigned_client_id: Option<String>,
    pub server_keep_alive: Option<u16>,
    pub auth_method: Option<String>,
    pub auth_data: Option<Bytes>,
    pub request_problem_info: Option<bool>,
    pub will_delay: Option<u32>,
    pub request_response_info: Option<bool>,
    pub reason_string: Option<String>,
    pub receive_maximum: Option<u16>,
    pub topic_alias_max: Option<u16>,
    pub topic_alias: Option<u16>,
    pub maximum_qos: Option<u8>,
    pub retain_available: Option<bool>,
    pub user: Vec<(String, String)>,
    pub maximum_packet_size: Option<u32>,
    pub wildcard_available: Option<bool>,
    pub subscription_ids_available: Option<bool>,
    pub shared_available: Option<bool>,
}

impl Props {
    /// The PUBLISH (or will) view of these properties.
    pub fn into_publish(self) -> PublishProps {
        PublishProps {
            payload_utf8: self.payload_utf8,
            message_expiry: self.message_expiry,
            topic_alias: self.topic_alias,
            response_topic: self.response_topic,
            correlation_data: self.correlation_data,
            user: self.user,
            subscription_ids: self.subscription_ids,
            content_type: self.content_type,
        }
    }
}

/// Reads a property length and the properties it covers, for `set`.
pub(super) fn read(r: &mut Reader, set: PropSet) -> Result<Props, DecodeError> {
    let packet = match set {
        PropSet::Will => "CONNECT will",
        _ => r.packet,
    };
    let len = r.varint("property length")?;
    let mut p = r.sub(len as usize, "properties")?;
    p.packet = packet;
    let mut out = Props::default();
    // One bit per identifier seen; all defined identifiers are below 64.
    let mut seen: u64 = 0;
    while !p.is_empty() {
        let id = p.u8("property identifier")?;
        if name(&id) == "unknown" {
            return Err(DecodeError::UnknownProperty { packet, id });
        }
        if !set.allows(id) {
            return Err(DecodeError::PropertyNotAllowed { packet, id });
        }
        let bit = 1u64 << (id & 63);
        if seen & bit != 0 && !set.repeatable(id) {
            return Err(DecodeError::DuplicateProperty { packet, id });
        }
        seen |= bit;
        let field = name(&id);
        let invalid = |value: u32| DecodeError::InvalidPropertyValue { packet, id, value };
        match id {
            PAYLOAD_FORMAT => out.payload_utf8 = Some(flag(&mut p, id)?),
            MESSAGE_EXPIRY => out.message_expiry = Some(p.u32(field)?),
            CONTENT_TYPE => out.content_type = Some(p.string(field)?),
            RESPONSE_TOPIC => out.response_topic = Some(p.string(field)?),
            CORRELATION_DATA => out.correlation_data = Some(p.binary(field)?),
            SUBSCRIPTION_ID => {
                let v = p.varint(field)?;
                if v == 0 {
                    return Err(invalid(0));
                }
                out.subscription_ids.push(v);
            }
            SESSION_EXPIRY => out.session_expiry = Some(p.u32(field)?),
            ASSIGNED_CLIENT_ID => out.assigned_client_id = Some(p.string(field)?),
            SERVER_KEEP_ALIVE => out.server_keep_alive = Some(p.u16(field)?),
            AUTH_METHOD => out.auth_method = Some(p.string(field)?),
            AUTH_DATA => out.auth_data = Some(p.binary(field)?),
            REQUEST_PROBLEM_INFO => out.request_problem_info = Some(flag(&mut p, id)?),
            WILL_DELAY => out.will_delay = Some(p.u32(field)?),
            REQUEST_RESPONSE_INFO => out.request_response_info = Some(flag(&mut p, id)?),
            // Allowed in CONNACK, not in the model: checked, then dropped.
            RESPONSE_INFO | SERVER_REFERENCE => {
                p.string(field)?;
            }
            REASON_STRING => out.reason_string = Some(p.string(field)?),
            RECEIVE_MAXIMUM => {
                let v = p.u16(field)?;
                if v == 0 {
                    return Err(invalid(0));
                }
                out.receive_maximum = Some(v);
            }
            TOPIC_ALIAS_MAX => out.topic_alias_max = Some(p.u16(field)?),
            TOPIC_ALIAS => out.topic_alias = Some(p.u16(field)?),
            MAXIMUM_QOS => out.maximum_qos = Some(u8::from(flag(&mut p, id)?)),
            RETAIN_AVAILABLE => out.retain_available = Some(flag(&mut p, id)?),
            USER => {
                let key = p.string(field)?;
                let value = p.string(field)?;
                out.user.push((key, value));
            }
            MAXIMUM_PACKET_SIZE => {
                let v = p.u32(field)?;
                if v == 0 {
                    return Err(invalid(0));
                }
                out.maximum_packet_size = Some(v);
            }
            WILDCARD_AVAILABLE => out.wildcard_available = Some(flag(&mut p, id)?),
            SUBSCRIPTION_IDS_AVAILABLE => out.subscription_ids_available = Some(flag(&mut p, id)?),
            _ => out.shared_available = Some(flag(&mut p, id)?),
        }
    }
    Ok(out)
}

/// A one-byte property that may only be 0 or 1.
fn flag(p: &mut Reader, id: u8) -> Result<bool, DecodeError> {
    match p.u8(name(&id))? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(DecodeError::InvalidPropertyValue {
            packet: p.packet,
            id,
            value: u32::from(v),
        }),
    }
}

/// Collects properties, then writes them behind their length.
pub(super) struct PropWriter {
    out: Out,
}

impl PropWriter {
    pub fn new() -> Self {
        PropWriter { out: Out::new() }
    }

    pub fn u8(&mut self, id: u8, v: Option<u8>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.u8(v);
        }
    }

    pub fn flag(&mut self, id: u8, v: Option<bool>) {
        self.u8(id, v.map(u8::from));
    }

    pub fn u16(&mut self, id: u8, v: Option<u16>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.u16(v);
        }
    }

    pub fn u32(&mut self, id: u8, v: Option<u32>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.u32(v);
        }
    }

    pub fn varint(&mut self, id: u8, v: Option<u32>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.varint(v as usize);
        }
    }

    pub fn string(&mut self, id: u8, v: Option<&str>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.string(v);
        }
    }

    pub fn binary(&mut self, id: u8, v: Option<&[u8]>) {
        if let Some(v) = v {
            self.out.u8(id);
            self.out.binary(v);
        }
    }

    pub fn user(&mut self, pairs: &[(String, String)]) {
        for (key, value) in pairs {
            self.out.u8(USER);
            self.out.string(key);
            self.out.string(value);
        }
    }

    /// Writes the property length and the properties to `out`.
    pub fn finish(self, out: &mut Out) {
        out.varint(self.out.len());
        out.append(self.out);
    }
}

/// Writes the properties of a PUBLISH (`will`: of a will, which has no
/// topic alias or subscription identifiers; the delay is written by the
/// caller).
pub(super) fn publish(w: &mut PropWriter, p: &PublishProps, will: bool) {
    w.flag(PAYLOAD_FORMAT, p.payload_utf8);
    w.u32(MESSAGE_EXPIRY, p.message_expiry);
    if !will {
        w.u16(TOPIC_ALIAS, p.topic_alias);
    }
    w.string(RESPONSE_TOPIC, p.response_topic.as_deref());
    w.binary(CORRELATION_DATA, p.correlation_data.as_deref());
    w.user(&p.user);
    if !will {
        for &id in &p.subscription_ids {
            w.varint(SUBSCRIPTION_ID, Some(id));
        }
    }
    w.string(CONTENT_TYPE, p.content_type.as_deref());
}
