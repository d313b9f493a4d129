//! TLS for the client: one rustls configuration serves `https://`,
//! `wss://` and TLS on the TCP port. It trusts the public web roots plus
//! the authorities of a CA file (`--ca-file` / `EVENTMESH_CA_FILE`), and
//! presents a client certificate when one is given (mutual TLS).

use std::path::PathBuf;
use std::sync::Arc;

use eventmesh_core::pem;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::error::{Error, Result};

/// What the client's TLS trusts and presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate authorities trusted besides the public web roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, presented to servers that ask.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    /// True when nothing beyond the defaults is asked for.
    pub fn is_default(&self) -> bool {
        *self == TlsFiles::default()
    }

    /// The rustls configuration these files make.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(ca) = &self.ca_file {
            for cert in pem::certificates(ca, "CA").map_err(Error::InvalidArgument)? {
                roots.add(cert).map_err(|e| {
                    Error::InvalidArgument(format!(
                        "a certificate in {} is not a CA certificate: {e}",
                        ca.display()
                    ))
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let mut config = match (&self.cert_file, &self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = pem::certificates(cert, "client certificate")
                    .map_err(Error::InvalidArgument)?;
                let private =
                    pem::private_key(key, "client key").map_err(Error::InvalidArgument)?;
                builder.with_client_auth_cert(chain, private).map_err(|e| {
                    Error::InvalidArgument(format!(
                        "the key in {} does not serve the certificate in {}: {e}",
                        key.display(),
                        cert.display()
                    ))
                })?
            }
            _ => {
                return Err(Error::InvalidArgument(
                    "a client certificate needs both its certificate and key files".into(),
                ))
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// `tls://host:port` names a TLS TCP port; `host:port` a plain one.
pub(crate) fn tcp_target(addr: &str) -> (bool, &str) {
    match addr.strip_prefix("tls://") {
        Some(rest) => (true, rest),
        None => (false, addr.strip_prefix("tcp://").unwrap_or(addr)),
    }
}

/// Runs the TLS handshake on a connected TCP stream to `addr`
/// (`host:port`).
pub(crate) async fn handshake(
    config: Arc<ClientConfig>,
    addr: &str,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>> {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        Error::InvalidArgument(format!("{host:?} is not a valid TLS server name: {e}"))
    })?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| Error::Unreachable {
            server: format!("tls://{addr}"),
            cause: format!("TLS handshake failed: {e}"),
        })
}
