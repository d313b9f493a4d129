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
use eventmesh_state::{OffsetStore, RocksOffsetStore};
use eventmesh_storage::LocalDb;
use serde_json::{json, Value};

fn delivery_id(d: &Value) -> &str {
    d["deliveryId"].as_str().unwrap()
}

fn event_id(d: &Value) -> &str {
    d["event"]["id"].as_str().unwrap()
}

/// An event with a partition key: events of one key share a partition, so
/// one published after another is read after it.
fn keyed(id: &str, key: &str) -> Value {
    let mut ev = event(id);
    ev["partitionkey"] = key.into();
    ev
}

/// Polls once, without waiting: what the client's mailbox holds now.
async fn poll_now(c: &reqwest::Client, s: &Server, client_id: &str) -> Vec<Value> {
    let r = c
        .get(s.url(&format!(
            "/events/poll?clientId={client_id}&timeoutMs=0&max=100"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_nack_is_a_failed_attempt_and_the_last_one_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.delivery.max.attempts=3"]);
    let c = client();
    subscribe(&c, &s, json!({"clientId": "picky", "topic": "nk"})).await;
    publish(&c, &s, "nk", &keyed("n0", "k")).await;

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
    // Nothing else arrives: the delivery is retired (its offset committed),
    // and the next event of its partition is the next delivery.
    assert!(
        committed_reaches(&c, &s, "nk", 1, Duration::from_secs(10)).await,
        "{}",
        s.log_text()
    );
    assert_eq!(metric(&c, &s, "eventmesh_pending_deliveries").await, 0.0);
    publish(&c, &s, "nk", &keyed("n1", "k")).await;
    let next = poll_n(&c, &s, "picky", 1, Duration::from_secs(10)).await;
    assert_eq!(next.iter().map(event_id).collect::<Vec<_>>(), ["n1"]);
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

    // Every event is accounted for: 35 acknowledged by `busy`, the other 5
    // held by `idle`; `busy` has nothing more coming.
    let clients: Vec<Value> = admin_json(&c, &s, "/admin/clients").await;
    let by_id: HashMap<&str, &Value> = clients
        .iter()
        .map(|v| (v["clientId"].as_str().unwrap(), v))
        .collect();
    assert_eq!(by_id.len(), 3, "{clients:?}");
    assert_eq!(by_id["idle"]["inflight"], 5, "{clients:?}");
    assert_eq!(by_id["idle"]["queued"], 5, "{clients:?}");
    assert_eq!(by_id["busy"]["inflight"], 0, "{clients:?}");
    assert_eq!(by_id["busy"]["queued"], 0, "{clients:?}");
    assert_eq!(by_id["audit"]["inflight"], 5, "{clients:?}");
    let extra = poll_now(&c, &s, "busy").await;
    assert!(extra.is_empty(), "{extra:?}");
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
    publish(&c, &s, "grace", &keyed("g0", "k")).await;
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
    // Not ready while draining, liveness aside.
    assert_eq!(
        ready(&c, &s).await,
        (503, checks(&[("lifecycle", false), ("storage", true)]))
    );
    // No new polls while draining, but the ack still lands.
    let r = c
        .get(s.url("/events/poll?clientId=slowpoke&timeoutMs=10"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(ack(&c, &s, delivery_id(&got[0])).await, 200);
    assert!(s.wait_exit().success(), "{}", s.log_text());

    // The ack was committed before the exit: nothing comes again, and the
    // next event of the partition is the next delivery.
    let s2 = s.restart();
    assert_eq!(committed_total(&c, &s2, "grace").await, 1);
    publish(&c, &s2, "grace", &keyed("g1", "k")).await;
    let next = poll_n(&c, &s2, "slowpoke", 1, Duration::from_secs(10)).await;
    assert_eq!(next.iter().map(event_id).collect::<Vec<_>>(), ["g1"]);
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
    publish(&c, &s, "gracehook", &keyed("w0", "k")).await;
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
    // The next event of its partition is the next push.
    let s2 = s.restart();
    assert_eq!(committed_total(&c, &s2, "gracehook").await, 1);
    hook.lock().unwrap().mode = HookMode::Accept;
    publish(&c, &s2, "gracehook", &keyed("w1", "k")).await;
    assert!(
        wait_until(
            || hook.lock().unwrap().accepted.iter().any(|a| a.0 == "w1"),
            Duration::from_secs(10)
        )
        .await,
        "{}",
        s2.log_text()
    );
    let h = hook.lock().unwrap();
    assert_eq!(h.attempts_of("w0"), 1);
    assert_eq!(
        h.accepted.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(),
        ["w0", "w1"]
    );
}

/// Where each acknowledged publish landed, by event id.
type Placed = HashMap<String, (u32, u64)>;

#[tokio::test]
async fn kill_minus_nine_under_load_loses_no_acknowledged_publish() {
    kill_under_load(&[], |_, acked| acked >= 2000).await;
}

/// The same with events handed to subscribers before their fsync.
#[tokio::test]
async fn kill_minus_nine_under_load_loses_nothing_reading_before_the_sync() {
    kill_under_load(&["eventmesh.delivery.after.sync=false"], |_, acked| {
        acked >= 2000
    })
    .await;
}

/// The same with small memtables, killed once the log writes into WAL
/// files it reuses (overwritten in place, so the replay must stop at the
/// end of what the last run wrote there, not at the end of the file).
#[tokio::test]
async fn kill_minus_nine_while_wal_files_are_reused_loses_nothing() {
    kill_under_load(
        &["eventmesh.storage.write.buffer.bytes=1048576"],
        |dir, acked| acked >= 2000 && wal_reused(dir),
    )
    .await;
}

/// Whether the store in `dir` has reused a WAL file, from its own record
/// of it in its info log.
fn wal_reused(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("LOG")).is_ok_and(|log| {
        log.lines()
            .any(|l| l.contains("reusing log") && l.contains("from recycle list"))
    })
}

/// Publishes from 8 tasks until `ready(data dir, publishes acknowledged)`,
/// kills the server with SIGKILL, and checks that every acknowledged
/// publish is delivered after a restart, the crash's window once more and
/// nothing else again.
async fn kill_under_load(settings: &[&str], ready: impl Fn(&Path, usize) -> bool) {
    let (url, hook) = start_hook(HookMode::Accept).await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), settings);
    let c = client();
    subscribe(
        &c,
        &s,
        json!({"clientId": "sink", "topic": "load", "url": url}),
    )
    .await;

    let acked: Arc<Mutex<Placed>> = Arc::default();
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
                let answer = match sent {
                    Ok(r) if r.status() == 202 => r.json::<Value>().await.ok(),
                    _ => None,
                };
                match answer {
                    Some(a) => {
                        let at = (
                            a["partition"].as_u64().unwrap() as u32,
                            a["offset"].as_u64().unwrap(),
                        );
                        acked.lock().unwrap().insert(id, at);
                    }
                    // The process is gone: this publisher is done.
                    None => break,
                }
            }
        }));
    }
    // Kill it mid-stream, with publishes and pushes under way.
    assert!(
        wait_until(
            || ready(dir.path(), acked.lock().unwrap().len()),
            Duration::from_secs(120)
        )
        .await
    );
    s.kill9();
    stop.store(true, Ordering::Relaxed);
    for p in publishers {
        p.await.unwrap();
    }
    let acked: Placed = acked.lock().unwrap().clone();
    let before_restart = hook.lock().unwrap().accepted.len();
    let delivered_before: HashSet<String> = hook.lock().unwrap().accepted[..before_restart]
        .iter()
        .map(|a| a.0.clone())
        .collect();

    // The watermark the crash left: where the next run starts reading.
    let committed = {
        let db = LocalDb::open(dir.path()).expect("open the killed server's data dir");
        RocksOffsetStore::new(db)
            .load("default", "load")
            .await
            .unwrap()
    };
    let at_or_above_watermark = |p: u32, o: u64| o >= committed.get(&p).copied().unwrap_or(0);
    // The crash's window: events delivered before it whose offsets the
    // watermark had not passed (in flight, or acknowledged behind one in
    // flight or after the last offset flush). Exactly these come again.
    let window: HashSet<&String> = delivered_before
        .iter()
        .filter(|id| {
            acked
                .get(*id)
                .is_some_and(|(p, o)| at_or_above_watermark(*p, *o))
        })
        .collect();

    let s2 = s.restart();
    let delivered = || -> HashSet<String> {
        hook.lock()
            .unwrap()
            .accepted
            .iter()
            .map(|a| a.0.clone())
            .collect()
    };
    let ids: HashSet<&String> = acked.keys().collect();
    let all_in = wait_until(
        || {
            let seen = delivered();
            ids.iter().all(|id| seen.contains(*id))
        },
        Duration::from_secs(120),
    )
    .await;
    let seen = delivered();
    let missing: Vec<&&String> = ids
        .iter()
        .filter(|id| !seen.contains(**id))
        .take(10)
        .collect();
    assert!(
        all_in,
        "{} acknowledged publishes never delivered, e.g. {missing:?}\n{}",
        ids.iter().filter(|id| !seen.contains(**id)).count(),
        s2.log_text()
    );
    let again = || -> HashSet<String> {
        hook.lock().unwrap().accepted[before_restart..]
            .iter()
            .filter(|a| delivered_before.contains(&a.0))
            .map(|a| a.0.clone())
            .collect()
    };
    assert!(
        wait_until(
            || {
                let again = again();
                window.iter().all(|id| again.contains(*id))
            },
            Duration::from_secs(60)
        )
        .await,
        "events above the watermark were not delivered again:\n{}",
        s2.log_text()
    );
    // Duplicates come from the window only: no event the watermark had
    // passed (acknowledged and committed) is delivered again. An event whose
    // publish answer the crash cut off has no known offset and is left out.
    let again = again();
    let outside: Vec<&String> = again
        .iter()
        .filter(|id| acked.contains_key(*id) && !window.contains(id))
        .take(10)
        .collect();
    assert!(
        outside.is_empty(),
        "delivered again though committed before the crash, e.g. {outside:?}; \
         watermark {committed:?}"
    );
    let unplaced = again.iter().filter(|id| !acked.contains_key(*id)).count();
    assert_eq!(again.len(), window.len() + unplaced);
    println!(
        "kill -9 under load: {} publishes acknowledged, {} delivered before the kill, \
         {} of them above the watermark {committed:?}, all delivered again \
         ({unplaced} more without a publish answer)",
        acked.len(),
        delivered_before.len(),
        window.len(),
    );
}

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mut mount = std::process::Command::new("mount");
        mount
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path());
        let (status, _, err) = output_within(&mut mount, Duration::from_secs(30));
        assert!(
            status.success(),
            "the disk-full test mounts a tmpfs and needs root: {err}"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Bounded, and without a panic (this may run while a test unwinds).
        let umount = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .stdin(std::process::Stdio::null())
            .spawn();
        if let Ok(mut child) = umount {
            if wait_child(&mut child, Duration::from_secs(30)).is_none() {
                let _ = child.kill();
                let _ = wait_child(&mut child, Duration::from_secs(5));
            }
        }
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
    // The publishes before it were stored; this one alone failed.
    assert_eq!(
        metric(&c, &s, "eventmesh_publish_failures_total").await,
        1.0
    );

    // The runtime stays up (alive, not ready); acks are taken, but the
    // offsets cannot be written, so the deliveries stay pending.
    let h = c.get(s.admin_url("/admin/health")).send().await.unwrap();
    assert_eq!(h.status(), 200);
    assert_eq!(
        ready(&c, &s).await,
        (503, checks(&[("lifecycle", true), ("storage", false)]))
    );
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
    assert_eq!(
        ready(&c, &s).await,
        (200, checks(&[("lifecycle", true), ("storage", true)]))
    );
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
