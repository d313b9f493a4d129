//! The names and event shapes that carry A2A tasks across the mesh between
//! the gateway and agents.
//!
//! The gateway publishes a task's messages and cancellations to the agent's
//! inbox topic, `a2a.agent.<agentId>`; agents publish status and artifact
//! updates to one shared topic, [`UPDATES_TOPIC`]. Each event's CloudEvents
//! extension attributes say which task ([`EXT_TASK`]) and agent
//! ([`EXT_AGENT`]) it concerns. Extension names follow the CloudEvents rule:
//! lowercase ASCII letters and digits, at most 20 characters. Event data is
//! JSON in camelCase, with the v1.0 [model](crate::model) types inside.

use serde::{Deserialize, Serialize};

use crate::model::{Artifact, Message, Task, TaskState};

/// Prefix of an agent's inbox topic: `a2a.agent.<agentId>`.
pub const INBOX_PREFIX: &str = "a2a.agent.";
/// The topic agents publish their task updates to.
pub const UPDATES_TOPIC: &str = "a2a.updates";
/// The gateway's queue of push notifications to clients' webhooks: one
/// event per notification and webhook, its data the body to POST.
pub const PUSH_TOPIC: &str = "a2a.push";

/// Gateway → agent: a task has a new message ([`TaskMessage`]).
pub const TYPE_MESSAGE: &str = "a2a.task.message";
/// Gateway → agent: the client canceled the task ([`TaskCancel`]).
pub const TYPE_CANCEL: &str = "a2a.task.cancel";
/// Agent → gateway: the task's status changed ([`StatusData`]).
pub const TYPE_STATUS: &str = "a2a.task.status";
/// Agent → gateway: an artifact, or a chunk of one ([`ArtifactData`]).
pub const TYPE_ARTIFACT: &str = "a2a.task.artifact";
/// Gateway → gateway ([`PUSH_TOPIC`]): a notification for a client webhook.
pub const TYPE_PUSH: &str = "a2a.task.push";

/// Extension attribute: the task id.
pub const EXT_TASK: &str = "a2ataskid";
/// Extension attribute: the agent id.
pub const EXT_AGENT: &str = "a2aagent";
/// Extension attribute: the token that lets an agent update the task.
pub const EXT_TOKEN: &str = "a2atoken";
/// Extension attribute: the sequence number of an update within its task;
/// on a message to the agent, the number of the last update the gateway
/// applied to the task (`0`: none yet), where the agent's next update
/// chains on.
pub const EXT_SEQ: &str = "a2aseq";
/// Extension attribute: the `a2aseq` an update follows (the agent's
/// previous update of the task, or the one its message named). The gateway
/// applies an update only after the one it follows, whatever order
/// they arrive in.
pub const EXT_PREV: &str = "a2aprev";
/// Reads a sequence extension written as a string or a number; `None`
/// when it is neither.
pub fn seq_value(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::String(s) => s.parse().ok(),
        serde_json::Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// Extension attribute: whether the client is streaming the task.
pub const EXT_STREAM: &str = "a2astream";
/// Extension attribute: the push-notification config a notification is for.
pub const EXT_PUSH: &str = "a2apushid";

/// Longest agent id.
pub const MAX_AGENT_ID_LEN: usize = 64;

/// Checks an agent id: 1 to 64 characters of `A-Z a-z 0-9 _ -`, so that it
/// is safe in a topic name and a URL path.
pub fn valid_agent_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_AGENT_ID_LEN {
        return Err(format!(
            "agent id must be 1 to {MAX_AGENT_ID_LEN} characters, got {}",
            id.len()
        ));
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        Some(c) => Err(format!(
            "agent id {id:?} has {c:?}; only A-Z, a-z, 0-9, '_' and '-' are allowed"
        )),
        None => Ok(()),
    }
}

/// Data of [`TYPE_MESSAGE`]: the task as clients see it (none of the
/// gateway's bookkeeping, such as its token) and the message the client just
/// sent, which is also the last entry of the task's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskMessage {
    pub task: Task,
    pub message: Message,
}

/// Data of [`TYPE_CANCEL`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCancel {
    pub task_id: String,
}

/// Data of [`TYPE_STATUS`]: the task's new state and the message explaining it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusData {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// Data of [`TYPE_ARTIFACT`]: an artifact, or with `append` a chunk added to
/// the artifact of the same id; `last_chunk` ends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactData {
    pub artifact: Artifact,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{to_json, Part};
    use serde_json::json;

    #[test]
    fn agent_ids() {
        assert_eq!(valid_agent_id("echo-Agent_2"), Ok(()));
        assert_eq!(valid_agent_id(&"a".repeat(64)), Ok(()));
        assert_eq!(
            valid_agent_id(""),
            Err("agent id must be 1 to 64 characters, got 0".into())
        );
        assert_eq!(
            valid_agent_id(&"a".repeat(65)),
            Err("agent id must be 1 to 64 characters, got 65".into())
        );
        assert_eq!(
            valid_agent_id("a.b"),
            Err("agent id \"a.b\" has '.'; only A-Z, a-z, 0-9, '_' and '-' are allowed".into())
        );
        assert!(valid_agent_id("é").is_err());
    }

    #[test]
    fn extension_names_follow_cloudevents() {
        for name in [EXT_TASK, EXT_AGENT, EXT_TOKEN, EXT_SEQ, EXT_STREAM] {
            assert!(
                name.len() <= 20
                    && name
                        .bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                "{name}"
            );
        }
    }

    #[test]
    fn data_shapes() {
        assert_eq!(
            to_json(&TaskCancel {
                task_id: "t".into()
            }),
            json!({"taskId": "t"})
        );
        let s = StatusData {
            state: TaskState::Completed,
            message: None,
        };
        assert_eq!(to_json(&s), json!({"state": "TASK_STATE_COMPLETED"}));
        let a = ArtifactData {
            artifact: crate::model::Artifact {
                artifact_id: "a".into(),
                parts: vec![Part::text("x")],
                ..Default::default()
            },
            append: true,
            last_chunk: false,
        };
        let v = json!({"artifact": {"artifactId": "a", "parts": [{"text": "x"}]}, "append": true});
        assert_eq!(to_json(&a), v);
        assert_eq!(serde_json::from_value::<ArtifactData>(v).unwrap(), a);
        let m = TaskMessage {
            task: crate::model::Task {
                id: "t".into(),
                ..Default::default()
            },
            message: crate::model::Message::user_text("m", "hi"),
        };
        let v = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_UNSPECIFIED"}},
                       "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
        assert_eq!(to_json(&m), v);
        assert_eq!(serde_json::from_value::<TaskMessage>(v).unwrap(), m);
    }
}
