//! Audit sinks: one record per gate decision, and one per failed attempt
//! at a credential checked outside the gate (the admin token, the cluster
//! secret: [`CredentialFailure`]). The default writes a log line (target
//! `eventmesh::audit`); [`FileAuditSink`] appends JSON lines to a file. A
//! sink that fails is reported by the gate at ERROR and never blocks the
//! request.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Serialize;

use crate::context::{Operation, Transport};

/// One decision of the gate.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry<'a> {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    pub operation: Operation,
    pub transport: Transport,
    pub tenant: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub topic: Option<&'a str>,
    /// `allow`, `deny`, or `allow_permissive` (denied by a filter, let
    /// through because the gate is not fail-closed).
    pub verdict: &'static str,
    /// Empty when allowed.
    pub reason: &'static str,
    pub remote: Option<String>,
}

/// A refused attempt at the admin token or the cluster secret. Never
/// carries the credential presented.
#[derive(Debug, Clone, Serialize)]
pub struct CredentialFailure<'a> {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// Always `credential_failure`, which tells these lines from the
    /// gate's decisions in one file.
    pub kind: &'static str,
    /// `admin` (the admin port) or `internal` (the cluster's routes).
    pub listener: &'static str,
    /// The request's path.
    pub route: &'a str,
    /// `missing`, `bad_token` or `limited`.
    pub reason: &'static str,
    pub remote: Option<String>,
}

impl<'a> CredentialFailure<'a> {
    pub fn new(
        listener: &'static str,
        route: &'a str,
        reason: &'static str,
        remote: Option<String>,
    ) -> Self {
        CredentialFailure {
            ts_ms: crate::gate::now_ms(),
            kind: "credential_failure",
            listener,
            route,
            reason,
            remote,
        }
    }
}

pub trait AuditSink: Send + Sync {
    fn record(&self, entry: &AuditEntry) -> Result<(), String>;

    /// Records a refused admin-token or cluster-secret attempt; by
    /// default as a log line, as [`LoggingAuditSink`] does.
    fn record_credential_failure(&self, failure: &CredentialFailure) -> Result<(), String> {
        LoggingAuditSink.record_credential_failure(failure)
    }
}

/// Logs each decision at INFO (denials at WARN) under `eventmesh::audit`.
pub struct LoggingAuditSink;

impl AuditSink for LoggingAuditSink {
    fn record(&self, e: &AuditEntry) -> Result<(), String> {
        let op = e.operation.as_str();
        let (tenant, principal, topic) = (
            e.tenant.unwrap_or("-"),
            e.principal.unwrap_or("-"),
            e.topic.unwrap_or("-"),
        );
        let remote = e.remote.as_deref().unwrap_or("-");
        if e.verdict == "allow" {
            tracing::info!(target: "eventmesh::audit", operation = op, tenant, principal, topic, verdict = e.verdict, remote, "gate decision");
        } else {
            tracing::warn!(target: "eventmesh::audit", operation = op, tenant, principal, topic, verdict = e.verdict, reason = e.reason, remote, "gate decision");
        }
        Ok(())
    }

    fn record_credential_failure(&self, f: &CredentialFailure) -> Result<(), String> {
        let remote = f.remote.as_deref().unwrap_or("-");
        tracing::warn!(target: "eventmesh::audit", listener = f.listener, route = f.route, reason = f.reason, remote, "credential failure");
        Ok(())
    }
}

/// Appends one JSON object a line to a file, opened on first use and
/// opened again after a failure.
pub struct FileAuditSink {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl FileAuditSink {
    pub fn new(path: PathBuf) -> Self {
        FileAuditSink {
            path,
            file: Mutex::new(None),
        }
    }
}

impl AuditSink for FileAuditSink {
    fn record(&self, entry: &AuditEntry) -> Result<(), String> {
        self.append(entry)
    }

    fn record_credential_failure(&self, failure: &CredentialFailure) -> Result<(), String> {
        self.append(failure)
    }
}

impl FileAuditSink {
    /// Writes `record` as one JSON line.
    fn append(&self, record: &impl Serialize) -> Result<(), String> {
        let mut line = serde_json::to_vec(record).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut file = self.file.lock().expect("audit lock");
        if file.is_none() {
            *file = Some(
                File::options()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(|e| format!("cannot open {}: {e}", self.path.display()))?,
            );
        }
        let result = file.as_mut().expect("opened above").write_all(&line);
        result.map_err(|e| {
            *file = None;
            format!("cannot write {}: {e}", self.path.display())
        })
    }
}
