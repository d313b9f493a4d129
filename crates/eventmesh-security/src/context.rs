//! What a transport tells the gate about a request, and what the gate
//! answers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// What the request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    Publish,
    Subscribe,
    Ack,
    A2a,
    Connector,
    Admin,
}

impl Operation {
    pub const ALL: [Operation; 6] = [
        Operation::Publish,
        Operation::Subscribe,
        Operation::Ack,
        Operation::A2a,
        Operation::Connector,
        Operation::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Publish => "PUBLISH",
            Operation::Subscribe => "SUBSCRIBE",
            Operation::Ack => "ACK",
            Operation::A2a => "A2A",
            Operation::Connector => "CONNECTOR",
            Operation::Admin => "ADMIN",
        }
    }

    /// Case-insensitive.
    pub fn parse(text: &str) -> Option<Operation> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str().eq_ignore_ascii_case(text))
    }
}

/// The transport the request came over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Http,
    Sse,
    WebSocket,
    Tcp,
    /// The A2A gRPC binding (its own listener).
    Grpc,
    /// The MQTT listener.
    Mqtt,
    /// A connector of the runtime's own, acting as its configured principal.
    Connector,
    /// Work of the runtime's own, done as a system principal (the A2A
    /// gateway's inbox messages, push notifications and internal
    /// consumers). No request from the wire has it: the server gives it
    /// only to callers it makes itself. The gate takes the identity as
    /// given, applies no ACL or quota, and audits the request like any
    /// other.
    Internal,
    /// A topic the runtime attaches to a pattern subscription: decided for
    /// the identity stored with the subscription (tenant, principal,
    /// roles) by the filters that do not authenticate (the ACL), with no
    /// quota ([`crate::SecurityGate::authorize`]).
    Pattern,
}

/// Who is asking, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    pub tenant: Option<String>,
    pub principal: Option<String>,
    pub roles: Vec<String>,
}

impl Identity {
    /// The identity of a system principal (`system:<name>`): no tenant, the
    /// role `system`. Only requests of [`Transport::Internal`] are taken as
    /// one.
    pub fn system(principal: &str) -> Identity {
        Identity {
            tenant: None,
            principal: Some(principal.to_string()),
            roles: vec!["system".to_string()],
        }
    }

    /// The tenant, or [`crate::ANONYMOUS_TENANT`].
    pub fn tenant_or_default(&self) -> &str {
        self.tenant.as_deref().unwrap_or(crate::ANONYMOUS_TENANT)
    }
}

/// One request as the gate sees it. Filters fill in `identity`.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub identity: Identity,
    /// The bearer credential, as presented.
    pub credential: Option<String>,
    pub remote: Option<SocketAddr>,
    /// Who the connection's verified client certificate names (mutual
    /// TLS): the caller's identity unless a bearer credential names one.
    pub certificate: Option<Arc<Identity>>,
    pub transport: Transport,
    pub operation: Operation,
    /// The topic the request concerns; `None` for requests that name none
    /// (poll, ack), which ACL rules match whatever their topic pattern.
    pub topic: Option<String>,
    /// For a subscribe: the subscription's key, counted against the
    /// tenant's subscription quota unless it exists already.
    pub subscription: Option<String>,
    /// The request belongs to a session (a TCP connection, a WebSocket)
    /// that authenticated when it opened: `identity` is taken as given, the
    /// authentication filters are skipped, and no connection slot is taken
    /// (the session holds one).
    pub authenticated: bool,
}

impl RequestContext {
    pub fn new(transport: Transport, operation: Operation) -> Self {
        RequestContext {
            identity: Identity::default(),
            credential: None,
            remote: None,
            certificate: None,
            transport,
            operation,
            topic: None,
            subscription: None,
            authenticated: false,
        }
    }
}

/// The request as the signature filter and quotas need it: what a request
/// signature covers (see [`crate::signature::canonical`]) and the number of
/// events it publishes.
#[derive(Debug, Clone, Default)]
pub struct Frame<'a> {
    /// The raw body, exactly as received.
    pub body: &'a [u8],
    /// `x-em-timestamp`.
    pub timestamp: Option<&'a str>,
    /// `x-em-signature`.
    pub signature: Option<&'a str>,
    /// Events the request publishes (for the publish rate).
    pub events: u32,
    /// The request method (`POST`), when the transport has one.
    pub method: Option<&'a str>,
    /// The request path as received, still percent-encoded
    /// (`/events/publish`).
    pub path: Option<&'a str>,
    /// The raw query string, without the `?` (`topic=orders`).
    pub query: Option<&'a str>,
    /// Every `ce-*` header as received, name lower-case, value as sent
    /// (still percent-encoded), in the order received.
    pub headers: Vec<(&'a str, &'a str)>,
}

/// Why a request was refused; mapped to 401, 403 or 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyKind {
    Authentication,
    Authorization,
    Quota,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub kind: DenyKind,
    /// A short machine-readable reason, also the metric label.
    pub reason: &'static str,
    pub message: String,
    /// For quota denials: when to try again.
    pub retry_after: Option<Duration>,
}

impl Denial {
    pub fn new(kind: DenyKind, reason: &'static str, message: impl Into<String>) -> Self {
        Denial {
            kind,
            reason,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn authentication(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(DenyKind::Authentication, reason, message)
    }

    pub fn authorization(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(DenyKind::Authorization, reason, message)
    }

    /// The HTTP status that answers it.
    pub fn status(&self) -> u16 {
        match self.kind {
            DenyKind::Authentication => 401,
            DenyKind::Authorization => 403,
            DenyKind::Quota => 429,
        }
    }
}
