//! The client commands of the `eventmesh` binary: `publish`, `subscribe`,
//! `request` and `reply` (its answering side), `agent` and `admin`. The
//! binary mounts [`ClientCommand`] among its subcommands and hands a
//! parsed one to [`run`]:
//!
//! ```no_run
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(subcommand)]
//!     command: eventmesh_client::cli::ClientCommand,
//! }
//!
//! # async fn demo() -> std::process::ExitCode {
//! eventmesh_client::cli::run(Cli::parse().command).await
//! # }
//! ```
//!
//! Output is one JSON document a line on stdout (flushed per line, so it
//! pipes into `jq`); errors go to stderr as `error: ...`. Exit status: 0
//! on success, 1 when the server is unreachable or answers with an error
//! (or a request gets no reply in time), 2 for bad arguments. A refusal of
//! a token that was not given, and the admin port answered where the
//! traffic port was meant, say so.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::client::{EventMeshClient, DEFAULT_SERVER, DEFAULT_TCP_SERVER};
use crate::error::Error;
use crate::types::{DeliveryMode, StartFrom, StreamOptions, SubscribeOptions};

mod admin;
mod event;
mod hints;
mod reply;
mod source;

pub use event::{build_event, event_data, parse_ext, EventArgs};
pub use reply::ReplyArgs;
use source::Source;

/// The client subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// Publish one CloudEvent and print where it was stored, as one JSON
    /// line: {"id","topic","partition","offset"}.
    Publish(PublishArgs),
    /// Subscribe to a topic and print each event as one JSON line,
    /// acknowledging it once printed.
    Subscribe(SubscribeArgs),
    /// Send a request event and print the reply event as one JSON line.
    Request(RequestArgs),
    /// Answer requests: subscribe to a topic as a responder and reply to
    /// each request with its own data (--echo) or with what a command
    /// prints (--exec), printing each reply as one JSON line.
    #[command(visible_alias = "respond")]
    Reply(ReplyArgs),
    /// Attach a built-in agent to the A2A gateway and serve it until
    /// interrupted.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Operate a server through its admin API: topics, subscriptions,
    /// clients, offsets, dead letters, the cluster, connectors, links, the
    /// configuration. Tables by default, --json for the API's answers.
    Admin(admin::AdminArgs),
}

/// The built-in agents.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AgentCommand {
    /// An agent that answers each message with its own text (word by word
    /// when the client streams; `ask: ...` asks for input first, `fail:
    /// ...` fails the task). Prints one JSON line once registered.
    Echo(EchoArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct EchoArgs {
    /// The agent's id (1-64 of A-Z a-z 0-9 _ -).
    #[arg(long, default_value = "echo")]
    pub id: String,
    /// How long the registration lives without renewal, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    pub ttl_ms: u64,
    #[command(flatten)]
    pub connection: Connection,
}

/// Where the server is, and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// Traffic HTTP URL of the eventmesh server.
    #[arg(long, value_name = "URL", env = "EVENTMESH_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Address of the server's legacy TCP port (for --transport tcp);
    /// tls://HOST:PORT when it serves TLS.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "EVENTMESH_TCP_SERVER",
        default_value = DEFAULT_TCP_SERVER
    )]
    pub tcp_server: String,
    /// Bearer token sent with every request.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "EVENTMESH_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// PEM file of certificate authorities to trust (besides the public
    /// web roots) for https://, wss:// and tls:// (TCP).
    #[arg(long, value_name = "PATH", env = "EVENTMESH_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for servers that require mutual TLS
    /// (with --key-file).
    #[arg(
        long,
        value_name = "PATH",
        env = "EVENTMESH_CERT_FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(
        long,
        value_name = "PATH",
        env = "EVENTMESH_KEY_FILE",
        requires = "cert_file"
    )]
    pub key_file: Option<PathBuf>,
}

impl Connection {
    /// The SDK client these flags describe.
    pub fn client(&self) -> Result<EventMeshClient, Error> {
        EventMeshClient::builder()
            .server(&self.server)
            .tcp_addr(&self.tcp_server)
            .token_opt(self.token.clone().filter(|t| !t.is_empty()))
            .tls(crate::TlsFiles {
                ca_file: self.ca_file.clone(),
                cert_file: self.cert_file.clone(),
                key_file: self.key_file.clone(),
            })
            .build()
    }
}

/// How `publish` talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PublishTransport {
    Http,
    Ws,
    Tcp,
}

/// How `request` talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RequestTransport {
    /// POST /events/request on the traffic HTTP port.
    Http,
    /// A REQUEST frame on the legacy TCP port.
    Tcp,
}

/// How `subscribe` receives events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SubscribeTransport {
    /// Server-sent events (reconnects by itself).
    Sse,
    /// WebSocket.
    Ws,
    /// The legacy TCP port.
    Tcp,
    /// HTTP long polling.
    Poll,
}

/// `--from`.
/// `--from`: `latest`, `earliest` or an RFC 3339 time.
pub fn parse_from(v: &str) -> Result<StartFrom, String> {
    serde_json::from_value(serde_json::Value::String(v.to_string()))
        .map_err(|e| format!("{v:?} is not latest, earliest or an RFC 3339 time ({e})"))
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Each event goes to one member of the group.
    LoadBalance,
    /// Every member of the group gets every event.
    Broadcast,
}

impl From<ModeArg> for DeliveryMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::LoadBalance => DeliveryMode::LoadBalance,
            ModeArg::Broadcast => DeliveryMode::Broadcast,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct PublishArgs {
    /// Topic to publish to.
    #[arg(long)]
    pub topic: String,
    #[command(flatten)]
    pub event: EventArgs,
    /// How to reach the server.
    #[arg(long, value_enum, default_value_t = PublishTransport::Http)]
    pub transport: PublishTransport,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SubscribeArgs {
    /// Topic to subscribe to.
    #[arg(long)]
    pub topic: String,
    /// Consumer group (server default: "default").
    #[arg(long)]
    pub group: Option<String>,
    #[arg(
        long,
        value_name = "ID",
        help = "Client id (default: cli-<uuid>, unsubscribed again on exit)"
    )]
    pub client_id: Option<String>,
    /// How to receive events.
    #[arg(long, value_enum, default_value_t = SubscribeTransport::Sse)]
    pub transport: SubscribeTransport,
    /// Where a new consumer starts: latest (the server's default),
    /// earliest, or an RFC 3339 time such as 2026-12-05T09:00:00Z (the
    /// first event appended then or later).
    #[arg(long, value_parser = parse_from)]
    pub from: Option<StartFrom>,
    /// How the group shares events (server default: load-balance).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Deliver only the events this CESQL expression matches, e.g.
    /// --filter "type = 'order.created' AND amount > 100". Repeat it to
    /// require several.
    #[arg(long, value_name = "CESQL")]
    pub filter: Vec<String>,
    /// Deliver only the events this filter object matches, in the
    /// CloudEvents Subscriptions API's JSON form, e.g.
    /// --filter-json '{"prefix": {"type": "order."}}'. Repeatable.
    #[arg(long, value_name = "JSON")]
    pub filter_json: Vec<String>,
    /// Stop after this many events.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RequestArgs {
    /// Topic the request is published to.
    #[arg(long)]
    pub topic: String,
    #[command(flatten)]
    pub event: EventArgs,
    /// How long to wait for the reply, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// How to reach the server.
    #[arg(long, value_enum, default_value_t = RequestTransport::Http)]
    pub transport: RequestTransport,
    #[command(flatten)]
    pub connection: Connection,
}

/// A failed command: what to print and the exit status.
#[derive(Debug)]
struct Failure {
    message: String,
    status: u8,
    /// The admin API's error code, when the failure is its answer.
    api_code: Option<String>,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let status = match e {
            Error::InvalidArgument(_) => 2,
            _ => 1,
        };
        Failure {
            message: e.to_string(),
            status,
            api_code: None,
        }
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 2,
        api_code: None,
    }
}

/// Runs one client command; prints errors to stderr as `error: ...`.
pub async fn run(cmd: ClientCommand) -> ExitCode {
    let mut out = std::io::stdout();
    match execute(cmd, &mut out).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}

async fn execute(cmd: ClientCommand, out: &mut (dyn Write + Send)) -> Result<(), Failure> {
    // A traffic command's failure is explained once, here: a token it did
    // not send, a port that is the admin port.
    let (connection, done) = match cmd {
        ClientCommand::Publish(a) => (a.connection.clone(), publish(a, out).await),
        ClientCommand::Subscribe(a) => (a.connection.clone(), subscribe(a, out).await),
        ClientCommand::Request(a) => (a.connection.clone(), request(a, out).await),
        ClientCommand::Reply(a) => (a.connection.clone(), reply::reply(a, out).await),
        ClientCommand::Agent(AgentCommand::Echo(a)) => {
            (a.connection.clone(), echo_agent(a, out).await)
        }
        ClientCommand::Admin(a) => return admin::admin(a, out).await,
    };
    match done {
        Ok(()) => Ok(()),
        Err(Failed::Usage(f)) => Err(f),
        Err(Failed::Call(e)) => Err(hints::explain(e, &connection).await),
    }
}

/// How a traffic command failed: a call to the server (explained by
/// [`hints::explain`]), or something it reports as it is.
#[derive(Debug)]
enum Failed {
    Call(Error),
    Usage(Failure),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Call(e)
    }
}

impl From<Failure> for Failed {
    fn from(f: Failure) -> Self {
        Failed::Usage(f)
    }
}

/// Prints one JSON line and flushes. False when stdout is gone (a closed
/// pipe), which ends the command quietly.
fn print_line(out: &mut (dyn Write + Send), v: &impl serde::Serialize) -> Result<bool, Failure> {
    let line = serde_json::to_string(v).map_err(|e| Failure {
        message: format!("cannot print: {e}"),
        status: 1,
        api_code: None,
    })?;
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Failure {
            message: format!("cannot write to stdout: {e}"),
            status: 1,
            api_code: None,
        }),
    }
}

fn new_client_id() -> String {
    format!("cli-{}", uuid::Uuid::now_v7())
}

async fn publish(a: PublishArgs, out: &mut (dyn Write + Send)) -> Result<(), Failed> {
    let client = a.connection.client()?;
    let event = build_event(&a.event)?;
    let published = match a.transport {
        PublishTransport::Http => client.publish(&a.topic, &event).await?,
        PublishTransport::Ws => {
            let id = new_client_id();
            let (ws, temporary) = match client.websocket(StreamOptions::new(&id)).await {
                Ok(ws) => (ws, false),
                // The server opens a WebSocket only for a client with a pull
                // subscription: make a throwaway one, in a group of its own
                // (so it takes no events from anyone), removed right after.
                Err(Error::Api { code, .. }) if code == "unknown_client" => {
                    let opts = StreamOptions::new(&id).topic(&a.topic).group(&id);
                    (client.websocket(opts).await?, true)
                }
                Err(e) => return Err(e.into()),
            };
            let r = ws.publish(&a.topic, &event).await;
            if temporary {
                let quick = client.clone().with_request_timeout(Duration::from_secs(3));
                let _ = quick.unsubscribe(&id, Some(&a.topic)).await;
            }
            ws.close().await;
            r?
        }
        PublishTransport::Tcp => {
            let tcp = client.tcp(&new_client_id()).await?;
            let r = tcp.publish(&a.topic, &event).await;
            let _ = tcp.goodbye().await;
            r?
        }
    };
    print_line(out, &published)?;
    Ok(())
}

async fn echo_agent(a: EchoArgs, out: &mut (dyn Write + Send)) -> Result<(), Failed> {
    let client = a.connection.client()?;
    let agent = crate::agent::Agent::new(client, &a.id, crate::agent::echo_card(&a.id))
        .ttl(Duration::from_millis(a.ttl_ms.max(1)));
    let registered = agent.register_when_up().await?;
    print_line(out, &registered)?;
    let served = tokio::select! {
        served = agent.serve(crate::agent::echo) => served,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    let _ = agent.deregister().await;
    Ok(served?)
}

async fn request(a: RequestArgs, out: &mut (dyn Write + Send)) -> Result<(), Failed> {
    let client = a.connection.client()?;
    let event = build_event(&a.event)?;
    let timeout = Duration::from_millis(a.timeout_ms);
    let answer = match a.transport {
        RequestTransport::Http => client.request(&a.topic, &event, timeout).await,
        RequestTransport::Tcp => {
            let tcp = client.tcp(&new_client_id()).await?;
            let r = tcp.request(&a.topic, &event, timeout).await;
            let _ = tcp.goodbye().await;
            r
        }
    };
    match answer {
        Ok(reply) => {
            print_line(out, &reply)?;
            Ok(())
        }
        Err(Error::Timeout) => Err(Failed::Usage(Failure {
            message: format!("no reply within {} ms", a.timeout_ms),
            status: 1,
            api_code: None,
        })),
        Err(e) => Err(e.into()),
    }
}

async fn subscribe(a: SubscribeArgs, out: &mut (dyn Write + Send)) -> Result<(), Failed> {
    if a.count == Some(0) {
        return Err(usage("--count must be at least 1").into());
    }
    let client = a.connection.client()?;
    let generated = a.client_id.is_none();
    let client_id = a.client_id.clone().unwrap_or_else(new_client_id);
    let sub = subscription(&a, &client_id)?;
    let mut source = Source::open(&client, sub, a.transport).await?;
    let mut printed = 0u64;
    // One listener for the whole loop, so a Ctrl-C while printing or
    // acknowledging is not lost.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let result = loop {
        if a.count.is_some_and(|n| printed >= n) {
            break Ok(());
        }
        let want = a.count.map_or(100, |n| n - printed);
        let next = tokio::select! {
            n = source.next(&client, want) => n,
            _ = &mut interrupted => break Ok(()),
        };
        let d = match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(Failed::Call(e)),
            Some(Ok(d)) => d,
        };
        match print_line(out, &d.event) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(f) => break Err(f.into()),
        }
        if let Err(e) = source.ack(&client, &d.delivery_id).await {
            break Err(e.into());
        }
        printed += 1;
    };
    source.close(&client, &client_id, &a.topic, generated).await;
    result
}

/// What `subscribe`'s flags ask the server for.
fn subscription(a: &SubscribeArgs, client_id: &str) -> Result<SubscribeOptions, Error> {
    let mut sub = SubscribeOptions::new(client_id, &a.topic);
    sub.group.clone_from(&a.group);
    sub.mode = a.mode.map(Into::into);
    sub.from = a.from;
    for expression in &a.filter {
        sub = sub.sql(expression.clone());
    }
    for text in &a.filter_json {
        let filter = serde_json::from_str(text).map_err(|e| {
            Error::InvalidArgument(format!("--filter-json {text:?} is not JSON: {e}"))
        })?;
        sub = sub.filter(filter);
    }
    Ok(sub)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_options;
