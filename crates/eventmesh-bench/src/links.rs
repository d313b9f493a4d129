//! `link`: the throughput of a mesh link over a backlog. Prefills a topic
//! at the local cluster with `--count` events (flat out, HTTP batches of
//! 500, not measured), then makes a link that exports it to the remote
//! cluster and measures from the link's creation until the remote's topic
//! holds every event (read from the remote's admin API every 50 ms).
//!
//! Both clusters must share the admin token (`--admin-token`), and the
//! remote must be a standalone instance (its topic's offsets count its
//! events). The link is deleted at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

const BATCH: u64 = 500;
const IN_FLIGHT: u64 = 8;

#[derive(Debug, Args)]
pub struct LinkArgs {
    /// The local cluster's traffic URL, where the backlog is published.
    #[arg(long, default_value = "http://127.0.0.1:10105")]
    pub from: String,
    /// The local cluster's admin URL, where the link is made.
    #[arg(long, default_value = "http://127.0.0.1:10106")]
    pub from_admin: String,
    /// The remote cluster's traffic URL.
    #[arg(long)]
    pub to: String,
    /// The remote cluster's admin URL, where its topic is counted.
    #[arg(long)]
    pub to_admin: String,
    /// The admin token of both clusters.
    #[arg(long, env = "EVENTMESH_ADMIN_TOKEN")]
    pub admin_token: Option<String>,
    /// Events in the backlog.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub count: u64,
    /// Bytes of data per event.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Topic. Default: a new one per run.
    #[arg(long)]
    pub topic: Option<String>,
    /// The longest the link may take.
    #[arg(long, default_value = "30m", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// One JSON object instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// A server process (either cluster's) whose CPU time over the link's
    /// run is reported per carried event; repeatable.
    #[arg(long)]
    pub server_pid: Vec<u32>,
}

pub async fn run(args: LinkArgs) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("bench-link-{}", eventmesh_core::time::now_ms()));
    let admin = |rb: reqwest::RequestBuilder| match &args.admin_token {
        Some(t) => rb.bearer_auth(t),
        None => rb,
    };
    // The backlog.
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let data = "x".repeat(args.size);
    let mut tasks = Vec::new();
    for _ in 0..IN_FLIGHT {
        let (http, next, data) = (http.clone(), next.clone(), data.clone());
        let (url, topic, count) = (
            format!(
                "{}/events/publish-batch?topic={topic}",
                args.from.trim_end_matches('/')
            ),
            topic.clone(),
            args.count,
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let from = next.fetch_add(BATCH, Ordering::Relaxed);
                if from >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                let events: Vec<Value> = (from..(from + BATCH).min(count))
                    .map(|n| {
                        json!({"specversion": "1.0", "id": format!("{topic}-{n}"),
                            "source": "/bench/link", "type": "bench.link", "data": data})
                    })
                    .collect();
                let r = http
                    .post(&url)
                    .header("content-type", "application/cloudevents-batch+json")
                    .body(serde_json::to_vec(&events)?)
                    .send()
                    .await?;
                if r.status() != 202 {
                    bail!(
                        "prefill: {} {}",
                        r.status(),
                        r.text().await.unwrap_or_default()
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let prefill = started.elapsed();
    // The link.
    let name = format!("bench-{}", &topic[topic.len().saturating_sub(13)..]);
    let links = format!("{}/admin/links", args.from_admin.trim_end_matches('/'));
    let cpu_at = |pids: &[u32]| -> Option<Vec<Duration>> {
        pids.iter().map(|p| crate::stats::cpu_time(*p)).collect()
    };
    let cpu_before = cpu_at(&args.server_pid);
    let started = Instant::now();
    let r = admin(http.post(&links))
        .json(&json!({"name": name, "remote": {"url": args.to},
            "exports": [{"topic": topic}], "targetGuard": false}))
        .send()
        .await?;
    if r.status() != 201 {
        bail!(
            "creating the link: {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }
    let detail = format!(
        "{}/admin/topics/{topic}",
        args.to_admin.trim_end_matches('/')
    );
    let mut stored = 0;
    while stored < args.count {
        if started.elapsed() > args.duration {
            bail!(
                "the link carried {stored} of {} events in {:?}",
                args.count,
                args.duration
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = admin(http.get(&detail)).send().await?;
        if r.status() == 404 {
            continue;
        }
        let v: Value = r.json().await.context("the remote's topic")?;
        stored = v["offsets"]
            .as_array()
            .map(|ps| ps.iter().filter_map(|p| p["endOffset"].as_u64()).sum())
            .unwrap_or(0);
    }
    let took = started.elapsed();
    // Per server: its CPU time over the run, in µs per carried event.
    let cpu: Vec<(u32, f64)> = match (cpu_before, cpu_at(&args.server_pid)) {
        (Some(before), Some(after)) => args
            .server_pid
            .iter()
            .zip(after.iter().zip(&before))
            .map(|(pid, (a, b))| {
                let us = a.saturating_sub(*b).as_secs_f64() * 1e6 / args.count as f64;
                (*pid, us)
            })
            .collect(),
        _ => Vec::new(),
    };
    let _ = admin(http.delete(format!("{links}/{name}"))).send().await;
    let rate = args.count as f64 / took.as_secs_f64();
    let prefill_rate = args.count as f64 / prefill.as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({"events": args.count, "size": args.size, "seconds": took.as_secs_f64(),
                "events_per_sec": rate, "prefill_events_per_sec": prefill_rate, "topic": topic,
                "server_cpu_us_per_event": cpu.iter().map(|(pid, us)| json!({"pid": pid, "us": us})).collect::<Vec<_>>()})
        );
    } else {
        println!("link: {} events of {} B in {:.2} s: {rate:.0} events/s (prefill {prefill_rate:.0} events/s)",
            args.count, args.size, took.as_secs_f64());
        for (pid, us) in &cpu {
            println!("server CPU (pid {pid}): {us:.2} us per carried event");
        }
    }
    Ok(())
}
