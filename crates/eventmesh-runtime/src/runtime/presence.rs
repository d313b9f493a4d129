//! Members that leave: a pulling client (poll, SSE, WebSocket, TCP) that
//! has neither polled nor held a stream for the member timeout
//! (`eventmesh.delivery.member.timeout.ms`) leaves the rotation of every
//! group it is in. What it had waiting in its mailbox and what it took
//! without acknowledging go to the other members at once (as when a
//! stream closes, see [`Runtime::release`]), and new events go to the
//! others while any is there. Its next poll or stream puts it back.
//!
//! With partition ownership a client is served where it polls (its home):
//! an owner holding its deliveries counts it there while it is bound to
//! another live instance. Its home drops that binding when the client goes
//! away there, and the binding ends with the home's lease when the home
//! dies; from then on the owners take the client out of rotation too.
//!
//! Invariants: webhook members never leave this way; a group whose every
//! member is away keeps its events in the log (and each member's mailbox
//! up to its cap), as before; a client is released once per absence.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::Runtime;

/// Looks for members away past the timeout, a few times per timeout (at
/// most every second, at least every 100 ms).
pub(super) async fn sweep_members(rt: Weak<Runtime>, timeout: Duration) {
    let every = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(rt) = rt.upgrade() else { return };
        if rt.lifecycle.check_running().is_err() {
            return;
        }
        rt.sweep_members(timeout).await;
    }
}

impl Runtime {
    async fn sweep_members(&self, timeout: Duration) {
        let now = Instant::now();
        for (client, mailbox) in self.clients.pull_mailboxes() {
            let elsewhere = self
                .cluster
                .as_ref()
                .is_some_and(|c| c.home_of(&client).is_some());
            if elsewhere {
                // Its home instance says whether it is there.
                mailbox.set_present();
                continue;
            }
            if !mailbox.away_for(timeout, now) || !mailbox.set_idle(eventmesh_core::time::now_ms())
            {
                continue;
            }
            tracing::info!(client = %client, timeout_ms = timeout.as_millis() as u64, "a member was away past the member timeout: its deliveries go to the other members of its groups until it polls again");
            self.release(&client, now, true).await;
            if let Some(cluster) = &self.cluster {
                cluster.unbind(&client).await;
            }
        }
    }
}
