//! Tests of the codec: byte-exact packets of both versions with every
//! violation (`v311`, `v5`), framing and incremental input (`framing`),
//! encode-then-decode round trips (`roundtrip`) and interoperability with
//! rumqttc's independent implementation (`interop`).

use bytes::{Bytes, BytesMut};

use super::*;

mod framing;
mod interop;
mod roundtrip;
mod v311;
mod v5;

/// The packet size limit of most tests.
const MAX: usize = 1 << 20;
const V311: Option<Protocol> = Some(Protocol::V311);
const V5: Option<Protocol> = Some(Protocol::V5);

/// Decodes `bytes` as one whole packet, which must use up every byte.
fn ok(bytes: &[u8], protocol: Option<Protocol>) -> Packet {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, protocol, MAX) {
        Ok(Some(packet)) => {
            assert!(buf.is_empty(), "{} bytes left over", buf.len());
            packet
        }
        other => panic!("{bytes:02x?} ({protocol:?}) gave {other:?}"),
    }
}

/// The error decoding `bytes` gives.
fn err(bytes: &[u8], protocol: Option<Protocol>) -> DecodeError {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, protocol, MAX) {
        Err(e) => e,
        other => panic!("{bytes:02x?} ({protocol:?}) gave {other:?}"),
    }
}

/// The reason code decoding `bytes` fails with.
fn fails(bytes: &[u8], protocol: Option<Protocol>) -> u8 {
    let e = err(bytes, protocol);
    assert!(!e.to_string().is_empty());
    e.reason()
}

/// The bytes `encode` writes for `packet`.
fn enc(packet: &Packet, protocol: Protocol) -> Vec<u8> {
    let mut buf = BytesMut::from(&b"prefix"[..]);
    let n = encode(packet, protocol, &mut buf);
    assert_eq!(n, buf.len() - 6, "the count of bytes written");
    assert_eq!(&buf[..6], b"prefix", "encode only appends");
    buf[6..].to_vec()
}

/// Checks `bytes` decodes to `packet` and `packet` encodes to `bytes`.
fn exact(bytes: &[u8], protocol: Protocol, packet: &Packet) {
    assert_eq!(&ok(bytes, Some(protocol)), packet, "decoding {bytes:02x?}");
    assert_eq!(enc(packet, protocol), bytes, "encoding {packet:?}");
}

/// A packet: the first byte, the remaining length, the body.
fn pkt(byte1: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![byte1];
    let mut n = body.len();
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(body);
    out
}

/// A length-prefixed string or binary field.
fn s(v: impl AsRef<[u8]>) -> Vec<u8> {
    let v = v.as_ref();
    let mut out = (v.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(v);
    out
}

/// Concatenates fields.
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Properties behind their length (all tests use fewer than 128 bytes).
fn props(body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    cat(&[&[body.len() as u8], body])
}

/// A user property.
fn user(key: &str, value: &str) -> Vec<u8> {
    cat(&[&[0x26], &s(key), &s(value)])
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A CONNECT with every optional part at its default.
fn connect(protocol: Protocol, client_id: &str) -> Connect {
    Connect::new(protocol, client_id)
}

/// A CONNECT's bytes: level, flags, then `rest` (properties for 5.0,
/// client identifier, ...), keep alive 60.
fn connect_bytes(level: u8, flags: u8, rest: &[u8]) -> Vec<u8> {
    pkt(0x10, &cat(&[&s("MQTT"), &[level, flags, 0, 60], rest]))
}

fn publish(qos: QoS, topic: &str, pkid: u16, payload: &'static [u8]) -> Publish {
    Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        pkid,
        payload: Bytes::from_static(payload),
        props: PublishProps::default(),
    }
}

fn ack(pkid: u16, reason: u8, reason_string: Option<&str>) -> Ack {
    Ack {
        pkid,
        reason,
        reason_string: reason_string.map(str::to_owned),
    }
}

fn filter(f: &str, qos: QoS) -> SubscribeFilter {
    SubscribeFilter {
        filter: f.into(),
        qos,
        no_local: false,
        retain_as_published: false,
        retain_handling: 0,
    }
}
