//! Between the generated messages and the ProtoJSON values the call layer
//! takes and gives (`eventmesh_a2a::model` reads and writes the same
//! JSON). The generated serde impls (pbjson) do the mapping: camelCase
//! names, enums by name (`TASK_STATE_COMPLETED`, `ROLE_USER`), oneofs as
//! their one field (`{"text": …}`, `{"statusUpdate": …}`), bytes as
//! base64, `Struct` and `Value` as plain JSON and `Timestamp` as RFC 3339.
//!
//! Invariants: nothing is mapped by hand here; a field at its default
//! (empty string, zero, unset enum) is left out, as ProtoJSON leaves it
//! out, and fields the proto does not know are ignored when reading (the
//! served cards carry the v0.3 fields too).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

/// A message as ProtoJSON. Fails only on a value ProtoJSON cannot write
/// (a timestamp out of its range). Numbers of `Struct`s and `Value`s,
/// doubles on the wire, are written as integers when they are whole
/// (below 2^53), as JSON clients send them: `{"n": 1}` stays `1`, not
/// `1.0`, for an agent that reads an integer.
pub fn to_json<T: Serialize>(message: &T) -> Result<Value, String> {
    let mut v = serde_json::to_value(message).map_err(|e| e.to_string())?;
    whole_numbers(&mut v);
    Ok(v)
}

/// Rewrites whole doubles below 2^53 as integers, everywhere in `v`.
fn whole_numbers(v: &mut Value) {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < EXACT {
                    *v = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// A ProtoJSON value as message `T`; `null` is the empty message. The
/// error says what does not fit.
pub fn from_json<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    let value = match value {
        Value::Null => Value::Object(Map::new()),
        v => v,
    };
    T::deserialize(value).map_err(|e| e.to_string())
}

/// A request message as the call layer's params, with its `tenant` taken
/// out: the routing field of the binding (here, the agent), not a
/// parameter of the method. An empty tenant is no tenant.
pub fn request_params<T: Serialize>(message: &T) -> Result<(Value, Option<String>), String> {
    let mut params = to_json(message)?;
    let tenant = params
        .as_object_mut()
        .and_then(|o| o.remove("tenant"))
        .and_then(|t| t.as_str().map(str::to_string))
        .filter(|t| !t.is_empty());
    Ok((params, tenant))
}

/// One message converted to another through its ProtoJSON form (a model
/// type to a generated one, or back).
pub fn convert<A: Serialize, B: DeserializeOwned>(a: &A) -> Result<B, String> {
    from_json(to_json(a)?)
}

#[cfg(test)]
mod tests;
