//! `eventmesh admin dlq`: a topic's dead letters, browsed, published again
//! or deleted unreplayed (`/admin/dlq/...`).

use std::io::Write;

use serde_json::json;

use super::{cell, enc, fail, print_json, rows_of, table, write_out, AdminClient};
use crate::cli::Failure;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum DlqCommand {
    /// The dead letters of a topic.
    Browse {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 100)]
        max: usize,
    },
    /// Publish dead letters again (all, up to --max, or those of --id) and
    /// remove each once it is durable.
    Replay {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 100)]
        max: usize,
        /// A dead letter's id (repeatable); without it, up to --max.
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
    },
    /// Delete dead letters without publishing them again. Fails (after
    /// deleting the others) when an id names no dead letter of the topic.
    Delete {
        #[arg(long)]
        topic: String,
        /// A dead letter's id, as `dlq browse` shows it (repeatable).
        #[arg(long = "id", value_name = "ID", required = true)]
        ids: Vec<String>,
    },
}

pub(super) async fn dlq(
    c: &AdminClient,
    cmd: DlqCommand,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    match cmd {
        DlqCommand::Browse { topic, max } => {
            let v = c
                .get(&format!(
                    "/admin/dlq/browse?topic={}&max={max}",
                    enc(&topic)
                ))
                .await?;
            if as_json {
                return print_json(out, &v);
            }
            table(
                out,
                &[
                    "ID",
                    "CONSUMER",
                    "PARTITION",
                    "OFFSET",
                    "ATTEMPTS",
                    "LAST ERROR",
                ],
                &rows_of(
                    &v,
                    &[
                        "id",
                        "consumer",
                        "partition",
                        "offset",
                        "attempts",
                        "lastError",
                    ],
                ),
            )
        }
        DlqCommand::Replay { topic, max, ids } => {
            let mut path = format!("/admin/dlq/replay?topic={}&max={max}", enc(&topic));
            for id in &ids {
                path.push_str(&format!("&id={}", enc(id)));
            }
            let v = c.call(reqwest::Method::POST, &path, None).await?;
            if as_json {
                return print_json(out, &v);
            }
            let missing = v["missing"].as_u64().unwrap_or(0);
            write_out(
                out,
                &format!(
                    "replayed {}, failed {}{}\n",
                    cell(&v["replayed"]),
                    cell(&v["failed"]),
                    if missing > 0 {
                        format!(", {missing} not found")
                    } else {
                        String::new()
                    }
                ),
            )
        }
        DlqCommand::Delete { topic, ids } => delete(c, &topic, &ids, as_json, out).await,
    }
}

/// `dlq delete`: one `DELETE /admin/dlq/{topic}/{id}` per id.
async fn delete(
    c: &AdminClient,
    topic: &str,
    ids: &[String],
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    let mut deleted = Vec::new();
    let mut missing = Vec::new();
    for id in ids {
        let path = format!("/admin/dlq/{}/{}", enc(topic), enc(id));
        match c.call(reqwest::Method::DELETE, &path, None).await {
            Ok(_) => deleted.push(id.clone()),
            Err(f) if f.api_code.as_deref() == Some("unknown_dead_letter") => {
                missing.push(id.clone());
            }
            Err(f) => return Err(f),
        }
    }
    if as_json {
        print_json(
            out,
            &json!({ "topic": topic, "deleted": deleted, "missing": missing }),
        )?;
    } else {
        for id in &deleted {
            write_out(out, &format!("deleted dead letter {id} of {topic}\n"))?;
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(fail(format!(
        "no dead letter {} of {topic} (404 unknown_dead_letter); \
         `eventmesh admin dlq browse --topic {topic}` lists them",
        missing.join(", ")
    )))
}
