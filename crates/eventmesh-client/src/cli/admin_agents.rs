//! `eventmesh admin agents`: the A2A agents attached to the mesh, searched
//! like `GET /a2a/agents` searches them, over every tenant.

use std::io::Write;

use serde_json::Value;

use super::{cell, enc, print_json, table, write_out, AdminClient};
use crate::cli::Failure;

/// What to search for; every condition given must hold.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentsArgs {
    /// Agents with a skill of this id.
    #[arg(long)]
    skill: Option<String>,
    /// Agents with a skill tagged so (case-insensitive).
    #[arg(long)]
    tag: Option<String>,
    /// Agents that take this media type (text/*, */* cover others).
    #[arg(long, value_name = "MEDIA_TYPE")]
    input_mode: Option<String>,
    /// Agents that give this media type.
    #[arg(long, value_name = "MEDIA_TYPE")]
    output_mode: Option<String>,
    /// Words that must all occur in the agent's id, name, description or
    /// its skills' names, descriptions, tags or examples.
    #[arg(long, short = 'q', value_name = "WORDS")]
    query: Option<String>,
    /// Agents per page (1 to 200).
    #[arg(long, default_value_t = 50)]
    page_size: usize,
    /// The page after this token (printed under a full page).
    #[arg(long)]
    page_token: Option<String>,
}

impl AgentsArgs {
    /// The search as the admin API's query string.
    fn query_string(&self) -> String {
        let mut q = vec![format!("pageSize={}", self.page_size)];
        let fields = [
            ("skill", &self.skill),
            ("tag", &self.tag),
            ("inputMode", &self.input_mode),
            ("outputMode", &self.output_mode),
            ("q", &self.query),
            ("pageToken", &self.page_token),
        ];
        for (key, value) in fields {
            if let Some(v) = value {
                q.push(format!("{key}={}", enc(v)));
            }
        }
        q.join("&")
    }
}

pub(super) async fn agents(
    c: &AdminClient,
    args: AgentsArgs,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    let v = c
        .get(&format!("/admin/a2a/agents?{}", args.query_string()))
        .await?;
    if as_json {
        return print_json(out, &v);
    }
    let empty = Vec::new();
    let agents = v["agents"].as_array().unwrap_or(&empty);
    let skills = |a: &Value, key: &str| -> String {
        let mut all: Vec<String> = a["skills"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .flat_map(|s| match &s[key] {
                Value::Array(items) => items.iter().map(cell).collect(),
                other => vec![cell(other)],
            })
            .collect();
        all.sort();
        all.dedup();
        if all.is_empty() {
            "-".to_string()
        } else {
            all.join(",")
        }
    };
    let rows: Vec<Vec<String>> = agents
        .iter()
        .map(|a| {
            vec![
                cell(&a["id"]),
                cell(&a["name"]),
                cell(&a["tenant"]),
                skills(a, "id"),
                skills(a, "tags"),
                cell(&a["instance"]),
            ]
        })
        .collect();
    table(
        out,
        &["ID", "NAME", "TENANT", "SKILLS", "TAGS", "INSTANCE"],
        &rows,
    )?;
    if let Some(next) = v["nextPageToken"].as_str() {
        write_out(
            out,
            &format!(
                "{} of {} agents; the next page: --page-token {next}\n",
                rows.len(),
                cell(&v["totalSize"])
            ),
        )?;
    }
    Ok(())
}
