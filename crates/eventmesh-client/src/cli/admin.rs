//! `eventmesh admin ...`: the admin API from a terminal. Each subcommand is
//! one or two admin requests; the answer is printed as an aligned table
//! (numbers right-aligned), or with `--json` exactly as the API gave it,
//! so that scripts see what the dashboard sees.
//!
//! Failures name their cause: a refused token (401), a server whose admin
//! API is locked (503 `admin_locked`: no `eventmesh.admin.token` set), an
//! unreachable server, and every other API error as its code and message.

use std::io::Write;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::Failure;

#[path = "admin_time.rs"]
mod time;
pub use time::{GroupsCommand, ScheduledCommand};
#[path = "admin_agents.rs"]
mod agents;
pub use agents::AgentsArgs;
#[path = "admin_links.rs"]
mod links;
pub use links::LinksCommand;
#[path = "admin_dlq.rs"]
mod dlq;
pub use dlq::DlqCommand;
#[path = "admin_a2a.rs"]
mod a2a;
pub use a2a::A2aCommand;

/// Where the admin API is, and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminTarget {
    /// Admin HTTP URL of the eventmesh server.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "EVENTMESH_ADMIN_SERVER",
        default_value = super::hints::DEFAULT_ADMIN_SERVER
    )]
    pub admin_server: String,
    /// The server's admin token (eventmesh.admin.token).
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "EVENTMESH_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// PEM file of certificate authorities to trust for an https:// admin
    /// port (besides the public web roots).
    #[arg(long, global = true, value_name = "PATH", env = "EVENTMESH_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, when the admin port requires mutual
    /// TLS (with --key-file).
    #[arg(long, global = true, value_name = "PATH", env = "EVENTMESH_CERT_FILE")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(long, global = true, value_name = "PATH", env = "EVENTMESH_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Clone, clap::Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
    #[command(flatten)]
    pub target: AdminTarget,
}

/// The admin subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AdminCommand {
    /// List the topics with their partitions and end offsets.
    Topics,
    /// Create, delete or show one topic.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// List the subscriptions (of one topic).
    Subscriptions {
        #[arg(long)]
        topic: Option<String>,
    },
    /// List the subscribed clients with what they hold.
    Clients,
    /// Committed offsets and lag of every consumer of a topic.
    Offsets {
        #[arg(long)]
        topic: String,
    },
    /// Replay a consumer group or skip it ahead.
    #[command(subcommand)]
    Groups(GroupsCommand),
    /// List or cancel events held back until their deliverat or
    /// deliverafter time.
    #[command(subcommand)]
    Scheduled(ScheduledCommand),
    /// Browse, replay or delete dead letters.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Instances, partition owners and handovers (PARTITION_OWNED_PULL).
    Cluster,
    /// List the connectors with their status.
    Connectors,
    /// The mesh links to other clusters: list, get, create, delete, pause,
    /// resume.
    #[command(subcommand)]
    Links(LinksCommand),
    /// Search the A2A agents attached to the mesh (every tenant's).
    Agents(AgentsArgs),
    /// The A2A gateway's tasks (every tenant's): list, get, cancel.
    #[command(subcommand)]
    A2a(A2aCommand),
    /// The effective configuration, secrets redacted.
    Config,
    /// Re-read the gate's files and the TLS files without a restart.
    Reload,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (default: eventmesh.topic.default.partitions).
        #[arg(long)]
        partitions: Option<u32>,
        /// Keep events this long, in milliseconds (0: no age limit).
        #[arg(long, value_name = "MS")]
        retention_ms: Option<u64>,
        /// Keep at most this many payload bytes per partition (0: no limit).
        #[arg(long, value_name = "BYTES")]
        retention_bytes: Option<u64>,
        /// Events without an `expirytime` expire this many milliseconds
        /// after they were published (not delivered after it).
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        ttl_ms: Option<u64>,
        /// Keep its events in memory only (lost on a crash or restart;
        /// for requests and other events that need no durability).
        #[arg(long)]
        memory: bool,
    },
    /// Delete a topic, its records and its consumers' offsets.
    Delete {
        name: String,
        /// Remove its subscriptions first instead of refusing.
        #[arg(long)]
        force: bool,
    },
    /// A topic's partitions, retention and consumers.
    Show { name: String },
}

/// The admin API over HTTP.
struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

fn fail(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 1,
        api_code: None,
    }
}

impl AdminClient {
    fn new(t: &AdminTarget) -> Result<Self, Failure> {
        let base = t.admin_server.trim_end_matches('/').to_string();
        if !base.starts_with("http://") && !base.starts_with("https://") {
            return Err(super::usage(format!(
                "--admin-server {base:?} is not an http:// or https:// URL"
            )));
        }
        let files = crate::TlsFiles {
            ca_file: t.ca_file.clone(),
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
        };
        let mut http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60));
        if !files.is_default() || base.starts_with("https://") {
            let config = files
                .client_config()
                .map_err(|e| super::usage(e.to_string()))?;
            http = http.use_preconfigured_tls((*config).clone());
        }
        let http = http
            .build()
            .map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
        Ok(AdminClient {
            http,
            base,
            token: t.admin_token.clone().filter(|t| !t.is_empty()),
        })
    }

    /// One request; the JSON answer (`Null` for 204), or a failure naming
    /// the cause.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req
            .send()
            .await
            .map_err(|e| fail(format!("cannot reach the admin API at {}: {e}", self.base)))?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        let v: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status.is_success() {
            return Ok(v);
        }
        let code = v["error"].as_str().unwrap_or("").to_string();
        let message = v["message"].as_str().unwrap_or("").to_string();
        Err(match (status.as_u16(), code.as_str()) {
            (401, _) if self.token.is_none() => fail(format!(
                "no admin token given (use --admin-token or EVENTMESH_ADMIN_TOKEN with the \
                 server's eventmesh.admin.token): 401 {code}"
            )),
            (401, _) => fail(format!(
                "the admin token was not accepted (401 {code}): pass the server's \
                 eventmesh.admin.token with --admin-token or EVENTMESH_ADMIN_TOKEN"
            )),
            (503, "admin_locked") => fail(
                "the server's admin API is locked (503 admin_locked): it has no admin \
                 token configured; set eventmesh.admin.token on the server",
            ),
            (404, "not_found") if !self.is_admin_port().await => fail(format!(
                "{} looks like a traffic port, not the admin port (404 not_found: it has no \
                 admin routes); admin commands use --admin-server or EVENTMESH_ADMIN_SERVER \
                 (default {})",
                self.base,
                super::hints::DEFAULT_ADMIN_SERVER
            )),
            (s, c) if !c.is_empty() => {
                // The API names its query parameter; here it is a flag.
                let message = match c {
                    "topic_in_use" | "group_busy" => message.replace("force=true", "--force"),
                    _ => message,
                };
                let mut f = fail(format!("{s} {c}: {message}"));
                f.api_code = Some(c.to_string());
                f
            }
            (s, _) => fail(format!("{s} from {url}")),
        })
    }

    /// True when the server answers the admin port's `GET /admin/health`
    /// (within 3 s).
    async fn is_admin_port(&self) -> bool {
        let probe = self
            .http
            .get(format!("{}/admin/health", self.base))
            .timeout(std::time::Duration::from_secs(3))
            .send()
            .await;
        probe.is_ok_and(|r| r.status().is_success())
    }

    async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call(reqwest::Method::GET, path, None).await
    }
}

/// Percent-encodes a path segment or query value.
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A cell of a table: numbers are right-aligned.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) if s.is_empty() => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Writes rows under headers, each column as wide as its widest cell,
/// numbers right-aligned.
fn table(
    out: &mut (dyn Write + Send),
    headers: &[&str],
    rows: &[Vec<String>],
) -> Result<(), Failure> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..headers.len())
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i)
                        .is_some_and(|c| c == "-" || c.parse::<f64>().is_ok())
                })
        })
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric[i] {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        l
    };
    let mut text = line(headers.to_vec());
    text.push('\n');
    for r in rows {
        text.push_str(&line(r.iter().map(String::as_str).collect()));
        text.push('\n');
    }
    write_out(out, &text)
}

/// Tables of several arrays of one answer, a blank line between them:
/// each `(field, headers, fields of its items)`.
type Section<'a> = (&'a str, &'a [&'a str], &'a [&'a str]);

fn sections(out: &mut (dyn Write + Send), v: &Value, parts: &[Section]) -> Result<(), Failure> {
    for (k, (field, headers, fields)) in parts.iter().enumerate() {
        if k > 0 {
            write_out(out, "\n")?;
        }
        table(out, headers, &rows_of(&v[*field], fields))?;
    }
    Ok(())
}

fn write_out(out: &mut (dyn Write + Send), text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(fail(format!("cannot write to stdout: {e}"))),
    }
}

fn print_json(out: &mut (dyn Write + Send), v: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v).map_err(|e| fail(e.to_string()))?;
    write_out(out, &format!("{text}\n"))
}

/// The rows of the array `items`, each made by `row`.
fn rows_by(items: &Value, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    items
        .as_array()
        .map(|a| a.iter().map(row).collect())
        .unwrap_or_default()
}

/// The rows of `items`, one cell per field.
fn rows_of(items: &Value, fields: &[&str]) -> Vec<Vec<String>> {
    rows_by(items, |it| {
        fields.iter().map(|f| cell(pointer(it, f))).collect()
    })
}

/// A field by name, or by `/`-separated path.
fn pointer<'a>(v: &'a Value, field: &str) -> &'a Value {
    if field.contains('/') {
        v.pointer(&format!("/{field}")).unwrap_or(&Value::Null)
    } else {
        &v[field]
    }
}

/// Runs one admin command, printing to `out`.
pub(super) async fn admin(args: AdminArgs, out: &mut (dyn Write + Send)) -> Result<(), Failure> {
    let c = AdminClient::new(&args.target)?;
    let as_json = args.target.json;
    let show = |out: &mut (dyn Write + Send), v: &Value, headers: &[&str], fields: &[&str]| {
        if as_json {
            print_json(out, v)
        } else {
            table(out, headers, &rows_of(v, fields))
        }
    };
    match args.command {
        AdminCommand::Topics => {
            let v = c.get("/admin/topics").await?;
            if as_json {
                return print_json(out, &v);
            }
            let rows = rows_by(&v, |t| {
                let ends: u64 = t["endOffsets"]
                    .as_array()
                    .map(|e| e.iter().filter_map(Value::as_u64).sum())
                    .unwrap_or(0);
                vec![cell(&t["name"]), cell(&t["partitions"]), ends.to_string()]
            });
            table(out, &["TOPIC", "PARTITIONS", "END OFFSETS"], &rows)
        }
        AdminCommand::Topic(TopicCommand::Create {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            ttl_ms,
            memory,
        }) => {
            let mut body = json!({ "name": name });
            if memory {
                body["durability"] = json!("memory");
            }
            if let Some(t) = ttl_ms {
                body["ttlMs"] = json!(t);
            }
            if let Some(p) = partitions {
                body["partitions"] = json!(p);
            }
            if retention_ms.is_some() || retention_bytes.is_some() {
                body["retention"] =
                    json!({"ms": retention_ms.unwrap_or(0), "bytes": retention_bytes.unwrap_or(0)});
            }
            let v = c
                .call(reqwest::Method::POST, "/admin/topics", Some(body))
                .await?;
            if as_json {
                return print_json(out, &v);
            }
            write_out(
                out,
                &format!(
                    "created topic {} ({} partitions, {})\n",
                    cell(&v["name"]),
                    cell(&v["partitions"]),
                    cell(&v["durability"])
                ),
            )
        }
        AdminCommand::Topic(TopicCommand::Delete { name, force }) => {
            let path = format!(
                "/admin/topics/{}{}",
                enc(&name),
                if force { "?force=true" } else { "" }
            );
            c.call(reqwest::Method::DELETE, &path, None).await?;
            if as_json {
                return print_json(out, &json!({ "deleted": name }));
            }
            write_out(out, &format!("deleted topic {name}\n"))
        }
        AdminCommand::Topic(TopicCommand::Show { name }) => {
            let v = c.get(&format!("/admin/topics/{}", enc(&name))).await?;
            if as_json {
                return print_json(out, &v);
            }
            let r = &v["retention"];
            write_out(
                out,
                &format!(
                    "topic {}: {} partitions, {} bytes, retention {} ms / {} bytes ({}), {} subscriptions\n\n",
                    cell(&v["name"]),
                    cell(&v["partitions"]),
                    cell(&v["bytes"]),
                    cell(&r["ms"]),
                    cell(&r["bytes"]),
                    cell(&r["source"]),
                    cell(&v["subscriptions"]),
                ),
            )?;
            sections(
                out,
                &v,
                &[
                    (
                        "offsets",
                        &["PARTITION", "START", "END", "BYTES"],
                        &["partition", "startOffset", "endOffset", "bytes"],
                    ),
                    ("consumers", &["CONSUMER", "LAG"], &["consumer", "lag"]),
                ],
            )
        }
        AdminCommand::Subscriptions { topic } => {
            let path = match topic {
                Some(t) => format!("/admin/subscriptions?topic={}", enc(&t)),
                None => "/admin/subscriptions".to_string(),
            };
            let v = c.get(&path).await?;
            show(
                out,
                &v,
                &[
                    "CLIENT", "TOPIC", "GROUP", "MODE", "URL", "FILTERS", "ATTACHED",
                ],
                &[
                    "clientId",
                    "topic",
                    "group",
                    "mode",
                    "url",
                    "filters",
                    "attachedTopics",
                ],
            )
        }
        AdminCommand::Clients => {
            let v = c.get("/admin/clients").await?;
            if as_json {
                return print_json(out, &v);
            }
            let rows = rows_by(&v, |cl| {
                let subs = rows_of(&cl["subscriptions"], &["topic", "transport"])
                    .into_iter()
                    .map(|r| format!("{} ({})", r[0], r[1]))
                    .collect::<Vec<_>>()
                    .join(", ");
                vec![
                    cell(&cl["clientId"]),
                    cell(&cl["inflight"]),
                    cell(&cl["queued"]),
                    cell(&cl["maxInflight"]),
                    cell(&cl["state"]),
                    cell(&cl["home"]),
                    mqtt_session(&cl["mqtt"]),
                    subs,
                ]
            });
            table(
                out,
                &[
                    "CLIENT",
                    "INFLIGHT",
                    "QUEUED",
                    "MAX",
                    "STATE",
                    "HOME",
                    "MQTT",
                    "SUBSCRIPTIONS",
                ],
                &rows,
            )
        }
        AdminCommand::Offsets { topic } => {
            let v = c
                .get(&format!("/admin/offsets?topic={}", enc(&topic)))
                .await?;
            show(
                out,
                &v,
                &["CONSUMER", "PARTITION", "COMMITTED", "END", "LAG"],
                &["consumer", "partition", "committed", "end", "lag"],
            )
        }
        AdminCommand::Groups(cmd) => time::groups(&c, cmd, as_json, out).await,
        AdminCommand::Scheduled(cmd) => time::scheduled(&c, cmd, as_json, out).await,
        AdminCommand::Agents(args) => agents::agents(&c, args, as_json, out).await,
        AdminCommand::Links(cmd) => links::links(&c, cmd, as_json, out).await,
        AdminCommand::Dlq(cmd) => dlq::dlq(&c, cmd, as_json, out).await,
        AdminCommand::A2a(cmd) => a2a::a2a(&c, cmd, as_json, out).await,
        AdminCommand::Cluster => {
            let v = match c.get("/admin/cluster").await {
                Ok(v) => v,
                Err(f) if f.api_code.as_deref() == Some("no_ownership") => {
                    let note = json!({"ownership": false, "message": "partition ownership is off: every instance reads every partition (LOCAL_STICKY_PULL or a single node)"});
                    return if as_json {
                        print_json(out, &note)
                    } else {
                        write_out(out, &format!("{}\n", cell(&note["message"])))
                    };
                }
                Err(f) => return Err(f),
            };
            if as_json {
                return print_json(out, &v);
            }
            sections(
                out,
                &v,
                &[
                    (
                        "instances",
                        &["INSTANCE", "ADDRESS", "ADMIN", "OWNED"],
                        &["id", "address", "adminAddress", "ownedPartitions"],
                    ),
                    (
                        "partitions",
                        &["TOPIC", "PARTITION", "OWNER", "TOKEN", "ASSIGNEE"],
                        &["topic", "partition", "owner", "token", "assignee"],
                    ),
                ],
            )?;
            write_out(
                out,
                &format!("\nhandovers under way: {}\n", cell(&v["handovers"])),
            )
        }
        AdminCommand::Connectors => {
            let v = c.get("/admin/connectors").await?;
            show(
                out,
                &v,
                &[
                    "NAME",
                    "KIND",
                    "TOPIC",
                    "STATE",
                    "INSTANCE",
                    "EVENTS",
                    "EVENTS/S",
                    "LAG",
                    "LAST ERROR",
                ],
                &[
                    "name",
                    "kind",
                    "topic",
                    "status/state",
                    "status/instance",
                    "status/events",
                    "status/eventsPerSecond",
                    "status/lag",
                    "status/lastError",
                ],
            )
        }
        AdminCommand::Config => {
            let v = c.get("/admin/config").await?;
            if as_json {
                return print_json(out, &v);
            }
            let rows: Vec<Vec<String>> = v
                .as_object()
                .map(|m| m.iter().map(|(k, v)| vec![k.clone(), cell(v)]).collect())
                .unwrap_or_default();
            table(out, &["KEY", "VALUE"], &rows)
        }
        AdminCommand::Reload => {
            let v = c.call(reqwest::Method::POST, "/admin/reload", None).await?;
            if as_json {
                return print_json(out, &v);
            }
            let restart: Vec<String> = v["restartNeeded"]
                .as_array()
                .map(|a| a.iter().map(cell).collect())
                .unwrap_or_default();
            let tail = if restart.is_empty() {
                String::new()
            } else {
                format!(
                    "; these changed but take effect only at a restart: {}",
                    restart.join(", ")
                )
            };
            write_out(out, &format!("reloaded{tail}\n"))
        }
    }
}

/// An MQTT client's session in one word: `5.0,connected,persistent`,
/// `3.1.1,disconnected`; `-` for another client.
fn mqtt_session(s: &Value) -> String {
    if s.is_null() {
        return "-".to_string();
    }
    let version = if s["protocol"] == 5 { "5.0" } else { "3.1.1" };
    let state = if s["connected"] == true {
        "connected"
    } else {
        "disconnected"
    };
    let kept = if s["persistent"] == true {
        ",persistent"
    } else {
        ""
    };
    format!("{version},{state}{kept}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_text_left_and_numbers_right() {
        let mut out = Vec::new();
        let rows = vec![
            vec!["orders".to_string(), "4".to_string(), "-".to_string()],
            vec!["a".to_string(), "12".to_string(), "x".to_string()],
        ];
        let mut w: Vec<u8> = Vec::new();
        table(&mut w, &["TOPIC", "PARTITIONS", "NOTE"], &rows).unwrap();
        out.extend(w);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "TOPIC   PARTITIONS  NOTE\norders           4  -\na               12  x\n"
        );
    }

    #[test]
    fn path_parts_are_percent_encoded() {
        assert_eq!(enc("orders.eu"), "orders.eu");
        assert_eq!(enc("a b/c&d"), "a%20b%2Fc%26d");
    }
}
