//! Watches: the ordered stream of changes under a key prefix, resumable
//! from a revision.
//!
//! [`WatchHub`] is the in-process implementation shared by the embedded and
//! in-memory backends: it keeps the most recent changes in a bounded
//! history and broadcasts new ones. A watch that asks to resume from a
//! revision no longer in the history gets [`MetaError::Compacted`], and the
//! caller re-reads the prefix (with [`crate::MetaStore::snapshot_prefix`])
//! and watches from that snapshot's revision; no change is ever skipped
//! silently.

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast;

use crate::error::{MetaError, Result};
use crate::store::KeyValue;

/// One change to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    Put(KeyValue),
    Delete { key: String, revision: u64 },
}

impl WatchEvent {
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }

    pub fn revision(&self) -> u64 {
        match self {
            WatchEvent::Put(kv) => kv.revision,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// Changes in revision order. An `Err` item ends the stream.
pub type WatchStream = BoxStream<'static, Result<WatchEvent>>;

struct HubInner {
    history: VecDeque<WatchEvent>,
    /// Every revision up to this one is no longer replayable.
    compacted: u64,
}

pub(crate) struct WatchHub {
    inner: Mutex<HubInner>,
    tx: broadcast::Sender<WatchEvent>,
    capacity: usize,
}

impl WatchHub {
    /// A hub whose history starts after `base_revision` (changes made
    /// before this process started cannot be replayed).
    pub fn new(base_revision: u64, capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        WatchHub {
            inner: Mutex::new(HubInner {
                history: VecDeque::with_capacity(capacity.min(1024)),
                compacted: base_revision,
            }),
            tx,
            capacity,
        }
    }

    /// Records and broadcasts a change. Backends call this in revision
    /// order, under their write lock, after the change is stored.
    pub fn publish(&self, ev: WatchEvent) {
        let mut inner = self.inner.lock().expect("watch hub lock");
        if inner.history.len() == self.capacity {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.revision();
            }
        }
        inner.history.push_back(ev.clone());
        // No receiver is fine: nobody is watching.
        let _ = self.tx.send(ev);
    }

    /// Every change under `prefix` with a revision above `after`.
    pub fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        let inner = self.inner.lock().expect("watch hub lock");
        if after < inner.compacted {
            return Err(MetaError::Compacted {
                requested: after,
                compacted: inner.compacted,
            });
        }
        let replay: Vec<Result<WatchEvent>> = inner
            .history
            .iter()
            .filter(|e| e.revision() > after && e.key().starts_with(prefix))
            .cloned()
            .map(Ok)
            .collect();
        let last = replay
            .last()
            .and_then(|e| e.as_ref().ok())
            .map_or(after, WatchEvent::revision);
        // Subscribed under the same lock as the replay: nothing falls between.
        let rx = self.tx.subscribe();
        drop(inner);
        let prefix = prefix.to_string();
        let live = stream::unfold(Some((rx, last)), move |state| {
            let prefix = prefix.clone();
            async move {
                let (mut rx, last) = state?;
                loop {
                    match rx.recv().await {
                        Ok(ev) if ev.revision() > last && ev.key().starts_with(&prefix) => {
                            let rev = ev.revision();
                            return Some((Ok(ev), Some((rx, rev))));
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            return Some((
                                Err(MetaError::Compacted {
                                    requested: last,
                                    compacted: last + 1,
                                }),
                                None,
                            ))
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        });
        Ok(stream::iter(replay).chain(live).boxed())
    }
}
