//! Request-reply across instances (`PARTITION_OWNED_PULL`): a request
//! waits on the instance it was made on, its event is handed out by the
//! owner of its partition (perhaps to a client homed on a third
//! instance), and the reply arrives wherever the responder is connected.
//!
//! The instance a reply arrives at, when no request waits there, asks the
//! others (once the gate has authenticated the caller) over the internal
//! channel (`POST /internal/requests/find`): the
//! one where the request waits answers with its topic and the clients it
//! handed the request to, and every instance adds the clients it handed
//! the request to ([`super::requests`] remembers those). The reply is
//! checked there exactly as a local one (the gate on the request's topic,
//! the replier owning one of those clients), then sent to the waiting
//! instance (`POST /internal/requests/reply`).
//!
//! Invariants: a reply is checked where it arrives and completes only
//! where its request waits; an instance that cannot be reached counts as
//! not having the request (the requester times out, nothing else breaks).

use std::collections::BTreeSet;
use std::time::Duration;

use eventmesh_core::CloudEvent;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::requests::PendingRequest;
use super::Runtime;
use crate::cluster::peer_post;
use crate::error::{Result, RuntimeError};

/// Bound on one lookup of a request on another instance.
const FIND_TIMEOUT: Duration = Duration::from_secs(2);

/// `POST /internal/requests/find`.
#[derive(Debug, Serialize, Deserialize)]
pub struct FindRequest {
    pub correlation: String,
}

/// One instance's answer to a lookup.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FoundRequest {
    /// The request's topic, when it waits on the answering instance.
    pub topic: Option<String>,
    /// Clients the answering instance handed the request to.
    pub holders: Vec<String>,
    /// The answering instance's boot id.
    pub boot: String,
}

/// The answer to `POST /internal/requests/reply`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplyAnswer {
    pub completed: bool,
}

impl Runtime {
    /// Whether other instances may hold requests (a cluster with
    /// ownership).
    pub fn in_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The request waiting for `correlation` on another instance, with
    /// every client it was handed to.
    pub async fn find_request(&self, correlation: &str) -> Option<PendingRequest> {
        let answers = self.find_elsewhere(correlation).await;
        let waiting = answers.iter().find(|a| a.topic.is_some())?;
        Some(PendingRequest {
            topic: waiting.topic.clone().expect("found by its topic"),
            holders: self.holders(correlation, &answers),
            waiting_on: Some(waiting.boot.clone()),
        })
    }

    /// Clients other instances (and this one) handed the request to.
    pub(super) async fn holders_elsewhere(&self, correlation: &str) -> Vec<String> {
        let answers = self.find_elsewhere(correlation).await;
        self.holders(correlation, &answers)
    }

    /// The clients this instance and the answering ones handed the request
    /// to, each once.
    fn holders(&self, correlation: &str, answers: &[FoundRequest]) -> Vec<String> {
        let mut holders: BTreeSet<String> = self.requests.seen(correlation).into_iter().collect();
        holders.extend(answers.iter().flat_map(|a| a.holders.iter().cloned()));
        holders.into_iter().collect()
    }

    /// This instance's answer to a lookup.
    pub fn find_here(&self, correlation: &str) -> FoundRequest {
        let waiting = self.requests.pending(correlation);
        FoundRequest {
            topic: waiting.as_ref().map(|p| p.topic.clone()),
            holders: match waiting {
                Some(p) => p.holders,
                None => self.requests.seen(correlation),
            },
            boot: self.deps.boot.to_string(),
        }
    }

    /// Completes a request waiting here with a reply checked on the
    /// instance it arrived at; false when none waits any more.
    pub fn complete_here(&self, reply: CloudEvent) -> bool {
        super::requests::correlation_of(&reply).is_some_and(|c| self.requests.complete(&c, reply))
    }

    /// Sends a checked reply to the instance where its request waits.
    pub(super) async fn complete_elsewhere(&self, boot: &str, reply: &CloudEvent) -> Result<bool> {
        let unreachable = |why: String| {
            RuntimeError::Peer(format!(
                "cannot send the reply to the instance where its request waits: {why}"
            ))
        };
        let cluster = self
            .cluster
            .as_ref()
            .ok_or_else(|| unreachable("not in a cluster".into()))?;
        let Some(instance) = cluster.instance_by_boot(boot) else {
            // Gone with its requests.
            return Ok(false);
        };
        let answer = peer_post(
            &self.internal,
            cluster.secret(),
            &instance,
            "/internal/requests/reply",
        )
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(reply.to_json())
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| unreachable(e.to_string()))?;
        let answer: ReplyAnswer = answer
            .json()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        Ok(answer.completed)
    }

    /// Asks every other live instance about `correlation`; one that does
    /// not answer in time is left out.
    async fn find_elsewhere(&self, correlation: &str) -> Vec<FoundRequest> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        let mut asks = JoinSet::new();
        for instance in cluster.others() {
            let call = peer_post(
                &self.internal,
                cluster.secret(),
                &instance,
                "/internal/requests/find",
            )
            .timeout(FIND_TIMEOUT)
            .json(&FindRequest {
                correlation: correlation.to_string(),
            });
            asks.spawn(async move {
                let r = call.send().await.and_then(|r| r.error_for_status());
                match r {
                    Ok(r) => r.json::<FoundRequest>().await.ok(),
                    Err(e) => {
                        tracing::debug!(instance = %instance.id, error = %e, "cannot look a request up on another instance");
                        None
                    }
                }
            });
        }
        let mut found = Vec::new();
        while let Some(r) = asks.join_next().await {
            if let Ok(Some(a)) = r {
                found.push(a);
            }
        }
        found
    }
}
