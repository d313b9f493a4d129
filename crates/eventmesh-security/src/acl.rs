//! Access control: rules from a file, one a line:
//!
//! ```text
//! <allow|deny> <principal-or-tenant pattern> <operation|*> <topic pattern>
//! ```
//!
//! A pattern is exact, `*`, or a prefix ending in `*`; a subject pattern
//! `role:<name>` matches identities holding that role. Deny wins over
//! allow, and a request no rule matches is denied. Requests that name no
//! topic (poll, ack) match rules whatever their topic pattern.
//!
//! A malformed line is logged at WARN with its number when the file is
//! (re)loaded, and while it is there every request is denied with reason
//! `acl_malformed` (fail safe). The file is read again when it changes
//! (checked at most once a second), so a fix needs no restart.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use eventmesh_core::config::GateConfig;

use crate::context::{Denial, Frame, Identity, Operation, RequestContext};
use crate::gate::{Filter, GateError};
use crate::{content_lines, read_file};

const RELOAD_CHECK: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq)]
struct Pattern(String);

impl Pattern {
    fn matches(&self, value: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => value.starts_with(prefix),
            None => self.0 == value,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    allow: bool,
    subject: Pattern,
    /// `None` = any operation.
    operation: Option<Operation>,
    topic: Pattern,
}

impl Rule {
    fn subject_matches(&self, who: &Identity) -> bool {
        if let Some(role) = self.subject.0.strip_prefix("role:") {
            let role = Pattern(role.to_string());
            return who.roles.iter().any(|r| role.matches(r));
        }
        let principal = who.principal.as_deref().unwrap_or("anonymous");
        self.subject.matches(principal) || self.subject.matches(who.tenant_or_default())
    }

    fn matches(&self, ctx: &RequestContext) -> bool {
        self.operation.is_none_or(|o| o == ctx.operation)
            && ctx.topic.as_deref().is_none_or(|t| self.topic.matches(t))
            && self.subject_matches(&ctx.identity)
    }
}

#[derive(Debug, Default)]
struct Rules {
    rules: Vec<Rule>,
    /// Line numbers of malformed entries.
    malformed: Vec<usize>,
}

fn parse(text: &str) -> Rules {
    let mut out = Rules::default();
    for (line, l) in content_lines(text) {
        let fields: Vec<&str> = l.split_whitespace().collect();
        let rule = match fields[..] {
            [verdict, subject, op, topic] => {
                let allow = match verdict.to_ascii_lowercase().as_str() {
                    "allow" => Some(true),
                    "deny" => Some(false),
                    _ => None,
                };
                let operation = match op {
                    "*" => Some(None),
                    op => Operation::parse(op).map(Some),
                };
                // A `*` only at the end (a prefix pattern).
                let valid =
                    |p: &str| !p.is_empty() && !p.strip_suffix('*').unwrap_or(p).contains('*');
                match (allow, operation) {
                    (Some(allow), Some(operation)) if valid(subject) && valid(topic) => {
                        Some(Rule {
                            allow,
                            subject: Pattern(subject.to_string()),
                            operation,
                            topic: Pattern(topic.to_string()),
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match rule {
            Some(r) => out.rules.push(r),
            None => out.malformed.push(line),
        }
    }
    out
}

pub struct AclFilter {
    path: PathBuf,
    rules: RwLock<Arc<Rules>>,
    /// When the file was last looked at, and its modification time then.
    seen: Mutex<(Instant, Option<SystemTime>)>,
}

fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl AclFilter {
    pub fn from_config(cfg: &GateConfig) -> Result<Option<Self>, GateError> {
        let Some(path) = &cfg.acl_file else {
            return Ok(None);
        };
        let rules = Self::load(path, &read_file("ACL file", path)?);
        Ok(Some(AclFilter {
            path: path.clone(),
            rules: RwLock::new(Arc::new(rules)),
            seen: Mutex::new((Instant::now(), modified(path))),
        }))
    }

    fn load(path: &std::path::Path, text: &str) -> Rules {
        let rules = parse(text);
        for line in &rules.malformed {
            tracing::warn!(
                file = %path.display(),
                line,
                "malformed ACL entry; every request is denied (acl_malformed) until it is fixed"
            );
        }
        tracing::info!(file = %path.display(), rules = rules.rules.len(), "ACL loaded");
        rules
    }

    /// Reads the file again if it changed since the last look.
    fn refresh(&self) {
        let mut seen = self.seen.lock().expect("acl lock");
        if seen.0.elapsed() < RELOAD_CHECK {
            return;
        }
        seen.0 = Instant::now();
        let now = modified(&self.path);
        if now == seen.1 {
            return;
        }
        seen.1 = now;
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                *self.rules.write().expect("acl lock") = Arc::new(Self::load(&self.path, &text));
            }
            Err(e) => {
                tracing::error!(file = %self.path.display(), error = %e, "cannot read the ACL file again; keeping the rules loaded before");
            }
        }
    }

    /// Decides `ctx` against ACL `text` as if it were the file's (for
    /// tools and fuzzing).
    pub fn decide_text(text: &str, ctx: &RequestContext) -> Result<(), Denial> {
        Self::decide(&parse(text), ctx)
    }

    fn decide(rules: &Rules, ctx: &RequestContext) -> Result<(), Denial> {
        if let Some(line) = rules.malformed.first() {
            return Err(Denial::authorization(
                "acl_malformed",
                format!("the ACL has a malformed entry (line {line}); every request is denied until it is fixed"),
            ));
        }
        let mut allowed = false;
        for r in rules.rules.iter().filter(|r| r.matches(ctx)) {
            if !r.allow {
                return Err(Denial::authorization(
                    "acl_denied",
                    format!("{} is denied by the ACL", describe(ctx)),
                ));
            }
            allowed = true;
        }
        if allowed {
            Ok(())
        } else {
            Err(Denial::authorization(
                "acl_denied",
                format!("no ACL rule allows {}", describe(ctx)),
            ))
        }
    }
}

fn describe(ctx: &RequestContext) -> String {
    format!(
        "{} by {}{}",
        ctx.operation.as_str(),
        ctx.identity.principal.as_deref().unwrap_or("anonymous"),
        ctx.topic
            .as_deref()
            .map(|t| format!(" on topic {t:?}"))
            .unwrap_or_default()
    )
}

impl Filter for AclFilter {
    fn name(&self) -> &'static str {
        "acl"
    }

    fn check(&self, ctx: &mut RequestContext, _frame: &Frame) -> Result<(), Denial> {
        self.refresh();
        let rules = self.rules.read().expect("acl lock").clone();
        Self::decide(&rules, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Transport;

    fn ctx(principal: &str, tenant: &str, op: Operation, topic: Option<&str>) -> RequestContext {
        let mut c = RequestContext::new(Transport::Http, op);
        c.identity = Identity {
            tenant: Some(tenant.into()),
            principal: Some(principal.into()),
            roles: vec!["ops".into()],
        };
        c.topic = topic.map(str::to_string);
        c
    }

    fn verdict(rules: &str, c: &RequestContext) -> Result<(), &'static str> {
        AclFilter::decide(&parse(rules), c).map_err(|d| d.reason)
    }

    #[test]
    fn allow_deny_default_deny_and_patterns() {
        let rules = "\
            allow alice PUBLISH orders.*\n\
            allow acme SUBSCRIBE *\n\
            deny  alice PUBLISH orders.secret\n\
            allow role:ops ACK *\n";
        let pub_ = |who, topic| ctx(who, "acme", Operation::Publish, Some(topic));
        assert_eq!(verdict(rules, &pub_("alice", "orders.eu")), Ok(()));
        // Deny wins over the allow that also matches.
        assert_eq!(
            verdict(rules, &pub_("alice", "orders.secret")),
            Err("acl_denied")
        );
        // No rule matches: denied.
        assert_eq!(
            verdict(rules, &pub_("alice", "payments")),
            Err("acl_denied")
        );
        assert_eq!(verdict(rules, &pub_("bob", "orders.eu")), Err("acl_denied"));
        // The tenant pattern matches any principal of the tenant.
        let sub = ctx("bob", "acme", Operation::Subscribe, Some("anything"));
        assert_eq!(verdict(rules, &sub), Ok(()));
        let other = ctx("bob", "globex", Operation::Subscribe, Some("anything"));
        assert_eq!(verdict(rules, &other), Err("acl_denied"));
        // Roles, and a request without a topic.
        let ack = ctx("zed", "globex", Operation::Ack, None);
        assert_eq!(verdict(rules, &ack), Ok(()));
        assert_eq!(verdict("allow * * *", &ack), Ok(()));
        assert_eq!(verdict("", &ack), Err("acl_denied"));
    }

    #[test]
    fn a_malformed_line_denies_everything() {
        let rules = "allow * * *\npermit alice PUBLISH x\n";
        let parsed = parse(rules);
        assert_eq!(parsed.malformed, [2]);
        let c = ctx("alice", "acme", Operation::Publish, Some("x"));
        assert_eq!(verdict(rules, &c), Err("acl_malformed"));
        for bad in [
            "allow alice FLY x",
            "allow alice",
            "allow al*ce * x",
            "deny * * *x*",
        ] {
            assert_eq!(parse(bad).malformed, [1], "{bad}");
        }
    }

    #[test]
    fn the_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acl");
        std::fs::write(&path, "allow * * *\noops\n").unwrap();
        let cfg = GateConfig {
            acl_file: Some(path.clone()),
            ..GateConfig::default()
        };
        let f = AclFilter::from_config(&cfg).unwrap().unwrap();
        let mut c = ctx("a", "t", Operation::Publish, Some("x"));
        assert_eq!(
            f.check(&mut c, &Frame::default()).unwrap_err().reason,
            "acl_malformed"
        );
        std::fs::write(&path, "allow * * *\n").unwrap();
        // Make the change visible to the next check.
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        f.seen.lock().unwrap().0 = Instant::now() - RELOAD_CHECK;
        assert_eq!(f.check(&mut c, &Frame::default()), Ok(()));
    }

    #[test]
    fn patterns_of_any_script_parse_and_a_star_only_ends_one() {
        let pub_ = |topic| ctx("zoé", "acme", Operation::Publish, Some(topic));
        let text = "allow zoé PUBLISH prix.é*\nallow é * é\n";
        assert!(AclFilter::decide_text(text, &pub_("prix.été")).is_ok());
        assert_eq!(
            AclFilter::decide_text(text, &pub_("autre"))
                .unwrap_err()
                .reason,
            "acl_denied"
        );
        // A star inside a pattern is malformed, whatever the script.
        for bad in ["allow é*é * t", "allow a * t*é", "allow a * é*é*"] {
            let r = AclFilter::decide_text(bad, &pub_("t"));
            assert_eq!(r.unwrap_err().reason, "acl_malformed", "{bad}");
        }
    }
}
