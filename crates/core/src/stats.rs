//! Counters readable through the API (`Fs::stats`). Relaxed atomics: they are statistics,
//! not synchronisation.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Stats {
    pub app_write_bytes: AtomicU64,
    pub app_read_bytes: AtomicU64,
    pub data_blocks_written: AtomicU64,
    pub node_blocks_written: AtomicU64,
    pub dev_read_blocks: AtomicU64,
    pub checkpoints: AtomicU64,
    pub fsyncs: AtomicU64,
    pub fsync_checkpoints: AtomicU64,
    pub roll_forward_nodes: AtomicU64,
    pub gc_fg_runs: AtomicU64,
    pub gc_bg_runs: AtomicU64,
    pub gc_sections_freed: AtomicU64,
    pub gc_moved_blocks: AtomicU64,
    pub upcalls_applied: AtomicU64,
    pub upcalls_skipped: AtomicU64,
    pub upcall_pairs_applied: AtomicU64,
    pub upcall_pairs_skipped: AtomicU64,
    pub upcall_discards_withdrawn: AtomicU64,
    pub gc_skipped_blocks: AtomicU64,
    pub gc_read_blocks: AtomicU64,
    pub gc_dirty_moves: AtomicU64,
    pub gc_ns: AtomicU64,
    pub stall_ns: AtomicU64,
    pub checkpoint_ns: AtomicU64,
    pub discard_log_reissued: AtomicU64,
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
    /// Background cleaning passes (volume idle).
    pub gc_bg_runs: u64,
    /// Sections emptied by cleaning.
    pub gc_sections_freed: u64,
    /// Valid blocks moved by cleaning.
    pub gc_moved_blocks: u64,
    /// gc=device: migration upcalls applied / skipped as already applied, and their pairs
    /// applied / skipped as superseded.
    pub upcalls_applied: u64,
    pub upcalls_skipped: u64,
    pub upcall_pairs_applied: u64,
    pub upcall_pairs_skipped: u64,
    /// gc=device: queued discards of a pair's old address taken back because the host
    /// already points at its new one (roll-forward after a cut; see gc_device.rs).
    pub upcall_discards_withdrawn: u64,
    /// Blocks a collector read but did not move because a newer write or a truncate won
    /// the race (node-lock rule).
    pub gc_skipped_blocks: u64,
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
    /// gc=none (infinite volumes): live blocks (no SIT holds them); 0 elsewhere.
    pub live_blocks: u64,
}

impl Stats {
    pub fn snapshot(&self, dev_write_blocks: u64, ssr_blocks: u64) -> Counters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let app = g(&self.app_write_bytes);
        Counters {
            app_write_bytes: app,
            app_read_bytes: g(&self.app_read_bytes),
            data_blocks_written: g(&self.data_blocks_written),
            node_blocks_written: g(&self.node_blocks_written),
            dev_write_blocks,
            dev_read_blocks: g(&self.dev_read_blocks),
            checkpoints: g(&self.checkpoints),
            fsyncs: g(&self.fsyncs),
            fsync_checkpoints: g(&self.fsync_checkpoints),
            roll_forward_nodes: g(&self.roll_forward_nodes),
            gc_fg_runs: g(&self.gc_fg_runs),
            gc_bg_runs: g(&self.gc_bg_runs),
            gc_sections_freed: g(&self.gc_sections_freed),
            gc_moved_blocks: g(&self.gc_moved_blocks),
            upcalls_applied: g(&self.upcalls_applied),
            upcalls_skipped: g(&self.upcalls_skipped),
            upcall_pairs_applied: g(&self.upcall_pairs_applied),
            upcall_pairs_skipped: g(&self.upcall_pairs_skipped),
            upcall_discards_withdrawn: g(&self.upcall_discards_withdrawn),
            gc_skipped_blocks: g(&self.gc_skipped_blocks),
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
            live_blocks: 0,
            fs_write_amplification: if g(&self.data_blocks_written) == 0 {
                0.0
            } else {
                dev_write_blocks as f64 / g(&self.data_blocks_written) as f64
            },
            write_amplification: if app == 0 {
                0.0
            } else {
                (dev_write_blocks * 4096) as f64 / app as f64
            },
        }
    }
}
