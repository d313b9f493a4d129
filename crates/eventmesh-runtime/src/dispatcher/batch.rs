//! Batched webhook pushes: a member whose subscription asked for batch
//! mode gets its deliveries through a batcher, a task beside the loop that
//! gathers them into one POST (`crate::push::push_batch`) and reports the
//! outcome of each, as a single push's task does.
//!
//! Invariants:
//! - A batch goes out once it holds `batchSize` deliveries, or once
//!   `batchLingerMs` has passed since its first one came, whichever is
//!   first; the next batch is gathered while one is being sent, and sent
//!   after it (one POST at a time per member and dispatcher).
//! - Every delivery of a batch gets the batch's outcome (a 2xx acks each;
//!   a failure is a failed attempt of each), reported as `Pushed` under
//!   its own ticket, so a superseded one is dropped like any other.
//! - What waits in a batcher is in flight (`Pushing`), so the dispatcher's
//!   window bounds it; the batcher ends with its sender (the member left,
//!   or its settings changed) once it has sent what it had, or at once
//!   when the dispatcher is gone.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_core::CloudEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::{DispatcherDeps, Report};
use super::ids::{Slot, Ticket};
use super::{Command, Internal};
use crate::push::{self, Webhook};

/// One delivery handed to a batcher.
pub(super) struct Item {
    pub slot: Slot,
    pub ticket: Ticket,
    pub delivery_id: String,
    pub event: Arc<CloudEvent>,
}

/// The batcher of one member: the webhook it pushes to and its queue.
pub(super) struct Batcher {
    hook: Arc<Webhook>,
    tx: mpsc::UnboundedSender<Item>,
}

impl Batcher {
    /// Starts the batcher of `hook`, reporting to the dispatcher on `report`.
    pub(super) fn start(
        hook: Arc<Webhook>,
        deps: Arc<DispatcherDeps>,
        report: mpsc::Sender<Command>,
    ) -> Batcher {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(hook.clone(), deps, rx, report));
        Batcher { hook, tx }
    }

    /// Whether it pushes to `hook` as it is now.
    pub(super) fn serves(&self, hook: &Webhook) -> bool {
        *self.hook == *hook
    }

    /// Queues a delivery; gives it back when the batcher has ended.
    pub(super) fn send(&self, item: Item) -> Result<(), Item> {
        self.tx.send(item).map_err(|e| e.0)
    }
}

/// Gathers up to `size` items: the first (waiting for it), then whatever
/// comes before `linger` has passed. Empty when the queue closed.
async fn gather(
    rx: &mut mpsc::UnboundedReceiver<Item>,
    size: usize,
    linger: Duration,
) -> Vec<Item> {
    let Some(first) = rx.recv().await else {
        return Vec::new();
    };
    let mut items = vec![first];
    let deadline = Instant::now() + linger;
    while items.len() < size {
        // Whatever is queued already is taken even with no linger.
        match rx.try_recv() {
            Ok(item) => {
                items.push(item);
                continue;
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(item)) => items.push(item),
            Ok(None) | Err(_) => break,
        }
    }
    items
}

async fn run(
    hook: Arc<Webhook>,
    deps: Arc<DispatcherDeps>,
    mut rx: mpsc::UnboundedReceiver<Item>,
    report: mpsc::Sender<Command>,
) {
    let size = hook.settings.batch_size() as usize;
    let linger = Duration::from_millis(hook.settings.batch_linger_ms());
    loop {
        let items = tokio::select! {
            items = gather(&mut rx, size, linger) => items,
            () = report.closed() => return,
        };
        if items.is_empty() {
            return;
        }
        let ids: Vec<String> = items.iter().map(|i| i.delivery_id.clone()).collect();
        let events: Vec<Arc<CloudEvent>> = items.iter().map(|i| i.event.clone()).collect();
        let result = tokio::select! {
            r = push::push_batch(deps.pusher(), &hook, &ids, &events) => r,
            // The dispatcher is gone: nobody takes the outcome.
            () = report.closed() => return,
        };
        for item in items {
            let pushed = Report::Pushed {
                slot: item.slot,
                ticket: item.ticket,
                result: result.clone(),
            };
            if report
                .send(Command::Internal(Internal(pushed)))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(offset: u64) -> Item {
        Item {
            slot: Slot {
                partition: 0,
                offset,
            },
            ticket: Ticket {
                generation: 1,
                nonce: 0,
            },
            delivery_id: format!("d{offset}"),
            event: Arc::new(CloudEvent::default()),
        }
    }

    fn offsets(items: &[Item]) -> Vec<u64> {
        items.iter().map(|i| i.slot.offset).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_closes_when_full_or_when_the_linger_is_over() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for o in 0..5 {
            tx.send(item(o)).unwrap();
        }
        let linger = Duration::from_millis(100);
        assert_eq!(offsets(&gather(&mut rx, 2, linger).await), [0, 1]);
        assert_eq!(offsets(&gather(&mut rx, 2, linger).await), [2, 3]);
        // One left: the batch waits for the linger, taking what comes.
        let started = Instant::now();
        let late = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            late.send(item(5)).unwrap();
        });
        assert_eq!(offsets(&gather(&mut rx, 3, linger).await), [4, 5]);
        assert_eq!(started.elapsed(), linger);
        // With no linger, only what is queued goes.
        tx.send(item(6)).unwrap();
        tx.send(item(7)).unwrap();
        assert_eq!(offsets(&gather(&mut rx, 10, Duration::ZERO).await), [6, 7]);
        drop(tx);
        assert!(gather(&mut rx, 10, linger).await.is_empty());
    }
}
