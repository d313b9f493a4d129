//! Listeners that cannot be starved, through the real binary: connection
//! limits below the descriptor limit (a flood of idle sockets on the
//! traffic port leaves the admin port answering), per-address limits on
//! the traffic ports, and the deadlines on what a client sends (request
//! header, request body, the TCP `HELLO`) and on idle kept-alive
//! connections, none of which cut a stream (SSE, WebSocket).

mod common;

use std::time::Duration;

use bytes::BytesMut;
use common::*;
use eventmesh_client::{EventMeshClient, StreamOptions};
use eventmesh_core::tcp_frame::{self, Frame, FrameType};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a wait for the server to close a connection may take.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// `HOST:PORT` of an `http://HOST:PORT` URL.
fn host_port(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

async fn connect(url: &str) -> TcpStream {
    tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(host_port(url)))
        .await
        .expect("connected in time")
        .expect("connected")
}

/// Reads until the server closes the connection (end of stream or reset)
/// within `within`; what it sent before. Panics if it stays open.
async fn until_closed<R: AsyncRead + Unpin>(stream: &mut R, within: Duration) -> Vec<u8> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after {within:?}; it sent {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Writes `bytes` one at a time, one every 200 ms, until they are all sent
/// or the server closed the connection.
fn trickle<W>(mut w: W, bytes: Vec<u8>) -> tokio::task::JoinHandle<()>
where
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        for b in bytes {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if w.write_all(&[b]).await.is_err() {
                return;
            }
        }
    })
}

fn refused_series(listener: &str, reason: &str) -> String {
    format!("eventmesh_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}}")
}

fn open_series(listener: &str) -> String {
    format!("eventmesh_connections_open{{listener=\"{listener}\"}}")
}

/// How long a wait for a counter to reach its value may take.
const COUNT_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn idle_sockets_flooding_the_traffic_port_leave_the_admin_port_answering() {
    let dir = tempfile::tempdir().unwrap();
    // Started with a soft limit of 128 under a hard one of 256: the boot
    // raises it to 256 and derives the limits from that (reserve 64, admin
    // 16, traffic 176). The flood comes from one address, so the
    // per-address limit is lifted here to reach the listener's.
    let s = Server::start_with_nofile(
        dir.path(),
        &[
            "eventmesh.server.connections.per.address.max=100000",
            "eventmesh.server.http.header.timeout.ms=120000",
        ],
        128,
        256,
    );
    assert!(
        s.wait_for_log(&["descriptor limit: soft 256, hard 256; connections: traffic ports 176"]),
        "{}",
        s.log_text()
    );
    let c = client();
    let m = metrics(&c, &s).await;
    assert_eq!(m.get("process_max_fds"), 256.0);
    assert_eq!(
        m.get(r#"eventmesh_connections_limit{scope="traffic"}"#),
        176.0
    );
    assert_eq!(m.get(r#"eventmesh_connections_limit{scope="admin"}"#), 16.0);
    assert_eq!(
        m.get(r#"eventmesh_connections_limit{scope="per_address"}"#),
        100000.0
    );

    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(connect(&s.traffic).await);
    }
    let refused = refused_series("traffic", "limit");
    assert_eq!(
        counter_reaching(&c, &s, &refused, 124.0, COUNT_WITHIN).await,
        124.0
    );
    assert_eq!(metric(&c, &s, &open_series("traffic")).await, 176.0);
    // Probes answer, each on a new connection to the admin port.
    for path in ["/admin/health", "/admin/ready"] {
        let fresh = client();
        let r = fresh.get(s.admin_url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    assert!(!s.log_text().contains("accept failed"), "{}", s.log_text());

    // Once the flood is gone, the traffic port serves again.
    drop(flood);
    assert_eq!(
        metric_reaching(
            &c,
            &s,
            &open_series("traffic"),
            0.0,
            Duration::from_secs(20)
        )
        .await,
        0.0
    );
    publish(&c, &s, "after-flood", &event("a1")).await;
    assert_eq!(counter(&c, &s, &refused).await, 124.0);
}

#[tokio::test]
async fn half_sent_and_trickled_request_headers_are_cut_off_on_both_http_ports() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &["eventmesh.server.http.header.timeout.ms=1000"],
    );
    let c = client();
    for (listener, url) in [("traffic", s.traffic.clone()), ("admin", s.admin.clone())] {
        let started = Instant::now();
        let mut silent = connect(&url).await;
        let mut half = connect(&url).await;
        half.write_all(b"GET /admin/health HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let (mut slow, w) = connect(&url).await.into_split();
        // A header that would take 10 s at this pace.
        let writing = trickle(
            w,
            b"GET /admin/health HTTP/1.1\r\nX-Slow: yes\r\n\r\n".to_vec(),
        );
        for conn in [&mut silent, &mut half] {
            assert_eq!(until_closed(conn, CLOSE_WITHIN).await, b"", "{listener}");
        }
        assert_eq!(
            until_closed(&mut slow, CLOSE_WITHIN).await,
            b"",
            "{listener}"
        );
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(1000), "{listener}: {took:?}");
        writing.abort();
        assert_eq!(
            counter_reaching(
                &c,
                &s,
                &refused_series(listener, "timeout_header"),
                3.0,
                COUNT_WITHIN
            )
            .await,
            3.0,
            "{listener}"
        );
    }
}

#[tokio::test]
async fn a_trickled_body_is_answered_408_and_the_connection_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.server.http.body.timeout.ms=1000"]);
    let c = client();
    let (mut r, mut w) = connect(&s.traffic).await.into_split();
    w.write_all(
        b"POST /events/publish?topic=slow HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/cloudevents+json\r\nContent-Length: 200\r\n\r\n",
    )
    .await
    .unwrap();
    let started = Instant::now();
    let writing = trickle(w, vec![b' '; 200]);
    let got = String::from_utf8(until_closed(&mut r, CLOSE_WITHIN).await).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(1000));
    writing.abort();
    let (head, body) = got.split_once("\r\n\r\n").unwrap_or((&got, ""));
    assert!(head.starts_with("HTTP/1.1 408 "), "{got}");
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case("connection: close")),
        "{got}"
    );
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"], "request_timeout", "{body}");
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("traffic", "timeout_body"),
            1.0,
            COUNT_WITHIN
        )
        .await,
        1.0
    );
    // Nothing was published.
    assert_eq!(
        metric(&c, &s, "eventmesh_events_published_total").await,
        0.0
    );
}

#[tokio::test]
async fn a_half_sent_or_trickled_hello_is_cut_off_at_the_deadline_from_accept() {
    let dir = tempfile::tempdir().unwrap();
    // Heartbeats of 15 s: silence alone would take 45 s to close.
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.server.tcp.port=0",
            "eventmesh.server.tcp.hello.timeout.ms=1000",
        ],
    );
    let tcp = s.tcp.clone().unwrap();
    let c = client();
    let hello = Frame::json(FrameType::Hello, 1, &json!({"clientId": "slow"})).to_bytes();
    let started = Instant::now();
    let mut half = connect(&tcp).await;
    half.write_all(&hello[..10]).await.unwrap();
    let (mut slow, w) = connect(&tcp).await.into_split();
    // One byte every 200 ms: the whole HELLO would take seconds.
    let writing = trickle(w, hello.to_vec());
    for got in [
        until_closed(&mut half, CLOSE_WITHIN).await,
        until_closed(&mut slow, CLOSE_WITHIN).await,
    ] {
        let mut buf = BytesMut::from(&got[..]);
        let frame = tcp_frame::decode(&mut buf, usize::MAX)
            .unwrap()
            .expect("an error frame before the close");
        assert_eq!(frame.kind, FrameType::Error);
        let why: serde_json::Value = serde_json::from_slice(&frame.payload).unwrap();
        assert_eq!(why["error"], "hello_timeout", "{why}");
    }
    assert!(started.elapsed() >= Duration::from_millis(1000));
    writing.abort();
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("tcp", "timeout_hello"),
            2.0,
            COUNT_WITHIN
        )
        .await,
        2.0
    );
    // A HELLO sent at once is still welcome.
    let mut ok = connect(&tcp).await;
    ok.write_all(&hello).await.unwrap();
    let mut buf = BytesMut::new();
    let answer = loop {
        if let Some(f) = tcp_frame::decode(&mut buf, usize::MAX).unwrap() {
            break f;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), ok.read_buf(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert_ne!(n, 0, "closed without an answer");
    };
    assert_eq!(answer.kind, FrameType::HelloOk);
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_the_traffic_ports() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.server.tcp.port=0",
            "eventmesh.server.connections.per.address.max=3",
            "eventmesh.server.http.header.timeout.ms=60000",
            "eventmesh.server.tcp.hello.timeout.ms=60000",
        ],
    );
    let c = client();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&s.traffic).await);
    }
    assert_eq!(
        metric_reaching(
            &c,
            &s,
            &open_series("traffic"),
            3.0,
            Duration::from_secs(10)
        )
        .await,
        3.0
    );
    // The fourth from 127.0.0.1 is closed at once, on either traffic port.
    let mut fourth = connect(&s.traffic).await;
    assert_eq!(until_closed(&mut fourth, CLOSE_WITHIN).await, b"");
    let mut over_tcp = connect(s.tcp.as_deref().unwrap()).await;
    assert_eq!(until_closed(&mut over_tcp, CLOSE_WITHIN).await, b"");
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("traffic", "per_address"),
            1.0,
            COUNT_WITHIN
        )
        .await,
        1.0
    );
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("tcp", "per_address"),
            1.0,
            COUNT_WITHIN
        )
        .await,
        1.0
    );
    assert_eq!(metric(&c, &s, &open_series("traffic")).await, 3.0);
    assert_eq!(metric(&c, &s, &open_series("tcp")).await, 0.0);
    // A place freed is a place taken again.
    drop(held.pop());
    assert_eq!(
        metric_reaching(
            &c,
            &s,
            &open_series("traffic"),
            2.0,
            Duration::from_secs(10)
        )
        .await,
        2.0
    );
    let r = client().get(s.url("/no-such-route")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

/// Reads one HTTP response with a `Content-Length` body; its text.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .expect("a content-length");
            if body.len() >= length {
                return text;
            }
        }
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert_ne!(
            n,
            0,
            "closed mid-answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_once_idle_for_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.server.http.idle.timeout.ms=1000"]);
    let c = client();
    let mut conn = connect(&s.traffic).await;
    for _ in 0..2 {
        conn.write_all(b"GET /no-such-route HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_response(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    }
    let answered = Instant::now();
    assert_eq!(until_closed(&mut conn, CLOSE_WITHIN).await, b"");
    assert!(answered.elapsed() >= Duration::from_millis(900));
    // An idle close is not a refusal.
    let m = metrics(&c, &s).await;
    assert_eq!(
        m.samples.get(&refused_series("traffic", "timeout_header")),
        None
    );
}

#[tokio::test]
async fn sse_and_websocket_streams_outlive_every_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.server.http.header.timeout.ms=500",
            "eventmesh.server.http.idle.timeout.ms=500",
            "eventmesh.server.http.body.timeout.ms=500",
        ],
    );
    let sdk = EventMeshClient::new(s.traffic.clone()).unwrap();
    let mut sse = sdk
        .sse(StreamOptions::new("late-sse").topic("late-sse"))
        .await
        .unwrap();
    let mut ws = sdk
        .websocket(StreamOptions::new("late-ws").topic("late-ws"))
        .await
        .unwrap();
    // Three times every timeout passes with nothing sent on either stream.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sdk.publish("late-sse", &event("s1")).await.unwrap();
    sdk.publish("late-ws", &event("w1")).await.unwrap();
    let within = Duration::from_secs(10);
    let got = tokio::time::timeout(within, sse.next())
        .await
        .expect("an SSE delivery in time")
        .expect("the SSE stream open")
        .expect("a delivery");
    assert_eq!(got.event["id"], "s1");
    let got = tokio::time::timeout(within, ws.next())
        .await
        .expect("a WebSocket delivery in time")
        .expect("the WebSocket open")
        .expect("a delivery");
    assert_eq!(got.event["id"], "w1");
    let c = client();
    let m = metrics(&c, &s).await;
    assert_eq!(
        m.samples.get(&refused_series("traffic", "timeout_header")),
        None
    );
    assert_eq!(
        m.samples.get(&refused_series("traffic", "timeout_body")),
        None
    );
    ws.close().await;
}

#[tokio::test]
async fn a_silent_or_stalled_tls_handshake_is_cut_off_on_every_tls_port() {
    let dir = tempfile::tempdir().unwrap();
    let pki = eventmesh_testpki::TestPki::new(dir.path(), "mesh");
    let cert = pki.server("server", "mesh");
    let settings = [
        format!("eventmesh.server.tls.cert.file={}", cert.cert.display()),
        format!("eventmesh.server.tls.key.file={}", cert.key.display()),
        "eventmesh.server.tls.handshake.timeout.ms=1000".to_string(),
        // Plain, to read its metrics without a CA.
        "eventmesh.server.admin.tls.enabled=false".to_string(),
        "eventmesh.server.tcp.port=0".to_string(),
        // Longer than the test: only the handshake's deadline can close.
        "eventmesh.server.http.header.timeout.ms=60000".to_string(),
        "eventmesh.server.tcp.hello.timeout.ms=60000".to_string(),
    ];
    let s = Server::start_with(&dir.path().join("data"), &settings);
    assert!(s.traffic.starts_with("https://"), "{}", s.traffic);
    let c = client();
    let tcp = s.tcp.clone().unwrap();
    let started = Instant::now();
    let mut silent = connect(&s.traffic).await;
    // A handshake record announcing 200 bytes, and then nothing.
    let mut stalled = connect(&s.traffic).await;
    stalled.write_all(b"\x16\x03\x01\x00\xc8").await.unwrap();
    let mut over_tcp = connect(&tcp).await;
    for conn in [&mut silent, &mut stalled, &mut over_tcp] {
        assert_eq!(until_closed(conn, CLOSE_WITHIN).await, b"");
    }
    assert!(started.elapsed() >= Duration::from_millis(1000));
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("traffic", "timeout_tls"),
            2.0,
            COUNT_WITHIN
        )
        .await,
        2.0
    );
    assert_eq!(
        counter_reaching(
            &c,
            &s,
            &refused_series("tcp", "timeout_tls"),
            1.0,
            COUNT_WITHIN
        )
        .await,
        1.0
    );
    assert_eq!(metric(&c, &s, &open_series("traffic")).await, 0.0);
}
