//! The admin token, the cluster secret and the outbound guard, on the real
//! binary.
//!
//! | scenario | test |
//! |---|---|
//! | wrong admin tokens: a burst, then `429 too_many_failures` for that address even with the right token; counted, logged and audited, other addresses unaffected | [`wrong_admin_tokens_are_limited_per_address`] |
//! | the internal routes limit wrong cluster secrets the same way | [`wrong_cluster_secrets_are_limited_per_address`] |
//! | boot refuses an admin token or cluster secret under 16 bytes, naming the key and not the value | [`short_credentials_are_refused_at_boot`] |
//! | by default webhooks may not reach link-local and metadata addresses, in any IPv6 spelling; loopback stays allowed | [`webhooks_to_metadata_addresses_are_refused_by_default`] |
//! | connectors' targets go through the same guard unless the definition opts out | [`connector_targets_are_guarded_unless_the_definition_opts_out`] |

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::connectors::create;
use common::gate::GateFiles;
use common::*;
use serde_json::{json, Value};

/// Requests from another loopback address than the harness's own, so that
/// the harness keeps reading `/metrics` while this one is limited.
fn guesser() -> reqwest::Client {
    client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
}

const WRONG: &str = "not-the-admin-token-at-all";

async fn get_with(c: &reqwest::Client, url: String, token: Option<&str>) -> reqwest::Response {
    let mut r = c.get(url);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r.send().await.unwrap()
}

async fn refusal(r: reqwest::Response) -> (u16, Option<String>, String) {
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = r.json().await.unwrap();
    (
        status,
        retry,
        body["error"].as_str().unwrap_or("").to_string(),
    )
}

fn failures(m: &Metrics, listener: &str, reason: &str) -> f64 {
    m.get(&format!(
        "eventmesh_auth_failures_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
    ))
}

#[tokio::test]
async fn wrong_admin_tokens_are_limited_per_address() {
    // A gate with an audit file, so that the audit records can be read.
    let files = GateFiles::new("alice-token-0123456789 acme alice\n");
    let s = Server::start_with(
        &files.data(),
        &[
            "eventmesh.auth.failures.burst=3".to_string(),
            "eventmesh.auth.failures.interval.ms=60000".to_string(),
            files.token_file(),
            files.audit_file(),
        ],
    );
    let (c, g) = (client(), guesser());
    // No token: refused, counted, but it spends nothing.
    for _ in 0..2 {
        let r = get_with(&g, s.admin_url("/metrics"), None).await;
        assert_eq!(refusal(r).await, (401, None, "unauthorized".into()));
    }
    for path in ["/metrics", "/admin/topics", "/admin/config"] {
        let r = get_with(&g, s.admin_url(path), Some(WRONG)).await;
        assert_eq!(
            refusal(r).await,
            (401, None, "unauthorized".into()),
            "{path}"
        );
    }
    // The burst is spent: the right token is refused too, on every
    // guarded route, with the time to wait.
    for (path, token) in [
        ("/metrics", TOKEN),
        ("/admin/subscriptions", TOKEN),
        ("/admin/topics", WRONG),
    ] {
        let (status, retry, code) =
            refusal(get_with(&g, s.admin_url(path), Some(token)).await).await;
        assert_eq!(
            (status, code.as_str()),
            (429, "too_many_failures"),
            "{path}"
        );
        let secs: u64 = retry.expect("Retry-After").parse().unwrap();
        assert!((1..=60).contains(&secs), "Retry-After {secs}");
    }
    // Open routes stay open to it.
    assert_eq!(
        get_with(&g, s.admin_url("/admin/health"), None)
            .await
            .status(),
        200
    );
    // Another address is not affected, and sees every failure counted.
    let m = metrics(&c, &s).await;
    assert_eq!(failures(&m, "admin", "missing"), 2.0);
    assert_eq!(failures(&m, "admin", "bad_token"), 3.0);
    assert_eq!(failures(&m, "admin", "limited"), 3.0);
    // Logged at WARN with the address and the route, never the token.
    assert!(
        s.wait_for_log(&[
            "WARN",
            "credential refused",
            "127.0.0.2:",
            "/admin/config",
            "bad_token"
        ]),
        "{}",
        s.log_text()
    );
    assert!(!s.log_text().contains(WRONG));
    // Audited, in order, in the gate's audit file.
    let records: Vec<Value> = files
        .audit()
        .into_iter()
        .filter(|v| v["kind"] == "credential_failure")
        .collect();
    let seen: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["listener"].as_str().unwrap(),
                r["route"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("admin", "/metrics", "missing"),
            ("admin", "/metrics", "missing"),
            ("admin", "/metrics", "bad_token"),
            ("admin", "/admin/topics", "bad_token"),
            ("admin", "/admin/config", "bad_token"),
            ("admin", "/metrics", "limited"),
            ("admin", "/admin/subscriptions", "limited"),
            ("admin", "/admin/topics", "limited"),
        ]
    );
    for r in &records {
        assert!(
            r["remote"].as_str().unwrap().starts_with("127.0.0.2:"),
            "{r}"
        );
    }
    let text = std::fs::read_to_string(files.audit_path()).unwrap();
    assert!(!text.contains(WRONG) && !text.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_cluster_secrets_are_limited_per_address() {
    use common::mesh::{Mesh, SERIAL};
    let _one = SERIAL.lock().await;
    let mesh = Mesh::start_with(
        1,
        "CRED",
        5000,
        &[
            "eventmesh.auth.failures.burst=2",
            "eventmesh.auth.failures.interval.ms=60000",
        ],
    )
    .await;
    let s = mesh.s(0);
    let secret = MESH_SECRET.to_string();
    let (c, g) = (client(), guesser());
    let find = |c: &reqwest::Client, token: &str| {
        c.post(s.url("/internal/requests/find"))
            .bearer_auth(token)
            .json(&json!({"correlation": "nothing"}))
            .send()
    };
    for _ in 0..2 {
        let r = find(&g, "not-the-cluster-secret").await.unwrap();
        assert_eq!(refusal(r).await, (401, None, "unauthorized".into()));
    }
    let (status, retry, code) = refusal(find(&g, &secret).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (429, "too_many_failures"));
    assert!(retry.is_some());
    // The instance's own address still gets through with the secret.
    let r = find(&c, &secret).await.unwrap();
    assert_eq!(r.status(), 200);
    let found: Value = r.json().await.unwrap();
    assert!(found["boot"].is_string(), "{found}");
    let m = metrics(&c, s).await;
    assert_eq!(failures(&m, "internal", "bad_token"), 2.0);
    assert_eq!(failures(&m, "internal", "limited"), 1.0);
}

/// The cluster secret the mesh's instances are started with
/// (`common/mesh.rs`).
const MESH_SECRET: &str = "mesh-s3cret-0123456789";

#[test]
fn short_credentials_are_refused_at_boot() {
    for key in ["eventmesh.admin.token", "eventmesh.cluster.secret"] {
        let value = "fifteen-bytes-x";
        let define = format!("{key}={value}");
        let (status, out) = run_serve(
            &[
                "eventmesh.storage.type=standalone",
                "eventmesh.server.http.port=0",
                "eventmesh.server.admin.port=0",
                &define,
            ],
            &[],
        );
        assert!(!status.success(), "{out}");
        assert!(
            out.contains(&format!(
                "{key} is 15 bytes long; it must be at least 16 bytes"
            )),
            "{out}"
        );
        assert!(!out.contains(value), "{out}");
    }
}

#[tokio::test]
async fn webhooks_to_metadata_addresses_are_refused_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let c = client();
    for url in [
        "http://169.254.169.254/x",
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:0:a9fe:a9fe]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/latest",
    ] {
        let v = webhook_refused(&c, &s, url).await;
        let message = v["message"].as_str().unwrap();
        assert!(
            message.ends_with("(eventmesh.webhook.denied.cidrs)"),
            "{message}"
        );
    }
    // Loopback and private addresses stay allowed by default.
    for (i, url) in ["http://127.0.0.1:9/hook", "http://10.1.2.3:9/hook"]
        .into_iter()
        .enumerate()
    {
        let (st, v) = subscribe_webhook(&c, &s, &format!("ok{i}"), url).await;
        assert_eq!(st, 200, "{url}: {v}");
    }
}

#[tokio::test]
async fn connector_targets_are_guarded_unless_the_definition_opts_out() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    {
        // The default guard: the metadata address is refused at create.
        let s = Server::start(dir.path(), &[]);
        let v = target_refused(
            create(
                &c,
                &s,
                json!({"name": "meta", "kind": "postgres-sink", "topic": "t",
                       "config": {"url": "postgres://app@169.254.169.254/db", "table": "t"}}),
            )
            .await,
        );
        assert_eq!(
            v["message"],
            "config: the target 169.254.169.254:5432 is refused by the outbound guard: the \
             target address 169.254.169.254 is inside the denied range 169.254.0.0/16 \
             (eventmesh.webhook.denied.cidrs); set \"targetGuard\": false in the definition \
             to allow it"
        );
        // Loopback is allowed by default.
        let (st, v) = create(
            &c,
            &s,
            json!({"name": "local", "kind": "redis-sink", "topic": "t",
                   "config": {"url": "redis://127.0.0.1:1/0", "stream": "s"}}),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["eventmesh.webhook.denied.cidrs=production"]);
    for (name, config) in [
        (
            "pg",
            json!({"url": "postgres://app@127.0.0.1:1/db", "table": "t"}),
        ),
        (
            "byname",
            json!({"url": "postgres://app@localhost:1/db", "table": "t"}),
        ),
    ] {
        target_refused(
            create(
                &c,
                &s,
                json!({"name": name, "kind": "postgres-sink", "topic": "t", "config": config}),
            )
            .await,
        );
    }
    target_refused(
        create(
            &c,
            &s,
            json!({"name": "mqtt", "kind": "mqtt-sink", "topic": "t",
                   "config": {"host": "127.0.0.1", "port": 1, "topic": "a/b"}}),
        )
        .await,
    );
    // The opt-out: created, and shown in the definition.
    let (st, v) = create(
        &c,
        &s,
        json!({"name": "pg", "kind": "postgres-sink", "topic": "t", "targetGuard": false,
               "config": {"url": "postgres://app@127.0.0.1:1/db", "table": "t"}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = common::connectors::get(&c, &s, "pg").await;
    assert_eq!(st, 200);
    assert_eq!(v["targetGuard"], false, "{v}");
    // Updating it without the opt-out is refused, and keeps the stored one.
    target_refused(
        common::topics::admin(
            &c,
            &s,
            reqwest::Method::PUT,
            "/admin/connectors/pg",
            Some(json!({"kind": "postgres-sink", "topic": "t",
                        "config": {"url": "postgres://app@127.0.0.1:1/db", "table": "t"}})),
        )
        .await,
    );
}

/// Asserts that an answer (status and body) is the outbound guard's
/// refusal of a connector's target; the body.
fn target_refused((st, v): (u16, Value)) -> Value {
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("connector_target_denied")),
        "{v}"
    );
    v
}
