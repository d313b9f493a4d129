//! Agents attached through the gateway: registration (a card, an
//! extended card, a time to live renewed by registering again), lookup of
//! the live ones, and removal.

use eventmesh_a2a::events;
use eventmesh_runtime::Creator;
use eventmesh_state::{Agent, AgentStatus, StateError};
use serde_json::Value;

use super::{now_ms, Gateway};
use eventmesh_api::ApiError;

impl Gateway {
    /// A registered agent that is still alive.
    pub async fn agent(&self, id: &str) -> Result<Option<Agent>, StateError> {
        Ok(self
            .agents
            .get_agent(id)
            .await?
            .filter(|a| a.card.is_some() && !a.expired(now_ms())))
    }

    /// Every live agent (for the gateway's card and `GET /a2a/agents`).
    pub async fn live_agents(&self) -> Result<Vec<Agent>, StateError> {
        let now = now_ms();
        Ok(self
            .agents
            .list_agents()
            .await?
            .into_iter()
            .filter(|a| a.card.is_some() && !a.expired(now))
            .collect())
    }

    /// Registers (or heartbeats) agent `id` with its card, and the
    /// extended card admitted callers may ask for.
    pub async fn register(
        &self,
        who: &Creator,
        id: &str,
        cards: (Value, Option<Value>),
        ttl_ms: Option<u64>,
    ) -> Result<Agent, ApiError> {
        let (card, extended_card) = cards;
        events::valid_agent_id(id).map_err(|m| ApiError::bad_request("invalid_agent_id", m))?;
        self.in_use();
        eventmesh_a2a::card::validate(&card)
            .map_err(|m| ApiError::bad_request("invalid_card", m))?;
        if let Some(extended) = &extended_card {
            eventmesh_a2a::card::validate(extended)
                .map_err(|m| ApiError::bad_request("invalid_card", format!("extended {m}")))?;
        }
        let state = |e: StateError| ApiError::from(eventmesh_runtime::RuntimeError::from(e));
        let existing = self.agent(id).await.map_err(state)?;
        if let Some(a) = &existing {
            if who.tenant.is_some() && a.tenant != who.tenant {
                return Err(ApiError::new(
                    eventmesh_api::StatusCode::FORBIDDEN,
                    "not_owner",
                    format!("agent {id:?} is registered by another tenant"),
                ));
            }
        }
        let skills = card
            .get("skills")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .filter_map(|k| k.get("id").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let agent = Agent {
            id: id.to_string(),
            capabilities: skills,
            capacity: 0,
            load: 0,
            status: AgentStatus::Up,
            heartbeat_ms: now_ms(),
            host: self.instance.clone(),
            host_epoch: existing.as_ref().map_or(1, |a| a.host_epoch),
            card: Some(card),
            extended_card,
            tenant: who.tenant.clone(),
            principal: who.principal.clone(),
            ttl_ms: ttl_ms.unwrap_or(self.cfg.agent_ttl.as_millis() as u64),
        };
        self.agents.register_agent(&agent).await.map_err(state)?;
        Ok(agent)
    }

    /// Removes agent `id`; false when there was none (or another tenant's).
    pub async fn deregister(&self, who: &Creator, id: &str) -> Result<bool, ApiError> {
        let state = |e: StateError| ApiError::from(eventmesh_runtime::RuntimeError::from(e));
        match self.agents.get_agent(id).await.map_err(state)? {
            Some(a) if who.tenant.is_none() || a.tenant == who.tenant => {
                self.agents.remove_agent(id).await.map_err(state)
            }
            _ => Ok(false),
        }
    }
}
