//! `eventmesh reply` (alias `respond`): the answering side of
//! `eventmesh request`. It subscribes to the requests' topic, answers each
//! request through the SDK's `reply_to` (the reply carries the request's
//! `correlationid`), acknowledges it (over TCP in the same `REPLY_ACK`
//! frame), and prints the reply as one JSON line.
//!
//! Invariants:
//! - A request is acknowledged only once it was answered (or could no
//!   longer be: its requester stopped waiting), so a responder that dies
//!   midway leaves the request to another one.
//! - A command run by `--exec` never holds the responder longer than
//!   `--exec-timeout-ms`: it is killed then, and the request gets an error
//!   reply, as for a command that exits non-zero or cannot start.
//! - An event without a `correlationid` is no request: it is acknowledged
//!   and skipped with a warning, and not counted.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use eventmesh_core::{CloudEvent, Data};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::event::event_data;
use super::{new_client_id, print_line, usage, Connection, Failed, Source, SubscribeTransport};
use crate::client::EventMeshClient;
use crate::error::Error;
use crate::types::{Delivery, SubscribeOptions};

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("answer").required(true).args(["echo", "exec"])))]
pub struct ReplyArgs {
    /// Topic the requests are published to.
    #[arg(long)]
    pub topic: String,
    /// Answer each request with its own data and datacontenttype.
    #[arg(long)]
    pub echo: bool,
    /// Answer each request with what this shell command (sh -c) prints:
    /// the request's data is its standard input, its standard output
    /// (one trailing newline dropped) the reply's data, JSON when it parses
    /// as JSON, else text. The request's attributes are in EVENTMESH_ID,
    /// EVENTMESH_TYPE, EVENTMESH_SOURCE, EVENTMESH_SUBJECT. A command that
    /// exits non-zero, cannot start or outlives --exec-timeout-ms gets an
    /// error reply of type <--type>.error with data {"error", "exitCode",
    /// "stderr"}.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Kill a command still running after this many milliseconds.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub exec_timeout_ms: u64,
    /// Stop after answering this many requests.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// The reply's type attribute.
    #[arg(
        long = "type",
        value_name = "TYPE",
        default_value = "eventmesh.cli.reply"
    )]
    pub ty: String,
    /// The reply's source attribute.
    #[arg(long, value_name = "SRC", default_value = "/eventmesh/cli")]
    pub source: String,
    /// Consumer group: responders in one group share the requests
    /// (server default: "default").
    #[arg(long)]
    pub group: Option<String>,
    #[arg(
        long,
        value_name = "ID",
        help = "Client id (default: cli-<uuid>, unsubscribed again on exit)"
    )]
    pub client_id: Option<String>,
    /// How to receive requests (replies go back the same way; over HTTP
    /// for sse and poll).
    #[arg(long, value_enum, default_value_t = SubscribeTransport::Sse)]
    pub transport: SubscribeTransport,
    #[command(flatten)]
    pub connection: Connection,
}

/// How a request is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    Echo,
    Exec { command: String, timeout: Duration },
}

impl ReplyArgs {
    fn answer(&self) -> Answer {
        match &self.exec {
            Some(command) => Answer::Exec {
                command: command.clone(),
                timeout: Duration::from_millis(self.exec_timeout_ms.max(1)),
            },
            None => Answer::Echo,
        }
    }
}

pub(super) async fn reply(a: ReplyArgs, out: &mut (dyn Write + Send)) -> Result<(), Failed> {
    if a.count == Some(0) {
        return Err(usage("--count must be at least 1").into());
    }
    let client = a.connection.client()?;
    let generated = a.client_id.is_none();
    let client_id = a.client_id.clone().unwrap_or_else(new_client_id);
    let mut sub = SubscribeOptions::new(&client_id, &a.topic);
    sub.group.clone_from(&a.group);
    let mut source = Source::open(&client, sub, a.transport).await?;
    let answer = a.answer();
    let mut served = 0u64;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let result = loop {
        if a.count.is_some_and(|n| served >= n) {
            break Ok(());
        }
        let next = tokio::select! {
            n = source.next(&client, 1) => n,
            _ = &mut interrupted => break Ok(()),
        };
        let d = match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(Failed::Call(e)),
            Some(Ok(d)) => d,
        };
        // Not acknowledged when it could not be answered: it comes again.
        let (outcome, acked) = match serve_one(&client, &source, &a, &answer, &d, out).await {
            Ok(o) => o,
            Err(f) => break Err(f),
        };
        if !acked {
            if let Err(e) = source.ack(&client, &d.delivery_id).await {
                break Err(e.into());
            }
        }
        match outcome {
            Served::Answered => served += 1,
            Served::Skipped => {}
            Served::Closed => break Ok(()),
        }
    };
    source.close(&client, &client_id, &a.topic, generated).await;
    result
}

enum Served {
    /// Answered (or its requester had stopped waiting).
    Answered,
    /// Not a request.
    Skipped,
    /// Answered, but stdout is gone: the command ends.
    Closed,
}

async fn serve_one(
    client: &EventMeshClient,
    source: &Source,
    a: &ReplyArgs,
    answer: &Answer,
    d: &Delivery,
    out: &mut (dyn Write + Send),
) -> Result<(Served, bool), Failed> {
    let Some(correlation) = d.correlation_id().map(str::to_string) else {
        eprintln!(
            "warning: event {} on {} carries no correlationid: not a request, skipped",
            d.event["id"], a.topic
        );
        return Ok((Served::Skipped, false));
    };
    let request = d.cloud_event()?;
    let reply = match answer {
        Answer::Echo => echo(&request, &a.ty, &a.source),
        Answer::Exec { command, timeout } => {
            run_command(command, *timeout, &request, &a.ty, &a.source).await
        }
    };
    let acked = match source.reply_to(client, d, &reply).await {
        Ok(acked) => acked,
        Err(e) if e.code() == Some("unknown_correlation") => {
            eprintln!(
                "warning: request {} (correlationid {correlation}) is no longer waited for: \
                 its requester gave up; reply dropped",
                request.id
            );
            return Ok((Served::Answered, false));
        }
        Err(e) => return Err(e.into()),
    };
    let mut sent: serde_json::Value = serde_json::from_slice(&reply.to_json())
        .map_err(|e| Failed::Call(Error::Protocol(format!("cannot print the reply: {e}"))))?;
    sent[crate::types::CORRELATION_ID] = json!(correlation);
    let served = if print_line(out, &sent)? {
        Served::Answered
    } else {
        Served::Closed
    };
    Ok((served, acked))
}

/// A new reply event of type `ty` from `source`, carrying `data`.
fn reply_event(ty: &str, source: &str, data: Data, content_type: Option<String>) -> CloudEvent {
    CloudEvent {
        id: uuid::Uuid::now_v7().to_string(),
        source: source.to_string(),
        ty: ty.to_string(),
        datacontenttype: content_type,
        data,
        ..CloudEvent::default()
    }
}

/// `--echo`: the request's data and datacontenttype, in a reply of its own.
pub(super) fn echo(request: &CloudEvent, ty: &str, source: &str) -> CloudEvent {
    reply_event(
        ty,
        source,
        request.data.clone(),
        request.datacontenttype.clone(),
    )
}

/// `--exec`: runs `command` with the request's data on stdin; its stdout
/// as the reply, or an error reply (`<ty>.error`) saying why not.
pub(super) async fn run_command(
    command: &str,
    timeout: Duration,
    request: &CloudEvent,
    ty: &str,
    source: &str,
) -> CloudEvent {
    let failed = |why: String, exit_code: Option<i32>, stderr: &[u8]| {
        eprintln!("warning: --exec for request {}: {why}", request.id);
        let body = json!({
            "error": why,
            "exitCode": exit_code,
            "stderr": String::from_utf8_lossy(stderr),
        });
        reply_event(
            &format!("{ty}.error"),
            source,
            Data::Json(serde_json::to_vec(&body).unwrap_or_default().into()),
            Some("application/json".into()),
        )
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .env("EVENTMESH_ID", &request.id)
        .env("EVENTMESH_TYPE", &request.ty)
        .env("EVENTMESH_SOURCE", &request.source)
        .env(
            "EVENTMESH_SUBJECT",
            request.subject.as_deref().unwrap_or(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot run sh -c {command:?}: {e}"), None, b""),
    };
    let input = request.data.as_bytes().to_vec();
    let stdin = child.stdin.take();
    // Fed while the output is read, so that neither side fills a pipe and
    // waits for the other; a command that does not read its input is fine.
    let feeding = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input).await;
        }
    });
    let ran = tokio::time::timeout(timeout, child.wait_with_output()).await;
    feeding.abort();
    let output = match ran {
        // The child is killed as its future is dropped (kill_on_drop).
        Err(_) => {
            return failed(
                format!("killed after {} ms", timeout.as_millis()),
                None,
                b"",
            )
        }
        Ok(Err(e)) => return failed(format!("cannot wait for the command: {e}"), None, b""),
        Ok(Ok(o)) => o,
    };
    if !output.status.success() {
        let code = output.status.code();
        let why = match code {
            Some(c) => format!("exited with status {c}"),
            None => "killed by a signal".to_string(),
        };
        return failed(why, code, &output.stderr);
    }
    std::io::stderr().write_all(&output.stderr).ok();
    let mut stdout = output.stdout;
    if stdout.ends_with(b"\n") {
        stdout.pop();
        if stdout.ends_with(b"\r") {
            stdout.pop();
        }
    }
    if stdout.is_empty() {
        return reply_event(ty, source, Data::None, None);
    }
    let (data, content_type) = event_data(stdout);
    reply_event(ty, source, data, Some(content_type.to_string()))
}
