//! The MCP gateway (`/mcp`) driven by the official MCP clients: the Python
//! SDK (`tests/mcp/client.py`) and the TypeScript SDK
//! (`tests/mcp/client.mjs`), both installed by `scripts/mcp.sh` (which
//! `scripts/test.sh` runs, exporting `EVENTMESH_MCP_PYTHON` and
//! `EVENTMESH_MCP_NODE`).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::gate::{start_closed, GateFiles};
use common::*;
use serde_json::{json, Value};

/// The Python with the MCP SDK that `scripts/mcp.sh` prepared.
fn python() -> String {
    let py = std::env::var("EVENTMESH_MCP_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/mcp-venv/bin/python".to_string());
    assert!(
        std::path::Path::new(&py).exists(),
        "no Python with the MCP SDK at {py}: run scripts/mcp.sh (scripts/test.sh does) or set EVENTMESH_MCP_PYTHON"
    );
    py
}

/// The directory whose node_modules holds the MCP TypeScript SDK.
fn node_dir() -> String {
    let dir =
        std::env::var("EVENTMESH_MCP_NODE").unwrap_or_else(|_| "/var/tmp/mcp-node".to_string());
    assert!(
        std::path::Path::new(&dir)
            .join("node_modules/@modelcontextprotocol/sdk/package.json")
            .exists(),
        "no MCP TypeScript SDK under {dir}: run scripts/mcp.sh (scripts/test.sh does) or set EVENTMESH_MCP_NODE"
    );
    dir
}

/// Runs a Python scenario (on a blocking thread, so the test's own tasks
/// go on meanwhile); its steps by name.
async fn scenario(name: &str, url: String, extra: &[&str]) -> BTreeMap<String, Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let mut args = vec![script.to_string(), name.to_string(), url];
    args.extend(extra.iter().map(|a| a.to_string()));
    let (status, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(python());
        cmd.args(&args);
        output_within(&mut cmd, Duration::from_secs(180))
    })
    .await
    .unwrap();
    assert!(status.success(), "client.py {name} failed:\n{out}\n{err}");
    out.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let step = v["step"].as_str().unwrap().to_string();
            v.as_object_mut().unwrap().remove("step");
            (step, v)
        })
        .collect()
}

fn step<'a>(steps: &'a BTreeMap<String, Value>, name: &str) -> &'a Value {
    steps
        .get(name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
}

/// Answers one request on `topic` as client `quoter`: polls its mailbox
/// until the request comes (30 s at most), replies with `{"price": n*10}`.
async fn answer_one_request(c: reqwest::Client, s_url: String) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let got: Value = c
            .get(format!(
                "{s_url}/events/poll?clientId=quoter&max=1&timeoutMs=1000"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let Some(delivery) = got.as_array().and_then(|d| d.first()) else {
            continue;
        };
        let request = delivery["event"].clone();
        let reply = json!({"specversion": "1.0", "id": "quote-1", "source": "/quoter",
            "type": "quote", "correlationid": request["correlationid"],
            "data": {"price": request["data"]["n"].as_i64().unwrap() * 10}});
        let r = c
            .post(format!("{s_url}/events/reply"))
            .header("content-type", "application/cloudevents+json")
            .body(reply.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        let (status, _) = post_json(
            &c,
            format!("{s_url}/events/ack"),
            json!({"deliveryId": delivery["deliveryId"]}),
        )
        .await;
        assert_eq!(status, 200);
        return request;
    }
    panic!("no request reached the responder within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_with_the_python_client() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let _echo = common::a2a::echo_agent(&s, "echo");
    subscribe(
        &c,
        &s,
        json!({"clientId": "quoter", "group": "quoter", "topic": "mcp.quotes"}),
    )
    .await;
    let responder = tokio::spawn(answer_one_request(c.clone(), s.url("")));

    let steps = scenario("main", s.url("/mcp"), &[]).await;

    assert_eq!(
        step(&steps, "initialize"),
        &json!({"server": "eventmesh", "list_changed": true})
    );
    assert_eq!(
        step(&steps, "tools")["names"],
        json!([
            "echo__echo",
            "find_agents",
            "list_topics",
            "publish",
            "read_events",
            "request"
        ])
    );
    let published = step(&steps, "publish");
    assert_eq!(published["error"], false);
    let p = published["result"]["partition"].as_u64().unwrap();
    assert_eq!(
        published["result"],
        json!({"id": "o-1", "topic": "mcp.orders", "partition": p, "offset": 0})
    );
    let mut next: BTreeMap<String, u64> = (0..4).map(|i| (i.to_string(), 0)).collect();
    next.insert(p.to_string(), 1);
    assert_eq!(
        step(&steps, "read"),
        &json!({"error": false, "events": [{"id": "o-1", "type": "order.created",
            "data": {"n": 1}, "topic": "mcp.orders", "offset": 0}],
            "next": {"mcp.orders": next}})
    );
    assert_eq!(
        step(&steps, "read_more"),
        &json!({"events": 0, "next": {"mcp.orders": next}})
    );
    assert_eq!(step(&steps, "read_wait"), &json!({"events": ["o-2"]}));
    assert_eq!(
        step(&steps, "read_pattern"),
        &json!({"events": [["mcp.orders", "o-1"], ["mcp.orders", "o-2"]]})
    );
    assert_eq!(
        step(&steps, "echo"),
        &json!({"error": false, "texts": ["hello stream mesh"], "state": "TASK_STATE_COMPLETED",
            "progress": ["submitted", "working", "hello ", "stream ", "mesh",
                "completed: hello stream mesh"],
            "steps": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    );
    assert_eq!(
        step(&steps, "echo_fail"),
        &json!({"error": true, "texts": ["the agent's task ended failed: out of words"]})
    );
    assert_eq!(
        step(&steps, "changed"),
        &json!({"notified": true, "agents": ["calc__sum", "echo__echo"]})
    );
    assert_eq!(
        step(&steps, "find"),
        &json!({"agents": ["calc"], "tools": ["calc__sum"]})
    );
    assert_eq!(
        step(&steps, "request"),
        &json!({"error": false, "id": "quote-1", "data": {"price": 20}})
    );
    let request = responder.await.unwrap();
    assert_eq!(
        (&request["id"], &request["data"]),
        (&json!("q-1"), &json!({"n": 2}))
    );
    let unknown = step(&steps, "unknown")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        unknown.contains("unknown tool \"no_such_tool\""),
        "{unknown}"
    );
    assert_eq!(
        step(&steps, "bad_argument"),
        &json!({"error": true, "texts": ["argument max: must be a whole number from 1 to 100"]})
    );
    assert_eq!(
        step(&steps, "resources"),
        &json!({"has_orders": true, "recent": ["o-1", "o-2"]})
    );
    // Reading left nothing behind: the echo agent's and the responder's
    // subscriptions are the only ones besides the A2A gateway's.
    let subs: Value = admin_json(&c, &s, "/admin/subscriptions").await;
    let groups: Vec<&str> = subs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["group"].as_str())
        .filter(|g| !g.starts_with("a2a"))
        .collect();
    assert_eq!(groups, ["agent-echo", "quoter"], "{subs}");
}

const ACME: &str = "tok-acme-0123456789";
const GLOBEX: &str = "tok-globex-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_the_gate_decides_what_a_tenant_sees() {
    let files = GateFiles::new(&format!("{ACME} acme alice\n{GLOBEX} globex bob\n"));
    let acl = files.acl(
        "allow acme * acme.*\nallow acme A2A *\nallow globex * globex.*\nallow globex A2A *\n",
    );
    let s = start_closed(&files, &[acl]);
    let c = client();
    let ev = event("a-1");
    let r = c
        .post(s.url("/events/publish?topic=acme.orders"))
        .bearer_auth(ACME)
        .header("content-type", "application/cloudevents+json")
        .body(ev.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    for (token, id) in [(ACME, "acme-bot"), (GLOBEX, "globex-bot")] {
        let card = json!({"name": id, "description": "d", "version": "1",
            "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]});
        let r = c
            .post(s.url("/a2a/agents"))
            .bearer_auth(token)
            .json(&json!({"id": id, "card": card}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    // No credential, or a wrong one: refused before any MCP message.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    for token in [None, Some("wrong-token")] {
        let mut r = c
            .post(s.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 401, "{token:?}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized", "{body}");
    }

    let acme = scenario("tenant", s.url("/mcp"), &[ACME, "globex-bot__x"]).await;
    assert_eq!(step(&acme, "tools")["agents"], json!(["acme-bot__x"]));
    assert_eq!(step(&acme, "topics")["names"], json!(["acme.orders"]));
    assert_eq!(step(&acme, "read_acme")["error"], false);
    assert_eq!(step(&acme, "find")["agents"], json!(["acme-bot"]));
    let other = step(&acme, "call_other")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(other.contains("unknown tool \"globex-bot__x\""), "{other}");

    let globex = scenario("tenant", s.url("/mcp"), &[GLOBEX, "acme-bot__x"]).await;
    assert_eq!(step(&globex, "tools")["agents"], json!(["globex-bot__x"]));
    assert_eq!(step(&globex, "topics")["names"], json!([]));
    assert_eq!(step(&globex, "find")["agents"], json!(["globex-bot"]));
    // Another tenant's topic reads like a topic that does not exist.
    for (name, topic) in [
        ("read_acme", "acme.orders"),
        ("read_missing", "acme.nothing"),
    ] {
        assert_eq!(
            step(&globex, name),
            &json!({"error": true, "texts": [format!(
                "access denied (acl_denied): no ACL rule allows SUBSCRIBE by bob on topic {topic:?}"
            )]}),
            "{name}"
        );
    }
    let other = step(&globex, "call_other")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(other.contains("unknown tool \"acme-bot__x\""), "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_typescript_client_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.mjs");
    let mut cmd = Command::new("node");
    cmd.args([script, &node_dir(), &s.url("/mcp")]);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(60));
    assert!(status.success(), "client.mjs failed:\n{out}\n{err}");
    let got: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let p = got["published"]["partition"].clone();
    assert_eq!(
        got,
        json!({"server": "eventmesh",
            "tools": ["find_agents", "list_topics", "publish", "read_events", "request"],
            "publishError": false,
            "published": {"id": "ts-1", "topic": "mcp.ts", "partition": p, "offset": 0},
            "read": [{"id": "ts-1", "data": "hello from node"}]})
    );
}

#[tokio::test]
async fn mcp_can_be_turned_off_and_bounds_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.mcp.enabled=false"]);
    let c = client();
    let r = c.post(s.url("/mcp")).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 404);
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.mcp.sessions.max=1",
            "eventmesh.mcp.session.idle.ms=2000",
        ],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let open = || {
        c.post(s.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
    };
    let first = open().await.unwrap();
    assert_eq!(first.status(), 200);
    let session = first.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let second = open().await.unwrap();
    assert_eq!(second.status(), 503);
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"], "mcp_sessions_full");
    // Closing the session makes room again.
    let closed = c
        .delete(s.url("/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let idle = open().await.unwrap();
    assert_eq!(idle.status(), 200);
    let idle = idle.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    // A session that says nothing is closed after the idle time (2 s), and
    // its room goes to the next one.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let next = open().await.unwrap();
        if next.status() == 200 {
            break;
        }
        assert_eq!(next.status(), 503);
        assert!(Instant::now() < deadline, "the idle session was not closed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone = c
        .post(s.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &idle)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
}
