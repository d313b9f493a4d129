//! `/mcp` on the traffic port: the MCP gateway ([`eventmesh_mcp`]) over
//! Streamable HTTP (`POST` messages, `GET` the session's stream, `DELETE`
//! the session).
//!
//! Each request's caller is built as every traffic route builds it (its
//! bearer credential, address and client certificate) and put into the
//! request with the body, so that each tool runs the gate as that caller.
//! Before the MCP service sees a request:
//! - a fail-closed gate turns away a caller without an accepted credential
//!   (401 with `{"error","message"}`, like every route);
//! - a new session past `eventmesh.mcp.sessions.max` is refused (503
//!   `mcp_sessions_full`);
//! - a body past `eventmesh.http.max.body.bytes` is refused (413).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use eventmesh_api::ApiError;
use eventmesh_mcp::{Mcp, RequestCaller, Service, Settings};

use super::traffic::Req;
use super::AppState;

/// An agent tool waits this much longer than the A2A task timeout, so that
/// the gateway's own timeout settles the task first.
const TASK_MARGIN: Duration = Duration::from_secs(5);

/// The `/mcp` route, unless `eventmesh.mcp.enabled=false` (then `/mcp` is
/// an unknown route).
pub fn routes(state: &AppState) -> Router<AppState> {
    let cfg = &state.config;
    if !cfg.mcp.enabled {
        return Router::new();
    }
    let mcp = Mcp::new(
        state.api.clone(),
        state.a2a.clone(),
        Settings {
            max_sessions: cfg.mcp.sessions_max as usize,
            session_idle: cfg.mcp.session_idle,
            task_timeout: cfg.a2a.task_timeout + TASK_MARGIN,
            max_body_bytes: cfg.server.http.max_body_bytes,
        },
    );
    let service = mcp.service();
    let limit = cfg.server.http.max_body_bytes;
    Router::new().route(
        "/mcp",
        any(move |r: Req, req: Request| serve(mcp.clone(), service.clone(), limit, r, req)),
    )
}

/// Whether a message body is an `initialize` request (one that opens a
/// session).
fn opens_session(raw: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(raw)
        .ok()
        .is_some_and(|v| v.get("method").and_then(|m| m.as_str()) == Some("initialize"))
}

async fn serve(mcp: Arc<Mcp>, service: Service, limit: usize, r: Req, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let raw = match axum::body::to_bytes(body, limit).await {
        Ok(raw) => raw,
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the request body is over {limit} bytes or could not be read"),
            )
            .into_response()
        }
    };
    if mcp.api().turns_away(&r.caller, &raw) {
        return ApiError::unauthorized(
            "the MCP endpoint needs a credential the gate accepts (Authorization: Bearer <token>)",
        )
        .into_response();
    }
    let new_session = parts.method == axum::http::Method::POST
        && !parts.headers.contains_key("mcp-session-id")
        && opens_session(&raw);
    if new_session && !mcp.has_room().await {
        let mut response = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "mcp_sessions_full",
            "this instance has as many MCP sessions open as it takes (eventmesh.mcp.sessions.max); try again later",
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        return response;
    }
    parts.extensions.insert(RequestCaller {
        caller: r.caller,
        raw: raw.clone(),
    });
    let req = Request::from_parts(parts, Body::from(raw));
    service.handle(req).await.map(Body::new).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_initialize_opens_a_session() {
        assert!(opens_session(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#
        ));
        assert!(!opens_session(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
        ));
        assert!(!opens_session(b"not json"));
    }
}
