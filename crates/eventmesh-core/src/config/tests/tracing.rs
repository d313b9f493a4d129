//! The tracing keys: defaults, typed values, and errors naming the key.

use super::*;

#[test]
fn tracing_keys_are_typed_and_checked() {
    let c = cfg(&[]);
    assert_eq!(c.tracing.otlp_endpoint, None);
    assert_eq!(c.tracing.service_name, "eventmesh");
    assert_eq!(c.tracing.sample_ratio, 1.0);
    let endpoint = "eventmesh.tracing.otlp.endpoint";
    let c = cfg(&[
        (endpoint, " https://otel.example:4318/base "),
        ("eventmesh.tracing.service.name", "mesh-eu"),
        ("eventmesh.tracing.sample.ratio", "0.1"),
    ]);
    let set = c.tracing.otlp_endpoint.as_deref();
    assert_eq!(set, Some("https://otel.example:4318/base"));
    assert_eq!(c.tracing.service_name, "mesh-eu");
    assert_eq!(c.tracing.sample_ratio, 0.1);
    // A blank endpoint is the default: no export.
    assert_eq!(cfg(&[(endpoint, "  ")]).tracing.otlp_endpoint, None);
    let expected = "invalid value \"otel:4318\" for eventmesh.tracing.otlp.endpoint: \
                    expected one http:// or https:// URL, or nothing";
    assert_eq!(err(&[(endpoint, "otel:4318")]), expected);
    fails(
        &[(endpoint, "grpc://otel:4317")],
        &["\"grpc://otel:4317\" for eventmesh.tracing.otlp.endpoint"],
    );
    fails(
        &[("eventmesh.tracing.sample.ratio", "1.5")],
        &[
            "\"1.5\" for eventmesh.tracing.sample.ratio",
            "fraction from 0 to 1",
        ],
    );
    fails(
        &[("eventmesh.tracing.sample.ratio", "all")],
        &["\"all\" for eventmesh.tracing.sample.ratio"],
    );
}
