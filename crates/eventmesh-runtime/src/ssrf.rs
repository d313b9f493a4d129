//! The webhook SSRF guard: keeps webhook pushes, and connectors' outbound
//! connections, out of the address ranges of
//! `eventmesh.webhook.denied.cidrs` (by default the link-local and cloud
//! metadata ranges; `production` adds loopback, the private ranges and the
//! IPv6 spellings of IPv4 addresses).
//!
//! Invariants:
//! - an address is matched as what connecting to it reaches: itself, the
//!   IPv4 address embedded in an IPv6 one (IPv4-mapped `::ffff:a.b.c.d`,
//!   IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
//!   NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::/48`), and for an
//!   unspecified address (`0.0.0.0`, `::`, `http://0/`) the loopback
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
//! - a connector's target (`host`, `port`) is checked with
//!   [`WebhookGuard::check_target`] at create and update and again before
//!   each connection;
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

/// The IPv4 address an IPv6 one carries, when connecting to it can reach
/// that IPv4 address: IPv4-mapped (`::ffff:0:0/96`), IPv4-translated
/// (`::ffff:0:0:0/96`), IPv4-compatible (`::/96`, deprecated but still
/// routed by some stacks; `::` and `::1` are themselves), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`, the address in bits 16 to 48).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// The addresses a connection to `ip` reaches, for matching: `ip`, the
/// IPv4 address it embeds, and loopback for an unspecified one.
fn reached(ip: IpAddr) -> [IpAddr; 3] {
    let embedded = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let target = match embedded {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    };
    [ip, embedded, target]
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
        self.check_address(ip, "the webhook address")
    }

    /// [`WebhookGuard::check_ip`], the message opening with `noun`.
    fn check_address(&self, ip: IpAddr, noun: &str) -> Result<(), String> {
        for addr in reached(ip) {
            if let Some(net) = self.denied.iter().find(|n| n.contains(&addr)) {
                let via = if addr == ip {
                    String::new()
                } else {
                    format!(" (it reaches {addr})")
                };
                return Err(format!(
                    "{noun} {ip}{via} is inside the denied range {net} (eventmesh.webhook.denied.cidrs)"
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

    /// The check of a connector's target, at create and update and before
    /// each connection: `host` (a name, an IP address, or one in brackets)
    /// and every address its name resolves to must be allowed. A name that
    /// cannot be resolved is refused. With no range denied, everything is
    /// allowed and nothing resolved.
    pub async fn check_target(&self, host: &str, port: u16) -> Result<(), String> {
        if !self.is_enabled() {
            return Ok(());
        }
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check_address(ip, "the target address");
        }
        if bare.is_empty() {
            return Err("the target has no host".to_string());
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("cannot resolve the target host {bare:?}: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("the target host {bare:?} has no address"));
        }
        for a in addrs {
            self.check_address(a.ip(), "the target address")
                .map_err(|m| {
                    format!("the target host {bare:?} resolves to a denied address: {m}")
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
        for allowed in ["10.0.0.1", "::2", "0.0.0.1", "2001:db8::1", "2002:a00:1::1"] {
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

    #[test]
    fn ipv4_embedded_in_ipv6_is_checked_in_every_form() {
        let g = guard("127.0.0.0/8,169.254.0.0/16");
        for (denied, reaches) in [
            ("::ffff:169.254.169.254", "169.254.169.254"),
            ("::ffff:0:169.254.169.254", "169.254.169.254"),
            ("::169.254.169.254", "169.254.169.254"),
            ("::127.0.0.1", "127.0.0.1"),
            ("64:ff9b::169.254.169.254", "169.254.169.254"),
            ("64:ff9b::7f00:1", "127.0.0.1"),
            ("2002:a9fe:a9fe::1", "169.254.169.254"),
            ("2002:7f00:1:ffff::", "127.0.0.1"),
        ] {
            assert_eq!(
                g.check_ip(ip(denied)).unwrap_err(),
                format!(
                    "the webhook address {} (it reaches {reaches}) is inside the denied range {} (eventmesh.webhook.denied.cidrs)",
                    ip(denied),
                    if reaches.starts_with("127") { "127.0.0.0/8" } else { "169.254.0.0/16" }
                )
            );
        }
        for allowed in [
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "2001:db8::a9fe:a9fe",
        ] {
            assert_eq!(g.check_ip(ip(allowed)), Ok(()), "{allowed}");
        }
        // `::1` and `::` are loopback and unspecified, not IPv4-compatible.
        assert_eq!(guard("0.0.0.0/8").check_ip(ip("::1")), Ok(()));
        assert!(guard("::1/128").check_ip(ip("::")).is_err());
    }

    #[tokio::test]
    async fn connector_targets_by_address_and_name() {
        let g = guard("127.0.0.0/8,::1/128");
        assert_eq!(
            g.check_target("127.0.0.1", 5432).await.unwrap_err(),
            "the target address 127.0.0.1 is inside the denied range 127.0.0.0/8 (eventmesh.webhook.denied.cidrs)"
        );
        assert!(g.check_target("[::1]", 6379).await.is_err());
        let e = g.check_target("localhost", 4222).await.unwrap_err();
        assert!(
            e.starts_with(
                "the target host \"localhost\" resolves to a denied address: the target address "
            ),
            "{e}"
        );
        let e = g.check_target("no-such-host.invalid", 1).await.unwrap_err();
        assert!(e.starts_with("cannot resolve the target host"), "{e}");
        assert_eq!(g.check_target("10.1.2.3", 1883).await, Ok(()));
        assert_eq!(
            WebhookGuard::default().check_target("127.0.0.1", 1).await,
            Ok(())
        );
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
