//! TLS on the listeners: the certificate, its key and the client CA, read
//! from PEM files and replaced while the process runs (SIGHUP,
//! `POST /admin/reload`, or a change seen by the file watch), and the
//! accept loop every listener shares.
//!
//! A replacement serves each connection accepted after it; connections
//! already open keep the session they negotiated. A replacement that does
//! not load (an unreadable file, a key that does not match the certificate)
//! changes nothing and says why.
//!
//! With a client CA, a verified client certificate names the caller: its
//! subject's `CN` is the principal and its `O` the tenant, as a static
//! token's line would (see [`eventmesh_security::Identity`]).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use eventmesh_core::config::{ClientAuth, ServerTlsConfig};
use eventmesh_core::pem;
use eventmesh_security::Identity;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;

use crate::limits::{Admission, Permit, Refusal};

/// Accepted connections waiting for the server to take them.
const ACCEPT_QUEUE: usize = 256;

/// The crypto provider of every TLS configuration made here.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The listeners' TLS settings in force, replaceable while running.
pub struct ServerTls {
    files: ServerTlsConfig,
    config: RwLock<Arc<ServerConfig>>,
    /// The files as they were at the last load (modification time and
    /// length), to notice a change.
    seen: Mutex<Vec<Stamp>>,
}

type Stamp = Option<(SystemTime, u64)>;

impl ServerTls {
    /// The TLS settings of `cfg`, or `None` when no certificate is
    /// configured. Fails with the file and the cause.
    pub fn load(cfg: &ServerTlsConfig) -> anyhow::Result<Option<Arc<ServerTls>>> {
        if !cfg.configured() {
            return Ok(None);
        }
        let seen = stamps(cfg);
        let config = build(cfg).map_err(anyhow::Error::msg)?;
        Ok(Some(Arc::new(ServerTls {
            files: cfg.clone(),
            config: RwLock::new(Arc::new(config)),
            seen: Mutex::new(seen),
        })))
    }

    /// Bound on a handshake, from the connection's accept.
    pub fn handshake_timeout(&self) -> Duration {
        self.files.handshake_timeout
    }

    /// The configuration new connections get.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config.read().expect("tls lock").clone()
    }

    /// Reads the files again; `Err` says why the settings in force stay.
    pub fn prepare(&self) -> Result<Prepared<'_>, String> {
        let seen = stamps(&self.files);
        let config = build(&self.files)?;
        Ok(Prepared {
            tls: self,
            config,
            seen,
        })
    }

    /// Reloads when a file changed since the last load. Logs the outcome.
    fn reload_if_changed(&self) {
        let now = stamps(&self.files);
        if *self.seen.lock().expect("tls lock") == now {
            return;
        }
        match self.prepare() {
            Ok(p) => {
                p.apply();
                tracing::info!("TLS certificate files changed; new connections use them");
            }
            Err(why) => {
                // Not again until the files change once more.
                *self.seen.lock().expect("tls lock") = now;
                tracing::error!("TLS files changed but do not load; the ones in force stay: {why}");
            }
        }
    }

    /// Checks the files every `every` until `stop` is cancelled.
    pub fn watch(self: Arc<Self>, every: Duration, stop: tokio_util::sync::CancellationToken) {
        if every.is_zero() {
            return;
        }
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => return,
                }
                let tls = self.clone();
                // File reads and certificate parsing stay off the workers.
                let _ = tokio::task::spawn_blocking(move || tls.reload_if_changed()).await;
            }
        });
    }
}

/// Files that loaded, not yet in force.
pub struct Prepared<'a> {
    tls: &'a ServerTls,
    config: ServerConfig,
    seen: Vec<Stamp>,
}

impl Prepared<'_> {
    /// Puts the loaded files in force for the next connections.
    pub fn apply(self) {
        *self.tls.config.write().expect("tls lock") = Arc::new(self.config);
        *self.tls.seen.lock().expect("tls lock") = self.seen;
    }
}

fn stamps(cfg: &ServerTlsConfig) -> Vec<Stamp> {
    [&cfg.cert_file, &cfg.key_file, &cfg.client_ca_file]
        .into_iter()
        .flatten()
        .map(|p| {
            let m = fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

fn build(cfg: &ServerTlsConfig) -> Result<ServerConfig, String> {
    let (Some(cert_file), Some(key_file)) = (&cfg.cert_file, &cfg.key_file) else {
        return Err("eventmesh.server.tls.cert.file and .key.file must be set together".into());
    };
    let chain = pem::certificates(cert_file, "TLS certificate")?;
    let key = pem::private_key(key_file, "TLS key")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &cfg.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(read_roots(ca, "client CA")?),
                provider(),
            );
            let verifier = match cfg.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| {
                format!(
                    "cannot verify clients with the authorities of {}: {e}",
                    ca.display()
                )
            })?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "the key in {} does not serve the certificate in {}: {e}",
            key_file.display(),
            cert_file.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The certificate authorities of a PEM file.
fn read_roots(file: &Path, what: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in pem::certificates(file, what)? {
        roots
            .add(cert)
            .map_err(|e| format!("a certificate in {} is not a CA: {e}", file.display()))?;
    }
    Ok(roots)
}

/// The stream of an accepted connection: plain or TLS.
pub type Io = Either<TcpStream, TlsStream<TcpStream>>;

/// Who is on the other end of a connection.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The identity of a verified client certificate.
    pub certificate: Option<Arc<Identity>>,
}

/// A connection ready to be served: its stream, its peer, and its place in
/// the listener's connection limits (held as long as the stream).
pub type Accepted = (Io, Peer, Permit);

/// The TLS handshake an accepted connection still has to make, when its
/// listener leaves handshakes to whoever serves the connection
/// ([`Incoming::unshaken`]).
pub struct Handshake {
    acceptor: TlsAcceptor,
    timeout: Duration,
    admission: Admission,
}

impl Handshake {
    /// Makes the handshake on `stream`, bounded by the handshake timeout
    /// from `permit`'s accept; the session and the peer it names, or
    /// `None` when it failed or timed out (a timeout is counted as a
    /// refusal).
    pub async fn make(
        self,
        stream: TcpStream,
        addr: SocketAddr,
        permit: &Permit,
    ) -> Option<(TlsStream<TcpStream>, Peer)> {
        let deadline = permit.accepted() + self.timeout;
        match tokio::time::timeout_at(deadline, self.acceptor.accept(stream)).await {
            Ok(Ok(stream)) => {
                let certificate = client_identity(&stream).map(Arc::new);
                Some((stream, Peer { addr, certificate }))
            }
            Ok(Err(e)) => {
                tracing::debug!(%addr, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                self.admission.refused(Refusal::TimeoutTls);
                tracing::debug!(%addr, "TLS handshake timed out");
                None
            }
        }
    }
}

/// Accepted (and, with TLS, handshaken unless [`Incoming::unshaken`])
/// connections of one listener.
pub struct Incoming {
    rx: mpsc::Receiver<(Accepted, Option<Handshake>)>,
    local: SocketAddr,
    admission: Admission,
}

impl Incoming {
    /// Accepts on `listener`, with TLS when `tls` is given. A connection
    /// over `admission`'s limits is closed as soon as it is accepted.
    /// Handshakes run side by side, each bounded by the configured
    /// handshake timeout from the accept, so a slow or silent client holds
    /// up nobody else. Accepting stops once this `Incoming` is dropped.
    pub fn new(
        listener: TcpListener,
        tls: Option<Arc<ServerTls>>,
        admission: Admission,
    ) -> std::io::Result<Incoming> {
        Self::with_alpn(listener, tls, admission, None)
    }

    /// [`Incoming::new`], but a TLS connection is handed over before its
    /// handshake, with the [`Handshake`] to make: whoever serves it makes
    /// it where the connection will live (the TCP port's own threads).
    pub fn unshaken(
        listener: TcpListener,
        tls: Option<Arc<ServerTls>>,
        admission: Admission,
    ) -> std::io::Result<Incoming> {
        Self::start(listener, tls, admission, None, false)
    }

    /// [`Incoming::new`], the TLS handshakes offering the application
    /// protocols `alpn` (`h2` for gRPC) instead of the listeners'
    /// `http/1.1`; the certificate and client CA in force are the same.
    pub fn with_alpn(
        listener: TcpListener,
        tls: Option<Arc<ServerTls>>,
        admission: Admission,
        alpn: Option<Vec<Vec<u8>>>,
    ) -> std::io::Result<Incoming> {
        Self::start(listener, tls, admission, alpn, true)
    }

    fn start(
        listener: TcpListener,
        tls: Option<Arc<ServerTls>>,
        admission: Admission,
        alpn: Option<Vec<Vec<u8>>>,
        handshake_here: bool,
    ) -> std::io::Result<Incoming> {
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        tokio::spawn(accept_loop(
            listener,
            tls,
            admission.clone(),
            tx,
            alpn,
            handshake_here,
        ));
        Ok(Incoming {
            rx,
            local,
            admission,
        })
    }

    /// The next connection; `None` once the accept loop has stopped.
    pub async fn next(&mut self) -> Option<Accepted> {
        self.rx.recv().await.map(|(accepted, _)| accepted)
    }

    /// The next connection and, from an [`Incoming::unshaken`] with TLS,
    /// the handshake it still has to make (its peer names no certificate
    /// until then).
    pub async fn next_unshaken(&mut self) -> Option<(Accepted, Option<Handshake>)> {
        self.rx.recv().await
    }

    /// The listener's limits and counters.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Accepts connections, admits them, and hands them over: with TLS,
/// handshaken by tasks of its own when `handshake_here`, else with the
/// [`Handshake`] still to make.
async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    admission: Admission,
    tx: mpsc::Sender<(Accepted, Option<Handshake>)>,
    alpn: Option<Vec<Vec<u8>>>,
    handshake_here: bool,
) {
    // The configuration in force with `alpn`, made once per configuration.
    let mut with_alpn: Option<(Arc<ServerConfig>, Arc<ServerConfig>)> = None;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tx.closed() => return,
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over a limit: closed at once, before any work or buffer is spent
        // on it (the refusal is counted).
        let Ok(permit) = admission.admit(addr.ip()) else {
            drop(stream);
            continue;
        };
        // Small answers go out at once instead of waiting for the peer's
        // delayed ACK (Nagle).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let peer = Peer {
            addr,
            certificate: None,
        };
        let Some(tls) = &tls else {
            if tx
                .send(((Either::Left(stream), peer, permit), None))
                .await
                .is_err()
            {
                return;
            }
            continue;
        };
        let config = tls.current();
        let config = match &alpn {
            None => config,
            Some(protocols) => match &with_alpn {
                Some((from, made)) if Arc::ptr_eq(from, &config) => made.clone(),
                _ => {
                    let mut c = (*config).clone();
                    c.alpn_protocols = protocols.clone();
                    let made = Arc::new(c);
                    with_alpn = Some((config, made.clone()));
                    made
                }
            },
        };
        let handshake = Handshake {
            acceptor: TlsAcceptor::from(config),
            timeout: tls.handshake_timeout(),
            admission: admission.clone(),
        };
        if !handshake_here {
            let unshaken = ((Either::Left(stream), peer, permit), Some(handshake));
            if tx.send(unshaken).await.is_err() {
                return;
            }
            continue;
        }
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Some((stream, peer)) = handshake.make(stream, addr, &permit).await {
                let _ = tx.send(((Either::Right(stream), peer, permit), None)).await;
            }
        });
    }
}

/// The identity named by the verified client certificate, if any.
fn client_identity(stream: &TlsStream<TcpStream>) -> Option<Identity> {
    let cert = stream.get_ref().1.peer_certificates()?.first()?;
    identity_of(cert)
}

/// `CN` as the principal and `O` as the tenant of a certificate's subject.
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<Identity> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let subject = parsed.subject();
    let text = |a: Option<&x509_parser::x509::AttributeTypeAndValue<'_>>| {
        a.and_then(|a| a.as_str().ok())
            .map(str::to_string)
            .filter(|s| !s.is_empty())
    };
    let principal = text(subject.iter_common_name().next());
    let tenant = text(subject.iter_organization().next());
    principal.as_ref()?;
    Some(Identity {
        tenant,
        principal,
        roles: Vec::new(),
    })
}

/// The paths in a TLS setting, for messages.
pub fn describe(files: &ServerTlsConfig) -> String {
    let show = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    format!(
        "certificate {}, key {}{}",
        show(&files.cert_file),
        show(&files.key_file),
        files
            .client_ca_file
            .as_ref()
            .map(|c| format!(", client CA {}", c.display()))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_cert(file: &Path) -> CertificateDer<'static> {
        pem::certificates(file, "test").unwrap().remove(0)
    }

    #[test]
    fn a_certificate_subject_names_principal_and_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let pki = eventmesh_testpki::TestPki::new(dir.path(), "t");
        let alice = pki.client("alice", "alice", Some("acme"));
        let id = identity_of(&first_cert(&alice.cert)).unwrap();
        assert_eq!(id.principal.as_deref(), Some("alice"));
        assert_eq!(id.tenant.as_deref(), Some("acme"));
        assert!(id.roles.is_empty());
        let bare = pki.client("bare", "svc", None);
        let id = identity_of(&first_cert(&bare.cert)).unwrap();
        assert_eq!((id.principal.as_deref(), id.tenant), (Some("svc"), None));
        // Bytes that are not a certificate name nobody.
        assert!(identity_of(&CertificateDer::from(vec![0u8; 16])).is_none());
    }

    #[test]
    fn files_are_checked_when_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let pki = eventmesh_testpki::TestPki::new(dir.path(), "t");
        let a = pki.server("a", "a");
        let cfg = |cert: &Path, key: &Path, ca: Option<&Path>| ServerTlsConfig {
            cert_file: Some(cert.to_path_buf()),
            key_file: Some(key.to_path_buf()),
            client_ca_file: ca.map(Path::to_path_buf),
            ..ServerTlsConfig::default()
        };
        assert!(ServerTls::load(&ServerTlsConfig::default())
            .unwrap()
            .is_none());
        let tls = ServerTls::load(&cfg(&a.cert, &a.key, Some(pki.ca_file())))
            .unwrap()
            .unwrap();
        assert_eq!(tls.current().alpn_protocols, vec![b"http/1.1".to_vec()]);
        let missing = dir.path().join("missing.pem");
        let e = build(&cfg(&missing, &a.key, None)).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "cannot read the TLS certificate file {}: ",
                missing.display()
            )),
            "{e}"
        );
        // A CA file holding a key, not a certificate.
        let e = build(&cfg(&a.cert, &a.key, Some(&a.key))).unwrap_err();
        assert_eq!(
            e,
            format!(
                "the client CA file {} holds no PEM certificate",
                a.key.display()
            )
        );
    }
}
