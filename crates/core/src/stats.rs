//! Counters readable through the API (`Fs::stats`), and `Counter`, the sharded approximate
//! counter (Max's per-core counters) for the ones every operation bumps. Relaxed atomics:
//! they are statistics and soft limits, not synchronisation.
//!
//! Invariant of `Counter`: `global + sum(shards)` is the exact value once no add is in
//! flight; `approx()` (the global part alone) is within `SHARDS x batch` of it. No locks.
//!
//! `SlotCache` is the same sharding for a bounded resource (the space budget's headroom,
//! the user blocks): units taken out of a global count in batches and handed out from the
//! caller's slot. Invariant: every shard holds `0..=cap` units, each counted out of the
//! global count exactly once; the owner decides when the shards may be used and drains
//! them all before it refuses anyone. Units on their way between a shard and the global
//! count (a refill: taken out of the global count, not yet in the shard; a drain or an
//! overflow: out of the shard, not yet added back) are in neither, so the shard is
//! *marked* for as long as a move is in flight: set before the refill's take, or in the
//! same update that empties the shard, and cleared only after the units arrived. A drain
//! reports the marks it saw, so that the owner refuses no one while units are moving.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Shards of a `Counter` (thread slots map onto them modulo this).
pub const COUNTER_SHARDS: usize = 32;
/// A shard folds into the global value when its delta reaches this many units.
pub const COUNTER_BATCH: i64 = 64;
/// The batch of a counter of bytes (`Counter<BYTE_BATCH>`): with the default batch of 64
/// units, every 4 KiB write folded its bytes into the global value: one shared
/// read-modify-write per operation, the only one of `file_write` on an overwrite, which
/// was 20 % of fxmark's samples on 16 cores.
pub const BYTE_BATCH: i64 = 1 << 20;

/// A counter bumped on every operation, sharded per thread slot (Linux percpu_counter,
/// Max's per-core counters): an add touches the caller's own cache line, and only every
/// `COUNTER_BATCH` units the shared one. One global `AtomicU64` bumped by 16 cores moves
/// its cache line on every add, which is a lock in all but name.
pub struct Counter<const BATCH: i64 = COUNTER_BATCH> {
    global: CachePadded<AtomicI64>,
    shards: Box<[CachePadded<AtomicI64>]>,
    /// A shard folds into `global` at this many units: `BATCH`, or less for a counter
    /// compared with a limit smaller than its slack (`fit_to`).
    batch: i64,
}

impl<const BATCH: i64> Default for Counter<BATCH> {
    fn default() -> Self {
        Counter {
            global: CachePadded::new(AtomicI64::new(0)),
            shards: (0..COUNTER_SHARDS)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            batch: BATCH,
        }
    }
}

impl<const BATCH: i64> Counter<BATCH> {
    /// Fold shards early enough that `approx` is within half of `limit` of the value, for
    /// a counter checked against a limit below `COUNTER_SHARDS x BATCH` (a small cap of a
    /// test or of a small volume: with the full batch, `approx` would never see it crossed,
    /// and summing the shards on every operation reads 32 cache lines other cores write).
    pub fn fit_to(&mut self, limit: u64) {
        self.batch = (limit / (2 * COUNTER_SHARDS as u64)).clamp(1, BATCH as u64) as i64;
    }
    fn add(&self, n: i64) {
        let shard = &self.shards[crate::lock::thread_slot() % COUNTER_SHARDS];
        let v = shard.fetch_add(n, Ordering::Relaxed) + n;
        if !(-self.batch..self.batch).contains(&v) {
            let v = shard.swap(0, Ordering::Relaxed);
            self.global.fetch_add(v, Ordering::Relaxed);
        }
    }
    /// Add `n` (the ordering argument keeps the `AtomicU64` call sites; adds are relaxed).
    pub fn fetch_add(&self, n: u64, _: Ordering) {
        self.add(n as i64);
    }
    pub fn fetch_sub(&self, n: u64, _: Ordering) {
        self.add(-(n as i64));
    }
    /// The exact value (sums every shard: for reports, checkpoints, tests).
    pub fn load(&self, _: Ordering) -> u64 {
        let v = self.global.load(Ordering::Relaxed)
            + self
                .shards
                .iter()
                .map(|s| s.load(Ordering::Relaxed))
                .sum::<i64>();
        v.max(0) as u64
    }
    /// The value within `COUNTER_SHARDS x batch` (one load: for soft limits
    /// checked on every operation).
    pub fn approx(&self) -> u64 {
        self.global.load(Ordering::Relaxed).max(0) as u64
    }
    /// A bound the exact value is below (one load: each shard holds less than a batch).
    pub fn upper(&self) -> u64 {
        (self.global.load(Ordering::Relaxed) + COUNTER_SHARDS as i64 * self.batch).max(0) as u64
    }
    /// Set the value; only while nothing adds (mount, the checkpoint).
    pub fn store(&self, v: u64, _: Ordering) {
        for s in self.shards.iter() {
            s.store(0, Ordering::Relaxed);
        }
        self.global.store(v as i64, Ordering::Relaxed);
    }
}

/// Per-slot caches of units of a bounded resource (see the module comment). The owner
/// keeps the global count; this holds what its slots have taken out of it.
pub struct SlotCache {
    /// Units in the low 32 bits, moves in flight (`SLOT_MOVE` each) above them.
    shards: Box<[CachePadded<AtomicI64>]>,
    cap: i64,
}

/// One move in flight, in a `SlotCache` shard (module comment).
const SLOT_MOVE: i64 = 1 << 32;
/// The units of a `SlotCache` shard.
const SLOT_UNITS: i64 = SLOT_MOVE - 1;

impl SlotCache {
    /// Caches of at most `cap` units per slot.
    pub fn new(cap: u64) -> Self {
        assert!(cap < SLOT_MOVE as u64 / 2);
        SlotCache {
            shards: (0..COUNTER_SHARDS)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
            cap: cap as i64,
        }
    }

    /// Units all the caches together may hold at most.
    pub fn max_total(&self) -> u64 {
        (self.cap as u64) * COUNTER_SHARDS as u64
    }

    pub fn cap(&self) -> u64 {
        self.cap as u64
    }

    fn mine(&self) -> &AtomicI64 {
        &self.shards[crate::lock::thread_slot() % COUNTER_SHARDS]
    }

    /// Take `n` units from this thread's slot if it holds that many.
    pub fn take(&self, n: u64) -> bool {
        let n = n as i64;
        self.mine()
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |cur| {
                (cur & SLOT_UNITS >= n).then_some(cur - n)
            })
            .is_ok()
    }

    /// Put `n` units into this thread's slot. What does not fit (the slot keeps at most
    /// its cap; past it, it keeps half) goes to `back`, which gives it to the global count;
    /// the slot stays marked until `back` returns.
    pub fn put(&self, n: u64, back: impl FnOnce(u64)) {
        self.put_ending(n, 0, back)
    }

    /// `put`, clearing `unmark` (0 or `SLOT_MOVE`: a refill's mark) in the same update.
    fn put_ending(&self, n: u64, unmark: i64, back: impl FnOnce(u64)) {
        let (n, cap) = (n as i64, self.cap);
        let keep = |units: i64| if units + n <= cap { units + n } else { cap / 2 };
        let slot = self.mine();
        let cur = slot
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                let units = cur & SLOT_UNITS;
                let over = units + n - keep(units);
                let mark = if over > 0 { SLOT_MOVE } else { 0 };
                Some((cur & !SLOT_UNITS) - unmark + mark + keep(units))
            })
            .expect("always Some");
        let units = cur & SLOT_UNITS;
        let over = units + n - keep(units);
        if over > 0 {
            back(over as u64);
            slot.fetch_sub(SLOT_MOVE, Ordering::AcqRel);
        }
    }

    /// Refill this thread's slot with `n` units if `take()` (taking them, and whatever the
    /// caller uses at once, out of the global count) succeeds; the slot is marked from
    /// before `take` until they are in it. What does not fit goes to `back` as in `put`.
    pub fn refill(&self, n: u64, take: impl FnOnce() -> bool, back: impl FnOnce(u64)) -> bool {
        let slot = self.mine();
        slot.fetch_add(SLOT_MOVE, Ordering::AcqRel);
        if !take() {
            slot.fetch_sub(SLOT_MOVE, Ordering::AcqRel);
            return false;
        }
        self.put_ending(n, SLOT_MOVE, back);
        true
    }

    /// Take every unit out of `slot`, marking it if there were any (the caller moves them
    /// and unmarks it). Returns the units and whether another move had it marked.
    fn take_all(slot: &AtomicI64) -> (i64, bool) {
        let mut cur = slot.load(Ordering::Acquire);
        while cur & SLOT_UNITS != 0 {
            match slot.compare_exchange_weak(
                cur,
                (cur & !SLOT_UNITS) + SLOT_MOVE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        (cur & SLOT_UNITS, cur >= SLOT_MOVE)
    }

    /// Empty this thread's slot into `back` (marked until it returns); returns what it held.
    pub fn drain_mine(&self, back: impl FnOnce(u64)) -> u64 {
        let slot = self.mine();
        let (units, _) = Self::take_all(slot);
        if units > 0 {
            back(units as u64);
            slot.fetch_sub(SLOT_MOVE, Ordering::AcqRel);
        }
        units as u64
    }

    /// Empty every slot into `back` (one call with the sum; every emptied slot stays marked
    /// until it returns). Returns the units moved and whether a slot was marked by another
    /// move (a refill, drain or overflow in flight: its units are in neither place yet).
    pub fn drain_all(&self, back: impl FnOnce(u64)) -> (u64, bool) {
        let (mut sum, mut busy, mut emptied) = (0, false, 0u64);
        for (i, s) in self.shards.iter().enumerate() {
            let (units, marked) = Self::take_all(s);
            busy |= marked;
            if units > 0 {
                sum += units;
                emptied |= 1 << i;
            }
        }
        if sum > 0 {
            back(sum as u64);
            for (i, s) in self.shards.iter().enumerate() {
                if emptied & (1 << i) != 0 {
                    s.fetch_sub(SLOT_MOVE, Ordering::AcqRel);
                }
            }
        }
        (sum as u64, busy)
    }

    /// Units held by all slots now.
    pub fn total(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.load(Ordering::Acquire) & SLOT_UNITS)
            .sum::<i64>() as u64
    }
}

#[derive(Default)]
pub struct Stats {
    pub app_write_bytes: Counter<BYTE_BATCH>,
    pub app_read_bytes: Counter<BYTE_BATCH>,
    pub data_blocks_written: Counter,
    pub node_blocks_written: Counter,
    pub dev_read_blocks: Counter,
    pub checkpoints: AtomicU64,
    pub fsyncs: Counter,
    pub fsync_checkpoints: AtomicU64,
    pub roll_forward_nodes: AtomicU64,
    pub gc_fg_runs: AtomicU64,
    pub gc_bg_runs: AtomicU64,
    pub gc_sections_freed: AtomicU64,
    pub gc_moved_blocks: AtomicU64,
    pub upcalls_applied: AtomicU64,
    pub upcalls_skipped: AtomicU64,
    pub upcall_resends: AtomicU64,
    pub upcalls_deferred: AtomicU64,
    pub upcall_pairs_applied: AtomicU64,
    pub upcall_pairs_skipped: AtomicU64,
    pub upcall_discards_withdrawn: AtomicU64,
    pub device_discards_off_lock: AtomicU64,
    pub device_discards_in_checkpoint: AtomicU64,
    pub device_discards_by_writers: AtomicU64,
    pub device_sections_held_back: AtomicU64,
    pub cp_apply_ns: AtomicU64,
    pub cp_writeback_ns: AtomicU64,
    pub cp_meta_ns: AtomicU64,
    pub cp_after_pack_ns: AtomicU64,
    pub cp_tail_ns: AtomicU64,
    pub cp_tails_beside: AtomicU64,
    pub cp_prewrite_ns: AtomicU64,
    pub cp_prewrite_nodes: AtomicU64,
    pub cp_helped_nodes: AtomicU64,
    pub cap_reliefs: AtomicU64,
    pub gc_skipped_blocks: AtomicU64,
    pub gc_lost_copies: AtomicU64,
    pub flush_orphaned_copies: AtomicU64,
    pub gc_reservation_returned: AtomicU64,
    pub gc_read_blocks: AtomicU64,
    pub gc_dirty_moves: AtomicU64,
    pub gc_ns: AtomicU64,
    pub stall_ns: AtomicU64,
    pub checkpoint_ns: AtomicU64,
    pub discard_log_reissued: AtomicU64,
    pub residue_discarded: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub app_write_bytes: u64,
    pub app_read_bytes: u64,
    pub data_blocks_written: u64,
    pub node_blocks_written: u64,
    /// Every block the file system wrote to the device (data, nodes, metadata, checkpoints).
    pub dev_write_blocks: u64,
    pub dev_read_blocks: u64,
    pub checkpoints: u64,
    pub fsyncs: u64,
    pub fsync_checkpoints: u64,
    pub roll_forward_nodes: u64,
    /// Foreground cleaning calls (space ran short).
    pub gc_fg_runs: u64,
    /// Background cleaning passes that found a victim (volume idle).
    pub gc_bg_runs: u64,
    /// Sections emptied by cleaning.
    pub gc_sections_freed: u64,
    /// Valid blocks moved by cleaning.
    pub gc_moved_blocks: u64,
    /// gc=device: migration upcalls applied / skipped as already applied, and their pairs
    /// applied / skipped as superseded.
    pub upcalls_applied: u64,
    pub upcalls_skipped: u64,
    /// gc=device: re-sends asked of the device because the ids of the queued upcalls had a
    /// hole (completions returned out of id order, gc_device.rs `ordered_upcalls`).
    pub upcall_resends: u64,
    /// gc=device: upcalls put back in the tap because a re-send had not filled the hole
    /// before them yet (applied in a later round, in id order).
    pub upcalls_deferred: u64,
    pub upcall_pairs_applied: u64,
    pub upcall_pairs_skipped: u64,
    /// gc=device: queued discards of a pair's old address taken back because the host
    /// already points at its new one (roll-forward after a cut; see gc_device.rs).
    pub upcall_discards_withdrawn: u64,
    /// gc=device: discard requests (up to 256 ranges each) of dead blocks issued by the
    /// discard thread beside the writers, and by a checkpoint that found some still queued
    /// (it must issue them before it acknowledges and frees: gc_device.rs).
    pub device_discards_off_lock: u64,
    pub device_discards_in_checkpoint: u64,
    /// gc=device: such requests a writer issued because the queue's dead blocks reached
    /// half the device's slack (`gc_device::urgent_discard_blocks`).
    pub device_discards_by_writers: u64,
    /// gc=device: times a held section waited one more checkpoint because a queued,
    /// unapplied upcall had a pair whose old address lies in it.
    pub device_sections_held_back: u64,
    /// Time in the phases of checkpoints, seconds: before the writeback (gc=device: the
    /// discards still queued, the upcall applies), data and node writeback, metadata and
    /// the pack (NAT, SIT, SSA, flushes), after the pack is durable (discards, gc=device's
    /// acknowledgement, freeing sections).
    pub cp_apply_s: f64,
    pub cp_writeback_s: f64,
    pub cp_meta_s: f64,
    pub cp_after_pack_s: f64,
    /// Seconds checkpoints' tails took (the log writes before the snapshot, NAT, pack,
    /// after the pack). Also in `checkpoint_time_s`, except for a tail that ran beside
    /// operations (`gc=none`'s room-making checkpoints, `MountOptions::cp_tail`).
    pub cp_tail_s: f64,
    /// Checkpoints whose tail ran beside operations.
    pub cp_tails_beside: u64,
    /// Seconds of writeback before checkpoints took the op lock exclusively
    /// (`writeback_before_checkpoint`; writers go on meanwhile, not in `checkpoint_time_s`).
    pub cp_prewrite_s: f64,
    /// Nodes the pre-pass of cap reliefs wrote (`writeback_nodes_for_caps`).
    pub cp_prewrite_nodes: u64,
    /// Of those, the nodes operations wrote while helping a running pre-pass
    /// (`help_prepass`).
    pub cp_helped_nodes: u64,
    /// Times the dirty-node or inode-cache cap was relieved by writing nodes back and
    /// evicting clean cells, without a checkpoint (`Fs::relieve_caps`).
    pub cap_reliefs: u64,
    /// Blocks a collector read but did not move because a newer write or a truncate won
    /// the race (node-lock rule).
    pub gc_skipped_blocks: u64,
    /// `scale`: copies a collector wrote outside the file cell whose slot had changed by
    /// the time it came to map them (the node-lock rule's check at the remap; the copy was
    /// invalidated, and the block is also counted in `gc_skipped_blocks`).
    pub gc_lost_copies: u64,
    /// Copies a write-back visit (the flusher's, a pre-pass's) wrote with the file's cell
    /// released whose page had been written, dropped or changed by the time it came to map
    /// them (`FsInner::writeback_pages_released`): invalidated, never mapped.
    pub flush_orphaned_copies: u64,
    /// `scale`: blocks of victim reservations a collector gave back before the end of its
    /// victim, once each segment's runs showed what its moves can need.
    pub gc_reservation_returned: u64,
    pub gc_read_blocks: u64,
    /// Moves that wrote a dirty page's newer bytes instead of the victim's copy (the move
    /// was also the page's writeback).
    pub gc_dirty_moves: u64,
    /// Seconds spent cleaning.
    pub gc_time_s: f64,
    /// Seconds application threads waited for space (foreground cleaning + checkpoints).
    pub stall_time_s: f64,
    /// Seconds spent writing checkpoints (everything else waits on the op lock meanwhile).
    pub checkpoint_time_s: f64,
    /// Blocks written by threaded logging into holes (SSR).
    pub ssr_blocks: u64,
    /// Space budget (`space.rs`): blocks charged beyond every reservation while the
    /// headroom was below zero. Nonzero means a checkpoint could have run out of space.
    pub space_overcommit_blocks: u64,
    /// Space budget: reservations refused (an operation cleaned first, or a collector
    /// stopped taking victims).
    pub space_refusals: u64,
    /// Device bytes written / application bytes written (page-cache absorption of repeated
    /// overwrites can make this < 1).
    pub write_amplification: f64,
    /// Device blocks written / data blocks written back for applications: the file
    /// system's own amplification (cleaning, nodes, metadata, checkpoints).
    pub fs_write_amplification: f64,
    /// Blocks discarded by the file system (freed sections, dead blocks of gc=none and
    /// gc=device).
    pub discarded_blocks: u64,
    /// Discard commands a durable checkpoint logged that wait for dispatch (gc=none).
    pub discards_queued: u64,
    /// Blocks mount issued again from the newest checkpoint's discard log.
    pub discard_log_reissued_blocks: u64,
    /// gc=device: blocks of the host's region that mount discarded after a power cut (every
    /// block the volume does not reference, the residue of unrecovered writes among them).
    pub residue_discarded_blocks: u64,
    /// gc=none (infinite volumes): live blocks (no SIT holds them); 0 elsewhere.
    pub live_blocks: u64,
}

impl Stats {
    pub fn snapshot(&self, dev_write_blocks: u64, ssr_blocks: u64) -> Counters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = |a: &Counter| a.load(Ordering::Relaxed);
        let app = self.app_write_bytes.load(Ordering::Relaxed);
        let data_blocks = c(&self.data_blocks_written);
        Counters {
            app_write_bytes: app,
            app_read_bytes: self.app_read_bytes.load(Ordering::Relaxed),
            data_blocks_written: data_blocks,
            node_blocks_written: c(&self.node_blocks_written),
            dev_write_blocks,
            dev_read_blocks: c(&self.dev_read_blocks),
            checkpoints: g(&self.checkpoints),
            fsyncs: c(&self.fsyncs),
            fsync_checkpoints: g(&self.fsync_checkpoints),
            roll_forward_nodes: g(&self.roll_forward_nodes),
            gc_fg_runs: g(&self.gc_fg_runs),
            gc_bg_runs: g(&self.gc_bg_runs),
            gc_sections_freed: g(&self.gc_sections_freed),
            gc_moved_blocks: g(&self.gc_moved_blocks),
            upcalls_applied: g(&self.upcalls_applied),
            upcalls_skipped: g(&self.upcalls_skipped),
            upcall_resends: g(&self.upcall_resends),
            upcalls_deferred: g(&self.upcalls_deferred),
            upcall_pairs_applied: g(&self.upcall_pairs_applied),
            upcall_pairs_skipped: g(&self.upcall_pairs_skipped),
            upcall_discards_withdrawn: g(&self.upcall_discards_withdrawn),
            device_discards_off_lock: g(&self.device_discards_off_lock),
            device_discards_in_checkpoint: g(&self.device_discards_in_checkpoint),
            device_discards_by_writers: g(&self.device_discards_by_writers),
            device_sections_held_back: g(&self.device_sections_held_back),
            cp_apply_s: g(&self.cp_apply_ns) as f64 / 1e9,
            cp_writeback_s: g(&self.cp_writeback_ns) as f64 / 1e9,
            cp_meta_s: g(&self.cp_meta_ns) as f64 / 1e9,
            cp_after_pack_s: g(&self.cp_after_pack_ns) as f64 / 1e9,
            cp_tail_s: g(&self.cp_tail_ns) as f64 / 1e9,
            cp_tails_beside: g(&self.cp_tails_beside),
            cp_prewrite_s: g(&self.cp_prewrite_ns) as f64 / 1e9,
            cp_prewrite_nodes: g(&self.cp_prewrite_nodes),
            cp_helped_nodes: g(&self.cp_helped_nodes),
            cap_reliefs: g(&self.cap_reliefs),
            gc_skipped_blocks: g(&self.gc_skipped_blocks),
            gc_lost_copies: g(&self.gc_lost_copies),
            flush_orphaned_copies: g(&self.flush_orphaned_copies),
            gc_reservation_returned: g(&self.gc_reservation_returned),
            gc_read_blocks: g(&self.gc_read_blocks),
            gc_dirty_moves: g(&self.gc_dirty_moves),
            gc_time_s: g(&self.gc_ns) as f64 / 1e9,
            stall_time_s: g(&self.stall_ns) as f64 / 1e9,
            checkpoint_time_s: g(&self.checkpoint_ns) as f64 / 1e9,
            ssr_blocks,
            space_overcommit_blocks: 0,
            space_refusals: 0,
            discarded_blocks: 0,
            discards_queued: 0,
            discard_log_reissued_blocks: g(&self.discard_log_reissued),
            residue_discarded_blocks: g(&self.residue_discarded),
            live_blocks: 0,
            fs_write_amplification: if data_blocks == 0 {
                0.0
            } else {
                dev_write_blocks as f64 / data_blocks as f64
            },
            write_amplification: if app == 0 {
                0.0
            } else {
                (dev_write_blocks * 4096) as f64 / app as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Adds and subtracts from many threads: the exact value is right once they are
    /// done, and the one-load approximation is never further off than the shards can hold.
    #[test]
    fn sharded_counter_is_exact_when_quiet_and_close_always() {
        let c: Arc<Counter> = Arc::new(Counter::default());
        let hs: Vec<_> = (0..8u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        c.fetch_add(1 + (i + t) % 3, Ordering::Relaxed);
                        if i % 2 == 0 {
                            c.fetch_sub(1, Ordering::Relaxed);
                        }
                        let (a, e) = (c.approx() as i64, c.load(Ordering::Relaxed) as i64);
                        assert!(a >= 0 && e >= 0);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let want: u64 = (0..8u64)
            .map(|t| (0..10_000u64).map(|i| 1 + (i + t) % 3).sum::<u64>() - 5_000)
            .sum();
        assert_eq!(c.load(Ordering::Relaxed), want);
        let err = want as i64 - c.approx() as i64;
        assert!(
            err.abs() < COUNTER_SHARDS as i64 * COUNTER_BATCH,
            "approximation off by {err}"
        );
        c.store(5, Ordering::Relaxed);
        assert_eq!((c.load(Ordering::Relaxed), c.approx()), (5, 5));
    }

    /// A counter fitted to a small limit folds early enough for `approx` to see the limit
    /// crossed (the inode cache of 8 cells a test mounts with): with the full batch, one
    /// thread's 9 adds stay in its shard and `approx` reads 0.
    #[test]
    fn a_counter_fitted_to_a_small_limit_sees_it_crossed() {
        let mut c: Counter = Counter::default();
        c.fit_to(8);
        for _ in 0..9 {
            c.fetch_add(1, Ordering::Relaxed);
        }
        assert!(c.approx() > 8, "approx {}", c.approx());
        let mut big: Counter = Counter::default();
        big.fit_to(1 << 20);
        assert_eq!(
            big.batch, COUNTER_BATCH,
            "a large limit keeps the full batch"
        );
    }

    /// A counter of bytes folds into its shared value once per `BYTE_BATCH` bytes, not on
    /// every 4 KiB add (which exceeds the default batch of 64 units at once).
    #[test]
    fn a_byte_counter_keeps_page_sized_adds_in_its_shard() {
        let c: Counter<BYTE_BATCH> = Counter::default();
        for _ in 0..100 {
            c.fetch_add(4096, Ordering::Relaxed);
        }
        assert_eq!(c.approx(), 0, "an add reached the shared value");
        assert_eq!(c.load(Ordering::Relaxed), 409_600);
        for _ in 0..200 {
            c.fetch_add(4096, Ordering::Relaxed);
        }
        assert!(c.approx() >= BYTE_BATCH as u64);
        assert_eq!(c.load(Ordering::Relaxed), 300 * 4096);
    }
}
