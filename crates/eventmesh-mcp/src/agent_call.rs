//! Calling an agent's skill tool: one A2A `SendStreamingMessage` through
//! the gateway's call layer (which runs the gate on the agent), a progress
//! notification per status or artifact update while the task works, and
//! the task's artifacts as the result once it settles.
//!
//! Invariants:
//! - The call waits at most the A2A task timeout; past it, or when the
//!   client cancels the call, the task is cancelled.
//! - A task that fails, is rejected or cancelled answers `isError: true`
//!   with the agent's status text. A task that waits for input answers its
//!   question, and `taskId` in the next call continues it.
//! - The result is the task as the gateway keeps it (read once it
//!   settled), so artifacts streamed in chunks come back whole: each
//!   artifact's text parts as one text block, each data part as its JSON.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::model::{Artifact, Message, Part, StreamResponse, Task, TaskState};
use eventmesh_a2a_gateway::call::{self, Answer, Method, Refused, Request, Version};
use eventmesh_a2a_gateway::Gateway;
use rmcp::model::{
    CallToolResult, ContentBlock, MetaObject, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::{json, Value};

use crate::agents::AgentTool;
use crate::args::{Args, ToolError, ToolResult};
use crate::RequestCaller;

impl From<Refused> for ToolError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Gate(e) => e.into(),
            Refused::Rpc(e) => {
                ToolError::new(format!("the agent call failed ({}): {}", e.code, e.message))
            }
        }
    }
}

/// The message a call's arguments make.
fn message_of(t: &AgentTool, a: &Args) -> Result<Value, ToolError> {
    let mut parts = Vec::new();
    if t.own_schema {
        let mut data = a.0.clone();
        data.remove("taskId");
        parts.push(json!({ "data": data }));
    } else {
        a.only(&["text", "data", "taskId"])?;
        if let Some(text) = a.text("text")? {
            parts.push(json!({ "text": text }));
        }
        if let Some(data) = a.object("data")? {
            parts.push(json!({ "data": data }));
        }
        if parts.is_empty() {
            return Err(ToolError::new(
                "give text, data or both: the message to the agent",
            ));
        }
    }
    let mut message = json!({
        "messageId": uuid::Uuid::now_v7().to_string(),
        "role": "ROLE_USER",
        "parts": parts,
        "metadata": {"skill": t.skill},
    });
    if let Some(task) = a.text("taskId")? {
        message["taskId"] = json!(task);
    }
    Ok(message)
}

fn text_of_parts(parts: &[Part]) -> String {
    parts.iter().filter_map(|p| p.text.as_deref()).collect()
}

fn message_text(m: Option<&Message>) -> String {
    m.map(|m| text_of_parts(&m.parts)).unwrap_or_default()
}

/// What a progress notification says about one stream event.
fn progress_text(event: &StreamResponse) -> String {
    match event {
        StreamResponse::Task(t) => t.status.state.v03().to_string(),
        StreamResponse::Message(m) => message_text(Some(m)),
        StreamResponse::StatusUpdate(s) => {
            let text = message_text(s.status.message.as_ref());
            if text.is_empty() {
                s.status.state.v03().to_string()
            } else {
                format!("{}: {text}", s.status.state.v03())
            }
        }
        StreamResponse::ArtifactUpdate(a) => text_of_parts(&a.artifact.parts),
    }
}

/// An artifact's content: its text parts as one block, then each data
/// part as JSON text, each file part as its URL or name.
fn artifact_blocks(a: &Artifact) -> Vec<ContentBlock> {
    let mut blocks = Vec::new();
    let text = text_of_parts(&a.parts);
    if !text.is_empty() {
        blocks.push(ContentBlock::text(text));
    }
    for p in &a.parts {
        if let Some(data) = &p.data {
            blocks.push(ContentBlock::text(data.to_string()));
        } else if let Some(url) = &p.url {
            blocks.push(ContentBlock::text(url.clone()));
        } else if p.raw.is_some() {
            let name = p.filename.as_deref().unwrap_or("a file");
            blocks.push(ContentBlock::text(format!(
                "({name}: binary content not shown)"
            )));
        }
    }
    blocks
}

/// The tool result of a settled task.
fn result_of(task: &Task) -> CallToolResult {
    let state = task.status.state;
    let status_text = message_text(task.status.message.as_ref());
    let mut meta = MetaObject::new();
    meta.insert("taskId".into(), json!(task.id));
    meta.insert("contextId".into(), json!(task.context_id));
    meta.insert("taskState".into(), json!(state.as_v1()));
    let mut result = match state {
        TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
            let text = if status_text.is_empty() {
                format!("the agent's task ended {}", state.v03())
            } else {
                format!("the agent's task ended {}: {status_text}", state.v03())
            };
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
        _ if state.is_interrupted() => CallToolResult::success(vec![
            ContentBlock::text(status_text),
            ContentBlock::text(format!(
                "The agent waits for {} (task {}): call this tool again with taskId {:?} to answer.",
                if state == TaskState::AuthRequired { "authorization" } else { "input" },
                task.id,
                task.id
            )),
        ]),
        _ => {
            let mut blocks: Vec<ContentBlock> = task.artifacts.iter().flat_map(artifact_blocks).collect();
            if blocks.is_empty() {
                blocks.push(ContentBlock::text(status_text));
            }
            CallToolResult::success(blocks)
        }
    };
    result.meta = Some(meta);
    result
}

/// Sends the call's message to the agent, reports progress, and answers
/// with the settled task.
pub(crate) async fn call_skill(
    gw: &Arc<Gateway>,
    rc: &RequestCaller,
    t: &AgentTool,
    a: &Args<'_>,
    ctx: &RequestContext<RoleServer>,
    limit: Duration,
) -> ToolResult {
    let message = message_of(t, a)?;
    let req = Request {
        method: Method::SendStreamingMessage,
        version: Version::V1,
        params: json!({ "message": message }),
        scope: Some(&t.agent),
        base: "",
        raw: &rc.raw,
    };
    let mut stream = match call::call(gw, &rc.caller, req).await? {
        Answer::Stream(s) => s,
        Answer::Value(_) => return Err(ToolError::new("the agent did not answer with a stream")),
    };
    let token = ctx.meta.get_progress_token();
    let mut task_id = None;
    let mut step = 0u32;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = ctx.ct.cancelled() => {
                cancel(gw, rc, t, task_id.as_deref()).await;
                return Err(ToolError::new("the call was cancelled, and so was the agent's task"));
            }
            _ = tokio::time::sleep_until(deadline) => {
                cancel(gw, rc, t, task_id.as_deref()).await;
                return Err(ToolError::new(format!(
                    "the agent's task did not settle within {} ms; it was cancelled",
                    limit.as_millis()
                )));
            }
        };
        let Some((event, last)) = next else { break };
        if let StreamResponse::Task(task) = &event {
            task_id.get_or_insert_with(|| task.id.clone());
        }
        step += 1;
        if let Some(token) = &token {
            notify(ctx, token, step, progress_text(&event)).await;
        }
        if last {
            break;
        }
    }
    if task_id.is_none() {
        return Err(ToolError::new(
            "the agent's stream ended before it named its task",
        ));
    }
    // The stream's task is the settled one, artifacts and all.
    Ok(result_of(stream.task()))
}

async fn notify(ctx: &RequestContext<RoleServer>, token: &ProgressToken, step: u32, text: String) {
    let mut p = ProgressNotificationParam::new(token.clone(), f64::from(step));
    if !text.is_empty() {
        p = p.with_message(text);
    }
    // A client that does not read its stream does not hold the call up.
    match tokio::time::timeout(crate::SEND_WAIT, ctx.peer.notify_progress(p)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "a progress notification was not sent"),
        Err(_) => tracing::debug!("a progress notification was dropped: the client is not reading"),
    }
}

/// Cancels the task (when it has one yet); a failure changes nothing for
/// the caller, who is told the call ended anyway.
async fn cancel(gw: &Arc<Gateway>, rc: &RequestCaller, t: &AgentTool, id: Option<&str>) {
    let Some(id) = id else { return };
    let req = Request {
        method: Method::CancelTask,
        version: Version::V1,
        params: json!({ "id": id }),
        scope: Some(&t.agent),
        base: "",
        raw: &rc.raw,
    };
    if let Err(e) = call::call(gw, &rc.caller, req).await {
        tracing::debug!(task = id, error = ?e, "cancelling an agent's task failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::object;

    fn tool(own: bool) -> AgentTool {
        AgentTool {
            agent: "echo".into(),
            skill: "echo".into(),
            own_schema: own,
            tool: rmcp::model::Tool::new("echo__echo", "", Arc::new(object(json!({})))),
        }
    }

    #[test]
    fn arguments_make_the_message() {
        let o = object(json!({"text": "hi", "data": {"a": 1}, "taskId": "t1"}));
        let m = message_of(&tool(false), &Args(&o)).unwrap();
        assert_eq!(m["parts"], json!([{"text": "hi"}, {"data": {"a": 1}}]));
        assert_eq!(m["taskId"], "t1");
        assert_eq!(m["role"], "ROLE_USER");
        assert_eq!(m["metadata"], json!({"skill": "echo"}));
        let o = object(json!({}));
        assert!(message_of(&tool(false), &Args(&o)).is_err());
        let o = object(json!({"city": "Oslo", "taskId": "t1"}));
        let m = message_of(&tool(true), &Args(&o)).unwrap();
        assert_eq!(m["parts"], json!([{"data": {"city": "Oslo"}}]));
    }

    fn task(state: &str, artifacts: Value, status: &str) -> Task {
        serde_json::from_value(json!({
            "id": "t1", "contextId": "c1",
            "status": {"state": state, "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": status}]}},
            "artifacts": artifacts,
        }))
        .unwrap()
    }

    fn texts(r: &CallToolResult) -> Vec<String> {
        r.content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn a_settled_task_is_the_result() {
        let done = task(
            "TASK_STATE_COMPLETED",
            json!([{"artifactId": "echo", "parts": [{"text": "hello "}, {"text": "mesh"}, {"data": {"n": 1}}]}]),
            "hello mesh",
        );
        let r = result_of(&done);
        assert_eq!(r.is_error, Some(false));
        assert_eq!(texts(&r), ["hello mesh", "{\"n\":1}"]);
        assert_eq!(
            r.meta.as_ref().unwrap().get("taskState").unwrap(),
            "TASK_STATE_COMPLETED"
        );
        let r = result_of(&task("TASK_STATE_COMPLETED", json!([]), "just this"));
        assert_eq!(texts(&r), ["just this"]);
        let r = result_of(&task("TASK_STATE_FAILED", json!([]), "no reason"));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(texts(&r), ["the agent's task ended failed: no reason"]);
        let r = result_of(&task("TASK_STATE_INPUT_REQUIRED", json!([]), "your name?"));
        assert_eq!(r.is_error, Some(false));
        assert_eq!(texts(&r)[0], "your name?");
        assert!(texts(&r)[1].contains("taskId \"t1\""));
    }
}
