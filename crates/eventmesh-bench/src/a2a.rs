//! The `a2a` workload: A2A round trips through the gateway.
//!
//! `--agents` agents attach to the mesh with the SDK's agent helper (ids
//! `bench-0`, `bench-1`, ...; each answers a message by completing its task
//! with the message's text, at once). `--clients` clients each keep one
//! blocking v1.0 `SendMessage` in flight, spreading their messages over
//! the agents in turn. A round trip is one `SendMessage` answered with its
//! task completed: the task written to the meta store, the message
//! published to the agent's inbox and pushed to it over SSE, the agent's
//! update published to `a2a.updates`, applied by compare-and-swap and
//! handed to the waiting request. Latency: from each send to its answer.
//! Throughput: round trips completed in the measured window (after
//! `--warmup`) per second. An answer that is not a completed task counts
//! as an error, by its state, JSON-RPC code or gRPC status.
//!
//! `--binding` picks how the clients speak: JSON-RPC and HTTP+JSON over
//! one pooled HTTP/1.1 connection per client, gRPC over one HTTP/2
//! channel per client to `--grpc` (the request's `tenant` names the
//! agent). The agents and everything behind the gateway are the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use eventmesh_a2a_grpc::client::{self, A2aServiceClient};
use eventmesh_a2a_grpc::pb::{self, send_message_response};
use eventmesh_client::agent::{Agent, TaskContext};
use eventmesh_client::EventMeshClient;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tonic::transport::Channel;

use crate::stats::{self, Errors};

#[derive(Debug, clap::Args)]
pub struct A2aArgs {
    /// Traffic HTTP URL of the runtime the clients send to.
    #[arg(long, default_value = "http://127.0.0.1:10105")]
    pub server: String,
    /// Traffic HTTP URL of the runtime the agents attach to (default:
    /// --server).
    #[arg(long)]
    pub agent_server: Option<String>,
    /// Agents answering.
    #[arg(long, default_value_t = 1)]
    pub agents: usize,
    /// Clients, each with one request in flight.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Measured window.
    #[arg(long, value_parser = crate::parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Run before the window, not recorded.
    #[arg(long, value_parser = crate::parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// The A2A binding the clients speak.
    #[arg(long, value_enum, default_value_t = Binding::Jsonrpc)]
    pub binding: Binding,
    /// The gRPC listener (`host:port`) for `--binding grpc`.
    #[arg(long, default_value = "127.0.0.1:10110")]
    pub grpc: String,
    /// One JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// An A2A protocol binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Binding {
    /// `SendMessage` as a JSON-RPC request to the agent's endpoint.
    Jsonrpc,
    /// `POST …/message:send` (HTTP+JSON).
    Rest,
    /// `A2AService/SendMessage` over gRPC.
    Grpc,
}

impl Binding {
    fn name(self) -> &'static str {
        match self {
            Binding::Jsonrpc => "jsonrpc",
            Binding::Rest => "rest",
            Binding::Grpc => "grpc",
        }
    }
}

fn card(id: &str) -> Value {
    json!({
        "name": format!("bench agent {id}"),
        "description": "completes each task with the message's text",
        "version": "1",
        "skills": [{"id": "answer", "name": "answer", "description": "answers", "tags": ["bench"]}],
    })
}

struct Outcome {
    latency: Histogram<u64>,
    done: u64,
    /// Completed from the start, warm-up included (for CPU per task).
    done_all: u64,
    errors: Errors,
}

/// What a client sends with: the shared HTTP pool (JSON-RPC, HTTP+JSON)
/// or its own gRPC channel.
#[derive(Clone)]
enum Sender {
    Http(reqwest::Client, Binding),
    Grpc(A2aServiceClient<Channel>),
}

/// An agent the clients send to: its endpoint URL and its id.
struct Target {
    url: String,
    id: String,
}

/// One blocking send of message `id` to `to`; `None` when it was
/// answered with the task completed, else what went wrong.
async fn send_once(sender: &mut Sender, to: &Target, id: &str) -> Option<String> {
    match sender {
        Sender::Http(http, binding) => send_http(http, *binding, &to.url, id).await,
        Sender::Grpc(grpc) => send_grpc(grpc, &to.id, id).await,
    }
}

async fn send_grpc(grpc: &mut A2aServiceClient<Channel>, agent: &str, id: &str) -> Option<String> {
    let message = pb::Message {
        message_id: id.to_string(),
        role: pb::Role::User as i32,
        parts: vec![pb::Part {
            content: Some(pb::part::Content::Text("ping".into())),
            ..Default::default()
        }],
        ..Default::default()
    };
    let req = pb::SendMessageRequest {
        tenant: agent.to_string(),
        message: Some(message),
        ..Default::default()
    };
    let answer = match grpc.send_message(client::request(req, None)).await {
        Err(status) => return Some(format!("grpc_{:?}", status.code()).to_lowercase()),
        Ok(r) => r.into_inner(),
    };
    match answer.payload {
        Some(send_message_response::Payload::Task(task)) => {
            let state = task.status.map(|s| s.state).unwrap_or_default();
            if state == pb::TaskState::Completed as i32 {
                None
            } else {
                let name = pb::TaskState::try_from(state).map(|s| s.as_str_name());
                Some(name.unwrap_or("unknown_state").to_lowercase())
            }
        }
        _ => Some("no_task".into()),
    }
}

async fn send_http(
    http: &reqwest::Client,
    binding: Binding,
    url: &str,
    id: &str,
) -> Option<String> {
    let message = json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": "ping"}]});
    let (url, body) = match binding {
        Binding::Rest => (format!("{url}/message:send"), json!({"message": message})),
        _ => (
            url.to_string(),
            json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {"message": message}}),
        ),
    };
    let answer = http
        .post(url)
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await;
    let v = match answer {
        Err(e) => return Some(stats::error_kind(&e)),
        Ok(r) => match r.json::<Value>().await {
            Err(e) => return Some(stats::error_kind(&e)),
            Ok(v) => v,
        },
    };
    let task = match binding {
        Binding::Rest => &v["task"],
        _ => &v["result"]["task"],
    };
    let state = &task["status"]["state"];
    if state == "TASK_STATE_COMPLETED" {
        None
    } else if let Some(code) = v["error"]["code"].as_i64() {
        Some(format!("error{code}"))
    } else {
        Some(state.as_str().unwrap_or("no_task").to_lowercase())
    }
}

/// One client: blocking sends until `end`, recorded from `from`.
async fn client_loop(
    mut sender: Sender,
    targets: Arc<Vec<Target>>,
    first: usize,
    from: Instant,
    end: Instant,
) -> Outcome {
    let mut out = Outcome {
        latency: stats::histogram(),
        done: 0,
        done_all: 0,
        errors: Errors::new(),
    };
    let mut n = first;
    while Instant::now() < end {
        let to = &targets[n % targets.len()];
        n += 1;
        let started = Instant::now();
        let kind = send_once(&mut sender, to, &format!("b{first}-{n}")).await;
        if kind.is_none() {
            out.done_all += 1;
        }
        if started < from {
            continue;
        }
        match kind {
            None => {
                out.done += 1;
                let _ = out.latency.record(stats::micros(started.elapsed()).max(1));
            }
            Some(k) => *out.errors.entry(k).or_default() += 1,
        }
    }
    out
}

pub async fn run(a: A2aArgs) -> Result<()> {
    anyhow::ensure!(
        a.agents > 0 && a.clients > 0,
        "--agents and --clients must be at least 1"
    );
    let agent_server = a.agent_server.clone().unwrap_or_else(|| a.server.clone());
    let mut targets = Vec::new();
    for i in 0..a.agents {
        let id = format!("bench-{i}");
        let client = EventMeshClient::new(&agent_server)
            .with_context(|| format!("agent server {agent_server}"))?;
        let agent = Agent::new(client, &id, card(&id)).ttl(Duration::from_secs(60));
        agent
            .register()
            .await
            .with_context(|| format!("registering agent {id}"))?;
        targets.push(Target {
            url: stats::endpoint(&a.server, &format!("a2a/agents/{id}"))?.to_string(),
            id: id.clone(),
        });
        tokio::spawn(async move {
            let served = agent
                .serve(|ctx: TaskContext| async move { ctx.complete(&ctx.text()).await })
                .await;
            if let Err(e) = served {
                eprintln!("agent {id} stopped: {e}");
            }
        });
    }
    let targets = Arc::new(targets);
    let http = stats::client(a.clients, Duration::from_secs(30))?;
    let mut senders = Vec::with_capacity(a.clients);
    for _ in 0..a.clients {
        senders.push(match a.binding {
            Binding::Grpc => Sender::Grpc(
                client::connect(&a.grpc, Duration::from_secs(5))
                    .await
                    .with_context(|| format!("gRPC listener {}", a.grpc))?,
            ),
            b => Sender::Http(http.clone(), b),
        });
    }
    let start = Instant::now();
    let from = start + a.warmup;
    let end = from + a.duration;
    let clients: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, sender)| tokio::spawn(client_loop(sender, targets.clone(), i, from, end)))
        .collect();
    let mut latency = stats::histogram();
    let (mut done, mut done_all, mut errors) = (0u64, 0u64, Errors::new());
    for c in clients {
        let o = c.await.context("a client task failed")?;
        latency.add(&o.latency).context("merging latencies")?;
        done += o.done;
        done_all += o.done_all;
        stats::merge(&mut errors, o.errors);
    }
    let secs = a.duration.as_secs_f64();
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    if a.json {
        println!(
            "{}",
            json!({
                "workload": "a2a", "binding": a.binding.name(), "agents": a.agents, "clients": a.clients,
                "tasks": done, "tasks_with_warmup": done_all, "tasks_per_sec": done as f64 / secs,
                "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99),
                "errors": errors,
            })
        );
    } else {
        println!(
            "a2a ({}): {} agents, {} clients: {:.0} tasks/s, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms (send to completed task), errors {}",
            a.binding.name(),
            a.agents,
            a.clients,
            done as f64 / secs,
            ms(0.5),
            ms(0.9),
            ms(0.99),
            stats::format_errors(&errors)
        );
    }
    Ok(())
}
