//! Searching the agents attached to the mesh: by skill id, tag, input or
//! output mode and free text over names and descriptions, in pages. One
//! search serves `GET /a2a/agents`, the MCP gateway's `find_agents` and
//! `eventmesh admin agents`.
//!
//! A caller sees the live agents of its tenant that its ACL lets it reach
//! (the A2A operation on the agent id), as every A2A route does: an agent
//! it may not reach is not listed, exactly like one nobody registered.

use eventmesh_api::{ApiError, Ask, Caller};
use eventmesh_security::Operation;
use eventmesh_state::Agent;
use serde::Deserialize;
use serde_json::Value;

use super::Gateway;

/// Agents a page holds when the query names no size, and at most.
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 200;

/// What a search asks for; every condition given must hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentQuery {
    /// A skill of this id.
    pub skill: Option<String>,
    /// A tag of the agent's skills (case-insensitive).
    pub tag: Option<String>,
    /// Takes this media type: a default input mode of the card or an
    /// input mode of one of its skills (`text/*` and `*/*` cover others).
    pub input_mode: Option<String>,
    /// Gives this media type, likewise.
    pub output_mode: Option<String>,
    /// Words that must all occur (case-insensitive) in the agent's id,
    /// name or description or in its skills' names, descriptions, tags or
    /// examples.
    pub q: Option<String>,
    pub page_size: Option<usize>,
    /// The `nextPageToken` of the page before.
    pub page_token: Option<String>,
}

/// One page of a search: agents in id order.
#[derive(Debug, Clone)]
pub struct AgentPage {
    pub agents: Vec<Agent>,
    /// Set when more agents match: the id of this page's last agent.
    pub next_page_token: Option<String>,
    /// How many agents match in all.
    pub total: usize,
}

fn strings(v: Option<&Value>) -> impl Iterator<Item = &str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn skills(card: &Value) -> impl Iterator<Item = &Value> {
    card.get("skills")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Whether the card takes (`defaultInputModes`/`inputModes`) or gives
/// (`defaultOutputModes`/`outputModes`) media type `mode`; a card that
/// declares no modes takes and gives text.
fn has_mode(card: &Value, default_key: &str, skill_key: &str, mode: &str) -> bool {
    let declared = eventmesh_a2a::card::declared_modes(card, default_key, skill_key);
    if declared.is_empty() {
        return eventmesh_a2a::card::DEFAULT_MODES
            .iter()
            .any(|m| eventmesh_a2a::card::media_match(mode, m));
    }
    declared
        .iter()
        .any(|m| eventmesh_a2a::card::media_match(mode, m))
}

/// The text a free-text query searches, lower-cased.
fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

fn searchable(agent: &Agent, card: &Value) -> String {
    let mut words: Vec<&str> = vec![&agent.id];
    words.extend(text(card.get("name")));
    words.extend(text(card.get("description")));
    for s in skills(card) {
        for key in ["id", "name", "description"] {
            words.extend(text(s.get(key)));
        }
        words.extend(strings(s.get("tags")).chain(strings(s.get("examples"))));
    }
    words.join("\n").to_lowercase()
}

impl AgentQuery {
    /// Whether agent `a` (with a card) matches.
    pub fn matches(&self, a: &Agent) -> bool {
        let Some(card) = a.card.as_ref() else {
            return false;
        };
        if let Some(id) = &self.skill {
            if !skills(card).any(|s| s.get("id").and_then(Value::as_str) == Some(id)) {
                return false;
            }
        }
        if let Some(tag) = &self.tag {
            let found = skills(card)
                .flat_map(|s| strings(s.get("tags")))
                .any(|t| t.eq_ignore_ascii_case(tag));
            if !found {
                return false;
            }
        }
        if let Some(m) = &self.input_mode {
            if !has_mode(card, "defaultInputModes", "inputModes", m) {
                return false;
            }
        }
        if let Some(m) = &self.output_mode {
            if !has_mode(card, "defaultOutputModes", "outputModes", m) {
                return false;
            }
        }
        if let Some(q) = &self.q {
            let text = searchable(a, card);
            if !q
                .split_whitespace()
                .all(|w| text.contains(&w.to_lowercase()))
            {
                return false;
            }
        }
        true
    }

    fn page_size(&self) -> Result<usize, ApiError> {
        match self.page_size {
            None => Ok(DEFAULT_PAGE),
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            Some(n) => Err(ApiError::bad_request(
                "invalid_request",
                format!("pageSize {n} is out of range: 1 to {MAX_PAGE}"),
            )),
        }
    }
}

impl Gateway {
    /// The agents `caller` may see that match `query`, one page of them.
    pub async fn find_agents(
        &self,
        caller: &Caller,
        query: &AgentQuery,
    ) -> Result<AgentPage, ApiError> {
        let admitted = self
            .api
            .admit(caller, Ask::new(Operation::A2a, None, b""))?;
        self.search(query, |a| {
            (admitted.creator.tenant.is_none() || a.tenant == admitted.creator.tenant)
                && self.api.allows(caller, &admitted, Operation::A2a, &a.id)
        })
        .await
    }

    /// The agents `visible` keeps that match `query`, one page of them:
    /// for the operator (`GET /admin/a2a/agents`), every agent.
    pub async fn search(
        &self,
        query: &AgentQuery,
        visible: impl Fn(&Agent) -> bool,
    ) -> Result<AgentPage, ApiError> {
        let size = query.page_size()?;
        let mut found: Vec<Agent> = self
            .live_agents()
            .await
            .map_err(|e| ApiError::from(eventmesh_runtime::RuntimeError::from(e)))?
            .into_iter()
            .filter(|a| visible(a) && query.matches(a))
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        let total = found.len();
        let start = match &query.page_token {
            Some(after) => found.partition_point(|a| a.id.as_str() <= after.as_str()),
            None => 0,
        };
        let mut agents: Vec<Agent> = found.into_iter().skip(start).collect();
        let more = agents.len() > size;
        agents.truncate(size);
        let next_page_token = if more {
            agents.last().map(|a| a.id.clone())
        } else {
            None
        };
        Ok(AgentPage {
            agents,
            next_page_token,
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(id: &str, card: Value) -> Agent {
        serde_json::from_value(
            json!({"id": id, "capabilities": [], "capacity": 1, "load": 0,
            "status": "UP", "heartbeatMs": 0, "owner": "i-0", "ownerEpoch": 1, "card": card}),
        )
        .expect("agent")
    }

    fn translator() -> Agent {
        agent(
            "translate",
            json!({"name": "Translator", "description": "Turns English into French",
                   "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain", "application/json"],
                   "skills": [{"id": "fr", "name": "French", "description": "to French", "tags": ["language", "NLP"],
                               "examples": ["bonjour"], "inputModes": ["audio/wav"]}]}),
        )
    }

    fn q(v: Value) -> AgentQuery {
        serde_json::from_value(v).expect("query")
    }

    #[test]
    fn each_condition_must_hold() {
        let a = translator();
        assert!(q(json!({})).matches(&a));
        assert!(q(json!({"skill": "fr"})).matches(&a));
        assert!(!q(json!({"skill": "de"})).matches(&a));
        assert!(q(json!({"tag": "nlp"})).matches(&a));
        assert!(!q(json!({"tag": "vision"})).matches(&a));
        assert!(q(json!({"inputMode": "audio/wav"})).matches(&a));
        assert!(q(json!({"inputMode": "text/*"})).matches(&a));
        assert!(!q(json!({"inputMode": "image/png"})).matches(&a));
        assert!(q(json!({"outputMode": "application/json; charset=utf-8"})).matches(&a));
        assert!(q(json!({"q": "ENGLISH french"})).matches(&a));
        assert!(q(json!({"q": "bonjour"})).matches(&a));
        assert!(!q(json!({"q": "english german"})).matches(&a));
        assert!(!q(json!({"skill": "fr", "tag": "vision"})).matches(&a));
    }

    #[test]
    fn a_card_without_modes_takes_and_gives_text() {
        let a = agent(
            "bare",
            json!({"name": "n", "description": "d", "skills": []}),
        );
        assert!(q(json!({"inputMode": "text/plain"})).matches(&a));
        assert!(!q(json!({"outputMode": "image/png"})).matches(&a));
    }

    #[test]
    fn unknown_fields_and_sizes_are_refused() {
        assert!(serde_json::from_value::<AgentQuery>(json!({"skills": "x"})).is_err());
        assert!(q(json!({"pageSize": 0})).page_size().is_err());
        assert!(q(json!({"pageSize": 201})).page_size().is_err());
        assert_eq!(q(json!({})).page_size().unwrap(), DEFAULT_PAGE);
    }
}
