//! The one error type of the SDK.

use std::error::Error as StdError;

/// Everything a call to the eventmesh server can fail with.
///
/// ```
/// use eventmesh_client::Error;
///
/// let e = Error::from_api_body(404, br#"{"error":"unknown_delivery","message":"gone"}"#);
/// assert_eq!(e.code(), Some("unknown_delivery"));
/// assert_eq!(e.status(), Some(404));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection could be made (refused, DNS failure, connect timeout).
    #[error("cannot reach the eventmesh server at {server}: {cause}")]
    Unreachable { server: String, cause: String },
    /// The server answered with an error (`{"error": code, "message": text}`).
    /// `status` is 0 when the error came over WebSocket or TCP.
    #[error("{message} ({code}{})", http_suffix(*.status))]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer in time (client-side timeout, or a request-reply that got
    /// `408 request_timeout`).
    #[error("timed out")]
    Timeout,
    /// The server said something the SDK does not understand, or an
    /// established connection broke.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A bad argument given to the SDK (server URL, event that is not a
    /// JSON object, ...). Nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

fn http_suffix(status: u16) -> String {
    if status == 0 {
        String::new()
    } else {
        format!(", HTTP {status}")
    }
}

/// Shorthand for `Result<T, eventmesh_client::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds [`Error::Api`] from an error answer's status and body. Bodies
    /// that are not the server's JSON shape still give a useful error.
    pub fn from_api_body(status: u16, body: &[u8]) -> Error {
        #[derive(serde::Deserialize)]
        struct Body {
            error: String,
            #[serde(default)]
            message: String,
        }
        match serde_json::from_slice::<Body>(body) {
            Ok(b) => Error::Api {
                status,
                message: if b.message.is_empty() {
                    b.error.clone()
                } else {
                    b.message
                },
                code: b.error,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let message = if text.is_empty() {
                    format!("HTTP {status} with no body")
                } else {
                    let mut t: String = text.chars().take(512).collect();
                    if t.len() < text.len() {
                        t.push('…');
                    }
                    t
                };
                Error::Api {
                    status,
                    code: format!("http_{status}"),
                    message,
                }
            }
        }
    }

    /// The server's error code, for [`Error::Api`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, for [`Error::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True for [`Error::Unreachable`].
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Unreachable { .. })
    }

    /// Worth retrying later: unreachable, timed out, broken connection, or
    /// a 5xx / 429 answer.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::Timeout | Error::Protocol(_) => true,
            Error::Api { status, .. } => *status >= 500 || *status == 429,
            Error::InvalidArgument(_) => false,
        }
    }

    pub(crate) fn unreachable(server: impl Into<String>, cause: &(dyn StdError + 'static)) -> Self {
        Error::Unreachable {
            server: server.into(),
            cause: root_cause(cause),
        }
    }

    /// Maps a reqwest failure; `server` names the server in the message.
    pub(crate) fn from_reqwest(server: &str, e: reqwest::Error) -> Self {
        if let Some(tls) = tls_failure(&e) {
            Error::Unreachable {
                server: server.to_string(),
                cause: tls,
            }
        } else if e.is_connect() {
            Error::unreachable(server, &e)
        } else if closed_before_sending(&e) {
            // The connection was gone before the request went out: with
            // TLS 1.3, also how a server's refusal of the handshake (a
            // client certificate it requires) can show.
            Error::Unreachable {
                server: server.to_string(),
                cause: "the server closed the connection before the request was sent".into(),
            }
        } else if e.is_timeout() {
            Error::Timeout
        } else if e.is_builder() {
            Error::InvalidArgument(chain(&e))
        } else {
            Error::Protocol(format!("request to {server} failed: {}", chain(&e)))
        }
    }

    /// Maps an I/O failure of a connection attempt.
    pub(crate) fn connect_io(server: &str, e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::TimedOut => Error::Unreachable {
                server: server.to_string(),
                cause: "connect timed out".into(),
            },
            _ => Error::unreachable(server, &e),
        }
    }
}

/// The error chain says the connection closed before the request was
/// written (hyper's "canceled": the connection was not ready).
fn closed_before_sending(e: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// What failed in TLS, when an error chain holds a TLS failure: a refused
/// handshake (a fatal alert, such as a client certificate the server
/// requires) or a server certificate this client does not trust. With TLS
/// 1.3 a server's refusal can arrive after the request went out, so it is
/// looked for in every failure, not only in connect errors.
pub(crate) fn tls_failure(e: &(dyn StdError + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(t) = tls {
            return Some(format!("TLS: {t}"));
        }
        cur = err.source();
    }
    None
}

/// The innermost message of an error chain ("Connection refused (os error
/// 111)" rather than "error sending request for url ...").
pub(crate) fn root_cause(e: &(dyn StdError + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Every message of an error chain, joined with `: `, without repeats.
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !parts.iter().any(|p| p.contains(&m)) {
            parts.push(m);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_json_error_body() {
        let e = Error::from_api_body(
            400,
            br#"{"error":"invalid_event","message":"missing required attribute id"}"#,
        );
        match &e {
            Error::Api {
                status,
                code,
                message,
            } => {
                assert_eq!(*status, 400);
                assert_eq!(code, "invalid_event");
                assert_eq!(message, "missing required attribute id");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "missing required attribute id (invalid_event, HTTP 400)"
        );
        assert!(!e.is_transient());
    }

    #[test]
    fn maps_odd_bodies() {
        let e = Error::from_api_body(502, b"<html>bad gateway</html>");
        assert_eq!(e.code(), Some("http_502"));
        assert!(e.to_string().contains("bad gateway"));
        assert!(e.is_transient());
        let e = Error::from_api_body(503, b"");
        assert!(e.to_string().contains("no body"), "{e}");
        let e = Error::from_api_body(404, br#"{"error":"not_found"}"#);
        assert_eq!(e.code(), Some("not_found"));
        assert_eq!(e.to_string(), "not_found (not_found, HTTP 404)");
        let long = "x".repeat(2000);
        let e = Error::from_api_body(500, long.as_bytes());
        assert!(e.to_string().len() < 600);
    }

    #[test]
    fn unreachable_message_uses_root_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = Error::connect_io("http://127.0.0.1:1", io);
        assert!(e.is_unreachable());
        assert_eq!(
            e.to_string(),
            "cannot reach the eventmesh server at http://127.0.0.1:1: Connection refused"
        );
    }
}
