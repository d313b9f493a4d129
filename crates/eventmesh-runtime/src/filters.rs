//! Subscription filters as the runtime keeps them: the CloudEvents
//! Subscriptions API filter objects a subscriber sent (stored as JSON with
//! the subscription), compiled once where a subscription is made or
//! applied, and evaluated by the consumer's dispatcher on every event it
//! reads (see `dispatcher/fill.rs`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use eventmesh_filter::{Filter, FilterJson};
use serde_json::Value;

/// Compiles a subscription's filters: `None` when there are none, and a
/// message naming the filter at fault (`filters[1].all[0].sql`) and, for
/// CESQL, the position and the problem, when one is malformed.
pub fn compile(filters: &[Value]) -> Result<Option<Arc<Filter>>, String> {
    if filters.is_empty() {
        return Ok(None);
    }
    let mut parsed = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate() {
        let one: FilterJson = serde_json::from_value(f.clone())
            .map_err(|e| format!("filters[{i}]: not a filter object: {e}"))?;
        parsed.push(one);
    }
    eventmesh_filter::compile(&parsed)
        .map(|f| Some(Arc::new(f)))
        .map_err(|e| e.to_string())
}

/// The filters of an applied subscription. They were checked when it was
/// made; should they not compile here (a definition written by a newer
/// version), the consumer delivers nothing rather than everything, and the
/// reason is logged.
///
/// One definition gives one compiled filter for as long as a consumer
/// holds it (the same `Arc`): a dispatcher keeps its filter across
/// membership changes, and consumers with the same filters share one
/// entry in their topic's sieve (see `crate::sieve`).
pub(crate) fn applied(consumer: &str, topic: &str, filters: &[Value]) -> Option<Arc<Filter>> {
    if filters.is_empty() {
        return None;
    }
    let key = Value::Array(filters.to_vec()).to_string();
    if let Some(f) = APPLIED
        .lock()
        .expect("applied")
        .get(&key)
        .and_then(Weak::upgrade)
    {
        return Some(f);
    }
    let compiled = match compile(filters) {
        Ok(f) => f?,
        Err(e) => {
            tracing::error!(consumer, topic, error = %e, "a subscription's filters do not compile; the consumer delivers nothing until they are replaced");
            let none: Vec<FilterJson> =
                vec![serde_json::from_value(serde_json::json!({"sql": "FALSE"}))
                    .expect("a constant filter parses")];
            Arc::new(eventmesh_filter::compile(&none).expect("a constant filter compiles"))
        }
    };
    let mut applied = APPLIED.lock().expect("applied");
    if applied.len() >= 1024 {
        applied.retain(|_, f| f.strong_count() > 0);
    }
    // Another thread may have compiled it meanwhile: keep the first.
    let kept = applied
        .get(&key)
        .and_then(Weak::upgrade)
        .unwrap_or_else(|| compiled.clone());
    applied.insert(key, Arc::downgrade(&kept));
    Some(kept)
}

/// Compiled filters by their definition, while a consumer holds them.
static APPLIED: LazyLock<Mutex<HashMap<String, Weak<Filter>>>> = LazyLock::new(Default::default);
