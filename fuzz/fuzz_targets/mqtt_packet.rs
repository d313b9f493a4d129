//! Fuzzes the MQTT packet codec (MQTT 3.1.1 and 5.0).
//!
//! The input is treated as bytes arriving on one connection. It is decoded
//! packet after packet three ways: from the start of a connection (the
//! first packet must be a CONNECT, whose protocol level then picks the
//! version of the rest), and as a 3.1.1 and a 5.0 stream after CONNECT.
//! Each way runs with the protocol's largest packet and with a 64-byte
//! limit, both in one piece and fed one byte at a time; the two must give
//! the same packets and end in the same state (bytes waiting, or the same
//! error). No packet may exceed the limit; every error has a failure
//! reason code and a message. Every decoded packet must re-encode (for its
//! protocol) to bytes that decode to the same packet, and never panic.

#![no_main]

use bytes::{BufMut, BytesMut};
use eventmesh_mqtt::codec::{decode, encode, DecodeError, Packet, Protocol};
use libfuzzer_sys::fuzz_target;

/// The largest packet the protocol can express: a 1-byte type, a 4-byte
/// remaining length, and 268,435,455 bytes.
const PROTOCOL_MAX: usize = 1 + 4 + 268_435_455;

/// A decoded packet, the protocol it belongs to, and its size on the wire.
type Decoded = (Packet, Protocol, usize);

/// The packets decoded from `data` and how decoding stopped: `Ok(n)` with
/// `n` bytes left over waiting for more input, or the error.
type Outcome = (Vec<Decoded>, Result<usize, DecodeError>);

/// The connection's protocol after `packet`: a CONNECT before any protocol
/// picks it; afterwards it stays. The packet's own protocol is the
/// CONNECT's level for a CONNECT, else the connection's.
fn protocols(current: Option<Protocol>, packet: &Packet) -> (Protocol, Protocol) {
    let own = match (packet, current) {
        (Packet::Connect(c), _) => c.protocol,
        (_, Some(p)) => p,
        (_, None) => panic!("a packet other than CONNECT before CONNECT: {packet:?}"),
    };
    (current.unwrap_or(own), own)
}

/// One step of decoding: the packet (if complete) goes to `packets` and
/// the connection's protocol is updated.
fn step(
    buf: &mut BytesMut,
    protocol: &mut Option<Protocol>,
    max: usize,
    packets: &mut Vec<Decoded>,
) -> Result<bool, DecodeError> {
    let before = buf.len();
    match decode(buf, *protocol, max)? {
        Some(packet) => {
            let size = before - buf.len();
            let (connection, own) = protocols(*protocol, &packet);
            *protocol = Some(connection);
            packets.push((packet, own, size));
            Ok(true)
        }
        None => {
            assert_eq!(buf.len(), before, "an incomplete packet consumes nothing");
            Ok(false)
        }
    }
}

fn decode_whole(data: &[u8], start: Option<Protocol>, max: usize) -> Outcome {
    let mut buf = BytesMut::from(data);
    let mut protocol = start;
    let mut packets = Vec::new();
    loop {
        match step(&mut buf, &mut protocol, max, &mut packets) {
            Ok(true) => {}
            Ok(false) => return (packets, Ok(buf.len())),
            Err(e) => return (packets, Err(e)),
        }
    }
}

fn decode_bytewise(data: &[u8], start: Option<Protocol>, max: usize) -> Outcome {
    let mut buf = BytesMut::new();
    let mut protocol = start;
    let mut packets = Vec::new();
    for &b in data {
        buf.put_u8(b);
        loop {
            match step(&mut buf, &mut protocol, max, &mut packets) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return (packets, Err(e)),
            }
        }
    }
    (packets, Ok(buf.len()))
}

/// Re-encoding yields bytes that decode to the same packet, whole.
fn check_packet(packet: &Packet, protocol: Protocol) {
    let mut wire = BytesMut::from(&b"before"[..]);
    let n = encode(packet, protocol, &mut wire);
    assert!(n > 0, "a decoded packet can be encoded: {packet:?}");
    assert_eq!(n + 6, wire.len());
    assert_eq!(&wire[..6], b"before");
    let mut buf = wire.split_off(6);
    let start = match packet {
        Packet::Connect(_) => None,
        _ => Some(protocol),
    };
    // Canonical forms may differ in size from the input (a 5.0 DISCONNECT
    // with only a reason code gains its property length): no small limit.
    assert_eq!(
        decode(&mut buf, start, PROTOCOL_MAX),
        Ok(Some(packet.clone())),
        "re-encoded as {protocol:?}"
    );
    assert!(buf.is_empty());
}

fn check_error(e: &DecodeError) {
    assert!(!e.to_string().is_empty());
    assert!(e.reason() >= 0x80, "{e:?} has a failure reason code");
    if e.is_unsupported_version() {
        assert_eq!(e.reason(), 0x84);
    }
}

fuzz_target!(|data: &[u8]| {
    for start in [None, Some(Protocol::V311), Some(Protocol::V5)] {
        for max in [PROTOCOL_MAX, 64] {
            let whole = decode_whole(data, start, max);
            for (packet, protocol, size) in &whole.0 {
                assert!(*size <= max);
                check_packet(packet, *protocol);
            }
            if let Err(e) = &whole.1 {
                check_error(e);
            }
            let bytewise = decode_bytewise(data, start, max);
            assert_eq!(
                whole, bytewise,
                "decoding in one piece and byte by byte differ ({start:?}, max {max})"
            );
        }
    }
});
