//! Tasks (A2A-style long-running requests), kept in the meta store under
//! `/em/tasks/<id>` as JSON.
//!
//! Consistency rules: creation is first-write-wins (`put_if_absent`; a
//! duplicate id returns `None` and the caller picks a fresh id), and every
//! change is a compare-and-swap from the exact value read, which also bumps
//! the task's `version`: a writer whose expected state is stale, or who
//! loses the race to a concurrent writer, is rejected and never overwrites
//! ([`TaskStore::update`] reads again and retries; [`TaskStore::update_status`]
//! gives up). A terminal task (completed, failed, canceled, rejected) is
//! never changed again. Meta failures surface as [`StateError::Meta`],
//! never as `None`.

use std::sync::Arc;

use bytes::Bytes;
use eventmesh_meta::MetaStore;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StateError};

pub const TASKS_PREFIX: &str = "/em/tasks/";

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
    AuthRequired,
}

impl TaskState {
    /// Completed, failed, canceled or rejected: final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub state: TaskState,
    /// The principal that created it, with [`Task::tenant`] its creator
    /// (stored as `owner`, the field's name in earlier versions).
    #[serde(rename = "owner")]
    pub principal: String,
    pub payload: serde_json::Value,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Bumped by every write after the creation.
    #[serde(default)]
    pub version: u64,
    /// The agent working on it (A2A), empty for other tasks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// The tenant that created it, when the gate knows tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The sequence number of the last update from its agent applied; an
    /// update at or below it is a repeat.
    #[serde(default)]
    pub seq: u64,
    /// The secret the agent's updates must carry.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

/// What [`TaskStore::update`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Updated {
    /// The change was written; the task as stored now.
    Written(Task),
    /// The change asked for nothing, or the task is terminal: the task as
    /// read, unchanged.
    Unchanged(Task),
    /// No task with this id.
    Absent,
}

/// Rounds of read and compare-and-swap [`TaskStore::update`] tries before
/// reporting contention.
const UPDATE_ATTEMPTS: usize = 16;

impl Task {
    /// A new task at `state`, created and updated at `now_ms`, version 0,
    /// with no agent, tenant or token.
    pub fn new(
        id: impl Into<String>,
        state: TaskState,
        principal: impl Into<String>,
        payload: serde_json::Value,
        now_ms: u64,
    ) -> Task {
        Task {
            id: id.into(),
            state,
            principal: principal.into(),
            payload,
            created_ms: now_ms,
            updated_ms: now_ms,
            version: 0,
            agent: String::new(),
            tenant: None,
            seq: 0,
            token: String::new(),
        }
    }

    pub fn key(&self) -> String {
        task_key(&self.id)
    }
}

fn task_key(id: &str) -> String {
    format!("{TASKS_PREFIX}{id}")
}

fn encode(key: &str, task: &Task) -> Result<Bytes> {
    serde_json::to_vec(task)
        .map(Bytes::from)
        .map_err(|e| StateError::Corrupt {
            key: key.to_string(),
            cause: e.to_string(),
        })
}

fn decode(key: &str, value: &[u8]) -> Result<Task> {
    serde_json::from_slice(value).map_err(|e| StateError::Corrupt {
        key: key.to_string(),
        cause: e.to_string(),
    })
}

/// Meta-backed task store.
#[derive(Clone)]
pub struct TaskStore {
    meta: Arc<dyn MetaStore>,
}

impl TaskStore {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        TaskStore { meta }
    }

    /// Creates a task, first write wins: `Some(task)` when written, `None`
    /// when a task with this id already exists (left unchanged).
    pub async fn create(&self, task: &Task) -> Result<Option<Task>> {
        let key = task.key();
        let written = self.meta.put_if_absent(&key, encode(&key, task)?).await?;
        Ok(written.then(|| task.clone()))
    }

    /// Moves task `id` from `expected` to `new`, stamping `updated_ms`.
    /// Returns the updated task, or `None` when the task is absent, is not in
    /// `expected`, or was changed by a concurrent writer between the read and
    /// the write (the compare-and-swap lost). Nothing is written then; the
    /// caller re-reads.
    pub async fn update_status(
        &self,
        id: &str,
        expected: TaskState,
        new: TaskState,
        now_ms: u64,
    ) -> Result<Option<Task>> {
        let key = task_key(id);
        let Some(old) = self.meta.get(&key).await? else {
            return Ok(None);
        };
        let mut task = decode(&key, &old.value)?;
        if task.state != expected {
            return Ok(None);
        }
        task.state = new;
        task.updated_ms = now_ms;
        task.version += 1;
        let swapped = self
            .meta
            .compare_and_swap(&key, Some(&old.value), encode(&key, &task)?)
            .await?;
        if !swapped {
            tracing::debug!(task = id, ?expected, ?new, "task status CAS lost");
        }
        Ok(swapped.then_some(task))
    }

    /// Changes task `id` with `change`, which edits the task read and says
    /// whether it changed anything; the write is a compare-and-swap from
    /// the value read, retried from a fresh read when another writer won.
    /// A terminal task is never passed to `change`, and a change may not
    /// move a task out of a terminal state. `now_ms` stamps `updated_ms`.
    pub async fn update<F>(&self, id: &str, now_ms: u64, change: F) -> Result<Updated>
    where
        F: FnMut(&mut Task) -> bool,
    {
        self.write(id, now_ms, false, change).await
    }

    /// Changes the payload of task `id`, terminal or not, with `change`,
    /// which edits it and says whether it changed anything; the rest of the
    /// task stays as read. A compare-and-swap like [`TaskStore::update`].
    pub async fn update_payload<F>(&self, id: &str, now_ms: u64, mut change: F) -> Result<Updated>
    where
        F: FnMut(&mut serde_json::Value) -> bool,
    {
        self.write(id, now_ms, true, |task| change(&mut task.payload))
            .await
    }

    /// The compare-and-swap loop of the updates; `payload_only` lets a
    /// terminal task through (the caller changes its payload only).
    async fn write<F>(
        &self,
        id: &str,
        now_ms: u64,
        payload_only: bool,
        mut change: F,
    ) -> Result<Updated>
    where
        F: FnMut(&mut Task) -> bool,
    {
        let key = task_key(id);
        for _ in 0..UPDATE_ATTEMPTS {
            let Some(old) = self.meta.get(&key).await? else {
                return Ok(Updated::Absent);
            };
            let read = decode(&key, &old.value)?;
            if read.state.is_terminal() && !payload_only {
                return Ok(Updated::Unchanged(read));
            }
            let mut task = read.clone();
            if !change(&mut task) {
                return Ok(Updated::Unchanged(read));
            }
            task.version = read.version + 1;
            task.updated_ms = now_ms;
            if self
                .meta
                .compare_and_swap(&key, Some(&old.value), encode(&key, &task)?)
                .await?
            {
                return Ok(Updated::Written(task));
            }
            tracing::debug!(task = id, "task CAS lost; reading again");
        }
        Err(StateError::Io(format!(
            "task {id}: {UPDATE_ATTEMPTS} concurrent writers in a row won the compare-and-swap"
        )))
    }

    /// The changes of every task from now on: the store's revision now
    /// (nothing changed after it is missed), to pass to
    /// [`TaskStore::watch`].
    pub async fn revision(&self) -> Result<u64> {
        // A prefix nothing is written under: the read costs nothing and
        // still says the revision.
        let (_, revision) = self.meta.snapshot_prefix("/em/none/").await?;
        Ok(revision)
    }

    /// Every change of a task after `revision`, in order (puts carry the
    /// task as written; read them with [`TaskStore::decode_entry`]).
    pub async fn watch(&self, revision: u64) -> Result<eventmesh_meta::WatchStream> {
        Ok(self.meta.watch_prefix(TASKS_PREFIX, revision).await?)
    }

    /// The task id of a key under [`TASKS_PREFIX`].
    pub fn id_of(key: &str) -> Option<&str> {
        key.strip_prefix(TASKS_PREFIX)
    }

    /// A task as [`TaskStore::watch`] shows it written.
    pub fn decode_entry(key: &str, value: &[u8]) -> Result<Task> {
        decode(key, value)
    }

    /// Up to `limit` tasks whose ids sort after `after` (from the first
    /// when `None`), sorted by id: one page of a walk through every task.
    pub async fn page(&self, after: Option<&str>, limit: usize) -> Result<Vec<Task>> {
        let after = after.map(task_key);
        self.meta
            .get_page(TASKS_PREFIX, after.as_deref(), limit)
            .await?
            .iter()
            .map(|kv| decode(&kv.key, &kv.value))
            .collect()
    }

    /// Every task, sorted by key.
    pub async fn list(&self) -> Result<Vec<Task>> {
        let mut out = Vec::new();
        for kv in self.meta.get_prefix(TASKS_PREFIX).await? {
            out.push(decode(&kv.key, &kv.value)?);
        }
        Ok(out)
    }

    /// Removes a task; true when it existed.
    pub async fn remove(&self, id: &str) -> Result<bool> {
        Ok(self.meta.delete(&task_key(id)).await?)
    }

    /// One task.
    pub async fn get(&self, id: &str) -> Result<Option<Task>> {
        let key = task_key(id);
        match self.meta.get(&key).await? {
            Some(kv) => decode(&key, &kv.value).map(Some),
            None => Ok(None),
        }
    }

    /// Every task in `state`, sorted by key.
    pub async fn by_state(&self, state: TaskState) -> Result<Vec<Task>> {
        let mut out = Vec::new();
        for kv in self.meta.get_prefix(TASKS_PREFIX).await? {
            let task = decode(&kv.key, &kv.value)?;
            if task.state == state {
                out.push(task);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use eventmesh_meta::fault::FaultyMetaStore;
    use eventmesh_meta::memory::InMemoryMetaStore;
    use eventmesh_meta::EmbeddedMetaStore;
    use eventmesh_storage::localdb::LocalDb;

    fn task(id: &str, principal: &str) -> Task {
        Task::new(
            id,
            TaskState::Submitted,
            principal,
            serde_json::json!({ "text": format!("do {id}") }),
            10,
        )
    }

    async fn check_create_and_stale_update(meta: Arc<dyn MetaStore>) {
        let store = TaskStore::new(meta);
        let t = task("t1", "node-a");
        assert_eq!(store.create(&t).await.unwrap(), Some(t.clone()));
        let dup = task("t1", "node-b");
        assert_eq!(store.create(&dup).await.unwrap(), None, "duplicate id");
        assert_eq!(store.get("t1").await.unwrap(), Some(t.clone()));

        // Stale writer: expects a state the task is not in.
        let stale = store
            .update_status("t1", TaskState::Working, TaskState::Completed, 20)
            .await
            .unwrap();
        assert_eq!(stale, None);
        assert_eq!(store.get("t1").await.unwrap(), Some(t.clone()), "unchanged");

        let working = store
            .update_status("t1", TaskState::Submitted, TaskState::Working, 30)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(working.state, TaskState::Working);
        assert_eq!((working.created_ms, working.updated_ms), (10, 30));
        assert_eq!(working.version, 1);
        assert_eq!(store.get("t1").await.unwrap(), Some(working));

        let absent = store
            .update_status("nope", TaskState::Submitted, TaskState::Working, 40)
            .await
            .unwrap();
        assert_eq!(absent, None);
        assert_eq!(store.get("nope").await.unwrap(), None);
    }

    async fn check_concurrent_update_has_one_winner(meta: Arc<dyn MetaStore>) {
        // Every call waits a little first, so the two joined callers both
        // read before either writes and one of them loses the CAS.
        let faulty = FaultyMetaStore::new(meta);
        faulty.delay(Duration::from_millis(5));
        let store = TaskStore::new(Arc::new(faulty));
        store.create(&task("t2", "node-a")).await.unwrap().unwrap();
        let (a, b) = tokio::join!(
            store.update_status("t2", TaskState::Submitted, TaskState::Completed, 50),
            store.update_status("t2", TaskState::Submitted, TaskState::Canceled, 60),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let winner = match (a, b) {
            (Some(w), None) | (None, Some(w)) => w,
            other => panic!("expected exactly one winner, got {other:?}"),
        };
        assert_eq!(store.get("t2").await.unwrap(), Some(winner));
    }

    async fn check_by_state(meta: Arc<dyn MetaStore>) {
        let store = TaskStore::new(meta);
        for id in ["a", "b", "c"] {
            store.create(&task(id, "n")).await.unwrap().unwrap();
        }
        store
            .update_status("b", TaskState::Submitted, TaskState::InputRequired, 5)
            .await
            .unwrap()
            .unwrap();
        let ids = |v: Vec<Task>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.by_state(TaskState::Submitted).await.unwrap()),
            ["a", "c"]
        );
        assert_eq!(
            ids(store.by_state(TaskState::InputRequired).await.unwrap()),
            ["b"]
        );
        assert!(store.by_state(TaskState::Failed).await.unwrap().is_empty());
        // A walk through every task, two at a time.
        assert_eq!(ids(store.page(None, 2).await.unwrap()), ["a", "b"]);
        assert_eq!(ids(store.page(Some("b"), 2).await.unwrap()), ["c"]);
        assert!(store.page(Some("c"), 2).await.unwrap().is_empty());
    }

    fn embedded(dir: &std::path::Path) -> Arc<dyn MetaStore> {
        Arc::new(EmbeddedMetaStore::open(LocalDb::open(dir).unwrap()).unwrap())
    }

    #[tokio::test]
    async fn create_and_stale_update_memory() {
        check_create_and_stale_update(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn create_and_stale_update_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_create_and_stale_update(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn concurrent_update_has_one_winner_memory() {
        check_concurrent_update_has_one_winner(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn concurrent_update_has_one_winner_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_concurrent_update_has_one_winner(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn by_state_memory() {
        check_by_state(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn by_state_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_by_state(embedded(dir.path())).await;
    }

    async fn check_update(meta: Arc<dyn MetaStore>) {
        let faulty = FaultyMetaStore::new(meta);
        let store = TaskStore::new(Arc::new(faulty.clone()));
        store.create(&task("u", "n")).await.unwrap().unwrap();
        assert_eq!(
            store.update("none", 1, |_| true).await.unwrap(),
            Updated::Absent
        );
        let unchanged = store.update("u", 2, |_| false).await.unwrap();
        assert_eq!(unchanged, Updated::Unchanged(task("u", "n")));

        let Updated::Written(w) = store
            .update("u", 3, |t| {
                t.state = TaskState::Working;
                t.seq = 4;
                true
            })
            .await
            .unwrap()
        else {
            panic!("not written");
        };
        assert_eq!(
            (w.state, w.seq, w.version, w.updated_ms),
            (TaskState::Working, 4, 1, 3)
        );

        // Two writers racing: both changes land, one after the other, each
        // on the other's result (the loser reads again).
        faulty.delay(Duration::from_millis(5));
        let (a, b) = tokio::join!(
            store.update("u", 5, |t| {
                t.seq += 1;
                true
            }),
            store.update("u", 6, |t| {
                t.seq += 10;
                true
            }),
        );
        assert!(matches!(a.unwrap(), Updated::Written(_)));
        assert!(matches!(b.unwrap(), Updated::Written(_)));
        faulty.delay(Duration::ZERO);
        let now = store.get("u").await.unwrap().unwrap();
        assert_eq!((now.seq, now.version), (15, 3));

        // Terminal is final.
        store
            .update("u", 7, |t| {
                t.state = TaskState::Completed;
                true
            })
            .await
            .unwrap();
        let mut called = false;
        let after = store
            .update("u", 8, |t| {
                called = true;
                t.state = TaskState::Working;
                true
            })
            .await
            .unwrap();
        assert!(!called, "a terminal task is not offered for change");
        let Updated::Unchanged(t) = after else {
            panic!("terminal task changed: {after:?}")
        };
        assert_eq!((t.state, t.version), (TaskState::Completed, 4));
        // ...but what it carries may still change; its state stays.
        let Updated::Written(p) = store
            .update_payload("u", 9, |p| {
                *p = serde_json::json!({"kept": "after the end"});
                true
            })
            .await
            .unwrap()
        else {
            panic!("payload not written");
        };
        assert_eq!(
            (p.state, p.version, p.updated_ms, &p.payload),
            (
                TaskState::Completed,
                5,
                9,
                &serde_json::json!({"kept": "after the end"})
            )
        );
        assert_eq!(
            store.update_payload("none", 10, |_| true).await.unwrap(),
            Updated::Absent
        );
        let t = store.get("u").await.unwrap().unwrap();
        assert_eq!(store.list().await.unwrap(), vec![t]);
        assert!(store.remove("u").await.unwrap());
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn update_memory() {
        check_update(Arc::new(InMemoryMetaStore::new())).await;
    }

    #[tokio::test]
    async fn update_embedded() {
        let dir = tempfile::tempdir().unwrap();
        check_update(embedded(dir.path())).await;
    }

    #[tokio::test]
    async fn corrupt_entry_is_reported() {
        let meta: Arc<dyn MetaStore> = Arc::new(InMemoryMetaStore::new());
        meta.put("/em/tasks/bad", Bytes::from_static(b"[1,2"))
            .await
            .unwrap();
        let store = TaskStore::new(meta);
        let corrupt =
            |e: StateError| matches!(e, StateError::Corrupt { key, .. } if key == "/em/tasks/bad");
        assert!(corrupt(store.get("bad").await.unwrap_err()));
        assert!(corrupt(
            store
                .update_status("bad", TaskState::Submitted, TaskState::Working, 1)
                .await
                .unwrap_err()
        ));
        assert!(corrupt(
            store.by_state(TaskState::Working).await.unwrap_err()
        ));
    }

    #[tokio::test]
    async fn meta_failures_surface() {
        let meta = FaultyMetaStore::new(Arc::new(InMemoryMetaStore::new()));
        let store = TaskStore::new(Arc::new(meta.clone()));
        store.create(&task("t", "n")).await.unwrap().unwrap();
        meta.partition();
        let meta_err = |e: StateError| matches!(e, StateError::Meta(_));
        assert!(meta_err(store.create(&task("u", "n")).await.unwrap_err()));
        assert!(meta_err(
            store
                .update_status("t", TaskState::Submitted, TaskState::Working, 1)
                .await
                .unwrap_err()
        ));
        assert!(meta_err(store.get("t").await.unwrap_err()));
        assert!(meta_err(
            store.by_state(TaskState::Submitted).await.unwrap_err()
        ));
    }

    #[test]
    fn json_shape_is_stable() {
        let mut t = task("t", "node-a");
        t.state = TaskState::InputRequired;
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["state"], "INPUT_REQUIRED");
        assert_eq!(v["createdMs"], 10);
        assert_eq!(v["updatedMs"], 10);
        assert_eq!(v["payload"]["text"], "do t");
    }
}
