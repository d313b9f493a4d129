//! Agent cards: the check an agent's card must pass when it registers, and
//! the card the gateway serves for that agent.
//!
//! A card is kept as JSON, not as a typed struct, so that fields this crate
//! does not know (security schemes, signatures, provider, extensions) pass
//! through unchanged. The served card is a dual card: v1.0
//! `supportedInterfaces` listing the gateway's endpoint for 1.0 and then 0.3
//! (clients pick the first 1.0 entry), plus the legacy v0.3 fields `url`,
//! `preferredTransport` and `protocolVersion` for v0.3 clients.

use serde_json::{json, Map, Value};

use crate::model::{Message, Part};

/// Input and output modes assumed when a card lists none.
pub const DEFAULT_MODES: [&str; 1] = ["text/plain"];

fn non_empty_str(o: &Map<String, Value>, key: &str, at: &str) -> Result<(), String> {
    match o.get(key) {
        None | Some(Value::Null) => Err(format!("{at}.{key}: missing")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            Err(format!("{at}.{key}: must not be empty"))
        }
        Some(Value::String(_)) => Ok(()),
        Some(_) => Err(format!("{at}.{key}: must be a string")),
    }
}

fn strings(v: &Value, at: &str) -> Result<(), String> {
    match v.as_array() {
        Some(items) if items.iter().all(Value::is_string) => Ok(()),
        _ => Err(format!("{at}: must be an array of strings")),
    }
}

/// Checks the fields the gateway relies on: non-empty string `name`,
/// `description` and `version`; `skills` an array of objects, each with
/// non-empty string `id`, `name`, `description` and a `tags` array of
/// strings; `defaultInputModes`/`defaultOutputModes`, when present, arrays
/// of strings; `capabilities`, when present, an object. The error names the
/// field (`card.skills[0].id: missing`).
pub fn validate(card: &Value) -> Result<(), String> {
    let o = card.as_object().ok_or("card: must be a JSON object")?;
    for key in ["name", "description", "version"] {
        non_empty_str(o, key, "card")?;
    }
    if o.get("capabilities").is_some_and(|c| !c.is_object()) {
        return Err("card.capabilities: must be an object".into());
    }
    for key in ["defaultInputModes", "defaultOutputModes"] {
        if let Some(modes) = o.get(key) {
            strings(modes, &format!("card.{key}"))?;
        }
    }
    let skills = match o.get("skills") {
        None | Some(Value::Null) => return Err("card.skills: missing".into()),
        Some(Value::Array(skills)) => skills,
        Some(_) => return Err("card.skills: must be an array".into()),
    };
    for (i, skill) in skills.iter().enumerate() {
        let at = format!("card.skills[{i}]");
        let s = skill
            .as_object()
            .ok_or_else(|| format!("{at}: must be an object"))?;
        for key in ["id", "name", "description"] {
            non_empty_str(s, key, &at)?;
        }
        match s.get("tags") {
            None | Some(Value::Null) => return Err(format!("{at}.tags: missing")),
            Some(tags) => strings(tags, &format!("{at}.tags"))?,
        }
    }
    Ok(())
}

/// The bindings the gateway serves at one endpoint URL, in the order a
/// card lists them (clients take the first they support): JSON-RPC (a
/// `POST` to the URL itself) and HTTP+JSON (the proto's routes under the
/// URL: `…/message:send`, `…/tasks/{id}`).
pub const HTTP_BINDINGS: [&str; 2] = ["JSONRPC", "HTTP+JSON"];

/// The card a client fetches for an agent behind the gateway: the agent's
/// card with `supportedInterfaces` replaced by the gateway's `endpoint`
/// for each of [`HTTP_BINDINGS`] at 1.0, then each at 0.3, the legacy
/// `url`/`preferredTransport`/`protocolVersion` set to the same endpoint
/// at 0.3 with `additionalInterfaces` listing it for each binding,
/// `capabilities.streaming` and `.pushNotifications` set from the
/// arguments (other capabilities kept), and the default modes filled in when
/// missing. Expects a card that passed [`validate`].
pub fn for_gateway(card: &Value, endpoint: &str, streaming: bool, push: bool) -> Value {
    let mut o = card.as_object().cloned().unwrap_or_default();
    let interface = |binding: &str, version: &str| json!({"url": endpoint, "protocolBinding": binding, "protocolVersion": version});
    let mut interfaces: Vec<Value> = HTTP_BINDINGS.iter().map(|b| interface(b, "1.0")).collect();
    interfaces.extend(HTTP_BINDINGS.iter().map(|b| interface(b, "0.3")));
    o.insert("supportedInterfaces".into(), Value::Array(interfaces));
    let legacy = |transport: &str| json!({"url": endpoint, "transport": transport});
    let additional: Vec<Value> = HTTP_BINDINGS.iter().map(|b| legacy(b)).collect();
    o.insert("additionalInterfaces".into(), Value::Array(additional));
    o.insert("url".into(), endpoint.into());
    o.insert("preferredTransport".into(), "JSONRPC".into());
    o.insert("protocolVersion".into(), "0.3".into());
    let mut capabilities = match o.remove("capabilities") {
        Some(Value::Object(c)) => c,
        _ => Map::new(),
    };
    capabilities.insert("streaming".into(), streaming.into());
    capabilities.insert("pushNotifications".into(), push.into());
    o.insert("capabilities".into(), Value::Object(capabilities));
    for key in ["defaultInputModes", "defaultOutputModes"] {
        if o.get(key).is_none_or(Value::is_null) {
            o.insert(key.into(), json!(DEFAULT_MODES));
        }
    }
    Value::Object(o)
}

/// A served card with the gateway's gRPC interface added after its 1.0
/// interfaces, when the gRPC listener is on (`grpc_port`): binding `GRPC`,
/// version 1.0, the URL `public` when configured, else the host of
/// `base` (the URL the card was fetched at) with `grpc_port`
/// (`host:port`, the form gRPC clients take), and `tenant` the agent's id
/// (`None` for the gateway's own card), which clients copy into every
/// request to name the agent. Unchanged without a gRPC listener.
pub fn with_grpc(
    mut card: Value,
    public: Option<&str>,
    grpc_port: Option<u16>,
    base: &str,
    agent: Option<&str>,
) -> Value {
    let Some(port) = grpc_port else {
        return card;
    };
    let url = match public {
        Some(p) => p.to_string(),
        None => {
            let authority = base.split("://").nth(1).unwrap_or(base);
            let authority = authority.split('/').next().unwrap_or(authority);
            let host = match authority.strip_prefix('[') {
                Some(v6) => format!("[{}]", v6.split(']').next().unwrap_or(v6)),
                None => authority.split(':').next().unwrap_or(authority).to_string(),
            };
            format!("{host}:{port}")
        }
    };
    let mut interface = json!({"url": url, "protocolBinding": "GRPC", "protocolVersion": "1.0"});
    if let Some(a) = agent {
        interface["tenant"] = a.into();
    }
    if let Some(list) = card
        .get_mut("supportedInterfaces")
        .and_then(Value::as_array_mut)
    {
        let at = list
            .iter()
            .position(|i| i.get("protocolVersion").and_then(Value::as_str) != Some("1.0"))
            .unwrap_or(list.len());
        list.insert(at, interface);
    }
    card
}

/// The modes an agent's card declares under `key` (`defaultInputModes` or
/// `defaultOutputModes`) and, per skill, under `skill_key` (`inputModes`
/// or `outputModes`); empty when it declares none.
pub fn declared_modes(card: &Value, key: &str, skill_key: &str) -> Vec<String> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut modes = strings(card.get(key));
    if let Some(skills) = card.get("skills").and_then(Value::as_array) {
        for s in skills {
            modes.extend(strings(s.get(skill_key)));
        }
    }
    modes
}

/// Whether media types `a` and `b` match: equal (parameters and case
/// aside), or one of them `*/*` or `type/*` covering the other.
pub fn media_match(a: &str, b: &str) -> bool {
    let bare = |m: &str| {
        m.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let (a, b) = (bare(a), bare(b));
    let covers = |wide: &str, narrow: &str| {
        wide == "*/*"
            || wide
                .strip_suffix("/*")
                .is_some_and(|t| narrow.split('/').next() == Some(t))
    };
    a == b || covers(&a, &b) || covers(&b, &a)
}

/// The media type of a message part: its `mediaType`, else `text/plain`
/// for text and `application/json` for data; `None` for a file part that
/// names none.
fn part_media_type(p: &Part) -> Option<String> {
    match (&p.media_type, &p.text, &p.data) {
        (Some(m), _, _) if !m.is_empty() => Some(m.clone()),
        (_, Some(_), _) => Some("text/plain".into()),
        (_, _, Some(_)) => Some("application/json".into()),
        _ => None,
    }
}

/// Checks a client's message and its `acceptedOutputModes` against the
/// modes the agent's card declares (its default modes and its skills'):
/// every part must be of a declared input mode, and at least one accepted
/// output mode must be a declared output mode. What a card does not declare
/// is not checked. The error says what does not fit, for a
/// content-type-not-supported (-32005) answer.
pub fn check_content_types(
    card: &Value,
    message: &Message,
    accepted_output: &[String],
) -> Result<(), String> {
    let inputs = declared_modes(card, "defaultInputModes", "inputModes");
    if !inputs.is_empty() {
        for (i, part) in message.parts.iter().enumerate() {
            let Some(mt) = part_media_type(part) else {
                continue;
            };
            if !inputs.iter().any(|m| media_match(m, &mt)) {
                return Err(format!(
                    "message.parts[{i}] is {mt}, which the agent does not take (it takes {})",
                    inputs.join(", ")
                ));
            }
        }
    }
    let outputs = declared_modes(card, "defaultOutputModes", "outputModes");
    if !accepted_output.is_empty()
        && !outputs.is_empty()
        && !accepted_output
            .iter()
            .any(|a| outputs.iter().any(|o| media_match(a, o)))
    {
        return Err(format!(
            "the agent answers in {}, none of the accepted output modes {}",
            outputs.join(", "),
            accepted_output.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_checked_against_what_the_card_declares() {
        let card = json!({"defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                          "skills": [{"id": "s", "inputModes": ["image/*"], "outputModes": ["application/json"]}]});
        let msg = |parts: Vec<Part>| Message {
            parts,
            ..Message::default()
        };
        let text = Part::text("hi");
        let png = Part {
            raw: Some("iVBO".into()),
            media_type: Some("image/png".into()),
            ..Part::default()
        };
        let data = Part {
            data: Some(json!({"a": 1})),
            ..Part::default()
        };
        let unnamed_file = Part {
            url: Some("https://x/y".into()),
            ..Part::default()
        };
        assert_eq!(
            check_content_types(&card, &msg(vec![text.clone(), png, unnamed_file]), &[]),
            Ok(())
        );
        assert_eq!(
            check_content_types(&card, &msg(vec![text.clone(), data]), &[]),
            Err("message.parts[1] is application/json, which the agent does not take (it takes text/plain, image/*)".into())
        );
        let accepts = |modes: &[&str]| {
            let modes: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
            check_content_types(&card, &msg(vec![text.clone()]), &modes)
        };
        assert_eq!(accepts(&["text/*"]), Ok(()));
        assert_eq!(
            accepts(&["image/png", "application/json; charset=utf-8"]),
            Ok(())
        );
        assert_eq!(
            accepts(&["image/png"]),
            Err("the agent answers in text/plain, application/json, none of the accepted output modes image/png".into())
        );
        // A card that declares nothing is not checked.
        let bare = json!({"skills": [{"id": "s"}]});
        assert_eq!(
            check_content_types(&bare, &msg(vec![Part::default()]), &["x/y".into()]),
            Ok(())
        );
    }

    fn card() -> Value {
        json!({"name": "Echo", "description": "Echoes", "version": "1.0.0",
               "skills": [{"id": "echo", "name": "Echo", "description": "Echoes input", "tags": ["echo"]}]})
    }

    #[test]
    fn validation_errors_name_the_field() {
        assert_eq!(validate(&card()), Ok(()));
        let mut empty_skills = card();
        empty_skills["skills"] = json!([]);
        assert_eq!(validate(&empty_skills), Ok(()));
        let cases: [(&str, Value, &str); 12] = [
            ("name", Value::Null, "card.name: missing"),
            ("name", json!(""), "card.name: must not be empty"),
            (
                "description",
                json!(3),
                "card.description: must be a string",
            ),
            ("version", json!(" "), "card.version: must not be empty"),
            ("skills", Value::Null, "card.skills: missing"),
            ("skills", json!({}), "card.skills: must be an array"),
            ("skills", json!(["x"]), "card.skills[0]: must be an object"),
            (
                "skills",
                json!([{"name": "n", "description": "d", "tags": []}]),
                "card.skills[0].id: missing",
            ),
            (
                "skills",
                json!([{"id": "i", "name": "n", "description": "d"}]),
                "card.skills[0].tags: missing",
            ),
            (
                "skills",
                json!([{"id": "i", "name": "n", "description": "d", "tags": [1]}]),
                "card.skills[0].tags: must be an array of strings",
            ),
            (
                "capabilities",
                json!([]),
                "card.capabilities: must be an object",
            ),
            (
                "defaultInputModes",
                json!("text/plain"),
                "card.defaultInputModes: must be an array of strings",
            ),
        ];
        for (key, value, want) in cases {
            let mut c = card();
            if value.is_null() {
                c.as_object_mut().map(|o| o.remove(key));
            } else {
                c[key] = value;
            }
            assert_eq!(validate(&c), Err(want.to_string()), "{key}");
        }
        assert_eq!(
            validate(&json!([])),
            Err("card: must be a JSON object".into())
        );
    }

    #[test]
    fn gateway_card_replaces_interfaces_and_keeps_the_rest() {
        let mut c = card();
        c["capabilities"] = json!({"streaming": false, "extensions": [{"uri": "urn:x"}]});
        c["defaultOutputModes"] = json!(["application/json"]);
        c["additionalInterfaces"] = json!([{"url": "http://agent/", "transport": "GRPC"}]);
        c["supportedInterfaces"] =
            json!([{"url": "http://agent/", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]);
        c["provider"] = json!({"url": "https://p", "organization": "P"});
        let g = for_gateway(&c, "https://gw/a2a/echo", true, false);
        let ep = "https://gw/a2a/echo";
        assert_eq!(
            g,
            json!({"name": "Echo", "description": "Echoes", "version": "1.0.0", "skills": c["skills"],
                   "provider": {"url": "https://p", "organization": "P"},
                   "capabilities": {"streaming": true, "pushNotifications": false, "extensions": [{"uri": "urn:x"}]},
                   "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
                   "supportedInterfaces": [{"url": ep, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                                           {"url": ep, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                                           {"url": ep, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                                           {"url": ep, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"}],
                   "additionalInterfaces": [{"url": ep, "transport": "JSONRPC"}, {"url": ep, "transport": "HTTP+JSON"}],
                   "url": ep, "preferredTransport": "JSONRPC", "protocolVersion": "0.3"})
        );
    }
}
