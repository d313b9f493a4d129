//! The security gate in front of every ingress route.
//!
//! [`SecurityGate::check`] runs the filter chain ([`TokenAuthFilter`] →
//! [`SignatureVerifierFilter`] → [`AclFilter`]), then the tenant quota
//! ([`TenantQuotaManager`]), then the audit sink. Each filter is a type
//! behind the [`Filter`] trait, so a new one drops in without touching the
//! gate. With nothing configured the gate is a no-op that allows all.

pub mod acl;
pub mod audit;
pub mod context;
pub mod failures;
pub mod gate;
pub mod quota;
pub mod replay;
pub mod signature;
pub mod token;

pub use acl::AclFilter;
pub use audit::{AuditEntry, AuditSink, CredentialFailure, FileAuditSink, LoggingAuditSink};
pub use context::{Denial, DenyKind, Frame, Identity, Operation, RequestContext, Transport};
pub use failures::FailureLimiter;
pub use gate::{Admission, Filter, GateError, GateMetrics, SecurityGate};
pub use quota::{ConnectionPermit, TenantQuotaManager};
pub use signature::SignatureVerifierFilter;
pub use token::TokenAuthFilter;

/// The tenant of requests that carry no credential.
pub const ANONYMOUS_TENANT: &str = "default";

/// Reads a configuration file of the gate, naming it in the error.
fn read_file(what: &str, path: &std::path::Path) -> Result<String, GateError> {
    std::fs::read_to_string(path).map_err(|e| GateError::File {
        what: what.to_string(),
        path: path.to_path_buf(),
        cause: e.to_string(),
    })
}

/// Non-empty lines that are not comments, with their 1-based numbers.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}
