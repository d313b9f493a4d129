//! The consumer of `a2a.updates`: agents' status and artifact updates,
//! applied to their tasks.
//!
//! The gateway reads the topic as an ordinary pull client of its own group
//! (`a2a-gateway`), so it resumes after its last acknowledged update when
//! the instance restarts, and updates are retried like any delivery: an
//! update is acknowledged once applied or found invalid (it can never
//! apply), and given back when the meta store failed (it is applied later).
//! Updates of one task share its partition (the task id is the partition
//! key), so they are applied in the order the agent published them.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::events::{self, ArtifactData, StatusData};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Owner, Settle, StreamGuard, SubscribeRequest};
use eventmesh_state::StartFrom;

use super::ops::Change;
use super::Gateway;

/// The gateway's client id and group on `a2a.updates`.
pub const CLIENT: &str = "a2a-gateway";
const BATCH: usize = 100;

/// Why an update cannot apply, ever.
fn invalid(reason: impl Into<String>) -> Result<Parsed, String> {
    Err(reason.into())
}

struct Parsed {
    task: String,
    token: String,
    seq: u64,
    change: Change,
}

fn text_ext(ev: &CloudEvent, name: &str) -> Option<String> {
    ev.extension(name).map(ExtValue::to_text)
}

fn parse(json: &[u8]) -> Result<Parsed, String> {
    let ev = CloudEvent::from_json_slice(json).map_err(|e| e.to_string())?;
    let Some(task) = text_ext(&ev, events::EXT_TASK) else {
        return invalid(format!("no {} extension", events::EXT_TASK));
    };
    let Some(token) = text_ext(&ev, events::EXT_TOKEN) else {
        return invalid(format!("no {} extension", events::EXT_TOKEN));
    };
    let seq = match ev.extension(events::EXT_SEQ) {
        Some(ExtValue::Int(i)) if *i > 0 => *i as u64,
        Some(ExtValue::Str(s)) => match s.parse::<u64>() {
            Ok(n) if n > 0 => n,
            _ => {
                return invalid(format!(
                    "{} {s:?} is not a positive number",
                    events::EXT_SEQ
                ))
            }
        },
        _ => return invalid(format!("no positive {} extension", events::EXT_SEQ)),
    };
    let data: &[u8] = match &ev.data {
        Data::Json(b) => b,
        Data::Text(s) => s.as_bytes(),
        _ => return invalid("data is not JSON"),
    };
    let change = match ev.ty.as_str() {
        events::TYPE_STATUS => {
            let s: StatusData = serde_json::from_slice(data).map_err(|e| e.to_string())?;
            if s.state == eventmesh_a2a::model::TaskState::Unspecified {
                return invalid("status update without a state");
            }
            Change::Status(s)
        }
        events::TYPE_ARTIFACT => Change::Artifact(
            serde_json::from_slice::<ArtifactData>(data).map_err(|e| e.to_string())?,
        ),
        other => return invalid(format!("unknown update type {other:?}")),
    };
    Ok(Parsed {
        task,
        token,
        seq,
        change,
    })
}

/// Attaches the gateway as the internal pull client `client` (of its own
/// group, from the topic's first event) to `topic`; a failed subscribe is
/// tried again every second. `None` once the runtime shuts down.
pub(super) async fn attach(gw: &Gateway, client: &str, topic: &str) -> Option<StreamGuard> {
    let rt = gw.api.runtime();
    let shutdown = gw.api.shutdown();
    loop {
        let req = SubscribeRequest {
            client_id: client.to_string(),
            topic: topic.to_string(),
            group: Some(client.to_string()),
            mode: None,
            url: None,
            from: Some(StartFrom::Earliest),
        };
        let guard = match rt.subscribe_as(req, Owner::default(), false).await {
            Ok(_) => rt.attach_stream(client),
            Err(e) => Err(e),
        };
        match guard {
            Ok(g) => return Some(g),
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow {topic}; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => return None,
                }
            }
        }
    }
}

/// Follows `a2a.updates` and applies what arrives until the runtime shuts
/// down.
pub async fn follow(gw: Arc<Gateway>) {
    let rt = gw.api.runtime().clone();
    let shutdown = gw.api.shutdown().clone();
    loop {
        let Some(guard) = attach(&gw, CLIENT, events::UPDATES_TOPIC).await else {
            return;
        };
        while !guard.is_closed() {
            let got = tokio::select! {
                got = guard.next(BATCH, Duration::from_secs(5)) => got,
                _ = shutdown.cancelled() => return,
            };
            for d in got {
                let how = match parse(&d.event_json) {
                    Err(reason) => {
                        tracing::warn!(%reason, "invalid A2A update dropped");
                        Settle::Ack
                    }
                    Ok(p) => match gw.apply_update(&p.task, &p.token, p.seq, p.change).await {
                        Ok(_) => Settle::Ack,
                        Err(e) => {
                            tracing::warn!(task = %p.task, error = %e, "A2A update not applied; retried later");
                            Settle::Nack
                        }
                    },
                };
                rt.settle(&d.delivery_id, how, None).await;
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ty: &str, seq: &str, data: &str) -> Vec<u8> {
        format!(
            r#"{{"specversion":"1.0","id":"1","source":"/a","type":"{ty}","a2ataskid":"t","a2atoken":"k","a2aseq":{seq},"datacontenttype":"application/json","data":{data}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn updates_parse_or_say_why_not() {
        let p = parse(&event(
            events::TYPE_STATUS,
            "3",
            r#"{"state":"TASK_STATE_WORKING"}"#,
        ))
        .unwrap();
        assert_eq!((p.task.as_str(), p.token.as_str(), p.seq), ("t", "k", 3));
        assert!(matches!(p.change, Change::Status(_)));
        let p = parse(&event(
            events::TYPE_ARTIFACT,
            "\"4\"",
            r#"{"artifact":{"artifactId":"a","parts":[{"text":"x"}]},"append":true}"#,
        ))
        .unwrap();
        assert_eq!(p.seq, 4);
        assert!(matches!(
            p.change,
            Change::Artifact(ArtifactData { append: true, .. })
        ));

        let err = |b: Vec<u8>| parse(&b).err().unwrap();
        assert_eq!(
            err(event(events::TYPE_STATUS, "0", "{}")),
            "no positive a2aseq extension"
        );
        assert_eq!(err(event("x.y", "1", "{}")), "unknown update type \"x.y\"");
        assert_eq!(
            err(event(
                events::TYPE_STATUS,
                "1",
                r#"{"state":"TASK_STATE_UNSPECIFIED"}"#
            )),
            "status update without a state"
        );
    }
}
