//! Delivery wherever the client is (`PARTITION_OWNED_PULL`): a pulling
//! client's *home* is the instance it polls or streams on, recorded under
//! that instance's lease (`/em/bindings/<client>`). The owner of a
//! partition hands a delivery to the client's mailbox on the owner, as
//! always; a forwarder of the owner takes what arrives there for a client
//! homed elsewhere and sends it to the home's internal channel, where it
//! goes into the client's mailbox. An ack or nack of a delivery made by
//! another instance (its id names that instance's boot) is sent back to
//! that instance, which alone settles it and commits.
//!
//! Invariants: nothing is settled where it was not handed out; a forwarded
//! delivery keeps its id; a forwarding that fails loses nothing (the batch
//! is tried again, each time to the client's home of the moment, and given
//! back to its dispatchers once the client is homed nowhere else; the
//! owner's ack timeout covers what a home took and then died with).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Runtime;
use crate::cluster::{peer_post, InstanceInfo};
use crate::creator::Creator;
use crate::dispatcher::{parse_delivery_id, Policy, Settle, Settled};
use crate::error::{Result, RuntimeError};
use crate::mailbox::{MailItem, Mailbox};

/// Deliveries sent in one forwarding call.
const FORWARD_BATCH: usize = 256;

/// `POST /internal/deliveries`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedDeliveries {
    pub client_id: String,
    pub deliveries: Vec<ForwardedDelivery>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedDelivery {
    pub delivery_id: String,
    pub event: Box<RawValue>,
    /// When the event expires (ms since the epoch): the home's polls skip
    /// it after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The topic the event was read from (empty from an instance of a
    /// release before it was sent).
    #[serde(default)]
    pub topic: String,
}

/// `POST /internal/settle`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForwardedSettle {
    pub delivery_id: String,
    pub nack: bool,
    /// The creator the ack is checked against, when the gate is on.
    pub tenant: Option<String>,
    pub principal: Option<String>,
    /// Whether to check the creator (`checkOwner` on the wire, kept so
    /// that instances of either version understand each other).
    #[serde(rename = "checkOwner")]
    pub check_creator: bool,
    /// Settle another creator's delivery anyway (a permissive gate), and
    /// answer `done_foreign`.
    #[serde(default)]
    pub permissive: bool,
    /// `release` or `reject` (`nack` says the others, kept so that
    /// instances of either version understand each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    /// A reject's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ForwardedSettle {
    /// The wire form of `how` on `delivery_id`, no creator checked.
    pub fn new(delivery_id: &str, how: &Settle) -> ForwardedSettle {
        ForwardedSettle {
            delivery_id: delivery_id.to_string(),
            nack: *how == Settle::Nack,
            how: matches!(how, Settle::Release | Settle::Reject(_)).then(|| how.name().to_string()),
            reason: match how {
                Settle::Reject(r) => Some(r.to_string()),
                _ => None,
            },
            tenant: None,
            principal: None,
            check_creator: false,
            permissive: false,
        }
    }

    /// The settle it carries.
    pub fn settle(&self) -> Settle {
        match (self.how.as_deref(), &self.reason) {
            (Some("release"), _) => Settle::Release,
            (Some("reject"), reason) => {
                Settle::Reject(reason.as_deref().unwrap_or("rejected").into())
            }
            _ if self.nack => Settle::Nack,
            _ => Settle::Ack,
        }
    }
}

/// The answer to a forwarded settle.
#[derive(Debug, Serialize, Deserialize)]
pub struct SettleAnswer {
    pub settled: String,
}

fn settled_name(s: Settled) -> &'static str {
    match s {
        Settled::Done => "done",
        Settled::DoneForeign => "done_foreign",
        Settled::Unknown => "unknown",
        Settled::Foreign => "foreign",
        Settled::Fenced => "fenced",
    }
}

fn settled_from(name: &str) -> Settled {
    match name {
        "done" => Settled::Done,
        "done_foreign" => Settled::DoneForeign,
        "foreign" => Settled::Foreign,
        "fenced" => Settled::Fenced,
        _ => Settled::Unknown,
    }
}

impl Runtime {
    /// The internal channel's secret (`None` without ownership).
    pub fn cluster_secret(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.secret())
    }

    /// Takes deliveries another instance forwarded for a client homed
    /// here into its mailbox.
    pub fn accept_forwarded(&self, batch: ForwardedDeliveries) -> Result<usize> {
        let mailbox = self
            .clients
            .mailbox(&batch.client_id, false)
            .ok_or_else(|| RuntimeError::NotFound {
                code: "unknown_client",
                message: format!("client {:?} has no pull subscription", batch.client_id),
            })?;
        let n = batch.deliveries.len();
        for d in batch.deliveries {
            mailbox.push(MailItem {
                delivery_id: d.delivery_id,
                event_json: Bytes::from(d.event.get().to_string()),
                topic: Arc::from(d.topic),
                hand_out: Arc::default(),
                expires_at_ms: d.expires_at_ms,
            });
        }
        Ok(n)
    }

    /// Settles a delivery handed out by this instance (a settle forwarded
    /// by the client's home, or made here).
    pub async fn settle_here(
        &self,
        delivery_id: &str,
        how: Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Settled {
        let settled = self
            .registry
            .settle(&self.deps.boot, delivery_id, how, by, policy)
            .await;
        if settled == Settled::Fenced {
            self.metrics.fenced("ack");
        }
        settled
    }

    /// A settle of a delivery another instance handed out: sent to it.
    /// `None` when the id is not another live instance's.
    pub(super) async fn settle_elsewhere(
        &self,
        delivery_id: &str,
        how: &Settle,
        by: Option<&Creator>,
        policy: Policy,
    ) -> Option<Settled> {
        let cluster = self.cluster.as_ref()?;
        let id = parse_delivery_id(delivery_id)?;
        if id.boot() == &*self.deps.boot {
            return None;
        }
        let Some(owner) = cluster.instance_by_boot(id.boot()) else {
            // From an instance that is gone: its partitions' new owners
            // deliver the event again.
            return Some(Settled::Unknown);
        };
        let body = ForwardedSettle {
            tenant: by.and_then(|o| o.tenant.clone()),
            principal: by.and_then(|o| o.principal.clone()),
            check_creator: by.is_some(),
            permissive: policy == Policy::Permissive,
            ..ForwardedSettle::new(delivery_id, how)
        };
        let answer = peer_post(&self.internal, cluster.secret(), &owner, "/internal/settle")
            .json(&body)
            .send()
            .await
            .and_then(|r| r.error_for_status());
        let settled = match answer {
            Ok(r) => match r.json::<SettleAnswer>().await {
                Ok(a) => settled_from(&a.settled),
                Err(_) => Settled::Unknown,
            },
            Err(e) => {
                tracing::warn!(instance = %owner.id, error = %e, "cannot send an acknowledgement to the instance that handed the delivery out");
                Settled::Unknown
            }
        };
        Some(settled)
    }

    /// Records this instance as the client's home (it polls or streams
    /// here).
    pub(super) async fn bind_home(&self, client: &str) {
        if let Some(c) = &self.cluster {
            c.bind(client).await;
        }
    }
}

/// The settle answer's wire name.
pub fn settle_answer(s: Settled) -> SettleAnswer {
    SettleAnswer {
        settled: settled_name(s).to_string(),
    }
}

/// Runs the forwarders: one per pulling client homed on another instance,
/// started when the client is homed elsewhere and stopped (once its batch
/// under way is sent) when it no longer is.
pub(super) async fn forward_loop(rt: Weak<Runtime>) {
    let Some(mut bindings) = rt
        .upgrade()
        .and_then(|r| r.cluster.as_ref().map(|c| c.bindings_watch()))
    else {
        return;
    };
    let mut running: HashMap<String, (CancellationToken, JoinHandle<()>)> = HashMap::new();
    loop {
        {
            let Some(rt_now) = rt.upgrade() else { break };
            if rt_now.lifecycle.is_stopped() {
                break;
            }
            let cluster = rt_now.cluster.as_ref().expect("checked above");
            let clients = rt_now.clients.pull_mailboxes();
            running.retain(|c, (_, task)| {
                let keep = !task.is_finished() && clients.iter().any(|(k, _)| k == c);
                if !keep {
                    task.abort();
                }
                keep
            });
            for (client, mailbox) in clients {
                let elsewhere = cluster.home_of(&client).is_some();
                match running.get(&client) {
                    None if elsewhere => {
                        let stop = CancellationToken::new();
                        let task = tokio::spawn(forward(Forwarder {
                            rt: rt.clone(),
                            http: rt_now.internal.clone(),
                            secret: cluster.secret().to_string(),
                            client: client.clone(),
                            mailbox,
                            stop: stop.clone(),
                        }));
                        running.insert(client, (stop, task));
                    }
                    // Homed here now, or nowhere: the forwarder ends once
                    // its batch under way is sent or given back.
                    Some((stop, _)) if !elsewhere => stop.cancel(),
                    _ => {}
                }
            }
        }
        tokio::select! {
            r = bindings.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
}

/// How long a forwarder waits before trying a batch that failed again.
const FORWARD_RETRY: Duration = Duration::from_millis(500);

struct Forwarder {
    rt: Weak<Runtime>,
    http: reqwest::Client,
    secret: String,
    client: String,
    mailbox: Arc<Mailbox>,
    stop: CancellationToken,
}

impl Forwarder {
    /// The client's home as this instance sees it now, when it is another
    /// live instance.
    fn home(&self) -> Option<InstanceInfo> {
        self.rt.upgrade()?.cluster.as_ref()?.home_of(&self.client)
    }

    /// Sends one batch to `home`'s internal channel. An error says
    /// whether the home refused the batch (4xx: the client is no longer
    /// there) rather than failed to take it.
    async fn send(
        &self,
        items: &[MailItem],
        home: &InstanceInfo,
    ) -> std::result::Result<(), (bool, String)> {
        let spans: Vec<tracing::Span> = items
            .iter()
            .map(|i| crate::trace::forward(&i.event_json, &i.delivery_id, &self.client, &home.id))
            .collect();
        let deliveries: Vec<ForwardedDelivery> = items
            .iter()
            .filter_map(|i| {
                let event =
                    RawValue::from_string(String::from_utf8(i.event_json.to_vec()).ok()?).ok()?;
                Some(ForwardedDelivery {
                    delivery_id: i.delivery_id.clone(),
                    event,
                    expires_at_ms: i.expires_at_ms,
                    topic: i.topic.to_string(),
                })
            })
            .collect();
        let body = ForwardedDeliveries {
            client_id: self.client.clone(),
            deliveries,
        };
        let sent = peer_post(&self.http, &self.secret, home, "/internal/deliveries")
            .json(&body)
            .send()
            .await
            .and_then(|r| r.error_for_status());
        let refused = sent
            .as_ref()
            .err()
            .and_then(|e| e.status())
            .is_some_and(|s| s.is_client_error());
        let outcome = sent.map(drop).map_err(|e| e.to_string());
        for span in &spans {
            crate::trace::forwarded(span, &outcome);
        }
        outcome.map_err(|e| (refused, e))
    }

    /// Gives a batch back to the dispatchers that handed it out (each
    /// delivery counts a failed attempt and is offered again): what the
    /// client was handed up to the batch's poll, so that what a stream of
    /// the client here took since stays with it.
    async fn give_back(&self, items: &[MailItem], why: &str) {
        let taken = items.iter().filter_map(|i| i.hand_out.taken_at()).max();
        if let Some(rt) = self.rt.upgrade() {
            tracing::info!(client = %self.client, deliveries = items.len(), "giving back forwarded deliveries: {why}");
            let before = taken.unwrap_or_else(tokio::time::Instant::now);
            rt.release(&self.client, before, false).await;
        }
    }
}

/// Sends what arrives in the client's mailbox to its home. A batch that
/// cannot be sent is tried again, each time to the home of that moment
/// (a client whose instance died is sent to where it connects next);
/// once the client is homed here, or nowhere, the batch goes back to the
/// dispatchers that handed it out, which offer it again.
async fn forward(f: Forwarder) {
    loop {
        let items = tokio::select! {
            items = f.mailbox.poll(FORWARD_BATCH, Duration::from_secs(1)) => items,
            _ = f.stop.cancelled() => return,
        };
        if items.is_empty() {
            if f.mailbox.is_closed() {
                return;
            }
            continue;
        }
        let mut failures = 0u32;
        loop {
            let Some(home) = f.home() else {
                f.give_back(&items, "the client is no longer homed elsewhere")
                    .await;
                break;
            };
            match f.send(&items, &home).await {
                Ok(()) => break,
                Err((refused, e)) => {
                    if failures == 0 {
                        tracing::warn!(client = %f.client, instance = %home.id, error = %e, "cannot forward deliveries to the client's instance");
                    }
                    failures += 1;
                    if refused {
                        // After a pause, so that a home refusing
                        // every batch does not spin.
                        tokio::time::sleep(FORWARD_RETRY).await;
                        f.give_back(&items, "the client's instance refused them")
                            .await;
                        break;
                    }
                }
            }
            if f.mailbox.is_closed() {
                // Shutting down: the owner's ack timeout covers them.
                return;
            }
            tokio::time::sleep(FORWARD_RETRY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through_the_wire(how: Settle) -> Settle {
        let json = serde_json::to_string(&ForwardedSettle::new("d", &how)).unwrap();
        serde_json::from_str::<ForwardedSettle>(&json)
            .unwrap()
            .settle()
    }

    #[test]
    fn every_settle_crosses_to_the_instance_that_handed_the_delivery_out() {
        for how in [
            Settle::Ack,
            Settle::Nack,
            Settle::Release,
            Settle::Reject("forbidden".into()),
        ] {
            assert_eq!(through_the_wire(how.clone()), how);
        }
        // From an instance that knows only ack and nack.
        let old: ForwardedSettle = serde_json::from_str(
            r#"{"deliveryId":"d","nack":true,"tenant":null,"principal":null,"checkOwner":false}"#,
        )
        .unwrap();
        assert_eq!(old.settle(), Settle::Nack);
    }
}
