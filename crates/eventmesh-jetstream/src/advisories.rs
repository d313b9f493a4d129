//! Stream advisories: the servers announce every stream created or deleted
//! (`$JS.EVENT.ADVISORY.STREAM.CREATED.<stream>`, `...DELETED.<stream>`),
//! whoever did it. The log follows them for its own prefix and bumps its
//! topic watch, so that an instance learns within a round trip that
//! another instance sharing the log made or removed a topic.
//!
//! Advisories are plain NATS messages: one missed while the connection
//! was down is not sent again, and an account that may not subscribe to
//! `$JS.EVENT.>` never gets any. Whoever follows the topics therefore
//! also lists them on a timer (the runtime's pattern rescan).

use async_nats::Client;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Every stream advisory: `$JS.EVENT.ADVISORY.STREAM.<action>.<stream>`.
const SUBJECT: &str = "$JS.EVENT.ADVISORY.STREAM.*.*";

/// Whether an advisory's subject tells of a stream of `prefix` created or
/// deleted.
fn concerns(subject: &str, prefix: &str) -> bool {
    let Some(rest) = subject.strip_prefix("$JS.EVENT.ADVISORY.STREAM.") else {
        return false;
    };
    let Some((action, stream)) = rest.split_once('.') else {
        return false;
    };
    matches!(action, "CREATED" | "DELETED")
        && stream
            .strip_prefix(prefix)
            .is_some_and(|s| s.starts_with('_'))
}

/// Follows the advisories until `stop`, bumping `changed` for each stream
/// of `prefix` created or deleted.
pub(crate) async fn spawn(
    client: &Client,
    prefix: String,
    changed: watch::Sender<u64>,
    stop: CancellationToken,
) {
    let mut sub = match client.subscribe(SUBJECT).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot follow JetStream stream advisories; topics made by other instances are seen at the next listing");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                m = sub.next() => m,
                _ = stop.cancelled() => return,
            };
            let Some(msg) = msg else { return };
            if concerns(msg.subject.as_str(), &prefix) {
                tracing::debug!(subject = %msg.subject, "stream advisory");
                changed.send_modify(|n| *n += 1);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_creates_and_deletes_of_the_prefix_count() {
        let p = "EM";
        assert!(concerns("$JS.EVENT.ADVISORY.STREAM.CREATED.EM_orders", p));
        assert!(concerns("$JS.EVENT.ADVISORY.STREAM.DELETED.EM_a_db", p));
        assert!(!concerns("$JS.EVENT.ADVISORY.STREAM.UPDATED.EM_orders", p));
        assert!(!concerns("$JS.EVENT.ADVISORY.STREAM.CREATED.EMX_orders", p));
        assert!(!concerns("$JS.EVENT.ADVISORY.STREAM.CREATED.OTHER_x", p));
        assert!(!concerns("$JS.EVENT.ADVISORY.CONSUMER.CREATED.EM_x", p));
    }
}
