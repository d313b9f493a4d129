//! The webhook validation handshake keys.

use super::*;

#[test]
fn the_webhook_handshake_is_on_by_default_and_its_keys_are_checked() {
    let c = cfg(&[]);
    let h = &c.delivery.webhook_handshake;
    assert!(h.enabled);
    assert_eq!(h.origin, None);
    assert_eq!(h.request_rate, 600);
    assert_eq!(h.retry_max, Duration::from_secs(60));
    let c = cfg(&[("eventmesh.webhook.handshake.origin", "mesh.example.com")]);
    assert_eq!(
        c.delivery.webhook_handshake.origin.as_deref(),
        Some("mesh.example.com")
    );
    for (key, bad) in [
        ("eventmesh.webhook.handshake.origin", "bad origin"),
        ("eventmesh.webhook.handshake.enabled", "sometimes"),
        ("eventmesh.webhook.handshake.request.rate", "0"),
        ("eventmesh.webhook.handshake.retry.max.ms", "10"),
    ] {
        fails(&[(key, bad)], &[key, bad]);
    }
}
