//! Unit tests of the event options (`--subject`, `--datacontenttype`,
//! `--ext`, `--partition-key`, `--data @FILE`), of `reply` (parsing, the
//! `--echo` and `--exec` answers, a stuck command), of the usage lines,
//! and of the hints a failure carries (no token given, the other port),
//! against scripted in-process servers.

use clap::{CommandFactory, Parser};
use eventmesh_core::{Data, ExtValue};
use serde_json::{json, Value};

use super::reply::{echo, run_command};
use super::tests::{event_args, parse};
use super::*;
use crate::testutil::{http_server, Reply};

fn json_of(e: &eventmesh_core::CloudEvent) -> Value {
    serde_json::from_slice(&e.to_json()).unwrap()
}

#[test]
fn publish_takes_every_attribute() {
    let ClientCommand::Publish(p) = parse(&[
        "publish",
        "--topic",
        "orders",
        "--data",
        "{\"n\": 1}",
        "--id",
        "e-1",
        "--subject",
        "order/17",
        "--datacontenttype",
        "application/vnd.shop+json",
        "--ext",
        "region=eu-west",
        "--ext",
        "priority:=5",
        "--ext",
        "urgent:=true",
        "--ext",
        "note=a=b",
        "--partition-key",
        "customer-9",
    ])
    .unwrap() else {
        panic!("not publish")
    };
    assert_eq!(
        p.event.ext,
        [
            ("region".to_string(), ExtValue::Str("eu-west".into())),
            ("priority".to_string(), ExtValue::Int(5)),
            ("urgent".to_string(), ExtValue::Bool(true)),
            ("note".to_string(), ExtValue::Str("a=b".into())),
        ]
    );
    let e = build_event(&p.event).unwrap();
    assert_eq!(
        json_of(&e),
        json!({
            "specversion": "1.0",
            "id": "e-1",
            "source": "/eventmesh/cli",
            "type": "eventmesh.cli",
            "subject": "order/17",
            "datacontenttype": "application/vnd.shop+json",
            "note": "a=b",
            "partitionkey": "customer-9",
            "priority": 5,
            "region": "eu-west",
            "urgent": true,
            "data": {"n": 1},
        })
    );
}

#[test]
fn extension_names_are_checked_and_named() {
    assert_eq!(
        parse_ext("traceparent2=x"),
        Ok(("traceparent2".into(), ExtValue::Str("x".into())))
    );
    assert_eq!(parse_ext("n:=-3"), Ok(("n".into(), ExtValue::Int(-3))));
    assert_eq!(
        parse_ext("empty="),
        Ok(("empty".into(), ExtValue::Str(String::new())))
    );
    assert_eq!(
        parse_ext("Region=eu").unwrap_err(),
        "\"Region\" is not an extension name: CloudEvents allows lower-case letters a-z and \
         digits 0-9 only, 1 to 64 of them (20 at most recommended)"
    );
    for bad in [
        "my-ext=1",
        "my_ext=1",
        "=1",
        "ünï=1",
        &format!("{}=1", "a".repeat(65)),
    ] {
        let e = parse_ext(bad).unwrap_err();
        let name = bad.rsplit_once('=').unwrap().0;
        assert!(
            e.starts_with(&format!("{name:?} is not an extension name")),
            "{bad}: {e}"
        );
    }
    assert_eq!(
        parse_ext("noequals").unwrap_err(),
        "\"noequals\" is not NAME=VALUE (or NAME:=VALUE)"
    );
    assert_eq!(
        parse_ext("subject=x").unwrap_err(),
        "\"subject\" is a CloudEvents context attribute, not an extension (use --subject)"
    );
    assert_eq!(
        parse_ext("n:=5.5").unwrap_err(),
        "\"5.5\" (of n:=) is not a 32-bit integer, true or false; write n=5.5 for a string"
    );
    assert!(parse_ext("n:=4294967296").is_err());
    assert!(parse_ext("s:=\"text\"").is_err());
    // clap reports the parser's message with the value.
    let e = parse(&["publish", "--topic", "t", "--ext", "Bad=1"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
    assert!(e.to_string().contains("'Bad=1'"), "{e}");
}

#[test]
fn an_attribute_given_twice_is_refused() {
    let mut a = event_args(None);
    a.ext = vec![("partitionkey".into(), ExtValue::Str("a".into()))];
    a.partition_key = Some("b".into());
    assert_eq!(
        build_event(&a).unwrap_err().to_string(),
        "invalid argument: the partition key is given twice (--partition-key and --ext partitionkey=)"
    );
    let mut a = event_args(None);
    a.ext = vec![
        ("x".into(), ExtValue::Str("a".into())),
        ("x".into(), ExtValue::Str("b".into())),
    ];
    assert_eq!(
        build_event(&a).unwrap_err().to_string(),
        "invalid argument: --ext x is given twice"
    );
    let mut a = event_args(None);
    a.subject = Some(String::new());
    assert!(matches!(build_event(&a), Err(Error::InvalidArgument(_))));
}

#[test]
fn data_comes_from_a_file_with_at() {
    let dir = std::env::temp_dir().join(format!("em-cli-at-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let json_file = dir.join("order.json");
    std::fs::write(&json_file, b"{ \"from\" : \"file\" }\n").unwrap();
    let text_file = dir.join("note.txt");
    std::fs::write(&text_file, b"line one\nline two\n").unwrap();

    let at = |path: &std::path::Path| format!("@{}", path.display());
    let e = build_event(&event_args(Some(&at(&json_file)))).unwrap();
    assert_eq!(
        e.data,
        Data::Json(bytes::Bytes::from_static(b"{\"from\":\"file\"}"))
    );
    assert_eq!(e.datacontenttype.as_deref(), Some("application/json"));
    let e = build_event(&event_args(Some(&at(&text_file)))).unwrap();
    assert_eq!(e.data, Data::Text("line one\nline two\n".into()));
    assert_eq!(e.datacontenttype.as_deref(), Some("text/plain"));
    // @@ escapes a payload that starts with @.
    let e = build_event(&event_args(Some("@@handle"))).unwrap();
    assert_eq!(e.data, Data::Text("@handle".into()));
    let missing = dir.join("missing.json");
    let err = build_event(&event_args(Some(&at(&missing)))).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "invalid argument: cannot read {}: ",
            missing.display()
        )),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn datacontenttype_decides_how_the_data_goes() {
    let mut a = event_args(Some("<order n=\"1\"/>"));
    a.datacontenttype = Some("application/xml".into());
    let e = build_event(&a).unwrap();
    assert_eq!(json_of(&e)["data"], "<order n=\"1\"/>");
    assert_eq!(json_of(&e)["datacontenttype"], "application/xml");
    // JSON-looking text under a text type stays the text it is.
    let mut a = event_args(Some("{\"a\": 1}"));
    a.datacontenttype = Some("text/plain".into());
    assert_eq!(json_of(&build_event(&a).unwrap())["data"], "{\"a\": 1}");
    let mut a = event_args(Some("not json"));
    a.datacontenttype = Some("application/json".into());
    let err = build_event(&a).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "invalid argument: the payload is not JSON, which --datacontenttype application/json says it is: "
        ),
        "{err}"
    );
    let mut a = event_args(None);
    a.datacontenttype = Some("not a media type".into());
    assert!(matches!(build_event(&a), Err(Error::InvalidArgument(_))));
}

#[test]
fn reply_needs_one_way_to_answer() {
    let ClientCommand::Reply(r) = parse(&["reply", "--topic", "q", "--echo"]).unwrap() else {
        panic!()
    };
    assert!(r.echo && r.exec.is_none());
    assert_eq!(r.exec_timeout_ms, 10_000);
    assert_eq!(r.count, None);
    assert_eq!(r.ty, "eventmesh.cli.reply");
    assert_eq!(r.transport, SubscribeTransport::Sse);
    let ClientCommand::Reply(r) = parse(&[
        "respond",
        "--topic",
        "q",
        "--exec",
        "wc -c",
        "--count",
        "2",
        "--exec-timeout-ms",
        "500",
        "--transport",
        "tcp",
        "--group",
        "g",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(r.exec.as_deref(), Some("wc -c"));
    assert_eq!((r.count, r.exec_timeout_ms), (Some(2), 500));
    assert_eq!(r.transport, SubscribeTransport::Tcp);
    assert_eq!(r.group.as_deref(), Some("g"));
    let e = parse(&["reply", "--topic", "q"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    let e = parse(&["reply", "--topic", "q", "--echo", "--exec", "cat"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
}

#[derive(Debug, Parser)]
#[command(name = "eventmesh")]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCommand,
}

/// Every usage line of `cmd` and its subcommands, with the options that
/// have a default value.
fn usages(cmd: &mut clap::Command, path: &str, all: &mut Vec<(String, String, Vec<String>)>) {
    let name = format!("{path} {}", cmd.get_name()).trim().to_string();
    let defaulted: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.get_default_values().is_empty())
        .filter_map(|a| a.get_long().map(|l| format!("--{l} <")))
        .collect();
    all.push((name.clone(), cmd.render_usage().to_string(), defaulted));
    for sub in cmd.get_subcommands_mut() {
        usages(sub, &name, all);
    }
}

#[test]
fn usage_lines_never_show_a_defaulted_option_as_required() {
    let mut root = Cli::command();
    root.build();
    let mut all = Vec::new();
    usages(&mut root, "", &mut all);
    assert!(all.len() > 30, "{}", all.len());
    for (name, usage, defaulted) in &all {
        for flag in defaulted {
            assert!(!usage.contains(flag), "{name}: {flag} in {usage}");
        }
    }
    let (_, reply, _) = all.iter().find(|(n, _, _)| n.ends_with(" reply")).unwrap();
    assert_eq!(
        reply,
        "Usage: eventmesh reply [OPTIONS] --topic <TOPIC> <--echo|--exec <CMD>>"
    );
}

fn request(data: Data, content_type: Option<&str>) -> eventmesh_core::CloudEvent {
    eventmesh_core::CloudEvent {
        id: "r-1".into(),
        source: "/asker".into(),
        ty: "price.query".into(),
        subject: Some("sku/A1".into()),
        datacontenttype: content_type.map(str::to_string),
        data,
        ..Default::default()
    }
}

#[test]
fn echo_answers_with_the_request_data() {
    let r = request(
        Data::Json(bytes::Bytes::from_static(b"{\"sku\":\"A1\"}")),
        Some("application/json"),
    );
    let a = echo(&r, "t.reply", "/me");
    assert_eq!((a.ty.as_str(), a.source.as_str()), ("t.reply", "/me"));
    assert_eq!(a.data, r.data);
    assert_eq!(a.datacontenttype.as_deref(), Some("application/json"));
    assert_ne!(a.id, r.id);
}

#[tokio::test]
async fn exec_answers_with_the_command_output() {
    use std::time::Duration;
    let r = request(Data::Text("hello".into()), Some("text/plain"));
    let long = Duration::from_secs(20);
    let a = run_command("tr a-z A-Z", long, &r, "t.reply", "/me").await;
    assert_eq!(
        (a.ty.as_str(), &a.data),
        ("t.reply", &Data::Text("HELLO".into()))
    );
    assert_eq!(a.datacontenttype.as_deref(), Some("text/plain"));
    let a = run_command(
        "printf '{\"id\": \"%s\", \"subject\": \"%s\"}' \"$EVENTMESH_ID\" \"$EVENTMESH_SUBJECT\"",
        long,
        &r,
        "t.reply",
        "/me",
    )
    .await;
    assert_eq!(
        a.data,
        Data::Json(bytes::Bytes::from_static(
            b"{\"id\":\"r-1\",\"subject\":\"sku/A1\"}"
        ))
    );
    let a = run_command("true", long, &r, "t.reply", "/me").await;
    assert_eq!((&a.data, &a.datacontenttype), (&Data::None, &None));

    let a = run_command("echo broken >&2; exit 3", long, &r, "t.reply", "/me").await;
    assert_eq!(a.ty, "t.reply.error");
    assert_eq!(
        json_of(&a)["data"],
        json!({"error": "exited with status 3", "exitCode": 3, "stderr": "broken\n"})
    );
    let started = std::time::Instant::now();
    let a = run_command("sleep 30", Duration::from_millis(200), &r, "t.reply", "/me").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        json_of(&a)["data"],
        json!({"error": "killed after 200 ms", "exitCode": null, "stderr": ""})
    );
}

#[tokio::test]
async fn a_refused_missing_token_says_none_was_given() {
    let (base, _seen) = http_server(|_, _| {
        Reply::json(
            401,
            r#"{"error":"missing_credential","message":"no bearer token"}"#,
        )
    })
    .await;
    let run = |token: Option<&'static str>| {
        let base = base.clone();
        async move {
            let mut args = vec!["publish", "--topic", "t", "--server", &base];
            if let Some(t) = token {
                args.extend(["--token", t]);
            }
            execute(parse(&args).unwrap(), &mut Vec::new())
                .await
                .unwrap_err()
        }
    };
    for token in [None, Some("")] {
        let f = run(token).await;
        assert_eq!(f.status, 1);
        assert_eq!(
            f.message,
            "no token given (use --token or EVENTMESH_TOKEN): the server requires one \
             (no bearer token (missing_credential, HTTP 401))"
        );
    }
    let f = run(Some("wrong")).await;
    assert_eq!(f.message, "no bearer token (missing_credential, HTTP 401)");
}

#[tokio::test]
async fn the_admin_port_is_recognised_by_its_answer() {
    let not_found = r#"{"error":"not_found","message":"no such route"}"#;
    let (admin_port, _seen) = http_server(move |req, _| match req.target.as_str() {
        "/admin/health" => Reply::json(200, r#"{"status":"UP"}"#),
        _ => Reply::json(404, not_found),
    })
    .await;
    for args in [
        vec!["publish", "--topic", "t", "--data", "1"],
        vec!["request", "--topic", "t"],
        vec!["subscribe", "--topic", "t", "--transport", "poll"],
    ] {
        let mut args = args.clone();
        args.extend(["--server", &admin_port]);
        let f = execute(parse(&args).unwrap(), &mut Vec::new())
            .await
            .unwrap_err();
        assert_eq!(
            f.message,
            format!(
                "{admin_port} looks like the admin port (404 not_found: it has no traffic \
                 routes); traffic commands use --server or EVENTMESH_SERVER (default \
                 http://127.0.0.1:10105), `eventmesh admin` uses the admin port"
            ),
            "{args:?}"
        );
    }
    // A traffic port answers the admin routes with 404 and has no health.
    let (traffic_port, _seen) = http_server(move |_, _| Reply::json(404, not_found)).await;
    let f = execute(
        parse(&["publish", "--topic", "t", "--server", &traffic_port]).unwrap(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(f.message, "no such route (not_found, HTTP 404)");
    let f = execute(
        parse(&[
            "admin",
            "topics",
            "--admin-server",
            &traffic_port,
            "--admin-token",
            "t",
        ])
        .unwrap(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        f.message,
        format!(
            "{traffic_port} looks like a traffic port, not the admin port (404 not_found: it has \
             no admin routes); admin commands use --admin-server or EVENTMESH_ADMIN_SERVER \
             (default http://127.0.0.1:10106)"
        )
    );
}

#[tokio::test]
async fn admin_failures_name_the_flags() {
    let (base, _seen) = http_server(|req, _| match req.header("authorization") {
        None => Reply::json(401, r#"{"error":"unauthorized","message":"no token"}"#),
        Some(_) => Reply::json(
            409,
            r#"{"error":"topic_in_use","message":"topic \"t\" has 1 subscription(s); remove them first or delete with force=true"}"#,
        ),
    })
    .await;
    let f = execute(
        parse(&[
            "admin",
            "topic",
            "delete",
            "t",
            "--admin-server",
            &base,
            "--admin-token",
            "",
        ])
        .unwrap(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        f.message,
        "no admin token given (use --admin-token or EVENTMESH_ADMIN_TOKEN with the server's \
         eventmesh.admin.token): 401 unauthorized"
    );
    let f = execute(
        parse(&[
            "admin",
            "topic",
            "delete",
            "t",
            "--admin-server",
            &base,
            "--admin-token",
            "x",
        ])
        .unwrap(),
        &mut Vec::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        f.message,
        "409 topic_in_use: topic \"t\" has 1 subscription(s); remove them first or delete with --force"
    );
}
