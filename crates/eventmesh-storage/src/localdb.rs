//! The node's local RocksDB instance.
//!
//! One instance per data directory holds every local column family: `log`
//! (standalone storage), `offsets`, `deliveries` and `meta` (the embedded meta
//! store). Opening fails with `failed to open RocksDB local store at <path>`
//! and the cause when the store is corrupted or locked by another process,
//! and also when the directory holds RocksDB files but no `CURRENT` file: the
//! runtime never starts on a fresh empty store in place of damaged data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBRecoveryMode, Options, DB,
};

use crate::error::{Result, StorageError};

pub const CF_LOG: &str = "log";
pub const CF_OFFSETS: &str = "offsets";
pub const CF_DELIVERIES: &str = "deliveries";
pub const CF_META: &str = "meta";
/// The standalone log's idempotency journal (see `standalone::dedup`).
pub const CF_DEDUP: &str = "dedup";
const ALL_CFS: [&str; 5] = [CF_LOG, CF_OFFSETS, CF_DELIVERIES, CF_META, CF_DEDUP];
/// Ours and RocksDB's `default`, which is unused but always there.
const OPENED_CFS: [&str; 6] = [
    CF_LOG,
    CF_OFFSETS,
    CF_DELIVERIES,
    CF_META,
    CF_DEDUP,
    rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
];

/// How much WAL the store keeps at most (about): two memtables' worth.
fn wal_bound(write_buffer_bytes: usize) -> u64 {
    2 * write_buffer_bytes as u64
}

/// Memtable size of the idempotency journal.
const DEDUP_WRITE_BUFFER: usize = 4 << 20;

/// Log records at least this large keep their body in a blob file.
const MIN_BLOB_BYTES: u64 = 256;

/// The size of the log's base level: its table files hold keys and blob
/// references only (about 10 bytes an event after compression).
const LOG_LEVEL_BASE_BYTES: u64 = 16 << 20;

/// Level-0 files of the log merged at once into the level below.
const LOG_LEVEL0_TRIGGER: i32 = 8;

/// What a partition's record keys in `log` share: tag, topic id, partition.
pub(crate) const LOG_PARTITION_PREFIX: usize = 9;

/// A column family's options before those set in code: for `log`, one
/// that RocksDB's C interface does not reach. A partition's records arrive
/// in key order, interleaved with other partitions' in each memtable; given
/// the prefix of a partition's keys, the memtable inserts each key where
/// that partition's last one went instead of searching its skip list.
fn base_options(cf: &str) -> Options {
    if cf != CF_LOG {
        return Options::default();
    }
    let hint = format!(
        "memtable_insert_with_hint_prefix_extractor=rocksdb.FixedPrefix.{LOG_PARTITION_PREFIX}"
    );
    Options::default()
        .get_options_from_string(&hint)
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the log's memtable inserts go without hints");
            Options::default()
        })
}

/// Tunables of the local store.
#[derive(Debug, Clone)]
pub struct LocalDbOptions {
    /// Memtable size of each column family. RocksDB also waits for this much
    /// free space before it resumes writing after the disk filled up.
    pub write_buffer_bytes: usize,
    /// Capacity of the one block cache every column family shares, which
    /// also holds the table files' index and filter blocks, so reads of a
    /// large backlog cannot grow the process beyond it.
    pub block_cache_bytes: usize,
    /// How many WAL files the store keeps for reuse (each about one
    /// memtable).
    pub wal_reuse_files: usize,
    /// How long the standalone log's idempotency index keeps a key: its
    /// table files are dropped once this old.
    pub dedup_window: std::time::Duration,
}

impl Default for LocalDbOptions {
    fn default() -> Self {
        LocalDbOptions {
            write_buffer_bytes: 64 << 20,
            block_cache_bytes: 64 << 20,
            wal_reuse_files: 2,
            dedup_window: crate::standalone::DEFAULT_DEDUP_WINDOW,
        }
    }
}

/// How long an open waits for a store of this process to close.
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens with `open`, waiting up to [`OWN_LOCK_WAIT`] while the store is
/// still open in this process: the store's own thread (see
/// [`crate::heap`]) holds it for a moment while it looks at it, so the
/// last handle dropped elsewhere may not close it at once.
fn open_retrying_own_lock(
    path: &Path,
    open: impl Fn() -> std::result::Result<DB, rocksdb::Error>,
) -> Result<DB> {
    let until = std::time::Instant::now() + OWN_LOCK_WAIT;
    loop {
        match open() {
            Ok(db) => return Ok(db),
            Err(e)
                if e.to_string().contains("lock hold by current process")
                    && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(open_error(path, e)),
        }
    }
}

/// An open local RocksDB with all column families.
pub struct LocalDb {
    db: DB,
    path: PathBuf,
    cache: Cache,
    /// The free space RocksDB needs to write (and to resume by itself
    /// after the disk filled up): room to flush every memtable.
    needs_free: u64,
    /// How many times the memory of flushed memtables was given back (see
    /// [`crate::heap`]).
    pub(crate) heap_returns: std::sync::atomic::AtomicU64,
}

/// What the store holds in memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Blocks in the shared block cache (at most its capacity, but for
    /// blocks pinned by reads under way).
    pub block_cache: usize,
    /// Active and immutable memtables of every column family.
    pub memtables: usize,
}

impl std::fmt::Debug for LocalDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDb").field("path", &self.path).finish()
    }
}

fn open_error(path: &Path, cause: impl std::fmt::Display) -> StorageError {
    StorageError::Open {
        path: path.to_path_buf(),
        cause: cause.to_string(),
    }
}

/// True when `dir` holds RocksDB data files but no `CURRENT` pointer, which
/// RocksDB would otherwise silently treat as a new database.
fn has_orphaned_files(dir: &Path) -> std::io::Result<bool> {
    if !dir.exists() || dir.join("CURRENT").exists() {
        return Ok(false);
    }
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("MANIFEST-") || name.ends_with(".sst") || name.ends_with(".log") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A piece of store work that could not finish on the blocking pool: it
/// panicked, or the runtime is shutting down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingFailed(pub String);

impl std::fmt::Display for BlockingFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "local store task failed: {}", self.0)
    }
}

impl LocalDb {
    /// Runs `f` with the store on the blocking pool, so that RocksDB's
    /// synchronous reads and writes never hold an async worker: the one way
    /// every user of the local store (log, offsets, deliveries, meta,
    /// connector positions) leaves the async world.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&LocalDb) -> T + Send + 'static,
    ) -> std::result::Result<T, BlockingFailed> {
        let db = self.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| BlockingFailed(e.to_string()))
    }

    /// Opens (creating when absent) the local store at `path` with the
    /// default options.
    pub fn open(path: &Path) -> Result<Arc<Self>> {
        Self::open_with(path, &LocalDbOptions::default())
    }

    /// Opens (creating when absent) the local store at `path`.
    ///
    /// A write that fails for want of space (`ENOSPC` on the WAL or on a
    /// flush) stops RocksDB's writes with a hard error; its file manager
    /// then polls the free space and resumes the database by itself once
    /// `write_buffer_bytes` are free, so no reopen is needed.
    pub fn open_with(path: &Path, options: &LocalDbOptions) -> Result<Arc<Self>> {
        match has_orphaned_files(path) {
            Ok(false) => {}
            Ok(true) => {
                return Err(open_error(
                    path,
                    "the directory holds RocksDB files but no CURRENT file (damaged store); \
                     restore it from a backup or remove the directory",
                ))
            }
            Err(e) => return Err(open_error(path, e)),
        }
        std::fs::create_dir_all(path).map_err(|e| open_error(path, e))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_paranoid_checks(true);
        opts.increase_parallelism(2);
        opts.set_keep_log_file_num(5);
        // Reuse WAL files instead of creating new ones. An fsync of a
        // file that grew also writes its inode and the new extent, more
        // device round trips, each a wake-up that waits for a core when the
        // cores are busy (`docs/benchmarks.md`, "WAL files reused"); a
        // reused file is overwritten in place. RocksDB reuses a file once
        // every column family has flushed what it held, so a new store
        // appends until it has written about two memtables. RocksDB turns
        // recycling off under the two stricter recovery modes, so the one it
        // works with is set here rather than left to its default.
        opts.set_recycle_log_file_num(options.wal_reuse_files);
        opts.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
        // Write table files out to the disk a megabyte at a time as they
        // are built: otherwise a memtable flush leaves tens of megabytes
        // dirty, and the next WAL fsync (one per group commit) waits for
        // the file system to write them all, a stall of hundreds of
        // milliseconds for every publisher.
        opts.set_bytes_per_sync(1 << 20);
        // A WAL file is kept until every column family has flushed what it
        // wrote there. The small ones (offsets, the ledger) fill their
        // memtables slowly, so without a bound the WAL grows to gigabytes
        // behind a busy log, all of it replayed after a crash: past this
        // size the column families holding the oldest WAL are flushed.
        opts.set_max_total_wal_size(wal_bound(options.write_buffer_bytes));
        // The `default` column family is unused, but it is always there and
        // its memtable size also counts in the free space RocksDB waits for
        // after ENOSPC, so it is listed with the same size.
        let cache = Cache::new_lru_cache(options.block_cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        let cfs = OPENED_CFS.iter().map(|name| {
            let mut cf = base_options(name);
            cf.set_compression_type(rocksdb::DBCompressionType::Lz4);
            cf.set_write_buffer_size(options.write_buffer_bytes);
            cf.set_block_based_table_factory(&table);
            if *name == CF_LOG {
                // Events are written once and read in order, so their bodies
                // go to blob files when a memtable is flushed and compaction
                // only moves keys and blob references, instead of rewriting
                // every event at each level. A blob file is deleted once
                // retention has dropped every key pointing into it.
                cf.set_enable_blob_files(true);
                cf.set_min_blob_size(MIN_BLOB_BYTES);
                cf.set_blob_file_size(options.write_buffer_bytes as u64);
                cf.set_blob_compression_type(rocksdb::DBCompressionType::Lz4);
                cf.set_blob_cache(&cache);
                // Its table files hold only keys and blob references, and
                // every memtable spans every partition, so each level-0
                // file overlaps all of the level below. With RocksDB's
                // defaults (level 0 merged after 4 files into a base level
                // of up to 256 MiB) every merge rewrites every key in the
                // store, and the write amplification grows with the store:
                // 7.8 rewrites per key after 3 million events. A small base
                // level lets the levels below form early, so a key is
                // rewritten a bounded number of times, and merging level 0
                // after 8 files halves the merges (`docs/benchmarks-history.md`).
                cf.set_max_bytes_for_level_base(LOG_LEVEL_BASE_BYTES);
                cf.set_target_file_size_base(LOG_LEVEL_BASE_BYTES / 4);
                cf.set_level_zero_file_num_compaction_trigger(LOG_LEVEL0_TRIGGER);
            }
            if *name == CF_DEDUP {
                // Journal entries are written once, in order, and all expire
                // one window after they were written: first in, first out.
                // A table file is dropped whole once it is a window old
                // (every entry in it expired by then), and nothing is ever
                // compacted, so the journal costs its writes and one flush,
                // no more. It is read in full at open and by a key (rare:
                // a retried key) otherwise.
                let mut fifo = rocksdb::FifoCompactOptions::default();
                fifo.set_max_table_files_size(u64::MAX);
                cf.set_compaction_style(rocksdb::DBCompactionStyle::Fifo);
                cf.set_fifo_compaction_options(&fifo);
                cf.set_ttl(options.dedup_window.as_secs().max(1) + 1);
                // Its files pile up in level 0 by design: never a reason to
                // slow or stop writes.
                cf.set_level_zero_slowdown_writes_trigger(1 << 30);
                cf.set_level_zero_stop_writes_trigger(1 << 30);
                cf.set_write_buffer_size(DEDUP_WRITE_BUFFER.min(options.write_buffer_bytes));
                cf.set_compression_type(rocksdb::DBCompressionType::None);
                let mut dedup_table = BlockBasedOptions::default();
                dedup_table.set_block_cache(&cache);
                dedup_table.set_cache_index_and_filter_blocks(true);
                dedup_table.set_pin_l0_filter_and_index_blocks_in_cache(true);
                dedup_table.set_bloom_filter(10.0, false);
                cf.set_block_based_table_factory(&dedup_table);
            }
            (*name, cf)
        });
        let cfs: Vec<(&str, Options)> = cfs.collect();
        let db = open_retrying_own_lock(path, || {
            let descriptors = cfs
                .iter()
                .map(|(name, cf)| ColumnFamilyDescriptor::new(*name, cf.clone()));
            DB::open_cf_descriptors(&opts, path, descriptors)
        })?;
        let memtables = OPENED_CFS.iter().map(|name| {
            if *name == CF_DEDUP {
                DEDUP_WRITE_BUFFER.min(options.write_buffer_bytes)
            } else {
                options.write_buffer_bytes
            }
        });
        let db = Arc::new(LocalDb {
            db,
            path: path.to_path_buf(),
            cache,
            needs_free: memtables.map(|b| b as u64).sum(),
            heap_returns: Default::default(),
        });
        crate::heap::watch(Arc::downgrade(&db));
        Ok(db)
    }

    /// How many times the memory of flushed memtables was given back to
    /// the system.
    pub fn heap_returns(&self) -> u64 {
        self.heap_returns.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The sizes the memory policy of [`crate::heap`] looks at.
    pub(crate) fn heap_sizes(&self) -> crate::heap::Sizes {
        let files = OPENED_CFS
            .iter()
            .map(|name| {
                let cf = self.cf(name);
                [
                    "rocksdb.total-sst-files-size",
                    "rocksdb.total-blob-file-size",
                ]
                .iter()
                .filter_map(|p| self.db.property_int_value_cf(cf, *p).ok().flatten())
                .sum::<u64>()
            })
            .sum();
        crate::heap::Sizes {
            memtables: self.memory_usage().memtables as u64,
            files,
        }
    }

    /// Whether the file system holding the store has the room RocksDB
    /// needs to write: `Err` says how much is free against how much is
    /// needed (or why that cannot be read).
    pub fn check_free_space(&self) -> std::result::Result<(), String> {
        let st = rustix::fs::statvfs(&self.path)
            .map_err(|e| format!("cannot read the free space of {}: {e}", self.path.display()))?;
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        if free < self.needs_free {
            return Err(format!(
                "{free} bytes free on the file system of {}, writes need {}",
                self.path.display(),
                self.needs_free
            ));
        }
        Ok(())
    }

    /// The store's memory: the block cache and the memtables.
    pub fn memory_usage(&self) -> MemoryUsage {
        let memtables = OPENED_CFS
            .iter()
            .filter_map(|name| self.db.cf_handle(name))
            .filter_map(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.cur-size-all-mem-tables")
                    .ok()
                    .flatten()
            })
            .sum::<u64>();
        MemoryUsage {
            block_cache: self.cache.get_usage(),
            memtables: memtables as usize,
        }
    }

    /// The store's disk space by kind, in bytes: `wal` (the write-ahead
    /// log, with the files kept for reuse), `log_tables` and `log_blobs`
    /// (the event log's keys and its events' bodies), `dedup_journal` (the
    /// idempotency keys of the last window or two) and `other_tables`
    /// (offsets, deliveries, metadata).
    pub fn disk_usage(&self) -> Vec<(&'static str, u64)> {
        let int = |cf: &ColumnFamily, property: &str| {
            self.db
                .property_int_value_cf(cf, property)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let tables = |name: &str| int(self.cf(name), "rocksdb.total-sst-files-size");
        let other = OPENED_CFS
            .iter()
            .filter(|name| **name != CF_LOG && **name != CF_DEDUP)
            .map(|name| tables(name))
            .sum();
        let wal = std::fs::read_dir(&self.path)
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        vec![
            ("wal", wal),
            ("log_tables", tables(CF_LOG)),
            (
                "log_blobs",
                int(self.cf(CF_LOG), "rocksdb.total-blob-file-size"),
            ),
            ("dedup_journal", tables(CF_DEDUP)),
            ("other_tables", other),
        ]
    }

    /// The underlying database, for backend modules only.
    pub fn db(&self) -> &DB {
        &self.db
    }

    /// A column family handle; the names above always exist.
    pub fn cf(&self, name: &str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column families are created at open")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the WAL and flushes every memtable; called on graceful
    /// shutdown, and by the store's own thread once it is quiet.
    pub fn flush(&self) -> Result<()> {
        self.db.flush_wal(true)?;
        for name in ALL_CFS {
            self.db.flush_cf(self.cf(name))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL files in `dir`.
    fn wal_files(dir: &Path) -> impl Iterator<Item = PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
    }

    fn wal_bytes(dir: &Path) -> u64 {
        wal_files(dir)
            // A WAL file removed between the listing and its size holds
            // nothing any more.
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    /// The newest WAL file and its size.
    fn newest_wal(dir: &Path) -> (PathBuf, u64) {
        let p = wal_files(dir).max().expect("a WAL file");
        let len = std::fs::metadata(&p).unwrap().len();
        (p, len)
    }

    /// Memtables and cache of 1 MiB, so that a test fills WAL files fast.
    fn small() -> LocalDbOptions {
        LocalDbOptions {
            write_buffer_bytes: 1 << 20,
            block_cache_bytes: 1 << 20,
            ..Default::default()
        }
    }

    /// One round of WAL use: fills a WAL file with 256 KiB and flushes
    /// every column family, which retires it. The newest WAL file after it
    /// and its size: a new file is empty after the flush, a reused one
    /// keeps the size it had (about 256 KiB of records).
    fn wal_round(db: &LocalDb, dir: &Path, round: u32) -> (PathBuf, u64) {
        let old = vec![1u8; 1000];
        for i in 0u32..256 {
            db.db()
                .put_cf(
                    db.cf(CF_LOG),
                    [round.to_be_bytes(), i.to_be_bytes()].concat(),
                    &old,
                )
                .unwrap();
        }
        db.flush().unwrap();
        newest_wal(dir)
    }

    /// The log's levels are shaped for keys only (see `open_with`), and
    /// RocksDB runs with them: its options file, written at open, lists
    /// them under the `log` column family and not under the others.
    #[test]
    fn the_log_has_options_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let _db = LocalDb::open_with(dir.path(), &small()).unwrap();
        let options = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("/OPTIONS-"))
            .max()
            .expect("an options file");
        let text = std::fs::read_to_string(options).unwrap();
        let section = |cf: &str| -> std::collections::HashMap<String, String> {
            let head = format!("[CFOptions \"{cf}\"]");
            let body = &text[text.find(&head).expect("the section") + head.len()..];
            let body = &body[..body.find("\n[").unwrap_or(body.len())];
            body.lines()
                .filter_map(|l| l.trim().split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let log = section(CF_LOG);
        assert_eq!(log["max_bytes_for_level_base"], "16777216");
        assert_eq!(log["target_file_size_base"], "4194304");
        assert_eq!(log["level0_file_num_compaction_trigger"], "8");
        assert_eq!(
            log["memtable_insert_with_hint_prefix_extractor"],
            "rocksdb.FixedPrefix.9"
        );
        let offsets = section(CF_OFFSETS);
        assert_eq!(offsets["max_bytes_for_level_base"], "268435456");
        assert_eq!(offsets["level0_file_num_compaction_trigger"], "4");
        assert_eq!(
            offsets["memtable_insert_with_hint_prefix_extractor"],
            "nullptr"
        );
    }

    /// With reuse set to none, every new WAL file is a new, empty one.
    #[test]
    fn wal_reuse_can_be_turned_off() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LocalDbOptions {
            wal_reuse_files: 0,
            ..small()
        };
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        for round in 0u32..10 {
            let (path, len) = wal_round(&db, dir.path(), round);
            assert!(
                len < 128 << 10,
                "round {round}: {path:?} reused ({len} bytes)"
            );
        }
    }

    /// Once a store has WAL files it no longer needs, a new WAL is one of
    /// them, overwritten in place (so it starts at its old size), and what
    /// was written into it is replayed exactly at the next open.
    #[test]
    fn wal_files_are_reused_and_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let opts = small();
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        let cf = || db.cf(CF_LOG);
        let mut reused = None;
        for round in 0u32..50 {
            let (path, len) = wal_round(&db, dir.path(), round);
            if len >= 128 << 10 {
                reused = Some((path, len));
                break;
            }
        }
        let (path, len) = reused.expect("no WAL file was reused in 50 rounds");
        // Written only to the reused file, over its old records.
        let new = vec![2u8; 100];
        for i in 0u32..500 {
            db.db().put_cf(cf(), i.to_be_bytes(), &new).unwrap();
        }
        db.db().flush_wal(true).unwrap();
        assert_eq!(newest_wal(dir.path()).0, path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len,
            "written in place"
        );
        drop(db);
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        for i in 0u32..500 {
            let got = db.db().get_cf(db.cf(CF_LOG), i.to_be_bytes()).unwrap();
            assert_eq!(got.as_deref(), Some(&new[..]), "key {i}");
        }
        let keys = db
            .db()
            .iterator_cf(db.cf(CF_LOG), rocksdb::IteratorMode::Start)
            .filter(|kv| kv.as_ref().unwrap().0.len() == 4)
            .count();
        assert_eq!(keys, 500);
    }

    /// A store left quiet writes its memtables out, the small ones too
    /// (which would keep the WAL behind them), and gives their memory back.
    #[test]
    fn a_quiet_store_flushes_its_memtables() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LocalDbOptions {
            wal_reuse_files: 0,
            ..Default::default()
        };
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        db.db().put_cf(db.cf(CF_OFFSETS), b"small", b"1").unwrap();
        let value = vec![5u8; 1000];
        // 12 MB: more than the least a quiet flush writes, less than a
        // memtable (64 MiB), so only the quiet flush writes it out.
        for i in 0u32..12_000 {
            db.db()
                .put_cf(db.cf(CF_LOG), i.to_be_bytes(), &value)
                .unwrap();
        }
        assert!(db.memory_usage().memtables as u64 >= crate::heap::IDLE_FLUSH_BYTES);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let entries = |cf| {
            db.db()
                .property_int_value_cf(db.cf(cf), "rocksdb.num-entries-active-mem-table")
                .unwrap()
                .unwrap()
        };
        // The 12 MB the WAL held is gone with it, offsets' record included.
        while db.memory_usage().memtables as u64 >= crate::heap::IDLE_FLUSH_BYTES
            || db.heap_returns() == 0
            || wal_bytes(dir.path()) >= 1 << 20
        {
            assert!(
                std::time::Instant::now() < until,
                "not flushed in 20 s: {} bytes of memtables, {} of WAL",
                db.memory_usage().memtables,
                wal_bytes(dir.path())
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(entries(CF_OFFSETS), 0);
        assert_eq!(entries(CF_LOG), 0);
        let blobs = db
            .db()
            .property_int_value_cf(db.cf(CF_LOG), "rocksdb.total-blob-file-size")
            .unwrap()
            .unwrap();
        // Written out (the values compress to almost nothing).
        assert!(blobs > 0, "no blob file");
    }

    /// Once a flush has written memtables out, their memory is given back
    /// by the store's own thread, and that thread ends with the store.
    #[test]
    fn flushed_memtables_are_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = LocalDb::open_with(dir.path(), &small()).unwrap();
        assert_eq!(
            db.heap_returns(),
            0,
            "nothing flushed, nothing to give back"
        );
        let value = vec![3u8; 1000];
        for i in 0u32..3000 {
            db.db()
                .put_cf(db.cf(CF_LOG), i.to_be_bytes(), &value)
                .unwrap();
        }
        db.flush().unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while db.heap_returns() == 0 {
            assert!(
                std::time::Instant::now() < until,
                "nothing given back in 20 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // The thread holds the store only while it looks at it.
        let watcher = Arc::downgrade(&db);
        drop(db);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while watcher.upgrade().is_some() {
            assert!(std::time::Instant::now() < until, "the store stays open");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// A column family written once and then left alone does not pin
    /// every later WAL file.
    #[test]
    fn the_wal_stays_bounded_behind_a_quiet_column_family() {
        let dir = tempfile::tempdir().unwrap();
        let opts = small();
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        db.db().put_cf(db.cf(CF_OFFSETS), b"quiet", b"1").unwrap();
        let value = vec![7u8; 100];
        let mut most = 0;
        for i in 0u32..500_000 {
            db.db()
                .put_cf(db.cf(CF_DELIVERIES), i.to_be_bytes(), &value)
                .unwrap();
            if i % 10_000 == 0 {
                most = most.max(wal_bytes(dir.path()));
            }
        }
        // 500,000 writes of about 120 bytes: 60 MB went through the WAL,
        // more than the 40 MB RocksDB would otherwise let it grow to here.
        assert!(
            most < 8 * wal_bound(opts.write_buffer_bytes),
            "the WAL grew to {most} bytes"
        );
    }

    #[test]
    fn second_open_of_same_dir_fails_with_path() {
        let dir = tempfile::tempdir().unwrap();
        let _first = LocalDb::open(dir.path()).unwrap();
        let err = LocalDb::open(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("failed to open RocksDB"), "{err}");
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        assert!(err.to_lowercase().contains("lock"), "{err}");
    }

    #[test]
    fn corrupted_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = LocalDb::open(dir.path()).unwrap();
            db.db().put_cf(db.cf(CF_META), b"k", b"v").unwrap();
            db.flush().unwrap();
        }
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let p = entry.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("MANIFEST-")
            {
                std::fs::write(&p, b"garbage that is not a manifest").unwrap();
            }
        }
        let err = LocalDb::open(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("failed to open RocksDB"), "{err}");
    }

    #[test]
    fn missing_current_is_refused_not_recreated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = LocalDb::open(dir.path()).unwrap();
            db.db().put_cf(db.cf(CF_LOG), b"k", b"v").unwrap();
            db.flush().unwrap();
        }
        std::fs::remove_file(dir.path().join("CURRENT")).unwrap();
        let err = LocalDb::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no CURRENT file"), "{err}");
    }
}
