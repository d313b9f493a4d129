//! `http-source`: an inbound webhook endpoint per connector,
//! `POST /connectors/<name>/events` on the traffic port. The runtime serves
//! the route (it answers the sender once the event is durable); this file
//! has the config, the signature check and the mapping of a request to a
//! CloudEvent.
//!
//! Mapping: a body sent as `application/cloudevents+json` is taken as the
//! event it is; a request carrying `ce-*` headers is read in the
//! CloudEvents HTTP binary mode; any other body becomes the `data` of an
//! event of the configured `type`, its `id` the sender's `idempotency_header`
//! value when present (so a sender's retry is deduplicated), else a new
//! one.

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use schemars::JsonSchema;
use serde::Deserialize;
use sha2::Sha256;

use crate::sdk::{ConnectorError, Source, SourceContext, SourceKind};

/// How the sender signs: `<prefix><encoding of HMAC-SHA256(secret, body)>`
/// in `header`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// The shared secret (never shown back by the admin API).
    pub secret: String,
    /// The request header carrying the signature.
    #[serde(default = "default_header")]
    pub header: String,
    /// `hex` or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
    /// Text before the encoded digest, e.g. `sha256=` (GitHub's scheme).
    #[serde(default)]
    pub prefix: String,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

fn default_header() -> String {
    "x-signature".to_string()
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

impl HttpSourceConfig {
    /// Checks a request's signature over `body`; `Err` says why it fails.
    pub fn verify(&self, header: Option<&str>, body: &[u8]) -> Result<(), String> {
        let Some(sig) = &self.signature else {
            return Ok(());
        };
        let Some(value) = header else {
            return Err(format!("no {} header", sig.header));
        };
        let Some(encoded) = value.trim().strip_prefix(sig.prefix.as_str()) else {
            return Err(format!(
                "{} does not start with {:?}",
                sig.header, sig.prefix
            ));
        };
        let given = match sig.encoding {
            Encoding::Hex => hex::decode(encoded).map_err(|_| "not hex".to_string()),
            Encoding::Base64 => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| "not base64".to_string())
            }
        }
        .map_err(|e| format!("{}: {e}", sig.header))?;
        let mut mac =
            Hmac::<Sha256>::new_from_slice(sig.secret.as_bytes()).map_err(|e| e.to_string())?;
        mac.update(body);
        mac.verify_slice(&given)
            .map_err(|_| format!("{} does not match the body", sig.header))
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
            if sig.secret.is_empty() {
                return Err("signature.secret must not be empty".into());
            }
            if http_header_name(&sig.header).is_err() {
                return Err(format!(
                    "signature.header {:?} is not a header name",
                    sig.header
                ));
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

    fn signed(encoding: Encoding, prefix: &str) -> HttpSourceConfig {
        HttpSourceConfig {
            signature: Some(Signature {
                secret: "s3cret".into(),
                header: "x-hub-signature-256".into(),
                encoding,
                prefix: prefix.into(),
            }),
            ty: default_type(),
            idempotency_header: default_idempotency(),
        }
    }

    fn mac(body: &[u8]) -> Vec<u8> {
        let mut m = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        m.update(body);
        m.finalize().into_bytes().to_vec()
    }

    #[test]
    fn a_signature_is_checked_in_its_encoding_and_scheme() {
        let body = br#"{"a":1}"#;
        let hex_sig = format!("sha256={}", hex::encode(mac(body)));
        let c = signed(Encoding::Hex, "sha256=");
        assert_eq!(c.verify(Some(&hex_sig), body), Ok(()));
        assert_eq!(
            c.verify(Some(&hex_sig), b"{}"),
            Err("x-hub-signature-256 does not match the body".into())
        );
        assert_eq!(
            c.verify(None, body),
            Err("no x-hub-signature-256 header".into())
        );
        assert_eq!(
            c.verify(Some(&hex::encode(mac(body))), body),
            Err("x-hub-signature-256 does not start with \"sha256=\"".into())
        );
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(mac(body));
        let c = signed(Encoding::Base64, "");
        assert_eq!(c.verify(Some(&b64), body), Ok(()));
        let unsigned = HttpSourceConfig {
            signature: None,
            ..c
        };
        assert_eq!(unsigned.verify(None, body), Ok(()));
    }
}
