//! Idempotent appends: a journal of the keys each group commit stored, in
//! its own column family (`dedup`), written in the batch of the records it
//! points to, and an index of it in memory ([`RecentKeys`]).
//!
//! A journal entry is keyed `0xFF | group number (u64 BE)`, one per commit
//! that stored keyed records. Its value is the commit's time (ms since the
//! epoch, u64 BE, with the top bit set: the compact layout), then for each
//! key: topic id, partition and offset (LEB128 varints), form (u8) and the
//! key. A key of 64 hexadecimal digits (a SHA-256, as the ingress makes
//! them) is form 1 and stored as the first 16 bytes of its digest: 128 bits
//! keep two different events apart far beyond any window's number of keys.
//! Any other key is form 0, its length (a varint) and its bytes. An entry
//! of a digest key takes about 22 bytes.
//!
//! Values without the top bit are of the earlier layout (fixed-width
//! topic u32, partition u32, offset u64, form, u16 length, a 32-byte
//! digest): still read, until they age out of the window.
//!
//! Every write to the journal goes to the end of it, so a key costs a few
//! bytes appended to one value, not an insert at a random place in a
//! sorted structure. The index in memory says which groups may hold a key
//! (8 bytes a key, for two windows at most); a look in the journal settles
//! it, and that happens only for a retried key or a fingerprint shared by
//! chance. At open the index is rebuilt by reading the journal's last
//! window in order. The column family drops its table files once a window
//! old (FIFO compaction with a time to live, see `localdb`): nothing sweeps
//! the journal.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use rocksdb::{ReadOptions, WriteBatch};

use super::recent::RecentKeys;
use crate::error::Result;
use crate::localdb::{LocalDb, CF_DEDUP, CF_LOG};
use crate::log::{Append, IdempotencyKey, Placed};

/// First byte of a journal key. The layout before the journal keyed its
/// entries by topic id (first byte zero for any id below 2^24).
const JOURNAL: u8 = 0xFF;

/// Bytes of an entry of the earlier layout before the key's own: topic,
/// partition, offset, form and length.
const OLD_ENTRY_HEADER: usize = 4 + 4 + 8 + 1 + 2;

/// At most, the bytes of a compact entry before the key's own: topic,
/// partition, offset (varints), form and length (a varint below 2^21).
const ENTRY_HEADER_MAX: usize = 5 + 5 + 10 + 1 + 3;

/// The bit of a journal value's time that marks the compact layout.
const COMPACT: u64 = 1 << 63;

/// Bytes of a digest key as the journal and the index hold it.
const DIGEST_BYTES: usize = 16;

fn journal_key(group: u64) -> [u8; 9] {
    let mut k = [JOURNAL; 9];
    k[1..].copy_from_slice(&group.to_be_bytes());
    k
}

/// An idempotency key as the journal holds it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key<'a> {
    topic: u32,
    bytes: KeyBytes<'a>,
    /// Hash of topic and key (the same in one process, not across).
    hash: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyBytes<'a> {
    /// A key of 64 hexadecimal digits, decoded: its first 16 bytes.
    Digest([u8; DIGEST_BYTES]),
    Text(&'a [u8]),
}

impl<'a> Key<'a> {
    fn new<K: AsRef<[u8]> + ?Sized>(topic: u32, key: &'a K) -> Key<'a> {
        let key = key.as_ref();
        let bytes = match hex32(key) {
            Some(raw) => KeyBytes::Digest(digest_prefix(&raw)),
            // At most `IdempotencyKey::MAX` bytes.
            None => KeyBytes::Text(key),
        };
        Key::from_parts(topic, bytes)
    }

    fn from_parts(topic: u32, bytes: KeyBytes<'a>) -> Key<'a> {
        let hash = match bytes {
            // A SHA-256 is random already: its own bytes, mixed with the topic.
            KeyBytes::Digest(raw) => {
                u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"))
                    ^ u64::from(topic).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            }
            KeyBytes::Text(text) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (topic, text).hash(&mut h);
                h.finish()
            }
        };
        Key { topic, bytes, hash }
    }

    /// The hash, for tables of keys.
    pub(super) fn hash(&self) -> u64 {
        self.hash
    }

    fn fingerprint(&self) -> u32 {
        (self.hash >> 32) as u32
    }

    fn form_and_bytes(&self) -> (u8, &[u8]) {
        match &self.bytes {
            KeyBytes::Digest(raw) => (1, raw),
            KeyBytes::Text(text) => (0, text),
        }
    }
}

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.topic == other.topic && self.bytes == other.bytes
    }
}

/// The value of each lower-case hexadecimal digit; 0xFF for other bytes.
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut c = 0;
    while c < 10 {
        t[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        t[b'a' as usize + c] = 10 + c as u8;
        c += 1;
    }
    t
};

/// The 32 bytes a key of 64 lower-case hexadecimal digits spells.
fn hex32(b: &[u8]) -> Option<[u8; 32]> {
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        // An invalid digit has its high bit set: one test at the end.
        bad |= hi | lo;
        *o = hi << 4 | lo;
    }
    (bad & 0x80 == 0).then_some(out)
}

/// The first bytes of a digest, as keys hold it.
fn digest_prefix(raw: &[u8]) -> [u8; DIGEST_BYTES] {
    raw[..DIGEST_BYTES].try_into().expect("a digest is longer")
}

/// Appends `v` as an LEB128 varint.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an LEB128 varint off the front of `rest`.
fn take_varint(rest: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in rest.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            *rest = &rest[i + 1..];
            return Some(v);
        }
    }
    None
}

/// One journal entry's keys, in order: (key, partition, offset).
fn entries(value: &[u8]) -> Box<dyn Iterator<Item = (Key<'_>, u32, u64)> + '_> {
    let compact = value
        .get(..8)
        .is_some_and(|t| u64::from_be_bytes(t.try_into().expect("8 bytes")) & COMPACT != 0);
    let mut rest = value.get(8..).unwrap_or_default();
    if compact {
        return Box::new(std::iter::from_fn(move || {
            let topic = u32::try_from(take_varint(&mut rest)?).ok()?;
            let partition = u32::try_from(take_varint(&mut rest)?).ok()?;
            let offset = take_varint(&mut rest)?;
            let (&form, after) = rest.split_first()?;
            rest = after;
            let bytes = if form == 1 {
                let (digest, after) = rest.split_at_checked(DIGEST_BYTES)?;
                rest = after;
                KeyBytes::Digest(digest_prefix(digest))
            } else {
                let len = usize::try_from(take_varint(&mut rest)?).ok()?;
                let (text, after) = rest.split_at_checked(len)?;
                rest = after;
                KeyBytes::Text(text)
            };
            Some((Key::from_parts(topic, bytes), partition, offset))
        }));
    }
    Box::new(std::iter::from_fn(move || {
        if rest.len() < OLD_ENTRY_HEADER {
            return None;
        }
        let topic = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes"));
        let partition = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
        let offset = u64::from_be_bytes(rest[8..16].try_into().expect("8 bytes"));
        let form = rest[16];
        let len = usize::from(u16::from_be_bytes([rest[17], rest[18]]));
        let bytes = rest.get(OLD_ENTRY_HEADER..OLD_ENTRY_HEADER + len)?;
        rest = &rest[OLD_ENTRY_HEADER + len..];
        let bytes = match (form, bytes.len()) {
            (1, 32) => KeyBytes::Digest(digest_prefix(bytes)),
            _ => KeyBytes::Text(bytes),
        };
        Some((Key::from_parts(topic, bytes), partition, offset))
    }))
}

/// The time of a journal entry's commit (ms since the epoch).
fn journal_time(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?) & !COMPACT)
}

pub(super) use eventmesh_core::time::now_ms;

/// The writer thread's idempotency state.
pub(super) struct Dedup {
    /// Zero: keys are ignored.
    window_ms: u64,
    recent: RecentKeys,
    /// The number of the group being built.
    group: u64,
    /// Its journal value: the commit's time, then each key it stores.
    journal: Vec<u8>,
    /// The last group read back from the journal: retried keys come in
    /// runs (a batch sent again), mostly from one group.
    cached: Option<(u64, Vec<u8>)>,
}

impl Dedup {
    /// Rebuilds the index from the journal's last window, after dropping
    /// the index of the layout before the journal (nothing lost but the
    /// deduplication of retries of keys it held).
    pub(super) fn open(db: &LocalDb, window: Duration) -> Result<Dedup> {
        let began = Instant::now();
        let window_ms = window.as_millis() as u64;
        let cf = db.cf(CF_DEDUP);
        // Read once, in order: past the block cache (the journal would
        // push out the blocks readers use), with read-ahead.
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        ro.set_readahead_size(2 << 20);
        let mut it = db.db().raw_iterator_cf_opt(cf, ro);
        it.seek_to_first();
        it.status()?;
        if it.key().is_some_and(|k| k[0] != JOURNAL) {
            let mut wb = WriteBatch::default();
            wb.delete_range_cf(cf, [0u8], [JOURNAL]);
            db.db().write(wb)?;
            tracing::info!("dropped the idempotency index of an earlier layout");
        }
        let group_of = |k: &[u8]| <[u8; 8]>::try_from(&k[1..]).ok().map(u64::from_be_bytes);
        // The next group comes after the last one in the journal.
        it.seek_to_last();
        it.status()?;
        let next = it.key().and_then(group_of).map_or(0, |g| g + 1);
        let mut recent = RecentKeys::new(window, began);
        let mut groups = 0u64;
        let now = now_ms();
        // With keys off nothing is looked up: the journal is not read.
        if window_ms > 0 {
            it.seek([JOURNAL]);
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                let live = journal_time(v).is_some_and(|t| t + window_ms > now);
                if let (Some(group), true) = (group_of(k), live) {
                    groups += 1;
                    for (key, _, _) in entries(v) {
                        recent.insert(key.fingerprint(), group);
                    }
                }
                it.next();
            }
        }
        it.status()?;
        if recent.len() > 0 {
            tracing::info!(
                keys = recent.len(),
                groups,
                ms = began.elapsed().as_millis() as u64,
                "idempotency keys of the last window loaded"
            );
        }
        Ok(Dedup {
            window_ms,
            recent,
            group: next,
            journal: Vec::new(),
            cached: None,
        })
    }

    /// The record's key as given, when keys count.
    fn key_bytes<'a>(&self, a: &'a Append) -> Option<&'a [u8]> {
        a.key
            .as_ref()
            .map(IdempotencyKey::as_bytes)
            .filter(|_| self.window_ms > 0)
    }

    /// The record's key, when keys count.
    pub(super) fn key<'a>(&self, topic: u32, a: &'a Append) -> Option<Key<'a>> {
        Some(Key::new(topic, self.key_bytes(a)?))
    }

    /// Asks for what a look at `key` reads in the index, ahead of it.
    pub(super) fn prefetch(&self, key: &Key<'_>) {
        self.recent.prefetch(key.fingerprint());
    }

    /// What a group adds to a batch besides its keys: tag, column family
    /// id, key, lengths and the time, at most.
    pub(super) const JOURNAL_OVERHEAD: usize = 1 + 5 + 9 + 10 + 8;

    /// What `a`'s key adds to the journal, at most (a key of 64 digits
    /// takes 16 bytes).
    pub(super) fn journal_bytes(&self, a: &Append) -> usize {
        self.key_bytes(a).map_or(0, |k| ENTRY_HEADER_MAX + k.len())
    }

    /// Starts a commit's group (and the index's next generation when due).
    pub(super) fn begin(&mut self, now: Instant, at_ms: u64) {
        if self.window_ms > 0 {
            self.recent.rotate(now);
        }
        self.journal.clear();
        self.journal
            .extend_from_slice(&(at_ms | COMPACT).to_be_bytes());
    }

    /// Where the first record with `key` is, when one was stored within
    /// the window: in this commit's group (by an earlier request of it) or
    /// before.
    pub(super) fn earlier(
        &mut self,
        db: &LocalDb,
        key: &Key<'_>,
        now_ms: u64,
    ) -> Result<Option<Placed>> {
        let groups: Vec<u32> = self.recent.groups(key.fingerprint()).collect();
        for low in groups {
            // The whole number: the latest at or below the current one with
            // these low bits (groups in the index are at most two windows
            // old, far fewer than 2^32 commits).
            let Some(group) = self
                .group
                .checked_sub(u64::from((self.group as u32).wrapping_sub(low)))
            else {
                continue;
            };
            let value: &[u8] = if group == self.group {
                &self.journal
            } else {
                if self.cached.as_ref().is_none_or(|(g, _)| *g != group) {
                    let Some(v) = db.db().get_pinned_cf(db.cf(CF_DEDUP), journal_key(group))?
                    else {
                        // A commit that failed: its keys were never stored.
                        continue;
                    };
                    self.cached = Some((group, v.to_vec()));
                }
                &self.cached.as_ref().expect("just read").1
            };
            if journal_time(value).is_none_or(|t| now_ms >= t + self.window_ms) {
                continue;
            }
            if let Some((_, partition, offset)) = entries(value).find(|(k, _, _)| k == key) {
                return Ok(Some(Placed {
                    partition,
                    offset,
                    duplicate: true,
                }));
            }
        }
        Ok(None)
    }

    /// Adds a key stored by this commit at `at` to its group.
    pub(super) fn record(&mut self, key: &Key<'_>, at: Placed) {
        let (form, bytes) = key.form_and_bytes();
        let j = &mut self.journal;
        put_varint(j, u64::from(key.topic));
        put_varint(j, u64::from(at.partition));
        put_varint(j, at.offset);
        j.push(form);
        if form == 0 {
            put_varint(j, bytes.len() as u64);
        }
        j.extend_from_slice(bytes);
        self.recent.insert(key.fingerprint(), self.group);
    }

    /// Tells `stats` how many keys the index holds and what it takes.
    pub(super) fn report(&self, stats: &super::CommitStats) {
        use std::sync::atomic::Ordering::Relaxed;
        stats.dedup_keys.store(self.recent.len() as u64, Relaxed);
        stats
            .dedup_index_bytes
            .store(self.recent.allocated_bytes() as u64, Relaxed);
    }

    /// Writes the commit's group to `wb`, when it stored a key.
    pub(super) fn finish(&mut self, db: &LocalDb, wb: &mut WriteBatch) {
        if self.journal.len() > 8 {
            wb.put_cf(db.cf(CF_DEDUP), journal_key(self.group), &self.journal);
            self.group += 1;
        }
    }
}

/// Drops the index of an earlier layout, kept in the `log` column family
/// under `k` and `K` (two range deletions; nothing when absent).
pub(super) fn forget_older_layout(db: &LocalDb) {
    let cf = db.cf(CF_LOG);
    let mut it = db.db().raw_iterator_cf(cf);
    it.seek(b"K");
    let found = it.key().is_some_and(|k| k[0] == b'K');
    it.seek(b"k");
    let found = found || it.key().is_some_and(|k| k[0] == b'k');
    if !found {
        return;
    }
    let mut wb = WriteBatch::default();
    wb.delete_range_cf(cf, b"K", b"L");
    wb.delete_range_cf(cf, b"k", b"l");
    if let Err(e) = db.db().write(wb) {
        tracing::warn!(error = %e, "cannot drop the older idempotency index");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::localdb::LocalDbOptions;

    /// A key with a chosen hash: keys that share a fingerprint.
    fn forced(text: &str, hash: u64) -> Key<'_> {
        Key {
            hash,
            ..Key::new(1, text)
        }
    }

    fn at(offset: u64) -> Placed {
        Placed {
            partition: 0,
            offset,
            duplicate: false,
        }
    }

    fn dup(offset: u64) -> Option<Placed> {
        Some(Placed {
            duplicate: true,
            ..at(offset)
        })
    }

    /// One commit of `keys` at offsets from `first`, written unless `fail`.
    fn commit(db: &LocalDb, d: &mut Dedup, keys: &[Key<'_>], first: u64, write: bool) {
        let now = now_ms();
        d.begin(Instant::now(), now);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(d.earlier(db, k, now).unwrap(), None, "{k:?} is new");
            d.record(k, at(first + i as u64));
            assert_eq!(
                d.earlier(db, k, now).unwrap(),
                dup(first + i as u64),
                "found in its own group before the write"
            );
        }
        let mut wb = WriteBatch::default();
        d.finish(db, &mut wb);
        if write {
            db.db().write(wb).unwrap();
        }
    }

    #[test]
    fn keys_sharing_a_fingerprint_are_told_apart_by_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(60);
        let opts = LocalDbOptions {
            dedup_window: window,
            ..Default::default()
        };
        let db = LocalDb::open_with(dir.path(), &opts).unwrap();
        let mut d = Dedup::open(&db, window).unwrap();
        let (a, b, c) = (
            forced("a", 7 << 32),
            forced("b", 7 << 32),
            forced("c", 7 << 32),
        );
        commit(&db, &mut d, &[a], 10, true);
        commit(&db, &mut d, &[b], 11, true);
        // A commit whose write failed: its key was never stored.
        commit(&db, &mut d, &[c], 12, false);
        let now = now_ms();
        assert_eq!(d.earlier(&db, &a, now).unwrap(), dup(10));
        assert_eq!(d.earlier(&db, &b, now).unwrap(), dup(11));
        assert_eq!(d.earlier(&db, &c, now).unwrap(), None);
        assert_eq!(d.earlier(&db, &forced("d", 7 << 32), now).unwrap(), None);
        // Rebuilt from the journal (hashes are the real ones there).
        drop(d);
        let mut d = Dedup::open(&db, window).unwrap();
        assert_eq!(d.earlier(&db, &Key::new(1, "a"), now).unwrap(), dup(10));
        assert_eq!(d.earlier(&db, &Key::new(1, "b"), now).unwrap(), dup(11));
        assert_eq!(d.earlier(&db, &Key::new(1, "c"), now).unwrap(), None);
        assert_eq!(
            d.earlier(&db, &Key::new(2, "a"), now).unwrap(),
            None,
            "per topic"
        );
        // Past the window (by the clock given), nothing is a duplicate.
        let later = now + window.as_millis() as u64;
        assert_eq!(d.earlier(&db, &Key::new(1, "a"), later).unwrap(), None);
    }

    #[test]
    fn digests_and_text_keys_round_trip_through_the_journal() {
        let sha = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let upper = sha.to_uppercase();
        let keys = [
            Key::new(3, sha),
            Key::new(3, &upper),
            Key::new(9, "order-17"),
        ];
        assert!(matches!(keys[0].bytes, KeyBytes::Digest(_)));
        assert!(
            matches!(keys[1].bytes, KeyBytes::Text(_)),
            "only lower-case hex is decoded"
        );
        assert_eq!(hex32(sha.as_bytes()).unwrap()[..3], [0x00, 0x11, 0x22]);
        assert_eq!(hex32(sha.as_bytes()).unwrap()[31], 0xff);
        assert_eq!(hex32(sha.replace('e', "g").as_bytes()), None);
        assert_eq!(hex32(&sha.as_bytes()[1..]), None);
        let mut d = Dedup {
            window_ms: 1,
            recent: RecentKeys::new(Duration::from_millis(1), Instant::now()),
            group: 0,
            journal: Vec::new(),
            cached: None,
        };
        d.begin(Instant::now(), 1234);
        for (i, k) in keys.iter().enumerate() {
            d.record(k, at(i as u64));
        }
        assert_eq!(journal_time(&d.journal), Some(1234));
        let back: Vec<(Key, u32, u64)> = entries(&d.journal).collect();
        assert_eq!(back.len(), 3);
        for (i, (k, p, o)) in back.iter().enumerate() {
            assert_eq!((k, *p, *o), (&keys[i], 0, i as u64));
            assert_eq!(k.hash(), keys[i].hash(), "the same hash from the journal");
        }
        assert_ne!(keys[0], keys[1]);
        // Compact: the time, then 1+1+1+1+16 bytes for the digest, 1+1+1+1
        // + 1 + 64 for the upper-case text, 1+1+1+1 + 1 + 8 for the other.
        assert_eq!(d.journal.len(), 8 + 20 + 69 + 13);
    }

    #[test]
    fn large_numbers_round_trip_and_the_earlier_layout_is_still_read() {
        let sha = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
        let key = Key::new(u32::MAX, sha);
        let mut d = Dedup {
            window_ms: 1,
            recent: RecentKeys::new(Duration::from_millis(1), Instant::now()),
            group: 0,
            journal: Vec::new(),
            cached: None,
        };
        d.begin(Instant::now(), 1_796_461_200_500);
        let far = Placed {
            partition: u32::MAX,
            offset: u64::MAX,
            duplicate: false,
        };
        d.record(&key, far);
        assert_eq!(journal_time(&d.journal), Some(1_796_461_200_500));
        let back: Vec<(Key, u32, u64)> = entries(&d.journal).collect();
        assert_eq!(back, vec![(key, u32::MAX, u64::MAX)]);
        // A truncated value ends the entries, never panics.
        for cut in 8..d.journal.len() {
            assert_eq!(entries(&d.journal[..cut]).count(), 0, "cut at {cut}");
        }

        // The earlier layout: fixed widths, the whole digest.
        let mut old = 1234u64.to_be_bytes().to_vec();
        old.extend_from_slice(&7u32.to_be_bytes());
        old.extend_from_slice(&2u32.to_be_bytes());
        old.extend_from_slice(&99u64.to_be_bytes());
        old.push(1);
        old.extend_from_slice(&32u16.to_be_bytes());
        old.extend_from_slice(&hex32(sha.as_bytes()).unwrap());
        old.extend_from_slice(&7u32.to_be_bytes());
        old.extend_from_slice(&3u32.to_be_bytes());
        old.extend_from_slice(&100u64.to_be_bytes());
        old.push(0);
        old.extend_from_slice(&5u16.to_be_bytes());
        old.extend_from_slice(b"order");
        assert_eq!(journal_time(&old), Some(1234));
        let back: Vec<(Key, u32, u64)> = entries(&old).collect();
        assert_eq!(
            back,
            vec![(Key::new(7, sha), 2, 99), (Key::new(7, "order"), 3, 100)]
        );
    }
}
