//! Who created a client id.
//!
//! A client id is created by a subscribe on behalf of the tenant and
//! principal the security gate authenticated; without a gate both are
//! `None`. Two creators are the same only when tenant *and* principal are
//! equal, so a principal name reused in another tenant is another creator.

/// Who created a client id: the tenant and principal the gate authenticated
/// (both None without a gate).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Creator {
    pub tenant: Option<String>,
    pub principal: Option<String>,
}

impl Creator {
    pub fn new(tenant: Option<String>, principal: Option<String>) -> Self {
        Creator { tenant, principal }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_and_principal_both_count() {
        let acme_alice = Creator::new(Some("acme".into()), Some("alice".into()));
        let globex_alice = Creator::new(Some("globex".into()), Some("alice".into()));
        assert_ne!(acme_alice, globex_alice);
        assert_eq!(
            acme_alice,
            Creator::new(Some("acme".into()), Some("alice".into()))
        );
        assert_eq!(Creator::default(), Creator::new(None, None));
        assert_ne!(Creator::default(), Creator::new(None, Some("alice".into())));
    }
}
