//! IPLFS discard bookkeeping for `gc=none`: the in-memory discard map, the queue of discard
//! commands a checkpoint made safe to issue, their dispatch pacing, and the discard log's
//! byte format (persisted in the checkpoint, re-issued at mount).
//!
//! Owns: [`DiscardMap`] (blocks invalidated since the last checkpoint, one bitmap per 1 GiB
//! discard section, created on the first invalidation in the section and dropped once turned
//! into commands), [`DiscardQueue`] (commands waiting for dispatch: every
//! [`DISPATCH_INTERVAL`], at most [`DISPATCH_BATCH`] at a time, whether or not the volume is
//! idle), and [`encode_log`] / [`decode_log`].
//!
//! Why commands wait for a checkpoint: a block invalidated after checkpoint N is still live
//! in checkpoint N's view. Discarding it before checkpoint N+1 is durable would lose data if
//! the volume crashed back to N. So checkpoint N+1 drains the map into commands, persists
//! them (with every command still queued) as its discard log, and only then may they be
//! issued; a crash before they are issued is repaired by mount, which re-issues the log. No
//! dead block is therefore ever left live in the device, and no live block is discarded.
//!
//! Used by: every checkpoint that has a discard map (`gc=none`, `gc=device`) logs its
//! commands (`gc_none::checkpoint_discards`); `gc_none.rs` dispatches the queue and mount
//! re-issues the log (docs/DESIGN.md, "IPLFS").
//!
//! Invariants: a section in the map has at least one bit set; [`DiscardMap::pending_blocks`]
//! equals the bits set; commands are non-empty, sorted and non-overlapping after
//! [`DiscardMap::drain_commands`]; a decoded log never names a block at or past the limit
//! it was checked against.
//!
//! Lock order: none inside (the owner keeps the map and the queue under a leaf lock each,
//! [`Counted`]: [`DeadMap`] for the map, `Counted<DiscardQueue>` for the queue, each with
//! its count readable without the lock).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use flashlog_format::codec::{get_u32, get_u64, put_u32, put_u64};

use crate::error::{Error, Result};

/// Blocks of one discard section: 1 GiB (IPLFS `segs_per_node` = 512 segments).
pub const DISCARD_SECTION_BLOCKS: u64 = 1 << 18;
const WORDS_PER_SECTION: usize = (DISCARD_SECTION_BLOCKS / 64) as usize;
/// Discards are dispatched this often (IPLFS: 50 ms, even when the volume is not idle).
pub const DISPATCH_INTERVAL: Duration = Duration::from_millis(50);
/// At most this many discard commands per dispatch (IPLFS 16; F2FS 8).
pub const DISPATCH_BATCH: usize = 16;
/// Runs at least this long are logged as ranges, shorter ones in segment bitmaps (IPLFS
/// `long_threshold`).
pub const LONG_RUN_BLOCKS: u64 = 512;
/// Blocks covered by one bitmap entry of the discard log (one segment).
pub const LOG_BITMAP_BLOCKS: u64 = 512;
const RANGE_BYTES: usize = 16;
const BITMAP_BYTES: usize = 8 + (LOG_BITMAP_BLOCKS / 8) as usize;
const HEADER_BYTES: usize = 8;

/// Discard `len` blocks from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DiscardCmd {
    pub addr: u64,
    pub len: u64,
}

/// What [`Counted`] mirrors: a count of the locked value, read back when a guard drops.
pub trait Count {
    fn count(&self) -> u64;
}

/// A value behind its leaf lock, with a count mirrored in an atomic that every change under
/// the lock updates, so that per-operation tests read the count without the lock:
/// - the dead-block map ([`DeadMap`], blocks in it): "is a discard checkpoint due"
///   (`gc=device`) took the lock on every operation, and 16 writers on 16 cores (DWOL
///   6.5 M ops/s at 8 threads fell to 0.8 M at 16);
/// - the discard queue (commands in it): `gc=none`'s writers near the space target asked
///   "is anything queued" on every write.
#[derive(Default)]
pub struct Counted<T: Count> {
    value: Mutex<T>,
    count: AtomicU64,
}

/// The locked value; the count is brought up to date when the guard is dropped.
pub struct CountedGuard<'a, T: Count> {
    value: MutexGuard<'a, T>,
    count: &'a AtomicU64,
}

impl<T: Count> Counted<T> {
    pub fn new(value: T) -> Self {
        let count = AtomicU64::new(value.count());
        Counted {
            value: Mutex::new(value),
            count,
        }
    }

    pub fn lock(&self) -> CountedGuard<'_, T> {
        CountedGuard {
            value: self.value.lock(),
            count: &self.count,
        }
    }

    /// The count as of the last change; no lock.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl<T: Count> std::ops::Deref for CountedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Count> std::ops::DerefMut for CountedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Count> Drop for CountedGuard<'_, T> {
    fn drop(&mut self) {
        self.count.store(self.value.count(), Ordering::Relaxed);
    }
}

/// A volume's dead-block map (None where the policy keeps none), counted in blocks (0
/// without a map).
pub type DeadMap = Counted<Option<DiscardMap>>;

impl Count for Option<DiscardMap> {
    fn count(&self) -> u64 {
        self.as_ref().map_or(0, DiscardMap::pending_blocks)
    }
}

/// Blocks invalidated since the last checkpoint, by 1 GiB discard section.
#[derive(Default)]
pub struct DiscardMap {
    sections: BTreeMap<u64, Box<[u64]>>,
    pending: u64,
}

impl DiscardMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record that `count` blocks from `addr` hold no live data any more. Blocks already
    /// recorded are counted once. An address range that wraps the 64-bit space is cut at
    /// its end.
    pub fn invalidate(&mut self, addr: u64, count: u64) {
        let end = addr.saturating_add(count);
        let mut a = addr;
        while a < end {
            let sec = a / DISCARD_SECTION_BLOCKS;
            let sec_end = (sec + 1).saturating_mul(DISCARD_SECTION_BLOCKS).min(end);
            let words = self
                .sections
                .entry(sec)
                .or_insert_with(|| vec![0u64; WORDS_PER_SECTION].into_boxed_slice());
            for b in a..sec_end {
                let i = (b % DISCARD_SECTION_BLOCKS) as usize;
                let bit = 1u64 << (i % 64);
                if words[i / 64] & bit == 0 {
                    words[i / 64] |= bit;
                    self.pending += 1;
                }
            }
            if sec_end == u64::MAX {
                break;
            }
            a = sec_end;
        }
    }

    /// Take `addr` back out of the map (it turned out to be live elsewhere); true if it
    /// was recorded.
    pub fn forget(&mut self, addr: u64) -> bool {
        let i = (addr % DISCARD_SECTION_BLOCKS) as usize;
        let Some(w) = self.sections.get_mut(&(addr / DISCARD_SECTION_BLOCKS)) else {
            return false;
        };
        let bit = 1u64 << (i % 64);
        if w[i / 64] & bit == 0 {
            return false;
        }
        w[i / 64] &= !bit;
        self.pending -= 1;
        true
    }

    /// Whether `addr` waits in the map.
    pub fn is_pending(&self, addr: u64) -> bool {
        let i = (addr % DISCARD_SECTION_BLOCKS) as usize;
        self.sections
            .get(&(addr / DISCARD_SECTION_BLOCKS))
            .is_some_and(|w| w[i / 64] >> (i % 64) & 1 == 1)
    }

    /// Blocks recorded.
    pub fn pending_blocks(&self) -> u64 {
        self.pending
    }

    /// Sections holding a bitmap (each 32 KiB of memory).
    pub fn sections(&self) -> usize {
        self.sections.len()
    }

    /// Turn every section's bitmap into discard commands (maximal runs, merged across
    /// section boundaries) and drop the sections.
    pub fn drain_commands(&mut self) -> Vec<DiscardCmd> {
        let mut out: Vec<DiscardCmd> = Vec::new();
        for (sec, words) in std::mem::take(&mut self.sections) {
            let base = sec * DISCARD_SECTION_BLOCKS;
            let mut i = 0usize;
            let n = DISCARD_SECTION_BLOCKS as usize;
            while i < n {
                let w = words[i / 64] >> (i % 64);
                if w == 0 {
                    i = (i / 64 + 1) * 64;
                    continue;
                }
                i += w.trailing_zeros() as usize;
                let start = i;
                while i < n && words[i / 64] >> (i % 64) & 1 == 1 {
                    let rest = !(words[i / 64] >> (i % 64));
                    i += (rest.trailing_zeros() as usize).min(64 - i % 64);
                }
                push_run(&mut out, base + start as u64, (i - start) as u64);
            }
        }
        self.pending = 0;
        out
    }
}

/// Append a run, merging it with the previous one when they touch.
pub(crate) fn push_run(out: &mut Vec<DiscardCmd>, addr: u64, len: u64) {
    if let Some(last) = out.last_mut() {
        if last.addr + last.len == addr {
            last.len += len;
            return;
        }
    }
    out.push(DiscardCmd { addr, len });
}

/// Commands a durable checkpoint made safe to issue, waiting for dispatch, and those taken
/// to be issued and not yet reported done (*in flight*).
///
/// Invariant (`gc_none.rs`): every command not yet issued is in the newest durable pack's
/// discard log, so a checkpoint logs the in-flight batches too (`pending`). Before they
/// were tracked, a checkpoint that ran while a dispatcher or a writer was issuing a batch
/// logged neither the batch nor its blocks; a cut before that issue reached the device
/// left those blocks dead and mapped for good (10-75 blocks, in about 1 run in 40 of the
/// near-full `gc=none` power-cut test with a 5 ms checkpoint timer).
#[derive(Default)]
pub struct DiscardQueue {
    cmds: VecDeque<DiscardCmd>,
    last_dispatch: Option<Instant>,
    /// Batches taken and not yet finished, by id.
    in_flight: Vec<(u64, Vec<DiscardCmd>)>,
    next_batch: u64,
}

/// Commands taken from the queue to issue. The queue keeps logging them until the issuer
/// calls [`DiscardQueue::finish`] with the batch's id and what it could not issue.
#[must_use = "finish the batch, or its commands stay logged for good"]
pub struct Batch {
    pub id: u64,
    pub cmds: Vec<DiscardCmd>,
}

impl std::ops::Deref for Batch {
    type Target = [DiscardCmd];
    fn deref(&self) -> &[DiscardCmd] {
        &self.cmds
    }
}

impl Count for DiscardQueue {
    fn count(&self) -> u64 {
        self.cmds.len() as u64
    }
}

impl DiscardQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue commands (after the checkpoint that logs them is durable, or at mount).
    pub fn extend(&mut self, cmds: impl IntoIterator<Item = DiscardCmd>) {
        self.cmds.extend(cmds);
    }

    /// Commands still to issue, queued or in flight (what the next checkpoint must log).
    pub fn pending(&self) -> impl Iterator<Item = &DiscardCmd> {
        self.cmds
            .iter()
            .chain(self.in_flight.iter().flat_map(|(_, c)| c.iter()))
    }

    /// Queued commands (not counting those in flight).
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Batches taken and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The first `n` queued commands become a batch in flight.
    fn take(&mut self, n: usize) -> Batch {
        let n = n.min(self.cmds.len());
        let cmds: Vec<DiscardCmd> = self.cmds.drain(..n).collect();
        if cmds.is_empty() {
            return Batch { id: 0, cmds };
        }
        self.next_batch += 1;
        let id = self.next_batch;
        self.in_flight.push((id, cmds.clone()));
        Batch { id, cmds }
    }

    /// The batch to issue at `now`: up to [`DISPATCH_BATCH`] commands if at least
    /// [`DISPATCH_INTERVAL`] passed since the last batch (or none was issued yet); else
    /// nothing.
    pub fn due(&mut self, now: Instant) -> Batch {
        if self.cmds.is_empty() {
            return self.take(0);
        }
        if let Some(t) = self.last_dispatch {
            if now.saturating_duration_since(t) < DISPATCH_INTERVAL {
                return self.take(0);
            }
        }
        self.last_dispatch = Some(now);
        self.take(DISPATCH_BATCH)
    }

    /// Every queued command (issued at once: `gc=device` after its checkpoint, or when
    /// space is short).
    pub fn take_all(&mut self) -> Batch {
        self.take(self.cmds.len())
    }

    /// Up to `n` commands from the front.
    pub fn take_front(&mut self, n: usize) -> Batch {
        self.take(n)
    }

    /// Blocks the queued commands cover.
    pub fn blocks(&self) -> u64 {
        self.cmds.iter().map(|c| c.len).sum()
    }

    /// Batch `id` is done: `unissued` (its commands whose issue failed, in order) go back
    /// to the front of the queue; the rest reached the device.
    pub fn finish(&mut self, id: u64, unissued: Vec<DiscardCmd>) {
        self.in_flight.retain(|(b, _)| *b != id);
        for c in unissued.into_iter().rev() {
            self.cmds.push_front(c);
        }
    }
}

/// Most bytes [`encode_log`] writes for commands covering `blocks` blocks in all: every
/// block of a short run can open a bitmap of its own, and every long run covers at least
/// [`LONG_RUN_BLOCKS`] blocks. Mkfs sizes the checkpoint packs with it.
pub fn log_bytes_max(blocks: u64) -> u64 {
    HEADER_BYTES as u64
        + blocks.saturating_mul(BITMAP_BYTES as u64)
        + (blocks / LONG_RUN_BLOCKS).saturating_mul(RANGE_BYTES as u64)
}

/// Encode commands as a discard log: runs of at least [`LONG_RUN_BLOCKS`] as ranges, the
/// shorter ones as 512-block segment bitmaps. Layout (little-endian): u32 range count, u32
/// bitmap count, the ranges (u64 start, u64 length), then the bitmaps (u64 segment-aligned
/// start, 64-byte bitmap, bit `i` = block `start + i`).
pub fn encode_log<'a>(cmds: impl IntoIterator<Item = &'a DiscardCmd>) -> Vec<u8> {
    let mut ranges: Vec<DiscardCmd> = Vec::new();
    // Segment bitmaps in the order met, sorted and merged once at the end. The commands
    // come as a few sorted sequences (the queue, the drained map, a cut's residue), so a
    // block's segment is nearly always the previous block's: one compare instead of a
    // B-tree walk per block (random overwrites log tens of thousands of one-block runs at
    // every checkpoint, and re-log the queued ones at the next).
    let mut bitmaps: Vec<(u64, [u8; 64])> = Vec::new();
    for c in cmds {
        if c.len == 0 {
            continue;
        }
        if c.len >= LONG_RUN_BLOCKS {
            ranges.push(*c);
            continue;
        }
        for b in c.addr..c.addr.saturating_add(c.len) {
            let seg = b - b % LOG_BITMAP_BLOCKS;
            let i = (b - seg) as usize;
            match bitmaps.last_mut() {
                Some((s, map)) if *s == seg => map[i / 8] |= 1 << (i % 8),
                _ => {
                    let mut map = [0u8; 64];
                    map[i / 8] |= 1 << (i % 8);
                    bitmaps.push((seg, map));
                }
            }
        }
    }
    bitmaps.sort_by_key(|&(seg, _)| seg);
    bitmaps.dedup_by(|later, kept| {
        if later.0 != kept.0 {
            return false;
        }
        for (k, l) in kept.1.iter_mut().zip(later.1) {
            *k |= l;
        }
        true
    });
    let mut out =
        vec![0u8; HEADER_BYTES + ranges.len() * RANGE_BYTES + bitmaps.len() * BITMAP_BYTES];
    put_u32(&mut out, 0, ranges.len() as u32);
    put_u32(&mut out, 4, bitmaps.len() as u32);
    let mut off = HEADER_BYTES;
    for r in &ranges {
        put_u64(&mut out, off, r.addr);
        put_u64(&mut out, off + 8, r.len);
        off += RANGE_BYTES;
    }
    for (seg, map) in &bitmaps {
        put_u64(&mut out, off, *seg);
        out[off + 8..off + BITMAP_BYTES].copy_from_slice(map);
        off += BITMAP_BYTES;
    }
    out
}

/// [`decode_log`], with every command split around the blocks `keep` names (blocks that hold
/// data again: roll-forward adopted them, or the pack shows them valid), which must not be
/// discarded.
pub fn decode_log_except(
    bytes: &[u8],
    limit: u64,
    keep: impl Fn(u64) -> bool,
) -> Result<Vec<DiscardCmd>> {
    let mut out = Vec::new();
    for c in decode_log(bytes, limit)? {
        let mut a = c.addr;
        for b in c.addr..c.addr + c.len {
            if keep(b) {
                if b > a {
                    out.push(DiscardCmd {
                        addr: a,
                        len: b - a,
                    });
                }
                a = b + 1;
            }
        }
        if c.addr + c.len > a {
            out.push(DiscardCmd {
                addr: a,
                len: c.addr + c.len - a,
            });
        }
    }
    Ok(out)
}

/// Decode a discard log, refusing anything malformed or naming a block at or past `limit`
/// (the volume's address space). Returns the commands sorted and merged.
pub fn decode_log(bytes: &[u8], limit: u64) -> Result<Vec<DiscardCmd>> {
    let bad = |why: String| Error::Corrupt(format!("discard log: {why}"));
    if bytes.len() < HEADER_BYTES {
        return Err(bad(format!(
            "{} bytes, shorter than its header",
            bytes.len()
        )));
    }
    let nr = get_u32(bytes, 0) as usize;
    let nb = get_u32(bytes, 4) as usize;
    let want = nr
        .checked_mul(RANGE_BYTES)
        .and_then(|r| nb.checked_mul(BITMAP_BYTES).and_then(|b| r.checked_add(b)))
        .and_then(|s| s.checked_add(HEADER_BYTES));
    if want != Some(bytes.len()) {
        return Err(bad(format!(
            "{nr} ranges and {nb} bitmaps do not fill its {} bytes",
            bytes.len()
        )));
    }
    let mut cmds = Vec::with_capacity(nr + nb);
    let mut off = HEADER_BYTES;
    for _ in 0..nr {
        let (addr, len) = (get_u64(bytes, off), get_u64(bytes, off + 8));
        match addr.checked_add(len) {
            Some(end) if len > 0 && end <= limit => cmds.push(DiscardCmd { addr, len }),
            _ => {
                return Err(bad(format!(
                    "range {addr}+{len} outside 0..{limit} or empty"
                )))
            }
        }
        off += RANGE_BYTES;
    }
    for _ in 0..nb {
        let seg = get_u64(bytes, off);
        let map = &bytes[off + 8..off + BITMAP_BYTES];
        if seg % LOG_BITMAP_BLOCKS != 0 || map.iter().all(|&b| b == 0) {
            return Err(bad(format!("bitmap at {seg} unaligned or empty")));
        }
        for i in 0..LOG_BITMAP_BLOCKS {
            if map[(i / 8) as usize] >> (i % 8) & 1 == 1 {
                match seg.checked_add(i) {
                    Some(b) if b < limit => cmds.push(DiscardCmd { addr: b, len: 1 }),
                    _ => return Err(bad(format!("bitmap block {seg}+{i} outside 0..{limit}"))),
                }
            }
        }
        off += BITMAP_BYTES;
    }
    cmds.sort_unstable();
    let mut out: Vec<DiscardCmd> = Vec::with_capacity(cmds.len());
    for c in cmds {
        match out.last_mut() {
            Some(last) if c.addr <= last.addr + last.len => {
                let end = (last.addr + last.len).max(c.addr + c.len);
                last.len = end - last.addr;
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_log_except_splits_around_kept_blocks() {
        let cmds = [
            DiscardCmd { addr: 10, len: 6 },
            DiscardCmd {
                addr: 100,
                len: 600,
            },
        ];
        let log = encode_log(&cmds);
        let keep = |b: u64| b == 10 || b == 13 || b == 15 || (400..500).contains(&b);
        let got = decode_log_except(&log, 1 << 20, keep).unwrap();
        let want = [(11, 2), (14, 1), (100, 300), (500, 200)];
        let got: Vec<(u64, u64)> = got.iter().map(|c| (c.addr, c.len)).collect();
        assert_eq!(got, want);
        assert!(decode_log_except(&log, 600, |_| false).is_err());
    }
    use std::collections::BTreeSet;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    fn blocks(cmds: &[DiscardCmd]) -> BTreeSet<u64> {
        cmds.iter().flat_map(|c| c.addr..c.addr + c.len).collect()
    }

    #[test]
    fn forget_takes_one_block_back() {
        let mut m = DiscardMap::new();
        m.invalidate(10, 3);
        assert!(m.forget(11));
        assert!(!m.forget(11), "already taken back");
        assert!(!m.forget(DISCARD_SECTION_BLOCKS + 11), "never recorded");
        assert_eq!(m.pending_blocks(), 2);
        assert!(!m.is_pending(11));
        assert_eq!(blocks(&m.drain_commands()), BTreeSet::from([10, 12]));
    }

    #[test]
    fn map_drains_exactly_the_invalidated_blocks() {
        let mut r = Rng(5);
        let mut m = DiscardMap::new();
        let mut model = BTreeSet::new();
        // Short and long runs, some straddling a section boundary, in two log regions.
        for _ in 0..500 {
            let base = if r.next() % 2 == 0 { 0 } else { 3 << 56 };
            let addr = base + r.next() % (3 * DISCARD_SECTION_BLOCKS);
            let len = if r.next() % 10 == 0 {
                1 + r.next() % 5000
            } else {
                1 + r.next() % 8
            };
            m.invalidate(addr, len);
            model.extend(addr..addr + len);
        }
        m.invalidate(DISCARD_SECTION_BLOCKS - 3, 6);
        model.extend(DISCARD_SECTION_BLOCKS - 3..DISCARD_SECTION_BLOCKS + 3);
        assert_eq!(m.pending_blocks(), model.len() as u64);
        assert!(model.iter().all(|&b| m.is_pending(b)));
        assert!(!m.is_pending(2 << 56));
        assert!(m.sections() <= 8);
        let cmds = m.drain_commands();
        assert_eq!(blocks(&cmds), model);
        // Maximal, sorted, non-overlapping runs.
        for w in cmds.windows(2) {
            assert!(w[0].addr + w[0].len < w[1].addr, "{w:?}");
        }
        assert_eq!(
            (m.sections(), m.pending_blocks()),
            (0, 0),
            "sections dropped"
        );
        assert!(m.drain_commands().is_empty());
        // The top of the 64-bit space does not overflow.
        m.invalidate(u64::MAX - 2, 10);
        assert_eq!(m.pending_blocks(), 2);
        assert_eq!(
            m.drain_commands(),
            vec![DiscardCmd {
                addr: u64::MAX - 2,
                len: 2
            }]
        );
    }

    #[test]
    fn dispatch_every_50ms_at_most_16() {
        let mut q = DiscardQueue::new();
        q.extend((0..40).map(|i| DiscardCmd {
            addr: i * 10,
            len: 1,
        }));
        let t0 = Instant::now();
        let first = q.due(t0);
        assert_eq!(first.len(), 16);
        q.finish(first.id, Vec::new());
        assert!(q.due(t0 + Duration::from_millis(49)).is_empty());
        let b = q.due(t0 + Duration::from_millis(50));
        assert_eq!(b.len(), 16);
        assert_eq!(b[0].addr, 160, "in order");
        q.finish(b.id, b.cmds.clone());
        assert_eq!(q.len(), 24);
        let c = q.due(t0 + Duration::from_millis(100));
        assert_eq!(c[0].addr, 160);
        q.finish(c.id, Vec::new());
        let d = q.due(t0 + Duration::from_millis(150));
        assert_eq!(d.len(), 8);
        q.finish(d.id, Vec::new());
        assert!(q.is_empty());
        assert!(q.due(t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(q.in_flight(), 0);
    }

    /// A checkpoint logs what is queued and what is being issued (`pending`): a batch
    /// taken by an issuer stays logged until it is finished, and what it could not issue
    /// is queued again at the front.
    #[test]
    fn batches_in_flight_stay_pending_until_finished() {
        let mut q = DiscardQueue::new();
        q.extend((0..10).map(|i| DiscardCmd {
            addr: i * 10,
            len: 1,
        }));
        let a = q.take_front(4);
        let b = q.take_all();
        assert_eq!((a.len(), b.len(), q.len()), (4, 6, 0));
        assert_eq!(
            q.pending().count(),
            10,
            "in-flight batches are still to log"
        );
        q.finish(a.id, Vec::new());
        assert_eq!(q.pending().count(), 6);
        q.finish(b.id, b.cmds[3..].to_vec());
        assert_eq!(q.in_flight(), 0);
        let left: Vec<u64> = q.pending().map(|c| c.addr).collect();
        assert_eq!(left, vec![70, 80, 90]);
        let empty = q.take_all();
        assert_eq!(q.in_flight(), 1);
        q.finish(empty.id, Vec::new());
        let none = q.take_all();
        assert_eq!(
            (none.id, q.in_flight()),
            (0, 0),
            "an empty batch is not tracked"
        );
    }

    #[test]
    fn log_round_trip_uses_ranges_and_bitmaps() {
        let cmds = vec![
            DiscardCmd { addr: 1000, len: 3 },
            DiscardCmd { addr: 1510, len: 5 }, // crosses a segment boundary
            DiscardCmd {
                addr: 4096,
                len: 512,
            },
            DiscardCmd {
                addr: (1 << 56) + 7,
                len: 100_000,
            },
        ];
        let log = encode_log(&cmds);
        assert_eq!(get_u32(&log, 0), 2, "two long runs as ranges");
        assert_eq!(
            get_u32(&log, 4),
            2,
            "short runs in the bitmaps of segments 512 and 1536"
        );
        assert_eq!(log.len(), 8 + 2 * 16 + 2 * 72);
        let back = decode_log(&log, u64::MAX).unwrap();
        assert_eq!(blocks(&back), blocks(&cmds));
        assert_eq!(decode_log(&encode_log(&[]), 0).unwrap(), vec![]);
        // Random sets round-trip.
        let mut r = Rng(9);
        let mut m = DiscardMap::new();
        for _ in 0..300 {
            m.invalidate(r.next() % (1 << 22), 1 + r.next() % 700);
        }
        let cmds = m.drain_commands();
        assert_eq!(decode_log(&encode_log(&cmds), 1 << 23).unwrap(), cmds);
    }

    /// The log's bytes do not depend on the order of the commands or on repeats: bitmaps
    /// come out sorted by segment, one per segment, as a map keyed by segment builds them.
    #[test]
    fn encode_log_is_order_independent() {
        let mut r = Rng(3);
        let mut cmds: Vec<DiscardCmd> = (0..2000)
            .map(|_| DiscardCmd {
                addr: r.next() % (1 << 16) + if r.next() % 3 == 0 { 5 << 56 } else { 0 },
                len: if r.next() % 20 == 0 {
                    LONG_RUN_BLOCKS + r.next() % 900
                } else {
                    1 + r.next() % 40
                },
            })
            .collect();
        // The reference: one bitmap per segment, in a map.
        let mut want_maps: BTreeMap<u64, [u8; 64]> = BTreeMap::new();
        let mut want_ranges = Vec::new();
        for c in &cmds {
            if c.len >= LONG_RUN_BLOCKS {
                want_ranges.push(*c);
                continue;
            }
            for b in c.addr..c.addr + c.len {
                let seg = b - b % LOG_BITMAP_BLOCKS;
                let i = (b - seg) as usize;
                want_maps.entry(seg).or_insert([0; 64])[i / 8] |= 1 << (i % 8);
            }
        }
        let log = encode_log(&cmds);
        assert_eq!(get_u32(&log, 0) as usize, want_ranges.len());
        assert_eq!(get_u32(&log, 4) as usize, want_maps.len());
        let mut off = HEADER_BYTES + want_ranges.len() * RANGE_BYTES;
        for (seg, map) in &want_maps {
            assert_eq!(get_u64(&log, off), *seg);
            assert_eq!(&log[off + 8..off + BITMAP_BYTES], map);
            off += BITMAP_BYTES;
        }
        // Sorted input (as a checkpoint logs it) and repeated commands: the same bitmaps.
        let long: Vec<DiscardCmd> = cmds
            .iter()
            .filter(|c| c.len >= LONG_RUN_BLOCKS)
            .copied()
            .collect();
        let mut short: Vec<DiscardCmd> = cmds
            .iter()
            .filter(|c| c.len < LONG_RUN_BLOCKS)
            .copied()
            .collect();
        short.sort_unstable();
        let again: Vec<DiscardCmd> = long
            .iter()
            .chain(&short)
            .chain(short.iter().step_by(3))
            .copied()
            .collect();
        assert_eq!(encode_log(&again), log);
        cmds.clear();
        assert_eq!(encode_log(&cmds), encode_log(&[]));
    }

    #[test]
    fn hostile_logs_are_refused() {
        let good = encode_log(&[
            DiscardCmd { addr: 10, len: 600 },
            DiscardCmd { addr: 2000, len: 2 },
        ]);
        // Truncated anywhere, or extended: refused.
        for n in 0..good.len() {
            assert!(decode_log(&good[..n], 1 << 20).is_err(), "truncated at {n}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode_log(&longer, 1 << 20).is_err());
        // Past the limit.
        assert!(decode_log(&good, 600).is_err());
        assert!(decode_log(&good, 2001).is_err());
        assert!(decode_log(&good, 2002).is_ok());
        // Overflowing range, empty range, unaligned or empty bitmap, huge counts.
        let mut ov = good.clone();
        put_u64(&mut ov, 8, u64::MAX - 5);
        assert!(decode_log(&ov, u64::MAX).is_err());
        let mut empty = good.clone();
        put_u64(&mut empty, 16, 0);
        assert!(decode_log(&empty, u64::MAX).is_err());
        let mut unaligned = good.clone();
        put_u64(&mut unaligned, 24, 1537);
        assert!(decode_log(&unaligned, u64::MAX).is_err());
        let mut zero = good.clone();
        zero[32..].fill(0);
        assert!(decode_log(&zero, u64::MAX).is_err());
        let mut huge = good.clone();
        put_u32(&mut huge, 0, u32::MAX);
        put_u32(&mut huge, 4, u32::MAX);
        assert!(decode_log(&huge, u64::MAX).is_err());
        // The last bitmap of the 64-bit space: its blocks are checked against the limit.
        let top = encode_log(&[DiscardCmd {
            addr: u64::MAX - 1,
            len: 1,
        }]);
        assert_eq!(get_u64(&top, 8), u64::MAX - 511);
        assert!(decode_log(&top, u64::MAX).is_ok());
        assert!(decode_log(&top, u64::MAX - 1).is_err());
    }
}
