//! The soak's view of the server's admin port: its resources from
//! `/metrics`, each group's lag and the events in the log from
//! `/admin/offsets`, and creating the soak's topic.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::ADMIN_TIMEOUT;
use crate::stats;

/// What the soak reads from the admin port.
pub(super) struct Admin {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// The server's resources, from `/metrics`.
#[derive(Debug, Default)]
pub(super) struct Process {
    pub(super) rss: Option<f64>,
    pub(super) fds: Option<f64>,
    pub(super) tasks: Option<f64>,
    /// `eventmesh_storage_memory_bytes` summed over its kinds; `None` when
    /// the server has no local store.
    pub(super) storage: Option<f64>,
}

impl Process {
    fn parse(text: &str) -> Process {
        Process {
            rss: metric(text, "process_resident_memory_bytes"),
            fds: metric(text, "process_open_fds"),
            tasks: metric(text, "eventmesh_tasks"),
            storage: labelled_sum(text, "eventmesh_storage_memory_bytes"),
        }
    }

    /// The first series the server did not report.
    pub(super) fn missing(&self) -> Option<&'static str> {
        [
            (self.rss, "process_resident_memory_bytes"),
            (self.fds, "process_open_fds"),
            (self.tasks, "eventmesh_tasks"),
        ]
        .into_iter()
        .find_map(|(v, name)| v.is_none().then_some(name))
    }
}

/// The sum of every labelled series of `name` in Prometheus text; `None`
/// when there is none.
fn labelled_sum(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (_, value) = rest.split_once("} ")?;
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .fold(None, |sum, v| Some(sum.unwrap_or(0.0) + v))
}

/// The value of the unlabelled series `name` in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

#[derive(Deserialize)]
struct Offset {
    consumer: String,
    partition: u32,
    end: u64,
    lag: u64,
}

/// What `/admin/offsets` says of the soak's topic.
#[derive(Debug, PartialEq)]
pub(super) struct Offsets {
    /// Lag per consumer, summed over partitions, for the consumers named
    /// `<run>-<group>`, keyed by the group's own name.
    pub(super) lag: BTreeMap<String, u64>,
    /// Events in the log: the partitions' end offsets, summed.
    pub(super) stored: u64,
}

impl Offsets {
    fn of(offsets: &[Offset], run: &str) -> Offsets {
        let mut lag = BTreeMap::new();
        let mut ends = BTreeMap::new();
        for o in offsets {
            let end = ends.entry(o.partition).or_insert(0);
            *end = o.end.max(*end);
            let Some(group) = o
                .consumer
                .strip_prefix(run)
                .and_then(|g| g.strip_prefix('-'))
            else {
                continue;
            };
            *lag.entry(group.to_owned()).or_default() += o.lag;
        }
        Offsets {
            lag,
            stored: ends.values().sum(),
        }
    }
}

impl Admin {
    pub(super) fn new(base: &str, token: Option<String>) -> Result<Admin> {
        Ok(Admin {
            http: stats::client(4, ADMIN_TIMEOUT)?,
            base: base.to_owned(),
            token,
        })
    }

    fn request(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<String> {
        let mut url = stats::endpoint(&self.base, path)?;
        url.query_pairs_mut().extend_pairs(query);
        let resp = self
            .request(self.http.get(url.clone()))
            .send()
            .await
            .with_context(|| format!("cannot reach the admin port at {url}"))?;
        let status = resp.status();
        let body = resp.text().await?;
        if status != StatusCode::OK {
            bail!("{url} answered {status}: {body}");
        }
        Ok(body)
    }

    pub(super) async fn process(&self) -> Result<Process> {
        Ok(Process::parse(&self.get("metrics", &[]).await?))
    }

    pub(super) async fn offsets(&self, topic: &str, run: &str) -> Result<Offsets> {
        let body = self.get("admin/offsets", &[("topic", topic)]).await?;
        let offsets: Vec<Offset> = serde_json::from_str(&body).context("reading /admin/offsets")?;
        Ok(Offsets::of(&offsets, run))
    }

    /// Creates the topic (one that exists already is fine).
    pub(super) async fn create_topic(&self, topic: &str) -> Result<()> {
        let url = stats::endpoint(&self.base, "admin/topics")?;
        let resp = self
            .request(self.http.post(url.clone()).json(&json!({ "name": topic })))
            .send()
            .await
            .with_context(|| format!("cannot reach the admin port at {url}"))?;
        match resp.status() {
            StatusCode::CREATED | StatusCode::CONFLICT => Ok(()),
            status => bail!("{url} answered {status}: {}", resp.text().await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_and_offsets_are_read() {
        let text = "# HELP eventmesh_tasks Tasks\n# TYPE eventmesh_tasks gauge\neventmesh_tasks 42\n\
                    eventmesh_tasks_other 7\nprocess_resident_memory_bytes 1.5e8\nprocess_open_fds 31\n\
                    eventmesh_storage_memory_bytes{kind=\"block_cache\"} 4000\n\
                    eventmesh_storage_memory_bytes{kind=\"memtables\"} 1000\n";
        let p = Process::parse(text);
        assert_eq!(
            (p.rss, p.fds, p.tasks, p.storage),
            (Some(1.5e8), Some(31.0), Some(42.0), Some(5000.0))
        );
        assert_eq!(Process::parse("process_open_fds 3\n").storage, None);
        assert_eq!(p.missing(), None);
        assert_eq!(
            Process::parse("process_open_fds 3\n").missing(),
            Some("process_resident_memory_bytes")
        );

        let offsets: Vec<Offset> = serde_json::from_str(
            r#"[{"consumer":"r1-poll","partition":0,"committed":1,"end":3,"lag":2},
                {"consumer":"r1-poll","partition":1,"committed":0,"end":5,"lag":5},
                {"consumer":"other-sse","partition":0,"committed":0,"end":9,"lag":9},
                {"consumer":"r1-sse","partition":0,"committed":9,"end":9,"lag":0}]"#,
        )
        .unwrap();
        // Every consumer's end counts (read a moment apart, they may differ):
        // partition 0 holds 9 events, partition 1 holds 5.
        let o = Offsets::of(&offsets, "r1");
        let lag = BTreeMap::from([("poll".to_owned(), 7), ("sse".to_owned(), 0)]);
        assert_eq!(o, Offsets { lag, stored: 14 });
    }
}
