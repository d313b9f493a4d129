//! One door into the runtime: an A2A send is a publish like any other (it
//! takes from the caller's tenant's publish quota and shows in the publish
//! metrics); the A2A gateway under a fail-closed gate answers another
//! tenant's task, an agent the ACL hides and an unknown one alike, in both
//! protocol versions and on every endpoint, and keeps client-chosen task
//! ids apart by tenant; a permissive gate settles a foreign delivery and
//! hands over a foreign reply once, counting each once and auditing each
//! once.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use super::transports::{code, sdk, start_closed_mesh, start_mesh};
use crate::common::gate::{start_closed, GateFiles};
use crate::common::sdk::{hold, request_at_responder};
use crate::common::*;
use crate::{denied_metric, gate_files, post_json_as, ALICE, BOB, CAROL};

/// The principal agents register with, in a tenant of its own.
const AGENT: &str = "agent-token";
const WAIT: Duration = Duration::from_secs(10);

fn files_with_agent() -> GateFiles {
    GateFiles::new(&format!(
        "{ALICE} acme alice\n{BOB} globex bob\n{AGENT} agents shopkeeper\n"
    ))
}

/// Registers agent `id` (no process behind it: what is sent to it stays
/// in its inbox).
async fn register(c: &reqwest::Client, s: &Server, id: &str) {
    let card = json!({"name": id, "description": "d", "version": "1",
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]});
    let (status, answer) =
        post_json_as(c, s, "/a2a/agents", AGENT, json!({"id": id, "card": card})).await;
    assert_eq!(status, 200, "{answer}");
}

/// One JSON-RPC call: (HTTP status, body).
async fn rpc(
    c: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    version: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let extra: Vec<(&str, String)> = version
        .map(|v| vec![("A2A-Version", v.to_string())])
        .unwrap_or_default();
    let (status, answer, _) = tokio::time::timeout(
        WAIT,
        call(
            c,
            Method::POST,
            url.to_string(),
            token,
            "application/json",
            serde_json::to_vec(body).unwrap(),
            &extra,
        ),
    )
    .await
    .expect("answered within 10 s");
    (status, answer)
}

fn envelope(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

/// A v1.0 `SendMessage` answered at once; `task` continues a task,
/// `agent` names the agent (for the gateway's endpoint).
fn send_v1(text: &str, task: Option<&str>, agent: Option<&str>) -> Value {
    let mut message = json!({"messageId": format!("m-{text}"), "role": "ROLE_USER",
        "parts": [{"text": text}]});
    if let Some(t) = task {
        message["taskId"] = json!(t);
    }
    if let Some(a) = agent {
        message["metadata"] = json!({"agentId": a});
    }
    envelope(
        "SendMessage",
        json!({"message": message, "configuration": {"returnImmediately": true}}),
    )
}

/// The v0.3 `message/send` of the same, not blocking.
fn send_v03(text: &str, task: Option<&str>, agent: Option<&str>) -> Value {
    let mut message = json!({"messageId": format!("m-{text}"), "role": "user", "kind": "message",
        "parts": [{"kind": "text", "text": text}]});
    if let Some(t) = task {
        message["taskId"] = json!(t);
    }
    if let Some(a) = agent {
        message["metadata"] = json!({"agentId": a});
    }
    envelope(
        "message/send",
        json!({"message": message, "configuration": {"blocking": false}}),
    )
}

fn ok(status: u16, answer: &Value) -> bool {
    status == 200 && answer.get("result").is_some() && answer.get("error").is_none()
}

#[tokio::test]
async fn a2a_sends_take_from_the_tenant_publish_quota_and_count_as_publishes() {
    let files = files_with_agent();
    let s = start_closed(
        &files,
        &[
            "eventmesh.security.gate.quota.publish.rate=1".to_string(),
            "eventmesh.security.gate.quota.publish.burst=5".to_string(),
        ],
    );
    let c = client();
    register(&c, &s, "shop").await;
    assert_eq!(
        metric(&c, &s, "eventmesh_events_published_total").await,
        0.0
    );
    // Six sends at once, in both versions and on both endpoints: the burst
    // holds five.
    let agent_url = s.url("/a2a/agents/shop");
    let gateway_url = s.url("/a2a");
    let sends = (0..6).map(|i| {
        let c = c.clone();
        let (url, version, body) = match i % 3 {
            0 => (
                agent_url.clone(),
                Some("1.0"),
                send_v1(&format!("v1-{i}"), None, None),
            ),
            1 => (
                agent_url.clone(),
                Some("0.3"),
                send_v03(&format!("v03-{i}"), None, None),
            ),
            _ => (
                gateway_url.clone(),
                Some("1.0"),
                send_v1(&format!("gw-{i}"), None, Some("shop")),
            ),
        };
        tokio::spawn(async move { rpc(&c, &url, Some(ALICE), version, &body).await })
    });
    let mut answers = Vec::new();
    for h in sends.collect::<Vec<_>>() {
        answers.push(h.await.unwrap());
    }
    let sent = answers.iter().filter(|(st, a)| ok(*st, a)).count();
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(st, _)| *st == 429)
        .map(|(_, a)| a)
        .collect();
    assert_eq!((sent, refused.len()), (5, 1), "{answers:?}");
    assert_eq!(refused[0]["error"], "publish_rate", "{answers:?}");
    assert_eq!(denied_metric(&c, &s, "publish_rate").await, 1.0);
    // Each accepted send published one event to the agent's inbox, through
    // the same publish path as any client's.
    assert_eq!(
        metric(&c, &s, "eventmesh_events_published_total").await,
        5.0
    );
    let inbox: Value = admin_json(&c, &s, "/admin/topics/a2a.agent.shop").await;
    let stored: u64 = inbox["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["endOffset"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(stored, 5, "{inbox}");
}

/// `answer` with every occurrence of `id` written `<id>`.
fn without(answer: &Value, id: &str) -> String {
    answer.to_string().replace(id, "<id>")
}

/// Every task method, in both versions, about task `id` (a push config
/// `c1`); sends name agent `agent`.
fn task_calls(id: &str, agent: &str) -> Vec<(&'static str, Value)> {
    let hook = "http://127.0.0.1:9/hook";
    vec![
        ("1.0", envelope("GetTask", json!({"id": id}))),
        ("1.0", envelope("CancelTask", json!({"id": id}))),
        ("1.0", envelope("SubscribeToTask", json!({"id": id}))),
        (
            "1.0",
            envelope(
                "CreateTaskPushNotificationConfig",
                json!({"taskId": id, "id": "c1", "url": hook}),
            ),
        ),
        (
            "1.0",
            envelope(
                "GetTaskPushNotificationConfig",
                json!({"taskId": id, "id": "c1"}),
            ),
        ),
        (
            "1.0",
            envelope("ListTaskPushNotificationConfigs", json!({"taskId": id})),
        ),
        (
            "1.0",
            envelope(
                "DeleteTaskPushNotificationConfig",
                json!({"taskId": id, "id": "c1"}),
            ),
        ),
        ("1.0", send_v1("more", Some(id), Some(agent))),
        ("0.3", envelope("tasks/get", json!({"id": id}))),
        ("0.3", envelope("tasks/cancel", json!({"id": id}))),
        ("0.3", envelope("tasks/resubscribe", json!({"id": id}))),
        (
            "0.3",
            envelope(
                "tasks/pushNotificationConfig/set",
                json!({"taskId": id, "pushNotificationConfig": {"id": "c1", "url": hook}}),
            ),
        ),
        (
            "0.3",
            envelope("tasks/pushNotificationConfig/get", json!({"id": id})),
        ),
        (
            "0.3",
            envelope("tasks/pushNotificationConfig/list", json!({"id": id})),
        ),
        (
            "0.3",
            envelope(
                "tasks/pushNotificationConfig/delete",
                json!({"id": id, "pushNotificationConfigId": "c1"}),
            ),
        ),
        ("0.3", send_v03("more", Some(id), Some(agent))),
    ]
}

/// A v0.1 `tasks/send` with the task id the client chose, answered once
/// the task settles.
async fn tasks_send(c: &reqwest::Client, s: &Server, token: &str, id: &str, text: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": "r1", "method": "tasks/send", "params": {
        "id": id, "message": {"role": "user", "parts": [{"type": "text", "text": text}]},
        "metadata": {"agentId": "shop"}}});
    let (status, answer) = rpc(c, &s.url("/a2a/tasks/send"), Some(token), None, &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn the_a2a_gateway_answers_other_tenants_tasks_and_hidden_agents_like_unknown_ones() {
    let files = files_with_agent();
    let s = start_closed(
        &files,
        &[
            files.acl("allow agents A2A *\nallow acme A2A *\nallow globex A2A shop\n"),
            // Nothing answers: a blocking send ends when its task times out.
            "eventmesh.a2a.task.timeout.ms=1000".to_string(),
        ],
    );
    let c = client();
    register(&c, &s, "shop").await;
    register(&c, &s, "secret").await;
    let shop = s.url("/a2a/agents/shop");
    let gateway = s.url("/a2a");
    // Alice's tasks: one with each agent.
    let mut alices = Vec::new();
    for agent in ["shop", "secret"] {
        let (status, answer) = rpc(
            &c,
            &s.url(&format!("/a2a/agents/{agent}")),
            Some(ALICE),
            Some("1.0"),
            &send_v1(&format!("for {agent}"), None, None),
        )
        .await;
        assert!(ok(status, &answer), "{answer}");
        alices.push(answer["result"]["task"]["id"].as_str().unwrap().to_string());
    }
    let unknown = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000";

    // Bob (another tenant) gets, for each of alice's tasks, exactly the
    // answer an unknown id gets: every method, both versions, both
    // endpoints.
    for url in [&shop, &gateway] {
        for task in &alices {
            let theirs = task_calls(task, "shop");
            let none = task_calls(unknown, "shop");
            for ((version, call_theirs), (_, call_none)) in theirs.iter().zip(&none) {
                let a = rpc(&c, url, Some(BOB), Some(*version), call_theirs).await;
                let b = rpc(&c, url, Some(BOB), Some(*version), call_none).await;
                assert_eq!(a.0, 200, "{url} {call_theirs}: {}", a.1);
                assert_eq!(b.1["error"]["code"], -32001, "{url} {call_none}: {}", b.1);
                assert_eq!(
                    without(&a.1, task),
                    without(&b.1, unknown),
                    "{url} {call_theirs}"
                );
            }
        }
        // Nor are they listed.
        let (_, listed) = rpc(
            &c,
            url,
            Some(BOB),
            Some("1.0"),
            &envelope("ListTasks", json!({})),
        )
        .await;
        if url == &shop {
            assert_eq!(listed["result"]["totalSize"], 0, "{listed}");
        }
    }
    // Alice still sees hers.
    let (_, mine) = rpc(
        &c,
        &gateway,
        Some(ALICE),
        Some("1.0"),
        &envelope("GetTask", json!({"id": alices[0]})),
    )
    .await;
    assert_eq!(mine["result"]["id"], alices[0].as_str(), "{mine}");

    // Anonymous callers are refused before anything is looked up.
    for url in [&shop, &gateway] {
        let a = rpc(
            &c,
            url,
            None,
            Some("1.0"),
            &task_calls(&alices[0], "shop")[0].1,
        )
        .await;
        let b = rpc(
            &c,
            url,
            None,
            Some("1.0"),
            &task_calls(unknown, "shop")[0].1,
        )
        .await;
        assert_eq!((a.0, b.0), (401, 401));
        assert_eq!(a.1, b.1);
    }
    let card = |agent: &str| s.url(&format!("/a2a/agents/{agent}/.well-known/agent-card.json"));
    let get = |url: String, token: Option<&'static str>| {
        let c = c.clone();
        async move {
            let (status, body, _) = call(
                &c,
                Method::GET,
                url,
                token,
                "application/json",
                Vec::new(),
                &[],
            )
            .await;
            (status, body)
        }
    };
    let (a, b) = (
        get(card("shop"), None).await,
        get(card("nosuch"), None).await,
    );
    assert_eq!((a.0, b.0), (401, 401));
    assert_eq!(a.1, b.1);

    // An agent the ACL hides from bob is an unknown agent to him: its card,
    // its endpoint, and sends naming it on the gateway's.
    let hidden = get(card("secret"), Some(BOB)).await;
    let nosuch = get(card("nosuch"), Some(BOB)).await;
    assert_eq!((hidden.0, nosuch.0), (404, 404));
    assert_eq!(hidden.1["error"], "unknown_agent");
    assert_eq!(without(&hidden.1, "secret"), without(&nosuch.1, "nosuch"));
    assert_eq!(get(card("shop"), Some(BOB)).await.0, 200);
    for (version, send) in [
        ("1.0", send_v1("hi", None, None)),
        ("0.3", send_v03("hi", None, None)),
    ] {
        let a = rpc(
            &c,
            &s.url("/a2a/agents/secret"),
            Some(BOB),
            Some(version),
            &send,
        )
        .await;
        let b = rpc(
            &c,
            &s.url("/a2a/agents/nosuch"),
            Some(BOB),
            Some(version),
            &send,
        )
        .await;
        assert_eq!((a.0, b.0), (404, 404));
        assert_eq!(without(&a.1, "secret"), without(&b.1, "nosuch"));
    }
    for (version, a, b) in [
        (
            "1.0",
            send_v1("hi", None, Some("secret")),
            send_v1("hi", None, Some("nosuch")),
        ),
        (
            "0.3",
            send_v03("hi", None, Some("secret")),
            send_v03("hi", None, Some("nosuch")),
        ),
    ] {
        let a = rpc(&c, &gateway, Some(BOB), Some(version), &a).await;
        let b = rpc(&c, &gateway, Some(BOB), Some(version), &b).await;
        assert_eq!((a.0, b.0), (200, 200));
        assert_eq!(b.1["error"]["code"], -32602, "{}", b.1);
        assert_eq!(without(&a.1, "secret"), without(&b.1, "nosuch"));
    }

    // A task id a client chooses (v0.1) is its tenant's: bob choosing
    // alice's id gets a task of his own, and each finds their own by it.
    let first = tasks_send(&c, &s, ALICE, "order-1", "alice's order").await;
    assert_eq!(first["result"]["id"], "order-1", "{first}");
    let second = tasks_send(&c, &s, BOB, "order-1", "bob's order").await;
    assert_eq!(second["result"]["id"], "order-1", "{second}");
    let first_text = |v: &Value| v["result"]["history"][0]["parts"][0]["text"].clone();
    assert_eq!(first_text(&second), "bob's order", "{second}");
    for (token, text) in [(ALICE, "alice's order"), (BOB, "bob's order")] {
        let (_, got) = rpc(
            &c,
            &gateway,
            Some(token),
            Some("0.3"),
            &envelope("tasks/get", json!({"id": "order-1"})),
        )
        .await;
        assert_eq!(first_text(&got), text, "{got}");
    }
}

#[tokio::test]
async fn a_permissive_gate_settles_foreign_deliveries_and_replies_once() {
    let files = gate_files();
    let m = start_mesh(&files, &[files.token_file(), files.audit_file()]);
    let c = client();
    let alice = sdk(&m, Some(ALICE));
    let delivery = hold(&alice, "alices", "t", 1).await.remove(0);
    // Bob settles alice's delivery: let through, counted once, settled once.
    let bob = sdk(&m, Some(BOB));
    bob.ack(&delivery.delivery_id).await.unwrap();
    assert_eq!(denied_metric(&c, &m.s, "unknown_delivery").await, 1.0);
    assert_eq!(
        code(alice.ack(&delivery.delivery_id).await),
        "unknown_delivery"
    );
    assert_eq!(denied_metric(&c, &m.s, "unknown_delivery").await, 1.0);
    assert!(committed_reaches(&c, &m.s, "t", 1, WAIT).await);

    // Bob answers a request handed to carol's client: handed over, counted
    // once.
    let carol = sdk(&m, Some(CAROL));
    let (request, waiting) = request_at_responder(&carol, sdk(&m, Some(ALICE))).await;
    let answer = json!({"specversion": "1.0", "id": "from-bob", "source": "/x", "type": "reply",
        "data": "bob's"});
    bob.reply_to(&request, &answer).await.unwrap();
    let reply = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the requester got an answer")
        .unwrap()
        .unwrap();
    assert_eq!(reply["id"], "from-bob");
    assert_eq!(denied_metric(&c, &m.s, "unknown_correlation").await, 1.0);

    // Each of bob's two requests was decided, and audited, once.
    let bobs: Vec<String> = files
        .audit()
        .iter()
        .filter(|e| e["principal"] == "bob")
        .map(|e| e["operation"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bobs, ["ACK", "SUBSCRIBE"]);
}

#[tokio::test]
async fn a_reply_the_acl_refuses_looks_like_one_to_no_request() {
    let files = gate_files();
    // Bob may publish, and consume nothing; alice may consume `other.*` only.
    let m = start_closed_mesh(
        &files,
        &[files.acl(
            "allow initech * *\nallow acme PUBLISH *\nallow acme SUBSCRIBE other.*\nallow globex PUBLISH *\n",
        )],
    );
    let c = client();
    let carol = sdk(&m, Some(CAROL));
    let (request, waiting) = request_at_responder(&carol, sdk(&m, Some(CAROL))).await;
    let waiting_on = request.correlation_id().unwrap().to_string();
    let reply = |correlation: &str| {
        serde_json::to_vec(&json!({"specversion": "1.0", "id": "r", "source": "/x",
            "type": "reply", "correlationid": correlation}))
        .unwrap()
    };
    for token in [ALICE, BOB] {
        let mut answers = Vec::new();
        for correlation in [waiting_on.as_str(), "no-such-request"] {
            let (status, body, _) = call(
                &c,
                Method::POST,
                m.s.url("/events/reply"),
                Some(token),
                "application/cloudevents+json",
                reply(correlation),
                &[],
            )
            .await;
            answers.push((status, body));
        }
        assert_eq!(answers[0], answers[1], "{token}");
        assert_eq!(answers[0].0, 404, "{answers:?}");
        assert_eq!(answers[0].1["error"], "unknown_correlation");
    }
    // The request is still waiting for its responder.
    let answer = json!({"specversion": "1.0", "id": "real", "source": "/pricer",
        "type": "reply", "data": 7});
    carol.reply_to(&request, &answer).await.unwrap();
    let got = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("answered")
        .unwrap()
        .unwrap();
    assert_eq!(got["id"], "real");
}
