//! The `jetstream` backend: the event log on NATS JetStream, shared by every
//! instance that points at the same servers and stream prefix.
//!
//! Mapping (see docs/architecture.md for why):
//! - one stream per topic, `<prefix>_<topic>`, with one subject per
//!   partition, `<prefix>.<topic>.<partition>` (names escaped, [`names`]);
//! - a record's offset is its stream sequence minus one. Sequences are per
//!   stream, so a partition's offsets increase but have gaps where the
//!   other partitions' records sit; the [`EventLog`] contract allows that;
//! - a batch of several records is one JetStream atomic batch (all stored
//!   or none), which the server stores at consecutive sequences; one record
//!   is a plain publish. An append is durable once JetStream acknowledged
//!   it (stored on a quorum of the stream's replicas);
//! - reads are batched direct gets (many records of one subject per round
//!   trip);
//! - each partition's end offset is kept in memory: read from the stream
//!   when the topic is opened, then moved by this instance's own
//!   acknowledgements and by a headers-only ordered consumer that follows
//!   the stream ([`tail`]), which also wakes the readers when another
//!   instance appends.

mod direct;
mod names;
mod tail;
pub mod testutil;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::stream::{self, DirectGetErrorKind};
use async_nats::jetstream::{self as js, Context};
use async_nats::{Client, HeaderMap, ServerAddr};
use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;

pub use eventmesh_core::config::JetStreamSettings;
use eventmesh_storage::{EventLog, PendingAppend, Record, StorageError, TopicInfo};

use names::Names;

type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Metadata keys on each stream.
const META_TOPIC: &str = "eventmesh.topic";
const META_PARTITIONS: &str = "eventmesh.partitions";
const MAX_PARTITIONS: u32 = 1024;
/// Most records one atomic batch may hold (the server's limit).
pub const MAX_BATCH: usize = 1000;

/// One topic as this instance knows it.
pub(crate) struct Topic {
    pub name: String,
    pub names: Names,
    pub partitions: u32,
    /// Per partition: one past its last known offset (the sequence of its
    /// last known record). Only ever moves up.
    pub ends: Vec<AtomicU64>,
}

impl Topic {
    fn check(&self, partition: u32) -> Result<()> {
        if partition < self.partitions {
            Ok(())
        } else {
            Err(StorageError::UnknownPartition {
                topic: self.name.clone(),
                partition,
            })
        }
    }
}

/// The event log on JetStream.
pub struct JetStreamLog {
    client: Client,
    js: Context,
    prefix: String,
    replicas: usize,
    timeout: Duration,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    /// Serializes opening topics (one tail per topic).
    opening: Mutex<()>,
    appended: watch::Sender<u64>,
    closed: AtomicBool,
    stop: CancellationToken,
}

pub(crate) fn unavailable(message: impl Into<String>) -> StorageError {
    StorageError::Unavailable(message.into())
}

impl JetStreamLog {
    /// Connects to the servers and checks that JetStream answers; fails
    /// fast naming the servers and the cause.
    pub async fn connect(opts: &JetStreamSettings) -> Result<Arc<JetStreamLog>> {
        let servers = opts.servers.join(",");
        let refuse = |cause: String| StorageError::Connect {
            servers: servers.clone(),
            cause,
        };
        let addrs = opts
            .servers
            .iter()
            .map(|s| ServerAddr::from_str(s).map_err(|e| refuse(format!("bad URL {s}: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        let mut connect = async_nats::ConnectOptions::new()
            .name("eventmesh")
            .connection_timeout(opts.timeout)
            .request_timeout(Some(opts.timeout))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 100).min(2000))
            });
        if let (Some(user), Some(password)) = (&opts.user, &opts.password) {
            connect = connect.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &opts.token {
            connect = connect.token(token.clone());
        }
        if let Some(file) = &opts.creds_file {
            connect = connect.credentials_file(file).await.map_err(|e| {
                refuse(format!(
                    "cannot read credentials file {}: {e}",
                    file.display()
                ))
            })?;
        }
        if let Some(ca) = &opts.tls_ca_file {
            connect = connect.add_root_certificates(ca.clone()).require_tls(true);
        }
        let client = tokio::time::timeout(opts.timeout * 2, connect.connect(addrs))
            .await
            .map_err(|_| {
                refuse(format!(
                    "no connection within {} ms",
                    (opts.timeout * 2).as_millis()
                ))
            })?
            .map_err(|e| refuse(format!("cannot connect: {e}")))?;
        let context = js::ContextBuilder::new()
            .timeout(opts.timeout)
            .max_ack_inflight(1 << 16)
            .backpressure_on_inflight(true)
            .build(client.clone());
        context
            .query_account()
            .await
            .map_err(|e| refuse(format!("JetStream does not answer (is it enabled?): {e}")))?;
        let (appended, _) = watch::channel(0);
        Ok(Arc::new(JetStreamLog {
            client,
            js: context,
            prefix: opts.prefix.clone(),
            replicas: opts.replicas.max(1),
            timeout: opts.timeout,
            topics: RwLock::new(HashMap::new()),
            opening: Mutex::new(()),
            appended,
            closed: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }))
    }

    fn names(&self, topic: &str) -> Names {
        Names::new(&self.prefix, topic)
    }

    fn cached(&self, topic: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .expect("topic map poisoned")
            .get(topic)
            .cloned()
    }

    /// The topic, opened (its ends read, its tail started) on first use.
    async fn open(&self, topic: &str) -> Result<Option<Arc<Topic>>> {
        if let Some(t) = self.cached(topic) {
            return Ok(Some(t));
        }
        let _one = self.opening.lock().await;
        if let Some(t) = self.cached(topic) {
            return Ok(Some(t));
        }
        let names = self.names(topic);
        let mut stream = match self.js.get_stream(&names.stream).await {
            Ok(s) => s,
            Err(e)
                if matches!(e.kind(), js::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == js::ErrorCode::STREAM_NOT_FOUND) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(unavailable(format!("cannot look up topic {topic:?}: {e}"))),
        };
        let info = stream
            .info()
            .await
            .map_err(|e| unavailable(format!("cannot look up topic {topic:?}: {e}")))?
            .clone();
        let partitions = partitions_of(&info.config, topic)?;
        let mut ends = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let end = match stream.direct_get_last_for_subject(names.subject(p)).await {
                Ok(m) => m.sequence,
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => 0,
                Err(e) => {
                    return Err(unavailable(format!(
                        "cannot read the end of {topic:?} partition {p}: {e}"
                    )))
                }
            };
            ends.push(AtomicU64::new(end));
        }
        let t = Arc::new(Topic {
            name: topic.to_string(),
            names,
            partitions,
            ends,
        });
        tail::spawn(
            self.js.clone(),
            t.clone(),
            info.state.last_sequence + 1,
            self.appended.clone(),
            self.stop.child_token(),
        );
        self.topics
            .write()
            .expect("topic map poisoned")
            .insert(topic.to_string(), t.clone());
        Ok(Some(t))
    }

    async fn existing(&self, topic: &str) -> Result<Arc<Topic>> {
        self.open(topic)
            .await?
            .ok_or_else(|| StorageError::UnknownTopic(topic.to_string()))
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StorageError::Closed)
        } else {
            Ok(())
        }
    }

    /// Publishes the records (one plain publish, or one atomic batch) and
    /// returns the acknowledgement to wait for.
    async fn send(
        &self,
        t: &Topic,
        records: Vec<(u32, Bytes)>,
    ) -> Result<js::context::PublishAckFuture> {
        let n = records.len();
        let failed = |e: js::context::PublishError| publish_error(&t.name, e);
        if n == 1 {
            let (p, payload) = records.into_iter().next().expect("one record");
            return self
                .js
                .send_publish(
                    t.names.subject(p),
                    js::message::PublishMessage::build().payload(payload),
                )
                .await
                .map_err(failed);
        }
        let id = uuid::Uuid::now_v7().simple().to_string();
        let mut last = None;
        for (i, (p, payload)) in records.into_iter().enumerate() {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Batch-Id", id.as_str());
            headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            if i + 1 < n {
                self.client
                    .publish_with_headers(t.names.subject(p), headers, payload)
                    .await
                    .map_err(|e| unavailable(format!("cannot publish to {:?}: {e}", t.name)))?;
            } else {
                headers.insert("Nats-Batch-Commit", "1");
                last = Some(
                    self.js
                        .send_publish(
                            t.names.subject(p),
                            js::message::PublishMessage::build()
                                .payload(payload)
                                .headers(headers),
                        )
                        .await
                        .map_err(failed)?,
                );
            }
        }
        Ok(last.expect("a batch has a last record"))
    }
}

/// The partition count a stream's metadata records.
fn partitions_of(config: &stream::Config, topic: &str) -> Result<u32> {
    config
        .metadata
        .get(META_PARTITIONS)
        .and_then(|p| p.parse().ok())
        .filter(|p| (1..=MAX_PARTITIONS).contains(p))
        .ok_or_else(|| {
            StorageError::Io(format!(
                "stream {} of topic {topic:?} has no valid {META_PARTITIONS} metadata",
                config.name
            ))
        })
}

fn publish_error(topic: &str, e: js::context::PublishError) -> StorageError {
    match e.kind() {
        PublishErrorKind::MaxPayloadExceeded => StorageError::InvalidArgument(format!(
            "an event of topic {topic:?} is larger than the NATS servers accept: {e}"
        )),
        // No responders: the stream has no leader right now (an election
        // after a server failed), or JetStream is gone.
        PublishErrorKind::StreamNotFound => unavailable(format!(
            "no JetStream server answered for topic {topic:?} (stream leader unavailable)"
        )),
        PublishErrorKind::TimedOut => unavailable(format!(
            "JetStream did not acknowledge a publish to {topic:?} in time"
        )),
        _ => unavailable(format!("cannot publish to {topic:?}: {e}")),
    }
}

#[async_trait]
impl EventLog for JetStreamLog {
    async fn create_topic(&self, name: &str, partitions: u32) -> Result<TopicInfo> {
        self.check_open()?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(StorageError::InvalidArgument(format!(
                "partitions must be 1-{MAX_PARTITIONS}, got {partitions}"
            )));
        }
        if let Some(t) = self.open(name).await? {
            return Ok(TopicInfo {
                name: name.to_string(),
                partitions: t.partitions,
            });
        }
        let names = self.names(name);
        let config = stream::Config {
            name: names.stream.clone(),
            subjects: vec![names.wildcard()],
            num_replicas: self.replicas,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            allow_direct: true,
            allow_atomic_publish: true,
            metadata: HashMap::from([
                (META_TOPIC.to_string(), name.to_string()),
                (META_PARTITIONS.to_string(), partitions.to_string()),
            ]),
            ..Default::default()
        };
        if let Err(e) = self.js.create_stream(config).await {
            // Another instance may have created it meanwhile (with its own
            // partition count, which is then the one kept).
            if self.open(name).await?.is_none() {
                return Err(unavailable(format!("cannot create topic {name:?}: {e}")));
            }
        }
        let t = self.existing(name).await?;
        Ok(TopicInfo {
            name: name.to_string(),
            partitions: t.partitions,
        })
    }

    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>> {
        Ok(self.open(name).await?.map(|t| TopicInfo {
            name: t.name.clone(),
            partitions: t.partitions,
        }))
    }

    async fn topics(&self) -> Result<Vec<TopicInfo>> {
        let mut out = Vec::new();
        let mut streams = self.js.streams();
        let own = format!("{}_", self.prefix);
        while let Some(info) = streams
            .try_next()
            .await
            .map_err(|e| unavailable(format!("cannot list streams: {e}")))?
        {
            let c = &info.config;
            let Some(topic) = c.metadata.get(META_TOPIC) else {
                continue;
            };
            if !c.name.starts_with(&own) || self.names(topic).stream != c.name {
                continue;
            }
            if let Ok(partitions) = partitions_of(c, topic) {
                out.push(TopicInfo {
                    name: topic.clone(),
                    partitions,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn enqueue(&self, topic: &str, records: Vec<(u32, Bytes)>) -> Result<PendingAppend> {
        self.check_open()?;
        if records.is_empty() {
            return Ok(PendingAppend::from_future(async { Ok(Vec::new()) }));
        }
        if records.len() > MAX_BATCH {
            return Err(StorageError::InvalidArgument(format!(
                "a batch holds at most {MAX_BATCH} events on the jetstream backend, got {}",
                records.len()
            )));
        }
        let t = self.existing(topic).await?;
        for (p, _) in &records {
            t.check(*p)?;
        }
        let partitions: Vec<u32> = records.iter().map(|(p, _)| *p).collect();
        let ack = self.send(&t, records).await?;
        let appended = self.appended.clone();
        let name = t.name.clone();
        Ok(PendingAppend::from_future(async move {
            let ack = ack.await.map_err(|e| publish_error(&name, e))?;
            let n = partitions.len() as u64;
            let first = ack
                .sequence
                .checked_sub(n - 1)
                .filter(|f| *f >= 1)
                .ok_or_else(|| {
                    StorageError::Io(format!(
                        "JetStream acknowledged a batch of {n} at sequence {}",
                        ack.sequence
                    ))
                })?;
            let offsets: Vec<u64> = (0..n).map(|i| first + i - 1).collect();
            for (p, o) in partitions.iter().zip(&offsets) {
                t.ends[*p as usize].fetch_max(o + 1, Ordering::AcqRel);
            }
            appended.send_modify(|v| *v = v.wrapping_add(1));
            Ok(offsets)
        }))
    }

    async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        let t = self.existing(topic).await?;
        t.check(partition)?;
        if max_records == 0 {
            return Ok(Vec::new());
        }
        direct::read(
            &self.client,
            &t.names.stream,
            &t.names.subject(partition),
            from.saturating_add(1),
            max_records,
            max_bytes,
            self.timeout,
        )
        .await
    }

    async fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.existing(topic).await?;
        t.check(partition)?;
        Ok(t.ends[partition as usize].load(Ordering::Acquire))
    }

    async fn start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        let t = self.existing(topic).await?;
        t.check(partition)?;
        let first = direct::read(
            &self.client,
            &t.names.stream,
            &t.names.subject(partition),
            1,
            1,
            usize::MAX,
            self.timeout,
        )
        .await?;
        Ok(match first.first() {
            Some(r) => r.offset,
            None => t.ends[partition as usize].load(Ordering::Acquire),
        })
    }

    async fn truncate_before(&self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        self.check_open()?;
        let t = self.existing(topic).await?;
        t.check(partition)?;
        let stream = self
            .js
            .get_stream_no_info(&t.names.stream)
            .await
            .map_err(|e| unavailable(format!("cannot truncate {topic:?}: {e}")))?;
        // Purges sequences below offset + 1, that is offsets below `offset`.
        stream
            .purge()
            .filter(t.names.subject(partition))
            .sequence(offset.saturating_add(1))
            .await
            .map_err(|e| unavailable(format!("cannot truncate {topic:?}: {e}")))?;
        Ok(())
    }

    fn append_watch(&self) -> watch::Receiver<u64> {
        self.appended.subscribe()
    }

    fn status(&self) -> std::result::Result<(), String> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(format!("NATS connection {state}")),
        }
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.stop.cancel();
        // Publishes already handed to the client go out before returning.
        let _ = tokio::time::timeout(self.timeout, self.client.flush()).await;
    }
}
