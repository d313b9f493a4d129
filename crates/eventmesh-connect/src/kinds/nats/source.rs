//! `nats-source`: a NATS subject into the mesh, each message one record
//! whose event the binding gives (see `binding`).
//!
//! **Core mode** subscribes to `subject` (wildcards allowed; optionally in
//! a `queue` group). Core NATS keeps nothing: what is published while the
//! connector is stopped or disconnected is gone, so delivery into the mesh
//! is at most once across outages (and a reader falling further behind
//! than the client's buffer loses messages; a warning is logged). The
//! position `{"seq": n}` only counts received messages; a plain message's
//! id is `<random per opened source>-<n>`, new for every message.
//!
//! **JetStream mode** reads `stream` through a durable pull consumer
//! (`durable`, default `eventmesh-<connector>`, filtered by `subject`, ack
//! policy explicit). Nothing is acknowledged when read: `commit` acks, in
//! the order returned, every returned message up to the committed one, so
//! after a crash before the commit JetStream delivers them again to the
//! next source of that durable once `ack_wait_ms` has passed (make it
//! longer than a publish into the mesh may take; while records await
//! their commit each poll also tells JetStream they are in progress). A
//! plain message's id is `<stream>-<stream sequence>`, the same on every
//! delivery, so the mesh drops redeliveries as duplicates; one redelivered
//! to the source still holding it replaces the held one instead of being
//! returned twice. The position is `{"stream_seq": n}`: the durable holds
//! the real progress, and the position only starts a durable created anew
//! just after it. A redelivery that comes after later messages is returned
//! after them, so positions can go back. Each poll is one pull request
//! expiring after a second; a poll dropped mid-way leaves it open until
//! then, and what it still delivers comes again after `ack_wait_ms`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, FromConsumer};
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::message::Acker;
use async_nats::jetstream::{self, consumer::PullConsumer, AckKind, ErrorCode};
use async_nats::Client;
use async_trait::async_trait;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde_json::json;

use super::binding::message_event;
use super::{
    check_connection, check_name, check_subject, connect, default_durable, unavailable, within,
    Mode, NatsSourceConfig, DEFAULT_ACK_WAIT_MS, REQUEST_TIMEOUT,
};
use crate::sdk::{ConnectorError, Position, Record, Source, SourceContext, SourceKind};

/// How long a poll waits for a first message.
const QUIET: Duration = Duration::from_secs(1);

/// The kind `nats-source`.
pub struct NatsSource;

#[async_trait]
impl SourceKind for NatsSource {
    type Config = NatsSourceConfig;
    const NAME: &'static str = "nats-source";
    const DESCRIPTION: &'static str = "Reads a NATS subject: core NATS (live messages only) or \
        a JetStream stream through a durable pull consumer acknowledged on commit";

    fn targets(c: &Self::Config) -> Vec<crate::sdk::Target> {
        super::targets_of(&c.servers)
    }

    fn check(c: &Self::Config) -> Result<(), String> {
        check_connection(&c.servers, &c.user, &c.password, &c.token)?;
        check_subject(&c.subject, true).map_err(|e| format!("subject: {e}"))?;
        if c.ty.is_empty() {
            return Err("type must not be empty".into());
        }
        if !(1..=10_000).contains(&c.batch) {
            return Err("batch must be between 1 and 10000".into());
        }
        if c.mode == Mode::Jetstream {
            if c.queue.is_some() {
                return Err("queue is for mode core (a durable is shared by its readers)".into());
            }
            let Some(stream) = &c.stream else {
                return Err("stream is required in mode jetstream".into());
            };
            check_name("stream", stream)?;
            if let Some(d) = &c.durable {
                check_name("durable", d)?;
            }
            if c.ack_wait_ms.is_some_and(|ms| ms < 100) {
                return Err("ack_wait_ms must be at least 100".into());
            }
            return Ok(());
        }
        let jetstream_only = [
            ("stream", c.stream.is_some()),
            ("durable", c.durable.is_some()),
            ("create_stream", c.create_stream),
            ("ack_wait_ms", c.ack_wait_ms.is_some()),
        ];
        if let Some((field, _)) = jetstream_only.iter().find(|(_, set)| *set) {
            return Err(format!("{field} is for mode jetstream"));
        }
        match &c.queue {
            Some(q) if q.is_empty() || q.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                Err(format!("queue {q:?} must be non-empty, without whitespace"))
            }
            _ => Ok(()),
        }
    }

    async fn open(c: Self::Config, ctx: SourceContext) -> Result<Box<dyn Source>, ConnectorError> {
        let client = connect(&ctx.connector, &c.servers, &c.user, &c.password, &c.token).await?;
        let position = |key| ctx.position.as_ref().and_then(|p| position_number(p, key));
        if c.mode == Mode::Core {
            let sub = match &c.queue {
                Some(q) => client.queue_subscribe(c.subject.clone(), q.clone()).await,
                None => client.subscribe(c.subject.clone()).await,
            }
            .map_err(|e| ConnectorError::config(format!("subscribe {}: {e}", c.subject)))?;
            round_trip(&client).await;
            return Ok(Box::new(CoreSource {
                seq: position("seq").unwrap_or(0),
                instance: instance_id(&client),
                client,
                sub,
                connector: ctx.connector,
                ty: c.ty,
                batch: c.batch,
            }));
        }
        let stream_name = c.stream.clone().unwrap_or_default();
        let js = jetstream::ContextBuilder::new()
            .timeout(REQUEST_TIMEOUT)
            .build(client.clone());
        let stream = open_stream(&js, &stream_name, c.create_stream, &c.subject).await?;
        let durable = c
            .durable
            .clone()
            .unwrap_or_else(|| default_durable(&ctx.connector));
        let ack_wait = Duration::from_millis(c.ack_wait_ms.unwrap_or(DEFAULT_ACK_WAIT_MS));
        let start = position("stream_seq");
        let consumer = durable_consumer(&stream, &durable, &c.subject, ack_wait, start).await?;
        Ok(Box::new(JetStreamSource {
            client,
            consumer,
            connector: ctx.connector,
            ty: c.ty,
            stream: stream_name,
            batch: c.batch,
            ack_wait,
            held: VecDeque::new(),
            held_since: Instant::now(),
            lag: None,
        }))
    }
}

/// Makes sure the server has processed this client's subscriptions: a
/// message to a private inbox comes back only after them.
async fn round_trip(client: &Client) {
    let inbox = client.new_inbox();
    let echoed = async {
        let mut sub = client.subscribe(inbox.clone()).await.ok()?;
        client.publish(inbox, Bytes::new()).await.ok()?;
        let got = tokio::time::timeout(REQUEST_TIMEOUT, sub.next())
            .await
            .ok()?;
        let _ = sub.unsubscribe().await;
        got
    };
    if echoed.await.is_none() {
        tracing::warn!("NATS did not echo a message to this client's inbox");
    }
}

/// A random prefix for the ids of one opened core source: the unique
/// (NUID) part of a new inbox name.
fn instance_id(client: &Client) -> String {
    let inbox = client.new_inbox();
    inbox.rsplit('.').next().unwrap_or(&inbox).to_string()
}

/// The durable pull consumer, created (just after `start` when given) or
/// updated to the connector's settings.
async fn durable_consumer(
    stream: &jetstream::stream::Stream,
    durable: &str,
    subject: &str,
    ack_wait: Duration,
    start: Option<u64>,
) -> Result<PullConsumer, ConnectorError> {
    let mut config = match stream.consumer_info(durable).await {
        Ok(info) => pull::Config::try_from_consumer_config(info.config)
            .map_err(|_| ConnectorError::config(format!("durable {durable} is a push consumer")))?,
        Err(e) if matches!(e.kind(), ConsumerInfoErrorKind::NotFound) => pull::Config {
            durable_name: Some(durable.to_string()),
            deliver_policy: match start {
                Some(seq) => DeliverPolicy::ByStartSequence {
                    start_sequence: seq + 1,
                },
                None => DeliverPolicy::All,
            },
            ..Default::default()
        },
        Err(e) => return Err(unavailable(&format!("consumer {durable}"), e)),
    };
    config.ack_policy = AckPolicy::Explicit;
    config.ack_wait = ack_wait;
    config.filter_subject = subject.to_string();
    config.filter_subjects = Vec::new();
    stream.create_consumer(config).await.map_err(|e| {
        if matches!(e.kind(), jetstream::stream::ConsumerErrorKind::JetStream(_)) {
            ConnectorError::config(format!("durable consumer {durable}: {e}"))
        } else {
            unavailable(&format!("durable consumer {durable}"), e)
        }
    })
}

fn disconnected() -> ConnectorError {
    ConnectorError::unavailable("disconnected from NATS")
}

struct CoreSource {
    client: Client,
    sub: async_nats::Subscriber,
    connector: String,
    ty: String,
    instance: String,
    seq: u64,
    batch: usize,
}

#[async_trait]
impl Source for CoreSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        let first = match tokio::time::timeout(QUIET, self.sub.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(ConnectorError::unavailable("the NATS subscription ended")),
            Err(_) if self.client.connection_state() == State::Disconnected => {
                return Err(disconnected())
            }
            Err(_) => return Ok(Vec::new()),
        };
        let mut messages = vec![first];
        while messages.len() < self.batch {
            match self.sub.next().now_or_never() {
                Some(Some(m)) => messages.push(m),
                _ => break,
            }
        }
        let mut records = Vec::with_capacity(messages.len());
        for m in messages {
            self.seq += 1;
            let id = format!("{}-{}", self.instance, self.seq);
            let event = message_event(&self.connector, &self.ty, id, m);
            records.push(Record {
                event,
                position: json!({ "seq": self.seq }),
                topic: None,
            });
        }
        Ok(records)
    }
}

/// A message returned by `poll` and not yet acknowledged.
struct Held {
    seq: u64,
    acker: Acker,
}

struct JetStreamSource {
    client: Client,
    consumer: PullConsumer,
    connector: String,
    ty: String,
    stream: String,
    batch: usize,
    ack_wait: Duration,
    /// In the order returned.
    held: VecDeque<Held>,
    /// Since when the held messages' ack timers run.
    held_since: Instant,
    lag: Option<u64>,
}

/// Which held messages (their stream sequences, in the order returned) a
/// commit of `seq` acknowledges: all up to the one with that sequence;
/// when none has it, those with a sequence up to it.
fn to_acknowledge(held: &[u64], seq: u64) -> Vec<usize> {
    match held.iter().position(|&s| s == seq) {
        Some(i) => (0..=i).collect(),
        None => (0..held.len()).filter(|&i| held[i] <= seq).collect(),
    }
}

impl JetStreamSource {
    /// One pull (`no_wait` with an expiry): the messages there now, up to
    /// `batch`; when there are none, the first to come within `QUIET` and
    /// those there with it.
    async fn pull(&self) -> Result<Vec<jetstream::Message>, ConnectorError> {
        let what = || format!("pull from stream {}", self.stream);
        let fetch = self
            .consumer
            .fetch()
            .max_messages(self.batch)
            .expires(QUIET);
        let batch = fetch
            .messages()
            .await
            .map_err(|e| unavailable(&what(), e))?;
        let deadline = tokio::time::Instant::now() + QUIET + REQUEST_TIMEOUT;
        let mut batch = std::pin::pin!(batch);
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, batch.next()).await {
                Ok(Some(Ok(m))) => out.push(m),
                Ok(Some(Err(e))) if out.is_empty() => return Err(unavailable(&what(), e)),
                _ => return Ok(out),
            }
        }
    }

    /// Tells JetStream the held messages are in progress once half their
    /// ack wait has passed.
    async fn keep_held(&mut self) {
        if self.held.is_empty() || self.held_since.elapsed() < self.ack_wait / 2 {
            return;
        }
        for h in &self.held {
            if h.acker.ack_with(AckKind::Progress).await.is_err() {
                return;
            }
        }
        self.held_since = Instant::now();
    }
}

#[async_trait]
impl Source for JetStreamSource {
    async fn poll(&mut self) -> Result<Vec<Record>, ConnectorError> {
        // Pulls while disconnected would only wait for their timeouts.
        if self.client.connection_state() == State::Disconnected {
            return Err(disconnected());
        }
        self.keep_held().await;
        let messages = match self.pull().await {
            Ok(m) => m,
            // A pull refused while messages are held (a leader change, a
            // full ack window) is waited out: their commits may free it.
            Err(e) if !self.held.is_empty() => {
                tracing::debug!(connector = %self.connector, error = %e, "pull refused");
                tokio::time::sleep(QUIET).await;
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        if messages.is_empty() && self.client.connection_state() == State::Disconnected {
            return Err(disconnected());
        }
        if self.held.is_empty() {
            self.held_since = Instant::now();
        }
        let mut records = Vec::with_capacity(messages.len());
        for m in messages {
            let (seq, waiting) = match m.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(e) => {
                    tracing::warn!(connector = %self.connector, error = %e, "a JetStream message without metadata; skipped");
                    continue;
                }
            };
            self.lag = Some(waiting);
            let (msg, acker) = m.split();
            if let Some(h) = self.held.iter_mut().find(|h| h.seq == seq) {
                // Delivered again while its commit is awaited: acknowledge
                // this delivery instead.
                h.acker = acker;
                continue;
            }
            let event = message_event(
                &self.connector,
                &self.ty,
                format!("{}-{seq}", self.stream),
                msg,
            );
            self.held.push_back(Held { seq, acker });
            records.push(Record {
                event,
                position: json!({ "stream_seq": seq }),
                topic: None,
            });
        }
        Ok(records)
    }

    async fn commit(&mut self, position: &Position) -> Result<(), ConnectorError> {
        let Some(seq) = position_number(position, "stream_seq") else {
            tracing::warn!(connector = %self.connector, %position, "not a JetStream position; nothing acknowledged");
            return Ok(());
        };
        let held: Vec<u64> = self.held.iter().map(|h| h.seq).collect();
        let chosen = to_acknowledge(&held, seq);
        let Some((&last, rest)) = chosen.split_last() else {
            return Ok(());
        };
        for &i in rest {
            self.held[i]
                .acker
                .ack()
                .await
                .map_err(|e| unavailable("ack", e))?;
        }
        // A confirmed ack of the last: the server handles one connection's
        // messages in order, so every earlier ack is in too.
        within("ack", REQUEST_TIMEOUT, self.held[last].acker.double_ack()).await?;
        for &i in chosen.iter().rev() {
            self.held.remove(i);
        }
        Ok(())
    }

    async fn lag(&mut self) -> Option<u64> {
        self.lag
    }
}

/// The stream `name`; created capturing `subject` when missing and
/// `create` says so.
async fn open_stream(
    js: &jetstream::Context,
    name: &str,
    create: bool,
    subject: &str,
) -> Result<jetstream::stream::Stream, ConnectorError> {
    let err = match js.get_stream(name).await {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    match err.kind() {
        GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND => {}
        _ => return Err(unavailable(&format!("stream {name}"), err)),
    }
    if !create {
        return Err(ConnectorError::config(format!(
            "JetStream stream {name} does not exist (create it, or set create_stream)"
        )));
    }
    let config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        ..Default::default()
    };
    js.create_stream(config).await.map_err(|e| {
        use jetstream::context::CreateStreamErrorKind as K;
        match e.kind() {
            K::JetStream(_) => ConnectorError::config(format!("create stream {name}: {e}")),
            _ => unavailable(&format!("create stream {name}"), e),
        }
    })
}

/// `n` of a position `{key: n}`.
fn position_number(position: &Position, key: &str) -> Option<u64> {
    position.get(key)?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_acknowledge_in_the_order_returned() {
        assert_eq!(to_acknowledge(&[4, 5, 6], 5), vec![0, 1]);
        assert_eq!(to_acknowledge(&[4, 5, 6], 6), vec![0, 1, 2]);
        // A redelivery returned after later messages.
        assert_eq!(to_acknowledge(&[7, 8, 2, 9], 2), vec![0, 1, 2]);
        // A position not held: the held ones at or below it.
        assert_eq!(to_acknowledge(&[7, 3, 9], 5), vec![1]);
        assert!(to_acknowledge(&[], 5).is_empty());
        assert_eq!(
            position_number(&json!({"stream_seq": 12}), "stream_seq"),
            Some(12)
        );
        assert_eq!(position_number(&json!({"seq": 3}), "stream_seq"), None);
        assert_eq!(position_number(&json!({"seq": -1}), "seq"), None);
        assert_eq!(position_number(&json!("x"), "seq"), None);
    }
}
