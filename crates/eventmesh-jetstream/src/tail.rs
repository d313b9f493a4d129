//! The tail of one topic: an ordered consumer from the stream's end onward
//! that tells this instance about every record stored in the topic by
//! anyone (another instance included). Each message moves its partition's
//! end offset, goes into the topic's read cache (headers only when there is
//! none) and wakes the readers.
//!
//! The consumer is ephemeral and recreated from the last sequence seen when
//! it is lost (a server restart, a leader change, NATS unreachable for a
//! while), so a tail resumes by itself once JetStream is back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::Context;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use eventmesh_storage::Record;

use crate::Topic;

/// Wait before recreating a lost consumer (doubling up to the cap).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

pub(crate) fn spawn(
    js: Context,
    topic: Arc<Topic>,
    from_seq: u64,
    appended: watch::Sender<u64>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = run(js, topic, from_seq, appended) => {}
        }
    });
}

async fn run(js: Context, topic: Arc<Topic>, mut next_seq: u64, appended: watch::Sender<u64>) {
    let mut retry = RETRY_FIRST;
    loop {
        let config = pull::OrderedConfig {
            filter_subject: topic.names.wildcard(),
            // Payloads only when they are kept for readers.
            headers_only: topic.recent.get().is_none(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: next_seq,
            },
            ..Default::default()
        };
        let messages = match js
            .create_consumer_on_stream(config, &topic.names.stream)
            .await
        {
            Ok(consumer) => consumer.messages().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(topic = %topic.name, error = %e, "cannot follow the topic's stream; retrying");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        };
        while let Some(next) = messages.next().await {
            let msg = match next {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(topic = %topic.name, error = %e, "following the topic's stream");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            retry = RETRY_FIRST;
            let Ok(info) = msg.info() else { continue };
            let seq = info.stream_sequence;
            next_seq = next_seq.max(seq + 1);
            if let Some(p) = topic.names.partition_of(msg.subject.as_str()) {
                if let Some(recent) = topic.recent.get() {
                    let payload = msg.message.payload.clone();
                    recent.push(
                        p,
                        Record {
                            offset: seq - 1,
                            payload,
                        },
                    );
                }
                if let Some(end) = topic.ends.get(p as usize) {
                    // A partition's end is one past its last offset (sequence - 1).
                    end.fetch_max(seq, Ordering::AcqRel);
                }
            }
            appended.send_modify(|n| *n = n.wrapping_add(1));
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
}
