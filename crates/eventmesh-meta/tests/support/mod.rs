//! A real etcd process for tests: its own data dir and ports, killed when
//! dropped. Tests that use it fail (never skip) when `etcd` is missing.
//! Every wait on a process (etcd itself, `kill`) is bounded.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a starting etcd may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long a process may take to exit once killed (or `kill` to run).
const EXIT_WITHIN: Duration = Duration::from_secs(10);

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
        let mut last_log = String::new();
        // Another process may take a released port before etcd binds it:
        // try again with new ports a few times.
        for _ in 0..3 {
            let mut etcd = Etcd {
                dir: tempfile::tempdir().expect("tempdir for etcd"),
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
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

    /// The client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
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
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(etcd_binary())
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
            let probe = async {
                let mut c = etcd_client::Client::connect([self.endpoint()], None).await?;
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
    pub fn stop(&self) {
        self.signal("-STOP");
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
