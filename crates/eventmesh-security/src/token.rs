//! Bearer-token authentication: static tokens from a file, and JWTs.
//!
//! Static tokens are kept as SHA-256 digests (a token may be written in the
//! file as `sha256:<hex>` so that the file holds no usable secret) and the
//! presented token's digest is compared with every entry in constant time.
//! JWTs (`header.payload.signature`) are verified with an HS256 secret or a
//! PEM public key (RS256 or ES256), checking `exp`, `nbf`, and `iss`/`aud`
//! when configured; tenant and principal come from configurable claims.
//!
//! Invariants: a JWT is accepted only with a valid signature, a numeric
//! `exp` in the future, a numeric `nbf` (when present) in the past, and the
//! principal claim a non-empty string; with a tenant claim configured (the
//! default `tenant`), that claim must be a non-empty string too, so a JWT
//! never falls back to the anonymous tenant. An empty tenant claim name
//! accepts tokens without a tenant.

use std::path::Path;

use eventmesh_core::config::GateConfig;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::context::{Denial, Frame, Identity, RequestContext};
use crate::gate::{Filter, GateError};
use crate::{content_lines, read_file};

struct StaticToken {
    digest: [u8; 32],
    identity: Identity,
}

struct Jwt {
    hs256: Option<DecodingKey>,
    /// The public key and the one algorithm it verifies.
    public: Option<(DecodingKey, Algorithm)>,
    issuer: Option<String>,
    audience: Option<String>,
    tenant_claim: String,
    principal_claim: String,
}

pub struct TokenAuthFilter {
    tokens: Vec<StaticToken>,
    jwt: Option<Jwt>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Parses a token file: `token tenant principal [roles]` a line, roles
/// separated by commas.
fn parse_tokens(text: &str, path: &Path) -> Result<Vec<StaticToken>, GateError> {
    let mut out = Vec::new();
    for (line, l) in content_lines(text) {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let bad = |why: &str| GateError::Malformed {
            path: path.to_path_buf(),
            line,
            message: why.to_string(),
        };
        if !(3..=4).contains(&fields.len()) {
            return Err(bad("expected: token tenant principal [role,role,...]"));
        }
        let digest = match fields[0].strip_prefix("sha256:") {
            Some(hexed) => {
                let bytes = hex::decode(hexed).map_err(|_| bad("sha256: needs 64 hex digits"))?;
                <[u8; 32]>::try_from(bytes.as_slice())
                    .map_err(|_| bad("sha256: needs 64 hex digits"))?
            }
            None => digest(fields[0]),
        };
        out.push(StaticToken {
            digest,
            identity: Identity {
                tenant: Some(fields[1].to_string()),
                principal: Some(fields[2].to_string()),
                roles: fields
                    .get(3)
                    .map(|r| {
                        r.split(',')
                            .filter(|r| !r.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        });
    }
    Ok(out)
}

fn public_key(path: &Path) -> Result<(DecodingKey, Algorithm), GateError> {
    let pem = read_file("JWT public key", path)?;
    if let Ok(k) = DecodingKey::from_rsa_pem(pem.as_bytes()) {
        return Ok((k, Algorithm::RS256));
    }
    if let Ok(k) = DecodingKey::from_ec_pem(pem.as_bytes()) {
        return Ok((k, Algorithm::ES256));
    }
    Err(GateError::File {
        what: "JWT public key".into(),
        path: path.to_path_buf(),
        cause: "not a PEM RSA or EC (P-256) public key".into(),
    })
}

impl TokenAuthFilter {
    /// Builds the filter when a token file or a JWT key is configured.
    pub fn from_config(cfg: &GateConfig) -> Result<Option<Self>, GateError> {
        let tokens = match &cfg.token_file {
            Some(p) => parse_tokens(&read_file("token file", p)?, p)?,
            None => Vec::new(),
        };
        let public = cfg
            .jwt_public_key_file
            .as_deref()
            .map(public_key)
            .transpose()?;
        let hs256 = cfg
            .jwt_hs256_secret
            .as_ref()
            .map(|s| DecodingKey::from_secret(s.as_bytes()));
        let jwt = (hs256.is_some() || public.is_some()).then(|| Jwt {
            hs256,
            public,
            issuer: cfg.jwt_issuer.clone(),
            audience: cfg.jwt_audience.clone(),
            tenant_claim: cfg.jwt_tenant_claim.clone(),
            principal_claim: cfg.jwt_principal_claim.clone(),
        });
        if cfg.token_file.is_none() && jwt.is_none() {
            return Ok(None);
        }
        Ok(Some(TokenAuthFilter { tokens, jwt }))
    }

    fn static_token(&self, token: &str) -> Option<&Identity> {
        let d = digest(token);
        // Every entry is compared, so the time taken says nothing about
        // which one (if any) matched.
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.digest.ct_eq(&d)) {
                found = Some(&t.identity);
            }
        }
        found
    }
}

impl Jwt {
    fn verify(&self, token: &str) -> Result<Identity, Denial> {
        let invalid = |m: String| Denial::authentication("invalid_token", m);
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| invalid(format!("bad JWT: {e}")))?;
        let key = match (header.alg, &self.hs256, &self.public) {
            (Algorithm::HS256, Some(k), _) => k,
            (alg, _, Some((k, a))) if alg == *a => k,
            (alg, _, _) => return Err(invalid(format!("JWT algorithm {alg:?} is not accepted"))),
        };
        let mut v = Validation::new(header.alg);
        v.validate_nbf = true;
        v.leeway = 5;
        match &self.issuer {
            Some(iss) => v.set_issuer(&[iss]),
            None => v.iss = None,
        }
        match &self.audience {
            Some(aud) => v.set_audience(&[aud]),
            None => v.validate_aud = false,
        }
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, key, &v).map_err(
            |e| match e.kind() {
                ErrorKind::ExpiredSignature => {
                    Denial::authentication("token_expired", "the JWT has expired")
                }
                ErrorKind::ImmatureSignature => {
                    Denial::authentication("token_not_yet_valid", "the JWT is not valid yet (nbf)")
                }
                ErrorKind::InvalidIssuer => invalid("the JWT has the wrong issuer".into()),
                ErrorKind::InvalidAudience => invalid("the JWT has the wrong audience".into()),
                ErrorKind::InvalidClaimFormat(claim) => Denial::authentication(
                    "invalid_claim",
                    format!("the JWT's {claim:?} claim must be a number (Unix seconds)"),
                ),
                _ => invalid(format!("JWT rejected: {e}")),
            },
        )?;
        let claims = data.claims;
        let principal = required_text(&claims, &self.principal_claim, "principal")?;
        // An empty tenant claim name: tokens carry no tenant.
        let tenant = if self.tenant_claim.is_empty() {
            None
        } else {
            Some(required_text(&claims, &self.tenant_claim, "tenant")?)
        };
        let roles = match claims.get("roles") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Identity {
            tenant,
            principal: Some(principal),
            roles,
        })
    }
}

/// The JSON type of a claim's value, for messages.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "an empty string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The non-empty string value of claim `name`, which holds the `what`
/// (tenant or principal); a missing claim or another type is refused.
fn required_text(
    claims: &serde_json::Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<String, Denial> {
    match claims.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        None => Err(Denial::authentication(
            "invalid_claim",
            format!("the JWT has no {name:?} claim (the {what})"),
        )),
        Some(v) => Err(Denial::authentication(
            "invalid_claim",
            format!(
                "the JWT's {name:?} claim (the {what}) must be a non-empty string, not {}",
                json_type(v)
            ),
        )),
    }
}

fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

impl Filter for TokenAuthFilter {
    fn name(&self) -> &'static str {
        "token"
    }

    fn authenticates(&self) -> bool {
        true
    }

    fn check(&self, ctx: &mut RequestContext, _frame: &Frame) -> Result<(), Denial> {
        let Some(token) = ctx.credential.as_deref().filter(|t| !t.is_empty()) else {
            if ctx.certificate.is_some() {
                // A verified client certificate already named the caller.
                return Ok(());
            }
            return Err(Denial::authentication(
                "missing_credential",
                "an Authorization: Bearer <token> header is required",
            ));
        };
        if let Some(identity) = self.static_token(token) {
            ctx.identity = identity.clone();
            return Ok(());
        }
        match &self.jwt {
            Some(jwt) if looks_like_jwt(token) => {
                ctx.identity = jwt.verify(token)?;
                Ok(())
            }
            _ => Err(Denial::authentication(
                "invalid_token",
                "the bearer token is not valid",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Operation, Transport};
    use jsonwebtoken::{encode, EncodingKey, Header};
    use std::path::PathBuf;

    fn cfg() -> GateConfig {
        GateConfig {
            jwt_tenant_claim: "tenant".into(),
            jwt_principal_claim: "sub".into(),
            ..GateConfig::default()
        }
    }

    fn ctx(token: Option<&str>) -> RequestContext {
        let mut c = RequestContext::new(Transport::Http, Operation::Publish);
        c.credential = token.map(str::to_string);
        c
    }

    fn run(f: &TokenAuthFilter, token: Option<&str>) -> Result<Identity, Denial> {
        let mut c = ctx(token);
        f.check(&mut c, &Frame::default()).map(|()| c.identity)
    }

    fn with_tokens(text: &str) -> (tempfile::TempDir, TokenAuthFilter) {
        let dir = tempfile::tempdir().unwrap();
        let p: PathBuf = dir.path().join("tokens");
        std::fs::write(&p, text).unwrap();
        let mut c = cfg();
        c.token_file = Some(p);
        let f = TokenAuthFilter::from_config(&c).unwrap().unwrap();
        (dir, f)
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn static_tokens_plain_and_hashed() {
        let hashed = hex::encode(digest("s3cret"));
        let (_d, f) = with_tokens(&format!(
            "# comment\nplain-token acme alice publisher,reader\nsha256:{hashed} globex bob\n"
        ));
        let a = run(&f, Some("plain-token")).unwrap();
        assert_eq!(a.tenant.as_deref(), Some("acme"));
        assert_eq!(a.principal.as_deref(), Some("alice"));
        assert_eq!(a.roles, ["publisher", "reader"]);
        let b = run(&f, Some("s3cret")).unwrap();
        assert_eq!(b.principal.as_deref(), Some("bob"));
        assert_eq!(run(&f, Some("nope")).unwrap_err().reason, "invalid_token");
        let missing = run(&f, None).unwrap_err();
        assert_eq!(
            (missing.reason, missing.status()),
            ("missing_credential", 401)
        );
    }

    #[test]
    fn a_malformed_token_file_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, "ok acme alice\nlonely\n").unwrap();
        let mut c = cfg();
        c.token_file = Some(p);
        let e = TokenAuthFilter::from_config(&c).err().unwrap().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn hs256_jwt_checks_signature_expiry_issuer_and_audience() {
        let mut c = cfg();
        c.jwt_hs256_secret = Some("k3y".into());
        c.jwt_issuer = Some("https://issuer.example".into());
        c.jwt_audience = Some("eventmesh".into());
        let f = TokenAuthFilter::from_config(&c).unwrap().unwrap();
        let sign = |claims: serde_json::Value, key: &str| {
            encode(
                &Header::new(Algorithm::HS256),
                &claims,
                &EncodingKey::from_secret(key.as_bytes()),
            )
            .unwrap()
        };
        let good = serde_json::json!({"sub": "carol", "tenant": "acme", "exp": now() + 600,
            "iss": "https://issuer.example", "aud": "eventmesh", "roles": ["ops"]});
        let id = run(&f, Some(&sign(good.clone(), "k3y"))).unwrap();
        assert_eq!(id.principal.as_deref(), Some("carol"));
        assert_eq!(id.tenant.as_deref(), Some("acme"));
        assert_eq!(id.roles, ["ops"]);

        let wrong_key = run(&f, Some(&sign(good.clone(), "other"))).unwrap_err();
        assert_eq!(wrong_key.reason, "invalid_token");
        let mut expired = good.clone();
        expired["exp"] = (now() - 600).into();
        assert_eq!(
            run(&f, Some(&sign(expired, "k3y"))).unwrap_err().reason,
            "token_expired"
        );
        let mut early = good.clone();
        early["nbf"] = (now() + 600).into();
        assert_eq!(
            run(&f, Some(&sign(early, "k3y"))).unwrap_err().reason,
            "token_not_yet_valid"
        );
        let mut iss = good.clone();
        iss["iss"] = "https://evil.example".into();
        assert_eq!(
            run(&f, Some(&sign(iss, "k3y"))).unwrap_err().reason,
            "invalid_token"
        );
        let mut aud = good.clone();
        aud["aud"] = "someone-else".into();
        assert_eq!(
            run(&f, Some(&sign(aud, "k3y"))).unwrap_err().reason,
            "invalid_token"
        );
        let mut no_exp = good;
        no_exp.as_object_mut().unwrap().remove("exp");
        assert_eq!(
            run(&f, Some(&sign(no_exp, "k3y"))).unwrap_err().reason,
            "invalid_token"
        );
    }

    fn hs256_filter(tenant_claim: &str) -> TokenAuthFilter {
        let mut c = cfg();
        c.jwt_hs256_secret = Some("k3y".into());
        c.jwt_tenant_claim = tenant_claim.into();
        TokenAuthFilter::from_config(&c).unwrap().unwrap()
    }

    fn hs256(claims: serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(b"k3y"),
        )
        .unwrap()
    }

    #[test]
    fn exp_and_nbf_of_the_wrong_type_are_refused() {
        let f = hs256_filter("tenant");
        let base = serde_json::json!({"sub": "carol", "tenant": "acme", "exp": now() + 600});
        let with = |k: &str, v: serde_json::Value| {
            let mut c = base.clone();
            c[k] = v;
            run(&f, Some(&hs256(c)))
        };
        // A future nbf written as a string: not a number, so not valid.
        let e = with("nbf", (now() + 3600).to_string().into()).unwrap_err();
        assert_eq!((e.reason, e.status()), ("invalid_claim", 401));
        assert!(e.message.contains("\"nbf\""), "{}", e.message);
        // ...while a past numeric one is fine, and a string exp is no exp.
        assert!(with("nbf", (now() - 60).into()).is_ok());
        assert_eq!(
            with("exp", (now() + 600).to_string().into())
                .unwrap_err()
                .reason,
            "invalid_token"
        );
    }

    #[test]
    fn a_jwt_without_a_string_tenant_or_principal_is_refused() {
        let f = hs256_filter("tenant");
        let exp = now() + 600;
        let refused = |claims: serde_json::Value| {
            let e = run(&f, Some(&hs256(claims))).unwrap_err();
            assert_eq!((e.reason, e.status()), ("invalid_claim", 401));
            e.message
        };
        assert_eq!(
            refused(serde_json::json!({"sub": "carol", "exp": exp})),
            "the JWT has no \"tenant\" claim (the tenant)"
        );
        assert_eq!(
            refused(serde_json::json!({"sub": "carol", "tenant": 7, "exp": exp})),
            "the JWT's \"tenant\" claim (the tenant) must be a non-empty string, not a number"
        );
        for wrong in [
            serde_json::json!(null),
            serde_json::json!(""),
            serde_json::json!(["acme"]),
            serde_json::json!({"id": "acme"}),
            serde_json::json!(true),
        ] {
            refused(serde_json::json!({"sub": "carol", "tenant": wrong, "exp": exp}));
        }
        assert_eq!(
            refused(serde_json::json!({"sub": 42, "tenant": "acme", "exp": exp})),
            "the JWT's \"sub\" claim (the principal) must be a non-empty string, not a number"
        );
        assert_eq!(
            refused(serde_json::json!({"tenant": "acme", "exp": exp})),
            "the JWT has no \"sub\" claim (the principal)"
        );
    }

    #[test]
    fn an_empty_tenant_claim_name_accepts_tokens_without_a_tenant() {
        let f = hs256_filter("");
        let id = run(
            &f,
            Some(&hs256(
                serde_json::json!({"sub": "carol", "exp": now() + 600}),
            )),
        )
        .unwrap();
        assert_eq!((id.tenant, id.principal.as_deref()), (None, Some("carol")));
        // Whatever a token says about a tenant is then ignored.
        let id = run(
            &f,
            Some(&hs256(
                serde_json::json!({"sub": "carol", "tenant": 7, "exp": now() + 600}),
            )),
        )
        .unwrap();
        assert_eq!(id.tenant, None);
    }

    #[test]
    fn an_unreadable_key_file_fails_with_its_path() {
        let mut c = cfg();
        c.jwt_public_key_file = Some("/nonexistent/key.pem".into());
        let e = TokenAuthFilter::from_config(&c).err().unwrap().to_string();
        assert!(e.contains("/nonexistent/key.pem"), "{e}");
    }
}

#[cfg(test)]
mod public_key_tests {
    use super::*;
    use crate::context::{Operation, Transport};
    use jsonwebtoken::{encode, EncodingKey, Header};
    use std::process::Command;

    fn openssl(args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A filter verifying JWTs with the public key file, tenant from `claim`.
    fn key_filter(public: std::path::PathBuf, claim: &str) -> TokenAuthFilter {
        let cfg = GateConfig {
            jwt_public_key_file: Some(public),
            jwt_tenant_claim: claim.into(),
            jwt_principal_claim: "sub".into(),
            ..GateConfig::default()
        };
        TokenAuthFilter::from_config(&cfg).unwrap().unwrap()
    }

    fn in_ten_minutes() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 600
    }

    /// An EC P-256 key pair made by the openssl CLI: (private PKCS#8, public).
    fn ec_pair(dir: &Path) -> (Vec<u8>, std::path::PathBuf) {
        let key = dir.join("ec.pem");
        let pk8 = dir.join("ec.pk8.pem");
        let public = dir.join("ec.pub.pem");
        let s = |p: &Path| p.to_str().unwrap().to_string();
        openssl(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &s(&key),
        ]);
        openssl(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            &s(&key),
            "-out",
            &s(&pk8),
        ]);
        openssl(&["ec", "-in", &s(&key), "-pubout", "-out", &s(&public)]);
        (std::fs::read(pk8).unwrap(), public)
    }

    #[test]
    fn rs256_jwt_with_a_public_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("rsa.pem");
        let public = dir.path().join("rsa.pub.pem");
        let s = |p: &Path| p.to_str().unwrap().to_string();
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &s(&key),
        ]);
        openssl(&["pkey", "-in", &s(&key), "-pubout", "-out", &s(&public)]);
        let f = key_filter(public, "tenant");
        let exp = in_ten_minutes();
        let token = encode(
            &Header::new(Algorithm::RS256),
            &serde_json::json!({"sub": "frank", "tenant": "umbrella", "exp": exp}),
            &EncodingKey::from_rsa_pem(&std::fs::read(&key).unwrap()).unwrap(),
        )
        .unwrap();
        let mut ctx = RequestContext::new(Transport::Http, Operation::Publish);
        ctx.credential = Some(token.clone());
        f.check(&mut ctx, &Frame::default()).unwrap();
        assert_eq!(ctx.identity.principal.as_deref(), Some("frank"));
        // A tampered payload fails the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged_claims = "eyJzdWIiOiJtYWxsb3J5IiwiZXhwIjo5OTk5OTk5OTk5fQ";
        parts[1] = forged_claims;
        ctx.credential = Some(parts.join("."));
        assert_eq!(
            f.check(&mut ctx, &Frame::default()).unwrap_err().reason,
            "invalid_token"
        );
    }

    #[test]
    fn es256_jwt_with_a_public_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let (private, public) = ec_pair(dir.path());
        let f = key_filter(public, "org");
        let exp = in_ten_minutes();
        let token = encode(
            &Header::new(Algorithm::ES256),
            &serde_json::json!({"sub": "dave", "org": "initech", "exp": exp}),
            &EncodingKey::from_ec_pem(&private).unwrap(),
        )
        .unwrap();
        let mut ctx = RequestContext::new(Transport::Http, Operation::Subscribe);
        ctx.credential = Some(token);
        f.check(&mut ctx, &Frame::default()).unwrap();
        assert_eq!(ctx.identity.tenant.as_deref(), Some("initech"));
        assert_eq!(ctx.identity.principal.as_deref(), Some("dave"));

        // An HS256 token is refused: only ES256 is configured.
        let hs = encode(
            &Header::new(Algorithm::HS256),
            &serde_json::json!({"sub": "dave", "exp": exp}),
            &EncodingKey::from_secret(b"guess"),
        )
        .unwrap();
        ctx.credential = Some(hs);
        let e = f.check(&mut ctx, &Frame::default()).unwrap_err();
        assert_eq!(e.reason, "invalid_token");
    }
}
