//! One MQTT connection: the CONNECT handshake (the gate, the session
//! taken over or resumed), then packets in both directions until the
//! client disconnects, goes silent past its keep-alive, breaks the
//! protocol, is taken over, or the server shuts down; then the will and
//! the session's end or its keeping.
//!
//! Everything a packet asks of the mesh is an operation of
//! [`eventmesh_api::Api`] made as the connection's caller (transport
//! `mqtt`), checked by the gate: a publish is appended durably before its
//! PUBACK or PUBREC, a subscription is the mesh's own subscription of the
//! client `mqtt.<client id>`, deliveries come from that client's mailbox
//! and are settled by PUBACK (QoS 1) or PUBREC (QoS 2).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use eventmesh_api::{ApiError, Caller, StatusCode};
use eventmesh_runtime::StreamGuard;
use eventmesh_security::{Identity, Transport};
use eventmesh_state::{MqttSession, MqttSubscription};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::broker::{Broker, Registration};
use crate::codec::{self, reason, ConnAckProps, Connect, Disconnect, Packet, Protocol, Will};
use crate::inbound::Done;

/// How long writing one batch of packets may take before the peer is
/// taken for gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest client identifier taken (the mesh client id adds `mqtt.`).
const MAX_CLIENT_ID: usize = 100;

/// The mesh client id of an MQTT client.
pub fn mesh_client(client_id: &str) -> String {
    format!("mqtt.{client_id}")
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// DISCONNECT with reason 0: no will.
    Normal,
    /// DISCONNECT with reason 0x04: the will goes out.
    WithWill,
    /// Anything else (lost, timed out, refused): the will goes out.
    Abnormal,
}

pub(crate) struct Conn {
    pub(crate) broker: Arc<Broker>,
    pub(crate) protocol: Protocol,
    pub(crate) client_id: String,
    pub(crate) mesh_client: String,
    pub(crate) caller: Arc<Caller>,
    pub(crate) session: MqttSession,
    /// Whether the session outlives the connection (expiry above zero).
    pub(crate) persistent: bool,
    pub(crate) will: Option<Will>,
    pub(crate) out: BytesMut,
    /// The largest packet the client takes.
    pub(crate) client_max_packet: usize,
    /// How many QoS 1 and 2 deliveries may be unacknowledged.
    pub(crate) window: usize,
    /// Outbound QoS 1 and 2 deliveries by packet id: the delivery id.
    pub(crate) outflight: HashMap<u16, String>,
    /// Outbound QoS 2 packet ids released (PUBREL sent), waiting for PUBCOMP.
    pub(crate) released: BTreeSet<u16>,
    pub(crate) next_pkid: u16,
    /// Inbound QoS 2 packet ids answered with PUBREC, not yet released.
    pub(crate) received: BTreeSet<u16>,
    /// Inbound QoS 2 packet ids being appended, not yet answered.
    pub(crate) receiving: BTreeSet<u16>,
    /// Inbound QoS 1 and 2 publishes not yet answered.
    pub(crate) inbound: usize,
    /// Topic aliases the client set.
    pub(crate) aliases: HashMap<u16, String>,
    pub(crate) stream: Option<StreamGuard>,
    pub(crate) under_way: FuturesUnordered<futures::future::BoxFuture<'static, Done>>,
    /// Set to close the connection after the packets queued are written.
    pub(crate) closing: Option<End>,
    /// What it published, for its No Local subscriptions.
    pub(crate) own: crate::own::Own,
    /// The gate's session: holds the tenant's connection slot while the
    /// connection lives.
    _gate: eventmesh_api::Session,
}

/// Serves one accepted connection until it ends.
pub async fn serve<R, W>(
    broker: Arc<Broker>,
    mut reader: R,
    mut writer: W,
    remote: SocketAddr,
    certificate: Option<Arc<Identity>>,
    accepted: Instant,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let settings = broker.settings.clone();
    let mut buf = BytesMut::with_capacity(4096);
    let deadline = accepted + settings.connect_timeout;
    let connect = loop {
        match codec::decode(&mut buf, None, settings.max_packet_bytes) {
            Ok(Some(Packet::Connect(c))) => {
                broker.counters.connect_received();
                break c;
            }
            Ok(Some(_)) => {
                tracing::debug!(%remote, "MQTT: the first packet was not CONNECT");
                return;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(%remote, error = %e, "MQTT: bad CONNECT");
                if e.is_unsupported_version() {
                    let mut out = BytesMut::new();
                    let nack = connack(
                        false,
                        reason::UNSUPPORTED_PROTOCOL_VERSION,
                        ConnAckProps::default(),
                    );
                    broker.counters.sent(&nack);
                    codec::encode(&nack, Protocol::V311, &mut out);
                    let _ = write(&mut writer, &mut out).await;
                }
                return;
            }
        }
        match tokio::time::timeout_at(deadline, reader.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    };
    let mut caller = Caller::new(Transport::Mqtt, credential_of(&connect), Some(remote));
    caller.certificate = certificate;
    let (mut conn, registration, keep_alive) =
        match Conn::open(broker.clone(), *connect, caller).await {
            Ok(opened) => opened,
            Err((protocol, nack)) => {
                broker.counters.sent(&nack);
                let mut out = BytesMut::new();
                codec::encode(&nack, protocol, &mut out);
                let _ = write(&mut writer, &mut out).await;
                return;
            }
        };
    let end = conn
        .run(&mut reader, &mut writer, buf, &registration, keep_alive)
        .await;
    conn.finish(end, &registration).await;
    let _ = writer.shutdown().await;
    drop(registration);
}

/// The gate credential: the password (a token or a JWT), else nothing
/// (the username is not checked; a client certificate may name the
/// caller).
fn credential_of(c: &Connect) -> Option<String> {
    c.password
        .as_ref()
        .and_then(|p| String::from_utf8(p.to_vec()).ok())
        .filter(|p| !p.is_empty())
}

pub(crate) fn connack(session_present: bool, reason: u8, props: ConnAckProps) -> Packet {
    Packet::ConnAck {
        session_present,
        reason,
        props: Box::new(props),
    }
}

fn refusal(reason: u8, text: String) -> Packet {
    connack(
        false,
        reason,
        ConnAckProps {
            reason_string: Some(text),
            ..ConnAckProps::default()
        },
    )
}

/// The reason code of a refused operation.
pub(crate) fn reason_of(e: &ApiError) -> u8 {
    match e.status {
        StatusCode::UNAUTHORIZED => reason::NOT_AUTHORIZED,
        StatusCode::FORBIDDEN => reason::NOT_AUTHORIZED,
        StatusCode::TOO_MANY_REQUESTS => reason::QUOTA_EXCEEDED,
        StatusCode::PAYLOAD_TOO_LARGE => reason::PACKET_TOO_LARGE,
        StatusCode::SERVICE_UNAVAILABLE => reason::SERVER_UNAVAILABLE,
        s if s.is_client_error() => reason::IMPLEMENTATION_SPECIFIC,
        _ => reason::UNSPECIFIED,
    }
}

async fn write<W: AsyncWrite + Unpin>(writer: &mut W, out: &mut BytesMut) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = tokio::time::timeout(WRITE_TIMEOUT, async {
        writer.write_all(out).await?;
        writer.flush().await
    })
    .await
    .is_ok_and(|r| r.is_ok());
    out.clear();
    ok
}

fn valid_client_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CLIENT_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Conn {
    /// The CONNECT: the client id, the gate, the will's right to publish,
    /// the take-over of a connection holding the same client id, and the
    /// session (new, or resumed). Answers the CONNACK, or gives the
    /// refusal to answer.
    async fn open(
        broker: Arc<Broker>,
        c: Connect,
        caller: Caller,
    ) -> Result<(Conn, Registration, Duration), (Protocol, Packet)> {
        let protocol = c.protocol;
        let refuse = |reason: u8, text: String| (protocol, refusal(reason, text));
        let mut assigned = None;
        let client_id = if c.client_id.is_empty() {
            if protocol == Protocol::V311 && !c.clean_start {
                return Err(refuse(
                    reason::CLIENT_ID_INVALID,
                    "an empty client identifier needs a clean session".into(),
                ));
            }
            let id = format!("auto-{}", uuid::Uuid::now_v7().simple());
            assigned = Some(id.clone());
            id
        } else {
            c.client_id.clone()
        };
        if !valid_client_id(&client_id) {
            return Err(refuse(
                reason::CLIENT_ID_INVALID,
                format!("client identifier {client_id:?}: 1 to {MAX_CLIENT_ID} characters of A-Z a-z 0-9 . _ -"),
            ));
        }
        if let Some(method) = &c.auth_method {
            return Err(refuse(
                reason::BAD_AUTH_METHOD,
                format!("authentication method {method:?} is not supported; send the token as the password"),
            ));
        }
        let mesh_client = mesh_client(&client_id);
        let api = broker.api.clone();
        let session = match api.open_session(&caller, &mesh_client).await {
            Ok(s) => s,
            Err(e) => {
                let code = match e.status {
                    StatusCode::UNAUTHORIZED => reason::BAD_USERNAME_PASSWORD,
                    _ => reason_of(&e),
                };
                return Err(refuse(code, e.message));
            }
        };
        let caller = session.caller.clone();
        let gate = session;
        if let Some(w) = &c.will {
            let topic = crate::topic::to_mesh(&w.topic)
                .map_err(|e| refuse(reason::TOPIC_NAME_INVALID, format!("will topic: {e}")))?;
            api.admit_as(&caller, eventmesh_security::Operation::Publish, &topic)
                .map_err(|e| refuse(reason_of(&e), format!("will topic: {}", e.message)))?;
        }
        let registration = broker.register(&client_id).await;
        let max_expiry = broker.max_expiry_s();
        let expiry_s = match protocol {
            Protocol::V5 => c.session_expiry,
            Protocol::V311 if c.clean_start => 0,
            Protocol::V311 => u32::MAX,
        };
        let stored = match broker.store.session(&client_id).await {
            Ok(s) => s,
            Err(e) => {
                return Err(refuse(
                    reason::SERVER_UNAVAILABLE,
                    format!("cannot read the session: {e}"),
                ))
            }
        };
        let now = eventmesh_core::time::now_ms();
        let resumed = match stored {
            // A session that ends with its connection (expiry 0, say one
            // just taken over) is not resumed.
            Some(s) if !c.clean_start && s.expiry_s > 0 && !s.expired(now, max_expiry) => Some(s),
            Some(_) => {
                broker.end_session(&client_id).await;
                None
            }
            None => {
                // No record, but subscriptions of an earlier clean session
                // that ended without cleaning up (a crash) may be left.
                let _ = api.expire_client(&mesh_client).await;
                None
            }
        };
        let session_present = resumed.is_some();
        let mut record = resumed.unwrap_or_else(|| MqttSession {
            client_id: client_id.clone(),
            group: format!("mqtt.{}", uuid::Uuid::now_v7().simple()),
            protocol: 4,
            expiry_s,
            subscriptions: Vec::new(),
            disconnected_ms: None,
            instance: None,
            pending_rel: Vec::new(),
        });
        record.protocol = if protocol == Protocol::V5 { 5 } else { 4 };
        record.expiry_s = expiry_s;
        record.disconnected_ms = None;
        record.instance = api.instance_id().map(str::to_string);
        let persistent = expiry_s > 0;
        // A clean session is recorded too, so that its subscriptions are
        // found and removed should the instance die before it ends.
        if let Err(e) = broker.store.put_session(&record).await {
            return Err(refuse(
                reason::SERVER_UNAVAILABLE,
                format!("cannot store the session: {e}"),
            ));
        }
        let settings = &broker.settings;
        let max_ka = u16::try_from(settings.keepalive_max.as_secs().max(1)).unwrap_or(u16::MAX);
        let keep_alive = if c.keep_alive == 0 || c.keep_alive > max_ka {
            max_ka
        } else {
            c.keep_alive
        };
        let mut props = ConnAckProps {
            receive_maximum: Some(settings.receive_maximum),
            maximum_packet_size: u32::try_from(settings.max_packet_bytes).ok(),
            retain_available: Some(true),
            wildcard_available: Some(true),
            subscription_ids_available: Some(true),
            shared_available: None,
            topic_alias_max: Some(settings.topic_alias_max),
            assigned_client_id: assigned,
            ..ConnAckProps::default()
        };
        if keep_alive != c.keep_alive {
            props.server_keep_alive = Some(keep_alive);
        }
        if expiry_s > max_expiry {
            props.session_expiry = Some(max_expiry);
        }
        let window = usize::from(c.receive_maximum.min(settings.inflight_max).max(1));
        let mut conn = Conn {
            protocol,
            client_id,
            mesh_client,
            caller,
            persistent,
            will: c.will,
            out: BytesMut::with_capacity(8192),
            client_max_packet: c
                .max_packet_size
                .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX)),
            window,
            outflight: HashMap::new(),
            released: record.pending_rel.iter().copied().collect(),
            next_pkid: 1,
            received: BTreeSet::new(),
            receiving: BTreeSet::new(),
            inbound: 0,
            aliases: HashMap::new(),
            stream: None,
            under_way: FuturesUnordered::new(),
            closing: None,
            own: Default::default(),
            _gate: gate,
            session: record,
            broker,
        };
        conn.send(&connack(session_present, reason::SUCCESS, props));
        // A resumed session: its deliveries stream again, those its last
        // connection had not acknowledged first, and the QoS 2 messages it
        // had received are released again.
        if session_present && !conn.session.subscriptions.is_empty() {
            conn.attach_stream().await;
        }
        let rel: Vec<u16> = conn.released.iter().copied().collect();
        for pkid in rel {
            conn.send(&Packet::PubRel(codec::Ack {
                pkid,
                reason: reason::SUCCESS,
                reason_string: None,
            }));
        }
        let keep = Duration::from_millis(u64::from(keep_alive) * 1500);
        Ok((conn, registration, keep))
    }

    /// Opens the stream on the client's mailbox, once it has a
    /// subscription.
    pub(crate) async fn attach_stream(&mut self) {
        if self.stream.is_some() {
            return;
        }
        let opened = Instant::now();
        match self.broker.api.stream_of(&self.mesh_client) {
            Ok(guard) => {
                self.stream = Some(guard);
                self.broker.api.resume(&self.mesh_client, opened).await;
            }
            Err(e) => {
                tracing::debug!(client = %self.client_id, error = %e.message, "MQTT: no stream yet")
            }
        }
    }

    /// Queues a packet for the client.
    pub(crate) fn send(&mut self, p: &Packet) -> usize {
        self.broker.counters.sent(p);
        codec::encode(p, self.protocol, &mut self.out)
    }

    /// Ends the connection with a DISCONNECT (MQTT 5; 3.1.1 just closes).
    pub(crate) fn disconnect(&mut self, reason: u8, text: impl Into<String>) {
        let text = text.into();
        tracing::debug!(client = %self.client_id, reason, "MQTT: disconnecting: {text}");
        if self.protocol == Protocol::V5 {
            self.send(&Packet::Disconnect(Disconnect {
                reason,
                session_expiry: None,
                reason_string: Some(text),
            }));
        }
        self.closing = Some(End::Abnormal);
    }

    async fn run<R, W>(
        &mut self,
        reader: &mut R,
        writer: &mut W,
        mut buf: BytesMut,
        registration: &Registration,
        keep_alive: Duration,
    ) -> End
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let shutdown = self.broker.api.shutdown().clone();
        let max_packet = self.broker.settings.max_packet_bytes;
        let mut silent_by = Instant::now() + keep_alive;
        loop {
            while self.closing.is_none() {
                match codec::decode(&mut buf, Some(self.protocol), max_packet) {
                    Ok(Some(p)) => {
                        self.broker.counters.received(&p);
                        self.handle(p).await
                    }
                    Ok(None) => break,
                    Err(e) => self.disconnect(e.reason(), e.to_string()),
                }
            }
            if !write(writer, &mut self.out).await {
                return End::Abnormal;
            }
            if let Some(end) = self.closing {
                return end;
            }
            let room = self
                .window
                .saturating_sub(self.outflight.len() + self.released.len());
            let stream = self.stream.as_ref();
            tokio::select! {
                biased;
                _ = registration.kicked.cancelled() => {
                    self.disconnect(reason::SESSION_TAKEN_OVER, "another connection took the session over");
                }
                _ = shutdown.cancelled() => {
                    self.disconnect(reason::SERVER_SHUTTING_DOWN, "the server is shutting down");
                }
                Some(done) = self.under_way.next(), if !self.under_way.is_empty() => {
                    self.completed(done).await;
                }
                read = tokio::time::timeout_at(silent_by, reader.read_buf(&mut buf)) => match read {
                    Ok(Ok(n)) if n > 0 => silent_by = Instant::now() + keep_alive,
                    Ok(_) => return End::Abnormal,
                    Err(_) => self.disconnect(reason::KEEP_ALIVE_TIMEOUT, "nothing received within one and a half keep-alives"),
                },
                got = async { stream.expect("guarded").next(room, Duration::from_secs(5)).await },
                    if stream.is_some() && room > 0 => {
                    self.deliver(got).await;
                }
            }
        }
    }

    /// After the connection: the will, then the session kept or ended.
    async fn finish(mut self, end: End, registration: &Registration) {
        // Publishes under way are answered no more, but still completed.
        while let Some(done) = self.under_way.next().await {
            self.completed(done).await;
        }
        self.stream = None;
        self.broker.unregister(&self.client_id, registration.serial);
        // A take-over hands the session on: no will.
        if end != End::Normal && !registration.kicked.is_cancelled() {
            if let Some(will) = self.will.take() {
                crate::inbound::publish_will(
                    &self.broker,
                    &self.caller,
                    &self.client_id,
                    self.protocol,
                    will,
                    if self.persistent {
                        self.session.expiry_s.min(self.broker.max_expiry_s())
                    } else {
                        0
                    },
                );
            }
        }
        if !self.persistent {
            if registration.kicked.is_cancelled() {
                // Taken over: the new connection decides about the session.
                return;
            }
            self.broker.end_session(&self.client_id).await;
            return;
        }
        let mut record = self.session;
        record.disconnected_ms = Some(eventmesh_core::time::now_ms());
        record.instance = None;
        record.pending_rel = self.released.into_iter().collect();
        if registration.kicked.is_cancelled() {
            record.disconnected_ms = None;
        }
        if let Err(e) = self.broker.store.put_session(&record).await {
            tracing::warn!(client = %record.client_id, error = %e, "MQTT: cannot store the session at disconnect");
        }
    }

    /// The granted QoS for a delivery on MQTT topic `name`: the highest of
    /// the session's filters matching it (without its No Local ones for a
    /// message it published itself, `own`).
    pub(crate) fn granted(&self, name: &str, own: bool) -> Option<(u8, Vec<u32>)> {
        let mut best: Option<u8> = None;
        let mut ids = Vec::new();
        for s in &self.session.subscriptions {
            let filter = crate::topic::matching_filter(&s.filter);
            if !(own && s.no_local) && crate::topic::matches(filter, name) {
                best = Some(best.map_or(s.qos, |b| b.max(s.qos)));
                if let Some(id) = s.id {
                    ids.push(id);
                }
            }
        }
        best.map(|q| (q, ids))
    }

    pub(crate) fn subscription(&self, filter: &str) -> Option<&MqttSubscription> {
        self.session
            .subscriptions
            .iter()
            .find(|s| s.filter == filter)
    }
}
