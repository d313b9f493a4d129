//! Time on JetStream: a partition's offset at a time, counts of a range,
//! and the held-back events of scheduled delivery (see [`crate::held`]),
//! as the [`EventLog`](eventmesh_storage::EventLog) methods call them.

use crate::names::Names;
use crate::{direct, held, JetStreamLog, Result};

impl JetStreamLog {
    /// What the held-back store of `topic` works with; the topic must
    /// exist.
    async fn held_ctx<'a>(&'a self, topic: &str, names: &'a Names) -> Result<held::Ctx<'a>> {
        self.check_open()?;
        self.followed(topic).await?;
        Ok(held::Ctx {
            client: &self.writer.client,
            js: &self.writer.js,
            names,
            replicas: self.replicas,
            timeout: self.timeout,
        })
    }

    /// By the stream's own time lookup (a direct get from a start time):
    /// one request, whatever the stream holds. The time is the one the
    /// stream stored the message at, a moment after the runtime accepted it.
    pub(crate) async fn time_offset(&self, topic: &str, partition: u32, at_ms: u64) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        self.first_offset(&t, partition, direct::Lookup::At(at_ms))
            .await
    }

    pub(crate) async fn hold(
        &self,
        topic: &str,
        entries: Vec<eventmesh_storage::Scheduled>,
    ) -> Result<()> {
        let names = self.names(topic);
        let cx = self.held_ctx(topic, &names).await?;
        let t = self.followed(topic).await?;
        for e in &entries {
            t.check(e.partition)?;
        }
        self.held.schedule(&cx, topic, entries).await
    }

    pub(crate) async fn held_due(
        &self,
        topic: &str,
        partition: u32,
        until_ms: u64,
        max: usize,
    ) -> Result<Vec<eventmesh_storage::Scheduled>> {
        let names = self.names(topic);
        let cx = self.held_ctx(topic, &names).await?;
        self.followed(topic).await?.check(partition)?;
        self.held.due(&cx, topic, partition, until_ms, max).await
    }

    pub(crate) async fn unhold(
        &self,
        topic: &str,
        partition: u32,
        entries: &[eventmesh_storage::Scheduled],
    ) -> Result<usize> {
        let names = self.names(topic);
        let cx = self.held_ctx(topic, &names).await?;
        self.held.unschedule(&cx, topic, partition, entries).await
    }

    pub(crate) async fn held_summary(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<eventmesh_storage::ScheduledSummary> {
        let names = self.names(topic);
        let cx = self.held_ctx(topic, &names).await?;
        self.followed(topic).await?.check(partition)?;
        self.held.summary(&cx, topic, partition).await
    }

    /// Offsets are stream sequences, shared by every partition of the
    /// topic: the stream counts those of the partition's subject.
    pub(crate) async fn count_of(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        until: u64,
    ) -> Result<u64> {
        let t = self.followed(topic).await?;
        t.check(partition)?;
        if from >= until {
            return Ok(0);
        }
        direct::count(
            &self.writer.client,
            &t.names.stream,
            &t.names.subject(partition),
            from + 1,
            until,
            self.timeout,
        )
        .await
    }
}
