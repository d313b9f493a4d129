//! Reaching the server and preparing it: parsing `nats://HOST:PORT`
//! targets, connecting (with the connect and request timeouts), the
//! JetStream context, the per-topic stream (deleted and created again so
//! a run starts empty) and its shared durable consumer, the names derived
//! from a topic, and the due-time stamp at the start of end-to-end
//! payloads. A topic must be a plain NATS subject (no wildcards), and a
//! stream name holds only characters NATS accepts.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{Client, ServerAddr};
use bytes::{BufMut, Bytes, BytesMut};

use super::{ACK_TIMEOUT, CONNECT_TIMEOUT, CONSUMER, MAX_ACK_PENDING, REQUEST_TIMEOUT, STAMP_LEN};

/// The durable pull consumer all subscribers share: explicit acks, from
/// the stream's first message. Returns the stream's name.
pub(super) async fn create_consumer(stream: &stream::Stream, topic: &str) -> Result<String> {
    let name = stream_name(topic);
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.to_owned()),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: MAX_ACK_PENDING,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating the consumer {CONSUMER} on stream {name}"))?;
    Ok(name)
}

/// A JetStream context whose ack timeout is [`ACK_TIMEOUT`] and which allows
/// at least `window` acks outstanding (the publisher enforces the window).
pub(super) fn context(client: Client, window: usize) -> jetstream::Context {
    jetstream::context::ContextBuilder::new()
        .timeout(ACK_TIMEOUT)
        .max_ack_inflight(window.max(1))
        .backpressure_on_inflight(true)
        .build(client)
}

pub(super) async fn connect(addr: &ServerAddr) -> Result<Client, async_nats::ConnectError> {
    async_nats::ConnectOptions::new()
        .name("eventmesh-bench")
        .connection_timeout(CONNECT_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .connect(addr.clone())
        .await
}

pub(super) fn unreachable(url: &str, cause: &async_nats::ConnectError) -> anyhow::Error {
    anyhow!("cannot reach NATS at {url}: {cause}")
}

/// The server of a `nats://HOST:PORT` target; the scheme may be left out
/// (`HOST:PORT`), the port defaults to 4222, `tls://` asks for TLS.
pub(super) fn server_addr(url: &str) -> Result<ServerAddr> {
    let addr = ServerAddr::from_str(url.trim())
        .map_err(|e| anyhow!("invalid NATS URL {url:?} (expected nats://HOST:PORT): {e}"))?;
    let u = addr.clone().into_inner();
    if !matches!(u.scheme(), "nats" | "tls") {
        bail!("invalid NATS URL {url:?}: use nats://HOST:PORT (or tls://HOST:PORT)");
    }
    if u.host_str().is_none_or(str::is_empty) {
        bail!("invalid NATS URL {url:?}: no host");
    }
    if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
        bail!("invalid NATS URL {url:?}: a NATS URL has no path or query");
    }
    Ok(addr)
}

/// Deletes the run's stream if it exists and creates it again, empty.
pub(super) async fn recreate_stream(
    js: &jetstream::Context,
    topic: &str,
) -> Result<stream::Stream> {
    check_subject(topic)?;
    let name = stream_name(topic);
    match js.delete_stream(&name).await {
        Ok(_) => {}
        Err(e) if is_not_found(e.kind()) => {}
        Err(e) => {
            return Err(anyhow!(e)).with_context(|| {
                format!("deleting the stream {name} of an earlier run (is JetStream enabled: nats-server -js?)")
            })
        }
    }
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![topic.to_owned()],
        storage: StorageType::File,
        num_replicas: 1,
        ..Default::default()
    })
    .await
    .with_context(|| {
        format!(
            "creating the stream {name} for subject {topic:?} (does another stream capture it?)"
        )
    })
}

fn is_not_found(kind: GetStreamErrorKind) -> bool {
    matches!(kind, GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// The stream of a topic: stream names may not hold `.`, `*`, `>`, path
/// separators or whitespace.
pub(super) fn stream_name(topic: &str) -> String {
    let safe: String = topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("eventmesh-bench-{safe}")
}

/// The topic is published to as a NATS subject: dot-separated non-empty
/// tokens, no whitespace, no wildcards.
pub(super) fn check_subject(topic: &str) -> Result<()> {
    let ok = !topic.is_empty()
        && !topic.chars().any(char::is_whitespace)
        && topic
            .split('.')
            .all(|t| !t.is_empty() && t != "*" && t != ">");
    if !ok {
        bail!(
            "topic {topic:?} is not a NATS subject (dot-separated tokens, no spaces or wildcards)"
        );
    }
    Ok(())
}

/// A payload of `size` bytes (at least [`STAMP_LEN`]) starting with
/// `since_start` as little-endian nanoseconds.
pub(super) fn stamped_payload(since_start: Duration, size: usize) -> Bytes {
    let nanos = u64::try_from(since_start.as_nanos()).unwrap_or(u64::MAX);
    let mut b = BytesMut::with_capacity(size.max(STAMP_LEN));
    b.put_u64_le(nanos);
    b.resize(size.max(STAMP_LEN), b'x');
    b.freeze()
}

/// The due time carried by a [`stamped_payload`], as time since
/// [`Recorder::start`](crate::workload::Recorder::start).
pub(super) fn due_offset(payload: &[u8]) -> Option<Duration> {
    let stamp: [u8; STAMP_LEN] = payload.get(..STAMP_LEN)?.try_into().ok()?;
    Some(Duration::from_nanos(u64::from_le_bytes(stamp)))
}
