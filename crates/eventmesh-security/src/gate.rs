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
#[path = "gate_tests.rs"]
mod tests;
