//! Decoding subscription objects field by field, and showing them back.

use super::*;

fn base() -> Value {
    json!({
        "source": "orders",
        "sink": "http://127.0.0.1:9/hook",
        "protocol": "HTTP",
    })
}

fn with(extra: Value) -> Value {
    let mut v = base();
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The code and message of a refused object.
fn refused(v: Value) -> (u16, &'static str, String) {
    let e = Proposed::parse(&v).unwrap_err();
    (e.status.as_u16(), e.code, e.message)
}

fn bad(code: &'static str, message: &str) -> (u16, &'static str, String) {
    (400, code, message.to_string())
}

#[test]
fn a_full_object_becomes_a_webhook_subscription_of_the_runtime() {
    let v = with(json!({
        "id": "ignored-on-create",
        "types": ["order.created", "order.paid"],
        "filters": [{"sql": "amount > 100"}],
        "config": {"from": "earliest"},
        "protocolsettings": {"method": "POST", "headers": {"X-Tenant": "acme"}},
        "sinkcredential": {"credentialtype": "ACCESSTOKEN", "accesstoken": "t0k"},
    }));
    let p = Proposed::parse(&v).unwrap();
    assert_eq!(p.id.as_deref(), Some("ignored-on-create"));
    let req = p.into_request("abc", None).unwrap();
    assert_eq!(req.client_id, "sub-abc");
    assert_eq!(req.group.as_deref(), Some("sub-abc"));
    assert_eq!(req.mode, Some(DeliveryMode::LoadBalance));
    assert_eq!(req.from, Some(StartFrom::Earliest));
    // A time is a start too.
    let at = with(json!({"config": {"from": "2026-12-05T09:00:00Z"}}));
    let timed = Proposed::parse(&at)
        .unwrap()
        .into_request("t", None)
        .unwrap();
    assert_eq!(timed.from, Some(StartFrom::Time(1_796_461_200_000)));
    assert_eq!(req.topic, "orders");
    assert_eq!(req.url.as_deref(), Some("http://127.0.0.1:9/hook"));
    assert_eq!(req.subscription_id.as_deref(), Some("abc"));
    assert_eq!(
        req.filters,
        vec![
            json!({"any": [{"exact": {"type": "order.created"}}, {"exact": {"type": "order.paid"}}]}),
            json!({"sql": "amount > 100"}),
        ]
    );
    assert_eq!(
        req.headers,
        BTreeMap::from([
            ("Authorization".to_string(), "Bearer t0k".to_string()),
            ("X-Tenant".to_string(), "acme".to_string()),
        ])
    );
    let spec = req.spec.clone().unwrap();
    assert_eq!(spec.types, ["order.created", "order.paid"]);
    assert_eq!(spec.filters, vec![json!({"sql": "amount > 100"})]);
}

fn stored(req: SubscribeRequest) -> Subscription {
    Subscription {
        subscription_id: req.subscription_id.unwrap(),
        client_id: req.client_id,
        topic: req.topic,
        group: req.group.unwrap(),
        mode: req.mode.unwrap(),
        url: req.url,
        from: req.from.unwrap(),
        created_ms: 1,
        tenant: None,
        principal: None,
        filters: req.filters,
        headers: req.headers,
        spec: req.spec,
        roles: Vec::new(),
        topics_at_subscribe: Vec::new(),
        push: req.push,
    }
}

#[test]
fn it_is_shown_as_given_with_defaults_and_without_secrets() {
    let v = with(json!({
        "types": ["order.created"],
        "filters": [{"prefix": {"subject": "eu/"}}],
        "protocolsettings": {"headers": {"X-Tenant": "acme"}},
        "sinkcredential": {
            "credentialtype": "ACCESSTOKEN",
            "accesstoken": "t0k",
            "accesstokenexpiresutc": "2999-01-01T00:00:00Z",
        },
    }));
    let sub = stored(
        Proposed::parse(&v)
            .unwrap()
            .into_request("abc", None)
            .unwrap(),
    );
    assert_eq!(
        render(&sub),
        json!({
            "id": "abc",
            "source": "orders",
            "types": ["order.created"],
            "filters": [{"prefix": {"subject": "eu/"}}],
            "config": {"from": "latest"},
            "sink": "http://127.0.0.1:9/hook",
            "protocol": "HTTP",
            "protocolsettings": {"method": "POST", "contentmode": "binary", "headers": {"X-Tenant": "acme"}},
            "sinkcredential": {
                "credentialtype": "ACCESSTOKEN",
                "accesstokentype": "bearer",
                "accesstokenexpiresutc": "2999-01-01T00:00:00Z",
            },
        })
    );
    // The object shown, given back, is the same subscription (the stored
    // token kept).
    let again = Proposed::parse(&render(&sub))
        .unwrap()
        .into_request("abc", Some(&sub))
        .unwrap();
    assert_eq!(stored(again), sub);
    // A minimal one shows its defaults only.
    let sub = stored(
        Proposed::parse(&base())
            .unwrap()
            .into_request("m", None)
            .unwrap(),
    );
    assert_eq!(
        render(&sub),
        json!({
            "id": "m",
            "source": "orders",
            "config": {"from": "latest"},
            "sink": "http://127.0.0.1:9/hook",
            "protocol": "HTTP",
            "protocolsettings": {"method": "POST", "contentmode": "binary"},
        })
    );
}

#[test]
fn push_settings_map_onto_protocolsettings_and_back() {
    let v = with(json!({"protocolsettings": {
        "contentmode": "batch", "batchsize": "25", "webhookhandshake": false}}));
    let sub = stored(
        Proposed::parse(&v)
            .unwrap()
            .into_request("b", None)
            .unwrap(),
    );
    assert_eq!(
        (
            sub.push.content_mode,
            sub.push.batch_size,
            sub.push.webhook_handshake
        ),
        (eventmesh_state::ContentMode::Batch, Some(25), Some(false))
    );
    let shown = render(&sub);
    assert_eq!(
        shown["protocolsettings"],
        json!({"method": "POST", "contentmode": "batch", "batchsize": 25,
               "batchlingerms": 10, "webhookhandshake": false})
    );
    // Shown with its defaults, given back, it is the same subscription
    // but for the defaults it now names.
    let again = stored(
        Proposed::parse(&shown)
            .unwrap()
            .into_request("b", None)
            .unwrap(),
    );
    assert_eq!(again.push.batch_linger_ms, Some(10));
    assert_eq!(render(&again), shown);
    for (settings, message) in [
        (json!({"contentmode": "batch", "batchsize": 0}),
         "protocolsettings.batchsize: 0 is out of range: 1 to 1000 events per push"),
        (json!({"contentmode": "xml"}),
         "protocolsettings.contentmode: \"xml\" is not a content mode (binary, structured or batch)"),
        (json!({"batchlingerms": 5}),
         "protocolsettings.batchlingerms: 5 is given, but the content mode is binary (it applies to batch only)"),
        (json!({"contentmode": "batch", "batchlingerms": 60000}),
         "protocolsettings.batchlingerms: 60000 is out of range: 0 to 10000 milliseconds"),
    ] {
        assert_eq!(
            refused(with(json!({"protocolsettings": settings}))),
            bad("invalid_subscription", message)
        );
    }
}

#[test]
fn plain_credentials_are_basic_authentication() {
    let v = with(json!({
        "sinkcredential": {"credentialtype": "PLAIN", "identifier": "ann", "secret": "pw"},
    }));
    let req = Proposed::parse(&v)
        .unwrap()
        .into_request("p", None)
        .unwrap();
    // base64("ann:pw")
    assert_eq!(req.headers["Authorization"], "Basic YW5uOnB3");
    let sub = stored(req);
    assert_eq!(
        render(&sub)["sinkcredential"],
        json!({"credentialtype": "PLAIN", "identifier": "ann"})
    );
    // Another identifier without its secret keeps nothing.
    let other = with(json!({
        "sinkcredential": {"credentialtype": "PLAIN", "identifier": "bob"},
    }));
    let e = Proposed::parse(&other)
        .unwrap()
        .into_request("p", Some(&sub))
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            "invalid_subscription",
            "sinkcredential.secret: is required (it may be left out only to keep the stored one of the same credential)"
        )
    );
}

#[test]
fn a_secret_left_out_of_a_create_is_missing() {
    let v = with(json!({"sinkcredential": {"credentialtype": "ACCESSTOKEN"}}));
    let e = Proposed::parse(&v)
        .unwrap()
        .into_request("x", None)
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            "invalid_subscription",
            "sinkcredential.accesstoken: is required (it may be left out only to keep the stored one of the same credential)"
        )
    );
}

#[test]
fn required_fields_and_protocols() {
    let mut v = base();
    v.as_object_mut().unwrap().remove("sink");
    assert_eq!(refused(v), bad("invalid_subscription", "sink: is required"));
    let mut v = base();
    v.as_object_mut().unwrap().remove("protocol");
    assert_eq!(
        refused(v),
        bad("invalid_subscription", "protocol: is required")
    );
    let mut v = base();
    v.as_object_mut().unwrap().remove("source");
    assert_eq!(
        refused(v),
        bad(
            "invalid_subscription",
            "source: is required: it names the topic whose events the subscription delivers"
        )
    );
    assert_eq!(
        refused(with(json!({"protocol": "MQTT5"}))),
        bad(
            "unsupported_protocol",
            "protocol: MQTT5 is not supported; this subscription manager delivers over HTTP only"
        )
    );
    assert_eq!(
        refused(with(json!({"protocol": "http"}))),
        bad(
            "unsupported_protocol",
            "protocol: \"http\" is not a protocol this subscription manager knows; use HTTP (protocols are case sensitive)"
        )
    );
    assert_eq!(
        refused(with(json!({"protocol": 1}))),
        bad("invalid_subscription", "protocol: must be a string, not 1")
    );
    assert_eq!(
        refused(json!([])),
        bad(
            "invalid_subscription",
            "a subscription must be a JSON object"
        )
    );
    assert_eq!(
        refused(with(json!({"filter": {}}))),
        bad(
            "invalid_subscription",
            "filter: not a property of a subscription (those are id, source, types, config, filters, sink, sinkcredential, protocol, protocolsettings)"
        )
    );
    assert_eq!(
        refused(with(json!({"source": "a b"}))),
        bad(
            "invalid_topic",
            "source: topic name \"a b\" contains ' '; allowed characters are A-Z a-z 0-9 . _ / -"
        )
    );
}

#[test]
fn types_filters_and_config_are_checked_naming_the_entry() {
    assert_eq!(
        refused(with(json!({"types": ["a", ""]}))),
        bad("invalid_subscription", "types[1]: must not be empty")
    );
    assert_eq!(
        refused(with(json!({"types": ["a", 2]}))),
        bad("invalid_subscription", "types[1]: must be a string, not 2")
    );
    assert_eq!(
        refused(with(json!({"types": []}))),
        bad(
            "invalid_subscription",
            "types: must list at least one type (leave it out to take every type)"
        )
    );
    let (status, code, message) = refused(with(
        json!({"filters": [{"exact": {"type": "a"}}, {"sql": "a >"}]}),
    ));
    assert_eq!((status, code), (400, "invalid_filter"));
    assert!(message.starts_with("filters[1].sql: "), "{message}");
    assert_eq!(
        refused(with(json!({"filters": {"exact": {"type": "a"}}}))),
        bad(
            "invalid_filter",
            "filters: must be an array of filter objects, not {\"exact\":{\"type\":\"a\"}}"
        )
    );
    assert_eq!(
        refused(with(json!({"config": {"from": "now"}}))),
        bad(
            "invalid_subscription",
            "config.from: \"now\" is not latest, earliest or an RFC 3339 timestamp (premature end of input)"
        )
    );
    assert_eq!(
        refused(with(json!({"config": {"interval": "5"}}))),
        bad(
            "unsupported_setting",
            "config.interval: not a setting of this subscription manager (its one setting is from: latest, earliest or an RFC 3339 time)"
        )
    );
}

#[test]
fn protocol_settings_are_checked_naming_the_setting() {
    assert_eq!(
        refused(with(json!({"protocolsettings": {"method": "PUT"}}))),
        bad(
            "unsupported_setting",
            "protocolsettings.method: \"PUT\" is not supported; events are delivered with POST (the default)"
        )
    );
    assert_eq!(
        refused(with(json!({"protocolsettings": {"topicname": "x"}}))),
        bad(
            "invalid_subscription",
            "protocolsettings.topicname: not an HTTP setting (those are headers, method, contentmode, batchsize, batchlingerms and webhookhandshake)"
        )
    );
    for name in ["Content-Type", "ce-id", "Host", "eventmesh-delivery-id"] {
        assert_eq!(
            refused(with(json!({"protocolsettings": {"headers": {name: "x"}}}))),
            bad(
                "invalid_subscription",
                &format!("protocolsettings.headers.{name}: is set by the push itself (the event's ce-* attributes, its content type, the delivery id, the trace context, the connection)")
            )
        );
    }
    assert_eq!(
        refused(with(json!({"protocolsettings": {"headers": {"a b": "x"}}}))),
        bad(
            "invalid_subscription",
            "protocolsettings.headers.a b: is not a valid HTTP header name"
        )
    );
    assert_eq!(
        refused(with(json!({"protocolsettings": {"headers": {"x-a": "1\n2"}}}))),
        bad(
            "invalid_subscription",
            "protocolsettings.headers.x-a: is not a valid HTTP header value (visible ASCII, spaces and tabs)"
        )
    );
    assert_eq!(
        refused(with(
            json!({"protocolsettings": {"headers": {"X-A": "1", "x-a": "2"}}})
        )),
        bad(
            "invalid_subscription",
            "protocolsettings.headers.x-a: is given twice (header names are case-insensitive)"
        )
    );
    assert_eq!(
        refused(with(json!({"protocolsettings": {"headers": {"x-a": 1}}}))),
        bad(
            "invalid_subscription",
            "protocolsettings.headers.x-a: must be a string, not 1"
        )
    );
    assert_eq!(
        refused(with(json!({
            "protocolsettings": {"headers": {"authorization": "Basic x"}},
            "sinkcredential": {"credentialtype": "ACCESSTOKEN", "accesstoken": "t"},
        }))),
        bad(
            "invalid_subscription",
            "protocolsettings.headers.authorization: the sinkcredential sets the Authorization header; give one or the other"
        )
    );
}

#[test]
fn credentials_are_checked_naming_the_field() {
    let cred = |c: Value| refused(with(json!({ "sinkcredential": c })));
    assert_eq!(
        cred(json!({"accesstoken": "t"})),
        bad(
            "invalid_subscription",
            "sinkcredential.credentialtype: is required"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "REFRESHTOKEN", "accesstoken": "t"})),
        bad(
            "unsupported_setting",
            "sinkcredential.credentialtype: REFRESHTOKEN is not supported (tokens are not refreshed); give an ACCESSTOKEN"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "ACCESSTOKEN", "accesstoken": "t", "accesstokentype": "mac"})),
        bad(
            "unsupported_setting",
            "sinkcredential.accesstokentype: \"mac\" is not supported; tokens are sent as bearer tokens"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "ACCESSTOKEN", "accesstoken": "t", "accesstokenexpiresutc": "2001-01-01T00:00:00Z"})),
        bad(
            "invalid_subscription",
            "sinkcredential.accesstokenexpiresutc: 2001-01-01T00:00:00Z is past: the token has expired"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "ACCESSTOKEN", "accesstoken": "t", "secret": "s"})),
        bad(
            "invalid_subscription",
            "sinkcredential.secret: not a field of the ACCESSTOKEN credential (those are credentialtype, accesstoken, accesstokentype, accesstokenexpiresutc)"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "PLAIN", "secret": "s"})),
        bad(
            "invalid_subscription",
            "sinkcredential.identifier: is required"
        )
    );
    assert_eq!(
        cred(json!({"credentialtype": "PLAIN", "identifier": "a:b", "secret": "s"})),
        bad(
            "invalid_subscription",
            "sinkcredential.identifier: must not contain ':' (it is sent as HTTP basic authentication)"
        )
    );
}
