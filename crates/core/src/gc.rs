//! Garbage collection (segment cleaning), behind a policy interface.
//!
//! Owns: victim selection and migration. Policies (`GcPolicy` in config): `f2fs` is
//! implemented here (F2FS paper 2.5, seed-impl-facts 1.6): foreground cleaning with the
//! greedy cost when free sections run short, background cleaning with the cost-benefit
//! cost when the volume is idle, a bounded victim search, lazy migration in the background.
//! `none` never cleans (for an infinite partition). `scale` is in scale.rs, `device` (D2FS: the
//! device cleans) in gc_device.rs.
//!
//! Migration of one victim section:
//! 0. reserve from the space budget what the moves may use (`reserve_victim`: the copies
//!    and the nodes they dirty); without room the victim is given back;
//! 1. read its summary blocks and, per the SIT, every valid block, all reads submitted at
//!    once (`BlockDevice::read_many`), before anything moves, as F2FS does;
//! 2. for each block, find the owner through the SSA and lock the owner's file cell;
//! 3. node-lock rule: move the block only if, under that lock, the owner still points at the
//!    victim address (and the NAT version matches the summary's); otherwise a newer write or
//!    a truncate won the race and the copy is dropped;
//! 4. data moves through the cold data log, nodes through their node log (foreground), or
//!    are marked dirty for writeback to move (background, lazy);
//! 5. the emptied section is prefree: it becomes free after the next durable checkpoint.
//!
//! Lock order: the victim claim bit (atomic) -> file cell -> log head. A collector holds the
//! op lock's shared side while it migrates, never the cell lock of more than one file.

use crate::cell::{InodeCell, InodeState, Page, PageData};
use crate::config::GcPolicy;
use crate::error::{Error, Result};
use crate::inner::{node_temp, FsInner};
use flashlog_format::codec::Block;
use flashlog_format::cp::{LogKind, Temp};
use flashlog_format::meta::Summary;
use flashlog_format::node::{self, NodeKind};
use flashlog_format::BLOCK_SIZE as BS;
use flashlog_format::{BlkAddr, Nid, SegNo, BLOCKS_PER_SEG, BLOCK_SIZE, NULL_ADDR};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reuses of one exact space target by a thread's per-operation checks
/// (`FsInner::space_target_recent`).
const TARGET_MEMO_USES: u32 = 8;

thread_local! {
    /// This thread's last exact space target: (`FsInner::mount_id`, free sections then,
    /// target, reuses left).
    static TARGET_MEMO: std::cell::Cell<(u64, u64, u64, u32)> =
        const { std::cell::Cell::new((0, 0, 0, 0)) };
}

/// Sections a background pass looks at (F2FS max_victim_search).
pub const BG_VICTIM_SEARCH: u64 = 4096;
/// Background cleaning comes more often if the blocks holding no valid data exceed this
/// share of user blocks (F2FS LIMIT_INVALID_BLOCK, percent) ...
pub const LIMIT_INVALID_PCT: u64 = 40;
/// ... and free sections' blocks (less the overprovision) are below this share of them
/// (LIMIT_FREE_BLOCK).
pub const LIMIT_FREE_PCT: u64 = 40;
/// Victims one foreground call cleans at most before giving the caller a chance to
/// checkpoint (prefree sections become free only then).
pub const FG_VICTIMS_PER_ROUND: u64 = 16;

/// Victim cost functions (F2FS `gc_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Fewest valid blocks.
    Greedy,
    /// F2FS get_cb_cost: prefers old, mostly invalid sections.
    CostBenefit,
}

/// How migrated blocks are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Migration {
    /// Write the blocks to their new place now (foreground).
    Eager,
    /// Mark them dirty and let writeback move them (background).
    Lazy,
}

/// Budget blocks one valid block of a victim may need: its copy, and the node (or inode)
/// the move dirties, which the next checkpoint writes. A node victim needs one (the node is
/// dirtied and written at once), a lazy move one or two (the page's debt): two covers all.
pub const VICTIM_BLOCKS_PER_VALID: u64 = 2;

/// Reserve from the space budget what cleaning `sec` may use, before anything moves: the
/// collector's own reservation, which no writer and no other collector can take (see
/// `SpaceBudget::try_reserve_victim` for how parallel collectors leave writers room).
/// `background`: leave the application floor (background cleaning, which nobody waits
/// for). None: not enough headroom; the caller gives the victim back.
pub fn reserve_victim(
    fs: &FsInner,
    sec: u64,
    background: bool,
) -> Option<crate::space::Allowance<'_>> {
    let need = VICTIM_BLOCKS_PER_VALID * fs.seg.section_valid(sec);
    if background {
        fs.seg.space.try_reserve(need, true)
    } else {
        // Nothing to roll forward: no fsync chain since the last durable checkpoint.
        fs.seg.space.try_reserve_victim(need, || {
            fs.fsync_chain_after.load(Ordering::SeqCst) <= fs.cp_durable.load(Ordering::SeqCst)
        })
    }
}

/// A garbage-collection policy.
pub trait Collector: Send + Sync {
    fn name(&self) -> &'static str;
    /// Clean until `target` sections are free or prefree, or nothing more can be cleaned.
    /// Called without the op lock: a collector takes its shared side per victim. Returns
    /// the sections it emptied.
    fn foreground(&self, fs: &FsInner, target: u64) -> Result<u64>;
    /// One background pass when the volume is idle: the sections it emptied, or None if it
    /// found no victim (F2FS then sleeps its no-gc time). Called with the op lock's shared
    /// side held (`background_gc`): it must not take the op lock again (a checkpoint
    /// waiting at the gate between the two takes would wait for this thread, and this
    /// thread for it).
    fn background(&self, fs: &FsInner) -> Result<Option<u64>>;
    /// Dedicated write streams this policy needs in the log-head table.
    fn streams(&self) -> usize {
        0
    }
    /// Start worker threads, if any (called once the volume is mounted).
    fn start(&self, _fs: &std::sync::Arc<FsInner>) {}
    /// Stop worker threads.
    fn stop(&self) {}
    /// A checkpoint is about to write (op lock held exclusively): `gc=device` applies the
    /// queued migration upcalls here.
    fn before_checkpoint(&self, _fs: &FsInner) -> Result<()> {
        Ok(())
    }
    /// `gc=device` without its handler thread (mounted with `gc_interval` None, as the crash
    /// simulator does for determinism): a batch of upcalls waits, and the next
    /// `ensure_space` checkpoints to apply it.
    fn upcalls_due(&self) -> bool {
        false
    }
    /// `gc=device`: dead blocks not yet checkpointed past which every writer waits for the
    /// discard checkpoint (`FsInner::device_discard_due`) instead of writing on: the device
    /// counts them valid until their discards, and only its slack over the host's live
    /// limit holds them (`gc_device::urgent_discard_blocks`). No limit by default.
    fn dead_limit(&self) -> u64 {
        u64::MAX
    }
    /// `ensure_space`, before it decides whether the caller waits: a policy that can make
    /// room without waiting does it here (`gc=none`: issue the discards a durable checkpoint
    /// made safe, wake its dispatcher to checkpoint early). Cheap when nothing is low.
    fn space_low(&self, _fs: &FsInner) -> Result<()> {
        Ok(())
    }
    /// The last migration upcall the next checkpoint covers (0: none).
    fn last_upcall(&self) -> u64 {
        0
    }
    /// After the unmount's checkpoint (op lock held exclusively): whether the device reported
    /// work since that the host should take in one more checkpoint before it closes
    /// (`gc=device`: moves its GC made while that checkpoint wrote, which a flush brings
    /// back as upcalls). False by default.
    fn unsettled(&self, _fs: &FsInner) -> Result<bool> {
        Ok(false)
    }
    /// The checkpoint covering upcalls up to `in_pack` is durable; `emptied` are the prefree
    /// sections it may free (not freed yet). Returns the sections to discard and free now:
    /// all of `emptied` by default; `gc=device` holds them for the next checkpoint and
    /// returns the ones it held before (`umount`: everything, the volume is closing).
    fn after_checkpoint(
        &self,
        _fs: &FsInner,
        _in_pack: u64,
        emptied: Vec<u64>,
        _umount: bool,
    ) -> Result<Vec<u64>> {
        Ok(emptied)
    }
}

/// The collector of a policy.
pub fn collector_for(opts: &crate::config::MountOptions) -> Result<Box<dyn Collector>> {
    match opts.gc {
        GcPolicy::F2fs => Ok(Box::new(F2fsCollector)),
        GcPolicy::None => Ok(Box::new(crate::gc_none::NoneCollector::new())),
        GcPolicy::Scale => Ok(Box::new(crate::scale::ScaleCollector::new(opts)?)),
        // Built by `gc_device::prepare`, which also wraps the device.
        GcPolicy::Device => Err(Error::NotSupported(crate::gc_device::NO_UPCALLS)),
    }
}

/// `none`: never clean.
pub struct NoCollector;

impl Collector for NoCollector {
    fn name(&self) -> &'static str {
        "none"
    }
    fn foreground(&self, _: &FsInner, _: u64) -> Result<u64> {
        Ok(0)
    }
    fn background(&self, _: &FsInner) -> Result<Option<u64>> {
        Ok(None)
    }
}

/// `f2fs`: the F2FS cleaner.
pub struct F2fsCollector;

impl Collector for F2fsCollector {
    fn name(&self) -> &'static str {
        "f2fs"
    }

    fn foreground(&self, fs: &FsInner, target: u64) -> Result<u64> {
        let t0 = Instant::now();
        fs.stats.gc_fg_runs.fetch_add(1, Ordering::Relaxed);
        let mut cleaned = 0;
        // Bounded by attempts, not successes: a victim that cannot be emptied (its blocks
        // lost every race) must not make a caller loop.
        let mut attempts = 0;
        while fs.seg.free_after_checkpoint() < target && attempts < FG_VICTIMS_PER_ROUND {
            attempts += 1;
            let Some(sec) = select_victim(fs, Cost::Greedy, u64::MAX) else {
                break;
            };
            // The op lock is held per victim, so a checkpoint can run between victims.
            let r = {
                let _g = fs.oplock.op();
                // Chosen before the op lock: a checkpoint may have released it since and a
                // head claimed it fresh (as `scale`'s workers, `tests/scale_victims.rs`).
                if cleanable(fs, sec).is_none() {
                    fs.seg.victims.clear(sec);
                    continue;
                }
                // What the moves need is reserved first; if the budget has no room for it,
                // the checkpoint that frees our prefree sections must come first.
                let Some(_space) = reserve_victim(fs, sec, false) else {
                    fs.seg.victims.clear(sec);
                    break;
                };
                clean_section(fs, sec, Migration::Eager)
            };
            fs.seg.victims.clear(sec);
            if r? {
                cleaned += 1;
            }
        }
        fs.stats
            .gc_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(cleaned)
    }

    fn background(&self, fs: &FsInner) -> Result<Option<u64>> {
        let t0 = Instant::now();
        let Some(sec) = select_victim(fs, Cost::CostBenefit, BG_VICTIM_SEARCH) else {
            return Ok(None);
        };
        fs.stats.gc_bg_runs.fetch_add(1, Ordering::Relaxed);
        let r = match reserve_victim(fs, sec, true) {
            Some(_space) => {
                // Its pages are only marked dirty: not empty yet, and not to be picked
                // again until it is freed.
                let r = clean_section(fs, sec, Migration::Lazy);
                if r.is_ok() {
                    fs.seg.bg_victims.set(sec);
                }
                r
            }
            None => Ok(false),
        };
        fs.seg.victims.clear(sec);
        fs.stats
            .gc_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(r? as u64))
    }
}

/// The background thread's sleep, in periods of `gc_interval`: F2FS's gc thread sleeps
/// between its minimum (30 s: one period) and maximum (60 s: two), and 300 s (ten) after
/// a pass that found no victim, until the volume has enough invalid blocks again
/// (`increase_sleep_time`, `decrease_sleep_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BgSleep {
    /// Periods from one pass to the next.
    pub periods: u32,
    /// Periods slept since the last pass.
    pub slept: u32,
}

impl Default for BgSleep {
    fn default() -> Self {
        BgSleep {
            periods: BG_SLEEP_MIN,
            slept: 0,
        }
    }
}

/// Sleeps of the background thread, in periods (F2FS: 30 s, 60 s, 300 s at 30 s each).
pub const BG_SLEEP_MIN: u32 = 1;
pub const BG_SLEEP_MAX: u32 = 2;
pub const BG_SLEEP_NO_GC: u32 = 10;

impl BgSleep {
    /// One period has passed: true if the sleep is over (the count starts again).
    pub fn woken(&mut self) -> bool {
        self.slept += 1;
        if self.slept < self.periods {
            return false;
        }
        self.slept = 0;
        true
    }
    /// F2FS `increase_sleep_time`: one period more, up to the maximum; the no-gc sleep stays.
    pub fn longer(&mut self) {
        if self.periods != BG_SLEEP_NO_GC {
            self.periods = (self.periods + BG_SLEEP_MIN).min(BG_SLEEP_MAX);
        }
    }
    /// F2FS `decrease_sleep_time`: from the no-gc sleep to the maximum, then one period less,
    /// down to the minimum.
    pub fn shorter(&mut self) {
        if self.periods == BG_SLEEP_NO_GC {
            self.periods = BG_SLEEP_MAX;
        }
        self.periods = self.periods.saturating_sub(BG_SLEEP_MIN).max(BG_SLEEP_MIN);
    }
    /// A pass found no victim.
    pub fn no_victim(&mut self) {
        self.periods = BG_SLEEP_NO_GC;
    }
}

/// F2FS `has_enough_invalid_blocks`: more than 40 % of the user blocks hold no valid data
/// (LIMIT_INVALID_BLOCK), and the free sections, less the overprovision, hold under 40 % of
/// those blocks (LIMIT_FREE_BLOCK): most of the space not in use lies scattered in used
/// sections. It sets how often the background thread cleans (`background_gc` in fs.rs),
/// not whether.
///
/// (Until 2026-11-28 "invalid" was the used sections' blocks less the valid ones and "free"
/// the user blocks less the valid ones, which is at least as large: the second condition
/// held only with more than ~24 % overprovision, so on volumes over ~300 MiB background
/// cleaning never ran.)
pub fn has_enough_invalid_blocks(fs: &FsInner) -> bool {
    let user = fs.sb.geo.user_blocks;
    let invalid = user.saturating_sub(fs.alloc_blocks.used());
    let free_user = (fs.seg.free_sections() * fs.limits.per_sec)
        .saturating_sub(fs.sb.geo.ovp_segments * BLOCKS_PER_SEG);
    invalid > user * LIMIT_INVALID_PCT / 100 && free_user < invalid * LIMIT_FREE_PCT / 100
}

/// Valid blocks of section `sec` if cleaning it makes sense: no log head writes into it,
/// and it is neither empty nor full.
pub(crate) fn cleanable(fs: &FsInner, sec: u64) -> Option<u64> {
    let v = fs.seg.section_valid(sec);
    let full = BLOCKS_PER_SEG * fs.sb.geo.segs_per_sec as u64;
    (v > 0 && v < full && !fs.seg.is_current_section(sec)).then_some(v)
}

/// Pick and claim a victim section, looking at most at `max_search` candidates.
pub fn select_victim(fs: &FsInner, cost: Cost, max_search: u64) -> Option<u64> {
    let blocks_per_sec = BLOCKS_PER_SEG * fs.sb.geo.segs_per_sec as u64;
    let nsecs = fs.sb.geo.sections();
    let start = fs.gc_cursor.load(Ordering::Relaxed) % nsecs.max(1);
    let mut cands: Vec<(u64, u64, u64)> = Vec::new(); // (sec, valid, mtime)
    let (mut min_m, mut max_m) = (u64::MAX, 0u64);
    let mut looked = 0;
    for k in 0..nsecs {
        if looked >= max_search {
            break;
        }
        let sec = (start + k) % nsecs;
        if fs.seg.victims.test(sec)
            || (matches!(cost, Cost::CostBenefit) && fs.seg.bg_victims.test(sec))
        {
            continue;
        }
        let Some(v) = cleanable(fs, sec) else {
            continue;
        };
        looked += 1;
        let m = fs.seg.section_mtime(sec);
        min_m = min_m.min(m);
        max_m = max_m.max(m);
        cands.push((sec, v, m));
    }
    fs.gc_cursor.store(start + looked.max(1), Ordering::Relaxed);
    // Ages run from the volume's oldest mtime to now, as F2FS's `get_cb_cost` measures
    // them (`sit_i->min_mtime`, `max_mtime`), not between the oldest and youngest
    // candidate: that gave the youngest candidate age 0, never picked however empty
    // (`tests/f2fs_fidelity.rs`).
    if matches!(cost, Cost::CostBenefit) && !cands.is_empty() {
        min_m = fs
            .seg
            .min_mtime
            .fetch_min(min_m, Ordering::Relaxed)
            .min(min_m);
        max_m = max_m.max(fs.seg.clock_secs.load(Ordering::Relaxed));
    }
    let cost_of = |&(_, v, m): &(u64, u64, u64)| -> u64 {
        match cost {
            Cost::Greedy => v,
            Cost::CostBenefit => {
                // u: utilisation in percent; age: 100 for the oldest, 0 for the youngest.
                let u = v * 100 / blocks_per_sec;
                let age = if max_m > min_m {
                    100 - 100 * (m - min_m) / (max_m - min_m)
                } else {
                    0
                };
                u32::MAX as u64 - 100 * (100 - u) * age / (100 + u)
            }
        }
    };
    let mut order: Vec<_> = cands.iter().collect();
    order.sort_by_key(|c| cost_of(c));
    // Claim the cheapest one nobody else has claimed meanwhile.
    order
        .into_iter()
        .map(|c| c.0)
        .find(|&sec| claim_victim(fs, sec))
}

/// Claim section `sec` as a victim (test-and-set on the shared bitmap). Fails if another
/// collector holds it, or if a log head made it current meanwhile: SSR checks the victim
/// bit and sets `current` in two steps, as the candidate scans check `current` and then
/// claim, so both sides check the other's bit again after setting their own (with a
/// SeqCst fence between: at least one sees the other) and the one that sees it gives its
/// bit back. Without that an SSR head could write into a section being cleaned (found in
/// review, 2026-11-27: the collector then moves fresh blocks past its reservation).
pub(crate) fn claim_victim(fs: &FsInner, sec: u64) -> bool {
    if fs.seg.victims.set(sec) {
        return false;
    }
    std::sync::atomic::fence(Ordering::SeqCst);
    if fs.seg.is_current_section(sec) {
        fs.seg.victims.clear(sec);
        return false;
    }
    true
}

/// Which log kind a segment holds (from the head that last wrote it).
pub(crate) fn segment_kind(fs: &FsInner, seg: SegNo) -> Option<LogKind> {
    fs.seg.segment_kind(seg, fs.sb.geo.log_heads as usize)
}

/// What a collector needs to clean one segment of a victim.
pub(crate) struct VictimSegment {
    /// Offsets of the valid blocks (per the SIT, read without a lock).
    pub offs: Vec<usize>,
    pub kind: LogKind,
    pub ssa: Box<flashlog_format::meta::SsaBlock>,
    /// Address of the segment's first block.
    pub start: BlkAddr,
}

/// The valid blocks, log kind and summary of segment `seg`; None if nothing is valid.
pub(crate) fn victim_segment(fs: &FsInner, seg: SegNo) -> Result<Option<VictimSegment>> {
    let offs = fs.seg.valid_offsets(seg);
    if offs.is_empty() {
        return Ok(None);
    }
    let Some(kind) = segment_kind(fs, seg) else {
        return Err(Error::Corrupt(format!(
            "segment {seg} has valid blocks but no log class"
        )));
    };
    let ssa = fs.seg.read_ssa(seg)?;
    Ok(Some(VictimSegment {
        offs,
        kind,
        ssa,
        start: fs.sb.geo.seg_start(seg),
    }))
}

/// Migrate every valid block of section `sec`. Returns true if the section is empty after.
pub fn clean_section(fs: &FsInner, sec: u64, how: Migration) -> Result<bool> {
    let _role = crate::waits::as_role(crate::waits::Role::Gc);
    let sps = fs.sb.geo.segs_per_sec as u64;
    for seg in sec * sps..(sec + 1) * sps {
        let Some(VictimSegment {
            offs,
            kind,
            ssa,
            start,
        }) = victim_segment(fs, seg)?
        else {
            continue;
        };
        // Phase 1: read every valid block, all requests in flight at once.
        let mut data = Vec::new();
        read_victim_blocks(fs, start, &offs, &mut data)?;
        // Phase 2: move each block still owned by what the summary says.
        for (k, &off) in offs.iter().enumerate() {
            let addr = start + off as u64;
            let blk: &Block = data[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE]
                .try_into()
                .expect("one block");
            let sum = ssa.entries[off];
            let moved = match kind {
                LogKind::Node => migrate_node(fs, sum.nid, addr, how)?,
                LogKind::Data => migrate_data(fs, sum, addr, blk, how)?,
            };
            if moved {
                fs.stats.gc_moved_blocks.fetch_add(1, Ordering::Relaxed);
            } else if fs.seg.is_valid(addr) {
                fs.stats.gc_skipped_blocks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let empty = fs.seg.section_valid(sec) == 0;
    if empty {
        fs.stats.gc_sections_freed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(empty)
}

/// Read the valid blocks `offs` of the segment starting at `start` into `buf`, with every
/// request in flight at once (F2FS submits the reads of a whole victim before moving).
pub(crate) fn read_victim_blocks(
    fs: &FsInner,
    start: BlkAddr,
    offs: &[usize],
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.resize(offs.len() * BLOCK_SIZE, 0);
    // A victim's block may still sit in an asynchronous log write (its section stopped
    // being current only recently). Take such blocks from the write buffers first: a block
    // not in flight at that moment is already on the device (a victim is never in a head's
    // buffer, and a valid block is never written again), so the device read that follows
    // cannot see stale bytes. Cheaper than waiting for every collector's writes.
    let mut reqs: Vec<(u64, &mut [u8])> = Vec::with_capacity(offs.len());
    for (&o, chunk) in offs.iter().zip(buf.chunks_exact_mut(BLOCK_SIZE)) {
        let addr = start + o as u64;
        let blk: &mut Block = chunk.try_into().expect("one block");
        if !fs.seg.read_pending(addr, blk) {
            reqs.push((addr, chunk));
        }
    }
    fs.dev.read_many(&mut reqs)?;
    fs.stats
        .gc_read_blocks
        .fetch_add(offs.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// The cold data log of a file's mlog.
fn cold_data_head(fs: &FsInner, ino: u32) -> usize {
    fs.data_head(ino, Temp::Cold)
}

/// Move one data block if its owner still points at it (the node-lock rule).
fn migrate_data(
    fs: &FsInner,
    sum: Summary,
    addr: BlkAddr,
    blk: &Block,
    how: Migration,
) -> Result<bool> {
    let nid = sum.nid;
    let Some(cell) = data_owner(fs, &sum)? else {
        return Ok(false);
    };
    let ino = fs.nat.ino(nid);
    let slot = sum.ofs as usize;
    let mut st = cell.lock();
    let mut waited = false;
    let index = loop {
        if st.freed {
            return Ok(false);
        }
        let Some(index) = owner_index(fs, &mut st, nid, slot)? else {
            return Ok(false);
        };
        if fs.dnode_get(&st, nid, slot) == addr {
            break index;
        }
        // A block still valid that its slot does not point at is a write-back visit's
        // copy, written with the cell released and not mapped yet (`Page::wb`): wait for
        // the visit (as F2FS's `move_data_page` waits on a page under writeback), which
        // maps the copy or invalidates it. Passed over instead, it kept its section from
        // being freed; greedy picked that section again at once, for as long as the
        // visit's thread was off the CPU (CI of eab328c: 26,620 of 285,903 blocks read
        // for nothing, `tests/gc.rs`; `races_new.rs`
        // `a_collector_waits_for_a_visits_copies_instead_of_passing_them_over`).
        if waited || st.wb_in_flight == 0 || !fs.seg.is_valid(addr) {
            return Ok(false); // a newer write, a truncate or a punch won the race
        }
        st = fs.wait_for_writeback(&cell, st)?;
        waited = true;
    };
    match how {
        Migration::Lazy => {
            match st.pages.get_mut(&index) {
                // Already dirty: its writeback moves it; send that to the cold log too.
                Some(p) if p.dirty => p.gc = true,
                Some(p) => {
                    p.dirty = true;
                    p.gc = true;
                    st.dirty_pages += 1;
                    fs.charge_dirty_page();
                }
                None => {
                    st.pages
                        .insert(index, Page::new(PageData::copy_of(blk), true, false, true));
                    st.dirty_pages += 1;
                    fs.charge_dirty_page();
                }
            }
            Ok(true)
        }
        Migration::Eager => {
            fs.relocate_data_block(
                &mut st,
                cold_data_head(fs, ino),
                nid,
                slot,
                index,
                addr,
                blk,
            )?;
            Ok(true)
        }
    }
}

/// File block index mapped by slot `slot` of direct node `nid` of the locked file, loading
/// the node if needed; None if `nid` is not a direct node of this file.
pub(crate) fn owner_index(
    fs: &FsInner,
    st: &mut InodeState,
    nid: Nid,
    slot: usize,
) -> Result<Option<u64>> {
    if nid == st.ino {
        let inline = st.hdr.flags & (node::iflag::INLINE_DATA | node::iflag::INLINE_DENTRY) != 0;
        return Ok((!inline && slot < node::ADDRS_PER_INODE).then_some(slot as u64));
    }
    if fs.nat.addr(nid) == NULL_ADDR && !st.nodes.contains(nid) {
        return Ok(None);
    }
    let blk = match fs.node_of(st, nid) {
        Ok(b) => b,
        Err(Error::Corrupt(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let f = node::footer(&blk.blk);
    if f.kind() != Some(NodeKind::Direct) || slot >= node::ADDRS_PER_BLOCK {
        return Ok(None);
    }
    Ok(node::dnode_range(f.ofs).map(|(first, _)| first + slot as u64))
}

/// Move one node block if the NAT still points at it.
fn migrate_node(fs: &FsInner, nid: Nid, addr: BlkAddr, how: Migration) -> Result<bool> {
    Ok(migrate_node_if(fs, nid, addr, how, false)?.unwrap_or(false))
}

/// `migrate_node`; with `try_only`, None (nothing done) if the file's cell is held.
fn migrate_node_if(
    fs: &FsInner,
    nid: Nid,
    addr: BlkAddr,
    how: Migration,
    try_only: bool,
) -> Result<Option<bool>> {
    if !fs.nat.valid(nid) || fs.nat.addr(nid) != addr {
        return Ok(Some(false));
    }
    let ino = fs.nat.ino(nid);
    let cell = match fs.cell(ino) {
        Ok(c) => c,
        Err(Error::NotFound) => return Ok(Some(false)),
        Err(e) => return Err(e),
    };
    let mut st = if try_only {
        match cell.try_lock() {
            Some(st) => st,
            None => return Ok(None),
        }
    } else {
        cell.lock()
    };
    Ok(Some(migrate_node_locked(fs, &mut st, nid, addr, how)?))
}

/// `migrate_node` with the node's file cell held (`st`).
fn migrate_node_locked(
    fs: &FsInner,
    st: &mut InodeState,
    nid: Nid,
    addr: BlkAddr,
    how: Migration,
) -> Result<bool> {
    let ino = st.ino;
    if st.freed || fs.nat.addr(nid) != addr {
        return Ok(false);
    }
    let was_dirty = if nid == ino {
        st.dirty
    } else {
        st.nodes.lock(nid).is_some_and(|n| n.dirty)
    };
    let kind = if nid == ino {
        fs.dirty_inode(st);
        NodeKind::Inode
    } else {
        let k = node::footer(&fs.node_of(st, nid)?.blk)
            .kind()
            .unwrap_or(NodeKind::Direct);
        fs.mark_dirty_node(st, nid);
        k
    };
    if how == Migration::Eager {
        let temp = node_temp(st.is_dir(), kind);
        let hi = fs.node_head(st, temp);
        fs.write_node(st, nid, hi, 0)?;
        if was_dirty {
            // The node had changes not yet written: the moved copy (unflagged, maybe on
            // the cold log or another mlog's chain, maybe not flushed) is no copy
            // roll-forward can use, so it stays dirty for the next fsync or checkpoint to
            // write (one more node write; the section still empties now).
            if nid == ino {
                fs.dirty_inode(st);
            } else {
                fs.mark_dirty_node(st, nid);
            }
        }
    }
    Ok(true)
}

/// Limits derived once per mount (`FsInner::compute_limits`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// Blocks per section.
    pub per_sec: u64,
    pub headroom_secs: u64,
    /// `space_slack_secs`.
    pub slack_secs: u64,
    pub dirty_cap_pages: u64,
    pub dirty_background_pages: u64,
    pub dirty_nodes_cap: u64,
    /// The application floor plus the slack, in blocks: the headroom `budget_short` and
    /// `space_target` keep.
    pub budget_line: i64,
}

/// Foreground cleaning rounds one `ensure_space` call runs at most.
const MAX_GC_ROUNDS: u32 = 64;

/// How often a writer waiting for `gc_lock` looks whether a checkpoint's tail began
/// (`gc_lock_unless_tail`): a timed park, not a spin.
const TAIL_POLL: Duration = Duration::from_micros(300);

impl FsInner {
    /// Sections beyond the data floor that the overprovision space leaves for dirty data
    /// and for the cleaner's slack (`compute_headroom_secs`, computed at mount).
    pub fn headroom_secs(&self) -> u64 {
        self.limits.headroom_secs
    }

    /// Dirty pages allowed before writers write back (`compute_dirty_cap_pages`).
    pub fn dirty_cap_pages(&self) -> u64 {
        self.limits.dirty_cap_pages
    }

    /// Dirty pages over which a writer wakes the flusher (`compute_dirty_background_pages`).
    pub fn dirty_background_pages(&self) -> u64 {
        self.limits.dirty_background_pages
    }

    /// Dirty nodes allowed before a checkpoint is forced (`compute_dirty_nodes_cap`).
    pub fn dirty_nodes_cap(&self) -> u64 {
        self.limits.dirty_nodes_cap
    }

    /// Sections of slack above the floor (`compute_space_slack_secs`).
    pub fn space_slack_secs(&self) -> u64 {
        self.limits.slack_secs
    }

    /// The limits above, from the geometry, the segment manager's reserve and the mount
    /// options, none of which changes while mounted: `build` computes them once, so that
    /// the checks on every operation (`ensure_space`, `balance`) read them instead of
    /// dividing each time.
    pub(crate) fn compute_limits(&self) -> Limits {
        let per_sec = BLOCKS_PER_SEG * self.sb.geo.segs_per_sec as u64;
        let slack_secs = self.compute_space_slack_secs();
        Limits {
            per_sec,
            headroom_secs: self.compute_headroom_secs(),
            slack_secs,
            dirty_cap_pages: self.compute_dirty_cap_pages(),
            dirty_background_pages: self.compute_dirty_background_pages(),
            dirty_nodes_cap: self.compute_dirty_nodes_cap(),
            budget_line: self.seg.space.app_floor() + (slack_secs * per_sec) as i64,
        }
    }

    /// Sections beyond the data floor that the overprovision space leaves for dirty data
    /// and for the cleaner's slack.
    fn compute_headroom_secs(&self) -> u64 {
        if self.sb.geo.infinite {
            // IPLFS hook: the "overprovision" of an infinite volume is the whole 2^64 space;
            // its slack is the heads' reserved room.
            return self.sb.geo.reserved_segments.max(2);
        }
        let ovp_secs = self.sb.geo.ovp_segments / self.sb.geo.segs_per_sec as u64;
        ovp_secs.saturating_sub(self.seg.reserve_sections()).max(2)
    }

    /// Dirty pages allowed before writers write back: the configured cap, but at most half
    /// the data floor, so that a checkpoint started at the floor can always write them.
    fn compute_dirty_cap_pages(&self) -> u64 {
        let per_sec = BLOCKS_PER_SEG * self.sb.geo.segs_per_sec as u64;
        (self.opts.dirty_cap_bytes / BS as u64)
            .min(self.seg.reserve_sections() / 2 * per_sec)
            .max(64)
    }

    /// Dirty pages over which a writer wakes the flusher (the kernel's background
    /// threshold); the flusher writes back down to half of it. Half the cap, except on an
    /// infinite volume (`gc=none`): near full it checkpoints every ~10 ms to turn dead
    /// blocks into free capacity, and each checkpoint writes back, with every operation
    /// excluded, all that is dirty (~2,000 pages at the slides' 97 % fill). A sixteenth of
    /// the cap keeps the flusher writing ahead: at 1 thread on 2 cores that halved the
    /// checkpoints' excluded writeback and gave +9 % (docs/BENCHMARKS.md).
    fn compute_dirty_background_pages(&self) -> u64 {
        let cap = self.compute_dirty_cap_pages();
        if self.seg.is_infinite() {
            (cap / 16).max(2)
        } else {
            cap / 2
        }
    }

    /// Dirty nodes allowed before a checkpoint is forced (a quarter of the floor).
    fn compute_dirty_nodes_cap(&self) -> u64 {
        let per_sec = BLOCKS_PER_SEG * self.sb.geo.segs_per_sec as u64;
        self.opts
            .dirty_nodes_max
            .min(self.seg.reserve_sections() / 4 * per_sec)
            .max(64)
    }

    /// Sections of slack above the floor that `space_target` and `budget_short` keep: a
    /// quarter of the headroom. gc=device keeps one: its overprovision is the device's
    /// virtual one (the regular region beyond the live limit), which the host cannot free
    /// on demand (device GC runs on the device's free lines; the upcall handler's
    /// checkpoints free what it empties), so a quarter of it was a budget the host sat
    /// under for good and every write checkpointed to give back page debt (1345
    /// checkpoints for 250 upcalls in a 15 s bench, 16 of its 17 s in checkpoints).
    fn compute_space_slack_secs(&self) -> u64 {
        if self.opts.gc == crate::config::GcPolicy::Device {
            1
        } else {
            (self.compute_headroom_secs() / 4).max(1)
        }
    }

    /// The space budget's headroom is below the application floor plus the cleaning slack.
    pub fn budget_short(&self) -> bool {
        self.seg.space.shortfall(self.limits.budget_line) > 0
    }

    /// gc=device: the device learns what died only from the discards that follow a durable
    /// checkpoint (gc_device.rs), and its GC needs invalid blocks. With the one-section
    /// slack (`space_slack_secs`) nothing else checkpoints between upcalls, so once a
    /// section's worth of blocks waits for its discard, checkpoint (measured: without it the
    /// device ran out of reclaimable lines, "every candidate line is fully valid"). Also
    /// when a batch of upcalls waits on a mount without a handler thread
    /// (`Collector::upcalls_due`).
    #[inline]
    fn device_discard_due(&self) -> Result<()> {
        if self.opts.gc != crate::config::GcPolicy::Device || self.opts.read_only {
            return Ok(());
        }
        self.device_discard_due_slow()
    }

    /// `device_discard_due` on a `gc=device` read-write mount. Apart, so that the check
    /// every operation makes (`ensure_space`) has no call for the other policies.
    #[inline(never)]
    fn device_discard_due_slow(&self) -> Result<()> {
        let fs = self;
        let per_sec = fs.limits.per_sec;
        let due = || fs.collector.upcalls_due() || fs.seg.dead_pending() >= per_sec;
        if !due() {
            return Ok(());
        }
        // One thread checkpoints; the others go on writing (they stop for its exclusive
        // section only). With every writer that found it due waiting for it, 16 writers
        // waited 61 s per 10 s run, first for its pre-pass, then for the cleaning lock.
        // But past the dead limit the device may not hold what they would kill next
        // (8 writers overwriting a full volume filled it while one checkpointed: found in
        // review, 2026-11-28): then every writer waits for that checkpoint.
        let over = fs.seg.dead_pending() >= fs.collector.dead_limit();
        let _one = if over {
            let one = crate::waits::lock(crate::waits::Point::DeadLimit, &fs.discard_checkpoint);
            if !due() {
                return Ok(()); // the checkpoint it waited for took them
            }
            fs.writeback_before_checkpoint()?;
            one
        } else {
            let Some(one) = fs.discard_checkpoint.try_lock() else {
                return Ok(());
            };
            // A pre-pass under way means a checkpoint follows it (the upcall handler's, a
            // cleaning round's, a sync's): it applies the upcalls and issues the discards,
            // so go on writing instead of waiting for that pass to checkpoint again
            // (`device_discard_checkpoint_does_not_wait_for_a_running_prepass`).
            if !fs.writeback_before_checkpoint_unless_running()? {
                return Ok(());
            }
            one
        };
        let _gc = fs.gc_lock.lock();
        if due() {
            fs.check_writable()?;
            let _g = fs.oplock.checkpoint();
            fs.write_checkpoint(false)?;
        }
        Ok(())
    }

    /// Free sections wanted before more work proceeds (F2FS `has_not_enough_free_secs`):
    /// the data floor, room for everything dirty, and the slack (`space_slack_secs`) so
    /// that cleaning starts before writers reach the floor.
    ///
    /// The space budget has its own view (`space.rs`): the target is also never below what
    /// brings its headroom back to the application floor plus the same slack, so that
    /// operations refused a reservation find cleaning under way.
    pub fn space_target(&self) -> u64 {
        self.space_target_for(
            self.dirty_pages.load(Ordering::Relaxed) + self.dirty_nodes.load(Ordering::Relaxed),
        )
    }

    /// `space_target` with the dirty counts' upper bounds, one load each (no shard sums):
    /// never below `space_target`, so a check against it that passes needs no other.
    pub fn space_target_bound(&self) -> u64 {
        self.space_target_for(self.dirty_pages.upper() + self.dirty_nodes.upper())
    }

    /// The space target for a per-operation check at `free` free sections: this thread's
    /// last exact `space_target`, plus one section, while free sections have not moved and
    /// it has been reused fewer than `TARGET_MEMO_USES` times; else the exact target (which
    /// becomes the memo). Near the target the exact one sums every dirty-count shard and
    /// every headroom cache on every write: at 16 threads on 16 cores (`gc=none` at 97 %
    /// full, where free space always sits near it) that was 12.6 % of all samples. The check
    /// is a trigger, not the guarantee (the space budget's reservation is, and a refusal
    /// forces a round of `ensure_space`): a memo can only be late by the pages and nodes
    /// its `TARGET_MEMO_USES` reuses per thread dirtied, which the extra section covers
    /// up to 512 threads at 2 MiB sections.
    pub fn space_target_recent(&self, free: u64) -> u64 {
        let id = self.mount_id;
        let memo = TARGET_MEMO.with(|m| {
            let (vol, at, target, uses) = m.get();
            if vol == id && at == free && uses > 0 {
                m.set((vol, at, target, uses - 1));
                Some(target + 1)
            } else {
                None
            }
        });
        memo.unwrap_or_else(|| {
            let target = self.space_target();
            TARGET_MEMO.with(|m| m.set((id, free, target, TARGET_MEMO_USES)));
            target
        })
    }

    /// `space_target` with `dirty` pages and nodes.
    fn space_target_for(&self, dirty: u64) -> u64 {
        let Limits {
            per_sec,
            slack_secs,
            budget_line,
            ..
        } = self.limits;
        let base = self.seg.reserve_sections() + dirty.div_ceil(per_sec) + slack_secs;
        let short = self.seg.space.shortfall(budget_line);
        if short > 0 {
            base.max(self.seg.free_sections() + (short as u64).div_ceil(per_sec))
        } else {
            base
        }
    }

    /// `gc_lock` for `ensure_space`, or None while a checkpoint's tail runs beside
    /// operations (`gc=none` with `cp_tail`, unless `force`): writers below the target
    /// then go on instead of queueing on the lock behind the thread that waits for that
    /// tail (on 2 cores, 4 writers at 97 % full: 1,354 -> 1,562 MiB/s, docs/BENCHMARKS.md).
    /// A tail that starts while this waits ends the wait too (polled every `TAIL_POLL`).
    fn gc_lock_unless_tail(&self, force: bool) -> Option<parking_lot::MutexGuard<'_, ()>> {
        if force || !(self.seg.is_infinite() && self.opts.cp_tail) {
            return Some(self.gc_lock.lock());
        }
        loop {
            if self.tail_in_flight() {
                return None;
            }
            if let Some(g) = self.gc_lock.try_lock_for(TAIL_POLL) {
                return Some(g);
            }
        }
    }

    /// F2FS `f2fs_balance_fs`: when free sections run short, clean in the foreground (one
    /// thread at a time; the others wait for its result) and checkpoint so that cleaned
    /// sections become free. Called holding no lock. `force` cleans at least one round even
    /// if the target looks met (a writeback just failed for space).
    #[inline]
    pub fn ensure_space(&self, force: bool) -> Result<()> {
        let fs = self;
        self.device_discard_due()?;
        fs.collector.space_low(fs)?;
        if !force {
            // First against the dirty counts' upper bounds, one load each: the exact counts
            // sum 32 shards each, lines that every writer's thread writes (on 16 cores this
            // check was 3 % of all samples); only a volume near its target pays for them.
            let free = fs.seg.free_sections();
            if free >= self.space_target_bound() || free >= self.space_target_recent(free) {
                return Ok(());
            }
        }
        self.ensure_space_slow(force)
    }

    /// `ensure_space` below the target (or forced): clean and checkpoint. Apart, so that
    /// the check every operation makes has no frame of its own.
    #[inline(never)]
    fn ensure_space_slow(&self, force: bool) -> Result<()> {
        let fs = self;
        if fs.opts.read_only {
            return Ok(());
        }
        let t0 = Instant::now();
        let Some(_gc) = self.gc_lock_unless_tail(force) else {
            // A room-making checkpoint's tail is in flight (`gc=none`): the room comes when
            // its pack lands. Go on with what the space budget still grants (the guarantee;
            // a refused reservation comes back here with `force`, and waits).
            fs.stats
                .stall_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            return Ok(());
        };
        let mut rounds = 0;
        let r = (|| loop {
            let target = self.space_target();
            if fs.seg.free_sections() >= target && !(force && rounds == 0) {
                return Ok(());
            }
            // In lfs mode, clean past the target by a quarter of the headroom (hysteresis), so
            // that one checkpoint covers several freed sections instead of one: +47-81 %
            // throughput while cleaning on the emulated SSD for ~5 % more WAF. Not in adaptive
            // mode, where threaded logging fills the same low-valid segments that extra
            // cleaning would pick (measured: -44 % and 89 % wasted GC reads).
            let hysteresis = if fs.seg.lfs_mode.load(Ordering::Relaxed) {
                (self.headroom_secs() / 4).max(1)
            } else {
                0
            };
            let goal = (target + hysteresis).min(fs.sb.geo.sections());
            let cleaned = {
                fs.check_writable()?;
                let r = fs.collector.foreground(fs, goal);
                fs.guard(r)?
            };
            // A checkpoint makes prefree sections free; it also writes every dirty page,
            // which gives back the part of each page's debt held for a direct node that
            // was dirty anyway (`PAGE_DEBT`): worth it when the space budget is short.
            if fs.seg.prefree_sections() > 0
                || (self.budget_short() && fs.dirty_pages.load(Ordering::Relaxed) > 0)
            {
                let _g = fs.oplock.checkpoint();
                fs.write_checkpoint(false)?;
            }
            rounds += 1;
            if cleaned == 0 || rounds >= MAX_GC_ROUNDS {
                return Ok(());
            }
        })();
        fs.stats
            .stall_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}

/// The cell of the file that a data block's summary names, if that owner still exists in
/// the version the summary recorded (the first half of the node-lock rule; the caller locks
/// the cell and compares the pointer). Shared by every collector and the upcall handler.
pub(crate) fn data_owner(fs: &FsInner, sum: &Summary) -> Result<Option<Arc<InodeCell>>> {
    let nid = sum.nid;
    if !fs.nat.valid(nid) || fs.nat.version(nid) != sum.version {
        return Ok(None);
    }
    let ino = fs.nat.ino(nid);
    if ino == 0 {
        return Ok(None);
    }
    match fs.cell(ino) {
        Ok(c) => Ok(Some(c)),
        Err(Error::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Eager node migration for other collectors; with `try_only`, None (nothing done) if
/// the node's file cell is held.
pub(crate) fn migrate_node_pub(
    fs: &FsInner,
    nid: Nid,
    addr: BlkAddr,
    try_only: bool,
) -> Result<Option<bool>> {
    migrate_node_if(fs, nid, addr, Migration::Eager, try_only)
}
