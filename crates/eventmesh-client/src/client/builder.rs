//! [`ClientBuilder`]: the settings of an [`EventMeshClient`], checked
//! when it is built.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

use super::{EventMeshClient, DEFAULT_SERVER, DEFAULT_TCP_SERVER};
use crate::error::{Error, Result};
use crate::tls::TlsFiles;

/// How long an idle pooled HTTP connection is kept: well under the
/// server's idle timeout.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Builds an [`EventMeshClient`] with non-default settings.
///
/// ```
/// use std::time::Duration;
/// use eventmesh_client::EventMeshClient;
///
/// let client = EventMeshClient::builder()
///     .server("http://mesh.internal:10105")
///     .token("s3cret")
///     .tcp_addr("mesh.internal:10000")
///     .connect_timeout(Duration::from_secs(2))
///     .request_timeout(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(client.server(), "http://mesh.internal:10105");
/// # Ok::<(), eventmesh_client::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    server: String,
    token: Option<String>,
    tcp_addr: String,
    connect_timeout: Duration,
    request_timeout: Duration,
    idle_timeout: Duration,
    tls: TlsFiles,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            server: DEFAULT_SERVER.to_string(),
            token: None,
            tcp_addr: DEFAULT_TCP_SERVER.to_string(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            tls: TlsFiles::default(),
        }
    }
}

impl ClientBuilder {
    /// The traffic HTTP base URL (default `http://127.0.0.1:10105`). A
    /// missing scheme means `http://`; a path prefix is kept.
    pub fn server(mut self, url: impl Into<String>) -> Self {
        self.server = url.into();
        self
    }

    /// Sent as `Authorization: Bearer <token>` on every request.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Like [`ClientBuilder::token`], skipping `None`.
    pub fn token_opt(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// `host:port` of the legacy TCP transport (default `127.0.0.1:10000`);
    /// `tls://host:port` for a port that serves TLS.
    pub fn tcp_addr(mut self, addr: impl Into<String>) -> Self {
        self.tcp_addr = addr.into();
        self
    }

    /// Longest wait for a connection to be made (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Longest wait for an ordinary request's answer (default 30 s). Long
    /// polls and request-reply add their own wait on top.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// A streaming connection (SSE, TCP) silent for this long, heartbeats
    /// included, counts as broken (default 90 s).
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }

    /// Trusts the certificate authorities of a PEM file (besides the
    /// public web roots) for `https://`, `wss://` and TLS on TCP.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca_file = Some(path.into());
        self
    }

    /// Presents a client certificate (PEM chain and key) to servers that
    /// ask for one (mutual TLS).
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.cert_file = Some(cert.into());
        self.tls.key_file = Some(key.into());
        self
    }

    /// All TLS files at once; `None` fields keep the defaults.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = files;
        self
    }

    pub fn build(self) -> Result<EventMeshClient> {
        let base = parse_server(&self.server)?;
        let tls_wanted = !self.tls.is_default()
            || base.scheme() == "https"
            || crate::tls::tcp_target(&self.tcp_addr).0;
        let tls = tls_wanted.then(|| self.tls.client_config()).transpose()?;
        // Idle connections are dropped before the server's idle timeout
        // (60 s by default) can close one just as a request goes out on it.
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(POOL_IDLE);
        if let Some(config) = &tls {
            http = http.use_preconfigured_tls((**config).clone());
        }
        let http = http
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot build the HTTP client: {e}")))?;
        let server = base.as_str().trim_end_matches('/').to_string();
        Ok(EventMeshClient {
            http,
            base,
            server,
            token: self.token,
            tcp_addr: self.tcp_addr,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            idle_timeout: self.idle_timeout,
            tls,
        })
    }
}

/// Parses and normalizes a server base URL.
fn parse_server(raw: &str) -> Result<Url> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(Error::InvalidArgument("the server URL is empty".into()));
    }
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let mut url = Url::parse(&with_scheme)
        .map_err(|e| Error::InvalidArgument(format!("server URL {raw:?} is not valid: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::InvalidArgument(format!(
            "server URL {raw:?} must be http:// or https://"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::InvalidArgument(format!(
            "server URL {raw:?} has no host"
        )));
    }
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}
