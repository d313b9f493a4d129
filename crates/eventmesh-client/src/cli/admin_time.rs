//! `eventmesh admin groups reset` and `eventmesh admin scheduled`: moving
//! a group's offsets, and the events held back until their time.

use std::io::Write;

use super::{cell, enc, print_json, rows_of, table, write_out, AdminClient};
use crate::cli::Failure;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum GroupsCommand {
    /// Move a group's committed offsets: back to a time, the beginning or
    /// an offset (what follows comes again), or on to the end. Shows what
    /// would move unless --execute is given.
    Reset {
        group: String,
        /// A topic, or a pattern of topics (orders.*, orders.>).
        #[arg(long)]
        topic: String,
        /// Where every partition goes: earliest, latest, an RFC 3339 time
        /// (the first event appended then or later) or an offset.
        #[arg(long, value_name = "TARGET", value_parser = parse_target)]
        to: Option<crate::ResetTo>,
        /// One partition's target instead, as PARTITION=TARGET (repeatable).
        #[arg(long = "partition", value_name = "PARTITION=TARGET", value_parser = parse_partition_target)]
        partitions: Vec<(u32, crate::ResetTo)>,
        /// Release the deliveries the group's members hold (they come
        /// again from the new position) instead of refusing.
        #[arg(long)]
        force: bool,
        /// Apply the reset (without it, only what would move is shown).
        #[arg(long)]
        execute: bool,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ScheduledCommand {
    /// A topic's held-back events, soonest first.
    List {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 100)]
        max: usize,
    },
    /// Cancel the held-back events of an id.
    Cancel {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        id: String,
        /// Only those of this source.
        #[arg(long)]
        source: Option<String>,
    },
}

fn parse_target(v: &str) -> Result<crate::ResetTo, String> {
    crate::ResetTo::parse(v)
}

fn parse_partition_target(v: &str) -> Result<(u32, crate::ResetTo), String> {
    let (p, to) = v
        .split_once('=')
        .ok_or_else(|| format!("{v:?} is not PARTITION=TARGET"))?;
    let p = p
        .parse()
        .map_err(|_| format!("{p:?} is not a partition number"))?;
    Ok((p, crate::ResetTo::parse(to)?))
}

/// `groups reset`: a dry run unless `--execute`.
pub(super) async fn groups(
    c: &AdminClient,
    cmd: GroupsCommand,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    let GroupsCommand::Reset {
        group,
        topic,
        to,
        partitions,
        force,
        execute,
    } = cmd;
    if to.is_none() && partitions.is_empty() {
        return Err(super::super::usage(
            "say where to: --to TARGET, --partition PARTITION=TARGET, or both",
        ));
    }
    let reset = crate::ResetOffsets {
        topic,
        to,
        partitions: partitions.into_iter().collect(),
        force,
        dry_run: !execute,
    };
    let query: Vec<String> = reset
        .query()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut path = format!("/admin/groups/{}/offsets", enc(&group));
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let v = c
        .call(reqwest::Method::POST, &path, Some(reset.body()))
        .await?;
    if as_json {
        return print_json(out, &v);
    }
    table(
        out,
        &[
            "TOPIC",
            "CONSUMER",
            "PARTITION",
            "FROM",
            "TO",
            "AGAIN",
            "SKIPPED",
        ],
        &rows_of(
            &v["partitions"],
            &[
                "topic",
                "consumer",
                "partition",
                "from",
                "to",
                "again",
                "skipped",
            ],
        ),
    )?;
    let (again, skipped, held) = (cell(&v["again"]), cell(&v["skipped"]), cell(&v["held"]));
    write_out(
        out,
        &if execute {
            format!("reset group {group}: {again} events come again, {skipped} passed over; {held} held deliveries released\n")
        } else {
            format!("not applied: {again} events would come again, {skipped} would be passed over; the members hold {held} deliveries. Run again with --execute to apply{}\n",
                        if v["held"].as_u64().unwrap_or(0) > 0 && !force { " (and --force to release them)" } else { "" })
        },
    )
}

/// `scheduled list` and `scheduled cancel`.
pub(super) async fn scheduled(
    c: &AdminClient,
    cmd: ScheduledCommand,
    as_json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), Failure> {
    match cmd {
        ScheduledCommand::List { topic, max } => {
            let v = c
                .get(&format!(
                    "/admin/topics/{}/scheduled?max={max}",
                    enc(&topic)
                ))
                .await?;
            if as_json {
                return print_json(out, &v);
            }
            table(
                out,
                &["DUE", "ID", "SOURCE", "TYPE", "PARTITION"],
                &rows_of(&v, &["due", "id", "source", "type", "partition"]),
            )
        }
        ScheduledCommand::Cancel { topic, id, source } => {
            let mut path = format!("/admin/topics/{}/scheduled/{}", enc(&topic), enc(&id));
            if let Some(s) = &source {
                path = format!("{path}?source={}", enc(s));
            }
            let v = c.call(reqwest::Method::DELETE, &path, None).await?;
            if as_json {
                return print_json(out, &v);
            }
            write_out(
                out,
                &format!(
                    "cancelled {} held-back event(s) {id} of {topic}\n",
                    cell(&v["cancelled"])
                ),
            )
        }
    }
}
