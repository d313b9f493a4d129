//! A real etcd process for tests: its own data dir and ports, killed when
//! dropped. Tests that use it fail (never skip) when `etcd` is missing.
//! Every wait on a process (etcd itself, `kill`) is bounded.
//!
//! [`Etcd::start_tls`] starts one that serves its clients over TLS only
//! and requires a client certificate (`--client-cert-auth`), with
//! certificates from a test CA made for it ([`EtcdTls`]).

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use eventmesh_testpki::{Pair, TestPki};
use tempfile::TempDir;

/// How long a starting etcd may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long a process may take to exit once killed (or `kill` to run).
const EXIT_WITHIN: Duration = Duration::from_secs(10);
/// How long etcd's threads may take to stop once sent SIGSTOP.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// Waits up to [`EXIT_WITHIN`] for `child` to exit; panics past that.
fn reap(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + EXIT_WITHIN;
    loop {
        if let Some(status) = child.try_wait().expect("query a child process") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{what} (pid {}) did not exit within {EXIT_WITHIN:?}",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub struct Etcd {
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    tls: Option<EtcdTls>,
}

/// The certificates of an etcd serving TLS: its CA (which signs more
/// client certificates on demand), its server certificate for
/// `127.0.0.1`, and a client certificate it accepts.
pub struct EtcdTls {
    pub pki: TestPki,
    pub server: Pair,
    pub client: Pair,
}

impl EtcdTls {
    fn new(dir: &std::path::Path) -> EtcdTls {
        let pki = TestPki::new(dir, "etcd");
        let server = pki.server("etcd-server", "etcd");
        let client = pki.client("etcd-client", "eventmesh", None);
        EtcdTls {
            pki,
            server,
            client,
        }
    }

    /// The CA file etcd's certificate (and its clients') chain up to.
    pub fn ca_file(&self) -> PathBuf {
        self.pki.ca_file().to_path_buf()
    }
}

fn etcd_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`etcd` was not found on PATH; these tests need a real etcd 3.4+ \
                 (Debian/Ubuntu: `apt-get install etcd-server`)"
            )
        })
}

/// A port that was free a moment ago (bound to port 0, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free localhost port")
        .port()
}

impl Etcd {
    /// Starts a fresh single-member etcd and waits until it answers.
    pub async fn start() -> Etcd {
        Self::start_with(false).await
    }

    /// Starts a fresh single-member etcd whose client port speaks TLS only
    /// and requires a client certificate of its CA; waits until it answers
    /// (probed with [`EtcdTls::client`]).
    #[allow(dead_code)] // used by the TLS tests only
    pub async fn start_tls() -> Etcd {
        Self::start_with(true).await
    }

    /// The certificates of an etcd from [`Etcd::start_tls`].
    #[allow(dead_code)] // used by the TLS tests only
    pub fn tls(&self) -> &EtcdTls {
        self.tls.as_ref().expect("an etcd started with start_tls")
    }

    async fn start_with(tls: bool) -> Etcd {
        let mut last_log = String::new();
        // Another process may take a released port before etcd binds it:
        // try again with new ports a few times.
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("tempdir for etcd");
            let tls = tls.then(|| EtcdTls::new(dir.path()));
            let mut etcd = Etcd {
                dir,
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
                tls,
            };
            if etcd.client_port == etcd.peer_port {
                continue;
            }
            etcd.spawn();
            if etcd.wait_ready().await {
                return etcd;
            }
            last_log = etcd.log();
        }
        panic!("etcd did not become ready within {READY_WITHIN:?}; its log:\n{last_log}");
    }

    /// The client URL (`https://` for an etcd from [`Etcd::start_tls`]).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Everything etcd wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the etcd log");
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(etcd_binary());
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server.cert)
                .arg("--key-file")
                .arg(&tls.server.key)
                .arg("--trusted-ca-file")
                .arg(tls.pki.ca_file())
                .arg("--client-cert-auth");
        }
        let child = cmd
            .arg("--name")
            .arg("t")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("t={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        self.child = Some(child);
    }

    /// Polls etcd with a real request until it answers; false when it
    /// exited or did not answer in time.
    async fn wait_ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        while tokio::time::Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            let options = self.tls.as_ref().map(|tls| {
                let read = |p: &PathBuf| std::fs::read(p).expect("read a test PEM file");
                let identity =
                    etcd_client::Identity::from_pem(read(&tls.client.cert), read(&tls.client.key));
                etcd_client::ConnectOptions::new().with_tls(
                    etcd_client::TlsOptions::new()
                        .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca_file())))
                        .identity(identity),
                )
            });
            let probe = async {
                let mut c = etcd_client::Client::connect([self.endpoint()], options).await?;
                c.get("/probe", None).await
            };
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), probe).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("etcd is running").id()
    }

    fn signal(&self, sig: &str) {
        let mut kill = Command::new("kill")
            .arg(sig)
            .arg(self.pid().to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("run kill");
        let status = reap(&mut kill, "kill");
        assert!(status.success(), "kill {sig} failed");
    }

    /// SIGKILL, and waits (bounded) for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            reap(&mut child, "etcd after SIGKILL");
        }
    }

    /// Freezes etcd (SIGSTOP): connections stay open, nothing answers.
    /// Returns once every thread of it is stopped: `kill` returns as soon
    /// as the signal is sent, and until the thread that takes it stops the
    /// others, one of them may still answer a request.
    pub fn stop(&self) {
        self.signal("-STOP");
        let pid = self.pid();
        let deadline = Instant::now() + STOP_WITHIN;
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "etcd (pid {pid}) still running {STOP_WITHIN:?} after SIGSTOP"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Thaws a frozen etcd (SIGCONT).
    pub fn cont(&self) {
        self.signal("-CONT");
    }

    /// Starts etcd again on the same data dir and ports (killing the
    /// running one first, if any) and waits until it answers.
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn();
        if !self.wait_ready().await {
            panic!(
                "etcd did not come back within {READY_WITHIN:?}; its log:\n{}",
                self.log()
            );
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // No panic while a failing test unwinds: the wait is bounded all
        // the same.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let deadline = Instant::now() + EXIT_WITHIN;
            while !matches!(child.try_wait(), Ok(Some(_)) | Err(_)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// True when every thread of `pid` is in the stopped state (`T` in
/// `/proc/PID/task/TID/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    threads.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .is_ok_and(|stat| thread_state(&stat) == Some('T'))
    })
}

/// The state letter of a `stat` line: the first field after the command
/// name, which stands in parentheses and may itself hold some.
fn thread_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
