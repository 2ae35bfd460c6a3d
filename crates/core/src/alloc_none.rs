//! Allocation on an infinite (IPLFS, `gc=none`) volume: the segment manager's hooks for a
//! 2^64-block space that is never reused.
//!
//! Owns: [`Infinite`], the state a segment manager keeps instead of its SIT and SSA when
//! the volume is infinite (`Geometry::infinite`): the live-block count, the capacity pool,
//! and what a crash left behind. It is a child module of `seg.rs` (declared there), so that
//! the hooks at the top of `SegManager`'s methods stay one line each.
//!
//! Allocation: log head `i` appends in region `i + 1` (`Geometry::region_first_seg`), a
//! segment after the other, never back: a head's next segment is always `seg + 1`. After a
//! crash a head continues past everything it may have written before the cut (see
//! "Crash residue"), so no address is ever written twice.
//!
//! Liveness: there is no per-block table. `set_valid` counts a live block; `invalidate`
//! puts the block into the discard map (`SegManager::dead`, one bitmap per 1 GiB discard
//! section, only where something died since the last checkpoint) and uncounts it once.
//! `is_valid` can therefore only say "not known dead since the last checkpoint".
//!
//! Capacity pool (what `free_sections` and the space budget see, in 512-block units): the
//! device holds `capacity` blocks; the pool is that less the metadata (the geometry's
//! `user_blocks + reserved_segments * 512`), less the live blocks, less the room every head
//! claimed and has not written. A head's new segment takes 512 blocks from the pool; a
//! dead block returns to it when its discard is issued (`credit`), not before: until then
//! the device still maps it. So ENOSPC comes when live data plus dead data not yet
//! discarded reach the device's real capacity, and `gc_none::NoneCollector::foreground`
//! (the space path's "cleaner") checkpoints and issues the queued discards at once.
//!
//! Crash residue: after a cut, a head may have written up to the whole pool past its
//! checkpointed position (everything written since the checkpoint is live or waits for a
//! discard, and both count against the pool). The first `fresh_heads` of a mount therefore
//! moves each head `pool` blocks further, and records the skipped interval; the recovery
//! checkpoint logs and issues its discard, minus the blocks roll-forward adopted: from the
//! load of a checkpoint not written by a clean unmount until the next checkpoint, every
//! `set_valid` address is recorded (roll-forward adopts before it moves the heads, so
//! which addresses fall in the skipped intervals is known only at that checkpoint). So a
//! crash never leaves a dead block mapped, and never discards an adopted one.
//!
//! Invariants: `live` = blocks pointed at by the NAT or a node; every segment a head ever
//! held lies in its region and below its current segment; the pool never counts a block
//! twice (claimed room is credited once: when discarded or, for a head moved at recovery,
//! when the move happens).
//!
//! Lock order: a log head's mutex, then `recovery`, then `pool`; `dead` (the discard map,
//! a leaf of `seg.rs`) is never held with either.

use super::*;
use crate::discard::DiscardCmd;
use crate::stats::Counter;

/// What an infinite volume keeps instead of SIT and SSA.
pub struct Infinite {
    /// Live blocks (nodes and data something points at). Sharded per thread
    /// (`stats::Counter`): the flusher adds one for every block it writes and writers take
    /// one off for every block they overwrite, so with one shared `AtomicU64` both cores
    /// wrote the same cache line on every block. (What the flusher's add still costs, ~4 %
    /// of a `gc=none` bench run, is the locked add waiting for the 4 KiB block copy before it
    /// to leave the store buffer.) Read exactly (the shards summed) by the checkpoint, which
    /// runs with the op lock held exclusively, and by reports.
    live: Counter,
    /// Free capacity in blocks (may dip below 0 by less than a segment per head after a
    /// recovery); `free_secs` is its whole segments.
    pool: Mutex<i64>,
    /// Set from the load of a checkpoint written before a cut until the recovery
    /// checkpoint: `set_valid` addresses are recorded (roll-forward adopts blocks before it
    /// moves the heads, so which ones lie in the skipped intervals is known only later).
    recording: AtomicBool,
    recovery: Mutex<Recovery>,
    /// Blocks returned to the pool by issued discards (stats, inspect).
    pub credited_blocks: AtomicU64,
}

#[derive(Default)]
struct Recovery {
    /// Per moved head: [first, end) of the interval it may have written before the cut.
    skipped: Vec<(u64, u64)>,
    /// Blocks made valid while recording (roll-forward's adoptions among them).
    adopted: Vec<u64>,
}

impl Infinite {
    pub(super) fn new() -> Self {
        Infinite {
            live: Counter::default(),
            pool: Mutex::new(0),
            recording: AtomicBool::new(false),
            recovery: Mutex::new(Recovery::default()),
            credited_blocks: AtomicU64::new(0),
        }
    }
}

/// Blocks a head holds and has not written: the rest of its segment and, for a node head,
/// its next segment.
fn room(h: &LogHeadRecord) -> u64 {
    BLOCKS_PER_SEG - (h.blkoff as u64).min(BLOCKS_PER_SEG)
        + if h.next_seg != NO_SEG {
            BLOCKS_PER_SEG
        } else {
            0
        }
}

impl SegManager {
    fn inf(&self) -> &Infinite {
        self.inf.as_ref().expect("infinite volume")
    }

    /// Whether this is an infinite (IPLFS) volume.
    pub fn is_infinite(&self) -> bool {
        self.inf.is_some()
    }

    /// Live blocks of an infinite volume (None on a finite one).
    pub fn live_blocks(&self) -> Option<u64> {
        self.inf.as_ref().map(|i| i.live.load(Ordering::Acquire))
    }

    /// Blocks discarded and given back to the capacity pool (infinite volumes; 0 else).
    pub fn credited_blocks(&self) -> u64 {
        self.inf
            .as_ref()
            .map_or(0, |i| i.credited_blocks.load(Ordering::Relaxed))
    }

    /// Capacity blocks of the pool: what the device holds less the metadata.
    fn pool_total(&self) -> i64 {
        (self.geo.user_blocks + self.geo.reserved_segments * BLOCKS_PER_SEG) as i64
    }

    /// `load` for an infinite volume: the heads of the checkpoint, no SIT, no SSA. The pool
    /// is set by `inf_start` once the live count is known.
    pub(super) fn inf_load(mut self, heads: &[LogHeadRecord]) -> Result<SegManager> {
        for (i, h) in heads.iter().enumerate() {
            let region = self.geo.region_first_seg(i);
            let in_region = |s: SegNo| s >= region && s < region + REGION_SEGS - 1;
            if !in_region(h.seg)
                || h.blkoff as u64 > BLOCKS_PER_SEG
                || (h.next_seg != NO_SEG && h.next_seg != h.seg + 1)
                || (h.kind == LogKind::Node) != (h.next_seg != NO_SEG)
            {
                return Err(Error::Corrupt(format!(
                    "log head {i} points outside its region of the infinite space"
                )));
            }
            let start = self.geo.seg_start(h.seg) + h.blkoff as u64;
            let mut head = LogHead::new(h, Box::new(SsaBlock::empty(h.seg)), false);
            head.buf_start = start;
            self.heads.push(Mutex::new(head));
            self.pending
                .push((AtomicU64::new(start), AtomicU64::new(start)));
        }
        *self.dead.lock() = Some(crate::discard::DiscardMap::new());
        self.inf_start(0, false);
        Ok(self)
    }

    /// Every node the checkpoint's NAT names lies behind the head of the region it is in:
    /// a head appends in its region and never goes back, so a node at or ahead of it means
    /// a head wound back by damage, which would write new blocks over live nodes: refused
    /// (no SIT to check against here; fsck checks every reachable block the same way). The
    /// NAT is the checkpoint's, read before roll-forward adopts the nodes fsync wrote
    /// ahead of the heads after it.
    pub fn inf_check_nat(&self, nat: &crate::nat::NatTable) -> Result<()> {
        let at: Vec<(SegNo, u32, BlkAddr)> = self
            .heads
            .iter()
            .map(|h| {
                let h = h.lock();
                (h.seg, h.blkoff, self.geo.seg_start(h.seg) + h.blkoff as u64)
            })
            .collect();
        for nid in 1..nat.max_nid() {
            let a = nat.addr(nid);
            if a == flashlog_format::NULL_ADDR {
                continue;
            }
            let Some(seg) = self.geo.seg_of(a) else {
                continue; // not the heads' concern (the node reads refuse it)
            };
            let hi = self.geo.region_of_seg(seg);
            if let Some(&(hseg, hoff, head)) = at.get(hi) {
                if a >= head {
                    return Err(Error::Corrupt(format!(
                        "log head {hi} at segment {hseg:#x} offset {hoff}: node {nid} lies \
                         at or ahead of it ({a:#x})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Set the live count (from the checkpoint) and rebuild the pool and the space budget
    /// from it. `after_cut`: the checkpoint was not written by a clean unmount, so record
    /// what roll-forward adopts until the recovery checkpoint.
    pub fn inf_start(&mut self, live: u64, after_cut: bool) {
        self.inf().recording.store(after_cut, Ordering::Release);
        let recs = self.head_records();
        let held: u64 = recs.iter().map(room).sum();
        let pool = self.pool_total() - held as i64 - live as i64;
        let inf = self.inf();
        inf.live.store(live, Ordering::Release);
        *inf.pool.lock() = pool;
        let free = (pool.max(0) as u64) / BLOCKS_PER_SEG;
        self.parts[0].free.store(free, Ordering::Release);
        let used: u64 = self.heads.iter().map(|h| self.head_used(&h.lock())).sum();
        self.space = crate::space::SpaceBudget::new(BLOCKS_PER_SEG, free, used);
        self.hold_recovery_reserve();
    }

    /// Move `delta` blocks into (or, negative, out of) the pool; whole segments crossing
    /// change `free_secs` and the space budget.
    fn inf_pool(&self, delta: i64) {
        let seg = BLOCKS_PER_SEG as i64;
        let mut pool = self.inf().pool.lock();
        let before = pool.max(0) / seg;
        *pool += delta;
        let after = pool.max(0) / seg;
        drop(pool);
        let d = after - before;
        if d > 0 {
            self.parts[0].free.fetch_add(d as u64, Ordering::AcqRel);
        } else if d < 0 {
            self.parts[0].free.fetch_sub((-d) as u64, Ordering::AcqRel);
        }
        if d != 0 {
            self.space.sections_changed(d);
        }
    }

    /// `blocks` were discarded: the device holds that much less.
    pub fn inf_credit(&self, blocks: u64) {
        if self.inf.is_some() && blocks > 0 {
            self.inf()
                .credited_blocks
                .fetch_add(blocks, Ordering::Relaxed);
            self.inf_pool(blocks as i64);
        }
    }

    /// The segment after `seg` in its region; takes a segment from the pool.
    pub(super) fn inf_following(&self, seg: SegNo) -> Result<SegNo> {
        let next = seg + 1;
        if self.geo.region_of_seg(next) != self.geo.region_of_seg(seg) {
            return Err(Error::NoSpace);
        }
        if self.parts[0].free.load(Ordering::Acquire) == 0 {
            tracing::error!(
                "no capacity for a new segment although the space budget covered the write \
                 (headroom {} blocks)",
                self.space.headroom()
            );
            return Err(Error::NoSpace);
        }
        self.inf_pool(-(BLOCKS_PER_SEG as i64));
        Ok(next)
    }

    /// `fresh_heads` on an infinite volume: at mkfs each head starts its region; at a
    /// mount's recovery each head skips past anything it may have written before the cut
    /// (recorded for the recovery checkpoint's discard).
    pub(super) fn inf_fresh_heads(
        &self,
        specs: &[(LogKind, Temp, u16, u16)],
    ) -> Result<Vec<LogHeadRecord>> {
        let skip = (self.pool_total() as u64).div_ceil(BLOCKS_PER_SEG) + 1;
        let old = self.head_records();
        let mut out = Vec::new();
        let mut rec = self.inf().recovery.lock();
        for (i, &(kind, temp, mlog, stream)) in specs.iter().enumerate() {
            let seg = match old.get(i) {
                None => self.geo.region_first_seg(i),
                Some(h) => {
                    let last = if h.next_seg == NO_SEG {
                        h.seg
                    } else {
                        h.next_seg
                    };
                    let seg = last + skip;
                    if self.geo.region_of_seg(seg + 1) != i {
                        return Err(Error::NoSpace);
                    }
                    let first = self.geo.seg_start(h.seg) + h.blkoff as u64;
                    rec.skipped.push((first, self.geo.seg_start(seg)));
                    // The old room is given up (its discard is in the skipped interval);
                    // blocks adopted in the interval are taken back in `inf_take_residue`.
                    self.inf_pool(room(h) as i64);
                    seg
                }
            };
            self.inf_pool(-(BLOCKS_PER_SEG as i64));
            let next_seg = if kind == LogKind::Node {
                self.inf_following(seg)?
            } else {
                NO_SEG
            };
            out.push(LogHeadRecord {
                kind,
                temp,
                mlog,
                stream,
                seg,
                blkoff: 0,
                next_seg,
            });
        }
        Ok(out)
    }

    /// `advance` on an infinite volume: the next segment, never an old one.
    pub(super) fn inf_advance(&self, h: &mut LogHead) -> Result<()> {
        let next = if h.next_seg != NO_SEG {
            h.next_seg
        } else {
            self.inf_following(h.seg)?
        };
        let after = if h.kind == LogKind::Node {
            self.inf_following(next)?
        } else {
            NO_SEG
        };
        h.seg = next;
        h.blkoff = 0;
        h.next_seg = after;
        h.ssr = false;
        Ok(())
    }

    /// `set_valid`: one more live block (remembered while recording after a cut).
    pub(super) fn inf_set_valid(&self, addr: BlkAddr) {
        let inf = self.inf();
        inf.live.fetch_add(1, Ordering::AcqRel);
        if inf.recording.load(Ordering::Acquire) {
            inf.recovery.lock().adopted.push(addr);
        }
    }

    /// `invalidate`: the block goes to the discard map, and is uncounted once.
    pub(super) fn inf_invalidate(&self, addr: BlkAddr) {
        let mut dead = self.dead.lock();
        let Some(m) = dead.as_mut() else { return };
        if !self.geo.is_main(addr) || m.is_pending(addr) {
            return;
        }
        m.invalidate(addr, 1);
        drop(dead);
        self.inf().live.fetch_sub(1, Ordering::AcqRel);
    }

    /// `is_valid` without a per-block table: in the main area and not dead since the last
    /// checkpoint.
    pub(super) fn inf_is_valid(&self, addr: BlkAddr) -> bool {
        self.geo.is_main(addr)
            && !self
                .dead
                .lock()
                .as_ref()
                .is_some_and(|m| m.is_pending(addr))
    }

    /// The recovery checkpoint: the intervals heads skipped after a cut, less what
    /// roll-forward adopted, as discard commands (sorted, non-overlapping). Stops recording.
    pub fn inf_take_residue(&self) -> Vec<DiscardCmd> {
        let Some(inf) = self.inf.as_ref() else {
            return Vec::new();
        };
        inf.recording.store(false, Ordering::Release);
        let rec = std::mem::take(&mut *inf.recovery.lock());
        let mut adopted = rec.adopted;
        adopted.sort_unstable();
        adopted.dedup();
        let mut out = Vec::new();
        let mut kept = 0;
        for (first, end) in rec.skipped {
            let mut a = first;
            let lo = adopted.partition_point(|&x| x < first);
            for &x in adopted[lo..].iter().take_while(|&&x| x < end) {
                kept += 1;
                if x > a {
                    out.push(DiscardCmd {
                        addr: a,
                        len: x - a,
                    });
                }
                a = x + 1;
            }
            if end > a {
                out.push(DiscardCmd {
                    addr: a,
                    len: end - a,
                });
            }
        }
        // Adopted blocks hold capacity the pool gave back with the old heads' room, or
        // never counted (written past it before the cut).
        self.inf_pool(-kept);
        out
    }
}
