//! Subscriptions and what they deliver: SUBSCRIBE and UNSUBSCRIBE as the
//! mesh's subscriptions of the client (a filter's topic or patterns, in the
//! session's group), retained messages sent at subscribe, and deliveries
//! from the client's mailbox at the QoS its filters granted.

use eventmesh_core::CloudEvent;
use eventmesh_runtime::{PolledDelivery, SubscribeRequest};
use eventmesh_security::Operation;
use eventmesh_state::{DeliveryMode, MqttSubscription};

use crate::binding;
use crate::codec::{
    reason, Packet, Protocol, Publish, QoS, Subscribe, SubscribeFilter, Unsubscribe,
};
use crate::conn::{reason_of, Conn};
use crate::topic;

impl Conn {
    pub(crate) async fn subscribe(&mut self, s: Subscribe) {
        let mut reasons = Vec::with_capacity(s.filters.len());
        let mut retained = Vec::new();
        for f in &s.filters {
            let code = self.subscribe_one(f, s.id).await;
            if code < 0x80 {
                let existed = self.subscription(&f.filter).is_some();
                let keep = MqttSubscription {
                    filter: f.filter.clone(),
                    qos: code,
                    no_local: f.no_local,
                    retain_as_published: f.retain_as_published,
                    id: s.id,
                };
                self.session.subscriptions.retain(|x| x.filter != f.filter);
                self.session.subscriptions.push(keep);
                // A shared subscription gets no retained messages.
                let shared = f.filter.starts_with(topic::SHARE_PREFIX);
                let send_retained = !shared
                    && match f.retain_handling {
                        0 => true,
                        1 => !existed,
                        _ => false,
                    };
                if send_retained {
                    retained.push((f.filter.clone(), code));
                }
            }
            reasons.push(code);
        }
        if self.closing.is_some() {
            // A protocol error ended the connection: no SUBACK.
            return;
        }
        if reasons.iter().any(|c| *c < 0x80) {
            self.attach_stream().await;
            self.store_session().await;
        }
        self.send(&Packet::SubAck {
            pkid: s.pkid,
            reasons,
            reason_string: None,
        });
        for (filter, granted) in retained {
            self.send_retained(&filter, granted).await;
        }
    }

    /// One filter: the granted QoS, or the reason it was refused.
    async fn subscribe_one(&mut self, f: &SubscribeFilter, _id: Option<u32>) -> u8 {
        if f.no_local && f.filter.starts_with(topic::SHARE_PREFIX) {
            self.disconnect(
                reason::PROTOCOL_ERROR,
                "No Local on a shared subscription is a protocol error",
            );
            return reason::PROTOCOL_ERROR;
        }
        let pairs = match self.mesh_subscriptions(&f.filter) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(client = %self.client_id, "MQTT: filter refused: {e}");
                return reason::TOPIC_FILTER_INVALID;
            }
        };
        for (group, t) in pairs {
            let req = SubscribeRequest {
                client_id: self.mesh_client.clone(),
                topic: t,
                group: Some(group),
                mode: Some(DeliveryMode::LoadBalance),
                ..Default::default()
            };
            if let Err(e) = self.broker.api.subscribe(&self.caller, req, b"").await {
                tracing::debug!(client = %self.client_id, filter = %f.filter, error = %e.message, "MQTT: subscription refused");
                return match reason_of(&e) {
                    r if r == reason::IMPLEMENTATION_SPECIFIC => reason::TOPIC_FILTER_INVALID,
                    r => r,
                };
            }
        }
        f.qos as u8
    }

    pub(crate) async fn unsubscribe(&mut self, u: Unsubscribe) {
        let mut reasons = Vec::with_capacity(u.filters.len());
        for filter in &u.filters {
            if self.subscription(filter).is_none() {
                reasons.push(reason::NO_SUBSCRIPTION_EXISTED);
                continue;
            }
            self.session.subscriptions.retain(|s| &s.filter != filter);
            // The mesh subscriptions no remaining filter needs.
            let still: Vec<(String, String)> = self
                .session
                .subscriptions
                .iter()
                .filter_map(|s| self.mesh_subscriptions(&s.filter).ok())
                .flatten()
                .collect();
            let mut code = reason::SUCCESS;
            for (group, t) in self.mesh_subscriptions(filter).unwrap_or_default() {
                if still.contains(&(group.clone(), t.clone())) {
                    continue;
                }
                if let Err(e) = self
                    .broker
                    .api
                    .unsubscribe_in(&self.caller, &self.mesh_client, Some(&t), Some(&group), b"")
                    .await
                {
                    code = reason_of(&e);
                }
            }
            reasons.push(code);
        }
        self.store_session().await;
        self.send(&Packet::UnsubAck {
            pkid: u.pkid,
            reasons,
            reason_string: None,
        });
    }

    /// The mesh subscriptions (group, topic or pattern) a filter makes: in
    /// the session's own group, or for a shared subscription in the
    /// share's group (`mqtt.share.<name>`), whose members the mesh
    /// balances its messages over.
    fn mesh_subscriptions(&self, filter: &str) -> Result<Vec<(String, String)>, topic::TopicError> {
        let (group, inner) = match topic::parse_shared(filter)? {
            Some((name, inner)) => (format!("mqtt.share.{name}"), inner),
            None => (self.session.group.clone(), filter),
        };
        Ok(topic::filter_to_mesh(inner)?
            .into_iter()
            .map(|t| (group.clone(), t))
            .collect())
    }

    /// Writes the session record of a persistent session.
    async fn store_session(&mut self) {
        if !self.persistent {
            return;
        }
        if let Err(e) = self.broker.store.put_session(&self.session).await {
            tracing::warn!(client = %self.client_id, error = %e, "MQTT: cannot store the session");
        }
    }

    /// The retained messages a new subscription matches, each checked
    /// against the gate for its topic.
    async fn send_retained(&mut self, filter: &str, granted: u8) {
        let found = match self
            .broker
            .store
            .retained(topic::literal_prefix(filter))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(client = %self.client_id, error = %e, "MQTT: cannot read retained messages");
                return;
            }
        };
        let now = eventmesh_core::time::now_ms();
        for r in found {
            if !topic::matches(filter, &r.topic) || r.expires_at_ms.is_some_and(|at| at <= now) {
                continue;
            }
            let Ok(mesh) = topic::to_mesh(&r.topic) else {
                continue;
            };
            if self
                .broker
                .api
                .admit_as(&self.caller, Operation::Subscribe, &mesh)
                .is_err()
            {
                continue;
            }
            let qos = QoS::from_u8(granted.min(r.qos)).unwrap_or(QoS::AtMostOnce);
            match binding::publish_of(r.event.get().as_bytes(), &mesh, self.protocol, qos, now) {
                Ok(mut p) => {
                    p.retain = true;
                    if qos != QoS::AtMostOnce {
                        // Retained copies are not the mesh's deliveries:
                        // nothing to settle when they are acknowledged.
                        p.pkid = self.next_free_pkid();
                        self.outflight.insert(p.pkid, String::new());
                    }
                    self.send_publish(p);
                }
                Err(e) => {
                    tracing::warn!(topic = %r.topic, error = %e, "MQTT: unreadable retained message")
                }
            }
        }
    }

    /// Deliveries from the mailbox.
    pub(crate) async fn deliver(&mut self, got: Vec<PolledDelivery>) {
        if got.is_empty() {
            if self.stream.as_ref().is_some_and(|s| s.is_closed()) {
                self.stream = None;
            }
            return;
        }
        let now = eventmesh_core::time::now_ms();
        for d in got {
            let event = match CloudEvent::from_json_slice(&d.event_json) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(delivery = %d.delivery_id, error = %e, "MQTT: undeliverable event");
                    self.broker.api.auto_ack(&d.delivery_id).await;
                    continue;
                }
            };
            let name = topic::from_mesh(&d.topic);
            let own = self.own.contains(&event);
            let Some((granted, ids)) = self.granted(&name, own) else {
                // No filter wants it (unsubscribed meanwhile, or only No
                // Local ones and the client published it).
                self.broker.api.auto_ack(&d.delivery_id).await;
                continue;
            };
            let qos = QoS::from_u8(granted).unwrap_or(QoS::AtMostOnce);
            let mut p =
                binding::publish_of_event(&event, &d.event_json, &d.topic, self.protocol, qos, now);
            if self.protocol == Protocol::V5 {
                p.props.subscription_ids = ids;
            }
            if qos == QoS::AtMostOnce {
                self.send_publish(p);
                self.broker.api.auto_ack(&d.delivery_id).await;
            } else {
                p.pkid = self.next_free_pkid();
                let pkid = p.pkid;
                if self.send_publish(p) {
                    self.outflight.insert(pkid, d.delivery_id);
                } else {
                    self.broker.api.auto_ack(&d.delivery_id).await;
                }
            }
        }
    }

    /// Queues a publish unless it is larger than the client takes (then
    /// it is dropped, as MQTT 5 says); false when dropped.
    fn send_publish(&mut self, p: Publish) -> bool {
        let before = self.out.len();
        let n = self.send(&Packet::Publish(p));
        if n > self.client_max_packet {
            self.out.truncate(before);
            tracing::debug!(client = %self.client_id, bytes = n, "MQTT: a delivery larger than the client's maximum packet size was dropped");
            return false;
        }
        true
    }

    /// A packet id no outbound message uses.
    fn next_free_pkid(&mut self) -> u16 {
        let mut id = self.next_pkid;
        for _ in 0..=u16::MAX {
            id = self.next_pkid;
            self.next_pkid = self.next_pkid.checked_add(1).unwrap_or(1);
            if !self.outflight.contains_key(&id) && !self.released.contains(&id) {
                break;
            }
        }
        id
    }
}
