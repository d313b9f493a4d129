//! Per-tenant quotas: a publish rate with a burst (a GCRA rate limiter from
//! `governor`, keyed by tenant), a subscription count and a concurrent
//! connection count. Over quota is a 429 with the time to wait.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_core::config::GateConfig;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::context::{Denial, DenyKind};

type KeyedLimiter = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>;

pub struct TenantQuotaManager {
    publish: Option<KeyedLimiter>,
    subscriptions_max: usize,
    connections_max: usize,
    /// Subscription keys per tenant on this instance.
    subscriptions: Mutex<HashMap<String, HashSet<String>>>,
    connections: Arc<Mutex<HashMap<String, usize>>>,
}

fn quota_denial(reason: &'static str, message: String, retry_after: Duration) -> Denial {
    Denial {
        kind: DenyKind::Quota,
        reason,
        message,
        retry_after: Some(retry_after),
    }
}

/// Held for the length of a request or stream; gives the connection back
/// when dropped.
pub struct ConnectionPermit {
    tenant: String,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("quota lock");
        if let Some(n) = counts.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

impl TenantQuotaManager {
    pub fn from_config(cfg: &GateConfig) -> Option<Self> {
        if cfg.publish_rate == 0 && cfg.subscriptions_max == 0 && cfg.connections_max == 0 {
            return None;
        }
        let publish = NonZeroU32::new(cfg.publish_rate).map(|rate| {
            let burst = NonZeroU32::new(cfg.publish_burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Some(TenantQuotaManager {
            publish,
            subscriptions_max: cfg.subscriptions_max as usize,
            connections_max: cfg.connections_max as usize,
            subscriptions: Mutex::default(),
            connections: Arc::default(),
        })
    }

    /// These quotas, counting what `old` counted: the connections open now
    /// give their slots back here, and the subscriptions held stay held.
    /// Publish allowances start afresh.
    pub fn keeping(mut self, old: &TenantQuotaManager) -> Self {
        self.connections = old.connections.clone();
        *self.subscriptions.get_mut().expect("quota lock") =
            old.subscriptions.lock().expect("quota lock").clone();
        self
    }

    /// Takes `events` from the tenant's publish allowance.
    pub fn publish(&self, tenant: &str, events: u32) -> Result<(), Denial> {
        let (Some(limiter), Some(n)) = (&self.publish, NonZeroU32::new(events)) else {
            return Ok(());
        };
        match limiter.check_key_n(&tenant.to_string(), n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(quota_denial(
                    "publish_rate",
                    format!("tenant {tenant:?} is over its publish rate"),
                    wait,
                ))
            }
            Err(_) => Err(quota_denial(
                "publish_rate",
                format!(
                    "a batch of {events} events is larger than tenant {tenant:?}'s publish burst"
                ),
                Duration::from_secs(1),
            )),
        }
    }

    /// Whether the tenant may hold the subscription `key` (one it holds
    /// already is always fine).
    pub fn subscribe(&self, tenant: &str, key: &str) -> Result<(), Denial> {
        if self.subscriptions_max == 0 {
            return Ok(());
        }
        let subs = self.subscriptions.lock().expect("quota lock");
        let held = subs.get(tenant);
        if held.is_some_and(|h| h.contains(key)) {
            return Ok(());
        }
        let n = held.map_or(0, HashSet::len);
        if n >= self.subscriptions_max {
            return Err(quota_denial(
                "subscriptions_max",
                format!(
                    "tenant {tenant:?} has {n} subscriptions, its limit is {}",
                    self.subscriptions_max
                ),
                Duration::from_secs(1),
            ));
        }
        Ok(())
    }

    /// Records a subscription the tenant now holds.
    pub fn track_subscription(&self, tenant: &str, key: &str) {
        self.subscriptions
            .lock()
            .expect("quota lock")
            .entry(tenant.to_string())
            .or_default()
            .insert(key.to_string());
    }

    /// Forgets a removed subscription, whichever tenant held it.
    pub fn untrack_subscription(&self, key: &str) {
        let mut subs = self.subscriptions.lock().expect("quota lock");
        subs.values_mut().for_each(|s| {
            s.remove(key);
        });
        subs.retain(|_, s| !s.is_empty());
    }

    /// A connection slot for the tenant, or a denial at the limit.
    pub fn connect(&self, tenant: &str) -> Result<Option<ConnectionPermit>, Denial> {
        if self.connections_max == 0 {
            return Ok(None);
        }
        let mut counts = self.connections.lock().expect("quota lock");
        let n = counts.entry(tenant.to_string()).or_default();
        if *n >= self.connections_max {
            return Err(quota_denial(
                "connections_max",
                format!(
                    "tenant {tenant:?} has {n} open connections, its limit is {}",
                    self.connections_max
                ),
                Duration::from_secs(1),
            ));
        }
        *n += 1;
        Ok(Some(ConnectionPermit {
            tenant: tenant.to_string(),
            counts: self.connections.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(rate: u32, burst: u32, subs: u32, conns: u32) -> TenantQuotaManager {
        TenantQuotaManager::from_config(&GateConfig {
            publish_rate: rate,
            publish_burst: burst,
            subscriptions_max: subs,
            connections_max: conns,
            ..GateConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn nothing_configured_means_no_manager() {
        assert!(TenantQuotaManager::from_config(&GateConfig::default()).is_none());
    }

    #[test]
    fn publish_rate_with_burst_per_tenant() {
        // One event per hour after a burst of 3: the fourth is refused.
        let q = manager(1, 3, 0, 0);
        for _ in 0..3 {
            q.publish("acme", 1).unwrap();
        }
        let d = q.publish("acme", 1).unwrap_err();
        assert_eq!((d.reason, d.status()), ("publish_rate", 429));
        assert!(d.retry_after.unwrap() > Duration::ZERO);
        // Another tenant has its own allowance.
        q.publish("globex", 3).unwrap();
        // A batch larger than the burst can never pass.
        assert_eq!(q.publish("initech", 4).unwrap_err().reason, "publish_rate");
    }

    #[test]
    fn subscriptions_are_counted_per_tenant() {
        let q = manager(0, 0, 2, 0);
        for key in ["a", "b"] {
            q.subscribe("acme", key).unwrap();
            q.track_subscription("acme", key);
        }
        assert_eq!(
            q.subscribe("acme", "c").unwrap_err().reason,
            "subscriptions_max"
        );
        // Updating one it holds is fine; so is another tenant.
        q.subscribe("acme", "a").unwrap();
        q.subscribe("globex", "c").unwrap();
        q.untrack_subscription("a");
        q.subscribe("acme", "c").unwrap();
    }

    #[test]
    fn connections_are_given_back_on_drop() {
        let q = manager(0, 0, 0, 2);
        let a = q.connect("acme").unwrap();
        let _b = q.connect("acme").unwrap();
        assert_eq!(q.connect("acme").err().unwrap().reason, "connections_max");
        drop(a);
        assert!(q.connect("acme").unwrap().is_some());
    }
}
