//! The TCP port's connection threads: each runs a single-threaded async
//! runtime of its own, and each TCP connection is served on one of
//! them, the least loaded when it was accepted, for its whole life. With
//! none (the default on the JetStream log), connections are served on the
//! worker threads.
//!
//! Why: two clients whose connections share a thread hand each other
//! events (a request and its reply, an event on a memory topic and its
//! delivery) without waking another thread. On the worker threads' shared
//! scheduler, every such hand-off could cross cores, and on a host of two
//! CPUs that crossing cost a third of request-reply's CPU (see
//! benchmarks.md). Tasks a connection starts (a consumer's dispatcher, say)
//! run on its thread too, and so does a TLS connection's handshake.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventmesh_core::config::StorageType;
use eventmesh_runtime::metrics::ConnectionThread;
use tokio_util::sync::CancellationToken;

struct Shard {
    handle: tokio::runtime::Handle,
    /// Connections being served on it.
    load: Arc<AtomicUsize>,
}

struct Inner {
    shards: Vec<Shard>,
    stop: CancellationToken,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The connection threads; cheap to clone.
#[derive(Clone)]
pub struct Shards(Arc<Inner>);

/// How long a stopping thread waits for its blocking work.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Shards {
    /// The thread count for the setting `configured` on the log
    /// `backend`: itself; for `0`, one per two CPUs (at least one) on the
    /// standalone log, and none on the JetStream log, whose every publish
    /// goes through the NATS client's tasks on the worker threads (the
    /// connections are served there too).
    pub fn count(configured: usize, backend: StorageType) -> usize {
        match (configured, backend) {
            (0, StorageType::Jetstream) => 0,
            (0, StorageType::Standalone) => {
                std::thread::available_parallelism().map_or(1, |n| n.get().div_ceil(2))
            }
            (n, _) => n,
        }
    }

    /// Starts `n` threads, named `eventmesh-tcp-<i>`; `None` for none.
    pub fn start(n: usize) -> std::io::Result<Option<Shards>> {
        if n == 0 {
            return Ok(None);
        }
        let stop = CancellationToken::new();
        let (mut shards, mut threads) = (Vec::new(), Vec::new());
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            shards.push(Shard {
                handle: rt.handle().clone(),
                load: Arc::default(),
            });
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("eventmesh-tcp-{i}"))
                    .spawn(move || {
                        rt.block_on(stop.cancelled());
                        rt.shutdown_timeout(STOP_WAIT);
                    })?,
            );
        }
        Ok(Some(Shards(Arc::new(Inner {
            shards,
            stop,
            threads: Mutex::new(threads),
        }))))
    }

    /// Runs the future `make` returns on the least loaded thread. `make`
    /// itself runs there, so what it creates (a socket registered with the
    /// thread's reactor) belongs to that thread.
    pub fn spawn<F, Fut>(&self, make: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(i) =
            (0..self.0.shards.len()).min_by_key(|&i| self.0.shards[i].load.load(Ordering::Relaxed))
        else {
            return;
        };
        let shard = &self.0.shards[i];
        shard.load.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        shard.handle.spawn(async move {
            make().await;
            me.0.shards[i].load.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// The threads as the metrics watch them: their runtimes (for their
    /// task counts) and connection counts, in thread order.
    pub fn watched(&self) -> Vec<ConnectionThread> {
        self.0
            .shards
            .iter()
            .map(|s| ConnectionThread {
                runtime: s.handle.clone(),
                connections: Arc::clone(&s.load),
            })
            .collect()
    }

    /// Stops every thread, dropping what still runs on them, and waits for
    /// them to end.
    pub fn stop(&self) {
        self.0.stop.cancel();
        let threads =
            std::mem::take(&mut *self.0.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    #[cfg(test)]
    fn loads(&self) -> Vec<usize> {
        self.0
            .shards
            .iter()
            .map(|s| s.load.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_goes_to_the_least_loaded_thread_and_stays_there() {
        let shards = Shards::start(2).unwrap().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut gates = Vec::new();
        for k in 0..3 {
            let (open, wait) = tokio::sync::oneshot::channel::<()>();
            gates.push(open);
            let tx = tx.clone();
            shards.spawn(move || {
                let name = std::thread::current().name().map(String::from);
                async move {
                    tx.send((k, name.clone())).unwrap();
                    let _ = wait.await;
                    assert_eq!(std::thread::current().name().map(String::from), name);
                    tx.send((k, None)).unwrap();
                }
            });
        }
        let mut on = std::collections::BTreeMap::new();
        for _ in 0..3 {
            let (k, name) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            on.insert(k, name.unwrap());
        }
        assert_eq!(on[&0], "eventmesh-tcp-0");
        assert_eq!(on[&1], "eventmesh-tcp-1");
        assert_eq!(on[&2], "eventmesh-tcp-0");
        assert_eq!(shards.loads(), [2, 1]);
        gates.remove(0).send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), (0, None));
        // The count drops once the future is done.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while shards.loads() != [1, 1] {
            assert!(std::time::Instant::now() < deadline, "{:?}", shards.loads());
            std::thread::yield_now();
        }
        // Stopping drops what still waits, and ends the threads.
        shards.stop();
        assert!(shards.0.threads.lock().unwrap().is_empty());
        drop(gates);
    }

    #[test]
    fn zero_means_one_thread_per_two_cpus_on_the_standalone_log_and_none_on_jetstream() {
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(Shards::count(0, StorageType::Standalone), cpus.div_ceil(2));
        assert_eq!(Shards::count(0, StorageType::Jetstream), 0);
        assert_eq!(Shards::count(3, StorageType::Jetstream), 3);
        assert!(Shards::start(0).unwrap().is_none());
    }
}
