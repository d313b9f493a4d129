//! `e2e`: publish timestamped events at a fixed rate through one pull
//! subscription and measure receive time minus send time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use reqwest::header::CONTENT_TYPE;
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{interval_at, sleep, Instant, MissedTickBehavior};

use crate::payload;
use crate::stats::{self, Errors, Latency};

/// Acks sent concurrently by the consumer, at most.
const ACKS_IN_FLIGHT: usize = 64;
/// Long-poll wait and batch size of each `GET /events/poll`.
const POLL_WAIT_MS: u64 = 1000;
const POLL_MAX: usize = 500;

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Base URL of the eventmesh HTTP traffic port.
    #[arg(
        long,
        env = "EVENTMESH_BENCH_URL",
        default_value = "http://127.0.0.1:10105"
    )]
    pub url: String,
    /// Topic to publish to and subscribe on.
    #[arg(long, default_value = "bench-e2e")]
    pub topic: String,
    /// Publish rate in events/s.
    #[arg(long, default_value = "2000", value_parser = crate::parse_rate)]
    pub rate: f64,
    /// Length of the measured window (events sent in it are recorded).
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// Publishing before the measured window; not recorded.
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    pub warmup: Duration,
    /// How long the consumer keeps polling for stragglers after the last publish.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration)]
    pub drain: Duration,
    /// Most publish requests in flight at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON line instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` line. Counts cover events sent inside the measured window.
#[derive(Debug, Serialize)]
struct Report {
    rate: f64,
    seconds: f64,
    published: u64,
    received: u64,
    missing: u64,
    duplicates: u64,
    #[serde(flatten)]
    latency: Latency,
    errors: Errors,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delivery {
    delivery_id: String,
    event: Value,
}

struct Endpoints {
    publish: Url,
    poll: Url,
    ack: Url,
}

#[derive(Default)]
struct Published {
    total_ok: u64,
    measured_ok: u64,
    errors: Errors,
}

struct Consumed {
    hist: Histogram<u64>,
    measured: u64,
    duplicates: u64,
    errors: Errors,
}

pub async fn run(args: E2eArgs) -> Result<()> {
    let client = stats::client(
        args.max_in_flight as usize + ACKS_IN_FLIGHT + 1,
        args.timeout,
    )?;
    let client_id = format!("bench-consumer-{}", uuid::Uuid::now_v7());
    let subscribe = json!({"clientId": client_id, "topic": args.topic, "from": "latest"});
    post_json(
        &client,
        &stats::endpoint(&args.url, "events/subscribe")?,
        &subscribe,
    )
    .await
    .context("subscribing")?;

    let outcome = tokio::select! {
        r = exercise(&client, &args, &client_id) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    // Unsubscribe whatever happened, so no pull consumer is left behind.
    let unsubscribe = json!({ "clientId": client_id });
    if let Err(e) = post_json(
        &client,
        &stats::endpoint(&args.url, "events/unsubscribe")?,
        &unsubscribe,
    )
    .await
    {
        eprintln!("warning: unsubscribing {client_id} failed: {e:#}");
    }
    let report = outcome?;

    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "e2e: topic {:?} at {}, target {:.0} events/s, {:.1} s measured after {:.1} s warm-up",
            args.topic,
            args.url,
            report.rate,
            report.seconds,
            args.warmup.as_secs_f64()
        );
        println!(
            "  published: {} accepted ({:.1} events/s)",
            report.published,
            report.published as f64 / report.seconds
        );
        println!(
            "  received:  {} (missing {}, duplicates {})",
            report.received, report.missing, report.duplicates
        );
        println!("  publish -> receive latency: {}", report.latency);
        println!("  errors:    {}", stats::format_errors(&report.errors));
    }
    if report.received == 0 {
        bail!("no event was received during the measured window");
    }
    Ok(())
}

async fn exercise(client: &reqwest::Client, args: &E2eArgs, client_id: &str) -> Result<Report> {
    let mut publish = stats::endpoint(&args.url, "events/publish")?;
    publish.query_pairs_mut().append_pair("topic", &args.topic);
    let mut poll = stats::endpoint(&args.url, "events/poll")?;
    poll.query_pairs_mut()
        .append_pair("clientId", client_id)
        .append_pair("timeoutMs", &POLL_WAIT_MS.to_string())
        .append_pair("max", &POLL_MAX.to_string());
    let urls = Arc::new(Endpoints {
        publish,
        poll,
        ack: stats::endpoint(&args.url, "events/ack")?,
    });
    let run_id = uuid::Uuid::now_v7().simple().to_string();

    // Attach the consumer before the first publish.
    let mut first = urls.poll.clone();
    first.query_pairs_mut().append_pair("timeoutMs", "0");
    client
        .get(first)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .context("first poll")?;

    let start = Instant::now();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let measure_from_us = stats::unix_micros() + stats::micros(args.warmup);

    let (done_tx, done_rx) = watch::channel(None);
    let consumer = tokio::spawn(consume(
        client.clone(),
        Arc::clone(&urls),
        format!("{run_id}-"),
        measure_from_us,
        done_rx,
        end + args.drain,
    ));
    let published = produce(client, &urls, args, &run_id, start, end, measure_from_us).await;
    // The consumer stops once it has seen every accepted event or the drain
    // deadline passes, whichever is first.
    let _ = done_tx.send(Some(published.total_ok));
    let consumed = consumer.await.context("consumer task failed")?;

    let mut errors = published.errors;
    stats::merge(&mut errors, consumed.errors);
    Ok(Report {
        rate: args.rate,
        seconds: args.duration.as_secs_f64(),
        published: published.measured_ok,
        received: consumed.measured,
        missing: published.measured_ok.saturating_sub(consumed.measured),
        duplicates: consumed.duplicates,
        latency: Latency::of(&consumed.hist),
        errors,
    })
}

/// Open-loop publisher: one send per tick, each in its own task, at most
/// `--max-in-flight` outstanding.
async fn produce(
    client: &reqwest::Client,
    urls: &Arc<Endpoints>,
    args: &E2eArgs,
    run_id: &str,
    start: Instant,
    end: Instant,
    measure_from_us: u64,
) -> Published {
    let mut out = Published::default();
    let mut in_flight = JoinSet::new();
    let mut collect = |r: Result<(u64, Result<(), String>), tokio::task::JoinError>| match r {
        Ok((t, Ok(()))) => {
            out.total_ok += 1;
            if t >= measure_from_us {
                out.measured_ok += 1;
            }
        }
        Ok((_, Err(kind))) => stats::count(&mut out.errors, format!("publish_{kind}")),
        Err(_) => stats::count(&mut out.errors, "publish_task".to_owned()),
    };
    let mut ticker = interval_at(start, Duration::from_secs_f64(1.0 / args.rate));
    // Burst: ticks lost to the 1 ms timer resolution are caught up, so the
    // average rate is the requested one.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for seq in 0u64.. {
        if ticker.tick().await >= end {
            break;
        }
        while let Some(r) = in_flight.try_join_next() {
            collect(r);
        }
        while in_flight.len() >= args.max_in_flight as usize {
            if let Some(r) = in_flight.join_next().await {
                collect(r);
            }
        }
        let (client, urls) = (client.clone(), Arc::clone(urls));
        let id = format!("{run_id}-{seq}");
        in_flight.spawn(async move {
            let t = stats::unix_micros();
            let req = client
                .post(urls.publish.clone())
                .header(CONTENT_TYPE, payload::structured_content_type())
                .body(payload::timestamped_event(&id, t));
            (t, status_of(req.send().await, StatusCode::ACCEPTED).await)
        });
    }
    while let Some(r) = in_flight.join_next().await {
        collect(r);
    }
    out
}

async fn consume(
    client: reqwest::Client,
    urls: Arc<Endpoints>,
    id_prefix: String,
    measure_from_us: u64,
    done: watch::Receiver<Option<u64>>,
    deadline: Instant,
) -> Consumed {
    let mut out = Consumed {
        hist: stats::histogram(),
        measured: 0,
        duplicates: 0,
        errors: Errors::new(),
    };
    let mut seen = HashSet::new();
    let mut acks: JoinSet<Result<(), String>> = JoinSet::new();
    while Instant::now() < deadline {
        if matches!(*done.borrow(), Some(total) if seen.len() as u64 >= total) {
            break;
        }
        let body = match client.get(urls.poll.clone()).send().await {
            Ok(resp) if resp.status().is_success() => resp.bytes().await,
            Ok(resp) => {
                stats::count(
                    &mut out.errors,
                    format!("poll_http_{}", resp.status().as_u16()),
                );
                sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => Err(e),
        };
        let received_us = stats::unix_micros();
        let deliveries: Vec<Delivery> = match body {
            Ok(b) => match serde_json::from_slice(&b) {
                Ok(d) => d,
                Err(_) => {
                    stats::count(&mut out.errors, "poll_malformed".to_owned());
                    continue;
                }
            },
            Err(e) => {
                stats::count(&mut out.errors, format!("poll_{}", stats::error_kind(&e)));
                sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for d in deliveries {
            let ours = d
                .event
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| id.starts_with(&id_prefix))
                .map(str::to_owned);
            if let Some(id) = ours {
                if !seen.insert(id) {
                    out.duplicates += 1;
                } else if let Some(t) = sent_at(&d.event) {
                    if t >= measure_from_us {
                        out.measured += 1;
                        out.hist.saturating_record(received_us.saturating_sub(t));
                    }
                }
            }
            while acks.len() >= ACKS_IN_FLIGHT {
                if let Some(r) = acks.join_next().await {
                    note_ack(r, &mut out.errors);
                }
            }
            let (client, url) = (client.clone(), urls.ack.clone());
            acks.spawn(async move {
                let req = client
                    .post(url)
                    .json(&json!({ "deliveryId": d.delivery_id }));
                status_of(req.send().await, StatusCode::OK).await
            });
        }
        while let Some(r) = acks.try_join_next() {
            note_ack(r, &mut out.errors);
        }
    }
    while let Some(r) = acks.join_next().await {
        note_ack(r, &mut out.errors);
    }
    out
}

fn note_ack(r: Result<Result<(), String>, tokio::task::JoinError>, errors: &mut Errors) {
    match r {
        Ok(Ok(())) => {}
        Ok(Err(kind)) => stats::count(errors, format!("ack_{kind}")),
        Err(_) => stats::count(errors, "ack_task".to_owned()),
    }
}

/// `data.t` of a received event; `data` may also arrive as a JSON string.
fn sent_at(event: &Value) -> Option<u64> {
    match event.get("data")? {
        Value::String(s) => serde_json::from_str::<Value>(s).ok()?.get("t")?.as_u64(),
        data => data.get("t")?.as_u64(),
    }
}

/// Reads the whole answer; `Err(kind)` unless the status is `expect`.
async fn status_of(
    sent: reqwest::Result<reqwest::Response>,
    expect: StatusCode,
) -> Result<(), String> {
    let resp = sent.map_err(|e| stats::error_kind(&e))?;
    let status = resp.status();
    resp.bytes().await.map_err(|e| stats::error_kind(&e))?;
    if status == expect {
        Ok(())
    } else {
        Err(format!("http_{}", status.as_u16()))
    }
}

async fn post_json(client: &reqwest::Client, url: &Url, body: &Value) -> Result<()> {
    let resp = client.post(url.clone()).json(body).send().await?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        bail!("{url} answered {status}: {text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_time_from_json_or_string_data() {
        assert_eq!(sent_at(&json!({"data": {"t": 42}})), Some(42));
        assert_eq!(sent_at(&json!({"data": "{\"t\":7}"})), Some(7));
        assert_eq!(sent_at(&json!({"data": "plain"})), None);
        assert_eq!(sent_at(&json!({"id": "x"})), None);
    }

    #[test]
    fn poll_answer_parses() {
        let body = r#"[{"deliveryId":"d-1","event":{"specversion":"1.0","id":"r-1","source":"/bench","type":"bench.event","datacontenttype":"application/json","data":{"t":5}}}]"#;
        let d: Vec<Delivery> = serde_json::from_str(body).unwrap();
        assert_eq!(d[0].delivery_id, "d-1");
        assert_eq!(sent_at(&d[0].event), Some(5));
    }
}
