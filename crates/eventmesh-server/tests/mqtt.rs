//! The MQTT listener against the real binary, with clients nobody here
//! wrote: `mosquitto_pub` and `mosquitto_sub` (Debian's
//! `mosquitto-clients`) and the Eclipse Paho Python client
//! (`tests/mqtt/client.py`, paho-mqtt from `scripts/mqtt.sh`, which
//! `scripts/test.sh` runs, exporting `EVENTMESH_MQTT_PYTHON`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::gate::{start_closed, GateFiles};
use common::hook::{start_hook, HookMode};
use common::*;
use serde_json::{json, Value};

#[path = "mqtt/cluster.rs"]
mod cluster;
#[path = "mqtt/held.rs"]
mod held;
#[path = "mqtt/options.rs"]
mod options;
#[path = "mqtt/quota.rs"]
mod quota;
#[path = "mqtt/reply.rs"]
mod reply;
#[path = "mqtt/websocket.rs"]
mod websocket;

/// The Python with paho-mqtt that `scripts/mqtt.sh` prepared.
fn python() -> String {
    let py = std::env::var("EVENTMESH_MQTT_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/mqtt-venv/bin/python".to_string());
    assert!(
        std::path::Path::new(&py).exists(),
        "no Python with paho-mqtt at {py}: run scripts/mqtt.sh (scripts/test.sh does) or set EVENTMESH_MQTT_PYTHON"
    );
    py
}

fn mqtt_server(data: &std::path::Path, extra: &[&str]) -> Server {
    let mut settings = vec!["eventmesh.server.mqtt.port=0"];
    settings.extend_from_slice(extra);
    Server::start(data, &settings)
}

/// A client process whose output lines arrive on a channel.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    /// Lines read while looking for another, oldest first.
    pending: std::collections::VecDeque<String>,
    /// How long a line is waited for.
    wait: Duration,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a client");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Proc {
            child,
            lines,
            seen: Vec::new(),
            pending: Default::default(),
            wait: Duration::from_secs(20),
        }
    }

    /// Waits up to `wait` for each line from now on.
    fn waiting(mut self, wait: Duration) -> Proc {
        self.wait = wait;
        self
    }

    /// The first line containing `part` not taken yet (lines passed over
    /// stay for later calls), within the wait (20 s unless set).
    fn line_with(&mut self, part: &str) -> String {
        if let Some(i) = self.pending.iter().position(|l| l.contains(part)) {
            return self.pending.remove(i).expect("found");
        }
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(part) {
                        return line;
                    }
                    self.pending.push_back(line);
                }
                Err(_) => panic!(
                    "no line with {part:?}; saw:\n{}\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                ),
            }
        }
    }

    /// The next JSON step named `step` (paho client).
    fn step(&mut self, step: &str) -> Value {
        let line = self.line_with(&format!("\"step\": \"{step}\""));
        serde_json::from_str(&line).unwrap()
    }

    fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// Waits for the exit (20 s at most); true when it succeeded.
    fn succeeded(&mut self) -> bool {
        wait_child(&mut self.child, Duration::from_secs(20)).is_some_and(|s| s.success())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn paho(args: &[&str]) -> Proc {
    let mut cmd = Command::new(python());
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mqtt/client.py"));
    cmd.args(args);
    Proc::spawn(cmd)
}

/// Runs a paho command to its end; its steps.
fn paho_run(args: &[&str]) -> Vec<Value> {
    let mut p = paho(args);
    let ok = p.succeeded();
    let lines: Vec<String> = p.lines.try_iter().collect();
    assert!(
        ok,
        "client.py {args:?} failed:\n{}\n{}",
        lines.join("\n"),
        p.stderr()
    );
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Publishes `payload` to `topic` at `qos` with paho (`extra`: more
/// client.py options); its steps.
fn publish_mqtt(port: &str, topic: &str, qos: &str, payload: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "publish",
        "--port",
        port,
        "--topic",
        topic,
        "--qos",
        qos,
        "--payload",
        payload,
    ];
    args.extend_from_slice(extra);
    paho_run(&args)
}

/// The reason code of the acknowledgement of a publish (`extra` as for
/// [`publish_mqtt`]).
fn published(port: &str, topic: &str, qos: &str, payload: &str, extra: &[&str]) -> Value {
    step(&publish_mqtt(port, topic, qos, payload, extra), "published")["reason"].clone()
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
}

#[test]
fn mosquitto_clients_meet_at_every_qos_in_both_versions() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    for version in ["mqttv311", "mqttv5"] {
        for qos in ["0", "1", "2"] {
            let filter = format!("m/{version}/{qos}/#");
            let topic = format!("m/{version}/{qos}/x");
            // Line-buffered, so that its debug lines arrive as they are
            // printed.
            let mut sub = Command::new("stdbuf");
            sub.args(["-oL", "mosquitto_sub"]);
            sub.args(["-h", "127.0.0.1", "-p", &port, "-V", version, "-q", qos])
                .args(["-t", &filter, "-C", "1", "-W", "20", "-d"])
                .args(["-F", "MSG|%t|%q|%r|%p"]);
            let mut sub = Proc::spawn(sub);
            sub.line_with("received SUBACK");
            let status = Command::new("mosquitto_pub")
                .args(["-h", "127.0.0.1", "-p", &port, "-V", version, "-q", qos])
                .args(["-t", &topic, "-m", &format!("hello {version} {qos}")])
                .status()
                .unwrap();
            assert!(status.success(), "mosquitto_pub {version} QoS {qos}");
            let got = sub.line_with("MSG|");
            assert_eq!(got, format!("MSG|{topic}|{qos}|0|hello {version} {qos}"));
            assert!(sub.succeeded(), "mosquitto_sub {version} QoS {qos}");
        }
    }
}

/// A paho subscriber in the background (`listen` with `topics` at `qos`,
/// ending after `count` messages; `extra`: more client.py options).
fn listener(port: &str, topics: &[&str], qos: &str, count: &str, extra: &[&str]) -> Proc {
    paho(&listen_args(port, topics, qos, count, extra))
}

fn listen_args<'a>(
    port: &'a str,
    topics: &[&'a str],
    qos: &'a str,
    count: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["listen", "--port", port, "--qos", qos, "--count", count];
    for t in topics {
        args.extend(["--topic", t]);
    }
    args.extend_from_slice(extra);
    args
}

/// [`listener`] run to its end; its steps.
fn listened(port: &str, topics: &[&str], qos: &str, count: &str, extra: &[&str]) -> Vec<Value> {
    paho_run(&listen_args(port, topics, qos, count, extra))
}

/// (topic, payload, retain) of a message step.
fn message(m: &Value) -> (String, String, bool) {
    (
        m["topic"].as_str().unwrap().into(),
        m["payload"].as_str().unwrap().into(),
        m["retain"].as_bool().unwrap(),
    )
}

fn msg(topic: &str, payload: &str, retain: bool) -> (String, String, bool) {
    (topic.into(), payload.into(), retain)
}

#[test]
fn retained_messages_are_kept_per_topic_and_cleared_by_an_empty_one() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    for (topic, payload) in [("ret/a", "first"), ("ret/a", "second"), ("ret/b", "bee")] {
        assert_eq!(published(&port, topic, "1", payload, &["--retain"]), 0);
    }
    for version in ["4", "5"] {
        let steps = listened(&port, &["ret/+"], "1", "2", &["--version", version]);
        let mut got: Vec<_> = steps
            .iter()
            .filter(|s| s["step"] == "message")
            .map(message)
            .collect();
        got.sort();
        assert_eq!(
            got,
            [msg("ret/a", "second", true), msg("ret/b", "bee", true)],
            "MQTT {version}"
        );
    }
    // An empty retained publish clears the topic's: a new subscriber gets
    // only `ret/b`'s, then the marker published after it subscribed.
    assert_eq!(published(&port, "ret/a", "1", "", &["--retain"]), 0);
    let mut sub = listener(&port, &["ret/+"], "1", "99", &["--until-payload", "marker"]);
    sub.step("subscribed");
    assert_eq!(published(&port, "ret/c", "1", "marker", &[]), 0);
    let mut got = Vec::new();
    loop {
        let m = message(&sub.step("message"));
        let last = m.1 == "marker";
        got.push(m);
        if last {
            break;
        }
    }
    assert_eq!(
        got,
        [msg("ret/b", "bee", true), msg("ret/c", "marker", false)]
    );
    assert!(sub.succeeded());
}

#[test]
fn a_will_goes_out_when_its_client_drops_without_disconnect() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    for version in ["4", "5"] {
        let topic = format!("will/{version}");
        let mut sub = listener(&port, &[&topic], "1", "1", &[]);
        sub.step("subscribed");
        let steps = paho_run(&[
            "will",
            "--port",
            &port,
            "--version",
            version,
            "--topic",
            &topic,
            "--payload",
            "gone",
        ]);
        step(&steps, "dropped");
        assert_eq!(message(&sub.step("message")), msg(&topic, "gone", false));
        assert!(sub.succeeded());
    }
    // MQTT 5: a will delay of an hour ends with the session, which expires
    // a second after the drop.
    let mut sub = listener(&port, &["will/late"], "1", "1", &[]);
    sub.step("subscribed");
    let steps = paho_run(&[
        "will",
        "--port",
        &port,
        "--topic",
        "will/late",
        "--payload",
        "session over",
        "--will-delay",
        "3600",
        "--persistent",
        "--expiry",
        "1",
        "--client-id",
        "late",
    ]);
    step(&steps, "dropped");
    assert_eq!(
        message(&sub.step("message")),
        msg("will/late", "session over", false)
    );
    assert!(sub.succeeded());
}

#[test]
fn a_persistent_session_survives_a_kill_9_with_its_subscriptions() {
    let data = tempfile::tempdir().unwrap();
    let mut s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    for version in ["4", "5"] {
        let id = format!("keeper-{version}");
        let filter = format!("keep/{version}/#");
        let steps = listened(
            &port,
            &[&filter],
            "1",
            "0",
            &["--version", version, "--client-id", &id, "--persistent"],
        );
        assert_eq!(step(&steps, "subscribed")["granted"], json!([1]));
        assert_eq!(step(&steps, "subscribed")["sessionPresent"], false);
    }
    // The admin API shows the sessions, kept while disconnected.
    let c = client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sessions: Value = rt.block_on(admin_json(&c, &s, "/admin/mqtt/sessions"));
    let shown: Vec<Value> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            json!([
                v["clientId"],
                v["protocol"],
                v["connected"],
                v["persistent"],
                v["subscriptions"]
            ])
        })
        .collect();
    assert_eq!(
        shown,
        [
            json!(["keeper-4", 4, false, true, [{"filter": "keep/4/#", "qos": 1}]]),
            json!(["keeper-5", 5, false, true, [{"filter": "keep/5/#", "qos": 1}]]),
        ]
    );
    let clients: Value = rt.block_on(admin_json(&c, &s, "/admin/clients"));
    let keeper = clients
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["clientId"] == "mqtt.keeper-5")
        .expect("the MQTT client is listed");
    assert_eq!(keeper["mqtt"]["expiryS"], 300);
    assert_eq!(
        keeper["subscriptions"].as_array().unwrap().len(),
        2,
        "keep.5 and keep.5.>"
    );
    s.kill9();
    let s = s.restart_on_same_ports_with(&[format!("eventmesh.server.mqtt.port={port}")]);
    for version in ["4", "5"] {
        for i in 0..3 {
            let mut ev = event(&format!("k{version}-{i}"));
            ev["data"] = json!({"i": i});
            rt.block_on(publish(&c, &s, &format!("keep.{version}.x"), &ev));
        }
    }
    for version in ["4", "5"] {
        let id = format!("keeper-{version}");
        let steps = paho_run(&[
            "resume",
            "--port",
            &port,
            "--version",
            version,
            "--client-id",
            &id,
            "--persistent",
            "--count",
            "3",
        ]);
        assert_eq!(
            step(&steps, "subscribed")["sessionPresent"],
            true,
            "MQTT {version}"
        );
        let got: Vec<&str> = steps
            .iter()
            .filter(|s| s["step"] == "message")
            .map(|m| m["topic"].as_str().unwrap())
            .collect();
        let want = format!("keep/{version}/x");
        assert_eq!(got, [want.as_str(); 3], "MQTT {version}");
    }
}

#[tokio::test]
async fn http_and_mqtt_clients_meet_with_the_event_attributes_exact() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(data.path(), &[]);
    let port = s.mqtt_port().to_string();
    let c = client();
    // HTTP → MQTT 5 (binary mode) and MQTT 3.1.1 (structured mode).
    let mut v5 = listener(
        &port,
        &["meet/+"],
        "1",
        "1",
        &["--version", "5", "--sub-id", "9"],
    );
    let mut v4 = listener(&port, &["meet/#"], "1", "1", &["--version", "4"]);
    v5.step("subscribed");
    v4.step("subscribed");
    let ev = json!({
        "specversion": "1.0", "id": "e-1", "source": "/http", "type": "order.created",
        "subject": "o-7", "time": "2026-12-05T10:00:00Z", "region": "eu",
        "datacontenttype": "application/json", "data": {"total": 12}
    });
    publish(&c, &s, "meet.orders", &ev).await;
    let m = v5.step("message");
    assert_eq!(m["topic"], "meet/orders");
    assert_eq!(
        serde_json::from_str::<Value>(m["payload"].as_str().unwrap()).unwrap(),
        json!({"total": 12})
    );
    assert_eq!(
        m["props"],
        json!({
            "ContentType": "application/json",
            "PayloadFormatIndicator": 1,
            "SubscriptionIdentifier": [9],
            "UserProperty": [
                ["specversion", "1.0"], ["id", "e-1"], ["source", "/http"], ["type", "order.created"],
                ["subject", "o-7"], ["time", "2026-12-05T10:00:00Z"], ["region", "eu"]
            ]
        })
    );
    let m = v4.step("message");
    let structured: Value = serde_json::from_str(m["payload"].as_str().unwrap()).unwrap();
    assert_eq!(structured, ev);
    assert!(v5.succeeded() && v4.succeeded());

    // MQTT → webhook: a plain payload, and a CloudEvent in binary mode.
    let (hook_url, hook) = start_hook(HookMode::Accept).await;
    let (status, v) = post_json(
        &c,
        s.url("/events/subscribe"),
        json!({"clientId": "hook", "topic": "up.>", "url": hook_url}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let port2 = port.clone();
    let acks = tokio::task::spawn_blocking(move || {
        let plain = "{\"t\": 21.5}";
        let props = r#"{"ContentType": "text/plain", "UserProperty": [["specversion","1.0"],["id","ce-9"],["source","/dev"],["type","reading"],["unit","c"]]}"#;
        [
            published(&port2, "up/plain", "1", plain, &["--client-id", "dev-1"]),
            published(&port2, "up/ce", "2", "raw-bytes", &["--props", props]),
        ]
    })
    .await
    .unwrap();
    assert_eq!(acks, [0, 0]);
    assert!(
        wait_until(
            || hook.lock().unwrap().accepted.len() == 2,
            Duration::from_secs(20)
        )
        .await,
        "both reached the webhook"
    );
    let h = hook.lock().unwrap();
    let by_type = |t: &str| {
        let i = h
            .headers
            .iter()
            .position(|hd| hd["ce-type"] == t)
            .unwrap_or_else(|| panic!("no {t}"));
        (
            h.headers[i].clone(),
            String::from_utf8(h.accepted[i].2.clone()).unwrap(),
        )
    };
    let (headers, body) = by_type("eventmesh.mqtt.message");
    assert_eq!(headers["ce-source"], "/mqtt/dev-1");
    assert_eq!(body, "{\"t\": 21.5}");
    assert!(uuid_like(headers["ce-id"].to_str().unwrap()));
    let (headers, body) = by_type("reading");
    assert_eq!(
        (
            headers["ce-id"].to_str().unwrap(),
            headers["ce-source"].to_str().unwrap(),
            headers["ce-unit"].to_str().unwrap(),
            headers["content-type"].to_str().unwrap(),
            body.as_str()
        ),
        ("ce-9", "/dev", "c", "text/plain", "raw-bytes")
    );
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[test]
fn the_gate_refuses_mqtt_clients_without_a_valid_token_and_checks_each_topic() {
    let files = GateFiles::new("tok-dev acme dev\n");
    let acl = files.acl("allow dev PUBLISH ok*\nallow dev SUBSCRIBE ok*\nallow dev ACK *\n");
    let s = start_closed(&files, &["eventmesh.server.mqtt.port=0".to_string(), acl]);
    let port = s.mqtt_port().to_string();
    // No token, a wrong one: refused at CONNECT (5.0: 0x86; 3.1.1: return
    // code 4, which paho reports as the same reason, 134).
    for (version, want) in [("5", 134), ("4", 134)] {
        for pass in [None, Some("nope")] {
            let mut args = vec!["connect", "--port", &port, "--version", version];
            if let Some(p) = pass {
                args.extend(["--password", p]);
            }
            let steps = paho_run(&args);
            assert_eq!(
                step(&steps, "connack")["reason"],
                want,
                "MQTT {version}, password {pass:?}"
            );
        }
    }
    let steps = paho_run(&["connect", "--port", &port, "--password", "tok-dev"]);
    assert_eq!(step(&steps, "connack")["reason"], 0);
    // A publish the ACL denies gets 0x87 in its PUBACK, never a silent drop.
    let dev = ["--password", "tok-dev"];
    assert_eq!(published(&port, "secret/x", "1", "p", &dev), 135);
    // MQTT 3.1.1 has no negative PUBACK: the connection is closed.
    let v4 = ["--password", "tok-dev", "--version", "4"];
    let steps = publish_mqtt(&port, "secret/x", "1", "p", &v4);
    let closed = &step(&steps, "published")["disconnect"];
    assert!(closed.is_number(), "{steps:?}");
    assert_eq!(published(&port, "ok/x", "1", "p", &dev), 0);
    // A subscription the ACL denies: 0x87 (3.1.1: 0x80) for that filter.
    let steps = listened(&port, &["secret/#", "ok/+"], "1", "0", &dev);
    assert_eq!(step(&steps, "subscribed")["granted"], json!([135, 1]));
    let steps = listened(&port, &["secret/#"], "1", "0", &v4);
    assert_eq!(step(&steps, "subscribed")["granted"], json!([128]));
}

/// Bytes of an MQTT 5 CONNECT for client `id`, clean start, no properties.
fn connect_v5(id: &str) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0b10, 0, 30, 0];
    body.extend((id.len() as u16).to_be_bytes());
    body.extend(id.as_bytes());
    let mut p = vec![0x10, body.len() as u8];
    p.extend(body);
    p
}

/// Connects, sends `then` after the CONNACK, and returns everything the
/// server wrote until it closed the connection (10 s at most).
fn exchange(port: u16, then: &[u8]) -> Vec<u8> {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(&connect_v5("raw")).unwrap();
    let mut connack = [0u8; 2];
    sock.read_exact(&mut connack).unwrap();
    assert_eq!(connack[0], 0x20, "a CONNACK");
    let mut rest = vec![0u8; usize::from(connack[1])];
    sock.read_exact(&mut rest).unwrap();
    assert_eq!(rest[1], 0, "accepted");
    sock.write_all(then).unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    got
}

#[test]
fn bad_packets_close_the_connection_with_their_reason_code() {
    let data = tempfile::tempdir().unwrap();
    let s = mqtt_server(
        data.path(),
        &["eventmesh.server.mqtt.max.packet.bytes=1024"],
    );
    let port = s.mqtt_port();
    // DISCONNECT (0xE0) carrying the reason code, then the close.
    let reason = |got: &[u8]| -> u8 {
        assert_eq!(got.first(), Some(&0xE0), "a DISCONNECT: {got:?}");
        got[2]
    };
    // A wildcard in a PUBLISH topic name: 0x90.
    let mut publish = vec![0x30, 6, 0, 3];
    publish.extend(b"a/#");
    publish.push(0);
    assert_eq!(reason(&exchange(port, &publish)), 0x90);
    // A remaining length of five bytes: malformed, 0x81.
    assert_eq!(
        reason(&exchange(port, &[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])),
        0x81
    );
    // Larger than the listener takes: 0x95, from the header alone.
    assert_eq!(reason(&exchange(port, &[0x30, 0x80, 0x10])), 0x95);
    // Reserved flags on SUBSCRIBE: malformed.
    assert_eq!(
        reason(&exchange(port, &[0x80, 6, 0, 1, 0, 1, b'a', 0])),
        0x81
    );
    // A first packet that is not CONNECT: closed without an answer.
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.write_all(&[0xC0, 0]).unwrap();
    let mut got = Vec::new();
    let _ = sock.read_to_end(&mut got);
    assert!(got.is_empty(), "{got:?}");
    // The server is still serving.
    let steps = paho_run(&["connect", "--port", &port.to_string()]);
    assert_eq!(step(&steps, "connack")["reason"], 0);
}
