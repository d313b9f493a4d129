//! A real MQTT broker for tests: `mosquitto` (Debian package `mosquitto`,
//! `/usr/sbin/mosquitto`, or `$EVENTMESH_MOSQUITTO`) on a free loopback
//! port, anonymous, with persistence in a fresh directory under the system
//! temp dir, so that [`Mosquitto::restart`] (a clean stop, which saves the
//! sessions, then a start on the same port and directory) keeps persistent
//! sessions and their queued messages. Ready once a TCP client's MQTT 3.1.1 `CONNECT` is
//! answered with an accepting `CONNACK`; killed (SIGKILL) and its directory
//! removed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where Debian installs the broker.
pub const BINARY: &str = "/usr/sbin/mosquitto";

const READY_WITHIN: Duration = Duration::from_secs(20);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A running `mosquitto`.
pub struct Mosquitto {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Mosquitto {
    /// Starts a broker on a free port.
    ///
    /// # Panics
    /// When the binary is missing or the broker does not answer in time.
    pub fn start() -> Mosquitto {
        Self::launch(None)
    }

    /// Starts a broker that applies `acl` (mosquitto's `acl_file` syntax;
    /// rules before any `user` line bind anonymous clients).
    pub fn start_with_acl(acl: &str) -> Mosquitto {
        Self::launch(Some(acl))
    }

    fn launch(acl: Option<&str>) -> Mosquitto {
        let binary = Self::binary();
        let port = super::free_port();
        let dir = std::env::temp_dir().join(format!(
            "eventmesh-mosquitto-{}-{}-{port}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory for mosquitto");
        // `user root` keeps the broker from switching to the `mosquitto`
        // user, which could not write the directory, when tests run as root.
        let conf = format!(
            "listener {port} 127.0.0.1\n\
             allow_anonymous true\n\
             persistence true\n\
             persistence_location {}/\n\
             user root\n\
             max_queued_messages 10000\n\
             log_dest file {}\n\
             log_type error\nlog_type warning\nlog_type notice\nlog_type information\n",
            dir.display(),
            dir.join("mosquitto.log").display(),
        );
        let conf = match acl {
            Some(acl) => {
                let path = dir.join("acl");
                std::fs::write(&path, acl).expect("acl written");
                format!("{conf}acl_file {}\n", path.display())
            }
            None => conf,
        };
        std::fs::write(dir.join("mosquitto.conf"), conf).expect("mosquitto.conf written");
        let mut broker = Mosquitto {
            child: None,
            port,
            dir,
        };
        broker.spawn(&binary);
        broker
    }

    fn binary() -> PathBuf {
        let path = std::env::var_os("EVENTMESH_MOSQUITTO")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(BINARY));
        if !path.exists() {
            panic!(
                "{} not found: install the Debian package `mosquitto` (apt-get install mosquitto)",
                path.display()
            );
        }
        path
    }

    fn spawn(&mut self, binary: &PathBuf) {
        let child = Command::new(binary)
            .arg("-c")
            .arg(self.dir.join("mosquitto.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if self.answers() {
                return;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "mosquitto exited with {status} before answering; log:\n{}",
                        self.log()
                    );
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "mosquitto did not answer on port {} within {READY_WITHIN:?}; log:\n{}",
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Whether an MQTT 3.1.1 CONNECT (clean session) is accepted.
    fn answers(&self) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let id = b"eventmesh-probe";
        let mut packet = vec![0x10, (12 + id.len()) as u8];
        packet.extend_from_slice(&[0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 10]);
        packet.extend_from_slice(&[0, id.len() as u8]);
        packet.extend_from_slice(id);
        if stream.write_all(&packet).is_err() {
            return false;
        }
        let mut connack = [0u8; 4];
        let accepted = stream.read_exact(&mut connack).is_ok() && connack == [0x20, 2, 0, 0];
        // DISCONNECT, so the broker logs a clean goodbye.
        let _ = stream.write_all(&[0xe0, 0]);
        accepted
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("mosquitto.log")).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Kills the broker (SIGKILL: sessions changed since the last save are
    /// lost) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the broker cleanly (SIGTERM: it saves its sessions), waiting
    /// for it to exit, and starts it again on the same port and directory.
    pub fn restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + READY_WITHIN;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(25)),
                }
            }
        }
        self.spawn(&Self::binary());
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
