//! The client commands of the `eventmesh` binary: `publish`, `subscribe`
//! and `request`. The binary mounts [`ClientCommand`] among its
//! subcommands and hands a parsed one to [`run`]:
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
//! (or a request gets no reply in time), 2 for bad arguments.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use eventmesh_core::{CloudEvent, Data};
use serde_json::Value;

use crate::client::{EventMeshClient, DEFAULT_SERVER, DEFAULT_TCP_SERVER};
use crate::error::Error;
use crate::sse::SseStream;
use crate::tcp::TcpClient;
use crate::types::{Delivery, DeliveryMode, StartFrom, StreamOptions, SubscribeOptions};
use crate::ws::WsSession;

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
}

/// Where the server is, and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// Traffic HTTP URL of the eventmesh server.
    #[arg(long, value_name = "URL", env = "EVENTMESH_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Address of the server's legacy TCP port (for --transport tcp).
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
}

impl Connection {
    /// The SDK client these flags describe.
    pub fn client(&self) -> Result<EventMeshClient, Error> {
        EventMeshClient::builder()
            .server(&self.server)
            .tcp_addr(&self.tcp_server)
            .token_opt(self.token.clone().filter(|t| !t.is_empty()))
            .build()
    }
}

/// The event to send.
#[derive(Debug, Clone, clap::Args)]
pub struct EventArgs {
    /// Payload: JSON (sent as JSON data, application/json) or else text
    /// (text/plain).
    #[arg(long, value_name = "JSON-OR-TEXT", conflicts_with = "file")]
    pub data: Option<String>,
    /// Read the payload from a file (same rules as --data; bytes that are
    /// not UTF-8 go as application/octet-stream).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// The event's type attribute.
    #[arg(long = "type", value_name = "TYPE", default_value = "eventmesh.cli")]
    pub ty: String,
    /// The event's source attribute.
    #[arg(long, value_name = "SRC", default_value = "/eventmesh/cli")]
    pub source: String,
    /// The event's id attribute (default: a new UUID).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
}

/// How `publish` talks to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PublishTransport {
    Http,
    Ws,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FromArg {
    Latest,
    Earliest,
}

impl From<FromArg> for StartFrom {
    fn from(f: FromArg) -> Self {
        match f {
            FromArg::Latest => StartFrom::Latest,
            FromArg::Earliest => StartFrom::Earliest,
        }
    }
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
    /// Where a new consumer starts (server default: latest).
    #[arg(long, value_enum)]
    pub from: Option<FromArg>,
    /// How the group shares events (server default: load-balance).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
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
    /// How long to wait for the reply.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub connection: Connection,
}

/// A failed command: what to print and the exit status.
#[derive(Debug)]
struct Failure {
    message: String,
    status: u8,
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
        }
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 2,
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
    match cmd {
        ClientCommand::Publish(a) => publish(a, out).await,
        ClientCommand::Subscribe(a) => subscribe(a, out).await,
        ClientCommand::Request(a) => request(a, out).await,
    }
}

/// Prints one JSON line and flushes. False when stdout is gone (a closed
/// pipe), which ends the command quietly.
fn print_line(out: &mut (dyn Write + Send), v: &impl serde::Serialize) -> Result<bool, Failure> {
    let line = serde_json::to_string(v).map_err(|e| Failure {
        message: format!("cannot print: {e}"),
        status: 1,
    })?;
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Failure {
            message: format!("cannot write to stdout: {e}"),
            status: 1,
        }),
    }
}

/// The `data` of an event from `--data`/`--file` bytes: JSON when they
/// parse as JSON, else text, else binary. Returns the data and its
/// `datacontenttype`.
pub fn event_data(raw: Vec<u8>) -> (Data, &'static str) {
    if let Ok(v) = serde_json::from_slice::<Value>(&raw) {
        let compact = serde_json::to_vec(&v).unwrap_or(raw);
        return (Data::Json(compact.into()), "application/json");
    }
    match String::from_utf8(raw) {
        Ok(s) => (Data::Text(s), "text/plain"),
        Err(e) => (
            Data::Binary(e.into_bytes().into()),
            "application/octet-stream",
        ),
    }
}

/// The CloudEvent `--data`/`--file`/`--type`/`--source`/`--id` describe,
/// validated. Bad values are [`Error::InvalidArgument`].
pub fn build_event(args: &EventArgs) -> Result<CloudEvent, Error> {
    let raw =
        match (&args.data, &args.file) {
            (Some(d), _) => Some(d.clone().into_bytes()),
            (None, Some(path)) => Some(std::fs::read(path).map_err(|e| {
                Error::InvalidArgument(format!("cannot read {}: {e}", path.display()))
            })?),
            (None, None) => None,
        };
    let mut event = CloudEvent {
        id: args
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        source: args.source.clone(),
        ty: args.ty.clone(),
        ..CloudEvent::default()
    };
    if let Some(raw) = raw {
        let (data, content_type) = event_data(raw);
        event.data = data;
        event.datacontenttype = Some(content_type.to_string());
    }
    // Round-trip through the validating parser: a bad --source or --type
    // is reported here, before anything is sent.
    CloudEvent::from_json_slice(&event.to_json()).map_err(|e| Error::InvalidArgument(e.to_string()))
}

fn new_client_id() -> String {
    format!("cli-{}", uuid::Uuid::now_v7())
}

async fn publish(a: PublishArgs, out: &mut (dyn Write + Send)) -> Result<(), Failure> {
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

async fn request(a: RequestArgs, out: &mut (dyn Write + Send)) -> Result<(), Failure> {
    let client = a.connection.client()?;
    let event = build_event(&a.event)?;
    let timeout = Duration::from_millis(a.timeout_ms);
    match client.request(&a.topic, &event, timeout).await {
        Ok(reply) => {
            print_line(out, &reply)?;
            Ok(())
        }
        Err(Error::Timeout) => Err(Failure {
            message: format!("no reply within {} ms", a.timeout_ms),
            status: 1,
        }),
        Err(e) => Err(e.into()),
    }
}

/// A subscription being read, whatever the transport.
enum Source {
    Sse(SseStream),
    Ws(WsSession),
    Tcp(TcpClient),
    Poll {
        client_id: String,
        buffered: VecDeque<Delivery>,
    },
}

impl Source {
    async fn open(
        client: &EventMeshClient,
        a: &SubscribeArgs,
        client_id: &str,
    ) -> Result<Source, Error> {
        let mut sub = SubscribeOptions::new(client_id, &a.topic);
        sub.group.clone_from(&a.group);
        sub.mode = a.mode.map(Into::into);
        sub.from = a.from.map(Into::into);
        Ok(match a.transport {
            SubscribeTransport::Sse => Source::Sse(client.sse(sub.into()).await?),
            SubscribeTransport::Ws => Source::Ws(client.websocket(sub.into()).await?),
            SubscribeTransport::Tcp => {
                let tcp = client.tcp(client_id).await?;
                tcp.subscribe(sub).await?;
                Source::Tcp(tcp)
            }
            SubscribeTransport::Poll => {
                client.subscribe(sub).await?;
                Source::Poll {
                    client_id: client_id.to_string(),
                    buffered: VecDeque::new(),
                }
            }
        })
    }

    /// The next delivery; `want` bounds how many a poll asks for.
    async fn next(
        &mut self,
        client: &EventMeshClient,
        want: u64,
    ) -> Option<Result<Delivery, Error>> {
        match self {
            Source::Sse(s) => s.next().await,
            Source::Ws(s) => s.next().await,
            Source::Tcp(s) => s.next().await,
            Source::Poll {
                client_id,
                buffered,
            } => loop {
                if let Some(d) = buffered.pop_front() {
                    return Some(Ok(d));
                }
                let max = usize::try_from(want.clamp(1, 100)).unwrap_or(100);
                match client.poll(client_id, Duration::from_secs(30), max).await {
                    Ok(got) => buffered.extend(got),
                    Err(e) => return Some(Err(e)),
                }
            },
        }
    }

    async fn ack(&self, client: &EventMeshClient, delivery_id: &str) -> Result<(), Error> {
        match self {
            Source::Ws(s) => s.ack(delivery_id),
            Source::Tcp(s) => s.ack(delivery_id).await,
            Source::Sse(_) | Source::Poll { .. } => client.ack(delivery_id).await,
        }
    }

    /// Closes the connection; with `forget`, removes the subscription too.
    async fn close(self, client: &EventMeshClient, client_id: &str, topic: &str, forget: bool) {
        let quick = client.clone().with_request_timeout(Duration::from_secs(3));
        match self {
            Source::Tcp(tcp) => {
                if forget {
                    let _ = tcp.unsubscribe(Some(topic)).await;
                }
                let _ = tcp.goodbye().await;
            }
            Source::Ws(ws) => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
                ws.close().await;
            }
            Source::Sse(sse) => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
                sse.close();
            }
            Source::Poll { .. } => {
                if forget {
                    let _ = quick.unsubscribe(client_id, Some(topic)).await;
                }
            }
        }
    }
}

async fn subscribe(a: SubscribeArgs, out: &mut (dyn Write + Send)) -> Result<(), Failure> {
    if a.count == Some(0) {
        return Err(usage("--count must be at least 1"));
    }
    let client = a.connection.client()?;
    let generated = a.client_id.is_none();
    let client_id = a.client_id.clone().unwrap_or_else(new_client_id);
    let mut source = Source::open(&client, &a, &client_id).await?;
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
            Some(Err(e)) => break Err(Failure::from(e)),
            Some(Ok(d)) => d,
        };
        match print_line(out, &d.event) {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(f) => break Err(f),
        }
        if let Err(e) = source.ack(&client, &d.delivery_id).await {
            break Err(e.into());
        }
        printed += 1;
    };
    source.close(&client, &client_id, &a.topic, generated).await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("eventmesh").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn parses_publish() {
        let ClientCommand::Publish(p) = parse(&[
            "publish",
            "--topic",
            "orders",
            "--data",
            "{\"a\":1}",
            "--type",
            "t.x",
            "--source",
            "/me",
            "--id",
            "42",
            "--transport",
            "tcp",
            "--server",
            "http://h:1",
            "--tcp-server",
            "h:2",
            "--token",
            "tok",
        ])
        .unwrap() else {
            panic!("not publish")
        };
        assert_eq!(p.topic, "orders");
        assert_eq!(p.event.data.as_deref(), Some("{\"a\":1}"));
        assert_eq!(p.event.ty, "t.x");
        assert_eq!(p.event.source, "/me");
        assert_eq!(p.event.id.as_deref(), Some("42"));
        assert_eq!(p.transport, PublishTransport::Tcp);
        assert_eq!(p.connection.server, "http://h:1");
        assert_eq!(p.connection.tcp_server, "h:2");
        assert_eq!(p.connection.token.as_deref(), Some("tok"));
    }

    #[test]
    fn publish_defaults_and_conflicts() {
        let ClientCommand::Publish(p) = parse(&["publish", "--topic", "t"]).unwrap() else {
            panic!()
        };
        assert_eq!(p.transport, PublishTransport::Http);
        assert_eq!(p.event.ty, "eventmesh.cli");
        assert_eq!(p.event.source, "/eventmesh/cli");
        assert!(p.event.id.is_none() && p.event.data.is_none());
        if std::env::var_os("EVENTMESH_SERVER").is_none() {
            assert_eq!(p.connection.server, "http://127.0.0.1:10105");
        }
        if std::env::var_os("EVENTMESH_TCP_SERVER").is_none() {
            assert_eq!(p.connection.tcp_server, "127.0.0.1:10000");
        }
        let e = parse(&["publish", "--topic", "t", "--data", "x", "--file", "f"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let e = parse(&["publish", "--data", "x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let e = parse(&["publish", "--topic", "t", "--transport", "sse"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }

    #[test]
    fn parses_subscribe() {
        let ClientCommand::Subscribe(s) = parse(&["subscribe", "--topic", "t"]).unwrap() else {
            panic!()
        };
        assert_eq!(s.transport, SubscribeTransport::Sse);
        assert!(s.group.is_none() && s.client_id.is_none() && s.count.is_none());
        let ClientCommand::Subscribe(s) = parse(&[
            "subscribe",
            "--topic",
            "t",
            "--group",
            "g",
            "--client-id",
            "c1",
            "--transport",
            "poll",
            "--from",
            "earliest",
            "--mode",
            "broadcast",
            "--count",
            "3",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.group.as_deref(), Some("g"));
        assert_eq!(s.client_id.as_deref(), Some("c1"));
        assert_eq!(s.transport, SubscribeTransport::Poll);
        assert_eq!(s.from, Some(FromArg::Earliest));
        assert_eq!(s.mode, Some(ModeArg::Broadcast));
        assert_eq!(s.count, Some(3));
        for t in ["sse", "ws", "tcp", "poll"] {
            assert!(parse(&["subscribe", "--topic", "t", "--transport", t]).is_ok());
        }
        assert!(parse(&["subscribe", "--topic", "t", "--count", "-1"]).is_err());
        assert!(parse(&["subscribe", "--topic", "t", "--from", "yesterday"]).is_err());
    }

    #[test]
    fn help_names_the_environment() {
        let help = parse(&["subscribe", "--help"]).unwrap_err().to_string();
        for needle in [
            "EVENTMESH_SERVER",
            "EVENTMESH_TCP_SERVER",
            "EVENTMESH_TOKEN",
            "cli-<uuid>",
            "[default: sse]",
        ] {
            assert!(help.contains(needle), "{needle} missing from:\n{help}");
        }
    }

    #[test]
    fn parses_request() {
        let ClientCommand::Request(r) =
            parse(&["request", "--topic", "q", "--data", "hi"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.timeout_ms, 30_000);
        let ClientCommand::Request(r) =
            parse(&["request", "--topic", "q", "--timeout-ms", "250"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.timeout_ms, 250);
    }

    #[test]
    fn data_json_versus_text() {
        let (d, ct) = event_data(b"{ \"a\" : [1, 2] }".to_vec());
        assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"{\"a\":[1,2]}")));
        assert_eq!(ct, "application/json");
        let (d, ct) = event_data(b"42".to_vec());
        assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"42")));
        assert_eq!(ct, "application/json");
        let (d, ct) = event_data(b"\"quoted\"".to_vec());
        assert_eq!(d, Data::Json(bytes::Bytes::from_static(b"\"quoted\"")));
        assert_eq!(ct, "application/json");
        let (d, ct) = event_data(b"hello world".to_vec());
        assert_eq!(d, Data::Text("hello world".into()));
        assert_eq!(ct, "text/plain");
        let (d, ct) = event_data(b"{not json".to_vec());
        assert_eq!(d, Data::Text("{not json".into()));
        assert_eq!(ct, "text/plain");
        let (d, ct) = event_data(vec![0xff, 0x00]);
        assert!(matches!(d, Data::Binary(_)));
        assert_eq!(ct, "application/octet-stream");
    }

    fn event_args(data: Option<&str>) -> EventArgs {
        EventArgs {
            data: data.map(str::to_string),
            file: None,
            ty: "eventmesh.cli".into(),
            source: "/eventmesh/cli".into(),
            id: None,
        }
    }

    #[test]
    fn builds_events() {
        let e = build_event(&event_args(Some("{\"n\":1}"))).unwrap();
        let v: Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(v["data"], serde_json::json!({"n": 1}));
        assert_eq!(v["datacontenttype"], "application/json");
        assert_eq!(v["type"], "eventmesh.cli");
        assert_eq!(v["source"], "/eventmesh/cli");
        assert!(uuid::Uuid::parse_str(v["id"].as_str().unwrap()).is_ok());

        let e = build_event(&event_args(Some("plain words"))).unwrap();
        let v: Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(v["data"], "plain words");
        assert_eq!(v["datacontenttype"], "text/plain");

        let e = build_event(&event_args(None)).unwrap();
        assert_eq!(e.data, Data::None);
        assert!(e.datacontenttype.is_none());

        let mut bad = event_args(None);
        bad.source = "has space".into();
        assert!(matches!(build_event(&bad), Err(Error::InvalidArgument(_))));

        let mut missing = event_args(None);
        missing.file = Some("/definitely/not/here.json".into());
        let e = build_event(&missing).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        assert_eq!(Failure::from(e).status, 2);
    }

    #[test]
    fn reads_data_files() {
        let path = std::env::temp_dir().join(format!("em-cli-{}.json", uuid::Uuid::now_v7()));
        std::fs::write(&path, b"{\"from\": \"file\"}\n").unwrap();
        let mut a = event_args(None);
        a.file = Some(path.clone());
        let e = build_event(&a).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            e.data,
            Data::Json(bytes::Bytes::from_static(b"{\"from\":\"file\"}"))
        );
    }

    #[test]
    fn exit_statuses() {
        let unreachable = Failure::from(Error::Unreachable {
            server: "http://127.0.0.1:1".into(),
            cause: "Connection refused (os error 111)".into(),
        });
        assert_eq!(unreachable.status, 1);
        assert_eq!(
            unreachable.message,
            "cannot reach the eventmesh server at http://127.0.0.1:1: Connection refused (os error 111)"
        );
        let api = Failure::from(Error::from_api_body(
            403,
            br#"{"error":"forbidden","message":"no publish on t"}"#,
        ));
        assert_eq!(api.status, 1);
        assert_eq!(api.message, "no publish on t (forbidden, HTTP 403)");
        assert_eq!(Failure::from(Error::InvalidArgument("x".into())).status, 2);
    }

    #[tokio::test]
    async fn unreachable_server_fails_with_status_1() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let server = format!("http://127.0.0.1:{port}");
        for args in [
            vec![
                "publish", "--topic", "t", "--data", "1", "--server", &server,
            ],
            vec!["request", "--topic", "t", "--server", &server],
            vec!["subscribe", "--topic", "t", "--server", &server],
            vec![
                "subscribe",
                "--topic",
                "t",
                "--transport",
                "poll",
                "--server",
                &server,
            ],
            vec![
                "subscribe",
                "--topic",
                "t",
                "--transport",
                "ws",
                "--server",
                &server,
            ],
        ] {
            let cmd = parse(&args).unwrap();
            let mut out = Vec::new();
            let f = execute(cmd, &mut out).await.unwrap_err();
            assert_eq!(f.status, 1, "{args:?}");
            assert!(
                f.message
                    .starts_with(&format!("cannot reach the eventmesh server at {server}: ")),
                "{args:?}: {}",
                f.message
            );
            assert!(out.is_empty());
        }
    }

    #[tokio::test]
    async fn publish_and_subscribe_over_tcp() {
        let (addr, server) = crate::testutil::tcp_server(0).await;
        let cmd = parse(&[
            "publish",
            "--topic",
            "orders",
            "--data",
            "{\"n\":1}",
            "--id",
            "e-42",
            "--transport",
            "tcp",
            "--tcp-server",
            &addr,
        ])
        .unwrap();
        let mut out = Vec::new();
        execute(cmd, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":\"e-42\",\"topic\":\"orders\",\"partition\":0,\"offset\":5}\n"
        );
        let frames = server.await.unwrap();
        assert_eq!(
            frames.last().unwrap().kind,
            eventmesh_core::tcp_frame::FrameType::Goodbye
        );

        let (addr, server) = crate::testutil::tcp_server(0).await;
        let cmd = parse(&[
            "subscribe",
            "--topic",
            "orders",
            "--transport",
            "tcp",
            "--count",
            "1",
            "--tcp-server",
            &addr,
        ])
        .unwrap();
        let mut out = Vec::new();
        execute(cmd, &mut out).await.unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "e1");
        assert_eq!(v["data"], serde_json::json!({"n": 1}));
        let frames = server.await.unwrap();
        use eventmesh_core::tcp_frame::FrameType as F;
        let kinds: Vec<F> = frames.iter().map(|f| f.kind).collect();
        let ack = kinds.iter().position(|k| *k == F::Ack).expect("acked");
        let unsub = kinds
            .iter()
            .position(|k| *k == F::Unsubscribe)
            .expect("unsubscribed");
        assert!(ack < unsub);
        assert_eq!(kinds.last(), Some(&F::Goodbye));
        let hello: Value = serde_json::from_slice(&frames[0].payload).unwrap();
        assert!(hello["clientId"].as_str().unwrap().starts_with("cli-"));
    }

    #[tokio::test]
    async fn request_timeout_message() {
        use crate::testutil::{http_server, Reply};
        let (base, _seen) = http_server(|_, _| {
            Reply::json(408, r#"{"error":"request_timeout","message":"no reply"}"#)
        })
        .await;
        let cmd = parse(&[
            "request",
            "--topic",
            "q",
            "--timeout-ms",
            "50",
            "--server",
            &base,
        ])
        .unwrap();
        let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
        assert_eq!(f.status, 1);
        assert_eq!(f.message, "no reply within 50 ms");
    }

    #[tokio::test]
    async fn subscribe_over_poll_prints_and_acks() {
        use crate::testutil::{http_server, Reply};
        let (base, mut seen) = http_server(|req, _| match req.target.split('?').next().unwrap() {
            "/events/subscribe" => Reply::json(
                200,
                r#"{"subscriptionId":"s","clientId":"me","topic":"t","group":"default","mode":"LOAD_BALANCE"}"#,
            ),
            "/events/poll" => Reply::json(
                200,
                r#"[{"deliveryId":"d1","event":{"specversion":"1.0","id":"1","source":"/s","type":"t"}},{"deliveryId":"d2","event":{"specversion":"1.0","id":"2","source":"/s","type":"t"}}]"#,
            ),
            "/events/ack" => Reply::json(200, r#"{"status":"acked"}"#),
            _ => Reply::json(404, r#"{"error":"not_found","message":"no"}"#),
        })
        .await;
        let cmd = parse(&[
            "subscribe",
            "--topic",
            "t",
            "--transport",
            "poll",
            "--client-id",
            "me",
            "--count",
            "2",
            "--server",
            &base,
            "--token",
            "tok",
        ])
        .unwrap();
        let mut out = Vec::new();
        execute(cmd, &mut out).await.unwrap();
        let text = String::from_utf8(out).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(ids, ["1", "2"]);
        let mut targets = Vec::new();
        while let Ok(r) = seen.try_recv() {
            assert_eq!(r.header("authorization"), Some("Bearer tok"));
            targets.push((r.target.clone(), String::from_utf8(r.body).unwrap()));
        }
        assert_eq!(targets[0].0, "/events/subscribe");
        assert_eq!(
            targets[1].0,
            "/events/poll?clientId=me&timeoutMs=30000&max=2"
        );
        assert_eq!(targets[2].1, r#"{"deliveryId":"d1"}"#);
        assert_eq!(targets[3].1, r#"{"deliveryId":"d2"}"#);
        // An explicit --client-id keeps its subscription.
        assert_eq!(targets.len(), 4, "{targets:?}");
    }

    #[test]
    fn futures_are_send() {
        fn send<T: Send>(_: &T) {}
        let cmd = parse(&["publish", "--topic", "t"]).unwrap();
        let fut = run(cmd);
        send(&fut);
    }

    #[tokio::test]
    // The handshake callback's signature is tungstenite's.
    #[allow(clippy::result_large_err)]
    async fn publish_over_ws_without_a_subscription() {
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
        use tokio_tungstenite::tungstenite::Message;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            for n in 0.. {
                let (mut sock, _) = listener.accept().await.unwrap();
                let seen_tx = seen_tx.clone();
                tokio::spawn(async move {
                    if n == 2 {
                        // The unsubscribe, over plain HTTP.
                        let mut buf = vec![0u8; 4096];
                        let k = sock.read(&mut buf).await.unwrap();
                        let text = String::from_utf8_lossy(&buf[..k]).to_string();
                        seen_tx
                            .send(text.lines().next().unwrap().to_string())
                            .unwrap();
                        let body = r#"{"removed":true}"#;
                        let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                        sock.write_all(resp.as_bytes()).await.unwrap();
                        return;
                    }
                    let tx = seen_tx.clone();
                    let accepted = tokio_tungstenite::accept_hdr_async(
                        sock,
                        move |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                            tx.send(req.uri().to_string()).unwrap();
                            if n == 0 {
                                let mut e = ErrorResponse::new(Some(
                                    r#"{"error":"unknown_client","message":"no pull subscription"}"#
                                        .to_string(),
                                ));
                                *e.status_mut() =
                                    tokio_tungstenite::tungstenite::http::StatusCode::NOT_FOUND;
                                Err(e)
                            } else {
                                Ok(resp)
                            }
                        },
                    )
                    .await;
                    let Ok(mut ws) = accepted else { return };
                    while let Some(Ok(m)) = ws.next().await {
                        let Message::Text(t) = m else { continue };
                        let v: Value = serde_json::from_str(t.as_str()).unwrap();
                        let a = serde_json::json!({"type":"published","requestId":v["requestId"],
                            "id":v["event"]["id"],"topic":v["topic"],"partition":2,"offset":8});
                        ws.send(Message::text(a.to_string())).await.unwrap();
                    }
                });
            }
        });
        let cmd = parse(&[
            "publish",
            "--topic",
            "orders",
            "--data",
            "x",
            "--id",
            "e-1",
            "--transport",
            "ws",
            "--server",
            &base,
        ])
        .unwrap();
        let mut out = Vec::new();
        execute(cmd, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":\"e-1\",\"topic\":\"orders\",\"partition\":2,\"offset\":8}\n"
        );
        let first = seen.recv().await.unwrap();
        assert!(first.starts_with("/events/ws?clientId=cli-"), "{first}");
        assert!(!first.contains("topic="));
        let id = first.trim_start_matches("/events/ws?clientId=");
        assert_eq!(
            seen.recv().await.unwrap(),
            format!("/events/ws?clientId={id}&topic=orders&group={id}")
        );
        assert_eq!(
            seen.recv().await.unwrap(),
            "POST /events/unsubscribe HTTP/1.1"
        );
    }

    #[tokio::test]
    async fn bad_server_url_is_a_usage_error() {
        let cmd = parse(&["publish", "--topic", "t", "--server", "ftp://x"]).unwrap();
        let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
        assert_eq!(f.status, 2);
        let cmd = parse(&["subscribe", "--topic", "t", "--count", "0"]).unwrap();
        let f = execute(cmd, &mut Vec::new()).await.unwrap_err();
        assert_eq!(f.status, 2);
    }
}
