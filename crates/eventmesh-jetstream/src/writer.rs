//! Appends to JetStream: one publish per record, an atomic batch for
//! several, each keyed record with its key as message id, and the
//! acknowledgement read into where each record went.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_nats::jetstream::{self as js, Context};
use async_nats::{Client, HeaderMap};
use tokio::sync::{oneshot, watch};

use eventmesh_storage::{Append, Placed, StorageError};

use crate::acks::{Acked, Acks, Failed, Stored};
use crate::{unavailable, Result, Topic};

/// "atomic publish batch contains duplicate message id".
const DUPLICATE_IN_BATCH: u64 = js::ErrorCode::ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE.0;

/// Publishes records and learns where they went; cloned into the future of
/// each pending append.
pub(crate) struct Writer {
    pub(crate) client: Client,
    pub(crate) js: Context,
    pub(crate) acks: Arc<Acks>,
    pub(crate) appended: watch::Sender<u64>,
}

impl Writer {
    /// Publishes the records (one plain publish, or one atomic batch, each
    /// keyed record with its key as message id) and returns where the
    /// acknowledgement will come.
    pub(crate) async fn send(
        &self,
        t: &Topic,
        records: &[Append],
    ) -> Result<oneshot::Receiver<Acked>> {
        let n = records.len();
        let id = (n > 1).then(|| uuid::Uuid::now_v7().simple().to_string());
        for (i, a) in records.iter().enumerate() {
            let mut headers = HeaderMap::new();
            if let Some(key) = &a.key {
                headers.insert("Nats-Msg-Id", key.as_str());
            }
            if let Some(id) = &id {
                headers.insert("Nats-Batch-Id", id.as_str());
                headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            }
            let subject = t.subjects[a.partition as usize].clone();
            if i + 1 < n {
                self.client
                    .publish_with_headers(subject, headers, a.payload.clone())
                    .await
                    .map_err(|e| send_error(&t.name, e))?;
                continue;
            }
            if id.is_some() {
                headers.insert("Nats-Batch-Commit", "1");
            }
            let (reply, ack) = self.acks.expect();
            self.client
                .publish_with_reply_and_headers(subject, reply, headers, a.payload.clone())
                .await
                .map_err(|e| send_error(&t.name, e))?;
            return Ok(ack);
        }
        Err(StorageError::InvalidArgument("nothing to publish".into()))
    }

    /// Waits for the acknowledgement of `records` (keys all distinct) and
    /// answers where each is.
    pub(crate) async fn settle(
        self: Arc<Self>,
        t: Arc<Topic>,
        records: Vec<Append>,
        ack: oneshot::Receiver<Acked>,
    ) -> Result<Vec<Placed>> {
        let n = records.len();
        match ack.await.unwrap_or(Err(Failed::TimedOut)) {
            Ok(Stored {
                sequence,
                duplicate,
            }) if n == 1 => {
                let placed = vec![Placed {
                    partition: records[0].partition,
                    offset: sequence - 1,
                    duplicate,
                }];
                self.stored(&t, &placed);
                Ok(placed)
            }
            Ok(Stored { sequence, .. }) => {
                // An atomic batch is stored at consecutive sequences.
                let first = sequence
                    .checked_sub(n as u64 - 1)
                    .filter(|f| *f >= 1)
                    .ok_or_else(|| {
                        StorageError::Io(format!(
                            "JetStream acknowledged a batch of {n} at sequence {sequence}"
                        ))
                    })?;
                let placed: Vec<Placed> = records
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Placed {
                        partition: a.partition,
                        offset: first + i as u64 - 1,
                        duplicate: false,
                    })
                    .collect();
                self.stored(&t, &placed);
                Ok(placed)
            }
            // A batch holding a key stored before is refused whole: each
            // record then goes on its own, stored or answered as a
            // duplicate (the new records of such a batch are not atomic).
            Err(Failed::Refused { code, .. }) if n > 1 && code == DUPLICATE_IN_BATCH => {
                // Boxed: the common path's future stays small.
                Box::pin(self.one_by_one(t, records)).await
            }
            Err(failed) => Err(publish_error(&t.name, failed)),
        }
    }

    /// Appends each record on its own.
    async fn one_by_one(
        self: Arc<Self>,
        t: Arc<Topic>,
        records: Vec<Append>,
    ) -> Result<Vec<Placed>> {
        let mut placed = Vec::with_capacity(records.len());
        for a in records {
            let ack = self.send(&t, std::slice::from_ref(&a)).await?;
            let one = Box::pin(Arc::clone(&self).settle(t.clone(), vec![a], ack)).await?;
            placed.extend(one);
        }
        Ok(placed)
    }

    /// Moves the ends past records now stored and wakes the readers,
    /// unless the topic's tail fills a read cache: it wakes them once the
    /// records are there, sparing a read from JetStream.
    fn stored(&self, t: &Topic, placed: &[Placed]) {
        for p in placed.iter().filter(|p| !p.duplicate) {
            let before = t.ends[p.partition as usize].fetch_max(p.offset + 1, Ordering::AcqRel);
            if let Some(recent) = t.recent.get() {
                recent.acked(p.partition, before);
            }
        }
        if t.recent.get().is_none() {
            self.appended.send_modify(|v| *v = v.wrapping_add(1));
        }
    }
}

/// A publish that could not go out.
fn send_error(topic: &str, e: async_nats::PublishError) -> StorageError {
    match e.kind() {
        async_nats::client::PublishErrorKind::MaxPayloadExceeded => StorageError::InvalidArgument(
            format!("an event of topic {topic:?} is larger than the NATS servers accept: {e}"),
        ),
        _ => unavailable(format!("cannot publish to {topic:?}: {e}")),
    }
}

/// A publish JetStream did not store.
fn publish_error(topic: &str, failed: Failed) -> StorageError {
    match failed {
        // No responders: the stream has no leader right now (an election
        // after a server failed), or JetStream is gone.
        Failed::NoResponders => unavailable(format!(
            "no JetStream server answered for topic {topic:?} (stream leader unavailable)"
        )),
        Failed::TimedOut => unavailable(format!(
            "JetStream did not acknowledge a publish to {topic:?} in time"
        )),
        Failed::Refused { code, description } => unavailable(format!(
            "cannot publish to {topic:?}: {description} (JetStream error {code})"
        )),
        Failed::Unreadable(why) => unavailable(format!(
            "cannot read JetStream's acknowledgement of a publish to {topic:?}: {why}"
        )),
    }
}
