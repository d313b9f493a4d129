//! The MQTT packet codec: MQTT 3.1.1 and MQTT 5.0 through one model.
//!
//! [`decode`] reads the packet at the front of a connection's buffer and
//! makes every check a server owes the bytes a client sends; [`encode`]
//! writes a packet for the protocol version the client spoke. Both
//! versions share the types below: what 3.1.1 lacks (properties, reason
//! strings, most reason codes) is simply empty or at its default there.
//! Reason codes use the MQTT 5.0 numbering for both versions (see
//! [`reason`]); a violation found while decoding tells which one the
//! server answers with through [`DecodeError::reason`].
//!
//! Written from the OASIS specifications *MQTT Version 3.1.1* and *MQTT
//! Version 5.0*. Decoding never panics, whatever the input, and never
//! reads past the packet's remaining length.
//!
//! # Framing
//!
//! - The first byte is checked as soon as it arrives: packet type 0 is
//!   reserved, type 15 (AUTH) exists only in 5.0, and the low four flag
//!   bits must be `0010` for PUBREL, SUBSCRIBE and UNSUBSCRIBE and `0000`
//!   for every other packet but PUBLISH (all MALFORMED). A PUBLISH with
//!   QoS 3 is MALFORMED; one with QoS 0 and DUP set is a PROTOCOL_ERROR.
//!   Before CONNECT (`protocol` is `None`) anything but a CONNECT is a
//!   PROTOCOL_ERROR.
//! - The remaining length is a variable byte integer of at most four bytes
//!   in its shortest form (a fourth byte with its continuation bit, or a
//!   last byte of zero after the first, is MALFORMED). Every other
//!   variable byte integer (property lengths, subscription identifiers)
//!   follows the same rule.
//! - A packet larger than `max_packet` (fixed header included) is
//!   PACKET_TOO_LARGE as soon as its fixed header is complete, before its
//!   body arrives.
//! - The body must be used up exactly: a field running past the remaining
//!   length, or bytes left after the last field, is MALFORMED.
//! - Strings are length-prefixed (u16) UTF-8 without U+0000; binary data
//!   is length-prefixed too. A bad string is MALFORMED.
//!
//! # Packets
//!
//! - CONNECT: protocol name `MQTT` with level 4 (3.1.1) or 5 (5.0). Any
//!   other level, and 3.1's `MQIsdp`, is UNSUPPORTED_PROTOCOL_VERSION
//!   ([`DecodeError::is_unsupported_version`]); any other name is a
//!   PROTOCOL_ERROR (the server should just close: the client's version is
//!   unknown). The reserved flag bit, will QoS 3, will QoS or retain
//!   without the will flag, and (3.1.1) a password without a user name are
//!   MALFORMED. The will topic follows the PUBLISH topic rules.
//! - PUBLISH: a topic name with `+` or `#` is TOPIC_NAME_INVALID; an empty
//!   topic name is only allowed in 5.0 together with a Topic Alias
//!   (resolving the alias is the connection's job); QoS 1 and 2 need a
//!   packet identifier other than 0; a Topic Alias of 0 is
//!   TOPIC_ALIAS_INVALID; a Subscription Identifier from a client is a
//!   PROTOCOL_ERROR; a payload flagged as UTF-8 (a Payload Format
//!   Indicator of 1) that is not is PAYLOAD_FORMAT_INVALID. The payload is
//!   a zero-copy slice of the input.
//! - SUBSCRIBE and UNSUBSCRIBE: a packet identifier other than 0 and at
//!   least one filter. Subscription options may only use the QoS bits in
//!   3.1.1, and not bits 6 and 7 in 5.0 (MALFORMED); QoS 3 is MALFORMED and
//!   Retain Handling 3 a PROTOCOL_ERROR. Filters come back as sent: their
//!   wildcard placement is checked by the connection, per filter.
//! - PUBACK, PUBREC, PUBREL, PUBCOMP (5.0): a remaining length of 2 means
//!   reason 0 without properties, 3 a reason without properties.
//!   DISCONNECT and AUTH (5.0): remaining length 0 means reason 0, 1 a
//!   reason without properties.
//! - Reason codes must be ones the specification defines for the packet
//!   (else MALFORMED); packet identifiers are never 0.
//! - CONNACK, SUBACK, UNSUBACK and PINGRESP decode too (tests, symmetry);
//!   the connection refuses them from a client itself.
//!
//! # Properties (5.0)
//!
//! Each packet (and the will) has its own set of allowed properties. An
//! unknown identifier, or one not allowed in the packet, is MALFORMED; a
//! property given twice is a PROTOCOL_ERROR, except User Property (kept in
//! order) and Subscription Identifier in PUBLISH. Values the specification
//! forbids are PROTOCOL_ERRORs: Receive Maximum or Maximum Packet Size 0,
//! Subscription Identifier 0, a yes/no property (Payload Format Indicator,
//! Request Problem/Response Information, Maximum QoS, the availability
//! flags) other than 0 or 1, and Authentication Data without an
//! Authentication Method. Allowed properties the model has no field for
//! (user properties of acknowledgements, Server Reference, Response
//! Information, ...) are checked and dropped.
//!
//! # MQTT 3.1.1
//!
//! The 5.0 reason codes map onto 3.1.1 like this. Decoding: wherever 5.0
//! calls a violation a PROTOCOL_ERROR, 3.1.1 (which has no such code) gets
//! MALFORMED; every other reason is the same for both. Encoding leaves out
//! what 3.1.1 lacks: properties, reason strings, and the reason codes of
//! PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK and DISCONNECT; a password
//! without a user name; AUTH is not written at all. A CONNACK's reason
//! becomes a 3.1.1 return code:
//!
//! | 5.0 reason                                                  | 3.1.1 return code                |
//! |-------------------------------------------------------------|----------------------------------|
//! | 0x00 success                                                | 0 accepted                       |
//! | 0x84 unsupported protocol version                           | 1 unacceptable protocol version  |
//! | 0x85 client identifier not valid                            | 2 identifier rejected            |
//! | 0x88 server unavailable, 0x89 server busy                   | 3 server unavailable             |
//! | 0x86 bad user name or password                              | 4 bad user name or password      |
//! | 0x87 not authorized, 0x8A banned, 0x8C bad auth method      | 5 not authorized                 |
//! | any other (0x80-0x83, 0x90, 0x95, 0x97, 0x99-0x9F, ...)     | 3 server unavailable             |
//!
//! Decoding a 3.1.1 CONNACK maps back: 0→0x00, 1→0x84, 2→0x85, 3→0x88,
//! 4→0x86, 5→0x87. SUBACK return codes of 0x80 and above (and anything
//! that is not a granted QoS) become 0x80, the only 3.1.1 failure code.
//!
//! # Encoding
//!
//! 5.0 omits the reason code and properties where the specification
//! allows: a PUBACK/PUBREC/PUBREL/PUBCOMP with reason 0 and no reason
//! string is 4 bytes, a DISCONNECT or AUTH with reason 0 and no properties
//! 2 bytes. When a reason code is written the property length follows it,
//! even when 0 (always valid, and what other implementations expect).
//! Properties at their default are not written (Receive Maximum 65535,
//! Session Expiry 0, Request Problem Information 1, ...), nor a will's
//! Topic Alias or Subscription Identifiers (wills have none). A CONNECT is
//! written for the `protocol` argument: its own `protocol` field is only
//! what decoding found. A packet that cannot be put on the wire (a string
//! or binary field over 65,535 bytes, a Subscription Identifier over
//! 268,435,455, a remaining length over 268,435,455, or AUTH in 3.1.1) is
//! not written: [`encode`] returns 0. Values are otherwise written as
//! given, even ones [`decode`] would refuse (a packet identifier of 0, a
//! Maximum QoS of 2): checking what the server sends is the caller's job.

mod props;
mod read;
mod reader;
mod write;

#[cfg(test)]
mod tests;

use bytes::{Bytes, BytesMut};

/// The protocol version a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// MQTT 3.1.1 (protocol level 4).
    V311,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

/// Quality of service of a message or subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QoS {
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS with this number; `None` for 3 and above.
    pub fn from_u8(v: u8) -> Option<QoS> {
        match v {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

/// MQTT 5 publish (and will) properties; all empty/None for 3.1.1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishProps {
    /// Payload Format Indicator (0x01): `Some(true)` for 1 (UTF-8).
    pub payload_utf8: Option<bool>,
    /// Message Expiry Interval (0x02), seconds.
    pub message_expiry: Option<u32>,
    /// Topic Alias (0x23); never in wills.
    pub topic_alias: Option<u16>,
    /// Response Topic (0x08).
    pub response_topic: Option<String>,
    /// Correlation Data (0x09).
    pub correlation_data: Option<Bytes>,
    /// User Properties (0x26), in order.
    pub user: Vec<(String, String)>,
    /// Subscription Identifiers (0x0B): server to client only; a client
    /// PUBLISH carrying one is a protocol error.
    pub subscription_ids: Vec<u32>,
    /// Content Type (0x03).
    pub content_type: Option<String>,
}

/// A PUBLISH packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    pub topic: String,
    /// The packet identifier; 0 for QoS 0.
    pub pkid: u16,
    pub payload: Bytes,
    pub props: PublishProps,
}

/// The will of a CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    pub topic: String,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// Will Delay Interval (0x18), seconds; 0 by default.
    pub delay: u32,
    /// The will's properties (never a topic alias or subscription ids).
    pub props: PublishProps,
}

/// A CONNECT packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol: Protocol,
    pub client_id: String,
    /// 3.1.1 Clean Session / 5.0 Clean Start.
    pub clean_start: bool,
    pub keep_alive: u16,
    pub username: Option<String>,
    /// Binary data.
    pub password: Option<Bytes>,
    pub will: Option<Will>,
    /// Session Expiry Interval (0x11); 0 by default.
    pub session_expiry: u32,
    /// Receive Maximum (0x21); 65535 by default (0 is a protocol error).
    pub receive_maximum: u16,
    /// Maximum Packet Size (0x27) (0 is a protocol error).
    pub max_packet_size: Option<u32>,
    /// Topic Alias Maximum (0x22); 0 by default.
    pub topic_alias_max: u16,
    /// Request Response Information (0x19); false by default.
    pub request_response_info: bool,
    /// Request Problem Information (0x17); true by default.
    pub request_problem_info: bool,
    /// Authentication Method (0x15).
    pub auth_method: Option<String>,
    /// Authentication Data (0x16).
    pub auth_data: Option<Bytes>,
    pub user: Vec<(String, String)>,
}

impl Connect {
    /// A clean-start CONNECT for `client_id` with every optional part at
    /// its default (keep-alive 60 s, no credentials, no will).
    pub fn new(protocol: Protocol, client_id: &str) -> Connect {
        Connect {
            protocol,
            client_id: client_id.into(),
            clean_start: true,
            keep_alive: 60,
            username: None,
            password: None,
            will: None,
            session_expiry: 0,
            receive_maximum: 65535,
            max_packet_size: None,
            topic_alias_max: 0,
            request_response_info: false,
            request_problem_info: true,
            auth_method: None,
            auth_data: None,
            user: Vec::new(),
        }
    }
}

/// The properties of a CONNACK (5.0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnAckProps {
    pub session_expiry: Option<u32>,
    pub receive_maximum: Option<u16>,
    pub maximum_qos: Option<u8>,
    pub retain_available: Option<bool>,
    pub maximum_packet_size: Option<u32>,
    pub assigned_client_id: Option<String>,
    pub topic_alias_max: Option<u16>,
    pub reason_string: Option<String>,
    pub wildcard_available: Option<bool>,
    pub subscription_ids_available: Option<bool>,
    pub shared_available: Option<bool>,
    pub server_keep_alive: Option<u16>,
    pub user: Vec<(String, String)>,
}

/// One topic filter of a SUBSCRIBE with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeFilter {
    pub filter: String,
    pub qos: QoS,
    pub no_local: bool,
    pub retain_as_published: bool,
    /// 0, 1 or 2.
    pub retain_handling: u8,
}

/// A SUBSCRIBE packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub pkid: u16,
    /// Subscription Identifier (0x0B), 1..=268435455.
    pub id: Option<u32>,
    pub filters: Vec<SubscribeFilter>,
    pub user: Vec<(String, String)>,
}

/// An UNSUBSCRIBE packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    pub pkid: u16,
    pub filters: Vec<String>,
    pub user: Vec<(String, String)>,
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub pkid: u16,
    pub reason: u8,
    pub reason_string: Option<String>,
}

/// A DISCONNECT packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    pub reason: u8,
    pub session_expiry: Option<u32>,
    pub reason_string: Option<String>,
}

/// Every MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Connect(Box<Connect>),
    ConnAck {
        session_present: bool,
        reason: u8,
        props: Box<ConnAckProps>,
    },
    Publish(Publish),
    PubAck(Ack),
    PubRec(Ack),
    PubRel(Ack),
    PubComp(Ack),
    Subscribe(Subscribe),
    SubAck {
        pkid: u16,
        reasons: Vec<u8>,
        reason_string: Option<String>,
    },
    Unsubscribe(Unsubscribe),
    UnsubAck {
        pkid: u16,
        reasons: Vec<u8>,
        reason_string: Option<String>,
    },
    PingReq,
    PingResp,
    Disconnect(Disconnect),
    Auth {
        reason: u8,
        method: Option<String>,
        data: Option<Bytes>,
    },
}

impl Packet {
    /// The control packet type, as numbered in the fixed header (1 for
    /// CONNECT to 15 for AUTH).
    pub fn kind(&self) -> u8 {
        match self {
            Packet::Connect(_) => 1,
            Packet::ConnAck { .. } => 2,
            Packet::Publish(_) => 3,
            Packet::PubAck(_) => 4,
            Packet::PubRec(_) => 5,
            Packet::PubRel(_) => 6,
            Packet::PubComp(_) => 7,
            Packet::Subscribe(_) => 8,
            Packet::SubAck { .. } => 9,
            Packet::Unsubscribe(_) => 10,
            Packet::UnsubAck { .. } => 11,
            Packet::PingReq => 12,
            Packet::PingResp => 13,
            Packet::Disconnect(_) => 14,
            Packet::Auth { .. } => 15,
        }
    }

    /// The refusal codes (0x80 and above) a server packet carries: a
    /// CONNACK's, a PUBACK's or PUBREC's, a SUBACK's or UNSUBACK's per
    /// filter, a DISCONNECT's.
    pub fn refusals(&self) -> &[u8] {
        let codes: &[u8] = match self {
            Packet::ConnAck { reason, .. } => std::slice::from_ref(reason),
            Packet::PubAck(a) | Packet::PubRec(a) => std::slice::from_ref(&a.reason),
            Packet::Disconnect(d) => std::slice::from_ref(&d.reason),
            Packet::SubAck { reasons, .. } | Packet::UnsubAck { reasons, .. } => reasons,
            _ => &[],
        };
        if codes.iter().any(|c| *c >= 0x80) {
            codes
        } else {
            &[]
        }
    }
}

/// The names of the control packet types by [`Packet::kind`] (index 0 is
/// reserved).
pub const PACKET_NAMES: [&str; 16] = [
    "reserved",
    "connect",
    "connack",
    "publish",
    "puback",
    "pubrec",
    "pubrel",
    "pubcomp",
    "subscribe",
    "suback",
    "unsubscribe",
    "unsuback",
    "pingreq",
    "pingresp",
    "disconnect",
    "auth",
];

/// Reason codes, numbered as in MQTT 5.0 and used for both versions.
pub mod reason {
    pub const SUCCESS: u8 = 0x00;
    pub const GRANTED_QOS_1: u8 = 0x01;
    pub const GRANTED_QOS_2: u8 = 0x02;
    pub const NORMAL: u8 = 0x00;
    pub const DISCONNECT_WITH_WILL: u8 = 0x04;
    pub const NO_MATCHING_SUBSCRIBERS: u8 = 0x10;
    pub const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
    pub const UNSPECIFIED: u8 = 0x80;
    pub const MALFORMED: u8 = 0x81;
    pub const PROTOCOL_ERROR: u8 = 0x82;
    pub const IMPLEMENTATION_SPECIFIC: u8 = 0x83;
    pub const UNSUPPORTED_PROTOCOL_VERSION: u8 = 0x84;
    pub const CLIENT_ID_INVALID: u8 = 0x85;
    pub const BAD_USERNAME_PASSWORD: u8 = 0x86;
    pub const NOT_AUTHORIZED: u8 = 0x87;
    pub const SERVER_UNAVAILABLE: u8 = 0x88;
    pub const SERVER_BUSY: u8 = 0x89;
    pub const BANNED: u8 = 0x8A;
    pub const SERVER_SHUTTING_DOWN: u8 = 0x8B;
    pub const BAD_AUTH_METHOD: u8 = 0x8C;
    pub const KEEP_ALIVE_TIMEOUT: u8 = 0x8D;
    pub const SESSION_TAKEN_OVER: u8 = 0x8E;
    pub const TOPIC_FILTER_INVALID: u8 = 0x8F;
    pub const TOPIC_NAME_INVALID: u8 = 0x90;
    pub const PACKET_ID_IN_USE: u8 = 0x91;
    pub const PACKET_ID_NOT_FOUND: u8 = 0x92;
    pub const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
    pub const TOPIC_ALIAS_INVALID: u8 = 0x94;
    pub const PACKET_TOO_LARGE: u8 = 0x95;
    pub const QUOTA_EXCEEDED: u8 = 0x97;
    pub const ADMINISTRATIVE_ACTION: u8 = 0x98;
    pub const PAYLOAD_FORMAT_INVALID: u8 = 0x99;
    pub const RETAIN_NOT_SUPPORTED: u8 = 0x9A;
    pub const QOS_NOT_SUPPORTED: u8 = 0x9B;
    pub const SHARED_NOT_SUPPORTED: u8 = 0x9E;
    pub const CONNECTION_RATE_EXCEEDED: u8 = 0x9F;
    pub const SUBSCRIPTION_IDS_NOT_SUPPORTED: u8 = 0xA1;
    pub const WILDCARDS_NOT_SUPPORTED: u8 = 0xA2;
}

/// A violation found while decoding; [`DecodeError::reason`] is the reason
/// code to answer it with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("packet type 0 is reserved")]
    ReservedPacketType,
    #[error("AUTH (packet type 15) does not exist in MQTT 3.1.1")]
    AuthInV311,
    #[error("{packet} fixed header flags are {flags:#06b}, must be {expected:#06b}")]
    BadFlags {
        packet: &'static str,
        flags: u8,
        expected: u8,
    },
    #[error("{what} QoS is 3")]
    InvalidQos { what: &'static str },
    #[error("PUBLISH with QoS 0 has the DUP flag set")]
    DupWithQos0 { protocol: Protocol },
    #[error("{field} is longer than 4 bytes")]
    VarintTooLong { field: &'static str },
    #[error("{field} is not encoded in its shortest form")]
    VarintNotMinimal { field: &'static str },
    #[error("packet of {size} bytes is larger than the maximum of {max}")]
    PacketTooLarge { size: usize, max: usize },
    #[error("{packet} received before CONNECT")]
    NotConnect { packet: &'static str },
    #[error("{packet} ends inside its {field}")]
    Truncated {
        packet: &'static str,
        field: &'static str,
    },
    #[error("{packet} has {extra} bytes after its last field")]
    TrailingBytes { packet: &'static str, extra: usize },
    #[error("{packet} {field} is not valid UTF-8")]
    InvalidUtf8 {
        packet: &'static str,
        field: &'static str,
    },
    #[error("{packet} {field} contains U+0000")]
    NulInString {
        packet: &'static str,
        field: &'static str,
    },
    #[error("CONNECT protocol name {name:?} is not \"MQTT\"")]
    BadProtocolName { name: String },
    #[error("CONNECT protocol {name:?} level {level} is not supported (only \"MQTT\" 4 and 5)")]
    UnsupportedVersion { name: String, level: u8 },
    #[error("CONNECT reserved flag is set")]
    ConnectReservedFlag,
    #[error("CONNECT sets will QoS or will retain without the will flag")]
    WillFlagsWithoutWill,
    #[error("CONNECT has a password but no user name (MQTT 3.1.1)")]
    PasswordWithoutUsername,
    #[error("{packet} has unknown property identifier {id:#04x}")]
    UnknownProperty { packet: &'static str, id: u8 },
    #[error("{packet} may not carry the {name} property ({id:#04x})", name = props::name(.id))]
    PropertyNotAllowed { packet: &'static str, id: u8 },
    #[error("{packet} carries the {name} property ({id:#04x}) more than once", name = props::name(.id))]
    DuplicateProperty { packet: &'static str, id: u8 },
    #[error("{packet} {name} property has the invalid value {value}", name = props::name(.id))]
    InvalidPropertyValue {
        packet: &'static str,
        id: u8,
        value: u32,
    },
    #[error("{packet} has Authentication Data without an Authentication Method")]
    AuthDataWithoutMethod { packet: &'static str },
    #[error("{packet} topic name {topic:?} contains a wildcard")]
    TopicWildcard { packet: &'static str, topic: String },
    #[error("{packet} topic name is empty (and no topic alias is given)")]
    EmptyTopic {
        packet: &'static str,
        protocol: Protocol,
    },
    #[error("{packet} packet identifier is 0")]
    ZeroPacketId {
        packet: &'static str,
        protocol: Protocol,
    },
    #[error("PUBLISH topic alias is 0")]
    TopicAliasZero,
    #[error("PUBLISH from a client carries a Subscription Identifier")]
    PublishSubscriptionId,
    #[error("{packet} payload is flagged as UTF-8 but is not valid UTF-8")]
    PayloadNotUtf8 { packet: &'static str },
    #[error("{packet} has no topic filter")]
    NoFilters {
        packet: &'static str,
        protocol: Protocol,
    },
    #[error("SUBSCRIBE options {options:#04x} of {filter:?} set reserved bits")]
    SubscriptionOptionsReserved { filter: String, options: u8 },
    #[error("SUBSCRIBE options of {filter:?} have Retain Handling 3")]
    RetainHandling3 { filter: String },
    #[error("{packet} reason code {code:#04x} is not defined for it")]
    UnknownReasonCode { packet: &'static str, code: u8 },
    #[error("{packet} has no reason code")]
    NoReasonCodes {
        packet: &'static str,
        protocol: Protocol,
    },
    #[error("CONNACK acknowledge flags {flags:#04x} set reserved bits")]
    ConnAckReservedFlags { flags: u8 },
}

impl DecodeError {
    /// The reason code a server answers this violation with (CONNACK before
    /// a session, else DISCONNECT). For 3.1.1 connections what 5.0 calls a
    /// protocol error is MALFORMED.
    pub fn reason(&self) -> u8 {
        use DecodeError as E;
        let by_protocol = |p: &Protocol| match p {
            Protocol::V5 => reason::PROTOCOL_ERROR,
            Protocol::V311 => reason::MALFORMED,
        };
        match self {
            E::PacketTooLarge { .. } => reason::PACKET_TOO_LARGE,
            E::UnsupportedVersion { .. } => reason::UNSUPPORTED_PROTOCOL_VERSION,
            E::TopicWildcard { .. } => reason::TOPIC_NAME_INVALID,
            E::TopicAliasZero => reason::TOPIC_ALIAS_INVALID,
            E::PayloadNotUtf8 { .. } => reason::PAYLOAD_FORMAT_INVALID,
            E::NotConnect { .. }
            | E::BadProtocolName { .. }
            | E::DuplicateProperty { .. }
            | E::InvalidPropertyValue { .. }
            | E::AuthDataWithoutMethod { .. }
            | E::PublishSubscriptionId
            | E::RetainHandling3 { .. } => reason::PROTOCOL_ERROR,
            E::DupWithQos0 { protocol }
            | E::EmptyTopic { protocol, .. }
            | E::ZeroPacketId { protocol, .. }
            | E::NoFilters { protocol, .. }
            | E::NoReasonCodes { protocol, .. } => by_protocol(protocol),
            E::ReservedPacketType
            | E::AuthInV311
            | E::BadFlags { .. }
            | E::InvalidQos { .. }
            | E::VarintTooLong { .. }
            | E::VarintNotMinimal { .. }
            | E::Truncated { .. }
            | E::TrailingBytes { .. }
            | E::InvalidUtf8 { .. }
            | E::NulInString { .. }
            | E::ConnectReservedFlag
            | E::WillFlagsWithoutWill
            | E::PasswordWithoutUsername
            | E::UnknownProperty { .. }
            | E::PropertyNotAllowed { .. }
            | E::SubscriptionOptionsReserved { .. }
            | E::UnknownReasonCode { .. }
            | E::ConnAckReservedFlags { .. } => reason::MALFORMED,
        }
    }

    /// True for an unsupported protocol level in CONNECT (the server then
    /// answers a 3.1.1-format CONNACK with return code 1).
    pub fn is_unsupported_version(&self) -> bool {
        matches!(self, DecodeError::UnsupportedVersion { .. })
    }
}

/// Decodes the packet at the front of `buf`, consuming exactly its bytes.
///
/// `Ok(None)`: incomplete, read more (nothing consumed). `protocol` is
/// `None` before CONNECT: then the first packet must be CONNECT (anything
/// else is PROTOCOL_ERROR) and its protocol level picks the version;
/// afterwards pass the connection's protocol. `max_packet`: the largest
/// whole packet accepted in bytes (fixed header included); a larger one is
/// an error (PACKET_TOO_LARGE) as soon as its fixed header is read, before
/// its body arrives. A packet whose body fails a check is consumed.
pub fn decode(
    buf: &mut BytesMut,
    protocol: Option<Protocol>,
    max_packet: usize,
) -> Result<Option<Packet>, DecodeError> {
    read::decode(buf, protocol, max_packet)
}

/// Appends the packet's bytes for `protocol` to `buf`; returns how many
/// bytes were written (0, with nothing written, for a packet that cannot
/// be represented: see the module documentation). Never panics.
pub fn encode(packet: &Packet, protocol: Protocol, buf: &mut BytesMut) -> usize {
    write::encode(packet, protocol, buf)
}
