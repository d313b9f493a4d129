//! Retention on JetStream: a topic's limits are its stream's limits, which
//! the servers enforce by themselves; this instance only keeps what it
//! knows of them current.
//!
//! - `max_age` is the retention's `ms` (at least 100 ms, the servers'
//!   minimum; 0: none).
//! - `max_bytes` is the retention's `bytes` times the topic's partition
//!   count (0: none). JetStream limits the bytes of a whole stream, not of
//!   each subject, so the limit holds for the topic as a whole: a busy
//!   partition may hold more than `bytes` and push out the oldest records
//!   of a quiet one. The servers count each message with its subject,
//!   headers and storage overhead, not its payload alone, and so does
//!   [`EventLog::stored_bytes`](eventmesh_storage::EventLog::stored_bytes).
//! - The duplicate window of a stream with a maximum age is at most that
//!   age (the servers refuse a longer one).
//! - A topic's own retention is recorded in its stream's metadata
//!   ([`META_RETENTION`] = `"<ms>,<bytes>"`; absent: the log's default), so
//!   every instance reads it back. Streams of topics without their own
//!   follow the default: each retention pass updates those (of the topics
//!   this instance has open) whose limits differ from this instance's
//!   default, so every instance is expected to run with the same default.
//! - The floor: every offset below a stream's first sequence − 1 is gone,
//!   in every partition. The floor is read when a topic is opened and moved
//!   up by each retention pass; [`EventLog::truncate_before`](
//!   eventmesh_storage::EventLog::truncate_before) raises one partition's.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self as js, stream};
use futures::StreamExt;
use tokio::sync::OwnedMutexGuard;

use eventmesh_storage::{Retention, StorageError, StoredBytes, TopicInfo};

use crate::names::Names;
use crate::{unavailable, JetStreamLog, Result, Topic};

/// Metadata key of a topic's own retention.
pub(crate) const META_RETENTION: &str = "eventmesh.retention";
/// Metadata key of the time to live of a topic's events (milliseconds).
pub(crate) const META_TTL: &str = "eventmesh.ttl.ms";
/// The servers refuse a shorter maximum age.
const MIN_AGE: Duration = Duration::from_millis(100);
/// Longest age the servers take (nanoseconds in an i64).
const MAX_AGE_MS: u64 = i64::MAX as u64 / 1_000_000;
/// Topics refreshed at once by a retention pass.
const PARALLEL: usize = 16;

/// The topic's own retention recorded in its stream's metadata (an
/// unreadable value counts as none: the default applies).
pub(crate) fn own_retention(config: &stream::Config) -> Option<Retention> {
    let value = config.metadata.get(META_RETENTION)?;
    let (ms, bytes) = value.split_once(',')?;
    Some(Retention {
        ms: ms.trim().parse().ok()?,
        bytes: bytes.trim().parse().ok()?,
    })
}

/// The time to live of the topic's events recorded in its stream's
/// metadata (an unreadable value counts as none).
pub(crate) fn ttl_of(config: &stream::Config) -> Option<u64> {
    config.metadata.get(META_TTL)?.trim().parse().ok()
}

/// The stream limits of a retention: maximum age and bytes, zero for none.
pub(crate) fn limits(r: Retention, partitions: u32) -> (Duration, i64) {
    let age = match r.ms {
        0 => Duration::ZERO,
        ms => Duration::from_millis(ms.min(MAX_AGE_MS)).max(MIN_AGE),
    };
    let bytes = r.bytes.saturating_mul(u64::from(partitions));
    (age, i64::try_from(bytes).unwrap_or(i64::MAX))
}

/// Sets a stream's limits, duplicate window and retention metadata for the
/// topic's own retention (`None`: `default`).
pub(crate) fn configure(
    config: &mut stream::Config,
    own: Option<Retention>,
    default: Retention,
    partitions: u32,
    dedup_window: Duration,
) {
    let (age, bytes) = limits(own.unwrap_or(default), partitions);
    config.max_age = age;
    config.max_bytes = if bytes == 0 { -1 } else { bytes };
    // Zero: the servers' default window, which they cap at the age.
    config.duplicate_window = if age.is_zero() || dedup_window.is_zero() {
        dedup_window
    } else {
        dedup_window.min(age)
    };
    match own {
        Some(r) => {
            config
                .metadata
                .insert(META_RETENTION.to_string(), format!("{},{}", r.ms, r.bytes));
        }
        None => {
            config.metadata.remove(META_RETENTION);
        }
    }
}

/// Whether a stream's limits are those of `effective`.
pub(crate) fn limits_match(config: &stream::Config, effective: Retention, partitions: u32) -> bool {
    let (age, bytes) = limits(effective, partitions);
    config.max_age == age && config.max_bytes.max(0) == bytes
}

fn stream_not_found(e: &js::context::GetStreamError) -> bool {
    matches!(e.kind(), js::context::GetStreamErrorKind::JetStream(j)
        if j.error_code() == js::ErrorCode::STREAM_NOT_FOUND)
}

impl Topic {
    /// Moves the topic's floor up to what the stream no longer holds.
    pub(crate) fn raise_floor(&self, info: &stream::Info) {
        let floor = info.state.first_sequence.saturating_sub(1);
        self.floor.fetch_max(floor, Ordering::AcqRel);
    }

    /// Every offset of the partition below this one is gone: the higher of
    /// the topic's floor and the partition's truncation, never past the
    /// partition's end (a reader at the end has lost nothing).
    pub(crate) fn floor_of(&self, partition: u32) -> u64 {
        let p = partition as usize;
        let floor = self
            .floor
            .load(Ordering::Acquire)
            .max(self.truncated[p].load(Ordering::Acquire));
        floor.min(self.ends[p].load(Ordering::Acquire))
    }

    pub(crate) fn info(&self) -> TopicInfo {
        TopicInfo {
            name: self.name.clone(),
            partitions: self.partitions,
            retention: *self.own.read().expect("retention lock"),
            ttl_ms: *self.ttl_ms.read().expect("ttl lock"),
            durability: self.durability,
        }
    }

    fn set_own(&self, own: Option<Retention>) {
        *self.own.write().expect("retention lock") = own;
    }
}

impl JetStreamLog {
    /// Sets the retention of topics without their own (the log starts with
    /// [`Retention::FOREVER`]): streams created from now on get it at once,
    /// existing ones (of the topics this instance has open) at the next
    /// [`EventLog::enforce_retention`](eventmesh_storage::EventLog::enforce_retention).
    pub fn set_default_retention(&self, retention: Retention) {
        *self.default_retention.write().expect("retention lock") = retention;
    }

    pub(crate) fn default_retention(&self) -> Retention {
        *self.default_retention.read().expect("retention lock")
    }

    /// The stream's info now; `None` when there is no such stream.
    pub(crate) async fn stream_info(
        &self,
        names: &Names,
        topic: &str,
    ) -> Result<Option<stream::Info>> {
        match self.writer.js.get_stream(&names.stream).await {
            Ok(s) => Ok(Some(s.cached_info().clone())),
            Err(e) if stream_not_found(&e) => Ok(None),
            Err(e) => Err(unavailable(format!("cannot look up topic {topic:?}: {e}"))),
        }
    }

    /// Drops a topic from this instance (it is opened afresh on next use)
    /// and stops its tail.
    pub(crate) fn forget(&self, t: &Arc<Topic>) {
        let mut topics = self.topics.write().expect("topic map poisoned");
        if topics.get(&t.name).is_some_and(|c| Arc::ptr_eq(c, t)) {
            topics.remove(&t.name);
        }
        t.stop.cancel();
    }

    /// The info of an open topic's stream now; `None` (and the topic
    /// forgotten) when the stream is gone or was replaced: deleted, and
    /// maybe created again, by another instance.
    async fn current(&self, t: &Arc<Topic>) -> Result<Option<stream::Info>> {
        match self.stream_info(&t.names, &t.name).await? {
            Some(info) if info.created == t.created => Ok(Some(info)),
            _ => {
                self.forget(t);
                Ok(None)
            }
        }
    }

    /// The topic, its configuration lock and its stream's info now.
    async fn locked(&self, name: &str) -> Result<(Arc<Topic>, OwnedMutexGuard<()>, stream::Info)> {
        // A replaced stream is opened afresh once.
        for _ in 0..2 {
            let t = self.existing(name).await?;
            let held = t.configuring.clone().lock_owned().await;
            if let Some(info) = self.current(&t).await? {
                return Ok((t, held, info));
            }
        }
        Err(StorageError::UnknownTopic(name.to_string()))
    }

    /// Replaces a stream's configuration.
    async fn update(&self, t: &Arc<Topic>, config: stream::Config) -> Result<stream::Info> {
        self.writer
            .js
            .update_stream(&config)
            .await
            .map_err(|e| match e.kind() {
                js::context::CreateStreamErrorKind::NotFound => {
                    self.forget(t);
                    StorageError::UnknownTopic(t.name.clone())
                }
                js::context::CreateStreamErrorKind::JetStream(j)
                    if j.error_code() == js::ErrorCode::STREAM_NOT_FOUND =>
                {
                    self.forget(t);
                    StorageError::UnknownTopic(t.name.clone())
                }
                js::context::CreateStreamErrorKind::JetStream(j)
                    if j.error_code() == js::ErrorCode::STREAM_INVALID_CONFIG =>
                {
                    StorageError::InvalidArgument(format!(
                        "JetStream refuses the limits of topic {:?}: {j}",
                        t.name
                    ))
                }
                _ => unavailable(format!("cannot update topic {:?}: {e}", t.name)),
            })
    }

    /// [`EventLog::set_retention`](eventmesh_storage::EventLog::set_retention).
    pub(crate) async fn reconfigure(
        &self,
        name: &str,
        own: Option<Retention>,
    ) -> Result<TopicInfo> {
        self.check_open()?;
        let (t, _held, info) = self.locked(name).await?;
        let mut config = info.config;
        configure(
            &mut config,
            own,
            self.default_retention(),
            t.partitions,
            self.dedup_window,
        );
        let updated = self.update(&t, config).await?;
        t.set_own(own_retention(&updated.config));
        t.raise_floor(&updated);
        Ok(t.info())
    }

    /// [`EventLog::set_ttl`](eventmesh_storage::EventLog::set_ttl): the
    /// time to live goes in the stream's metadata.
    pub(crate) async fn set_topic_ttl(&self, name: &str, ttl_ms: Option<u64>) -> Result<TopicInfo> {
        self.check_open()?;
        let (t, _held, info) = self.locked(name).await?;
        let mut config = info.config;
        match ttl_ms {
            Some(ms) => config.metadata.insert(META_TTL.to_string(), ms.to_string()),
            None => config.metadata.remove(META_TTL),
        };
        let updated = self.update(&t, config).await?;
        *t.ttl_ms.write().expect("ttl lock") = ttl_of(&updated.config);
        Ok(t.info())
    }

    /// [`EventLog::stored_bytes`](eventmesh_storage::EventLog::stored_bytes):
    /// the stream's bytes, as the servers count them.
    pub(crate) async fn stream_bytes(&self, topic: &str) -> Result<StoredBytes> {
        for _ in 0..2 {
            let t = self.existing(topic).await?;
            if let Some(info) = self.current(&t).await? {
                t.raise_floor(&info);
                return Ok(StoredBytes {
                    total: info.state.bytes,
                    partitions: None,
                });
            }
        }
        Err(StorageError::UnknownTopic(topic.to_string()))
    }

    /// [`EventLog::delete_topic`](eventmesh_storage::EventLog::delete_topic).
    pub(crate) async fn delete(&self, name: &str) -> Result<bool> {
        self.check_open()?;
        // No opening of the topic while its stream goes.
        let _one = self.opening.lock().await;
        let stream = self.names(name).stream;
        let deleted = match self.writer.js.delete_stream(&stream).await {
            Ok(status) if status.success => true,
            Ok(_) => {
                return Err(unavailable(format!(
                    "JetStream did not delete topic {name:?}"
                )))
            }
            Err(e) if stream_not_found(&e) => false,
            Err(e) => return Err(unavailable(format!("cannot delete topic {name:?}: {e}"))),
        };
        let gone = self
            .topics
            .write()
            .expect("topic map poisoned")
            .remove(name);
        if let Some(t) = gone {
            t.stop.cancel();
        }
        Ok(deleted)
    }

    /// [`EventLog::enforce_retention`](eventmesh_storage::EventLog::enforce_retention):
    /// refreshes every open topic. A topic that cannot be refreshed is
    /// skipped (the next pass retries it); the pass itself does not fail:
    /// the first failing pass is logged as a warning, the following ones
    /// at debug level, and the recovery once.
    pub(crate) async fn enforce(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let topics: Vec<Arc<Topic>> = self
            .topics
            .read()
            .expect("topic map poisoned")
            .values()
            .cloned()
            .collect();
        let total = topics.len();
        let errors: Vec<(String, StorageError)> = match self.writer.client.connection_state() {
            async_nats::connection::State::Connected => futures::stream::iter(topics)
                .map(|t| async move { self.refresh(&t).await.err().map(|e| (t.name.clone(), e)) })
                .buffer_unordered(PARALLEL)
                .filter_map(futures::future::ready)
                .collect()
                .await,
            // Not connected: every request would wait for its timeout.
            state => topics
                .iter()
                .map(|t| {
                    (
                        t.name.clone(),
                        unavailable(format!("NATS connection {state}")),
                    )
                })
                .collect(),
        };
        for (topic, e) in &errors {
            tracing::debug!(topic = %topic, error = %e, "retention pass: cannot refresh the topic");
        }
        let was_failing = self
            .retention_failing
            .swap(!errors.is_empty(), Ordering::AcqRel);
        match errors.first() {
            Some((topic, e)) if !was_failing => tracing::warn!(
                failed = errors.len(),
                topics = total,
                topic = %topic,
                error = %e,
                "retention pass: cannot refresh some topics from JetStream; \
                 retrying every pass (logged at debug level until it recovers)"
            ),
            None if was_failing => {
                tracing::info!(
                    topics = total,
                    "retention pass: every topic refreshed again"
                )
            }
            _ => {}
        }
        Ok(())
    }

    /// One topic's part of a retention pass: its floor and own retention
    /// read back, and its stream's limits moved to the default when it
    /// follows the default.
    async fn refresh(&self, t: &Arc<Topic>) -> Result<()> {
        let _held = t.configuring.lock().await;
        let Some(info) = self.current(t).await? else {
            // Gone or replaced: forgotten; opened afresh on next use.
            return Ok(());
        };
        t.raise_floor(&info);
        let own = own_retention(&info.config);
        t.set_own(own);
        *t.ttl_ms.write().expect("ttl lock") = ttl_of(&info.config);
        let default = self.default_retention();
        if own.is_some() || limits_match(&info.config, default, t.partitions) {
            return Ok(());
        }
        let mut config = info.config;
        configure(&mut config, None, default, t.partitions, self.dedup_window);
        let updated = self.update(t, config).await?;
        tracing::info!(
            topic = %t.name,
            ms = default.ms,
            bytes = default.bytes,
            "the topic's stream follows the default retention"
        );
        t.raise_floor(&updated);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_scale_bytes_by_partitions_and_keep_the_minimum_age() {
        let r = |ms, bytes| Retention { ms, bytes };
        assert_eq!(limits(r(0, 0), 4), (Duration::ZERO, 0));
        assert_eq!(
            limits(r(1500, 1000), 4),
            (Duration::from_millis(1500), 4000)
        );
        assert_eq!(limits(r(5, 0), 1), (MIN_AGE, 0));
        assert_eq!(limits(r(u64::MAX, u64::MAX), 3).1, i64::MAX);
        assert_eq!(
            limits(r(u64::MAX, 0), 1).0,
            Duration::from_millis(MAX_AGE_MS)
        );
    }

    #[test]
    fn configure_records_the_own_retention_and_caps_the_duplicate_window() {
        let mut c = stream::Config::default();
        let own = Retention {
            ms: 1000,
            bytes: 10,
        };
        configure(
            &mut c,
            Some(own),
            Retention::FOREVER,
            2,
            Duration::from_secs(120),
        );
        assert_eq!(c.max_age, Duration::from_secs(1));
        assert_eq!(c.max_bytes, 20);
        assert_eq!(c.duplicate_window, Duration::from_secs(1));
        assert_eq!(c.metadata[META_RETENTION], "1000,10");
        assert_eq!(own_retention(&c), Some(own));
        assert!(limits_match(&c, own, 2));
        assert!(!limits_match(&c, own, 3));
        configure(
            &mut c,
            None,
            Retention::FOREVER,
            2,
            Duration::from_secs(120),
        );
        assert_eq!(c.max_age, Duration::ZERO);
        assert_eq!(c.max_bytes, -1);
        assert_eq!(c.duplicate_window, Duration::from_secs(120));
        assert_eq!(own_retention(&c), None);
        assert!(limits_match(&c, Retention::FOREVER, 2));
        c.metadata.insert(META_RETENTION.into(), "x,1".into());
        assert_eq!(own_retention(&c), None);
    }
}
