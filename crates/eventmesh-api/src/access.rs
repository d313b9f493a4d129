//! The runtime's [`TopicAccess`] seam, implemented with the security gate:
//! a topic a pattern subscription would attach is decided by the gate's
//! ACL as the `SUBSCRIBE` operation on that topic, for the identity stored
//! on the subscription (tenant, principal, roles), audited over transport
//! `pattern` and counted in `eventmesh_gate_denied_total{reason}` like
//! every decision of the gate.
//!
//! A subscription with neither tenant nor principal was made by the
//! runtime's own system principals or while the gate was off: nothing is
//! checked for it, as nothing was when it was made. A permissive gate
//! lets a denied topic through, counted and audited as
//! `allow_permissive`, as it does every other request.

use std::sync::Arc;

use eventmesh_runtime::TopicAccess;
use eventmesh_security::{Identity, Operation, SecurityGate, Transport};
use eventmesh_state::Subscription;

/// [`TopicAccess`] by the security gate's ACL.
pub struct GateAccess {
    gate: Arc<SecurityGate>,
}

impl GateAccess {
    pub fn new(gate: Arc<SecurityGate>) -> Self {
        GateAccess { gate }
    }
}

impl TopicAccess for GateAccess {
    fn may_attach(&self, sub: &Subscription, topic: &str) -> bool {
        if !self.gate.is_enabled() || (sub.tenant.is_none() && sub.principal.is_none()) {
            return true;
        }
        let identity = Identity {
            tenant: sub.tenant.clone(),
            principal: sub.principal.clone(),
            roles: sub.roles.clone(),
        };
        match self
            .gate
            .authorize(Transport::Pattern, Operation::Subscribe, &identity, topic)
        {
            Ok(_) => true,
            Err(d) => {
                tracing::warn!(client = %sub.client_id, pattern = %sub.topic, topic, reason = d.reason, "{}", d.message);
                false
            }
        }
    }
}
