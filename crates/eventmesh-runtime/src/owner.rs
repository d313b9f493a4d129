//! Who a client id belongs to.

/// Who created a client id: the tenant and principal the gate authenticated
/// (both `None` without a gate). A client id, its subscriptions and the
/// deliveries handed to it belong to this owner only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Owner {
    pub tenant: Option<String>,
    pub principal: Option<String>,
}
