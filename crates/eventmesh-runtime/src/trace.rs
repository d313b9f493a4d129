//! Distributed tracing of an event's way through the mesh: the W3C trace
//! context carried by the CloudEvents distributed-tracing extension
//! (`traceparent`, `tracestate`), and the spans `publish`, `append`,
//! `dispatch`, `push` and `forward`.
//!
//! Every span made here has the target [`TARGET`]. The process's log
//! filter turns that target off, and only the OpenTelemetry layer (there
//! when an OTLP endpoint is configured) turns it on. Without that layer
//! each span macro gives a disabled span after one cached callsite check,
//! and every helper here returns at once on a disabled span: no
//! `traceparent` is parsed or written, and events are stored as they came.
//!
//! Invariants:
//! - a malformed or absent `traceparent` never fails an operation: it is
//!   treated as absent, and a new trace starts (a `tracestate` beside an
//!   unusable `traceparent` is dropped with it, as W3C trace context asks);
//! - with tracing on, the `traceparent` a published event is stored with
//!   names that event's `publish` span: a client's trace id is kept, its
//!   span becomes the publish span's parent, its `tracestate` is kept as
//!   sent;
//! - `append` is a child of the publish span of its batch's first event
//!   (linked to the publish spans of the others); `dispatch` is a child of
//!   the stored `traceparent`; `push` is a child of its `dispatch`, and the
//!   webhook call carries the push span as its HTTP `traceparent`;
//! - an event published without a usable `traceparent` of its own over a
//!   transport that carried a W3C trace context (HTTP `traceparent` and
//!   `tracestate` headers, [`TransportContext`]) continues that context:
//!   its publish span is a child of it and the event keeps its
//!   `tracestate`;
//!   `forward` (a delivery sent from a partition's owner to its client's
//!   home instance) is a child of the stored `traceparent`, as `dispatch`.
//!
//! Span attributes follow OpenTelemetry's messaging semantic conventions
//! (`messaging.system` is `eventmesh`, `messaging.destination.name` the
//! topic, `messaging.operation.type` and `.name`, `messaging.message.id`,
//! `messaging.consumer.group.name`, `messaging.destination.partition.id`)
//! beside the project's own (`topic`, `partition`, `offset`, `outcome`...).

use std::future::Future;
use std::str::FromStr;

use eventmesh_core::event::ExtValue;
use eventmesh_core::CloudEvent;
use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::Context;
use tracing::field::Empty;
use tracing::{info_span, Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::ingress::Published;

/// The target of every span of an event's path (see the module docs).
pub const TARGET: &str = "eventmesh::trace";
/// The distributed-tracing extension attribute holding the W3C
/// `traceparent`.
pub const TRACEPARENT: &str = "traceparent";
/// The extension attribute holding the W3C `tracestate`.
pub const TRACESTATE: &str = "tracestate";

/// `messaging.system` of every span.
const SYSTEM: &str = "eventmesh";

/// The W3C trace context a transport's request carried besides the event
/// (the HTTP `traceparent` and `tracestate` headers). It is the parent of
/// events that carry no usable `traceparent` of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportContext {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TransportContext {
    /// The remote span context, if `traceparent` is valid.
    fn span_context(&self) -> Option<SpanContext> {
        context_of(&self.traceparent, self.tracestate.as_deref())
    }
}

/// Length of a version-00 `traceparent`: `vv-<32 hex>-<16 hex>-ff`.
const TRACEPARENT_LEN: usize = 55;

/// Parses a W3C `traceparent` value strictly: lower-case hex fields of
/// their exact lengths, a version other than `ff` (version `00` with no
/// further fields; a later version may add fields after a `-`), and a
/// trace id and parent id that are not all zeros. Only the `sampled` flag
/// is kept. `None` for anything else.
pub fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let text = value.trim();
    let b = text.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        b[range]
            .iter()
            .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    };
    if b.len() < TRACEPARENT_LEN
        || [b[2], b[35], b[52]] != [b'-'; 3]
        || !(hex(0..2) && hex(3..35) && hex(36..52) && hex(53..55))
    {
        return None;
    }
    match &b[..2] {
        b"ff" => return None,
        b"00" if b.len() != TRACEPARENT_LEN => return None,
        _ if b.len() > TRACEPARENT_LEN && b[TRACEPARENT_LEN] != b'-' => return None,
        _ => {}
    }
    // The first 55 bytes are ASCII: the slices fall on char boundaries.
    let trace_id = TraceId::from_hex(&text[3..35]).ok()?;
    let span_id = SpanId::from_hex(&text[36..52]).ok()?;
    let flags = u8::from_str_radix(&text[53..55], 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some((
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
    ))
}

/// The version-00 `traceparent` naming `sc`.
pub fn format_traceparent(sc: &SpanContext) -> String {
    let sampled = sc.trace_flags() & TraceFlags::SAMPLED;
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sampled.to_u8()
    )
}

/// The remote span context an event's extension attributes name, if its
/// `traceparent` is a valid string.
pub fn remote_context(event: &CloudEvent) -> Option<SpanContext> {
    let Some(ExtValue::Str(traceparent)) = event.extension(TRACEPARENT) else {
        return None;
    };
    let state = match event.extension(TRACESTATE) {
        Some(ExtValue::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    context_of(traceparent, state)
}

/// The remote span context a `traceparent` (and `tracestate`) name.
fn context_of(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let (trace_id, span_id, flags) = parse_traceparent(traceparent)?;
    let state = tracestate
        .map(|s| TraceState::from_str(s).unwrap_or_default())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// A count or offset as the signed integer OpenTelemetry attributes hold
/// (unsigned ones would be exported as text).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Makes `span` (not started yet) a child of `parent`.
fn adopt(span: &Span, parent: SpanContext) {
    // Fails only for a disabled or started span; neither is passed here.
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
}

/// Marks `span` failed with `why`.
fn fail(span: &Span, why: &str) {
    span.record("outcome", "error");
    span.set_status(Status::error(why.to_string()));
}

/// The `publish` spans of one publish operation, one per event; empty
/// when tracing is off. They end when this is dropped.
#[derive(Default)]
pub struct PublishSpans(Vec<Span>);

impl PublishSpans {
    /// Starts each event's `publish` span, as a child of the context in
    /// its `traceparent` (else of the `transport`'s context, else a new
    /// trace), and stores that span's context in the event's
    /// `traceparent`. With tracing off the events are left untouched.
    pub fn start(
        topic: &str,
        events: &mut [CloudEvent],
        transport: Option<&TransportContext>,
    ) -> Self {
        let count = events.len();
        let mut spans = Vec::new();
        for event in events.iter_mut() {
            let span = info_span!(
                target: TARGET,
                parent: None,
                "publish",
                otel.kind = "server",
                messaging.system = SYSTEM,
                messaging.operation.type = "send",
                messaging.operation.name = "publish",
                messaging.destination.name = topic,
                messaging.message.id = %event.id,
                messaging.destination.partition.id = Empty,
                topic,
                event.id = %event.id,
                event.source = %event.source,
                "event.type" = %event.ty,
                partition = Empty,
                offset = Empty,
                duplicate = Empty,
                outcome = Empty,
            );
            if span.is_disabled() {
                // One target, one filter: the others are off too.
                return PublishSpans(spans);
            }
            match remote_context(event) {
                Some(parent) => adopt(&span, parent),
                None => {
                    event.extensions.retain(|(name, _)| name != TRACESTATE);
                    if let Some(parent) = transport.and_then(TransportContext::span_context) {
                        let state = parent.trace_state().header();
                        if !state.is_empty() {
                            event.set_extension(TRACESTATE, ExtValue::Str(state));
                        }
                        adopt(&span, parent);
                    }
                }
            }
            let cx = span.context();
            let sc = cx.span().span_context().clone();
            if sc.is_valid() {
                let traceparent = ExtValue::Str(format_traceparent(&sc));
                event.set_extension(TRACEPARENT, traceparent);
            }
            spans.reserve_exact(count - spans.len());
            spans.push(span);
        }
        PublishSpans(spans)
    }

    /// The events are durable where `at` says (in the same order); a span
    /// without an entry in `at` (a request, answered by its reply) is
    /// only marked done.
    pub fn published(&self, at: &[Published]) {
        for (i, span) in self.0.iter().enumerate() {
            if let Some(p) = at.get(i) {
                span.record("partition", i64::from(p.partition));
                span.record(
                    "messaging.destination.partition.id",
                    p.partition.to_string(),
                );
                span.record("offset", int(p.offset));
                span.record("duplicate", p.duplicate);
            }
            span.record("outcome", "ok");
        }
    }

    /// The operation failed with the error `code`.
    pub fn failed(&self, code: &str) {
        for span in &self.0 {
            fail(span, code);
        }
    }
}

/// The `append` span of writing `events` to `topic`: a child of the first
/// event's stored context, linked to the others'.
pub(crate) fn append(topic: &str, events: &[CloudEvent]) -> Span {
    let span = info_span!(
        target: TARGET,
        parent: None,
        "append",
        otel.kind = "internal",
        messaging.system = SYSTEM,
        messaging.destination.name = topic,
        topic,
        events = int(events.len() as u64),
        partition = Empty,
        offset = Empty,
        outcome = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let mut contexts = events.iter().filter_map(remote_context);
    if let Some(first) = contexts.next() {
        adopt(&span, first);
    }
    for other in contexts {
        span.add_link(other);
    }
    span
}

/// The append is durable; `at` is where each event landed (the span
/// shows the first).
pub(crate) fn appended(span: &Span, at: &[Published]) {
    if span.is_disabled() {
        return;
    }
    if let Some(first) = at.first() {
        span.record("partition", i64::from(first.partition));
        span.record("offset", int(first.offset));
    }
    span.record("outcome", "ok");
}

/// The append failed.
pub(crate) fn append_failed(span: &Span, error: &dyn std::fmt::Display) {
    if !span.is_disabled() {
        fail(span, &error.to_string());
    }
}

/// One hand-out of a record to a subscriber.
pub(crate) struct Delivery<'a> {
    pub topic: &'a str,
    /// The consumer: the subscription group (with the client for a
    /// broadcast member).
    pub group: &'a str,
    pub partition: u32,
    pub offset: u64,
    pub client: &'a str,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// `mailbox` (poll, SSE, WebSocket, TCP) or `webhook`.
    pub channel: &'static str,
}

/// The `dispatch` span of one hand-out of `event`: a child of the context
/// in its stored `traceparent` (a new trace without one).
pub(crate) fn dispatch(event: &CloudEvent, d: Delivery<'_>) -> Span {
    let span = info_span!(
        target: TARGET,
        parent: None,
        "dispatch",
        otel.kind = "producer",
        messaging.system = SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "dispatch",
        messaging.destination.name = d.topic,
        messaging.destination.partition.id = d.partition.to_string(),
        messaging.consumer.group.name = d.group,
        messaging.message.id = %event.id,
        topic = d.topic,
        partition = i64::from(d.partition),
        offset = int(d.offset),
        group = d.group,
        client = d.client,
        attempt = i64::from(d.attempt),
        channel = d.channel,
        event.id = %event.id,
    );
    if !span.is_disabled() {
        if let Some(parent) = remote_context(event) {
            adopt(&span, parent);
        }
    }
    span
}

/// Runs `future` inside `span`, so that spans it starts (a push) are its
/// children.
pub(crate) fn within<F: Future>(span: Span, future: F) -> tracing::instrument::Instrumented<F> {
    future.instrument(span)
}

/// The `push` span of one webhook call to `url`, a child of the span the
/// call runs in (its `dispatch`), with the HTTP headers that carry it to
/// the receiver (none when tracing is off).
pub(crate) fn push(url: &reqwest::Url, delivery_id: &str) -> (Span, Vec<(&'static str, String)>) {
    let span = info_span!(
        target: TARGET,
        "push",
        otel.kind = "client",
        messaging.system = SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "push",
        delivery.id = delivery_id,
        server.address = url.host_str().unwrap_or(""),
        server.port = i64::from(url.port_or_known_default().unwrap_or(0)),
        http.response.status_code = Empty,
        outcome = Empty,
    );
    if span.is_disabled() {
        return (span, Vec::new());
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    let mut headers = Vec::with_capacity(2);
    if sc.is_valid() {
        headers.push((TRACEPARENT, format_traceparent(&sc)));
        let state = sc.trace_state().header();
        if !state.is_empty() {
            headers.push((TRACESTATE, state));
        }
    }
    (span, headers)
}

/// The webhook call ended: with the HTTP `status`, if one came, and
/// `result`.
pub(crate) fn pushed(span: &Span, status: Option<u16>, result: &Result<(), String>) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = status {
        span.record("http.response.status_code", i64::from(status));
    }
    match result {
        Ok(()) => {
            span.record("outcome", "ok");
        }
        Err(why) => fail(span, why),
    }
}

/// The `forward` span of sending one delivery (`event_json`, the event
/// as stored) to `home`, the instance where its client polls or streams
/// (`PARTITION_OWNED_PULL`): a child of the context in the event's stored
/// `traceparent`, like the `dispatch` that put it into the owner's mailbox.
pub(crate) fn forward(event_json: &[u8], delivery_id: &str, client: &str, home: &str) -> Span {
    let span = info_span!(
        target: TARGET,
        parent: None,
        "forward",
        otel.kind = "client",
        messaging.system = SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "forward",
        delivery.id = delivery_id,
        client,
        instance = home,
        outcome = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let event = CloudEvent::from_json_slice(event_json).ok();
    if let Some(parent) = event.as_ref().and_then(remote_context) {
        adopt(&span, parent);
    }
    span
}

/// The forwarding call ended with `result`.
pub(crate) fn forwarded(span: &Span, result: &Result<(), String>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(()) => {
            span.record("outcome", "ok");
        }
        Err(why) => fail(span, why),
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
