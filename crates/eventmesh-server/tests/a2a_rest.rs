//! The A2A gateway's HTTP+JSON binding and its agent registry against real
//! parts: the `eventmesh` binary, the built-in echo agent, the official
//! Python client (a2a-sdk 1.3) and the official JavaScript client
//! (@a2a-js/sdk 1.3, from `scripts/a2a-js.sh`) over JSON-RPC and
//! HTTP+JSON. The error cases and the gate are checked by hand, body for
//! body.

mod common;

use std::process::Command;
use std::time::Duration;

use common::a2a::{check_scenario, echo_agent, python_scenario};
use common::gate::{start_closed, GateFiles};
use common::{client, output_within, Server};
use serde_json::{json, Value};

#[path = "a2a_rest/v03.rs"]
mod v03;

/// The directory `scripts/a2a-js.sh` installed the JavaScript SDK in.
fn js_dir() -> String {
    let dir = std::env::var("EVENTMESH_A2A_JS").unwrap_or_else(|_| "/var/tmp/a2a-js".to_string());
    assert!(
        std::path::Path::new(&dir)
            .join("node_modules/@a2a-js/sdk")
            .exists(),
        "no @a2a-js/sdk in {dir}: run scripts/a2a-js.sh (scripts/test.sh does) or set EVENTMESH_A2A_JS"
    );
    dir
}

/// Runs the JavaScript client's scenario over `binding`; its steps.
fn js_scenario(card: &str, binding: &str) -> Value {
    // Node resolves the SDK next to the script: run a copy of it beside
    // the SDK's node_modules.
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("client.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/client.mjs"),
        &script,
    )
    .unwrap();
    std::os::unix::fs::symlink(
        std::path::Path::new(&js_dir()).join("node_modules"),
        work.path().join("node_modules"),
    )
    .unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(&script).args([card, binding]);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(120));
    assert!(
        status.success(),
        "client.mjs {binding} failed:\n{out}\n{err}"
    );
    let mut steps = serde_json::Map::new();
    for line in out.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let step = v["step"].as_str().unwrap().to_string();
        v.as_object_mut().unwrap().remove("step");
        steps.insert(step, v);
    }
    Value::Object(steps)
}

#[tokio::test]
async fn the_python_and_javascript_sdks_speak_http_json_to_a_mesh_agent() {
    let dir = tempfile::tempdir().unwrap();
    // Webhooks may reach loopback (the test's receiver), not 10.0.0.0/8.
    let s = Server::start(dir.path(), &["eventmesh.webhook.denied.cidrs=10.0.0.0/8"]);
    let _agent = echo_agent(&s, "echo");
    let base = s.url("/a2a/agents/echo");
    let steps = python_scenario(&base, "1.0", "HTTP+JSON");
    check_scenario(&steps, "1.0", "HTTP+JSON");
    // The same through the SDK's v0.3 REST transport (its compat layer),
    // on the /v1/ routes.
    // The agent's URL with a trailing slash resolves as well as without.
    let steps = python_scenario(&format!("{base}/"), "0.3", "HTTP+JSON");
    check_scenario(&steps, "0.3", "HTTP+JSON");

    // The JavaScript SDK from the agent's URL with its trailing slash (the
    // SDK resolves the card path relative to it), and from the card URL.
    let card = s.url("/a2a/agents/echo/.well-known/agent-card.json");
    let completed = "TASK_STATE_COMPLETED";
    // The SDK raises each transport's own error classes.
    for (binding, errors, from) in [
        ("JSONRPC", "JsonRpc", format!("{base}/")),
        ("HTTP+JSON", "Rest", card.clone()),
    ] {
        let steps = js_scenario(&from, binding);
        let expected = json!({
            "card": {"name": "Echo (echo)"},
            "send": {"state": 3, "text": "hello js"},
            "stream": {"events": [
                {"kind": "task", "state": 1},
                {"kind": "status", "state": 2},
                {"kind": "artifact", "text": "hello "},
                {"kind": "artifact", "text": "stream "},
                {"kind": "artifact", "text": "js"},
                {"kind": "status", "state": 3},
            ]},
            "get": {"same": true, "state": 3, "history": 1},
            "cancel": {"asked": 6, "state": 5},
            "cancel_again": {"error": format!("{errors}TaskNotCancelableError")},
            "get_unknown": {"error": format!("{errors}TaskNotFoundError")},
        });
        assert_eq!(steps, expected, "{binding} ({completed} is 3)");
    }
}

/// A registered agent that nothing answers for.
async fn register_quiet(c: &reqwest::Client, s: &Server, id: &str, token: Option<&str>) {
    let card = json!({"name": "Quiet", "description": "never answers", "version": "1",
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]});
    let mut rb = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": id, "card": card}));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

/// One HTTP+JSON call: (status, body).
async fn rest(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut rb = c.request(method, url).header("A2A-Version", "1.0");
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/a2a+json")
            .body(b.to_string());
    }
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    if status != 401 {
        assert_eq!(
            resp.headers()["content-type"],
            "application/a2a+json",
            "{url}"
        );
    }
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

/// A `google.rpc.Status` body: (HTTP status, `status`, ErrorInfo reason).
/// A GET sent as A2A `version`: its status and JSON body.
async fn get_as_version(c: &reqwest::Client, url: &str, version: &str) -> (u16, Value) {
    let resp = c
        .get(url)
        .header("A2A-Version", version)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn status_of(body: &Value) -> (i64, &str, &str) {
    let e = &body["error"];
    assert_eq!(
        e["details"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
        "{body}"
    );
    (
        e["code"].as_i64().unwrap_or(0),
        e["status"].as_str().unwrap_or(""),
        e["details"][0]["reason"].as_str().unwrap_or(""),
    )
}

fn send_body(text: &str, immediately: bool) -> String {
    json!({"message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]},
           "configuration": {"returnImmediately": immediately}})
    .to_string()
}

#[tokio::test]
async fn http_json_routes_answer_like_json_rpc_and_errors_are_rpc_statuses() {
    use reqwest::Method as M;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    register_quiet(&c, &s, "quiet", None).await;
    let at = |path: &str| s.url(&format!("/a2a/agents/quiet{path}"));

    let (status, sent) = rest(
        &c,
        M::POST,
        &at("/message:send"),
        None,
        Some(&send_body("one", true)),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let task = sent["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
    let (_, second) = rest(
        &c,
        M::POST,
        &at("/message:send"),
        None,
        Some(&send_body("two", true)),
    )
    .await;
    let second = second["task"]["id"].as_str().unwrap().to_string();

    // Get, with the query's historyLength; the same task at the gateway's
    // endpoint; a page of the list.
    let (status, got) = rest(
        &c,
        M::GET,
        &at(&format!("/tasks/{task}?historyLength=0")),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, &got["id"], got.get("history")),
        (200, &json!(task), None),
        "{got}"
    );
    let (status, via_gateway) = rest(
        &c,
        M::GET,
        &s.url(&format!("/a2a/tasks/{task}")),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, &via_gateway["id"]),
        (200, &json!(task)),
        "{via_gateway}"
    );
    let (_, page) = rest(&c, M::GET, &at("/tasks?pageSize=1"), None, None).await;
    assert_eq!(
        (
            page["tasks"].as_array().map(Vec::len),
            &page["totalSize"],
            page["nextPageToken"].is_string()
        ),
        (Some(1), &json!(2), true),
        "{page}"
    );

    // Push configs, by route.
    let config = json!({"url": "http://127.0.0.1:9/hook", "token": "t"}).to_string();
    let configs = at(&format!("/tasks/{second}/pushNotificationConfigs"));
    let (status, created) = rest(&c, M::POST, &configs, None, Some(&config)).await;
    assert_eq!(
        (status, &created["taskId"]),
        (200, &json!(second)),
        "{created}"
    );
    let id = created["id"].as_str().unwrap().to_string();
    let (_, listed) = rest(&c, M::GET, &configs, None, None).await;
    assert_eq!(listed["configs"][0]["id"], json!(id), "{listed}");
    let one = format!("{configs}/{id}");
    let (status, got) = rest(&c, M::GET, &one, None, None).await;
    assert_eq!(
        (status, &got["url"]),
        (200, &json!("http://127.0.0.1:9/hook"))
    );
    let (status, deleted) = rest(&c, M::DELETE, &one, None, None).await;
    assert_eq!((status, deleted), (200, json!({})));
    let (status, gone) = rest(&c, M::GET, &one, None, None).await;
    assert_eq!(
        (status, status_of(&gone)),
        (404, (404, "NOT_FOUND", "TASK_NOT_FOUND"))
    );

    // Cancel, then again: the spec's 400 FAILED_PRECONDITION.
    let (status, canceled) = rest(
        &c,
        M::POST,
        &at(&format!("/tasks/{task}:cancel")),
        None,
        Some("{}"),
    )
    .await;
    assert_eq!(
        (status, &canceled["status"]["state"]),
        (200, &json!("TASK_STATE_CANCELED"))
    );
    let (status, again) = rest(
        &c,
        M::POST,
        &at(&format!("/tasks/{task}:cancel")),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, status_of(&again)),
        (400, (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"))
    );

    // The same error as JSON-RPC gives, in the binding's shape.
    let unknown = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000";
    let (status, missing) = rest(&c, M::GET, &at(&format!("/tasks/{unknown}")), None, None).await;
    assert_eq!(
        (status, status_of(&missing)),
        (404, (404, "NOT_FOUND", "TASK_NOT_FOUND"))
    );
    let rpc: Value = c
        .post(at(""))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": unknown}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(missing["error"]["message"], rpc["error"]["message"]);
    assert_eq!(missing["error"]["details"], rpc["error"]["data"]);

    let cases = [
        (
            M::POST,
            "/message:send",
            Some("{not json"),
            (400, "INVALID_ARGUMENT", "PARSE_ERROR"),
        ),
        (
            M::POST,
            "/message:send",
            Some("[1]"),
            (400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
        ),
        (
            M::POST,
            "/message:send",
            Some(r#"{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}"#),
            (400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
        ),
        (
            M::GET,
            "/tasks?pageSize=many",
            None,
            (400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
        ),
        (
            M::GET,
            "/tasks?includeArtifacts=yes",
            None,
            (400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
        ),
        (
            M::GET,
            "/nothing/here",
            None,
            (404, "UNIMPLEMENTED", "METHOD_NOT_FOUND"),
        ),
        (
            M::DELETE,
            "/message:send",
            None,
            (404, "UNIMPLEMENTED", "METHOD_NOT_FOUND"),
        ),
        (
            M::GET,
            "/extendedAgentCard",
            None,
            (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
        ),
    ];
    for (method, path, body, want) in cases {
        let (status, answer) = rest(&c, method.clone(), &at(path), None, body).await;
        assert_eq!(
            (status as i64, status_of(&answer)),
            (want.0, want),
            "{method} {path}: {answer}"
        );
    }
    // 0.3 has REST routes of its own (under /v1/); these are 1.0's.
    let (status, body) = get_as_version(&c, &at(&format!("/tasks/{second}")), "0.3").await;
    assert_eq!(status, 400);
    assert_eq!(
        status_of(&body),
        (400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")
    );
    // The version as a query parameter, as the spec allows.
    let (status, _) = rest(
        &c,
        M::GET,
        &at(&format!("/tasks/{second}?A2A-Version=1.0")),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    // An agent nobody registered.
    let (status, nobody) = rest(&c, M::GET, &s.url("/a2a/agents/nobody/tasks"), None, None).await;
    assert_eq!(
        (status, status_of(&nobody)),
        (404, (404, "NOT_FOUND", "UNKNOWN_AGENT"))
    );
    assert_eq!(nobody["error"]["details"][0]["domain"], "eventmesh");
}

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";
const AGENT: &str = "agent-token";

#[tokio::test]
async fn the_gate_holds_on_http_json_as_on_json_rpc() {
    use reqwest::Method as M;
    let files = GateFiles::new(&format!(
        "{ALICE} acme alice\n{BOB} globex bob\n{AGENT} agents shopkeeper\n"
    ));
    let s = start_closed(
        &files,
        &[files.acl("allow agents A2A *\nallow acme A2A *\nallow globex A2A shop\n")],
    );
    let c = client();
    register_quiet(&c, &s, "shop", Some(AGENT)).await;
    register_quiet(&c, &s, "secret", Some(AGENT)).await;

    // No credential: 401 in the binding's shape, with the challenge.
    let resp = c.get(s.url("/a2a/agents/shop/tasks")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        status_of(&body),
        (401, "UNAUTHENTICATED", "MISSING_CREDENTIAL")
    );
    // The same on a v0.3 route, known or not, in the common shape.
    for path in ["/v1/tasks/t-1", "/v1/no/such/route"] {
        let url = s.url(&format!("/a2a/agents/shop{path}"));
        let resp = c.get(url).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"], "missing_credential", "{path}");
    }

    // Alice's task; bob sees it exactly like an unknown one, at the
    // agent's endpoint and the gateway's.
    let url = s.url("/a2a/agents/shop/message:send");
    let (status, sent) = rest(
        &c,
        M::POST,
        &url,
        Some(ALICE),
        Some(&send_body("mine", true)),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let task = sent["task"]["id"].as_str().unwrap().to_string();
    let unknown = "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000";
    for endpoint in ["/a2a/agents/shop", "/a2a"] {
        let theirs = rest(
            &c,
            M::GET,
            &s.url(&format!("{endpoint}/tasks/{task}")),
            Some(BOB),
            None,
        )
        .await;
        let none = rest(
            &c,
            M::GET,
            &s.url(&format!("{endpoint}/tasks/{unknown}")),
            Some(BOB),
            None,
        )
        .await;
        assert_eq!(theirs.0, 404, "{endpoint}: {}", theirs.1);
        let text = |v: &Value, id: &str| v.to_string().replace(id, "ID");
        assert_eq!(text(&theirs.1, &task), text(&none.1, unknown), "{endpoint}");
    }
    // An agent bob's ACL hides is an agent nobody registered.
    let hidden = rest(
        &c,
        M::GET,
        &s.url("/a2a/agents/secret/tasks"),
        Some(BOB),
        None,
    )
    .await;
    let nobody = rest(
        &c,
        M::GET,
        &s.url("/a2a/agents/nobody/tasks"),
        Some(BOB),
        None,
    )
    .await;
    assert_eq!(hidden.0, 404);
    assert_eq!(
        hidden.1.to_string().replace("secret", "ID"),
        nobody.1.to_string().replace("nobody", "ID")
    );
    // Nor is it listed, and the listing shows bob's tenant's agents only.
    let listed: Value = c
        .get(s.url("/a2a/agents"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["totalSize"], 0, "{listed}");
    let listed: Value = c
        .get(s.url("/a2a/agents"))
        .bearer_auth(AGENT)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["secret", "shop"], "{listed}");
}

/// Registers agent `id` with `card`'s name, description and skills.
async fn register_card(c: &reqwest::Client, s: &Server, id: &str, card: Value) {
    let mut full = json!({"version": "1", "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"]});
    full.as_object_mut()
        .unwrap()
        .extend(card.as_object().unwrap().clone());
    let resp = c
        .post(s.url("/a2a/agents"))
        .json(&json!({"id": id, "card": full}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

fn skill(id: &str, tags: &[&str], extra: Value) -> Value {
    let mut s = json!({"id": id, "name": format!("{id} skill"), "description": format!("does {id}"), "tags": tags});
    s.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    s
}

#[tokio::test]
async fn the_registry_is_searched_by_skill_tag_mode_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    register_card(
        &c,
        &s,
        "translate",
        json!({"name": "Translator", "description": "Turns English into French",
        "skills": [skill("fr", &["language", "NLP"], json!({"examples": ["bonjour"]}))]}),
    )
    .await;
    register_card(&c, &s, "vision", json!({"name": "Seer", "description": "Looks at pictures",
        "skills": [skill("label", &["vision"], json!({"inputModes": ["image/png"], "outputModes": ["application/json"]}))]})).await;
    register_card(
        &c,
        &s,
        "summarize",
        json!({"name": "Summarizer", "description": "Shortens English text",
        "skills": [skill("short", &["nlp"], json!({}))]}),
    )
    .await;

    let ids = |v: &Value| -> Vec<String> {
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_string())
            .collect()
    };
    let search = |q: &'static str| {
        let c = c.clone();
        let url = s.url(&format!("/a2a/agents{q}"));
        async move {
            let resp = c.get(url).send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    let cases: [(&str, &[&str]); 9] = [
        ("", &["summarize", "translate", "vision"]),
        ("?skill=fr", &["translate"]),
        ("?tag=nlp", &["summarize", "translate"]),
        ("?inputMode=image/png", &["vision"]),
        ("?outputMode=application/json", &["vision"]),
        ("?inputMode=text/*&tag=NLP", &["summarize", "translate"]),
        ("?q=english", &["summarize", "translate"]),
        ("?q=english%20french", &["translate"]),
        ("?q=bonjour", &["translate"]),
    ];
    for (q, want) in cases {
        let (status, v) = search(q).await;
        assert_eq!(status, 200, "{q}: {v}");
        assert_eq!(ids(&v), want, "{q}");
        assert_eq!(v["totalSize"], want.len(), "{q}");
    }
    let (_, first) = search("?pageSize=2").await;
    assert_eq!(
        (ids(&first), &first["nextPageToken"]),
        (
            vec!["summarize".to_string(), "translate".into()],
            &json!("translate")
        )
    );
    let (_, second) = search("?pageSize=2&pageToken=translate").await;
    assert_eq!(
        (ids(&second), second.get("nextPageToken")),
        (vec!["vision".to_string()], None)
    );
    let entry = &first["agents"][1];
    assert_eq!(entry["name"], "Translator");
    assert_eq!(
        entry["skills"],
        json!([{"id": "fr", "name": "fr skill", "tags": ["language", "NLP"]}])
    );
    assert_eq!(entry["url"], s.url("/a2a/agents/translate"));
    for bad in ["?pageSize=0", "?pageSize=500", "?skills=fr"] {
        let (status, v) = search(bad).await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(v["message"].is_string(), "{v}");
    }

    // The same search from the admin CLI, with each agent's tenant and
    // instance.
    let mut cmd = Command::new(common::bin());
    cmd.args(["admin", "agents", "--tag", "nlp"])
        .env("EVENTMESH_ADMIN_SERVER", s.admin_url(""))
        .env("EVENTMESH_ADMIN_TOKEN", common::TOKEN);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["ID", "NAME", "TENANT", "SKILLS", "TAGS", "INSTANCE"]
    );
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[1][..5],
        ["summarize", "Summarizer", "-", "short", "nlp"]
    );
    assert_eq!(
        lines[2][..5],
        ["translate", "Translator", "-", "fr", "NLP,language"]
    );
    let mut cmd = Command::new(common::bin());
    cmd.args(["admin", "agents", "--page-size", "1", "--json"])
        .env("EVENTMESH_ADMIN_SERVER", s.admin_url(""))
        .env("EVENTMESH_ADMIN_TOKEN", common::TOKEN);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (ids(&v), &v["totalSize"], &v["nextPageToken"]),
        (
            vec!["summarize".to_string()],
            &json!(3),
            &json!("summarize")
        )
    );
    assert!(v["agents"][0]["instance"].is_string(), "{v}");
}
