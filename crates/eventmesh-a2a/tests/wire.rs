//! Exchanges captured between the reference A2A client and server (v1.0 and
//! v0.3, JSON-RPC): each server output is rebuilt through this crate's types
//! and must equal the capture exactly; each client request must parse into
//! the expected fields.

use eventmesh_a2a::model::{
    parse_params, CancelTaskRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    ListTasksRequest, ListTasksResponse, Message, Role, SendMessageRequest, StreamResponse,
    SubscribeToTaskRequest, Task, TaskPushNotificationConfig, TaskState,
};
use eventmesh_a2a::rpc::{self, RpcError, Version};
use eventmesh_a2a::{card, v03};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

fn value(s: &str) -> Value {
    serde_json::from_str(s).expect("capture is JSON")
}

/// Parses a captured request and its params as `T`.
fn request<T: DeserializeOwned>(body: &str, method: &str) -> (Value, T) {
    let req = rpc::parse(body.as_bytes()).expect("valid request");
    assert_eq!(req.method, method);
    (req.id, parse_params(&req.params).expect("valid params"))
}

/// Rebuilds a captured v1.0 response whose result is `T` and compares.
fn v1_round_trip<T: DeserializeOwned + serde::Serialize>(capture: &str) -> T {
    let want = value(capture);
    let result: T = serde_json::from_value(want["result"].clone()).expect("result parses");
    let got = rpc::success(
        &want["id"],
        serde_json::to_value(&result).expect("serializes"),
    );
    assert_eq!(got, want);
    result
}

const TASK_1: &str = r#"{"id":"task-1","contextId":"ctx-1",
  "status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-01T09:50:43.435333Z"},
  "artifacts":[{"artifactId":"art-1","name":"result","parts":[{"text":"hello "},{"text":"world"}]}],
  "history":[{"messageId":"msg-1","contextId":"ctx-1","taskId":"task-1","role":"ROLE_USER","parts":[{"text":"hello"}]},
             {"messageId":"msg-a","contextId":"ctx-1","taskId":"task-1","role":"ROLE_AGENT","parts":[{"text":"working..."}]}]}"#;

#[test]
fn v1_send_message() {
    let (id, req): (_, SendMessageRequest) = request(
        r#"{"method":"SendMessage","params":{"message":{"messageId":"msg-1","role":"ROLE_USER","parts":[{"text":"hello"}]},"configuration":{}},"id":"req-1","jsonrpc":"2.0"}"#,
        "SendMessage",
    );
    assert_eq!(id, json!("req-1"));
    assert_eq!(req.message, Message::user_text("msg-1", "hello"));
    assert_eq!(req.configuration, Some(Default::default()));
    assert_eq!(req.message.validate(), Ok(()));

    let capture = format!(r#"{{"result":{{"task":{TASK_1}}},"id":"req-1","jsonrpc":"2.0"}}"#);
    let StreamResponse::Task(task) = v1_round_trip::<StreamResponse>(&capture) else {
        panic!("not a task")
    };
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.history[1].role, Role::Agent);

    v1_round_trip::<StreamResponse>(
        r#"{"result":{"message":{"messageId":"reply-1","contextId":"ctx-2","role":"ROLE_AGENT","parts":[{"text":"direct reply"}]}},"id":10,"jsonrpc":"2.0"}"#,
    );

    let (_, req): (_, SendMessageRequest) = request(
        r#"{"method":"SendMessage","params":{"message":{"messageId":"msg-3","role":"ROLE_USER","parts":[{"text":"slow job"}]},"configuration":{"returnImmediately":true}},"id":"req-3","jsonrpc":"2.0"}"#,
        "SendMessage",
    );
    assert!(req.configuration.is_some_and(|c| c.return_immediately));
    v1_round_trip::<StreamResponse>(
        r#"{"result":{"task":{"id":"task-3","contextId":"ctx-3","status":{"state":"TASK_STATE_SUBMITTED"},
  "history":[{"messageId":"msg-3","contextId":"ctx-3","taskId":"task-3","role":"ROLE_USER","parts":[{"text":"slow job"}]}]}},"id":"req-3","jsonrpc":"2.0"}"#,
    );

    let config = r#"{"acceptedOutputModes":["text/plain"],"historyLength":5,"returnImmediately":true,
  "taskPushNotificationConfig":{"url":"https://client/webhook","token":"tok","authentication":{"scheme":"Bearer","credentials":"cred"}}}"#;
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}, "configuration": value(config)});
    let req: SendMessageRequest = parse_params(&params).unwrap();
    let c = req.configuration.unwrap();
    assert_eq!(
        (
            c.accepted_output_modes,
            c.history_length,
            c.return_immediately
        ),
        (vec!["text/plain".to_string()], Some(5), true)
    );
    let push = c.task_push_notification_config.unwrap();
    assert_eq!(
        (push.url.as_str(), push.token.as_deref()),
        ("https://client/webhook", Some("tok"))
    );
    let auth = push.authentication.unwrap();
    assert_eq!(
        (auth.scheme.as_str(), auth.credentials.as_deref()),
        ("Bearer", Some("cred"))
    );
}

#[test]
fn v1_stream_events() {
    let events = [
        r#"{"result": {"task": {"id": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "msg-2", "contextId": "ctx-2", "taskId": "task-2", "role": "ROLE_USER", "parts": [{"text": "hello stream"}]}]}}, "id": "req-2", "jsonrpc": "2.0"}"#,
        r#"{"result": {"statusUpdate": {"taskId": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": "msg-b", "contextId": "ctx-2", "taskId": "task-2", "role": "ROLE_AGENT", "parts": [{"text": "working..."}]}, "timestamp": "2026-12-01T09:50:43.453551Z"}}}, "id": "req-2", "jsonrpc": "2.0"}"#,
        r#"{"result": {"artifactUpdate": {"taskId": "task-2", "contextId": "ctx-2", "artifact": {"artifactId": "art-1", "name": "result", "parts": [{"text": "hello "}]}}}, "id": "req-2", "jsonrpc": "2.0"}"#,
        r#"{"result": {"artifactUpdate": {"taskId": "task-2", "contextId": "ctx-2", "artifact": {"artifactId": "art-1", "parts": [{"text": "world"}]}, "append": true, "lastChunk": true}}, "id": "req-2", "jsonrpc": "2.0"}"#,
        r#"{"result": {"statusUpdate": {"taskId": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T09:50:43.455934Z"}}}, "id": "req-2", "jsonrpc": "2.0"}"#,
    ];
    for e in events {
        let ev = v1_round_trip::<StreamResponse>(e);
        assert_eq!(
            rpc::stream_result(&ev, Version::V1, false),
            value(e)["result"]
        );
    }
}

#[test]
fn v1_get_list_cancel_subscribe() {
    let (_, req): (_, GetTaskRequest) = request(
        r#"{"method":"GetTask","params":{"id":"task-1","historyLength":1},"id":"req-4","jsonrpc":"2.0"}"#,
        "GetTask",
    );
    assert_eq!(
        (req.id.as_str(), req.history_length, req.tenant),
        ("task-1", Some(1), None)
    );
    let full: Task = serde_json::from_str(TASK_1).unwrap();
    let capture = r#"{"result":{"id":"task-1","contextId":"ctx-1","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-01T09:50:43.435333Z"},
  "artifacts":[{"artifactId":"art-1","name":"result","parts":[{"text":"hello "},{"text":"world"}]}],
  "history":[{"messageId":"msg-a","contextId":"ctx-1","taskId":"task-1","role":"ROLE_AGENT","parts":[{"text":"working..."}]}]},
 "id":"req-4","jsonrpc":"2.0"}"#;
    let got = rpc::success(
        &json!("req-4"),
        rpc::task_result(&full.with_history_length(req.history_length), Version::V1),
    );
    assert_eq!(got, value(capture));
    v1_round_trip::<Task>(capture);

    let (_, req): (_, ListTasksRequest) = request(
        r#"{"method":"ListTasks","params":{"pageSize":10},"id":"req-5","jsonrpc":"2.0"}"#,
        "ListTasks",
    );
    assert_eq!(
        req,
        ListTasksRequest {
            page_size: Some(10),
            ..Default::default()
        }
    );
    let (_, req): (_, ListTasksRequest) = request(
        r#"{"method":"ListTasks","params":{"status":"TASK_STATE_COMPLETED","contextId":"ctx-1","includeArtifacts":true,"historyLength":0},"id":26,"jsonrpc":"2.0"}"#,
        "ListTasks",
    );
    let want = ListTasksRequest {
        status: Some(TaskState::Completed),
        context_id: Some("ctx-1".into()),
        include_artifacts: Some(true),
        history_length: Some(0),
        ..Default::default()
    };
    assert_eq!(req, want);
    v1_round_trip::<ListTasksResponse>(
        r#"{"result":{"tasks":[{"id":"task-1","contextId":"ctx-1","status":{"state":"TASK_STATE_COMPLETED","timestamp":"2026-12-01T09:51:22.114309Z"},
   "history":[{"messageId":"msg-1","contextId":"ctx-1","taskId":"task-1","role":"ROLE_USER","parts":[{"text":"hello"}]}]}],
  "nextPageToken":"eyJ0cyI6MTc5NjExODY4MjExNDMwOTAwMCwiaWQiOiI2YTQ3","pageSize":1,"totalSize":9},"id":24,"jsonrpc":"2.0"}"#,
    );
    let last_page = serde_json::to_value(ListTasksResponse::default()).unwrap();
    assert_eq!(
        last_page,
        json!({"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0})
    );

    let (_, req): (_, CancelTaskRequest) = request(
        r#"{"method":"CancelTask","params":{"id":"task-5"},"id":"req-6","jsonrpc":"2.0"}"#,
        "CancelTask",
    );
    assert_eq!((req.id.as_str(), req.metadata), ("task-5", None));
    v1_round_trip::<Task>(
        r#"{"result":{"id":"task-5","contextId":"ctx-5","status":{"state":"TASK_STATE_CANCELED","timestamp":"2026-12-01T09:50:46.515946Z"},
  "history":[{"messageId":"msg-5","contextId":"ctx-5","taskId":"task-5","role":"ROLE_USER","parts":[{"text":"slow job 2"}]},
             {"messageId":"msg-c","contextId":"ctx-5","taskId":"task-5","role":"ROLE_AGENT","parts":[{"text":"working..."}]}]},"id":"req-6","jsonrpc":"2.0"}"#,
    );

    let (_, req): (_, SubscribeToTaskRequest) = request(
        r#"{"method":"SubscribeToTask","params":{"id":"task-3"},"id":"req-7","jsonrpc":"2.0"}"#,
        "SubscribeToTask",
    );
    assert_eq!(req.id, "task-3");
    let err = RpcError::task_terminal("task-1", TaskState::Completed);
    assert_eq!(
        rpc::error(&json!(15), &err, Version::V1),
        value(
            r#"{"error":{"code":-32004,"message":"Task task-1 is in terminal state: TASK_STATE_COMPLETED","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"UNSUPPORTED_OPERATION","domain":"a2a-protocol.org","metadata":{}}]},"id":15,"jsonrpc":"2.0"}"#
        )
    );
}

#[test]
fn v1_push_config_crud() {
    let (_, cfg): (_, TaskPushNotificationConfig) = request(
        r#"{"method":"CreateTaskPushNotificationConfig","params":{"id":"cfg-1","taskId":"task-1","url":"http://127.0.0.1:9999/webhook","token":"secret-token","authentication":{"scheme":"Bearer","credentials":"abc"}},"id":"r8","jsonrpc":"2.0"}"#,
        "CreateTaskPushNotificationConfig",
    );
    let obj = r#"{"id":"cfg-1","taskId":"task-1","url":"http://127.0.0.1:9999/webhook","token":"secret-token","authentication":{"scheme":"Bearer","credentials":"abc"}}"#;
    let created = v1_round_trip::<TaskPushNotificationConfig>(&format!(
        r#"{{"result":{obj},"id":"r8","jsonrpc":"2.0"}}"#
    ));
    assert_eq!(created, cfg);
    v1_round_trip::<TaskPushNotificationConfig>(
        r#"{"result":{"id":"task-1","taskId":"task-1","url":"http://127.0.0.1:9999/webhook"},"id":"r8","jsonrpc":"2.0"}"#,
    );

    let (_, get): (_, GetTaskPushNotificationConfigRequest) = request(
        r#"{"method":"GetTaskPushNotificationConfig","params":{"taskId":"task-1","id":"cfg-1"},"id":"r9","jsonrpc":"2.0"}"#,
        "GetTaskPushNotificationConfig",
    );
    assert_eq!((get.task_id.as_str(), get.id.as_str()), ("task-1", "cfg-1"));
    let (_, list): (_, ListTaskPushNotificationConfigsRequest) = request(
        r#"{"method":"ListTaskPushNotificationConfigs","params":{"taskId":"task-1"},"id":"r10","jsonrpc":"2.0"}"#,
        "ListTaskPushNotificationConfigs",
    );
    assert_eq!((list.task_id.as_str(), list.page_size), ("task-1", None));
    let listed = v1_round_trip::<ListTaskPushNotificationConfigsResponse>(&format!(
        r#"{{"result":{{"configs":[{obj}]}},"id":"r10","jsonrpc":"2.0"}}"#
    ));
    assert_eq!(listed.configs, [cfg]);

    let (id, _): (_, GetTaskPushNotificationConfigRequest) = request(
        r#"{"method":"DeleteTaskPushNotificationConfig","params":{"taskId":"task-1","id":"cfg-1"},"id":20,"jsonrpc":"2.0"}"#,
        "DeleteTaskPushNotificationConfig",
    );
    assert_eq!(
        rpc::success(&id, Value::Null),
        value(r#"{"result":null,"id":20,"jsonrpc":"2.0"}"#)
    );
}

#[test]
fn v1_errors() {
    let cases = [
        (
            json!(1),
            RpcError::from_code(rpc::TASK_NOT_FOUND),
            r#"{"error":{"code":-32001,"message":"Task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{}}]},"id":1,"jsonrpc":"2.0"}"#,
        ),
        (
            json!(3),
            RpcError::version_not_supported("0.3", Version::V1),
            r#"{"error":{"code":-32009,"message":"A2A version '0.3' is not supported by this handler. Expected version '1.0'.","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"VERSION_NOT_SUPPORTED","domain":"a2a-protocol.org","metadata":{}}]},"id":3,"jsonrpc":"2.0"}"#,
        ),
        (
            Value::Null,
            RpcError::parse_error(
                "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            ),
            r#"{"error":{"code":-32700,"message":"Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"},"id":null,"jsonrpc":"2.0"}"#,
        ),
        (
            json!(6),
            RpcError::method_not_found(),
            r#"{"error":{"code":-32601,"message":"Method not found"},"id":6,"jsonrpc":"2.0"}"#,
        ),
        (
            json!(8),
            RpcError::from_code(rpc::INVALID_PARAMS).with_meta(
                "parseError",
                "Failed to parse id field: expected string or bytes-like object, got 'int'.",
            ),
            r#"{"error":{"code":-32602,"message":"Invalid params","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_PARAMS","domain":"a2a-protocol.org","metadata":{"parseError":"Failed to parse id field: expected string or bytes-like object, got 'int'."}}]},"id":8,"jsonrpc":"2.0"}"#,
        ),
        (
            json!(13),
            RpcError::task_not_cancelable(),
            r#"{"error":{"code":-32002,"message":"Task cannot be canceled","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_CANCELABLE","domain":"a2a-protocol.org","metadata":{}}]},"id":13,"jsonrpc":"2.0"}"#,
        ),
    ];
    for (id, err, capture) in cases {
        assert_eq!(
            rpc::error(&id, &err, Version::V1),
            value(capture),
            "{capture}"
        );
    }
    // The invalid-request capture echoes the id, which parse_envelope recovers.
    let (id, err) =
        rpc::parse_envelope(br#"{"jsonrpc":"1.0","method":"GetTask","params":{},"id":7}"#)
            .unwrap_err();
    assert_eq!(
        rpc::error(&id, &err, Version::V1),
        value(
            r#"{"error":{"code":-32600,"message":"Invalid request: 'jsonrpc' must be exactly '2.0'","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_REQUEST","domain":"a2a-protocol.org","metadata":{}}]},"id":7,"jsonrpc":"2.0"}"#
        )
    );
}

const V03_TASK_1: &str = r#"{"artifacts":[{"artifactId":"art-1","name":"result","parts":[{"kind":"text","text":"hello "},{"kind":"text","text":"world"}]}],
 "contextId":"ctx-1","history":[{"contextId":"ctx-1","kind":"message","messageId":"msg-1","parts":[{"kind":"text","text":"hello"}],"role":"user","taskId":"task-1"},
 {"contextId":"ctx-1","kind":"message","messageId":"msg-a","parts":[{"kind":"text","text":"working..."}],"role":"agent","taskId":"task-1"}],
 "id":"task-1","kind":"task","status":{"state":"completed","timestamp":"2026-12-01T09:50:50.104354Z"}}"#;

#[test]
fn v03_send_and_results() {
    let req = rpc::parse(br#"{"method":"message/send","params":{"configuration":{"blocking":true},"message":{"kind":"message","messageId":"msg-1","parts":[{"kind":"text","text":"hello"}],"role":"user"}},"id":"req-1","jsonrpc":"2.0"}"#).unwrap();
    assert_eq!(rpc::method_version(&req.method), Some(Version::V03));
    let send = v03::send_from_v03(&req.params).unwrap();
    assert_eq!(send.message, Message::user_text("msg-1", "hello"));
    assert_eq!(send.configuration, Some(Default::default()));

    let mut task: Task = serde_json::from_str(TASK_1).unwrap();
    task.status.timestamp = Some("2026-12-01T09:50:50.104354Z".into());
    let capture = format!(r#"{{"id":"req-1","jsonrpc":"2.0","result":{V03_TASK_1}}}"#);
    let got = rpc::success(
        &json!("req-1"),
        rpc::stream_result(&StreamResponse::Task(task.clone()), Version::V03, false),
    );
    assert_eq!(got, value(&capture));
    assert_eq!(rpc::task_result(&task, Version::V03), value(V03_TASK_1));
    assert_eq!(
        v03::message_from_v03(&value(V03_TASK_1)["history"][1]).unwrap(),
        task.history[1]
    );

    let reply = Message {
        context_id: Some("ctx-2".into()),
        ..Message::agent_text("reply-1", "direct reply")
    };
    assert_eq!(
        rpc::success(
            &json!(11),
            v03::stream_to_v03(&StreamResponse::Message(reply), false)
        ),
        value(
            r#"{"id":11,"jsonrpc":"2.0","result":{"contextId":"ctx-2","kind":"message","messageId":"reply-1","parts":[{"kind":"text","text":"direct reply"}],"role":"agent"}}"#
        )
    );

    let params = json!({"message": {"kind": "message", "messageId": "m", "parts": [{"kind": "text", "text": "x"}], "role": "user"},
        "configuration": value(r#"{"blocking":false,"pushNotificationConfig":{"url":"http://127.0.0.1:9999/webhook","token":"tok-v03","authentication":{"schemes":["Bearer"],"credentials":"cred-v03"}}}"#)});
    let c = v03::send_from_v03(&params).unwrap().configuration.unwrap();
    assert!(c.return_immediately);
    let push = c.task_push_notification_config.unwrap();
    assert_eq!(
        (push.url.as_str(), push.token.as_deref()),
        ("http://127.0.0.1:9999/webhook", Some("tok-v03"))
    );
    let auth = push.authentication.unwrap();
    assert_eq!(
        (auth.scheme.as_str(), auth.credentials.as_deref()),
        ("Bearer", Some("cred-v03"))
    );
}

#[test]
fn v03_stream_events() {
    // The same events as the v1.0 stream capture, in v0.3 form.
    let v1 = [
        r#"{"task": {"id": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_SUBMITTED"}, "history": [{"messageId": "msg-2", "contextId": "ctx-2", "taskId": "task-2", "role": "ROLE_USER", "parts": [{"text": "hello stream"}]}]}}"#,
        r#"{"statusUpdate": {"taskId": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": "msg-b", "contextId": "ctx-2", "taskId": "task-2", "role": "ROLE_AGENT", "parts": [{"text": "working..."}]}, "timestamp": "2026-12-01T09:50:50.119073Z"}}}"#,
        r#"{"artifactUpdate": {"taskId": "task-2", "contextId": "ctx-2", "artifact": {"artifactId": "art-1", "name": "result", "parts": [{"text": "hello "}]}}}"#,
        r#"{"artifactUpdate": {"taskId": "task-2", "contextId": "ctx-2", "artifact": {"artifactId": "art-1", "parts": [{"text": "world"}]}, "append": true, "lastChunk": true}}"#,
        r#"{"statusUpdate": {"taskId": "task-2", "contextId": "ctx-2", "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T09:50:50.119216Z"}}}"#,
    ];
    let v03 = [
        r#"{"id":"req-2","jsonrpc":"2.0","result":{"contextId":"ctx-2","history":[{"contextId":"ctx-2","kind":"message","messageId":"msg-2","parts":[{"kind":"text","text":"hello stream"}],"role":"user","taskId":"task-2"}],"id":"task-2","kind":"task","status":{"state":"submitted"}}}"#,
        r#"{"id":"req-2","jsonrpc":"2.0","result":{"contextId":"ctx-2","final":false,"kind":"status-update","status":{"message":{"contextId":"ctx-2","kind":"message","messageId":"msg-b","parts":[{"kind":"text","text":"working..."}],"role":"agent","taskId":"task-2"},"state":"working","timestamp":"2026-12-01T09:50:50.119073Z"},"taskId":"task-2"}}"#,
        r#"{"id":"req-2","jsonrpc":"2.0","result":{"append":false,"artifact":{"artifactId":"art-1","name":"result","parts":[{"kind":"text","text":"hello "}]},"contextId":"ctx-2","kind":"artifact-update","lastChunk":false,"taskId":"task-2"}}"#,
        r#"{"id":"req-2","jsonrpc":"2.0","result":{"append":true,"artifact":{"artifactId":"art-1","parts":[{"kind":"text","text":"world"}]},"contextId":"ctx-2","kind":"artifact-update","lastChunk":true,"taskId":"task-2"}}"#,
        r#"{"id":"req-2","jsonrpc":"2.0","result":{"contextId":"ctx-2","final":true,"kind":"status-update","status":{"state":"completed","timestamp":"2026-12-01T09:50:50.119216Z"},"taskId":"task-2"}}"#,
    ];
    for (i, (a, b)) in v1.iter().zip(v03).enumerate() {
        let ev: StreamResponse = serde_json::from_str(a).unwrap();
        let got = rpc::success(
            &json!("req-2"),
            rpc::stream_result(&ev, Version::V03, i == 4),
        );
        assert_eq!(got, value(b), "event {i}");
    }
}

#[test]
fn v03_task_and_push_params() {
    let get = v03::get_from_v03(&rpc::parse(br#"{"method":"tasks/get","params":{"historyLength":1,"id":"task-1"},"id":"r","jsonrpc":"2.0"}"#).unwrap().params).unwrap();
    assert_eq!((get.id.as_str(), get.history_length), ("task-1", Some(1)));
    let cancel = v03::cancel_from_v03(
        &rpc::parse(
            br#"{"method":"tasks/cancel","params":{"id":"task-5"},"id":"r","jsonrpc":"2.0"}"#,
        )
        .unwrap()
        .params,
    )
    .unwrap();
    assert_eq!(cancel.id, "task-5");
    assert_eq!(
        v03::subscribe_from_v03(&json!({"id": "task-3"}))
            .unwrap()
            .id,
        "task-3"
    );

    let set = rpc::parse(br#"{"method":"tasks/pushNotificationConfig/set","params":{"pushNotificationConfig":{"authentication":{"credentials":"abc","schemes":["Bearer"]},"id":"cfg-1","token":"secret-token","url":"http://127.0.0.1:9999/webhook"},"taskId":"task-1"},"id":"r","jsonrpc":"2.0"}"#).unwrap();
    let cfg = v03::push_set_from_v03(&set.params).unwrap();
    let v1: TaskPushNotificationConfig = serde_json::from_value(json!({"id":"cfg-1","taskId":"task-1","url":"http://127.0.0.1:9999/webhook","token":"secret-token","authentication":{"scheme":"Bearer","credentials":"abc"}})).unwrap();
    assert_eq!(cfg, v1);
    let result = r#"{"id":"r","jsonrpc":"2.0","result":{"pushNotificationConfig":{"authentication":{"credentials":"abc","schemes":["Bearer"]},"id":"cfg-1","token":"secret-token","url":"http://127.0.0.1:9999/webhook"},"taskId":"task-1"}}"#;
    assert_eq!(
        rpc::success(&json!("r"), v03::push_to_v03(&cfg)),
        value(result)
    );
    let list = rpc::success(&json!("r"), Value::Array(vec![v03::push_to_v03(&cfg)]));
    assert_eq!(list["result"][0], value(result)["result"]);

    let get = rpc::parse(br#"{"method":"tasks/pushNotificationConfig/get","params":{"id":"task-1","pushNotificationConfigId":"cfg-1"},"id":"r","jsonrpc":"2.0"}"#).unwrap();
    assert_eq!(
        v03::push_get_from_v03(&get.params).unwrap(),
        ("task-1".to_string(), Some("cfg-1".to_string()))
    );
    assert_eq!(
        v03::push_get_from_v03(&json!({"id": "task-1"})).unwrap(),
        ("task-1".to_string(), None)
    );
    assert_eq!(
        rpc::success(&json!("r"), Value::Null),
        value(r#"{"id":"r","jsonrpc":"2.0","result":null}"#)
    );
}

#[test]
fn v03_errors() {
    assert_eq!(
        rpc::error(
            &json!(2),
            &RpcError::from_code(rpc::TASK_NOT_FOUND),
            Version::V03
        ),
        value(
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"data":null,"message":"Task not found"}}"#
        )
    );
    let e = RpcError::version_not_supported("1.0", Version::V03);
    assert_eq!(
        rpc::error(&json!(4), &e, Version::V03),
        json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32603, "data": null,
               "message": "A2A version '1.0' is not supported by this handler. Expected version '0.3'."}})
    );
}

#[test]
fn served_card_equals_the_reference_dual_card() {
    let agent = json!({"name": "Ref", "description": "reference agent", "version": "1.0.0",
        "skills": [{"id": "echo", "name": "Echo", "description": "echoes", "tags": ["echo"]}]});
    assert_eq!(card::validate(&agent), Ok(()));
    let capture = r#"{"name":"Ref","description":"reference agent",
 "supportedInterfaces":[
   {"url":"http://127.0.0.1:9999/","protocolBinding":"JSONRPC","protocolVersion":"1.0"},
   {"url":"http://127.0.0.1:9999/","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"},
   {"url":"http://127.0.0.1:9999/","protocolBinding":"JSONRPC","protocolVersion":"0.3"},
   {"url":"http://127.0.0.1:9999/","protocolBinding":"HTTP+JSON","protocolVersion":"0.3"}],
 "additionalInterfaces":[
   {"url":"http://127.0.0.1:9999/","transport":"JSONRPC"},
   {"url":"http://127.0.0.1:9999/","transport":"HTTP+JSON"}],
 "version":"1.0.0","capabilities":{"streaming":true,"pushNotifications":true},
 "defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],
 "skills":[{"id":"echo","name":"Echo","description":"echoes","tags":["echo"]}],
 "preferredTransport":"JSONRPC","protocolVersion":"0.3","url":"http://127.0.0.1:9999/"}"#;
    let served = card::for_gateway(&agent, "http://127.0.0.1:9999/", true, true);
    assert_eq!(served, value(capture));
    assert_eq!(card::validate(&served), Ok(()));
}

#[test]
fn webhook_bodies_are_stream_responses() {
    let bodies = [
        r#"{"artifactUpdate":{"taskId":"task-9","contextId":"ctx-9","artifact":{"artifactId":"art-1","name":"result","parts":[{"text":"hello "}]}}}"#,
        r#"{"artifactUpdate":{"taskId":"task-9","contextId":"ctx-9","artifact":{"artifactId":"art-1","parts":[{"text":"world"}]},"append":true,"lastChunk":true}}"#,
    ];
    for b in bodies {
        let ev: StreamResponse = serde_json::from_str(b).unwrap();
        assert_eq!(serde_json::to_value(&ev).unwrap(), value(b));
    }
}
