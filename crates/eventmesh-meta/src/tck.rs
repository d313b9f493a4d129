//! The conformance suite every [`MetaStore`] backend passes. Each check
//! works under its own key prefix, so one fresh store serves the whole run.

use bytes::Bytes;

use crate::store::MetaStore;

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// Runs every check, panicking with a description on the first failure.
pub async fn run_all(store: &dyn MetaStore) {
    put_get_delete(store).await;
    first_write_wins(store).await;
    compare_and_swap(store).await;
    prefix_reads(store).await;
    revisions_grow(store).await;
    concurrent_cas_has_one_winner(store).await;
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
