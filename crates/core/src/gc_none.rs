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
//!   checkpoints, so that the dead blocks become commands, and issues every queued command
//!   at once (F2FS's urgent discard);
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
//!    checkpoint is seen as one (heads moved past what it wrote, residue discarded).
//!
//! Invariants: no command is issued before the checkpoint that made its blocks dead is
//! durable; every command not yet issued is in the newest durable pack's log.
//!
//! Lock order: `SegManager::dead`, then `SegManager::discards` (leaves; never held while
//! the device is called). The dispatcher takes no file-system lock.

use std::sync::atomic::Ordering;
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
        if q.is_empty() && drained.is_empty() && residue.is_empty() {
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

fn issue_or_requeue(fs: &FsInner, cmds: Vec<DiscardCmd>) -> Result<()> {
    let per = flashlog_dev::MAX_DISCARD_RANGES;
    for (i, chunk) in cmds.chunks(per).enumerate() {
        if let Err(e) = issue(fs, chunk, true) {
            fs.seg.discards.lock().requeue(cmds[i * per..].to_vec());
            return Err(e);
        }
    }
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
    let cmds = discard::decode_log(&ck.discard_log, fs.sb.geo.block_count)?;
    let mut reissue = Vec::new();
    for c in cmds {
        // Split around blocks roll-forward made valid (finite volumes reuse addresses).
        let mut a = c.addr;
        for b in c.addr..c.addr + c.len {
            if !fs.seg.is_infinite() && fs.seg.is_valid(b) {
                if b > a {
                    reissue.push(DiscardCmd {
                        addr: a,
                        len: b - a,
                    });
                }
                a = b + 1;
            }
        }
        if c.addr + c.len > a {
            reissue.push(DiscardCmd {
                addr: a,
                len: c.addr + c.len - a,
            });
        }
    }
    fs.stats
        .discard_log_reissued
        .fetch_add(reissue.iter().map(|c| c.len).sum(), Ordering::Relaxed);
    // The pool never counted these (they were dead at the checkpoint it was built from).
    issue(fs, &reissue, false)
}

/// `none`: no cleaning; the discard dispatcher.
pub struct NoneCollector {
    stop: Arc<(Mutex<bool>, Condvar)>,
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
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            handle: Mutex::new(None),
        }
    }
}

fn dispatcher(weak: Weak<FsInner>, stop: Arc<(Mutex<bool>, Condvar)>) {
    loop {
        {
            let mut s = stop.0.lock();
            if *s {
                return;
            }
            stop.1.wait_for(&mut s, DISPATCH_INTERVAL);
            if *s {
                return;
            }
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

/// Free capacity, in segments, below which the dispatcher checkpoints and issues
/// everything on its own, before writers have to wait for it (F2FS issues discards
/// more aggressively as utilisation rises; here the trigger is the space the writers
/// will ask the space path for soon): twice the space path's target.
fn early_target(fs: &FsInner) -> u64 {
    2 * fs.space_target()
}

/// The dispatcher's turn at making room: when free capacity runs low and dead blocks wait
/// in the map, checkpoint and issue the whole queue (what `foreground` does for a writer
/// that already waits).
fn make_room_early(fs: &FsInner) -> Result<()> {
    if !fs.seg.is_infinite() || fs.seg.free_sections() >= early_target(fs) {
        return Ok(());
    }
    let _gc = fs.gc_lock.lock();
    checkpoint_and_issue(fs).map(|_| ())
}

/// Checkpoint if dead blocks wait (the checkpoint turns them into queued discard commands),
/// then issue the whole queue; returns the blocks issued. The caller holds `gc_lock`.
fn checkpoint_and_issue(fs: &FsInner) -> Result<u64> {
    if fs.seg.dead_pending() > 0 {
        let _g = fs.oplock.checkpoint();
        fs.check_writable()?;
        fs.write_checkpoint(false)?;
    }
    dispatch_all(fs)
}

impl crate::gc::Collector for NoneCollector {
    fn name(&self) -> &'static str {
        "none"
    }

    /// Make room without cleaning: a checkpoint turns the dead blocks into commands, and
    /// every queued command is issued now. Returns the segments' worth of blocks returned.
    fn foreground(&self, fs: &FsInner, _target: u64) -> Result<u64> {
        if !fs.seg.is_infinite() {
            return Ok(0);
        }
        Ok(checkpoint_and_issue(fs)? / BLOCKS_PER_SEG)
    }

    fn background(&self, _: &FsInner) -> Result<u64> {
        Ok(0)
    }

    /// The dispatcher thread; none without `gc_interval` (as `gc=device`'s handler): the
    /// space path then issues the queue, and the crash simulator drives the rounds itself,
    /// so that a case's device requests do not depend on a wall-clock timer.
    fn start(&self, fs: &Arc<FsInner>) {
        if !fs.seg.is_infinite() || fs.opts.read_only || fs.opts.gc_interval.is_none() {
            return;
        }
        *self.stop.0.lock() = false;
        let weak = Arc::downgrade(fs);
        let stop = self.stop.clone();
        let h = std::thread::Builder::new()
            .name("flashlog-discard".into())
            .spawn(move || dispatcher(weak, stop))
            .expect("spawn discard dispatcher");
        *self.handle.lock() = Some(h);
    }

    fn stop(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
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
