//! The server under test: the real binary started on ephemeral ports with
//! a temporary data directory, its listeners found in its log, stopped by
//! a real SIGTERM or SIGKILL.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{bin, kill_and_reap, send_signal, wait_child, TOKEN};

pub struct Server {
    child: Option<Child>,
    pub data_dir: PathBuf,
    pub traffic: String,
    pub admin: String,
    /// `HOST:PORT` of the TCP protocol when it is on.
    pub tcp: Option<String>,
    pub log: Arc<Mutex<Vec<String>>>,
    defines: Vec<String>,
    _cwd: tempfile::TempDir,
}

/// The URL of the `what` HTTP listener, from its log line: `https://` when
/// the line says it serves TLS.
fn find_addr(line: &str, what: &str) -> Option<String> {
    let marker = format!("{what} HTTP listening on ");
    let i = line.find(&marker)?;
    let rest = &line[i + marker.len()..];
    // Ends where the address does (a space, or a quote in a JSON line).
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    let scheme = if rest[addr.len()..].starts_with(" (TLS)") {
        "https"
    } else {
        "http"
    };
    (!addr.is_empty()).then(|| format!("{scheme}://{addr}"))
}

/// `HOST:PORT` from the TCP listener's log line.
fn find_tcp_addr(line: &str) -> Option<String> {
    let marker = "TCP listening on ";
    let rest = &line[line.find(marker)? + marker.len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    (!addr.is_empty()).then_some(addr)
}

/// The port of an `http(s)://HOST:PORT` or `HOST:PORT` address.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

impl Server {
    /// Starts a server on `data_dir` with extra `key=value` settings.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::spawn(data_dir, Self::defines(data_dir, extra))
    }

    /// [`Server::start`] with settings held as `String`s (or `&str`s).
    pub fn start_with(data_dir: &Path, settings: &[impl AsRef<str>]) -> Server {
        let extra: Vec<&str> = settings.iter().map(AsRef::as_ref).collect();
        Self::start(data_dir, &extra)
    }

    /// The settings of a test server: ephemeral ports, the data dir, the
    /// admin token, short delivery timers, then `extra`.
    fn defines(data_dir: &Path, extra: &[&str]) -> Vec<String> {
        let mut defines: Vec<String> = vec![
            "eventmesh.storage.type=standalone".into(),
            "eventmesh.server.http.port=0".into(),
            "eventmesh.server.admin.port=0".into(),
            "eventmesh.server.tcp.port=off".into(),
            format!("eventmesh.data.dir={}", data_dir.display()),
            format!("eventmesh.admin.token={TOKEN}"),
            "eventmesh.delivery.backoff.initial.ms=50".into(),
            "eventmesh.delivery.backoff.max.ms=200".into(),
            "eventmesh.offset.flush.interval.ms=50".into(),
            // A test that stops with deliveries in hand waits this long.
            "eventmesh.shutdown.grace.ms=1000".into(),
        ];
        defines.extend(extra.iter().map(|s| s.to_string()));
        defines
    }

    /// Starts a server like [`Server::start`] under the descriptor limits
    /// `soft` and `hard` (`RLIMIT_NOFILE`, set by the shell that execs it).
    pub fn start_with_nofile(data_dir: &Path, extra: &[&str], soft: u64, hard: u64) -> Server {
        Self::spawn_with(data_dir, Self::defines(data_dir, extra), Some((soft, hard)))
    }

    fn spawn(data_dir: &Path, defines: Vec<String>) -> Server {
        Self::spawn_with(data_dir, defines, None)
    }

    fn spawn_with(data_dir: &Path, defines: Vec<String>, nofile: Option<(u64, u64)>) -> Server {
        let cwd = tempfile::tempdir().unwrap();
        let mut cmd = match nofile {
            None => Command::new(bin()),
            Some((soft, hard)) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!(
                        "ulimit -S -n {soft} && ulimit -H -n {hard} && exec \"$0\" \"$@\""
                    ))
                    .arg(bin());
                sh
            }
        };
        cmd.arg("serve").current_dir(cwd.path());
        for d in &defines {
            cmd.arg("-D").arg(d);
        }
        // `EVENTMESH_TEST_RUST_LOG` raises the level when chasing a rare
        // failure; `EVENTMESH_TEST_LOG_DIR` keeps every process's log in a
        // file of its own there (named after its pid).
        let level = std::env::var("EVENTMESH_TEST_RUST_LOG").unwrap_or_else(|_| "info".into());
        let mut child = cmd
            .env("RUST_LOG", level)
            // The harness's own settings: not the server's to warn about.
            .env_remove("EVENTMESH_TEST_RUST_LOG")
            .env_remove("EVENTMESH_TEST_LOG_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn eventmesh");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let mut copy = std::env::var_os("EVENTMESH_TEST_LOG_DIR").map(|d| {
            let path = Path::new(&d).join(format!("eventmesh-{}.log", child.id()));
            std::io::BufWriter::new(std::fs::File::create(path).expect("a log file"))
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = copy.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                    let _ = f.flush();
                }
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let tcp_on = defines
            .iter()
            .rev()
            .find_map(|d| d.strip_prefix("eventmesh.server.tcp.port="))
            .is_some_and(|v| v != "off");
        let (mut traffic, mut admin, mut tcp) = (None, None, None);
        while traffic.is_none() || admin.is_none() || (tcp_on && tcp.is_none()) {
            for line in log.lock().unwrap().iter() {
                traffic = traffic.or_else(|| find_addr(line, "traffic"));
                admin = admin.or_else(|| find_addr(line, "admin"));
                tcp = tcp.or_else(|| find_tcp_addr(line));
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "eventmesh exited early with {status}:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
            assert!(Instant::now() < deadline, "eventmesh did not start in time");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            traffic: traffic.unwrap(),
            admin: admin.unwrap(),
            tcp,
            log,
            defines,
            _cwd: cwd,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to 10 s) for a log line containing every one of `parts`;
    /// the log is read by a thread, so a line may lag the answer it
    /// accompanies.
    pub fn wait_for_log(&self, parts: &[&str]) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| parts.iter().all(|p| l.contains(p)));
            if found || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait()
    }

    /// SIGKILL: no graceful close at all.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        kill_and_reap(&mut child);
    }

    /// Waits up to 30 s for the exit; kills and panics past that.
    fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        match wait_child(&mut child, Duration::from_secs(30)) {
            Some(status) => status,
            None => {
                kill_and_reap(&mut child);
                panic!("eventmesh did not stop in time:\n{}", self.log_text());
            }
        }
    }

    /// Starts a new process on the same data dir and settings.
    pub fn restart(&mut self) -> Server {
        if self.child.is_some() {
            self.stop();
        }
        Self::spawn(&self.data_dir.clone(), self.defines.clone())
    }

    /// Starts a new process on the same data dir and settings, listening
    /// on the ports the previous one had (so clients that hold its URLs
    /// reconnect to the new one).
    pub fn restart_on_same_ports(&mut self) -> Server {
        self.restart_on_same_ports_with(&[] as &[String])
    }

    /// [`Server::restart_on_same_ports`] with `extra` settings last (the
    /// port of a listener the server does not report, say).
    pub fn restart_on_same_ports_with(&mut self, extra: &[impl AsRef<str>]) -> Server {
        if self.child.is_some() {
            self.stop();
        }
        let mut defines = self.defines.clone();
        defines.push(format!(
            "eventmesh.server.http.port={}",
            port_of(&self.traffic)
        ));
        defines.push(format!(
            "eventmesh.server.admin.port={}",
            port_of(&self.admin)
        ));
        if let Some(tcp) = &self.tcp {
            defines.push(format!("eventmesh.server.tcp.port={}", port_of(tcp)));
        }
        defines.extend(extra.iter().map(|e| e.as_ref().to_string()));
        Self::spawn(&self.data_dir.clone(), defines)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.traffic)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("{}{path}", self.admin)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            // Bounded: a drop must not hang the test either.
            let _ = wait_child(&mut c, Duration::from_secs(10));
        }
    }
}

impl Server {
    /// A signal to the server process (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, sig: &str) {
        send_signal(self.pid(), sig);
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.wait()
    }
}

impl Server {
    /// `HOST:PORT` of the gRPC listener (`eventmesh.server.grpc.port`) and
    /// whether it serves TLS, from its log line; `None` when the server
    /// is ready without one (the listener is off). Waits up to 30 s.
    pub fn grpc_addr(&self) -> Option<(String, bool)> {
        self.listener_addr("gRPC")
    }

    /// `HOST:PORT` of the MQTT listener (`eventmesh.server.mqtt.port`) and
    /// whether it serves TLS, like [`Server::grpc_addr`].
    pub fn mqtt_addr(&self) -> Option<(String, bool)> {
        self.listener_addr("MQTT")
    }

    /// The port of the MQTT listener; panics when it is off.
    pub fn mqtt_port(&self) -> u16 {
        let (addr, _) = self.mqtt_addr().expect("the MQTT listener is on");
        port_of(&addr)
    }

    /// The address of the listener whose log line says `<what> listening
    /// on`, and whether it serves TLS.
    fn listener_addr(&self, what: &str) -> Option<(String, bool)> {
        let marker = format!("{what} listening on ");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (found, ready) = {
                let log = self.log.lock().unwrap();
                let found = log.iter().find_map(|line| {
                    let rest = &line[line.find(&marker)? + marker.len()..];
                    let addr: String = rest
                        .chars()
                        .take_while(|c| {
                            c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')
                        })
                        .collect();
                    let tls = rest[addr.len()..].starts_with(" (TLS)");
                    (!addr.is_empty()).then_some((addr, tls))
                });
                (found, log.iter().any(|l| l.contains("eventmesh ready")))
            };
            if found.is_some() || ready {
                return found;
            }
            assert!(Instant::now() < deadline, "no {what} listener line in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port of the gRPC listener; panics when it is off.
    pub fn grpc_port(&self) -> u16 {
        let (addr, _) = self.grpc_addr().expect("the gRPC listener is on");
        port_of(&addr)
    }
}
