//! A live copy of every key under a prefix: read once, then kept equal to
//! the store by its watch, re-read whole when the watch cannot resume
//! (compacted history, a broken connection).
//!
//! The copy is published on a `watch` channel, so a reader sees the latest
//! state and is woken on every change; while the store is unreachable the
//! copy stays as last seen and [`Mirror::current`] says so.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::MetaError;
use crate::store::{KeyValue, MetaStore};
use crate::watch::WatchEvent;

const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// The keys under the prefix, by key.
pub type Entries = Arc<BTreeMap<String, KeyValue>>;

/// One state of the copy.
#[derive(Debug, Clone, Default)]
pub struct Mirror {
    pub entries: Entries,
    /// False while the watch is broken and the copy may be behind.
    pub current: bool,
}

/// Starts following `prefix` until `stop`; the receiver holds the copy.
pub fn follow_prefix(
    meta: Arc<dyn MetaStore>,
    prefix: &str,
    stop: CancellationToken,
) -> watch::Receiver<Mirror> {
    let (tx, rx) = watch::channel(Mirror::default());
    let prefix = prefix.to_string();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = follow(meta, &prefix, &tx) => {}
        }
    });
    rx
}

async fn follow(meta: Arc<dyn MetaStore>, prefix: &str, tx: &watch::Sender<Mirror>) {
    let mut backoff = RETRY_MIN;
    loop {
        let opened = async {
            let (kvs, revision) = meta.snapshot_prefix(prefix).await?;
            let stream = meta.watch_prefix(prefix, revision).await?;
            Ok::<_, MetaError>((kvs, stream))
        };
        let (kvs, mut stream) = match opened.await {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(prefix, error = %e, "cannot read or watch a meta prefix; retrying");
                tx.send_modify(|m| m.current = false);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RETRY_MAX);
                continue;
            }
        };
        backoff = RETRY_MIN;
        let mut entries: BTreeMap<String, KeyValue> =
            kvs.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
        loop {
            tx.send_replace(Mirror {
                entries: Arc::new(entries.clone()),
                current: true,
            });
            let Some(first) = stream.next().await else {
                break;
            };
            // Every change that has arrived goes in before the next copy.
            let mut item = Some(first);
            let mut broken = false;
            while let Some(it) = item.take() {
                match it {
                    Ok(WatchEvent::Put(kv)) => {
                        entries.insert(kv.key.clone(), kv);
                    }
                    Ok(WatchEvent::Delete { key, .. }) => {
                        entries.remove(&key);
                    }
                    Err(e) => {
                        // Compacted history or a broken connection.
                        tracing::debug!(prefix, error = %e, "a meta watch broke; reading again");
                        broken = true;
                    }
                }
                if !broken {
                    item = stream.next().now_or_never().flatten();
                }
            }
            if broken {
                break;
            }
        }
        // Read whole again (the changes since the last one seen may be gone).
        tx.send_modify(|m| m.current = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyMetaStore;
    use crate::memory::InMemoryMetaStore;
    use bytes::Bytes;

    async fn until(rx: &mut watch::Receiver<Mirror>, ok: impl Fn(&Mirror) -> bool) -> Mirror {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if ok(&rx.borrow_and_update()) {
                    return rx.borrow().clone();
                }
                rx.changed().await.expect("follower alive");
            }
        })
        .await
        .expect("the mirror reaches the state in time")
    }

    fn keys(m: &Mirror) -> Vec<&str> {
        m.entries.keys().map(String::as_str).collect()
    }

    #[tokio::test]
    async fn follows_puts_and_deletes_and_recovers_after_a_partition() {
        let store = Arc::new(FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new())));
        store.put("/p/a", Bytes::from_static(b"1")).await.unwrap();
        store.put("/q/x", Bytes::from_static(b"1")).await.unwrap();
        let stop = CancellationToken::new();
        let mut rx = follow_prefix(store.clone(), "/p/", stop.clone());
        let m = until(&mut rx, |m| m.current && m.entries.len() == 1).await;
        assert_eq!(keys(&m), ["/p/a"]);
        store.put("/p/b", Bytes::from_static(b"2")).await.unwrap();
        store.delete("/p/a").await.unwrap();
        let m = until(&mut rx, |m| keys(m) == ["/p/b"]).await;
        assert_eq!(m.entries["/p/b"].value, Bytes::from_static(b"2"));
        store.partition();
        until(&mut rx, |m| !m.current).await;
        store.heal();
        store.put("/p/c", Bytes::from_static(b"3")).await.unwrap();
        let m = until(&mut rx, |m| m.current && keys(m) == ["/p/b", "/p/c"]).await;
        assert!(m.current);
        stop.cancel();
    }
}
