//! The web dashboard on the admin port: `/ui` (its page), `/ui/app.js` and
//! `/ui/style.css`, compiled into the binary so it works offline. The
//! assets are public (they hold no data); every request the page makes is
//! to the admin API with the token the operator signs in with, which the
//! page keeps for its tab only (`sessionStorage`).

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("../../ui/index.html");
const APP: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/style.css");

/// Strict enough that the page runs only its own script and talks only to
/// its own origin.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

pub async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `/ui` → `/ui/`, so that the page's relative asset paths resolve.
pub async fn to_index() -> Redirect {
    Redirect::permanent("/ui/")
}

pub async fn app() -> Response {
    asset(APP, "text/javascript; charset=utf-8")
}

pub async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
