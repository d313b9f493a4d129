//! The A2A gateway against real parts: the `eventmesh` binary, the
//! built-in echo agent (`eventmesh agent echo`, written with the SDK's
//! agent helper) attached over SSE, and the official Python A2A client
//! (a2a-sdk 1.3, from `scripts/a2a.sh`) speaking v1.0 and v0.3. The raw
//! JSON-RPC error cases are sent by hand.

mod common;
#[path = "a2a/faults.rs"]
mod faults;

use std::time::Duration;

use common::a2a::{check_scenario, echo_agent, python_scenario, registered, start_echo_agent};
use common::{client, Server};
use serde_json::{json, Value};

#[tokio::test]
async fn the_python_sdk_talks_to_a_mesh_agent_in_v1_and_v03() {
    let dir = tempfile::tempdir().unwrap();
    // Webhooks may reach loopback (the test's receiver), not 10.0.0.0/8.
    let s = Server::start(dir.path(), &["eventmesh.webhook.denied.cidrs=10.0.0.0/8"]);
    let _agent = echo_agent(&s, "echo");
    let base = s.url("/a2a/agents/echo");
    for version in ["1.0", "0.3"] {
        let steps = python_scenario(&base, version, "JSONRPC");
        check_scenario(&steps, version, "JSONRPC");
        // The next run counts its own tasks only.
        if version == "1.0" {
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100}});
            let listed = rpc(&client(), &base, Some("1.0"), &list.to_string()).await;
            // send, stream, ask, resubscribe, cancel, the two push
            // tasks, fail, immediate.
            assert_eq!(listed["result"]["totalSize"], 9, "{listed}");
        }
    }
}

async fn get_json(c: &reqwest::Client, url: &str) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// A v1.0 `SendMessage` of `text` that returns at once; the task's id.
async fn send_later(c: &reqwest::Client, url: &str, text: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": uuid_like(text), "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": true}}});
    let sent = rpc(c, url, Some("1.0"), &body.to_string()).await;
    sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {sent}"))
        .to_string()
}

async fn rpc(c: &reqwest::Client, url: &str, version: Option<&str>, body: &str) -> Value {
    let mut rb = c
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(v) = version {
        rb = rb.header("A2A-Version", v);
    }
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status(), 200, "JSON-RPC errors are answered with 200");
    resp.json().await.unwrap()
}

#[tokio::test]
async fn json_rpc_errors_carry_the_spec_codes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let reg: Value = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "quiet", "card": {
            "name": "Quiet", "description": "never answers", "version": "1",
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reg["inbox"], "a2a.agent.quiet");
    let url = s.url("/a2a/agents/quiet");
    let code = |v: &Value| v["error"]["code"].as_i64().unwrap_or(0);

    let parse = rpc(&c, &url, Some("1.0"), "{not json").await;
    assert_eq!((code(&parse), &parse["id"]), (-32700, &Value::Null));
    let batch = rpc(&c, &url, Some("1.0"), "[]").await;
    assert_eq!(code(&batch), -32600);
    let no_version = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#,
    )
    .await;
    assert_eq!(code(&no_version), -32600);
    let unknown = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":2,"method":"Nope","params":{}}"#,
    )
    .await;
    assert_eq!((code(&unknown), &unknown["id"]), (-32601, &json!(2)));
    let bad_params = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":7}}"#,
    )
    .await;
    assert_eq!(code(&bad_params), -32602);
    assert_eq!(bad_params["error"]["data"][0]["reason"], "INVALID_PARAMS");
    let empty_parts = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}}"#,
    )
    .await;
    assert_eq!(code(&empty_parts), -32602, "{empty_parts}");
    // The agent takes and gives text only.
    let data_part = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"n":1}}]}}}"#,
    )
    .await;
    assert_eq!(code(&data_part), -32005, "{data_part}");
    assert_eq!(
        data_part["error"]["message"],
        "message.parts[0] is application/json, which the agent does not take (it takes text/plain)"
    );
    let wants_png = rpc(
        &c,
        &url,
        None,
        r#"{"jsonrpc":"2.0","id":4,"method":"message/send","params":{"message":{"messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"acceptedOutputModes":["image/png"]}}}"#,
    )
    .await;
    assert_eq!(code(&wants_png), -32005, "{wants_png}");
    let not_found = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"nope"}}"#,
    )
    .await;
    assert_eq!(code(&not_found), -32001);
    assert_eq!(not_found["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    // v1.0 methods need A2A-Version 1.0; absent means 0.3.
    let v03_header = rpc(
        &c,
        &url,
        None,
        r#"{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{"id":"x"}}"#,
    )
    .await;
    assert_eq!(code(&v03_header), -32009);
    let future = rpc(
        &c,
        &url,
        Some("2.0"),
        r#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"x"}}"#,
    )
    .await;
    assert_eq!(code(&future), -32009);
    // A v0.3 method asked as 1.0: 0.3 has no -32009, so it is -32603.
    let v03_as_v1 = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"id":"x"}}"#,
    )
    .await;
    assert_eq!(code(&v03_as_v1), -32603);
    let v03_unknown = rpc(
        &c,
        &url,
        None,
        r#"{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"id":"x"}}"#,
    )
    .await;
    assert_eq!(code(&v03_unknown), -32001);
    assert_eq!(v03_unknown["error"]["data"], Value::Null);
    let push = rpc(&c, &url, Some("1.0"), r#"{"jsonrpc":"2.0","id":10,"method":"GetTaskPushNotificationConfig","params":{"taskId":"x","id":"y"}}"#).await;
    assert_eq!(code(&push), -32001);
    let card = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":11,"method":"GetExtendedAgentCard","params":{}}"#,
    )
    .await;
    assert_eq!(code(&card), -32004);
    // An agent with an extended card: its public card says so, and an
    // admitted caller gets the extended one, with the gateway's endpoint.
    let vip_card = |name: &str| {
        json!({"name": name, "description": "d", "version": "1",
               "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]})
    };
    let registered = c
        .post(s.url("/a2a/agents"))
        .json(
            &json!({"id": "vip", "card": vip_card("VIP"), "extendedCard": vip_card("VIP (full)")}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 200);
    let public = get_json(&c, &s.url("/a2a/agents/vip/.well-known/agent-card.json")).await;
    assert_eq!(public["name"], "VIP");
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    assert_eq!(public["supportsAuthenticatedExtendedCard"], true);
    let vip = s.url("/a2a/agents/vip");
    let full = rpc(
        &c,
        &vip,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":11,"method":"GetExtendedAgentCard","params":{}}"#,
    )
    .await;
    assert_eq!(full["result"]["name"], "VIP (full)", "{full}");
    assert_eq!(
        full["result"]["supportedInterfaces"][0]["url"],
        vip.as_str()
    );
    let full03 = rpc(
        &c,
        &vip,
        None,
        r#"{"jsonrpc":"2.0","id":11,"method":"agent/getAuthenticatedExtendedCard","params":{}}"#,
    )
    .await;
    assert_eq!(full03["result"]["name"], "VIP (full)", "{full03}");
    assert_eq!(full03["result"]["url"], vip.as_str());
    assert_eq!(full03["result"]["protocolVersion"], "0.3");
    let bad_extended = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "vip", "card": vip_card("VIP"), "extendedCard": {"version": "1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_extended.status(), 400);
    let body: Value = bad_extended.json().await.unwrap();
    assert_eq!(
        (body["error"].as_str(), body["message"].as_str()),
        (Some("invalid_card"), Some("extended card.name: missing"))
    );

    // A task the agent never answers: submitted, then cancel works once.
    let sent = rpc(
        &c,
        &url,
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":12,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true}}}"#,
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{sent}");
    assert_eq!(task["history"][0]["parts"][0]["text"], "hi");
    let id = task["id"].as_str().unwrap();
    let cancel =
        format!(r#"{{"jsonrpc":"2.0","id":13,"method":"CancelTask","params":{{"id":"{id}"}}}}"#);
    let canceled = rpc(&c, &url, Some("1.0"), &cancel).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(code(&rpc(&c, &url, Some("1.0"), &cancel).await), -32002);

    // Webhook configs through the gateway's endpoint, which finds the
    // agent from the config's taskId (its `id` names the config).
    let open = send_later(&c, &url, "hi").await;
    let gateway = s.url("/a2a");
    let create = |url: &str| {
        json!({"jsonrpc": "2.0", "id": 15, "method": "CreateTaskPushNotificationConfig",
               "params": {"taskId": open, "id": "c", "url": url, "token": "t"}})
        .to_string()
    };
    let created = rpc(&c, &gateway, Some("1.0"), &create("http://127.0.0.1:9/x")).await;
    assert_eq!(
        created["result"],
        json!({"id": "c", "taskId": open, "url": "http://127.0.0.1:9/x", "token": "t"})
    );
    let not_http = rpc(&c, &gateway, Some("1.0"), &create("ftp://127.0.0.1/x")).await;
    assert_eq!(code(&not_http), -32602, "{not_http}");
    let second = json!({"jsonrpc": "2.0", "id": 15, "method": "CreateTaskPushNotificationConfig",
                        "params": {"taskId": open, "id": "d", "url": "http://127.0.0.1:9/y"}});
    rpc(&c, &gateway, Some("1.0"), &second.to_string()).await;
    let page = |size: i32, token: &str| {
        json!({"jsonrpc": "2.0", "id": 16, "method": "ListTaskPushNotificationConfigs",
               "params": {"taskId": open, "pageSize": size, "pageToken": token}})
        .to_string()
    };
    let first = rpc(&c, &gateway, Some("1.0"), &page(1, "")).await;
    assert_eq!(first["result"]["configs"][0]["id"], "c", "{first}");
    assert_eq!(first["result"]["nextPageToken"], "1");
    let rest = rpc(&c, &gateway, Some("1.0"), &page(1, "1")).await;
    assert_eq!(rest["result"]["configs"][0]["id"], "d", "{rest}");
    assert_eq!(rest["result"]["nextPageToken"], Value::Null);
    assert_eq!(
        code(&rpc(&c, &gateway, Some("1.0"), &page(0, "")).await),
        -32602
    );
    let delete_d = json!({"jsonrpc": "2.0", "id": 17, "method": "DeleteTaskPushNotificationConfig",
                          "params": {"taskId": open, "id": "d"}});
    rpc(&c, &gateway, Some("1.0"), &delete_d.to_string()).await;
    let listed = json!({"jsonrpc": "2.0", "id": 16, "method": "tasks/pushNotificationConfig/list",
                        "params": {"id": open}});
    let listed = rpc(&c, &gateway, None, &listed.to_string()).await;
    assert_eq!(
        listed["result"],
        json!([{"taskId": open, "pushNotificationConfig": {"id": "c", "url": "http://127.0.0.1:9/x", "token": "t"}}])
    );
    let delete = json!({"jsonrpc": "2.0", "id": 17, "method": "tasks/pushNotificationConfig/delete",
                        "params": {"id": open, "pushNotificationConfigId": "c"}});
    let deleted = rpc(&c, &gateway, None, &delete.to_string()).await;
    assert_eq!(deleted, json!({"jsonrpc": "2.0", "id": 17, "result": null}));

    // The message reached the agent's inbox as a CloudEvent.
    let polled = common::subscribe(
        &c,
        &s,
        json!({"clientId": "peek", "topic": "a2a.agent.quiet", "from": "earliest"}),
    )
    .await;
    assert!(!polled.is_empty());
    let got = common::poll_n(&c, &s, "peek", 3, Duration::from_secs(10)).await;
    // Each task's events in order (two tasks: two partitions, whose
    // deliveries may interleave either way).
    let of = |task: &str| -> Vec<&str> {
        got.iter()
            .filter(|d| d["event"]["a2ataskid"] == task)
            .map(|d| d["event"]["type"].as_str().unwrap())
            .collect()
    };
    assert_eq!(of(id), ["a2a.task.message", "a2a.task.cancel"]);
    assert_eq!(of(&open), ["a2a.task.message"]);
    let first = got.iter().find(|d| d["event"]["a2ataskid"] == id).unwrap();
    assert_eq!(first["event"]["data"]["message"]["parts"][0]["text"], "hi");
    // A message names the last update applied, where the agent chains on.
    assert_eq!(first["event"]["a2aseq"], "0");

    // Unknown agents and bad registrations are plain HTTP errors.
    let missing = c
        .post(s.url("/a2a/agents/ghost"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"], "unknown_agent");
    // Where a client resolving the card path relative to an agent's URL
    // without its trailing slash lands: 404 with the way out.
    let landed = c
        .get(s.url("/a2a/agents/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(landed.status(), 404);
    let body: Value = landed.json().await.unwrap();
    assert_eq!(body["error"], "unknown_agent");
    assert!(
        body["message"].as_str().unwrap().starts_with(
            "this URL names no agent: an agent's URL given without its trailing slash"
        ),
        "{body}"
    );
    let bad = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "bad id", "card": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_id");
    let no_card = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "x", "card": {"name": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_card.status(), 400);
    let body: Value = no_card.json().await.unwrap();
    assert_eq!(body["error"], "invalid_card");
}

#[tokio::test]
async fn push_notifications_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.a2a.push.enabled=false"]);
    let _agent = echo_agent(&s, "echo");
    let c = client();
    let card = get_json(&c, &s.url("/a2a/agents/echo/.well-known/agent-card.json")).await;
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    let url = s.url("/a2a/agents/echo");
    let code = |v: &Value| v["error"]["code"].as_i64().unwrap_or(0);
    let create = r#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"x","url":"http://127.0.0.1:9/x"}}"#;
    assert_eq!(code(&rpc(&c, &url, Some("1.0"), create).await), -32003);
    let set = r#"{"jsonrpc":"2.0","id":2,"method":"tasks/pushNotificationConfig/set","params":{"taskId":"x","pushNotificationConfig":{"url":"http://127.0.0.1:9/x"}}}"#;
    assert_eq!(code(&rpc(&c, &url, None, set).await), -32003);
    let send = r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"taskPushNotificationConfig":{"url":"http://127.0.0.1:9/x"}}}}"#;
    assert_eq!(code(&rpc(&c, &url, Some("1.0"), send).await), -32003);
}

#[tokio::test]
async fn a_quiet_agent_fails_its_task_and_cards_list_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.a2a.task.timeout.ms=500"]);
    let c = client();
    let card = json!({"name": "Quiet", "description": "never answers", "version": "1",
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]});
    let reg = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "quiet", "card": card, "ttlMs": 60000}))
        .send()
        .await
        .unwrap();
    assert_eq!(reg.status(), 200);
    let gateway: Value = get_json(&c, &s.url("/.well-known/agent-card.json")).await;
    assert_eq!(gateway["skills"][0]["id"], "quiet");
    assert_eq!(gateway["url"], s.url("/a2a"));
    let agent: Value = get_json(&c, &s.url("/a2a/agents/quiet/.well-known/agent-card.json")).await;
    assert_eq!(agent["name"], "Quiet");
    assert_eq!(
        agent["supportedInterfaces"],
        json!([
            {"url": s.url("/a2a/agents/quiet"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": s.url("/a2a/agents/quiet"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": s.url("/a2a/agents/quiet"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": s.url("/a2a/agents/quiet"), "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
        ])
    );
    assert_eq!(
        agent["additionalInterfaces"],
        json!([
            {"url": s.url("/a2a/agents/quiet"), "transport": "JSONRPC"},
            {"url": s.url("/a2a/agents/quiet"), "transport": "HTTP+JSON"},
        ])
    );
    assert_eq!(agent["url"], s.url("/a2a/agents/quiet"));

    // A blocking send to an agent that never answers ends failed.
    let sent = rpc(
        &c,
        &s.url("/a2a/agents/quiet"),
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"anyone?"}]}}}"#,
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{sent}");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "the agent sent no update for 500 ms"
    );

    // The gateway's endpoint reaches the same task.
    let id = task["id"].as_str().unwrap();
    let got = rpc(
        &c,
        &s.url("/a2a"),
        Some("1.0"),
        &format!(r#"{{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{{"id":"{id}"}}}}"#),
    )
    .await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_FAILED");

    let gone = c.delete(s.url("/a2a/agents/quiet")).send().await.unwrap();
    assert_eq!(gone.status(), 204);
    let listed: Value = get_json(&c, &s.url("/a2a/agents")).await;
    assert_eq!(listed, json!({"agents": [], "totalSize": 0}));
}

#[tokio::test]
async fn the_v01_tasks_send_route_maps_onto_send_message() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let _agent = echo_agent(&s, "echo01");
    let c = client();
    let send = |id: Value, text: &str| {
        let body = json!({"jsonrpc": "2.0", "id": "r1", "method": "tasks/send", "params": {
            "id": id, "sessionId": "s1",
            "message": {"role": "user", "parts": [{"type": "text", "text": text}]},
            "metadata": {"agentId": "echo01"}}});
        let c = c.clone();
        let url = s.url("/a2a/tasks/send");
        async move { rpc(&c, &url, None, &body.to_string()).await }
    };
    let answer = send(json!("client-chosen"), "ask: old school?").await;
    let r = &answer["result"];
    // The task takes the id the client chose.
    assert_eq!(r["id"], "client-chosen", "{answer}");
    assert_eq!(r["status"]["state"], "input-required", "{answer}");
    assert_eq!(r["sessionId"], "s1");
    assert_eq!(r["status"]["message"]["parts"][0]["type"], "text");
    assert_eq!(r["status"]["message"]["parts"][0]["text"], "old school?");
    // The same id again continues that task.
    let answer = send(json!("client-chosen"), "ask: yes").await;
    let r = &answer["result"];
    assert_eq!(r["id"], "client-chosen", "{answer}");
    assert_eq!(r["status"]["state"], "completed", "{answer}");
    assert_eq!(r["history"].as_array().unwrap().len(), 4, "{answer}");
    // An id that cannot be a task id is refused.
    let bad = send(json!("no spaces/or slashes"), "x").await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

fn send_body(text: &str, task: Option<&str>) -> String {
    let mut message =
        json!({"messageId": uuid_like(text), "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(t) = task {
        message["taskId"] = json!(t);
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
        .to_string()
}

fn uuid_like(seed: &str) -> String {
    format!("m-{}-{}", seed.len(), std::process::id())
}

/// An agent's updates applied in the order the agent chained them
/// (`a2aprev`), whatever order they arrive in: the second chunk of an
/// artifact published before the first, and the final status before both,
/// end as the agent meant them.
#[tokio::test]
async fn updates_apply_in_their_chain_order_whatever_order_they_arrive_in() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    let reg = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": "manual", "card": {
            "name": "Manual", "description": "answered by the test", "version": "1",
            "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(reg.status(), 200);
    let url = s.url("/a2a/agents/manual");
    let id = send_later(&c, &url, "go").await;
    common::subscribe(
        &c,
        &s,
        json!({"clientId": "manual", "topic": "a2a.agent.manual", "from": "earliest"}),
    )
    .await;
    let inbox = common::poll_n(&c, &s, "manual", 1, Duration::from_secs(10)).await;
    let message = &inbox[0]["event"];
    assert_eq!(message["a2aseq"], "0");
    let token = message["a2atoken"].as_str().unwrap();
    let update = |ty: &str, seq: &str, prev: &str, data: Value| {
        json!({"specversion": "1.0", "id": format!("u{seq}"), "source": "/agent", "type": ty,
               "a2ataskid": id, "a2atoken": token, "a2aseq": seq, "a2aprev": prev,
               "partitionkey": id, "datacontenttype": "application/json", "data": data})
    };
    let chunk = |text: &str, append: bool| json!({"artifact": {"artifactId": "a", "parts": [{"text": text}]}, "append": append});
    // Published (and so delivered) in the order: 30, 20, 10.
    for ev in [
        update(
            "a2a.task.status",
            "30",
            "20",
            json!({"state": "TASK_STATE_COMPLETED"}),
        ),
        update("a2a.task.artifact", "20", "10", chunk("second", true)),
        update("a2a.task.artifact", "10", "0", chunk("first", false)),
    ] {
        common::publish(&c, &s, "a2a.updates", &ev).await;
    }
    let get = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{{"id":"{id}"}}}}"#);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut task = Value::Null;
    while std::time::Instant::now() < deadline {
        task = rpc(&c, &url, Some("1.0"), &get).await["result"].clone();
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        task["artifacts"],
        json!([{"artifactId": "a", "parts": [{"text": "first"}, {"text": "second"}]}])
    );
}

/// An agent started before the mesh is up waits for it instead of giving
/// up, then serves.
#[tokio::test]
async fn the_agent_helper_waits_for_the_mesh_to_come_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let base = s.url("");
    s.stop();
    let (_agent, line) = start_echo_agent(&base, "patient");
    // Nothing listens there now: the agent is retrying.
    assert!(line.recv_timeout(Duration::from_millis(300)).is_err());
    let s = s.restart_on_same_ports();
    registered(&line, "patient");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "here"}]}}});
    let sent = rpc(
        &client(),
        &s.url("/a2a/agents/patient"),
        Some("1.0"),
        &body.to_string(),
    )
    .await;
    assert_eq!(
        sent["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );
}
