//! `http-source`: an inbound webhook endpoint per connector,
//! `POST /connectors/<name>/events` on the traffic port. The runtime serves
//! the route (it answers the sender once the event is durable); this file
//! has the config, the signature check and the mapping of a request to a
//! CloudEvent.
//!
//! Mapping: a body sent as `application/cloudevents+json` is taken as the
//! event it is; a request carrying `ce-*` headers is read in the
//! CloudEvents HTTP binary mode; any other body becomes the `data` of an
//! event of the configured `type`, its `id` the sender's delivery id (a
//! signed `webhook-id`, GitHub's `X-GitHub-Delivery`) or
//! `idempotency_header` value when present (so a sender's retry is
//! deduplicated), else one derived from the signature (so the same signed
//! bytes make the same event), else a new one.
//!
//! Signatures (`signature.scheme`): HMAC-SHA256 in the form of a provider,
//! see [`Scheme`]. The timestamped schemes sign the time with the body and
//! refuse a request whose time is more than `tolerance_s` from the server
//! clock; the route refuses an exact replay inside that window. The
//! body-only schemes (`body`, `github`) cannot tell a replay from the
//! original: only the event id deduplicates it, within the publish
//! deduplication window.
//!
//! Invariants: a request is accepted only when one of its signatures
//! matches, compared in constant time; a definition stored before schemes
//! existed (no `scheme`) keeps its body-only meaning.

use async_trait::async_trait;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use eventmesh_core::time::parse_unix_seconds;

use crate::sdk::{ConnectorError, Source, SourceContext, SourceKind};

/// How a sender signs its requests.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// `x-em-timestamp: <Unix seconds>[.<fraction>]` and
    /// `x-em-signature: sha256=<hex of HMAC(secret, "<timestamp>.<body>")>`
    /// (the signature header may be renamed with `header`). The default for
    /// new definitions.
    Eventmesh,
    /// Body only: `<prefix><hex or base64 of HMAC(secret, body)>` in
    /// `header`. A captured request can be replayed; choose it only for
    /// senders that cannot sign a time.
    Body,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex of HMAC(secret, body)>`,
    /// body only; `X-GitHub-Delivery` becomes the event id.
    Github,
    /// Stripe: `Stripe-Signature: t=<seconds>,v1=<hex of HMAC(secret,
    /// "<t>.<body>")>` (any `v1` may match).
    Stripe,
    /// Slack: `X-Slack-Request-Timestamp: <seconds>` and
    /// `X-Slack-Signature: v0=<hex of HMAC(secret, "v0:<t>:<body>")>`.
    Slack,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature: v1,<base64 of HMAC(key, "<id>.<t>.<body>")>`
    /// (space-separated, any may match), the key the base64 after
    /// `whsec_` in the secret; `webhook-id` becomes the event id.
    StandardWebhooks,
}

impl Scheme {
    /// Whether the scheme signs a time (and so can refuse replays).
    pub fn timestamped(self) -> bool {
        !matches!(self, Scheme::Body | Scheme::Github)
    }
}

/// A connector's signature settings.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The scheme. When a create or update leaves it out it is
    /// `eventmesh`; a definition stored before schemes existed is `body`.
    #[serde(default)]
    pub scheme: Option<Scheme>,
    /// The shared secret (never shown back by the admin API); for
    /// `standard-webhooks`, `whsec_<base64 key>`.
    pub secret: String,
    /// `body`: the header carrying the signature (default `x-signature`);
    /// `eventmesh`: default `x-em-signature`.
    #[serde(default)]
    pub header: Option<String>,
    /// `body` only: `hex` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// `body` only: text before the encoded digest, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Timestamped schemes: the largest accepted distance between the
    /// signed time and the server clock, in seconds (1-86400, default 300).
    #[serde(default)]
    pub tolerance_s: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

/// The default tolerance of timestamped schemes, in seconds.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

impl Signature {
    /// The scheme in force (`body` for a definition stored without one).
    pub fn scheme(&self) -> Scheme {
        self.scheme.unwrap_or(Scheme::Body)
    }

    /// The tolerance of a timestamped scheme, in seconds.
    pub fn tolerance(&self) -> u64 {
        self.tolerance_s.unwrap_or(DEFAULT_TOLERANCE_S)
    }

    /// The header the signature is read from.
    fn signature_header(&self) -> &str {
        match self.scheme() {
            Scheme::Body => self.header.as_deref().unwrap_or("x-signature"),
            Scheme::Eventmesh => self.header.as_deref().unwrap_or("x-em-signature"),
            Scheme::Github => "x-hub-signature-256",
            Scheme::Stripe => "stripe-signature",
            Scheme::Slack => "x-slack-signature",
            Scheme::StandardWebhooks => "webhook-signature",
        }
    }

    /// The HMAC key.
    fn key(&self) -> Result<Vec<u8>, String> {
        if self.scheme() != Scheme::StandardWebhooks {
            return Ok(self.secret.as_bytes().to_vec());
        }
        let b64 = self.secret.strip_prefix("whsec_").unwrap_or(&self.secret);
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "signature.secret must be whsec_ followed by base64".to_string())
    }
}

fn default_type() -> String {
    "http.request".to_string()
}

fn default_idempotency() -> String {
    "idempotency-key".to_string()
}

/// The `config` of an `http-source`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpSourceConfig {
    /// Verify each request's HMAC-SHA256 signature; unsigned or wrongly
    /// signed requests are answered 401.
    #[serde(default)]
    pub signature: Option<Signature>,
    /// The `type` of events made from plain bodies.
    #[serde(default = "default_type", rename = "type")]
    pub ty: String,
    /// The header whose value becomes the event `id` of a plain body.
    #[serde(default = "default_idempotency")]
    pub idempotency_header: String,
}

/// Why a request's signature is refused: `code` is the error code
/// (`invalid_signature`, `bad_timestamp` or `stale_timestamp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

fn refused(message: impl Into<String>) -> Refused {
    Refused {
        code: "invalid_signature",
        message: message.into(),
    }
}

/// What a verified signature vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The MAC that matched.
    pub mac: [u8; 32],
    /// The signed time (whole Unix seconds), for timestamped schemes.
    pub at: Option<u64>,
    /// The sender's delivery id, when the scheme has one.
    pub delivery_id: Option<String>,
}

impl Verified {
    /// An event id derived from the signature: the same signed bytes give
    /// the same id, so the log's deduplication stores them once.
    pub fn event_id(&self) -> String {
        let digest = Sha256::digest(self.mac);
        format!("sig-{}", hex::encode(&digest[..16]))
    }
}

/// What a request's headers give: the signed time (as sent, and in whole
/// seconds), the MACs it carries, the MAC of what they should cover, and
/// the sender's delivery id.
struct Signed<'h> {
    at: Option<(&'h str, u64)>,
    given: Vec<Vec<u8>>,
    mac: Hmac<Sha256>,
    delivery_id: Option<String>,
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac
}

fn decode(encoding: Encoding, text: &str) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Hex => hex::decode(text).ok(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD.decode(text).ok(),
    }
}

impl HttpSourceConfig {
    /// Checks a request's signature: `header` gives a request header by
    /// its lower-case name, `now` is the server clock in Unix seconds.
    /// `Ok(None)` when the connector asks for no signature.
    pub fn verify<'h>(
        &self,
        header: impl Fn(&str) -> Option<&'h str>,
        body: &[u8],
        now: u64,
    ) -> Result<Option<Verified>, Refused> {
        let Some(sig) = &self.signature else {
            return Ok(None);
        };
        let scheme = sig.scheme();
        if sig.secret.is_empty() || sig.secret == eventmesh_core::redact::PLACEHOLDER {
            return Err(refused(
                "the connector's signature.secret is not set (give it again with PUT)",
            ));
        }
        let key = sig.key().map_err(refused)?;
        let sig_header = sig.signature_header();
        let value = header(sig_header)
            .map(str::trim)
            .ok_or_else(|| refused(format!("no {sig_header} header")))?;
        let timestamp = |name: &str| -> Result<(&'h str, u64), Refused> {
            let t = header(name)
                .map(str::trim)
                .ok_or_else(|| refused(format!("no {name} header")))?;
            let at = parse_unix_seconds(t).ok_or_else(|| Refused {
                code: "bad_timestamp",
                message: format!("{name} {t:?} is not Unix seconds"),
            })?;
            Ok((t, at))
        };
        // The signed time, the candidate MACs and what they cover.
        let Signed {
            at,
            given,
            mac,
            delivery_id,
        } = match scheme {
            Scheme::Body | Scheme::Github => {
                let (prefix, encoding) = match scheme {
                    Scheme::Github => ("sha256=", Encoding::Hex),
                    _ => (
                        sig.prefix.as_deref().unwrap_or(""),
                        sig.encoding.unwrap_or_default(),
                    ),
                };
                let encoded = value.strip_prefix(prefix).ok_or_else(|| {
                    refused(format!("{sig_header} does not start with {prefix:?}"))
                })?;
                let given = decode(encoding, encoded).ok_or_else(|| {
                    refused(format!(
                        "{sig_header}: not {}",
                        if encoding == Encoding::Hex {
                            "hex"
                        } else {
                            "base64"
                        }
                    ))
                })?;
                let delivery = match scheme {
                    Scheme::Github => header("x-github-delivery")
                        .map(str::trim)
                        .filter(|d| !d.is_empty())
                        .map(str::to_string),
                    _ => None,
                };
                Signed {
                    at: None,
                    given: vec![given],
                    mac: hmac(&key, &[body]),
                    delivery_id: delivery,
                }
            }
            Scheme::Eventmesh => {
                let (t, at) = timestamp("x-em-timestamp")?;
                let given = value
                    .strip_prefix("sha256=")
                    .and_then(|h| hex::decode(h).ok())
                    .ok_or_else(|| refused(format!("{sig_header} is not sha256=<hex>")))?;
                let mac = hmac(&key, &[t.as_bytes(), b".", body]);
                Signed {
                    at: Some((t, at)),
                    given: vec![given],
                    mac,
                    delivery_id: None,
                }
            }
            Scheme::Slack => {
                let (t, at) = timestamp("x-slack-request-timestamp")?;
                let given = value
                    .strip_prefix("v0=")
                    .and_then(|h| hex::decode(h).ok())
                    .ok_or_else(|| refused(format!("{sig_header} is not v0=<hex>")))?;
                let mac = hmac(&key, &[b"v0:", t.as_bytes(), b":", body]);
                Signed {
                    at: Some((t, at)),
                    given: vec![given],
                    mac,
                    delivery_id: None,
                }
            }
            Scheme::Stripe => {
                let mut t = None;
                let mut given = Vec::new();
                for part in value.split(',') {
                    match part.trim().split_once('=') {
                        Some(("t", v)) => t = Some(v),
                        Some(("v1", v)) => given.extend(hex::decode(v).ok()),
                        _ => {}
                    }
                }
                let t = t.ok_or_else(|| refused(format!("{sig_header} has no t=")))?;
                let at = parse_unix_seconds(t).ok_or_else(|| Refused {
                    code: "bad_timestamp",
                    message: format!("{sig_header} t={t:?} is not Unix seconds"),
                })?;
                if given.is_empty() {
                    return Err(refused(format!("{sig_header} has no v1=<hex>")));
                }
                let mac = hmac(&key, &[t.as_bytes(), b".", body]);
                Signed {
                    at: Some((t, at)),
                    given,
                    mac,
                    delivery_id: None,
                }
            }
            Scheme::StandardWebhooks => {
                let id = header("webhook-id")
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .ok_or_else(|| refused("no webhook-id header"))?;
                let (t, at) = timestamp("webhook-timestamp")?;
                let given: Vec<Vec<u8>> = value
                    .split_whitespace()
                    .filter_map(|s| s.strip_prefix("v1,"))
                    .filter_map(|b| decode(Encoding::Base64, b))
                    .collect();
                if given.is_empty() {
                    return Err(refused(format!("{sig_header} has no v1,<base64>")));
                }
                let mac = hmac(&key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
                Signed {
                    at: Some((t, at)),
                    given,
                    mac,
                    delivery_id: Some(id.to_string()),
                }
            }
        };
        let matched = given.iter().any(|g| mac.clone().verify_slice(g).is_ok());
        if !matched {
            return Err(refused(format!("{sig_header} does not match the request")));
        }
        if let Some((t, at)) = at {
            if at.abs_diff(now) > sig.tolerance() {
                return Err(Refused {
                    code: "stale_timestamp",
                    message: format!(
                        "the signed time {t} is more than {} s from the server clock",
                        sig.tolerance()
                    ),
                });
            }
        }
        Ok(Some(Verified {
            mac: mac.finalize().into_bytes().into(),
            at: at.map(|(_, at)| at),
            delivery_id,
        }))
    }
}

/// Gives a signature with no `scheme` the default of new definitions,
/// `eventmesh`; run on what a create or update is given.
pub fn complete_new(config: &mut Value) {
    set_missing_scheme(config, Scheme::Eventmesh);
}

/// Names the scheme of a stored signature that has none (`body`, its
/// meaning before schemes existed), so that the definition shown and given
/// back keeps it.
pub fn show_stored(config: &mut Value) {
    set_missing_scheme(config, Scheme::Body);
}

fn set_missing_scheme(config: &mut Value, scheme: Scheme) {
    if let Some(sig) = config.get_mut("signature").and_then(Value::as_object_mut) {
        if !sig.contains_key("scheme") {
            sig.insert(
                "scheme".into(),
                serde_json::to_value(scheme).expect("a scheme is a string"),
            );
        }
    }
}

/// The kind's name.
pub const KIND: &str = "http-source";

/// The kind; its events come from the traffic port's route.
pub struct HttpSource;

struct Idle;

#[async_trait]
impl Source for Idle {
    async fn poll(&mut self) -> Result<Vec<crate::Record>, ConnectorError> {
        std::future::pending().await
    }
}

#[async_trait]
impl SourceKind for HttpSource {
    type Config = HttpSourceConfig;
    const NAME: &'static str = KIND;
    const DESCRIPTION: &'static str =
        "An inbound webhook: POST /connectors/<name>/events on the traffic port, optionally HMAC-signed";

    fn check(config: &Self::Config) -> Result<(), String> {
        if let Some(sig) = &config.signature {
            let scheme = sig.scheme();
            if sig.secret.is_empty() {
                return Err("signature.secret must not be empty".into());
            }
            if sig.secret == eventmesh_core::redact::PLACEHOLDER {
                return Err("signature.secret must not be the redaction placeholder".into());
            }
            sig.key()?;
            if let Some(header) = &sig.header {
                if !matches!(scheme, Scheme::Body | Scheme::Eventmesh) {
                    return Err(
                        "signature.header applies to the body and eventmesh schemes only".into(),
                    );
                }
                if http_header_name(header).is_err() {
                    return Err(format!("signature.header {header:?} is not a header name"));
                }
            }
            if scheme != Scheme::Body {
                for (field, given) in [
                    ("encoding", sig.encoding.is_some()),
                    ("prefix", sig.prefix.is_some()),
                ] {
                    if given {
                        return Err(format!(
                            "signature.{field} applies to the body scheme only (give \"scheme\": \"body\" for a body-only signature)"
                        ));
                    }
                }
            }
            match sig.tolerance_s {
                Some(_) if !scheme.timestamped() => {
                    return Err("signature.tolerance_s applies to timestamped schemes only".into())
                }
                Some(t) if !(1..=86_400).contains(&t) => {
                    return Err(format!("signature.tolerance_s {t} must be from 1 to 86400"))
                }
                _ => {}
            }
        }
        http_header_name(&config.idempotency_header).map_err(|_| {
            format!(
                "idempotency_header {:?} is not a header name",
                config.idempotency_header
            )
        })
    }

    async fn open(
        _config: Self::Config,
        _ctx: SourceContext,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        Ok(Box::new(Idle))
    }
}

fn http_header_name(name: &str) -> Result<(), ()> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BODY: &[u8] = br#"{"a":1}"#;
    const T: u64 = 1_800_000_000;

    fn config(signature: Value) -> HttpSourceConfig {
        let c: HttpSourceConfig =
            serde_json::from_value(json!({ "signature": signature })).unwrap();
        HttpSource::check(&c).unwrap();
        c
    }

    fn verify(
        c: &HttpSourceConfig,
        headers: &[(&str, &str)],
        body: &[u8],
        now: u64,
    ) -> Result<Option<Verified>, Refused> {
        c.verify(
            |name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v),
            body,
            now,
        )
    }

    fn code(r: Result<Option<Verified>, Refused>) -> &'static str {
        r.unwrap_err().code
    }

    #[test]
    fn the_body_scheme_checks_the_body_in_its_encoding_and_prefix() {
        let hex_mac = "5910e62016ef5034272c926c27071992a465c2335cecf41851bda071577f4f6d";
        let c = config(
            json!({"scheme": "body", "secret": "s3cret", "header": "x-sig", "prefix": "sha256="}),
        );
        let sig = format!("sha256={hex_mac}");
        let v = verify(&c, &[("x-sig", &sig)], BODY, 0).unwrap().unwrap();
        assert_eq!((v.at, v.delivery_id), (None, None));
        assert_eq!(hex::encode(v.mac), hex_mac);
        assert_eq!(
            verify(&c, &[("x-sig", &sig)], b"{}", 0)
                .unwrap_err()
                .message,
            "x-sig does not match the request"
        );
        assert_eq!(
            verify(&c, &[], BODY, 0).unwrap_err().message,
            "no x-sig header"
        );
        assert_eq!(
            verify(&c, &[("x-sig", hex_mac)], BODY, 0)
                .unwrap_err()
                .message,
            "x-sig does not start with \"sha256=\""
        );
        let b64 = config(json!({"scheme": "body", "secret": "s3cret", "encoding": "base64"}));
        let sig = "WRDmIBbvUDQnLJJsJwcZkqRlwjNc7PQYUb2gcVd/T20=";
        assert!(verify(&b64, &[("x-signature", sig)], BODY, 0).is_ok());
        // A definition stored before schemes is read as `body`.
        let legacy = config(json!({"secret": "s3cret", "header": "x-sig"}));
        assert_eq!(legacy.signature.as_ref().unwrap().scheme(), Scheme::Body);
        assert!(verify(&legacy, &[("x-sig", hex_mac)], BODY, 0).is_ok());
        let unsigned: HttpSourceConfig = serde_json::from_value(json!({})).unwrap();
        assert_eq!(verify(&unsigned, &[], BODY, 0), Ok(None));
    }

    #[test]
    fn the_github_scheme_takes_the_delivery_id() {
        let c = config(json!({"scheme": "github", "secret": "s3cret"}));
        let sig = "sha256=5910e62016ef5034272c926c27071992a465c2335cecf41851bda071577f4f6d";
        let v = verify(
            &c,
            &[("x-hub-signature-256", sig), ("x-github-delivery", "d-1")],
            BODY,
            T,
        )
        .unwrap()
        .unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some("d-1"));
        assert_eq!(v.at, None);
        assert_eq!(
            code(verify(&c, &[("x-hub-signature-256", sig)], b"{}", T)),
            "invalid_signature"
        );
    }

    #[test]
    fn the_eventmesh_scheme_signs_the_time_with_the_body() {
        let c = config(json!({"scheme": "eventmesh", "secret": "s3cret"}));
        let sig = "sha256=476d445fc5d734bcaf69961f0de38cb8c2ec42450829655895ca5e064c0765c9";
        let h = [("x-em-timestamp", "1800000000"), ("x-em-signature", sig)];
        let v = verify(&c, &h, BODY, T + 300).unwrap().unwrap();
        assert_eq!(v.at, Some(T));
        assert_eq!(
            v.event_id(),
            verify(&c, &h, BODY, T).unwrap().unwrap().event_id()
        );
        assert!(v.event_id().starts_with("sig-") && v.event_id().len() == 36);
        assert_eq!(code(verify(&c, &h, BODY, T + 301)), "stale_timestamp");
        assert_eq!(code(verify(&c, &h, BODY, T - 301)), "stale_timestamp");
        // Another time with the same signature does not match.
        let moved = [("x-em-timestamp", "1800000001"), ("x-em-signature", sig)];
        assert_eq!(code(verify(&c, &moved, BODY, T)), "invalid_signature");
        let bad = [("x-em-timestamp", "soon"), ("x-em-signature", sig)];
        assert_eq!(code(verify(&c, &bad, BODY, T)), "bad_timestamp");
        assert_eq!(
            verify(&c, &[("x-em-signature", sig)], BODY, T)
                .unwrap_err()
                .message,
            "no x-em-timestamp header"
        );
        let short = config(json!({"scheme": "eventmesh", "secret": "s3cret", "tolerance_s": 10}));
        assert_eq!(code(verify(&short, &h, BODY, T + 11)), "stale_timestamp");
    }

    #[test]
    fn the_stripe_scheme_accepts_any_v1() {
        let c = config(json!({"scheme": "stripe", "secret": "whsec_stripe"}));
        let good = "372ac9396229742d379f97c10785d3d4f2110e6acd833c154196ef6d5972bd4f";
        let header = format!("t=1800000000,v1={},v1={good},v0=00", "ab".repeat(32));
        let v = verify(&c, &[("stripe-signature", &header)], BODY, T)
            .unwrap()
            .unwrap();
        assert_eq!(v.at, Some(T));
        assert_eq!(
            code(verify(&c, &[("stripe-signature", &header)], BODY, T + 301)),
            "stale_timestamp"
        );
        let only_v0 = format!("t=1800000000,v0={good}");
        assert_eq!(
            code(verify(&c, &[("stripe-signature", &only_v0)], BODY, T)),
            "invalid_signature"
        );
    }

    #[test]
    fn the_slack_scheme_signs_v0_time_and_body() {
        let c = config(json!({"scheme": "slack", "secret": "s3cret"}));
        let sig = "v0=6c46038d84a0278b53b3bb9f35dfdf9b4369cdda784a3a35512940c6acab92f7";
        let h = [
            ("x-slack-request-timestamp", "1800000000"),
            ("x-slack-signature", sig),
        ];
        assert_eq!(verify(&c, &h, BODY, T).unwrap().unwrap().at, Some(T));
        assert_eq!(code(verify(&c, &h, b"{}", T)), "invalid_signature");
    }

    #[test]
    fn the_standard_webhooks_scheme_signs_the_id_and_keys_by_whsec() {
        let c = config(
            json!({"scheme": "standard-webhooks", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
        );
        let sig = "v1,bm9wZQ== v1,y7IJzXPoclgDxY2VlDXfOGP1rSq221Un2E5IxRPFzbc=";
        let h = [
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", "1800000000"),
            ("webhook-signature", sig),
        ];
        let v = verify(&c, &h, BODY, T).unwrap().unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some("msg_1"));
        let other_id = [
            ("webhook-id", "msg_2"),
            ("webhook-timestamp", "1800000000"),
            ("webhook-signature", sig),
        ];
        assert_eq!(code(verify(&c, &other_id, BODY, T)), "invalid_signature");
    }

    #[test]
    fn settings_are_checked_against_the_scheme() {
        let err = |v: Value| {
            let c: HttpSourceConfig = serde_json::from_value(json!({ "signature": v })).unwrap();
            HttpSource::check(&c).unwrap_err()
        };
        assert_eq!(
            err(json!({"scheme": "eventmesh", "secret": "s", "prefix": "sha256="})),
            "signature.prefix applies to the body scheme only (give \"scheme\": \"body\" for a body-only signature)"
        );
        assert_eq!(
            err(json!({"scheme": "github", "secret": "s", "header": "x"})),
            "signature.header applies to the body and eventmesh schemes only"
        );
        assert_eq!(
            err(json!({"scheme": "body", "secret": "s", "tolerance_s": 5})),
            "signature.tolerance_s applies to timestamped schemes only"
        );
        assert_eq!(
            err(json!({"scheme": "slack", "secret": "s", "tolerance_s": 0})),
            "signature.tolerance_s 0 must be from 1 to 86400"
        );
        assert_eq!(
            err(json!({"scheme": "standard-webhooks", "secret": "whsec_!!"})),
            "signature.secret must be whsec_ followed by base64"
        );
        assert_eq!(
            err(json!({"secret": "***"})),
            "signature.secret must not be the redaction placeholder"
        );
    }

    #[test]
    fn new_definitions_default_to_eventmesh_and_stored_ones_show_body() {
        let mut new = json!({"signature": {"secret": "s"}});
        complete_new(&mut new);
        assert_eq!(new["signature"]["scheme"], "eventmesh");
        let mut stored = json!({"signature": {"secret": "s"}});
        show_stored(&mut stored);
        assert_eq!(stored["signature"]["scheme"], "body");
        let mut chosen = json!({"signature": {"secret": "s", "scheme": "slack"}});
        complete_new(&mut chosen);
        assert_eq!(chosen["signature"]["scheme"], "slack");
    }
}
