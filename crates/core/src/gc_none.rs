//! The `none` policy (IPLFS): no cleaner, only discards; and the discard path every
//! checkpoint with a discard map shares (`gc=none`, `gc=device`).
//!
//! Owns:
//! - the device rules: `gc=none` needs a device whose logical space is infinite
//!   (`Capabilities::infinite_space`, e.g. the emulator's `ftl=interval`), and such a device
//!   carries only infinite volumes (mkfs lays one out: `Geometry::compute_infinite`);
//! - [`NoneCollector`]: the policy's collector. It never moves a block. Its only thread is
//!   the discard dispatcher (every [`DISPATCH_INTERVAL`], at most `discard::DISPATCH_BATCH`
//!   commands, idle or not); when the space path asks it to make room ("foreground") it
//!   issues every queued command at once (F2FS's urgent discard) and, if that is not
//!   enough, checkpoints so that the dead blocks become commands, and issues those too;
//! - the checkpoint's discard steps ([`checkpoint_discards`], [`after_durable`]) and the
//!   mount's re-issue of the discard log ([`after_roll_forward`]).
//!
//! Protocol (docs/DESIGN.md "IPLFS", docs/FORMAT.md "Discard log"):
//! 1. invalidated blocks collect in the discard map (`SegManager::dead`);
//! 2. checkpoint N, before its pack: drain the map into commands; the pack's discard log =
//!    commands still queued from earlier checkpoints + the drained ones (+ on the first
//!    checkpoint after a cut, what the heads skipped, `alloc_none.rs`);
//! 3. once pack N is durable: the drained commands join the queue (the skipped intervals
//!    are issued at once: they hold nothing any checkpoint points at);
//! 4. the dispatcher issues the queue; each issued block returns to the capacity pool;
//! 5. mount, after roll-forward: re-issue the newest pack's log (minus any block
//!    roll-forward made valid: on a finite volume a freed section may have been reused).
//!    A command issued twice is harmless; one lost would leave a dead block mapped.
//!    An infinite volume whose newest checkpoint is a clean unmount's (or mkfs's) then
//!    writes a checkpoint without the clean flag, so that a cut before this mount's next
//!    checkpoint is seen as one (heads moved past what it wrote, residue discarded);
//! 6. a clean unmount issues the queue after its final checkpoint and, if it issued any,
//!    writes one more pack, whose log is empty (`Fs::unmount`): an unmounted volume's
//!    device maps only live blocks.
//!
//! Invariants: no command is issued before the checkpoint that made its blocks dead is
//! durable; every command not yet issued is in the newest durable pack's log.
//!
//! Room without waiting: below twice the space target a writer's `ensure_space` issues the
//! queue itself (`Collector::space_low`) and, with dead blocks in the map, wakes the
//! dispatcher to checkpoint at once (`Control::kick`); the dispatcher checkpoints on its
//! own below `checkpoint_target`.
//!
//! Lock order: `SegManager::dead`, then `SegManager::discards` (leaves; never held while
//! the device is called); the dispatcher's `Control::stop` mutex is a leaf too. The dispatcher
//! takes the gc lock, then the op lock exclusively, only to checkpoint.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use flashlog_dev::Capabilities;
use flashlog_format::cp::{flags, Checkpoint};
use flashlog_format::sb::Geometry;
use flashlog_format::BLOCKS_PER_SEG;
use parking_lot::{Condvar, Mutex};

use crate::config::{GcPolicy, MountOptions};
use crate::discard::{self, DiscardCmd, DISPATCH_INTERVAL};
use crate::error::{Error, Result};
use crate::inner::FsInner;

const FINITE_NONE: &str = "gc=none never cleans, so it needs a device whose logical space is \
     never reused (capability infinite_space, e.g. the emulated SSD with ftl=interval); this \
     device is finite: use gc=f2fs or gc=scale";
const INFINITE_OTHER: &str = "this device offers an infinite logical space (IPLFS): its \
     volumes never reuse an address and have no SIT to clean with; mount it with gc=none";
const VOLUME_MISMATCH: &str = "the volume's layout does not match the device: an infinite \
     (gc=none) volume needs its infinite device, and a finite volume cannot be mounted on an \
     infinite one (run mkfs on this device)";

/// mkfs on `caps`: an infinite device must say how much it really holds.
pub fn check_mkfs(caps: &Capabilities) -> Result<()> {
    if caps.infinite_space && caps.capacity_blocks == 0 {
        return Err(Error::Invalid(
            "the device offers an infinite logical space but no capacity (capacity_blocks 0)",
        ));
    }
    Ok(())
}

/// Mount with `opts` on `caps`: `gc=none` exactly on infinite devices.
pub fn check_mount(caps: &Capabilities, opts: &MountOptions) -> Result<()> {
    match (caps.infinite_space, opts.gc == GcPolicy::None) {
        (false, true) => Err(Error::NotSupported(FINITE_NONE)),
        (true, false) => Err(Error::NotSupported(INFINITE_OTHER)),
        _ => Ok(()),
    }
}

/// Mount, once the superblock is read: the volume's layout matches the device.
pub fn check_volume(caps: &Capabilities, geo: &Geometry) -> Result<()> {
    if caps.infinite_space != geo.infinite {
        return Err(Error::Invalid(VOLUME_MISMATCH));
    }
    Ok(())
}

/// Bytes the discard log of an infinite volume on a device of `capacity` blocks may take:
/// every block the device holds dead at once (at most its capacity), plus the intervals a
/// cut left (split by at most as many adopted blocks).
pub fn infinite_log_bytes_max(capacity: u64) -> u64 {
    discard::log_bytes_max(capacity.saturating_mul(2))
}

/// The same bound for a finite main area of `segments` segments: a bitmap and a range per
/// segment at most.
pub fn finite_log_bytes_max(segments: u64) -> u64 {
    8 + segments.saturating_mul(72 + 16)
}

/// What a checkpoint logs and, once durable, hands on.
#[derive(Default)]
pub struct CheckpointDiscards {
    /// The encoded discard log for the pack.
    pub log: Vec<u8>,
    /// Drained from the map: queued once the pack is durable.
    drained: Vec<DiscardCmd>,
    /// Intervals a cut left: issued once the pack is durable.
    residue: Vec<DiscardCmd>,
}

/// Step 2: drain the discard map and encode the log of everything not yet issued. A log
/// that would not fit the pack area (only a finite volume formatted before the log existed)
/// is left out, with a warning: its discards are still issued after the checkpoint, as
/// before, but a crash in between leaves those blocks mapped.
pub fn checkpoint_discards(fs: &FsInner, pack_room_bytes: u64) -> CheckpointDiscards {
    let drained = match fs.seg.dead.lock().as_mut() {
        Some(m) => m.drain_commands(),
        None => return CheckpointDiscards::default(),
    };
    let residue = fs.seg.inf_take_residue();
    let log = {
        let q = fs.seg.discards.lock();
        // `pending`, not `is_empty`: a batch being issued is still to log.
        if q.pending().next().is_none() && drained.is_empty() && residue.is_empty() {
            Vec::new()
        } else {
            discard::encode_log(q.pending().chain(&drained).chain(&residue))
        }
    };
    let log = if log.len() as u64 > pack_room_bytes {
        tracing::warn!(
            "discard log of {} bytes does not fit the checkpoint pack ({} bytes left); \
             not logged",
            log.len(),
            pack_room_bytes
        );
        Vec::new()
    } else {
        log
    };
    CheckpointDiscards {
        log,
        drained,
        residue,
    }
}

/// Step 3: the pack is durable.
pub fn after_durable(fs: &FsInner, d: CheckpointDiscards) -> Result<()> {
    fs.seg.discards.lock().extend(d.drained);
    issue(fs, &d.residue, false)
}

/// Issue `cmds` now; `credit`: return the blocks to the capacity pool (blocks the pool
/// counted; a cut's residue never was).
fn issue(fs: &FsInner, cmds: &[DiscardCmd], credit: bool) -> Result<()> {
    // Random overwrites leave mostly one-block runs (tens of thousands per checkpoint): one
    // request per run cost 0.3-2.2 s per checkpoint on the emulated SSD (a firmware
    // overhead and a completion each); batched like NVMe DSM, 256 ranges a request.
    for chunk in cmds.chunks(flashlog_dev::MAX_DISCARD_RANGES) {
        let ranges: Vec<(u64, u64)> = chunk.iter().map(|c| (c.addr, c.len)).collect();
        fs.dev.discard_many(&ranges)?;
        let n: u64 = ranges.iter().map(|r| r.1).sum();
        fs.seg.discarded_blocks.fetch_add(n, Ordering::Relaxed);
        if credit {
            fs.seg.inf_credit(n);
        }
    }
    Ok(())
}

/// Step 4, one round: the due batch.
pub fn dispatch_due(fs: &FsInner) -> Result<usize> {
    let batch = fs.seg.discards.lock().due(Instant::now());
    let n = batch.len();
    issue_or_requeue(fs, batch)?;
    Ok(n)
}

/// Everything queued, now (space is short, or `gc=device` after its checkpoint).
pub fn dispatch_all(fs: &FsInner) -> Result<u64> {
    let all = fs.seg.discards.lock().take_all();
    let blocks = all.iter().map(|c| c.len).sum();
    issue_or_requeue(fs, all)?;
    Ok(blocks)
}

/// Up to `max` queued commands from the front, now (`gc=device` issues its queue one
/// request at a time off the op lock). Returns how many were issued.
pub fn dispatch_some(fs: &FsInner, max: usize) -> Result<usize> {
    let cmds = fs.seg.discards.lock().take_front(max);
    let n = cmds.len();
    issue_or_requeue(fs, cmds)?;
    Ok(n)
}

/// Issue a batch taken from the queue, then finish it there (what failed goes back to the
/// queue's front); until then every checkpoint still logs it.
fn issue_or_requeue(fs: &FsInner, batch: discard::Batch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    fs.test_point("discards:taken");
    let per = flashlog_dev::MAX_DISCARD_RANGES;
    for (i, chunk) in batch.chunks(per).enumerate() {
        if let Err(e) = issue(fs, chunk, true) {
            let rest = batch.cmds[i * per..].to_vec();
            fs.seg.discards.lock().finish(batch.id, rest);
            return Err(e);
        }
    }
    fs.seg.discards.lock().finish(batch.id, Vec::new());
    Ok(())
}

/// Step 5, and the head move after a cut: called by mount after roll-forward.
///
/// An infinite volume that was not unmounted cleanly moves every head past what it may have
/// written before the cut, if roll-forward did not already (it moves them only when it
/// recovers something), so that no address is written twice and the recovery checkpoint
/// discards the residue. Then the newest pack's discard log is issued again.
pub fn after_roll_forward(fs: &FsInner, ck: &Checkpoint, recovered: u64) -> Result<()> {
    if fs.opts.read_only {
        return Ok(());
    }
    if fs.seg.is_infinite() && ck.flags & flags::UMOUNT == 0 && recovered == 0 {
        fs.seg.lend_recovery_reserve();
        fs.seg.move_heads_to_fresh()?;
    }
    reissue_log(fs, ck)?;
    if fs.seg.is_infinite() && ck.flags & flags::UMOUNT != 0 {
        // The newest checkpoint is a clean one: the blocks this mount writes before its
        // first checkpoint would lie, after a cut, past heads that claim nothing was
        // written there, and the next mount would neither move the heads nor discard them
        // (nor record what roll-forward adopts among them, so the residue discard would
        // take fsync'd blocks). A checkpoint without the flag, once the old log is
        // re-issued (it logs the commands still queued), makes any later cut a cut.
        fs.write_checkpoint(false)?;
    }
    Ok(())
}

/// Step 5: issue the newest pack's discard log again.
fn reissue_log(fs: &FsInner, ck: &Checkpoint) -> Result<()> {
    if ck.discard_log.is_empty() {
        return Ok(());
    }
    // Split around blocks roll-forward made valid (finite volumes reuse addresses). An
    // infinite volume never does, and its log may name ranges of any length within 2^64:
    // no walk block by block there (a hostile range would hang the mount).
    let reissue = if fs.seg.is_infinite() {
        discard::decode_log(&ck.discard_log, fs.sb.geo.block_count)?
    } else {
        discard::decode_log_except(&ck.discard_log, fs.sb.geo.block_count, |b| {
            fs.seg.is_valid(b)
        })?
    };
    fs.stats
        .discard_log_reissued
        .fetch_add(reissue.iter().map(|c| c.len).sum(), Ordering::Relaxed);
    // The pool never counted these (they were dead at the checkpoint it was built from).
    issue(fs, &reissue, false)
}

/// What the dispatcher is asked to do.
#[derive(Default)]
struct Control {
    /// The mount is stopping; the dispatcher sleeps on `wake` under this lock.
    stop: Mutex<bool>,
    wake: Condvar,
    /// A writer found free capacity below the early target with dead blocks in the map:
    /// checkpoint now rather than at the next 50 ms round. An atomic, so that a writer that
    /// finds a kick pending takes no lock; a writer that sets it then takes `stop`'s lock
    /// to notify, and the dispatcher tests it under that lock before it sleeps, so no kick
    /// is missed.
    kick: AtomicBool,
}

/// `none`: no cleaning; the discard dispatcher.
pub struct NoneCollector {
    ctl: Arc<Control>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Default for NoneCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl NoneCollector {
    pub fn new() -> Self {
        NoneCollector {
            ctl: Arc::new(Control::default()),
            handle: Mutex::new(None),
        }
    }
}

fn dispatcher(weak: Weak<FsInner>, ctl: Arc<Control>) {
    let _role = crate::waits::as_role(crate::waits::Role::Discard);
    loop {
        {
            let mut stop = ctl.stop.lock();
            if *stop {
                return;
            }
            if !ctl.kick.load(Ordering::Acquire) {
                ctl.wake.wait_for(&mut stop, DISPATCH_INTERVAL);
            }
            if *stop {
                return;
            }
            ctl.kick.store(false, Ordering::Release);
        }
        let Some(fs) = weak.upgrade() else { return };
        if fs.poisoned.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = dispatch_due(&fs).and_then(|_| make_room_early(&fs)) {
            tracing::warn!("discard dispatch: {e}");
        }
    }
}

/// Free capacity, in segments, below which queued commands (safe since their checkpoint is
/// durable) are issued at once instead of at the dispatcher's pace (F2FS issues discards
/// more aggressively as utilisation rises; here the trigger is the space the writers will
/// ask the space path for soon): twice the space path's target.
fn early_target(fs: &FsInner) -> u64 {
    early_of(fs.space_target())
}

/// [`early_target`] from the space path's target, for callers that already have it.
fn early_of(target: u64) -> u64 {
    2 * target
}

/// Free capacity, in segments, below which the dispatcher checkpoints on its own so that
/// the dead blocks of the map can be discarded before writers reach the space path's
/// target and wait: the target plus a quarter of what lies between the target and all the
/// capacity a checkpoint could give back now (free + dead in the map), at least the
/// space slack. A checkpoint's cost is mostly fixed (every dirty direct node, the NAT, two
/// flushes), and it returns only what died since the previous one: triggered at twice the
/// target it ran every ~25 segments (88 checkpoints in a 15 s run on a 90 % full 1 GiB
/// device); here each one returns about three quarters of the reclaimable capacity.
fn checkpoint_target(fs: &FsInner) -> u64 {
    checkpoint_target_of(fs, fs.space_target(), fs.seg.dead_pending())
}

/// [`checkpoint_target`] from the space target and the dead blocks in the map, for a
/// caller that already has them (a writer's `space_low` runs on every write: the target
/// reads shared counters, the map count takes the map's lock).
fn checkpoint_target_of(fs: &FsInner, target: u64, dead: u64) -> u64 {
    let free = fs.seg.free_sections();
    let reclaimable = free + dead / BLOCKS_PER_SEG;
    let margin = (reclaimable.saturating_sub(target) / 4).max(fs.space_slack_secs());
    (target + margin).min(early_of(target))
}

/// The dispatcher's turn at making room (every round, and at once when a writer kicks
/// it): when free capacity runs low, issue the whole queue, and if that is not enough and
/// dead blocks wait in the map, checkpoint and issue again (what `foreground` does for a
/// writer that already waits).
fn make_room_early(fs: &FsInner) -> Result<()> {
    let low = || fs.seg.free_sections() < checkpoint_target(fs);
    if !fs.seg.is_infinite() || fs.seg.free_sections() >= early_target(fs) {
        return Ok(());
    }
    let _gc = fs.gc_lock.lock();
    dispatch_all(fs)?;
    if low() {
        checkpoint_and_issue(fs)?;
    }
    Ok(())
}

/// Checkpoint if dead blocks wait (the checkpoint turns them into queued discard commands),
/// then issue the whole queue; returns the blocks issued. The caller holds `gc_lock`.
fn checkpoint_and_issue(fs: &FsInner) -> Result<u64> {
    if fs.seg.dead_pending() > 0 {
        // Operations go on while the pack is written; its discards queue once it lands.
        fs.checkpoint_beside_ops()?;
    }
    dispatch_all(fs)
}

impl crate::gc::Collector for NoneCollector {
    fn name(&self) -> &'static str {
        "none"
    }

    /// Make room without cleaning: every queued command (a durable checkpoint already made
    /// it safe) is issued now; only if that does not reach `target`, a checkpoint turns the
    /// dead blocks of the map into commands, issued at once too. Returns the segments'
    /// worth of blocks returned.
    fn foreground(&self, fs: &FsInner, target: u64) -> Result<u64> {
        if !fs.seg.is_infinite() {
            return Ok(0);
        }
        let mut blocks = dispatch_all(fs)?;
        if blocks == 0 || fs.seg.free_sections() < target {
            blocks += checkpoint_and_issue(fs)?;
        }
        Ok(blocks / BLOCKS_PER_SEG)
    }

    /// Before a writer could wait for space: below the early target, issue the commands a
    /// durable checkpoint already made safe (the dispatcher would take 50 ms rounds of 16
    /// for what random overwrites leave, tens of thousands of one-block runs), and if dead
    /// blocks wait in the map and free capacity is below `checkpoint_target`, wake the
    /// dispatcher to checkpoint them now, so that the room is there before writers reach the
    /// target and wait in `foreground`.
    fn space_low(&self, fs: &FsInner) -> Result<()> {
        if !fs.seg.is_infinite() || fs.opts.read_only {
            return Ok(());
        }
        // The target once (it was computed three times a write: here, for the early
        // target and for the checkpoint target), and first from the dirty counts' upper
        // bounds: the exact target sums 64 shard lines, on every operation (`ensure_space`).
        let free = fs.seg.free_sections();
        if free >= early_of(fs.space_target_bound()) {
            return Ok(());
        }
        // Near the target (a volume near full always is), every write gets here: what it
        // reads is a memo of the target and counts mirrored in atomics, and it takes a
        // lock only to issue commands or to kick the dispatcher (16 writers on 16 cores
        // spent a third of their samples in these checks: docs/BENCHMARKS.md).
        let target = fs.space_target_recent(free);
        if free >= early_of(target) {
            return Ok(());
        }
        if fs.seg.discards.count() > 0 {
            dispatch_all(fs)?;
        }
        let dead = fs.seg.dead_pending();
        let ctl = &self.ctl;
        if dead > 0
            && !ctl.kick.load(Ordering::Relaxed)
            && fs.seg.free_sections() < checkpoint_target_of(fs, target, dead)
            && !ctl.kick.swap(true, Ordering::AcqRel)
        {
            let _stop = ctl.stop.lock();
            ctl.wake.notify_all();
        }
        Ok(())
    }

    fn background(&self, _: &FsInner) -> Result<Option<u64>> {
        Ok(None)
    }

    /// The dispatcher thread; none without `gc_interval` (as `gc=device`'s handler): the
    /// space path then issues the queue, and the crash simulator drives the rounds itself,
    /// so that a case's device requests do not depend on a wall-clock timer.
    fn start(&self, fs: &Arc<FsInner>) {
        if !fs.seg.is_infinite() || fs.opts.read_only || fs.opts.gc_interval.is_none() {
            return;
        }
        *self.ctl.stop.lock() = false;
        self.ctl.kick.store(false, Ordering::Relaxed);
        let weak = Arc::downgrade(fs);
        let ctl = self.ctl.clone();
        let h = std::thread::Builder::new()
            .name("flashlog-discard".into())
            .spawn(move || dispatcher(weak, ctl))
            .expect("spawn discard dispatcher");
        *self.handle.lock() = Some(h);
    }

    fn stop(&self) {
        *self.ctl.stop.lock() = true;
        self.ctl.wake.notify_all();
        if let Some(h) = self.handle.lock().take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_exactly_on_infinite_devices() {
        let finite = Capabilities::plain("ram", 1 << 20);
        let mut infinite = finite.clone();
        infinite.infinite_space = true;
        infinite.block_count = u64::MAX;
        let none = MountOptions {
            gc: GcPolicy::None,
            ..MountOptions::default()
        };
        let err = check_mount(&finite, &none).unwrap_err().to_string();
        assert!(err.contains("infinite_space"), "{err}");
        let err = check_mount(&infinite, &MountOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("gc=none"), "{err}");
        assert!(check_mount(&finite, &MountOptions::default()).is_ok());
        assert!(check_mount(&infinite, &none).is_ok());
        assert!(check_mkfs(&finite).is_ok() && check_mkfs(&infinite).is_ok());
        infinite.capacity_blocks = 0;
        assert!(check_mkfs(&infinite).is_err());
    }
}
