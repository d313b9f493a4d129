//! The consumer of `a2a.updates`: agents' status and artifact updates,
//! applied to their tasks.
//!
//! The gateway reads the topic as an ordinary pull client of its own group
//! (`a2a-gateway`), so it resumes after its last acknowledged update when
//! the instance restarts, and updates are retried like any delivery: an
//! update is acknowledged once applied or found invalid (it can never
//! apply), and given back when the meta store failed (it is applied later).
//! Updates of one task share its partition (the task id is the partition
//! key), and one member of the group reads them; an update is applied only
//! after the one it follows (`a2aprev`), whatever order they arrive in.

use std::sync::Arc;
use std::time::Duration;

use eventmesh_a2a::events::{self, ArtifactData, StatusData};
use eventmesh_core::event::{Data, ExtValue};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::{Settle, StreamGuard, SubscribeRequest};
use eventmesh_state::StartFrom;

use super::ops::{apply, decode, Change};
use super::Gateway;
use eventmesh_api::Stream;

/// The gateway's client id and group on `a2a.updates`.
pub const CLIENT: &str = eventmesh_api::RESERVED_CLIENTS[0];
const BATCH: usize = 100;
/// How long an update that came early waits for the one it follows.
const AWAIT_PREVIOUS: Duration = Duration::from_secs(2);

/// Why an update cannot apply, ever.
fn invalid(reason: impl Into<String>) -> Result<Update, String> {
    Err(reason.into())
}

fn text_ext(ev: &CloudEvent, name: &str) -> Option<String> {
    ev.extension(name).map(ExtValue::to_text)
}

fn parse(json: &[u8]) -> Result<Update, String> {
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
    let prev = match ev.extension(events::EXT_PREV) {
        None => None,
        Some(ExtValue::Int(i)) if *i >= 0 => Some(*i as u64),
        Some(ExtValue::Str(s)) => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => return invalid(format!("{} {s:?} is not a number", events::EXT_PREV)),
        },
        Some(other) => {
            return invalid(format!(
                "{} {} is not a number",
                events::EXT_PREV,
                other.to_text()
            ))
        }
    };
    if prev.is_some_and(|p| p >= seq) {
        return invalid(format!(
            "{} must be below {} ({seq})",
            events::EXT_PREV,
            events::EXT_SEQ
        ));
    }
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
    Ok(Update {
        task,
        token,
        seq,
        prev,
        change,
    })
}

/// Attaches the gateway as an internal pull client of `group` (from the
/// topic's first event) to `topic`; a failed subscribe is tried again
/// every second. `None` once the runtime shuts down. In a cluster each
/// instance is a member of its own (`<group>.<instance id>`, stable across
/// restarts), so the group spreads the work over the instances and keeps
/// each task's events with one of them.
pub(super) async fn attach(gw: &Gateway, group: &str, topic: &str) -> Option<StreamGuard> {
    let shutdown = gw.api.shutdown();
    let client = match gw.api.instance_id() {
        Some(instance) => format!("{group}.{instance}"),
        None => group.to_string(),
    };
    let client = client.as_str();
    loop {
        let req = SubscribeRequest {
            client_id: client.to_string(),
            topic: topic.to_string(),
            group: Some(group.to_string()),
            mode: None,
            url: None,
            from: Some(StartFrom::Earliest),
            filters: Vec::new(),
            roles: Vec::new(),
        };
        let failed = match gw.api.attach(&gw.system, client, Some(req), true).await {
            Ok(Stream { guard: Some(g), .. }) => return Some(g),
            Ok(Stream { guard: None, .. }) => "no mailbox".to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(error = %failed, "cannot follow {topic}; trying again");
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.cancelled() => return None,
        }
    }
}

impl Gateway {
    /// Settles a delivery of the gateway's own consumers, as `system:a2a`.
    pub(super) async fn settle(&self, delivery_id: &str, how: Settle) {
        if let Err(e) = self.api.settle(&self.system, delivery_id, how, b"").await {
            tracing::debug!(delivery = %delivery_id, error = %e, "A2A delivery not settled");
        }
    }
}

/// Follows `a2a.updates` and applies what arrives until the runtime shuts
/// down.
pub async fn follow(gw: Arc<Gateway>) {
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
            // An update that came before the one it follows is tried again
            // after the rest of the batch (which may hold its predecessor),
            // then waits for it a while (another instance may be applying
            // it), then is given back.
            let mut early = Vec::new();
            for d in got {
                let how = match parse(&d.event_json) {
                    Err(reason) => {
                        tracing::warn!(%reason, "invalid A2A update dropped");
                        Settle::Ack
                    }
                    Ok(u) => match gw.apply_update(&u, Duration::ZERO).await {
                        Ok(Outcome::Early) => {
                            early.push((d, u));
                            continue;
                        }
                        Ok(_) => Settle::Ack,
                        Err(e) => {
                            tracing::warn!(task = %u.task, error = %e, "A2A update not applied; retried later");
                            Settle::Nack
                        }
                    },
                };
                gw.settle(&d.delivery_id, how).await;
            }
            for (d, u) in early {
                let how = match gw.apply_update(&u, AWAIT_PREVIOUS).await {
                    Ok(Outcome::Early) => {
                        tracing::debug!(task = %u.task, "A2A update before the one it follows; retried later");
                        Settle::Nack
                    }
                    Ok(_) => Settle::Ack,
                    Err(e) => {
                        tracing::warn!(task = %u.task, error = %e, "A2A update not applied; retried later");
                        Settle::Nack
                    }
                };
                gw.settle(&d.delivery_id, how).await;
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}

/// An agent's update of a task, as read from `a2a.updates`.
pub(super) struct Update {
    pub task: String,
    pub token: String,
    pub seq: u64,
    /// The `a2aseq` it follows, when the agent says.
    pub prev: Option<u64>,
    pub change: Change,
}

/// What became of an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Applied,
    /// Never to apply: a repeat, a wrong token, an unknown or ended task.
    Dropped,
    /// The update it follows is not applied yet.
    Early,
}

impl Gateway {
    /// An agent's update from `a2a.updates`: applied when its token matches,
    /// its sequence number is new and the update it follows (`prev`) is
    /// applied, and its notifications queued. An update whose predecessor
    /// has not been applied yet waits for it up to `wait` (another instance
    /// may be applying it right now), then is [`Outcome::Early`]. `Err`:
    /// try again later: the meta store failed, or the notifications could
    /// not be queued (the update is then given back; coming again as the
    /// task's last update, it queues them again).
    pub(super) async fn apply_update(
        &self,
        u: &Update,
        wait: std::time::Duration,
    ) -> Result<Outcome, String> {
        let id = u.task.as_str();
        let deadline = tokio::time::Instant::now() + wait;
        // Once an attempt came early (and may wait), the task is watched
        // before each next attempt: the predecessor's arrival after it is
        // not missed.
        let mut changes = None;
        loop {
            let mut wrong_token = false;
            let mut early = false;
            let applied = self
                .change(id, &u.change, |rec| {
                    if rec.token != u.token {
                        wrong_token = true;
                        return false;
                    }
                    if u.seq <= rec.seq {
                        return false;
                    }
                    if u.prev.is_some_and(|p| p > rec.seq) {
                        early = true;
                        return false;
                    }
                    rec.seq = u.seq;
                    true
                })
                .await
                .map_err(|e| e.to_string())?;
            if wrong_token {
                tracing::warn!(task = id, "A2A update with a wrong token dropped");
                return Ok(Outcome::Dropped);
            }
            if early {
                if tokio::time::Instant::now() >= deadline {
                    return Ok(Outcome::Early);
                }
                match changes.as_mut() {
                    // Watch first, then try again at once.
                    None => changes = Some(self.live.watch(id)),
                    Some(rx) => {
                        if tokio::time::timeout_at(deadline, rx.recv()).await.is_err() {
                            return Ok(Outcome::Early);
                        }
                    }
                }
                continue;
            }
            return match applied {
                Some(c) => self
                    .notify(&c.task, &c.event, &c.push)
                    .await
                    .map(|_| Outcome::Applied),
                None => self
                    .renotify_last(id, &u.token, u.seq, &u.change)
                    .await
                    .map(|_| Outcome::Dropped),
            };
        }
    }

    /// A repeat of the last update applied to task `id` may come back
    /// because its notifications were not queued: queues them (again).
    async fn renotify_last(
        &self,
        id: &str,
        token: &str,
        seq: u64,
        change: &Change,
    ) -> Result<(), String> {
        let Some(rec) = self.tasks.get(id).await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        if rec.token != token || rec.seq != seq {
            return Ok(());
        }
        let Some(record) = decode(&rec).filter(|r| !r.push.is_empty()) else {
            return Ok(());
        };
        let event = apply(
            &mut record.task.clone(),
            change,
            self.cfg.history_max as usize,
        );
        self.notify(&record.task, &event, &record.push).await
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
        assert_eq!(p.prev, None);
        assert!(matches!(p.change, Change::Status(_)));
        let p = parse(&event(
            events::TYPE_ARTIFACT,
            "\"4\"",
            r#"{"artifact":{"artifactId":"a","parts":[{"text":"x"}]},"append":true}"#,
        ))
        .unwrap();
        assert_eq!(p.seq, 4);
        let chained = |prev: &str| {
            let mut v: serde_json::Value = serde_json::from_slice(&event(
                events::TYPE_STATUS,
                "\"9\"",
                r#"{"state":"TASK_STATE_WORKING"}"#,
            ))
            .unwrap();
            v["a2aprev"] = serde_json::Value::String(prev.to_string());
            parse(&serde_json::to_vec(&v).unwrap())
        };
        assert_eq!(chained("0").unwrap().prev, Some(0));
        assert_eq!(chained("8").unwrap().prev, Some(8));
        assert_eq!(
            chained("9").err().unwrap(),
            "a2aprev must be below a2aseq (9)"
        );
        assert_eq!(chained("x").err().unwrap(), "a2aprev \"x\" is not a number");
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
