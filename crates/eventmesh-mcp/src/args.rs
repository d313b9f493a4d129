//! Tool arguments and tool answers: reading a call's arguments with errors
//! that name the argument, and turning the operation layer's errors into
//! tool errors (`isError: true` with a text saying why).

use eventmesh_api::{ApiError, StatusCode};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::Value;

/// Why a tool call failed, as its caller reads it.
#[derive(Debug)]
pub(crate) struct ToolError(pub(crate) String);

impl ToolError {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        ToolError(text.into())
    }

    /// The tool result carrying this error.
    pub(crate) fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.0)])
    }
}

impl From<ApiError> for ToolError {
    fn from(e: ApiError) -> Self {
        let what = match e.status {
            StatusCode::UNAUTHORIZED => "not authenticated",
            StatusCode::FORBIDDEN => "access denied",
            StatusCode::TOO_MANY_REQUESTS => "over quota",
            StatusCode::NOT_FOUND => "not found",
            StatusCode::REQUEST_TIMEOUT => "timed out",
            s if s.is_server_error() => "the mesh could not do it",
            _ => "refused",
        };
        let mut text = format!("{what} ({}): {}", e.code, e.message);
        if let Some(wait) = e.retry_after {
            text.push_str(&format!("; try again in {} ms", wait.as_millis()));
        }
        ToolError(text)
    }
}

pub(crate) type ToolResult = Result<CallToolResult, ToolError>;

/// A result holding `value` both as structured content and as its JSON
/// text.
pub(crate) fn json_result(value: Value) -> CallToolResult {
    CallToolResult::structured(value)
}

/// A call's arguments.
pub(crate) struct Args<'a>(pub(crate) &'a JsonObject);

impl<'a> Args<'a> {
    pub(crate) fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn text(&self, name: &str) -> Result<Option<&'a str>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ToolError::new(format!("argument {name}: must be a string"))),
        }
    }

    pub(crate) fn required_text(&self, name: &str) -> Result<&'a str, ToolError> {
        match self.text(name)? {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(ToolError::new(format!("argument {name}: required"))),
        }
    }

    /// A whole number in `min..=max`, or `default` when absent.
    pub(crate) fn number(
        &self,
        name: &str,
        min: u64,
        max: u64,
        default: u64,
    ) -> Result<u64, ToolError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        v.as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                ToolError::new(format!(
                    "argument {name}: must be a whole number from {min} to {max}"
                ))
            })
    }

    pub(crate) fn object(&self, name: &str) -> Result<Option<&'a JsonObject>, ToolError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(_) => Err(ToolError::new(format!(
                "argument {name}: must be an object"
            ))),
        }
    }

    /// Refuses arguments other than `known` (a misspelt argument is not
    /// silently dropped).
    pub(crate) fn only(&self, known: &[&str]) -> Result<(), ToolError> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(ToolError::new(format!(
                "argument {k}: unknown; this tool takes {}",
                known.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

/// A JSON object from a `json!` literal.
pub(crate) fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_checked_by_name() {
        let o = object(json!({"topic": "t", "max": 5, "bad": 1.5, "obj": {}}));
        let a = Args(&o);
        assert_eq!(a.required_text("topic").unwrap(), "t");
        assert_eq!(
            a.required_text("missing").unwrap_err().0,
            "argument missing: required"
        );
        assert_eq!(a.number("max", 1, 100, 10).unwrap(), 5);
        assert_eq!(a.number("absent", 1, 100, 10).unwrap(), 10);
        assert_eq!(
            a.number("bad", 1, 100, 10).unwrap_err().0,
            "argument bad: must be a whole number from 1 to 100"
        );
        assert_eq!(
            a.number("max", 6, 100, 10).unwrap_err().0,
            "argument max: must be a whole number from 6 to 100"
        );
        assert!(a.object("obj").unwrap().is_some());
        assert!(a.object("topic").is_err());
        assert_eq!(
            a.only(&["topic", "max"]).unwrap_err().0,
            "argument bad: unknown; this tool takes topic, max"
        );
    }

    #[test]
    fn refusals_say_why() {
        let e = ApiError::new(StatusCode::FORBIDDEN, "acl_denied", "no ACL rule allows it");
        assert_eq!(
            ToolError::from(e).0,
            "access denied (acl_denied): no ACL rule allows it"
        );
    }
}
