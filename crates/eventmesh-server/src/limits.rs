//! How many connections the listeners hold, so that no client can use up
//! the process's descriptors: the boot raises the soft `RLIMIT_NOFILE` to
//! the hard limit, keeps a reserve of descriptors for everything that is
//! not a client connection (the local store's files, etcd, NATS, webhooks),
//! and splits the rest between the traffic ports (HTTP and TCP together)
//! and the admin port, so that probes and `/metrics` answer whatever the
//! traffic ports get.
//!
//! Each accepted connection takes a [`Permit`] before anything else is done
//! with it; one over a limit is closed at once (so the kernel's backlog
//! keeps moving) and counted in `eventmesh_connections_refused_total`.
//! Invariants: a permit is counted in its pool, its address and its
//! listener's `eventmesh_connections_open` gauge from its grant to its
//! drop, and in no other; a pool never holds more permits than its limit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use eventmesh_core::config::ConnectionLimits;
use eventmesh_runtime::Metrics;
use prometheus_client::metrics::gauge::Gauge;

/// The soft and hard descriptor limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nofile {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// What the derivation assumes when the limit is unlimited or unreadable.
const ASSUMED_NOFILE: u64 = 1 << 20;

/// Raises the soft descriptor limit to the hard one; the limits before and
/// after (after = before when raising failed, which is logged).
pub fn raise_nofile() -> (Nofile, Nofile) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let before = getrlimit(Resource::Nofile);
    let before = Nofile {
        soft: before.current,
        hard: before.maximum,
    };
    // An unlimited hard limit cannot be the soft one for descriptors (the
    // kernel caps them at `fs.nr_open`): the soft one stays.
    if before.soft == before.hard || before.hard.is_none() {
        return (before, before);
    }
    let raised = rustix::process::Rlimit {
        current: before.hard,
        maximum: before.hard,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            let after = getrlimit(Resource::Nofile);
            let after = Nofile {
                soft: after.current,
                hard: after.maximum,
            };
            (before, after)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the soft descriptor limit to the hard one");
            (before, before)
        }
    }
}

/// The limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub traffic: u32,
    pub per_address: u32,
    pub admin: u32,
    /// Descriptors left for everything but client connections.
    pub reserve: u64,
}

/// The limits from the configuration, each `0` derived from `nofile` (the
/// soft descriptor limit, `None`: unlimited): an eighth of the descriptors
/// (at least 64) stay in reserve; of the rest the admin port gets a
/// sixteenth (16 to 256) and the traffic ports the remainder; one address
/// gets a quarter of the traffic ports'.
pub fn derive(nofile: Option<u64>, cfg: &ConnectionLimits) -> Limits {
    let nofile = nofile.unwrap_or(ASSUMED_NOFILE).min(ASSUMED_NOFILE * 16);
    let reserve = (nofile / 8).max(64);
    let budget = nofile.saturating_sub(reserve);
    let admin_share = (budget / 16).clamp(16, 256);
    let traffic_share = budget.saturating_sub(admin_share).max(16);
    let pick = |configured: u32, derived: u64| match configured {
        0 => u32::try_from(derived).unwrap_or(u32::MAX),
        n => n,
    };
    let traffic = pick(cfg.traffic_max, traffic_share);
    let per_address = pick(cfg.per_address_max, (u64::from(traffic) / 4).max(1));
    let admin = pick(cfg.admin_max, admin_share);
    Limits {
        traffic,
        per_address,
        admin,
        reserve,
    }
}

/// Connections held against one limit.
pub struct Pool {
    max: u32,
    open: AtomicU32,
}

impl Pool {
    pub fn new(max: u32) -> Arc<Pool> {
        Arc::new(Pool {
            max,
            open: AtomicU32::new(0),
        })
    }

    fn take(&self) -> bool {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connections held per client address.
pub struct PerAddress {
    max: u32,
    open: Mutex<HashMap<IpAddr, u32>>,
}

impl PerAddress {
    pub fn new(max: u32) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn take(&self, key: IpAddr) -> bool {
        let mut open = self.open.lock().expect("per-address lock");
        let n = open.entry(key).or_insert(0);
        if *n >= self.max {
            if *n == 0 {
                open.remove(&key);
            }
            return false;
        }
        *n += 1;
        true
    }

    fn give_back(&self, key: IpAddr) {
        let mut open = self.open.lock().expect("per-address lock");
        if let Some(n) = open.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&key);
            }
        }
    }
}

/// The address a per-address limit counts a client under: an IPv4 one
/// (mapped into IPv6 or not) as it is, an IPv6 one by its /64, which one
/// host usually holds whole.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// Why a connection was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Limit,
    PerAddress,
    TimeoutTls,
    TimeoutHeader,
    TimeoutBody,
    TimeoutHello,
}

impl Refusal {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Limit => "limit",
            Refusal::PerAddress => "per_address",
            Refusal::TimeoutTls => "timeout_tls",
            Refusal::TimeoutHeader => "timeout_header",
            Refusal::TimeoutBody => "timeout_body",
            Refusal::TimeoutHello => "timeout_hello",
        }
    }
}

/// One listener's admission: its name (the `listener` label), its pool,
/// the per-address limit on the traffic ports, and its counters.
#[derive(Clone)]
pub struct Admission {
    name: &'static str,
    pool: Arc<Pool>,
    per_address: Option<Arc<PerAddress>>,
    open: Gauge,
    metrics: Arc<Metrics>,
}

impl Admission {
    pub fn new(
        name: &'static str,
        pool: Arc<Pool>,
        per_address: Option<Arc<PerAddress>>,
        metrics: Arc<Metrics>,
    ) -> Admission {
        let open = metrics.connections_open(name);
        Admission {
            name,
            pool,
            per_address,
            open,
            metrics,
        }
    }

    /// A permit for a connection from `ip`, or why there is none (counted).
    pub fn admit(&self, ip: IpAddr) -> Result<Permit, Refusal> {
        if !self.pool.take() {
            self.refused(Refusal::Limit);
            return Err(Refusal::Limit);
        }
        let key = address_key(ip);
        if let Some(per) = &self.per_address {
            if !per.take(key) {
                self.pool.give_back();
                self.refused(Refusal::PerAddress);
                return Err(Refusal::PerAddress);
            }
        }
        self.open.inc();
        Ok(Permit {
            accepted: tokio::time::Instant::now(),
            pool: self.pool.clone(),
            per_address: self.per_address.clone().map(|p| (p, key)),
            open: self.open.clone(),
        })
    }

    /// Counts a connection cut off for `why`.
    pub fn refused(&self, why: Refusal) {
        self.metrics.connection_refused(self.name, why.as_str());
    }
}

/// A connection's place in its limits, given back when dropped.
pub struct Permit {
    accepted: tokio::time::Instant,
    pool: Arc<Pool>,
    per_address: Option<(Arc<PerAddress>, IpAddr)>,
    open: Gauge,
}

impl Permit {
    /// When the connection was accepted: the start of every deadline that
    /// runs until it is first served (TLS handshake, first request header,
    /// TCP `HELLO`).
    pub fn accepted(&self) -> tokio::time::Instant {
        self.accepted
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pool.give_back();
        if let Some((per, key)) = &self.per_address {
            per.give_back(*key);
        }
        self.open.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(nofile: Option<u64>) -> Limits {
        derive(nofile, &ConnectionLimits::default())
    }

    #[test]
    fn limits_are_derived_from_the_descriptor_limit() {
        assert_eq!(
            derived(Some(256)),
            Limits {
                traffic: 176,
                per_address: 44,
                admin: 16,
                reserve: 64
            }
        );
        assert_eq!(
            derived(Some(1024)),
            Limits {
                traffic: 840,
                per_address: 210,
                admin: 56,
                reserve: 128
            }
        );
        // The admin slice stops at 256.
        assert_eq!(
            derived(Some(65_536)),
            Limits {
                traffic: 57_088,
                per_address: 14_272,
                admin: 256,
                reserve: 8192
            }
        );
        // Unlimited: as for 2^20.
        assert_eq!(derived(None), derived(Some(1 << 20)));
        // Too few descriptors for a broker: small floors, still a reserve.
        let tiny = derived(Some(32));
        assert_eq!((tiny.traffic, tiny.admin, tiny.reserve), (16, 16, 64));
    }

    #[test]
    fn configured_limits_win_and_the_per_address_one_follows_the_traffic_one() {
        let cfg = ConnectionLimits {
            traffic_max: 1000,
            per_address_max: 0,
            admin_max: 7,
        };
        let l = derive(Some(256), &cfg);
        assert_eq!((l.traffic, l.per_address, l.admin), (1000, 250, 7));
        let cfg = ConnectionLimits {
            per_address_max: 3,
            ..ConnectionLimits::default()
        };
        assert_eq!(derive(Some(256), &cfg).per_address, 3);
    }

    #[test]
    fn ipv6_clients_count_by_their_64_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(address_key(mapped), "10.0.0.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn permits_are_refused_past_each_limit_and_given_back_on_drop() {
        let metrics = Arc::new(Metrics::new());
        let pool = Pool::new(3);
        let per = PerAddress::new(2);
        let adm = Admission::new("traffic", pool.clone(), Some(per), metrics.clone());
        let one: IpAddr = "10.0.0.1".parse().unwrap();
        let two: IpAddr = "10.0.0.2".parse().unwrap();
        let a = adm.admit(one).unwrap();
        let _b = adm.admit(one).unwrap();
        assert_eq!(adm.admit(one).err(), Some(Refusal::PerAddress));
        let _c = adm.admit(two).unwrap();
        assert_eq!(adm.admit(two).err(), Some(Refusal::Limit));
        assert_eq!(metrics.connections_open("traffic").get(), 3);
        drop(a);
        assert_eq!(metrics.connections_open("traffic").get(), 2);
        // The address's place came back with the pool's.
        let _d = adm.admit(one).unwrap();
        let text = metrics.render(eventmesh_runtime::metrics::Format::Text);
        for line in [
            "eventmesh_connections_refused_total{listener=\"traffic\",reason=\"per_address\"} 1",
            "eventmesh_connections_refused_total{listener=\"traffic\",reason=\"limit\"} 1",
            "eventmesh_connections_open{listener=\"traffic\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
