//! `eventmesh admin links ...`: the mesh links of this cluster to others
//! (`/admin/links`), listed as a table, shown, created, deleted, paused and
//! resumed.
//!
//! The remote's TLS files are `--remote-ca-file`, `--remote-cert-file` and
//! `--remote-key-file`: `--ca-file`, `--cert-file` and `--key-file` are the
//! admin connection's own (global to every admin subcommand). They are
//! paths on the server's machine, since the server opens them.

use std::io::Write;

use serde_json::{json, Value};

use super::{cell, enc, print_json, rows_by, table, write_out, AdminClient};
use crate::cli::Failure;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum LinksCommand {
    /// Every link with its state, remote, exports, lag and throughput.
    List,
    /// One link, as the admin API shows it (JSON; the token as ***).
    Get { name: String },
    /// Create a link that carries the exported topics to a remote cluster.
    Create(Box<CreateArgs>),
    /// Delete a link (what it has not sent stays in this cluster's log).
    Delete { name: String },
    /// Stop sending; the events wait in this cluster's log.
    Pause { name: String },
    /// Send again from where the link stopped.
    Resume { name: String },
}

#[derive(Debug, Clone, clap::Args)]
pub struct CreateArgs {
    /// The link's name (1-64 of A-Z a-z 0-9 . _ -).
    pub name: String,
    /// The remote cluster's traffic HTTP URL.
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// A topic, or a pattern of topics (eu.*, eu.>), to carry over
    /// (repeatable, at least one).
    #[arg(long = "export", value_name = "TOPIC", required = true)]
    pub exports: Vec<String>,
    /// The bearer token the link presents to the remote.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// PEM file of authorities the link trusts for an https:// remote
    /// (an absolute path on the server's machine).
    #[arg(long, value_name = "PATH")]
    pub remote_ca_file: Option<String>,
    /// PEM client certificate chain the link presents to the remote (with
    /// --remote-key-file; an absolute path on the server's machine).
    #[arg(long, value_name = "PATH", requires = "remote_key_file")]
    pub remote_cert_file: Option<String>,
    /// PEM private key of --remote-cert-file.
    #[arg(long, value_name = "PATH", requires = "remote_cert_file")]
    pub remote_key_file: Option<String>,
    /// The remote's cluster name: the link does not send to another.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Prefix the remote topic names with this (site-a. makes orders
    /// site-a.orders there).
    #[arg(long, value_name = "PREFIX")]
    pub rename_prefix: Option<String>,
    /// Send on only events that left fewer clusters than this (1 to 64;
    /// server default 8).
    #[arg(long, value_name = "N")]
    pub max_hops: Option<u32>,
    /// Let the link reach loopback and private addresses (the server's
    /// outbound target guard refuses them by default).
    #[arg(long)]
    pub no_target_guard: bool,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// Bring the remote's topics (the --export topics, named at the
    /// remote) home instead of sending this cluster's there.
    #[arg(long)]
    pub pull: bool,
}

impl CreateArgs {
    /// The `POST /admin/links` body: only what was given.
    fn body(&self) -> Value {
        let mut remote = json!({ "url": self.url });
        let fields = [
            ("token", &self.token),
            ("caFile", &self.remote_ca_file),
            ("certFile", &self.remote_cert_file),
            ("keyFile", &self.remote_key_file),
            ("cluster", &self.cluster),
        ];
        for (key, value) in fields {
            if let Some(v) = value {
                remote[key] = json!(v);
            }
        }
        let exports: Vec<Value> = self.exports.iter().map(|t| json!({ "topic": t })).collect();
        let mut body = json!({ "name": self.name, "remote": remote, "exports": exports });
        if let Some(p) = &self.rename_prefix {
            body["renamePrefix"] = json!(p);
        }
        if let Some(n) = self.max_hops {
            body["maxHops"] = json!(n);
        }
        if self.paused {
            body["paused"] = json!(true);
        }
        if self.no_target_guard {
            body["targetGuard"] = json!(false);
        }
        if self.pull {
            body["direction"] = json!("pull");
        }
        body
    }
}

/// The headers of `links list`.
const HEADERS: [&str; 8] = [
    "NAME",
    "STATE",
    "REMOTE",
    "EXPORTS",
    "LAG",
    "EVENTS/S",
    "INSTANCE",
    "LAST ERROR",
];

/// One row of `links list`: the remote is its cluster's name once the
/// link reached it, else its URL; the lag is in events.
fn row(l: &Value) -> Vec<String> {
    let s = &l["status"];
    let remote = match &s["remoteCluster"] {
        Value::Null => &l["remote"]["url"],
        named => named,
    };
    let exports = l["exports"]
        .as_array()
        .map(|e| e.iter().map(|x| cell(&x["topic"])).collect::<Vec<_>>())
        .unwrap_or_default();
    vec![
        cell(&l["name"]),
        cell(&s["state"]),
        cell(remote),
        if exports.is_empty() {
            "-".to_string()
        } else {
            exports.join(",")
        },
        cell(&s["lagEvents"]),
        cell(&s["eventsPerSecond"]),
        cell(&s["instance"]),
        cell(&s["lastError"]),
    ]
}

pub(super) async fn links(
    c: &AdminClient,
    cmd: LinksCommand,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    let post = |path: String, body: Option<Value>| async move {
        c.call(reqwest::Method::POST, &path, body).await
    };
    let (v, done) = match cmd {
        LinksCommand::List => {
            let v = c.get("/admin/links").await?;
            if as_json {
                return print_json(out, &v);
            }
            return table(out, &HEADERS, &rows_by(&v, row));
        }
        LinksCommand::Get { name } => {
            return print_json(out, &c.get(&format!("/admin/links/{}", enc(&name))).await?);
        }
        LinksCommand::Create(a) => {
            let v = post("/admin/links".to_string(), Some(a.body())).await?;
            let done = format!("created link {} to {}", a.name, a.url);
            (v, done)
        }
        LinksCommand::Delete { name } => {
            let path = format!("/admin/links/{}", enc(&name));
            c.call(reqwest::Method::DELETE, &path, None).await?;
            (json!({ "deleted": name }), format!("deleted link {name}"))
        }
        LinksCommand::Pause { name } => {
            let v = post(format!("/admin/links/{}/pause", enc(&name)), None).await?;
            (v, format!("paused link {name}"))
        }
        LinksCommand::Resume { name } => {
            let v = post(format!("/admin/links/{}/resume", enc(&name)), None).await?;
            (v, format!("resumed link {name}"))
        }
    };
    if as_json {
        print_json(out, &v)
    } else {
        write_out(out, &format!("{done}\n"))
    }
}

#[cfg(test)]
mod tests {
    //! Arguments into the admin API's body, the table, and each command's
    //! request and answer against a scripted server.

    use serde_json::Value;

    use crate::cli::tests::parse;
    use crate::cli::{admin, execute, ClientCommand};

    /// `admin links ...` parsed; panics on another command.
    fn links_command(args: &[&str]) -> admin::LinksCommand {
        let mut all = vec!["admin", "links"];
        all.extend_from_slice(args);
        let ClientCommand::Admin(a) = parse(&all).unwrap() else {
            panic!("not admin")
        };
        let admin::AdminCommand::Links(cmd) = a.command else {
            panic!("not links")
        };
        cmd
    }

    #[test]
    fn parses_links_create_into_the_admin_api_body() {
        let admin::LinksCommand::Create(c) = links_command(&[
            "create",
            "to-b",
            "--url",
            "https://b.example:10105",
            "--export",
            "orders",
            "--export",
            "eu.>",
            "--token",
            "t-link",
            "--remote-ca-file",
            "/etc/em/ca.pem",
            "--remote-cert-file",
            "/etc/em/a.pem",
            "--remote-key-file",
            "/etc/em/a.key",
            "--cluster",
            "b",
            "--rename-prefix",
            "site-a.",
            "--max-hops",
            "3",
            "--no-target-guard",
            "--paused",
            "--pull",
        ]) else {
            panic!("not create")
        };
        assert_eq!(
            c.body(),
            serde_json::json!({
                "name": "to-b",
                "remote": {"url": "https://b.example:10105", "token": "t-link",
                    "caFile": "/etc/em/ca.pem", "certFile": "/etc/em/a.pem",
                    "keyFile": "/etc/em/a.key", "cluster": "b"},
                "exports": [{"topic": "orders"}, {"topic": "eu.>"}],
                "renamePrefix": "site-a.",
                "maxHops": 3,
                "paused": true,
                "targetGuard": false,
                "direction": "pull",
            })
        );
        // Only what is given: the server's defaults for the rest.
        let admin::LinksCommand::Create(c) =
            links_command(&["create", "l", "--url", "http://h:1", "--export", "t"])
        else {
            panic!("not create")
        };
        assert_eq!(
            c.body(),
            serde_json::json!({"name": "l", "remote": {"url": "http://h:1"},
                "exports": [{"topic": "t"}]})
        );
        use clap::error::ErrorKind;
        for (args, kind) in [
            (
                vec!["create", "l", "--url", "http://h:1"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                vec!["create", "l", "--export", "t"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                vec![
                    "create",
                    "l",
                    "--url",
                    "http://h:1",
                    "--export",
                    "t",
                    "--remote-cert-file",
                    "/c.pem",
                ],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                vec![
                    "create",
                    "l",
                    "--url",
                    "http://h:1",
                    "--export",
                    "t",
                    "--max-hops",
                    "many",
                ],
                ErrorKind::ValueValidation,
            ),
            (vec!["pause"], ErrorKind::MissingRequiredArgument),
        ] {
            let mut all = vec!["admin", "links"];
            all.extend_from_slice(&args);
            assert_eq!(parse(&all).unwrap_err().kind(), kind, "{args:?}");
        }
        assert!(matches!(
            links_command(&["resume", "to-b"]),
            admin::LinksCommand::Resume { name } if name == "to-b"
        ));
    }

    #[tokio::test]
    async fn links_list_is_a_table_with_the_remote_s_name_once_reached() {
        use crate::testutil::{http_server, Reply};
        let views = serde_json::json!([
            {"name": "to-b", "remote": {"url": "http://10.0.0.2:10105", "cluster": "b"},
             "exports": [{"topic": "orders"}, {"topic": "eu.>", "filters": [{"exact": {"type": "x"}}]}],
             "maxHops": 8, "principal": "link:to-b", "paused": false, "generation": 1,
             "createdMs": 1, "updatedMs": 1,
             "status": {"state": "UP", "remoteCluster": "b", "lagEvents": 0, "lagSeconds": 0.0,
                        "eventsPerSecond": 12.5, "events": 250, "instance": "em-1"}},
            {"name": "to-far-away", "remote": {"url": "http://10.0.0.9:10105", "token": "***"},
             "exports": [{"topic": "audit"}],
             "maxHops": 8, "principal": "link:to-far-away", "paused": false, "generation": 2,
             "createdMs": 1, "updatedMs": 2,
             "status": {"state": "DOWN", "lagEvents": 200, "lagSeconds": 31.5,
                        "eventsPerSecond": 0.0, "events": 0,
                        "lastError": "open: refused", "lastErrorMs": 5}}
        ])
        .to_string();
        let (base, mut seen) = http_server(move |_, _| Reply::json(200, &views)).await;
        let cmd = parse(&[
            "admin",
            "links",
            "list",
            "--admin-server",
            &base,
            "--admin-token",
            "tok",
        ])
        .unwrap();
        let mut out = Vec::new();
        execute(cmd, &mut out).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NAME         STATE  REMOTE                 EXPORTS      LAG  EVENTS/S  INSTANCE  LAST ERROR\n\
             to-b         UP     b                      orders,eu.>    0      12.5  em-1      -\n\
             to-far-away  DOWN   http://10.0.0.9:10105  audit        200       0.0  -         open: refused\n"
        );
        let req = seen.recv().await.unwrap();
        assert_eq!(
            (req.method.as_str(), req.target.as_str()),
            ("GET", "/admin/links")
        );
        assert_eq!(req.header("authorization"), Some("Bearer tok"));
    }

    #[tokio::test]
    async fn links_commands_send_their_request_and_say_what_they_did() {
        use crate::testutil::{http_server, Reply};
        let (base, mut seen) =
            http_server(|req, _| match (req.method.as_str(), req.target.as_str()) {
                ("POST", "/admin/links") => Reply::json(201, r#"{"name":"to-b"}"#),
                ("POST", "/admin/links/to-b/pause") => {
                    Reply::json(200, r#"{"name":"to-b","paused":true}"#)
                }
                ("DELETE", "/admin/links/to-b") => Reply::json(204, ""),
                _ => Reply::json(
                    404,
                    r#"{"error":"unknown_link","message":"no link named x"}"#,
                ),
            })
            .await;
        let run = |args: &[&str]| {
            let mut all = vec!["admin", "links"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--admin-server", &base, "--admin-token", "tok"]);
            let cmd = parse(&all).unwrap();
            async move {
                let mut out = Vec::new();
                execute(cmd, &mut out)
                    .await
                    .map(|()| String::from_utf8(out).unwrap())
            }
        };
        let created = run(&[
            "create",
            "to-b",
            "--url",
            "http://b:1",
            "--export",
            "orders",
        ])
        .await;
        assert_eq!(created.unwrap(), "created link to-b to http://b:1\n");
        let req = seen.recv().await.unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&req.body).unwrap(),
            serde_json::json!({"name": "to-b", "remote": {"url": "http://b:1"},
                "exports": [{"topic": "orders"}]})
        );
        let paused = run(&["pause", "to-b", "--json"]).await;
        assert_eq!(
            paused.unwrap(),
            "{\n  \"name\": \"to-b\",\n  \"paused\": true\n}\n"
        );
        assert_eq!(seen.recv().await.unwrap().target, "/admin/links/to-b/pause");
        assert_eq!(
            run(&["delete", "to-b"]).await.unwrap(),
            "deleted link to-b\n"
        );
        assert_eq!(seen.recv().await.unwrap().method, "DELETE");
        let f = run(&["resume", "x"]).await.unwrap_err();
        assert_eq!(
            (f.status, f.message.as_str(), f.api_code.as_deref()),
            (1, "404 unknown_link: no link named x", Some("unknown_link"))
        );
        assert_eq!(seen.recv().await.unwrap().target, "/admin/links/x/resume");
    }
}
