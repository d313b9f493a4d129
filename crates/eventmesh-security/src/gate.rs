//! The gate: filter chain, then quota, then audit.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use eventmesh_core::config::GateConfig;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use thiserror::Error;

use crate::audit::{AuditEntry, AuditSink, CredentialFailure, FileAuditSink, LoggingAuditSink};
use crate::context::{Denial, Frame, Identity, RequestContext, Transport};
use crate::quota::{ConnectionPermit, TenantQuotaManager};
use crate::{AclFilter, SignatureVerifierFilter, TokenAuthFilter};

/// One step of the chain. A filter may fill in the context's identity
/// (authentication) for the filters after it.
pub trait Filter: Send + Sync {
    fn name(&self) -> &'static str;
    fn check(&self, ctx: &mut RequestContext, frame: &Frame) -> Result<(), Denial>;
    /// True for a filter that establishes who the caller is (credentials,
    /// signatures): run when a session opens, skipped for the requests of
    /// an authenticated session.
    fn authenticates(&self) -> bool {
        false
    }
    /// True for a filter whose check remembers what it saw (the signature
    /// filter's replay cache): [`SecurityGate::authenticates`] skips it, so
    /// that the request's real check does not find it replayed.
    fn remembers(&self) -> bool {
        false
    }
}

/// Which filters a gate run applies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Every filter, the quota and the audit (one request).
    Request,
    /// Only the authenticating filters, a connection slot and the audit
    /// (a session opening).
    Open,
    /// Only the filters that do not authenticate, for an identity taken as
    /// given, and the audit: no quota, no connection slot.
    Authorize,
}

/// The gate could not be built from its configuration; the runtime must not
/// start with a gate other than the one configured.
#[derive(Debug, Error)]
pub enum GateError {
    #[error("cannot read the {what} {}: {cause}", path.display())]
    File {
        what: String,
        path: PathBuf,
        cause: String,
    },
    #[error("{}, line {line}: {message}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A reload asked for what only a restart can do.
    #[error("{0}")]
    NeedsRestart(String),
}

/// `eventmesh_gate_denied_total{reason}`, registered by the caller.
pub type GateMetrics = Family<Vec<(String, String)>, Counter>;

/// What an allowed request carries on: who it is, and the connection slot
/// it holds until dropped.
#[derive(Default)]
pub struct Admission {
    pub identity: Identity,
    /// Set when a filter or quota denied the request but the gate is
    /// permissive (not fail-closed).
    pub would_deny: Option<Denial>,
    _permit: Option<ConnectionPermit>,
}

struct Inner {
    filters: Vec<Box<dyn Filter>>,
    quota: Option<TenantQuotaManager>,
    audit: Box<dyn AuditSink>,
    fail_closed: bool,
    denied: GateMetrics,
}

/// The security gate; [`SecurityGate::noop`] when nothing is configured.
/// Whether it is on is fixed for the process's life; its filters, quotas,
/// audit and mode are replaced whole by [`SecurityGate::reload`].
pub struct SecurityGate {
    inner: Option<RwLock<Arc<Inner>>>,
}

impl Inner {
    /// The gate of `cfg` (at least one filter or quota configured); with
    /// `carried`, its quotas keep counting what those counted.
    fn build(
        cfg: &GateConfig,
        denied: GateMetrics,
        carried: Option<&TenantQuotaManager>,
    ) -> Result<Inner, GateError> {
        let mut filters: Vec<Box<dyn Filter>> = Vec::new();
        if let Some(f) = TokenAuthFilter::from_config(cfg)? {
            filters.push(Box::new(f));
        }
        if let Some(f) = SignatureVerifierFilter::from_config(cfg)? {
            filters.push(Box::new(f));
        }
        if let Some(f) = AclFilter::from_config(cfg)? {
            filters.push(Box::new(f));
        }
        let audit: Box<dyn AuditSink> = match &cfg.audit_file {
            Some(p) => Box::new(FileAuditSink::new(p.clone())),
            None => Box::new(LoggingAuditSink),
        };
        let names: Vec<&str> = filters.iter().map(|f| f.name()).collect();
        let quota = TenantQuotaManager::from_config(cfg).map(|q| match carried {
            Some(old) => q.keeping(old),
            None => q,
        });
        if cfg.fail_closed {
            tracing::info!(filters = ?names, quota = quota.is_some(), "security gate on (fail-closed)");
        } else {
            tracing::warn!(filters = ?names, quota = quota.is_some(), "security gate in permissive mode (eventmesh.security.gate.failClosed=false): denials are logged, audited and counted, but requests proceed");
        }
        Ok(Inner {
            filters,
            quota,
            audit,
            fail_closed: cfg.fail_closed,
            denied,
        })
    }
}

pub(crate) use eventmesh_core::time::now_ms;

impl SecurityGate {
    /// Allows every request; audits nothing.
    pub fn noop() -> Self {
        SecurityGate { inner: None }
    }

    /// Builds the gate from its keys: the no-op gate when no filter or
    /// quota is configured. Fails on an unreadable or malformed token,
    /// secrets or key file (a malformed ACL line does not fail: it denies).
    pub fn from_config(cfg: &GateConfig, denied: GateMetrics) -> Result<Self, GateError> {
        if !cfg.any_configured() {
            tracing::info!("security gate off: no filters configured; every request is allowed");
            return Ok(Self::noop());
        }
        let inner = Inner::build(cfg, denied, None)?;
        Ok(SecurityGate {
            inner: Some(RwLock::new(Arc::new(inner))),
        })
    }

    /// Reads the gate's files and keys again (token file, JWT keys,
    /// signature secrets, ACL, quotas, audit file, mode) and replaces the
    /// gate with them; the quotas keep counting the connections open and
    /// the subscriptions held. On an error the gate in force stays. Turning
    /// the gate on or off needs a restart.
    pub fn reload(&self, cfg: &GateConfig) -> Result<(), GateError> {
        let Some(lock) = &self.inner else {
            if cfg.any_configured() {
                return Err(GateError::NeedsRestart(
                    "the security gate was off at start; turning it on needs a restart".into(),
                ));
            }
            return Ok(());
        };
        if !cfg.any_configured() {
            return Err(GateError::NeedsRestart(
                "turning the security gate off needs a restart".into(),
            ));
        }
        let old = self.current().expect("the gate is on");
        let new = Inner::build(cfg, old.denied.clone(), old.quota.as_ref())?;
        *lock.write().expect("gate lock") = Arc::new(new);
        Ok(())
    }

    /// The gate in force, when it is on.
    fn current(&self) -> Option<Arc<Inner>> {
        self.inner
            .as_ref()
            .map(|l| l.read().expect("gate lock").clone())
    }

    /// Builds a gate from parts (for tests and embedding).
    pub fn with_parts(
        filters: Vec<Box<dyn Filter>>,
        quota: Option<TenantQuotaManager>,
        audit: Box<dyn AuditSink>,
        fail_closed: bool,
        denied: GateMetrics,
    ) -> Self {
        SecurityGate {
            inner: Some(RwLock::new(Arc::new(Inner {
                filters,
                quota,
                audit,
                fail_closed,
                denied,
            }))),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Audits a refused admin-token or cluster-secret attempt: in the
    /// gate's sink when the gate is on (its audit file, when one is set),
    /// else as a log line. A failing sink is reported at ERROR.
    pub fn record_credential_failure(&self, failure: &CredentialFailure) {
        let written = match self.current() {
            Some(g) => g.audit.record_credential_failure(failure),
            None => LoggingAuditSink.record_credential_failure(failure),
        };
        if let Err(e) = written {
            tracing::error!(error = %e, "audit sink failed");
        }
    }

    /// Enabled and answering denials (not merely counting them).
    pub fn is_fail_closed(&self) -> bool {
        self.current().is_some_and(|g| g.fail_closed)
    }

    /// Runs the chain, the quota and the audit for one request. With
    /// `ctx.authenticated` (a request of an open session) the
    /// authentication filters are skipped and no connection slot is taken.
    pub fn check(&self, ctx: &RequestContext, frame: &Frame) -> Result<Admission, Denial> {
        self.run(ctx, frame, Stage::Request)
    }

    /// Opens a session (a TCP connection, a WebSocket): authenticates the
    /// caller, takes the tenant's connection slot for the session's life,
    /// and audits the open. The ACL and rate quotas are applied later, to
    /// each request of the session ([`SecurityGate::check`] with
    /// `ctx.authenticated` and the identity this returns).
    pub fn open(&self, ctx: &RequestContext, frame: &Frame) -> Result<Admission, Denial> {
        self.run(ctx, frame, Stage::Open)
    }

    /// Decides `operation` on `topic` for `identity` (one stored earlier,
    /// as the creator of a pattern subscription): the filters that do not
    /// authenticate (the ACL) run with that identity as given, no quota
    /// counts, and the decision is counted and audited over `transport` like any
    /// other. A permissive gate answers a denial with an admission whose
    /// `would_deny` says why.
    pub fn authorize(
        &self,
        transport: Transport,
        operation: crate::context::Operation,
        identity: &Identity,
        topic: &str,
    ) -> Result<Admission, Denial> {
        let mut ctx = RequestContext::new(transport, operation);
        ctx.identity = identity.clone();
        ctx.authenticated = true;
        ctx.topic = Some(topic.to_string());
        self.run(&ctx, &Frame::default(), Stage::Authorize)
    }

    /// Whether the caller passes the authenticating filters (credentials;
    /// not the signature, whose check is recorded), recording nothing: for a request that must know who
    /// calls before it looks further (a reply looked up on other
    /// instances). Its one counted and audited decision is a
    /// [`SecurityGate::check`] afterwards.
    pub fn authenticates(&self, ctx: &RequestContext, frame: &Frame) -> bool {
        let Some(g) = self.current() else {
            return true;
        };
        if ctx.transport == Transport::Internal || ctx.authenticated {
            return true;
        }
        let mut ctx = ctx.clone();
        if let Some(id) = &ctx.certificate {
            ctx.identity = (**id).clone();
        }
        g.filters
            .iter()
            .filter(|f| f.authenticates() && !f.remembers())
            .try_for_each(|f| f.check(&mut ctx, frame))
            .is_ok()
    }

    fn run(&self, ctx: &RequestContext, frame: &Frame, stage: Stage) -> Result<Admission, Denial> {
        let Some(g) = self.current() else {
            return Ok(Admission::default());
        };
        let mut ctx = ctx.clone();
        if ctx.transport == Transport::Internal {
            return Ok(Self::system(&g, &ctx));
        }
        let mut permit = None;
        let in_session = ctx.authenticated && stage != Stage::Open;
        if !in_session {
            if let Some(id) = &ctx.certificate {
                ctx.identity = (**id).clone();
            }
        }
        let outcome = g
            .filters
            .iter()
            .filter(|f| match stage {
                Stage::Open => f.authenticates(),
                Stage::Request => !(in_session && f.authenticates()),
                Stage::Authorize => !f.authenticates(),
            })
            .try_for_each(|f| f.check(&mut ctx, frame))
            .and_then(|()| match &g.quota {
                None => Ok(()),
                Some(_) if stage == Stage::Authorize => Ok(()),
                Some(q) => {
                    let tenant = ctx.identity.tenant_or_default();
                    if stage == Stage::Request {
                        // Every event a request publishes counts, whatever
                        // the operation (an A2A send is one).
                        q.publish(tenant, frame.events)?;
                        if let Some(key) = &ctx.subscription {
                            q.subscribe(tenant, key)?;
                        }
                    }
                    if !in_session {
                        permit = q.connect(tenant)?;
                    }
                    Ok(())
                }
            });
        let verdict = match (&outcome, g.fail_closed) {
            (Ok(()), _) => "allow",
            (Err(_), true) => "deny",
            (Err(_), false) => "allow_permissive",
        };
        let reason = outcome.as_ref().err().map_or("", |d| d.reason);
        if !reason.is_empty() {
            g.denied
                .get_or_create(&vec![("reason".to_string(), reason.to_string())])
                .inc();
        }
        let entry = AuditEntry {
            ts_ms: now_ms(),
            operation: ctx.operation,
            transport: ctx.transport,
            tenant: ctx.identity.tenant.as_deref(),
            principal: ctx.identity.principal.as_deref(),
            topic: ctx.topic.as_deref(),
            verdict,
            reason,
            remote: ctx.remote.map(|r| r.to_string()),
        };
        if let Err(e) = g.audit.record(&entry) {
            tracing::error!(error = %e, "audit sink failed; the request proceeds");
        }
        match outcome {
            Ok(()) => Ok(Admission {
                identity: ctx.identity,
                would_deny: None,
                _permit: permit,
            }),
            Err(d) if g.fail_closed => Err(d),
            Err(d) => Ok(Admission {
                identity: ctx.identity,
                would_deny: Some(d),
                _permit: permit,
            }),
        }
    }

    /// A request of the runtime's own (a system principal): allowed
    /// without filters or quotas, and audited.
    fn system(g: &Inner, ctx: &RequestContext) -> Admission {
        let entry = AuditEntry {
            ts_ms: now_ms(),
            operation: ctx.operation,
            transport: ctx.transport,
            tenant: ctx.identity.tenant.as_deref(),
            principal: ctx.identity.principal.as_deref(),
            topic: ctx.topic.as_deref(),
            verdict: "allow",
            reason: "",
            remote: None,
        };
        if let Err(e) = g.audit.record(&entry) {
            tracing::error!(error = %e, "audit sink failed; the request proceeds");
        }
        Admission {
            identity: ctx.identity.clone(),
            would_deny: None,
            _permit: None,
        }
    }

    /// Records a subscription the tenant now holds (for its quota).
    pub fn track_subscription(&self, tenant: &str, key: &str) {
        if let Some(q) = self.current().as_ref().and_then(|g| g.quota.as_ref()) {
            q.track_subscription(tenant, key);
        }
    }

    pub fn untrack_subscription(&self, key: &str) {
        if let Some(q) = self.current().as_ref().and_then(|g| g.quota.as_ref()) {
            q.untrack_subscription(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{DenyKind, Operation};
    use std::sync::{Arc, Mutex};

    /// Denies requests whose topic is "forbidden".
    struct TopicFilter;

    impl Filter for TopicFilter {
        fn name(&self) -> &'static str {
            "topic"
        }

        fn check(&self, ctx: &mut RequestContext, _: &Frame) -> Result<(), Denial> {
            ctx.identity.principal = Some("checked".into());
            if ctx.topic.as_deref() == Some("forbidden") {
                return Err(Denial::authorization("acl_denied", "no"));
            }
            Ok(())
        }
    }

    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

    impl AuditSink for Recorder {
        fn record(&self, e: &AuditEntry) -> Result<(), String> {
            self.0
                .lock()
                .unwrap()
                .push((e.verdict.to_string(), e.reason.to_string()));
            Ok(())
        }
    }

    struct Broken;

    impl AuditSink for Broken {
        fn record(&self, _: &AuditEntry) -> Result<(), String> {
            Err("disk on fire".into())
        }
    }

    fn ctx(topic: &str) -> RequestContext {
        let mut c = RequestContext::new(Transport::Http, Operation::Publish);
        c.topic = Some(topic.into());
        c
    }

    fn denied_count(m: &GateMetrics, reason: &str) -> u64 {
        m.get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .get()
    }

    #[test]
    fn a_system_principal_passes_without_filters_or_quota_and_is_audited() {
        let rec = Recorder::default();
        let m = GateMetrics::default();
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            None,
            Box::new(rec.clone()),
            true,
            m.clone(),
        );
        let mut c = RequestContext::new(Transport::Internal, Operation::Publish);
        c.topic = Some("forbidden".into());
        c.identity = Identity::system("system:a2a");
        let admitted = g.check(&c, &Frame::default()).unwrap();
        assert_eq!(
            admitted.identity.principal.as_deref(),
            Some("system:a2a"),
            "taken as given, not filled in by a filter"
        );
        assert_eq!(admitted.identity.tenant, None);
        assert_eq!(
            *rec.0.lock().unwrap(),
            [("allow".to_string(), String::new())]
        );
        assert_eq!(denied_count(&m, "acl_denied"), 0);
        // The same request from the wire is denied.
        let mut wire = c.clone();
        wire.transport = Transport::Http;
        assert!(g.check(&wire, &Frame::default()).is_err());
    }

    #[test]
    fn noop_allows_everything() {
        let g = SecurityGate::noop();
        assert!(!g.is_enabled());
        assert!(g.check(&ctx("forbidden"), &Frame::default()).is_ok());
    }

    #[test]
    fn fail_closed_denies_and_audits() {
        let rec = Recorder::default();
        let m = GateMetrics::default();
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            None,
            Box::new(rec.clone()),
            true,
            m.clone(),
        );
        let ok = g.check(&ctx("fine"), &Frame::default()).unwrap();
        assert_eq!(ok.identity.principal.as_deref(), Some("checked"));
        let d = g.check(&ctx("forbidden"), &Frame::default()).err().unwrap();
        assert_eq!(d.kind, DenyKind::Authorization);
        assert_eq!(denied_count(&m, "acl_denied"), 1);
        assert_eq!(
            *rec.0.lock().unwrap(),
            [
                ("allow".to_string(), String::new()),
                ("deny".to_string(), "acl_denied".to_string())
            ]
        );
    }

    #[test]
    fn permissive_lets_through_but_counts_and_audits() {
        let rec = Recorder::default();
        let m = GateMetrics::default();
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            None,
            Box::new(rec.clone()),
            false,
            m.clone(),
        );
        let a = g.check(&ctx("forbidden"), &Frame::default()).unwrap();
        assert_eq!(a.would_deny.unwrap().reason, "acl_denied");
        assert_eq!(denied_count(&m, "acl_denied"), 1);
        assert_eq!(rec.0.lock().unwrap()[0].0, "allow_permissive");
    }

    /// Authenticates: sets the principal from the credential.
    struct Credential;

    impl Filter for Credential {
        fn name(&self) -> &'static str {
            "credential"
        }

        fn authenticates(&self) -> bool {
            true
        }

        fn check(&self, ctx: &mut RequestContext, _: &Frame) -> Result<(), Denial> {
            match ctx.credential.as_deref() {
                Some(c) => {
                    ctx.identity.principal = Some(c.to_string());
                    Ok(())
                }
                None => Err(Denial::authentication("missing_credential", "who?")),
            }
        }
    }

    #[test]
    fn a_session_authenticates_once_and_each_request_still_passes_the_acl() {
        let rec = Recorder::default();
        let m = GateMetrics::default();
        let cfg = GateConfig {
            connections_max: 1,
            ..GateConfig::default()
        };
        let g = SecurityGate::with_parts(
            vec![Box::new(Credential), Box::new(TopicFilter)],
            TenantQuotaManager::from_config(&cfg),
            Box::new(rec.clone()),
            true,
            m.clone(),
        );
        // Opening runs only the authentication, on no topic.
        let mut open = ctx("forbidden");
        assert_eq!(
            g.open(&open, &Frame::default()).err().unwrap().reason,
            "missing_credential"
        );
        open.credential = Some("alice".into());
        let session = g.open(&open, &Frame::default()).unwrap();
        assert_eq!(session.identity.principal.as_deref(), Some("alice"));
        // The session holds the tenant's one connection slot.
        let mut another = ctx("fine");
        another.credential = Some("alice".into());
        let other = g.check(&another, &Frame::default()).err().unwrap();
        assert_eq!(other.reason, "connections_max");
        // Its requests skip the credential (none is sent) and take no slot,
        // but the ACL still runs.
        let mut req = ctx("fine");
        req.identity = session.identity.clone();
        req.authenticated = true;
        assert!(g.check(&req, &Frame::default()).is_ok());
        req.topic = Some("forbidden".into());
        assert_eq!(
            g.check(&req, &Frame::default()).err().unwrap().reason,
            "acl_denied"
        );
        drop(session);
        assert!(
            g.check(&another, &Frame::default()).is_ok(),
            "the slot is free again"
        );
        assert_eq!(denied_count(&m, "connections_max"), 1);
        assert_eq!(rec.0.lock().unwrap().len(), 6);
    }

    #[test]
    fn authorize_runs_only_the_acl_for_a_stored_identity_and_counts_and_audits() {
        let rec = Recorder::default();
        let m = GateMetrics::default();
        let cfg = GateConfig {
            connections_max: 1,
            ..GateConfig::default()
        };
        let gate = |fail_closed| {
            SecurityGate::with_parts(
                vec![Box::new(Credential), Box::new(TopicFilter)],
                TenantQuotaManager::from_config(&cfg),
                Box::new(rec.clone()),
                fail_closed,
                m.clone(),
            )
        };
        let closed = gate(true);
        let bob = Identity {
            tenant: Some("acme".into()),
            principal: Some("bob".into()),
            roles: vec!["reader".into()],
        };
        // No credential is asked for, and no connection slot is taken.
        let mut held = Vec::new();
        for _ in 0..3 {
            let ok = closed
                .authorize(Transport::Pattern, Operation::Subscribe, &bob, "fine")
                .unwrap();
            assert!(ok.would_deny.is_none());
            held.push(ok);
        }
        let d = closed
            .authorize(Transport::Pattern, Operation::Subscribe, &bob, "forbidden")
            .err()
            .unwrap();
        assert_eq!(d.reason, "acl_denied");
        assert_eq!(denied_count(&m, "acl_denied"), 1);
        let permissive = gate(false);
        let let_through = permissive
            .authorize(Transport::Pattern, Operation::Subscribe, &bob, "forbidden")
            .unwrap();
        assert_eq!(let_through.would_deny.unwrap().reason, "acl_denied");
        assert_eq!(denied_count(&m, "acl_denied"), 2);
        let verdicts: Vec<(String, String)> = rec.0.lock().unwrap().clone();
        assert_eq!(
            verdicts[3..],
            [
                ("deny".to_string(), "acl_denied".to_string()),
                ("allow_permissive".to_string(), "acl_denied".to_string())
            ]
        );
    }

    #[test]
    fn a_failing_audit_sink_does_not_block() {
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            None,
            Box::new(Broken),
            true,
            GateMetrics::default(),
        );
        assert!(g.check(&ctx("fine"), &Frame::default()).is_ok());
    }

    #[test]
    fn the_file_sink_writes_json_lines_and_reports_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let sink = FileAuditSink::new(path.clone());
        let entry = AuditEntry {
            ts_ms: 1,
            operation: Operation::Subscribe,
            transport: Transport::Http,
            tenant: Some("acme"),
            principal: Some("alice"),
            topic: Some("orders"),
            verdict: "deny",
            reason: "acl_denied",
            remote: Some("127.0.0.1:5000".into()),
        };
        sink.record(&entry).unwrap();
        sink.record(&entry).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["operation"], "SUBSCRIBE");
        assert_eq!(lines[0]["reason"], "acl_denied");
        // A directory where the file should be: the write fails, and says so.
        let bad = FileAuditSink::new(dir.path().to_path_buf());
        assert!(bad.record(&entry).unwrap_err().contains("cannot open"));
    }

    #[test]
    fn credential_failures_go_to_the_gates_audit_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            None,
            Box::new(FileAuditSink::new(path.clone())),
            true,
            GateMetrics::default(),
        );
        let failure = CredentialFailure::new(
            "admin",
            "/admin/topics",
            "bad_token",
            Some("127.0.0.2:40000".into()),
        );
        g.record_credential_failure(&failure);
        let text = std::fs::read_to_string(&path).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(
            line,
            serde_json::json!({
                "ts_ms": failure.ts_ms,
                "kind": "credential_failure",
                "listener": "admin",
                "route": "/admin/topics",
                "reason": "bad_token",
                "remote": "127.0.0.2:40000",
            })
        );
        // A gate that is off logs it instead; nothing to fail.
        SecurityGate::noop().record_credential_failure(&failure);
    }

    #[test]
    fn quota_runs_after_the_filters() {
        let cfg = GateConfig {
            publish_rate: 1,
            publish_burst: 1,
            ..GateConfig::default()
        };
        let g = SecurityGate::with_parts(
            vec![Box::new(TopicFilter)],
            TenantQuotaManager::from_config(&cfg),
            Box::new(Recorder::default()),
            true,
            GateMetrics::default(),
        );
        let frame = Frame {
            events: 1,
            ..Frame::default()
        };
        assert!(g.check(&ctx("fine"), &frame).is_ok());
        let d = g.check(&ctx("fine"), &frame).err().unwrap();
        assert_eq!((d.reason, d.status()), ("publish_rate", 429));
    }

    #[test]
    fn a_reload_replaces_the_gate_keeps_counting_and_a_bad_one_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, "t-alice acme alice\n").unwrap();
        let mut cfg = GateConfig {
            token_file: Some(tokens.clone()),
            fail_closed: true,
            connections_max: 1,
            ..GateConfig::default()
        };
        let gate = SecurityGate::from_config(&cfg, GateMetrics::default()).unwrap();
        let ask = |token: &str| {
            let mut c = RequestContext::new(Transport::Http, Operation::Publish);
            c.credential = Some(token.to_string());
            gate.check(&c, &Frame::default())
        };
        let held = ask("t-alice").unwrap();
        assert_eq!(held.identity.principal.as_deref(), Some("alice"));
        assert_eq!(ask("t-bob").err().unwrap().reason, "invalid_token");

        std::fs::write(&tokens, "t-alice acme alice\nt-bob globex bob\n").unwrap();
        gate.reload(&cfg).unwrap();
        assert!(ask("t-bob").is_ok(), "bob is known after the reload");
        // Alice's connection, opened before the reload, still counts.
        assert_eq!(ask("t-alice").err().unwrap().reason, "connections_max");
        drop(held);
        assert!(ask("t-alice").is_ok());

        // A malformed file: the reload fails and the gate in force stays.
        std::fs::write(&tokens, "only-a-token\n").unwrap();
        assert!(matches!(
            gate.reload(&cfg),
            Err(GateError::Malformed { line: 1, .. })
        ));
        assert!(ask("t-bob").is_ok());

        // On or off needs a restart.
        cfg.token_file = None;
        cfg.connections_max = 0;
        assert!(matches!(gate.reload(&cfg), Err(GateError::NeedsRestart(_))));
        let off = SecurityGate::noop();
        assert!(off.reload(&cfg).is_ok());
        cfg.token_file = Some(tokens);
        assert!(matches!(off.reload(&cfg), Err(GateError::NeedsRestart(_))));
    }
}
