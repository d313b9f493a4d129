//! The W3C parsing rules, and the spans' parent links under a real
//! OpenTelemetry SDK tracer (exporting to memory).

use super::*;
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{TRACE}-{SPAN}-01")
}

fn event(extensions: &[(&str, &str)]) -> CloudEvent {
    let mut e = CloudEvent::from_json_slice(
        br#"{"specversion":"1.0","id":"e1","source":"/t","type":"t.created"}"#,
    )
    .unwrap();
    for (name, value) in extensions {
        e.set_extension(name, ExtValue::Str(value.to_string()));
    }
    e
}

fn text(e: &CloudEvent, name: &str) -> Option<String> {
    e.extension(name).map(ExtValue::to_text)
}

#[test]
fn valid_traceparents_parse() {
    let (trace, span, flags) = parse_traceparent(&client_traceparent()).unwrap();
    assert_eq!(trace, TraceId::from_hex(TRACE).unwrap());
    assert_eq!(span, SpanId::from_hex(SPAN).unwrap());
    assert_eq!(flags, TraceFlags::SAMPLED);
    let unsampled = parse_traceparent(&format!("00-{TRACE}-{SPAN}-00")).unwrap();
    assert_eq!(unsampled.2, TraceFlags::default());
    // Flags other than `sampled` are dropped; surrounding blanks ignored.
    let other = parse_traceparent(&format!(" 00-{TRACE}-{SPAN}-03 ")).unwrap();
    assert_eq!(other.2, TraceFlags::SAMPLED);
    // A later version may carry more fields after a dash.
    assert!(parse_traceparent(&format!("01-{TRACE}-{SPAN}-01")).is_some());
    assert!(parse_traceparent(&format!("cc-{TRACE}-{SPAN}-01-what-follows")).is_some());
}

#[test]
fn malformed_traceparents_are_refused() {
    let zeros32 = "0".repeat(32);
    let zeros16 = "0".repeat(16);
    for bad in [
        String::new(),
        "garbage".to_string(),
        format!("ff-{TRACE}-{SPAN}-01"),
        format!("00-{TRACE}-{SPAN}-01-extra"),
        format!("00-{TRACE}-{SPAN}-01x"),
        format!("cc-{TRACE}-{SPAN}-01x"),
        format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
        format!("00-{TRACE}-{}-01", SPAN.to_uppercase()),
        format!("0A-{TRACE}-{SPAN}-01"),
        format!("00-{zeros32}-{SPAN}-01"),
        format!("00-{TRACE}-{zeros16}-01"),
        format!("00-{}-{SPAN}-01", &TRACE[1..]),
        format!("00-{TRACE}-{}-01", &SPAN[1..]),
        format!("00-{TRACE}-{SPAN}-1"),
        format!("00-{TRACE}-{SPAN}-0g"),
        format!("00_{TRACE}_{SPAN}_01"),
        format!("00-+{}-{SPAN}-01", &TRACE[1..]),
        format!("00-{TRACE}-{SPAN}-é1"),
        format!("00-{}é-{SPAN}-01", &TRACE[..31]),
    ] {
        assert_eq!(parse_traceparent(&bad), None, "{bad:?}");
    }
}

#[test]
fn a_traceparent_round_trips() {
    let (trace, span, flags) = parse_traceparent(&client_traceparent()).unwrap();
    let sc = SpanContext::new(trace, span, flags, true, TraceState::default());
    assert_eq!(format_traceparent(&sc), client_traceparent());
    let small = SpanContext::new(
        TraceId::from(1u128),
        SpanId::from(2u64),
        TraceFlags::default(),
        false,
        TraceState::default(),
    );
    let text = format_traceparent(&small);
    assert_eq!(
        text,
        format!("00-{}1-{}2-00", "0".repeat(31), "0".repeat(15))
    );
    assert!(parse_traceparent(&text).is_some());
}

#[test]
fn an_extension_of_another_type_is_no_context() {
    let mut e = event(&[]);
    e.set_extension(TRACEPARENT, ExtValue::Int(7));
    assert_eq!(remote_context(&e), None);
    let e = event(&[
        (TRACEPARENT, &client_traceparent()),
        (TRACESTATE, "a=1,b=2"),
    ]);
    let sc = remote_context(&e).unwrap();
    assert!(sc.is_remote() && sc.is_sampled());
    assert_eq!(sc.trace_state().header(), "a=1,b=2");
}

#[test]
fn with_tracing_off_events_are_left_alone() {
    // The log's filter as the server sets it, even at its most verbose:
    // without an OpenTelemetry layer every span here is disabled.
    let log = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(format!("trace,{TARGET}=off")))
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(log, untouched);
}

fn untouched() {
    let mut events = vec![
        event(&[(TRACEPARENT, &client_traceparent()), (TRACESTATE, "a=1")]),
        event(&[(TRACEPARENT, "not-a-traceparent"), (TRACESTATE, "a=1")]),
        event(&[]),
    ];
    let before = events.clone();
    let spans = PublishSpans::start("orders", &mut events, None);
    assert!(spans.0.is_empty());
    assert_eq!(events, before);
    spans.failed("x");
    assert!(append("orders", &events).is_disabled());
    let delivery = Delivery {
        topic: "orders",
        group: "g",
        partition: 0,
        offset: 1,
        client: "c",
        attempt: 1,
        channel: "mailbox",
    };
    assert!(dispatch(&events[0], delivery).is_disabled());
    let url = reqwest::Url::parse("http://127.0.0.1:9/hook").unwrap();
    let (span, headers) = push(&url, "d-1");
    assert!(span.is_disabled() && headers.is_empty());
}

/// Runs `f` with an OpenTelemetry layer on [`TARGET`] that exports to
/// memory; the spans it finished.
fn traced<R>(f: impl FnOnce() -> R) -> (R, Vec<SpanData>) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("test"))
        .with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO));
    let subscriber = tracing_subscriber::registry().with(layer);
    let out = tracing::subscriber::with_default(subscriber, f);
    provider.force_flush().unwrap();
    (out, exporter.get_finished_spans().unwrap())
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    let kv = span.attributes.iter().find(|kv| kv.key.as_str() == key)?;
    Some(kv.value.clone())
}

fn published(offset: u64) -> Published {
    Published {
        id: "e1".into(),
        topic: "orders".into(),
        partition: 2,
        offset,
        duplicate: false,
        scheduled_for: None,
    }
}

#[test]
fn a_trace_follows_the_event_from_publish_to_push() {
    let ((stored, headers), spans) = traced(|| {
        let mut events = vec![event(&[
            (TRACEPARENT, &client_traceparent()),
            (TRACESTATE, "vendor=x"),
        ])];
        let publish = PublishSpans::start("orders", &mut events, None);
        let append = append("orders", &events);
        appended(&append, &[published(41)]);
        drop(append);
        publish.published(&[published(41)]);
        drop(publish);
        let stored = events.pop().unwrap();
        let delivery = Delivery {
            topic: "orders",
            group: "g1",
            partition: 2,
            offset: 41,
            client: "hook-1",
            attempt: 1,
            channel: "webhook",
        };
        let dispatch = dispatch(&stored, delivery);
        let entered = dispatch.enter();
        let url = reqwest::Url::parse("http://127.0.0.1:9/hook").unwrap();
        let (push, headers) = push(&url, "d-1");
        pushed(&push, Some(200), &Ok(()));
        drop(push);
        drop(entered);
        drop(dispatch);
        (stored, headers)
    });
    let trace = TraceId::from_hex(TRACE).unwrap();
    let [publish] = named(&spans, "publish")[..] else {
        panic!("one publish span: {spans:?}")
    };
    let [append] = named(&spans, "append")[..] else {
        panic!("one append span")
    };
    let [dispatch] = named(&spans, "dispatch")[..] else {
        panic!("one dispatch span")
    };
    let [push] = named(&spans, "push")[..] else {
        panic!("one push span")
    };
    // The publish span continues the client's trace under its span.
    assert_eq!(publish.span_context.trace_id(), trace);
    assert_eq!(publish.parent_span_id, SpanId::from_hex(SPAN).unwrap());
    assert!(publish.parent_span_is_remote);
    assert_eq!(publish.span_kind, SpanKind::Server);
    assert_eq!(attribute(publish, "offset"), Some(Value::I64(41)));
    assert_eq!(attribute(publish, "topic"), Some("orders".into()));
    // The stored event names the publish span; its tracestate is kept.
    let traceparent = text(&stored, TRACEPARENT).unwrap();
    assert_eq!(traceparent, format_traceparent(&publish.span_context));
    assert_eq!(text(&stored, TRACESTATE).as_deref(), Some("vendor=x"));
    // append and dispatch are children of publish, push of dispatch.
    for child in [append, dispatch] {
        assert_eq!(child.span_context.trace_id(), trace, "{}", child.name);
        assert_eq!(child.parent_span_id, publish.span_context.span_id());
    }
    assert_eq!(attribute(dispatch, "group"), Some("g1".into()));
    assert_eq!(attribute(dispatch, "channel"), Some("webhook".into()));
    assert_eq!(push.span_context.trace_id(), trace);
    assert_eq!(push.parent_span_id, dispatch.span_context.span_id());
    assert_eq!(push.span_kind, SpanKind::Client);
    let status = attribute(push, "http.response.status_code");
    assert_eq!(status, Some(Value::I64(200)));
    // The webhook call carries the push span and the client's tracestate.
    let expected = vec![
        (TRACEPARENT, format_traceparent(&push.span_context)),
        (TRACESTATE, "vendor=x".to_string()),
    ];
    assert_eq!(headers, expected);
}

#[test]
fn a_malformed_traceparent_starts_a_new_trace() {
    let (events, spans) = traced(|| {
        let mut events = vec![
            event(&[(TRACEPARENT, "00-zzz-yyy-01"), (TRACESTATE, "stale=1")]),
            event(&[]),
        ];
        let publish = PublishSpans::start("orders", &mut events, None);
        let append = append("orders", &events);
        append_failed(&append, &"disk full");
        publish.failed("storage_unavailable");
        events
    });
    let publishes = named(&spans, "publish");
    assert_eq!(publishes.len(), 2);
    for (e, span) in events.iter().zip(&publishes) {
        assert_eq!(span.parent_span_id, SpanId::INVALID, "a root");
        let expected = format_traceparent(&span.span_context);
        assert_eq!(text(e, TRACEPARENT), Some(expected));
        assert_eq!(text(e, TRACESTATE), None);
        assert!(matches!(span.status, Status::Error { .. }));
    }
    assert_ne!(
        publishes[0].span_context.trace_id(),
        publishes[1].span_context.trace_id()
    );
    // The batch's append is a child of the first publish, linked to the
    // second.
    let [append] = named(&spans, "append")[..] else {
        panic!("one append span")
    };
    assert_eq!(append.parent_span_id, publishes[0].span_context.span_id());
    let links: Vec<SpanId> = append
        .links
        .iter()
        .map(|l| l.span_context.span_id())
        .collect();
    assert_eq!(links, vec![publishes[1].span_context.span_id()]);
    assert_eq!(attribute(append, "outcome"), Some("error".into()));
}

#[test]
fn a_forwarded_delivery_is_a_child_of_the_stored_context() {
    let (stored, spans) = traced(|| {
        let mut events = vec![event(&[(TRACEPARENT, &client_traceparent())])];
        drop(PublishSpans::start("orders", &mut events, None));
        let mut json = Vec::new();
        events[0].write_json(&mut json);
        let ok = forward(&json, "d-1", "poller", "i-1");
        forwarded(&ok, &Ok(()));
        drop(ok);
        let failed = forward(&json, "d-2", "poller", "i-1");
        forwarded(&failed, &Err("connection refused".to_string()));
        drop(failed);
        // An event without a usable context: a root of a new trace.
        let bare = forward(br#"{"specversion":"1.0","id":"x"}"#, "d-3", "poller", "i-1");
        drop(bare);
        events.pop().unwrap()
    });
    let [publish] = named(&spans, "publish")[..] else {
        panic!("one publish span")
    };
    let [ok, failed, bare] = named(&spans, "forward")[..] else {
        panic!("three forward spans: {spans:?}")
    };
    let traceparent = text(&stored, TRACEPARENT).unwrap();
    assert_eq!(traceparent, format_traceparent(&publish.span_context));
    for span in [ok, failed] {
        assert_eq!(
            span.span_context.trace_id(),
            TraceId::from_hex(TRACE).unwrap()
        );
        assert_eq!(span.parent_span_id, publish.span_context.span_id());
        assert_eq!(span.span_kind, SpanKind::Client);
        assert_eq!(attribute(span, "client"), Some("poller".into()));
        assert_eq!(attribute(span, "instance"), Some("i-1".into()));
    }
    assert_eq!(attribute(ok, "delivery.id"), Some("d-1".into()));
    assert_eq!(attribute(ok, "outcome"), Some("ok".into()));
    assert_eq!(attribute(failed, "outcome"), Some("error".into()));
    assert!(matches!(failed.status, Status::Error { .. }));
    assert_eq!(bare.parent_span_id, SpanId::INVALID);
}
