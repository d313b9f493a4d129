//! The allowance of failed credential attempts per remote address (the
//! admin token, the cluster secret): `burst` failures in a row, then one
//! more per `interval`, as a GCRA with one theoretical arrival time per
//! address.
//!
//! Invariants:
//! - an address is limited exactly when one more failure would exceed its
//!   allowance; while it is, [`FailureLimiter::limited_for`] says how long
//!   until it may try again, and nothing it does moves that time further
//!   out (a limited request is refused before any check, so it spends
//!   nothing);
//! - an IPv4-mapped IPv6 address counts as its IPv4 address, and an IPv6
//!   address with its whole /64 (one host usually holds all of it);
//! - addresses whose allowance is whole again are forgotten, so the table
//!   holds only addresses that failed within the last `burst × interval`.
//!
//! Not `governor`'s keyed limiter: it cannot tell whether a key has
//! allowance left without spending some, and a limited address must be
//! refused (right credential or not) without a failure being spent.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts per remote address; time is given by the caller.
#[derive(Debug)]
pub struct FailureLimiter {
    burst: u32,
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Per address: when its allowance is whole again.
    full_at: HashMap<IpAddr, Instant>,
    /// Size past which whole allowances are swept out.
    sweep_at: usize,
}

const SWEEP_MIN: usize = 1024;

/// The key an address counts under.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl FailureLimiter {
    /// `burst` failures in a row (at least 1), then one per `interval`.
    pub fn new(burst: u32, interval: Duration) -> Self {
        FailureLimiter {
            burst: burst.max(1),
            interval,
            state: Mutex::new(State {
                full_at: HashMap::new(),
                sweep_at: SWEEP_MIN,
            }),
        }
    }

    /// The part of the allowance that may be in use without limiting.
    fn headroom(&self) -> Duration {
        self.interval * (self.burst - 1)
    }

    /// How long `ip` must wait before it may try again, when it has no
    /// failure left; `None` when it may try now.
    pub fn limited_for(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let state = self.state.lock().expect("failure limiter lock");
        let used = state.full_at.get(&key(ip))?.saturating_duration_since(now);
        used.checked_sub(self.headroom()).filter(|w| !w.is_zero())
    }

    /// Spends one failure of `ip`'s allowance. Callers ask
    /// [`FailureLimiter::limited_for`] first and refuse a limited address
    /// without calling this.
    pub fn fail(&self, ip: IpAddr, now: Instant) {
        let mut state = self.state.lock().expect("failure limiter lock");
        let full_at = state.full_at.entry(key(ip)).or_insert(now);
        *full_at = (*full_at).max(now) + self.interval;
        if state.full_at.len() > state.sweep_at {
            state.full_at.retain(|_, at| *at > now);
            state.sweep_at = (state.full_at.len() * 2).max(SWEEP_MIN);
        }
    }

    /// Addresses remembered (those that failed recently).
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .expect("failure limiter lock")
            .full_at
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn a_burst_then_one_per_interval() {
        let l = FailureLimiter::new(3, 10 * SEC);
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..2 {
            assert_eq!(l.limited_for(a, t0), None);
            l.fail(a, t0);
        }
        assert_eq!(l.limited_for(a, t0), None);
        l.fail(a, t0);
        // The burst is spent: limited for one interval.
        assert_eq!(l.limited_for(a, t0), Some(10 * SEC));
        assert_eq!(l.limited_for(a, t0 + 4 * SEC), Some(6 * SEC));
        // Asking again moves nothing.
        assert_eq!(l.limited_for(a, t0 + 4 * SEC), Some(6 * SEC));
        // Once the interval passed, one more failure, then limited again.
        let t1 = t0 + 10 * SEC;
        assert_eq!(l.limited_for(a, t1), None);
        l.fail(a, t1);
        assert_eq!(l.limited_for(a, t1), Some(10 * SEC));
        // Other addresses are not affected.
        assert_eq!(l.limited_for(ip("192.0.2.2"), t1), None);
        // After burst × interval the whole allowance is back.
        let t2 = t1 + 30 * SEC;
        for _ in 0..3 {
            assert_eq!(l.limited_for(a, t2), None);
            l.fail(a, t2);
        }
        assert_eq!(l.limited_for(a, t2), Some(10 * SEC));
    }

    #[test]
    fn a_burst_of_one_limits_after_each_failure() {
        let l = FailureLimiter::new(1, 5 * SEC);
        let t0 = Instant::now();
        let a = ip("198.51.100.7");
        assert_eq!(l.limited_for(a, t0), None);
        l.fail(a, t0);
        assert_eq!(l.limited_for(a, t0 + SEC), Some(4 * SEC));
        assert_eq!(l.limited_for(a, t0 + 5 * SEC), None);
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let l = FailureLimiter::new(2, 60 * SEC);
        let t0 = Instant::now();
        l.fail(ip("2001:db8:1:2::1"), t0);
        l.fail(ip("2001:db8:1:2:ffff::9"), t0);
        assert_eq!(l.limited_for(ip("2001:db8:1:2::77"), t0), Some(60 * SEC));
        assert_eq!(l.limited_for(ip("2001:db8:1:3::1"), t0), None);
        l.fail(ip("::ffff:203.0.113.5"), t0);
        l.fail(ip("203.0.113.5"), t0);
        assert_eq!(l.limited_for(ip("203.0.113.5"), t0), Some(60 * SEC));
        assert_eq!(l.limited_for(ip("::ffff:203.0.113.5"), t0), Some(60 * SEC));
    }

    #[test]
    fn whole_allowances_are_forgotten() {
        let l = FailureLimiter::new(2, SEC);
        let t0 = Instant::now();
        for i in 0..SWEEP_MIN as u32 {
            l.fail(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert_eq!(l.tracked(), SWEEP_MIN);
        // Later, one more address: every older one has its allowance back
        // and is swept out.
        l.fail(ip("192.0.2.1"), t0 + 2 * SEC);
        assert_eq!(l.tracked(), 1);
        // While they still count, they are kept.
        let t1 = t0 + 10 * SEC;
        for i in 0..=SWEEP_MIN as u32 {
            l.fail(IpAddr::from(i.to_be_bytes()), t1);
        }
        assert_eq!(l.tracked(), SWEEP_MIN + 1);
        assert_eq!(l.limited_for(ip("0.0.0.7"), t1), None);
        l.fail(ip("0.0.0.7"), t1);
        assert_eq!(l.limited_for(ip("0.0.0.7"), t1), Some(SEC));
    }
}
