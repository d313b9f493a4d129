//! The webhook SSRF guard: keeps webhook pushes out of the address ranges
//! of `eventmesh.webhook.denied.cidrs`.
//!
//! Invariants:
//! - an address is matched as what connecting to it reaches: itself, the
//!   IPv4 address inside an IPv4-mapped IPv6 one (`::ffff:127.0.0.1`), and
//!   for an unspecified address (`0.0.0.0`, `::`, `http://0/`) the loopback
//!   address it connects to. It is denied when any of these is in a range;
//! - a subscribe is checked with [`WebhookGuard::check_url`] (an IP host,
//!   or every address its name resolves to);
//! - every push is checked again against the address actually connected
//!   to: the webhook client resolves names through [`GuardedResolver`],
//!   which drops denied addresses (and fails when none is left), and an IP
//!   host is checked by [`WebhookGuard::check_host`] before each push, as
//!   the client does not resolve those. So a name that resolves elsewhere
//!   later, a range denied after the subscribe, or a subscription stored
//!   before the guard existed never reaches a denied address;
//! - with no range denied the guard allows everything and resolves nothing
//!   itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// The ranges webhook pushes may not reach.
#[derive(Debug, Clone, Default)]
pub struct WebhookGuard {
    denied: Vec<IpNet>,
}

/// The addresses a connection to `ip` reaches, for matching: `ip`, its
/// IPv4 form when it is IPv4-mapped, and loopback for an unspecified one.
fn reached(ip: IpAddr) -> [IpAddr; 3] {
    let mapped = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let target = match mapped {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    };
    [ip, mapped, target]
}

impl WebhookGuard {
    pub fn new(denied: Vec<IpNet>) -> Self {
        WebhookGuard { denied }
    }

    /// Whether any range is denied.
    pub fn is_enabled(&self) -> bool {
        !self.denied.is_empty()
    }

    pub fn denied(&self) -> &[IpNet] {
        &self.denied
    }

    /// Refuses `ip` when connecting to it reaches a denied range; the
    /// message names the address and the range.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        for addr in reached(ip) {
            if let Some(net) = self.denied.iter().find(|n| n.contains(&addr)) {
                let via = if addr == ip {
                    String::new()
                } else {
                    format!(" (it reaches {addr})")
                };
                return Err(format!(
                    "the webhook address {ip}{via} is inside the denied range {net} (eventmesh.webhook.denied.cidrs)"
                ));
            }
        }
        Ok(())
    }

    /// The subscribe-time check of a webhook URL: its host, when an IP
    /// address, or every address its name resolves to, must be allowed. A
    /// name that cannot be resolved is refused. With no range denied,
    /// everything is allowed and nothing resolved.
    pub async fn check_url(&self, url: &str) -> Result<(), String> {
        if !self.is_enabled() {
            return Ok(());
        }
        let parsed = Url::parse(url).map_err(|e| format!("url {url:?} is not valid: {e}"))?;
        if let Some(ip) = ip_host(&parsed) {
            return self.check_ip(ip);
        }
        let Some(name) = parsed.host_str().filter(|h| !h.is_empty()) else {
            return Err(format!("url {url:?} has no host"));
        };
        let port = parsed.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| format!("cannot resolve the webhook host {name:?}: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("the webhook host {name:?} has no address"));
        }
        for a in addrs {
            self.check_ip(a.ip()).map_err(|m| {
                format!("the webhook host {name:?} resolves to a denied address: {m}")
            })?;
        }
        Ok(())
    }

    /// The check made before each push: an IP host must be allowed (a name
    /// is checked by [`GuardedResolver`] when the client resolves it).
    pub fn check_host(&self, url: &Url) -> Result<(), String> {
        match ip_host(url) {
            Some(ip) if self.is_enabled() => self.check_ip(ip),
            _ => Ok(()),
        }
    }
}

/// The host of `url` when it is an IP address. The URL parser writes
/// every IPv4 spelling (`0`, `127.1`, `0x7f.1`, `2130706433`) in dotted
/// decimal and IPv6 in brackets.
fn ip_host(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.parse().ok()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The webhook client's name resolver: the system resolver, minus every
/// address the guard denies; an error when none is left.
pub struct GuardedResolver(pub Arc<WebhookGuard>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(resolve_allowed(self.0.clone(), name.as_str().to_string()))
    }
}

async fn resolve_allowed(guard: Arc<WebhookGuard>, host: String) -> Result<Addrs, BoxError> {
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
    if !guard.is_enabled() {
        return Ok(Box::new(found.into_iter()));
    }
    let mut refused = None;
    let allowed: Vec<SocketAddr> = found
        .into_iter()
        .filter(|a| match guard.check_ip(a.ip()) {
            Ok(()) => true,
            Err(m) => {
                refused.get_or_insert(m);
                false
            }
        })
        .collect();
    if allowed.is_empty() {
        let why = refused.unwrap_or_else(|| "it has no address".to_string());
        return Err(format!("webhook host {host:?} refused: {why}").into());
    }
    Ok(Box::new(allowed.into_iter()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn guard(ranges: &str) -> WebhookGuard {
        WebhookGuard::new(
            ranges
                .split(',')
                .map(|r| r.parse().unwrap())
                .collect::<Vec<IpNet>>(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_are_matched_as_what_they_reach() {
        let g = guard("127.0.0.0/8,::1/128");
        for denied in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "::",
            "::ffff:0.0.0.0",
        ] {
            assert!(g.check_ip(ip(denied)).is_err(), "{denied} allowed");
        }
        for allowed in ["10.0.0.1", "::2", "::127.0.0.1", "0.0.0.1", "2001:db8::1"] {
            assert_eq!(g.check_ip(ip(allowed)), Ok(()), "{allowed}");
        }
        assert_eq!(
            g.check_ip(ip("::ffff:127.0.0.1")).unwrap_err(),
            "the webhook address ::ffff:127.0.0.1 (it reaches 127.0.0.1) is inside the denied range 127.0.0.0/8 (eventmesh.webhook.denied.cidrs)"
        );
        assert_eq!(
            g.check_ip(ip("::1")).unwrap_err(),
            "the webhook address ::1 is inside the denied range ::1/128 (eventmesh.webhook.denied.cidrs)"
        );
        // The raw forms match their own ranges too.
        let g = guard("0.0.0.0/8,::/128,::ffff:0:0/96");
        for denied in ["0.0.0.0", "0.1.2.3", "::", "::ffff:10.0.0.1"] {
            assert!(g.check_ip(ip(denied)).is_err(), "{denied} allowed");
        }
        assert_eq!(g.check_ip(ip("127.0.0.1")), Ok(()));
    }

    #[tokio::test]
    async fn urls_with_ip_hosts_in_every_spelling() {
        let g = guard("127.0.0.0/8,::1/128");
        for url in [
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
            "http://0/",
            "http://[::]/",
            "http://127.1:8080/hook",
            "http://2130706433/",
            "http://0x7f.1/",
            "https://[::1]:9000/x",
        ] {
            let e = g.check_url(url).await.unwrap_err();
            assert!(e.contains("denied range"), "{url}: {e}");
        }
        assert_eq!(g.check_url("http://10.1.2.3:80/hook").await, Ok(()));
        assert!(g
            .check_url("not a url")
            .await
            .unwrap_err()
            .contains("not valid"));
        // Nothing denied: nothing checked.
        assert_eq!(WebhookGuard::default().check_url("http://0/").await, Ok(()));
    }

    #[tokio::test]
    async fn names_are_checked_at_every_address() {
        let g = guard("127.0.0.0/8,::1/128");
        let e = g.check_url("http://localhost:9/hook").await.unwrap_err();
        assert!(
            e.starts_with(
                "the webhook host \"localhost\" resolves to a denied address: the webhook address "
            ),
            "{e}"
        );
        let e = g
            .check_url("http://no-such-host.invalid/")
            .await
            .unwrap_err();
        assert!(e.contains("cannot resolve"), "{e}");
        assert_eq!(
            guard("10.0.0.0/8").check_url("http://localhost/").await,
            Ok(())
        );
    }

    #[test]
    fn hosts_checked_before_each_push() {
        let g = guard("127.0.0.0/8");
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(g.check_host(&url("http://0/")).is_err());
        assert!(g.check_host(&url("http://[::ffff:7f00:1]:81/")).is_err());
        // A name is left to the resolver.
        assert_eq!(g.check_host(&url("http://localhost/")), Ok(()));
        assert_eq!(g.check_host(&url("http://10.0.0.1/")), Ok(()));
    }

    #[tokio::test]
    async fn the_resolver_drops_denied_addresses() {
        let resolve = |ranges: &str| {
            GuardedResolver(Arc::new(guard(ranges))).resolve(Name::from_str("localhost").unwrap())
        };
        let e = match resolve("127.0.0.0/8,::1/128").await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(
            e.starts_with("webhook host \"localhost\" refused: the webhook address "),
            "{e}"
        );
        // With only IPv6 loopback denied, what is left is IPv4 loopback.
        let left: Vec<IpAddr> = resolve("::1/128").await.unwrap().map(|a| a.ip()).collect();
        assert!(
            !left.is_empty() && left.iter().all(|a| *a == ip("127.0.0.1")),
            "{left:?}"
        );
        // Nothing denied: every address.
        let all = GuardedResolver(Arc::default())
            .resolve(Name::from_str("localhost").unwrap())
            .await
            .unwrap()
            .count();
        assert!(all >= 1);
    }
}
