//! MQTT 3.1.1 packets, byte for byte, and their violations.

use super::*;
use crate::codec::reason::*;

const P: Protocol = Protocol::V311;

#[test]
fn connect_minimal() {
    let bytes = connect_bytes(4, 0x02, &s(""));
    assert_eq!(
        bytes,
        [0x10, 12, 0, 4, b'M', b'Q', b'T', b'T', 4, 2, 0, 60, 0, 0]
    );
    let packet = Packet::Connect(Box::new(connect(P, "")));
    exact(&bytes, P, &packet);
    // Before CONNECT the level picks the version.
    assert_eq!(ok(&bytes, None), packet);
}

#[test]
fn connect_with_will_and_login() {
    // user name, password, will retain, will QoS 1, will, no clean session.
    let flags = 0x80 | 0x40 | 0x20 | 0x08 | 0x04;
    let bytes = connect_bytes(
        4,
        flags,
        &cat(&[
            &s("dev-1"),
            &s("dev/1/status"),
            &s("gone"),
            &s("alice"),
            &s([0, 0xFF]),
        ]),
    );
    let mut c = connect(P, "dev-1");
    c.clean_start = false;
    c.username = Some("alice".into());
    c.password = Some(Bytes::from_static(&[0, 0xFF]));
    c.will = Some(Will {
        topic: "dev/1/status".into(),
        payload: Bytes::from_static(b"gone"),
        qos: QoS::AtLeastOnce,
        retain: true,
        delay: 0,
        props: PublishProps::default(),
    });
    exact(&bytes, P, &Packet::Connect(Box::new(c)));
}

#[test]
fn connect_violations() {
    // Reserved flag.
    assert_eq!(fails(&connect_bytes(4, 0x03, &s("c")), None), MALFORMED);
    // Will QoS 3.
    assert_eq!(
        fails(
            &connect_bytes(4, 0x1C, &cat(&[&s("c"), &s("t"), &s("p")])),
            None
        ),
        MALFORMED
    );
    // Will QoS or retain without the will flag.
    assert_eq!(fails(&connect_bytes(4, 0x08, &s("c")), None), MALFORMED);
    assert_eq!(fails(&connect_bytes(4, 0x20, &s("c")), None), MALFORMED);
    // A password without a user name.
    assert_eq!(
        fails(&connect_bytes(4, 0x40, &cat(&[&s("c"), &s("pw")])), None),
        MALFORMED
    );
    // Fields missing, or left over.
    assert_eq!(fails(&connect_bytes(4, 0x80, &s("c")), None), MALFORMED);
    assert_eq!(fails(&connect_bytes(4, 0, &[0, 1]), None), MALFORMED);
    assert_eq!(
        fails(&connect_bytes(4, 0, &cat(&[&s("c"), &[0]])), None),
        MALFORMED
    );
    assert!(matches!(
        err(&connect_bytes(4, 0, &cat(&[&s("c"), &[0]])), None),
        DecodeError::TrailingBytes { extra: 1, .. }
    ));
    // Strings: not UTF-8, or with U+0000.
    assert_eq!(
        fails(&connect_bytes(4, 0, &s([0xC3, 0x28])), None),
        MALFORMED
    );
    assert_eq!(fails(&connect_bytes(4, 0, &s("a\0b")), None), MALFORMED);
    assert_eq!(
        fails(
            &connect_bytes(4, 0x80, &cat(&[&s("c"), &s("al\0ce")])),
            None
        ),
        MALFORMED
    );
    // The will topic is a topic name.
    let will = |topic: &str| connect_bytes(4, 0x04, &cat(&[&s("c"), &s(topic), &s("p")]));
    assert_eq!(fails(&will("a/+"), None), TOPIC_NAME_INVALID);
    assert_eq!(fails(&will(""), None), MALFORMED);
}

#[test]
fn connect_protocol_levels() {
    // MQTT 3.1: "MQIsdp" level 3.
    let v31 = pkt(0x10, &cat(&[&s("MQIsdp"), &[3, 2, 0, 60], &s("c")]));
    let e = err(&v31, None);
    assert_eq!(e.reason(), UNSUPPORTED_PROTOCOL_VERSION);
    assert!(e.is_unsupported_version());
    for level in [0, 3, 6, 0x84] {
        let e = err(&connect_bytes(level, 2, &s("c")), None);
        assert_eq!(e.reason(), UNSUPPORTED_PROTOCOL_VERSION, "level {level}");
        assert!(e.is_unsupported_version());
    }
    // Not MQTT at all.
    let other = pkt(0x10, &cat(&[&s("MQTX"), &[4, 2, 0, 60], &s("c")]));
    let e = err(&other, None);
    assert_eq!(e.reason(), PROTOCOL_ERROR);
    assert!(!e.is_unsupported_version());
    assert!(!err(&connect_bytes(4, 1, &s("c")), None).is_unsupported_version());
}

#[test]
fn connack() {
    let packet = |session_present, reason| Packet::ConnAck {
        session_present,
        reason,
        props: Box::default(),
    };
    exact(&[0x20, 2, 1, 0], P, &packet(true, SUCCESS));
    for (code, reason) in [
        (1, UNSUPPORTED_PROTOCOL_VERSION),
        (2, CLIENT_ID_INVALID),
        (3, SERVER_UNAVAILABLE),
        (4, BAD_USERNAME_PASSWORD),
        (5, NOT_AUTHORIZED),
    ] {
        exact(&[0x20, 2, 0, code], P, &packet(false, reason));
    }
    assert_eq!(fails(&[0x20, 2, 0, 6], V311), MALFORMED);
    assert_eq!(fails(&[0x20, 2, 2, 0], V311), MALFORMED);
    assert_eq!(fails(&[0x20, 3, 0, 0, 0], V311), MALFORMED);
    assert_eq!(fails(&[0x20, 1, 0], V311), MALFORMED);
}

#[test]
fn connack_return_code_table() {
    let table = [
        (SUCCESS, 0),
        (UNSUPPORTED_PROTOCOL_VERSION, 1),
        (CLIENT_ID_INVALID, 2),
        (SERVER_UNAVAILABLE, 3),
        (SERVER_BUSY, 3),
        (BAD_USERNAME_PASSWORD, 4),
        (NOT_AUTHORIZED, 5),
        (BANNED, 5),
        (BAD_AUTH_METHOD, 5),
        (UNSPECIFIED, 3),
        (MALFORMED, 3),
        (PROTOCOL_ERROR, 3),
        (IMPLEMENTATION_SPECIFIC, 3),
        (TOPIC_NAME_INVALID, 3),
        (PACKET_TOO_LARGE, 3),
        (QUOTA_EXCEEDED, 3),
        (PAYLOAD_FORMAT_INVALID, 3),
        (RETAIN_NOT_SUPPORTED, 3),
        (QOS_NOT_SUPPORTED, 3),
        (CONNECTION_RATE_EXCEEDED, 3),
    ];
    for (reason, code) in table {
        let props = ConnAckProps {
            reason_string: Some("dropped in 3.1.1".into()),
            session_expiry: Some(10),
            ..ConnAckProps::default()
        };
        let packet = Packet::ConnAck {
            session_present: false,
            reason,
            props: Box::new(props),
        };
        assert_eq!(enc(&packet, P), [0x20, 2, 0, code], "reason {reason:#04x}");
    }
}

#[test]
fn publish() {
    let p0 = Packet::Publish(super::publish(QoS::AtMostOnce, "a/b", 0, b"hi"));
    exact(&[0x30, 7, 0, 3, b'a', b'/', b'b', b'h', b'i'], P, &p0);

    let mut p1 = super::publish(QoS::AtLeastOnce, "a/b", 7, b"");
    p1.retain = true;
    exact(
        &[0x33, 7, 0, 3, b'a', b'/', b'b', 0, 7],
        P,
        &Packet::Publish(p1),
    );

    let mut p2 = super::publish(QoS::ExactlyOnce, "x", 0x1234, b"\x00\xFF");
    p2.dup = true;
    exact(
        &[0x3C, 7, 0, 1, b'x', 0x12, 0x34, 0, 0xFF],
        P,
        &Packet::Publish(p2),
    );

    // 5.0 properties are left out.
    let mut with_props = super::publish(QoS::AtMostOnce, "a/b", 0, b"hi");
    with_props.props.message_expiry = Some(5);
    with_props.props.user = pairs(&[("k", "v")]);
    assert_eq!(enc(&Packet::Publish(with_props), P), enc(&p0, P));
}

#[test]
fn publish_payload_is_zero_copy() {
    let bytes = pkt(0x30, &cat(&[&s("t"), &[b'x'; 100]]));
    let mut buf = BytesMut::from(&bytes[..]);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let Ok(Some(Packet::Publish(p))) = decode(&mut buf, V311, MAX) else {
        panic!("not a PUBLISH");
    };
    assert_eq!(p.payload.len(), 100);
    assert!(range.contains(&(p.payload.as_ptr() as usize)));
}

#[test]
fn publish_violations() {
    assert_eq!(
        fails(&pkt(0x30, &cat(&[&s("a/+"), b"x"])), V311),
        TOPIC_NAME_INVALID
    );
    assert_eq!(
        fails(&pkt(0x30, &cat(&[&s("#"), b"x"])), V311),
        TOPIC_NAME_INVALID
    );
    let e = err(&pkt(0x30, &s("a/#")), V311);
    assert_eq!(
        e.to_string(),
        "PUBLISH topic name \"a/#\" contains a wildcard"
    );
    // An empty topic name: no aliases in 3.1.1.
    assert_eq!(fails(&pkt(0x30, &cat(&[&s(""), b"x"])), V311), MALFORMED);
    // Packet identifier 0.
    assert_eq!(
        fails(&pkt(0x32, &cat(&[&s("t"), &[0, 0]])), V311),
        MALFORMED
    );
    // QoS 3, and DUP with QoS 0.
    assert_eq!(
        fails(&pkt(0x36, &cat(&[&s("t"), &[0, 1]])), V311),
        MALFORMED
    );
    assert_eq!(fails(&pkt(0x38, &s("t")), V311), MALFORMED);
    // Truncated topic or packet identifier.
    assert_eq!(fails(&[0x30, 3, 0, 5, b'a'], V311), MALFORMED);
    assert_eq!(fails(&[0x32, 4, 0, 1, b'a', 0], V311), MALFORMED);
    // A topic that is not UTF-8, or has U+0000.
    assert_eq!(fails(&pkt(0x30, &s([0xFF])), V311), MALFORMED);
    assert_eq!(fails(&pkt(0x30, &s("a\0")), V311), MALFORMED);
}

#[test]
fn acks() {
    for (byte1, wrap) in [
        (0x40, Packet::PubAck as fn(Ack) -> Packet),
        (0x50, Packet::PubRec),
        (0x62, Packet::PubRel),
        (0x70, Packet::PubComp),
    ] {
        exact(&[byte1, 2, 0x01, 0x02], P, &wrap(ack(0x0102, 0, None)));
        // The reason code and string are left out.
        let failed = wrap(ack(9, 0x80, Some("no")));
        assert_eq!(enc(&failed, P), [byte1, 2, 0, 9]);
        // Nothing after the packet identifier, which is not 0.
        assert_eq!(fails(&[byte1, 3, 0, 1, 0], V311), MALFORMED);
        assert_eq!(fails(&[byte1, 2, 0, 0], V311), MALFORMED);
        assert_eq!(fails(&[byte1, 1, 0], V311), MALFORMED);
        // Fixed header flags.
        assert_eq!(fails(&[byte1 ^ 0x02, 2, 0, 1], V311), MALFORMED);
        assert_eq!(fails(&[byte1 | 0x01, 2, 0, 1], V311), MALFORMED);
    }
}

#[test]
fn subscribe() {
    let bytes = pkt(
        0x82,
        &cat(&[&[0, 10], &s("a/+"), &[0], &s("#"), &[1], &s("a/#/b"), &[2]]),
    );
    let packet = Packet::Subscribe(Subscribe {
        pkid: 10,
        id: None,
        // Wildcard placement is the connection's to check.
        filters: vec![
            filter("a/+", QoS::AtMostOnce),
            filter("#", QoS::AtLeastOnce),
            filter("a/#/b", QoS::ExactlyOnce),
        ],
        user: Vec::new(),
    });
    exact(&bytes, P, &packet);
}

#[test]
fn subscribe_violations() {
    let sub = |options: u8| pkt(0x82, &cat(&[&[0, 1], &s("t"), &[options]]));
    // Only the QoS bits exist in 3.1.1.
    for options in [0x04, 0x08, 0x10, 0x40, 0x80] {
        assert_eq!(fails(&sub(options), V311), MALFORMED, "{options:#04x}");
    }
    assert_eq!(fails(&sub(3), V311), MALFORMED);
    // At least one filter, a packet identifier other than 0.
    assert_eq!(fails(&[0x82, 2, 0, 1], V311), MALFORMED);
    assert_eq!(
        fails(&pkt(0x82, &cat(&[&[0, 0], &s("t"), &[0]])), V311),
        MALFORMED
    );
    // A filter without options.
    assert_eq!(
        fails(&pkt(0x82, &cat(&[&[0, 1], &s("t")])), V311),
        MALFORMED
    );
    // Flags must be 0b0010.
    assert_eq!(
        fails(&pkt(0x80, &cat(&[&[0, 1], &s("t"), &[0]])), V311),
        MALFORMED
    );
}

#[test]
fn suback() {
    let packet = Packet::SubAck {
        pkid: 1,
        reasons: vec![0, 1, 2, 0x80],
        reason_string: None,
    };
    exact(&[0x90, 6, 0, 1, 0, 1, 2, 0x80], P, &packet);
    // 5.0 failure codes become 0x80, the reason string is dropped.
    let v5_codes = Packet::SubAck {
        pkid: 1,
        reasons: vec![GRANTED_QOS_1, TOPIC_FILTER_INVALID, NOT_AUTHORIZED, 0x05],
        reason_string: Some("x".into()),
    };
    assert_eq!(enc(&v5_codes, P), [0x90, 6, 0, 1, 1, 0x80, 0x80, 0x80]);
    assert_eq!(fails(&[0x90, 3, 0, 1, 3], V311), MALFORMED);
    assert_eq!(fails(&[0x90, 3, 0, 1, 0x8F], V311), MALFORMED);
    assert_eq!(fails(&[0x90, 2, 0, 1], V311), MALFORMED);
}

#[test]
fn unsubscribe() {
    let bytes = pkt(0xA2, &cat(&[&[0, 3], &s("a/+"), &s("b")]));
    let packet = Packet::Unsubscribe(Unsubscribe {
        pkid: 3,
        filters: vec!["a/+".into(), "b".into()],
        user: Vec::new(),
    });
    exact(&bytes, P, &packet);
    assert_eq!(fails(&[0xA2, 2, 0, 3], V311), MALFORMED);
    assert_eq!(
        fails(&pkt(0xA2, &cat(&[&[0, 0], &s("b")])), V311),
        MALFORMED
    );
    assert_eq!(
        fails(&pkt(0xA0, &cat(&[&[0, 3], &s("b")])), V311),
        MALFORMED
    );
    assert_eq!(
        fails(&pkt(0xA2, &cat(&[&[0, 3], &s("b"), &[0]])), V311),
        MALFORMED
    );
}

#[test]
fn unsuback() {
    let packet = Packet::UnsubAck {
        pkid: 5,
        reasons: Vec::new(),
        reason_string: None,
    };
    exact(&[0xB0, 2, 0, 5], P, &packet);
    // 5.0 reason codes and string are left out.
    let v5_codes = Packet::UnsubAck {
        pkid: 5,
        reasons: vec![NO_SUBSCRIPTION_EXISTED],
        reason_string: Some("x".into()),
    };
    assert_eq!(enc(&v5_codes, P), [0xB0, 2, 0, 5]);
    assert_eq!(fails(&[0xB0, 3, 0, 5, 0], V311), MALFORMED);
}

#[test]
fn ping_and_disconnect() {
    exact(&[0xC0, 0], P, &Packet::PingReq);
    exact(&[0xD0, 0], P, &Packet::PingResp);
    let normal = Packet::Disconnect(Disconnect {
        reason: NORMAL,
        session_expiry: None,
        reason_string: None,
    });
    exact(&[0xE0, 0], P, &normal);
    let shutting_down = Packet::Disconnect(Disconnect {
        reason: SERVER_SHUTTING_DOWN,
        session_expiry: Some(1),
        reason_string: Some("bye".into()),
    });
    assert_eq!(enc(&shutting_down, P), [0xE0, 0]);
    for byte1 in [0xC0, 0xD0, 0xE0] {
        assert_eq!(fails(&[byte1, 1, 0], V311), MALFORMED);
        assert_eq!(fails(&[byte1 | 1, 0], V311), MALFORMED);
        assert_eq!(fails(&[byte1 | 8, 0], V311), MALFORMED);
    }
}

#[test]
fn auth_does_not_exist() {
    assert_eq!(fails(&[0xF0, 0], V311), MALFORMED);
    assert!(matches!(err(&[0xF0, 0], V311), DecodeError::AuthInV311));
    let auth = Packet::Auth {
        reason: 0x18,
        method: Some("SCRAM".into()),
        data: None,
    };
    let mut buf = BytesMut::new();
    assert_eq!(encode(&auth, P, &mut buf), 0);
    assert!(buf.is_empty());
}

#[test]
fn connect_encoding_leaves_out_v5_parts() {
    let mut c = connect(Protocol::V5, "c");
    c.session_expiry = 100;
    c.receive_maximum = 10;
    c.max_packet_size = Some(1000);
    c.user = pairs(&[("k", "v")]);
    // No password without a user name in 3.1.1.
    c.password = Some(Bytes::from_static(b"secret"));
    c.will = Some(Will {
        topic: "w".into(),
        payload: Bytes::new(),
        qos: QoS::AtMostOnce,
        retain: false,
        delay: 30,
        props: PublishProps {
            content_type: Some("text/plain".into()),
            ..PublishProps::default()
        },
    });
    let bytes = enc(&Packet::Connect(Box::new(c)), P);
    assert_eq!(
        bytes,
        connect_bytes(4, 0x06, &cat(&[&s("c"), &s("w"), &s("")]))
    );
}
