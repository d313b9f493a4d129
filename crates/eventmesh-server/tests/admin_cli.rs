//! `eventmesh admin ...` against a real server: every subcommand in table
//! form and with `--json`, and the clear failures (a wrong token, a server
//! whose admin API is locked, an unreachable one).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::connectors::create;
use common::topics::admin;
use common::*;
use serde_json::{json, Value};

/// Runs `eventmesh admin <args>` against `s` with the test token: (exit
/// code, stdout, stderr).
fn cli(s: &Server, args: &[&str]) -> (i32, String, String) {
    cli_with(s, Some(TOKEN), args)
}

fn cli_with(s: &Server, token: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("admin")
        .args(args)
        .env("EVENTMESH_ADMIN_SERVER", s.admin_url(""))
        .env_remove("EVENTMESH_ADMIN_TOKEN")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    if let Some(t) = token {
        cmd.env("EVENTMESH_ADMIN_TOKEN", t);
    }
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(30));
    (status.code().unwrap_or(-1), out, err)
}

/// `--json` output, parsed; the command must succeed.
fn cli_json(s: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = cli(s, &all);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// Table output; the command must succeed. Its lines, trailing spaces cut.
fn cli_table(s: &Server, args: &[&str]) -> Vec<String> {
    let (code, out, err) = cli(s, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out.lines().map(|l| l.trim_end().to_string()).collect()
}

/// The words of a table line.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test]
async fn every_admin_subcommand_prints_a_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.max.attempts=1",
            "eventmesh.topic.default.partitions=2",
        ],
    );
    let c = client();

    // topic create | show | delete, topics
    assert_eq!(
        cli_table(
            &s,
            &[
                "topic",
                "create",
                "orders",
                "--partitions",
                "3",
                "--retention-ms",
                "60000"
            ]
        ),
        ["created topic orders (3 partitions, disk)"]
    );
    let v = cli_json(&s, &["topic", "create", "audit", "--ttl-ms", "90000"]);
    assert_eq!(
        (v["name"].as_str(), v["partitions"].as_u64()),
        (Some("audit"), Some(2))
    );
    assert_eq!(v["ttlMs"], 90000);
    assert_eq!(v["durability"], "disk");
    let v = cli_json(&s, &["topic", "create", "asks", "--memory"]);
    assert_eq!(v["durability"], "memory");
    let (st, _) = admin(&c, &s, reqwest::Method::DELETE, "/admin/topics/asks", None).await;
    assert_eq!(st, 204);
    for n in 0..4 {
        publish(&c, &s, "orders", &event(&format!("o{n}"))).await;
    }
    let topics = cli_table(&s, &["topics"]);
    assert_eq!(words(&topics[0]), ["TOPIC", "PARTITIONS", "END", "OFFSETS"]);
    assert_eq!(words(&topics[1]), ["audit", "2", "0"]);
    assert_eq!(words(&topics[2]), ["orders", "3", "4"]);
    let v = cli_json(&s, &["topics"]);
    assert_eq!(v.as_array().unwrap().len(), 2);
    let show = cli_table(&s, &["topic", "show", "orders"]);
    let bytes = cli_json(&s, &["topic", "show", "orders"])["bytes"].clone();
    assert_eq!(
        show[0],
        format!("topic orders: 3 partitions, {bytes} bytes, retention 60000 ms / 0 bytes (topic), 0 subscriptions")
    );
    assert_eq!(words(&show[2]), ["PARTITION", "START", "END", "BYTES"]);
    assert_eq!(show.len(), 2 + 1 + 3 + 1 + 1, "{show:#?}");
    let v = cli_json(&s, &["topic", "show", "orders"]);
    assert_eq!(v["retention"]["ms"], 60000);
    assert_eq!(
        cli_table(&s, &["topic", "delete", "audit"]),
        ["deleted topic audit"]
    );
    assert_eq!(
        cli_json(&s, &["topic", "delete", "orders", "--force"]),
        json!({"deleted": "orders"})
    );

    // subscriptions, clients, offsets
    let got = one_delivery(&c, &s, "w1", "pay", "billing", "p1").await;
    let subs = cli_table(&s, &["subscriptions"]);
    assert_eq!(
        words(&subs[0]),
        ["CLIENT", "TOPIC", "GROUP", "MODE", "URL", "FILTERS", "ATTACHED"]
    );
    assert_eq!(
        words(&subs[1]),
        ["w1", "pay", "billing", "LOAD_BALANCE", "-", "-", "-"]
    );
    assert_eq!(
        cli_json(&s, &["subscriptions", "--topic", "pay"])[0]["clientId"],
        "w1"
    );
    let clients = cli_table(&s, &["clients"]);
    assert_eq!(
        words(&clients[0]),
        [
            "CLIENT",
            "INFLIGHT",
            "QUEUED",
            "MAX",
            "STATE",
            "HOME",
            "MQTT",
            "SUBSCRIPTIONS"
        ]
    );
    assert_eq!(
        words(&clients[1]),
        ["w1", "1", "0", "1000", "active", "-", "-", "pay", "(poll)"]
    );
    let v = cli_json(&s, &["clients"]);
    assert_eq!(
        (v[0]["inflight"].as_u64(), v[0]["maxInflight"].as_u64()),
        (Some(1), Some(1000))
    );
    // The delivery fails once (one attempt allowed): a dead letter.
    assert_eq!(nack(&c, &s, got["deliveryId"].as_str().unwrap()).await, 200);
    assert!(committed_reaches(&c, &s, "pay", 1, Duration::from_secs(30)).await);
    let offsets = cli_table(&s, &["offsets", "--topic", "pay"]);
    assert_eq!(
        words(&offsets[0]),
        ["CONSUMER", "PARTITION", "COMMITTED", "END", "LAG"]
    );
    let committed: u64 = offsets[1..]
        .iter()
        .map(|l| words(l)[2].parse::<u64>().unwrap())
        .sum();
    assert_eq!(committed, 1);
    assert_eq!(
        cli_json(&s, &["offsets", "--topic", "pay"])
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // dlq browse | replay
    let dl = cli_json(&s, &["dlq", "browse", "--topic", "pay"]);
    assert_eq!(dl.as_array().unwrap().len(), 1, "{dl}");
    let id = dl[0]["id"].as_str().unwrap().to_string();
    let browse = cli_table(&s, &["dlq", "browse", "--topic", "pay"]);
    assert_eq!(
        words(&browse[0])[..5],
        ["ID", "CONSUMER", "PARTITION", "OFFSET", "ATTEMPTS"]
    );
    assert_eq!(words(&browse[1])[..2], [id.as_str(), "billing"]);
    assert_eq!(
        cli_table(
            &s,
            &["dlq", "replay", "--topic", "pay", "--id", &id, "--id", "nope"]
        ),
        ["replayed 1, failed 0, 1 not found"]
    );
    assert_eq!(
        cli_json(&s, &["dlq", "replay", "--topic", "pay"]),
        json!({"replayed": 0, "failed": 0})
    );
    let again = poll_n(&c, &s, "w1", 1, Duration::from_secs(10)).await;
    assert_eq!(again[0]["event"]["id"], "p1");

    // cluster (a single node), connectors, config, reload
    assert_eq!(
        cli_table(&s, &["cluster"]),
        ["partition ownership is off: every instance reads every partition (LOCAL_STICKY_PULL or a single node)"]
    );
    assert_eq!(cli_json(&s, &["cluster"])["ownership"], false);
    let (code, v) = create(
        &c,
        &s,
        json!({"name": "hook", "kind": "http-source", "topic": "in"}),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let conns = cli_table(&s, &["connectors"]);
    assert_eq!(
        words(&conns[0]),
        [
            "NAME", "KIND", "TOPIC", "STATE", "INSTANCE", "EVENTS", "EVENTS/S", "LAG", "LAST",
            "ERROR"
        ]
    );
    assert_eq!(
        words(&conns[1]),
        [
            "hook",
            "http-source",
            "in",
            "running",
            "-",
            "0",
            "0.0",
            "-",
            "-"
        ]
    );
    assert_eq!(cli_json(&s, &["connectors"])[0]["kind"], "http-source");
    let config = cli_table(&s, &["config"]);
    assert_eq!(words(&config[0]), ["KEY", "VALUE"]);
    assert!(config
        .iter()
        .any(|l| words(l) == ["eventmesh.delivery.max.attempts", "1"]));
    assert!(config
        .iter()
        .any(|l| words(l) == ["eventmesh.admin.token", "******"]));
    assert_eq!(
        cli_json(&s, &["config"])["eventmesh.topic.default.partitions"],
        "2"
    );
    assert_eq!(cli_table(&s, &["reload"]), ["reloaded"]);
    assert_eq!(cli_json(&s, &["reload"])["status"], "reloaded");
    let (code, v) = admin(&c, &s, reqwest::Method::GET, "/admin/connectors", None).await;
    assert_eq!((code, v.as_array().map(Vec::len)), (200, Some(1)));
}

#[tokio::test]
async fn failures_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let (code, out, err) = cli_with(&s, Some("wrong"), &["topics"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err.trim(),
        "error: the admin token was not accepted (401 unauthorized): pass the server's \
         eventmesh.admin.token with --admin-token or EVENTMESH_ADMIN_TOKEN"
    );
    let (code, _, err) = cli(&s, &["topic", "show", "nope"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "error: 404 unknown_topic: topic \"nope\" does not exist"
    );
    let (code, _, err) = cli(&s, &["offsets"]);
    assert_eq!(code, 2, "{err}");

    // A server without an admin token: its admin API is locked.
    let dir2 = tempfile::tempdir().unwrap();
    let locked = Server::start(dir2.path(), &["eventmesh.admin.token="]);
    let (code, _, err) = cli(&locked, &["config"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "error: the server's admin API is locked (503 admin_locked): it has no admin token \
         configured; set eventmesh.admin.token on the server"
    );
    // Nothing listening.
    let port = free_port();
    let out = Command::new(bin())
        .args([
            "admin",
            "topics",
            "--admin-server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env_remove("EVENTMESH_ADMIN_SERVER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "error: cannot reach the admin API at http://127.0.0.1:{port}: "
        )),
        "{err}"
    );
}

#[tokio::test]
async fn groups_reset_shows_what_would_move_then_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.topic.default.partitions=1"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "w1", "topic": "replayed", "group": "g"}),
    )
    .await;
    for i in 0..4 {
        publish(&c, &s, "replayed", &event(&format!("e{i}"))).await;
    }
    let got = poll_n(&c, &s, "w1", 4, Duration::from_secs(15)).await;
    for d in &got {
        assert_eq!(ack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    assert!(caught_up(&c, &s, "replayed", Duration::from_secs(15)).await);

    // Without --execute: the plan, nothing moved.
    let lines = cli_table(
        &s,
        &["groups", "reset", "g", "--topic", "replayed", "--to", "1"],
    );
    assert_eq!(
        words(&lines[0]),
        [
            "TOPIC",
            "CONSUMER",
            "PARTITION",
            "FROM",
            "TO",
            "AGAIN",
            "SKIPPED"
        ]
    );
    assert_eq!(words(&lines[1]), ["replayed", "g", "0", "4", "1", "3", "0"]);
    assert_eq!(
        lines[2],
        "not applied: 3 events would come again, 0 would be passed over; the members hold 0 deliveries. Run again with --execute to apply"
    );
    assert!(poll_n(&c, &s, "w1", 1, Duration::from_millis(500))
        .await
        .is_empty());

    let v = cli_json(
        &s,
        &[
            "groups",
            "reset",
            "g",
            "--topic",
            "replayed",
            "--partition",
            "0=earliest",
            "--execute",
        ],
    );
    assert_eq!(
        (&v["applied"], &v["again"]),
        (&json!(true), &json!(4)),
        "{v}"
    );
    let again = poll_n(&c, &s, "w1", 4, Duration::from_secs(15)).await;
    assert_eq!(polled_ids(&again), ["e0", "e1", "e2", "e3"]);

    // Held deliveries: refused with the API's reason, then forced.
    let (code, _, err) = cli(
        &s,
        &[
            "groups",
            "reset",
            "g",
            "--topic",
            "replayed",
            "--to",
            "latest",
            "--execute",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("409 group_busy"), "{err}");
    let lines = cli_table(
        &s,
        &[
            "groups",
            "reset",
            "g",
            "--topic",
            "replayed",
            "--to",
            "latest",
            "--execute",
            "--force",
        ],
    );
    assert_eq!(
        lines.last().unwrap(),
        "reset group g: 0 events come again, 4 passed over; 4 held deliveries released"
    );
    assert!(caught_up(&c, &s, "replayed", Duration::from_secs(15)).await);

    // Bad arguments are named before anything is sent.
    let (code, _, err) = cli(&s, &["groups", "reset", "g", "--topic", "replayed"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--to TARGET"), "{err}");
    let (code, _, err) = cli(
        &s,
        &[
            "groups", "reset", "g", "--topic", "replayed", "--to", "soon",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"soon\" is not earliest, latest"), "{err}");
}

#[tokio::test]
async fn scheduled_events_are_listed_and_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.topic.default.partitions=1"]);
    let c = client();
    for (id, at) in [
        ("late", "2099-01-01T00:00:00Z"),
        ("later", "2099-06-01T00:00:00Z"),
    ] {
        let mut e = event(id);
        e["deliverat"] = json!(at);
        let v = publish(&c, &s, "remind", &e).await;
        assert_eq!(v["scheduledFor"], format!("{}.000Z", &at[..19]));
    }
    let lines = cli_table(&s, &["scheduled", "list", "--topic", "remind"]);
    assert_eq!(
        words(&lines[0]),
        ["DUE", "ID", "SOURCE", "TYPE", "PARTITION"]
    );
    assert_eq!(
        words(&lines[1]),
        [
            "2099-01-01T00:00:00.000Z",
            "late",
            "/tests",
            "test.event",
            "0"
        ]
    );
    assert_eq!(words(&lines[2])[1], "later");
    assert_eq!(
        cli_table(
            &s,
            &["scheduled", "cancel", "--topic", "remind", "--id", "late"]
        ),
        ["cancelled 1 held-back event(s) late of remind"]
    );
    let v = cli_json(&s, &["scheduled", "list", "--topic", "remind"]);
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["id"], "later");
    let (code, _, err) = cli(
        &s,
        &["scheduled", "cancel", "--topic", "remind", "--id", "late"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404 unknown_scheduled_event"), "{err}");
    let detail: Value = admin_json(&c, &s, "/admin/topics/remind").await;
    assert_eq!(
        detail["scheduled"],
        json!({"count": 1, "nextDue": "2099-06-01T00:00:00.000Z"})
    );
}
