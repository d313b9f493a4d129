//! Reloads without a restart (SIGHUP, `POST /admin/reload`). The
//! configuration is read again from the sources the process started with
//! (the properties file, the environment, `-D` flags), and its security
//! gate part (token file, JWT keys, signature secrets, ACL file, quotas,
//! audit file, fail-closed mode) replaces the gate in force, and the TLS
//! certificate, key and client CA files are read again. Other keys
//! that changed are named as needing a restart, not applied. A reload that
//! fails (a malformed file, an invalid value) keeps everything as it was
//! and says why.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use eventmesh_core::config::Config;
use eventmesh_security::SecurityGate;

use crate::tls::ServerTls;
use serde::Serialize;

/// Keys a reload applies.
const APPLIED_PREFIX: &str = "eventmesh.security.gate.";

/// Where the configuration came from at start.
pub struct Sources {
    pub file: Option<PathBuf>,
    pub defines: Vec<String>,
}

/// What a reload did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reloaded {
    pub status: &'static str,
    /// Keys whose value changed but which take effect only at a restart.
    pub restart_needed: Vec<String>,
}

pub struct Reloader {
    sources: Sources,
    gate: Arc<SecurityGate>,
    tls: Option<Arc<ServerTls>>,
    /// The configuration in force: the start's, with the gate part of
    /// every reload since.
    current: Mutex<Config>,
}

impl Reloader {
    pub fn new(
        sources: Sources,
        gate: Arc<SecurityGate>,
        tls: Option<Arc<ServerTls>>,
        config: Config,
    ) -> Reloader {
        Reloader {
            sources,
            gate,
            tls,
            current: Mutex::new(config),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        self.current.lock().expect("config lock").clone()
    }

    /// Reads the configuration again and applies its gate part; `Err`
    /// says why nothing changed.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let loaded = crate::boot::load_config(self.sources.file.clone(), &self.sources.defines)
            .map_err(|e| e.to_string())?;
        let next = loaded.config;
        // Both parts load before either is applied: a failure changes
        // nothing.
        let tls = self.tls.as_ref().map(|t| t.prepare()).transpose()?;
        self.gate.reload(&next.gate).map_err(|e| e.to_string())?;
        if let Some(tls) = tls {
            tls.apply();
        }
        let mut current = self.current.lock().expect("config lock");
        let restart_needed: Vec<String> = current
            .changed_keys(&next)
            .into_iter()
            .filter(|key| !key.starts_with(APPLIED_PREFIX))
            .map(str::to_string)
            .collect();
        current.gate = next.gate;
        if restart_needed.is_empty() {
            tracing::info!("configuration reloaded: security gate and TLS files applied");
        } else {
            tracing::warn!(?restart_needed, "configuration reloaded: security gate and TLS files applied; other changed keys need a restart");
        }
        Ok(Reloaded {
            status: "reloaded",
            restart_needed,
        })
    }

    /// Reloads on every SIGHUP, logging the outcome.
    pub fn on_hangup(self: Arc<Self>) {
        #[cfg(unix)]
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut hangups = match signal(SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGHUP; reload with POST /admin/reload");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP received; reloading");
                if let Err(why) = self.reload() {
                    tracing::error!("reload failed, the settings in force stay: {why}");
                }
            }
        });
    }
}
