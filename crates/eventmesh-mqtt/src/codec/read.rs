//! Decoding: the fixed header, then each packet's body with its checks.

use bytes::{Buf, BytesMut};

use super::props::{self, PropSet, Props};
use super::reader::{varint, Reader, Varint};
use super::{
    Ack, ConnAckProps, Connect, DecodeError, Disconnect, Packet, Protocol, Publish, QoS, Subscribe,
    SubscribeFilter, Unsubscribe, Will,
};

type Result<T> = std::result::Result<T, DecodeError>;

/// The name of a packet type, for error messages.
pub(super) fn packet_name(kind: u8) -> &'static str {
    match kind {
        1 => "CONNECT",
        2 => "CONNACK",
        3 => "PUBLISH",
        4 => "PUBACK",
        5 => "PUBREC",
        6 => "PUBREL",
        7 => "PUBCOMP",
        8 => "SUBSCRIBE",
        9 => "SUBACK",
        10 => "UNSUBSCRIBE",
        11 => "UNSUBACK",
        12 => "PINGREQ",
        13 => "PINGRESP",
        14 => "DISCONNECT",
        15 => "AUTH",
        _ => "reserved packet type",
    }
}

pub(super) fn decode(
    buf: &mut BytesMut,
    protocol: Option<Protocol>,
    max_packet: usize,
) -> Result<Option<Packet>> {
    let Some(&byte1) = buf.first() else {
        return Ok(None);
    };
    let kind = byte1 >> 4;
    let flags = byte1 & 0x0F;
    check_first_byte(kind, flags, protocol)?;
    let (remaining, len_len) = match varint(buf.get(1..).unwrap_or_default()) {
        Varint::Incomplete => return Ok(None),
        Varint::TooLong => {
            return Err(DecodeError::VarintTooLong {
                field: "remaining length",
            })
        }
        Varint::NotMinimal => {
            return Err(DecodeError::VarintNotMinimal {
                field: "remaining length",
            })
        }
        Varint::Value { value, len } => (value as usize, len),
    };
    // At most 1 + 4 + 268,435,455: no overflow, even on 32 bits.
    let header = 1 + len_len;
    let size = header + remaining;
    if size > max_packet {
        return Err(DecodeError::PacketTooLarge {
            size,
            max: max_packet,
        });
    }
    if buf.len() < size {
        return Ok(None);
    }
    let mut body = buf.split_to(size).freeze();
    body.advance(header);
    let r = Reader::new(body, packet_name(kind));
    // Only a CONNECT gets here without a protocol; it reads its own.
    let p = protocol.unwrap_or(Protocol::V5);
    let packet = match kind {
        1 => connect(r)?,
        2 => connack(r, p)?,
        3 => Packet::Publish(publish(r, flags, p)?),
        4 => Packet::PubAck(ack(r, kind, p)?),
        5 => Packet::PubRec(ack(r, kind, p)?),
        6 => Packet::PubRel(ack(r, kind, p)?),
        7 => Packet::PubComp(ack(r, kind, p)?),
        8 => subscribe(r, p)?,
        9 => suback(r, p)?,
        10 => unsubscribe(r, p)?,
        11 => unsuback(r, p)?,
        12 => {
            r.finish()?;
            Packet::PingReq
        }
        13 => {
            r.finish()?;
            Packet::PingResp
        }
        14 => disconnect(r, p)?,
        _ => auth(r)?,
    };
    Ok(Some(packet))
}

/// The checks the first byte alone allows.
fn check_first_byte(kind: u8, flags: u8, protocol: Option<Protocol>) -> Result<()> {
    if kind == 0 {
        return Err(DecodeError::ReservedPacketType);
    }
    let Some(protocol) = protocol else {
        if kind != 1 {
            return Err(DecodeError::NotConnect {
                packet: packet_name(kind),
            });
        }
        return expect_flags(kind, flags, 0);
    };
    match kind {
        3 => {
            let qos = (flags >> 1) & 3;
            if qos == 3 {
                return Err(DecodeError::InvalidQos { what: "PUBLISH" });
            }
            if qos == 0 && flags & 0b1000 != 0 {
                return Err(DecodeError::DupWithQos0 { protocol });
            }
            Ok(())
        }
        15 if protocol == Protocol::V311 => Err(DecodeError::AuthInV311),
        6 | 8 | 10 => expect_flags(kind, flags, 0b0010),
        _ => expect_flags(kind, flags, 0),
    }
}

fn expect_flags(kind: u8, flags: u8, expected: u8) -> Result<()> {
    if flags == expected {
        Ok(())
    } else {
        Err(DecodeError::BadFlags {
            packet: packet_name(kind),
            flags,
            expected,
        })
    }
}

fn props(r: &mut Reader, p: Protocol, set: PropSet) -> Result<Props> {
    match p {
        Protocol::V5 => props::read(r, set),
        Protocol::V311 => Ok(Props::default()),
    }
}

/// The rules topic names share in PUBLISH and in wills. `alias`: whether
/// a Topic Alias stands in for an empty name.
fn check_topic(packet: &'static str, topic: &str, alias: bool, p: Protocol) -> Result<()> {
    if topic.contains(['+', '#']) {
        return Err(DecodeError::TopicWildcard {
            packet,
            topic: topic.to_owned(),
        });
    }
    if topic.is_empty() && !(alias && p == Protocol::V5) {
        return Err(DecodeError::EmptyTopic {
            packet,
            protocol: p,
        });
    }
    Ok(())
}

fn check_payload(packet: &'static str, payload: &[u8], utf8: Option<bool>) -> Result<()> {
    if utf8 == Some(true) && std::str::from_utf8(payload).is_err() {
        return Err(DecodeError::PayloadNotUtf8 { packet });
    }
    Ok(())
}

fn check_pkid(packet: &'static str, pkid: u16, p: Protocol) -> Result<()> {
    if pkid == 0 {
        return Err(DecodeError::ZeroPacketId {
            packet,
            protocol: p,
        });
    }
    Ok(())
}

fn connect(mut r: Reader) -> Result<Packet> {
    let name = r.binary("protocol name")?;
    let level = r.u8("protocol level")?;
    let protocol = match (&name[..], level) {
        (b"MQTT", 4) => Protocol::V311,
        (b"MQTT", 5) => Protocol::V5,
        (b"MQTT" | b"MQIsdp", _) => {
            return Err(DecodeError::UnsupportedVersion {
                name: String::from_utf8_lossy(&name).into_owned(),
                level,
            })
        }
        _ => {
            return Err(DecodeError::BadProtocolName {
                name: String::from_utf8_lossy(&name).into_owned(),
            })
        }
    };
    let flags = r.u8("connect flags")?;
    if flags & 0x01 != 0 {
        return Err(DecodeError::ConnectReservedFlag);
    }
    let will_flag = flags & 0x04 != 0;
    let will_qos = (flags >> 3) & 3;
    let will_retain = flags & 0x20 != 0;
    let password_flag = flags & 0x40 != 0;
    let username_flag = flags & 0x80 != 0;
    if !will_flag && (will_qos != 0 || will_retain) {
        return Err(DecodeError::WillFlagsWithoutWill);
    }
    let will_qos = QoS::from_u8(will_qos).ok_or(DecodeError::InvalidQos {
        what: "CONNECT will",
    })?;
    if protocol == Protocol::V311 && password_flag && !username_flag {
        return Err(DecodeError::PasswordWithoutUsername);
    }
    let keep_alive = r.u16("keep alive")?;
    let cp = props(&mut r, protocol, PropSet::Connect)?;
    let client_id = r.string("client identifier")?;
    let will = if will_flag {
        let wp = props(&mut r, protocol, PropSet::Will)?;
        let topic = r.string("will topic")?;
        let payload = r.binary("will payload")?;
        Some((wp, topic, payload))
    } else {
        None
    };
    let username = match username_flag {
        true => Some(r.string("user name")?),
        false => None,
    };
    let password = match password_flag {
        true => Some(r.binary("password")?),
        false => None,
    };
    r.finish()?;

    if cp.auth_data.is_some() && cp.auth_method.is_none() {
        return Err(DecodeError::AuthDataWithoutMethod { packet: "CONNECT" });
    }
    let will = match will {
        None => None,
        Some((wp, topic, payload)) => {
            check_topic("CONNECT will", &topic, false, protocol)?;
            check_payload("CONNECT will", &payload, wp.payload_utf8)?;
            let delay = wp.will_delay.unwrap_or(0);
            Some(Will {
                topic,
                payload,
                qos: will_qos,
                retain: will_retain,
                delay,
                props: wp.into_publish(),
            })
        }
    };
    Ok(Packet::Connect(Box::new(Connect {
        protocol,
        client_id,
        clean_start: flags & 0x02 != 0,
        keep_alive,
        username,
        password,
        will,
        session_expiry: cp.session_expiry.unwrap_or(0),
        receive_maximum: cp.receive_maximum.unwrap_or(u16::MAX),
        max_packet_size: cp.maximum_packet_size,
        topic_alias_max: cp.topic_alias_max.unwrap_or(0),
        request_response_info: cp.request_response_info.unwrap_or(false),
        request_problem_info: cp.request_problem_info.unwrap_or(true),
        auth_method: cp.auth_method,
        auth_data: cp.auth_data,
        user: cp.user,
    })))
}

/// The reason codes 5.0 defines for each packet type.
fn reason_defined(kind: u8, code: u8) -> bool {
    let codes: &[u8] = match kind {
        // CONNACK
        2 => &[
            0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90,
            0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
        ],
        // PUBACK, PUBREC
        4 | 5 => &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99],
        // PUBREL, PUBCOMP
        6 | 7 => &[0x00, 0x92],
        // SUBACK
        9 => &[
            0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
        ],
        // UNSUBACK
        11 => &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91],
        // DISCONNECT
        14 => &[
            0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93,
            0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1,
            0xA2,
        ],
        // AUTH
        15 => &[0x00, 0x18, 0x19],
        _ => &[],
    };
    codes.contains(&code)
}

fn check_reason(kind: u8, code: u8) -> Result<()> {
    if reason_defined(kind, code) {
        Ok(())
    } else {
        Err(DecodeError::UnknownReasonCode {
            packet: packet_name(kind),
            code,
        })
    }
}

fn connack(mut r: Reader, p: Protocol) -> Result<Packet> {
    let flags = r.u8("acknowledge flags")?;
    let code = r.u8("reason code")?;
    let cp = props(&mut r, p, PropSet::ConnAck)?;
    r.finish()?;
    if flags & 0xFE != 0 {
        return Err(DecodeError::ConnAckReservedFlags { flags });
    }
    let reason = match p {
        Protocol::V5 => {
            check_reason(2, code)?;
            code
        }
        Protocol::V311 => match code {
            0 => super::reason::SUCCESS,
            1 => super::reason::UNSUPPORTED_PROTOCOL_VERSION,
            2 => super::reason::CLIENT_ID_INVALID,
            3 => super::reason::SERVER_UNAVAILABLE,
            4 => super::reason::BAD_USERNAME_PASSWORD,
            5 => super::reason::NOT_AUTHORIZED,
            _ => {
                return Err(DecodeError::UnknownReasonCode {
                    packet: "CONNACK",
                    code,
                })
            }
        },
    };
    Ok(Packet::ConnAck {
        session_present: flags & 1 != 0,
        reason,
        props: Box::new(ConnAckProps {
            session_expiry: cp.session_expiry,
            receive_maximum: cp.receive_maximum,
            maximum_qos: cp.maximum_qos,
            retain_available: cp.retain_available,
            maximum_packet_size: cp.maximum_packet_size,
            assigned_client_id: cp.assigned_client_id,
            topic_alias_max: cp.topic_alias_max,
            reason_string: cp.reason_string,
            wildcard_available: cp.wildcard_available,
            subscription_ids_available: cp.subscription_ids_available,
            shared_available: cp.shared_available,
            server_keep_alive: cp.server_keep_alive,
            user: cp.user,
        }),
    })
}

fn publish(mut r: Reader, flags: u8, p: Protocol) -> Result<Publish> {
    let qos = QoS::from_u8((flags >> 1) & 3).ok_or(DecodeError::InvalidQos { what: "PUBLISH" })?;
    let topic = r.string("topic name")?;
    let pkid = match qos {
        QoS::AtMostOnce => 0,
        _ => r.u16("packet identifier")?,
    };
    let pp = props(&mut r, p, PropSet::Publish)?;
    let payload = r.rest();

    if qos != QoS::AtMostOnce {
        check_pkid("PUBLISH", pkid, p)?;
    }
    check_topic("PUBLISH", &topic, pp.topic_alias.is_some(), p)?;
    if pp.topic_alias == Some(0) {
        return Err(DecodeError::TopicAliasZero);
    }
    if !pp.subscription_ids.is_empty() {
        return Err(DecodeError::PublishSubscriptionId);
    }
    check_payload("PUBLISH", &payload, pp.payload_utf8)?;
    Ok(Publish {
        dup: flags & 0b1000 != 0,
        qos,
        retain: flags & 1 != 0,
        topic,
        pkid,
        payload,
        props: pp.into_publish(),
    })
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP.
fn ack(mut r: Reader, kind: u8, p: Protocol) -> Result<Ack> {
    let pkid = r.u16("packet identifier")?;
    let mut code = 0;
    let mut ap = Props::default();
    if p == Protocol::V5 && !r.is_empty() {
        code = r.u8("reason code")?;
        if !r.is_empty() {
            ap = props::read(&mut r, PropSet::Ack)?;
        }
    }
    r.finish()?;
    check_reason(kind, code)?;
    check_pkid(packet_name(kind), pkid, p)?;
    Ok(Ack {
        pkid,
        reason: code,
        reason_string: ap.reason_string,
    })
}

fn subscribe(mut r: Reader, p: Protocol) -> Result<Packet> {
    let pkid = r.u16("packet identifier")?;
    let sp = props(&mut r, p, PropSet::Subscribe)?;
    let mut raw = Vec::new();
    while !r.is_empty() {
        let filter = r.string("topic filter")?;
        let options = r.u8("subscription options")?;
        raw.push((filter, options));
    }

    let reserved = match p {
        Protocol::V311 => 0b1111_1100,
        Protocol::V5 => 0b1100_0000,
    };
    let mut filters = Vec::with_capacity(raw.len());
    for (filter, options) in raw {
        if options & reserved != 0 {
            return Err(DecodeError::SubscriptionOptionsReserved { filter, options });
        }
        let qos = QoS::from_u8(options & 3).ok_or(DecodeError::InvalidQos {
            what: "SUBSCRIBE options",
        })?;
        filters.push(SubscribeFilter {
            filter,
            qos,
            no_local: options & 0b0100 != 0,
            retain_as_published: options & 0b1000 != 0,
            retain_handling: (options >> 4) & 3,
        });
    }
    check_pkid("SUBSCRIBE", pkid, p)?;
    if filters.is_empty() {
        return Err(DecodeError::NoFilters {
            packet: "SUBSCRIBE",
            protocol: p,
        });
    }
    if let Some(f) = filters.iter().find(|f| f.retain_handling == 3) {
        return Err(DecodeError::RetainHandling3 {
            filter: f.filter.clone(),
        });
    }
    Ok(Packet::Subscribe(Subscribe {
        pkid,
        id: sp.subscription_ids.first().copied(),
        filters,
        user: sp.user,
    }))
}

/// The reason codes of a SUBACK or UNSUBACK (a 3.1.1 UNSUBACK has none),
/// checked.
fn reason_list(r: &mut Reader, kind: u8, p: Protocol) -> Result<Vec<u8>> {
    let codes = r.rest().to_vec();
    for &code in &codes {
        let ok = match p {
            Protocol::V311 => matches!(code, 0x00 | 0x01 | 0x02 | 0x80),
            Protocol::V5 => reason_defined(kind, code),
        };
        if !ok {
            return Err(DecodeError::UnknownReasonCode {
                packet: packet_name(kind),
                code,
            });
        }
    }
    if codes.is_empty() {
        return Err(DecodeError::NoReasonCodes {
            packet: packet_name(kind),
            protocol: p,
        });
    }
    Ok(codes)
}

fn suback(mut r: Reader, p: Protocol) -> Result<Packet> {
    let pkid = r.u16("packet identifier")?;
    let sp = props(&mut r, p, PropSet::SubAck)?;
    let reasons = reason_list(&mut r, 9, p)?;
    check_pkid("SUBACK", pkid, p)?;
    Ok(Packet::SubAck {
        pkid,
        reasons,
        reason_string: sp.reason_string,
    })
}

fn unsubscribe(mut r: Reader, p: Protocol) -> Result<Packet> {
    let pkid = r.u16("packet identifier")?;
    let up = props(&mut r, p, PropSet::Unsubscribe)?;
    let mut filters = Vec::new();
    while !r.is_empty() {
        filters.push(r.string("topic filter")?);
    }
    check_pkid("UNSUBSCRIBE", pkid, p)?;
    if filters.is_empty() {
        return Err(DecodeError::NoFilters {
            packet: "UNSUBSCRIBE",
            protocol: p,
        });
    }
    Ok(Packet::Unsubscribe(Unsubscribe {
        pkid,
        filters,
        user: up.user,
    }))
}

fn unsuback(mut r: Reader, p: Protocol) -> Result<Packet> {
    let pkid = r.u16("packet identifier")?;
    let (reasons, reason_string) = match p {
        Protocol::V311 => {
            r.finish()?;
            (Vec::new(), None)
        }
        Protocol::V5 => {
            let up = props::read(&mut r, PropSet::UnsubAck)?;
            (reason_list(&mut r, 11, p)?, up.reason_string)
        }
    };
    check_pkid("UNSUBACK", pkid, p)?;
    Ok(Packet::UnsubAck {
        pkid,
        reasons,
        reason_string,
    })
}

fn disconnect(mut r: Reader, p: Protocol) -> Result<Packet> {
    let mut code = 0;
    let mut dp = Props::default();
    if p == Protocol::V5 && !r.is_empty() {
        code = r.u8("reason code")?;
        if !r.is_empty() {
            dp = props::read(&mut r, PropSet::Disconnect)?;
        }
    }
    r.finish()?;
    check_reason(14, code)?;
    Ok(Packet::Disconnect(Disconnect {
        reason: code,
        session_expiry: dp.session_expiry,
        reason_string: dp.reason_string,
    }))
}

/// AUTH (5.0 only: the first byte check refuses it in 3.1.1).
fn auth(mut r: Reader) -> Result<Packet> {
    let mut code = 0;
    let mut ap = Props::default();
    if !r.is_empty() {
        code = r.u8("reason code")?;
        if !r.is_empty() {
            ap = props::read(&mut r, PropSet::Auth)?;
        }
    }
    r.finish()?;
    check_reason(15, code)?;
    if ap.auth_data.is_some() && ap.auth_method.is_none() {
        return Err(DecodeError::AuthDataWithoutMethod { packet: "AUTH" });
    }
    Ok(Packet::Auth {
        reason: code,
        method: ap.auth_method,
        data: ap.auth_data,
    })
}
