//! TLS of the etcd client: the client options built from the PEM files of
//! [`EtcdSettings`], and the classification of TLS failures.
//!
//! Invariants worth naming:
//! - `https://` endpoints always speak TLS: with `tls_ca_file` the server's
//!   certificate is checked against those authorities only, without it
//!   against the system's roots. `http://` endpoints never do, and TLS files
//!   with an `http://` endpoint are refused (they would be silently unused).
//! - Every file is read and parsed here, before any connection: an
//!   unreadable file, a file without a certificate (or key) or broken PEM is
//!   a [`MetaError::Config`] naming the file and the cause.
//! - A call that fails because of TLS (a certificate refused by either
//!   side, a handshake that broke) is a [`MetaError::Tls`], not a generic
//!   `Unavailable`, so that a misconfiguration is told apart from an outage.
//!   A refusal the gRPC client cannot see (etcd rejecting the client
//!   certificate after the TLS 1.3 handshake) is read by [`diagnose`] when
//!   connecting.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Identity, TlsOptions};
use eventmesh_core::pem;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::error::{MetaError, Result};
use crate::etcd::EtcdSettings;

const HTTPS: &str = "https://";

/// Whether `config` asks for TLS: an `https://` endpoint or a TLS file.
pub(crate) fn wanted(config: &EtcdSettings) -> bool {
    config.endpoints.iter().any(|e| e.starts_with(HTTPS))
        || config.tls_ca_file.is_some()
        || config.tls_cert_file.is_some()
        || config.tls_key_file.is_some()
}

/// The client's TLS options, or `None` for plain-text endpoints.
pub(crate) fn options(config: &EtcdSettings) -> Result<Option<TlsOptions>> {
    if !wanted(config) {
        return Ok(None);
    }
    if let Some(plain) = config.endpoints.iter().find(|e| !e.starts_with(HTTPS)) {
        let plain = eventmesh_core::redact::url(plain);
        return Err(MetaError::Config(format!(
            "etcd endpoint {plain} is not https:// but TLS is configured (TLS files or other \
             https:// endpoints); give every endpoint as https://"
        )));
    }
    let mut tls = TlsOptions::new();
    tls = match &config.tls_ca_file {
        Some(file) => {
            certificates(file, "CA")?;
            tls.ca_certificate(Certificate::from_pem(read(file, "CA")?))
        }
        None => tls.with_native_roots(),
    };
    match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert_file), Some(key_file)) => {
            certificates(cert_file, "client certificate")?;
            pem::private_key(key_file, "etcd client key").map_err(MetaError::Config)?;
            let (cert, key) = (
                read(cert_file, "client certificate")?,
                read(key_file, "client key")?,
            );
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(MetaError::Config(
                "the etcd client certificate and key files must be given together".into(),
            ))
        }
    }
    Ok(Some(tls))
}

fn read(file: &Path, what: &str) -> Result<Vec<u8>> {
    pem::read(file, &format!("etcd {what}")).map_err(MetaError::Config)
}

/// Checks that `file` holds at least one certificate and nothing malformed.
fn certificates(file: &Path, what: &str) -> Result<()> {
    pem::certificates(file, &format!("etcd {what}")).map_err(MetaError::Config)?;
    Ok(())
}

/// The TLS failure behind `e`, if there is one: a rustls error anywhere in
/// its chain of causes. (The client's error gives no source itself; the
/// gRPC status or transport error inside it does, and I/O errors hide
/// theirs behind `get_ref`.)
pub(crate) fn failure(e: &etcd_client::Error) -> Option<String> {
    let start: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::TransportError(transport) => transport,
        other => other,
    };
    let mut cause = Some(start);
    while let Some(c) = cause {
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        if let Some(tls) = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls.to_string());
        }
        cause = c.source();
    }
    None
}

/// Why etcd refuses this client's TLS, found with one handshake of its
/// own to the first endpoint; `None` when that handshake and a first read
/// go through (the failure was something else) or it cannot be tried.
///
/// Needed because under TLS 1.3 the server judges the client certificate
/// after the client has finished its handshake: a missing or untrusted
/// client certificate comes back as an alert on the first read, which the
/// gRPC client only reports as a cancelled request. Reading the alert here
/// names the cause (`CertificateRequired`, `BadCertificate`, ...).
pub(crate) async fn diagnose(config: &EtcdSettings, within: Duration) -> Option<String> {
    let endpoint = config.endpoints.first()?;
    let authority = endpoint.strip_prefix(HTTPS)?.split('/').next()?;
    let (host, _) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).ok()?;
    let connector = TlsConnector::from(Arc::new(client_config(config)?));
    let explain = |e: rustls::Error| match (&e, &config.tls_cert_file) {
        (rustls::Error::AlertReceived(_), None) => {
            format!("{e} (this client presented no certificate; etcd requires one)")
        }
        (rustls::Error::AlertReceived(_), Some(cert)) => {
            format!(
                "{e} (etcd did not accept the client certificate {})",
                cert.display()
            )
        }
        _ => e.to_string(),
    };
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(authority).await.ok()?;
        let mut stream = match connector.connect(name, tcp).await {
            Ok(s) => s,
            Err(e) => return rustls_cause(&e).map(explain),
        };
        // The HTTP/2 preface and an empty SETTINGS frame: a server that
        // accepted the client answers with its own SETTINGS.
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        if let Err(e) = stream.write_all(&hello).await {
            return rustls_cause(&e).map(explain);
        }
        let mut answer = [0u8; 64];
        match stream.read(&mut answer).await {
            Ok(_) => None,
            Err(e) => rustls_cause(&e).map(explain),
        }
    };
    tokio::time::timeout(within, attempt).await.ok().flatten()
}

/// The rustls client configuration the gRPC client would use (ring
/// provider, the CA file or the system's roots, the client certificate).
fn client_config(config: &EtcdSettings) -> Option<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    match &config.tls_ca_file {
        Some(file) => {
            for cert in pem::certificates(file, "etcd CA").ok()? {
                roots.add(cert).ok()?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let mut tls = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => {
            let chain = pem::certificates(cert, "etcd client certificate").ok()?;
            let key = pem::private_key(key, "etcd client key").ok()?;
            builder.with_client_auth_cert(chain, key).ok()?
        }
        _ => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Some(tls)
}

/// The rustls error inside an I/O error from the TLS stream.
fn rustls_cause(e: &std::io::Error) -> Option<rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoints: &[&str]) -> EtcdSettings {
        EtcdSettings::new(endpoints.iter().copied())
    }

    #[test]
    fn plain_endpoints_without_files_need_no_tls() {
        assert!(options(&config(&["http://a:2379"])).unwrap().is_none());
    }

    #[test]
    fn https_endpoints_use_tls_and_plain_ones_with_tls_are_refused() {
        assert!(options(&config(&["https://a:2379"])).unwrap().is_some());
        let mixed = options(&config(&["https://a:2379", "http://b:2379"])).unwrap_err();
        assert!(
            matches!(&mixed, MetaError::Config(m) if m.contains("http://b:2379")),
            "{mixed:?}"
        );
        let mut c = config(&["http://a:2379"]);
        c.tls_ca_file = Some("/nonexistent/ca.pem".into());
        let e = options(&c).unwrap_err();
        assert!(
            matches!(&e, MetaError::Config(m) if m.contains("http://a:2379")),
            "{e:?}"
        );
    }

    #[test]
    fn unreadable_and_malformed_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(&["https://a:2379"]);
        let missing = dir.path().join("missing.pem");
        c.tls_ca_file = Some(missing.clone());
        let e = options(&c).unwrap_err().to_string();
        assert!(
            e.contains("cannot read the etcd CA file")
                && e.contains(&missing.display().to_string()),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        c.tls_ca_file = Some(empty.clone());
        let e = options(&c).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} holds no PEM certificate", empty.display())),
            "{e}"
        );
        let broken = dir.path().join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\n@@@\n").unwrap();
        c.tls_ca_file = Some(broken.clone());
        let e = options(&c).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} is not valid PEM", broken.display())),
            "{e}"
        );
    }
}
