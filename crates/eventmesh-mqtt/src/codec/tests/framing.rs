//! The fixed header, packet size limits and incremental input.

use super::*;
use crate::codec::reason::*;

#[test]
fn reserved_packet_type() {
    for protocol in [None, V311, V5] {
        assert_eq!(fails(&[0x00, 0], protocol), MALFORMED);
        assert!(matches!(
            err(&[0x00, 0], protocol),
            DecodeError::ReservedPacketType
        ));
    }
}

#[test]
fn first_packet_must_be_connect() {
    for byte1 in [0x20, 0x30, 0x40, 0x62, 0x82, 0xC0, 0xE0, 0xF0] {
        let e = err(&[byte1, 0], None);
        assert_eq!(e.reason(), PROTOCOL_ERROR, "{byte1:#04x}");
        assert!(matches!(e, DecodeError::NotConnect { .. }));
    }
    // Known from the first byte alone.
    assert!(matches!(
        decode(&mut BytesMut::from(&[0x30][..]), None, MAX),
        Err(DecodeError::NotConnect { packet: "PUBLISH" })
    ));
    assert_eq!(fails(&[0x12, 0], None), MALFORMED);
}

#[test]
fn fixed_header_flags() {
    for kind in 1..=15u8 {
        if kind == 3 {
            continue;
        }
        let expected = if matches!(kind, 6 | 8 | 10) { 2 } else { 0 };
        for flags in 0..16u8 {
            if flags == expected {
                continue;
            }
            let bytes = [kind << 4 | flags, 0];
            for protocol in [V311, V5] {
                assert_eq!(fails(&bytes, protocol), MALFORMED, "{bytes:02x?}");
            }
        }
    }
    let e = err(&[0x60, 2, 0, 1], V5);
    assert_eq!(
        e.to_string(),
        "PUBREL fixed header flags are 0b0000, must be 0b0010"
    );
}

#[test]
fn publish_flags() {
    // QoS 3 is malformed, DUP on QoS 0 a protocol error (5.0).
    for byte1 in [0x36, 0x37, 0x3E, 0x3F] {
        assert_eq!(fails(&[byte1, 0], V5), MALFORMED);
        assert_eq!(fails(&[byte1, 0], V311), MALFORMED);
    }
    assert_eq!(fails(&[0x38, 0], V5), PROTOCOL_ERROR);
    assert_eq!(fails(&[0x39, 0], V311), MALFORMED);
    // Both are known before the rest of the header.
    assert!(decode(&mut BytesMut::from(&[0x38][..]), V5, MAX).is_err());
}

#[test]
fn remaining_length() {
    // Longest form: 268,435,455 in four bytes; then the body is awaited.
    let mut buf = BytesMut::from(&[0x30, 0xFF, 0xFF, 0xFF, 0x7F][..]);
    assert_eq!(decode(&mut buf, V5, usize::MAX), Ok(None));
    assert_eq!(buf.len(), 5);
    // A fourth byte with a continuation bit: malformed without a fifth.
    for bytes in [
        &[0xC0, 0xFF, 0xFF, 0xFF, 0xFF][..],
        &[0xC0, 0x80, 0x80, 0x80, 0x80, 0x01],
        &[0xC0, 0x80, 0x80, 0x80, 0x80],
    ] {
        assert_eq!(fails(bytes, V5), MALFORMED);
        assert!(matches!(err(bytes, V5), DecodeError::VarintTooLong { .. }));
    }
    // Not the shortest form.
    for bytes in [
        &[0xC0, 0x80, 0x00][..],
        &[0xC0, 0x80, 0x80, 0x00],
        &[0xC0, 0x80, 0x80, 0x80, 0x00],
    ] {
        assert_eq!(fails(bytes, V311), MALFORMED);
        assert!(matches!(
            err(bytes, V311),
            DecodeError::VarintNotMinimal { .. }
        ));
    }
    // Incomplete: nothing consumed.
    for bytes in [&[0x30][..], &[0x30, 0x80], &[0x30, 0x80, 0x80, 0x80]] {
        let mut buf = BytesMut::from(bytes);
        assert_eq!(decode(&mut buf, V5, MAX), Ok(None));
        assert_eq!(&buf[..], bytes);
    }
    assert_eq!(decode(&mut BytesMut::new(), None, MAX), Ok(None));
}

#[test]
fn multi_byte_remaining_lengths() {
    for size in [127usize, 128, 16_383, 16_384, 2_097_152] {
        let payload = vec![b'x'; size];
        let p = Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: "t".into(),
            pkid: 0,
            payload: Bytes::from(payload),
            props: PublishProps::default(),
        };
        let packet = Packet::Publish(p);
        let bytes = enc(&packet, Protocol::V311);
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(decode(&mut buf, V311, usize::MAX), Ok(Some(packet)));
        assert!(buf.is_empty());
    }
}

#[test]
fn packet_too_large() {
    // PINGREQ is 2 bytes: allowed at a maximum of 2, not 1.
    assert_eq!(
        decode(&mut BytesMut::from(&[0xC0, 0][..]), V5, 2),
        Ok(Some(Packet::PingReq))
    );
    let e = decode(&mut BytesMut::from(&[0xC0, 0][..]), V5, 1).unwrap_err();
    assert_eq!(e.reason(), PACKET_TOO_LARGE);
    assert_eq!(e, DecodeError::PacketTooLarge { size: 2, max: 1 });
    // Known from the header alone: 3 + 200 bytes announced, none sent.
    let mut buf = BytesMut::from(&[0x30, 0xC8, 0x01][..]);
    let e = decode(&mut buf, V5, 64).unwrap_err();
    assert_eq!(e, DecodeError::PacketTooLarge { size: 203, max: 64 });
    assert_eq!(
        e.to_string(),
        "packet of 203 bytes is larger than the maximum of 64"
    );
    assert_eq!(decode(&mut buf, V5, 203), Ok(None));
    // Also for the CONNECT.
    let mut buf = BytesMut::from(&[0x10, 0x7F][..]);
    assert_eq!(
        decode(&mut buf, None, 64).map_err(|e| e.reason()),
        Err(PACKET_TOO_LARGE)
    );
}

#[test]
fn consumes_exactly_one_packet() {
    let mut buf = BytesMut::from(&[0xC0, 0, 0xE0, 0, 0x30][..]);
    assert_eq!(decode(&mut buf, V311, MAX), Ok(Some(Packet::PingReq)));
    assert_eq!(&buf[..], [0xE0, 0, 0x30]);
    assert!(matches!(
        decode(&mut buf, V311, MAX),
        Ok(Some(Packet::Disconnect(_)))
    ));
    assert_eq!(decode(&mut buf, V311, MAX), Ok(None));
    assert_eq!(&buf[..], [0x30]);
}

/// Feeds `bytes` one at a time: nothing until the last, nothing consumed.
fn bytewise(bytes: &[u8], protocol: Option<Protocol>) -> Packet {
    let mut buf = BytesMut::new();
    for (i, &b) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[b]);
        let result = decode(&mut buf, protocol, MAX);
        if i + 1 < bytes.len() {
            assert_eq!(result, Ok(None), "after {} bytes", i + 1);
            assert_eq!(buf.len(), i + 1);
        } else {
            assert!(buf.is_empty());
            return result.expect("decodes").expect("complete");
        }
    }
    panic!("no bytes");
}

#[test]
fn incremental_input() {
    let connect_v311 = connect_bytes(
        4,
        0xC4,
        &cat(&[&s("dev"), &s("will/topic"), &s("bye"), &s("user"), &s("pw")]),
    );
    assert_eq!(bytewise(&connect_v311, None), ok(&connect_v311, None));

    let connect_v5 = connect_bytes(5, 2, &cat(&[&props(&[0x21, 0, 5]), &s("dev")]));
    assert_eq!(bytewise(&connect_v5, None), ok(&connect_v5, None));

    let big = vec![b'p'; 300];
    let publish_v5 = pkt(
        0x32,
        &cat(&[&s("a/b"), &[0, 1], &props(&user("k", "v")), &big]),
    );
    assert_eq!(bytewise(&publish_v5, V5), ok(&publish_v5, V5));

    let subscribe = pkt(0x82, &cat(&[&[0, 1], &[0], &s("a/#"), &[1]]));
    assert_eq!(bytewise(&subscribe, V5), ok(&subscribe, V5));
    assert_eq!(bytewise(&[0xC0, 0], V311), Packet::PingReq);
}

#[test]
fn error_messages_name_the_problem() {
    let cases: [(&[u8], Option<Protocol>, &str); 6] = [
        (
            &[0xF0, 0],
            V311,
            "AUTH (packet type 15) does not exist in MQTT 3.1.1",
        ),
        (
            &[0x30, 4, 0, 3, b'a', b'b'],
            V311,
            "PUBLISH ends inside its topic name",
        ),
        (
            &[0x40, 3, 0, 1, 0x42],
            V5,
            "PUBACK reason code 0x42 is not defined for it",
        ),
        (&[0x82, 3, 0, 1, 0], V5, "SUBSCRIBE has no topic filter"),
        (
            &[0x30, 6, 0, 1, b't', 2, 0x23, 0],
            V5,
            "PUBLISH ends inside its Topic Alias",
        ),
        (
            &[0x30, 6, 0, 1, b't', 2, 0x99, 0],
            V5,
            "PUBLISH has unknown property identifier 0x99",
        ),
    ];
    for (bytes, protocol, message) in cases {
        assert_eq!(err(bytes, protocol).to_string(), message);
    }
}

#[test]
fn encode_refuses_what_the_wire_cannot_carry() {
    let long = "x".repeat(65_536);
    let cases = [
        Packet::Publish(publish(QoS::AtMostOnce, &long, 0, b"")),
        Packet::Subscribe(Subscribe {
            pkid: 1,
            id: Some(268_435_456),
            filters: vec![filter("a", QoS::AtMostOnce)],
            user: Vec::new(),
        }),
        Packet::Disconnect(Disconnect {
            reason: 0,
            session_expiry: None,
            reason_string: Some(long.clone()),
        }),
    ];
    for packet in &cases {
        let mut buf = BytesMut::from(&b"kept"[..]);
        assert_eq!(encode(packet, Protocol::V5, &mut buf), 0);
        assert_eq!(&buf[..], b"kept");
    }
    // The longest string fits.
    let longest = "x".repeat(65_535);
    let packet = Packet::Publish(publish(QoS::AtMostOnce, &longest, 0, b""));
    assert_eq!(ok(&enc(&packet, Protocol::V5), V5), packet);
    // A 3.1.1 SUBSCRIBE has no identifier: nothing to refuse.
    assert_ne!(enc(&cases[1], Protocol::V311).len(), 0);
}
