//! Encoding: each packet for the protocol version the client spoke.

use bytes::{BufMut, BytesMut};

use super::props::{self, PropWriter, MAX_VARINT};
use super::{reason, Ack, Connect, Packet, Protocol, Publish, QoS, Subscribe};

/// A growing body that remembers whether everything written fits the
/// wire format (lengths of strings, binary data and variable byte
/// integers).
pub(super) struct Out {
    buf: BytesMut,
    ok: bool,
}

impl Out {
    pub fn new() -> Self {
        Out {
            buf: BytesMut::new(),
            ok: true,
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.put_u8(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.buf.put_u16(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.put_u32(v);
    }

    pub fn varint(&mut self, v: usize) {
        if v > MAX_VARINT as usize {
            self.ok = false;
            return;
        }
        put_varint(&mut self.buf, v);
    }

    pub fn binary(&mut self, v: &[u8]) {
        match u16::try_from(v.len()) {
            Ok(n) => {
                self.buf.put_u16(n);
                self.buf.extend_from_slice(v);
            }
            Err(_) => self.ok = false,
        }
    }

    pub fn string(&mut self, v: &str) {
        self.binary(v.as_bytes());
    }

    pub fn append(&mut self, other: Out) {
        self.ok &= other.ok;
        self.buf.extend_from_slice(&other.buf);
    }
}

/// Writes a variable byte integer (the caller checked it fits).
fn put_varint(buf: &mut BytesMut, mut v: usize) {
    loop {
        let byte = (v % 128) as u8;
        v /= 128;
        if v == 0 {
            buf.put_u8(byte);
            return;
        }
        buf.put_u8(byte | 0x80);
    }
}

pub(super) fn encode(packet: &Packet, protocol: Protocol, buf: &mut BytesMut) -> usize {
    let v5 = protocol == Protocol::V5;
    let mut body = Out::new();
    let mut payload: &[u8] = &[];
    let byte1 = match packet {
        Packet::Connect(c) => {
            connect(c, v5, &mut body);
            0x10
        }
        Packet::ConnAck {
            session_present,
            reason: code,
            props: cp,
        } => {
            body.u8(u8::from(*session_present));
            if v5 {
                body.u8(*code);
                let mut w = PropWriter::new();
                w.u32(props::SESSION_EXPIRY, cp.session_expiry);
                w.u16(props::RECEIVE_MAXIMUM, cp.receive_maximum);
                w.u8(props::MAXIMUM_QOS, cp.maximum_qos);
                w.flag(props::RETAIN_AVAILABLE, cp.retain_available);
                w.u32(props::MAXIMUM_PACKET_SIZE, cp.maximum_packet_size);
                w.string(props::ASSIGNED_CLIENT_ID, cp.assigned_client_id.as_deref());
                w.u16(props::TOPIC_ALIAS_MAX, cp.topic_alias_max);
                w.string(props::REASON_STRING, cp.reason_string.as_deref());
                w.flag(props::WILDCARD_AVAILABLE, cp.wildcard_available);
                w.flag(
                    props::SUBSCRIPTION_IDS_AVAILABLE,
                    cp.subscription_ids_available,
                );
                w.flag(props::SHARED_AVAILABLE, cp.shared_available);
                w.u16(props::SERVER_KEEP_ALIVE, cp.server_keep_alive);
                w.user(&cp.user);
                w.finish(&mut body);
            } else {
                body.u8(connack_v311(*code));
            }
            0x20
        }
        Packet::Publish(p) => {
            publish(p, v5, &mut body);
            payload = &p.payload;
            0x30 | u8::from(p.dup) << 3 | (p.qos as u8) << 1 | u8::from(p.retain)
        }
        Packet::PubAck(a) => ack(a, v5, 0x40, &mut body),
        Packet::PubRec(a) => ack(a, v5, 0x50, &mut body),
        Packet::PubRel(a) => ack(a, v5, 0x62, &mut body),
        Packet::PubComp(a) => ack(a, v5, 0x70, &mut body),
        Packet::Subscribe(s) => {
            subscribe(s, v5, &mut body);
            0x82
        }
        Packet::SubAck {
            pkid,
            reasons,
            reason_string,
        } => {
            body.u16(*pkid);
            if v5 {
                reason_string_props(reason_string.as_deref(), &mut body);
                body.buf.extend_from_slice(reasons);
            } else {
                for &code in reasons {
                    body.u8(if code <= 2 { code } else { 0x80 });
                }
            }
            0x90
        }
        Packet::Unsubscribe(u) => {
            body.u16(u.pkid);
            if v5 {
                let mut w = PropWriter::new();
                w.user(&u.user);
                w.finish(&mut body);
            }
            for f in &u.filters {
                body.string(f);
            }
            0xA2
        }
        Packet::UnsubAck {
            pkid,
            reasons,
            reason_string,
        } => {
            body.u16(*pkid);
            if v5 {
                reason_string_props(reason_string.as_deref(), &mut body);
                body.buf.extend_from_slice(reasons);
            }
            0xB0
        }
        Packet::PingReq => 0xC0,
        Packet::PingResp => 0xD0,
        Packet::Disconnect(d) => {
            if v5 && (d.reason != 0 || d.session_expiry.is_some() || d.reason_string.is_some()) {
                body.u8(d.reason);
                let mut w = PropWriter::new();
                w.u32(props::SESSION_EXPIRY, d.session_expiry);
                w.string(props::REASON_STRING, d.reason_string.as_deref());
                w.finish(&mut body);
            }
            0xE0
        }
        Packet::Auth {
            reason: code,
            method,
            data,
        } => {
            if !v5 {
                return 0;
            }
            if *code != 0 || method.is_some() || data.is_some() {
                body.u8(*code);
                let mut w = PropWriter::new();
                w.string(props::AUTH_METHOD, method.as_deref());
                w.binary(props::AUTH_DATA, data.as_deref());
                w.finish(&mut body);
            }
            0xF0
        }
    };
    if !body.ok {
        return 0;
    }
    let Some(remaining) = body
        .len()
        .checked_add(payload.len())
        .filter(|&n| n <= MAX_VARINT as usize)
    else {
        return 0;
    };
    let start = buf.len();
    buf.reserve(1 + 4 + remaining);
    buf.put_u8(byte1);
    put_varint(buf, remaining);
    buf.extend_from_slice(&body.buf);
    buf.extend_from_slice(payload);
    buf.len() - start
}

/// A CONNACK reason as a 3.1.1 return code (the table in the module docs).
fn connack_v311(code: u8) -> u8 {
    match code {
        reason::SUCCESS => 0,
        reason::UNSUPPORTED_PROTOCOL_VERSION => 1,
        reason::CLIENT_ID_INVALID => 2,
        reason::SERVER_UNAVAILABLE | reason::SERVER_BUSY => 3,
        reason::BAD_USERNAME_PASSWORD => 4,
        reason::NOT_AUTHORIZED | reason::BANNED | reason::BAD_AUTH_METHOD => 5,
        _ => 3,
    }
}

/// Properties holding at most a reason string (SUBACK, UNSUBACK, acks).
fn reason_string_props(reason_string: Option<&str>, body: &mut Out) {
    let mut w = PropWriter::new();
    w.string(props::REASON_STRING, reason_string);
    w.finish(body);
}

fn connect(c: &Connect, v5: bool, body: &mut Out) {
    body.string("MQTT");
    body.u8(if v5 { 5 } else { 4 });
    // 3.1.1 has no password without a user name.
    let password = match (v5, &c.username) {
        (false, None) => None,
        _ => c.password.as_ref(),
    };
    let mut flags = u8::from(c.clean_start) << 1;
    if let Some(w) = &c.will {
        flags |= 0x04 | (w.qos as u8) << 3 | u8::from(w.retain) << 5;
    }
    if password.is_some() {
        flags |= 0x40;
    }
    if c.username.is_some() {
        flags |= 0x80;
    }
    body.u8(flags);
    body.u16(c.keep_alive);
    if v5 {
        let mut w = PropWriter::new();
        w.u32(
            props::SESSION_EXPIRY,
            Some(c.session_expiry).filter(|&v| v != 0),
        );
        w.u16(
            props::RECEIVE_MAXIMUM,
            Some(c.receive_maximum).filter(|&v| v != u16::MAX),
        );
        w.u32(props::MAXIMUM_PACKET_SIZE, c.max_packet_size);
        w.u16(
            props::TOPIC_ALIAS_MAX,
            Some(c.topic_alias_max).filter(|&v| v != 0),
        );
        w.flag(
            props::REQUEST_RESPONSE_INFO,
            Some(c.request_response_info).filter(|&v| v),
        );
        w.flag(
            props::REQUEST_PROBLEM_INFO,
            Some(c.request_problem_info).filter(|&v| !v),
        );
        w.string(props::AUTH_METHOD, c.auth_method.as_deref());
        w.binary(props::AUTH_DATA, c.auth_data.as_deref());
        w.user(&c.user);
        w.finish(body);
    }
    body.string(&c.client_id);
    if let Some(will) = &c.will {
        if v5 {
            let mut w = PropWriter::new();
            w.u32(props::WILL_DELAY, Some(will.delay).filter(|&v| v != 0));
            props::publish(&mut w, &will.props, true);
            w.finish(body);
        }
        body.string(&will.topic);
        body.binary(&will.payload);
    }
    if let Some(u) = &c.username {
        body.string(u);
    }
    if let Some(p) = password {
        body.binary(p);
    }
}

fn publish(p: &Publish, v5: bool, body: &mut Out) {
    body.string(&p.topic);
    if p.qos != QoS::AtMostOnce {
        body.u16(p.pkid);
    }
    if v5 {
        let mut w = PropWriter::new();
        props::publish(&mut w, &p.props, false);
        w.finish(body);
    }
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP; returns the first byte.
fn ack(a: &Ack, v5: bool, byte1: u8, body: &mut Out) -> u8 {
    body.u16(a.pkid);
    if v5 && (a.reason != 0 || a.reason_string.is_some()) {
        body.u8(a.reason);
        reason_string_props(a.reason_string.as_deref(), body);
    }
    byte1
}

fn subscribe(s: &Subscribe, v5: bool, body: &mut Out) {
    body.u16(s.pkid);
    if v5 {
        let mut w = PropWriter::new();
        w.varint(props::SUBSCRIPTION_ID, s.id);
        w.user(&s.user);
        w.finish(body);
    }
    for f in &s.filters {
        body.string(&f.filter);
        let mut options = f.qos as u8;
        if v5 {
            options |= u8::from(f.no_local) << 2
                | u8::from(f.retain_as_published) << 3
                | (f.retain_handling & 3) << 4;
        }
        body.u8(options);
    }
}
