//! The `device` policy (D2FS, FAST '25 §5): the device cleans, the host remaps.
//!
//! Owns: the host end of migration upcalls. The device (`Capabilities::migration_upcalls`,
//! the emulator's `ftl=coupled`) moves valid blocks of its victims into its GC region and
//! sends (old, new) pairs on ordinary completions; an [`UpcallTap`] around the device queues
//! them and wakes the handler thread (no polling). The host never cleans. Also owned here:
//! the discard thread, which issues the per-block discards a durable checkpoint logged
//! without the op lock, and the order of acknowledgement and section release around it.
//!
//! Applying a pair (the node-lock rule): the owner of `old` per the SSA still points at
//! `old` (NAT entry for a node block; the direct node's slot, under the file's cell lock,
//! for a data block) -> point it at `new`, set `new` valid with the same summary, and
//! invalidate `old` without ever discarding it (the device would redirect the discard to the
//! block's new home). Otherwise the pair is superseded and skipped; if the host already
//! points at `new` (roll-forward after a cut recovered a node written after the pair was
//! applied), a queued discard of `old` is withdrawn, since the device would redirect it to
//! the live block at `new`.
//!
//! Protocol with the checkpoint (docs/DESIGN.md "D2FS host side", its case table); pack N
//! is checkpoint N's, `L(N)` the last upcall id it records:
//! 1. checkpoint N first issues whatever the discard thread left of the discards pack N-1
//!    logged (`finish_discards`), then applies every queued upcall, in id order, and records
//!    the last applied id in the pack (`Checkpoint::last_upcall`);
//! 2. once pack N is durable, still under the op lock: acknowledge `L(N-1)` (every discard
//!    pack N-1 logged is issued, so none still needs a record of those upcalls to redirect
//!    it to the block's moved copy), then discard and free the sections emptied before
//!    pack N-1 (the pairs that moved their live blocks are acknowledged, so a whole-section
//!    discard is no longer redirected to a live copy; one in which a queued, unapplied
//!    upcall has an old address waits one more checkpoint), and hold those emptied before
//!    pack N for checkpoint N+1 (`SegManager::hold_sections`);
//! 3. after the op lock is released, the discard thread issues the discards pack N logged
//!    (every block invalidated before it), 256 ranges a request, beside the writers; a
//!    mount without background threads (`gc_interval` None) leaves them to step 1 of the
//!    next checkpoint. An unmount's checkpoint does steps 1-3 at once (issue, acknowledge
//!    `L(N)`, free everything held), then a flush and, while it brings upcalls back (what
//!    the device moved meanwhile), another such checkpoint, three at most (`unsettled`);
//! 4. at mount, the pack's discard log is issued (`issue_pack_log`: its records must still
//!    redirect), then ids up to the checkpoint's `last_upcall` are acknowledged (the pack
//!    covers them; before that a discard of a section the pack freed was redirected onto a
//!    pair's live new block), then `resend_migrations` re-delivers every unacknowledged
//!    upcall; ids up to `last_upcall` are skipped (applying them again could move a block
//!    of a later owner of a reused address), later ones are applied, in id order: the tap
//!    queues them as completions return, which two I/O threads can cross, so a hole in the
//!    ids makes the host ask for a re-send before applying (`ordered_upcalls`). The log is
//!    issued once more after roll-forward (`gc_none::after_roll_forward`, harmless). After
//!    a cut, the blocks of the host's region the volume does not reference are taken
//!    after roll-forward, before the mount's checkpoint applies anything, and discarded
//!    once that checkpoint is durable (`SegManager::residue_after_cut`: what was written
//!    back after the pack and not recovered, which the device would otherwise keep, or
//!    move and keep).
//!
//! The handler thread checkpoints per batch of upcalls (`ack_batch_upcalls`, or a partial
//! batch after `MAX_UPCALL_WAIT`); without it (`gc_interval` None) `ensure_space` does
//! (`upcalls_due`). Other checkpoints apply whatever waits.
//!
//! Invariants: upcalls are applied in id order, each at most once per mount (`last`);
//! `acked <= pack_last`, the id of a durable pack, and an id is acknowledged only after
//! every discard logged by the packs up to it was issued; a discard is issued only after
//! the pack that logged it is durable and before the section of its block is freed; a
//! section is freed only after the pack that emptied it and the next one are durable;
//! sections of the GC region are never allocated or freed by the host
//! (`SegManager::reserve_device_region`).
//!
//! Lock order: applying runs under the exclusive side of the op lock (inside a checkpoint),
//! then `state`, then one file cell at a time. The handler thread takes the op lock only
//! through a checkpoint. `issuing` (held across one discard request) comes after the op
//! lock; the discard thread takes `issuing`, then `SegManager::discards`, and never the op
//! lock, so a checkpoint waiting for `issuing` waits for one request at most.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use flashlog_dev::{BlockDevice, UpcallTap, MAX_QUEUED_UPCALLS};
use flashlog_format::cp::LogKind;
use flashlog_format::meta::SsaBlock;
use flashlog_format::BLOCKS_PER_SEG;
use parking_lot::Mutex;

use crate::config::{GcPolicy, MountOptions};
use crate::error::{Error, Result};
use crate::inner::FsInner;

/// The tapped device the file system talks to.
pub type Tapped = UpcallTap<Arc<dyn BlockDevice>>;

/// Why `gc=device` refuses a device.
pub const NO_UPCALLS: &str = "gc=device (D2FS) needs a device that moves blocks itself and \
     reports each move to the host (capability migration_upcalls, e.g. the emulated SSD with \
     ftl=coupled); this device does not, so nobody would clean: use gc=f2fs or gc=scale";

/// Why other policies refuse a coupled device.
pub const ONLY_DEVICE: &str = "this device cleans itself (D2FS coupled GC: the end of its \
     address space is its GC region, where the host may not write, and it moves blocks the \
     host must remap); mount it with gc=device";

/// Live blocks a coupled device can hold: its capacity (the GC region is one capacity) less
/// the conventional region, one zone per open log, the device's GC reserve, and 5 % slack so
/// that its GC never copies a nearly full victim.
pub fn live_limit(caps: &flashlog_dev::Capabilities, mlogs: u32) -> u64 {
    room(caps, mlogs) / 100 * 95
}

/// What `live_limit` takes 95 % of: the capacity less the conventional region, one zone
/// per open log and the device's GC reserve.
fn room(caps: &flashlog_dev::Capabilities, mlogs: u32) -> u64 {
    let z = caps.zone_blocks;
    let logs = ((flashlog_format::sb::DEFAULT_LOG_HEADS + 3) * mlogs) as u64;
    caps.gc_region_blocks
        .saturating_sub(caps.conventional_blocks + (logs + 8) * z)
}

/// Queued discard blocks past which writers issue the queue themselves: half the device's
/// slack over `live_limit` (its 5 %), at least one section. The device holds the host's
/// live blocks plus every dead block whose discard it has not received; the host's budget
/// counts only the first, so the second must stay within that slack. Before, a file
/// truncated on a full volume and written back filled the device with the truncated
/// blocks (their discards queued by a checkpoint and issued only by the next, which the
/// rewrite, killing nothing, never made due): "no reclaimable space", a failed log write,
/// the mount poisoned (found in review, 2026-11-28).
pub fn urgent_discard_blocks(caps: &flashlog_dev::Capabilities, mlogs: u32, per_sec: u64) -> u64 {
    let slack = room(caps, mlogs) - live_limit(caps, mlogs);
    (slack / 2).max(per_sec)
}

/// Mount, before the pack's upcalls are acknowledged (`ack_loaded`): issue the pack's
/// discard log (every dead block whose discard was not yet issued when the pack was
/// written). Without it a cut between a durable pack and its discards left, after the
/// remount, the moved copies of those blocks on flash for good: the mount acknowledged the
/// records first, and the discards that `gc_none::after_roll_forward` issues again then
/// found the old addresses unmapped (60 blocks in
/// `a_cut_before_the_discards_of_a_durable_pack_leaves_no_dead_block_on_flash`). Safe
/// before roll-forward: no block of the log was written again after the pack (its section
/// is freed only after the next pack, `after_checkpoint`), and blocks the pack shows valid
/// are left out. Returns the blocks issued.
pub fn issue_pack_log(
    dev: &dyn BlockDevice,
    geo: &flashlog_format::sb::Geometry,
    seg: &crate::seg::SegManager,
    ck: &flashlog_format::cp::Checkpoint,
) -> Result<u64> {
    if ck.discard_log.is_empty() {
        return Ok(0);
    }
    let ranges: Vec<(u64, u64)> =
        crate::discard::decode_log_except(&ck.discard_log, geo.block_count, |b| seg.is_valid(b))?
            .into_iter()
            .map(|c| (c.addr, c.len))
            .collect();
    for chunk in ranges.chunks(flashlog_dev::MAX_DISCARD_RANGES) {
        dev.discard_many(chunk)?;
    }
    Ok(ranges.iter().map(|r| r.1).sum())
}

/// `gc=device` at mount: check the device and put the upcall tap in front of it.
pub fn prepare(
    dev: Arc<dyn BlockDevice>,
    opts: &MountOptions,
) -> Result<(Arc<dyn BlockDevice>, Option<DeviceCollector>)> {
    let caps = dev.capabilities();
    if opts.gc != GcPolicy::Device {
        if caps.gc_region_blocks > 0 && !opts.read_only {
            return Err(Error::NotSupported(ONLY_DEVICE));
        }
        return Ok((dev, None));
    }
    if !caps.migration_upcalls || caps.gc_region_blocks == 0 {
        return Err(Error::NotSupported(NO_UPCALLS));
    }
    let tap = Arc::new(UpcallTap::new(dev));
    let d: Arc<dyn BlockDevice> = tap.clone();
    Ok((d, Some(DeviceCollector::new(tap))))
}

/// Longest a partial batch of upcalls waits for the handler's checkpoint (the device keeps
/// their records meanwhile).
const MAX_UPCALL_WAIT: Duration = Duration::from_secs(2);

/// Upcalls the handler gathers before it checkpoints: outstanding pairs up to 1/16 of the
/// device's blocks (16,384 pairs per GiB, 384 KiB per GiB of records at the emulator's 24 B
/// per record, within D2FS's 2 MiB per GiB). A checkpoint per upcall (the first version)
/// checkpointed back to back: 10 of 15 s of the random-write phase in checkpoints for 1,822
/// upcalls; other checkpoints (`ensure_space`, discards due, fsync) apply what waits too.
pub fn ack_batch_upcalls(caps: &flashlog_dev::Capabilities) -> usize {
    let pairs = caps.gc_region_blocks / 16;
    ((pairs / flashlog_dev::MAX_UPCALL_PAIRS as u64) as usize).clamp(1, MAX_QUEUED_UPCALLS / 2)
}

#[derive(Default)]
struct State {
    /// Last upcall applied (this mount or a durable checkpoint before it).
    last: u64,
    /// Last upcall acknowledged to the device.
    acked: u64,
    /// `last_upcall` of the newest durable pack: acknowledged at the next checkpoint, once
    /// the discards that pack logged are all issued.
    pack_last: u64,
}

/// Wakes the discard thread (`Kick::pending`) or stops it.
#[derive(Default)]
struct Kick {
    pending: bool,
    stop: bool,
}

/// The `device` collector: no cleaning, an upcall handler, a discard thread.
pub struct DeviceCollector {
    tap: Arc<Tapped>,
    state: Mutex<State>,
    stop: Arc<AtomicBool>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// No handler thread (`gc_interval` None): `ensure_space` checkpoints for full batches.
    inline: AtomicBool,
    /// Upcalls per handler checkpoint (`ack_batch_upcalls`).
    batch: std::sync::atomic::AtomicUsize,
    /// Held while one discard request of the queue is issued (by the discard thread or a
    /// checkpoint finishing the queue): a checkpoint that takes it knows no request of the
    /// queue is still in flight.
    issuing: Arc<Mutex<()>>,
    kick: Arc<(Mutex<Kick>, parking_lot::Condvar)>,
    discarder: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Blocks in the discard queue after the last checkpoint queued its pack's log: dead
    /// blocks the device still counts as valid until their discards are issued.
    queued_blocks: AtomicU64,
    /// Queued blocks past which a writer issues the queue itself (`space_low`): half the
    /// device's slack over the host's live limit (`urgent_discard_blocks`).
    urgent_blocks: AtomicU64,
}

impl DeviceCollector {
    fn new(tap: Arc<Tapped>) -> Self {
        DeviceCollector {
            tap,
            state: Mutex::new(State::default()),
            stop: Arc::new(AtomicBool::new(false)),
            handle: Mutex::new(None),
            inline: AtomicBool::new(false),
            batch: std::sync::atomic::AtomicUsize::new(1),
            issuing: Arc::new(Mutex::new(())),
            kick: Arc::new((Mutex::new(Kick::default()), parking_lot::Condvar::new())),
            discarder: Mutex::new(None),
            queued_blocks: AtomicU64::new(0),
            urgent_blocks: AtomicU64::new(u64::MAX),
        }
    }

    /// The id in the mounted checkpoint: upcalls up to it are already applied.
    pub fn set_loaded(&self, last: u64) {
        let mut s = self.state.lock();
        s.last = last;
        s.acked = 0;
        s.pack_last = last;
    }

    /// Issue every queued discard now, one request (`MAX_DISCARD_RANGES` ranges) at a
    /// time, after any request the discard thread has in flight. A checkpoint calls it
    /// first, under the exclusive op lock, so that the acknowledgement and the release
    /// that follow never come before a discard the previous pack logged.
    fn finish_discards(&self, fs: &FsInner) -> Result<()> {
        self.issue_queue(fs, &fs.stats.device_discards_in_checkpoint)
    }

    /// Issue the whole queue, one request under `issuing` at a time, counting each in
    /// `requests`: a checkpoint's step 1, or a writer whose queue grew past `urgent_blocks`.
    fn issue_queue(&self, fs: &FsInner, requests: &AtomicU64) -> Result<()> {
        loop {
            let _issuing = self.issuing.lock();
            if crate::gc_none::dispatch_some(fs, flashlog_dev::MAX_DISCARD_RANGES)? == 0 {
                return Ok(());
            }
            requests.fetch_add(1, Ordering::Relaxed);
            fs.test_point("discards:batch");
        }
    }

    /// The discard thread: after each checkpoint (`after_checkpoint` kicks it) it issues
    /// the queue that checkpoint's pack logged, one request at a time, without the op lock,
    /// beside the writers (what the checkpoint's exclusive section used to do: ~60 % of
    /// its time after the pack). A failed request is put back; the next checkpoint issues
    /// it again and fails loudly if it fails again. It never takes the op lock.
    fn start_discarder(&self, fs: &Arc<FsInner>) {
        let weak: Weak<FsInner> = Arc::downgrade(fs);
        let kick = self.kick.clone();
        let issuing = self.issuing.clone();
        let h = std::thread::Builder::new()
            .name("flashlog-discard".into())
            .spawn(move || loop {
                {
                    let mut k = kick.0.lock();
                    while !k.pending && !k.stop {
                        kick.1.wait(&mut k);
                    }
                    if k.stop {
                        return;
                    }
                    k.pending = false;
                }
                let Some(fs) = weak.upgrade() else { return };
                loop {
                    if fs.poisoned.load(Ordering::Acquire) || kick.0.lock().stop {
                        return;
                    }
                    let _issuing = issuing.lock();
                    match crate::gc_none::dispatch_some(&fs, flashlog_dev::MAX_DISCARD_RANGES) {
                        Ok(0) => break,
                        Ok(_) => {
                            fs.stats
                                .device_discards_off_lock
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            tracing::warn!("gc=device discard (re-queued): {e}");
                            break;
                        }
                    }
                }
            })
            .expect("spawn discard thread");
        *self.discarder.lock() = Some(h);
    }

    /// The sections of `secs` in which an upcall queued and not yet applied has a pair's
    /// old address.
    fn queued_pair_in(&self, fs: &FsInner, secs: &std::collections::HashSet<u64>) -> Vec<u64> {
        let g = &fs.sb.geo;
        let mut hit = std::collections::HashSet::new();
        self.tap.any_queued_old(|old| {
            if let Some(seg) = g.seg_of(old) {
                let sec = seg / g.segs_per_sec as u64;
                if secs.contains(&sec) {
                    hit.insert(sec);
                }
            }
            false
        });
        hit.into_iter().collect()
    }

    /// Mount: acknowledge the upcalls the mounted checkpoint covers (`last`), if the device
    /// has them outstanding.
    pub fn ack_loaded(&self, dev: &Arc<dyn BlockDevice>, last: u64) -> Result<()> {
        if last == 0 {
            return Ok(());
        }
        dev.ack_migrations(last)?;
        self.state.lock().acked = last;
        Ok(())
    }

    /// Apply every queued upcall not applied yet, in id order. The caller holds the op lock
    /// exclusively.
    ///
    /// The tap queues upcalls in the order their completions came back, which is not id
    /// order when several threads complete requests at once (two I/O threads, a reader, a
    /// flusher): the device attached upcall k to one completion and k + 1 to the next, and
    /// the thread holding k + 1 may reach the tap first (or k may still be on its way back
    /// when this runs). Applying k + 1 first and then skipping k as "already applied" lost
    /// all of k's pairs: the device forgot the records at the acknowledgement and the host
    /// still pointed at the old addresses, which read as zeros (the "file N differs" of
    /// `random_overwrites_with_device_gc_match_the_model`, about 1 run in 6). So: sort, and
    /// where an id after `last` is missing, ask the device to re-send what is outstanding
    /// (`ordered_upcalls`).
    fn apply_queued(&self, fs: &FsInner) -> Result<()> {
        let mut s = self.state.lock();
        let mut ssa = SsaCache::new();
        for up in self.ordered_upcalls(fs, s.last)? {
            if up.id <= s.last {
                fs.stats.upcalls_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // What the remaps dirty (one node per pair at most) comes from the collectors'
            // side of the budget; a checkpoint writes it at once.
            let _space = fs.seg.space.try_reserve(up.pairs.len() as u64, false);
            for p in &up.pairs {
                if apply_pair_cached(fs, p.old, p.new, &mut ssa)? {
                    fs.stats
                        .upcall_pairs_applied
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    fs.stats
                        .upcall_pairs_skipped
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            s.last = up.id;
            fs.stats.upcalls_applied.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl DeviceCollector {
    /// The queued upcalls in id order without duplicates. If the ids after `last` have a
    /// hole (an upcall whose completion another thread has not handed to the tap yet, or one
    /// left on a completion while the tap was full), the device re-sends every
    /// unacknowledged upcall on the completion of a flush: its upcalls in flight run without
    /// a hole from the oldest unacknowledged one, so after that the ids are whole from
    /// `last + 1` on, or start past it because everything before was acknowledged (a fresh
    /// volume on a device whose ids started higher). A late copy of one already applied is
    /// skipped by id. The re-sent copies ride on the next completion the device finishes,
    /// which may be another thread's (an I/O thread's log write still in flight) that
    /// reaches the tap after this flush: if the hole is still there, only the run without
    /// a hole is returned and the upcalls past it go back to the tap for the next round.
    /// Applying past the hole set `last` beyond the missing id, so that it was skipped as
    /// applied when it came, acknowledged, and its blocks lost (found in review,
    /// 2026-11-27, `tests/device_gc_resend.rs`).
    fn ordered_upcalls(&self, fs: &FsInner, last: u64) -> Result<Vec<flashlog_dev::Upcall>> {
        let mut ups = self.tap.take();
        let whole = |ups: &mut Vec<flashlog_dev::Upcall>| {
            ups.sort_by_key(|u| u.id);
            ups.dedup_by_key(|u| u.id);
            ups.iter()
                .filter(|u| u.id > last)
                .zip(last + 1..)
                .all(|(u, want)| u.id == want)
        };
        if whole(&mut ups) {
            return Ok(ups);
        }
        fs.stats.upcall_resends.fetch_add(1, Ordering::Relaxed);
        fs.dev.resend_migrations()?;
        fs.dev.flush()?;
        ups.extend(self.tap.take());
        if !whole(&mut ups) {
            // Keep what is at or below `last` (skipped by id) and the run from `last + 1`
            // without a hole; the rest waits in the tap.
            let mut want = last + 1;
            let cut = ups
                .iter()
                .position(|u| {
                    if u.id <= last {
                        return false;
                    }
                    let gap = u.id != want;
                    want += 1;
                    gap
                })
                .unwrap_or(ups.len());
            let rest = ups.split_off(cut);
            fs.stats
                .upcalls_deferred
                .fetch_add(rest.len() as u64, Ordering::Relaxed);
            self.tap.put_back(rest);
        }
        Ok(ups)
    }
}

/// Summary blocks read while applying one batch of upcalls, by segment. A device victim's
/// pairs come in slot order, so without it every pair re-read its old segment's summary
/// block from the device (measured: 0.3-0.5 s of a checkpoint's exclusive section for
/// ~20 upcalls). Valid while the op lock is held exclusively: nothing but the pairs being
/// applied changes a summary, and `apply_pair_cached` drops the entry of every segment
/// it writes a summary into.
pub type SsaCache = std::collections::HashMap<flashlog_format::SegNo, Box<SsaBlock>>;

/// Apply one pair under the node-lock rule; true if a pointer moved.
pub fn apply_pair(fs: &FsInner, old: u64, new: u64) -> Result<bool> {
    apply_pair_cached(fs, old, new, &mut SsaCache::new())
}

/// `apply_pair` with a summary cache shared by the pairs of a batch.
pub fn apply_pair_cached(fs: &FsInner, old: u64, new: u64, ssa: &mut SsaCache) -> Result<bool> {
    let g = &fs.sb.geo;
    let (Some(seg), Some(_)) = (g.seg_of(old), g.seg_of(new)) else {
        return Ok(false);
    };
    if fs.seg.is_valid(new) {
        // The host already points at `new`: roll-forward recovered a node fsync'd after
        // this pair was applied in memory (before a cut), and invalidated `old` as the
        // checkpointed address it replaced. That queued a discard of `old`, which the
        // device would redirect through this pair's record to `new`, killing the live
        // block: take it back (the device already moved `old`'s content away).
        if let Some(m) = fs.seg.dead.lock().as_mut() {
            if m.forget(old) {
                fs.stats
                    .upcall_discards_withdrawn
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        return Ok(false);
    }
    if !fs.seg.is_valid(old) {
        return Ok(false);
    }
    let off = ((old - g.main_addr) % BLOCKS_PER_SEG) as usize;
    let sum = match ssa.entry(seg) {
        std::collections::hash_map::Entry::Occupied(e) => e.get().entries[off],
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(fs.seg.read_ssa(seg)?).entries[off]
        }
    };
    let nid = sum.nid;
    if !fs.nat.valid(nid) {
        return Ok(false);
    }
    let moved_kind = if fs.nat.addr(nid) == old {
        // A node block: the NAT is its only pointer.
        fs.nat.set(nid, fs.nat.ino(nid), new);
        LogKind::Node
    } else {
        let Some(cell) = crate::gc::data_owner(fs, &sum)? else {
            return Ok(false);
        };
        let mut st = cell.lock();
        if st.freed {
            return Ok(false);
        }
        let slot = sum.ofs as usize;
        if crate::gc::owner_index(fs, &mut st, nid, slot)?.is_none()
            || fs.dnode_get(&st, nid, slot) != old
        {
            return Ok(false);
        }
        fs.dnode_set(&mut st, nid, slot, new);
        LogKind::Data
    };
    fs.seg.set_valid(new);
    if let Some(s) = g.seg_of(new) {
        ssa.remove(&s);
    }
    fs.seg.set_summary(new, sum)?;
    fs.seg.set_class_kind(new, moved_kind);
    fs.seg.invalidate_migrated(old);
    Ok(true)
}

impl crate::gc::Collector for DeviceCollector {
    fn name(&self) -> &'static str {
        "device"
    }

    /// No host cleaning: the host freezes until the device frees sections (FAST '25 §8.2).
    /// A flush makes the device collect a regular-region victim if its regular region is
    /// below its watermark and send what it buffered; a checkpoint applies the upcalls,
    /// acknowledges them and frees the sections they emptied. Returns the sections freed
    /// (so `ensure_space` keeps going, up to its round limit, while the device makes
    /// progress; 0 = the device had nothing to give: the budget answers ENOSPC).
    fn foreground(&self, fs: &FsInner, _target: u64) -> Result<u64> {
        let before = fs.seg.free_sections();
        fs.dev.flush()?;
        if self.tap.pending() > 0 || fs.seg.prefree_sections() > 0 || fs.seg.held_sections() > 0 {
            fs.writeback_before_checkpoint()?;
            let _g = fs.oplock.checkpoint();
            fs.write_checkpoint(false)?;
        }
        Ok(fs.seg.free_sections().saturating_sub(before))
    }

    fn background(&self, _fs: &FsInner) -> Result<Option<u64>> {
        Ok(None)
    }

    /// The unmount's checkpoint writes, and the device's GC may move blocks meanwhile: a
    /// flush brings their records back as upcalls (buffered ones included), which one more
    /// checkpoint applies and acknowledges, so that a clean unmount leaves the device with
    /// nothing outstanding (else the next mount applies them; a check of the device right
    /// after the unmount found 247 blocks valid only at their new addresses).
    fn unsettled(&self, fs: &FsInner) -> Result<bool> {
        fs.dev.flush()?;
        Ok(self.tap.pending() > 0)
    }

    fn start(&self, fs: &Arc<FsInner>) {
        if fs.opts.read_only {
            return;
        }
        // Whatever the device sent before a restart comes again; the handler applies it.
        if let Err(e) = fs.dev.resend_migrations() {
            fs.poison_with(format!(
                "gc=device: re-send of migration upcalls failed: {e}"
            ));
            return;
        }
        // Take them now (a flush completion carries them) and apply them in a checkpoint
        // before the mount returns, so the volume is current when users see it.
        let r = fs.dev.flush().map_err(Error::from).and_then(|_| {
            if self.tap.pending() > 0 {
                let _g = fs.oplock.checkpoint();
                fs.write_checkpoint(false)
            } else {
                Ok(())
            }
        });
        if let Err(e) = r {
            fs.poison_with(format!("gc=device: applying re-sent upcalls failed: {e}"));
            return;
        }
        let batch = ack_batch_upcalls(fs.dev.capabilities());
        self.batch.store(batch, Ordering::Relaxed);
        let per_sec = flashlog_format::BLOCKS_PER_SEG * u64::from(fs.sb.geo.segs_per_sec);
        self.urgent_blocks.store(
            urgent_discard_blocks(fs.dev.capabilities(), fs.sb.geo.mlogs, per_sec),
            Ordering::Relaxed,
        );
        if fs.opts.gc_interval.is_none() {
            // No background threads on this mount (deterministic runs): full batches are
            // checkpointed from `ensure_space` instead (`upcalls_due`).
            self.inline.store(true, Ordering::Release);
            return;
        }
        self.start_discarder(fs);
        let weak: Weak<FsInner> = Arc::downgrade(fs);
        let tap = self.tap.clone();
        let stop = self.stop.clone();
        let h = std::thread::Builder::new()
            .name("flashlog-upcall".into())
            .spawn(move || {
                let _role = crate::waits::as_role(crate::waits::Role::Discard);
                // Since when upcalls have waited without a checkpoint.
                let mut waiting: Option<Instant> = None;
                while !stop.load(Ordering::Acquire) {
                    // Blocks until completions delivered a batch of upcalls (the timeout only
                    // lets unmount stop the thread and bounds how long a partial batch waits).
                    let n = tap.wait_at_least(batch, Duration::from_millis(100));
                    if n == 0 {
                        waiting = None;
                        continue;
                    }
                    let since = *waiting.get_or_insert_with(Instant::now);
                    if n < batch && since.elapsed() < MAX_UPCALL_WAIT {
                        continue;
                    }
                    waiting = None;
                    let Some(fs) = weak.upgrade() else { break };
                    if fs.poisoned.load(Ordering::Acquire) {
                        break;
                    }
                    let _ = fs.writeback_before_checkpoint();
                    let _g = fs.oplock.checkpoint();
                    let _ = fs.write_checkpoint(false);
                }
            })
            .expect("spawn upcall handler");
        *self.handle.lock() = Some(h);
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.lock().take() {
            let _ = h.join();
        }
        self.kick.0.lock().stop = true;
        self.kick.1.notify_all();
        if let Some(h) = self.discarder.lock().take() {
            let _ = h.join();
        }
    }

    fn upcalls_due(&self) -> bool {
        self.inline.load(Ordering::Acquire)
            && self.tap.pending() >= self.batch.load(Ordering::Relaxed)
    }

    fn dead_limit(&self) -> u64 {
        self.urgent_blocks.load(Ordering::Relaxed)
    }

    /// Every write: when the dead blocks queued for discard reach `urgent_blocks`, issue the
    /// queue now, in this thread, without the op lock (as the discard thread does, one
    /// request under `issuing` at a time), so the device never holds more dead blocks than
    /// its slack; a mount without background threads has no one else to do it before the
    /// next checkpoint, and with them, writers could outrun the discard thread.
    fn space_low(&self, fs: &FsInner) -> Result<()> {
        if fs.seg.discards.count() == 0
            || self.queued_blocks.load(Ordering::Relaxed)
                < self.urgent_blocks.load(Ordering::Relaxed)
            || fs.opts.read_only
        {
            return Ok(());
        }
        self.issue_queue(fs, &fs.stats.device_discards_by_writers)?;
        fs.test_point("discards:issued-by-writer");
        // What is queued now, counted and noted under the queue's lock, as `after_checkpoint`
        // notes its pack's: a checkpoint may have queued more since this thread's last issue
        // (it holds no lock here), and a plain 0 wiped that count, so that no writer issued
        // them and the device filled (`races_new.rs`).
        let queue = fs.seg.discards.lock();
        self.queued_blocks.store(queue.blocks(), Ordering::Relaxed);
        Ok(())
    }

    fn before_checkpoint(&self, fs: &FsInner) -> Result<()> {
        // 1. What the previous pack logged and the discard thread has not issued yet.
        self.finish_discards(fs)?;
        fs.test_point("checkpoint:discarded");
        // 2. The upcalls received so far.
        self.apply_queued(fs)
    }

    fn last_upcall(&self) -> u64 {
        self.state.lock().last
    }

    fn after_checkpoint(
        &self,
        fs: &FsInner,
        in_pack: u64,
        emptied: Vec<u64>,
        umount: bool,
    ) -> Result<Vec<u64>> {
        if umount {
            // The volume is closing: no later checkpoint will finish this pack's discards,
            // acknowledge it or free its sections, so do all three now, in that order.
            self.finish_discards(fs)?;
            let mut s = self.state.lock();
            s.pack_last = in_pack;
            if in_pack > s.acked {
                fs.dev.ack_migrations(in_pack)?;
                s.acked = in_pack;
            }
            let mut all = fs.seg.take_held();
            all.extend(emptied);
            return Ok(all);
        }
        // 1. Acknowledge what the previous pack covers: every discard it logged was issued
        //    (`before_checkpoint`), so no record of its upcalls is still needed to redirect
        //    one. This pack's upcalls stay outstanding until the next checkpoint: the
        //    discards it logged are issued off the lock in between, and each must still be
        //    redirected through the records of the blocks the device moved.
        let mut s = self.state.lock();
        let prev = std::mem::replace(&mut s.pack_last, in_pack);
        if prev > s.acked {
            fs.dev.ack_migrations(prev)?;
            s.acked = prev;
        }
        drop(s);
        // 2. Free the sections emptied before the previous pack: their dead blocks are
        //    discarded and the pairs that moved their live blocks acknowledged, so a
        //    discard of the whole section (now, or when a head claims it) can no longer be
        //    redirected to a live block. A section in which a queued, unapplied upcall has
        //    an old address waits once more: that stale pair must be applied (and skipped)
        //    before the section's addresses are written again.
        let held = fs.seg.take_held();
        let set: std::collections::HashSet<u64> = held.iter().copied().collect();
        let wait = if set.is_empty() {
            Vec::new()
        } else {
            self.queued_pair_in(fs, &set)
        };
        let release: Vec<u64> = held.into_iter().filter(|s| !wait.contains(s)).collect();
        fs.stats
            .device_sections_held_back
            .fetch_add(wait.len() as u64, Ordering::Relaxed);
        fs.seg.hold_sections(wait);
        // 3. Hold this pack's emptied sections for the next checkpoint, and let the discard
        //    thread issue this pack's discards beside the writers (without the thread, the
        //    next checkpoint issues them first).
        fs.seg.hold_sections(emptied);
        // Stored with the queue's lock held (a writer's `space_low` notes under it too).
        let queue = fs.seg.discards.lock();
        self.queued_blocks.store(queue.blocks(), Ordering::Relaxed);
        drop(queue);
        if !self.inline.load(Ordering::Acquire) {
            self.kick.0.lock().pending = true;
            self.kick.1.notify_one();
        }
        Ok(release)
    }
}
