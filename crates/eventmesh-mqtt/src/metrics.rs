//! The listener's counters, looked up once when the broker is made so that
//! a connection counts each packet with one atomic add.

use eventmesh_runtime::Metrics;
use prometheus_client::metrics::counter::Counter;

use crate::codec::{Packet, QoS, PACKET_NAMES};

pub(crate) struct Counters {
    packets_in: Vec<Counter>,
    packets_out: Vec<Counter>,
    messages_in: [Counter; 3],
    messages_out: [Counter; 3],
    metrics: std::sync::Arc<Metrics>,
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Counters {
    pub(crate) fn new(metrics: std::sync::Arc<Metrics>) -> Counters {
        let packets = |direction: &str| -> Vec<Counter> {
            PACKET_NAMES
                .iter()
                .map(|name| {
                    metrics
                        .mqtt_packets
                        .get_or_create(&labels(&[("direction", direction), ("type", name)]))
                        .clone()
                })
                .collect()
        };
        let messages = |direction: &str| -> [Counter; 3] {
            ["0", "1", "2"].map(|qos| {
                metrics
                    .mqtt_messages
                    .get_or_create(&labels(&[("direction", direction), ("qos", qos)]))
                    .clone()
            })
        };
        Counters {
            packets_in: packets("in"),
            packets_out: packets("out"),
            messages_in: messages("in"),
            messages_out: messages("out"),
            metrics: metrics.clone(),
        }
    }

    fn count(packets: &[Counter], messages: &[Counter; 3], p: &Packet) {
        packets[usize::from(p.kind())].inc();
        if let Packet::Publish(p) = p {
            messages[p.qos as usize].inc();
        }
    }

    /// A CONNECT (read before the connection has its state).
    pub(crate) fn connect_received(&self) {
        self.packets_in[1].inc();
    }

    /// A packet the client sent.
    pub(crate) fn received(&self, p: &Packet) {
        Self::count(&self.packets_in, &self.messages_in, p);
    }

    /// A packet sent to the client, and the refusals it carries.
    pub(crate) fn sent(&self, p: &Packet) {
        Self::count(&self.packets_out, &self.messages_out, p);
        for code in p.refusals().iter().filter(|c| **c >= 0x80) {
            let packet = PACKET_NAMES[usize::from(p.kind())];
            self.metrics
                .mqtt_refusals
                .get_or_create(&labels(&[
                    ("packet", packet),
                    ("reason", &format!("0x{code:02X}")),
                ]))
                .inc();
        }
    }
}

// QoS is a u8 enum: its value indexes the per-QoS counters.
const _: () = assert!(QoS::ExactlyOnce as usize == 2);
