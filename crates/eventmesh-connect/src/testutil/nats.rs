//! A real NATS server for connector tests: one `nats-server -js` on a free
//! loopback port with its own store directory, killed (`SIGKILL`) and its
//! directory removed when dropped.
//!
//! The binary must be NATS 2.12 or later. It is, in order of preference,
//! `$EVENTMESH_NATS_SERVER`, the one `scripts/nats.sh` installs
//! (`/var/tmp/nats-venv/bin/nats-server`), or `nats-server` on `PATH`; the
//! first of them that runs and reports a recent enough version is used.
//!
//! Readiness is the protocol's: the server is ready once a TCP client is
//! greeted with an `INFO` line that announces JetStream.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where `scripts/nats.sh` installs the server.
pub const VENV_BINARY: &str = "/var/tmp/nats-venv/bin/nats-server";

/// How long a start may take before the test fails.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// `(major, minor)` from `nats-server --version` output such as
/// `nats-server: v2.12.1`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let bytes = text.as_bytes();
    let start = (0..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b'v' && bytes[i + 1].is_ascii_digit())?;
    let mut parts = text[start + 1..]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The nats-server binary to run, checked to be 2.12 or later.
///
/// # Panics
/// When none of the candidates is a recent enough server.
pub fn binary() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("EVENTMESH_NATS_SERVER")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from(VENV_BINARY), PathBuf::from("nats-server")])
        .collect();
    let mut seen = Vec::new();
    for bin in &candidates {
        let Ok(out) = Command::new(bin).arg("--version").output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        match parse_version(&text) {
            Some(v) if v >= (2, 12) => return bin.clone(),
            _ => seen.push(format!("{} ({})", bin.display(), text.trim())),
        }
    }
    panic!(
        "no nats-server 2.12 or later (tried {candidates:?}; too old: {seen:?}): run \
         scripts/nats.sh, which installs one into /var/tmp/nats-venv, or set \
         EVENTMESH_NATS_SERVER to a nats-server binary"
    );
}

/// A directory under the system's temporary directory, unique to this
/// process and call.
fn unique_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "eventmesh-nats-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create the server's directory");
    dir
}

/// One running `nats-server -js`.
pub struct NatsServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server and waits until it greets clients with JetStream on.
    /// A port taken by another process between its choice and the bind
    /// makes the server exit at once: then it starts again on a new port
    /// (three attempts).
    pub fn start() -> NatsServer {
        let mut server = NatsServer {
            port: 0,
            dir: unique_dir(),
            child: None,
        };
        for _ in 0..3 {
            server.port = super::free_port();
            server.spawn();
            if server.wait_ready(READY_WITHIN) {
                return server;
            }
            server.kill();
        }
        panic!(
            "nats-server did not become ready; its log:\n{}",
            server.log()
        );
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's store and log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("open the server's log");
        let child = Command::new(binary())
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string()])
            .arg("-sd")
            .arg(self.dir.join("store"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
    }

    /// True once a client is greeted with an `INFO` announcing JetStream;
    /// false when the process exits first or `within` passes.
    fn wait_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(None)) => {}
                _ => return false,
            }
            if self.greets() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Connects and reads the server's first line.
    fn greets(&self) -> bool {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        if BufReader::new(stream).read_line(&mut line).is_err() {
            return false;
        }
        line.starts_with("INFO ") && line.contains("\"jetstream\":true")
    }

    /// `SIGKILL`s the server and waits for it to be gone (its store stays).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store, and waits until
    /// it is ready.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        if !self.wait_ready(READY_WITHIN) {
            panic!(
                "nats-server did not come back on port {}; its log:\n{}",
                self.port,
                self.log()
            );
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_from_the_banner() {
        assert_eq!(parse_version("nats-server: v2.12.1\n"), Some((2, 12)));
        assert_eq!(parse_version("nats-server: v2.9.25"), Some((2, 9)));
        assert_eq!(parse_version("nats-server: v10.0.0-beta"), Some((10, 0)));
        assert_eq!(parse_version("nothing here"), None);
    }
}
