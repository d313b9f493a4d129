//! Agents on the mesh: [`Agent::serve`] registers an A2A agent card with
//! the gateway, keeps the registration alive, reads the agent's inbox
//! (`a2a.agent.<id>`) over server-sent events and runs a handler for each
//! message a client sends it. The handler answers through its
//! [`TaskContext`]: status updates, artifacts, or a final answer, each
//! published to `a2a.updates` with the task's token and a new sequence
//! number (docs/a2a.md describes the events).
//!
//! The inbox is read by the group `agent-<id>` from its beginning the first
//! time, so messages sent before the agent first connected wait for it.
//! An inbox event is acknowledged once its handler returned, so a message
//! whose agent stopped halfway is handed to the agent again (at least
//! once); updates the gateway already applied before are told apart by
//! their sequence numbers, which grow with time (microseconds since the
//! epoch, or one more than the last when the clock has not moved).
//!
//! ```no_run
//! use eventmesh_client::agent::{Agent, TaskContext};
//! use eventmesh_client::EventMeshClient;
//!
//! # async fn demo() -> eventmesh_client::Result<()> {
//! let client = EventMeshClient::new("http://127.0.0.1:10105")?;
//! let card = serde_json::json!({
//!     "name": "Shouter", "description": "Answers in capitals", "version": "1.0.0",
//!     "skills": [{"id": "shout", "name": "Shout", "description": "Capitals", "tags": ["text"]}],
//! });
//! Agent::new(client, "shouter", card)
//!     .serve(|ctx: TaskContext| async move { ctx.complete(&ctx.text().to_uppercase()).await })
//!     .await
//! # }
//! ```

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_a2a::events::{self, ArtifactData, StatusData, TaskCancel, TaskMessage};
use eventmesh_a2a::model::{Artifact, Message, Part, Task, TaskState};
use eventmesh_core::{CloudEvent, ExtValue};
use serde_json::{json, Value};

use crate::client::EventMeshClient;
use crate::error::{Error, Result};
use crate::types::{json_event, StartFrom, StreamOptions};

/// Default time to live of a registration; the agent renews it three
/// times as often.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// An agent to attach to the mesh.
#[derive(Clone)]
pub struct Agent {
    client: EventMeshClient,
    id: String,
    card: Value,
    extended_card: Option<Value>,
    ttl: Duration,
}

/// What a handler gets for one message: the task, the message, and the
/// means to answer.
#[derive(Clone)]
pub struct TaskContext {
    /// The task as the gateway knows it, with this message last in its
    /// history.
    pub task: Task,
    /// The client's message.
    pub message: Message,
    /// The client asked for a stream (`SendStreamingMessage`): send
    /// progress as it happens.
    pub stream: bool,
    token: String,
    /// The `a2aseq` the next update follows: the last one this context
    /// sent, at first the one its message named.
    chain: Arc<Mutex<Option<u64>>>,
    shared: Arc<Shared>,
}

struct Shared {
    client: EventMeshClient,
    agent: String,
    last_seq: AtomicU64,
    canceled: Mutex<HashSet<String>>,
}

impl Shared {
    /// A sequence number above every earlier one of this process.
    fn next_seq(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let mut last = self.last_seq.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self
                .last_seq
                .compare_exchange(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

impl TaskContext {
    /// The text parts of the client's message, joined.
    pub fn text(&self) -> String {
        self.message
            .parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("")
    }

    /// The client canceled the task (checked between steps of a long one).
    pub fn is_canceled(&self) -> bool {
        self.shared
            .canceled
            .lock()
            .map(|c| c.contains(&self.task.id))
            .unwrap_or(false)
    }

    async fn send(&self, ty: &str, data: Value) -> Result<()> {
        let mut ev: CloudEvent =
            json_event(ty, &format!("/a2a/agents/{}", self.shared.agent), data);
        ev.subject = Some(self.task.id.clone());
        ev.set_extension(events::EXT_TASK, ExtValue::Str(self.task.id.clone()));
        ev.set_extension(events::EXT_TOKEN, ExtValue::Str(self.token.clone()));
        ev.set_extension(events::EXT_AGENT, ExtValue::Str(self.shared.agent.clone()));
        // Strings: CloudEvents integers are 32-bit, and a sequence in
        // microseconds needs more. Numbered and chained in one step, so the
        // chain follows the numbers even when clones of this context send
        // at once.
        let (seq, prev) = {
            let mut chain = self.chain.lock().unwrap_or_else(|e| e.into_inner());
            let seq = self.shared.next_seq();
            (seq, chain.replace(seq))
        };
        ev.set_extension(events::EXT_SEQ, ExtValue::Str(seq.to_string()));
        if let Some(prev) = prev {
            ev.set_extension(events::EXT_PREV, ExtValue::Str(prev.to_string()));
        }
        ev.set_extension(
            eventmesh_core::event::PARTITION_KEY,
            ExtValue::Str(self.task.id.clone()),
        );
        self.shared
            .client
            .publish(events::UPDATES_TOPIC, &ev)
            .await
            .map(|_| ())
    }

    /// Moves the task to `state`, with an optional message to the client.
    pub async fn status(&self, state: TaskState, text: Option<&str>) -> Result<()> {
        let message = text.map(|t| Message::agent_text(uuid::Uuid::now_v7().to_string(), t));
        let data = serde_json::to_value(StatusData { state, message })
            .map_err(|e| Error::Protocol(e.to_string()))?;
        self.send(events::TYPE_STATUS, data).await
    }

    /// The agent works on it.
    pub async fn working(&self, text: Option<&str>) -> Result<()> {
        self.status(TaskState::Working, text).await
    }

    /// Done, with `text` as the answer.
    pub async fn complete(&self, text: &str) -> Result<()> {
        self.status(TaskState::Completed, Some(text)).await
    }

    /// Failed, saying why.
    pub async fn fail(&self, why: &str) -> Result<()> {
        self.status(TaskState::Failed, Some(why)).await
    }

    /// The agent needs more from the client: `question`.
    pub async fn input_required(&self, question: &str) -> Result<()> {
        self.status(TaskState::InputRequired, Some(question)).await
    }

    /// Sends (a chunk of) artifact `artifact_id` as text; `append` adds to
    /// what was sent before under that id, `last_chunk` marks the end.
    pub async fn artifact_text(
        &self,
        artifact_id: &str,
        text: &str,
        append: bool,
        last_chunk: bool,
    ) -> Result<()> {
        let data = ArtifactData {
            artifact: Artifact {
                artifact_id: artifact_id.to_string(),
                name: None,
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: Vec::new(),
            },
            append,
            last_chunk,
        };
        let data = serde_json::to_value(data).map_err(|e| Error::Protocol(e.to_string()))?;
        self.send(events::TYPE_ARTIFACT, data).await
    }
}

impl Agent {
    /// An agent `id` (1-64 of `A-Z a-z 0-9 _ -`) with its A2A card (`name`,
    /// `description`, `version`, `skills`; the gateway fills in where
    /// clients reach it).
    pub fn new(client: EventMeshClient, id: impl Into<String>, card: Value) -> Self {
        Agent {
            client,
            id: id.into(),
            card,
            extended_card: None,
            ttl: DEFAULT_TTL,
        }
    }

    /// A fuller card that only callers the gateway admitted may read (A2A's
    /// authenticated extended card, `GetExtendedAgentCard`).
    pub fn extended_card(mut self, card: Value) -> Self {
        self.extended_card = Some(card);
        self
    }

    /// How long the registration lives without renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Registers the agent (or renews its registration).
    pub async fn register(&self) -> Result<Value> {
        self.client
            .post_value(
                "/a2a/agents",
                &json!({ "id": self.id, "card": self.card, "extendedCard": self.extended_card,
                         "ttlMs": self.ttl.as_millis() as u64 }),
            )
            .await
    }

    /// [`Agent::register`], retrying transient failures (the mesh
    /// unreachable or answering 5xx) with a growing pause.
    pub async fn register_when_up(&self) -> Result<Value> {
        retrying("register the agent", || self.register()).await
    }

    /// Removes the registration.
    pub async fn deregister(&self) -> Result<()> {
        self.client
            .delete_path(&format!("/a2a/agents/{}", self.id))
            .await
    }

    /// Registers the agent and runs `handler` for each message sent to it
    /// (each in its own task) until the inbox stream ends for good; the
    /// registration is renewed meanwhile and removed at the end. A
    /// transient failure while starting (the mesh unreachable or
    /// answering 5xx) is retried with a growing pause; any other is
    /// returned.
    pub async fn serve<H, F>(&self, handler: H) -> Result<()>
    where
        H: Fn(TaskContext) -> F + Send + Sync + 'static,
        F: Future<Output = Result<()>> + Send + 'static,
    {
        self.register_when_up().await?;
        let renew = {
            let again = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(again.ttl / 3).await;
                    if let Err(e) = again.register().await {
                        tracing::warn!(agent = %again.id, error = %e, "agent registration not renewed");
                    }
                }
            })
        };
        let served = self.read_inbox(Arc::new(handler)).await;
        renew.abort();
        let _ = self.deregister().await;
        served
    }

    async fn read_inbox<H, F>(&self, handler: Arc<H>) -> Result<()>
    where
        H: Fn(TaskContext) -> F + Send + Sync + 'static,
        F: Future<Output = Result<()>> + Send + 'static,
    {
        let client_id = format!("agent-{}", self.id);
        let opts = StreamOptions::new(&client_id)
            .topic(format!("{}{}", events::INBOX_PREFIX, self.id))
            .group(&client_id)
            // A new group starts at the inbox's beginning: messages sent
            // between the registration and the first connection wait.
            .from(StartFrom::Earliest)
            .max_reconnects(u32::MAX);
        let mut inbox =
            retrying("open the agent's inbox", || self.client.sse(opts.clone())).await?;
        let shared = Arc::new(Shared {
            client: self.client.clone(),
            agent: self.id.clone(),
            last_seq: AtomicU64::new(0),
            canceled: Mutex::new(HashSet::new()),
        });
        while let Some(d) = inbox.next().await {
            let d = d?;
            let ev = &d.event;
            let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
            let token = ev
                .get(events::EXT_TOKEN)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let stream = ev
                .get(events::EXT_STREAM)
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let data = ev.get("data").cloned().unwrap_or(Value::Null);
            match ty {
                events::TYPE_MESSAGE => match serde_json::from_value::<TaskMessage>(data) {
                    Ok(m) => {
                        let after = ev.get(events::EXT_SEQ).and_then(events::seq_value);
                        let ctx = TaskContext {
                            task: m.task,
                            message: m.message,
                            stream,
                            token,
                            chain: Arc::new(Mutex::new(after)),
                            shared: shared.clone(),
                        };
                        let (h, client, id) = (handler.clone(), self.client.clone(), d.delivery_id);
                        tokio::spawn(async move {
                            let task = ctx.task.id.clone();
                            if let Err(e) = h(ctx).await {
                                tracing::warn!(%task, error = %e, "agent handler failed");
                            }
                            let _ = client.ack(&id).await;
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable task message dropped");
                        inbox.ack(&d.delivery_id).await?;
                    }
                },
                events::TYPE_CANCEL => {
                    if let Ok(c) = serde_json::from_value::<TaskCancel>(data) {
                        if let Ok(mut set) = shared.canceled.lock() {
                            set.insert(c.task_id);
                        }
                    }
                    inbox.ack(&d.delivery_id).await?;
                }
                _ => inbox.ack(&d.delivery_id).await?,
            }
        }
        Ok(())
    }
}

/// Runs `op` until it succeeds or fails for good: a transient error
/// ([`Error::is_transient`]) is logged and tried again after a pause that
/// doubles from 100 ms up to 5 s.
async fn retrying<T, F, Fut>(what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(100);
    loop {
        match op().await {
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "cannot {what} yet; trying again in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            done => return done,
        }
    }
}

/// The card of the built-in echo agent.
pub fn echo_card(id: &str) -> Value {
    json!({
        "name": format!("Echo ({id})"),
        "description": "Answers each message with its own text; streams it back word by word when asked to stream.",
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": "echo",
            "name": "Echo",
            "description": "Repeats the message's text",
            "tags": ["echo", "test"],
            "examples": ["hello mesh"],
        }],
    })
}

/// The echo agent's handler: a streamed message comes back word by word
/// as chunks of artifact `echo`, then the task completes with the whole
/// text; otherwise it completes at once. A message starting with `ask:`
/// makes it ask for input first; one starting with `fail:` fails the task.
pub async fn echo(ctx: TaskContext) -> Result<()> {
    let text = ctx.text();
    if let Some(why) = text.strip_prefix("fail:") {
        return ctx.fail(why.trim()).await;
    }
    if let Some(question) = text.strip_prefix("ask:") {
        if ctx.task.history.len() <= 1 {
            return ctx.input_required(question.trim()).await;
        }
    }
    if ctx.stream {
        ctx.working(None).await?;
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        for (i, w) in words.iter().enumerate() {
            if ctx.is_canceled() {
                return Ok(());
            }
            ctx.artifact_text("echo", w, i > 0, i + 1 == words.len())
                .await?;
        }
    }
    ctx.complete(&text).await
}
