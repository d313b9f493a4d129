//! Leases: keys that live only while their owner keeps renewing them
//! (liveness keys such as `/em/instances/<id>`).
//!
//! [`Leases`] is the in-process lease table shared by the embedded and
//! in-memory backends. Expiry is checked by the backend's reaper task,
//! which deletes every key attached to an expired lease.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{MetaError, Result};

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseId(pub i64);

struct Lease {
    ttl: Duration,
    deadline: Instant,
    keys: BTreeSet<String>,
}

#[derive(Default)]
struct Table {
    next: i64,
    leases: HashMap<i64, Lease>,
    by_key: HashMap<String, i64>,
}

pub(crate) struct Leases {
    table: Mutex<Table>,
    reaper: Once,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            table: Mutex::default(),
            reaper: Once::new(),
        }
    }
}

impl Leases {
    /// Grants a lease, starting `host`'s reaper on the first grant.
    pub fn grant_for<T: LeaseHost>(&self, host: &Arc<T>, ttl: Duration) -> LeaseId {
        self.reaper.call_once(|| spawn_reaper(Arc::downgrade(host)));
        self.grant(ttl)
    }

    fn grant(&self, ttl: Duration) -> LeaseId {
        let mut t = self.table.lock().expect("lease lock");
        t.next += 1;
        let id = t.next;
        t.leases.insert(
            id,
            Lease {
                ttl,
                deadline: Instant::now() + ttl,
                keys: BTreeSet::new(),
            },
        );
        LeaseId(id)
    }

    pub fn keep_alive(&self, id: LeaseId) -> Result<()> {
        let mut t = self.table.lock().expect("lease lock");
        let lease = t
            .leases
            .get_mut(&id.0)
            .filter(|l| l.deadline > Instant::now())
            .ok_or(MetaError::LeaseNotFound(id.0))?;
        lease.deadline = Instant::now() + lease.ttl;
        Ok(())
    }

    /// Checks that a lease is alive (before a write bound to it).
    pub fn check(&self, id: LeaseId) -> Result<()> {
        let t = self.table.lock().expect("lease lock");
        match t.leases.get(&id.0) {
            Some(l) if l.deadline > Instant::now() => Ok(()),
            _ => Err(MetaError::LeaseNotFound(id.0)),
        }
    }

    /// Binds `key` to `id` (or unbinds it with `None`, as a plain put does).
    pub fn bind(&self, key: &str, id: Option<LeaseId>) {
        let mut t = self.table.lock().expect("lease lock");
        if let Some(old) = t.by_key.remove(key) {
            if let Some(l) = t.leases.get_mut(&old) {
                l.keys.remove(key);
            }
        }
        if let Some(id) = id {
            if let Some(l) = t.leases.get_mut(&id.0) {
                l.keys.insert(key.to_string());
                t.by_key.insert(key.to_string(), id.0);
            }
        }
    }

    /// Ends a lease now; returns the keys to delete.
    pub fn revoke(&self, id: LeaseId) -> Vec<String> {
        let mut t = self.table.lock().expect("lease lock");
        let keys: Vec<String> = t
            .leases
            .remove(&id.0)
            .map(|l| l.keys.into_iter().collect())
            .unwrap_or_default();
        for k in &keys {
            t.by_key.remove(k);
        }
        keys
    }

    /// Removes expired leases; returns the keys to delete.
    pub fn take_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let expired: Vec<i64> = {
            let t = self.table.lock().expect("lease lock");
            t.leases
                .iter()
                .filter(|(_, l)| l.deadline <= now)
                .map(|(id, _)| *id)
                .collect()
        };
        expired
            .into_iter()
            .flat_map(|id| self.revoke(LeaseId(id)))
            .collect()
    }
}

/// A backend whose leased keys a reaper deletes on expiry.
pub(crate) trait LeaseHost: Send + Sync + 'static {
    fn leases(&self) -> &Leases;
    /// Deletes one key whose lease ended (may block).
    fn delete_expired(&self, key: &str);
}

/// How often expired leases are looked for.
const REAP_EVERY: Duration = Duration::from_millis(50);

/// Starts the task that deletes the keys of expired leases. It ends when
/// the backend is dropped.
pub(crate) fn spawn_reaper<T: LeaseHost>(host: Weak<T>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REAP_EVERY).await;
            let Some(h) = host.upgrade() else { return };
            let keys = h.leases().take_expired();
            if keys.is_empty() {
                continue;
            }
            let h: Arc<T> = h;
            let _ = tokio::task::spawn_blocking(move || {
                for k in keys {
                    h.delete_expired(&k);
                }
            })
            .await;
        }
    });
}
