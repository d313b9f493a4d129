//! Who is calling: what a transport knows about a request before the gate
//! has looked at it, and what the gate's admission says afterwards.

use std::net::SocketAddr;
use std::sync::Arc;

use eventmesh_runtime::trace::TransportContext;
use eventmesh_runtime::Creator;
use eventmesh_security::{Admission, Identity, Transport};

/// The signature material an HTTP request carries (`x-em-timestamp`,
/// `x-em-signature`, and what the signature covers).
#[derive(Debug, Clone, Default)]
pub struct Signed {
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Every `ce-*` header, name lower-case, value as received.
    pub headers: Vec<(String, String)>,
}

/// A principal of the runtime's own, doing work no client asked for
/// directly (the A2A gateway's messages to agents, its push notifications
/// and its consumers). The names are fixed here, and only code in the
/// process makes a caller of one ([`Caller::system`]); nothing a request
/// carries can: an identity named `system:…` presented on the wire is an
/// ordinary, unauthenticated claim. The gate takes a system caller as
/// authenticated, applies no ACL or quota to it, and audits it as
/// `system:<name>` over transport `internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct System(&'static str);

impl System {
    /// The A2A gateway.
    pub const A2A: System = System("system:a2a");

    /// Its principal name (`system:<name>`).
    pub fn principal(self) -> &'static str {
        self.0
    }
}

/// The caller of one operation, as its transport presents it.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The bearer credential (static token or JWT), as presented.
    pub credential: Option<String>,
    pub remote: Option<SocketAddr>,
    pub transport: Transport,
    /// HTTP requests only.
    pub signed: Option<Signed>,
    /// Set for the requests of a session (a TCP connection, a WebSocket)
    /// that authenticated when it opened: the gate takes this identity as
    /// given instead of authenticating every frame again.
    pub session: Option<Arc<Identity>>,
    /// The identity of the verified client certificate of the connection
    /// (mutual TLS); a bearer credential, when presented, takes precedence.
    pub certificate: Option<Arc<Identity>>,
    /// The W3C trace context the request carried besides its events (the
    /// HTTP `traceparent` and `tracestate` headers): the parent of the
    /// published events that carry none of their own.
    pub trace: Option<TransportContext>,
    /// Set only by [`Caller::system`]: a principal of the runtime's own.
    system: Option<System>,
}

impl Caller {
    pub fn new(
        transport: Transport,
        credential: Option<String>,
        remote: Option<SocketAddr>,
    ) -> Self {
        Caller {
            credential,
            remote,
            transport,
            signed: None,
            session: None,
            certificate: None,
            trace: None,
            system: None,
        }
    }

    /// The runtime's own caller `system`, over transport `internal`: for
    /// the mesh's internal consumers (the A2A gateway), never for a
    /// transport decoding a request.
    pub fn system(system: System) -> Caller {
        Caller {
            credential: None,
            remote: None,
            transport: Transport::Internal,
            signed: None,
            session: Some(Arc::new(Identity::system(system.principal()))),
            certificate: None,
            trace: None,
            system: Some(system),
        }
    }

    /// The system principal this caller is, if it is one.
    pub fn system_principal(&self) -> Option<System> {
        self.system
    }

    /// The same caller inside a session that authenticated as `identity`.
    pub fn in_session(&self, transport: Transport, identity: Identity) -> Caller {
        Caller {
            transport,
            signed: None,
            session: Some(Arc::new(identity)),
            ..self.clone()
        }
    }
}

/// An allowed request: who it is, and the connection slot it holds until
/// dropped.
pub struct Admitted {
    pub admission: Admission,
    /// The creator recorded for client ids it creates and checked for the
    /// ones it touches.
    pub creator: Creator,
}

impl Admitted {
    pub fn identity(&self) -> &Identity {
        &self.admission.identity
    }
}
