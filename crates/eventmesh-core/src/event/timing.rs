//! The attributes that put an event in time: `expirytime` (when it stops
//! being useful) and `deliverat` / `deliverafter` (when it is to be
//! delivered), checked at publish and read by the runtime.

use super::{invalid, CloudEvent, ExtValue, DELIVER_AFTER, DELIVER_AT, EXPIRY_TIME};
use crate::CoreError;

/// `deliverat` must be an RFC 3339 string, `deliverafter` an ISO 8601
/// duration string, and an event carries at most one of them.
pub(super) fn check_schedule(extensions: &[(String, ExtValue)]) -> Result<(), CoreError> {
    let get = |name: &str| extensions.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    match (get(DELIVER_AT), get(DELIVER_AFTER)) {
        (Some(_), Some(_)) => Err(invalid(
            "deliverat and deliverafter are both set; give one of them",
        )),
        (Some(ExtValue::Str(t)), None) => crate::time::parse_rfc3339_ms(t)
            .map(|_| ())
            .map_err(|e| invalid(format!("deliverat {t:?} is not an RFC 3339 timestamp: {e}"))),
        (Some(_), None) => Err(invalid("deliverat must be an RFC 3339 timestamp string")),
        (None, Some(ExtValue::Str(d))) => crate::time::parse_iso8601_duration_ms(d)
            .map(|_| ())
            .map_err(|e| {
                invalid(format!(
                    "deliverafter {d:?} is not an ISO 8601 duration: {e}"
                ))
            }),
        (None, Some(_)) => Err(invalid(
            "deliverafter must be an ISO 8601 duration string, such as PT30S",
        )),
        (None, None) => Ok(()),
    }
}

impl CloudEvent {
    /// When the event stops being useful: its `expirytime` extension (the
    /// CloudEvents expiry time extension), in milliseconds since the epoch.
    /// `None` without one (or, for an event stored before it was checked,
    /// one that does not parse).
    pub fn expires_at_ms(&self) -> Option<u64> {
        match self.extension(EXPIRY_TIME)? {
            ExtValue::Str(t) => crate::time::parse_rfc3339_ms(t).ok(),
            _ => None,
        }
    }

    /// When the event is to be delivered, for one published at `now_ms`:
    /// its `deliverat`, or `now_ms` plus its `deliverafter`. `None` without
    /// either (or, for an event stored before they were checked, one that
    /// does not parse).
    pub fn deliver_at_ms(&self, now_ms: u64) -> Option<u64> {
        if let Some(ExtValue::Str(t)) = self.extension(DELIVER_AT) {
            return crate::time::parse_rfc3339_ms(t).ok();
        }
        match self.extension(DELIVER_AFTER)? {
            ExtValue::Str(d) => crate::time::parse_iso8601_duration_ms(d)
                .ok()
                .map(|ms| now_ms.saturating_add(ms)),
            _ => None,
        }
    }
}
