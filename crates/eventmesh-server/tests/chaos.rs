//! Chaos: a random schedule of the faults `owned.rs` tests one by one,
//! against three `eventmesh` instances with `PARTITION_OWNED_PULL` (a
//! three-node NATS JetStream cluster and etcd), while events are published
//! without pause; at the end every acknowledged publish must have been
//! delivered, and duplicates stay within the windows of the faults (one
//! instance's for a fault of one instance, every instance's for an etcd
//! outage).
//! `EVENTMESH_CHAOS_SECS` sets how long (20 s by default;
//! `scripts/chaos.sh` runs ten minutes), `EVENTMESH_CHAOS_SEED` repeats a
//! schedule.

mod common;

use std::time::{Duration, Instant};

use common::hook::HookMode;
use common::mesh::*;
use common::*;
use serde_json::Value;

/// In-flight deliveries of one consumer on one instance
/// (`eventmesh.delivery.max.inflight`, default 1024).
const WINDOW: usize = 1024;

/// A batch answered `202`: its first event's number, the instance that
/// answered and the answer (where each event went), for the report of a
/// failed run.
type Answered = (usize, String, String);

/// Publishes batches of 20 to whichever instances are up, again on any
/// failure (a retried batch is stored once); the ids of every batch
/// answered `202` go into `accepted`, the answer into `answers`.
async fn publisher(
    urls: std::sync::Arc<std::sync::Mutex<Vec<Option<String>>>>,
    accepted: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    answers: std::sync::Arc<std::sync::Mutex<Vec<Answered>>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let (mut n, mut turn) = (0usize, 0usize);
    while !stop.is_cancelled() {
        let batch: Vec<Value> = (n..n + 20).map(|i| event(&format!("e{i}"))).collect();
        loop {
            let live: Vec<String> = urls.lock().unwrap().iter().flatten().cloned().collect();
            turn += 1;
            if let Some(url) = live.get(turn % live.len().max(1)) {
                let r = c
                    .post(format!("{url}/events/publish-batch?topic=chaos"))
                    .header("content-type", "application/cloudevents-batch+json")
                    .body(serde_json::to_vec(&batch).unwrap())
                    .send()
                    .await;
                if let Some(r) = r.ok().filter(|r| r.status() == 202) {
                    let body = r.text().await.unwrap_or_default();
                    answers.lock().unwrap().push((n, url.clone(), body));
                    break;
                }
            }
            if stop.is_cancelled() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        accepted
            .lock()
            .unwrap()
            .extend((n..n + 20).map(|i| format!("e{i}")));
        n += 20;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    let _one = SERIAL.lock().await;
    let secs: u64 = std::env::var("EVENTMESH_CHAOS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (mut rng, seed) = Rng::seeded("EVENTMESH_CHAOS_SEED");
    eprintln!("chaos: {secs} s, seed {seed} (EVENTMESH_CHAOS_SEED={seed} repeats the schedule)");
    let (mut mesh, c, hook, _) = hooked_mesh("CHAOS", LEASE_MS, "chaos", HookMode::Accept).await;
    let urls = std::sync::Arc::new(std::sync::Mutex::new(
        (0..3)
            .map(|k| Some(mesh.s(k).traffic.clone()))
            .collect::<Vec<_>>(),
    ));
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let answers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = tokio_util::sync::CancellationToken::new();
    let publishing = tokio::spawn(publisher(
        urls.clone(),
        accepted.clone(),
        answers.clone(),
        stop.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut done = Vec::new();
    // Deliveries that may come again: one instance's window for a fault of
    // one instance, every instance's for an etcd outage (all of them stand
    // down at once).
    let mut may_repeat = 0;
    while Instant::now() < deadline {
        let k = rng.next(3) as usize;
        let pause = Duration::from_millis(1000 + rng.next(2000));
        let what = match rng.next(4) {
            0 => {
                urls.lock().unwrap()[k] = None;
                let s = mesh.servers[k].as_mut().unwrap();
                s.kill9();
                tokio::time::sleep(pause).await;
                let s = s.restart();
                urls.lock().unwrap()[k] = Some(s.traffic.clone());
                mesh.servers[k] = Some(s);
                may_repeat += WINDOW;
                format!("kill -9 i-{k}, restarted after {pause:?}")
            }
            1 => {
                urls.lock().unwrap()[k] = None;
                let frozen = Duration::from_millis(LEASE_MS) + pause;
                mesh.s(k).signal("STOP");
                tokio::time::sleep(frozen).await;
                mesh.s(k).signal("CONT");
                urls.lock().unwrap()[k] = Some(mesh.s(k).traffic.clone());
                may_repeat += WINDOW;
                format!("SIGSTOP i-{k} for {frozen:?} (past its lease)")
            }
            2 => {
                mesh.etcd.kill9();
                tokio::time::sleep(pause).await;
                mesh.etcd.restart().await;
                may_repeat += 3 * WINDOW;
                format!("etcd killed for {pause:?}")
            }
            _ => {
                urls.lock().unwrap()[k] = None;
                let s = mesh.servers[k].as_mut().unwrap().restart();
                urls.lock().unwrap()[k] = Some(s.traffic.clone());
                mesh.servers[k] = Some(s);
                may_repeat += WINDOW;
                format!("i-{k} left (SIGTERM) and joined again")
            }
        };
        eprintln!("chaos: {what}");
        done.push(what);
        tokio::time::sleep(Duration::from_millis(500 + rng.next(1500))).await;
    }
    stop.cancel();
    publishing.await.unwrap();
    let accepted = accepted.lock().unwrap().clone();
    settled(&c, mesh.s(0), "chaos", &ids(&mesh), Duration::from_secs(60)).await;
    // Invariants: every acknowledged publish delivered; duplicates only
    // from the windows of the faults injected.
    let counts = match hook_gets(&hook, &accepted, Duration::from_secs(120)).await {
        Ok(counts) => counts,
        Err(missing) => {
            // Where the missing events went, as their publishers were told
            // (by partition: how many, the lowest and highest offset, and
            // the instances that answered), and how far the group has
            // committed.
            let missing_set: std::collections::BTreeSet<&str> =
                missing.iter().map(String::as_str).collect();
            let mut by_partition: std::collections::BTreeMap<u64, (usize, u64, u64, Vec<String>)> =
                Default::default();
            for (_, url, body) in answers.lock().unwrap().iter() {
                let Ok(Value::Array(placed)) = serde_json::from_str::<Value>(body) else {
                    eprintln!("chaos: an answer that is not a list: {body}");
                    continue;
                };
                for p in placed {
                    if !missing_set.contains(p["id"].as_str().unwrap_or_default()) {
                        continue;
                    }
                    let (part, off) = (
                        p["partition"].as_u64().unwrap(),
                        p["offset"].as_u64().unwrap(),
                    );
                    let e = by_partition
                        .entry(part)
                        .or_insert((0, u64::MAX, 0, Vec::new()));
                    e.0 += 1;
                    e.1 = e.1.min(off);
                    e.2 = e.2.max(off);
                    if !e.3.contains(url) {
                        e.3.push(url.clone());
                    }
                }
            }
            for (part, (n, lo, hi, urls)) in &by_partition {
                eprintln!("chaos: partition {part}: {n} missing, offsets {lo}..={hi}, answered by {urls:?}");
            }
            let offsets: Value = admin_json(&c, mesh.s(0), "/admin/offsets?topic=chaos").await;
            eprintln!("chaos: committed offsets: {offsets}");
            let view = cluster_view(&c, mesh.s(0)).await;
            eprintln!("chaos: owners: {:?}", owners_of(&view, "chaos"));
            panic!(
                "{} of {} events never delivered, among them {:?}; the schedule: {done:?}",
                missing.len(),
                accepted.len(),
                &missing[..missing.len().min(20)]
            );
        }
    };
    let duplicates = duplicates(&counts);
    eprintln!(
        "chaos: {} faults in {secs} s; {} events acknowledged, all delivered; {duplicates} delivered more than once",
        done.len(),
        accepted.len()
    );
    assert!(
        duplicates <= may_repeat.max(WINDOW),
        "{duplicates} duplicates, more than the faults' windows ({may_repeat})"
    );
}
