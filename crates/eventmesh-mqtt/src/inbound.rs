//! Packets from the client: publishes into the mesh (durable before their
//! PUBACK or PUBREC; retained messages kept), the QoS 2 release, and the
//! acknowledgements of deliveries.

use std::sync::Arc;

use eventmesh_api::{ApiError, Caller};
use eventmesh_core::CloudEvent;
use eventmesh_runtime::Settle;
use eventmesh_state::Retained;
use futures::FutureExt;

use crate::binding;
use crate::broker::Broker;
use crate::codec::{reason, Ack, Packet, Protocol, Publish, QoS, Will};
use crate::conn::{reason_of, Conn, End};

/// Work that finished off the connection's loop.
pub(crate) enum Done {
    /// A publish became durable (or failed): answer it.
    Published {
        pkid: u16,
        qos: QoS,
        result: Result<(), (u8, String)>,
    },
    /// A delivery was settled in the mesh.
    Settled,
}

fn ack(pkid: u16, reason: u8, text: Option<String>) -> Ack {
    Ack {
        pkid,
        reason,
        reason_string: text,
    }
}

impl Conn {
    pub(crate) async fn handle(&mut self, p: Packet) {
        match p {
            Packet::Publish(p) => self.publish(p).await,
            Packet::PubRel(a) => {
                let found = self.received.remove(&a.pkid);
                let code = if found {
                    reason::SUCCESS
                } else {
                    reason::PACKET_ID_NOT_FOUND
                };
                self.send(&Packet::PubComp(ack(a.pkid, code, None)));
            }
            Packet::PubAck(a) => {
                if let Some(id) = self.outflight.remove(&a.pkid) {
                    self.settle(id);
                }
            }
            Packet::PubRec(a) => {
                if let Some(id) = self.outflight.remove(&a.pkid) {
                    // Received (or refused for good): the mesh is done
                    // with it either way; the release completes QoS 2.
                    self.settle(id);
                    if a.reason < 0x80 {
                        self.released.insert(a.pkid);
                        self.send(&Packet::PubRel(ack(a.pkid, reason::SUCCESS, None)));
                    }
                } else {
                    self.send(&Packet::PubRel(ack(
                        a.pkid,
                        reason::PACKET_ID_NOT_FOUND,
                        None,
                    )));
                }
            }
            Packet::PubComp(a) => {
                self.released.remove(&a.pkid);
            }
            Packet::Subscribe(s) => self.subscribe(s).await,
            Packet::Unsubscribe(u) => self.unsubscribe(u).await,
            Packet::PingReq => {
                self.send(&Packet::PingResp);
            }
            Packet::Disconnect(d) => {
                if let Some(s) = d.session_expiry {
                    if self.session.expiry_s == 0 && s > 0 {
                        self.disconnect(
                            reason::PROTOCOL_ERROR,
                            "a session that ends with its connection cannot be given an expiry at DISCONNECT",
                        );
                        return;
                    }
                    self.session.expiry_s = s;
                    self.persistent = s > 0;
                }
                self.closing = Some(if d.reason == reason::DISCONNECT_WITH_WILL {
                    End::WithWill
                } else {
                    End::Normal
                });
            }
            Packet::Connect(_) => self.disconnect(reason::PROTOCOL_ERROR, "a second CONNECT"),
            Packet::Auth { .. } => self.disconnect(
                reason::PROTOCOL_ERROR,
                "AUTH without an authentication method agreed at CONNECT",
            ),
            Packet::ConnAck { .. }
            | Packet::SubAck { .. }
            | Packet::UnsubAck { .. }
            | Packet::PingResp => {
                self.disconnect(reason::PROTOCOL_ERROR, "a packet only a server sends")
            }
        }
    }

    /// Acks a delivery in the mesh, off the loop (a retained copy, with
    /// no delivery id, has nothing to settle).
    fn settle(&mut self, delivery_id: String) {
        if delivery_id.is_empty() {
            return;
        }
        let (api, caller) = (self.broker.api.clone(), self.caller.clone());
        self.under_way.push(
            async move {
                if let Err(e) = api.settle(&caller, &delivery_id, Settle::Ack, b"").await {
                    tracing::debug!(delivery_id, error = %e.message, "MQTT: acknowledgement not taken");
                }
                Done::Settled
            }
            .boxed(),
        );
    }

    /// A refused publish: the reason code in its PUBACK or PUBREC (MQTT
    /// 5), or the connection closed (QoS 0, and MQTT 3.1.1, which has no
    /// negative acknowledgement).
    fn refuse_publish(&mut self, pkid: u16, qos: QoS, code: u8, text: String) {
        tracing::debug!(client = %self.client_id, code, "MQTT: publish refused: {text}");
        match (self.protocol, qos) {
            (Protocol::V5, QoS::AtLeastOnce) => {
                self.send(&Packet::PubAck(ack(pkid, code, Some(text))));
            }
            (Protocol::V5, QoS::ExactlyOnce) => {
                self.send(&Packet::PubRec(ack(pkid, code, Some(text))));
            }
            _ => self.disconnect(code, text),
        }
    }

    async fn publish(&mut self, mut p: Publish) {
        let (pkid, qos) = (p.pkid, p.qos);
        if qos != QoS::AtMostOnce {
            if qos == QoS::ExactlyOnce && self.received.contains(&pkid) {
                // A resent QoS 2 publish already taken: answered again,
                // not published twice.
                self.send(&Packet::PubRec(ack(pkid, reason::SUCCESS, None)));
                return;
            }
            if qos == QoS::ExactlyOnce && self.receiving.contains(&pkid) {
                // Resent while the first copy is being appended: that
                // one's PUBREC answers both.
                return;
            }
            if self.inbound >= usize::from(self.broker.settings.receive_maximum) {
                self.disconnect(
                    reason::RECEIVE_MAXIMUM_EXCEEDED,
                    "more unacknowledged QoS 1 and 2 publishes than the receive maximum",
                );
                return;
            }
        }
        if let Some(alias) = p.props.topic_alias {
            if alias > self.broker.settings.topic_alias_max {
                self.disconnect(
                    reason::TOPIC_ALIAS_INVALID,
                    format!("topic alias {alias} is above the maximum announced"),
                );
                return;
            }
            if p.topic.is_empty() {
                match self.aliases.get(&alias) {
                    Some(t) => p.topic = t.clone(),
                    None => {
                        self.disconnect(
                            reason::PROTOCOL_ERROR,
                            format!("topic alias {alias} was never set"),
                        );
                        return;
                    }
                }
            } else {
                self.aliases.insert(alias, p.topic.clone());
            }
        }
        if p.topic == binding::REPLY_TOPIC {
            return self.reply(p).await;
        }
        let topic = match crate::topic::to_mesh(&p.topic) {
            Ok(t) => t,
            Err(e) => return self.refuse_publish(pkid, qos, reason::TOPIC_NAME_INVALID, e.0),
        };
        let now = eventmesh_core::time::now_ms();
        let event = match binding::event_of(&p, self.protocol, &self.client_id, now) {
            Ok(e) => e,
            Err(r) => return self.refuse_publish(pkid, qos, r.reason, r.message),
        };
        if self.session.subscriptions.iter().any(|s| s.no_local) {
            self.own.insert(&event);
        }
        let retained = p.retain.then(|| (p.topic.clone(), p.payload.is_empty()));
        let queued = self
            .broker
            .api
            .submit(&self.caller, Some(topic), vec![event.clone()], &p.payload)
            .await;
        let queued = match queued {
            Ok(q) => q,
            Err(e) => return self.refuse_publish(pkid, qos, reason_of(&e), e.message),
        };
        self.taking(pkid, qos);
        let broker = self.broker.clone();
        let expires_at_ms = p.props.message_expiry.map(|s| now + u64::from(s) * 1000);
        self.under_way.push(
            async move {
                let result = match queued.durable().await {
                    Ok(_) => match retained {
                        Some((name, clear)) => {
                            retain(&broker, name, clear, qos, &event, expires_at_ms).await
                        }
                        None => Ok(()),
                    },
                    Err(e) => Err((reason_of(&e), e.message)),
                };
                Done::Published { pkid, qos, result }
            }
            .boxed(),
        );
    }

    /// A publish to [`binding::REPLY_TOPIC`]: the reply to a request
    /// waiting in the mesh, found by its correlation data (MQTT 5) or the
    /// `correlationid` of the event it carries. Answered like a publish:
    /// success once the request has its reply, else the reason (0x83
    /// with the text for a request that is not waiting, 0x87 for one the
    /// client was not handed).
    async fn reply(&mut self, p: Publish) {
        let (pkid, qos) = (p.pkid, p.qos);
        let now = eventmesh_core::time::now_ms();
        let event = match binding::event_of(&p, self.protocol, &self.client_id, now) {
            Ok(e) => e,
            Err(r) => return self.refuse_publish(pkid, qos, r.reason, r.message),
        };
        if event.extension(binding::CORRELATION).is_none() {
            return self.refuse_publish(
                pkid,
                qos,
                reason::IMPLEMENTATION_SPECIFIC,
                format!(
                    "a publish to {} is a reply and needs the correlation data of its request",
                    binding::REPLY_TOPIC
                ),
            );
        }
        self.taking(pkid, qos);
        let (api, caller) = (self.broker.api.clone(), self.caller.clone());
        self.under_way.push(
            async move {
                let result = api
                    .reply(&caller, event, &p.payload)
                    .await
                    .map_err(|e| (reason_of(&e), e.message));
                Done::Published { pkid, qos, result }
            }
            .boxed(),
        );
    }

    /// Counts a QoS 1 or 2 publish as unanswered until it completes (a
    /// QoS 2 one also as being received, for a resent copy meanwhile).
    fn taking(&mut self, pkid: u16, qos: QoS) {
        if qos != QoS::AtMostOnce {
            self.inbound += 1;
        }
        if qos == QoS::ExactlyOnce {
            self.receiving.insert(pkid);
        }
    }

    pub(crate) async fn completed(&mut self, done: Done) {
        let Done::Published { pkid, qos, result } = done else {
            return;
        };
        if qos == QoS::AtMostOnce {
            if let Err((code, text)) = result {
                tracing::debug!(client = %self.client_id, code, "MQTT: QoS 0 publish failed: {text}");
            }
            return;
        }
        self.inbound = self.inbound.saturating_sub(1);
        self.receiving.remove(&pkid);
        match result {
            Ok(()) if qos == QoS::AtLeastOnce => {
                self.send(&Packet::PubAck(ack(pkid, reason::SUCCESS, None)));
            }
            Ok(()) => {
                self.received.insert(pkid);
                self.send(&Packet::PubRec(ack(pkid, reason::SUCCESS, None)));
            }
            Err((code, text)) => self.refuse_publish(pkid, qos, code, text),
        }
    }
}

/// Keeps (or, for an empty payload, clears) the retained message of the
/// MQTT topic `name`.
async fn retain(
    broker: &Broker,
    name: String,
    clear: bool,
    qos: QoS,
    event: &CloudEvent,
    expires_at_ms: Option<u64>,
) -> Result<(), (u8, String)> {
    let stored = if clear {
        broker.store.remove_retained(&name).await.map(drop)
    } else {
        let json = String::from_utf8(event.to_json()).unwrap_or_default();
        let raw = serde_json::value::RawValue::from_string(json)
            .map_err(|e| (reason::UNSPECIFIED, e.to_string()))?;
        broker
            .store
            .put_retained(&Retained {
                topic: name,
                qos: qos as u8,
                event: raw,
                stored_ms: eventmesh_core::time::now_ms(),
                expires_at_ms,
            })
            .await
    };
    stored.map_err(|e| {
        (
            reason::UNSPECIFIED,
            format!("published, but the retained message was not stored: {e}"),
        )
    })
}

/// Publishes a connection's will as its caller: at once, or after its
/// delay (MQTT 5) unless the client connected again meanwhile. The delay
/// ends early when the session does (`session_expiry_s` after the
/// disconnect; 0 for a session that ended with the connection).
pub(crate) fn publish_will(
    broker: &Arc<Broker>,
    caller: &Arc<Caller>,
    client_id: &str,
    protocol: Protocol,
    will: Will,
    session_expiry_s: u32,
) {
    let (broker, caller, client) = (broker.clone(), caller.clone(), client_id.to_string());
    tokio::spawn(async move {
        let delay_s = will.delay.min(session_expiry_s);
        if delay_s > 0 {
            let delay = std::time::Duration::from_secs(u64::from(delay_s));
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = broker.api.shutdown().cancelled() => return,
            }
            if broker.is_connected(&client) {
                return;
            }
        }
        let p = Publish {
            dup: false,
            qos: will.qos,
            retain: will.retain,
            topic: will.topic,
            pkid: 0,
            payload: will.payload,
            props: will.props,
        };
        if let Err(e) = publish_once(&broker, &caller, &client, protocol, p).await {
            tracing::info!(client, error = %e.message, "MQTT: the will was not published");
        }
    });
}

/// One publish made outside a connection's loop (a will).
async fn publish_once(
    broker: &Broker,
    caller: &Caller,
    client: &str,
    protocol: Protocol,
    p: Publish,
) -> Result<(), ApiError> {
    let topic =
        crate::topic::to_mesh(&p.topic).map_err(|e| ApiError::bad_request("invalid_topic", e.0))?;
    let now = eventmesh_core::time::now_ms();
    let event = binding::event_of(&p, protocol, client, now)
        .map_err(|r| ApiError::bad_request("invalid_event", r.message))?;
    broker
        .api
        .publish(caller, Some(topic), vec![event.clone()], &p.payload)
        .await?;
    if p.retain {
        let expires = p.props.message_expiry.map(|s| now + u64::from(s) * 1000);
        retain(
            broker,
            p.topic,
            p.payload.is_empty(),
            p.qos,
            &event,
            expires,
        )
        .await
        .map_err(|(_, m)| ApiError::bad_request("retain_failed", m))?;
    }
    Ok(())
}
