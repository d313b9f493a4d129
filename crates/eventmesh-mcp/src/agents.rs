//! The registered A2A agents as tools: which agents a caller sees, one tool
//! per skill of each (`<agentId>__<skillId>`), and `find_agents`.
//!
//! A caller sees an agent when it is live, registered by the caller's
//! tenant (any tenant's without a gate), and the ACL lets the caller use it
//! (operation `A2A` on the agent id).
//!
//! Tool names follow MCP's rule for them (1 to 128 of `A-Z a-z 0-9 _ - .`):
//! other characters of a skill id become `_`, a name too long is cut, and
//! a name taken already (by an earlier agent or skill, in id order) gets
//! `-2`, `-3`, … .
//!
//! A tool's input schema is the skill's `inputSchema` when its card gives
//! one (a JSON Schema of an object; an extension of the A2A card), else
//! [`default_schema`]: `text` and `data`, sent as a text part and a data
//! part of the message. Either way `taskId` continues a task that asked
//! for input.

use std::collections::BTreeSet;
use std::sync::Arc;

use eventmesh_a2a_gateway::registry::{AgentQuery, MAX_PAGE};
use eventmesh_a2a_gateway::Gateway;
use eventmesh_api::{Api, Ask, StatusCode};
use eventmesh_security::Operation;
use eventmesh_state::Agent;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::args::{json_result, object, Args, ToolError, ToolResult};
use crate::RequestCaller;

pub(crate) const FIND_AGENTS: &str = "find_agents";
/// Between an agent id and a skill id in a tool name.
const SEPARATOR: &str = "__";
const MAX_NAME: usize = 128;
/// `find_agents` answers this many agents when not told, and at most
/// [`MAX_FOUND`].
const DEFAULT_FOUND: u64 = 20;
const MAX_FOUND: u64 = MAX_PAGE as u64;

/// One skill of one agent, as a tool.
#[derive(Debug, Clone)]
pub(crate) struct AgentTool {
    pub(crate) agent: String,
    pub(crate) skill: String,
    /// The skill's card gave its own input schema.
    pub(crate) own_schema: bool,
    pub(crate) tool: Tool,
}

/// The schema of a skill whose card gives none.
pub(crate) fn default_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The message to the agent."},
            "data": {"type": "object", "description": "Structured input, sent as a data part."},
            "taskId": {"type": "string", "description": "Continue this task (one that asked for input) instead of starting one."}
        },
        "required": []
    })
}

/// A skill's own input schema, when its card gives a usable one.
fn own_schema(skill: &Value) -> Option<JsonObject> {
    match skill.get("inputSchema") {
        Some(Value::Object(s)) if s.get("type") == Some(&json!("object")) => {
            let mut s = s.clone();
            if let Some(Value::Object(props)) = s.get_mut("properties") {
                props.entry("taskId").or_insert_with(|| {
                    json!({"type": "string", "description": "Continue this task (one that asked for input)."})
                });
            }
            Some(s)
        }
        _ => None,
    }
}

/// `name` with every character MCP does not allow in a tool name made `_`.
fn sanitized(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `base`, cut to fit with `suffix`, plus `suffix`.
fn fitted(base: &str, suffix: &str) -> String {
    let keep = MAX_NAME.saturating_sub(suffix.len()).min(base.len());
    format!("{}{suffix}", &base[..keep])
}

fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn describe(card: &Value, skill: &Value) -> String {
    let mut text = match (text_of(skill, "name"), text_of(skill, "description")) {
        (Some(n), Some(d)) => format!("{n}: {d}"),
        (Some(n), None) => n,
        (None, Some(d)) => d,
        (None, None) => String::new(),
    };
    let agent = match (text_of(card, "name"), text_of(card, "description")) {
        (Some(n), Some(d)) => format!("{n} ({d})"),
        (Some(n), None) => n,
        (None, d) => d.unwrap_or_default(),
    };
    if !agent.is_empty() {
        text.push_str(&format!(" [A2A agent: {agent}]"));
    }
    text
}

fn skills(card: &Value) -> &[Value] {
    card.get("skills")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// One tool per skill of each agent, in agent id then skill order.
pub(crate) fn tools_of(agents: &[Agent]) -> Vec<AgentTool> {
    let mut agents: Vec<&Agent> = agents.iter().collect();
    agents.sort_by(|a, b| a.id.cmp(&b.id));
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for agent in agents {
        let Some(card) = &agent.card else { continue };
        for skill in skills(card) {
            let Some(skill_id) = skill.get("id").and_then(Value::as_str) else {
                continue;
            };
            let base = sanitized(&format!("{}{SEPARATOR}{skill_id}", agent.id));
            let mut name = fitted(&base, "");
            let mut n = 2;
            while taken.contains(&name) {
                name = fitted(&base, &format!("-{n}"));
                n += 1;
            }
            taken.insert(name.clone());
            let own = own_schema(skill);
            let schema = own.clone().unwrap_or_else(|| object(default_schema()));
            let tool = Tool::new(name, describe(card, skill), Arc::new(schema))
                .with_title(text_of(skill, "name").unwrap_or_else(|| skill_id.to_string()))
                .with_annotations(ToolAnnotations::new().read_only(false).open_world(true));
            out.push(AgentTool {
                agent: agent.id.clone(),
                skill: skill_id.to_string(),
                own_schema: own.is_some(),
                tool,
            });
        }
    }
    out
}

/// The live agents `rc`'s caller may use (the registry's search, every
/// page of it); none when it may use no agent at all, or there is no A2A
/// gateway.
pub(crate) async fn visible(
    gw: Option<&Arc<Gateway>>,
    rc: &RequestCaller,
) -> Result<Vec<Agent>, ToolError> {
    let Some(gw) = gw else {
        return Ok(Vec::new());
    };
    let mut query = AgentQuery {
        page_size: Some(MAX_PAGE),
        ..AgentQuery::default()
    };
    let mut all = Vec::new();
    loop {
        let page = match gw.find_agents(&rc.caller, &query).await {
            Ok(page) => page,
            Err(e) if e.status == StatusCode::FORBIDDEN || e.status == StatusCode::UNAUTHORIZED => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(e.into()),
        };
        all.extend(page.agents);
        match page.next_page_token {
            Some(token) => query.page_token = Some(token),
            None => return Ok(all),
        }
    }
}

/// Those of `agents` (all live ones, read once) that `rc`'s caller may
/// use, by the rule of the registry's search: its tenant's (any tenant's
/// without a gate) that the ACL lets it reach. For the watcher, which
/// reads the registry once for every session, and for calls that find
/// their tool in the watcher's last read.
pub(crate) fn visible_of(api: &Api, agents: &[Agent], rc: &RequestCaller) -> Vec<Agent> {
    let Ok(admitted) = api.admit(&rc.caller, Ask::new(Operation::A2a, None, &rc.raw)) else {
        return Vec::new();
    };
    let tenant = admitted.creator.tenant.as_ref();
    agents
        .iter()
        .filter(|a| tenant.is_none() || a.tenant.as_ref() == tenant)
        .filter(|a| api.allows(&rc.caller, &admitted, Operation::A2a, &a.id))
        .cloned()
        .collect()
}

pub(crate) fn find_tool() -> Tool {
    Tool::new(
        FIND_AGENTS,
        "Search the A2A agents registered on the event mesh (by words, skill, tag or media type). Each skill of an agent is also a tool of this server, named in the answer.",
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words that must all appear (case-insensitively) in the agent's id, name or description, or in its skills' names, descriptions, tags or examples. Empty: every agent."},
                "skill": {"type": "string", "description": "Agents with a skill of this id."},
                "tag": {"type": "string", "description": "Agents with a skill of this tag."},
                "inputMode": {"type": "string", "description": "Agents that take this media type (e.g. text/plain)."},
                "outputMode": {"type": "string", "description": "Agents that give this media type."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FOUND, "description": "Agents to return at most (default 20)."},
                "pageToken": {"type": "string", "description": "The nextPageToken of the answer before, for the next page."}
            }
        }))),
    )
    .with_annotations(ToolAnnotations::new().read_only(true))
}

/// An agent as `find_agents` shows it: its skills, each with the tool that
/// calls it (named as in the caller's whole tool list).
fn found_json(agent: &Agent, tools: &[AgentTool]) -> Value {
    let card = agent.card.clone().unwrap_or(Value::Null);
    let skills: Vec<Value> = tools
        .iter()
        .filter(|t| t.agent == agent.id)
        .map(|t| {
            let skill = skills(&card)
                .iter()
                .find(|s| s.get("id").and_then(Value::as_str) == Some(t.skill.as_str()))
                .cloned()
                .unwrap_or(Value::Null);
            json!({
                "id": t.skill,
                "name": skill.get("name"),
                "description": skill.get("description"),
                "tags": skill.get("tags"),
                "tool": t.tool.name,
            })
        })
        .collect();
    json!({
        "id": agent.id,
        "name": card.get("name"),
        "description": card.get("description"),
        "skills": skills,
    })
}

/// The registry query a `find_agents` call asks for.
fn query_of(a: &Args) -> Result<AgentQuery, ToolError> {
    a.only(&[
        "query",
        "skill",
        "tag",
        "inputMode",
        "outputMode",
        "limit",
        "pageToken",
    ])?;
    let text = |k: &str| -> Result<Option<String>, ToolError> {
        Ok(a.text(k)?.filter(|s| !s.is_empty()).map(str::to_string))
    };
    Ok(AgentQuery {
        q: text("query")?,
        skill: text("skill")?,
        tag: text("tag")?,
        input_mode: text("inputMode")?,
        output_mode: text("outputMode")?,
        page_size: Some(a.number("limit", 1, MAX_FOUND, DEFAULT_FOUND)? as usize),
        page_token: text("pageToken")?,
    })
}

/// `find_agents`: a page of the registry's search, each agent with its
/// skills and their tools.
pub(crate) async fn find(
    gw: Option<&Arc<Gateway>>,
    rc: &RequestCaller,
    a: &Args<'_>,
) -> ToolResult {
    let query = query_of(a)?;
    let Some(gw) = gw else {
        return Ok(json_result(json!({"agents": [], "total": 0})));
    };
    let page = gw.find_agents(&rc.caller, &query).await?;
    let tools = tools_of(&visible(Some(gw), rc).await?);
    let agents: Vec<Value> = page
        .agents
        .iter()
        .map(|agent| found_json(agent, &tools))
        .collect();
    let mut answer = json!({"agents": agents, "total": page.total});
    if let Some(next) = page.next_page_token {
        answer["nextPageToken"] = json!(next);
    }
    Ok(json_result(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str, skills: Value) -> Agent {
        serde_json::from_value(json!({
            "id": id, "capabilities": [], "capacity": 0, "load": 0, "status": "UP",
            "heartbeatMs": 0, "owner": "i", "ownerEpoch": 1,
            "card": {"name": format!("Agent {id}"), "description": "does things", "skills": skills},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn each_skill_is_a_tool_with_a_valid_unique_name() {
        let agents = [
            agent(
                "b",
                json!([{"id": "echo", "name": "Echo", "description": "Repeats"}]),
            ),
            agent(
                "a",
                json!([{"id": "sum up/now", "name": "Sum"}, {"id": "sum up.now"}, {"id": "sum_up/now"}]),
            ),
            agent("a__sum", json!([{"id": "up_now"}])),
        ];
        let tools = tools_of(&agents);
        let names: Vec<&str> = tools.iter().map(|t| t.tool.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "a__sum_up_now",
                "a__sum_up.now",
                "a__sum_up_now-2",
                "a__sum__up_now",
                "b__echo"
            ]
        );
        let long = agent(
            &"x".repeat(64),
            json!([{"id": "y".repeat(100)}, {"id": "y".repeat(101)}]),
        );
        let tools = tools_of(&[long]);
        assert_eq!(tools[0].tool.name.len(), 128);
        assert_eq!(tools[1].tool.name.len(), 128);
        assert!(tools[1].tool.name.ends_with("-2"));
        let echo = &tools_of(&agents)[4];
        assert_eq!((echo.agent.as_str(), echo.skill.as_str()), ("b", "echo"));
        assert_eq!(
            echo.tool.description.as_deref(),
            Some("Echo: Repeats [A2A agent: Agent b (does things)]")
        );
        assert_eq!(
            Value::Object((*echo.tool.input_schema).clone()),
            default_schema()
        );
    }

    #[test]
    fn a_skill_may_give_its_own_input_schema() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let tools = tools_of(&[agent(
            "w",
            json!([{"id": "weather", "inputSchema": schema}]),
        )]);
        assert!(tools[0].own_schema);
        let got = Value::Object((*tools[0].tool.input_schema).clone());
        assert_eq!(got["required"], json!(["city"]));
        assert_eq!(got["properties"]["taskId"]["type"], "string");
        let tools = tools_of(&[agent(
            "w",
            json!([{"id": "weather", "inputSchema": {"type": "string"}}]),
        )]);
        assert!(!tools[0].own_schema);
    }

    #[test]
    fn find_asks_the_registry_and_names_the_tools() {
        let o = object(json!({"query": "parrot", "tag": "", "limit": 5, "pageToken": "a"}));
        let q = query_of(&Args(&o)).unwrap();
        assert_eq!(q.q.as_deref(), Some("parrot"));
        assert_eq!(q.tag, None);
        assert_eq!(q.page_size, Some(5));
        assert_eq!(q.page_token.as_deref(), Some("a"));
        let o = object(json!({"limit": 0}));
        assert!(query_of(&Args(&o)).is_err());
        let o = object(json!({"name": "x"}));
        assert!(query_of(&Args(&o)).is_err());
        let echo = agent(
            "echo",
            json!([{"id": "echo", "name": "Echo", "tags": ["parrot"]}]),
        );
        let shown = found_json(&echo, &tools_of(std::slice::from_ref(&echo)));
        assert_eq!(
            shown,
            json!({"id": "echo", "name": "Agent echo", "description": "does things",
                   "skills": [{"id": "echo", "name": "Echo", "description": null,
                               "tags": ["parrot"], "tool": "echo__echo"}]})
        );
    }
}
