//! The A2A gateway's tasks through faults: a kill -9 of the runtime, the
//! meta store going away mid-send, a webhook that never answers, and a
//! client and its agent on two instances of a cluster.

use std::time::Duration;

use serde_json::{json, Value};

use super::common::{
    self,
    a2a::{check_scenario_of, echo_agent, python_scenario},
    client, Server,
};
use super::{rpc, send_body};

/// Waits until every consumer of `topic` has acknowledged everything.
async fn caught_up(c: &reqwest::Client, s: &Server, topic: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let t: Value = common::admin_json(c, s, &format!("/admin/topics/{topic}")).await;
        let consumers = t["consumers"].as_array().cloned().unwrap_or_default();
        if !consumers.is_empty() && consumers.iter().all(|k| k["lag"] == 0) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{topic} never caught up: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_task_outlives_a_kill_9_of_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let _agent = echo_agent(&s, "echo");
    let c = client();
    let url = s.url("/a2a/agents/echo");
    // A task between its updates: the agent asked a question.
    let asked = rpc(&c, &url, Some("1.0"), &send_body("ask: still there?", None)).await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let id = task["id"].as_str().unwrap().to_string();
    caught_up(&c, &s, "a2a.agent.echo").await;
    caught_up(&c, &s, "a2a.updates").await;

    s.kill9();
    let s = s.restart_on_same_ports();
    // A new client: the pooled connections went with the old process.
    let c = client();
    assert_eq!(s.url(""), url.trim_end_matches("/a2a/agents/echo"));
    let get = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{{"id":"{id}"}}}}"#);
    let got = rpc(&c, &url, Some("1.0"), &get).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{got}"
    );
    assert_eq!(
        got["result"]["status"]["message"]["parts"][0]["text"],
        "still there?"
    );
    assert_eq!(got["result"]["history"].as_array().unwrap().len(), 2);

    // The agent's stream reconnects by itself; the answer finishes the task.
    let done = rpc(&c, &url, Some("1.0"), &send_body("ask: yes", Some(&id))).await;
    let task = &done["result"]["task"];
    assert_eq!(task["id"], id.as_str());
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "ask: yes");
    assert_eq!(task["history"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn meta_store_down_during_a_send_leaves_no_half_written_task() {
    let etcd = common::mesh::Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.meta.type=etcd",
            &format!("eventmesh.meta.etcd.endpoints={}", etcd.endpoint()),
            "eventmesh.meta.etcd.timeout.ms=1000",
        ],
    );
    let _agent = echo_agent(&s, "echo");
    let c = client();
    let url = s.url("/a2a/agents/echo");
    let ok = rpc(&c, &url, Some("1.0"), &send_body("before", None)).await;
    assert_eq!(
        ok["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{ok}"
    );
    caught_up(&c, &s, "a2a.agent.echo").await;

    etcd.stop();
    // A JSON-RPC internal error naming meta_unavailable, within the meta
    // store's timeout; nothing is written or sent.
    let resp = c
        .post(&url)
        .header("A2A-Version", "1.0")
        .body(send_body("during", None))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    etcd.cont();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert_eq!(
        body["error"]["data"][0]["metadata"]["error"], "meta_unavailable",
        "{body}"
    );

    // After the thaw: exactly the one task from before, and the agent's
    // inbox holds no message for a task that does not exist.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let listed = loop {
        let l = rpc(
            &c,
            &url,
            Some("1.0"),
            r#"{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":{}}"#,
        )
        .await;
        if l.get("result").is_some() {
            break l;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ListTasks never worked again: {l}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
    let t: Value = common::admin_json(&c, &s, "/admin/topics/a2a.agent.echo").await;
    let ends: i64 = t["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["endOffset"].as_i64().unwrap() - p["startOffset"].as_i64().unwrap())
        .sum();
    assert_eq!(ends, 1, "{t}");
    let again = rpc(&c, &url, Some("1.0"), &send_body("after", None)).await;
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
}

#[tokio::test]
async fn a_webhook_that_never_answers_gets_its_notifications_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=2"]);
    let _agent = echo_agent(&s, "echo");
    let c = client();
    // Nothing listens there: every attempt is refused.
    let hook = format!("http://127.0.0.1:{}/hook", common::free_port());
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
        "configuration": {"taskPushNotificationConfig": {"url": hook, "token": "t"}}}});
    let sent = rpc(
        &c,
        &s.url("/a2a/agents/echo"),
        Some("1.0"),
        &send.to_string(),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    let id = task["id"].as_str().unwrap();
    // The task's two notifications (created, completed), each tried twice.
    let mut dead: Vec<Value> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while dead.len() < 2 && std::time::Instant::now() < deadline {
        dead = common::admin_json(&c, &s, "/admin/dlq/browse?topic=a2a.push").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead.len(), 2, "{dead:?}\n{}", s.log_text());
    let mut bodies = Vec::new();
    for d in &dead {
        assert_eq!(d["attempts"], 2, "{d}");
        assert_eq!(d["consumer"], "a2a-push", "{d}");
        let ev: Value = serde_json::from_str(d["eventJson"].as_str().unwrap()).unwrap();
        assert_eq!(ev["type"], "a2a.task.push");
        assert_eq!(ev["a2ataskid"], id);
        assert_eq!(
            ev["a2apushid"], id,
            "a config without an id takes the task's"
        );
        bodies.push(
            ev["data"]
                .as_object()
                .unwrap()
                .keys()
                .next()
                .unwrap()
                .clone(),
        );
    }
    bodies.sort();
    assert_eq!(bodies, ["statusUpdate", "task"]);
}

/// Two instances on one etcd and one JetStream log (three NATS servers),
/// with partition ownership: the client talks to instance 0 only, the
/// agent is attached to instance 1 only. Every step of the SDK's scenario
/// (sends, streams, resubscribe, cancel, webhooks) crosses the instances.
#[tokio::test]
async fn a_client_on_one_instance_reaches_an_agent_on_another() {
    let _one_mesh_at_a_time = common::mesh::SERIAL.lock().await;
    let mesh = common::mesh::Mesh::start_with(
        2,
        "a2a",
        common::mesh::LEASE_MS,
        &["eventmesh.webhook.denied.cidrs=10.0.0.0/8"],
    )
    .await;
    // The same scenario over JSON-RPC and over HTTP+JSON, each with an
    // agent of its own (the scenario counts the agent's tasks).
    let _agent = echo_agent(mesh.s(1), "echo");
    let _rest_agent = echo_agent(mesh.s(1), "echo-rest");
    for (agent, binding) in [("echo", "JSONRPC"), ("echo-rest", "HTTP+JSON")] {
        let base = mesh.s(0).url(&format!("/a2a/agents/{agent}"));
        let steps = python_scenario(&base, "1.0", binding);
        check_scenario_of(&steps, "1.0", binding, agent);
    }

    // Both instances see every task, whichever served it.
    let c = client();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":100}}"#;
    let (url0, url1) = (
        mesh.s(0).url("/a2a/agents/echo"),
        mesh.s(1).url("/a2a/agents/echo"),
    );
    let a = rpc(&c, &url0, Some("1.0"), list).await;
    let b = rpc(&c, &url1, Some("1.0"), list).await;
    assert_eq!(a["result"]["totalSize"], 9, "{a}");
    assert_eq!(a["result"]["tasks"], b["result"]["tasks"]);

    // Each instance reads the agents' updates as its own member of the
    // gateway's group.
    let subs: Vec<Value> =
        common::admin_json(&c, mesh.s(0), "/admin/subscriptions?topic=a2a.updates").await;
    let mut members: Vec<(String, String)> = subs
        .iter()
        .map(|s| {
            (
                s["clientId"].as_str().unwrap().to_string(),
                s["group"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    members.sort();
    let member = |i: &str| (format!("a2a-gateway.{i}"), "a2a-gateway".to_string());
    assert_eq!(members, [member("i-0"), member("i-1")]);
}
