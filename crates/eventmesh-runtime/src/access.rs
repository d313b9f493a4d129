//! The seam through which the runtime asks whether a subscription's
//! creator may consume a topic: the runtime holds no security gate (the
//! operation layer does), yet it attaches topics to pattern subscriptions
//! long after the subscribe that passed the gate. It is handed a
//! [`TopicAccess`] at boot; the operation layer implements it with the
//! gate's ACL for the identity stored on the subscription.
//!
//! Invariant: a topic is attached to a pattern subscription only once
//! [`TopicAccess::may_attach`] allowed it; the implementation records each
//! decision (audit, `eventmesh_gate_denied_total`), and the runtime asks
//! once per subscription and topic until the topic goes or the
//! subscription changes.

use eventmesh_state::Subscription;

/// Decides whether a subscription may follow a concrete topic.
pub trait TopicAccess: Send + Sync + 'static {
    /// Whether the creator of `sub` (its tenant, principal and roles as
    /// stored) may consume `topic`, a topic its pattern matches. Called as
    /// the runtime attaches the topic; the decision is recorded by the
    /// implementation.
    fn may_attach(&self, sub: &Subscription, topic: &str) -> bool;
}

/// Attaches every topic: a runtime without a security gate.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unchecked;

impl TopicAccess for Unchecked {
    fn may_attach(&self, _sub: &Subscription, _topic: &str) -> bool {
        true
    }
}
