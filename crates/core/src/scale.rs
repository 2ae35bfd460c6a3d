//! ScaleLFS (FAST'25) as the `scale` GC policy: dedicated garbage collectors.
//!
//! Owns: the collector threads and their rounds. Each worker
//! - selects its own victims concurrently with the others (CVS): it scans the sections and
//!   claims candidates with an atomic test-and-set on the shared victim bitmap, holding up
//!   to M best and releasing one it replaces;
//! - reads a victim's valid blocks into its own buffer (DPB), not the page cache;
//! - writes moved data to its own log head (DWS): worker 0 to the cold data log, as F2FS's
//!   collector does, every other worker to a collector stream, a row of the log-head table
//!   that the checkpoint persists and recovery knows;
//! - protects each page it moves in the victim protector (SVP) instead of locking the file
//!   for the whole migration, and commits a move only under the node-lock rule;
//! - updates the SIT with atomics (LSU, in `seg`);
//! - reserves from the space budget what each victim's moves may use before it takes the
//!   op lock for it (`gc::reserve_victim`), so that parallel workers can never take the
//!   space the next checkpoint needs; a worker that gets no reservation ends its round.
//!
//! A foreground call starts a round on every worker and returns as soon as enough sections
//! are free (or prefree, for the next checkpoint), so blocked writers wake early; workers
//! stop when the target is met or no victim is left. Every technique can be switched off
//! (`ScaleFeatures`) for the ablation.
//!
//! Lock order: op lock (shared, per victim) -> victim claim bits (atomic) -> SVP shard (try
//! only) -> file cell -> log head. Workers never wait on the SVP.

use crate::config::{MountOptions, ScaleFeatures};
use crate::error::{Error, Result};
use crate::gc::{
    clean_section, has_enough_invalid_blocks, select_victim, Collector, Cost, Migration,
};
use crate::inner::FsInner;
use crate::waits::{self, Point};
use flashlog_format::codec::Block;
use flashlog_format::cp::{LogKind, Temp};
use flashlog_format::meta::Summary;
use flashlog_format::{BlkAddr, Ino, BLOCKS_PER_SEG, BLOCK_SIZE};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

/// Victims in a row a worker may fail to empty before it ends its round.
const MAX_FRUITLESS_VICTIMS: u32 = 4;
/// How long a foreground caller sleeps between checks while the workers run.
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(2);

#[derive(Default)]
struct Round {
    /// Incremented to start a round.
    generation: u64,
    target: u64,
    /// Workers still working on the current round.
    busy: usize,
    /// Sections emptied in the current round.
    emptied: u64,
}

struct Shared {
    round: Mutex<Round>,
    start: Condvar,
    progress: Condvar,
    stop: AtomicBool,
    /// Victim selection under one lock (ablation without CVS).
    select_lock: Mutex<()>,
    /// Each worker's held victims (CVS), best first.
    held: Vec<Mutex<Vec<(u64, u64)>>>,
    /// Blocks the victims being cleaned right now will free (net of their valid blocks).
    pending_gain: std::sync::atomic::AtomicU64,
}

pub struct ScaleCollector {
    workers: usize,
    victims_per_worker: Option<usize>,
    features: ScaleFeatures,
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ScaleCollector {
    /// Collector streams a volume can afford: each holds an open section, taken from the
    /// overprovision space beyond twice the data floor (a quarter of the rest at most).
    pub fn affordable_streams(geo: &flashlog_format::sb::Geometry) -> usize {
        let ovp_secs = geo.ovp_segments / geo.segs_per_sec as u64;
        (ovp_secs.saturating_sub(2 * (geo.log_heads as u64 + 2)) / 4).max(1) as usize
    }

    pub fn new(opts: &MountOptions) -> Result<Self> {
        if opts.gc_workers == 0 || opts.gc_workers > 64 {
            return Err(Error::Invalid("gc_workers must be between 1 and 64"));
        }
        Ok(ScaleCollector {
            workers: opts.gc_workers,
            victims_per_worker: opts.gc_victims_per_worker,
            features: opts.scale,
            shared: Arc::new(Shared {
                round: Mutex::new(Round::default()),
                start: Condvar::new(),
                progress: Condvar::new(),
                stop: AtomicBool::new(false),
                select_lock: Mutex::new(()),
                held: (0..opts.gc_workers)
                    .map(|_| Mutex::new(Vec::new()))
                    .collect(),
                pending_gain: std::sync::atomic::AtomicU64::new(0),
            }),
            threads: Mutex::new(Vec::new()),
        })
    }
}

impl Collector for ScaleCollector {
    fn name(&self) -> &'static str {
        "scale"
    }

    fn streams(&self) -> usize {
        // Worker 0 writes to the cold data log, where F2FS's collector writes; the others
        // get streams of their own. Each extra stream holds an open section that is on
        // average half empty: with one worker per stream, `scale:1` measured +12 % write
        // amplification over `f2fs-lfs` with 8 MiB sections at 90 % full, from that alone.
        if self.features.dws {
            self.workers - 1
        } else {
            0
        }
    }

    fn start(&self, fs: &Arc<FsInner>) {
        fs.seg.lsu_off.store(!self.features.lsu, Ordering::Relaxed);
        let m = self
            .victims_per_worker
            .unwrap_or_else(|| (fs.sb.geo.sections() as usize / 1000).max(1));
        let mut threads = self.threads.lock();
        for w in 0..self.workers {
            let (shared, weak, features) = (self.shared.clone(), Arc::downgrade(fs), self.features);
            let t = std::thread::Builder::new()
                .name(format!("flashlog-dgc-{w}"))
                .spawn(move || worker(w, m, features, shared, weak))
                .expect("spawn collector");
            threads.push(t);
        }
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _r = self.shared.round.lock();
            self.shared.start.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }

    fn foreground(&self, fs: &FsInner, target: u64) -> Result<u64> {
        let t0 = Instant::now();
        fs.stats.gc_fg_runs.fetch_add(1, Ordering::Relaxed);
        let sh = &self.shared;
        let mut r = sh.round.lock();
        if r.busy == 0 {
            r.generation += 1;
            r.target = target;
            r.busy = self.workers;
            r.emptied = 0;
            sh.start.notify_all();
        } else {
            r.target = r.target.max(target);
        }
        // Wake as soon as enough sections are free or prefree, or the round ends.
        while r.busy > 0
            && fs.seg.free_after_checkpoint() < target
            && !fs.poisoned.load(Ordering::Acquire)
        {
            sh.progress.wait_for(&mut r, WAIT_SLICE);
        }
        let emptied = r.emptied;
        drop(r);
        fs.stats
            .gc_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if fs.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                fs.poison.lock().clone().unwrap_or_default(),
            ));
        }
        Ok(emptied.max(u64::from(fs.seg.prefree_sections() > 0)))
    }

    fn background(&self, fs: &FsInner) -> Result<u64> {
        // ScaleLFS keeps F2FS's background thread: one lazy cost-benefit victim at a time.
        if !has_enough_invalid_blocks(fs) {
            return Ok(0);
        }
        fs.stats.gc_bg_runs.fetch_add(1, Ordering::Relaxed);
        let _role = waits::as_role(waits::Role::Gc);
        let Some(sec) = select_victim(fs, Cost::CostBenefit, crate::gc::BG_VICTIM_SEARCH) else {
            return Ok(0);
        };
        let _g = fs.oplock.op();
        let r = match crate::gc::reserve_victim(fs, sec, true) {
            Some(_space) => clean_section(fs, sec, Migration::Lazy),
            None => Ok(false),
        };
        fs.seg.victims.clear(sec);
        Ok(r? as u64)
    }
}

fn worker(w: usize, m: usize, features: ScaleFeatures, sh: Arc<Shared>, fs: Weak<FsInner>) {
    let _role = waits::as_role(waits::Role::Gc);
    let mut seen = 0u64;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let target = {
            let mut r = sh.round.lock();
            while r.generation == seen && !sh.stop.load(Ordering::Acquire) {
                sh.start.wait(&mut r);
            }
            if sh.stop.load(Ordering::Acquire) {
                return;
            }
            seen = r.generation;
            r.target
        };
        let Some(fs) = fs.upgrade() else { return };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_round(w, m, features, &sh, &fs, target, &mut buf)
        }));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if !matches!(e, Error::NoSpace) {
                    fs.poison_with(format!("collector {w}: {e}"));
                }
            }
            Err(_) => fs.poison_with(format!("collector {w} panicked")),
        }
        let mut r = sh.round.lock();
        r.busy -= 1;
        sh.progress.notify_all();
    }
}

fn run_round(
    w: usize,
    m: usize,
    f: ScaleFeatures,
    sh: &Shared,
    fs: &FsInner,
    target: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    // Victims in a row this worker could not empty (every block lost its race or is
    // pinned by an I/O range): give up the round rather than retry the same best victim.
    let mut fruitless = 0;
    loop {
        if fruitless >= MAX_FRUITLESS_VICTIMS {
            return Ok(());
        }
        let target = target.max(sh.round.lock().target);
        // Count what the other workers' victims in progress will free, so that parallel
        // workers do not clean past the target (cleaning early moves blocks that would have
        // died on their own, which raises write amplification).
        let bps = BLOCKS_PER_SEG * fs.sb.geo.segs_per_sec as u64;
        let expected =
            fs.seg.free_after_checkpoint() * bps + sh.pending_gain.load(Ordering::Acquire);
        if expected >= target.saturating_mul(bps)
            || sh.stop.load(Ordering::Acquire)
            || fs.poisoned.load(Ordering::Acquire)
        {
            return Ok(());
        }
        let sec = if f.cvs {
            cvs_next(w, m, sh, fs)
        } else {
            let _l = waits::lock(Point::VictimSelect, &sh.select_lock);
            select_victim(fs, Cost::Greedy, u64::MAX)
        };
        fs.test_point("collector-decided");
        let Some(sec) = sec else { return Ok(()) };
        // The space the moves need is reserved before anything moves (space.rs): when the
        // budget cannot cover one more victim, parallel cleaning shrinks instead of taking
        // what the checkpoint that frees our prefree sections needs.
        let Some(space) = crate::gc::reserve_victim(fs, sec, false) else {
            fs.seg.victims.clear(sec);
            return Ok(());
        };
        let gain = bps.saturating_sub(fs.seg.section_valid(sec));
        sh.pending_gain.fetch_add(gain, Ordering::AcqRel);
        let t0 = Instant::now();
        let r = {
            let _g = fs.oplock.op();
            clean_section_scale(fs, sec, w, f, buf)
        };
        drop(space);
        sh.pending_gain.fetch_sub(gain, Ordering::AcqRel);
        fs.seg.victims.clear(sec);
        fs.stats
            .gc_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let emptied = r?;
        fruitless = if emptied { 0 } else { fruitless + 1 };
        let mut round = sh.round.lock();
        if emptied {
            round.emptied += 1;
        }
        sh.progress.notify_all();
    }
}

/// Concurrent victim selection: take the best held victim that is still a candidate,
/// refilling the held list (up to `m`) by a scan that claims sections with test-and-set.
fn cvs_next(w: usize, m: usize, sh: &Shared, fs: &FsInner) -> Option<u64> {
    let mut held = sh.held[w].lock();
    loop {
        while let Some((sec, _)) = held.first().copied() {
            held.remove(0);
            if crate::gc::cleanable(fs, sec).is_some() {
                return Some(sec); // still claimed by us
            }
            fs.seg.victims.clear(sec);
        }
        // Refill: scan from the shared cursor (updated without a lock, a benign race as in
        // ScaleLFS), keep the m cheapest, claiming each with test-and-set.
        let nsecs = fs.sb.geo.sections();
        let start = fs.gc_cursor.fetch_add(nsecs / 2 + 1, Ordering::Relaxed) % nsecs.max(1);
        for k in 0..nsecs {
            let sec = (start + k) % nsecs;
            if fs.seg.victims.test(sec) {
                continue;
            }
            let Some(v) = crate::gc::cleanable(fs, sec) else {
                continue;
            };
            if held.len() < m {
                if !fs.seg.victims.set(sec) {
                    held.push((sec, v));
                }
            } else if let Some((wi, &(_, wv))) = held.iter().enumerate().max_by_key(|(_, e)| e.1) {
                if v < wv && !fs.seg.victims.set(sec) {
                    let (old, _) = held[wi];
                    held[wi] = (sec, v);
                    fs.seg.victims.clear(old);
                }
            }
        }
        if held.is_empty() {
            return None;
        }
        held.sort_by_key(|e| e.1);
    }
}

/// Migrate section `sec` with worker `w`'s techniques. Returns true if it is empty after.
fn clean_section_scale(
    fs: &FsInner,
    sec: u64,
    w: usize,
    f: ScaleFeatures,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    if !f.dpb {
        // Without a dedicated buffer, migration goes through the page cache (lazy moves),
        // then the file's writeback moves the pages.
        let r = clean_section(fs, sec, Migration::Lazy);
        flush_lazy_moves(fs)?;
        return r;
    }
    let sps = fs.sb.geo.segs_per_sec as u64;
    for seg in sec * sps..(sec + 1) * sps {
        let Some(crate::gc::VictimSegment {
            offs,
            kind,
            ssa,
            start,
        }) = crate::gc::victim_segment(fs, seg)?
        else {
            continue;
        };
        if kind == LogKind::Node {
            for &off in &offs {
                let addr = start + off as u64;
                if crate::gc::migrate_node_pub(fs, ssa.entries[off].nid, addr)? {
                    fs.stats.gc_moved_blocks.fetch_add(1, Ordering::Relaxed);
                }
            }
            continue;
        }
        // DPB: the worker's own buffer, every valid block read with all requests in flight.
        crate::gc::read_victim_blocks(fs, start, &offs, buf)?;
        if f.svp {
            for (k, &off) in offs.iter().enumerate() {
                let blk: &Block = buf[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE]
                    .try_into()
                    .expect("block");
                if move_with_svp(fs, w, f, ssa.entries[off], start + off as u64, blk)? {
                    fs.stats.gc_moved_blocks.fetch_add(1, Ordering::Relaxed);
                } else {
                    fs.stats.gc_skipped_blocks.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            // Without SVP: a per-file GC lock. Group the blocks by file and hold each file's
            // cell for the migration of all its blocks, re-reading each under the lock as
            // F2FS does with i_gc_rwsem held.
            let mut by_file: BTreeMap<Ino, Vec<usize>> = BTreeMap::new();
            for (k, &off) in offs.iter().enumerate() {
                let nid = ssa.entries[off].nid;
                if fs.nat.valid(nid) {
                    by_file.entry(fs.nat.ino(nid)).or_default().push(k);
                }
            }
            for (ino, ks) in by_file {
                let Ok(cell) = fs.cell(ino) else { continue };
                let mut st = cell.lock();
                for k in ks {
                    let off = offs[k];
                    let addr = start + off as u64;
                    let mut blk = [0u8; BLOCK_SIZE];
                    fs.read_block(addr, &mut blk)?;
                    if commit_move(fs, w, f, &mut st, ssa.entries[off], addr, &blk)?.is_some() {
                        fs.stats.gc_moved_blocks.fetch_add(1, Ordering::Relaxed);
                    } else {
                        fs.stats.gc_skipped_blocks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    let empty = fs.seg.section_valid(sec) == 0;
    if empty {
        fs.stats.gc_sections_freed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(empty)
}

/// Write back pages that lazy moves dirtied (ablation without DPB).
fn flush_lazy_moves(fs: &FsInner) -> Result<()> {
    for c in fs.cells.all() {
        let mut st = c.lock();
        if !st.freed && st.pages.values().any(|p| p.gc) {
            fs.writeback_pages(&mut st)?;
        }
    }
    Ok(())
}

/// The head a worker writes moved data to: its own stream (DWS: worker 0 the cold data
/// log, worker w > 0 collector stream w - 1, shared round-robin if the volume cannot afford
/// one per worker) or, without DWS, the cold log shared by all.
fn gc_head(fs: &FsInner, w: usize, f: ScaleFeatures, ino: Ino) -> usize {
    let streams = fs.seg.heads.len() - fs.sb.geo.log_heads as usize;
    if f.dws && w > 0 && streams > 0 {
        fs.sb.geo.log_heads as usize + (w - 1) % streams
    } else {
        fs.data_head(ino, Temp::Cold)
    }
}

/// Move one data block under page protection; the file cell is held only for the
/// owner lookup and for the commit.
fn move_with_svp(
    fs: &FsInner,
    w: usize,
    f: ScaleFeatures,
    sum: Summary,
    addr: BlkAddr,
    blk: &Block,
) -> Result<bool> {
    let nid = sum.nid;
    if !fs.nat.valid(nid) || fs.nat.version(nid) != sum.version || !fs.seg.is_valid(addr) {
        return Ok(false); // LSU false positive: invalidated since it was read
    }
    let ino = fs.nat.ino(nid);
    let cell = match fs.cell(ino) {
        Ok(c) => c,
        Err(Error::NotFound) => return Ok(false),
        Err(e) => return Err(e),
    };
    let idx = {
        let mut st = cell.lock();
        if st.freed {
            return Ok(false);
        }
        match crate::gc::owner_index(fs, &mut st, nid, sum.ofs as usize)? {
            Some(i) if fs.dnode_get(&st, nid, sum.ofs as usize) == addr => i,
            _ => return Ok(false),
        }
    };
    if !fs.svp.try_protect_page(ino, idx) {
        return Ok(false); // an I/O path holds the range: skip, as ScaleLFS's trylock does
    }
    let r = commit_move(fs, w, f, &mut cell.lock(), sum, addr, blk);
    fs.svp.release_page(ino, idx);
    Ok(r?.is_some())
}

/// The node-lock rule: with the file cell held, move the block only if its owner still
/// points at `addr`. Returns the new address.
fn commit_move(
    fs: &FsInner,
    w: usize,
    f: ScaleFeatures,
    st: &mut crate::cell::InodeState,
    sum: Summary,
    addr: BlkAddr,
    blk: &Block,
) -> Result<Option<BlkAddr>> {
    let nid = sum.nid;
    let slot = sum.ofs as usize;
    if st.freed || fs.nat.version(nid) != sum.version {
        return Ok(None);
    }
    let Some(idx) = crate::gc::owner_index(fs, st, nid, slot)? else {
        return Ok(None);
    };
    if fs.dnode_get(st, nid, slot) != addr {
        return Ok(None);
    }
    let head = gc_head(fs, w, f, st.ino);
    let new = fs.relocate_data_block(st, head, nid, slot, idx, addr, blk)?;
    Ok(Some(new))
}
