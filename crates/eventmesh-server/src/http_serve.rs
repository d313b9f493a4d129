//! Serving an HTTP port (traffic or admin): HTTP/1.1 connections from an
//! [`Incoming`] handed to an axum router through hyper, with the timeouts
//! that keep a client from holding a connection without using it:
//!
//! - header: a connection must send a complete request header within
//!   `header` of its accept, and a later request within `header` of its
//!   first byte;
//! - idle: a kept-alive connection with no request under way and no byte of
//!   the next one is closed after `idle`;
//! - body: a request body must be whole `body` after its header arrived,
//!   else the request is answered `408 request_timeout` and the connection
//!   closed.
//!
//! All three are deadlines: bytes trickling in do not extend them. A
//! request being answered (a long poll, an SSE stream) is never cut by
//! them, and a WebSocket leaves them behind at its upgrade. The state of a
//! connection is one [`Phase`]; every event that changes it (a read, a
//! request, the end of an answer) happens while the connection's future is
//! polled, so the deadline is re-armed right after each poll.
//!
//! Shutdown: once the token is cancelled no connection is accepted, idle
//! ones close, requests under way are answered, and [`serve`] returns when
//! every connection is gone (upgraded WebSockets excepted: they end with
//! the runtime's drain).

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use crate::conn::{OnRead, Watched};
use crate::limits::{Admission, Permit, Refusal};
use crate::tls::{Incoming, Io, Peer};
use eventmesh_api::ApiError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The HTTP ports' timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    pub body: Duration,
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepted at `since`, no request yet.
    New { since: Instant },
    /// Its last answer ended at `since`; no byte of another request since.
    Idle { since: Instant },
    /// The first bytes of a later request arrived at `since`.
    Head { since: Instant },
    /// A request is being served: its body read, its answer written.
    Busy,
}

/// Why a connection's deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Header,
    Idle,
}

impl Phase {
    /// Bytes arrived at `now`.
    pub fn on_bytes(self, now: Instant) -> Phase {
        match self {
            Phase::Idle { .. } => Phase::Head { since: now },
            other => other,
        }
    }

    /// A complete request header was read.
    pub fn on_request(self) -> Phase {
        Phase::Busy
    }

    /// The answer to the request under way ended at `now`.
    pub fn on_answered(self, now: Instant) -> Phase {
        Phase::Idle { since: now }
    }

    /// When the connection is closed unless something happens first.
    pub fn deadline(self, t: &Timeouts) -> Option<(Instant, Expiry)> {
        match self {
            Phase::New { since } | Phase::Head { since } => {
                Some((since + t.header, Expiry::Header))
            }
            Phase::Idle { since } => Some((since + t.idle, Expiry::Idle)),
            Phase::Busy => None,
        }
    }
}

/// A connection's phase, shared by its stream, its requests and its
/// answers.
struct Watch(Mutex<Phase>);

impl Watch {
    fn update(&self, f: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.0.lock().expect("phase lock");
        *phase = f(*phase);
    }

    fn get(&self) -> Phase {
        *self.0.lock().expect("phase lock")
    }
}

/// The connection's reads move its phase on.
impl OnRead for Arc<Watch> {
    fn on_read(
        &mut self,
        _: &mut Context<'_>,
        read: &Poll<std::io::Result<()>>,
        got: usize,
    ) -> Option<std::io::Error> {
        if matches!(read, Poll::Ready(Ok(()))) && got > 0 {
            self.update(|p| p.on_bytes(Instant::now()));
        }
        None
    }
}

/// The request body did not arrive whole in time.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimedOut {}

/// A request body that must end by a deadline; past it, it fails and says
/// so through `expired`.
struct DeadlineBody<B> {
    inner: B,
    deadline: Instant,
    /// Made at the first wait only: a body already here needs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    expired: Arc<AtomicBool>,
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            Poll::Ready(None) => {
                this.sleep = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.expired.store(true, Ordering::Release);
                        Poll::Ready(Some(Err(BodyTimedOut.into())))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body; when it ends (or is dropped), the connection is idle.
struct Answer<B> {
    inner: B,
    watch: Arc<Watch>,
}

impl<B> Drop for Answer<B> {
    fn drop(&mut self) {
        self.watch.update(|p| p.on_answered(Instant::now()));
    }
}

impl<B> HttpBody for Answer<B>
where
    B: HttpBody + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on the connections of `incoming` until `shutdown` is
/// cancelled and every connection has ended.
pub async fn serve(
    mut incoming: Incoming,
    router: Router,
    timeouts: Timeouts,
    shutdown: CancellationToken,
) {
    // Every connection task holds a sender; all gone, all ended.
    let (running, mut all_ended) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            a = incoming.next() => a,
            _ = shutdown.cancelled() => None,
        };
        let Some((io, peer, permit)) = accepted else {
            break;
        };
        tokio::spawn(connection(
            Conn {
                io,
                peer,
                permit,
                router: router.clone(),
                timeouts,
                admission: incoming.admission().clone(),
                shutdown: shutdown.clone(),
            },
            running.clone(),
        ));
    }
    // Stops the accept loop.
    drop(incoming);
    drop(running);
    let _ = all_ended.recv().await;
}

struct Conn {
    io: Io,
    peer: Peer,
    permit: Permit,
    router: Router,
    timeouts: Timeouts,
    admission: Admission,
    shutdown: CancellationToken,
}

/// How a connection's future ended.
enum Ended {
    Served(Result<(), hyper::Error>),
    Expired(Expiry),
}

async fn connection(c: Conn, _running: mpsc::Sender<()>) {
    let Conn {
        io,
        peer,
        permit,
        router,
        timeouts,
        admission,
        shutdown,
    } = c;
    let remote = peer.addr;
    let watch = Arc::new(Watch(Mutex::new(Phase::New {
        since: permit.accepted(),
    })));
    let io = TokioIo::new(Watched::new(io, watch.clone(), permit));
    let service = {
        let watch = watch.clone();
        let admission = admission.clone();
        let router = TowerToHyperService::new(router);
        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let (router, watch, admission, peer) = (
                router.clone(),
                watch.clone(),
                admission.clone(),
                peer.clone(),
            );
            async move {
                watch.update(Phase::on_request);
                let expired = Arc::new(AtomicBool::new(false));
                let deadline = Instant::now() + timeouts.body;
                let mut req = req.map(|inner| DeadlineBody {
                    inner,
                    deadline,
                    sleep: None,
                    expired: expired.clone(),
                });
                req.extensions_mut().insert(ConnectInfo(peer));
                let answer = match hyper::service::Service::call(&router, req).await {
                    Ok(answer) => answer,
                    Err(never) => match never {},
                };
                let answer = if expired.load(Ordering::Acquire) {
                    admission.refused(Refusal::TimeoutBody);
                    body_timed_out(timeouts.body)
                } else {
                    answer
                };
                Ok::<_, Infallible>(answer.map(|inner| Answer { inner, watch }))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The deadlines here replace hyper's own header timer.
    builder.header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection(io, service).with_upgrades());
    let mut stopping = pin!(shutdown.cancelled_owned());
    let mut stopped = false;
    let mut timer = pin!(tokio::time::sleep_until(Instant::now()));
    let mut armed: Option<Instant> = None;
    let ended = poll_fn(|cx| {
        if !stopped && stopping.as_mut().poll(cx).is_ready() {
            stopped = true;
            conn.as_mut().graceful_shutdown();
        }
        if let Poll::Ready(r) = conn.as_mut().poll(cx) {
            return Poll::Ready(Ended::Served(r));
        }
        // Whatever changed the phase happened in the poll just made.
        let Some((at, why)) = watch.get().deadline(&timeouts) else {
            armed = None;
            return Poll::Pending;
        };
        if armed != Some(at) {
            timer.as_mut().reset(at);
            armed = Some(at);
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Ended::Expired(why)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    match ended {
        Ended::Served(Ok(())) => {}
        Ended::Served(Err(e)) => tracing::debug!(%remote, error = %e, "HTTP connection failed"),
        Ended::Expired(Expiry::Header) => {
            admission.refused(Refusal::TimeoutHeader);
            tracing::debug!(%remote, "no complete request header in time; closing the connection");
        }
        Ended::Expired(Expiry::Idle) => {
            tracing::trace!(%remote, "idle connection closed");
        }
    }
}

/// The answer to a request whose body did not arrive in time; the
/// connection closes after it (the rest of the body is not read).
fn body_timed_out(allowed: Duration) -> Response<axum::body::Body> {
    let mut answer = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request body did not arrive within {} ms of its header",
            allowed.as_millis()
        ),
    )
    .into_response();
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        body: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_has_the_header_timeout_from_its_accept() {
        let accepted = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        // Bytes of the first request do not move its deadline.
        let p = Phase::New { since: accepted }.on_bytes(Instant::now());
        assert_eq!(p.deadline(&T), Some((accepted + T.header, Expiry::Header)));
        assert_eq!(p.on_request().deadline(&T), None);
    }

    #[tokio::test(start_paused = true)]
    async fn between_requests_the_idle_timeout_then_the_header_one_from_the_first_byte() {
        let answered = Instant::now();
        let idle = Phase::Busy.on_answered(answered);
        assert_eq!(idle.deadline(&T), Some((answered + T.idle, Expiry::Idle)));
        tokio::time::advance(Duration::from_secs(50)).await;
        let first_byte = Instant::now();
        let head = idle.on_bytes(first_byte);
        assert_eq!(
            head.deadline(&T),
            Some((first_byte + T.header, Expiry::Header))
        );
        // More bytes of the same header do not extend it.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(head.on_bytes(Instant::now()), head);
        assert_eq!(head.on_request(), Phase::Busy);
        // Bytes while busy (the body) change nothing.
        assert_eq!(Phase::Busy.on_bytes(Instant::now()), Phase::Busy);
    }

    /// One byte every 200 ms, for ever.
    struct Trickle(Pin<Box<Sleep>>);

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let this = self.get_mut();
            std::task::ready!(this.0.as_mut().poll(cx));
            let next = this.0.deadline() + Duration::from_millis(200);
            this.0.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_fails_at_its_deadline() {
        let started = Instant::now();
        let expired = Arc::new(AtomicBool::new(false));
        let mut body = pin!(DeadlineBody {
            inner: Trickle(Box::pin(tokio::time::sleep(Duration::from_millis(200)))),
            deadline: started + Duration::from_secs(1),
            sleep: None,
            expired: expired.clone(),
        });
        let mut bytes = 0;
        let failed = loop {
            match poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                Some(Ok(_)) => bytes += 1,
                Some(Err(e)) => break e,
                None => panic!("the trickle ended"),
            }
        };
        assert_eq!(
            failed.to_string(),
            "the request body did not arrive in time"
        );
        assert!(expired.load(Ordering::Acquire));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        // Bytes came in meanwhile; they did not extend the deadline.
        assert!((4..=5).contains(&bytes), "{bytes}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_already_here_needs_no_timer() {
        let mut body = pin!(DeadlineBody {
            inner: axum::body::Body::from("whole"),
            deadline: Instant::now(),
            sleep: None,
            expired: Arc::new(AtomicBool::new(false)),
        });
        let frame = poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
        assert_eq!(frame.unwrap().unwrap().into_data().unwrap(), "whole");
        assert!(body.sleep.is_none());
    }
}
