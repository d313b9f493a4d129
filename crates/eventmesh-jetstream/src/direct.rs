//! Reads through JetStream's direct get API: a batched request streams up
//! to `batch` messages of one subject from a sequence onward in one round
//! trip, ended by an end-of-batch status.
//!
//! Any replica of a stream answers a direct get, followers included, and a
//! follower may not have applied what the leader acknowledged a moment
//! ago: it answers with a prefix of the stream. That is harmless for a
//! read (what it lacks is read next time), but not for a lookup that
//! decides where to start: "nothing stored yet" from a lagging follower
//! would put a consumer at the end, past records it never read. Those
//! lookups ([`leader_seq`]) go to the stream's leader instead, through the
//! message get API, which only the leader answers.

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use eventmesh_storage::{Record, StorageError};

use crate::unavailable;

/// A direct get request (the server's `JSApiMsgGetRequest`): from a
/// sequence.
#[derive(Debug, Serialize)]
struct Request<'a> {
    seq: u64,
    next_by_subj: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<usize>,
}

/// Largest batch one request asks for.
pub(crate) const MAX_BATCH: usize = 1000;

/// Messages of `subject` at stream sequences `from_seq` and above: at most
/// `max` of them and about `max_bytes` of payload, at least one when any is
/// stored. Each record's offset is its sequence minus one.
pub(crate) async fn read(
    client: &Client,
    stream: &str,
    subject: &str,
    from_seq: u64,
    max: usize,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<Record>, StorageError> {
    let mut out = Vec::new();
    let mut seq = from_seq;
    let mut bytes = 0usize;
    // Batches of at most MAX_BATCH, until `max` records, the byte budget,
    // or the end of the subject.
    while out.len() < max && (out.is_empty() || bytes < max_bytes) {
        let want = (max - out.len()).min(MAX_BATCH);
        let request = Request {
            seq,
            next_by_subj: subject,
            batch: Some(want),
        };
        let got = batch(client, stream, &request, timeout).await?;
        let Some(last) = got.last() else { break };
        seq = last.offset + 2;
        let full = got.len() == want;
        for r in got {
            if !out.is_empty() && bytes.saturating_add(r.payload.len()) > max_bytes {
                return Ok(out);
            }
            bytes = bytes.saturating_add(r.payload.len());
            out.push(r);
        }
        if !full {
            // A short batch: the subject ended.
            break;
        }
    }
    Ok(out)
}

/// How many messages of `subject` the stream holds at sequences
/// `from_seq..=up_to_seq`: a batched get reports with each message how many
/// of the subject are stored after it, so the count is the difference of
/// two such answers (appends made between the two asks may shift it by as
/// many).
pub(crate) async fn count(
    client: &Client,
    stream: &str,
    subject: &str,
    from_seq: u64,
    up_to_seq: u64,
    timeout: Duration,
) -> Result<u64, StorageError> {
    if from_seq > up_to_seq {
        return Ok(0);
    }
    let from = from_on(client, stream, subject, from_seq, timeout).await?;
    let Some((first, after_first)) = from else {
        return Ok(0);
    };
    if first > up_to_seq {
        return Ok(0);
    }
    Ok(
        match from_on(client, stream, subject, up_to_seq + 1, timeout).await? {
            Some((_, after_last)) => after_first.saturating_sub(after_last),
            None => after_first + 1,
        },
    )
}

/// The first message of `subject` at `seq` or later: its sequence and how
/// many of the subject are stored after it.
async fn from_on(
    client: &Client,
    stream: &str,
    subject: &str,
    seq: u64,
    timeout: Duration,
) -> Result<Option<(u64, u64)>, StorageError> {
    let request = Request {
        seq,
        next_by_subj: subject,
        batch: Some(1),
    };
    let body = serde_json::to_vec(&request).expect("a direct get request serializes");
    let msg = tokio::time::timeout(
        timeout,
        client.request(format!("$JS.API.DIRECT.GET.{stream}"), Bytes::from(body)),
    )
    .await
    .map_err(|_| unavailable(format!("counting in {stream}: no answer")))?
    .map_err(|e| unavailable(format!("cannot count in {stream}: {e}")))?;
    match msg.status.map(|s| s.as_u16()) {
        None | Some(200) => {
            let headers = msg.headers.as_ref();
            let seq = headers.and_then(|h| header_u64(h, "Nats-Sequence"));
            let pending = headers.and_then(|h| header_u64(h, "Nats-Num-Pending"));
            match (seq, pending) {
                (Some(seq), Some(pending)) => Ok(Some((seq, pending))),
                _ => Err(StorageError::Io(format!(
                    "counting in {stream}: an answer without Nats-Sequence or Nats-Num-Pending"
                ))),
            }
        }
        Some(404) | Some(204) => Ok(None),
        Some(status) => Err(StorageError::Io(format!(
            "counting in {stream}: status {status} {}",
            msg.description.unwrap_or_default()
        ))),
    }
}

/// One batched request.
async fn batch(
    client: &Client,
    stream: &str,
    request: &Request<'_>,
    timeout: Duration,
) -> Result<Vec<Record>, StorageError> {
    Ok(batch_raw(client, stream, request, timeout)
        .await?
        .into_iter()
        .map(|m| Record {
            offset: m.seq - 1,
            payload: m.payload,
        })
        .collect())
}

/// A message read by a direct get: its sequence, headers and payload.
pub(crate) struct Got {
    pub seq: u64,
    pub headers: Option<HeaderMap>,
    pub payload: Bytes,
}

/// Up to `max` messages of `subject` from `from_seq` on, with their
/// headers, in one batched request.
pub(crate) async fn messages(
    client: &Client,
    stream: &str,
    subject: &str,
    from_seq: u64,
    max: usize,
    timeout: Duration,
) -> Result<Vec<Got>, StorageError> {
    let request = Request {
        seq: from_seq,
        next_by_subj: subject,
        batch: Some(max.clamp(1, MAX_BATCH)),
    };
    batch_raw(client, stream, &request, timeout).await
}

async fn batch_raw(
    client: &Client,
    stream: &str,
    request: &Request<'_>,
    timeout: Duration,
) -> Result<Vec<Got>, StorageError> {
    // No byte budget is sent: the server counts message overhead in it,
    // so the payload budget is applied here.
    let batch = request.batch.unwrap_or(1);
    let body = serde_json::to_vec(request).expect("a direct get request serializes");
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| unavailable(format!("cannot read {stream}: {e}")))?;
    client
        .publish_with_reply(
            format!("$JS.API.DIRECT.GET.{stream}"),
            inbox,
            Bytes::from(body),
        )
        .await
        .map_err(|e| unavailable(format!("cannot read {stream}: {e}")))?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut out = Vec::with_capacity(batch.min(256));
    loop {
        let next = tokio::time::timeout_at(deadline, replies.next()).await;
        let msg = match next {
            Ok(Some(m)) => m,
            Ok(None) => return Err(unavailable(format!("reading {stream}: connection closed"))),
            Err(_) => {
                return Err(unavailable(format!(
                    "reading {stream}: no answer within {} ms",
                    timeout.as_millis()
                )))
            }
        };
        match msg.status.map(|s| s.as_u16()) {
            None | Some(200) => {
                let headers = msg.headers.as_ref();
                let Some(seq) = headers.and_then(|h| header_u64(h, "Nats-Sequence")) else {
                    return Err(StorageError::Io(format!(
                        "reading {stream}: a direct get answer without Nats-Sequence"
                    )));
                };
                out.push(Got {
                    seq,
                    payload: msg.payload,
                    headers: msg.headers,
                });
                if out.len() == batch {
                    // The end-of-batch marker follows; it adds nothing.
                    return Ok(out);
                }
            }
            // End of batch, or nothing stored at or after `seq`.
            Some(204) | Some(404) => return Ok(out),
            Some(503) => {
                return Err(StorageError::Io(format!(
                    "reading {stream}: the stream does not exist (or has no leader)"
                )))
            }
            Some(status) => {
                return Err(StorageError::Io(format!(
                    "reading {stream}: status {status} {}",
                    msg.description.unwrap_or_default()
                )))
            }
        }
    }
}

/// What [`leader_seq`] looks up in a partition's subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The first message at this sequence or after.
    From(u64),
    /// The first message stored at this time (ms since the epoch) or later.
    At(u64),
    /// The last message.
    Last,
}

impl Lookup {
    /// The message get request for it in `subject`.
    fn request(&self, subject: &str) -> serde_json::Value {
        match self {
            Lookup::From(seq) => serde_json::json!({"seq": seq, "next_by_subj": subject}),
            Lookup::At(ms) => serde_json::json!({
                "start_time": eventmesh_core::time::format_rfc3339_ms(*ms),
                "next_by_subj": subject,
            }),
            Lookup::Last => serde_json::json!({"last_by_subj": subject}),
        }
    }
}

/// The message get API's answer, as far as it is read here.
#[derive(Debug, serde::Deserialize)]
struct LeaderAnswer {
    message: Option<LeaderMessage>,
    error: Option<LeaderError>,
}

#[derive(Debug, serde::Deserialize)]
struct LeaderMessage {
    seq: u64,
}

#[derive(Debug, serde::Deserialize)]
struct LeaderError {
    code: u16,
    #[serde(default)]
    err_code: u32,
    #[serde(default)]
    description: String,
}

/// The sequence of the message of `subject` that `lookup` names, as the
/// stream's leader has it; `None` when there is none.
pub(crate) async fn leader_seq(
    client: &Client,
    stream: &str,
    subject: &str,
    lookup: Lookup,
    timeout: Duration,
) -> Result<Option<u64>, StorageError> {
    let body = serde_json::to_vec(&lookup.request(subject)).expect("a request serializes");
    let msg = tokio::time::timeout(
        timeout,
        client.request(
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
            Bytes::from(body),
        ),
    )
    .await
    .map_err(|_| unavailable(format!("looking up {subject} in {stream}: no answer")))?
    .map_err(|e| unavailable(format!("cannot look up {subject} in {stream}: {e}")))?;
    let answer: LeaderAnswer = serde_json::from_slice(&msg.payload).map_err(|e| {
        StorageError::Io(format!(
            "looking up {subject} in {stream}: a bad answer: {e}"
        ))
    })?;
    match (answer.message, answer.error) {
        (Some(m), _) => Ok(Some(m.seq)),
        // No message found.
        (None, Some(e)) if e.code == 404 && e.err_code == 10037 => Ok(None),
        (None, Some(e)) => Err(unavailable(format!(
            "looking up {subject} in {stream}: {} ({}, {})",
            e.description, e.code, e.err_code
        ))),
        (None, None) => Err(StorageError::Io(format!(
            "looking up {subject} in {stream}: an answer with neither message nor error"
        ))),
    }
}

pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::NatsServer;

    #[test]
    fn lookups_are_message_get_requests() {
        assert_eq!(
            Lookup::From(3).request("s.1"),
            serde_json::json!({"seq": 3, "next_by_subj": "s.1"})
        );
        assert_eq!(
            Lookup::At(1_796_461_200_500).request("s.1"),
            serde_json::json!({"start_time": "2026-12-05T09:00:00.500Z", "next_by_subj": "s.1"})
        );
        assert_eq!(
            Lookup::Last.request("s.1"),
            serde_json::json!({"last_by_subj": "s.1"})
        );
    }

    /// The leader's lookups against a real server: the first message from
    /// a sequence or a time, the last one, none, and a stream that is not
    /// there.
    #[tokio::test]
    async fn the_leader_answers_lookups() {
        let nats = NatsServer::start();
        let client = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "LOOK".into(),
            subjects: vec!["look.>".into()],
            allow_direct: true,
            ..Default::default()
        })
        .await
        .unwrap();
        for subject in ["look.0", "look.1", "look.0"] {
            js.publish(subject, Bytes::from_static(b"x"))
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let t = Duration::from_secs(5);
        let look = |subject: &'static str, lookup: Lookup| {
            let client = client.clone();
            async move { leader_seq(&client, "LOOK", subject, lookup, t).await }
        };
        assert_eq!(look("look.0", Lookup::From(1)).await.unwrap(), Some(1));
        assert_eq!(look("look.0", Lookup::From(2)).await.unwrap(), Some(3));
        assert_eq!(look("look.0", Lookup::From(4)).await.unwrap(), None);
        assert_eq!(look("look.1", Lookup::Last).await.unwrap(), Some(2));
        assert_eq!(look("look.0", Lookup::Last).await.unwrap(), Some(3));
        assert_eq!(look("look.2", Lookup::Last).await.unwrap(), None);
        assert_eq!(look("look.1", Lookup::At(0)).await.unwrap(), Some(2));
        let later = eventmesh_core::time::now_ms() + 60_000;
        assert_eq!(look("look.1", Lookup::At(later)).await.unwrap(), None);
        match leader_seq(&client, "ABSENT", "x", Lookup::Last, t).await {
            Err(StorageError::Unavailable(m)) => assert!(m.contains("ABSENT"), "{m}"),
            other => panic!("a lookup in a stream that is not there: {other:?}"),
        }
    }
}
