//! Page contents: not kept (timing-only), kept sparsely in RAM, or kept in a backing file.
//! Contents are keyed by logical block, so GC moves never copy data; an FTL variant that
//! changes a page's logical address during GC must call [`Store::relocate`].
//!
//! Owns: the content of every written logical block. The RAM store keeps it in 64 shards
//! (runs of 64 blocks: `(lpn / 64) % 64`, so a request locks a shard once per run it
//! touches, not once per block), each an arena of fixed 4 KiB slots allocated in 1 MiB
//! chunks, a free list of slot numbers and a map from a run (`lpn / 64`) to its 64 slot
//! numbers (a multiplicative hash of the `u64` key, not SipHash; a run leaves the map when
//! its last block does). A write copies into the block's slot (its old slot when it has
//! one, else a free one: no allocation, no zeroing per block), one map lookup per run it
//! touches; a discard returns the slot to the free list, and a request of many ranges
//! (`discard_many`) takes each shard's lock once; a relocation inside a shard moves the
//! slot number, across shards copies the 4 KiB once with both shard locks held.
//!
//! Invariants: a block never written, or discarded since, reads as zeros (it has no slot:
//! reads of unmapped blocks fill zeros, slots are never read before a write filled them);
//! a write of a block is visible to every read that starts after the write returned (the
//! copy is done under the shard lock); a slot is in exactly one of {a run's entry, the free
//! list}, and a run in the map has at least one slot (`RamShard::check`); memory is bounded
//! by live blocks, not by blocks ever written: freed slots are reused first, and a shard
//! whose free slots exceed both its live blocks and `RAM_COMPACT_FREE_MIN` moves its live
//! slots down and returns the empty chunks. The map costs ~264 B per run that holds a block: about
//! 4 B per block of a full run, 6.4 % of the block's 4 KiB when a run holds only one.
//!
//! Lock order: the RAM store's shard locks are leaves, never held while calling out and
//! metered together by one `LockMeter`. One is held at a time, except by a relocation
//! across shards (the two) and by `hold_for_write` (the write's shards, for its caller to
//! copy into): both take them in ascending shard order, and a holder takes no further
//! lock, so no cycle. The file store has no locks (positional I/O).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::fs::FileExt;
use std::path::Path;

use flashlog_dev::{DevResult, BLOCK_SIZE, BLOCK_SIZE_U64};
use parking_lot::Mutex;

use crate::locks::{LockMeter, LockSummary, Metered};

/// Shards of the RAM store: enough that two to a few dozen threads rarely collide.
const RAM_SHARDS: usize = 64;
/// Consecutive blocks per shard: block `lpn` is in shard `(lpn / RAM_SHARD_RUN) % RAM_SHARDS`,
/// so a request takes one shard lock per 64 blocks (256 KiB) it touches, not one per block
/// (the file systems' writes and discards are mostly runs of dozens of blocks), while 4 KiB
/// random I/O still spreads over all shards.
const RAM_SHARD_RUN: u64 = 64;
/// Discards up to this many blocks remove them one by one; longer ones scan the stored blocks.
const RAM_DISCARD_PER_BLOCK: u64 = 1 << 20;
/// Slots per arena chunk: 256 x 4 KiB = 1 MiB, so a chunk comes zeroed from `mmap` (untouched
/// pages cost nothing) and a shard's slot table stays short (1 GiB of data: 16 chunks a
/// shard). Unit tests use 16, so that their few thousand blocks span many chunks and
/// compactions have blocks to move.
const RAM_CHUNK_SLOTS: usize = if cfg!(test) { 16 } else { 256 };
/// A shard compacts when its free slots exceed both its live blocks and this many: at least
/// half its memory is then idle, and the compaction (O(live blocks) plus one copy per moved
/// slot) is paid for by at least this many frees since the last one. So a shard's slots are
/// at most `live + max(live, RAM_COMPACT_FREE_MIN)`: 2 MiB idle per shard (128 MiB for the
/// store) at most beyond as much as it holds live.
const RAM_COMPACT_FREE_MIN: usize = 2 * RAM_CHUNK_SLOTS;

const _: () = assert!(RAM_CHUNK_SLOTS.is_power_of_two());
const _: () = assert!(RAM_SHARD_RUN.is_power_of_two());
const _: () = assert!(RAM_COMPACT_FREE_MIN >= RAM_CHUNK_SLOTS);

/// `RAM_CHUNK_SLOTS` slots of `BLOCK_SIZE` bytes. Bytes, not `[[u8; BLOCK_SIZE]]`: a
/// `vec![0u8; _]` is one zeroed allocation (calloc), where `vec![[0u8; BLOCK_SIZE]; _]`
/// memsets every element.
type Chunk = Box<[u8]>;
/// An index into a shard's arena: chunk `n / RAM_CHUNK_SLOTS`, slot `n % RAM_CHUNK_SLOTS`.
type SlotNo = u32;

/// Hash of an `lpn` key: one 64x64->128 multiply folded to 64 bits, so both the low bits
/// (the bucket) and the high bits (the control byte) depend on every key bit. The keys of
/// one shard share bits 6-11 (`(lpn / 64) % 64`) and most have their top bits all zero, so
/// the identity hash would crowd the buckets and give every key the same control byte.
#[derive(Default)]
struct LpnHasher(u64);

impl Hasher for LpnHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; stay correct for anything else.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let p = u128::from(x ^ self.0).wrapping_mul(u128::from(K));
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The slots of one aligned run of [`RAM_SHARD_RUN`] blocks (key `lpn / RAM_SHARD_RUN`),
/// [`NO_SLOT`] where a block has none.
struct Run {
    slots: [SlotNo; RUN],
    /// Blocks of the run that have a slot (> 0 while the run is in the map).
    live: u32,
}

impl Run {
    fn empty() -> Self {
        Run {
            slots: [NO_SLOT; RUN],
            live: 0,
        }
    }
}

/// A block without a slot (reads as zeros). Slot numbers stay below it (`add_chunk_for`).
const NO_SLOT: SlotNo = SlotNo::MAX;
const RUN: usize = RAM_SHARD_RUN as usize;

type RunMap = HashMap<u64, Run, BuildHasherDefault<LpnHasher>>;

/// The run key and the index in the run of `lpn`.
fn run_of(lpn: u64) -> (u64, usize) {
    (lpn / RAM_SHARD_RUN, (lpn % RAM_SHARD_RUN) as usize)
}

/// One shard of the RAM store: the slots of its blocks and the map to them (opaque outside
/// this module). The map is keyed by run, not by block: a request's blocks in one run
/// (what [`runs`] cuts it into) cost one lookup, and a log's appends fill a run's entry in
/// place instead of inserting a map entry per block (a per-block map was 5-7 % of a
/// `gc=none` bench run's CPU: an insert per block written, a probe that missed the cache
/// per block discarded, in a table 64 times larger).
#[derive(Default)]
pub struct RamShard {
    runs: RunMap,
    /// Blocks with a slot (the sum of the runs' `live`).
    live: usize,
    chunks: Vec<Chunk>,
    /// Every slot of `chunks` not in `runs`; popped from the end (the most recently freed,
    /// likely still in cache, first).
    free: Vec<SlotNo>,
}

impl RamShard {
    fn slot(&self, n: SlotNo) -> &[u8] {
        let (c, bytes) = slot_at(n);
        &self.chunks[c][bytes]
    }

    fn slots(&self) -> usize {
        self.chunks.len() * RAM_CHUNK_SLOTS
    }

    /// Copy the blocks `first..first + n` (one run) into `out`, zeros where a block has no
    /// slot.
    fn read_run<'b>(&self, first: u64, out: impl Iterator<Item = &'b mut [u8]>) {
        let (key, i0) = run_of(first);
        let run = self.runs.get(&key);
        for (i, block) in (i0..RUN).zip(out) {
            match run.map(|r| r.slots[i]).filter(|&n| n != NO_SLOT) {
                Some(n) => block.copy_from_slice(self.slot(n)),
                None => block.fill(0),
            }
        }
    }

    /// Blocks of `first..first + n` (one run) that have no slot yet.
    fn missing(&self, first: u64, n: u64) -> usize {
        let (key, i0) = run_of(first);
        match self.runs.get(&key) {
            Some(r) => r.slots[i0..i0 + n as usize]
                .iter()
                .filter(|&&s| s == NO_SLOT)
                .count(),
            None => n as usize,
        }
    }

    /// Copy `blocks` into the slots of `first..` (one run): each block's own slot, or a free
    /// one. The caller made sure enough slots are free ([`RamShard::missing`]). A reused
    /// slot still holds its last owner's bytes: every byte is overwritten.
    fn write_run<'b>(&mut self, first: u64, blocks: impl Iterator<Item = &'b [u8]>) {
        let (key, i0) = run_of(first);
        let RamShard {
            runs,
            live,
            chunks,
            free,
        } = self;
        let run = runs.entry(key).or_insert_with(Run::empty);
        for (i, block) in (i0..RUN).zip(blocks) {
            let mut n = run.slots[i];
            if n == NO_SLOT {
                n = free.pop().expect("the caller made enough slots free");
                run.slots[i] = n;
                run.live += 1;
                *live += 1;
            }
            let (c, bytes) = slot_at(n);
            chunks[c][bytes].copy_from_slice(block);
        }
    }

    /// Add `chunk` (from [`new_chunk`]) when fewer than `want` slots are free; else drop it
    /// (another writer added one while neither held the lock), so free slots stay within
    /// the bound.
    fn add_chunk_for(&mut self, chunk: Chunk, want: usize) {
        if self.free.len() >= want {
            return;
        }
        let first = self.slots();
        let end = first + RAM_CHUNK_SLOTS;
        assert!(
            end < NO_SLOT as usize,
            "RAM store shard over 2^32 - 1 slots"
        );
        assert_eq!(chunk.len(), RAM_CHUNK_SLOTS * BLOCK_SIZE);
        self.chunks.push(chunk);
        // Descending, so pops hand out ascending slots.
        self.free.extend((first as SlotNo..end as SlotNo).rev());
    }

    /// Add chunks, made with the lock held, until `want` slots are free (for callers that
    /// may not release the lock: a relocation, a held write).
    fn free_at_least(&mut self, want: usize) {
        while self.free.len() < want {
            self.add_chunk_for(new_chunk(), want);
        }
    }

    /// Take `lpn`'s slot out of the map (not freed: the caller moves or frees it).
    fn take(&mut self, lpn: u64) -> Option<SlotNo> {
        let (key, i) = run_of(lpn);
        let run = self.runs.get_mut(&key)?;
        let n = std::mem::replace(&mut run.slots[i], NO_SLOT);
        if n == NO_SLOT {
            return None;
        }
        run.live -= 1;
        self.live -= 1;
        if run.live == 0 {
            self.runs.remove(&key);
        }
        Some(n)
    }

    /// Give `lpn` slot `n`; returns the slot it had.
    fn put(&mut self, lpn: u64, n: SlotNo) -> Option<SlotNo> {
        let (key, i) = run_of(lpn);
        let run = self.runs.entry(key).or_insert_with(Run::empty);
        let old = std::mem::replace(&mut run.slots[i], n);
        if old == NO_SLOT {
            run.live += 1;
            self.live += 1;
            None
        } else {
            Some(old)
        }
    }

    /// Forget the content of `first..first + n` (one run); the slots go back to the free
    /// list.
    fn remove_run(&mut self, first: u64, n: u64) {
        let (key, i0) = run_of(first);
        let Some(run) = self.runs.get_mut(&key) else {
            return;
        };
        let mut freed = 0;
        for s in &mut run.slots[i0..i0 + n as usize] {
            let slot = std::mem::replace(s, NO_SLOT);
            if slot != NO_SLOT {
                self.free.push(slot);
                freed += 1;
            }
        }
        run.live -= freed;
        self.live -= freed as usize;
        if run.live == 0 {
            self.runs.remove(&key);
        }
        if freed > 0 {
            self.maybe_compact();
        }
    }

    fn release(&mut self, n: SlotNo) {
        self.free.push(n);
        self.maybe_compact();
    }

    fn maybe_compact(&mut self) {
        if self.free.len() > self.live.max(RAM_COMPACT_FREE_MIN) {
            self.compact();
        }
    }

    /// Move the live slots into the lowest chunks and drop the chunks left empty.
    fn compact(&mut self) {
        let keep_chunks = self.live.div_ceil(RAM_CHUNK_SLOTS);
        let keep = (keep_chunks * RAM_CHUNK_SLOTS) as SlotNo;
        // Free slots below `keep` are the destinations: there are at least as many as live
        // slots at or above it (`keep` slots hold at most `live` ones).
        let mut to: Vec<SlotNo> = self.free.iter().copied().filter(|&n| n < keep).collect();
        let (low, high) = self.chunks.split_at_mut(keep_chunks);
        let moving = self
            .runs
            .values_mut()
            .flat_map(|r| r.slots.iter_mut())
            .filter(|n| **n != NO_SLOT && **n >= keep);
        for n in moving {
            let t = to
                .pop()
                .expect("a free slot below keep for every live slot above it");
            let ((sc, sb), (dc, db)) = (slot_at(*n - keep), slot_at(t));
            low[dc][db].copy_from_slice(&high[sc][sb]);
            *n = t;
        }
        self.chunks.truncate(keep_chunks);
        self.chunks.shrink_to_fit();
        // Descending, as after `add_chunk_for`.
        to.sort_unstable_by(|a, b| b.cmp(a));
        to.shrink_to_fit();
        self.free = to;
        self.runs.shrink_to_fit();
    }

    /// Check that every slot is either mapped once or free once, that the live counts
    /// add up, and that the memory bound holds (O(slots); for tests).
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.slots()];
        let mut live = 0usize;
        for (key, r) in &self.runs {
            let n = r.slots.iter().filter(|&&s| s != NO_SLOT).count();
            if n == 0 || n != r.live as usize {
                return Err(format!("run {key}: {n} slots, live {}", r.live));
            }
            live += n;
        }
        if live != self.live {
            return Err(format!("{live} mapped slots, live {}", self.live));
        }
        let mapped = self
            .runs
            .values()
            .flat_map(|r| r.slots.iter())
            .filter(|&&s| s != NO_SLOT);
        for &n in mapped.chain(self.free.iter()) {
            let s = seen
                .get_mut(n as usize)
                .ok_or(format!("slot {n} beyond {} slots", self.slots()))?;
            if std::mem::replace(s, true) {
                return Err(format!("slot {n} mapped or freed twice"));
            }
        }
        if let Some(n) = seen.iter().position(|s| !s) {
            return Err(format!("slot {n} neither mapped nor free (leaked)"));
        }
        if self.free.len() > self.live.max(RAM_COMPACT_FREE_MIN) {
            return Err(format!(
                "{} free slots for {} live ones: should have compacted",
                self.free.len(),
                self.live
            ));
        }
        Ok(())
    }
}

/// The shard locks of one write, taken by [`Store::hold_for_write`].
pub struct HeldWrite<'a> {
    /// (shard number, its lock), ascending and distinct.
    held: Vec<(usize, Metered<'a, RamShard>)>,
    addr: u64,
    count: u64,
}

impl HeldWrite<'_> {
    /// Copy `buf` (the `count` blocks the locks were taken for) into the store; the locks
    /// are released on return.
    pub fn write(mut self, buf: &[u8]) {
        assert_eq!(buf.len() as u64, self.count * BLOCK_SIZE_U64);
        let mut blocks = buf.chunks_exact(BLOCK_SIZE);
        for (first, n) in runs(self.addr, self.count) {
            let no = Store::shard_no(first);
            let i = self
                .held
                .binary_search_by_key(&no, |h| h.0)
                .expect("every run's shard is held");
            self.held[i]
                .1
                .write_run(first, blocks.by_ref().take(n as usize));
        }
    }
}

/// A zeroed chunk with its pages faulted in. `vec![0u8; _]` is a zeroed
/// allocation (calloc: fresh pages from mmap), not a memset of 1 MiB; but the first write
/// into each page is then a page fault in which the kernel zeroes it (~1-2 us), which a
/// writer would take under the shard lock (and, on remapping FTLs, the engine lock). One
/// store per page here, outside the locks, takes them instead. `black_box` hides that the
/// memory is known to be zero, so the stores are not elided.
fn new_chunk() -> Chunk {
    #[cfg(test)]
    tests::CHUNKS_MADE.with(|c| c.set(c.get() + 1));
    let mut chunk = std::hint::black_box(vec![0u8; RAM_CHUNK_SLOTS * BLOCK_SIZE]);
    for page in chunk.chunks_exact_mut(BLOCK_SIZE) {
        page[0] = 0;
    }
    chunk.into_boxed_slice()
}

/// `count` blocks from `addr` (up to the last address) as runs `(first, n)` that each lie in
/// one shard: split at multiples of `RAM_SHARD_RUN`.
fn runs(addr: u64, count: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = addr.saturating_add(count);
    let mut at = addr;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let next = (at | (RAM_SHARD_RUN - 1)).saturating_add(1).min(end);
        let run = (at, next - at);
        at = next;
        Some(run)
    })
}

/// The chunk of slot `n` and its bytes there.
fn slot_at(n: SlotNo) -> (usize, std::ops::Range<usize>) {
    let n = n as usize;
    let at = (n % RAM_CHUNK_SLOTS) * BLOCK_SIZE;
    (n / RAM_CHUNK_SLOTS, at..at + BLOCK_SIZE)
}

type Shard = Mutex<RamShard>;

/// Where page contents live.
pub enum Store {
    None,
    /// Shards keyed by `(lpn / RAM_SHARD_RUN) % RAM_SHARDS`, and one meter for all of their
    /// locks.
    Ram(Box<[Shard]>, LockMeter),
    File(File),
}

impl Store {
    pub fn none() -> Self {
        Store::None
    }

    pub fn ram() -> Self {
        Store::Ram(
            (0..RAM_SHARDS)
                .map(|_| Mutex::new(RamShard::default()))
                .collect(),
            LockMeter::default(),
        )
    }

    /// Open (creating if needed) a backing file sized to `blocks` blocks.
    pub fn file(path: &Path, blocks: u64) -> std::io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = blocks * BLOCK_SIZE_U64;
        if f.metadata()?.len() < len {
            f.set_len(len)?;
        }
        Ok(Store::File(f))
    }

    pub fn persistent(&self) -> bool {
        matches!(self, Store::File(_))
    }

    fn shard_no(lpn: u64) -> usize {
        ((lpn / RAM_SHARD_RUN) % RAM_SHARDS as u64) as usize
    }

    fn shard<'a>(shards: &'a [Shard], meter: &'a LockMeter, lpn: u64) -> Metered<'a, RamShard> {
        meter.lock(&shards[Self::shard_no(lpn)])
    }

    /// The shard locks' counters (None: this store has no locks).
    pub fn lock_summary(&self) -> Option<LockSummary> {
        match self {
            Store::Ram(_, meter) => Some(meter.summary()),
            _ => None,
        }
    }

    pub fn reset_lock_stats(&self) {
        if let Store::Ram(_, meter) = self {
            meter.reset();
        }
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> DevResult<()> {
        match self {
            Store::None => Ok(()),
            Store::Ram(shards, meter) => {
                let mut blocks = buf.chunks_exact(BLOCK_SIZE);
                for (first, n) in runs(addr, (buf.len() / BLOCK_SIZE) as u64) {
                    // Straight into each block's slot: no allocation, no zeroing, one copy. A
                    // new chunk is made with the shard lock released. (Remapping FTLs write
                    // through `hold_for_write` instead, which may not release it.)
                    let mut s = Self::shard(shards, meter, first);
                    loop {
                        let missing = s.missing(first, n);
                        if s.free.len() >= missing {
                            break;
                        }
                        drop(s);
                        let c = new_chunk();
                        s = Self::shard(shards, meter, first);
                        s.add_chunk_for(c, missing);
                    }
                    s.write_run(first, blocks.by_ref().take(n as usize));
                }
                Ok(())
            }
            Store::File(f) => Ok(f.write_all_at(buf, addr * BLOCK_SIZE_U64)?),
        }
    }

    /// Take the shard locks that a write of `count` blocks at `addr` needs, in ascending
    /// shard order, and make sure their shards have a free slot for every block without
    /// one (a new chunk, if at all, made with the locks held). The write itself
    /// ([`HeldWrite::write`]) then needs no other lock. For remapping FTLs, whose store
    /// operations must happen in the engine's order: the locks are taken under the engine
    /// lock, the copy is done after it is released, and every later engine request that
    /// touches these blocks (a GC relocation, a read, a discard, another write) waits at
    /// their shard lock until the copy is done. None for a store without shard locks.
    pub fn hold_for_write(&self, addr: u64, count: u64) -> Option<HeldWrite<'_>> {
        let Store::Ram(shards, meter) = self else {
            return None;
        };
        let mut need: Vec<(usize, u64, u64)> = runs(addr, count)
            .map(|(first, n)| (Self::shard_no(first), first, n))
            .collect();
        need.sort_unstable_by_key(|r| r.0);
        let mut held: Vec<(usize, Metered<'_, RamShard>)> = Vec::new();
        // Slots the runs so far need in the last shard taken: runs of one request in one
        // shard are disjoint, so their missing slots add up.
        let mut want = 0;
        for &(no, first, n) in &need {
            if held.last().is_none_or(|h| h.0 != no) {
                held.push((no, meter.lock(&shards[no])));
                want = 0;
            }
            let (_, s) = held.last_mut().expect("pushed");
            want += s.missing(first, n);
            s.free_at_least(want);
        }
        Some(HeldWrite { held, addr, count })
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<()> {
        match self {
            Store::None => {
                buf.fill(0);
                Ok(())
            }
            Store::Ram(shards, meter) => {
                let count = (buf.len() / BLOCK_SIZE) as u64;
                let mut blocks = buf.chunks_exact_mut(BLOCK_SIZE);
                for (first, n) in runs(addr, count) {
                    let s = Self::shard(shards, meter, first);
                    s.read_run(first, blocks.by_ref().take(n as usize));
                }
                Ok(())
            }
            Store::File(f) => Ok(f.read_exact_at(buf, addr * BLOCK_SIZE_U64)?),
        }
    }

    pub fn discard(&self, addr: u64, count: u64) -> DevResult<()> {
        match self {
            Store::None => Ok(()),
            Store::Ram(shards, meter) => {
                if count <= RAM_DISCARD_PER_BLOCK {
                    for (first, n) in runs(addr, count) {
                        Self::shard(shards, meter, first).remove_run(first, n);
                    }
                } else {
                    // A huge range (an infinite logical space makes these cheap to ask for):
                    // visit what is stored instead of every address.
                    let end = addr.saturating_add(count);
                    for shard in shards.iter() {
                        let mut s = meter.lock(shard);
                        let gone: Vec<u64> = s
                            .runs
                            .keys()
                            .map(|&key| key * RAM_SHARD_RUN)
                            .filter(|&first| {
                                first < end && first.saturating_add(RAM_SHARD_RUN) > addr
                            })
                            .collect();
                        for first in gone {
                            let lo = first.max(addr);
                            let hi = end.min(first.saturating_add(RAM_SHARD_RUN));
                            s.remove_run(lo, hi - lo);
                        }
                    }
                }
                Ok(())
            }
            Store::File(f) => {
                use rustix::fs::{fallocate, FallocateFlags};
                let (off, len) = (addr * BLOCK_SIZE_U64, count * BLOCK_SIZE_U64);
                match fallocate(
                    f,
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    off,
                    len,
                ) {
                    Ok(()) => Ok(()),
                    // File systems without hole punching: write zeros instead.
                    Err(_) => {
                        let zeros = vec![0u8; BLOCK_SIZE];
                        for lpn in addr..addr + count {
                            f.write_all_at(&zeros, lpn * BLOCK_SIZE_U64)?;
                        }
                        Ok(())
                    }
                }
            }
        }
    }

    /// Discard several ranges (one NVMe DSM request). The RAM store sorts the ranges' runs
    /// by shard and takes each shard lock once: random overwrites leave one-block ranges,
    /// 256 to a request, so taking the lock per range took it (metered: two clock reads and
    /// three shared atomics) once per block discarded.
    pub fn discard_many(&self, ranges: &[(u64, u64)]) -> DevResult<()> {
        let Store::Ram(shards, meter) = self else {
            for &(addr, count) in ranges {
                self.discard(addr, count)?;
            }
            return Ok(());
        };
        let mut pieces: Vec<(usize, u64, u64)> = Vec::with_capacity(ranges.len());
        for &(addr, count) in ranges {
            if count > RAM_DISCARD_PER_BLOCK {
                self.discard(addr, count)?;
                continue;
            }
            pieces.extend(runs(addr, count).map(|(first, n)| (Self::shard_no(first), first, n)));
        }
        pieces.sort_unstable_by_key(|p| p.0);
        for group in pieces.chunk_by(|a, b| a.0 == b.0) {
            let mut s = meter.lock(&shards[group[0].0]);
            for &(_, first, n) in group {
                s.remove_run(first, n);
            }
        }
        Ok(())
    }

    /// Make every completed write durable (only the file store has anything to do).
    pub fn sync(&self) -> DevResult<()> {
        match self {
            Store::File(f) => Ok(f.sync_data()?),
            _ => Ok(()),
        }
    }

    /// Move the content of block `from` to block `to` (FTL variants that remap during GC).
    /// The RAM store moves the slot number when both blocks are in one shard, and otherwise
    /// copies the 4 KiB once, slot to slot, with both shards locked (in ascending order):
    /// not read + write + discard (three copies, under the engine lock).
    pub fn relocate(&self, from: u64, to: u64) -> DevResult<()> {
        match self {
            Store::Ram(shards, meter) => {
                let (a, b) = (Self::shard_no(from), Self::shard_no(to));
                if a == b {
                    let mut s = meter.lock(&shards[a]);
                    match s.take(from) {
                        Some(n) => {
                            if let Some(old) = s.put(to, n) {
                                s.release(old);
                            }
                        }
                        None => s.remove_run(to, 1),
                    }
                    return Ok(());
                }
                let (mut src, mut dst) = if a < b {
                    let src = meter.lock(&shards[a]);
                    (src, meter.lock(&shards[b]))
                } else {
                    let dst = meter.lock(&shards[b]);
                    (meter.lock(&shards[a]), dst)
                };
                match src.take(from) {
                    Some(n) => {
                        // A new chunk only if `to` needs a slot and none is free, made
                        // under the lock (then rare: a shard's free slots are reused
                        // first). Made whenever `to` had no slot, it cost a 1 MiB
                        // allocation and 256 page faults per GC move on the coupled FTL,
                        // under the engine lock: 55 % of `device`'s CPU at 16 threads.
                        let want = dst.missing(to, 1);
                        dst.free_at_least(want);
                        dst.write_run(to, std::iter::once(src.slot(n)));
                        src.release(n);
                    }
                    None => dst.remove_run(to, 1),
                }
                Ok(())
            }
            _ => {
                let mut buf = vec![0u8; BLOCK_SIZE];
                self.read(from, &mut buf)?;
                self.write(to, &buf)?;
                self.discard(from, 1)
            }
        }
    }

    /// Slots of the RAM store: (holding content, allocated); for tests of its memory bound.
    #[cfg(test)]
    fn ram_slots(&self) -> (usize, usize) {
        match self {
            Store::Ram(shards, _) => shards.iter().fold((0, 0), |(l, a), s| {
                let s = s.lock();
                (l + s.live, a + s.slots())
            }),
            _ => (0, 0),
        }
    }

    /// Check every RAM shard's slot accounting (for tests).
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        if let Store::Ram(shards, _) = self {
            for (i, s) in shards.iter().enumerate() {
                s.lock().check().map_err(|e| format!("shard {i}: {e}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    thread_local! {
        /// Chunks `new_chunk` made on this thread (tests run on threads of their own).
        pub(super) static CHUNKS_MADE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    use super::*;

    /// The content the model expects for `lpn` after its `version`-th write: every 8-byte
    /// word differs per block and per write, so a slot handed to two blocks, a stale slot
    /// or a wrong copy shows.
    fn block(lpn: u64, version: u64) -> Vec<u8> {
        (0..BLOCK_SIZE as u64 / 8)
            .flat_map(|w| (lpn.rotate_left(17) ^ version.rotate_left(40) ^ (w + 1)).to_le_bytes())
            .collect()
    }

    /// Address `off` (0..64, more runs into the next shard) of the `k`-th run of `shard`.
    fn in_shard(shard: u64, k: u64, off: u64) -> u64 {
        RAM_SHARD_RUN * (RAM_SHARDS as u64 * k + shard) + off
    }

    fn rng(x: &mut u64) -> u64 {
        // xorshift64*
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Read `lpn` and compare it with the model (`None`: zeros).
    fn expect(s: &Store, lpn: u64, want: Option<u64>, what: &str) {
        let mut b = vec![0xa5u8; BLOCK_SIZE];
        s.read(lpn, &mut b).unwrap();
        match want {
            Some(v) => assert!(b == block(lpn, v), "{what}: lpn {lpn} is not version {v}"),
            None => assert!(
                b.iter().all(|&x| x == 0),
                "{what}: lpn {lpn} should read zeros"
            ),
        }
    }

    /// Requests split into per-shard runs at multiples of `RAM_SHARD_RUN`, up to the last
    /// address of the infinite logical space.
    #[test]
    fn runs_split_at_shard_boundaries() {
        let r = |a, n| runs(a, n).collect::<Vec<_>>();
        assert_eq!(r(60, 10), [(60, 4), (64, 6)]);
        assert_eq!(r(0, 130), [(0, 64), (64, 64), (128, 2)]);
        assert_eq!(r(5, 0), []);
        assert_eq!(r(u64::MAX - 3, 3), [(u64::MAX - 3, 3)]);
        assert_eq!(
            r(u64::MAX - 70, 10),
            [(u64::MAX - 70, 7), (u64::MAX - 63, 3)]
        );
        for (a, n) in r(100, 1000) {
            assert_eq!(Store::shard_no(a), Store::shard_no(a + n - 1));
        }
    }

    /// `relocate` moves a block's content to its new address and leaves zeros behind, in the
    /// RAM store (which moves the block itself) as in the generic path; a relocation from an
    /// address with no content leaves the destination reading zeros.
    #[test]
    fn relocate_moves_content_and_leaves_zeros() {
        let s = Store::ram();
        let data: Vec<u8> = (0..BLOCK_SIZE).map(|i| (i % 251) as u8 + 1).collect();
        s.write(7, &data).unwrap();
        s.write(9, &data).unwrap();
        s.relocate(7, 1000).unwrap();
        let mut b = vec![0u8; BLOCK_SIZE];
        s.read(1000, &mut b).unwrap();
        assert_eq!(b, data);
        s.read(7, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        // Nothing at 8: the destination (which held data) reads zeros afterwards.
        s.relocate(8, 9).unwrap();
        s.read(9, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        s.check().unwrap();
    }

    /// A relocation across shards into a shard with free slots makes no new chunk (it made
    /// one, 1 MiB allocated and faulted in, per relocation, and dropped it: 55 % of the CPU
    /// of `device` at 16 threads, where the coupled FTL relocates every GC move). Shard 1
    /// gets free slots by a write then a discard; then blocks of shard 0 move into it.
    #[test]
    fn relocation_into_free_slots_makes_no_chunk() {
        let s = Store::ram();
        let block = vec![7u8; BLOCK_SIZE];
        let run = RAM_SHARD_RUN;
        for i in 0..run {
            s.write(i, &block).unwrap();
            s.write(run + i, &block).unwrap();
        }
        s.discard(run, 8).unwrap();
        assert_ne!(Store::shard_no(0), Store::shard_no(run));
        let before = CHUNKS_MADE.with(|c| c.get());
        for i in 0..8 {
            s.relocate(i, run + i).unwrap();
        }
        assert_eq!(
            CHUNKS_MADE.with(|c| c.get()),
            before,
            "chunks made by relocations"
        );
        let mut b = vec![0u8; BLOCK_SIZE];
        for i in 0..8 {
            s.read(run + i, &mut b).unwrap();
            assert_eq!(b, block);
            s.read(i, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == 0));
        }
        s.check().unwrap();
    }

    /// `hold_for_write` keeps a relocation and a read of the held blocks waiting until the
    /// copy is done, as the engine's order requires (the device takes the locks
    /// under its engine lock and copies after releasing it): a relocation started while the
    /// locks are held moves the new bytes, not the old ones or zeros; a read sees the new
    /// bytes; blocks of other shards are not held. The write spans three shards (two runs
    /// of 64 and a part of one) and needs new slots in them.
    #[test]
    fn a_held_write_keeps_later_requests_on_its_blocks_waiting_for_the_copy() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let s = std::sync::Arc::new(Store::ram());
        let run = RAM_SHARD_RUN;
        let (addr, count) = (run - 8, 2 * run + 16);
        let old = vec![1u8; BLOCK_SIZE];
        s.write(addr, &old).unwrap();
        let new: Vec<u8> = (0..count as usize * BLOCK_SIZE)
            .map(|i| (i / BLOCK_SIZE) as u8 ^ 0x5a)
            .collect();
        let held = s
            .hold_for_write(addr, count)
            .expect("the RAM store has shard locks");
        // Another shard is free meanwhile.
        s.write(10 * run, &old).unwrap();
        let moved = std::sync::Arc::new(AtomicBool::new(false));
        let t = {
            let (s, moved) = (s.clone(), moved.clone());
            std::thread::spawn(move || {
                s.relocate(addr, 20 * run).unwrap();
                moved.store(true, Ordering::SeqCst);
                let mut b = vec![0u8; BLOCK_SIZE];
                s.read(addr + count - 1, &mut b).unwrap();
                b
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !moved.load(Ordering::SeqCst),
            "the relocation ran before the held write's copy"
        );
        held.write(&new);
        let last = t.join().unwrap();
        assert_eq!(last, new[new.len() - BLOCK_SIZE..]);
        let mut b = vec![0u8; BLOCK_SIZE];
        s.read(20 * run, &mut b).unwrap();
        assert_eq!(b, new[..BLOCK_SIZE], "the relocation moved the new bytes");
        s.read(addr, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        let mut rest = vec![0u8; (count as usize - 1) * BLOCK_SIZE];
        s.read(addr + 1, &mut rest).unwrap();
        assert_eq!(rest, new[BLOCK_SIZE..]);
        s.check().unwrap();
    }

    /// Random multi-block writes, overwrites, reads, discards (short ones block by block,
    /// huge ones by scanning, and thinning out a shard until it compacts), and relocations inside a shard and across shards, against a
    /// `HashMap` model of which version each block holds. Addresses cluster on a few shards
    /// (so slots are freed and reused a lot) and include some near 2^63 (the infinite
    /// logical space). Every read is compared, and the slot accounting (each slot mapped or
    /// free, exactly once) is checked every 256 steps.
    #[test]
    fn ram_store_matches_a_model_under_random_operations() {
        for seed in 1..=4u64 {
            let s = Store::ram();
            let mut model: HashMap<u64, u64> = HashMap::new();
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut version = 0u64;
            let addr = |x: &mut u64| {
                let r = rng(x);
                let base = if r % 16 == 0 { 1 << 63 } else { 0 };
                // 4 shards x 300 runs x 8 blocks; 1 in 4 at the end of a run, so that
                // multi-block requests (+0..3) cross into the next shard.
                let off = (r >> 24) % 8 + if (r >> 40) % 4 == 0 { 58 } else { 0 };
                base + in_shard((r >> 8) % 4, (r >> 16) % 300, off)
            };
            for step in 0..40_000u32 {
                let what = format!("seed {seed} step {step}");
                match rng(&mut x) % 100 {
                    0..=39 => {
                        let (a, n) = (addr(&mut x), 1 + rng(&mut x) % 3);
                        let mut buf = Vec::new();
                        for lpn in a..a + n {
                            version += 1;
                            buf.extend(block(lpn, version));
                            model.insert(lpn, version);
                        }
                        s.write(a, &buf).unwrap();
                    }
                    40..=64 => {
                        let lpn = addr(&mut x);
                        expect(&s, lpn, model.get(&lpn).copied(), &what);
                    }
                    65..=72 => {
                        let (a, n) = (addr(&mut x), 1 + rng(&mut x) % 4);
                        s.discard(a, n).unwrap();
                        for lpn in a..a + n {
                            model.remove(&lpn);
                        }
                    }
                    73..=79 => {
                        // One request of several ranges, some overlapping, now and then a
                        // huge one (the scan path) among them.
                        let k = 1 + rng(&mut x) % 8;
                        let mut ranges: Vec<(u64, u64)> = (0..k)
                            .map(|_| (addr(&mut x), 1 + rng(&mut x) % 70))
                            .collect();
                        if rng(&mut x) % 50 == 0 {
                            ranges.push((1 << 63, 1 << 40));
                        }
                        s.discard_many(&ranges).unwrap();
                        for &(a, n) in &ranges {
                            model.retain(|&lpn, _| !(a..a + n).contains(&lpn));
                        }
                    }
                    80..=98 => {
                        let (from, to) = if rng(&mut x) % 2 == 0 {
                            // Same shard: the slot number moves.
                            let f = addr(&mut x);
                            let shard = Store::shard_no(f) as u64;
                            (f, in_shard(shard, rng(&mut x) % 300, rng(&mut x) % 8))
                        } else {
                            (addr(&mut x), addr(&mut x))
                        };
                        if from == to {
                            continue;
                        }
                        s.relocate(from, to).unwrap();
                        match model.remove(&from) {
                            Some(v) => {
                                // The content keeps its bytes: written for `from`.
                                model.insert(to, v);
                                let mut b = vec![0u8; BLOCK_SIZE];
                                s.read(to, &mut b).unwrap();
                                assert!(b == block(from, v), "{what}: relocated {from} -> {to}");
                                // Track it by the bytes it holds from now on.
                                version += 1;
                                s.write(to, &block(to, version)).unwrap();
                                model.insert(to, version);
                            }
                            None => {
                                model.remove(&to);
                            }
                        }
                        expect(&s, from, None, &what);
                    }
                    99 if rng(&mut x) % 2 == 0 => {
                        // Thin out one shard block by block (3 of 4 go): its free slots pass
                        // its live ones, so it compacts with live blocks to move.
                        let shard = (rng(&mut x) % 4) as usize;
                        let mut gone: Vec<u64> = model
                            .keys()
                            .copied()
                            .filter(|&lpn| Store::shard_no(lpn) == shard)
                            .collect();
                        gone.sort_unstable();
                        for lpn in gone.into_iter().filter(|_| rng(&mut x) % 4 != 0) {
                            s.discard(lpn, 1).unwrap();
                            model.remove(&lpn);
                        }
                    }
                    _ => {
                        // A huge discard (the scan path) of the low half or of everything.
                        let (a, n) = if rng(&mut x) % 2 == 0 {
                            (0, 1 << 62)
                        } else {
                            (0, u64::MAX)
                        };
                        s.discard(a, n).unwrap();
                        model.retain(|&lpn, _| !(a..a.saturating_add(n)).contains(&lpn));
                    }
                }
                if step % 256 == 0 {
                    s.check().unwrap_or_else(|e| panic!("{what}: {e}"));
                }
            }
            s.check().unwrap();
            for (&lpn, &v) in &model {
                expect(&s, lpn, Some(v), &format!("seed {seed} at the end"));
            }
            assert_eq!(s.ram_slots().0, model.len(), "seed {seed}: live slots");
        }
    }

    /// `discard_many` takes each shard's lock once per request, however many of the ranges
    /// fall in it (random overwrites leave 256 one-block ranges per request), and discards
    /// exactly the ranges.
    #[test]
    fn discard_many_locks_each_shard_once() {
        let s = Store::ram();
        let lpns: Vec<u64> = (0..256u64)
            .map(|i| in_shard((i / 2) % 4, i / 8, i % 7))
            .collect();
        for &lpn in &lpns {
            s.write(lpn, &block(lpn, 1)).unwrap();
        }
        s.reset_lock_stats();
        let ranges: Vec<(u64, u64)> = lpns.iter().step_by(2).map(|&l| (l, 1)).collect();
        s.discard_many(&ranges).unwrap();
        assert_eq!(s.lock_summary().unwrap().acquisitions, 4);
        for (i, &lpn) in lpns.iter().enumerate() {
            expect(&s, lpn, (i % 2 == 1).then_some(1), "after discard_many");
        }
        s.check().unwrap();
    }

    /// Freed slots are reused: rounds of write, overwrite and discard of the same number of
    /// blocks (at addresses that move on every round) never allocate past the first round's
    /// slots; discarding everything returns the chunks; discarded blocks read zeros.
    #[test]
    fn freed_slots_are_reused_and_memory_stays_bounded() {
        let s = Store::ram();
        // Every shard gets the same number of blocks each round (a whole number of runs).
        let n = RAM_SHARDS as u64 * RAM_SHARD_RUN;
        let mut first = None;
        for round in 0..6u64 {
            let base = round * 10 * n;
            for lpn in base..base + n {
                s.write(lpn, &block(lpn, round)).unwrap();
                s.write(lpn, &block(lpn, round + 100)).unwrap();
            }
            let (live, slots) = s.ram_slots();
            assert_eq!(live, n as usize);
            let first = *first.get_or_insert(slots);
            assert_eq!(slots, first, "round {round}: slots grew");
            expect(&s, base + n / 2, Some(round + 100), "after overwrite");
            s.discard(base, n).unwrap();
            expect(&s, base + n / 2, None, "after discard");
            s.check().unwrap();
        }
        assert_eq!(s.ram_slots().0, 0);
        // Each shard held one run of blocks; freeing them all does not pass the compaction
        // minimum (in tests: 2 chunks of 16), so the chunks stay for reuse.
        assert!(s.ram_slots().1 <= RAM_SHARDS * RAM_COMPACT_FREE_MIN);
    }

    /// A shard whose free slots exceed its live blocks and the minimum compacts: the live
    /// blocks keep their content, now in the lowest chunks, and the emptied chunks go.
    #[test]
    fn compaction_keeps_content_and_returns_chunks() {
        let s = Store::ram();
        // 3000 blocks of shard 5.
        let lpns: Vec<u64> = (0..3000u64)
            .map(|i| in_shard(5, i / RAM_SHARD_RUN, i % RAM_SHARD_RUN))
            .collect();
        for &lpn in &lpns {
            s.write(lpn, &block(lpn, 1)).unwrap();
        }
        assert_eq!(
            s.ram_slots(),
            (3000, 3000usize.next_multiple_of(RAM_CHUNK_SLOTS))
        );
        // Discard all but every 10th: compactions run once free > live and > the minimum,
        // and again as the frees go on.
        for (i, &lpn) in lpns.iter().enumerate() {
            if i % 10 != 0 {
                s.discard(lpn, 1).unwrap();
            }
        }
        s.check().unwrap();
        let (live, slots) = s.ram_slots();
        assert_eq!(live, 300);
        assert!(slots <= 2 * 300, "{slots} slots for 300 blocks");
        for (i, &lpn) in lpns.iter().enumerate() {
            expect(&s, lpn, (i % 10 == 0).then_some(1), "after compaction");
        }
        // Everything: the scan path; at most the compaction minimum stays allocated.
        s.discard(0, u64::MAX).unwrap();
        s.check().unwrap();
        let (live, slots) = s.ram_slots();
        assert_eq!(live, 0);
        assert!(slots <= RAM_COMPACT_FREE_MIN, "{slots} slots left");
        expect(&s, lpns[0], None, "after discarding everything");
        // And grows again from nothing.
        s.write(lpns[0], &block(lpns[0], 2)).unwrap();
        expect(&s, lpns[0], Some(2), "after regrowth");
        s.check().unwrap();
    }
}
