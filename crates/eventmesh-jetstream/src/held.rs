//! Events held back until their due time (scheduled delivery) on
//! JetStream: a stream per topic, `<topic's stream>_h`, with one subject per
//! partition. Each message is the stored event, with its due time and key
//! in the headers `Em-Due` and `Em-Key`; its message id (`key@due`) makes a
//! retried schedule one message within the duplicate window. A released or
//! cancelled event is deleted from the stream.
//!
//! JetStream keeps messages in the order they were stored, not by due
//! time, so each instance keeps, per partition it has looked at, an index
//! of (due time, sequence), read from the stream the first time and then
//! brought up to date from the last sequence it read before every
//! question. An entry another instance deleted is dropped when its message
//! is found gone. Counts come from the stream itself.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::{self as js, stream};
use async_nats::HeaderMap;
use bytes::Bytes;
use serde::Deserialize;

use eventmesh_storage::{Scheduled, ScheduledSummary, StorageError};

use crate::direct::{self, header_u64};
use crate::names::Names;
use crate::unavailable;

const DUE: &str = "Em-Due";
const KEY: &str = "Em-Key";
/// Deletions sent at once.
const DELETES_IN_FLIGHT: usize = 64;

/// One partition's index.
#[derive(Default)]
struct Index {
    /// The stream sequences read so far are below this one.
    next_seq: u64,
    by_due: BTreeSet<(u64, u64)>,
}

/// The indexes of the partitions this instance has looked at.
#[derive(Default)]
pub(crate) struct Held {
    indexes: Mutex<HashMap<(String, u32), Index>>,
}

/// What the held-back store needs of the log.
pub(crate) struct Ctx<'a> {
    pub client: &'a async_nats::Client,
    pub js: &'a js::Context,
    pub names: &'a Names,
    pub replicas: usize,
    pub timeout: Duration,
}

impl Ctx<'_> {
    fn stream(&self) -> String {
        self.names.held_stream()
    }

    async fn ensure_stream(&self) -> Result<(), StorageError> {
        let config = stream::Config {
            name: self.stream(),
            subjects: vec![self.names.held_wildcard()],
            num_replicas: self.replicas,
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::Old,
            allow_direct: true,
            ..Default::default()
        };
        self.js
            .get_or_create_stream(config)
            .await
            .map(|_| ())
            .map_err(|e| {
                unavailable(format!(
                    "cannot make the held-back stream {}: {e}",
                    self.stream()
                ))
            })
    }
}

impl Held {
    pub(crate) async fn schedule(
        &self,
        cx: &Ctx<'_>,
        topic: &str,
        entries: Vec<Scheduled>,
    ) -> Result<(), StorageError> {
        cx.ensure_stream().await?;
        let mut acks = Vec::with_capacity(entries.len());
        for e in entries {
            let mut headers = HeaderMap::new();
            headers.insert(DUE, e.due_ms.to_string().as_str());
            headers.insert(KEY, e.key.as_str());
            headers.insert("Nats-Msg-Id", format!("{}@{}", e.key, e.due_ms).as_str());
            let ack = cx
                .js
                .publish_with_headers(cx.names.held_subject(e.partition), headers, e.payload)
                .await
                .map_err(|err| {
                    unavailable(format!("cannot hold back an event of {topic:?}: {err}"))
                })?;
            acks.push(ack);
        }
        for ack in acks {
            tokio::time::timeout(cx.timeout, ack)
                .await
                .map_err(|_| unavailable(format!("holding back an event of {topic:?}: no answer")))?
                .map_err(|err| {
                    unavailable(format!("cannot hold back an event of {topic:?}: {err}"))
                })?;
        }
        Ok(())
    }

    /// Reads what the stream holds past the index's last sequence.
    async fn refresh(&self, cx: &Ctx<'_>, topic: &str, partition: u32) -> Result<(), StorageError> {
        let key = (topic.to_string(), partition);
        let mut from = {
            let mut ix = self.indexes.lock().expect("held lock");
            ix.entry(key.clone()).or_default().next_seq.max(1)
        };
        let subject = cx.names.held_subject(partition);
        loop {
            let got = match direct::messages(
                cx.client,
                &cx.stream(),
                &subject,
                from,
                direct::MAX_BATCH,
                cx.timeout,
            )
            .await
            {
                Ok(g) => g,
                // No stream yet: nothing held back.
                Err(StorageError::Io(m)) if m.contains("does not exist") => return Ok(()),
                Err(e) => return Err(e),
            };
            let Some(last) = got.last().map(|m| m.seq) else {
                return Ok(());
            };
            let full = got.len() == direct::MAX_BATCH;
            {
                let mut ix = self.indexes.lock().expect("held lock");
                let index = ix.entry(key.clone()).or_default();
                for m in &got {
                    if let Some(due) = m.headers.as_ref().and_then(|h| header_u64(h, DUE)) {
                        index.by_due.insert((due, m.seq));
                    }
                }
                index.next_seq = index.next_seq.max(last + 1);
            }
            from = last + 1;
            if !full {
                return Ok(());
            }
        }
    }

    pub(crate) async fn due(
        &self,
        cx: &Ctx<'_>,
        topic: &str,
        partition: u32,
        until_ms: u64,
        max: usize,
    ) -> Result<Vec<Scheduled>, StorageError> {
        self.refresh(cx, topic, partition).await?;
        let key = (topic.to_string(), partition);
        let wanted: Vec<(u64, u64)> = {
            let ix = self.indexes.lock().expect("held lock");
            match ix.get(&key) {
                Some(index) => index
                    .by_due
                    .iter()
                    .take_while(|(due, _)| *due <= until_ms)
                    .take(max)
                    .copied()
                    .collect(),
                None => Vec::new(),
            }
        };
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // Read in sequence order, from the lowest wanted on; messages of
        // the subject not wanted are passed over.
        let mut seqs: Vec<u64> = wanted.iter().map(|(_, s)| *s).collect();
        seqs.sort_unstable();
        let mut found: HashMap<u64, (Option<HeaderMap>, Bytes)> = HashMap::new();
        let subject = cx.names.held_subject(partition);
        let mut at = 0;
        while at < seqs.len() {
            // No more messages than the wanted sequences span.
            let span = seqs[seqs.len() - 1] - seqs[at] + 1;
            let want = usize::try_from(span)
                .unwrap_or(usize::MAX)
                .min(direct::MAX_BATCH);
            let got = direct::messages(
                cx.client,
                &cx.stream(),
                &subject,
                seqs[at],
                want,
                cx.timeout,
            )
            .await?;
            let Some(last) = got.last().map(|m| m.seq) else {
                break;
            };
            for m in got {
                if seqs.binary_search(&m.seq).is_ok() {
                    found.insert(m.seq, (m.headers, m.payload));
                }
            }
            at = seqs.partition_point(|s| *s <= last);
        }
        let mut out = Vec::with_capacity(wanted.len());
        let mut gone = Vec::new();
        for (due, seq) in wanted {
            match found.remove(&seq) {
                Some((headers, payload)) => out.push(Scheduled {
                    partition,
                    due_ms: due,
                    key: headers
                        .as_ref()
                        .and_then(|h| h.get(KEY))
                        .map(|v| v.as_str().to_string())
                        .unwrap_or_default(),
                    payload,
                    handle: seq,
                }),
                // Deleted by another instance (released or cancelled).
                None => gone.push((due, seq)),
            }
        }
        if !gone.is_empty() {
            let mut ix = self.indexes.lock().expect("held lock");
            if let Some(index) = ix.get_mut(&key) {
                for g in gone {
                    index.by_due.remove(&g);
                }
            }
        }
        Ok(out)
    }

    pub(crate) async fn unschedule(
        &self,
        cx: &Ctx<'_>,
        topic: &str,
        partition: u32,
        entries: &[Scheduled],
    ) -> Result<usize, StorageError> {
        let stream = match cx.js.get_stream_no_info(cx.stream()).await {
            Ok(s) => s,
            Err(_) => return Ok(0),
        };
        // Events held back in the order they are due (the usual case) are
        // released as the first messages of their subject: one purge of
        // the subject below the last of them forgets them all.
        let key = (topic.to_string(), partition);
        let last = entries.iter().map(|e| e.handle).max().unwrap_or(0);
        let below_last_all_released = {
            let ix = self.indexes.lock().expect("held lock");
            let released: std::collections::HashSet<u64> =
                entries.iter().map(|e| e.handle).collect();
            ix.get(&key).is_some_and(|index| {
                index
                    .by_due
                    .iter()
                    .filter(|(_, seq)| *seq <= last)
                    .all(|(_, seq)| released.contains(seq))
            })
        };
        if below_last_all_released && last > 0 {
            let purged = stream
                .purge()
                .filter(cx.names.held_subject(partition))
                .sequence(last + 1)
                .await
                .map_err(|e| {
                    unavailable(format!("cannot forget held-back events of {topic:?}: {e}"))
                })?;
            self.forget_entries(&key, entries);
            return Ok(usize::try_from(purged.purged).unwrap_or(usize::MAX));
        }
        let mut n = 0;
        let mut failed = None;
        for chunk in entries.chunks(DELETES_IN_FLIGHT) {
            let mut calls = Vec::with_capacity(chunk.len());
            for e in chunk {
                calls.push(stream.delete_message(e.handle));
            }
            for result in futures::future::join_all(calls).await {
                match result {
                    Ok(_) => n += 1,
                    // Gone already (released or cancelled elsewhere).
                    Err(err) if gone(&err.to_string()) => {}
                    Err(err) => failed = Some(err.to_string()),
                }
            }
        }
        self.forget_entries(&key, entries);
        match failed {
            Some(err) => Err(unavailable(format!(
                "cannot forget a held-back event of {topic:?}: {err}"
            ))),
            None => Ok(n),
        }
    }

    fn forget_entries(&self, key: &(String, u32), entries: &[Scheduled]) {
        let mut ix = self.indexes.lock().expect("held lock");
        if let Some(index) = ix.get_mut(key) {
            for e in entries {
                index.by_due.remove(&(e.due_ms, e.handle));
            }
        }
    }

    pub(crate) async fn summary(
        &self,
        cx: &Ctx<'_>,
        topic: &str,
        partition: u32,
    ) -> Result<ScheduledSummary, StorageError> {
        self.refresh(cx, topic, partition).await?;
        let count = subject_count(cx, partition).await?;
        let next_due_ms = if count == 0 {
            None
        } else {
            // The first entry still stored (dropping those found gone).
            self.due(cx, topic, partition, u64::MAX, 1)
                .await?
                .first()
                .map(|e| e.due_ms)
        };
        Ok(ScheduledSummary { count, next_due_ms })
    }

    /// Forgets a deleted topic's indexes.
    pub(crate) fn forget(&self, topic: &str) {
        self.indexes
            .lock()
            .expect("held lock")
            .retain(|(t, _), _| t != topic);
    }
}

/// How many messages the partition's held-back subject holds.
async fn subject_count(cx: &Ctx<'_>, partition: u32) -> Result<u64, StorageError> {
    #[derive(Deserialize)]
    struct Info {
        #[serde(default)]
        state: State,
        error: Option<serde_json::Value>,
    }
    #[derive(Deserialize, Default)]
    struct State {
        #[serde(default)]
        subjects: HashMap<String, u64>,
    }
    let subject = cx.names.held_subject(partition);
    let body = serde_json::json!({ "subjects_filter": subject }).to_string();
    let msg = tokio::time::timeout(
        cx.timeout,
        cx.client.request(
            format!("$JS.API.STREAM.INFO.{}", cx.stream()),
            Bytes::from(body),
        ),
    )
    .await
    .map_err(|_| unavailable("counting held-back events: no answer"))?
    .map_err(|e| unavailable(format!("cannot count held-back events: {e}")))?;
    let info: Info = serde_json::from_slice(&msg.payload)
        .map_err(|e| StorageError::Io(format!("counting held-back events: {e}")))?;
    if info.error.is_some() {
        // No stream yet: nothing held back.
        return Ok(0);
    }
    Ok(info.state.subjects.get(&subject).copied().unwrap_or(0))
}

/// Deletes a topic's held-back stream (with the topic).
pub(crate) async fn delete_stream(js: &js::Context, names: &Names) {
    let _ = js.delete_stream(names.held_stream()).await;
}

/// Whether a deletion failed because the message is gone already (the
/// servers say `no message found` or `sequence N not found`).
fn gone(error: &str) -> bool {
    error.contains("no message found") || error.contains("not found")
}
