//! A QoS 1 delivery the device never acknowledged survives a kill -9 of
//! the instance: the resumed session gets it again. The device here is a
//! plain socket speaking MQTT 5 through the listener's codec, so that it
//! can hold a PUBLISH without answering it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use eventmesh_mqtt::codec::{self, Connect, Packet, Protocol, QoS, Subscribe, SubscribeFilter};

use super::*;

struct Device {
    sock: TcpStream,
    buf: BytesMut,
}

impl Device {
    /// Connects client `id` with a persistent session (expiry 300 s);
    /// whether the session was present.
    fn connect(port: u16, id: &str) -> (Device, bool) {
        let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut d = Device {
            sock,
            buf: BytesMut::new(),
        };
        d.send(&Packet::Connect(Box::new(Connect {
            clean_start: false,
            session_expiry: 300,
            receive_maximum: 10,
            ..Connect::new(Protocol::V5, id)
        })));
        match d.next() {
            Packet::ConnAck {
                session_present,
                reason: 0,
                ..
            } => (d, session_present),
            other => panic!("not accepted: {other:?}"),
        }
    }

    fn send(&mut self, p: &Packet) {
        let mut out = BytesMut::new();
        codec::encode(p, Protocol::V5, &mut out);
        self.sock.write_all(&out).unwrap();
    }

    fn next(&mut self) -> Packet {
        loop {
            if let Some(p) = codec::decode(&mut self.buf, Some(Protocol::V5), 1 << 20).unwrap() {
                return p;
            }
            let mut chunk = [0u8; 4096];
            let n = self.sock.read(&mut chunk).expect("a packet within 20 s");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next PUBLISH: its packet id and payload.
    fn publish(&mut self) -> (u16, String) {
        match self.next() {
            Packet::Publish(p) => (p.pkid, String::from_utf8(p.payload.to_vec()).unwrap()),
            other => panic!("expected a PUBLISH: {other:?}"),
        }
    }
}

#[test]
fn an_unacknowledged_qos_1_delivery_survives_a_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let mut s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port();
    let (mut d, present) = Device::connect(port, "holder");
    assert!(!present);
    d.send(&Packet::Subscribe(Subscribe {
        pkid: 1,
        id: None,
        filters: vec![SubscribeFilter {
            filter: "held/#".into(),
            qos: QoS::AtLeastOnce,
            no_local: false,
            retain_as_published: false,
            retain_handling: 0,
        }],
        user: Vec::new(),
    }));
    assert!(matches!(d.next(), Packet::SubAck { ref reasons, .. } if reasons == &[1]));
    let c = client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut ev = event("held-1");
    ev["data"] = json!({"n": 1});
    rt.block_on(publish(&c, &s, "held.x", &ev));
    let (_, payload) = d.publish();
    assert_eq!(payload, r#"{"n":1}"#);
    // Held, never acknowledged; the instance dies.
    s.kill9();
    drop(d);
    let _s = s.restart_on_same_ports_with(&[format!("eventmesh.server.mqtt.port={port}")]);
    let (mut d, present) = Device::connect(port, "holder");
    assert!(present, "the session survived");
    let (pkid, payload) = d.publish();
    assert_eq!(payload, r#"{"n":1}"#, "delivered again");
    d.send(&Packet::PubAck(codec::Ack {
        pkid,
        reason: 0,
        reason_string: None,
    }));
}
