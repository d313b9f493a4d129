//! Fuzzes the ACL: the input's first line says who asks what (`operation
//! principal tenant role topic`, space-separated, any of them missing), the
//! rest is the ACL text.
//! Parsing and deciding must never panic, and a decision is one of the
//! ACL's two reasons.

#![no_main]

use eventmesh_security::{AclFilter, Identity, Operation, RequestContext, Transport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (who, acl) = text.split_once('\n').unwrap_or((text, ""));
    let mut fields = who.split(' ');
    let operation = fields
        .next()
        .and_then(Operation::parse)
        .unwrap_or(Operation::Publish);
    let mut ctx = RequestContext::new(Transport::Http, operation);
    ctx.identity = Identity {
        principal: fields.next().map(str::to_string),
        tenant: fields.next().map(str::to_string),
        roles: fields.next().map(|r| vec![r.to_string()]).unwrap_or_default(),
    };
    ctx.topic = fields.next().map(str::to_string);
    if let Err(d) = AclFilter::decide_text(acl, &ctx) {
        assert!(
            d.reason == "acl_denied" || d.reason == "acl_malformed",
            "{}",
            d.reason
        );
    }
});
