//! `encode` then `decode` gives the packet back: as it is for 5.0, with
//! the 5.0-only parts cleared for 3.1.1.

use super::*;
use crate::codec::reason::*;

/// What a 3.1.1 round trip gives back: `None` for a packet 3.1.1 lacks.
fn for_v311(packet: &Packet) -> Option<Packet> {
    let cleared = match packet.clone() {
        Packet::Connect(mut c) => {
            let d = connect(Protocol::V311, "");
            c.protocol = Protocol::V311;
            c.session_expiry = d.session_expiry;
            c.receive_maximum = d.receive_maximum;
            c.max_packet_size = d.max_packet_size;
            c.topic_alias_max = d.topic_alias_max;
            c.request_response_info = d.request_response_info;
            c.request_problem_info = d.request_problem_info;
            c.auth_method = None;
            c.auth_data = None;
            c.user.clear();
            if c.username.is_none() {
                c.password = None;
            }
            if let Some(w) = &mut c.will {
                w.delay = 0;
                w.props = PublishProps::default();
            }
            Packet::Connect(c)
        }
        Packet::ConnAck {
            session_present,
            reason,
            ..
        } => Packet::ConnAck {
            session_present,
            reason: match reason {
                SUCCESS | UNSUPPORTED_PROTOCOL_VERSION | CLIENT_ID_INVALID => reason,
                BAD_USERNAME_PASSWORD | NOT_AUTHORIZED => reason,
                BANNED | BAD_AUTH_METHOD => NOT_AUTHORIZED,
                _ => SERVER_UNAVAILABLE,
            },
            props: Box::default(),
        },
        Packet::Publish(mut p) => {
            p.props = PublishProps::default();
            Packet::Publish(p)
        }
        Packet::PubAck(a) => Packet::PubAck(ack(a.pkid, 0, None)),
        Packet::PubRec(a) => Packet::PubRec(ack(a.pkid, 0, None)),
        Packet::PubRel(a) => Packet::PubRel(ack(a.pkid, 0, None)),
        Packet::PubComp(a) => Packet::PubComp(ack(a.pkid, 0, None)),
        Packet::Subscribe(mut s) => {
            s.id = None;
            s.user.clear();
            for f in &mut s.filters {
                *f = filter(&f.filter, f.qos);
            }
            Packet::Subscribe(s)
        }
        Packet::SubAck { pkid, reasons, .. } => Packet::SubAck {
            pkid,
            reasons: reasons
                .into_iter()
                .map(|c| if c <= 2 { c } else { 0x80 })
                .collect(),
            reason_string: None,
        },
        Packet::Unsubscribe(mut u) => {
            u.user.clear();
            Packet::Unsubscribe(u)
        }
        Packet::UnsubAck { pkid, .. } => Packet::UnsubAck {
            pkid,
            reasons: Vec::new(),
            reason_string: None,
        },
        Packet::Disconnect(_) => Packet::Disconnect(Disconnect {
            reason: 0,
            session_expiry: None,
            reason_string: None,
        }),
        Packet::Auth { .. } => return None,
        other => other,
    };
    Some(cleared)
}

fn round_trip(packet: &Packet, protocol: Protocol) {
    let expected = match protocol {
        Protocol::V5 => match packet.clone() {
            Packet::Connect(mut c) => {
                c.protocol = Protocol::V5;
                Some(Packet::Connect(c))
            }
            other => Some(other),
        },
        Protocol::V311 => for_v311(packet),
    };
    let Some(expected) = expected else {
        assert_eq!(encode(packet, protocol, &mut BytesMut::new()), 0);
        return;
    };
    let bytes = enc(packet, protocol);
    let decoded = match packet {
        Packet::Connect(_) => {
            let before = ok(&bytes, None);
            assert_eq!(ok(&bytes, Some(protocol)), before);
            before
        }
        _ => ok(&bytes, Some(protocol)),
    };
    assert_eq!(decoded, expected, "{protocol:?} {bytes:02x?}");
    assert_eq!(enc(&decoded, protocol), bytes, "re-encoding {protocol:?}");
}

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bool(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn maybe<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if self.bool() {
            Some(f(self))
        } else {
            None
        }
    }

    fn text(&mut self) -> String {
        let parts = ["a", "b", "dev", "é", "日本", "-", "_", "$SYS", " ", "~"];
        (0..self.below(5)).map(|_| self.pick(&parts)).collect()
    }

    /// A topic name: at least one character, no wildcards.
    fn topic(&mut self) -> String {
        let levels = ["a", "b", "", "dév", "sensors", "$SYS", "x y"];
        let mut t: Vec<&str> = (0..=self.below(4)).map(|_| self.pick(&levels)).collect();
        if t.concat().is_empty() {
            t.push("t");
        }
        t.join("/")
    }

    fn filter(&mut self) -> String {
        let levels = ["a", "+", "#", "", "b", "$share"];
        (0..=self.below(4))
            .map(|_| self.pick(&levels))
            .collect::<Vec<_>>()
            .join("/")
    }

    fn bytes(&mut self) -> Bytes {
        let n = self.pick(&[0, 1, 5, 130, 300]);
        Bytes::from((0..n).map(|_| self.next() as u8).collect::<Vec<_>>())
    }

    fn qos(&mut self) -> QoS {
        self.pick(&[QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce])
    }

    fn pkid(&mut self) -> u16 {
        1 + self.below(65535) as u16
    }

    fn user(&mut self) -> Vec<(String, String)> {
        (0..self.below(3))
            .map(|_| (self.text(), self.text()))
            .collect()
    }

    fn publish_props(&mut self, payload_is_text: bool) -> PublishProps {
        PublishProps {
            payload_utf8: self.maybe(|_| false).or(payload_is_text.then_some(true)),
            message_expiry: self.maybe(|r| r.next() as u32),
            topic_alias: None,
            response_topic: self.maybe(Rng::topic),
            correlation_data: self.maybe(Rng::bytes),
            user: self.user(),
            subscription_ids: Vec::new(),
            content_type: self.maybe(Rng::text),
        }
    }

    /// A payload, and whether it is text.
    fn payload(&mut self) -> (Bytes, bool) {
        if self.bool() {
            (Bytes::from(self.text()), true)
        } else {
            (self.bytes(), false)
        }
    }
}

fn random_packet(r: &mut Rng) -> Packet {
    match r.below(14) {
        0 => {
            let mut c = connect(Protocol::V5, &r.text());
            c.clean_start = r.bool();
            c.keep_alive = r.next() as u16;
            c.username = r.maybe(Rng::text);
            c.password = r.maybe(Rng::bytes);
            c.will = r.maybe(|r| {
                let (payload, text) = r.payload();
                Will {
                    topic: r.topic(),
                    payload,
                    qos: r.qos(),
                    retain: r.bool(),
                    delay: r.pick(&[0, 1, u32::MAX]),
                    props: r.publish_props(text),
                }
            });
            c.session_expiry = r.pick(&[0, 30, u32::MAX]);
            c.receive_maximum = r.pick(&[1, 100, 65535]);
            c.max_packet_size = r.maybe(|r| r.pick(&[1, 1024, u32::MAX]));
            c.topic_alias_max = r.pick(&[0, 10]);
            c.request_response_info = r.bool();
            c.request_problem_info = r.bool();
            c.auth_method = r.maybe(Rng::text);
            if c.auth_method.is_some() {
                c.auth_data = r.maybe(Rng::bytes);
            }
            c.user = r.user();
            Packet::Connect(Box::new(c))
        }
        1 => Packet::ConnAck {
            session_present: r.bool(),
            reason: r.pick(&[
                0x00, 0x80, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x9F,
            ]),
            props: Box::new(ConnAckProps {
                session_expiry: r.maybe(|r| r.next() as u32),
                receive_maximum: r.maybe(|r| r.pick(&[1, 65535])),
                maximum_qos: r.maybe(|r| r.pick(&[0, 1])),
                retain_available: r.maybe(Rng::bool),
                maximum_packet_size: r.maybe(|r| r.pick(&[1, 99999])),
                assigned_client_id: r.maybe(Rng::text),
                topic_alias_max: r.maybe(|r| r.next() as u16),
                reason_string: r.maybe(Rng::text),
                wildcard_available: r.maybe(Rng::bool),
                subscription_ids_available: r.maybe(Rng::bool),
                shared_available: r.maybe(Rng::bool),
                server_keep_alive: r.maybe(|r| r.next() as u16),
                user: r.user(),
            }),
        },
        2 => {
            let qos = r.qos();
            let (payload, text) = r.payload();
            let mut props = r.publish_props(text);
            props.topic_alias = r.maybe(|r| r.pick(&[1, 65535]));
            Packet::Publish(Publish {
                dup: qos != QoS::AtMostOnce && r.bool(),
                qos,
                retain: r.bool(),
                topic: r.topic(),
                pkid: if qos == QoS::AtMostOnce { 0 } else { r.pkid() },
                payload,
                props,
            })
        }
        3 => Packet::PubAck(ack(r.pkid(), r.pick(&[0, 0x10, 0x80, 0x91, 0x99]), None)),
        4 => {
            let reason_string = r.maybe(Rng::text);
            Packet::PubRec(ack(r.pkid(), r.pick(&[0, 0x83]), reason_string.as_deref()))
        }
        5 => Packet::PubRel(ack(r.pkid(), r.pick(&[0, 0x92]), None)),
        6 => {
            let reason_string = r.maybe(Rng::text);
            Packet::PubComp(ack(r.pkid(), r.pick(&[0, 0x92]), reason_string.as_deref()))
        }
        7 => Packet::Subscribe(Subscribe {
            pkid: r.pkid(),
            id: r.maybe(|r| r.pick(&[1, 127, 128, 16_384, 268_435_455])),
            filters: (0..=r.below(3))
                .map(|_| SubscribeFilter {
                    filter: r.filter(),
                    qos: r.qos(),
                    no_local: r.bool(),
                    retain_as_published: r.bool(),
                    retain_handling: r.below(3) as u8,
                })
                .collect(),
            user: r.user(),
        }),
        8 => Packet::SubAck {
            pkid: r.pkid(),
            reasons: (0..=r.below(4))
                .map(|_| r.pick(&[0, 1, 2, 0x80, 0x87, 0x8F, 0xA1]))
                .collect(),
            reason_string: r.maybe(Rng::text),
        },
        9 => Packet::Unsubscribe(Unsubscribe {
            pkid: r.pkid(),
            filters: (0..=r.below(3)).map(|_| r.filter()).collect(),
            user: r.user(),
        }),
        10 => Packet::UnsubAck {
            pkid: r.pkid(),
            reasons: (0..=r.below(4))
                .map(|_| r.pick(&[0, 0x11, 0x80, 0x8F]))
                .collect(),
            reason_string: r.maybe(Rng::text),
        },
        11 => {
            if r.bool() {
                Packet::PingReq
            } else {
                Packet::PingResp
            }
        }
        12 => Packet::Disconnect(Disconnect {
            reason: r.pick(&[0, 0x04, 0x81, 0x8B, 0x8E, 0x98]),
            session_expiry: r.maybe(|r| r.next() as u32),
            reason_string: r.maybe(Rng::text),
        }),
        _ => {
            let method = r.maybe(Rng::text);
            let data = if method.is_some() {
                r.maybe(Rng::bytes)
            } else {
                None
            };
            Packet::Auth {
                reason: r.pick(&[0, 0x18, 0x19]),
                method,
                data,
            }
        }
    }
}

#[test]
fn random_packets_round_trip() {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let mut kinds = std::collections::HashSet::new();
    for _ in 0..3000 {
        let packet = random_packet(&mut r);
        kinds.insert(std::mem::discriminant(&packet));
        round_trip(&packet, Protocol::V5);
        round_trip(&packet, Protocol::V311);
    }
    assert_eq!(kinds.len(), 15, "every kind of packet");
}

#[test]
fn chosen_packets_round_trip() {
    let mut alias_only = publish(QoS::AtLeastOnce, "", 3, b"x");
    alias_only.props.topic_alias = Some(9);
    let mut text = publish(QoS::AtMostOnce, "t", 0, "é".as_bytes());
    text.props.payload_utf8 = Some(true);
    let packets = [
        Packet::Connect(Box::new(connect(Protocol::V5, ""))),
        Packet::Connect(Box::new(connect(Protocol::V311, "dev"))),
        Packet::Publish(text),
        Packet::PubAck(ack(1, 0, None)),
        Packet::PubAck(ack(65535, NO_MATCHING_SUBSCRIBERS, Some(""))),
        Packet::Disconnect(Disconnect {
            reason: 0,
            session_expiry: Some(0),
            reason_string: None,
        }),
        Packet::Auth {
            reason: 0,
            method: None,
            data: None,
        },
        Packet::PingReq,
    ];
    for packet in &packets {
        round_trip(packet, Protocol::V5);
        round_trip(packet, Protocol::V311);
    }
    // Aliases exist in 5.0 only.
    round_trip(&Packet::Publish(alias_only), Protocol::V5);
}

#[test]
fn server_publish_with_subscription_ids() {
    // The server sends them; a client sending them is refused.
    let mut p = publish(QoS::AtMostOnce, "t", 0, b"x");
    p.props.subscription_ids = vec![1, 128, 268_435_455];
    let bytes = enc(&Packet::Publish(p), Protocol::V5);
    assert_eq!(
        bytes,
        [0x30, 15, 0, 1, b't', 10, 0x0B, 1, 0x0B, 0x80, 1, 0x0B, 0xFF, 0xFF, 0xFF, 0x7F, b'x'][..]
    );
    assert_eq!(fails(&bytes, V5), PROTOCOL_ERROR);
}
