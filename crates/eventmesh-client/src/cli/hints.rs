//! What a failed traffic command tells a newcomer beyond the server's code:
//! a refusal of a token that was never given, and an answer from the admin
//! port where the traffic port was meant.
//!
//! The port is recognised by its answer, not guessed from its number: a
//! `404 not_found` (no such route) from a server that answers
//! `GET /admin/health` is the admin port, which serves no traffic routes.

use std::time::Duration;

use super::{Connection, Failure};
use crate::client::{EventMeshClient, DEFAULT_SERVER};
use crate::error::Error;

/// The admin port of a local server, as `eventmesh admin` defaults to it.
pub(super) const DEFAULT_ADMIN_SERVER: &str = "http://127.0.0.1:10106";

/// Error codes the gate refuses a missing or unreadable credential with
/// (over TCP and WebSocket, where no HTTP status comes with them).
const AUTHENTICATION_CODES: [&str; 3] = ["unauthorized", "missing_credential", "invalid_token"];

/// True when `e` is the server refusing to authenticate the caller.
pub(super) fn is_unauthenticated(e: &Error) -> bool {
    match e {
        Error::Api { status: 401, .. } => true,
        Error::Api {
            status: 0, code, ..
        } => AUTHENTICATION_CODES.contains(&code.as_str()),
        _ => false,
    }
}

/// True when `e` is a `404 not_found` for a route the server does not have
/// (not a 404 about an unknown topic or client).
pub(super) fn is_no_such_route(e: &Error) -> bool {
    matches!(e, Error::Api { status: 404, code, .. } if code == "not_found")
}

/// A traffic command's failure, with the hint that explains it.
pub(super) async fn explain(e: Error, connection: &Connection) -> Failure {
    let token_given = connection.token.as_deref().is_some_and(|t| !t.is_empty());
    if !token_given && is_unauthenticated(&e) {
        return failure(format!(
            "no token given (use --token or EVENTMESH_TOKEN): the server requires one ({e})"
        ));
    }
    if is_no_such_route(&e) {
        if let Ok(client) = connection.client() {
            if answers(&client, "admin/health").await {
                return failure(format!(
                    "{} looks like the admin port (404 not_found: it has no traffic routes); \
                     traffic commands use --server or EVENTMESH_SERVER (default {DEFAULT_SERVER}), \
                     `eventmesh admin` uses the admin port",
                    connection.server
                ));
            }
        }
    }
    e.into()
}

fn failure(message: String) -> Failure {
    Failure {
        message,
        status: 1,
        api_code: None,
    }
}

/// True when `GET <server>/<path>` answers with a success, within 3 s.
async fn answers(client: &EventMeshClient, path: &str) -> bool {
    let probe = client
        .http
        .get(client.endpoint(path, &[]))
        .timeout(Duration::from_secs(3))
        .send()
        .await;
    probe.is_ok_and(|r| r.status().is_success())
}
