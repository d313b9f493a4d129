//! The A2A 0.3 HTTP+JSON routes (`/v1/...`): the v0.3 proto's JSON and
//! 0.3's errors, on the same calls as every binding.

use super::*;

/// One call to a v0.3 REST route: (status, body).
async fn v03(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut rb = c.request(method, url).header("A2A-Version", "0.3");
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let resp = rb.send().await.unwrap();
    let status = resp.status().as_u16();
    assert_eq!(resp.headers()["content-type"], "application/json", "{url}");
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn v03_rest_routes_speak_the_v03_proto_json_and_its_errors() {
    use reqwest::Method as M;
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let _agent = echo_agent(&s, "echo");
    let c = client();
    let at = |path: &str| s.url(&format!("/a2a/agents/echo/v1/{path}"));

    // A send in the proto's field names, answered in its JSON names.
    let send = json!({"request": {"message_id": "m-v03", "role": "ROLE_USER",
                                  "content": [{"text": "hello v03"}]},
                      "configuration": {"blocking": true}});
    let (status, sent) = v03(&c, M::POST, &at("message:send"), Some(send)).await;
    assert_eq!(status, 200, "{sent}");
    let task = &sent["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT", "{sent}");
    assert_eq!(
        task["status"]["message"]["content"],
        json!([{"text": "hello v03"}]),
        "{sent}"
    );
    assert!(task.get("kind").is_none(), "{sent}");
    let id = task["id"].as_str().unwrap().to_string();
    let (status, got) = v03(
        &c,
        M::GET,
        &at(&format!("tasks/{id}?historyLength=1")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["history"].as_array().map(Vec::len), Some(1), "{got}");
    assert_eq!(
        got["history"][0]["content"],
        json!([{"text": "hello v03"}]),
        "{got}"
    );

    // Errors: v0.3's statuses, the message and the error's class name.
    let err = |status: u16, message: &str, kind: &str| {
        (status, json!({"message": message, "type": kind}))
    };
    let cases = [
        (
            M::GET,
            "tasks/no-such-task".to_string(),
            None,
            err(404, "Task no-such-task not found", "TaskNotFoundError"),
        ),
        (
            M::POST,
            format!("tasks/{id}:cancel"),
            None,
            err(
                409,
                &format!("Task {id} cannot be canceled: it has ended"),
                "TaskNotCancelableError",
            ),
        ),
        (
            M::POST,
            "message:send".to_string(),
            Some(json!({"configuration": {}})),
            err(422, "request: missing", "InvalidParamsError"),
        ),
        (
            M::POST,
            "message:send".to_string(),
            Some(json!({"request": {"role": "ROLE_USER", "content": [{"metadata": {}}]}})),
            err(
                422,
                "request.content[0]: a part has one of text, file, data",
                "InvalidParamsError",
            ),
        ),
        (
            M::GET,
            "tasks".to_string(),
            None,
            err(
                404,
                "no A2A v0.3 operation is GET /v1/tasks",
                "MethodNotFoundError",
            ),
        ),
        (
            M::PUT,
            "message:send".to_string(),
            None,
            err(
                404,
                "no A2A v0.3 operation is PUT /v1/message:send",
                "MethodNotFoundError",
            ),
        ),
    ];
    for (method, path, body, want) in cases {
        let got = v03(&c, method.clone(), &at(&path), body).await;
        assert_eq!(got, want, "{method} {path}");
    }
    // Not JSON at all.
    let resp = c
        .post(at("message:send"))
        .header("A2A-Version", "0.3")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "JSONParseError", "{body}");
    // Another version on a v0.3 route.
    let (status, body) = get_as_version(&c, &at(&format!("tasks/{id}")), "1.0").await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"message": "A2A version \"1.0\" is not served on the /v1/ routes: they are 0.3's",
               "type": "VersionNotSupportedError"})
    );
}
