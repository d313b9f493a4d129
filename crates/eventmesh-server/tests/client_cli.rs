//! The client commands against a real server, as real processes: `publish`
//! with every event option (read back attribute by attribute), `--data
//! @FILE` and `@-`; `reply` answering `request` (echo, a command, a failing
//! command; over HTTP and TCP); the messages for a port mixed up and for a
//! token not given; `admin dlq delete`; `admin a2a tasks list|get|cancel`
//! on a task of the echo agent. Every wait is bounded.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::a2a::{echo_agent, AgentProc};
use common::gate::GateFiles;
use common::*;
use serde_json::{json, Value};

/// `eventmesh <args>` against `s` (traffic, TCP and admin addresses and the
/// admin token in the environment), run to completion: (exit code, stdout,
/// stderr).
fn run(s: &Server, args: &[&str]) -> (i32, String, String) {
    let mut cmd = command(s, args);
    cmd.stdin(Stdio::null());
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(60));
    (status.code().unwrap_or(-1), out, err)
}

/// [`run`] that must succeed; its stdout.
fn run_ok(s: &Server, args: &[&str]) -> String {
    let (code, out, err) = run(s, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn command(s: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("EVENTMESH_SERVER", s.url(""))
        .env("EVENTMESH_ADMIN_SERVER", s.admin_url(""))
        .env("EVENTMESH_ADMIN_TOKEN", TOKEN)
        .env_remove("EVENTMESH_TOKEN")
        .env_remove("EVENTMESH_TCP_SERVER")
        .env_remove("RUST_LOG");
    if let Some(tcp) = &s.tcp {
        cmd.env("EVENTMESH_TCP_SERVER", tcp);
    }
    cmd
}

/// A background command (killed when dropped) and its stdout lines.
fn start(s: &Server, args: &[&str]) -> (AgentProc, mpsc::Receiver<String>) {
    let mut child: Child = command(s, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the command");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (AgentProc(child), rx)
}

/// Waits (30 s at most) until `client` holds a subscription to `topic`.
async fn subscribed(c: &reqwest::Client, s: &Server, client: &str, topic: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let subs: Value = admin_json(c, s, &format!("/admin/subscriptions?topic={topic}")).await;
        let found = subs
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["clientId"] == client));
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{client} never subscribed: {subs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for the responder to exit 0 after its `--count` and returns the
/// lines it printed.
fn finished(mut p: AgentProc, lines: &mpsc::Receiver<String>, n: usize) -> Vec<String> {
    let status = wait_child(&mut p.0, Duration::from_secs(30)).expect("the responder stopped");
    assert!(status.success(), "{status:?}");
    (0..n)
        .map(|_| lines.recv_timeout(Duration::from_secs(10)).expect("a line"))
        .collect()
}

#[tokio::test]
async fn publish_sends_every_attribute_and_data_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    run_ok(
        &s,
        &["admin", "topic", "create", "orders", "--partitions", "1"],
    );
    let out = run_ok(
        &s,
        &[
            "publish",
            "--topic",
            "orders",
            "--id",
            "e-1",
            "--type",
            "order.created",
            "--source",
            "/shop",
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
            "--partition-key",
            "customer-9",
            "--data",
            "{\"n\": 1, \"items\": [\"a\"]}",
        ],
    );
    assert_eq!(
        out,
        "{\"id\":\"e-1\",\"topic\":\"orders\",\"partition\":0,\"offset\":0}\n"
    );
    let file = dir.path().join("order.json");
    std::fs::write(&file, "{\"from\": \"file\"}\n").unwrap();
    let at_file = format!("@{}", file.display());
    run_ok(
        &s,
        &[
            "publish", "--topic", "orders", "--id", "e-2", "--data", &at_file,
        ],
    );
    // @- reads standard input.
    let mut piped = command(
        &s,
        &[
            "publish", "--topic", "orders", "--id", "e-3", "--data", "@-",
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    piped
        .stdin
        .take()
        .unwrap()
        .write_all(b"plain words from stdin\n")
        .unwrap();
    let status = wait_child(&mut piped, Duration::from_secs(30)).expect("publish @- ended");
    assert!(status.success());
    // A bad extension name is refused before anything is sent.
    let (code, out, err) = run(
        &s,
        &[
            "publish",
            "--topic",
            "orders",
            "--ext",
            "Region=eu",
            "--data",
            "x",
        ],
    );
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.contains(
            "invalid value 'Region=eu' for '--ext <NAME=VALUE>': \"Region\" is not an extension name"
        ),
        "{err}"
    );

    let read = run_ok(
        &s,
        &[
            "subscribe",
            "--topic",
            "orders",
            "--from",
            "earliest",
            "--count",
            "3",
            "--transport",
            "poll",
            "--client-id",
            "reader",
        ],
    );
    let events: Vec<Value> = read
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        events,
        [
            json!({
                "specversion": "1.0",
                "id": "e-1",
                "source": "/shop",
                "type": "order.created",
                "subject": "order/17",
                "datacontenttype": "application/vnd.shop+json",
                "region": "eu-west",
                "priority": 5,
                "urgent": true,
                "partitionkey": "customer-9",
                "data": {"n": 1, "items": ["a"]},
            }),
            json!({
                "specversion": "1.0",
                "id": "e-2",
                "source": "/eventmesh/cli",
                "type": "eventmesh.cli",
                "datacontenttype": "application/json",
                "data": {"from": "file"},
            }),
            json!({
                "specversion": "1.0",
                "id": "e-3",
                "source": "/eventmesh/cli",
                "type": "eventmesh.cli",
                "datacontenttype": "text/plain",
                "data": "plain words from stdin\n",
            }),
        ]
    );
}

#[tokio::test]
async fn reply_answers_request_over_http_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.server.tcp.port=0"]);
    let c = client();
    run_ok(&s, &["admin", "topic", "create", "prices", "--memory"]);

    // Each responder in a group of its own: one that has stopped (its
    // subscription kept, as its client id was given) takes no request
    // from the next.

    // --echo, both sides over HTTP.
    let (p, lines) = start(
        &s,
        &[
            "reply",
            "--topic",
            "prices",
            "--echo",
            "--count",
            "1",
            "--client-id",
            "r-echo",
            "--group",
            "r-echo",
        ],
    );
    subscribed(&c, &s, "r-echo", "prices").await;
    let asked = run_ok(
        &s,
        &[
            "request",
            "--topic",
            "prices",
            "--id",
            "q-1",
            "--data",
            "{\"sku\": \"A1\"}",
            "--timeout-ms",
            "20000",
        ],
    );
    let printed = finished(p, &lines, 1);
    assert_eq!(asked, format!("{}\n", printed[0]));
    let reply: Value = serde_json::from_str(&printed[0]).unwrap();
    let id = reply["id"].as_str().unwrap();
    let correlation = reply["correlationid"].as_str().unwrap();
    assert_eq!(
        reply,
        json!({
            "specversion": "1.0",
            "id": id,
            "source": "/eventmesh/cli",
            "type": "eventmesh.cli.reply",
            "datacontenttype": "application/json",
            "correlationid": correlation,
            "data": {"sku": "A1"},
        })
    );

    // --exec, the responder on TCP, the request over --transport tcp.
    let (p, lines) = start(
        &s,
        &[
            "respond",
            "--topic",
            "prices",
            "--exec",
            "tr a-z A-Z",
            "--count",
            "1",
            "--transport",
            "tcp",
            "--client-id",
            "r-exec",
            "--group",
            "r-exec",
            "--type",
            "price.answer",
        ],
    );
    subscribed(&c, &s, "r-exec", "prices").await;
    let asked = run_ok(
        &s,
        &[
            "request",
            "--topic",
            "prices",
            "--data",
            "hello mesh",
            "--transport",
            "tcp",
            "--timeout-ms",
            "20000",
        ],
    );
    let printed = finished(p, &lines, 1);
    assert_eq!(asked, format!("{}\n", printed[0]));
    let reply: Value = serde_json::from_str(&printed[0]).unwrap();
    assert_eq!(
        (&reply["type"], &reply["datacontenttype"], &reply["data"]),
        (
            &json!("price.answer"),
            &json!("text/plain"),
            &json!("HELLO MESH")
        )
    );
    // Its REPLY_ACK acknowledged the request: the group is caught up.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rows: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=prices").await;
        let mine: Vec<&Value> = rows.iter().filter(|r| r["consumer"] == "r-exec").collect();
        if !mine.is_empty() && mine.iter().all(|r| r["lag"] == 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not acked: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A command that fails gets an error reply.
    let (p, lines) = start(
        &s,
        &[
            "reply",
            "--topic",
            "prices",
            "--exec",
            "echo no price >&2; exit 3",
            "--count",
            "1",
            "--client-id",
            "r-fail",
            "--group",
            "r-fail",
        ],
    );
    subscribed(&c, &s, "r-fail", "prices").await;
    let asked = run_ok(
        &s,
        &[
            "request",
            "--topic",
            "prices",
            "--data",
            "A1",
            "--timeout-ms",
            "20000",
        ],
    );
    let printed = finished(p, &lines, 1);
    let reply: Value = serde_json::from_str(asked.trim_end()).unwrap();
    assert_eq!(asked, format!("{}\n", printed[0]));
    assert_eq!(reply["type"], "eventmesh.cli.reply.error");
    assert_eq!(
        reply["data"],
        json!({"error": "exited with status 3", "exitCode": 3, "stderr": "no price\n"})
    );
}

#[tokio::test]
async fn a_mixed_up_port_and_a_missing_token_are_named() {
    let gate = GateFiles::new("tok-alice-0123456789 acme alice\n");
    let mut settings = gate.fail_closed();
    settings.push(gate.acl("allow acme * *\n"));
    settings.push("eventmesh.server.tcp.port=0".to_string());
    let s = Server::start_with(&gate.data(), &settings);
    let (traffic, admin_port) = (s.url(""), s.admin_url(""));

    let (code, out, err) = run(
        &s,
        &[
            "publish",
            "--topic",
            "t",
            "--data",
            "1",
            "--server",
            &admin_port,
        ],
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: {admin_port} looks like the admin port (404 not_found: it has no traffic \
             routes); traffic commands use --server or EVENTMESH_SERVER (default \
             http://127.0.0.1:10105), `eventmesh admin` uses the admin port\n"
        )
    );
    let (code, _, err) = run(&s, &["admin", "topics", "--admin-server", &traffic]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: {traffic} looks like a traffic port, not the admin port (404 not_found: it \
             has no admin routes); admin commands use --admin-server or EVENTMESH_ADMIN_SERVER \
             (default http://127.0.0.1:10106)\n"
        )
    );

    // No token: said so; a wrong one: the server's refusal as it is.
    let (code, _, err) = run(&s, &["publish", "--topic", "t", "--data", "1"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(
            "error: no token given (use --token or EVENTMESH_TOKEN): the server requires one ("
        ),
        "{err}"
    );
    assert!(err.ends_with(", HTTP 401))\n"), "{err}");
    // Over TCP, where the refusal comes in an ERROR frame, the same.
    let (code, _, err) = run(
        &s,
        &[
            "request",
            "--topic",
            "t",
            "--data",
            "1",
            "--transport",
            "tcp",
            "--timeout-ms",
            "500",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with(
            "error: no token given (use --token or EVENTMESH_TOKEN): the server requires one ("
        ),
        "{err}"
    );
    let (code, _, err) = run(
        &s,
        &[
            "publish",
            "--topic",
            "t",
            "--data",
            "1",
            "--token",
            "not-a-token",
        ],
    );
    assert_eq!(code, 1);
    assert!(!err.contains("no token given"), "{err}");
    assert!(err.ends_with(", HTTP 401)\n"), "{err}");
    let (code, out, _) = run(
        &s,
        &[
            "publish",
            "--topic",
            "t",
            "--data",
            "1",
            "--token",
            "tok-alice-0123456789",
        ],
    );
    assert_eq!(code, 0, "{out}");

    let mut cmd = command(&s, &["admin", "topics"]);
    cmd.env_remove("EVENTMESH_ADMIN_TOKEN").stdin(Stdio::null());
    let (status, _, err) = output_within(&mut cmd, Duration::from_secs(30));
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        err,
        "error: no admin token given (use --admin-token or EVENTMESH_ADMIN_TOKEN with the \
         server's eventmesh.admin.token): 401 unauthorized\n"
    );
}

#[tokio::test]
async fn admin_dlq_delete_and_the_force_hint() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.max.attempts=1",
            "eventmesh.topic.default.partitions=1",
        ],
    );
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "w1", "topic": "pay", "group": "billing"}),
    )
    .await;
    publish(&c, &s, "pay", &event("p1")).await;
    publish(&c, &s, "pay", &event("p2")).await;
    for d in poll_n(&c, &s, "w1", 2, Duration::from_secs(10)).await {
        assert_eq!(nack(&c, &s, d["deliveryId"].as_str().unwrap()).await, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let letters = loop {
        let v: Value = serde_json::from_str(&run_ok(
            &s,
            &["admin", "dlq", "browse", "--topic", "pay", "--json"],
        ))
        .unwrap();
        if v.as_array().map_or(0, Vec::len) == 2 {
            break v;
        }
        assert!(Instant::now() < deadline, "two dead letters: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ids: Vec<String> = letters
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();

    assert_eq!(
        run_ok(
            &s,
            &["admin", "dlq", "delete", "--topic", "pay", "--id", &ids[0]]
        ),
        format!("deleted dead letter {} of pay\n", ids[0])
    );
    let (code, out, err) = run(
        &s,
        &[
            "admin", "dlq", "delete", "--topic", "pay", "--id", &ids[1], "--id", "nope", "--json",
        ],
    );
    assert_eq!(code, 1);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"topic": "pay", "deleted": [ids[1]], "missing": ["nope"]})
    );
    assert_eq!(
        err,
        "error: no dead letter nope of pay (404 unknown_dead_letter); \
         `eventmesh admin dlq browse --topic pay` lists them\n"
    );
    assert_eq!(
        run_ok(&s, &["admin", "dlq", "browse", "--topic", "pay", "--json"]),
        "[]\n"
    );
    let (code, _, err) = run(&s, &["admin", "dlq", "delete", "--topic", "pay"]);
    assert_eq!(code, 2, "{err}");

    // Deleting a topic in use names the flag.
    let (code, _, err) = run(&s, &["admin", "topic", "delete", "pay"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: 409 topic_in_use: topic \"pay\" has 1 subscription(s); remove them first or \
         delete with --force\n"
    );
}

/// Sends `text` to agent `agent` over JSON-RPC v1.0; the task's id.
async fn send(c: &reqwest::Client, s: &Server, agent: &str, text: &str, now: bool) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": now}}});
    let sent: Value = c
        .post(s.url(&format!("/a2a/agents/{agent}")))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {sent}"))
        .to_string()
}

/// `admin a2a tasks get ID --json` until the task is in `state` (30 s).
async fn task_in(s: &Server, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value =
            serde_json::from_str(&run_ok(s, &["admin", "a2a", "tasks", "get", id, "--json"]))
                .unwrap();
        if v["task"]["status"]["state"] == state {
            return v;
        }
        assert!(Instant::now() < deadline, "{id} never {state}: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn admin_a2a_tasks_list_get_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let _agent = echo_agent(&s, "echo");
    let asking = send(&c, &s, "echo", "ask: which colour?", true).await;
    let done = send(&c, &s, "echo", "hello mesh", false).await;
    let v = task_in(&s, &asking, "TASK_STATE_INPUT_REQUIRED").await;
    assert_eq!(
        (&v["agent"], &v["task"]["id"]),
        (&json!("echo"), &json!(asking))
    );
    task_in(&s, &done, "TASK_STATE_COMPLETED").await;

    let list: Value =
        serde_json::from_str(&run_ok(&s, &["admin", "a2a", "tasks", "list", "--json"])).unwrap();
    assert_eq!(list["total"], 2);
    assert_eq!(
        list["counts"],
        json!({"TASK_STATE_COMPLETED": 1, "TASK_STATE_INPUT_REQUIRED": 1})
    );
    let table = run_ok(&s, &["admin", "a2a", "tasks", "list"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["ID", "AGENT", "STATE", "CONTEXT", "UPDATED", "MS"]
    );
    let mut rows: Vec<(&str, &str, &str)> =
        lines[1..3].iter().map(|r| (r[0], r[1], r[2])).collect();
    rows.sort();
    let mut want = vec![
        (asking.as_str(), "echo", "TASK_STATE_INPUT_REQUIRED"),
        (done.as_str(), "echo", "TASK_STATE_COMPLETED"),
    ];
    want.sort();
    assert_eq!(rows, want);
    assert_eq!(
        lines[3].join(" "),
        "2 of 2 tasks: TASK_STATE_COMPLETED 1, TASK_STATE_INPUT_REQUIRED 1"
    );

    let got = run_ok(&s, &["admin", "a2a", "tasks", "get", &asking]);
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got[0], format!("task      {asking}"));
    assert_eq!(got[1], "agent     echo");
    assert_eq!(got[2], "tenant    -");
    assert_eq!(got[4], "state     TASK_STATE_INPUT_REQUIRED");
    assert_eq!(got[6], "message   which colour?");

    assert_eq!(
        run_ok(&s, &["admin", "a2a", "tasks", "cancel", &asking]),
        format!("canceled task {asking} of agent echo: TASK_STATE_CANCELED\n")
    );
    task_in(&s, &asking, "TASK_STATE_CANCELED").await;
    let (code, _, err) = run(&s, &["admin", "a2a", "tasks", "cancel", &done]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("error: 409 task_not_cancelable: Task {done} cannot be canceled: it has ended\n")
    );
    let (code, _, err) = run(&s, &["admin", "a2a", "tasks", "get", "nope"]);
    assert_eq!(code, 1);
    assert_eq!(err, "error: 404 unknown_task: no A2A task \"nope\"\n");
}
