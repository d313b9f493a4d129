//! `mqtt-source`: subscribes to `topics` at QoS 1 in a persistent session
//! (clean session/start off, MQTT 5 session expiry `session_expiry_secs`)
//! with manual acknowledgements: a message is `PUBACK`ed only in
//! [`Source::commit`], once durable in the mesh, so a crash before that
//! leaves it in the broker's session, which sends it again to the next
//! connection with the same `client_id`. A lost connection fails the poll;
//! the next poll reconnects as a reopen would.
//!
//! *Positions* (`{"session": id, "seq": n, "topics": [..]}`). MQTT has no
//! replayable position: the broker's session is what resumes. A position
//! numbers the messages of one session. Reconnecting to a session the
//! broker kept, numbering restarts after the committed `seq`, and the broker
//! resends the unacknowledged messages first, in order, so each gets its
//! number again. When the broker has no session (first start, expiry, a
//! broker that lost it), a new session id starts at 0, so no number is
//! reused. `topics` are the session's subscriptions: on a kept session only
//! the difference to the configured filters is (un)subscribed, so a reopen
//! does not make the broker resend retained messages.
//!
//! *Event ids.* A packet id is reused once acknowledged and identifies
//! nothing. A message that is a CloudEvent keeps its `id` and `source`; any
//! other gets `<session>-<seq>-<digest>` (12 hex digits of SHA-256 over
//! topic and payload), the same when redelivered, so the mesh's publish
//! deduplication drops the copy. Should numbering shift (the broker dropped
//! an unacknowledged message, a `PUBACK` was lost in a crash), the digest
//! makes a shifted id differ from the one already used: a duplicate, not a
//! message dropped as one.
//!
//! *Mapping* (CloudEvents MQTT binding, with `cloudevents` on): content type
//! `application/cloudevents+json`, or no content type and a payload that
//! parses as a JSON event (structured mode, the only one in 3.1.1), or an
//! MQTT 5 `specversion` user property (binary mode: attributes as user
//! properties under their own names, `datacontenttype` the content type,
//! the payload `data`) is the event it carries. Any other message becomes
//! an event of `type` with the payload as data, typed by an MQTT 5 content
//! type when there is one. The subject is the topic unless the event has one.
//!
//! *Invariants.* A message is acknowledged only once a committed position
//! of the current session has reached its number, and acknowledgements go
//! out in the order the messages came; `commit` returns once they are on
//! the wire (or after `timeout_secs`). A position of a session the broker
//! no longer has acknowledges nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use eventmesh_core::event::{percent_encode, valid_extension_name};
use eventmesh_core::CloudEvent;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::client::{client, Broker, Client, Msg, Note, Task};
use super::topic::filter_fault;
use super::{MqttSourceConfig, STRUCTURED};
use crate::sdk::{self, ConnectorError, Position, Record, Source, SourceContext, SourceKind};

/// The most messages one poll returns.
const BATCH: usize = 1000;

/// The `mqtt-source` kind.
pub struct MqttSource;

#[async_trait]
impl SourceKind for MqttSource {
    type Config = MqttSourceConfig;
    const NAME: &'static str = "mqtt-source";
    const DESCRIPTION: &'static str = "Subscribes to MQTT 3.1.1 or 5 topic filters in a persistent session, acknowledging each message once it is durable in the mesh";

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        vec![crate::sdk::Target::new(c.host.clone(), c.port)]
    }

    fn check(c: &Self::Config) -> Result<(), String> {
        c.broker("x").check()?;
        if c.topics.is_empty() {
            return Err("topics must name at least one topic filter".into());
        }
        for (i, f) in c.topics.iter().enumerate() {
            if let Some(why) = filter_fault(f) {
                return Err(format!("topics[{i}] {f:?} is not a topic filter: it {why}"));
            }
        }
        if c.ty.trim().is_empty() {
            return Err("type must not be empty".into());
        }
        Ok(())
    }

    async fn open(c: Self::Config, ctx: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        let mut topics = c.topics.clone();
        topics.sort();
        topics.dedup();
        let mark = ctx.position.as_ref().and_then(read_position);
        let mut reader = Reader {
            broker: c.broker(&ctx.connector),
            connector: ctx.connector,
            topics,
            ty: c.ty,
            cloudevents: c.cloudevents,
            expiry: c.session_expiry_secs,
            known: mark.is_some(),
            session: String::new(),
            seq: 0,
            committed: 0,
            subscribed: None,
            unacked: VecDeque::new(),
            link: None,
            failure: None,
        };
        if let Some(m) = mark {
            (reader.session, reader.committed, reader.subscribed) = (m.session, m.seq, m.topics);
        }
        reader.attach().await?;
        Ok(Box::new(reader))
    }
}

/// A position read back.
#[derive(Debug, PartialEq)]
struct Mark {
    session: String,
    seq: u64,
    topics: Option<Vec<String>>,
}

fn read_position(p: &Position) -> Option<Mark> {
    Some(Mark {
        session: p.get("session")?.as_str()?.to_string(),
        seq: p.get("seq")?.as_u64()?,
        topics: p
            .get("topics")
            .and_then(|t| serde_json::from_value(t.clone()).ok()),
    })
}

fn new_session(connector: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let mut h = Sha256::new();
    h.update(connector.as_bytes());
    h.update(now.map(|d| d.as_nanos()).unwrap_or_default().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(N.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hex::encode(&h.finalize()[..6])
}

/// The id of a message that is not a CloudEvent.
fn message_id(session: &str, seq: u64, m: &Msg) -> String {
    let digest = Sha256::new()
        .chain_update(&m.topic)
        .chain_update([0])
        .chain_update(&m.payload);
    format!("{session}-{seq}-{}", hex::encode(&digest.finalize()[..6]))
}

struct Reader {
    broker: Broker,
    connector: String,
    topics: Vec<String>,
    ty: String,
    cloudevents: bool,
    expiry: u32,
    /// Whether `session` names a session this source had.
    known: bool,
    session: String,
    /// The last number handed out, and the last committed.
    seq: u64,
    committed: u64,
    /// The filters the broker's session is subscribed to, when known.
    subscribed: Option<Vec<String>>,
    /// `(seq, qos, packet id)` of messages returned and not acknowledged.
    unacked: VecDeque<(u64, u8, u16)>,
    link: Option<SourceLink>,
    /// A connection failure found behind the last batch.
    failure: Option<ConnectorError>,
}

struct SourceLink {
    client: Client,
    rx: mpsc::UnboundedReceiver<Result<Msg, ConnectorError>>,
    /// How many acknowledgements the loop has sent, and we asked for.
    acks_sent: watch::Receiver<u64>,
    acks_asked: u64,
    _task: Task,
}

impl Reader {
    /// Connects, brings the subscriptions in line and starts the loop.
    async fn attach(&mut self) -> Result<(), ConnectorError> {
        let b = self.broker.clone();
        let deadline = Instant::now() + b.timeout;
        let (client, mut driver) = client(&b, Some(self.expiry), true);
        let kept = loop {
            if let Note::ConnAck(present) = driver.until(&b, deadline).await? {
                break present;
            }
        };
        if kept && self.known {
            self.seq = self.committed;
        } else {
            self.session = new_session(&self.connector);
            (self.seq, self.committed, self.subscribed, self.known) = (0, 0, None, true);
        }
        self.unacked.clear();
        let old = self.subscribed.clone().unwrap_or_default();
        let add: Vec<String> = self
            .topics
            .iter()
            .filter(|t| !old.contains(t))
            .cloned()
            .collect();
        let remove: Vec<&String> = old.iter().filter(|t| !self.topics.contains(t)).collect();
        let ended = || ConnectorError::unavailable("mqtt: the event loop ended");
        if !add.is_empty() && !client.subscribe(&add).await {
            return Err(ended());
        }
        for f in &remove {
            if !client.unsubscribe(f).await {
                return Err(ended());
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut waiting = remove.len() + usize::from(!add.is_empty());
        while waiting > 0 {
            match driver.until(&b, deadline).await? {
                Note::Message(m) => {
                    let _ = tx.send(Ok(m));
                }
                Note::SubAck(Some(why)) => {
                    let msg = format!("the broker refused to subscribe to {add:?}: {why}");
                    return Err(ConnectorError::Config(msg));
                }
                Note::SubAck(None) | Note::UnsubAck => waiting -= 1,
                _ => {}
            }
        }
        self.subscribed = Some(self.topics.clone());
        let (acks_tx, acks_sent) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            loop {
                match driver.next(&b).await {
                    Ok(Note::Message(m)) => {
                        if tx.send(Ok(m)).is_err() {
                            return;
                        }
                    }
                    Ok(Note::AckSent) => acks_tx.send_modify(|n| *n += 1),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        let _task = Task(task);
        self.link = Some(SourceLink {
            client,
            rx,
            acks_sent,
            acks_asked: 0,
            _task,
        });
        Ok(())
    }

    fn record(&mut self, m: Msg) -> Record {
        self.seq += 1;
        let seq = self.seq;
        let carried = if self.cloudevents {
            carried_event(&m)
        } else {
            None
        };
        let mut event = carried.unwrap_or_else(|| {
            let id = message_id(&self.session, seq, &m);
            plain_event(&m, &self.connector, &self.ty, id)
        });
        if event.subject.is_none() {
            event.subject = Some(m.topic.clone());
        }
        if m.qos > 0 {
            self.unacked.push_back((seq, m.qos, m.pkid));
        }
        let position = json!({"session": self.session, "seq": seq, "topics": self.topics});
        Record {
            event,
            position,
            topic: None,
        }
    }
}

#[async_trait]
impl Source for Reader {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        if let Some(e) = self.failure.take() {
            self.link = None;
            return Err(e);
        }
        if self.link.is_none() {
            self.attach().await?;
        }
        let Some(link) = self.link.as_mut() else {
            return Ok(Vec::new());
        };
        let first = match tokio::time::timeout(Duration::from_secs(1), link.rx.recv()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(m))) => m,
            Ok(failed) => {
                self.link = None;
                let ended = || ConnectorError::unavailable("mqtt: the connection ended");
                return Err(failed.and_then(Result::err).unwrap_or_else(ended));
            }
        };
        let mut msgs = vec![first];
        while msgs.len() < BATCH {
            match link.rx.try_recv() {
                Ok(Ok(m)) => msgs.push(m),
                Ok(Err(e)) => {
                    self.failure = Some(e);
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(msgs.into_iter().map(|m| self.record(m)).collect())
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let Some(mark) = read_position(position) else {
            let msg = format!("not an mqtt-source position: {position}");
            return Err(ConnectorError::Config(msg));
        };
        // A position of a session the broker no longer has acks nothing.
        if mark.session != self.session {
            return Ok(());
        }
        self.committed = self.committed.max(mark.seq);
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        while let Some(&(seq, qos, pkid)) = self.unacked.front() {
            if seq > self.committed || !link.client.ack(qos, pkid).await {
                break;
            }
            self.unacked.pop_front();
            link.acks_asked += 1;
        }
        // Wait until the acknowledgements are on the wire, so that a source
        // dropped right after a commit does not get them again.
        let (target, mut sent) = (link.acks_asked, link.acks_sent.clone());
        let _ = tokio::time::timeout(self.broker.timeout, sent.wait_for(|n| *n >= target)).await;
        Ok(())
    }
}

/// The CloudEvent a message carries, if it is one (see the module docs).
pub(super) fn carried_event(m: &Msg) -> Option<CloudEvent> {
    let ct = m
        .content_type
        .as_deref()
        .map(|c| c.trim().to_ascii_lowercase());
    let structured = || CloudEvent::from_json_slice(&m.payload).ok();
    match ct.as_deref() {
        // Another event format (`+avro`...) is not read: the payload is data.
        Some(c) if c.starts_with("application/cloudevents") => {
            let essence = c.split(';').next().unwrap_or_default().trim();
            (essence == STRUCTURED).then(structured).flatten()
        }
        _ if m.properties.iter().any(|(k, _)| k == "specversion") => {
            let mut ct = m.content_type.clone();
            let mut headers = Vec::new();
            for (k, v) in &m.properties {
                if k == "datacontenttype" {
                    ct = ct.or_else(|| Some(v.clone()));
                } else if valid_extension_name(k) {
                    headers.push((format!("ce-{k}"), percent_encode(v)));
                }
            }
            let headers = headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            CloudEvent::from_binary_mode(headers, ct.as_deref(), m.payload.clone()).ok()
        }
        None if m.payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
            && m.payload.windows(13).any(|w| w == b"\"specversion\"") =>
        {
            structured()
        }
        _ => None,
    }
}

/// A message that is not a CloudEvent, as a new event: its data typed by
/// the content type when there is a valid one, else as `data_of` reads it.
fn plain_event(m: &Msg, connector: &str, ty: &str, id: String) -> CloudEvent {
    let e = sdk::event(connector, id, ty, sdk::data_of(&m.payload));
    let Some(ct) = m.content_type.as_deref() else {
        return e;
    };
    let (id, source, ty) = (
        percent_encode(&e.id),
        percent_encode(&e.source),
        percent_encode(ty),
    );
    let headers = [
        ("ce-specversion", "1.0"),
        ("ce-id", &*id),
        ("ce-source", &source),
        ("ce-type", &ty),
    ];
    CloudEvent::from_binary_mode(headers, Some(ct), m.payload.clone()).unwrap_or(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use eventmesh_core::event::{Data, ExtValue};

    fn msg(topic: &str, payload: &[u8], content_type: Option<&str>) -> Msg {
        let content_type = content_type.map(str::to_string);
        let payload = Bytes::copy_from_slice(payload);
        Msg {
            topic: topic.into(),
            payload,
            qos: 1,
            pkid: 7,
            content_type,
            ..Msg::default()
        }
    }

    #[test]
    fn plain_messages_get_ids_from_session_number_and_content() {
        let m = msg("s/1", br#"{"t":21.5}"#, None);
        let id = message_id("abc", 4, &m);
        assert!(
            id.starts_with("abc-4-") && id.len() == "abc-4-".len() + 12,
            "{id}"
        );
        assert_ne!(
            id,
            message_id("abc", 4, &msg("s/2", br#"{"t":21.5}"#, None))
        );
        assert_ne!(id, message_id("abc", 5, &m));
        let e = plain_event(&m, "c", "mqtt.message", id.clone());
        assert_eq!(
            (e.id.as_str(), e.source.as_str()),
            (id.as_str(), "/connectors/c")
        );
        assert_eq!(e.data, Data::Json(Bytes::from_static(br#"{"t":21.5}"#)));
        let e = plain_event(&msg("s", b"123", Some("text/plain")), "c", "t", id.clone());
        assert_eq!(
            (e.data, e.datacontenttype),
            (Data::Text("123".into()), Some("text/plain".into()))
        );
        let e = plain_event(&msg("s", b"x", Some("not a type")), "c", "t", id);
        assert_eq!(
            (e.data, e.datacontenttype),
            (Data::Text("x".into()), Some("text/plain".into()))
        );
    }

    #[test]
    fn cloudevents_are_recognised_in_both_modes() {
        let ce = br#"{"specversion":"1.0","id":"e1","source":"/dev","type":"t","data":{"a":1}}"#;
        let got = carried_event(&msg("x", ce, None)).expect("structured");
        assert_eq!((got.id.as_str(), got.source.as_str()), ("e1", "/dev"));
        let mut bin = msg("x", b"hello", Some("text/plain"));
        let props = [
            ("specversion", "1.0"),
            ("id", "e2"),
            ("source", "/d"),
            ("type", "t"),
        ];
        let props = props
            .into_iter()
            .chain([("color", "red"), ("X-Other", "1")]);
        bin.properties = props.map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let got = carried_event(&bin).expect("binary");
        assert_eq!(
            (got.id.as_str(), got.data),
            ("e2", Data::Text("hello".into()))
        );
        assert_eq!(
            got.extensions,
            vec![("color".to_string(), ExtValue::Str("red".into()))]
        );
        // Not CloudEvents: plain JSON, a broken event, another event format.
        assert_eq!(carried_event(&msg("x", br#"{"a":1}"#, None)), None);
        assert_eq!(
            carried_event(&msg("x", br#"{"specversion":"1.0"}"#, None)),
            None
        );
        assert_eq!(
            carried_event(&msg("x", ce, Some("application/cloudevents+avro"))),
            None
        );
    }

    #[test]
    fn positions_read_back() {
        let p = json!({"session": "s1", "seq": 9, "topics": ["a/#"]});
        let want = Mark {
            session: "s1".into(),
            seq: 9,
            topics: Some(vec!["a/#".into()]),
        };
        assert_eq!(read_position(&p), Some(want));
        assert_eq!(read_position(&json!({"seq": 1})), None);
        assert_ne!(new_session("c"), new_session("c"));
    }
}
