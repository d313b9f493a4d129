//! The conformance suite every [`MetaStore`] backend passes. Each check
//! works under its own key prefix, so one fresh store serves the whole run.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::error::MetaError;
use crate::store::{KeyValue, MetaStore};
use crate::watch::{WatchEvent, WatchStream};

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// Timing of the checks that wait for the backend.
#[derive(Debug, Clone, Copy)]
pub struct TckOptions {
    /// TTL of the leases the lease check grants. The check renews one lease
    /// every quarter of it and waits up to four TTLs for the other to
    /// expire, so backends with coarse lease timers (etcd: whole seconds,
    /// about 2 s at least) pass a longer one.
    pub lease_ttl: Duration,
}

impl Default for TckOptions {
    fn default() -> Self {
        TckOptions {
            lease_ttl: Duration::from_millis(400),
        }
    }
}

/// Runs every check with the default timing, panicking with a description
/// on the first failure.
pub async fn run_all(store: &dyn MetaStore) {
    run_all_with(store, TckOptions::default()).await;
}

/// Runs every check with the given timing, panicking with a description on
/// the first failure.
pub async fn run_all_with(store: &dyn MetaStore, opts: TckOptions) {
    put_get_delete(store).await;
    first_write_wins(store).await;
    compare_and_swap(store).await;
    prefix_reads(store).await;
    pages(store).await;
    revisions_grow(store).await;
    concurrent_cas_has_one_winner(store).await;
    guarded_writes_follow_the_claim(store).await;
    claims_end_with_their_lease(store, opts.lease_ttl).await;
    watch_order_and_resume(store).await;
    snapshot_then_watch_has_no_gap(store).await;
    lease_expiry_and_renewal(store, opts.lease_ttl).await;
}

async fn next(w: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("a watch event within 5 s")
        .expect("the watch is still open")
        .expect("no watch error")
}

async fn watch_order_and_resume(s: &dyn MetaStore) {
    let base = s.put("/tck/w0/start", b("x")).await.unwrap();
    let mut w = s.watch_prefix("/tck/w/", base).await.unwrap();
    let r1 = s.put("/tck/w/a", b("1")).await.unwrap();
    s.put("/tck/other/z", b("ignored")).await.unwrap();
    let r2 = s.put("/tck/w/b", b("2")).await.unwrap();
    assert!(s.delete("/tck/w/a").await.unwrap());
    let e1 = next(&mut w).await;
    assert_eq!((e1.key(), e1.revision()), ("/tck/w/a", r1));
    assert!(matches!(&e1, WatchEvent::Put(kv) if kv.value == b("1")));
    let e2 = next(&mut w).await;
    assert_eq!((e2.key(), e2.revision()), ("/tck/w/b", r2));
    let e3 = next(&mut w).await;
    assert!(
        matches!(&e3, WatchEvent::Delete { key, .. } if key == "/tck/w/a"),
        "{e3:?}"
    );
    assert!(e3.revision() > r2);
    // Resuming after r1 replays what came later and nothing before.
    let mut resumed = s.watch_prefix("/tck/w/", r1).await.unwrap();
    assert_eq!(next(&mut resumed).await, e2);
    assert_eq!(next(&mut resumed).await, e3);
}

async fn snapshot_then_watch_has_no_gap(s: &dyn MetaStore) {
    s.put("/tck/snap/a", b("1")).await.unwrap();
    let (kvs, rev) = s.snapshot_prefix("/tck/snap/").await.unwrap();
    assert_eq!(kvs.len(), 1);
    let later = s.put("/tck/snap/b", b("2")).await.unwrap();
    let mut w = s.watch_prefix("/tck/snap/", rev).await.unwrap();
    let e = next(&mut w).await;
    assert_eq!((e.key(), e.revision()), ("/tck/snap/b", later));
}

async fn lease_expiry_and_renewal(s: &dyn MetaStore, ttl: Duration) {
    let started = tokio::time::Instant::now();
    let lease = s.grant_lease(ttl).await.unwrap();
    s.put_with_lease("/tck/lease/live", b("1"), lease)
        .await
        .unwrap();
    let short = s.grant_lease(ttl).await.unwrap();
    s.put_with_lease("/tck/lease/dies", b("1"), short)
        .await
        .unwrap();
    s.put_with_lease("/tck/lease/detached", b("1"), short)
        .await
        .unwrap();
    // A plain put takes the key off its lease.
    s.put("/tck/lease/detached", b("2")).await.unwrap();
    // Renew one lease every quarter TTL while the other runs out: at least
    // two TTLs (the renewed key outlives its first TTL), and until the
    // unrenewed key is gone, for at most four TTLs.
    let tick = ttl / 4;
    loop {
        tokio::time::sleep(tick).await;
        s.keep_alive(lease).await.unwrap();
        let elapsed = started.elapsed();
        if elapsed >= ttl * 2 && s.get("/tck/lease/dies").await.unwrap().is_none() {
            break;
        }
        assert!(
            elapsed < ttl * 4,
            "expired lease deletes its key (still there after {elapsed:?})"
        );
    }
    assert!(
        s.get("/tck/lease/live").await.unwrap().is_some(),
        "renewed lease keeps its key"
    );
    assert!(s.get("/tck/lease/detached").await.unwrap().is_some());
    assert!(matches!(
        s.keep_alive(short).await,
        Err(MetaError::LeaseNotFound(_))
    ));
    assert!(matches!(
        s.put_with_lease("/tck/lease/late", b("1"), short).await,
        Err(MetaError::LeaseNotFound(_))
    ));
    s.revoke_lease(lease).await.unwrap();
    assert!(
        s.get("/tck/lease/live").await.unwrap().is_none(),
        "revoke deletes at once"
    );
}

async fn put_get_delete(s: &dyn MetaStore) {
    assert!(s.get("/tck/pgd/a").await.unwrap().is_none());
    s.put("/tck/pgd/a", b("1")).await.unwrap();
    s.put("/tck/pgd/a", b("2")).await.unwrap();
    assert_eq!(s.get("/tck/pgd/a").await.unwrap().unwrap().value, b("2"));
    assert!(s.delete("/tck/pgd/a").await.unwrap());
    assert!(
        !s.delete("/tck/pgd/a").await.unwrap(),
        "second delete finds nothing"
    );
    assert!(s.get("/tck/pgd/a").await.unwrap().is_none());
}

async fn first_write_wins(s: &dyn MetaStore) {
    assert!(s.put_if_absent("/tck/fww/k", b("first")).await.unwrap());
    assert!(!s.put_if_absent("/tck/fww/k", b("second")).await.unwrap());
    assert_eq!(
        s.get("/tck/fww/k").await.unwrap().unwrap().value,
        b("first")
    );
}

async fn compare_and_swap(s: &dyn MetaStore) {
    let k = "/tck/cas/k";
    assert!(
        s.compare_and_swap(k, None, b("v1")).await.unwrap(),
        "create when absent"
    );
    assert!(
        !s.compare_and_swap(k, None, b("x")).await.unwrap(),
        "absent expected, present"
    );
    assert!(!s.compare_and_swap(k, Some(b"stale"), b("x")).await.unwrap());
    assert_eq!(s.get(k).await.unwrap().unwrap().value, b("v1"));
    assert!(s.compare_and_swap(k, Some(b"v1"), b("v2")).await.unwrap());
    assert!(
        !s.compare_and_swap(k, Some(b"v1"), b("v3")).await.unwrap(),
        "stale writer"
    );
    assert_eq!(s.get(k).await.unwrap().unwrap().value, b("v2"));
    s.delete(k).await.unwrap();
    assert!(!s.compare_and_swap(k, Some(b"v2"), b("v4")).await.unwrap());
}

async fn prefix_reads(s: &dyn MetaStore) {
    for k in [
        "/tck/pre/a/1",
        "/tck/pre/a/2",
        "/tck/pre/ab",
        "/tck/pre/b/1",
    ] {
        s.put(k, Bytes::from(k.to_string())).await.unwrap();
    }
    let keys: Vec<String> = s
        .get_prefix("/tck/pre/a/")
        .await
        .unwrap()
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["/tck/pre/a/1", "/tck/pre/a/2"]);
    assert_eq!(s.get_prefix("/tck/pre/").await.unwrap().len(), 4);
    assert!(s.get_prefix("/tck/pre/zzz").await.unwrap().is_empty());
}

async fn pages(s: &dyn MetaStore) {
    for k in [
        "/tck/page/1",
        "/tck/page/2",
        "/tck/page/3",
        "/tck/page/30",
        "/tck/pagez",
    ] {
        s.put(k, Bytes::from(k.to_string())).await.unwrap();
    }
    let keys = |page: Vec<KeyValue>| -> Vec<String> { page.into_iter().map(|kv| kv.key).collect() };
    let prefix = "/tck/page/";
    assert_eq!(
        keys(s.get_page(prefix, None, 2).await.unwrap()),
        ["/tck/page/1", "/tck/page/2"]
    );
    assert_eq!(
        keys(s.get_page(prefix, Some("/tck/page/2"), 2).await.unwrap()),
        ["/tck/page/3", "/tck/page/30"]
    );
    // The last page is short, and after it there is nothing.
    assert_eq!(
        keys(s.get_page(prefix, Some("/tck/page/3"), 5).await.unwrap()),
        ["/tck/page/30"]
    );
    assert!(s
        .get_page(prefix, Some("/tck/page/30"), 5)
        .await
        .unwrap()
        .is_empty());
    // A cursor that is not a key resumes after where it would be; one
    // before the prefix starts at its first key.
    assert_eq!(
        keys(s.get_page(prefix, Some("/tck/page/25"), 1).await.unwrap()),
        ["/tck/page/3"]
    );
    assert_eq!(
        keys(s.get_page(prefix, Some("/tck/a"), 1).await.unwrap()),
        ["/tck/page/1"]
    );
    let page = s.get_page(prefix, None, 10).await.unwrap();
    assert_eq!(page.len(), 4);
    assert_eq!(page[0].value, Bytes::from_static(b"/tck/page/1"));
}

async fn revisions_grow(s: &dyn MetaStore) {
    let r1 = s.put("/tck/rev/a", b("1")).await.unwrap();
    let r2 = s.put("/tck/rev/b", b("1")).await.unwrap();
    assert!(r2 > r1);
    assert_eq!(s.get("/tck/rev/b").await.unwrap().unwrap().revision, r2);
}

async fn concurrent_cas_has_one_winner(s: &dyn MetaStore) {
    let k = "/tck/race/k";
    s.put(k, b("0")).await.unwrap();
    let tries = (0..8).map(|i| async move {
        s.compare_and_swap(k, Some(b"0"), Bytes::from(format!("w{i}")))
            .await
            .unwrap()
    });
    let wins = futures::future::join_all(tries)
        .await
        .into_iter()
        .filter(|w| *w)
        .count();
    assert_eq!(wins, 1, "exactly one writer wins a CAS race");
}

/// A claim is a guarded create; writes in its name are guarded by its
/// revision, so they fail once it is released or taken by another.
async fn guarded_writes_follow_the_claim(s: &dyn MetaStore) {
    let (claim, data) = ("/tck/fence/owner", "/tck/fence/offset");
    let first = s
        .put_guarded(claim, 0, claim, b("a"), None)
        .await
        .unwrap()
        .expect("claims an absent key");
    assert_eq!(
        s.put_guarded(claim, 0, claim, b("b"), None).await.unwrap(),
        None,
        "a second claim of a held key fails"
    );
    let w = s
        .put_guarded(claim, first, data, b("1"), None)
        .await
        .unwrap()
        .expect("the holder writes");
    assert!(w > first);
    assert_eq!(s.get(data).await.unwrap().unwrap().value, b("1"));
    // Released (only at its own revision) and claimed again by another.
    assert!(!s.delete_at(claim, first + 1_000_000).await.unwrap());
    assert!(s.delete_at(claim, first).await.unwrap());
    assert!(!s.delete_at(claim, first).await.unwrap(), "already gone");
    assert_eq!(
        s.put_guarded(claim, first, data, b("stale"), None)
            .await
            .unwrap(),
        None,
        "the old holder is fenced once released"
    );
    let second = s
        .put_guarded(claim, 0, claim, b("b"), None)
        .await
        .unwrap()
        .expect("claims again");
    assert!(second > w, "a new claim has a higher token");
    assert_eq!(
        s.put_guarded(claim, first, data, b("stale"), None)
            .await
            .unwrap(),
        None,
        "the old holder is fenced by the new claim"
    );
    assert!(s
        .put_guarded(claim, second, data, b("2"), None)
        .await
        .unwrap()
        .is_some());
    assert_eq!(s.get(data).await.unwrap().unwrap().value, b("2"));
}

/// A claim bound to a lease goes with it, and a claim with an ended lease
/// is refused.
async fn claims_end_with_their_lease(s: &dyn MetaStore, ttl: Duration) {
    let claim = "/tck/fence/leased";
    let lease = s.grant_lease(ttl).await.unwrap();
    let token = s
        .put_guarded(claim, 0, claim, b("me"), Some(lease))
        .await
        .unwrap()
        .expect("claims");
    assert_eq!(s.get(claim).await.unwrap().unwrap().revision, token);
    s.revoke_lease(lease).await.unwrap();
    assert_eq!(s.get(claim).await.unwrap(), None, "gone with its lease");
    let refused = s.put_guarded(claim, 0, claim, b("me"), Some(lease)).await;
    assert!(
        matches!(refused, Err(MetaError::LeaseNotFound(_))),
        "{refused:?}"
    );
    assert_eq!(s.get(claim).await.unwrap(), None);
}
