//! Reads of one partition: from the topic's read cache when it reaches back
//! far enough, else (and for what the cache does not hold yet) batched
//! direct gets.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::Client;
use eventmesh_storage::Record;

use crate::{direct, Result, Topic};

/// A read of one partition's records in `from..until`: from the topic's read
/// cache when it reaches back to `from` (completed from JetStream when the
/// tail lags behind the acknowledgements), else batched direct gets.
pub(crate) async fn partition(
    client: &Client,
    t: &Topic,
    partition: u32,
    Range {
        start: from,
        end: until,
    }: Range<u64>,
    max_records: usize,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Vec<Record>> {
    let (stream, subject) = (&t.names.stream, t.names.subject(partition));
    // Records at offsets `from` and above (sequences from `from + 1`), below
    // `until`.
    let get = |from: u64, max: usize, bytes: usize| async move {
        let mut got = direct::read(client, stream, &subject, from + 1, max, bytes, timeout).await?;
        Record::keep_below(&mut got, until);
        Ok(got)
    };
    let Some(recent) = t.recent.get() else {
        return get(from, max_records, max_bytes).await;
    };
    let from = from.max(t.floor_of(partition));
    let Some(mut got) = recent.read(partition, from, max_records, max_bytes) else {
        return get(from, max_records, max_bytes).await;
    };
    Record::keep_below(&mut got, until);
    let end = t.ends[partition as usize]
        .load(Ordering::Acquire)
        .min(until);
    let next = got.last().map_or(from, |r| r.offset + 1);
    let bytes: usize = got.iter().map(|r| r.payload.len()).sum();
    if next >= end || got.len() >= max_records || bytes >= max_bytes {
        return Ok(got);
    }
    // Acknowledged records the tail has not brought yet: the rest from
    // JetStream.
    let want = max_records - got.len();
    let rest = get(next, want, (max_bytes - bytes).max(1)).await?;
    if got.is_empty() {
        return Ok(rest);
    }
    // The budget's one-record exception belongs to the first.
    let mut room = max_bytes - bytes;
    for r in rest {
        if r.payload.len() > room {
            break;
        }
        room -= r.payload.len();
        got.push(r);
    }
    Ok(got)
}
