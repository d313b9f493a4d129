//! The generated messages and the model's JSON agree: what the model
//! writes reads into the generated message with every enum, oneof,
//! `Struct`, `Value` and `Timestamp` where it belongs, and what a client
//! sends reads into the model's requests.

use super::*;
use crate::pb;
use crate::pb::part::Content;
use crate::pb::stream_response::Payload;
use eventmesh_a2a::model::{
    self, parse_params, parse_timestamp, ListTasksRequest, Role, SendMessageRequest, TaskState,
};
use pbjson_types::value::Kind;
use prost::Message as _;
use serde_json::json;

/// The same instant, whatever the offset notation.
fn same_instant(a: &str, b: &str) {
    assert_eq!(parse_timestamp(a), parse_timestamp(b), "{a} vs {b}");
    assert!(parse_timestamp(a).is_some(), "{a}");
}

fn model_task() -> model::Task {
    serde_json::from_value(json!({
        "id": "t-1", "contextId": "c-1",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T09:50:43.435Z",
                   "message": {"messageId": "m-2", "role": "ROLE_AGENT", "parts": [{"text": "done"}]}},
        "artifacts": [{"artifactId": "a-1", "name": "out", "parts": [
            {"text": "hello", "mediaType": "text/plain"},
            {"data": {"n": 1, "list": [true, null, "x"]}, "metadata": {"k": "v"}},
            {"url": "https://example.com/f.pdf", "filename": "f.pdf", "mediaType": "application/pdf"},
            {"raw": "aGVsbG8=", "filename": "h.txt"}]}],
        "history": [{"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                     "metadata": {"agentId": "echo", "nested": {"a": [1, 2.5]}},
                     "extensions": ["urn:x"], "referenceTaskIds": ["t-0"]}],
        "metadata": {"source": "test"}
    }))
    .unwrap()
}

#[test]
fn a_task_reads_into_the_proto_and_back() {
    let task = model_task();
    let pb: pb::Task = convert(&task).unwrap();
    assert_eq!(pb.id, "t-1");
    let status = pb.status.as_ref().unwrap();
    assert_eq!(status.state, pb::TaskState::Completed as i32);
    let ts = status.timestamp.as_ref().unwrap();
    assert_eq!((ts.seconds, ts.nanos), (1_796_118_643, 435_000_000));
    let reply = status.message.as_ref().unwrap();
    assert_eq!(reply.role, pb::Role::Agent as i32);
    assert_eq!(pb.history[0].role, pb::Role::User as i32);
    assert_eq!(pb.history[0].reference_task_ids, ["t-0"]);
    let meta = pb.history[0].metadata.as_ref().unwrap();
    assert_eq!(
        meta.fields["agentId"].kind,
        Some(Kind::StringValue("echo".into()))
    );
    let parts = &pb.artifacts[0].parts;
    assert_eq!(parts[0].content, Some(Content::Text("hello".into())));
    assert_eq!(parts[0].media_type, "text/plain");
    let Some(Content::Data(data)) = &parts[1].content else {
        panic!("{:?}", parts[1].content)
    };
    assert!(matches!(data.kind, Some(Kind::StructValue(_))));
    assert_eq!(
        parts[2].content,
        Some(Content::Url("https://example.com/f.pdf".into()))
    );
    assert_eq!(parts[2].filename, "f.pdf");
    assert_eq!(parts[3].content, Some(Content::Raw(b"hello".to_vec())));

    // Back through the binary form and to the model's JSON: the same task,
    // the timestamp the same instant.
    let decoded = pb::Task::decode(pb.encode_to_vec().as_slice()).unwrap();
    let back: model::Task = convert(&decoded).unwrap();
    let (want, got) = (
        task.status.timestamp.clone().unwrap(),
        back.status.timestamp.clone().unwrap(),
    );
    same_instant(&want, &got);
    let mut back = back;
    back.status.timestamp = task.status.timestamp.clone();
    assert_eq!(back, task);
}

#[test]
fn stream_events_keep_their_kind() {
    let task = model_task();
    let status: model::StreamResponse = serde_json::from_value(json!({"statusUpdate": {
        "taskId": "t-1", "contextId": "c-1",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-12-01T09:50:43Z"},
        "metadata": {"k": 1}}}))
    .unwrap();
    let artifact: model::StreamResponse = serde_json::from_value(json!({"artifactUpdate": {
        "taskId": "t-1", "contextId": "c-1",
        "artifact": {"artifactId": "a", "parts": [{"text": "mesh"}]},
        "append": true, "lastChunk": true}}))
    .unwrap();
    let events = [
        model::StreamResponse::Task(task.clone()),
        model::StreamResponse::Message(task.history[0].clone()),
        status,
        artifact,
    ];
    for ev in &events {
        let pb: pb::StreamResponse = convert(ev).unwrap();
        match (ev, pb.payload.as_ref().unwrap()) {
            (model::StreamResponse::Task(_), Payload::Task(t)) => assert_eq!(t.id, "t-1"),
            (model::StreamResponse::Message(_), Payload::Message(m)) => {
                assert_eq!(m.message_id, "m-1")
            }
            (model::StreamResponse::StatusUpdate(_), Payload::StatusUpdate(s)) => {
                let st = s.status.as_ref().unwrap();
                assert_eq!(st.state, pb::TaskState::InputRequired as i32);
                assert_eq!(st.timestamp.as_ref().unwrap().seconds, 1_796_118_643);
            }
            (model::StreamResponse::ArtifactUpdate(_), Payload::ArtifactUpdate(a)) => {
                assert!(a.append && a.last_chunk);
                assert_eq!(a.artifact.as_ref().unwrap().artifact_id, "a");
            }
            (ev, pb) => panic!("{ev:?} became {pb:?}"),
        }
        let back: model::StreamResponse = convert(&pb).unwrap();
        if let model::StreamResponse::StatusUpdate(_) = ev {
            assert_eq!(
                to_json(&back).unwrap()["statusUpdate"]["status"]["state"],
                "TASK_STATE_INPUT_REQUIRED"
            );
        } else if let model::StreamResponse::Task(_) = ev {
            assert!(matches!(back, model::StreamResponse::Task(_)));
        } else {
            assert_eq!(&back, ev);
        }
    }
}

#[test]
fn a_send_request_reads_into_the_model() {
    let mut metadata = pbjson_types::Struct::default();
    metadata
        .fields
        .insert("agentId".into(), pbjson_types::Value::from("echo"));
    let data = pbjson_types::Value::from(vec![
        pbjson_types::Value::from(1.5),
        pbjson_types::Value::from(()),
        pbjson_types::Value::from(2.0),
        pbjson_types::Value::from(-3.0),
    ]);
    let req = pb::SendMessageRequest {
        tenant: "echo".into(),
        message: Some(pb::Message {
            message_id: "m-1".into(),
            task_id: "t-1".into(),
            role: pb::Role::User as i32,
            parts: vec![
                pb::Part {
                    content: Some(Content::Text("hi".into())),
                    ..Default::default()
                },
                pb::Part {
                    content: Some(Content::Data(data)),
                    ..Default::default()
                },
                pb::Part {
                    content: Some(Content::Raw(b"hello".to_vec())),
                    filename: "h.txt".into(),
                    media_type: "text/plain".into(),
                    ..Default::default()
                },
            ],
            metadata: Some(metadata),
            ..Default::default()
        }),
        configuration: Some(pb::SendMessageConfiguration {
            accepted_output_modes: vec!["text/plain".into()],
            task_push_notification_config: Some(pb::TaskPushNotificationConfig {
                url: "http://hook".into(),
                token: "tok".into(),
                authentication: Some(pb::AuthenticationInfo {
                    scheme: "Bearer".into(),
                    credentials: "cred".into(),
                }),
                ..Default::default()
            }),
            history_length: Some(0),
            return_immediately: true,
        }),
        metadata: None,
    };
    let (params, tenant) = request_params(&req).unwrap();
    assert_eq!(tenant.as_deref(), Some("echo"));
    assert_eq!(
        params,
        json!({
            "message": {"messageId": "m-1", "taskId": "t-1", "role": "ROLE_USER",
                "parts": [{"text": "hi"}, {"data": [1.5, null, 2, -3]},
                          {"raw": "aGVsbG8=", "filename": "h.txt", "mediaType": "text/plain"}],
                "metadata": {"agentId": "echo"}},
            "configuration": {"acceptedOutputModes": ["text/plain"],
                "taskPushNotificationConfig": {"url": "http://hook", "token": "tok",
                    "authentication": {"scheme": "Bearer", "credentials": "cred"}},
                "historyLength": 0, "returnImmediately": true}
        })
    );
    let send: SendMessageRequest = parse_params(&params).unwrap();
    assert_eq!(send.message.role, Role::User);
    assert_eq!(send.message.task_id.as_deref(), Some("t-1"));
    assert_eq!(send.message.context_id, None);
    assert_eq!(send.message.parts[1].data, Some(json!([1.5, null, 2, -3])));
    assert!(send.message.parts[1].data.as_ref().unwrap()[2].is_i64());
    assert_eq!(send.message.parts[2].raw.as_deref(), Some("aGVsbG8="));
    let config = send.configuration.unwrap();
    assert_eq!(config.history_length, Some(0));
    assert!(config.return_immediately);

    // No tenant, nothing unset written.
    let bare = pb::SendMessageRequest::default();
    assert_eq!(request_params(&bare).unwrap(), (json!({}), None));
}

#[test]
fn list_filters_read_into_the_model() {
    let req = pb::ListTasksRequest {
        status: pb::TaskState::Working as i32,
        page_size: Some(1),
        status_timestamp_after: Some(pbjson_types::Timestamp {
            seconds: 1_796_118_643,
            nanos: 435_000_000,
        }),
        include_artifacts: Some(false),
        ..Default::default()
    };
    let (params, tenant) = request_params(&req).unwrap();
    assert_eq!(tenant, None);
    let list: ListTasksRequest = parse_params(&params).unwrap();
    assert_eq!(list.status, Some(TaskState::Working));
    assert_eq!(list.page_size, Some(1));
    assert_eq!(list.include_artifacts, Some(false));
    assert_eq!(list.context_id, None);
    same_instant(
        list.status_timestamp_after.as_deref().unwrap(),
        "2026-12-01T09:50:43.435Z",
    );
    // Unset enum and optional fields are left out.
    let (params, _) = request_params(&pb::ListTasksRequest::default()).unwrap();
    assert_eq!(params, json!({}));
}

#[test]
fn bad_values_are_named() {
    let err = from_json::<pb::Task>(json!({"id": "t", "status": {"state": "TASK_STATE_BOGUS"}}))
        .unwrap_err();
    assert!(err.contains("TASK_STATE_BOGUS"), "{err}");
    let err = from_json::<pb::Task>(json!({"id": "t", "metadata": [1]})).unwrap_err();
    assert_eq!(
        err,
        "invalid type: sequence, expected google.protobuf.Struct"
    );
    let err = from_json::<pb::Task>(json!({"id": "t", "status": {"timestamp": "yesterday"}}))
        .unwrap_err();
    assert!(err.contains("input"), "{err}");
    // Fields the proto does not know are ignored; null is the empty message.
    let t: pb::Task = from_json(json!({"id": "t", "kind": "task"})).unwrap();
    assert_eq!(t.id, "t");
    let _: pbjson_types::Empty = from_json(Value::Null).unwrap();
}

#[test]
fn a_served_card_reads_into_the_proto() {
    let card = json!({
        "name": "Echo", "description": "d", "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "http://h/a2a/agents/echo", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "h:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0", "tenant": "echo"}],
        "url": "http://h/a2a/agents/echo", "preferredTransport": "JSONRPC", "protocolVersion": "0.3",
        "supportsAuthenticatedExtendedCard": true,
        "capabilities": {"streaming": true, "pushNotifications": false, "extendedAgentCard": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
    });
    let pb: pb::AgentCard = from_json(card).unwrap();
    assert_eq!(pb.supported_interfaces.len(), 2);
    let grpc = &pb.supported_interfaces[1];
    assert_eq!(
        (grpc.protocol_binding.as_str(), grpc.tenant.as_str()),
        ("GRPC", "echo")
    );
    let caps = pb.capabilities.unwrap();
    assert_eq!(
        (
            caps.streaming,
            caps.push_notifications,
            caps.extended_agent_card
        ),
        (Some(true), Some(false), Some(true))
    );
    assert_eq!(pb.skills[0].tags, ["t"]);
}

#[test]
fn served_cards_name_the_grpc_listener() {
    use eventmesh_a2a::card::with_grpc;
    let card = json!({"supportedInterfaces": [
        {"url": "u", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "u", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": "u", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]});
    let grpc = |url: &str, tenant: Option<&str>| {
        let mut i = json!({"url": url, "protocolBinding": "GRPC", "protocolVersion": "1.0"});
        if let Some(t) = tenant {
            i["tenant"] = json!(t);
        }
        i
    };
    let at = |c: &Value| c["supportedInterfaces"][2].clone();
    // After the 1.0 entries, before the 0.3 one.
    let served = with_grpc(
        card.clone(),
        None,
        Some(50051),
        "http://127.0.0.1:10105",
        Some("echo"),
    );
    assert_eq!(at(&served), grpc("127.0.0.1:50051", Some("echo")));
    assert_eq!(served["supportedInterfaces"][3]["protocolVersion"], "0.3");
    let cases = [
        ("https://mesh.example.com", "mesh.example.com:50051"),
        ("http://[::1]:10105", "[::1]:50051"),
        ("http://mesh:8080/prefix", "mesh:50051"),
    ];
    for (base, url) in cases {
        assert_eq!(
            at(&with_grpc(card.clone(), None, Some(50051), base, None)),
            grpc(url, None),
            "{base}"
        );
    }
    let public = with_grpc(
        card.clone(),
        Some("grpc.example.com:443"),
        Some(50051),
        "http://h",
        Some("a"),
    );
    assert_eq!(at(&public), grpc("grpc.example.com:443", Some("a")));
    // No listener, no entry.
    assert_eq!(
        with_grpc(card.clone(), Some("x:1"), None, "http://h", Some("a")),
        card
    );
}
