//! The node address table in memory: a dense atomic array indexed by nid (no hash map), the
//! nid allocator, and the dirty-NAT-block set written at checkpoint. The arrays are zeroed
//! memory (a zero entry is an unused nid) and `load` stores only non-zero entries, so the
//! pages of nids never used stay unmapped: 2^26 nids cost 832 MiB only when all are used.
//!
//! Invariants: a nid's `used` bit is set while the nid is allocated *and* until the checkpoint
//! after it was freed (a freed nid is not reused before the checkpoint that records its
//! freeing is durable: until then the last checkpoint may still point at it).
//!
//! Per core (Max): nids are allocated from a cursor per thread slot, each starting in its
//! own region of the bitmap, and freed into a prefree list per thread slot, so that
//! threads creating and deleting files share no lock and rarely a cache line.
//!
//! Lock order: a `prefree` shard is a leaf lock. Entries themselves are atomics.

use crate::bitmap::{zeroed_atomics, AtomicBitmap};
use crate::error::{Error, Result};
use flashlog_dev::BlockDevice;
use flashlog_format::codec::test_bit;
use flashlog_format::meta::{nat_pos, NatBlock, NatEntry, NAT_ENTRIES_PER_BLOCK};
use flashlog_format::sb::Geometry;
use flashlog_format::{BlkAddr, Ino, Nid, BLOCK_SIZE, FIRST_FREE_NID, NULL_ADDR};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

pub struct NatTable {
    addr: Box<[AtomicU64]>,
    ino: Box<[AtomicU32]>,
    version: Box<[AtomicU8]>,
    used: AtomicBitmap,
    /// Nids freed since the last checkpoint, one list per thread slot (`NID_HINTS`).
    prefree: Box<[crossbeam_utils::CachePadded<Mutex<Vec<Nid>>>]>,
    dirty: AtomicBitmap,
    /// Allocation cursors, one per thread slot (Max's per-core nid allocation), so that
    /// threads scan different parts of the bitmap.
    hints: Box<[crossbeam_utils::CachePadded<AtomicU64>]>,
    max_nid: Nid,
    /// Nids whose `used` bit is set (sharded: one add per allocation).
    in_use: crate::stats::Counter<8>,
    /// Nids freed and not yet free again: in `prefree`, or taken by a checkpoint's snapshot
    /// whose tail has not released them (`gc=none` writes that tail beside operations).
    pending: crate::stats::Counter<8>,
}

// `NatTable::new` relies on it: a zeroed entry is an unused nid.
const _: () = assert!(NULL_ADDR == 0);

/// Free nids below which an operation first checkpoints, when nids wait for one
/// (`NatTable::short_of_nids`): more than the operations in flight take at once.
pub const NID_LOW: u64 = 512;

/// Nid allocation cursors (per thread slot).
const NID_HINTS: usize = 16;
/// Blocks read per request when loading the NAT at mount.
const LOAD_BATCH: u64 = 64;

impl NatTable {
    pub fn new(max_nid: Nid, nat_blocks: u64) -> Self {
        let n = max_nid as usize;
        let used = AtomicBitmap::new(n as u64);
        let in_use = crate::stats::Counter::<8>::default();
        for reserved in 0..FIRST_FREE_NID.min(max_nid) {
            used.set(reserved as u64);
            in_use.fetch_add(1, Ordering::Relaxed);
        }
        NatTable {
            // NULL_ADDR is 0: the tables start as zeroed memory, resident only where written.
            addr: zeroed_atomics(n),
            ino: zeroed_atomics(n),
            version: zeroed_atomics(n),
            used,
            prefree: (0..NID_HINTS).map(|_| Default::default()).collect(),
            dirty: AtomicBitmap::new(nat_blocks),
            hints: (0..NID_HINTS)
                .map(|i| {
                    crossbeam_utils::CachePadded::new(AtomicU64::new(
                        (FIRST_FREE_NID as u64).max(i as u64 * n as u64 / NID_HINTS as u64),
                    ))
                })
                .collect(),
            max_nid,
            in_use,
            pending: Default::default(),
        }
    }

    /// Load the current copy of every NAT block (chosen by the checkpoint's NAT bitmap).
    pub fn load(dev: &dyn BlockDevice, geo: &Geometry, nat_bitmap: &[u8]) -> Result<NatTable> {
        let t = NatTable::new(geo.max_nid, geo.nat_blocks);
        let mut buf = vec![0u8; (2 * LOAD_BATCH) as usize * BLOCK_SIZE];
        let mut i = 0;
        while i < geo.nat_blocks {
            let n = LOAD_BATCH.min(geo.nat_blocks - i);
            let bytes = (2 * n) as usize * BLOCK_SIZE;
            dev.read(geo.nat_block_addr(i, 0), &mut buf[..bytes])?;
            for k in 0..n {
                let idx = i + k;
                let copy = test_bit(nat_bitmap, idx as usize) as usize;
                let off = (2 * k as usize + copy) * BLOCK_SIZE;
                let blk =
                    flashlog_format::codec::as_block(&buf[off..off + BLOCK_SIZE], "NAT block")?;
                if flashlog_format::codec::is_zero(blk) {
                    // Never written (what `decode` reads as all entries free): nothing to
                    // store in the zeroed table. Most of a big volume's NAT is such blocks.
                    continue;
                }
                let nb = NatBlock::decode(blk, idx)?;
                for (slot, e) in nb.entries.iter().enumerate() {
                    let nid = idx as usize * NAT_ENTRIES_PER_BLOCK + slot;
                    if nid >= t.max_nid as usize {
                        break;
                    }
                    // Zeros are not stored: the table's pages stay untouched where the
                    // NAT is empty.
                    if e.version != 0 {
                        t.version[nid].store(e.version, Ordering::Relaxed);
                    }
                    if e.addr != NULL_ADDR {
                        if nid < FIRST_FREE_NID as usize
                            && nid != flashlog_format::ROOT_INO as usize
                        {
                            return Err(Error::Corrupt(format!(
                                "reserved nid {nid} has a NAT address"
                            )));
                        }
                        t.addr[nid].store(e.addr, Ordering::Relaxed);
                        t.ino[nid].store(e.ino, Ordering::Relaxed);
                        if !t.used.set(nid as u64) {
                            t.in_use.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            i += n;
        }
        Ok(t)
    }

    pub fn max_nid(&self) -> Nid {
        self.max_nid
    }
    pub fn valid(&self, nid: Nid) -> bool {
        nid >= 1 && nid < self.max_nid
    }
    pub fn addr(&self, nid: Nid) -> BlkAddr {
        self.addr
            .get(nid as usize)
            .map_or(NULL_ADDR, |a| a.load(Ordering::Acquire))
    }
    pub fn ino(&self, nid: Nid) -> Ino {
        self.ino
            .get(nid as usize)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }
    pub fn version(&self, nid: Nid) -> u8 {
        self.version
            .get(nid as usize)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }
    pub fn entry(&self, nid: Nid) -> NatEntry {
        NatEntry {
            addr: self.addr(nid),
            ino: self.ino(nid),
            version: self.version(nid),
        }
    }

    fn mark_dirty(&self, nid: Nid) {
        // Tested first: neighbouring nids share the word.
        let i = nat_pos(nid).0;
        if !self.dirty.test(i) {
            self.dirty.set(i);
        }
    }

    /// Point `nid` (owned by `ino`) at `addr`.
    pub fn set(&self, nid: Nid, ino: Ino, addr: BlkAddr) {
        debug_assert!(self.valid(nid));
        self.ino[nid as usize].store(ino, Ordering::Release);
        self.addr[nid as usize].store(addr, Ordering::Release);
        self.mark_dirty(nid);
    }

    /// Allocate a free nid.
    pub fn alloc(&self) -> Result<Nid> {
        let h = &self.hints[crate::lock::thread_slot() % NID_HINTS];
        let nid = self
            .used
            .claim_zero(h.load(Ordering::Relaxed))
            .ok_or(Error::NoSpace)?;
        h.store(nid + 1, Ordering::Relaxed);
        self.in_use.fetch_add(1, Ordering::Relaxed);
        debug_assert!(nid >= FIRST_FREE_NID as u64);
        Ok(nid as Nid)
    }

    /// Release a nid: its entry is cleared now; it becomes allocatable after the checkpoint.
    pub fn free(&self, nid: Nid) {
        if !self.valid(nid) {
            return;
        }
        self.addr[nid as usize].store(NULL_ADDR, Ordering::Release);
        self.ino[nid as usize].store(0, Ordering::Release);
        self.version[nid as usize].fetch_add(1, Ordering::AcqRel);
        self.mark_dirty(nid);
        self.prefree[crate::lock::thread_slot() % NID_HINTS]
            .lock()
            .push(nid);
        self.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// Mark an allocated nid (mount-time recovery uses it for nids it adopts).
    pub fn mark_used(&self, nid: Nid) {
        if self.valid(nid) && !self.used.set(nid as u64) {
            self.in_use.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Nids in use (allocated or waiting for the checkpoint).
    pub fn used_count(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// NAT blocks changed since the last checkpoint.
    pub fn dirty_blocks(&self) -> Vec<u64> {
        self.dirty.ones().collect()
    }
    pub fn clear_dirty(&self, i: u64) {
        self.dirty.clear(i);
    }

    pub fn encode_block(&self, idx: u64) -> NatBlock {
        let mut b = NatBlock::empty(idx);
        for (slot, e) in b.entries.iter_mut().enumerate() {
            let nid = idx as usize * NAT_ENTRIES_PER_BLOCK + slot;
            if nid < self.max_nid as usize {
                *e = self.entry(nid as Nid);
            }
        }
        b
    }

    /// A checkpoint's snapshot: the nids freed before it, which its pack records as free
    /// (`release` them once the pack is durable; those freed later wait for the next one).
    pub fn take_prefree(&self) -> Vec<Nid> {
        let taken: Vec<Nid> = self
            .prefree
            .iter()
            .flat_map(|p| std::mem::take(&mut *p.lock()))
            .collect();
        // Still waiting until `release`: counted off here, they left the operations
        // beside a `gc=none` tail none to wait for, and creates got ENOSPC with every other
        // nid freed (`races_new.rs`).
        taken
    }

    /// Fewer than [`NID_LOW`] nids are free while freed ones wait for a checkpoint: the
    /// caller checkpoints before its operation (found in review, 2026-11-27: a loop of
    /// create and unlink got ENOSPC after `max_nid` cycles with the volume empty, as only
    /// the 30 s timer would have released the nids). One load while nids are plentiful.
    pub fn short_of_nids(&self) -> bool {
        if (self.max_nid as u64).saturating_sub(self.in_use.upper()) >= NID_LOW {
            return false;
        }
        self.pending.load(Ordering::Relaxed) > 0
    }

    /// After a durable checkpoint: the nids it recorded as free (`take_prefree`) may be
    /// reused.
    pub fn release(&self, nids: Vec<Nid>) {
        let n = nids.len() as u64;
        for nid in nids {
            if self.used.clear(nid as u64) {
                self.in_use.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.pending.fetch_sub(n, Ordering::Relaxed);
    }
}
