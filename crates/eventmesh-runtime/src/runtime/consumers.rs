//! The consumers: one dispatcher per consumer (a load-balanced group on a
//! topic, or one broadcast member), and the routing of acks and nacks to
//! the dispatcher that handed the delivery out.
//!
//! Invariants:
//! - A consumer has at most one dispatcher; membership changes reach it as
//!   a `Members` command, and it is stopped (its offsets flushed) when its
//!   last member leaves.
//! - A delivery id names its dispatcher; a settle is routed to that
//!   dispatcher only, and an id from an earlier run (another boot id) or of
//!   a stopped dispatcher matches nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use eventmesh_state::StartFrom;
use tokio::sync::oneshot;

use crate::creator::Creator;
use crate::dispatcher::{
    parse_delivery_id, Command, Dispatcher, DispatcherDeps, DispatcherHandle, Lane, Membership,
    Policy, Settle, Settled,
};
use crate::error::Result;

pub(super) struct ConsumerEntry {
    dispatcher_id: u32,
    pub(super) handle: DispatcherHandle,
}

/// Running dispatchers by (consumer, topic); kept under the view's lock.
pub(super) type Consumers = HashMap<(String, String), ConsumerEntry>;

/// Ack routing: dispatcher id to its state (settled through it, or by a
/// command when its loop is at work).
pub(super) struct Registry {
    routes: RwLock<HashMap<u32, Arc<Lane>>>,
    /// Dispatchers stopped because their partitions went to another
    /// instance: a settle of theirs is `Fenced`, not `Unknown`.
    fenced: RwLock<std::collections::HashSet<u32>>,
    next_id: AtomicU32,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            routes: RwLock::new(HashMap::new()),
            fenced: RwLock::default(),
            next_id: AtomicU32::new(1),
        }
    }
}

impl Registry {
    /// Brings one consumer's dispatcher in line with its members: starts
    /// it, updates its members, or stops it when none are left.
    pub(super) async fn sync(
        &self,
        consumers: &mut Consumers,
        consumer: &str,
        topic: &str,
        from: StartFrom,
        membership: Membership,
        deps: &Arc<DispatcherDeps>,
    ) -> Result<()> {
        let key = (consumer.to_string(), topic.to_string());
        match (consumers.get(&key), membership.members.is_empty()) {
            (Some(entry), false) => {
                entry
                    .handle
                    .lane
                    .command(Command::Members(membership))
                    .await;
            }
            (Some(_), true) => self.stop_one(consumers, consumer, topic).await,
            (None, false) => {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let handle = Dispatcher::start(
                    id,
                    consumer.to_string(),
                    topic.to_string(),
                    from,
                    membership,
                    deps.clone(),
                )
                .await?;
                self.routes
                    .write()
                    .expect("routes lock")
                    .insert(id, handle.lane.clone());
                consumers.insert(
                    key,
                    ConsumerEntry {
                        dispatcher_id: id,
                        handle,
                    },
                );
            }
            (None, true) => {}
        }
        Ok(())
    }

    /// Stops one consumer's dispatcher because partitions it reads went to
    /// another instance, first letting it drain until `deadline` when
    /// given (its offsets are flushed either way); the caller starts it
    /// again. Its deliveries settle as `Fenced` from then on.
    pub(super) async fn retire(
        &self,
        consumers: &mut Consumers,
        consumer: &str,
        topic: &str,
        deadline: Option<tokio::time::Instant>,
    ) {
        let key = (consumer.to_string(), topic.to_string());
        let Some(entry) = consumers.remove(&key) else {
            return;
        };
        self.fenced
            .write()
            .expect("fenced lock")
            .insert(entry.dispatcher_id);
        if let Some(deadline) = deadline {
            let (done, rx) = oneshot::channel();
            let drain = Command::Drain { deadline, done };
            if entry.handle.lane.command(drain).await {
                let _ =
                    tokio::time::timeout_at(deadline + std::time::Duration::from_secs(1), rx).await;
            }
        }
        self.routes
            .write()
            .expect("routes lock")
            .remove(&entry.dispatcher_id);
        stop(entry.handle).await;
    }

    /// How many deliveries the consumer's dispatcher has in clients'
    /// hands (0 when none runs).
    pub(super) async fn held(&self, consumers: &Consumers, consumer: &str, topic: &str) -> usize {
        let Some(entry) = consumers.get(&(consumer.to_string(), topic.to_string())) else {
            return 0;
        };
        let (reply, rx) = oneshot::channel();
        if !entry.handle.lane.command(Command::Held(reply)).await {
            return 0;
        }
        rx.await.unwrap_or(0)
    }

    /// Stops the consumer's dispatcher, when one runs (it flushes; what it
    /// had in flight is dropped, and its delivery ids settle nothing from
    /// then on). The caller starts it again.
    pub(super) async fn stop_one(&self, consumers: &mut Consumers, consumer: &str, topic: &str) {
        let Some(entry) = consumers.remove(&(consumer.to_string(), topic.to_string())) else {
            return;
        };
        self.routes
            .write()
            .expect("routes lock")
            .remove(&entry.dispatcher_id);
        stop(entry.handle).await;
    }

    /// Routes a settle to the dispatcher named in the id.
    pub(super) async fn settle(
        &self,
        boot: &str,
        delivery_id: &str,
        how: Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Settled {
        let Some(id) = parse_delivery_id(delivery_id) else {
            return Settled::Unknown;
        };
        if id.boot() != boot {
            return Settled::Unknown;
        }
        let Some(lane) = self
            .routes
            .read()
            .expect("routes lock")
            .get(&id.dispatcher())
            .cloned()
        else {
            if self
                .fenced
                .read()
                .expect("fenced lock")
                .contains(&id.dispatcher())
            {
                return Settled::Fenced;
            }
            return Settled::Unknown;
        };
        if let Some(settled) = lane.try_settle(&id, how.clone(), by, policy) {
            return settled;
        }
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Settle {
            id,
            how,
            by: by.cloned(),
            policy,
            reply,
        };
        if !lane.command(cmd).await {
            return Settled::Unknown;
        }
        rx.await.unwrap_or(Settled::Unknown)
    }

    /// Sends a command built by `command` to every dispatcher.
    pub(super) async fn broadcast(&self, command: impl Fn() -> Command) {
        let routes: Vec<_> = self
            .routes
            .read()
            .expect("routes lock")
            .values()
            .cloned()
            .collect();
        for lane in routes {
            lane.command(command()).await;
        }
    }

    /// Asks every dispatcher to drain until `deadline`; returns the
    /// receivers answered when each is done.
    pub(super) async fn drain(
        &self,
        consumers: &Consumers,
        deadline: tokio::time::Instant,
    ) -> Vec<oneshot::Receiver<()>> {
        let mut waits = Vec::new();
        for entry in consumers.values() {
            let (done, rx) = oneshot::channel();
            if entry
                .handle
                .lane
                .command(Command::Drain { deadline, done })
                .await
            {
                waits.push(rx);
            }
        }
        waits
    }

    /// Stops every dispatcher (each flushes its offsets).
    pub(super) async fn stop_all(&self, consumers: &mut Consumers) {
        self.routes.write().expect("routes lock").clear();
        for (_, entry) in consumers.drain() {
            stop(entry.handle).await;
        }
    }
}

async fn stop(handle: DispatcherHandle) {
    let (done, rx) = oneshot::channel();
    if handle.lane.command(Command::Stop(done)).await {
        let _ = rx.await;
    }
    let _ = handle.join.await;
}
