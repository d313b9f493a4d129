//! Unit tests of the client commands: argument parsing (defaults,
//! conflicts, help text), event building from `--data`/`--file`, exit
//! statuses, and commands run end to end against scripted in-process
//! servers on free loopback ports (publish and subscribe over TCP,
//! WebSocket and polling, request timeouts), plus unreachable and
//! malformed server URLs.

use super::*;
use clap::Parser;
use eventmesh_core::Data;
use serde_json::Value;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ClientCommand,
}

/// The command line `eventmesh <args>` parsed.
pub(crate) fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
    Cli::try_parse_from(std::iter::once("eventmesh").chain(args.iter().copied())).map(|c| c.cmd)
}

#[test]
fn parses_publish() {
    let ClientCommand::Publish(p) = parse(&[
        "publish",
        "--topic",
        "orders",
        "--data",
        "{\"a\":1}",
        "--type",
        "t.x",
        "--source",
        "/me",
        "--id",
        "42",
        "--transport",
        "tcp",
        "--server",
        "http://h:1",
        "--tcp-server",
        "h:2",
        "--token",
        "tok",
    ])
    .unwrap() else {
        panic!("not publish")
    };
    assert_eq!(p.topic, "orders");
    assert_eq!(p.event.data.as_deref(), Some("{\"a\":1}"));
    assert_eq!(p.event.ty, "t.x");
    assert_eq!(p.event.source, "/me");
    assert_eq!(p.event.id.as_deref(), Some("42"));
    assert_eq!(p.transport, PublishTransport::Tcp);
    assert_eq!(p.connection.server, "http://h:1");
    assert_eq!(p.connection.tcp_server, "h:2");
    assert_eq!(p.connection.token.as_deref(), Some("tok"));
}

#[test]
fn publish_defaults_and_conflicts() {
    let ClientCommand::Publish(p) = parse(&["publish", "--topic", "t"]).unwrap() else {
        panic!()
    };
    assert_eq!(p.transport, PublishTransport::Http);
    assert_eq!(p.event.ty, "eventmesh.cli");
    assert_eq!(p.event.source, "/eventmesh/cli");
    assert!(p.event.id.is_none() && p.event.data.is_none());
    if std::env::var_os("EVENTMESH_SERVER").is_none() {
        assert_eq!(p.connection.server, "http://127.0.0.1:10105");
    }
    if std::env::var_os("EVENTMESH_TCP_SERVER").is_none() {
        assert_eq!(p.connection.tcp_server, "127.0.0.1:10000");
    }
    let e = parse(&["publish", "--topic", "t", "--data", "x", "--file", "f"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    let e = parse(&["publish", "--data", "x"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    let e = parse(&["publish", "--topic", "t", "--transport", "sse"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
}

#[test]
fn parses_subscribe() {
    let ClientCommand::Subscribe(s) = parse(&["subscribe", "--topic", "t"]).unwrap() else {
        panic!()
    };
    assert_eq!(s.transport, SubscribeTransport::Sse);
    assert!(s.group.is_none() && s.client_id.is_none() && s.count.is_none());
    let ClientCommand::Subscribe(s) = parse(&[
        "subscribe",
        "--topic",
        "t",
        "--group",
        "g",
        "--client-id",
        "c1",
        "--transport",
        "poll",
        "--from",
        "earliest",
        "--mode",
        "broadcast",
        "--count",
        "3",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(s.group.as_deref(), Some("g"));
    assert_eq!(s.client_id.as_deref(), Some("c1"));
    assert_eq!(s.transport, SubscribeTransport::Poll);
    assert_eq!(s.from, Some(StartFrom::Earliest));
    assert_eq!(s.mode, Some(ModeArg::Broadcast));
    assert_eq!(s.count, Some(3));
    let ClientCommand::Subscribe(timed) = parse(&[
        "subscribe",
        "--topic",
        "t",
        "--from",
        "2026-12-05T09:00:00.250Z",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(timed.from, Some(StartFrom::TimeMs(1_796_461_200_250)));
    for t in ["sse", "ws", "tcp", "poll"] {
        assert!(parse(&["subscribe", "--topic", "t", "--transport", t]).is_ok());
    }
    assert!(parse(&["subscribe", "--topic", "t", "--count", "-1"]).is_err());
    assert!(parse(&["subscribe", "--topic", "t", "--from", "yesterday"]).is_err());
}

#[test]
fn help_names_the_environment() {
    let help = parse(&["subscribe", "--help"]).unwrap_err().to_string();
    for needle in [
        "EVENTMESH_SERVER",
        "EVENTMESH_TCP_SERVER",
        "EVENTMESH_TOKEN",
        "cli-<uuid>",
        "[default: sse]",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn parses_request() {
    let ClientCommand::Request(r) = parse(&["request", "--topic", "q", "--data", "hi"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.timeout_ms, 30_000);
    assert_eq!(r.transport, RequestTransport::Http);
    let ClientCommand::Request(r) =
        parse(&["request", "--topic", "q", "--timeout-ms", "250"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.timeout_ms, 250);
    let ClientCommand::Request(r) =
        parse(&["request", "--topic", "q", "--transport", "tcp"]).unwrap()
    else {
        panic!()
    };
    assert_eq!(r.transport, RequestTransport::Tcp);
    let e = parse(&["request", "--topic", "q", "--transport", "ws"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
}

#[test]
fn data_json_versus_text() {
    let (d, ct) = event_data(b"{ \"a\" : [1, 2] }".to_vec());
    assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"{\"a\":[1,2]}")));
    assert_eq!(ct, "application/json");
    let (d, ct) = event_data(b"42".to_vec());
    assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"42")));
    assert_eq!(ct, "application/json");
    let (d, ct) = event_data(b"\"quoted\"".to_vec());
    assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"\"quoted\"")));
    assert_eq!(ct, "application/json");
    let (d, ct) = event_data(b"hello world".to_vec());
    assert_eq!(d, Data::Text("hello world".into()));
    assert_eq!(ct, "text/plain");
    let (d, ct) = event_data(b"{not json".to_vec());
    assert_eq!(d, Data::Text("{not json".into()));
    assert_eq!(ct, "text/plain");
    let (d, ct) = event_data(vec![0xff, 0x00]);
    assert!(matches!(d, Data::Binary(_)));
    assert_eq!(ct, "application/octet-stream");
}

pub(crate) fn event_args(data: Option<&str>) -> EventArgs {
    EventArgs {
        data: data.map(str::to_string),
        file: None,
        ty: "eventmesh.cli".into(),
        source: "/eventmesh/cli".into(),
        id: None,
        subject: None,
        datacontenttype: None,
        ext: Vec::new(),
        partition_key: None,
    }
}

#[test]
fn builds_events() {
    let e = build_event(&event_args(Some("{\"n\":1}"))).unwrap();
    let v: Value = serde_json::from_slice(&e.to_json()).unwrap();
    assert_eq!(v["data"], serde_json::json!({"n": 1}));
    assert_eq!(v["datacontenttype"], "application/json");
    assert_eq!(v["type"], "eventmesh.cli");
    assert_eq!(v["source"], "/eventmesh/cli");
    assert!(uuid::Uuid::parse_str(v["id"].as_str().unwrap()).is_ok());

    let e = build_event(&event_args(Some("plain words"))).unwrap();
    let v: Value = serde_json::from_slice(&e.to_json()).unwrap();
    assert_eq!(v["data"], "plain words");
    assert_eq!(v["datacontenttype"], "text/plain");

    let e = build_event(&event_args(None)).unwrap();
    assert_eq!(e.data, Data::None);
    assert!(e.datacontenttype.is_none());

    let mut bad = event_args(None);
    bad.source = "has space".into();
    assert!(matches!(build_event(&bad), Err(Error::InvalidArgument(_))));

    let mut missing = event_args(None);
    missing.file = Some("/definitely/not/here.json".into());
    let e = build_event(&missing).unwrap_err();
    assert!(e.to_string().contains("cannot read"), "{e}");
    assert_eq!(Failure::from(e).status, 2);
}

#[test]
fn reads_data_files() {
    let path = std::env::temp_dir().join(format!("em-cli-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&path, b"{\"from\": \"file\"}\n").unwrap();
    let mut a = event_args(None);
    a.file = Some(path.clone());
    let e = build_event(&a).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        e.data,
        Data::Json(bytes::Bytes::from_static(b"{\"from\":\"file\"}"))
    );
}

#[test]
fn exit_statuses() {
    let unreachable = Failure::from(Error::Unreachable {
        server: "http://127.0.0.1:1".into(),
        cause: "Connection refused (os error 111)".into(),
    });
    assert_eq!(unreachable.status, 1);
    assert_eq!(
        unreachable.message,
        "cannot reach the eventmesh server at http://127.0.0.1:1: Connection refused (os error 111)"
    );
    let api = Failure::from(Error::from_api_body(
        403,
        br#"{"error":"forbidden","message":"no publish on t"}"#,
    ));
    assert_eq!(api.status, 1);
    assert_eq!(api.message, "no publish on t (forbidden, HTTP 403)");
    assert_eq!(Failure::from(Error::InvalidArgument("x".into())).status, 2);
}

#[tokio::test]
async fn unreachable_server_fails_with_status_1() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = format!("http://127.0.0.1:{port}");
    for args in [
        vec![
            "publish", "--topic", "t", "--data", "1", "--server", &server,
        ],
        vec!["request", "--topic", "t", "--server", &server],
        vec!["subscribe", "--topic", "t", "--server", &server],
        vec![
            "subscribe",
            "--topic",
            "t",
            "--transport",
            "poll",
            "--server",
            &server,
        ],
        vec![
            "subscribe",
            "--topic",
            "t",
            "--transport",
            "ws",
            "--server",
            &server,
        ],
    ] {
        let cmd = parse(&args).unwrap();
        let mut out = Vec::new();
        let f = execute(cmd, &mut out).await.unwrap_err();
        assert_eq!(f.status, 1, "{args:?}");
        assert!(
            f.message
                .starts_with(&format!("cannot reach the eventmesh server at {server}: ")),
            "{args:?}: {}",
            f.message
        );
        assert!(out.is_empty());
    }
}

#[tokio::test]
async fn publish_and_subscribe_over_tcp() {
    let (addr, server) = crate::testutil::tcp_server(0).await;
    let cmd = parse(&[
        "publish",
        "--topic",
        "orders",
        "--data",
        "{\"n\":1}",
        "--id",
        "e-42",
        "--transport",
        "tcp",
        "--tcp-server",
        &addr,
    ])
    .unwrap();
    let mut out = Vec::new();
    execute(cmd, &mut out).await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"id\":\"e-42\",\"topic\":\"orders\",\"partition\":0,\"offset\":5}\n"
    );
    let frames = server.await.unwrap();
    assert_eq!(
        frames.last().unwrap().kind,
        eventmesh_core::tcp_frame::FrameType::Goodbye
    );

    let (addr, server) = crate::testutil::tcp_server(0).await;
    let cmd = parse(&[
        "subscribe",
        "--topic",
        "orders",
        "--transport",
        "tcp",
        "--count",
        "1",
        "--tcp-server",
        &addr,
    ])
    .unwrap();
    let mut out = Vec::new();
    execute(cmd, &mut out).await.unwrap();
    let line = String::from_utf8(out).unwrap();
    assert!(
        line.ends_with('\n') && line.matches('\n').count() == 1,
        "{line:?}"
    );
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], "e1");
    assert_eq!(v["data"], serde_json::json!({"n": 1}));
    let frames = server.await.unwrap();
    use eventmesh_core::tcp_frame::FrameType as F;
    let kinds: Vec<F> = frames.iter().map(|f| f.kind).collect();
    let ack = kinds.iter().position(|k| *k == F::Ack).expect("acked");
    let unsub = kinds
        .iter()
        .position(|k| *k == F::Unsubscribe)
        .expect("unsubscribed");
    assert!(ack < unsub);
    assert_eq!(kinds.last(), Some(&F::Goodbye));
    let hello: Value = serde_json::from_slice(&frames[0].payload).unwrap();
    assert!(hello["clientId"].as_str().unwrap().starts_with("cli-"));
}

#[tokio::test]
async fn request_timeout_message() {
    use crate::testutil::{http_server, Reply};
    let (base, _seen) =
        http_server(|_, _| Reply::json(408, r#"{"error":"request_timeout","message":"no reply"}"#))
            .await;
    let cmd = parse(&[
        "request",
        "--topic",
        "q",
        "--timeout-ms",
        "50",
        "--server",
        &base,
    ])
    .unwrap();
    let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
    assert_eq!(f.status, 1);
    assert_eq!(f.message, "no reply within 50 ms");
}

#[tokio::test]
async fn subscribe_over_poll_prints_and_acks() {
    use crate::testutil::{http_server, Reply};
    let (base, mut seen) = http_server(|req, _| match req.target.split('?').next().unwrap() {
        "/events/subscribe" => Reply::json(
            200,
            r#"{"subscriptionId":"s","clientId":"me","topic":"t","group":"default","mode":"LOAD_BALANCE"}"#,
        ),
        "/events/poll" => Reply::json(
            200,
            r#"[{"deliveryId":"d1","event":{"specversion":"1.0","id":"1","source":"/s","type":"t"}},{"deliveryId":"d2","event":{"specversion":"1.0","id":"2","source":"/s","type":"t"}}]"#,
        ),
        "/events/ack" => Reply::json(200, r#"{"status":"acked"}"#),
        _ => Reply::json(404, r#"{"error":"not_found","message":"no"}"#),
    })
    .await;
    let cmd = parse(&[
        "subscribe",
        "--topic",
        "t",
        "--transport",
        "poll",
        "--client-id",
        "me",
        "--count",
        "2",
        "--server",
        &base,
        "--token",
        "tok",
    ])
    .unwrap();
    let mut out = Vec::new();
    execute(cmd, &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["1", "2"]);
    let mut targets = Vec::new();
    while let Ok(r) = seen.try_recv() {
        assert_eq!(r.header("authorization"), Some("Bearer tok"));
        targets.push((r.target.clone(), String::from_utf8(r.body).unwrap()));
    }
    assert_eq!(targets[0].0, "/events/subscribe");
    assert_eq!(
        targets[1].0,
        "/events/poll?clientId=me&timeoutMs=30000&max=2"
    );
    assert_eq!(targets[2].1, r#"{"deliveryId":"d1"}"#);
    assert_eq!(targets[3].1, r#"{"deliveryId":"d2"}"#);
    // An explicit --client-id keeps its subscription.
    assert_eq!(targets.len(), 4, "{targets:?}");
}

#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let cmd = parse(&["publish", "--topic", "t"]).unwrap();
    let fut = run(cmd);
    send(&fut);
}

#[tokio::test]
// The handshake callback's signature is tungstenite's.
#[allow(clippy::result_large_err)]
async fn publish_over_ws_without_a_subscription() {
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
    use tokio_tungstenite::tungstenite::Message;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        for n in 0.. {
            let (mut sock, _) = listener.accept().await.unwrap();
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                if n == 2 {
                    // The unsubscribe, over plain HTTP.
                    let mut buf = vec![0u8; 4096];
                    let k = sock.read(&mut buf).await.unwrap();
                    let text = String::from_utf8_lossy(&buf[..k]).to_string();
                    seen_tx
                        .send(text.lines().next().unwrap().to_string())
                        .unwrap();
                    let body = r#"{"removed":true}"#;
                    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    sock.write_all(resp.as_bytes()).await.unwrap();
                    return;
                }
                let tx = seen_tx.clone();
                let accepted = tokio_tungstenite::accept_hdr_async(
                    sock,
                    move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                        tx.send(req.uri().to_string()).unwrap();
                        if n == 0 {
                            let mut e = ErrorResponse::new(Some(
                                r#"{"error":"unknown_client","message":"no pull subscription"}"#
                                    .to_string(),
                            ));
                            *e.status_mut() =
                                tokio_tungstenite::tungstenite::http::StatusCode::NOT_FOUND;
                            Err(e)
                        } else {
                            Ok(resp)
                        }
                    },
                )
                .await;
                let Ok(mut ws) = accepted else { return };
                while let Some(Ok(m)) = ws.next().await {
                    let Message::Text(t) = m else { continue };
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    let a = serde_json::json!({"type":"published","requestId":v["requestId"],
                        "id":v["event"]["id"],"topic":v["topic"],"partition":2,"offset":8});
                    ws.send(Message::text(a.to_string())).await.unwrap();
                }
            });
        }
    });
    let cmd = parse(&[
        "publish",
        "--topic",
        "orders",
        "--data",
        "x",
        "--id",
        "e-1",
        "--transport",
        "ws",
        "--server",
        &base,
    ])
    .unwrap();
    let mut out = Vec::new();
    execute(cmd, &mut out).await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"id\":\"e-1\",\"topic\":\"orders\",\"partition\":2,\"offset\":8}\n"
    );
    let first = seen.recv().await.unwrap();
    assert!(first.starts_with("/events/ws?clientId=cli-"), "{first}");
    assert!(!first.contains("topic="));
    let id = first.trim_start_matches("/events/ws?clientId=");
    assert_eq!(
        seen.recv().await.unwrap(),
        format!("/events/ws?clientId={id}&topic=orders&group={id}")
    );
    assert_eq!(
        seen.recv().await.unwrap(),
        "POST /events/unsubscribe HTTP/1.1"
    );
}

#[tokio::test]
async fn bad_server_url_is_a_usage_error() {
    let cmd = parse(&["publish", "--topic", "t", "--server", "ftp://x"]).unwrap();
    let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
    assert_eq!(f.status, 2);
    let cmd = parse(&["subscribe", "--topic", "t", "--count", "0"]).unwrap();
    let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
    assert_eq!(f.status, 2);
}
