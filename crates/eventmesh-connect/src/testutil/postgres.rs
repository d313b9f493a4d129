//! A real PostgreSQL server for tests: `initdb` into a fresh directory
//! under the system temp dir, then `postgres` on a free port of
//! 127.0.0.1 with trust authentication for the `postgres` role, fsync off.
//! The server is stopped (immediate shutdown, SIGKILL as a fallback) and
//! the directory removed on drop.
//!
//! PostgreSQL refuses to run as root; when the tests do, the data
//! directory is given to the `postgres` user and `initdb` and `postgres`
//! are started as that user (the child is the server itself, so killing it
//! kills the postmaster). The binaries are found through
//! `pg_config --bindir`, then `/usr/lib/postgresql/<version>/bin`, then
//! `PATH`; without them the launcher panics naming the Debian package
//! `postgresql`.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running (or killed) test server.
pub struct PostgresServer {
    root: PathBuf,
    bindir: PathBuf,
    port: u16,
    /// The uid and gid to run as, when the tests run as root.
    user: Option<(u32, u32)>,
    child: Option<Child>,
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Where `initdb` and `postgres` are.
fn bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has_server(&dir) {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, dir)| has_server(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return dir;
    }
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).find(|d| has_server(d)))
        .unwrap_or_else(|| {
            panic!(
                "the PostgreSQL server (initdb, postgres) is not installed: \
                 install the Debian package `postgresql`"
            )
        })
}

/// The `postgres` user's uid and gid, when this process is root.
fn run_as() -> Option<(u32, u32)> {
    let uid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if uid != 0 {
        return None;
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&"postgres") && f.len() > 3)
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
            .flatten()
    });
    Some(ids.unwrap_or_else(|| {
        panic!(
            "running as root, PostgreSQL needs the `postgres` user: \
             install the Debian package `postgresql`"
        )
    }))
}

impl PostgresServer {
    /// Initialises a data directory and starts the server; panics when it
    /// does not answer within 30 s.
    pub fn start() -> PostgresServer {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let bindir = bindir();
        let user = run_as();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let root = std::env::temp_dir().join(format!(
            "eventmesh-pg-{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(root.join("sock")).expect("create the server directory");
        if let Some((uid, gid)) = user {
            for dir in [&root, &root.join("sock")] {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid)).expect("chown to postgres");
            }
        }
        let mut server = PostgresServer {
            root,
            bindir,
            port: super::free_port(),
            user,
            child: None,
        };
        let status = server
            .command("initdb")
            .arg("-D")
            .arg(server.root.join("data"))
            .args([
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdout(server.log())
            .stderr(server.log())
            .status()
            .expect("run initdb");
        assert!(status.success(), "initdb failed:\n{}", server.log_text());
        server.restart();
        server
    }

    /// A command run as the server's user, in its directory.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bindir.join(program));
        cmd.current_dir(&self.root).stdin(Stdio::null());
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn log(&self) -> File {
        File::options()
            .create(true)
            .append(true)
            .open(self.root.join("server.log"))
            .expect("open the server log")
    }

    fn log_text(&self) -> String {
        fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once, as a crash would: SIGQUIT (immediate
    /// shutdown, no checkpoint; the next start recovers from the WAL), then
    /// waits until the postmaster has reaped its backends, so every client
    /// connection is gone; SIGKILL if that takes over 10 s. The data
    /// directory stays.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let quit = Command::new("kill")
            .args(["-s", "QUIT", &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while quit && Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn ready(&self) -> bool {
        Command::new(self.bindir.join("pg_isready"))
            .args(["-q", "-t", "1", "-h", "127.0.0.1", "-U", "postgres"])
            .arg("-p")
            .arg(self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the server again on the same port and data directory (after
    /// a kill, once the old backends are gone), and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut child = self
                .command("postgres")
                .arg("-D")
                .arg(self.root.join("data"))
                .arg("-k")
                .arg(self.root.join("sock"))
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-c", "listen_addresses=127.0.0.1", "-F"])
                .stdout(self.log())
                .stderr(self.log())
                .spawn()
                .expect("start postgres");
            loop {
                if self.ready() {
                    self.child = Some(child);
                    return;
                }
                // It exits at once while a killed server's backends still
                // hold the old shared memory: try again.
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("postgres did not answer in 30 s:\n{}", self.log_text());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if Instant::now() > deadline {
                panic!("postgres did not start in 30 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs SQL through `psql` and returns its unaligned, tuples-only output
    /// (trimmed); panics when it fails.
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(self.bindir.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-p",
                &self.port.to_string(),
                "-c",
                sql,
            ])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A fresh `tokio-postgres` connection (driven on the current runtime).
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test postgres");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.root);
    }
}
