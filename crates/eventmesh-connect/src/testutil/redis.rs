//! A real Redis server for tests: `redis-server` (Debian package
//! `redis-server`) on a free loopback port, with its data in a fresh
//! directory under the system temp dir, kept in an append-only file synced
//! on every write so that [`RedisServer::restart`] after
//! [`RedisServer::kill`] (SIGKILL) finds every acknowledged write. Ready
//! once it answers `PING`; killed and its directory removed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(20);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server without a password.
    pub fn start() -> RedisServer {
        Self::launch(None)
    }

    /// Starts a server that requires `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::launch(Some(password.to_string()))
    }

    fn launch(password: Option<String>) -> RedisServer {
        let port = super::free_port();
        let dir = std::env::temp_dir().join(format!(
            "eventmesh-redis-{}-{}-{port}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory for redis-server");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            password,
        };
        server.spawn();
        server
    }

    /// `redis://[:password@]127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/0", self.port),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again (killing it first if it runs) on the same
    /// port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("redis-server's log file");
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--daemonize")
            .arg("no")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("always")
            .arg("--logfile")
            .arg("");
        if let Some(p) = &self.password {
            cmd.arg("--requirepass").arg(p);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("the log file")))
            .stderr(Stdio::from(log));
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (Debian package `redis-server`: apt-get install redis-server)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "redis-server exited ({status}) before answering:\n{}",
                        self.log_tail()
                    );
                }
            }
            if answers_ping(addr) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "redis-server on port {} did not answer PING within {READY_TIMEOUT:?}:\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Whether a server on `addr` answers an inline `PING` (a password-protected
/// one answers `-NOAUTH`, which is as good: it is serving).
fn answers_ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(n) if n > 0 => buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"),
        _ => false,
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
