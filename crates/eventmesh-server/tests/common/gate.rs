//! A server behind the security gate: a temporary directory holding the
//! gate's files (the token file, and an ACL, signature secrets or an audit
//! file where a test asks for them) and the server's data, and the
//! settings that point the gate at them.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;

/// The gate's files and the server's data directory, in one temporary
/// directory (removed when this is dropped: drop it after the server).
pub struct GateFiles {
    pub dir: tempfile::TempDir,
}

impl GateFiles {
    /// A directory with the token file `tokens` (lines of `TOKEN TENANT
    /// PRINCIPAL [ROLE]`).
    pub fn new(tokens: &str) -> GateFiles {
        let f = GateFiles {
            dir: tempfile::tempdir().unwrap(),
        };
        f.write("tokens", tokens);
        f
    }

    /// Writes the file `name` (again); its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's data directory.
    pub fn data(&self) -> PathBuf {
        self.path("data")
    }

    /// The setting of the token file.
    pub fn token_file(&self) -> String {
        setting("eventmesh.security.gate.token.file", &self.path("tokens"))
    }

    /// The settings of a fail-closed gate with the token file.
    pub fn fail_closed(&self) -> Vec<String> {
        vec![
            self.token_file(),
            "eventmesh.security.gate.failClosed=true".to_string(),
        ]
    }

    /// Writes the ACL file; its setting.
    pub fn acl(&self, rules: &str) -> String {
        setting(
            "eventmesh.security.gate.acl.file",
            &self.write("acl", rules),
        )
    }

    /// Writes the signature secrets file (lines of `TENANT SECRET`); its
    /// setting.
    pub fn signature_secrets(&self, secrets: &str) -> String {
        setting(
            "eventmesh.security.gate.signature.secrets.file",
            &self.write("secrets", secrets),
        )
    }

    /// Where the audit file is.
    pub fn audit_path(&self) -> PathBuf {
        self.path("audit.jsonl")
    }

    /// The setting of the audit file.
    pub fn audit_file(&self) -> String {
        setting("eventmesh.security.gate.audit.file", &self.audit_path())
    }

    /// The audit file's records, in order.
    pub fn audit(&self) -> Vec<Value> {
        read_jsonl(&self.audit_path())
    }
}

/// `key=path`.
pub fn setting(key: &str, path: &Path) -> String {
    format!("{key}={}", path.display())
}

/// A server on `files`' data directory with `settings`.
pub fn start(files: &GateFiles, settings: &[String]) -> Server {
    Server::start_with(&files.data(), settings)
}

/// A server behind a fail-closed gate with `files`' token file, plus
/// `settings`.
pub fn start_closed(files: &GateFiles, settings: &[String]) -> Server {
    start(files, &[files.fail_closed(), settings.to_vec()].concat())
}

/// A server behind a permissive gate (it counts and audits denials, and
/// lets them through) with `files`' token file, plus `settings`.
pub fn start_permissive(files: &GateFiles, settings: &[String]) -> Server {
    start(
        files,
        &[vec![files.token_file()], settings.to_vec()].concat(),
    )
}
