//! Gate files and keys reloaded without a restart: by the admin route
//! and on SIGHUP; a malformed file is refused and the gate in force stays.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;
use crate::{publish_as, start_with_acl, ALICE, BOB};

/// `POST /admin/reload`: the status and the answer.
async fn reload_now(c: &reqwest::Client, s: &Server) -> (u16, Value) {
    let r = c
        .post(s.admin_url("/admin/reload"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn gate_files_reload_on_request_and_on_sighup() {
    let (files, s) = start_with_acl("allow * * *\n");
    let c = client();
    assert_eq!(publish_as(&c, &s, "t", Some(BOB)).await.0, 202);

    // A new ACL, applied by the admin route without a restart.
    files.write("acl", "allow * * *\ndeny bob PUBLISH *\n");
    assert_eq!(
        reload_now(&c, &s).await,
        (200, json!({"status": "reloaded", "restartNeeded": []}))
    );
    assert_eq!(publish_as(&c, &s, "t", Some(BOB)).await.0, 403);
    assert_eq!(publish_as(&c, &s, "t", Some(ALICE)).await.0, 202);

    // A malformed token file: refused, naming it; the gate in force stays.
    let tokens = files.path("tokens");
    let good = std::fs::read_to_string(&tokens).unwrap();
    files.write("tokens", "only-a-token\n");
    let (status, body) = reload_now(&c, &s).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "reload_failed");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{}, line 1: ", tokens.display())),
        "{message}"
    );
    assert_eq!(publish_as(&c, &s, "t", Some(ALICE)).await.0, 202);
    assert_eq!(publish_as(&c, &s, "t", Some(BOB)).await.0, 403);

    // Repaired, and applied on SIGHUP.
    files.write("tokens", &good);
    files.write("acl", "allow * * *\n");
    s.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while publish_as(&c, &s, "t", Some(BOB)).await.0 != 202 {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload: {}",
            s.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s.wait_for_log(&["SIGHUP received; reloading"]));
}
