//! The operation layer: every operation a client can ask for, whatever the
//! transport. A transport decodes its wire form, calls one function here,
//! and encodes the answer:
//!
//! ```text
//! HTTP / SSE / WebSocket / TCP ──decode──▶ Api::<operation>(caller, request)
//!        ├─ SecurityGate (authentication, signature, ACL, quota, audit)
//!        ├─ creator checks (client ids, deliveries, replies)
//!        └─ Runtime ──▶ log, dispatchers, mailboxes
//!   ◀──encode── answer, or ApiError (one table: error.rs)
//! ```
//!
//! Invariants:
//! - One door: every transport and every internal consumer reaches the
//!   runtime only through an operation here. The A2A gateway publishes and
//!   consumes as the system principal `system:a2a` ([`System`]), which no
//!   request from the wire can claim: gated (taken as authenticated, no ACL or quota),
//!   audited, traced and counted like any caller. The operator's routes and
//!   the connector runtime's bookkeeping use [`Api::admin`], the internal
//!   cluster routes [`Api::internal`]; nothing else gets at the runtime.
//! - No operation reaches the runtime without passing the gate; a session
//!   (TCP connection, WebSocket) authenticates once when it opens, and each
//!   of its requests is still checked by the ACL and quotas and audited.
//! - A client id belongs to its creator (the tenant and principal that
//!   created it): polls, streams, subscribes and unsubscribes by another
//!   creator are refused (`not_owner`) under a fail-closed gate, and
//!   counted under a permissive one.
//! - A delivery is settled only by the creator of the client it was handed
//!   to; under a fail-closed gate a foreign id is answered exactly like an
//!   unknown one. A reply is accepted only from the creator of a client the
//!   request was handed to, and needs the right to consume the request's
//!   topic.

mod access;
mod browse;
mod caller;
mod error;
mod handles;
mod ops;
pub mod push;
pub mod subscriptions;
mod webhook;
pub mod wire;

use std::sync::Arc;

use eventmesh_runtime::{Creator, Runtime, WebhookGuard};
use eventmesh_security::{Frame, Identity, Operation, RequestContext, SecurityGate, Transport};
use tokio_util::sync::CancellationToken;

pub use access::GateAccess;
pub use axum::http::StatusCode;
pub use browse::Browse;
pub use caller::{Admitted, Caller, Signed, System};
pub use error::ApiError;
pub use handles::{AdminOps, InternalOps};
pub use ops::{Session, Stream};

/// The operation layer, shared by every transport.
#[derive(Clone)]
pub struct Api {
    runtime: Arc<Runtime>,
    gate: Arc<SecurityGate>,
    /// The ranges a webhook may not reach (checked again on every push).
    webhook_guard: Arc<WebhookGuard>,
    shutdown: CancellationToken,
}

/// What a request asks the gate about.
pub struct Ask<'a> {
    pub operation: Operation,
    pub topic: Option<&'a str>,
    /// For a subscribe: the subscription's quota key.
    pub subscription: Option<String>,
    /// The raw request, as signed.
    pub raw: &'a [u8],
    /// Events the request publishes.
    pub events: u32,
}

impl<'a> Ask<'a> {
    pub fn new(operation: Operation, topic: Option<&'a str>, raw: &'a [u8]) -> Self {
        Ask {
            operation,
            topic,
            subscription: None,
            raw,
            events: 0,
        }
    }
}

/// Client ids the mesh's own consumers (the A2A gateway's) subscribe
/// under: no caller but a system principal may subscribe, poll or stream
/// as one, so that nobody takes over their client ids or their deliveries.
pub const RESERVED_CLIENTS: [&str; 2] = ["a2a-gateway", "a2a-push"];

/// Requests one connection may have under way at once (TCP and
/// WebSocket); reading pauses at the limit.
pub const MAX_PIPELINE: usize = 1024;

/// How long a request waits for its reply when the requester names no
/// time (HTTP `timeoutMs`, a TCP `REQUEST`'s wait of 0).
pub const DEFAULT_REQUEST_WAIT_MS: u64 = 30_000;

/// The quota key of a subscription.
pub fn quota_key(group: &str, topic: &str, client: &str) -> String {
    format!("{group}/{topic}/{client}")
}

/// The frame fields an HTTP request's signature covers, from `signed`.
pub(crate) fn signed_frame(signed: Option<&Signed>) -> Frame<'_> {
    let Some(s) = signed else {
        return Frame::default();
    };
    Frame {
        timestamp: s.timestamp.as_deref(),
        signature: s.signature.as_deref(),
        method: Some(&s.method),
        path: Some(&s.path),
        query: s.query.as_deref(),
        headers: s
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect(),
        ..Frame::default()
    }
}

impl Api {
    pub fn new(
        runtime: Arc<Runtime>,
        gate: Arc<SecurityGate>,
        webhook_guard: Arc<WebhookGuard>,
        shutdown: CancellationToken,
    ) -> Self {
        Api {
            runtime,
            gate,
            webhook_guard,
            shutdown,
        }
    }

    /// The operator's view and controls (admin routes, connector
    /// bookkeeping).
    pub fn admin(&self) -> AdminOps<'_> {
        AdminOps(&self.runtime)
    }

    /// What other instances ask of this one (internal cluster routes).
    pub fn internal(&self) -> InternalOps<'_> {
        InternalOps(&self.runtime)
    }

    /// This instance's id in the cluster (`None` without ownership).
    pub fn instance_id(&self) -> Option<&str> {
        self.runtime.instance_id()
    }

    /// One POST to a webhook through the runtime's webhook client (its SSRF
    /// guard, TLS settings and timeout), for the runtime's own pushes that
    /// are not event deliveries (A2A push notifications).
    pub async fn post_webhook(
        &self,
        url: &str,
        delivery_id: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<(), String> {
        self.runtime
            .post_webhook(url, delivery_id, headers, body)
            .await
    }

    /// Cancelled when the server shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    fn context(&self, caller: &Caller, operation: Operation) -> RequestContext {
        if let Some(system) = caller.system_principal() {
            let mut ctx = RequestContext::new(Transport::Internal, operation);
            ctx.identity = Identity::system(system.principal());
            ctx.authenticated = true;
            return ctx;
        }
        // Only a caller the server made as a system principal is one.
        let transport = match caller.transport {
            Transport::Internal => Transport::Http,
            t => t,
        };
        let mut ctx = RequestContext::new(transport, operation);
        ctx.credential = caller.credential.clone();
        ctx.remote = caller.remote;
        ctx.certificate = caller.certificate.clone();
        if let Some(identity) = &caller.session {
            ctx.identity = (**identity).clone();
            ctx.authenticated = true;
        }
        ctx
    }

    /// The creator recorded for what `caller` creates. The runtime's own
    /// (a system principal) is the creator with no tenant and no principal,
    /// which no client has under an enabled gate.
    fn creator_of(&self, caller: &Caller, admission: &eventmesh_security::Admission) -> Creator {
        if !self.gate.is_enabled() || caller.system_principal().is_some() {
            return Creator::default();
        }
        let id = &admission.identity;
        Creator {
            tenant: Some(id.tenant_or_default().to_string()),
            principal: id.principal.clone(),
        }
    }

    /// Runs the gate for one request.
    pub fn admit(&self, caller: &Caller, ask: Ask) -> Result<Admitted, ApiError> {
        if !self.gate.is_enabled() {
            return Ok(Admitted {
                admission: Default::default(),
                creator: Creator::default(),
            });
        }
        let mut ctx = self.context(caller, ask.operation);
        ctx.topic = ask.topic.map(str::to_string);
        ctx.subscription = ask.subscription;
        let signed = caller.signed.as_ref();
        let frame = Frame {
            body: ask.raw,
            events: ask.events,
            ..signed_frame(signed)
        };
        let admission = self.gate.check(&ctx, &frame)?;
        let creator = self.creator_of(caller, &admission);
        Ok(Admitted { admission, creator })
    }

    /// Whether the caller passes the gate's authentication, without
    /// recording a decision: for a request that must know who calls before
    /// it looks further, and then runs [`Self::admit`] once.
    pub fn authenticates(&self, caller: &Caller, raw: &[u8]) -> bool {
        if !self.gate.is_enabled() {
            return true;
        }
        let ctx = self.context(caller, Operation::Subscribe);
        let frame = Frame {
            body: raw,
            ..signed_frame(caller.signed.as_ref())
        };
        self.gate.authenticates(&ctx, &frame)
    }

    /// A creator refusal, counted under its code like the gate's own
    /// denials: a fail-closed gate answers it, a permissive one logs it and
    /// lets the request through.
    fn refuse(&self, e: ApiError) -> Result<(), ApiError> {
        self.runtime
            .metrics()
            .gate_denied
            .get_or_create(&vec![("reason".to_string(), e.code.to_string())])
            .inc();
        if self.gate.is_fail_closed() {
            return Err(e);
        }
        tracing::warn!(code = e.code, "{} (permissive gate: allowed)", e.message);
        Ok(())
    }

    /// The caller may act on `client`: it is not one of the mesh's own
    /// ([`RESERVED_CLIENTS`], whatever the gate), and it has no creator yet,
    /// or the caller is its creator.
    async fn check_client(
        &self,
        caller: &Caller,
        admitted: &Admitted,
        client: &str,
    ) -> Result<(), ApiError> {
        if RESERVED_CLIENTS.contains(&client) && caller.system_principal().is_none() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "reserved_client",
                format!("the client id {client:?} is reserved for the mesh's own consumers"),
            ));
        }
        if !self.gate.is_enabled() {
            return Ok(());
        }
        match self.runtime.client_creator(client).await {
            Some(creator) if creator != admitted.creator => self.refuse(ApiError::new(
                StatusCode::FORBIDDEN,
                "not_owner",
                format!("client {client:?} was created by another tenant or principal"),
            )),
            _ => Ok(()),
        }
    }
}
