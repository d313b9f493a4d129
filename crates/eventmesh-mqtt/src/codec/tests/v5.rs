//! MQTT 5.0 packets, byte for byte, and their violations.

use super::*;
use crate::codec::reason::*;

const P: Protocol = Protocol::V5;

/// A 5.0 CONNECT with these properties and client identifier "c".
fn connect_with(props_body: &[u8]) -> Vec<u8> {
    connect_bytes(5, 0x02, &cat(&[&props(props_body), &s("c")]))
}

#[test]
fn connect_minimal() {
    let bytes = connect_bytes(5, 0x02, &cat(&[&[0], &s("")]));
    assert_eq!(
        bytes,
        [0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0, 0, 0]
    );
    let packet = Packet::Connect(Box::new(connect(P, "")));
    exact(&bytes, P, &packet);
    assert_eq!(ok(&bytes, None), packet);
}

#[test]
fn connect_full() {
    let connect_props = cat(&[
        &[0x11, 0, 0, 0x0E, 0x10],
        &[0x21, 0, 20],
        &[0x27, 0, 1, 0, 0],
        &[0x22, 0, 8],
        &[0x19, 1],
        &[0x17, 0],
        &[0x15],
        &s("SCRAM-SHA-1"),
        &[0x16],
        &s([1, 2, 3]),
        &user("a", "1"),
        &user("a", "2"),
    ]);
    let will_props = cat(&[
        &[0x18, 0, 0, 0, 30],
        &[0x01, 1],
        &[0x02, 0, 0, 0, 60],
        &[0x08],
        &s("reply/here"),
        &[0x09],
        &s([9, 9]),
        &user("w", "x"),
        &[0x03],
        &s("text/plain"),
    ]);
    // user name, password, will QoS 2, will, clean start.
    let bytes = connect_bytes(
        5,
        0x80 | 0x40 | 0x10 | 0x04 | 0x02,
        &cat(&[
            &props(&connect_props),
            &s("dev-1"),
            &props(&will_props),
            &s("dev/1/status"),
            &s("offline"),
            &s("alice"),
            &s("pw"),
        ]),
    );
    let packet = Packet::Connect(Box::new(Connect {
        protocol: P,
        client_id: "dev-1".into(),
        clean_start: true,
        keep_alive: 60,
        username: Some("alice".into()),
        password: Some(Bytes::from_static(b"pw")),
        will: Some(Will {
            topic: "dev/1/status".into(),
            payload: Bytes::from_static(b"offline"),
            qos: QoS::ExactlyOnce,
            retain: false,
            delay: 30,
            props: PublishProps {
                payload_utf8: Some(true),
                message_expiry: Some(60),
                topic_alias: None,
                response_topic: Some("reply/here".into()),
                correlation_data: Some(Bytes::from_static(&[9, 9])),
                user: pairs(&[("w", "x")]),
                subscription_ids: Vec::new(),
                content_type: Some("text/plain".into()),
            },
        }),
        session_expiry: 3600,
        receive_maximum: 20,
        max_packet_size: Some(65536),
        topic_alias_max: 8,
        request_response_info: true,
        request_problem_info: false,
        auth_method: Some("SCRAM-SHA-1".into()),
        auth_data: Some(Bytes::from_static(&[1, 2, 3])),
        user: pairs(&[("a", "1"), ("a", "2")]),
    }));
    exact(&bytes, P, &packet);
}

#[test]
fn connect_password_without_username() {
    let bytes = connect_bytes(5, 0x40, &cat(&[&[0], &s("c"), &s("token")]));
    let Packet::Connect(c) = ok(&bytes, None) else {
        panic!("not a CONNECT");
    };
    assert_eq!(c.username, None);
    assert_eq!(c.password.as_deref(), Some(&b"token"[..]));
    assert_eq!(enc(&Packet::Connect(c), P), bytes);
}

#[test]
fn connect_property_violations() {
    // Receive Maximum 0, Maximum Packet Size 0.
    assert_eq!(fails(&connect_with(&[0x21, 0, 0]), None), PROTOCOL_ERROR);
    assert_eq!(
        fails(&connect_with(&[0x27, 0, 0, 0, 0]), None),
        PROTOCOL_ERROR
    );
    // Request Problem/Response Information other than 0 or 1.
    assert_eq!(fails(&connect_with(&[0x17, 2]), None), PROTOCOL_ERROR);
    assert_eq!(fails(&connect_with(&[0x19, 0xFF]), None), PROTOCOL_ERROR);
    // Twice the same property; user properties may repeat.
    let twice = [0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2];
    assert_eq!(fails(&connect_with(&twice), None), PROTOCOL_ERROR);
    let e = err(&connect_with(&twice), None);
    assert_eq!(
        e.to_string(),
        "CONNECT carries the Session Expiry Interval property (0x11) more than once"
    );
    ok(
        &connect_with(&cat(&[&user("k", "v"), &user("k", "v")])),
        None,
    );
    // Not a CONNECT property, or no property at all.
    assert_eq!(fails(&connect_with(&[0x23, 0, 1]), None), MALFORMED);
    assert_eq!(fails(&connect_with(&[0x18, 0, 0, 0, 1]), None), MALFORMED);
    assert_eq!(fails(&connect_with(&[0x1F, 0, 0]), None), MALFORMED);
    assert_eq!(fails(&connect_with(&[0x05, 0]), None), MALFORMED);
    assert_eq!(fails(&connect_with(&[0x80, 1]), None), MALFORMED);
    // Authentication Data without Authentication Method.
    assert_eq!(
        fails(&connect_with(&cat(&[&[0x16], &s("x")])), None),
        PROTOCOL_ERROR
    );
    // A property cut off by the property length, or running past the packet.
    assert_eq!(fails(&connect_with(&[0x11, 0, 0]), None), MALFORMED);
    let long = connect_bytes(5, 2, &cat(&[&[10, 0x11, 0, 0, 0, 1], &s("c")]));
    assert_eq!(fails(&long, None), MALFORMED);
    // The property length not in its shortest form.
    let padded = connect_bytes(5, 2, &cat(&[&[0x80, 0], &s("c")]));
    assert!(matches!(
        err(&padded, None),
        DecodeError::VarintNotMinimal { .. }
    ));
    // Strings in properties: no U+0000.
    assert_eq!(fails(&connect_with(&user("k\0", "v")), None), MALFORMED);
    // Properties cannot hide in a 3.1.1 CONNECT: they are the client id.
    let v311 = connect_bytes(4, 2, &cat(&[&[0], &s("c")]));
    assert_eq!(fails(&v311, None), MALFORMED);
}

#[test]
fn will_violations() {
    let will = |will_props: &[u8], topic: &str, payload: &[u8]| {
        connect_bytes(
            5,
            0x04,
            &cat(&[&[0], &s("c"), &props(will_props), &s(topic), &s(payload)]),
        )
    };
    ok(&will(&[0x01, 1], "t", "fine".as_bytes()), None);
    // Payload flagged as UTF-8 that is not.
    assert_eq!(
        fails(&will(&[0x01, 1], "t", &[0xFF]), None),
        PAYLOAD_FORMAT_INVALID
    );
    // The will has its own property set.
    assert_eq!(fails(&will(&[0x23, 0, 1], "t", b""), None), MALFORMED);
    assert_eq!(fails(&will(&[0x0B, 1], "t", b""), None), MALFORMED);
    assert_eq!(fails(&will(&[0x11, 0, 0, 0, 1], "t", b""), None), MALFORMED);
    let delay_twice = [0x18, 0, 0, 0, 1, 0x18, 0, 0, 0, 1];
    assert_eq!(fails(&will(&delay_twice, "t", b""), None), PROTOCOL_ERROR);
    assert_eq!(fails(&will(&[0x01, 2], "t", b""), None), PROTOCOL_ERROR);
    // The will topic is a topic name.
    assert_eq!(fails(&will(&[], "a/#", b""), None), TOPIC_NAME_INVALID);
    assert_eq!(fails(&will(&[], "", b""), None), PROTOCOL_ERROR);
}

#[test]
fn connack() {
    let minimal = Packet::ConnAck {
        session_present: false,
        reason: SUCCESS,
        props: Box::default(),
    };
    exact(&[0x20, 3, 0, 0, 0], P, &minimal);
    let props_body = cat(&[
        &[0x11, 0, 0, 0, 10],
        &[0x21, 0, 100],
        &[0x24, 1],
        &[0x25, 0],
        &[0x27, 0, 0, 0x10, 0],
        &[0x12],
        &s("auto-1"),
        &[0x22, 0, 5],
        &[0x1F],
        &s("ok"),
        &[0x28, 1],
        &[0x29, 0],
        &[0x2A, 1],
        &[0x13, 0, 30],
        &user("k", "v"),
    ]);
    let full = Packet::ConnAck {
        session_present: true,
        reason: SUCCESS,
        props: Box::new(ConnAckProps {
            session_expiry: Some(10),
            receive_maximum: Some(100),
            maximum_qos: Some(1),
            retain_available: Some(false),
            maximum_packet_size: Some(4096),
            assigned_client_id: Some("auto-1".into()),
            topic_alias_max: Some(5),
            reason_string: Some("ok".into()),
            wildcard_available: Some(true),
            subscription_ids_available: Some(false),
            shared_available: Some(true),
            server_keep_alive: Some(30),
            user: pairs(&[("k", "v")]),
        }),
    };
    exact(&pkt(0x20, &cat(&[&[1, 0], &props(&props_body)])), P, &full);
    let refused = Packet::ConnAck {
        session_present: false,
        reason: BANNED,
        props: Box::default(),
    };
    exact(&[0x20, 3, 0, 0x8A, 0], P, &refused);
    // Properties a CONNACK may carry that the model drops.
    let extra = cat(&[&[0x1A], &s("info"), &[0x1C], &s("other:1883")]);
    assert_eq!(
        ok(&pkt(0x20, &cat(&[&[0, 0], &props(&extra)])), V5),
        minimal
    );
    // Maximum QoS 2, a reason code CONNACK does not have, reserved flags.
    assert_eq!(fails(&[0x20, 5, 0, 0, 2, 0x24, 2], V5), PROTOCOL_ERROR);
    assert_eq!(fails(&[0x20, 3, 0, 0x10, 0], V5), MALFORMED);
    assert_eq!(fails(&[0x20, 3, 0x80, 0, 0], V5), MALFORMED);
    // The property length is not optional.
    assert_eq!(fails(&[0x20, 2, 0, 0], V5), MALFORMED);
}

#[test]
fn publish_with_properties() {
    let props_body = cat(&[
        &[0x01, 1],
        &[0x02, 0, 0, 1, 0],
        &[0x23, 0, 4],
        &[0x08],
        &s("r"),
        &[0x09],
        &s([7]),
        &user("a", "b"),
        &user("a", "c"),
        &[0x03],
        &s("json"),
    ]);
    let bytes = pkt(
        0x3B,
        &cat(&[&s("a/b"), &[0, 9], &props(&props_body), b"{}"]),
    );
    let mut p = publish(QoS::AtLeastOnce, "a/b", 9, b"{}");
    p.dup = true;
    p.retain = true;
    p.props = PublishProps {
        payload_utf8: Some(true),
        message_expiry: Some(256),
        topic_alias: Some(4),
        response_topic: Some("r".into()),
        correlation_data: Some(Bytes::from_static(&[7])),
        user: pairs(&[("a", "b"), ("a", "c")]),
        subscription_ids: Vec::new(),
        content_type: Some("json".into()),
    };
    exact(&bytes, P, &Packet::Publish(p));
    let plain = Packet::Publish(publish(QoS::AtMostOnce, "t", 0, b"x"));
    exact(&[0x30, 5, 0, 1, b't', 0, b'x'], P, &plain);
}

#[test]
fn publish_topic_alias() {
    // An empty topic name with a Topic Alias: the connection resolves it.
    let bytes = pkt(0x30, &cat(&[&s(""), &props(&[0x23, 0, 3]), b"x"]));
    let Packet::Publish(p) = ok(&bytes, V5) else {
        panic!("not a PUBLISH");
    };
    assert_eq!((p.topic.as_str(), p.props.topic_alias), ("", Some(3)));
    // Without one it is a protocol error; alias 0 is invalid.
    assert_eq!(
        fails(&pkt(0x30, &cat(&[&s(""), &[0], b"x"])), V5),
        PROTOCOL_ERROR
    );
    let zero = pkt(0x30, &cat(&[&s("t"), &props(&[0x23, 0, 0])]));
    assert_eq!(fails(&zero, V5), TOPIC_ALIAS_INVALID);
    let twice = pkt(0x30, &cat(&[&s("t"), &props(&[0x23, 0, 1, 0x23, 0, 2])]));
    assert_eq!(fails(&twice, V5), PROTOCOL_ERROR);
}

#[test]
fn publish_violations() {
    let with_props = |byte1: u8, body: &[u8]| pkt(byte1, &cat(&[&s("t"), &props(body), b"x"]));
    // Subscription identifiers are for the server to send.
    assert_eq!(fails(&with_props(0x30, &[0x0B, 1]), V5), PROTOCOL_ERROR);
    assert!(matches!(
        err(&with_props(0x30, &[0x0B, 1]), V5),
        DecodeError::PublishSubscriptionId
    ));
    assert_eq!(fails(&with_props(0x30, &[0x0B, 0]), V5), PROTOCOL_ERROR);
    // Payload format.
    let not_utf8 = pkt(0x30, &cat(&[&s("t"), &props(&[0x01, 1]), &[0xC0, 0x80]]));
    assert_eq!(fails(&not_utf8, V5), PAYLOAD_FORMAT_INVALID);
    let binary = pkt(0x30, &cat(&[&s("t"), &props(&[0x01, 0]), &[0xC0, 0x80]]));
    ok(&binary, V5);
    assert_eq!(fails(&with_props(0x30, &[0x01, 2]), V5), PROTOCOL_ERROR);
    // Duplicates and properties PUBLISH does not have.
    let expiry_twice = [0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 1];
    assert_eq!(fails(&with_props(0x30, &expiry_twice), V5), PROTOCOL_ERROR);
    assert_eq!(
        fails(&with_props(0x30, &cat(&[&[0x1F], &s("r")])), V5),
        MALFORMED
    );
    assert_eq!(fails(&with_props(0x30, &[0x11, 0, 0, 0, 1]), V5), MALFORMED);
    // Wildcards, packet identifier 0, DUP on QoS 0, QoS 3.
    assert_eq!(
        fails(&pkt(0x30, &cat(&[&s("+"), &[0]])), V5),
        TOPIC_NAME_INVALID
    );
    assert_eq!(
        fails(&pkt(0x32, &cat(&[&s("t"), &[0, 0, 0]])), V5),
        PROTOCOL_ERROR
    );
    assert_eq!(
        fails(&pkt(0x38, &cat(&[&s("t"), &[0]])), V5),
        PROTOCOL_ERROR
    );
    assert_eq!(
        fails(&pkt(0x36, &cat(&[&s("t"), &[0, 1, 0]])), V5),
        MALFORMED
    );
    // No property length.
    assert_eq!(fails(&pkt(0x30, &s("t")), V5), MALFORMED);
    assert_eq!(fails(&with_props(0x30, &user("k", "\0")), V5), MALFORMED);
}

#[test]
fn acks() {
    for (byte1, wrap) in [
        (0x40, Packet::PubAck as fn(Ack) -> Packet),
        (0x50, Packet::PubRec),
        (0x62, Packet::PubRel),
        (0x70, Packet::PubComp),
    ] {
        // Reason 0 without properties: 4 bytes.
        exact(&[byte1, 2, 0, 7], P, &wrap(ack(7, SUCCESS, None)));
        // A reason without properties; the property length 0 written.
        let code = if byte1 == 0x62 || byte1 == 0x70 {
            PACKET_ID_NOT_FOUND
        } else {
            NO_MATCHING_SUBSCRIBERS
        };
        assert_eq!(ok(&[byte1, 3, 0, 7, code], V5), wrap(ack(7, code, None)));
        exact(&[byte1, 4, 0, 7, code, 0], P, &wrap(ack(7, code, None)));
        let with_string = pkt(
            byte1,
            &cat(&[&[0, 7, 0], &props(&cat(&[&[0x1F], &s("why")]))]),
        );
        exact(&with_string, P, &wrap(ack(7, SUCCESS, Some("why"))));
        // User properties are checked and dropped.
        let with_user = pkt(byte1, &cat(&[&[0, 7, 0], &props(&user("k", "v"))]));
        assert_eq!(ok(&with_user, V5), wrap(ack(7, SUCCESS, None)));
        // Violations.
        assert_eq!(fails(&[byte1, 2, 0, 0], V5), PROTOCOL_ERROR);
        assert_eq!(fails(&[byte1, 3, 0, 7, 0x05], V5), MALFORMED);
        assert_eq!(fails(&[byte1, 6, 0, 7, 0, 2, 0x11, 0], V5), MALFORMED);
        assert_eq!(fails(&[byte1, 5, 0, 7, 0, 0, 0], V5), MALFORMED);
        assert_eq!(fails(&[byte1, 4, 0, 7, 0, 3], V5), MALFORMED);
        assert_eq!(fails(&[byte1, 1, 0], V5), MALFORMED);
        assert_eq!(fails(&[byte1 ^ 0x02, 2, 0, 7], V5), MALFORMED);
    }
    // Reason codes are per packet: PUBREL has no 0x10, PUBACK no 0x92.
    assert_eq!(fails(&[0x62, 3, 0, 7, 0x10], V5), MALFORMED);
    assert_eq!(fails(&[0x40, 3, 0, 7, 0x92], V5), MALFORMED);
    ok(&[0x40, 3, 0, 7, QUOTA_EXCEEDED], V5);
}

#[test]
fn subscribe() {
    let props_body = cat(&[&[0x0B, 0x80, 0x01], &user("k", "v")]);
    // QoS 1, no local, retain as published, retain handling 2.
    let options = 0x01 | 0x04 | 0x08 | 0x20;
    let bytes = pkt(
        0x82,
        &cat(&[
            &[0, 4],
            &props(&props_body),
            &s("a/+"),
            &[options],
            &s("$share/g/b"),
            &[0x12],
        ]),
    );
    let packet = Packet::Subscribe(Subscribe {
        pkid: 4,
        id: Some(128),
        filters: vec![
            SubscribeFilter {
                filter: "a/+".into(),
                qos: QoS::AtLeastOnce,
                no_local: true,
                retain_as_published: true,
                retain_handling: 2,
            },
            SubscribeFilter {
                filter: "$share/g/b".into(),
                qos: QoS::ExactlyOnce,
                no_local: false,
                retain_as_published: false,
                retain_handling: 1,
            },
        ],
        user: pairs(&[("k", "v")]),
    });
    exact(&bytes, P, &packet);
}

#[test]
fn subscribe_violations() {
    let sub = |props_body: &[u8], options: u8| {
        pkt(
            0x82,
            &cat(&[&[0, 1], &props(props_body), &s("t"), &[options]]),
        )
    };
    ok(&sub(&[], 0x2E), V5);
    assert_eq!(fails(&sub(&[], 0x40), V5), MALFORMED);
    assert_eq!(fails(&sub(&[], 0x80), V5), MALFORMED);
    assert_eq!(fails(&sub(&[], 0x03), V5), MALFORMED);
    assert_eq!(fails(&sub(&[], 0x30), V5), PROTOCOL_ERROR);
    // Subscription Identifier 0, twice, or not in its shortest form.
    assert_eq!(fails(&sub(&[0x0B, 0], 0), V5), PROTOCOL_ERROR);
    assert_eq!(fails(&sub(&[0x0B, 1, 0x0B, 2], 0), V5), PROTOCOL_ERROR);
    assert_eq!(fails(&sub(&[0x0B, 0x81, 0], 0), V5), MALFORMED);
    assert_eq!(
        fails(&sub(&[0x0B, 0xFF, 0xFF, 0xFF, 0xFF], 0), V5),
        MALFORMED
    );
    let max_id = sub(&[0x0B, 0xFF, 0xFF, 0xFF, 0x7F], 0);
    let Packet::Subscribe(max) = ok(&max_id, V5) else {
        panic!("not a SUBSCRIBE");
    };
    assert_eq!(max.id, Some(268_435_455));
    // Not a SUBSCRIBE property.
    assert_eq!(fails(&sub(&[0x23, 0, 1], 0), V5), MALFORMED);
    // No filter, packet identifier 0.
    assert_eq!(fails(&[0x82, 3, 0, 1, 0], V5), PROTOCOL_ERROR);
    assert_eq!(
        fails(&pkt(0x82, &cat(&[&[0, 0, 0], &s("t"), &[0]])), V5),
        PROTOCOL_ERROR
    );
}

#[test]
fn suback() {
    let bytes = pkt(
        0x90,
        &cat(&[
            &[0, 4],
            &props(&cat(&[&[0x1F], &s("r")])),
            &[0, 1, 2, 0x8F, 0xA2],
        ]),
    );
    let packet = Packet::SubAck {
        pkid: 4,
        reasons: vec![0, 1, 2, TOPIC_FILTER_INVALID, WILDCARDS_NOT_SUPPORTED],
        reason_string: Some("r".into()),
    };
    exact(&bytes, P, &packet);
    exact(
        &[0x90, 4, 0, 4, 0, 0x87],
        P,
        &Packet::SubAck {
            pkid: 4,
            reasons: vec![NOT_AUTHORIZED],
            reason_string: None,
        },
    );
    assert_eq!(fails(&[0x90, 4, 0, 4, 0, 0x05], V5), MALFORMED);
    assert_eq!(fails(&[0x90, 3, 0, 4, 0], V5), PROTOCOL_ERROR);
}

#[test]
fn unsubscribe() {
    let bytes = pkt(0xA2, &cat(&[&[0, 6], &props(&user("k", "v")), &s("a/#")]));
    let packet = Packet::Unsubscribe(Unsubscribe {
        pkid: 6,
        filters: vec!["a/#".into()],
        user: pairs(&[("k", "v")]),
    });
    exact(&bytes, P, &packet);
    assert_eq!(fails(&[0xA2, 3, 0, 6, 0], V5), PROTOCOL_ERROR);
    let reason_string = pkt(
        0xA2,
        &cat(&[&[0, 6], &props(&cat(&[&[0x1F], &s("r")])), &s("a")]),
    );
    assert_eq!(fails(&reason_string, V5), MALFORMED);
    assert_eq!(
        fails(&pkt(0xA2, &cat(&[&[0, 0, 0], &s("a")])), V5),
        PROTOCOL_ERROR
    );
}

#[test]
fn unsuback() {
    let packet = Packet::UnsubAck {
        pkid: 6,
        reasons: vec![SUCCESS, NO_SUBSCRIPTION_EXISTED],
        reason_string: None,
    };
    exact(&[0xB0, 5, 0, 6, 0, 0, 0x11], P, &packet);
    assert_eq!(fails(&[0xB0, 4, 0, 6, 0, 0x10], V5), MALFORMED);
    assert_eq!(fails(&[0xB0, 3, 0, 6, 0], V5), PROTOCOL_ERROR);
}

#[test]
fn disconnect() {
    let d = |reason, session_expiry, reason_string: Option<&str>| {
        Packet::Disconnect(Disconnect {
            reason,
            session_expiry,
            reason_string: reason_string.map(str::to_owned),
        })
    };
    exact(&[0xE0, 0], P, &d(NORMAL, None, None));
    assert_eq!(ok(&[0xE0, 1, 4], V5), d(DISCONNECT_WITH_WILL, None, None));
    exact(&[0xE0, 2, 4, 0], P, &d(DISCONNECT_WITH_WILL, None, None));
    exact(&[0xE0, 2, 0x8B, 0], P, &d(SERVER_SHUTTING_DOWN, None, None));
    let props_body = cat(&[&[0x11, 0, 0, 0, 0], &[0x1F], &s("bye")]);
    let bytes = pkt(0xE0, &cat(&[&[0], &props(&props_body)]));
    exact(&bytes, P, &d(NORMAL, Some(0), Some("bye")));
    // Server Reference and user properties are checked and dropped.
    let extra = cat(&[&[0x1C], &s("other"), &user("k", "v")]);
    assert_eq!(
        ok(&pkt(0xE0, &cat(&[&[0x9C], &props(&extra)])), V5),
        d(0x9C, None, None)
    );
    assert_eq!(fails(&[0xE0, 1, 0x05], V5), MALFORMED);
    assert_eq!(fails(&[0xE0, 4, 0, 2, 0x23, 0], V5), MALFORMED);
    let twice = [0xE0, 12, 0, 10, 0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 1];
    assert_eq!(fails(&twice, V5), PROTOCOL_ERROR);
    assert_eq!(fails(&[0xE2, 0], V5), MALFORMED);
}

#[test]
fn auth() {
    let packet = |reason, method: Option<&str>, data: Option<&'static [u8]>| Packet::Auth {
        reason,
        method: method.map(str::to_owned),
        data: data.map(Bytes::from_static),
    };
    exact(&[0xF0, 0], P, &packet(SUCCESS, None, None));
    let props_body = cat(&[&[0x15], &s("SCRAM"), &[0x16], &s("abc")]);
    let bytes = pkt(0xF0, &cat(&[&[0x18], &props(&props_body)]));
    exact(&bytes, P, &packet(0x18, Some("SCRAM"), Some(b"abc")));
    exact(&[0xF0, 2, 0x19, 0], P, &packet(0x19, None, None));
    // Reason string and user properties are allowed, and dropped.
    let extra = cat(&[&[0x1F], &s("r"), &user("k", "v")]);
    assert_eq!(
        ok(&pkt(0xF0, &cat(&[&[0x18], &props(&extra)])), V5),
        packet(0x18, None, None)
    );
    assert_eq!(fails(&[0xF0, 1, 0x01], V5), MALFORMED);
    assert_eq!(fails(&[0xF1, 0], V5), MALFORMED);
    let data_only = pkt(0xF0, &cat(&[&[0x18], &props(&cat(&[&[0x16], &s("abc")]))]));
    assert_eq!(fails(&data_only, V5), PROTOCOL_ERROR);
    assert_eq!(fails(&[0xF0, 4, 0x18, 2, 0x11, 0], V5), MALFORMED);
}

#[test]
fn ping() {
    exact(&[0xC0, 0], P, &Packet::PingReq);
    exact(&[0xD0, 0], P, &Packet::PingResp);
    assert_eq!(fails(&[0xC0, 1, 0], V5), MALFORMED);
    assert_eq!(fails(&[0xD4, 0], V5), MALFORMED);
}
