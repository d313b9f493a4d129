//! Reliable delivery through the real binary: nacks, the per-client
//! in-flight cap, graceful shutdown that waits for handed-out deliveries,
//! kill -9 under load, and a full disk (a real tmpfs filled to the last
//! byte).

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::hook::{start_hook, HookMode};
use common::*;
use serde_json::{json, Value};

fn delivery_id(d: &Value) -> &str {
    d["deliveryId"].as_str().unwrap()
}

fn event_id(d: &Value) -> &str {
    d["event"]["id"].as_str().unwrap()
}

#[tokio::test]
async fn a_nack_is_a_failed_attempt_and_the_last_one_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=3"]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "picky", "topic": "nk"})).await;
    publish(&c, &s, "nk", &event("n0")).await;

    let mut ids = Vec::new();
    for attempt in 1..=3 {
        let got = poll_n(&c, &s, "picky", 1, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 1, "attempt {attempt}: {got:?}");
        assert_eq!(event_id(&got[0]), "n0");
        let id = delivery_id(&got[0]).to_string();
        assert_eq!(nack(&c, &s, &id).await, 200);
        // Settled: neither a second nack nor an ack matches it any more.
        assert_eq!(nack(&c, &s, &id).await, 404);
        assert_eq!(ack(&c, &s, &id).await, 404);
        ids.push(id);
    }
    // Every attempt came under a new id.
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3, "{ids:?}");

    let mut dead: Vec<Value> = Vec::new();
    for _ in 0..200 {
        dead = admin_json(&c, &s, "/admin/dlq/browse?topic=nk").await;
        if !dead.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["attempts"], 3);
    assert_eq!(dead[0]["lastError"], "nack");
    assert_eq!(metric(&c, &s, "eventmesh_nacks_total").await, 3.0);
    assert_eq!(metric(&c, &s, "eventmesh_redeliveries_total").await, 2.0);
    // Nothing else arrives: the event is in the dead-letter store.
    let more = poll_n(&c, &s, "picky", 1, Duration::from_millis(600)).await;
    assert!(more.is_empty(), "{more:?}");
}

#[tokio::test]
async fn a_client_at_its_cap_stalls_neither_its_group_nor_other_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "eventmesh.delivery.max.inflight.per.client=5",
            "eventmesh.topic.default.partitions=2",
        ],
    );
    let c = client();
    // Two members of one group; `idle` never polls.
    for member in ["idle", "busy"] {
        subscribe(
            &c,
            &s,
            json!({"clientId": member, "topic": "cap", "group": "workers"}),
        )
        .await;
    }
    // A broadcast subscriber that never polls either: its own consumer.
    subscribe(
        &c,
        &s,
        json!({"clientId": "audit", "topic": "cap", "group": "audit", "mode": "BROADCAST"}),
    )
    .await;
    for i in 0..40 {
        let mut ev = event(&format!("c{i}"));
        ev["partitionkey"] = format!("key-{i}").into();
        publish(&c, &s, "cap", &ev).await;
    }

    // `busy` gets everything `idle` cannot hold: 40 - 5.
    let mut got: HashSet<String> = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while got.len() < 35 && tokio::time::Instant::now() < deadline {
        for d in poll_n(&c, &s, "busy", 1, Duration::from_millis(500)).await {
            assert_eq!(ack(&c, &s, delivery_id(&d)).await, 200);
            got.insert(event_id(&d).to_string());
        }
    }
    assert_eq!(got.len(), 35, "{}", s.log_text());
    let extra = poll_n(&c, &s, "busy", 1, Duration::from_millis(600)).await;
    assert!(extra.is_empty(), "{extra:?}");

    let clients: Vec<Value> = admin_json(&c, &s, "/admin/clients").await;
    let by_id: HashMap<&str, &Value> = clients
        .iter()
        .map(|v| (v["clientId"].as_str().unwrap(), v))
        .collect();
    assert_eq!(by_id.len(), 3, "{clients:?}");
    assert_eq!(by_id["idle"]["inflight"], 5, "{clients:?}");
    assert_eq!(by_id["idle"]["queued"], 5, "{clients:?}");
    assert_eq!(by_id["busy"]["inflight"], 0, "{clients:?}");
    assert_eq!(by_id["audit"]["inflight"], 5, "{clients:?}");
    assert_eq!(by_id["audit"]["subscriptions"][0]["mode"], "BROADCAST");
    assert_eq!(by_id["audit"]["subscriptions"][0]["transport"], "poll");

    // `idle` wakes up: it gets its five, and room for more.
    let first = poll_n(&c, &s, "idle", 5, Duration::from_secs(10)).await;
    assert_eq!(first.len(), 5, "{first:?}");
    for d in &first {
        assert_eq!(ack(&c, &s, delivery_id(d)).await, 200);
        got.insert(event_id(d).to_string());
    }
    assert_eq!(got.len(), 40);
}

#[tokio::test]
async fn shutdown_waits_for_a_polled_delivery_to_be_acked() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.shutdown.grace.ms=30000"]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "slowpoke", "topic": "grace"})).await;
    publish(&c, &s, "grace", &event("g0")).await;
    let got = poll_n(&c, &s, "slowpoke", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);

    s.signal("TERM");
    let mut draining = false;
    for _ in 0..250 {
        if health(&c, &s).await["status"] == "DRAINING" {
            draining = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(draining, "{}", s.log_text());
    // No new polls while draining, but the ack still lands.
    let r = c
        .get(s.url("/events/poll?clientId=slowpoke&timeoutMs=10"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(ack(&c, &s, delivery_id(&got[0])).await, 200);
    assert!(s.wait_exit().success(), "{}", s.log_text());

    // The ack was committed before the exit: nothing comes again.
    let s2 = s.restart();
    let again = poll_n(&c, &s2, "slowpoke", 1, Duration::from_millis(1500)).await;
    assert!(again.is_empty(), "{again:?}");
}

// Multi-threaded: the webhook must keep answering while the test thread
// blocks waiting for the process to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_webhook_call_under_way() {
    let (url, hook) = start_hook(HookMode::Slow(Duration::from_millis(1500))).await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["eventmesh.shutdown.grace.ms=30000"]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "sleepy", "topic": "gracehook", "url": url}),
    )
    .await;
    publish(&c, &s, "gracehook", &event("w0")).await;
    assert!(
        wait_until(
            || hook.lock().unwrap().attempts_of("w0") == 1,
            Duration::from_secs(10)
        )
        .await
    );
    s.signal("TERM");
    assert!(s.wait_exit().success(), "{}", s.log_text());
    assert_eq!(
        hook.lock().unwrap().accepted_ids(),
        ["w0"],
        "{}",
        s.log_text()
    );

    // It was acknowledged by the webhook before the exit: not sent again.
    let _s2 = s.restart();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hook.lock().unwrap().attempts_of("w0"), 1);
}

#[tokio::test]
async fn kill_minus_nine_under_load_loses_no_acknowledged_publish() {
    let (url, hook) = start_hook(HookMode::Accept).await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &[]);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "sink", "topic": "load", "url": url}),
    )
    .await;

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    for t in 0..8 {
        let (c, url, acked, stop) = (
            c.clone(),
            s.url("/events/publish?topic=load"),
            acked.clone(),
            stop.clone(),
        );
        publishers.push(tokio::spawn(async move {
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let id = format!("t{t}-{n}");
                let sent = c
                    .post(&url)
                    .header("content-type", "application/cloudevents+json")
                    .body(serde_json::to_vec(&event(&id)).unwrap())
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 202 => acked.lock().unwrap().push(id),
                    // The process is gone: this publisher is done.
                    _ => break,
                }
            }
        }));
    }
    // Kill it mid-stream, with publishes and pushes under way.
    assert!(
        wait_until(
            || acked.lock().unwrap().len() >= 2000,
            Duration::from_secs(60)
        )
        .await
    );
    s.kill9();
    stop.store(true, Ordering::Relaxed);
    for p in publishers {
        p.await.unwrap();
    }
    let acked: HashSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let before_restart = hook.lock().unwrap().accepted.len();

    let s2 = s.restart();
    let delivered = || -> HashSet<String> {
        hook.lock()
            .unwrap()
            .accepted
            .iter()
            .map(|a| a.0.clone())
            .collect()
    };
    let all_in = wait_until(|| acked.is_subset(&delivered()), Duration::from_secs(120)).await;
    let seen = delivered();
    let missing: Vec<&String> = acked.difference(&seen).take(10).collect();
    assert!(
        all_in,
        "{} acknowledged publishes never delivered, e.g. {missing:?}\n{}",
        acked.difference(&seen).count(),
        s2.log_text()
    );
    let total = hook.lock().unwrap().accepted.len();
    let distinct = delivered().len();
    println!(
        "kill -9 under load: {} publishes acknowledged, {} delivered before the kill, \
         {total} deliveries in all for {distinct} events: {} duplicates",
        acked.len(),
        before_restart,
        total - distinct
    );
}

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "the disk-full test mounts a tmpfs and needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes a file until the file system is full; returns its path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xA5u8; 256 << 10];
    loop {
        if let Err(e) = f.write_all(&chunk).and_then(|_| f.flush()) {
            assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC, got {e}");
            break;
        }
    }
    // Fill the last partial chunk too.
    let small = vec![0u8; 4096];
    while f.write_all(&small).is_ok() {}
    path
}

#[tokio::test]
async fn a_full_disk_refuses_publishes_keeps_deliveries_and_recovers() {
    let fs = Tmpfs::mount("48m");
    let data = fs.path().join("data");
    let s = Server::start(&data, &["eventmesh.storage.write.buffer.bytes=1048576"]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "keeper", "topic": "kept"})).await;
    for i in 0..3 {
        publish(&c, &s, "kept", &event(&format!("k{i}"))).await;
    }
    // A topic without subscribers to push the log over the edge.
    publish(&c, &s, "bulk", &event("first")).await;
    let held = poll_n(&c, &s, "keeper", 3, Duration::from_secs(10)).await;
    assert_eq!(held.len(), 3);

    let filler = fill(fs.path());
    let mut big = event("big");
    big["data"] = json!({"blob": "x".repeat(64 << 10)});
    let mut refused = None;
    for i in 0..400 {
        big["id"] = format!("big-{i}").into();
        let r = c
            .post(s.url("/events/publish?topic=bulk"))
            .header("content-type", "application/cloudevents+json")
            .body(serde_json::to_vec(&big).unwrap())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        if status != 202 {
            refused = Some((status, r.json::<Value>().await.unwrap()));
            break;
        }
    }
    let (status, body) = refused.expect("a publish to a full disk must be refused");
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"], "insufficient_storage", "{body}");
    assert!(metric(&c, &s, "eventmesh_publish_failures_total").await >= 1.0);

    // The runtime stays up; acks are taken, but the offsets cannot be
    // written, so the deliveries stay pending.
    let h = c.get(s.admin_url("/admin/health")).send().await.unwrap();
    assert_eq!(h.status(), 200);
    for d in &held {
        assert_eq!(ack(&c, &s, delivery_id(d)).await, 200);
    }
    assert!(
        wait_until_async(|| async {
            metric(&c, &s, "eventmesh_offset_write_failures_total").await >= 2.0
        })
        .await,
        "{}",
        s.log_text()
    );
    assert_eq!(metric(&c, &s, "eventmesh_pending_deliveries").await, 3.0);
    let offsets: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=kept").await;
    let committed: u64 = offsets
        .iter()
        .map(|o| o["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, 0, "{offsets:?}");

    // Space comes back: the offsets are written and publishing works again,
    // without a restart.
    std::fs::remove_file(&filler).unwrap();
    assert!(
        wait_until_async(|| async { metric(&c, &s, "eventmesh_pending_deliveries").await == 0.0 })
            .await,
        "{}",
        s.log_text()
    );
    let offsets: Vec<Value> = admin_json(&c, &s, "/admin/offsets?topic=kept").await;
    let committed: u64 = offsets
        .iter()
        .map(|o| o["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, 3, "{offsets:?}");
    let mut published = false;
    for _ in 0..150 {
        let r = c
            .post(s.url("/events/publish?topic=kept"))
            .header("content-type", "application/cloudevents+json")
            .body(serde_json::to_vec(&event("after")).unwrap())
            .send()
            .await
            .unwrap();
        if r.status() == 202 {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(published, "{}", s.log_text());
    let got = poll_n(&c, &s, "keeper", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "{}", s.log_text());
    assert_eq!(event_id(&got[0]), "after");
}

/// Like [`wait_until`] for an async condition, for up to 60 s.
async fn wait_until_async<F, Fut>(mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
