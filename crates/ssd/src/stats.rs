//! Statistics: latency histograms per operation, bandwidth over time, and the snapshot type
//! [`SsdStats`] that combines them with the engine's counters and busy times.
//!
//! Owns: the [`Recorder`] (histograms and the bandwidth series), kept apart from the engine so
//! the engine lock is not held while recording.
//!
//! Invariants: the bandwidth series never has more than [`MAX_BW_BINS`] bins (bins double in
//! width and merge pairwise when it would); latencies are recorded in nanoseconds, clamped to
//! the histogram range.
//!
//! Lock order: the device takes a recorder shard lock only after releasing the engine lock,
//! one shard at a time.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::engine::Counters;
use crate::timing::BusyStats;

/// Bins of the bandwidth series before they merge (keeps plots and JSON small).
pub const MAX_BW_BINS: usize = 2048;
/// Largest latency the histograms hold: one hour.
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// Kind of host operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Discard,
    Flush,
}

impl OpKind {
    pub const ALL: [OpKind; 4] = [OpKind::Read, OpKind::Write, OpKind::Discard, OpKind::Flush];
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Discard => "discard",
            OpKind::Flush => "flush",
        }
    }
}

fn new_hist() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts; a failure here is a programming error
    // caught by every test that builds a device.
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Latency summary of one operation kind, in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

fn summarize(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        count: h.len(),
        mean_us: h.mean() / 1e3,
        p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
        p999_us: h.value_at_quantile(0.999) as f64 / 1e3,
        max_us: h.max() as f64 / 1e3,
    }
}

/// Bytes completed per time bin.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BandwidthSeries {
    /// Device time of the first bin's start.
    pub start_ns: u64,
    pub bin_ns: u64,
    pub read_bytes: Vec<u64>,
    pub write_bytes: Vec<u64>,
}

impl BandwidthSeries {
    fn record(&mut self, done_ns: u64, bytes: u64, write: bool) {
        let mut idx = (done_ns.saturating_sub(self.start_ns) / self.bin_ns) as usize;
        while idx >= MAX_BW_BINS {
            self.merge_pairs();
            idx = (done_ns.saturating_sub(self.start_ns) / self.bin_ns) as usize;
        }
        if idx >= self.read_bytes.len() {
            self.read_bytes.resize(idx + 1, 0);
            self.write_bytes.resize(idx + 1, 0);
        }
        if write {
            self.write_bytes[idx] += bytes;
        } else {
            self.read_bytes[idx] += bytes;
        }
    }

    /// Add `o`'s bytes (a series with the same start; bins widen to the coarser of the two).
    fn merge(&mut self, o: &BandwidthSeries) {
        let mut o = o.clone();
        while self.bin_ns < o.bin_ns {
            self.merge_pairs();
        }
        while o.bin_ns < self.bin_ns {
            o.merge_pairs();
        }
        let n = self.read_bytes.len().max(o.read_bytes.len());
        self.read_bytes.resize(n, 0);
        self.write_bytes.resize(n, 0);
        for (i, (r, w)) in o.read_bytes.iter().zip(&o.write_bytes).enumerate() {
            self.read_bytes[i] += r;
            self.write_bytes[i] += w;
        }
    }

    fn merge_pairs(&mut self) {
        let merge = |v: &mut Vec<u64>| {
            let m: Vec<u64> = v.chunks(2).map(|c| c.iter().sum()).collect();
            *v = m;
        };
        merge(&mut self.read_bytes);
        merge(&mut self.write_bytes);
        self.bin_ns *= 2;
    }

    /// (time in seconds from start, read MiB/s, write MiB/s) per bin.
    pub fn points(&self) -> Vec<(f64, f64, f64)> {
        let secs = self.bin_ns as f64 / 1e9;
        let mib = (1u64 << 20) as f64;
        self.read_bytes
            .iter()
            .zip(&self.write_bytes)
            .enumerate()
            .map(|(i, (r, w))| {
                (
                    i as f64 * secs,
                    *r as f64 / mib / secs,
                    *w as f64 / mib / secs,
                )
            })
            .collect()
    }
}

/// Histograms and bandwidth series.
#[derive(Clone)]
pub struct Recorder {
    hist: [Histogram<u64>; 4],
    /// Wall clock only: achieved minus modelled completion time.
    late: Histogram<u64>,
    bw: BandwidthSeries,
    initial_bin_ns: u64,
}

impl Recorder {
    pub fn new(bin_ns: u64, start_ns: u64) -> Self {
        Recorder {
            hist: [new_hist(), new_hist(), new_hist(), new_hist()],
            late: new_hist(),
            bw: BandwidthSeries {
                start_ns,
                bin_ns,
                ..Default::default()
            },
            initial_bin_ns: bin_ns,
        }
    }

    pub fn reset(&mut self, start_ns: u64) {
        *self = Recorder::new(self.initial_bin_ns, start_ns);
    }

    /// One completed request: its latency, and its bytes at its completion time.
    pub fn record(&mut self, kind: OpKind, latency_ns: u64, done_ns: u64, bytes: u64) {
        let idx = kind as usize;
        self.hist[idx].saturating_record(latency_ns.clamp(1, MAX_LATENCY_NS));
        match kind {
            OpKind::Read => self.bw.record(done_ns, bytes, false),
            OpKind::Write => self.bw.record(done_ns, bytes, true),
            _ => {}
        }
    }

    /// Add everything `o` recorded (recorders started at the same time with the same bins).
    pub fn merge(&mut self, o: &Recorder) {
        for (h, oh) in self.hist.iter_mut().zip(&o.hist) {
            // Same bounds on both sides: adding cannot fail.
            let _ = h.add(oh);
        }
        let _ = self.late.add(&o.late);
        self.bw.merge(&o.bw);
    }

    pub fn record_lateness(&mut self, late_ns: u64) {
        self.late
            .saturating_record(late_ns.clamp(1, MAX_LATENCY_NS));
    }

    pub fn latency(&self, kind: OpKind) -> LatencySummary {
        summarize(&self.hist[kind as usize])
    }

    pub fn lateness(&self) -> LatencySummary {
        summarize(&self.late)
    }

    pub fn bandwidth(&self) -> BandwidthSeries {
        self.bw.clone()
    }
}

/// Latency summaries per operation.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyStats {
    pub read: LatencySummary,
    pub write: LatencySummary,
    pub discard: LatencySummary,
    pub flush: LatencySummary,
    /// Wall clock: how late completions were relative to the model (sleep overshoot).
    pub wall_lateness: LatencySummary,
}

/// Modelled device DRAM.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemoryStats {
    pub mapping_bytes: u64,
    /// Outstanding D2FS migration records (buffered or in flight).
    pub migration_record_bytes: u64,
    pub line_metadata_bytes: u64,
    pub write_buffer_bytes: u64,
    pub total_bytes: u64,
}

/// A snapshot of everything the device measured since the last reset.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SsdStats {
    pub counters: Counters,
    /// (host + GC units programmed) / host units written; 1.0 with no writes.
    pub waf: f64,
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    pub host_discard_bytes: u64,
    pub nand_write_bytes: u64,
    pub gc_runs: u64,
    pub gc_pages_moved: u64,
    pub free_lines: u32,
    /// Mean spare units not holding data or garbage, over host writes (free lines plus the
    /// unwritten part of open lines), in 4 KiB units.
    pub mean_free_units: f64,
    pub latency: LatencyStats,
    pub busy: BusyStats,
    pub write_buffer_stall_ns: u64,
    pub memory: MemoryStats,
    pub bandwidth: BandwidthSeries,
    /// FTL-specific counters.
    pub ftl: crate::ftl::FtlStats,
    /// Waits on and holds of the emulator's own locks (is the device the host's bottleneck?).
    pub locks: crate::locks::LockStats,
}

impl SsdStats {
    pub(crate) fn compute_waf(c: &Counters) -> f64 {
        if c.host_write_blocks == 0 {
            1.0
        } else {
            c.nand_written_blocks as f64 / c.host_write_blocks as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_bins_merge_and_keep_totals() {
        let mut r = Recorder::new(1000, 0);
        for i in 0..10_000u64 {
            r.record(OpKind::Write, 10, i * 1000, 4096);
        }
        let bw = r.bandwidth();
        assert!(bw.write_bytes.len() <= MAX_BW_BINS);
        assert_eq!(bw.write_bytes.iter().sum::<u64>(), 10_000 * 4096);
        assert!(bw.bin_ns > 1000);
        let l = r.latency(OpKind::Write);
        assert_eq!(l.count, 10_000);
        assert!((l.p50_us - 0.01).abs() < 0.001);
    }

    #[test]
    fn merged_shards_keep_counts_and_bytes() {
        // One shard saw a long run (its bins widened), the other a short one.
        let mut a = Recorder::new(1000, 0);
        let mut b = Recorder::new(1000, 0);
        for i in 0..10_000u64 {
            a.record(OpKind::Write, 10, i * 1000, 4096);
        }
        for i in 0..100u64 {
            b.record(OpKind::Read, 20, i * 1000, 8192);
        }
        b.record_lateness(5);
        a.merge(&b);
        assert_eq!(a.latency(OpKind::Write).count, 10_000);
        assert_eq!(a.latency(OpKind::Read).count, 100);
        assert_eq!(a.lateness().count, 1);
        let bw = a.bandwidth();
        assert!(bw.write_bytes.len() <= MAX_BW_BINS);
        assert_eq!(bw.write_bytes.iter().sum::<u64>(), 10_000 * 4096);
        assert_eq!(bw.read_bytes.iter().sum::<u64>(), 100 * 8192);
        // The short shard's 1 µs bins were widened to the long one's: its first bin holds
        // one read per 1 µs of the widened bin.
        assert_eq!(bw.bin_ns, 8000);
        assert_eq!(bw.read_bytes[0], 8 * 8192);
    }
}
