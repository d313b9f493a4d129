//! The operation layer: every operation a client can ask for, whatever the
//! transport. A transport decodes its wire form, calls one function here,
//! and encodes the answer:
//!
//! ```text
//! HTTP / SSE / WebSocket / TCP ──decode──▶ Api::<operation>(caller, request)
//!        ├─ SecurityGate (authentication, signature, ACL, quota, audit)
//!        ├─ ownership (client ids, deliveries, replies)
//!        └─ Runtime ──▶ log, dispatchers, mailboxes
//!   ◀──encode── answer, or ApiError (one table: error.rs)
//! ```
//!
//! Invariants:
//! - No operation reaches the runtime without passing the gate; a session
//!   (TCP connection, WebSocket) authenticates once when it opens, and each
//!   of its requests is still checked by the ACL and quotas and audited.
//! - A client id belongs to the owner (tenant and principal) that created
//!   it: polls, streams, subscribes and unsubscribes by another owner are
//!   refused (`not_owner`) under a fail-closed gate, and counted under a
//!   permissive one.
//! - A delivery is settled only by an owner of the client it was handed
//!   to; under a fail-closed gate a foreign id is answered exactly like an
//!   unknown one. A reply is accepted only from an owner of a client the
//!   request was handed to, and needs the right to consume the request's
//!   topic.

mod caller;
mod error;
mod ops;
mod webhook;
pub mod wire;

use std::sync::Arc;

use eventmesh_runtime::{Owner, Runtime, WebhookGuard};
use eventmesh_security::{Frame, Operation, RequestContext, SecurityGate};
use tokio_util::sync::CancellationToken;

pub use caller::{Admitted, Caller, Signed};
pub use error::ApiError;
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
pub(crate) struct Ask<'a> {
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

/// Requests one connection may have under way at once (TCP and
/// WebSocket); reading pauses at the limit.
pub const MAX_PIPELINE: usize = 1024;

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

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Cancelled when the server shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    fn context(&self, caller: &Caller, operation: Operation) -> RequestContext {
        let mut ctx = RequestContext::new(caller.transport, operation);
        ctx.credential = caller.credential.clone();
        ctx.remote = caller.remote;
        ctx.certificate = caller.certificate.clone();
        if let Some(identity) = &caller.session {
            ctx.identity = (**identity).clone();
            ctx.authenticated = true;
        }
        ctx
    }

    fn owner_of(&self, admission: &eventmesh_security::Admission) -> Owner {
        if !self.gate.is_enabled() {
            return Owner::default();
        }
        let id = &admission.identity;
        Owner {
            tenant: Some(id.tenant_or_default().to_string()),
            principal: id.principal.clone(),
        }
    }

    /// Runs the gate for one request.
    pub(crate) fn admit(&self, caller: &Caller, ask: Ask) -> Result<Admitted, ApiError> {
        if !self.gate.is_enabled() {
            return Ok(Admitted {
                admission: Default::default(),
                owner: Owner::default(),
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
        let owner = self.owner_of(&admission);
        Ok(Admitted { admission, owner })
    }

    /// An ownership refusal, counted under its code like the gate's own
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

    /// The caller may act on `client`: it has no owner yet, or the caller's.
    async fn check_client(&self, admitted: &Admitted, client: &str) -> Result<(), ApiError> {
        if !self.gate.is_enabled() {
            return Ok(());
        }
        match self.runtime.client_owner(client).await {
            Some(owner) if owner != admitted.owner => self.refuse(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "not_owner",
                format!("client {client:?} belongs to another tenant or principal"),
            )),
            _ => Ok(()),
        }
    }
}
