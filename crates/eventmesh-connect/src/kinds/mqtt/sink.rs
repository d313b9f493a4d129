//! `mqtt-sink`: publishes each event to `topic`, where `{subject}` and
//! `{type}` become the event's (`+`, `#`, NUL as `_`; missing as `_`), at
//! `qos`, with `retain`.
//!
//! *Formats.* `structured` sends the JSON event (MQTT 5 content type
//! `application/cloudevents+json`); `binary` (MQTT 5) sends `data` with the
//! attributes as user properties.
//!
//! *Acknowledgements.* `write` returns once every message is acknowledged
//! (`PUBACK`; `PUBCOMP` at QoS 2; at QoS 0 once sent). MQTT has no
//! idempotent publish: events written again after an error may reach
//! subscribers twice. An event that cannot be sent (NUL in a binary-mode
//! attribute, a topic it renders that MQTT refuses) fails as `Config`: the
//! runtime gives it back alone, retries it and dead-letters it, while the
//! others go on. One over `max_packet_size` ends the connection (the client
//! refuses it), so it fails as `Unavailable` like a lost connection and is
//! retried after the backoff. A lost connection fails the write;
//! the next one reconnects.
//!
//! *Invariants.* The event loop reports each publish's packet id in the
//! order the publishes were queued, so the n-th report belongs to the n-th
//! waiting message. A write takes the connection out while it runs and
//! drops it when it loses the connection, times out or is dropped halfway,
//! so a later write never waits on a queue out of step with its loop. When
//! the loop ends, every message still waiting fails with its error.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use eventmesh_core::CloudEvent;
use tokio::sync::oneshot;
use tokio::time::{timeout_at, Instant};

use super::client::{client, Broker, Client, Note, Out, Task};
use super::topic::{fill, topic_fault};
use super::{Format, MqttSinkConfig, Protocol, STRUCTURED};
use crate::sdk::{ConnectorError, Sink, SinkContext, SinkKind};

/// The `mqtt-sink` kind.
pub struct MqttSink;

fn format_of(c: &MqttSinkConfig) -> Format {
    let default = match c.protocol {
        Protocol::V311 => Format::Structured,
        Protocol::V5 => Format::Binary,
    };
    c.format.unwrap_or(default)
}

#[async_trait]
impl SinkKind for MqttSink {
    type Config = MqttSinkConfig;
    const NAME: &'static str = "mqtt-sink";
    const DESCRIPTION: &'static str = "Publishes events to an MQTT 3.1.1 or 5 topic (structured JSON, or MQTT 5 binary mode), waiting for the broker's acknowledgements";

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        vec![crate::sdk::Target::new(c.host.clone(), c.port)]
    }

    fn check(c: &Self::Config) -> Result<(), String> {
        c.broker("x").check()?;
        if let Some(why) = topic_fault(&fill(&c.topic, Some("x"), "x")) {
            return Err(format!("topic {:?} {why}", c.topic));
        }
        if c.qos > 2 {
            return Err(format!("qos must be 0, 1 or 2, not {}", c.qos));
        }
        if c.protocol == Protocol::V311 && format_of(c) == Format::Binary {
            return Err("format binary needs protocol 5 (3.1.1 has no user properties)".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SinkContext) -> Result<Box<dyn Sink>, ConnectorError> {
        let broker = c.broker(&ctx.connector);
        let link = Some(SinkLink::attach(&broker).await?);
        let (topic, qos, retain, format) = (c.topic.clone(), c.qos, c.retain, format_of(&c));
        Ok(Box::new(Writer {
            broker,
            topic,
            qos,
            retain,
            format,
            link,
        }))
    }
}

/// The binary-mode user properties and content type of an event.
fn attributes(e: &CloudEvent) -> (Vec<(String, String)>, Option<String>) {
    let fixed = [
        ("specversion", Some("1.0")),
        ("id", Some(&*e.id)),
        ("source", Some(&*e.source)),
    ];
    let more = [
        ("type", Some(&*e.ty)),
        ("dataschema", e.dataschema.as_deref()),
    ];
    let last = [
        ("subject", e.subject.as_deref()),
        ("time", e.time.as_deref()),
    ];
    let mut p: Vec<(String, String)> = (fixed.into_iter().chain(more).chain(last))
        .filter_map(|(k, v)| Some((k.to_string(), v?.to_string())))
        .collect();
    p.extend(e.extensions.iter().map(|(k, v)| (k.clone(), v.to_text())));
    (p, e.binary_mode_headers().1)
}

struct Writer {
    broker: Broker,
    topic: String,
    qos: u8,
    retain: bool,
    format: Format,
    link: Option<SinkLink>,
}

type Waiter = oneshot::Sender<Result<(), ConnectorError>>;

struct SinkLink {
    client: Client,
    /// Publishes handed to the loop, in order, not yet given a packet id.
    queued: Arc<Mutex<VecDeque<Waiter>>>,
    task: Task,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SinkLink {
    async fn attach(b: &Broker) -> Result<SinkLink, ConnectorError> {
        let (client, mut driver) = client(b, None, false);
        let deadline = Instant::now() + b.timeout;
        while !matches!(driver.until(b, deadline).await?, Note::ConnAck(_)) {}
        let queued: Arc<Mutex<VecDeque<Waiter>>> = Arc::default();
        let (q, b) = (queued.clone(), b.clone());
        // The loop reports each publish's packet id in the order they were
        // queued (a packet id collision only delays the report), then its
        // acknowledgement by that id.
        let task = tokio::spawn(async move {
            let mut inflight: HashMap<u16, Waiter> = HashMap::new();
            let failure = loop {
                let (pkid, result) = match driver.next(&b).await {
                    Ok(Note::Sent(pkid)) => {
                        let Some(w) = lock(&q).pop_front() else {
                            continue;
                        };
                        inflight.insert(pkid, w);
                        (pkid, (pkid == 0).then_some(Ok(())))
                    }
                    Ok(Note::Done(pkid)) => (pkid, Some(Ok(()))),
                    Ok(Note::Refused(pkid, why)) => {
                        let msg = format!("the broker refused a message: {why}");
                        let e = if why == "NotAuthorized" {
                            ConnectorError::Config(msg)
                        } else {
                            ConnectorError::Unavailable(msg)
                        };
                        (pkid, Some(Err(e)))
                    }
                    Ok(_) => continue,
                    Err(e) => break e,
                };
                let done = result.and_then(|r| Some((r, inflight.remove(&pkid)?)));
                if let Some((result, w)) = done {
                    let _ = w.send(result);
                }
            };
            let waiting: Vec<Waiter> = lock(&q).drain(..).collect();
            for w in inflight.into_values().chain(waiting) {
                let _ = w.send(Err(failure.clone()));
            }
        });
        Ok(SinkLink {
            client,
            queued,
            task: Task(task),
        })
    }
}

impl Writer {
    fn render(&self, e: &CloudEvent) -> Result<Out, ConnectorError> {
        let topic = fill(&self.topic, e.subject.as_deref(), &e.ty);
        let bad = |why: String| ConnectorError::config(format!("event {}: {why}", e.id));
        if let Some(why) = topic_fault(&topic) {
            return Err(bad(format!("topic {topic:?} {why}")));
        }
        let out = match self.format {
            Format::Structured => Out {
                topic,
                payload: Bytes::from(e.to_json()),
                content_type: (self.broker.protocol == Protocol::V5).then(|| STRUCTURED.into()),
                properties: Vec::new(),
            },
            Format::Binary => {
                let (properties, content_type) = attributes(e);
                if properties.iter().any(|(_, v)| v.contains('\0')) {
                    return Err(bad("NUL in an attribute; use format structured".into()));
                }
                let payload = Bytes::copy_from_slice(e.data.as_bytes());
                Out {
                    topic,
                    payload,
                    content_type,
                    properties,
                }
            }
        };
        let props: usize = out
            .properties
            .iter()
            .map(|(k, v)| k.len() + v.len() + 5)
            .sum();
        let size = 16 + out.topic.len() + out.payload.len() + props;
        let size = size + out.content_type.as_ref().map_or(0, |c| c.len() + 3);
        if size > self.broker.max_packet_size as usize {
            let max = self.broker.max_packet_size;
            return Err(bad(format!(
                "{size} bytes as MQTT, over max_packet_size {max}"
            )));
        }
        Ok(out)
    }
}

#[async_trait]
impl Sink for Writer {
    async fn write(&mut self, events: &[CloudEvent]) -> Result<(), ConnectorError> {
        let outs = events
            .iter()
            .map(|e| self.render(e))
            .collect::<Result<Vec<_>, _>>()?;
        if outs.is_empty() {
            return Ok(());
        }
        // Taken out while the write runs: a write dropped halfway leaves no
        // link whose queue is out of step with its loop.
        let link = match self.link.take() {
            Some(l) if !l.task.0.is_finished() => l,
            _ => SinkLink::attach(&self.broker).await?,
        };
        let lost = || ConnectorError::unavailable("mqtt: the connection ended");
        let mut acks = Vec::with_capacity(outs.len());
        for out in outs {
            let (tx, rx) = oneshot::channel();
            lock(&link.queued).push_back(tx);
            if !link.client.publish(out, self.qos, self.retain).await {
                return Err(lost());
            }
            acks.push(rx);
        }
        let deadline = Instant::now() + self.broker.timeout;
        let mut first_error = None;
        for rx in acks {
            match timeout_at(deadline, rx).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    first_error.get_or_insert(e);
                }
                Ok(Err(_)) => return Err(lost()),
                Err(_) => return Err(self.broker.unavailable("no acknowledgement in time")),
            }
        }
        if !link.task.0.is_finished() {
            self.link = Some(link);
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::mqtt::client::Msg;
    use crate::kinds::mqtt::source::carried_event;
    use crate::sdk;
    use eventmesh_core::event::{Data, ExtValue};

    #[test]
    fn binary_attributes_round_trip() {
        let mut e = sdk::event("c", "i1", "t", Data::Json(Bytes::from_static(b"[1]")));
        e.subject = Some("s".into());
        e.set_extension("n", ExtValue::Int(3));
        let (properties, content_type) = attributes(&e);
        let m = Msg {
            properties,
            content_type,
            topic: "x".into(),
            payload: Bytes::from_static(b"[1]"),
            ..Msg::default()
        };
        let mut back = carried_event(&m).expect("an event");
        assert_eq!(back.extension("n"), Some(&ExtValue::Str("3".into())));
        back.extensions = e.extensions.clone();
        assert_eq!(back, e);
    }
}
