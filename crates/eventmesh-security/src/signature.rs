//! Request signatures. For a tenant with a secret, a request must carry
//! `x-em-timestamp` (Unix seconds, optionally with a fraction of up to nine
//! digits) and `x-em-signature: sha256=<hex>`, the HMAC-SHA256 under that
//! secret of the request's canonical form ([`canonical`]): a version line,
//! the timestamp, the method, the path, the query with its parameters
//! sorted, the `ce-*` headers sorted, and the SHA-256 of the body.
//!
//! Invariants: a request of such a tenant is admitted only when its
//! timestamp is inside the tolerance, its MAC matches (compared in constant
//! time), and that signature was not admitted before. Admitted signatures
//! are remembered (the `replay` module) until their timestamp leaves the
//! window, at most [`REPLAY_CACHE_ENTRIES`] of them; a signature is
//! remembered only once it verified, so a forger cannot fill the memory.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eventmesh_core::config::GateConfig;
use eventmesh_core::time::parse_unix_seconds;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::context::{Denial, Frame, RequestContext};
use crate::gate::{Filter, GateError};
use crate::replay::{Refusal, SeenSignatures};
use crate::{content_lines, read_file};

type HmacSha256 = Hmac<Sha256>;

/// The first line of the canonical form; a new form gets a new line.
pub const VERSION: &str = "eventmesh-signature-2";

/// Most signatures remembered against replay (about 6 MB). Past it the
/// oldest is forgotten and requests signed at or before its timestamp are
/// refused (`stale_timestamp`).
pub const REPLAY_CACHE_ENTRIES: usize = 100_000;

pub struct SignatureVerifierFilter {
    secrets: HashMap<String, Vec<u8>>,
    tolerance: Duration,
    seen: Mutex<SeenSignatures>,
}

/// The query with its `&`-separated parameters sorted by name (byte order;
/// parameters with the same name keep their order), each exactly as sent;
/// empty parameters are dropped.
fn canonical_query(query: &str) -> String {
    let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    params.sort_by_key(|p| p.split_once('=').map_or(*p, |(name, _)| name));
    params.join("&")
}

/// The string a request signature covers, lines separated by `\n`:
///
/// ```text
/// eventmesh-signature-2
/// <x-em-timestamp, as sent>
/// <method, upper case>
/// <path, as sent>
/// <query, parameters sorted by name>
/// <name>:<value>          one line per ce-* header, name lower case,
/// ...                     sorted by name, value as sent
/// <empty line>
/// <lower-case hex SHA-256 of the raw body>
/// ```
///
/// A part the transport does not have (no method, no query) is an empty
/// line; with no `ce-*` header the empty line follows the query line.
pub fn canonical(timestamp: &str, frame: &Frame) -> String {
    let mut headers: Vec<(String, &str)> = frame
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), *value))
        .filter(|(name, _)| name.starts_with("ce-"))
        .collect();
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::with_capacity(256);
    for line in [
        VERSION,
        timestamp.trim(),
        &frame.method.unwrap_or("").to_ascii_uppercase(),
        frame.path.unwrap_or(""),
        &canonical_query(frame.query.unwrap_or("")),
    ] {
        out.push_str(line);
        out.push('\n');
    }
    for (name, value) in headers {
        out.push_str(&name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&hex::encode(Sha256::digest(frame.body)));
    out
}

fn mac(secret: &[u8], timestamp: &str, frame: &Frame) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(canonical(timestamp, frame).as_bytes());
    mac
}

/// The `x-em-signature` value a client sends for `frame` signed at
/// `timestamp` (the `x-em-timestamp` value): `sha256=<hex>` of the
/// HMAC-SHA256 of [`canonical`] under `secret`.
pub fn sign(secret: &[u8], timestamp: &str, frame: &Frame) -> String {
    format!(
        "sha256={}",
        hex::encode(mac(secret, timestamp, frame).finalize().into_bytes())
    )
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
        Ok(Some(Self::new(
            secrets,
            cfg.signature_tolerance,
            REPLAY_CACHE_ENTRIES,
        )))
    }

    fn new(secrets: HashMap<String, Vec<u8>>, tolerance: Duration, remembered: usize) -> Self {
        SignatureVerifierFilter {
            secrets,
            tolerance,
            seen: Mutex::new(SeenSignatures::new(remembered)),
        }
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
        let Some(at) = parse_unix_seconds(ts.trim()) else {
            return Err(bad(
                "bad_timestamp",
                "x-em-timestamp must be Unix seconds, optionally with a fraction (1700000000.250)",
            ));
        };
        let window = self.tolerance.as_secs();
        if now.abs_diff(at) > window {
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
        // `verify_slice` compares in constant time (and checks the length).
        mac(secret, ts, frame)
            .verify_slice(&given)
            .map_err(|_| bad("bad_signature", "the request signature does not match"))?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&given);
        let admitted = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(at, key, now, window);
        match admitted {
            Ok(()) => Ok(()),
            Err(Refusal::Replayed) => Err(bad(
                "replayed_signature",
                "this signed request was already received; sign every request anew",
            )),
            Err(Refusal::BelowFloor) => Err(bad(
                "stale_timestamp",
                "x-em-timestamp is older than the signed requests this server still remembers; sign with the current time",
            )),
        }
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

    fn remembers(&self) -> bool {
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

    const NOW: u64 = 1_800_000_000;

    fn filter() -> SignatureVerifierFilter {
        SignatureVerifierFilter::new(
            [("acme".to_string(), b"hush".to_vec())].into(),
            Duration::from_secs(300),
            1000,
        )
    }

    fn ctx(tenant: &str) -> RequestContext {
        let mut c = RequestContext::new(Transport::Http, Operation::Publish);
        c.identity.tenant = Some(tenant.into());
        c
    }

    /// A binary-mode publish to `orders`, unsigned.
    fn request<'a>(body: &'a [u8], ts: &'a str) -> Frame<'a> {
        Frame {
            body,
            timestamp: Some(ts),
            method: Some("POST"),
            path: Some("/events/publish"),
            query: Some("topic=orders&partitionHint=2"),
            headers: vec![
                ("ce-type", "order.created"),
                ("ce-id", "o-1"),
                ("ce-specversion", "1.0"),
                ("ce-source", "%2Fshop"),
            ],
            events: 1,
            ..Frame::default()
        }
    }

    fn signed<'a>(frame: Frame<'a>, sig: &'a str) -> Frame<'a> {
        Frame {
            signature: Some(sig),
            ..frame
        }
    }

    #[test]
    fn the_canonical_form_is_exactly_as_documented() {
        let ts = "1800000000.250";
        let mut f = request(b"hello", ts);
        f.method = Some("post");
        f.query = Some("topic=b&&a=1&topic=a");
        f.headers.push(("CE-Time", "2026-01-01T00:00:00Z"));
        f.headers.push(("content-type", "text/plain"));
        assert_eq!(
            canonical(ts, &f),
            "eventmesh-signature-2\n\
             1800000000.250\n\
             POST\n\
             /events/publish\n\
             a=1&topic=b&topic=a\n\
             ce-id:o-1\n\
             ce-source:%2Fshop\n\
             ce-specversion:1.0\n\
             ce-time:2026-01-01T00:00:00Z\n\
             ce-type:order.created\n\
             \n\
             2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        // Nothing but a body: empty lines in place of the missing parts.
        let bare = Frame {
            body: b"",
            ..Frame::default()
        };
        assert_eq!(
            canonical("7", &bare),
            "eventmesh-signature-2\n7\n\n\n\n\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn the_signature_is_the_hmac_of_the_canonical_form() {
        let f = request(b"{}", "1");
        let mut m = HmacSha256::new_from_slice(b"hush").unwrap();
        m.update(canonical("1", &f).as_bytes());
        let want = format!("sha256={}", hex::encode(m.finalize().into_bytes()));
        assert_eq!(sign(b"hush", "1", &f), want);
        // Parameter and header order do not matter; their content does.
        let mut reordered = request(b"{}", "1");
        reordered.query = Some("partitionHint=2&topic=orders");
        reordered.headers.reverse();
        assert_eq!(sign(b"hush", "1", &reordered), want);
    }

    #[test]
    fn verdicts() {
        let f = filter();
        let ts = NOW.to_string();
        let body = br#"{"id":"1"}"#;
        let good = sign(b"hush", &ts, &request(body, &ts));
        let check = |fr: Frame, at: u64| f.verify_at(&ctx("acme"), &fr, at);
        let reason = |fr: Frame, at: u64| check(fr, at).unwrap_err().reason;
        assert_eq!(check(signed(request(body, &ts), &good), NOW), Ok(()));
        // Another tenant has no secret: nothing to check.
        assert_eq!(f.verify_at(&ctx("globex"), &Frame::default(), NOW), Ok(()));
        assert_eq!(reason(Frame::default(), NOW), "missing_signature");
        let fresh = |ts: &'static str| {
            let s: &'static str = Box::leak(sign(b"hush", ts, &request(body, ts)).into_boxed_str());
            signed(request(body, ts), s)
        };
        assert_eq!(reason(fresh("1800000001"), NOW + 302), "stale_timestamp");
        assert_eq!(reason(fresh("1800000002"), NOW - 299), "stale_timestamp");
        for bad in ["soon", "-5", "1800000000.", "1800000000.1234567890", " "] {
            assert_eq!(reason(fresh(bad), NOW), "bad_timestamp", "{bad:?}");
        }
        let mut md5 = request(body, "1800000003");
        md5.signature = Some("md5=00");
        assert_eq!(reason(md5, NOW), "bad_signature");
        let wrong_key = sign(b"guess", &ts, &request(body, &ts));
        assert_eq!(
            reason(signed(request(body, &ts), &wrong_key), NOW),
            "bad_signature"
        );
    }

    #[test]
    fn every_signed_part_is_bound_to_the_signature() {
        let f = filter();
        let body = br#"{"id":"1"}"#;
        let mut n = 0;
        // Each change made after signing: a fresh timestamp each time, so
        // only the change can be what is refused.
        let tampered: [fn(&mut Frame); 7] = [
            |fr| fr.body = b"tampered",
            |fr| fr.method = Some("PUT"),
            |fr| fr.path = Some("/events/request"),
            |fr| fr.query = Some("topic=payroll&partitionHint=2"),
            |fr| fr.query = Some("topic=orders"),
            |fr| fr.headers[0] = ("ce-type", "order.cancelled"),
            |fr| fr.headers.push(("ce-subject", "payroll")),
        ];
        for change in tampered {
            n += 1;
            let ts = (NOW + n).to_string();
            let sig = sign(b"hush", &ts, &request(body, &ts));
            let mut fr = signed(request(body, &ts), &sig);
            change(&mut fr);
            let d = f.verify_at(&ctx("acme"), &fr, NOW).unwrap_err();
            assert_eq!((d.reason, d.status()), ("bad_signature", 401));
        }
    }

    #[test]
    fn an_exact_replay_inside_the_window_is_refused() {
        let f = filter();
        let body = b"{}";
        let ts = NOW.to_string();
        let sig = sign(b"hush", &ts, &request(body, &ts));
        let check = |at: u64| f.verify_at(&ctx("acme"), &signed(request(body, &ts), &sig), at);
        assert_eq!(check(NOW), Ok(()));
        let d = check(NOW + 1).unwrap_err();
        assert_eq!((d.reason, d.status()), ("replayed_signature", 401));
        assert_eq!(check(NOW + 300).unwrap_err().reason, "replayed_signature");
        assert_eq!(check(NOW + 301).unwrap_err().reason, "stale_timestamp");
        // The same request signed again at a finer time is a new one.
        let ts2 = format!("{NOW}.5");
        let sig2 = sign(b"hush", &ts2, &request(body, &ts2));
        let fr2 = signed(request(body, &ts2), &sig2);
        assert_eq!(f.verify_at(&ctx("acme"), &fr2, NOW), Ok(()));
        // A forged signature is not remembered: it cannot block the real one.
        let ts3 = format!("{NOW}.6");
        let real = sign(b"hush", &ts3, &request(body, &ts3));
        let forged = sign(b"guess", &ts3, &request(body, &ts3));
        let fr3 = |s| signed(request(body, &ts3), s);
        assert_eq!(
            f.verify_at(&ctx("acme"), &fr3(&forged), NOW)
                .unwrap_err()
                .reason,
            "bad_signature"
        );
        assert_eq!(f.verify_at(&ctx("acme"), &fr3(&real), NOW), Ok(()));
    }

    #[test]
    fn a_full_memory_narrows_the_window_instead_of_forgetting_a_replay() {
        let f = SignatureVerifierFilter::new(
            [("acme".to_string(), b"hush".to_vec())].into(),
            Duration::from_secs(300),
            2,
        );
        let body = b"{}";
        let stamps = [
            format!("{}", NOW - 10),
            format!("{}", NOW - 5),
            NOW.to_string(),
        ];
        let sigs: Vec<String> = stamps
            .iter()
            .map(|ts| sign(b"hush", ts, &request(body, ts)))
            .collect();
        let check = |i: usize| {
            f.verify_at(
                &ctx("acme"),
                &signed(request(body, &stamps[i]), &sigs[i]),
                NOW,
            )
        };
        assert_eq!(check(0), Ok(()));
        assert_eq!(check(1), Ok(()));
        assert_eq!(check(2), Ok(()));
        // The oldest was forgotten: its replay is refused all the same.
        assert_eq!(check(0).unwrap_err().reason, "stale_timestamp");
        assert_eq!(check(1).unwrap_err().reason, "replayed_signature");
    }
}
