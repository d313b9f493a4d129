//! `eventmesh admin a2a tasks list|get|cancel`: the A2A gateway's tasks,
//! every tenant's, through `/admin/a2a/tasks`.

use std::io::Write;

use serde_json::Value;

use super::{cell, enc, print_json, rows_of, table, write_out, AdminClient};
use crate::cli::Failure;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum A2aCommand {
    /// The gateway's tasks: list, get, cancel.
    #[command(subcommand)]
    Tasks(TasksCommand),
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TasksCommand {
    /// The tasks, latest change first, and how many are in each state.
    List {
        /// Show at most this many (1 to 10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        limit: u64,
    },
    /// One task: its agent, state, status message and artifacts (--json:
    /// the task as A2A gives it).
    Get { id: String },
    /// Cancel a task that has not ended, as its client's CancelTask would
    /// (the agent is told).
    Cancel { id: String },
}

pub(super) async fn a2a(
    c: &AdminClient,
    cmd: A2aCommand,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    let A2aCommand::Tasks(cmd) = cmd;
    match cmd {
        TasksCommand::List { limit } => {
            let v = c.get(&format!("/admin/a2a/tasks?limit={limit}")).await?;
            if as_json {
                return print_json(out, &v);
            }
            table(
                out,
                &["ID", "AGENT", "STATE", "CONTEXT", "UPDATED MS"],
                &rows_of(
                    &v["tasks"],
                    &["id", "agent", "state", "contextId", "updatedMs"],
                ),
            )?;
            let counts: Vec<String> = v["counts"]
                .as_object()
                .map(|m| m.iter().map(|(k, n)| format!("{k} {n}")).collect())
                .unwrap_or_default();
            let shown = v["tasks"].as_array().map_or(0, Vec::len);
            write_out(
                out,
                &format!(
                    "{shown} of {} tasks{}\n",
                    cell(&v["total"]),
                    if counts.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", counts.join(", "))
                    }
                ),
            )
        }
        TasksCommand::Get { id } => {
            let v = c.get(&format!("/admin/a2a/tasks/{}", enc(&id))).await?;
            if as_json {
                return print_json(out, &v);
            }
            write_out(out, &summary(&v))
        }
        TasksCommand::Cancel { id } => {
            let path = format!("/admin/a2a/tasks/{}/cancel", enc(&id));
            let v = c.call(reqwest::Method::POST, &path, None).await?;
            if as_json {
                return print_json(out, &v);
            }
            write_out(
                out,
                &format!(
                    "canceled task {} of agent {}: {}\n",
                    cell(&v["task"]["id"]),
                    cell(&v["agent"]),
                    cell(&v["task"]["status"]["state"])
                ),
            )
        }
    }
}

/// The text parts of an A2A message or artifact, joined.
fn text_of(parts: &Value) -> String {
    parts
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

/// `tasks get` as lines of `key: value`.
fn summary(v: &Value) -> String {
    let t = &v["task"];
    let mut lines = vec![
        format!("task      {}", cell(&t["id"])),
        format!("agent     {}", cell(&v["agent"])),
        format!("tenant    {}", cell(&v["tenant"])),
        format!("context   {}", cell(&t["contextId"])),
        format!("state     {}", cell(&t["status"]["state"])),
        format!("updated   {}", cell(&t["status"]["timestamp"])),
    ];
    let message = text_of(&t["status"]["message"]["parts"]);
    if !message.is_empty() {
        lines.push(format!("message   {message}"));
    }
    for a in t["artifacts"].as_array().into_iter().flatten() {
        lines.push(format!(
            "artifact  {}: {}",
            cell(&a["artifactId"]),
            text_of(&a["parts"])
        ));
    }
    lines.push(String::new());
    lines.join("\n")
}
