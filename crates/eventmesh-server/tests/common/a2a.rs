//! The A2A scenario every binding runs: the built-in echo agent
//! (`eventmesh agent echo`) attached to a server, and the official Python
//! A2A client (a2a-sdk, from `scripts/a2a.sh`) driving it over one binding
//! and one protocol version (`tests/a2a/client.py`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::{bin, kill_and_reap, output_within, Server};

/// The Python with a2a-sdk that `scripts/a2a.sh` prepared.
pub fn python() -> String {
    let py = std::env::var("EVENTMESH_A2A_PYTHON")
        .unwrap_or_else(|_| "/var/tmp/a2a-venv/bin/python".to_string());
    assert!(
        std::path::Path::new(&py).exists(),
        "no Python with a2a-sdk at {py}: run scripts/a2a.sh (scripts/test.sh does) or set EVENTMESH_A2A_PYTHON"
    );
    py
}

/// An agent process, killed when dropped (a failing test must not leave
/// it running).
pub struct AgentProc(pub Child);

impl Drop for AgentProc {
    fn drop(&mut self) {
        kill_and_reap(&mut self.0);
    }
}

/// Starts `eventmesh agent echo` against `s` and waits for its
/// registration line.
pub fn echo_agent(s: &Server, id: &str) -> AgentProc {
    let (agent, line) = start_echo_agent(&s.url(""), id);
    registered(&line, id);
    agent
}

/// Starts `eventmesh agent echo` against `server`; its first line of
/// output comes on the receiver.
pub fn start_echo_agent(server: &str, id: &str) -> (AgentProc, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(bin())
        .args(["agent", "echo", "--id", id, "--server", server])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the echo agent");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    (AgentProc(child), rx)
}

/// Waits (30 s at most) for the agent's registration line and checks it.
pub fn registered(rx: &std::sync::mpsc::Receiver<String>, id: &str) {
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the echo agent registered within 30 s");
    let registered: Value = serde_json::from_str(&line).expect("registration JSON");
    assert_eq!(registered["id"], id);
    assert_eq!(registered["inbox"], format!("a2a.agent.{id}"));
    assert_eq!(registered["updates"], "a2a.updates");
}

/// Runs the Python client's scenario; its steps by name.
pub fn python_scenario(
    base: &str,
    version: &str,
    binding: &str,
) -> std::collections::BTreeMap<String, Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/a2a/client.py");
    let mut cmd = Command::new(python());
    cmd.args([script, base, version, binding]);
    let (status, out, err) = output_within(&mut cmd, Duration::from_secs(180));
    assert!(
        status.success(),
        "client.py {version} {binding} failed:\n{out}\n{err}"
    );
    out.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (v["step"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

pub fn task_ev(state: &str) -> Value {
    json!({"kind": "task", "state": state})
}

pub fn status_ev(state: &str) -> Value {
    json!({"kind": "status", "state": state})
}

pub fn check_scenario(
    steps: &std::collections::BTreeMap<String, Value>,
    version: &str,
    binding: &str,
) {
    check_scenario_of(steps, version, binding, "echo")
}

/// [`check_scenario`] for the echo agent registered as `agent`.
pub fn check_scenario_of(
    steps: &std::collections::BTreeMap<String, Value>,
    version: &str,
    binding: &str,
    agent: &str,
) {
    let s = |name: &str| {
        let mut v = steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
            .clone();
        v.as_object_mut().unwrap().remove("step");
        v
    };
    assert_eq!(
        s("card"),
        json!({"name": format!("Echo ({agent})"), "streaming": true, "versions": ["0.3", "1.0"]})
    );
    let transport = match binding {
        "HTTP+JSON" => "RestTransport",
        "GRPC" => "GrpcTransport",
        _ => "JsonRpcTransport",
    };
    let transport = if version == "1.0" {
        transport.to_string()
    } else {
        format!("Compat{transport}")
    };
    assert_eq!(s("transport"), json!({"name": transport}));
    assert_eq!(
        s("send"),
        json!({"state": "TASK_STATE_COMPLETED", "text": "hello mesh", "history": 2})
    );
    let chunk = |text: &str, append: bool, last: bool| json!({"kind": "artifact", "text": text, "append": append, "last": last});
    assert_eq!(
        s("stream"),
        json!({"events": [
            task_ev("TASK_STATE_SUBMITTED"),
            status_ev("TASK_STATE_WORKING"),
            chunk("hello ", false, false),
            chunk("stream ", true, false),
            chunk("mesh", true, true),
            status_ev("TASK_STATE_COMPLETED"),
        ]})
    );
    assert_eq!(
        s("get"),
        json!({"id_matches": true, "state": "TASK_STATE_COMPLETED", "history": 1})
    );
    if version == "1.0" {
        // Every task of this run so far: "hello mesh", the stream.
        assert_eq!(s("list"), json!({"count": 1, "total": 2, "more": true}));
    }
    assert_eq!(
        s("ask"),
        json!({"state": "TASK_STATE_INPUT_REQUIRED", "text": "your name?"})
    );
    assert_eq!(
        s("answer"),
        json!({"same_task": true, "state": "TASK_STATE_COMPLETED", "text": "ask: Ada"})
    );
    assert_eq!(
        s("resubscribe"),
        json!({"events": [
            task_ev("TASK_STATE_INPUT_REQUIRED"),
            status_ev("TASK_STATE_SUBMITTED"),
            status_ev("TASK_STATE_COMPLETED"),
        ], "state": "TASK_STATE_COMPLETED"})
    );
    assert_eq!(s("cancel"), json!({"state": "TASK_STATE_CANCELED"}));
    assert_eq!(
        s("cancel_again"),
        json!({"error": "TaskNotCancelableError"})
    );
    assert_eq!(s("get_unknown"), json!({"error": "TaskNotFoundError"}));
    assert_eq!(
        s("send_to_final"),
        json!({"error": "UnsupportedOperationError"})
    );
    // Push notifications: v1.0 webhooks get each change's StreamResponse,
    // v0.3 webhooks the task.
    let (submitted, completed) = if version == "1.0" {
        (
            [
                "task:TASK_STATE_SUBMITTED",
                "statusUpdate:TASK_STATE_SUBMITTED",
            ],
            "statusUpdate:TASK_STATE_COMPLETED",
        )
    } else {
        (["task:submitted", "task:submitted"], "task:completed")
    };
    assert_eq!(
        s("push_send"),
        json!({"state": "TASK_STATE_COMPLETED", "states": [submitted[0], completed],
               "token": [format!("tok-{version}")], "auth": [format!("Bearer cred-{version}")]})
    );
    let config = s("push_config");
    assert_eq!(config["created"][0], "cfg-1");
    assert_eq!(config["created"][2], true);
    assert_eq!(config["got"], json!(["cfg-1", "tok-2"]));
    assert_eq!(config["listed"], json!(["cfg-1"]));
    // Two refused attempts, then every notification got through.
    let mut delivered = vec![submitted[1], completed];
    delivered.sort();
    assert_eq!(
        s("push_retry"),
        json!({"failed": 2, "delivered": delivered, "token": ["tok-2"]})
    );
    assert_eq!(s("push_deleted"), json!({"error": "TaskNotFoundError"}));
    assert_eq!(
        s("push_unknown_task"),
        json!({"error": "TaskNotFoundError"})
    );
    assert_eq!(s("push_denied"), json!({"error": "InvalidParamsError"}));
    assert_eq!(
        s("push_ended"),
        json!({"error": "UnsupportedOperationError"})
    );
    assert_eq!(
        s("fail"),
        json!({"state": "TASK_STATE_FAILED", "text": "no reason"})
    );
    assert_eq!(s("immediate"), json!({"state": "TASK_STATE_SUBMITTED"}));
}
