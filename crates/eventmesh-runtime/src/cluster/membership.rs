//! Membership: this instance's registration, `/em/instances/<id>`, kept
//! under a meta-store lease that one task renews.
//!
//! The registration is *held* only while the lease surely lives: a renewal
//! sent at `t` keeps the lease until at least `t + ttl` on the store, so it
//! counts as held until `t + ttl - margin`. Past that without a newer
//! renewal (the store unreachable, or this process paused), the instance
//! must act as if it had lost the lease, before anyone else can claim what
//! it owned. A lease the store no longer knows is lost for good: a new one
//! is granted and the instance registers again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_meta::{LeaseId, MetaError, MetaStore};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where live instances register.
pub const INSTANCES_PREFIX: &str = "/em/instances/";

/// What an instance's registration says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    pub id: String,
    /// This run of the instance (a new one at every boot).
    pub boot: String,
    /// `host:port` of its traffic HTTP listener.
    pub address: String,
    /// `host:port` of its admin listener.
    pub admin_address: String,
    /// Its traffic listener serves TLS: internal calls go over `https`.
    #[serde(default)]
    pub tls: bool,
    /// When it registered (ms since the epoch; informative only).
    pub since_ms: u64,
    /// Time to live of its registration.
    pub lease_ms: u64,
}

/// The lease while it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub lease: LeaseId,
    /// Until then the lease surely lives on the store.
    pub until: Instant,
}

/// The registration's state: `None` while not held.
pub type Registration = watch::Receiver<Option<Held>>;

fn margin(ttl: Duration) -> Duration {
    ttl / 5
}

/// Registers the instance and keeps the registration until `stop`; the
/// returned receiver follows whether it is held.
pub fn start(
    meta: Arc<dyn MetaStore>,
    info: InstanceInfo,
    ttl: Duration,
    stop: CancellationToken,
) -> (Registration, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = keep(meta.clone(), &info, ttl, &tx) => {}
        }
        // Leaving: the lease ends now, so the partitions move at once
        // instead of after the time to live.
        let held = *tx.borrow();
        tx.send_replace(None);
        if let Some(h) = held {
            let _ = meta.revoke_lease(h.lease).await;
        }
    });
    (rx, task)
}

async fn keep(
    meta: Arc<dyn MetaStore>,
    info: &InstanceInfo,
    ttl: Duration,
    tx: &watch::Sender<Option<Held>>,
) {
    let key = format!("{INSTANCES_PREFIX}{}", info.id);
    let value = Bytes::from(serde_json::to_vec(info).expect("instance info serializes"));
    let every = ttl / 4;
    let mut told_taken = false;
    loop {
        tx.send_replace(None);
        let sent = Instant::now();
        let lease = match meta.grant_lease(ttl).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot get a cluster lease; retrying");
                tokio::time::sleep(every).await;
                continue;
            }
        };
        match meta
            .put_guarded(&key, 0, &key, value.clone(), Some(lease))
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => {
                // A registration of this id is still live: an earlier run
                // of this instance whose lease has not ended yet, or
                // another instance given the same id.
                if !told_taken {
                    tracing::warn!(instance = %info.id, "instance id already registered; waiting for that registration to end (another live instance with this eventmesh.cluster.instance.id?)");
                    told_taken = true;
                }
                let _ = meta.revoke_lease(lease).await;
                tokio::time::sleep(every).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot register in the cluster; retrying");
                let _ = meta.revoke_lease(lease).await;
                tokio::time::sleep(every).await;
                continue;
            }
        }
        told_taken = false;
        tracing::info!(instance = %info.id, lease = lease.0, "registered in the cluster");
        tx.send_replace(Some(Held {
            lease,
            until: sent + ttl - margin(ttl),
        }));
        // Renew until the lease is gone.
        loop {
            tokio::time::sleep(every).await;
            let sent = Instant::now();
            match meta.keep_alive(lease).await {
                Ok(()) => {
                    tx.send_replace(Some(Held {
                        lease,
                        until: sent + ttl - margin(ttl),
                    }));
                }
                Err(MetaError::LeaseNotFound(_)) => {
                    tracing::warn!(instance = %info.id, "cluster lease lost (expired on the meta store); registering again");
                    break;
                }
                Err(e) => {
                    // Held until its time runs out; the ownership loop
                    // watches that deadline itself.
                    tracing::warn!(error = %e, "cannot renew the cluster lease; retrying");
                }
            }
        }
    }
}

/// The held lease, if its time has not run out.
pub fn held_now(reg: &Registration) -> Option<Held> {
    let held = (*reg.borrow())?;
    (Instant::now() < held.until).then_some(held)
}
