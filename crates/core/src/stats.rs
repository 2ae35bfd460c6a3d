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
    /// Device bytes written / application bytes written.
    pub write_amplification: f64,
}

impl Stats {
    pub fn snapshot(&self, dev_write_blocks: u64) -> Counters {
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
            write_amplification: if app == 0 {
                0.0
            } else {
                (dev_write_blocks * 4096) as f64 / app as f64
            },
        }
    }
}
