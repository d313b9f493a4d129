//! Request signatures: for a tenant with a secret, the request must carry
//! `x-em-timestamp` (Unix seconds) and `x-em-signature: sha256=<hex>`, the
//! HMAC-SHA256 of `<timestamp>.<raw body>` under that secret. A timestamp
//! outside the tolerance (a replay of an old request) or a mismatch is
//! refused; the comparison is constant-time.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eventmesh_core::config::GateConfig;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::context::{Denial, Frame, RequestContext};
use crate::gate::{Filter, GateError};
use crate::{content_lines, read_file};

type HmacSha256 = Hmac<Sha256>;

pub struct SignatureVerifierFilter {
    secrets: HashMap<String, Vec<u8>>,
    tolerance: Duration,
}

/// The signature a client sends: `sha256=<hex>` of the HMAC over
/// `<timestamp>.<body>`.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl SignatureVerifierFilter {
    pub fn from_config(cfg: &GateConfig) -> Result<Option<Self>, GateError> {
        let Some(path) = &cfg.signature_secrets_file else {
            return Ok(None);
        };
        let text = read_file("signature secrets file", path)?;
        let mut secrets = HashMap::new();
        for (line, l) in content_lines(&text) {
            match l.split_whitespace().collect::<Vec<_>>()[..] {
                [tenant, secret] => {
                    secrets.insert(tenant.to_string(), secret.as_bytes().to_vec());
                }
                _ => {
                    return Err(GateError::Malformed {
                        path: path.clone(),
                        line,
                        message: "expected: tenant secret".into(),
                    })
                }
            }
        }
        Ok(Some(SignatureVerifierFilter {
            secrets,
            tolerance: cfg.signature_tolerance,
        }))
    }

    fn verify_at(&self, ctx: &RequestContext, frame: &Frame, now: u64) -> Result<(), Denial> {
        let Some(secret) = ctx
            .identity
            .tenant
            .as_deref()
            .and_then(|t| self.secrets.get(t))
        else {
            return Ok(());
        };
        let bad = |reason, m: &str| Denial::authentication(reason, m.to_string());
        let (Some(ts), Some(sig)) = (frame.timestamp, frame.signature) else {
            return Err(bad(
                "missing_signature",
                "this tenant's requests must carry x-em-timestamp and x-em-signature",
            ));
        };
        let Ok(at) = ts.trim().parse::<u64>() else {
            return Err(bad("bad_timestamp", "x-em-timestamp must be Unix seconds"));
        };
        if now.abs_diff(at) > self.tolerance.as_secs() {
            return Err(bad(
                "stale_timestamp",
                "x-em-timestamp is outside the accepted window (replayed or clock skew)",
            ));
        }
        let Some(given) = sig
            .trim()
            .strip_prefix("sha256=")
            .and_then(|h| hex::decode(h).ok())
        else {
            return Err(bad("bad_signature", "x-em-signature must be sha256=<hex>"));
        };
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(ts.trim().as_bytes());
        mac.update(b".");
        mac.update(frame.body);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&given)
            .map_err(|_| bad("bad_signature", "the request signature does not match"))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Filter for SignatureVerifierFilter {
    fn name(&self) -> &'static str {
        "signature"
    }

    fn authenticates(&self) -> bool {
        true
    }

    fn check(&self, ctx: &mut RequestContext, frame: &Frame) -> Result<(), Denial> {
        self.verify_at(ctx, frame, unix_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Operation, Transport};

    fn filter() -> SignatureVerifierFilter {
        SignatureVerifierFilter {
            secrets: [("acme".to_string(), b"hush".to_vec())].into(),
            tolerance: Duration::from_secs(300),
        }
    }

    fn ctx(tenant: &str) -> RequestContext {
        let mut c = RequestContext::new(Transport::Http, Operation::Publish);
        c.identity.tenant = Some(tenant.into());
        c
    }

    #[test]
    fn verdicts() {
        let f = filter();
        let now = 1_800_000_000u64;
        let ts = now.to_string();
        let body = br#"{"id":"1"}"#;
        let good = sign(b"hush", &ts, body);
        let frame = |ts: &'static str, sig: &'static str| Frame {
            body,
            timestamp: Some(ts),
            signature: Some(sig),
            events: 1,
        };
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let (ts_s, good_s) = (leak(ts.clone()), leak(good));
        assert_eq!(f.verify_at(&ctx("acme"), &frame(ts_s, good_s), now), Ok(()));
        // Another tenant has no secret: nothing to check.
        assert_eq!(f.verify_at(&ctx("globex"), &Frame::default(), now), Ok(()));
        let reason = |fr: Frame, at: u64| f.verify_at(&ctx("acme"), &fr, at).unwrap_err().reason;
        assert_eq!(reason(Frame::default(), now), "missing_signature");
        assert_eq!(reason(frame(ts_s, good_s), now + 301), "stale_timestamp");
        assert_eq!(reason(frame(ts_s, good_s), now - 301), "stale_timestamp");
        assert_eq!(reason(frame("soon", good_s), now), "bad_timestamp");
        assert_eq!(reason(frame(ts_s, "md5=00"), now), "bad_signature");
        let other = leak(sign(b"hush", &ts, b"tampered"));
        assert_eq!(reason(frame(ts_s, other), now), "bad_signature");
        let wrong_key = leak(sign(b"guess", &ts, body));
        assert_eq!(reason(frame(ts_s, wrong_key), now), "bad_signature");
    }
}
