//! Tests of the security gate (`gate.rs`).
use super::*;
use crate::context::{DenyKind, Operation};
use std::sync::{Arc, Mutex};

/// Denies requests whose topic is "forbidden".
struct TopicFilter;

impl Filter for TopicFilter {
    fn name(&self) -> &'static str {
        "topic"
    }

    fn check(&self, ctx: &mut RequestContext, _: &Frame) -> Result<(), Denial> {
        ctx.identity.principal = Some("checked".into());
        if ctx.topic.as_deref() == Some("forbidden") {
            return Err(Denial::authorization("acl_denied", "no"));
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(String, String)>>>);

impl AuditSink for Recorder {
    fn record(&self, e: &AuditEntry) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push((e.verdict.to_string(), e.reason.to_string()));
        Ok(())
    }
}

struct Broken;

impl AuditSink for Broken {
    fn record(&self, _: &AuditEntry) -> Result<(), String> {
        Err("disk on fire".into())
    }
}

fn ctx(topic: &str) -> RequestContext {
    let mut c = RequestContext::new(Transport::Http, Operation::Publish);
    c.topic = Some(topic.into());
    c
}

fn denied_count(m: &GateMetrics, reason: &str) -> u64 {
    m.get_or_create(&vec![("reason".to_string(), reason.to_string())])
        .get()
}

#[test]
fn a_system_principal_passes_without_filters_or_quota_and_is_audited() {
    let rec = Recorder::default();
    let m = GateMetrics::default();
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        None,
        Box::new(rec.clone()),
        true,
        m.clone(),
    );
    let mut c = RequestContext::new(Transport::Internal, Operation::Publish);
    c.topic = Some("forbidden".into());
    c.identity = Identity::system("system:a2a");
    let admitted = g.check(&c, &Frame::default()).unwrap();
    assert_eq!(
        admitted.identity.principal.as_deref(),
        Some("system:a2a"),
        "taken as given, not filled in by a filter"
    );
    assert_eq!(admitted.identity.tenant, None);
    assert_eq!(
        *rec.0.lock().unwrap(),
        [("allow".to_string(), String::new())]
    );
    assert_eq!(denied_count(&m, "acl_denied"), 0);
    // The same request from the wire is denied.
    let mut wire = c.clone();
    wire.transport = Transport::Http;
    assert!(g.check(&wire, &Frame::default()).is_err());
}

#[test]
fn noop_allows_everything() {
    let g = SecurityGate::noop();
    assert!(!g.is_enabled());
    assert!(g.check(&ctx("forbidden"), &Frame::default()).is_ok());
}

#[test]
fn fail_closed_denies_and_audits() {
    let rec = Recorder::default();
    let m = GateMetrics::default();
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        None,
        Box::new(rec.clone()),
        true,
        m.clone(),
    );
    let ok = g.check(&ctx("fine"), &Frame::default()).unwrap();
    assert_eq!(ok.identity.principal.as_deref(), Some("checked"));
    let d = g.check(&ctx("forbidden"), &Frame::default()).err().unwrap();
    assert_eq!(d.kind, DenyKind::Authorization);
    assert_eq!(denied_count(&m, "acl_denied"), 1);
    assert_eq!(
        *rec.0.lock().unwrap(),
        [
            ("allow".to_string(), String::new()),
            ("deny".to_string(), "acl_denied".to_string())
        ]
    );
}

#[test]
fn permissive_lets_through_but_counts_and_audits() {
    let rec = Recorder::default();
    let m = GateMetrics::default();
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        None,
        Box::new(rec.clone()),
        false,
        m.clone(),
    );
    let a = g.check(&ctx("forbidden"), &Frame::default()).unwrap();
    assert_eq!(a.would_deny.unwrap().reason, "acl_denied");
    assert_eq!(denied_count(&m, "acl_denied"), 1);
    assert_eq!(rec.0.lock().unwrap()[0].0, "allow_permissive");
}

/// Authenticates: sets the principal from the credential.
struct Credential;

impl Filter for Credential {
    fn name(&self) -> &'static str {
        "credential"
    }

    fn authenticates(&self) -> bool {
        true
    }

    fn check(&self, ctx: &mut RequestContext, _: &Frame) -> Result<(), Denial> {
        match ctx.credential.as_deref() {
            Some(c) => {
                ctx.identity.principal = Some(c.to_string());
                Ok(())
            }
            None => Err(Denial::authentication("missing_credential", "who?")),
        }
    }
}

#[test]
fn a_session_authenticates_once_and_each_request_still_passes_the_acl() {
    let rec = Recorder::default();
    let m = GateMetrics::default();
    let cfg = GateConfig {
        connections_max: 1,
        ..GateConfig::default()
    };
    let g = SecurityGate::with_parts(
        vec![Box::new(Credential), Box::new(TopicFilter)],
        TenantQuotaManager::from_config(&cfg),
        Box::new(rec.clone()),
        true,
        m.clone(),
    );
    // Opening runs only the authentication, on no topic.
    let mut open = ctx("forbidden");
    assert_eq!(
        g.open(&open, &Frame::default()).err().unwrap().reason,
        "missing_credential"
    );
    open.credential = Some("alice".into());
    let session = g.open(&open, &Frame::default()).unwrap();
    assert_eq!(session.identity.principal.as_deref(), Some("alice"));
    // The session holds the tenant's one connection slot.
    let mut another = ctx("fine");
    another.credential = Some("alice".into());
    let other = g.check(&another, &Frame::default()).err().unwrap();
    assert_eq!(other.reason, "connections_max");
    // Its requests skip the credential (none is sent) and take no slot,
    // but the ACL still runs.
    let mut req = ctx("fine");
    req.identity = session.identity.clone();
    req.authenticated = true;
    assert!(g.check(&req, &Frame::default()).is_ok());
    req.topic = Some("forbidden".into());
    assert_eq!(
        g.check(&req, &Frame::default()).err().unwrap().reason,
        "acl_denied"
    );
    drop(session);
    assert!(
        g.check(&another, &Frame::default()).is_ok(),
        "the slot is free again"
    );
    assert_eq!(denied_count(&m, "connections_max"), 1);
    assert_eq!(rec.0.lock().unwrap().len(), 6);
}

#[test]
fn authorize_runs_only_the_acl_for_a_stored_identity_and_counts_and_audits() {
    let rec = Recorder::default();
    let m = GateMetrics::default();
    let cfg = GateConfig {
        connections_max: 1,
        ..GateConfig::default()
    };
    let gate = |fail_closed| {
        SecurityGate::with_parts(
            vec![Box::new(Credential), Box::new(TopicFilter)],
            TenantQuotaManager::from_config(&cfg),
            Box::new(rec.clone()),
            fail_closed,
            m.clone(),
        )
    };
    let closed = gate(true);
    let bob = Identity {
        tenant: Some("acme".into()),
        principal: Some("bob".into()),
        roles: vec!["reader".into()],
    };
    // No credential is asked for, and no connection slot is taken.
    let mut held = Vec::new();
    for _ in 0..3 {
        let ok = closed
            .authorize(Transport::Pattern, Operation::Subscribe, &bob, "fine")
            .unwrap();
        assert!(ok.would_deny.is_none());
        held.push(ok);
    }
    let d = closed
        .authorize(Transport::Pattern, Operation::Subscribe, &bob, "forbidden")
        .err()
        .unwrap();
    assert_eq!(d.reason, "acl_denied");
    assert_eq!(denied_count(&m, "acl_denied"), 1);
    let permissive = gate(false);
    let let_through = permissive
        .authorize(Transport::Pattern, Operation::Subscribe, &bob, "forbidden")
        .unwrap();
    assert_eq!(let_through.would_deny.unwrap().reason, "acl_denied");
    assert_eq!(denied_count(&m, "acl_denied"), 2);
    let verdicts: Vec<(String, String)> = rec.0.lock().unwrap().clone();
    assert_eq!(
        verdicts[3..],
        [
            ("deny".to_string(), "acl_denied".to_string()),
            ("allow_permissive".to_string(), "acl_denied".to_string())
        ]
    );
}

#[test]
fn a_failing_audit_sink_does_not_block() {
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        None,
        Box::new(Broken),
        true,
        GateMetrics::default(),
    );
    assert!(g.check(&ctx("fine"), &Frame::default()).is_ok());
}

#[test]
fn the_file_sink_writes_json_lines_and_reports_failures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = FileAuditSink::new(path.clone());
    let entry = AuditEntry {
        ts_ms: 1,
        operation: Operation::Subscribe,
        transport: Transport::Http,
        tenant: Some("acme"),
        principal: Some("alice"),
        topic: Some("orders"),
        verdict: "deny",
        reason: "acl_denied",
        remote: Some("127.0.0.1:5000".into()),
    };
    sink.record(&entry).unwrap();
    sink.record(&entry).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["operation"], "SUBSCRIBE");
    assert_eq!(lines[0]["reason"], "acl_denied");
    // A directory where the file should be: the write fails, and says so.
    let bad = FileAuditSink::new(dir.path().to_path_buf());
    assert!(bad.record(&entry).unwrap_err().contains("cannot open"));
}

#[test]
fn credential_failures_go_to_the_gates_audit_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        None,
        Box::new(FileAuditSink::new(path.clone())),
        true,
        GateMetrics::default(),
    );
    let failure = CredentialFailure::new(
        "admin",
        "/admin/topics",
        "bad_token",
        Some("127.0.0.2:40000".into()),
    );
    g.record_credential_failure(&failure);
    let text = std::fs::read_to_string(&path).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(
        line,
        serde_json::json!({
            "ts_ms": failure.ts_ms,
            "kind": "credential_failure",
            "listener": "admin",
            "route": "/admin/topics",
            "reason": "bad_token",
            "remote": "127.0.0.2:40000",
        })
    );
    // A gate that is off logs it instead; nothing to fail.
    SecurityGate::noop().record_credential_failure(&failure);
}

#[test]
fn quota_runs_after_the_filters() {
    let cfg = GateConfig {
        publish_rate: 1,
        publish_burst: 1,
        ..GateConfig::default()
    };
    let g = SecurityGate::with_parts(
        vec![Box::new(TopicFilter)],
        TenantQuotaManager::from_config(&cfg),
        Box::new(Recorder::default()),
        true,
        GateMetrics::default(),
    );
    let frame = Frame {
        events: 1,
        ..Frame::default()
    };
    assert!(g.check(&ctx("fine"), &frame).is_ok());
    let d = g.check(&ctx("fine"), &frame).err().unwrap();
    assert_eq!((d.reason, d.status()), ("publish_rate", 429));
}

#[test]
fn a_reload_replaces_the_gate_keeps_counting_and_a_bad_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "t-alice acme alice\n").unwrap();
    let mut cfg = GateConfig {
        token_file: Some(tokens.clone()),
        fail_closed: true,
        connections_max: 1,
        ..GateConfig::default()
    };
    let gate = SecurityGate::from_config(&cfg, GateMetrics::default()).unwrap();
    let ask = |token: &str| {
        let mut c = RequestContext::new(Transport::Http, Operation::Publish);
        c.credential = Some(token.to_string());
        gate.check(&c, &Frame::default())
    };
    let held = ask("t-alice").unwrap();
    assert_eq!(held.identity.principal.as_deref(), Some("alice"));
    assert_eq!(ask("t-bob").err().unwrap().reason, "invalid_token");

    std::fs::write(&tokens, "t-alice acme alice\nt-bob globex bob\n").unwrap();
    gate.reload(&cfg).unwrap();
    assert!(ask("t-bob").is_ok(), "bob is known after the reload");
    // Alice's connection, opened before the reload, still counts.
    assert_eq!(ask("t-alice").err().unwrap().reason, "connections_max");
    drop(held);
    assert!(ask("t-alice").is_ok());

    // A malformed file: the reload fails and the gate in force stays.
    std::fs::write(&tokens, "only-a-token\n").unwrap();
    assert!(matches!(
        gate.reload(&cfg),
        Err(GateError::Malformed { line: 1, .. })
    ));
    assert!(ask("t-bob").is_ok());

    // On or off needs a restart.
    cfg.token_file = None;
    cfg.connections_max = 0;
    assert!(matches!(gate.reload(&cfg), Err(GateError::NeedsRestart(_))));
    let off = SecurityGate::noop();
    assert!(off.reload(&cfg).is_ok());
    cfg.token_file = Some(tokens);
    assert!(matches!(off.reload(&cfg), Err(GateError::NeedsRestart(_))));
}
