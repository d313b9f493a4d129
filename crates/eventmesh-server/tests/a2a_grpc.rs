//! The A2A gRPC binding against real parts: the `eventmesh` binary with
//! its gRPC listener, the built-in echo agent, the official Python A2A
//! client (a2a-sdk 1.3 with grpcio) running the whole shared scenario over
//! gRPC, and the crate's own tonic client for what the SDK does not show:
//! health, reflection, the gate's refusals, mutual TLS, and several
//! instances.

mod common;

use std::time::Duration;

use common::a2a::{check_scenario, echo_agent, python_scenario};
use common::gate::{start_closed, GateFiles};
use common::*;
use eventmesh_a2a_grpc::client::{self as grpc, A2aServiceClient};
use eventmesh_a2a_grpc::pb;
use eventmesh_a2a_grpc::pbjson_types;
use eventmesh_a2a_grpc::rpc_status::{ErrorInfo, Status as RpcStatus};
use prost::Message as _;
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(10);

async fn connect(s: &Server) -> A2aServiceClient<Channel> {
    let (addr, _) = s.grpc_addr().expect("the gRPC listener is on");
    grpc::connect(&addr, WAIT)
        .await
        .expect("connect to the gRPC listener")
}

/// A text message from the user.
fn message(text: &str) -> pb::Message {
    pb::Message {
        message_id: format!("m-{text}-{}", unix_now()),
        role: pb::Role::User as i32,
        parts: vec![pb::Part {
            content: Some(pb::part::Content::Text(text.to_string())),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A send to agent `tenant` (gateway-wide when empty).
fn send(tenant: &str, text: &str, immediately: bool) -> pb::SendMessageRequest {
    pb::SendMessageRequest {
        tenant: tenant.to_string(),
        message: Some(message(text)),
        configuration: Some(pb::SendMessageConfiguration {
            return_immediately: immediately,
            ..Default::default()
        }),
        metadata: None,
    }
}

/// The code, message and ErrorInfo (reason, domain) of a refusal.
fn refusal<T: std::fmt::Debug>(
    r: Result<tonic::Response<T>, tonic::Status>,
) -> (Code, String, String, String) {
    let s = r.expect_err("a refusal");
    let details = RpcStatus::decode(s.details()).expect("google.rpc.Status details");
    assert_eq!(
        (details.code, details.message.as_str()),
        (s.code() as i32, s.message()),
        "the details repeat the status"
    );
    let info = details
        .details
        .iter()
        .find(|d| d.type_url == "type.googleapis.com/google.rpc.ErrorInfo")
        .map(|d| ErrorInfo::decode(d.value.as_ref()).unwrap())
        .expect("an ErrorInfo");
    (s.code(), s.message().to_string(), info.reason, info.domain)
}

fn task_of(r: pb::SendMessageResponse) -> pb::Task {
    match r.payload {
        Some(pb::send_message_response::Payload::Task(t)) => t,
        other => panic!("no task: {other:?}"),
    }
}

fn state(t: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(t.status.as_ref().unwrap().state).unwrap()
}

async fn card_of(s: &Server, id: &str) -> Value {
    let url = s.url(&format!("/a2a/agents/{id}/.well-known/agent-card.json"));
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Registers agent `id` (no process behind it) with an extended card.
async fn register(s: &Server, id: &str, token: Option<&str>) {
    let card = |name: &str| {
        json!({"name": name, "description": "d", "version": "1",
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "x", "name": "x", "description": "x", "tags": []}]})
    };
    let mut rb = client().post(s.url("/a2a/agents")).json(
        &json!({"id": id, "card": card(id), "extendedCard": card(&format!("{id} (extended)"))}),
    );
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

#[tokio::test]
async fn the_python_sdk_runs_the_whole_scenario_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.webhook.denied.cidrs=10.0.0.0/8",
            "eventmesh.server.grpc.port=0",
            "eventmesh.server.grpc.max.message.bytes=65536",
        ],
    );
    let _agent = echo_agent(&s, "echo");
    let port = s.grpc_port();
    let card = card_of(&s, "echo").await;
    let grpc_entry = json!({"url": format!("127.0.0.1:{port}"), "protocolBinding": "GRPC",
        "protocolVersion": "1.0", "tenant": "echo"});
    let bindings: Vec<(&str, &str)> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["protocolBinding"].as_str().unwrap(),
                i["protocolVersion"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        bindings,
        [
            ("JSONRPC", "1.0"),
            ("HTTP+JSON", "1.0"),
            ("GRPC", "1.0"),
            ("JSONRPC", "0.3"),
            ("HTTP+JSON", "0.3")
        ],
        "{card}"
    );
    let listed = card["supportedInterfaces"].as_array().unwrap();
    assert!(listed.contains(&grpc_entry), "{card}");

    // The gateway's own card: the listener without a tenant.
    let url = s.url("/.well-known/agent-card.json");
    let gateway: Value = client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let wide = json!({"url": format!("127.0.0.1:{port}"), "protocolBinding": "GRPC", "protocolVersion": "1.0"});
    assert!(
        gateway["supportedInterfaces"]
            .as_array()
            .unwrap()
            .contains(&wide),
        "{gateway}"
    );

    let steps = python_scenario(&s.url("/a2a/agents/echo"), "1.0", "GRPC");
    check_scenario(&steps, "1.0", "GRPC");

    let mut c = connect(&s).await;
    // Gateway-wide: no tenant, the send names its agent in its metadata,
    // a task method finds the task's.
    let mut wide = send("", "hello gateway", false);
    let mut meta = pbjson_types::Struct::default();
    meta.fields
        .insert("agentId".into(), pbjson_types::Value::from("echo"));
    wide.message.as_mut().unwrap().metadata = Some(meta);
    let done = task_of(
        c.send_message(grpc::request(wide, None))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&done), pb::TaskState::Completed);
    let get = pb::GetTaskRequest {
        id: done.id.clone(),
        history_length: Some(0),
        ..Default::default()
    };
    let got = c
        .get_task(grpc::request(get, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((got.id.as_str(), got.history.len()), (done.id.as_str(), 0));
    let (code, _, reason, _) = refusal(
        c.send_message(grpc::request(send("", "who?", false), None))
            .await,
    );
    assert_eq!(
        (code, reason.as_str()),
        (Code::InvalidArgument, "INVALID_PARAMS")
    );

    // The extended card, served like the public one (gRPC entry included).
    register(&s, "vip", None).await;
    let ask = |t: &str| {
        grpc::request(
            pb::GetExtendedAgentCardRequest {
                tenant: t.to_string(),
            },
            None,
        )
    };
    let ext = c
        .get_extended_agent_card(ask("vip"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ext.name, "vip (extended)");
    assert_eq!(ext.capabilities.unwrap().extended_agent_card, Some(true));
    let grpc_if = ext
        .supported_interfaces
        .iter()
        .find(|i| i.protocol_binding == "GRPC")
        .unwrap();
    assert_eq!(
        (grpc_if.url.clone(), grpc_if.tenant.as_str()),
        (format!("127.0.0.1:{port}"), "vip")
    );
    // Its JSON-RPC endpoint: the host the gRPC client reached, on the
    // traffic port.
    let rpc_if = ext
        .supported_interfaces
        .iter()
        .find(|i| i.protocol_binding == "JSONRPC")
        .unwrap();
    assert_eq!(rpc_if.url, s.url("/a2a/agents/vip"));
    let (code, _, reason, domain) = refusal(c.get_extended_agent_card(ask("echo")).await);
    assert_eq!(
        (code, reason.as_str(), domain.as_str()),
        (
            Code::FailedPrecondition,
            "UNSUPPORTED_OPERATION",
            "a2a-protocol.org"
        )
    );
    let (code, message, reason, domain) = refusal(c.get_extended_agent_card(ask("nope")).await);
    assert_eq!(
        (code, reason.as_str(), domain.as_str()),
        (Code::NotFound, "UNKNOWN_AGENT", "eventmesh")
    );
    assert_eq!(message, "no agent \"nope\" is registered");

    // Errors of the binding itself.
    let mut old = grpc::request(send("echo", "hi", true), None);
    old.metadata_mut()
        .insert("a2a-version", "0.3".parse().unwrap());
    let (code, _, reason, _) = refusal(c.send_message(old).await);
    assert_eq!(
        (code, reason.as_str()),
        (Code::FailedPrecondition, "VERSION_NOT_SUPPORTED")
    );
    let big = send("echo", &"x".repeat(100_000), true);
    let s2 = c.send_message(grpc::request(big, None)).await.unwrap_err();
    assert_eq!(s2.code(), Code::OutOfRange, "{s2:?}");
}

#[tokio::test]
async fn health_and_reflection_answer_on_the_grpc_listener() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    use tonic_reflection::pb::v1 as r1;
    use tonic_reflection::pb::v1alpha as r1a;

    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.server.grpc.port=0",
            "eventmesh.server.http.header.timeout.ms=500",
        ],
    );
    let (addr, tls) = s.grpc_addr().unwrap();
    assert!(!tls);
    // A peer that sends nothing, and one that stops halfway through the
    // HTTP/2 preface, are cut off and counted.
    let silent = silent_peers(&addr, &[b"", b"PRI * HTTP/2.0\r\n"]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "lf.a2a.v1.A2AService"] {
        let got = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);

    // v1: the services, then the file that defines the A2A service.
    let mut v1 = r1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let ask = |m: r1::server_reflection_request::MessageRequest| r1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let asks = vec![
        ask(r1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
        ask(
            r1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "lf.a2a.v1.A2AService".into(),
            ),
        ),
    ];
    let mut answers = v1
        .server_reflection_info(futures::stream::iter(asks))
        .await
        .unwrap()
        .into_inner();
    let listed = answers.message().await.unwrap().unwrap();
    let Some(r1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        listed.message_response
    else {
        panic!("{listed:?}")
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "lf.a2a.v1.A2AService"
        ]
    );
    let file = answers.message().await.unwrap().unwrap();
    let Some(r1::server_reflection_response::MessageResponse::FileDescriptorResponse(fd)) =
        file.message_response
    else {
        panic!("{file:?}")
    };
    let first =
        pbjson_types::FileDescriptorProto::decode(fd.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!((first.name(), first.package()), ("a2a.proto", "lf.a2a.v1"));
    let methods: Vec<&str> = first.service[0].method.iter().map(|m| m.name()).collect();
    assert_eq!(methods.len(), 11);
    assert!(methods.contains(&"SendStreamingMessage"), "{methods:?}");

    // v1alpha, as older tools ask.
    let mut v1a = r1a::server_reflection_client::ServerReflectionClient::new(channel);
    let ask = r1a::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            r1a::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut answers = v1a
        .server_reflection_info(futures::stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    let listed = answers.message().await.unwrap().unwrap();
    let Some(r1a::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        listed.message_response
    else {
        panic!("{listed:?}")
    };
    assert!(list
        .service
        .iter()
        .any(|s| s.name == "lf.a2a.v1.A2AService"));

    assert_eq!(silent.await.unwrap(), [true, true], "closed by the server");
    let series = r#"eventmesh_connections_refused_total{listener="grpc",reason="timeout_header"}"#;
    assert_eq!(
        counter_reaching(&client(), &s, series, 2.0, WAIT).await,
        2.0
    );

    // At shutdown a health watcher hears NOT_SERVING, and its watch (a
    // stream that never ends by itself) does not hold up the exit.
    let service = HealthCheckRequest {
        service: String::new(),
    };
    let mut watch = health.watch(service).await.unwrap().into_inner();
    let now = watch.message().await.unwrap().unwrap();
    assert_eq!(now.status(), ServingStatus::Serving);
    s.signal("TERM");
    let next = tokio::time::timeout(WAIT, watch.message())
        .await
        .expect("an update in time");
    assert_eq!(next.unwrap().unwrap().status(), ServingStatus::NotServing);
    let exited = tokio::task::spawn_blocking(move || {
        let mut s = s;
        s.wait_exit()
    });
    assert!(exited.await.unwrap().success());
}

/// Opens a connection per entry of `sends`, writes it, and reads until
/// the server closes it (at most 10 s); whether each was closed.
fn silent_peers(addr: &str, sends: &[&'static [u8]]) -> tokio::task::JoinHandle<Vec<bool>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (addr, sends) = (addr.to_string(), sends.to_vec());
    tokio::spawn(async move {
        let mut closed = Vec::new();
        let mut conns = Vec::new();
        for bytes in sends {
            let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
            c.write_all(bytes).await.unwrap();
            conns.push(c);
        }
        for mut c in conns {
            let mut buf = [0u8; 1024];
            let ended = tokio::time::timeout(WAIT, async {
                loop {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {} // the server's SETTINGS, then nothing
                    }
                }
            })
            .await;
            closed.push(ended.is_ok());
        }
        closed
    })
}

const ALICE: &str = "alice-token";
const AGENT: &str = "agent-token";

#[tokio::test]
async fn the_gate_refuses_on_grpc_as_on_every_route() {
    let files = GateFiles::new(&format!("{ALICE} acme alice\n{AGENT} agents shopkeeper\n"));
    let s = start_closed(
        &files,
        &[
            files.acl("allow agents A2A *\nallow acme A2A shop\n"),
            files.audit_file(),
            "eventmesh.server.grpc.port=0".to_string(),
        ],
    );
    register(&s, "shop", Some(AGENT)).await;
    register(&s, "secret", Some(AGENT)).await;
    let mut c = connect(&s).await;
    let call = |token: Option<&str>, agent: &str| grpc::request(send(agent, "hi", true), token);

    // No token, or a wrong one: unauthenticated, the same whether the
    // agent exists or not.
    for (token, reason) in [
        (None, "MISSING_CREDENTIAL"),
        (Some("wrong-token"), "INVALID_TOKEN"),
    ] {
        let known = refusal(c.send_message(call(token, "shop")).await);
        assert_eq!(
            (known.0, known.2.as_str(), known.3.as_str()),
            (Code::Unauthenticated, reason, "eventmesh")
        );
        assert_eq!(
            refusal(c.send_message(call(token, "nope")).await),
            known,
            "{token:?}"
        );
    }
    // An agent the ACL hides is an unknown agent.
    let hidden = refusal(c.send_message(call(Some(ALICE), "secret")).await);
    let unknown = refusal(c.send_message(call(Some(ALICE), "nope")).await);
    assert_eq!(hidden.0, Code::NotFound);
    assert_eq!(
        (
            hidden.0,
            hidden.1.replace("secret", "X"),
            hidden.2,
            hidden.3
        ),
        (
            unknown.0,
            unknown.1.replace("nope", "X"),
            unknown.2,
            unknown.3
        )
    );
    // Alice's own agent.
    let sent = task_of(
        c.send_message(call(Some(ALICE), "shop"))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&sent), pb::TaskState::Submitted);

    let audit = files.audit();
    let grpc_allowed = audit
        .iter()
        .find(|r| r["transport"] == "grpc" && r["verdict"] == "allow" && r["topic"] == "shop");
    let r = grpc_allowed.unwrap_or_else(|| panic!("{audit:?}"));
    assert_eq!(
        (&r["principal"], &r["tenant"], &r["operation"]),
        (&json!("alice"), &json!("acme"), &json!("A2A"))
    );
}

#[tokio::test]
async fn a_client_certificate_names_the_caller_on_grpc() {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let dir = tempfile::tempdir().unwrap();
    let pki = eventmesh_testpki::TestPki::new(dir.path(), "mesh");
    let server = pki.server("server", "eventmesh");
    let alice = pki.client("alice", "alice", Some("acme"));
    let bob = pki.client("bob", "bob", Some("globex"));
    let files = GateFiles::new(&format!("{AGENT} agents shopkeeper\n"));
    let path = |p: &std::path::Path| p.display().to_string();
    let s = start_closed(
        &files,
        &[
            files.acl("allow agents A2A *\nallow alice A2A shop\n"),
            format!("eventmesh.server.tls.cert.file={}", path(&server.cert)),
            format!("eventmesh.server.tls.key.file={}", path(&server.key)),
            format!(
                "eventmesh.server.tls.client.ca.file={}",
                path(pki.ca_file())
            ),
            // Only the gRPC listener speaks TLS here.
            "eventmesh.server.http.tls.enabled=false".to_string(),
            "eventmesh.server.admin.tls.enabled=false".to_string(),
            "eventmesh.server.grpc.port=0".to_string(),
        ],
    );
    register(&s, "shop", Some(AGENT)).await;
    let (addr, tls) = s.grpc_addr().unwrap();
    assert!(tls);
    let port = port_of(&addr);
    let ca = Certificate::from_pem(std::fs::read(pki.ca_file()).unwrap());
    let channel = |who: Option<&eventmesh_testpki::Pair>| {
        let mut tls = ClientTlsConfig::new()
            .domain_name("localhost")
            .ca_certificate(ca.clone());
        if let Some(p) = who {
            let id = Identity::from_pem(
                std::fs::read(&p.cert).unwrap(),
                std::fs::read(&p.key).unwrap(),
            );
            tls = tls.identity(id);
        }
        let endpoint = Endpoint::from_shared(format!("https://localhost:{port}"))
            .unwrap()
            .connect_timeout(WAIT)
            .tls_config(tls)
            .unwrap();
        async move { endpoint.connect().await }
    };
    let list = || {
        grpc::request(
            pb::ListTasksRequest {
                tenant: "shop".into(),
                ..Default::default()
            },
            None,
        )
    };

    // Alice's certificate names her: no token needed.
    let mut a = A2aServiceClient::new(channel(Some(&alice)).await.unwrap());
    let page = a.list_tasks(list()).await.unwrap().into_inner();
    assert_eq!((page.total_size, page.tasks.len()), (0, 0));
    let sent = task_of(
        a.send_message(grpc::request(send("shop", "by cert", true), None))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(state(&sent), pb::TaskState::Submitted);
    // Bob's is valid, and the ACL hides the agent from him.
    let mut b = A2aServiceClient::new(channel(Some(&bob)).await.unwrap());
    let (code, _, reason, _) = refusal(b.list_tasks(list()).await);
    assert_eq!((code, reason.as_str()), (Code::NotFound, "UNKNOWN_AGENT"));
    // Without a certificate the handshake is refused.
    let bare = match channel(None).await {
        Err(e) => Err(e.to_string()),
        Ok(ch) => A2aServiceClient::new(ch)
            .list_tasks(list())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    assert!(bare.is_err(), "served without a client certificate");
}

/// Two instances on one etcd and one JetStream log, with partition
/// ownership: the SDK talks gRPC to instance 0 only, the agent is attached
/// to instance 1 only.
#[tokio::test]
async fn a_grpc_client_on_one_instance_reaches_an_agent_on_another() {
    let _one_mesh_at_a_time = common::mesh::SERIAL.lock().await;
    let mesh = common::mesh::Mesh::start_with(
        2,
        "a2agrpc",
        common::mesh::LEASE_MS,
        &[
            "eventmesh.webhook.denied.cidrs=10.0.0.0/8",
            "eventmesh.server.grpc.port=0",
        ],
    )
    .await;
    let _agent = echo_agent(mesh.s(1), "echo");
    let card = card_of(mesh.s(0), "echo").await;
    let url = format!("127.0.0.1:{}", mesh.s(0).grpc_port());
    assert!(
        card["supportedInterfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["protocolBinding"] == "GRPC" && i["url"] == url),
        "{card}"
    );
    let steps = python_scenario(&mesh.s(0).url("/a2a/agents/echo"), "1.0", "GRPC");
    check_scenario(&steps, "1.0", "GRPC");
}
