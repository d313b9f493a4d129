//! The listeners' and the admin side's keys: deadlines, connection
//! limits, credential lengths, and the outbound guard's ranges.

use super::*;

#[test]
fn listener_limits_and_deadlines_default_and_are_checked() {
    let c = cfg(&[]);
    assert_eq!(c.server.http.header_timeout, Duration::from_secs(10));
    assert_eq!(c.server.http.idle_timeout, Duration::from_secs(60));
    assert_eq!(c.server.http.body_timeout, Duration::from_secs(30));
    assert_eq!(c.server.tcp.hello_timeout, Duration::from_secs(10));
    assert_eq!(c.server.tls.handshake_timeout, Duration::from_secs(10));
    assert_eq!(c.server.connections, ConnectionLimits::default());
    let err = err(&[("eventmesh.server.http.header.timeout.ms", "0")]);
    assert_eq!(
        err,
        "invalid value \"0\" for eventmesh.server.http.header.timeout.ms: \
         expected a duration in milliseconds from 1 to 86400000"
    );
    fails(
        &[("eventmesh.server.connections.max", "-1")],
        &[
            "eventmesh.server.connections.max",
            "\"-1\"",
            "a connection count from 0 to 10000000 (0 = derived)",
        ],
    );
}

#[test]
fn admin_token_and_cluster_secret_need_16_bytes() {
    for key in [ADMIN_TOKEN_KEY, "eventmesh.cluster.secret"] {
        let short = "fifteen-bytes-x";
        assert_eq!(short.len(), 15);
        let e = err(&[(key, short)]);
        assert_eq!(
            e,
            format!(
                "{key} is 15 bytes long; it must be at least 16 bytes (a short token can be \
                 guessed)"
            )
        );
        assert!(!e.contains(short), "{e}");
        let c = cfg(&[(key, "sixteen-bytes-xx")]);
        let set = match key {
            ADMIN_TOKEN_KEY => c.server.admin.token,
            _ => c.cluster.secret,
        };
        assert_eq!(set.as_deref(), Some("sixteen-bytes-xx"));
    }
    // Unset stays allowed (admin routes locked, no internal channel).
    let c = cfg(&[]);
    assert_eq!((c.server.admin.token, c.cluster.secret), (None, None));
}

#[test]
fn webhook_denied_ranges_take_production_and_none() {
    let c = cfg(&[(
        "eventmesh.webhook.denied.cidrs",
        "production,203.0.113.0/24",
    )]);
    let shown: Vec<String> = c
        .webhook
        .denied_cidrs
        .iter()
        .map(|n| n.to_string())
        .collect();
    for range in [
        "127.0.0.0/8",
        "::1/128",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "fe80::/10",
        "fc00::/7",
        "::/96",
        "::ffff:0:0:0/96",
        "64:ff9b::/96",
        "2002::/16",
        "0.0.0.0/8",
        "203.0.113.0/24",
    ] {
        assert!(shown.iter().any(|s| s == range), "{range} not in {shown:?}");
    }
    let c = cfg(&[("eventmesh.webhook.denied.cidrs", "none")]);
    assert!(c.webhook.denied_cidrs.is_empty());
    let entries = c.redacted_entries();
    let shown = entries
        .iter()
        .find(|(k, _)| k == "eventmesh.webhook.denied.cidrs")
        .map(|(_, v)| v.as_str());
    assert_eq!(shown, Some("none"));
}
