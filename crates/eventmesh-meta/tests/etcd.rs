//! The etcd backend against real etcd processes (one per test): the
//! conformance suite, and behaviour while etcd is killed, frozen,
//! restarted or compacted.

mod support;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use eventmesh_meta::tck::{self, TckOptions};
use eventmesh_meta::{EtcdMetaStore, EtcdSettings, MetaError, MetaStore, WatchEvent, WatchStream};
use futures::StreamExt;
use support::Etcd;

/// The per-call timeout of the stores under test.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Extra time a failing call may take beyond its timeout before the test
/// calls it hung.
const MARGIN: Duration = Duration::from_secs(4);
/// How long a store may take to work again once etcd is back.
const RECOVER_WITHIN: Duration = Duration::from_secs(15);

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

async fn store_for(etcd: &Etcd) -> EtcdMetaStore {
    let mut config = EtcdSettings::new([etcd.endpoint()]);
    config.timeout = CALL_TIMEOUT;
    EtcdMetaStore::connect(config).await.expect("connect")
}

/// Runs a call that must give up on its own: panics if it does not return
/// within the store timeout plus a margin, and returns its result.
async fn returns<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(CALL_TIMEOUT + MARGIN, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung instead of failing"))
}

/// Retries a put until the store answers again.
async fn wait_until_usable(store: &EtcdMetaStore, key: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + RECOVER_WITHIN;
    loop {
        match returns("put while recovering", store.put(key, b("back"))).await {
            Ok(rev) => return rev,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                panic!("the store did not recover within {RECOVER_WITHIN:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn next_event(w: &mut WatchStream) -> Result<WatchEvent, MetaError> {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("a watch item within 10 s")
        .expect("the watch is still open")
}

#[tokio::test]
async fn etcd_passes_the_tck() {
    let etcd = Etcd::start().await;
    let store = store_for(&etcd).await;
    // etcd leases count whole seconds and last about 2 s at least.
    let opts = TckOptions {
        lease_ttl: Duration::from_secs(2),
    };
    tck::run_all_with(&store, opts).await;
}

#[tokio::test]
async fn calls_fail_while_etcd_is_killed_and_work_again_after_restart() {
    let mut etcd = Etcd::start().await;
    let store = store_for(&etcd).await;
    let before = store.put("/k/kept", b("1")).await.unwrap();

    etcd.kill9();
    let r = returns("get", store.get("/k/kept")).await;
    assert!(r.is_err(), "get: {r:?}");
    let r = returns("put", store.put("/k/a", b("1"))).await;
    assert!(r.is_err(), "put: {r:?}");
    let r = returns("put_if_absent", store.put_if_absent("/k/b", b("1"))).await;
    assert!(r.is_err(), "put_if_absent: {r:?}");
    let r = returns(
        "compare_and_swap",
        store.compare_and_swap("/k/kept", Some(b"1"), b("2")),
    )
    .await;
    assert!(r.is_err(), "compare_and_swap: {r:?}");
    let r = returns("watch_prefix", store.watch_prefix("/k/", before)).await;
    assert!(r.is_err(), "watch_prefix succeeded on a dead etcd");
    let r = returns("grant_lease", store.grant_lease(Duration::from_secs(5))).await;
    assert!(r.is_err(), "grant_lease: {r:?}");
    // Connecting does not need a running etcd.
    let late = returns("connect", store_for(&etcd)).await;
    let r = returns(
        "get on a store connected while etcd was down",
        late.get("/k/kept"),
    )
    .await;
    assert!(r.is_err(), "{r:?}");

    etcd.restart().await;
    let rev = wait_until_usable(&store, "/k/after").await;
    assert!(rev > before);
    let kept = store.get("/k/kept").await.unwrap().expect("data survives");
    assert_eq!((kept.value, kept.revision), (b("1"), before));
    assert!(store.put_if_absent("/k/b", b("1")).await.unwrap());
    assert!(store
        .compare_and_swap("/k/kept", Some(b"1"), b("2"))
        .await
        .unwrap());
    assert!(late.get("/k/b").await.unwrap().is_some());
}

#[tokio::test]
async fn frozen_etcd_times_out_instead_of_hanging() {
    let etcd = Etcd::start().await;
    let store = store_for(&etcd).await;
    store.put("/f/a", b("1")).await.unwrap();

    etcd.stop();
    let r = returns("get on a frozen etcd", store.get("/f/a")).await;
    assert!(matches!(r, Err(MetaError::Timeout(_))), "{r:?}");
    let r = returns("put on a frozen etcd", store.put("/f/b", b("1"))).await;
    assert!(r.is_err(), "{r:?}");

    etcd.cont();
    wait_until_usable(&store, "/f/c").await;
    assert_eq!(store.get("/f/a").await.unwrap().unwrap().value, b("1"));
}

#[tokio::test]
async fn watch_resumes_from_the_last_seen_revision_after_a_restart() {
    let mut etcd = Etcd::start().await;
    let store = store_for(&etcd).await;
    let (_, start) = store.snapshot_prefix("/w/").await.unwrap();
    let mut w = store.watch_prefix("/w/", start).await.unwrap();
    let r1 = store.put("/w/a", b("1")).await.unwrap();
    let r2 = store.put("/w/b", b("2")).await.unwrap();
    let e1 = next_event(&mut w).await.unwrap();
    let e2 = next_event(&mut w).await.unwrap();
    assert_eq!((e1.key(), e1.revision()), ("/w/a", r1));
    assert_eq!((e2.key(), e2.revision()), ("/w/b", r2));
    let last_seen = e2.revision();

    etcd.kill9();
    let broken = next_event(&mut w).await;
    assert!(
        matches!(broken, Err(MetaError::Unavailable(_))),
        "{broken:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("the broken watch ends");
    assert!(end.is_none(), "nothing after the error: {end:?}");

    etcd.restart().await;
    // Changes made before the new watch exists are replayed, later ones
    // arrive live; none is missed or repeated.
    let r3 = wait_until_usable(&store, "/w/c").await;
    assert!(store.delete("/w/a").await.unwrap());
    let mut resumed = store.watch_prefix("/w/", last_seen).await.unwrap();
    let r5 = store.put("/w/d", b("4")).await.unwrap();
    let got: Vec<(String, u64, bool)> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let e = next_event(&mut resumed).await.unwrap();
            let is_put = matches!(e, WatchEvent::Put(_));
            v.push((e.key().to_string(), e.revision(), is_put));
        }
        v
    };
    assert_eq!(got[0], ("/w/c".to_string(), r3, true));
    assert_eq!((got[1].0.as_str(), got[1].2), ("/w/a", false));
    assert!(got[1].1 > r3 && got[1].1 < r5);
    assert_eq!(got[2], ("/w/d".to_string(), r5, true));
}

#[tokio::test]
async fn watch_from_a_compacted_revision_fails_with_compacted() {
    let etcd = Etcd::start().await;
    let store = store_for(&etcd).await;
    let r1 = store.put("/c/k", b("1")).await.unwrap();
    store.put("/c/k", b("2")).await.unwrap();
    let r3 = store.put("/c/k", b("3")).await.unwrap();
    let mut admin = returns(
        "connect an admin client",
        etcd_client::Client::connect([etcd.endpoint()], None),
    )
    .await
    .unwrap();
    returns("compact", admin.compact(r3 as i64, None))
        .await
        .unwrap();

    // Revisions before r3 are gone: the error comes from watch_prefix or
    // as the first item of the stream.
    let outcome = match store.watch_prefix("/c/", r1).await {
        Err(e) => Err(e),
        Ok(mut w) => next_event(&mut w).await,
    };
    assert!(
        matches!(outcome, Err(MetaError::Compacted { requested, .. }) if requested == r1),
        "{outcome:?}"
    );
    // r3 itself is kept: watching right after r3 - 1 replays it.
    let mut w = store.watch_prefix("/c/", r3 - 1).await.unwrap();
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.key(), e.revision()), ("/c/k", r3));
}
