//! What publishers send: the structured events of every workload (with
//! `--select`'s selected type and `--groups`' group extension), batches of
//! them, the replies of responders, and the [`Feed`] a publisher draws
//! its operations from.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::time::Instant;

use crate::workload::{self, Quota, Workload};

/// The type of the events `--select` lets through.
pub(super) const SELECTED: &str = "bench.selected";

/// A structured event of `size` bytes of data.
fn event_json(id: &str, size: usize) -> Vec<u8> {
    typed_event_json(id, "bench.event", None, size)
}

/// The extension that says which `--groups` group an event is for.
const GROUP_EXTENSION: &str = "benchgroup";

/// The filter of `--groups` group `k`.
pub(super) fn group_filter(k: u32) -> serde_json::Value {
    serde_json::json!([{"sql": format!("{GROUP_EXTENSION} = 'g{k}'")}])
}

/// A structured event of type `ty` with `size` bytes of data, and the
/// `benchgroup` extension `g<group>` when a group is given.
fn typed_event_json(id: &str, ty: &str, group: Option<u64>, size: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(size + 180);
    body.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":\"");
    body.extend_from_slice(id.as_bytes());
    body.extend_from_slice(b"\",\"source\":\"/bench\",\"type\":\"");
    body.extend_from_slice(ty.as_bytes());
    if let Some(g) = group {
        body.extend_from_slice(format!("\",\"{GROUP_EXTENSION}\":\"g{g}").as_bytes());
    }
    body.extend_from_slice(b"\",\"datacontenttype\":\"text/plain\",\"data\":\"");
    body.extend(std::iter::repeat_n(b'x', size));
    body.extend_from_slice(b"\"}");
    body
}

/// The reply to a request: no data, the request's `correlationid`; its id
/// is `reply-<n>` with `n` unique in the process, after a prefix unique to
/// it (so that idempotent publishing stores every reply).
pub(super) fn reply_json(n: u64, correlation: &str) -> Bytes {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| uuid::Uuid::now_v7().simple().to_string());
    let c = serde_json::Value::String(correlation.to_owned());
    Bytes::from(format!(
        r#"{{"specversion":"1.0","id":"reply-{prefix}-{n}","source":"/bench","type":"bench.reply","correlationid":{c}}}"#
    ))
}

/// Numbers the replies of every responder of the process.
pub(super) static REPLIES: AtomicU64 = AtomicU64::new(0);

/// `[e1,e2,...]`, the body of a publish-batch.
fn json_array(events: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, e) in events.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&e);
    }
    out.push(b']');
    out
}

/// What a publisher sends, one operation at a time.
pub(super) enum Feed {
    /// Events with ids of their own (`<prefix>-<n>`, so that the runtime's
    /// idempotent publishing stores every one) and nothing else to carry
    /// (`pub`, `request`); `events` per operation.
    Counted {
        size: usize,
        events: u32,
        prefix: String,
        next: AtomicU64,
    },
    /// Events whose ids carry their due time and a sequence number claimed
    /// from `quota` (`pubsub`, `sub`); up to `batch` per operation.
    Stamped {
        size: usize,
        batch: u64,
        quota: Quota,
        /// One event in this many is `bench.selected` (`--select`).
        select: Option<u64>,
        /// Event n is for group n mod this (`--groups`).
        groups: Option<u32>,
    },
}

impl Feed {
    pub(super) fn counted(w: &Workload) -> Feed {
        Feed::Counted {
            size: w.size,
            events: w.batch.max(1) as u32,
            prefix: uuid::Uuid::now_v7().simple().to_string(),
            next: AtomicU64::new(0),
        }
    }

    pub(super) fn stamped(w: &Workload, quota: Quota) -> Feed {
        Feed::Stamped {
            size: w.size,
            batch: w.batch.max(1) as u64,
            quota,
            select: w.select,
            groups: w.groups,
        }
    }

    /// The body and event count of the next operation, due at `due`;
    /// `None` once the quota is used up.
    pub(super) fn next(&self, start: Instant, due: Instant) -> Option<(Bytes, u32)> {
        match self {
            Feed::Counted {
                size,
                events,
                prefix,
                next,
            } => {
                let first = next.fetch_add(u64::from(*events), Ordering::Relaxed);
                let event = |n| event_json(&format!("{prefix}-{n}"), *size);
                let body = if *events == 1 {
                    event(first)
                } else {
                    json_array((first..first + u64::from(*events)).map(event))
                };
                Some((body.into(), *events))
            }
            Feed::Stamped {
                size,
                batch,
                quota,
                select,
                groups,
            } => {
                let seqs = quota.claim(*batch)?;
                let n = (seqs.end - seqs.start) as u32;
                let event = |seq: u64| {
                    let ty = match select {
                        Some(k) if seq % k == 0 => SELECTED,
                        _ => "bench.event",
                    };
                    let group = groups.map(|g| seq % u64::from(g));
                    typed_event_json(&workload::stamp_id(start, due, seq), ty, group, *size)
                };
                let body = if n == 1 {
                    event(seqs.start)
                } else {
                    json_array(seqs.map(event))
                };
                Some((body.into(), n))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_is_valid_with_exact_data_size() {
        let v: serde_json::Value = serde_json::from_slice(&event_json("id-1", 100)).unwrap();
        assert_eq!(v["data"].as_str().unwrap().len(), 100);
        assert_eq!(v["id"], "id-1");
    }
}
