//! Reads through JetStream's direct get API: a batched request streams up
//! to `batch` messages of one subject from a sequence onward in one round
//! trip, ended by an end-of-batch status.

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use eventmesh_storage::{Record, StorageError};

use crate::unavailable;

/// A direct get request (the server's `JSApiMsgGetRequest`).
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
        let got = batch(client, stream, subject, seq, want, timeout).await?;
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

/// One batched request.
async fn batch(
    client: &Client,
    stream: &str,
    subject: &str,
    seq: u64,
    batch: usize,
    timeout: Duration,
) -> Result<Vec<Record>, StorageError> {
    // No byte budget is sent: the server counts message overhead in it,
    // so the payload budget is applied here.
    let request = Request {
        seq,
        next_by_subj: subject,
        batch: Some(batch),
    };
    let body = serde_json::to_vec(&request).expect("a direct get request serializes");
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
                out.push(Record {
                    offset: seq - 1,
                    payload: msg.payload,
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

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.as_str().parse().ok()
}
