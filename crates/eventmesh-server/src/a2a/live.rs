//! Live task updates inside one instance: every change the gateway applies
//! to a task is offered to the streams and blocking sends waiting on it.
//!
//! A waiter subscribes before the action whose results it wants (a send
//! subscribes before the message is published to the agent), so it misses
//! nothing that happens after. A waiter that falls more than
//! [`CAPACITY`] changes behind learns it (`Lagged`) and reads the task
//! again. Entries without waiters are dropped when a change finds them
//! empty and by [`Live::sweep`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use eventmesh_a2a::model::{StreamResponse, Task};
use tokio::sync::broadcast;

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
