//! Creating a topic's stream: its configuration from the partition count
//! and the retention, created again while the cluster's meta leader is
//! being elected, and returned once the stream has a leader of its own and
//! the server this log publishes through routes publishes to it.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self as js, stream};
use eventmesh_storage::{Durability, Retention, StorageError, TopicInfo};

use super::{
    retention, unavailable, JetStreamLog, Result, MAX_PARTITIONS, META_PARTITIONS, META_TOPIC,
};

/// The stream a probe publish names as expected: no stream has this name
/// (a stream name cannot hold a space), so JetStream refuses the probe.
const PROBE_STREAM: &str = "no stream";

impl JetStreamLog {
    /// Creates the topic's stream unless it exists: the topic, and whether
    /// this call created it.
    pub(super) async fn create(
        &self,
        name: &str,
        partitions: u32,
        retention: Option<Retention>,
        durability: Durability,
    ) -> Result<(TopicInfo, bool)> {
        self.check_open()?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(StorageError::InvalidArgument(format!(
                "partitions must be 1-{MAX_PARTITIONS}, got {partitions}"
            )));
        }
        if let Some(t) = self.open(name).await? {
            return Ok((t.info(), false));
        }
        let names = self.names(name);
        let mut config = stream::Config {
            name: names.stream.clone(),
            subjects: vec![names.wildcard()],
            num_replicas: self.replicas,
            storage: match durability {
                Durability::Disk => stream::StorageType::File,
                Durability::Memory => stream::StorageType::Memory,
            },
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
        retention::configure(
            &mut config,
            retention,
            self.default_retention(),
            partitions,
            self.dedup_window,
        );
        // A cluster that just formed (or lost a server) may refuse for a
        // moment while its meta leader is elected: retried within the
        // timeout.
        let deadline = tokio::time::Instant::now() + self.timeout;
        while let Err(e) = self.writer.js.create_stream(config.clone()).await {
            // Another instance may have created it meanwhile (with its own
            // partition count and retention, which are then the ones kept).
            if let Some(t) = self.open(name).await? {
                return Ok((t.info(), false));
            }
            if matches!(e.kind(), js::context::CreateStreamErrorKind::JetStream(j)
                if j.error_code() == js::ErrorCode::STREAM_INVALID_CONFIG)
            {
                return Err(StorageError::InvalidArgument(format!(
                    "JetStream refuses topic {name:?}: {e}"
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(unavailable(format!("cannot create topic {name:?}: {e}")));
            }
            tracing::debug!(topic = name, error = %e, "creating the topic's stream; retrying");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.leader_elected(&names.stream, deadline).await;
        self.routed(&names.subject(0), deadline).await;
        let t = self.existing(name).await?;
        self.topics_changed.send_modify(|n| *n += 1);
        Ok((t.info(), true))
    }

    /// Waits (until `deadline`) for a stream just created on several
    /// servers to have a leader: until then a publish finds no responder.
    /// A stream on one server leads at once.
    async fn leader_elected(&self, stream: &str, deadline: tokio::time::Instant) {
        if self.replicas < 2 {
            return;
        }
        while tokio::time::Instant::now() < deadline {
            if let Ok(mut s) = self.writer.js.get_stream(stream).await {
                let led = s
                    .info()
                    .await
                    .ok()
                    .and_then(|i| i.cluster.as_ref().and_then(|c| c.leader.clone()))
                    .is_some();
                if led {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::debug!(
            stream,
            "the new stream has no leader yet; publishes are retried"
        );
    }

    /// Waits (until `deadline`) for the server this log publishes through
    /// to route the stream's subjects to the stream: a new stream's leader
    /// (on this server or another, whatever the replica count) subscribes
    /// to them, and the other servers learn of it a moment later. Until
    /// then a publish through one of them finds no responder and is
    /// refused, so the first publish to a new topic could fail. The probe
    /// is a publish that JetStream refuses without storing (it names
    /// another stream as the one expected): any answer from JetStream means
    /// publishes arrive; only "no responders" (or no answer) means wait.
    async fn routed(&self, subject: &str, deadline: tokio::time::Instant) {
        let mut probe = async_nats::HeaderMap::new();
        probe.insert("Nats-Expected-Stream", PROBE_STREAM);
        while tokio::time::Instant::now() < deadline {
            let asked = self.writer.client.request_with_headers(
                subject.to_string(),
                probe.clone(),
                bytes::Bytes::new(),
            );
            match tokio::time::timeout(Duration::from_secs(1), asked).await {
                Err(_) => {}
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::TimedOut => {}
                // JetStream answered, or the connection failed (which the
                // publish will report itself).
                Ok(_) => return,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::debug!(
            subject,
            "publishes do not reach the new stream yet; they are refused until they do"
        );
    }
}
