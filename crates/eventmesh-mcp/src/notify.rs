//! Telling open sessions that their tool list changed
//! (`notifications/tools/list_changed`) when agents register, go or change
//! their cards, on any instance.
//!
//! An agent leaves the registry when its heartbeat goes stale, which
//! changes no key and so shows in no watch of the meta store (while every
//! heartbeat does, though it changes no tool). So one task looks at the
//! registry every [`crate::TOOLS_CHECK`] while sessions are open, and stops
//! when the last one closes: one registry read per period whatever the
//! number of sessions. Only when the registry changed does it work out,
//! for each session, the agent tools that session's caller sees; a
//! session is told only when its own list changed, so nobody learns of
//! another tenant's agents.
//!
//! Invariants: a session is remembered weakly (a closed session is
//! forgotten); what a session was last shown (listed, or told about) is
//! kept with it, so one change is told once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use eventmesh_state::Agent;
use rmcp::{Peer, RoleServer};

use crate::agents;
use crate::{Mcp, RequestCaller, SEND_WAIT, TOOLS_CHECK};

/// One open session, as the watcher sees it.
pub(crate) struct Watched {
    /// Who opened it (its `initialize` request's caller).
    caller: RequestCaller,
    peer: Peer<RoleServer>,
    /// The agent tools it was last shown.
    shown: Mutex<Vec<String>>,
}

impl Watched {
    /// Remembers what the session was shown now.
    pub(crate) fn shown(&self, names: Vec<String>) {
        *self.shown.lock().expect("shown lock") = names;
    }

    /// Replaces what it was shown; true when that changed.
    fn changed_to(&self, names: Vec<String>) -> bool {
        let mut shown = self.shown.lock().expect("shown lock");
        let changed = *shown != names;
        *shown = names;
        changed
    }
}

/// The open sessions.
#[derive(Default)]
pub(crate) struct Sessions {
    open: Mutex<Vec<Weak<Watched>>>,
    /// The watcher runs.
    watching: AtomicBool,
    /// The live agents as the watcher last read them, and when.
    last_read: Mutex<Option<(Instant, Arc<Vec<Agent>>)>>,
}

impl Sessions {
    /// Starts watching for a new session (and the watcher, if it is not
    /// running).
    pub(crate) fn open(
        &self,
        mcp: &Arc<Mcp>,
        caller: RequestCaller,
        peer: Peer<RoleServer>,
    ) -> Arc<Watched> {
        let w = Arc::new(Watched {
            caller,
            peer,
            shown: Mutex::new(Vec::new()),
        });
        {
            let mut open = self.open.lock().expect("sessions lock");
            open.retain(|s| s.strong_count() > 0);
            open.push(Arc::downgrade(&w));
        }
        if mcp.a2a.is_some() && !self.watching.swap(true, Ordering::AcqRel) {
            tokio::spawn(watch(Arc::downgrade(mcp)));
        }
        w
    }

    /// The live agents as the watcher read them within the last two
    /// periods; `None` when it has not (it is not running, or the registry
    /// could not be read). A tool call finds its tool there and reads the
    /// registry itself only when it does not.
    pub(crate) fn recent_agents(&self) -> Option<Arc<Vec<Agent>>> {
        let last = self.last_read.lock().expect("last read lock");
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < 2 * TOOLS_CHECK)
            .map(|(_, agents)| agents.clone())
    }

    fn remember(&self, agents: Arc<Vec<Agent>>) {
        *self.last_read.lock().expect("last read lock") = Some((Instant::now(), agents));
    }

    /// The sessions still open.
    fn live(&self) -> Vec<Arc<Watched>> {
        let mut open = self.open.lock().expect("sessions lock");
        open.retain(|s| s.strong_count() > 0);
        open.iter().filter_map(Weak::upgrade).collect()
    }

    /// Stops the watcher when no session is open; false when one opened
    /// meanwhile (the watcher goes on).
    fn stop_if_idle(&self) -> bool {
        let open = self.open.lock().expect("sessions lock");
        if open.iter().any(|s| s.strong_count() > 0) {
            return false;
        }
        self.watching.store(false, Ordering::Release);
        true
    }
}

/// What of the registry makes the tools: each agent's id, tenant and card.
fn fingerprint(agents: &[Agent]) -> Vec<(String, Option<String>, String)> {
    let mut f: Vec<_> = agents
        .iter()
        .map(|a| {
            let card = a.card.as_ref().map(|c| c.to_string()).unwrap_or_default();
            (a.id.clone(), a.tenant.clone(), card)
        })
        .collect();
    f.sort();
    f
}

async fn watch(mcp: Weak<Mcp>) {
    let mut last = None;
    loop {
        let shutdown = match mcp.upgrade() {
            Some(m) => m.api.shutdown().clone(),
            None => return,
        };
        tokio::select! {
            _ = tokio::time::sleep(TOOLS_CHECK) => {}
            _ = shutdown.cancelled() => return,
        }
        let Some(mcp) = mcp.upgrade() else { return };
        let sessions = mcp.sessions.live();
        if sessions.is_empty() {
            if mcp.sessions.stop_if_idle() {
                return;
            }
            continue;
        }
        let Some(gw) = &mcp.a2a else { return };
        let agents = match gw.live_agents().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "the agent registry could not be read; trying again");
                continue;
            }
        };
        let agents = Arc::new(agents);
        mcp.sessions.remember(agents.clone());
        let now = fingerprint(&agents);
        if last.as_ref() == Some(&now) {
            continue;
        }
        last = Some(now);
        for s in sessions {
            let seen = agents::visible_of(&mcp.api, &agents, &s.caller);
            let names = agents::tools_of(&seen)
                .into_iter()
                .map(|t| t.tool.name.to_string())
                .collect();
            if s.changed_to(names) {
                // A session that does not read its stream holds nobody up.
                let told = tokio::time::timeout(SEND_WAIT, s.peer.notify_tool_list_changed());
                match told.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "a tool list change was not told"),
                    Err(_) => tracing::debug!(
                        "a tool list change was not told: the session is not reading"
                    ),
                }
            }
        }
    }
}
