//! Interoperability with an independent implementation: rumqttc's client
//! codec. What its client writes decodes with ours; what our server
//! writes decodes with its client.

use rumqttc::mqttbytes::v4 as r4;
use rumqttc::mqttbytes::QoS as Q4;
use rumqttc::v5::mqttbytes::v5 as r5;
use rumqttc::v5::mqttbytes::QoS as Q5;

use super::*;
use crate::codec::reason::*;

fn from_v4(
    write: impl FnOnce(&mut BytesMut) -> Result<usize, rumqttc::mqttbytes::Error>,
) -> Packet {
    let mut buf = BytesMut::new();
    let n = write(&mut buf).expect("rumqttc writes it");
    assert_eq!(n, buf.len());
    let protocol = match buf.first() {
        Some(0x10) => None,
        _ => V311,
    };
    ok(&buf, protocol)
}

fn from_v5(packet: r5::Packet) -> Packet {
    let mut buf = BytesMut::new();
    packet.write(&mut buf, None).expect("rumqttc writes it");
    let protocol = match packet {
        r5::Packet::Connect(..) => None,
        _ => V5,
    };
    ok(&buf, protocol)
}

fn to_v4(packet: &Packet) -> r4::Packet {
    let mut buf = BytesMut::from(&enc(packet, Protocol::V311)[..]);
    let read = r4::Packet::read(&mut buf, 1 << 20).expect("rumqttc reads it");
    assert!(buf.is_empty());
    read
}

fn to_v5(packet: &Packet) -> Result<r5::Packet, String> {
    let mut buf = BytesMut::from(&enc(packet, Protocol::V5)[..]);
    let read = r5::Packet::read(&mut buf, None).map_err(|e| e.to_string())?;
    assert!(buf.is_empty());
    Ok(read)
}

#[test]
fn v4_client_packets_decode() {
    let mut c = r4::Connect::new("dev-7");
    c.keep_alive = 30;
    c.clean_session = false;
    c.last_will = Some(r4::LastWill::new(
        "dev/7/lwt",
        "offline",
        Q4::AtLeastOnce,
        true,
    ));
    c.set_login("alice", "secret");
    let Packet::Connect(got) = from_v4(|b| c.write(b)) else {
        panic!("not a CONNECT");
    };
    let mut want = connect(Protocol::V311, "dev-7");
    want.keep_alive = 30;
    want.clean_start = false;
    want.username = Some("alice".into());
    want.password = Some(Bytes::from_static(b"secret"));
    want.will = Some(Will {
        topic: "dev/7/lwt".into(),
        payload: Bytes::from_static(b"offline"),
        qos: QoS::AtLeastOnce,
        retain: true,
        delay: 0,
        props: PublishProps::default(),
    });
    assert_eq!(*got, want);

    let mut p = r4::Publish::new("a/b", Q4::ExactlyOnce, vec![1, 2, 3]);
    p.pkid = 42;
    p.retain = true;
    let mut want = publish(QoS::ExactlyOnce, "a/b", 42, &[1, 2, 3]);
    want.retain = true;
    assert_eq!(from_v4(|b| p.write(b)), Packet::Publish(want));
    let p0 = r4::Publish::new("x", Q4::AtMostOnce, "hello");
    assert_eq!(
        from_v4(|b| p0.write(b)),
        Packet::Publish(publish(QoS::AtMostOnce, "x", 0, b"hello"))
    );

    let mut s = r4::Subscribe::new_many([
        r4::SubscribeFilter::new("a/+".into(), Q4::AtLeastOnce),
        r4::SubscribeFilter::new("#".into(), Q4::ExactlyOnce),
    ]);
    s.pkid = 3;
    assert_eq!(
        from_v4(|b| s.write(b)),
        Packet::Subscribe(Subscribe {
            pkid: 3,
            id: None,
            filters: vec![
                filter("a/+", QoS::AtLeastOnce),
                filter("#", QoS::ExactlyOnce)
            ],
            user: Vec::new(),
        })
    );

    let mut u = r4::Unsubscribe::new("a/+");
    u.pkid = 4;
    assert_eq!(
        from_v4(|b| u.write(b)),
        Packet::Unsubscribe(Unsubscribe {
            pkid: 4,
            filters: vec!["a/+".into()],
            user: Vec::new(),
        })
    );

    let a = ack(9, 0, None);
    assert_eq!(
        from_v4(|b| r4::PubAck::new(9).write(b)),
        Packet::PubAck(a.clone())
    );
    assert_eq!(
        from_v4(|b| r4::PubRec::new(9).write(b)),
        Packet::PubRec(a.clone())
    );
    assert_eq!(
        from_v4(|b| r4::PubRel::new(9).write(b)),
        Packet::PubRel(a.clone())
    );
    assert_eq!(
        from_v4(|b| r4::PubComp::new(9).write(b)),
        Packet::PubComp(a)
    );
    assert_eq!(from_v4(|b| r4::PingReq.write(b)), Packet::PingReq);
    assert!(matches!(
        from_v4(|b| r4::Disconnect.write(b)),
        Packet::Disconnect(Disconnect { reason: 0, .. })
    ));
}

#[test]
fn v4_server_packets_read() {
    let connack = |session_present, reason| Packet::ConnAck {
        session_present,
        reason,
        props: Box::default(),
    };
    assert_eq!(
        to_v4(&connack(true, SUCCESS)),
        r4::Packet::ConnAck(r4::ConnAck::new(r4::ConnectReturnCode::Success, true))
    );
    for (reason, code) in [
        (
            UNSUPPORTED_PROTOCOL_VERSION,
            r4::ConnectReturnCode::RefusedProtocolVersion,
        ),
        (CLIENT_ID_INVALID, r4::ConnectReturnCode::BadClientId),
        (SERVER_BUSY, r4::ConnectReturnCode::ServiceUnavailable),
        (
            BAD_USERNAME_PASSWORD,
            r4::ConnectReturnCode::BadUserNamePassword,
        ),
        (BANNED, r4::ConnectReturnCode::NotAuthorized),
        (PROTOCOL_ERROR, r4::ConnectReturnCode::ServiceUnavailable),
    ] {
        assert_eq!(
            to_v4(&connack(false, reason)),
            r4::Packet::ConnAck(r4::ConnAck::new(code, false))
        );
    }

    let suback = Packet::SubAck {
        pkid: 5,
        reasons: vec![GRANTED_QOS_1, TOPIC_FILTER_INVALID, SUCCESS],
        reason_string: Some("dropped".into()),
    };
    assert_eq!(
        to_v4(&suback),
        r4::Packet::SubAck(r4::SubAck::new(
            5,
            vec![
                r4::SubscribeReasonCode::Success(Q4::AtLeastOnce),
                r4::SubscribeReasonCode::Failure,
                r4::SubscribeReasonCode::Success(Q4::AtMostOnce),
            ]
        ))
    );

    let mut p = publish(QoS::AtLeastOnce, "a/b", 77, b"payload");
    p.dup = true;
    p.props.user = pairs(&[("dropped", "in 3.1.1")]);
    let r4::Packet::Publish(got) = to_v4(&Packet::Publish(p)) else {
        panic!("not a PUBLISH");
    };
    let mut want = r4::Publish::new("a/b", Q4::AtLeastOnce, "payload");
    want.pkid = 77;
    want.dup = true;
    assert_eq!(got, want);

    assert_eq!(
        to_v4(&Packet::PubAck(ack(77, NO_MATCHING_SUBSCRIBERS, None))),
        r4::Packet::PubAck(r4::PubAck::new(77))
    );
    assert_eq!(
        to_v4(&Packet::PubRec(ack(78, 0, None))),
        r4::Packet::PubRec(r4::PubRec::new(78))
    );
    assert_eq!(
        to_v4(&Packet::PubComp(ack(78, 0, None))),
        r4::Packet::PubComp(r4::PubComp::new(78))
    );
    let unsuback = Packet::UnsubAck {
        pkid: 6,
        reasons: vec![SUCCESS],
        reason_string: None,
    };
    assert_eq!(to_v4(&unsuback), r4::Packet::UnsubAck(r4::UnsubAck::new(6)));
    assert_eq!(to_v4(&Packet::PingResp), r4::Packet::PingResp);
}

#[test]
fn v5_client_packets_decode() {
    let mut props = r5::ConnectProperties::new();
    props.session_expiry_interval = Some(120);
    props.receive_maximum = Some(10);
    props.max_packet_size = Some(2048);
    props.topic_alias_max = Some(4);
    props.request_response_info = Some(1);
    props.request_problem_info = Some(0);
    props.user_properties = pairs(&[("k", "v")]);
    props.authentication_method = Some("TOKEN".into());
    props.authentication_data = Some(Bytes::from_static(b"xyz"));
    let connect5 = r5::Connect {
        keep_alive: 15,
        client_id: "dev-5".into(),
        clean_start: true,
        properties: Some(props),
    };
    let will = r5::LastWill::new(
        "dev/5/lwt",
        "bye",
        Q5::ExactlyOnce,
        false,
        Some(r5::LastWillProperties {
            delay_interval: Some(5),
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(50),
            content_type: Some("text/plain".into()),
            response_topic: Some("r".into()),
            correlation_data: Some(Bytes::from_static(b"c")),
            user_properties: pairs(&[("w", "1")]),
        }),
    );
    let login = r5::Login::new("bob", "pw");
    let Packet::Connect(got) = from_v5(r5::Packet::Connect(connect5, Some(will), Some(login)))
    else {
        panic!("not a CONNECT");
    };
    let mut want = connect(Protocol::V5, "dev-5");
    want.keep_alive = 15;
    want.username = Some("bob".into());
    want.password = Some(Bytes::from_static(b"pw"));
    want.session_expiry = 120;
    want.receive_maximum = 10;
    want.max_packet_size = Some(2048);
    want.topic_alias_max = 4;
    want.request_response_info = true;
    want.request_problem_info = false;
    want.auth_method = Some("TOKEN".into());
    want.auth_data = Some(Bytes::from_static(b"xyz"));
    want.user = pairs(&[("k", "v")]);
    want.will = Some(Will {
        topic: "dev/5/lwt".into(),
        payload: Bytes::from_static(b"bye"),
        qos: QoS::ExactlyOnce,
        retain: false,
        delay: 5,
        props: PublishProps {
            payload_utf8: Some(true),
            message_expiry: Some(50),
            topic_alias: None,
            response_topic: Some("r".into()),
            correlation_data: Some(Bytes::from_static(b"c")),
            user: pairs(&[("w", "1")]),
            subscription_ids: Vec::new(),
            content_type: Some("text/plain".into()),
        },
    });
    assert_eq!(*got, want);

    let pub_props = r5::PublishProperties {
        payload_format_indicator: Some(0),
        message_expiry_interval: Some(9),
        topic_alias: Some(2),
        response_topic: Some("resp".into()),
        correlation_data: Some(Bytes::from_static(b"id")),
        user_properties: pairs(&[("a", "b")]),
        subscription_identifiers: Vec::new(),
        content_type: Some("bin".into()),
    };
    let mut p = r5::Publish::new("", Q5::AtLeastOnce, "data", Some(pub_props));
    p.pkid = 11;
    let mut want = publish(QoS::AtLeastOnce, "", 11, b"data");
    want.props = PublishProps {
        payload_utf8: Some(false),
        message_expiry: Some(9),
        topic_alias: Some(2),
        response_topic: Some("resp".into()),
        correlation_data: Some(Bytes::from_static(b"id")),
        user: pairs(&[("a", "b")]),
        subscription_ids: Vec::new(),
        content_type: Some("bin".into()),
    };
    assert_eq!(from_v5(r5::Packet::Publish(p)), Packet::Publish(want));

    let mut s = r5::Subscribe::new_many(
        [
            r5::Filter {
                path: "a/#".into(),
                qos: Q5::AtLeastOnce,
                nolocal: true,
                preserve_retain: true,
                retain_forward_rule: r5::RetainForwardRule::Never,
            },
            r5::Filter::new("b", Q5::AtMostOnce),
        ],
        Some(r5::SubscribeProperties {
            id: Some(300),
            user_properties: pairs(&[("s", "1")]),
        }),
    );
    s.pkid = 12;
    let mut f0 = filter("a/#", QoS::AtLeastOnce);
    f0.no_local = true;
    f0.retain_as_published = true;
    f0.retain_handling = 2;
    assert_eq!(
        from_v5(r5::Packet::Subscribe(s)),
        Packet::Subscribe(Subscribe {
            pkid: 12,
            id: Some(300),
            filters: vec![f0, filter("b", QoS::AtMostOnce)],
            user: pairs(&[("s", "1")]),
        })
    );

    let mut u = r5::Unsubscribe::new(
        "a/#",
        Some(r5::UnsubscribeProperties {
            user_properties: pairs(&[("u", "2")]),
        }),
    );
    u.pkid = 13;
    u.filters.push("b".into());
    assert_eq!(
        from_v5(r5::Packet::Unsubscribe(u)),
        Packet::Unsubscribe(Unsubscribe {
            pkid: 13,
            filters: vec!["a/#".into(), "b".into()],
            user: pairs(&[("u", "2")]),
        })
    );

    let puback = r5::PubAck {
        pkid: 14,
        reason: r5::PubAckReason::NoMatchingSubscribers,
        properties: Some(r5::PubAckProperties {
            reason_string: Some("nobody".into()),
            user_properties: pairs(&[("x", "y")]),
        }),
    };
    assert_eq!(
        from_v5(r5::Packet::PubAck(puback)),
        Packet::PubAck(ack(14, NO_MATCHING_SUBSCRIBERS, Some("nobody")))
    );
    assert_eq!(
        from_v5(r5::Packet::PubAck(r5::PubAck::new(15, None))),
        Packet::PubAck(ack(15, 0, None))
    );
    assert_eq!(
        from_v5(r5::Packet::PubRec(r5::PubRec::new(16, None))),
        Packet::PubRec(ack(16, 0, None))
    );
    assert_eq!(
        from_v5(r5::Packet::PubRel(r5::PubRel::new(16, None))),
        Packet::PubRel(ack(16, 0, None))
    );
    assert_eq!(
        from_v5(r5::Packet::PubComp(r5::PubComp::new(16, None))),
        Packet::PubComp(ack(16, 0, None))
    );
    assert_eq!(from_v5(r5::Packet::PingReq(r5::PingReq)), Packet::PingReq);

    let normal = r5::Disconnect::new(r5::DisconnectReasonCode::NormalDisconnection);
    assert_eq!(
        from_v5(r5::Packet::Disconnect(normal)),
        Packet::Disconnect(Disconnect {
            reason: NORMAL,
            session_expiry: None,
            reason_string: None,
        })
    );
    let with_will = r5::Disconnect {
        reason_code: r5::DisconnectReasonCode::DisconnectWithWillMessage,
        properties: Some(r5::DisconnectProperties {
            session_expiry_interval: Some(600),
            reason_string: Some("later".into()),
            user_properties: Vec::new(),
            server_reference: None,
        }),
    };
    assert_eq!(
        from_v5(r5::Packet::Disconnect(with_will)),
        Packet::Disconnect(Disconnect {
            reason: DISCONNECT_WITH_WILL,
            session_expiry: Some(600),
            reason_string: Some("later".into()),
        })
    );
}

#[test]
fn v5_server_packets_read() {
    let connack = Packet::ConnAck {
        session_present: true,
        reason: SUCCESS,
        props: Box::new(ConnAckProps {
            session_expiry: Some(60),
            receive_maximum: Some(32),
            maximum_qos: Some(1),
            retain_available: Some(true),
            maximum_packet_size: Some(1 << 20),
            assigned_client_id: Some("auto-9".into()),
            topic_alias_max: Some(16),
            reason_string: Some("welcome".into()),
            wildcard_available: Some(true),
            subscription_ids_available: Some(false),
            shared_available: Some(true),
            server_keep_alive: Some(45),
            user: pairs(&[("node", "1")]),
        }),
    };
    let r5::Packet::ConnAck(got) = to_v5(&connack).unwrap() else {
        panic!("not a CONNACK");
    };
    assert!(got.session_present);
    assert_eq!(got.code, r5::ConnectReturnCode::Success);
    let p = got.properties.expect("properties");
    assert_eq!(p.session_expiry_interval, Some(60));
    assert_eq!(p.receive_max, Some(32));
    assert_eq!(p.max_qos, Some(1));
    assert_eq!(p.retain_available, Some(1));
    assert_eq!(p.max_packet_size, Some(1 << 20));
    assert_eq!(p.assigned_client_identifier.as_deref(), Some("auto-9"));
    assert_eq!(p.topic_alias_max, Some(16));
    assert_eq!(p.reason_string.as_deref(), Some("welcome"));
    assert_eq!(p.wildcard_subscription_available, Some(1));
    assert_eq!(p.subscription_identifiers_available, Some(0));
    assert_eq!(p.shared_subscription_available, Some(1));
    assert_eq!(p.server_keep_alive, Some(45));
    assert_eq!(p.user_properties, pairs(&[("node", "1")]));
    let refused = Packet::ConnAck {
        session_present: false,
        reason: NOT_AUTHORIZED,
        props: Box::default(),
    };
    let r5::Packet::ConnAck(got) = to_v5(&refused).unwrap() else {
        panic!("not a CONNACK");
    };
    assert_eq!(got.code, r5::ConnectReturnCode::NotAuthorized);
    assert_eq!(got.properties, None);

    let suback = Packet::SubAck {
        pkid: 21,
        reasons: vec![GRANTED_QOS_2, SHARED_NOT_SUPPORTED, 0x87],
        reason_string: Some("partly".into()),
    };
    let r5::Packet::SubAck(got) = to_v5(&suback).unwrap() else {
        panic!("not a SUBACK");
    };
    assert_eq!(got.pkid, 21);
    assert_eq!(
        got.return_codes,
        [
            r5::SubscribeReasonCode::Success(Q5::ExactlyOnce),
            r5::SubscribeReasonCode::SharedSubscriptionsNotSupported,
            r5::SubscribeReasonCode::NotAuthorized,
        ]
    );
    assert_eq!(
        got.properties.unwrap().reason_string.as_deref(),
        Some("partly")
    );

    let mut p = publish(QoS::ExactlyOnce, "a/b", 22, b"{\"x\":1}");
    p.retain = true;
    p.props = PublishProps {
        payload_utf8: Some(true),
        message_expiry: Some(30),
        topic_alias: Some(3),
        response_topic: Some("reply".into()),
        correlation_data: Some(Bytes::from_static(b"corr")),
        user: pairs(&[("h", "1"), ("h", "2")]),
        subscription_ids: vec![1, 200_000],
        content_type: Some("application/json".into()),
    };
    let r5::Packet::Publish(got) = to_v5(&Packet::Publish(p)).unwrap() else {
        panic!("not a PUBLISH");
    };
    assert_eq!(
        (got.qos, got.retain, got.dup, got.pkid),
        (Q5::ExactlyOnce, true, false, 22)
    );
    assert_eq!(&got.topic[..], b"a/b");
    assert_eq!(&got.payload[..], b"{\"x\":1}");
    assert_eq!(
        got.properties,
        Some(r5::PublishProperties {
            payload_format_indicator: Some(1),
            message_expiry_interval: Some(30),
            topic_alias: Some(3),
            response_topic: Some("reply".into()),
            correlation_data: Some(Bytes::from_static(b"corr")),
            user_properties: pairs(&[("h", "1"), ("h", "2")]),
            subscription_identifiers: vec![1, 200_000],
            content_type: Some("application/json".into()),
        })
    );

    assert_eq!(
        to_v5(&Packet::PubAck(ack(23, SUCCESS, None))).unwrap(),
        r5::Packet::PubAck(r5::PubAck::new(23, None))
    );
    assert_eq!(
        to_v5(&Packet::PubAck(ack(24, QUOTA_EXCEEDED, Some("full")))).unwrap(),
        r5::Packet::PubAck(r5::PubAck {
            pkid: 24,
            reason: r5::PubAckReason::QuotaExceeded,
            properties: Some(r5::PubAckProperties {
                reason_string: Some("full".into()),
                user_properties: Vec::new(),
            }),
        })
    );
    let r5::Packet::PubAck(got) = to_v5(&Packet::PubAck(ack(25, 0x10, None))).unwrap() else {
        panic!("not a PUBACK");
    };
    assert_eq!(got.reason, r5::PubAckReason::NoMatchingSubscribers);

    let unsuback = Packet::UnsubAck {
        pkid: 26,
        reasons: vec![SUCCESS, NO_SUBSCRIPTION_EXISTED],
        reason_string: None,
    };
    assert_eq!(
        to_v5(&unsuback).unwrap(),
        r5::Packet::UnsubAck(r5::UnsubAck {
            pkid: 26,
            reasons: vec![
                r5::UnsubAckReason::Success,
                r5::UnsubAckReason::NoSubscriptionExisted
            ],
            properties: None,
        })
    );

    let shutdown = Packet::Disconnect(Disconnect {
        reason: SERVER_SHUTTING_DOWN,
        session_expiry: None,
        reason_string: Some("maintenance".into()),
    });
    let r5::Packet::Disconnect(got) = to_v5(&shutdown).unwrap() else {
        panic!("not a DISCONNECT");
    };
    assert_eq!(
        got.reason_code,
        r5::DisconnectReasonCode::ServerShuttingDown
    );
    assert_eq!(
        got.properties.unwrap().reason_string.as_deref(),
        Some("maintenance")
    );
    let taken_over = Packet::Disconnect(Disconnect {
        reason: SESSION_TAKEN_OVER,
        session_expiry: None,
        reason_string: None,
    });
    assert_eq!(
        to_v5(&taken_over).unwrap(),
        r5::Packet::Disconnect(r5::Disconnect::new(
            r5::DisconnectReasonCode::SessionTakenOver
        ))
    );
    assert_eq!(
        to_v5(&Packet::PingResp).unwrap(),
        r5::Packet::PingResp(r5::PingResp)
    );
}

/// Where rumqttc 0.25 departs from the specification (and our codec
/// follows the specification).
#[test]
fn v5_rumqttc_discrepancies() {
    // A DISCONNECT with remaining length 0 (reason 0, no properties) is
    // valid 5.0 (3.14.2.1), and what we write for a normal disconnect;
    // rumqttc's reader refuses it ("payload required").
    let normal = Packet::Disconnect(Disconnect {
        reason: NORMAL,
        session_expiry: None,
        reason_string: None,
    });
    assert_eq!(enc(&normal, Protocol::V5), [0xE0, 0]);
    assert!(to_v5(&normal).is_err());
    // A DISCONNECT with only a reason code (remaining length 1, property
    // length omitted as 3.14.2.2 allows) fails in rumqttc too, which is
    // why we always write the property length after a reason code.
    let mut buf = BytesMut::from(&[0xE0, 1, 0x8B][..]);
    assert!(r5::Packet::read(&mut buf, None).is_err());
    assert!(matches!(
        ok(&[0xE0, 1, 0x8B], V5),
        Packet::Disconnect(Disconnect {
            reason: SERVER_SHUTTING_DOWN,
            ..
        })
    ));
}
