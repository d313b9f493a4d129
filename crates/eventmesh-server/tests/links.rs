//! Mesh links between clusters: real `eventmesh` processes on loopback,
//! each a cluster of its own name, linked through `/admin/links`.
//!
//! - A full mesh of three sites with links both ways, publishing at all
//!   three at once: every event reaches each site exactly once, and none
//!   comes back to where it was published.
//! - A chain A → B → C with a rename, and the hop limit.
//! - Hub and spoke.
//! - A remote whose ACL refuses one topic: those events are dead-lettered
//!   at home with the remote's reason, the rest arrive.
//! - The remote killed -9 for 20 s and back: the link shows `DOWN` with its
//!   lag, and resumes on its own; nothing lost, nothing doubled.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::connectors::{drain, reader, stored_so_far};
use common::gate::GateFiles;
use common::links::*;
use common::topics::{admin, publish_batch};
use common::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_mesh_of_three_sites_delivers_each_event_once_everywhere_and_none_comes_back() {
    const N: usize = 300;
    let c = client();
    let sites = ["a", "b", "c"].map(|n| Site::start(n, &[]));
    for s in &sites {
        assert_eq!(health(&c, &s.server).await["cluster"], s.name);
        reader(&c, &s.server, "app", "orders").await;
    }
    let mut names: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for from in &sites {
        for to in sites.iter().filter(|t| t.name != from.name) {
            let name = format!("to-{}", to.name);
            let v = link(&c, from, &name, &to.server.traffic, to.name, json!({})).await;
            assert_eq!(v["remote"]["url"], to.server.traffic);
            names.entry(from.name).or_default().push(name);
        }
    }
    for from in &sites {
        for name in &names[from.name] {
            let v = link_reaching(&c, from, name, "up", |v| v["status"]["state"] == "UP").await;
            assert_eq!(v["status"]["remoteCluster"], &name[3..]);
        }
    }
    // All three publish at once, while the links carry.
    futures::future::join_all(sites.iter().map(|s| publish_numbered(&c, s, "orders", N))).await;
    for s in &sites {
        let got = drain(&c, &s.server, "app", 3 * N, WAIT).await;
        assert_eq!(got.len(), 3 * N, "{} got {} events", s.name, got.len());
        for (id, (ev, times)) in &got {
            assert_eq!(*times, 1, "{id} came {times} times to {}", s.name);
            let origin = id.split('-').next().unwrap();
            let p = path(ev);
            if origin == s.name {
                assert!(p.is_empty(), "{id} came back to {}: {p:?}", s.name);
            } else {
                // Straight from its origin, or through the third site.
                assert_eq!(p[0], origin, "{id} at {}: {p:?}", s.name);
                assert!(
                    p.len() <= 2 && !p.contains(&s.name),
                    "{id} at {}: {p:?}",
                    s.name
                );
            }
        }
    }
    // Once every link is idle, each log holds each event exactly once.
    for s in &sites {
        links_idle(&c, s).await;
        assert_eq!(
            stored_so_far(&c, &s.server, "orders").await,
            3 * N as u64,
            "{}",
            s.name
        );
    }
    // Every event is offered six times: to both links of its origin (no
    // path yet), and at each of the two other sites to the link back (a
    // loop) and to the link onwards (a loop too when that copy came through
    // the third site, else a relay that site stores or already has). Each
    // of the two stores at the other sites is one `sent`.
    let (mut sent, mut loops, mut duplicates) = (0.0, 0.0, 0.0);
    for s in &sites {
        sent += link_events(&c, s, &names[s.name], "sent").await;
        loops += link_events(&c, s, &names[s.name], "loop").await;
        duplicates += link_events(&c, s, &names[s.name], "duplicate").await;
    }
    let events = (3 * N) as f64;
    assert_eq!(sent, 2.0 * events, "loops {loops}, duplicates {duplicates}");
    assert_eq!(
        loops + sent + duplicates,
        6.0 * events,
        "loops {loops}, duplicates {duplicates}"
    );
    assert!(loops >= 2.0 * events, "loops {loops}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chain_renames_and_the_hop_limit_stops_what_went_far_enough() {
    const N: usize = 50;
    let c = client();
    let [a, b, c_] = ["a", "b", "c"].map(|n| Site::start(n, &[]));
    reader(&c, &c_.server, "app", "from-a.orders").await;
    reader(&c, &b.server, "app", "from-a.orders").await;
    // A → B renamed, B → C by a pattern that follows what A's link makes.
    link(
        &c,
        &a,
        "to-b",
        &b.server.traffic,
        b.name,
        json!({"renamePrefix": "from-a."}),
    )
    .await;
    let v = link(
        &c,
        &b,
        "to-c",
        &c_.server.traffic,
        c_.name,
        json!({"exports": [{"topic": "from-a.>"}]}),
    )
    .await;
    assert_eq!(v["exports"], json!([{"topic": "from-a.>"}]));
    publish_numbered(&c, &a, "orders", N).await;
    for (site, want) in [(&b, vec!["a"]), (&c_, vec!["a", "b"])] {
        let got = drain(&c, &site.server, "app", N, WAIT).await;
        assert_eq!(got.len(), N, "{}", site.name);
        for (id, (ev, times)) in &got {
            assert_eq!(*times, 1, "{id} at {}", site.name);
            assert_eq!(path(ev), want, "{id} at {}", site.name);
            assert_eq!(ev["source"], "/site/a", "source and id cross unchanged");
        }
    }
    links_idle(&c, &b).await;
    assert_eq!(
        stored_so_far(&c, &c_.server, "from-a.orders").await,
        N as u64
    );
    // With a hop limit of 1, B sends on only what left no cluster yet.
    let (code, v) = admin(
        &c,
        &b.server,
        reqwest::Method::PUT,
        "/admin/links/to-c",
        Some(json!({
            "remote": {"url": c_.server.traffic},
            "exports": [{"topic": "from-a.>"}, {"topic": "local"}],
            "maxHops": 1,
            "targetGuard": false,
        })),
    )
    .await;
    assert_eq!((code, v["maxHops"].as_u64()), (200, Some(1)), "{v}");
    reader(&c, &c_.server, "app2", "local").await;
    publish_numbered(&c, &b, "local", 10).await;
    let got = drain(&c, &c_.server, "app2", 10, WAIT).await;
    assert_eq!(got.len(), 10);
    assert!(got.values().all(|(ev, n)| *n == 1 && path(ev) == ["b"]));
    // What came from A has left one cluster already: not sent on.
    let more: Vec<Value> = (0..5)
        .map(|i| {
            let mut e = event(&format!("x-{i}"));
            e["source"] = json!("/site/a2");
            e
        })
        .collect();
    publish_batch(&c, &a.server, "orders", &more).await;
    link_reaching(&c, &a, "to-b", "idle", |v| v["status"]["lagEvents"] == 0).await;
    let deadline = Instant::now() + WAIT;
    while link_events(&c, &b, &["to-c".to_string()], "hops").await < 5.0 {
        assert!(
            Instant::now() < deadline,
            "B did not stop them at the hop limit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored_so_far(&c, &c_.server, "from-a.orders").await,
        N as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hub_and_spoke_carries_a_spoke_s_events_to_the_other_spoke_through_the_hub() {
    const N: usize = 40;
    let c = client();
    let [s1, hub, s2] = ["s1", "hub", "s2"].map(|n| Site::start(n, &[]));
    for s in [&s1, &hub, &s2] {
        reader(&c, &s.server, "app", "orders").await;
    }
    link(&c, &s1, "up", &hub.server.traffic, hub.name, json!({})).await;
    link(&c, &s2, "up", &hub.server.traffic, hub.name, json!({})).await;
    link(&c, &hub, "to-s1", &s1.server.traffic, s1.name, json!({})).await;
    link(&c, &hub, "to-s2", &s2.server.traffic, s2.name, json!({})).await;
    futures::future::join_all([&s1, &s2].map(|s| publish_numbered(&c, s, "orders", N))).await;
    for s in [&s1, &hub, &s2] {
        let got = drain(&c, &s.server, "app", 2 * N, WAIT).await;
        assert_eq!(got.len(), 2 * N, "{}", s.name);
        for (id, (ev, times)) in &got {
            assert_eq!(*times, 1, "{id} at {}", s.name);
            let origin = id.split('-').next().unwrap();
            let want: Vec<&str> = match (origin == s.name, s.name) {
                (true, _) => vec![],
                (false, "hub") => vec![origin],
                (false, _) => vec![origin, "hub"],
            };
            assert_eq!(path(ev), want, "{id} at {}", s.name);
        }
    }
    for s in [&s1, &hub, &s2] {
        links_idle(&c, s).await;
        assert_eq!(stored_so_far(&c, &s.server, "orders").await, 2 * N as u64);
    }
    // The hub sent each spoke the other's events only: its own back, never.
    for (l, n) in [("to-s1", N), ("to-s2", N)] {
        let l = [l.to_string()];
        assert_eq!(link_events(&c, &hub, &l, "sent").await, n as f64);
        assert_eq!(link_events(&c, &hub, &l, "loop").await, n as f64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_the_remote_acl_refuses_is_dead_lettered_with_its_reason_and_the_rest_arrives() {
    let c = client();
    let gate = GateFiles::new("t-link acme linker\nt-app acme app\n");
    let mut settings = gate.fail_closed();
    settings.push(gate.acl("allow linker PUBLISH orders\nallow app * *\n"));
    let b = Site::start("b", &settings);
    let a = Site::start("a", &[]);
    let as_app = authorized("t-app");
    reader(&as_app, &b.server, "app", "orders").await;
    // What B says to the link's principal on `secret`.
    let (code, refusal, _) = call(
        &c,
        reqwest::Method::POST,
        b.server.url("/events/publish?topic=secret"),
        Some("t-link"),
        "application/cloudevents+json",
        serde_json::to_vec(&event("probe")).unwrap(),
        &[],
    )
    .await;
    assert_eq!((code, refusal["error"].as_str()), (403, Some("acl_denied")));
    let v = link(
        &c,
        &a,
        "to-b",
        &b.server.traffic,
        b.name,
        json!({
            "remote": {"url": b.server.traffic, "cluster": "b", "token": "t-link"},
            "exports": [{"topic": "orders"}, {"topic": "secret"}],
        }),
    )
    .await;
    let shown = json!({"url": b.server.traffic, "cluster": "b", "token": "***"});
    assert_eq!(v["remote"], shown, "the token is not shown");
    assert_eq!(link_view(&c, &a, "to-b").await["remote"], shown);
    publish_numbered(&c, &a, "orders", 20).await;
    publish_numbered(&c, &a, "secret", 10).await;
    let got = drain(&as_app, &b.server, "app", 20, WAIT).await;
    assert_eq!(got.len(), 20);
    assert!(got.values().all(|(_, n)| *n == 1));
    let reason = format!(
        "the remote cluster b refused it: {} (acl_denied, HTTP 403)",
        refusal["message"].as_str().unwrap()
    );
    let dead = dead_letters_reaching(&c, &a, "secret", 10).await;
    let dead = dead.as_array().unwrap();
    assert_eq!(dead.len(), 10, "{dead:?}");
    for d in dead {
        assert_eq!(d["lastError"], reason.as_str());
        assert_eq!(d["attempts"], 1, "dead-lettered at once");
        assert_eq!(d["consumer"], "link.to-b");
    }
    assert_eq!(stored_so_far(&c, &b.server, "secret").await, 0);
    assert_eq!(
        link_events(&c, &a, &["to-b".to_string()], "refused").await,
        10.0
    );
    drop(b);
    drop(gate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_away_for_20_s_leaves_the_backlog_waiting_and_gets_it_all_once_back() {
    let c = client();
    let mut b = Site::start("b", &[]);
    let a = Site::start("a", &[]);
    // Retention keeps 10 minutes; the events published while B is away
    // say they are older than that.
    let (code, v) = admin(
        &c,
        &a,
        reqwest::Method::POST,
        "/admin/topics",
        Some(json!({"name": "orders", "partitions": 2, "retention": {"ms": 600_000}})),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    link(&c, &a, "to-b", &b.server.traffic, b.name, json!({})).await;
    publish_numbered(&c, &a, "orders", 100).await;
    link_reaching(&c, &a, "to-b", "idle", |v| {
        v["status"]["state"] == "UP" && v["status"]["lagEvents"] == 0
    })
    .await;
    b.server.kill9();
    let away = Instant::now();
    // Published while B is away: they wait in A's log.
    let more: Vec<Value> = (100..300)
        .map(|i| {
            let mut e = event(&format!("a-{i}"));
            e["source"] = json!("/site/a");
            e["time"] = json!("2026-01-01T00:00:00Z");
            e
        })
        .collect();
    for batch in more.chunks(25) {
        publish_batch(&c, &a.server, "orders", batch).await;
    }
    let v = link_reaching(&c, &a, "to-b", "down with its lag", |v| {
        v["status"]["state"] == "DOWN" && v["status"]["lagEvents"] == 200
    })
    .await;
    assert_eq!(
        v["status"]["lastError"].as_str().unwrap(),
        format!(
            "open: cannot learn the remote's cluster name: cannot reach the eventmesh server at {}: Connection refused (os error 111)",
            b.server.traffic
        )
    );
    assert!(v["status"]["lagSeconds"].as_f64().unwrap() > 0.0, "{v}");
    let m = metrics(&c, &a.server).await;
    assert_eq!(m.get("eventmesh_link_up{link=\"to-b\"}"), 0.0);
    assert_eq!(m.get("eventmesh_link_lag_events{link=\"to-b\"}"), 200.0);
    assert_eq!(m.get("eventmesh_link_retention_risk{link=\"to-b\"}"), 1.0);
    assert!(a.wait_for_log(&[
        "WARN",
        "retention may drop events this link has not sent: on orders the oldest unsent event is"
    ]));
    // Nothing was given up on while B was away.
    let (code, dead) = admin(
        &c,
        &a.server,
        reqwest::Method::GET,
        "/admin/dlq/browse?topic=orders",
        None,
    )
    .await;
    assert_eq!((code, dead), (200, json!([])));
    if let Some(left) = Duration::from_secs(20).checked_sub(away.elapsed()) {
        tokio::time::sleep(left).await;
    }
    b.server = b.server.restart_on_same_ports();
    link_reaching(&c, &a, "to-b", "caught up", |v| {
        v["status"]["state"] == "UP" && v["status"]["lagEvents"] == 0
    })
    .await;
    // B's log holds each of the 300 once.
    assert_eq!(stored_so_far(&c, &b.server, "orders").await, 300);
    reader(&c, &b.server, "after", "orders").await;
    let got = drain(&c, &b.server, "after", 300, WAIT).await;
    assert_eq!(got.len(), 300);
    assert!(got.values().all(|(ev, n)| *n == 1 && path(ev) == ["a"]));
    let m = metrics(&c, &a.server).await;
    assert_eq!(m.get("eventmesh_link_up{link=\"to-b\"}"), 1.0);
    assert_eq!(m.get("eventmesh_link_retention_risk{link=\"to-b\"}"), 0.0);
    assert_eq!(
        m.get("eventmesh_link_events_total{link=\"to-b\",outcome=\"sent\"}"),
        300.0
    );
}

#[tokio::test]
async fn a_bad_link_is_refused_with_the_field_at_fault() {
    let c = client();
    let a = Site::start("a", &[]);
    let post = |body: Value| {
        let (c, s) = (&c, &a.server);
        async move { admin(c, s, reqwest::Method::POST, "/admin/links", Some(body)).await }
    };
    let base = json!({"name": "l", "remote": {"url": "http://127.0.0.1:9"},
        "exports": [{"topic": "orders"}], "targetGuard": false});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    for (body, message) in [
        (
            with("remote", json!({"url": "ftp://x"})),
            "remote.url \"ftp://x\" must be http:// or https:// with a host",
        ),
        (
            with("remote", json!({"url": "http://x", "certFile": "/c.pem"})),
            "remote.certFile and keyFile go together",
        ),
        (with("exports", json!([])), "exports: 0 given; give 1 to 64"),
        (
            with("exports", json!([{"topic": "a"}, {"topic": "a"}])),
            "exports[1].topic: \"a\" is exported twice",
        ),
        (with("maxHops", json!(0)), "maxHops must be 1 to 64"),
        (
            with("name", json!("a b")),
            "name: \"a b\" must be 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)",
        ),
    ] {
        let (code, v) = post(body).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (400, Some("invalid_link")),
            "{v}"
        );
        assert_eq!(v["message"], message);
    }
    let (code, v) = post(with("exports", json!([{"topic": "orders.>.x"}]))).await;
    assert_eq!(code, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("exports[0].topic: "),
        "{v}"
    );
    // The remote's own URL: the link never runs.
    let own = with("remote", json!({"url": a.server.traffic}));
    let (code, v) = post(own.clone()).await;
    assert_eq!(code, 201, "{v}");
    let v = link_reaching(&c, &a, "l", "failed", |v| v["status"]["state"] == "FAILED").await;
    assert_eq!(
        v["status"]["lastError"],
        format!(
            "open: the remote at {} is this cluster (a)",
            a.server.traffic
        )
    );
    let (code, v) = post(own).await;
    assert_eq!(
        (code, v["error"].as_str()),
        (409, Some("link_exists")),
        "{v}"
    );
    // A connector is not a link.
    let (code, _) = common::connectors::create(
        &c,
        &a.server,
        json!({"name": "f", "kind": "file-sink", "topic": "t", "config": {"path": "/tmp/f.jsonl"}}),
    )
    .await;
    assert_eq!(code, 201);
    for (method, path) in [
        (reqwest::Method::GET, "/admin/links/f"),
        (reqwest::Method::DELETE, "/admin/links/f"),
        (reqwest::Method::GET, "/admin/links/none"),
    ] {
        let (code, v) = admin(&c, &a.server, method, path, None).await;
        assert_eq!(
            (code, v["error"].as_str()),
            (404, Some("unknown_link")),
            "{path}: {v}"
        );
    }
    let (code, all) = admin(&c, &a.server, reqwest::Method::GET, "/admin/links", None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["l"]);
    let (code, _) = admin(
        &c,
        &a.server,
        reqwest::Method::DELETE,
        "/admin/links/l",
        None,
    )
    .await;
    assert_eq!(code, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_the_remote_finds_too_large_is_dead_lettered_alone() {
    let c = client();
    let b = Site::start("b", &["eventmesh.http.max.body.bytes=8192".to_string()]);
    let a = Site::start("a", &[]);
    reader(&c, &b, "app", "orders").await;
    link(&c, &a, "to-b", &b.traffic, b.name, json!({})).await;
    link_reaching(&c, &a, "to-b", "up", idle).await;
    // One batch: ten small events around one over B's body limit.
    let batch: Vec<Value> = (0..11)
        .map(|i| {
            let mut e = event(&format!("a-{i}"));
            if i == 5 {
                e["data"] = json!({"pad": "x".repeat(10_000)});
            }
            e
        })
        .collect();
    publish_batch(&c, &a, "orders", &batch).await;
    let got = drain(&c, &b, "app", 10, WAIT).await;
    let mut ids: Vec<&str> = got.keys().map(String::as_str).collect();
    ids.sort_by_key(|id| id[2..].parse::<u32>().unwrap());
    assert_eq!(
        ids,
        ["a-0", "a-1", "a-2", "a-3", "a-4", "a-6", "a-7", "a-8", "a-9", "a-10"]
    );
    let dead = dead_letters_reaching(&c, &a, "orders", 1).await;
    assert_eq!(dead.as_array().unwrap().len(), 1, "{dead}");
    let ev: Value = match &dead[0]["eventJson"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    assert_eq!(ev["id"], "a-5");
    let reason = dead[0]["lastError"].as_str().unwrap();
    assert!(
        reason.starts_with("the remote cluster b refused it: ") && reason.ends_with(", HTTP 413)"),
        "{reason}"
    );
    link_reaching(&c, &a, "to-b", "idle", idle).await;
    assert_eq!(stored_so_far(&c, &b, "orders").await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_over_its_publish_quota_slows_the_link_and_loses_nothing() {
    let c = client();
    let gate = GateFiles::new("t-link acme linker\nt-app other app\n");
    let mut settings = gate.fail_closed();
    settings.push("eventmesh.security.gate.quota.publish.rate=200".to_string());
    settings.push("eventmesh.security.gate.quota.publish.burst=100".to_string());
    let b = Site::start("b", &settings);
    let a = Site::start("a", &[]);
    let as_app = authorized("t-app");
    reader(&as_app, &b, "app", "orders").await;
    // 600 events wait at A before the link exists: its first batch is far
    // over B's burst, and 429s until its requests are small enough.
    publish_numbered(&c, &a, "orders", 600).await;
    link(
        &c,
        &a,
        "to-b",
        &b.traffic,
        b.name,
        json!({"remote": {"url": b.traffic, "cluster": "b", "token": "t-link"}}),
    )
    .await;
    let got = drain(&as_app, &b, "app", 600, WAIT).await;
    assert_eq!(got.len(), 600);
    assert!(got.values().all(|(_, n)| *n == 1));
    link_reaching(&c, &a, "to-b", "idle", idle).await;
    let (_, dead) = admin(
        &c,
        &a,
        reqwest::Method::GET,
        "/admin/dlq/browse?topic=orders",
        None,
    )
    .await;
    assert_eq!(dead, json!([]));
    assert_eq!(stored_so_far(&c, &b, "orders").await, 600);
    let m = metrics(&c, &b).await;
    assert!(
        m.get("eventmesh_gate_denied_total{reason=\"publish_rate\"}") > 0.0,
        "B never said 429"
    );
    assert_eq!(
        link_events(&c, &a, &["to-b".to_string()], "sent").await,
        600.0
    );
    drop(b);
    drop(gate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pulling_link_brings_the_remote_s_events_home_and_none_goes_round() {
    const N: usize = 60;
    let c = client();
    let [a, b] = ["a", "b"].map(|n| Site::start(n, &[]));
    for s in [&a, &b] {
        reader(&c, s, "app", "orders").await;
    }
    // B brings A's `orders` home, and sends its own to A: a pair made from
    // one side only (B reaches A; A never connects to B).
    let v = link(
        &c,
        &b,
        "from-a",
        &a.traffic,
        a.name,
        json!({"direction": "pull"}),
    )
    .await;
    assert_eq!(
        (v["direction"].as_str(), &v["exports"]),
        (Some("pull"), &json!([{"topic": "orders"}]))
    );
    link(&c, &b, "to-a", &a.traffic, a.name, json!({})).await;
    link_reaching(&c, &b, "from-a", "up", |v| v["status"]["state"] == "UP").await;
    futures::future::join_all([&a, &b].map(|s| publish_numbered(&c, s, "orders", N))).await;
    for s in [&a, &b] {
        let got = drain(&c, s, "app", 2 * N, WAIT).await;
        assert_eq!(got.len(), 2 * N, "{}", s.name);
        for (id, (ev, times)) in &got {
            assert_eq!(*times, 1, "{id} at {}", s.name);
            let origin = id.split('-').next().unwrap();
            let want: Vec<&str> = if origin == s.name {
                vec![]
            } else {
                vec![origin]
            };
            assert_eq!(path(ev), want, "{id} at {}", s.name);
        }
    }
    links_idle(&c, &b).await;
    for s in [&a, &b] {
        assert_eq!(
            stored_so_far(&c, s, "orders").await,
            2 * N as u64,
            "{}",
            s.name
        );
    }
    // What B pulled home did not go back, and what B sent was not pulled.
    let to_a = ["to-a".to_string()];
    assert_eq!(link_events(&c, &b, &to_a, "sent").await, N as f64);
    assert_eq!(link_events(&c, &b, &to_a, "loop").await, N as f64);
    let pulled = "eventmesh_connector_events_total{connector=\"from-a\",direction=\"in\"}";
    assert_eq!(metrics(&c, &b).await.get(pulled), N as f64);
    // Deleted, it stops pulling.
    let (code, _) = admin(&c, &b, reqwest::Method::DELETE, "/admin/links/from-a", None).await;
    assert_eq!(code, 204);
}
