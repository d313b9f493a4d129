//! Live task updates: every change of a task, whichever instance made it,
//! is offered to the streams and blocking sends waiting on it here.
//!
//! Changes come from the meta store's watch of the TaskStore ([`follow`]),
//! one path for all of them: a change applied by this instance and one
//! applied by another (the agent's update consumed there, a cancel sent
//! there) reach the waiters alike, in the store's order. Each task record
//! carries the event of its last change (`Record::last`) for this.
//!
//! A waiter subscribes before the action whose results it wants (a send
//! subscribes before the message is published to the agent), after the
//! watch is established ([`Gateway::live_ready`]), so it misses nothing
//! that happens after. A waiter that falls more than [`CAPACITY`] changes
//! behind learns it (`Lagged`) and reads the task again. When the watch
//! broke and cannot resume where it stopped, every waited-on task is read
//! again and offered as its current status. Entries without waiters are
//! dropped when a change finds them empty and by [`Live::sweep`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use eventmesh_a2a::model::{StreamResponse, Task, TaskStatusUpdateEvent};
use eventmesh_meta::{MetaError, WatchEvent};
use eventmesh_state::{StateError, TaskStore};
use futures::StreamExt;
use tokio::sync::broadcast;

use super::{Gateway, Record};

/// Changes buffered per task for a slow waiter.
const CAPACITY: usize = 256;

/// One applied change: the event a stream sends, and the task after it.
#[derive(Debug)]
pub struct Applied {
    pub event: StreamResponse,
    pub task: Task,
}

impl Applied {
    /// The task reached a state where streams end and blocking sends
    /// answer: terminal, or waiting for the client (input or auth).
    pub fn settles(&self) -> bool {
        let s = self.task.status.state;
        s.is_terminal() || s.is_interrupted()
    }
}

#[derive(Default)]
pub struct Live {
    waiting: Mutex<HashMap<String, broadcast::Sender<Arc<Applied>>>>,
}

impl Live {
    /// Changes to task `id` from now on.
    pub fn watch(&self, id: &str) -> broadcast::Receiver<Arc<Applied>> {
        let mut waiting = self.waiting.lock().expect("live lock");
        waiting
            .entry(id.to_string())
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe()
    }

    /// Offers a change of task `id` to its waiters.
    pub fn send(&self, id: &str, applied: Applied) {
        let mut waiting = self.waiting.lock().expect("live lock");
        let Some(tx) = waiting.get(id) else { return };
        let done = applied.task.status.state.is_terminal();
        if tx.send(Arc::new(applied)).is_err() || done {
            // No waiter left, or none will ever get another change.
            waiting.remove(id);
        }
    }

    /// Whether anybody waits on task `id`.
    pub fn is_waited(&self, id: &str) -> bool {
        self.waiting
            .lock()
            .expect("live lock")
            .get(id)
            .is_some_and(|tx| tx.receiver_count() > 0)
    }

    /// The tasks somebody waits on.
    fn waited(&self) -> Vec<String> {
        let waiting = self.waiting.lock().expect("live lock");
        waiting
            .iter()
            .filter(|(_, tx)| tx.receiver_count() > 0)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops the entries nobody waits on.
    pub fn sweep(&self) {
        self.waiting
            .lock()
            .expect("live lock")
            .retain(|_, tx| tx.receiver_count() > 0);
    }

    /// Tasks with waiters.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.lock().expect("live lock").len()
    }
}

const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Follows the TaskStore's changes into the gateway's waiters until the
/// runtime shuts down; `ready` turns true once the watch is established.
/// A broken watch resumes after the last change seen; one that cannot
/// (history compacted) starts anew and offers every waited-on task again.
pub async fn follow(gw: Weak<Gateway>, ready: tokio::sync::watch::Sender<bool>) {
    let Some(shutdown) = gw.upgrade().map(|g| g.api.shutdown().clone()) else {
        return;
    };
    let mut after: Option<u64> = None;
    let mut backoff = RETRY_MIN;
    loop {
        let Some(g) = gw.upgrade() else { return };
        let opened = async {
            let start = match after {
                Some(r) => r,
                None => g.tasks.revision().await?,
            };
            Ok::<_, StateError>((start, g.tasks.watch(start).await?))
        };
        let opened = tokio::select! {
            o = opened => o,
            _ = shutdown.cancelled() => return,
        };
        let mut stream = match opened {
            Ok((start, stream)) => {
                if after.is_none() {
                    g.resync().await;
                }
                after = Some(start);
                backoff = RETRY_MIN;
                ready.send_replace(true);
                stream
            }
            Err(e) => {
                if matches!(e, StateError::Meta(MetaError::Compacted { .. })) {
                    after = None;
                }
                tracing::debug!(error = %e, "cannot watch the A2A tasks; retrying");
                drop(g);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(RETRY_MAX);
                continue;
            }
        };
        drop(g);
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                _ = shutdown.cancelled() => return,
            };
            match next {
                Some(Ok(ev)) => {
                    after = Some(ev.revision());
                    let Some(g) = gw.upgrade() else { return };
                    g.offer(&ev);
                }
                Some(Err(e)) => {
                    if matches!(e, MetaError::Compacted { .. }) {
                        after = None;
                    }
                    tracing::debug!(error = %e, "the A2A task watch broke; resuming");
                    break;
                }
                None => break,
            }
        }
    }
}

impl Gateway {
    /// Offers a watched change of a task to its waiters.
    fn offer(&self, ev: &WatchEvent) {
        let WatchEvent::Put(kv) = ev else { return };
        let Some(id) = TaskStore::id_of(&kv.key) else {
            return;
        };
        if !self.live.is_waited(id) {
            return;
        }
        let record = TaskStore::decode_entry(&kv.key, &kv.value)
            .ok()
            .and_then(|rec| serde_json::from_value::<Record>(rec.payload).ok());
        if let Some(Record {
            task,
            last: Some(event),
            ..
        }) = record
        {
            self.live.send(id, Applied { event, task });
        }
    }

    /// Offers every waited-on task as it is now (its changes since the
    /// watch broke are not known one by one).
    async fn resync(&self) {
        for id in self.live.waited() {
            let Some(task) = self.current(&id).await else {
                continue;
            };
            let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                status: task.status.clone(),
                metadata: None,
            });
            self.live.send(&id, Applied { event, task });
        }
    }

    /// Waits (up to 5 s) until the watch that feeds waiters is established,
    /// so that a waiter registered after this misses no change.
    pub(super) async fn live_ready(&self) {
        let mut rx = self.watching.subscribe();
        if tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|on| *on))
            .await
            .is_err()
        {
            tracing::warn!("the A2A task watch is not established yet; waiting clients may miss changes until it is");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventmesh_a2a::model::{TaskState, TaskStatus};

    fn applied(state: TaskState) -> Applied {
        let task = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: None,
            },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        };
        Applied {
            event: StreamResponse::Task(task.clone()),
            task,
        }
    }

    #[tokio::test]
    async fn waiters_get_changes_in_order_and_entries_go_away() {
        let live = Live::default();
        live.send("t", applied(TaskState::Working)); // nobody waits: dropped
        let mut a = live.watch("t");
        let mut b = live.watch("t");
        live.send("t", applied(TaskState::Working));
        live.send("t", applied(TaskState::Completed));
        for rx in [&mut a, &mut b] {
            assert_eq!(
                rx.recv().await.unwrap().task.status.state,
                TaskState::Working
            );
            let last = rx.recv().await.unwrap();
            assert_eq!(last.task.status.state, TaskState::Completed);
            assert!(last.settles());
        }
        assert_eq!(live.len(), 0, "a terminal change removes the entry");

        let c = live.watch("u");
        drop(c);
        live.sweep();
        assert_eq!(live.len(), 0);
    }
}
