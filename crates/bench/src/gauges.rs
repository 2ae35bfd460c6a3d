//! Device gauges over time, for the D2FS and IPLFS figures: the FTL's modelled mapping memory
//! (D2FS Table 1, IPLFS), the migration-record buffer and upcall rate (D2FS Fig. 17), the fill
//! of the coupled FTL's regular and GC regions (D2FS Fig. 11), the interval map's sizes and
//! compaction work (IPLFS), and the device's own GC runs.
//!
//! Owns: [`Gauge`] (one sample), [`GaugeSampler`] (one thread that reads the emulator's
//! read-only accessors every `--sample-ms`), [`MemorySummary`] (the end-of-run numbers the
//! tables print).
//!
//! Invariants: a sampler exists only for an emulated SSD; its samples are in time order; the
//! gauges are read through `SsdDevice` accessors that take the engine lock once each and
//! change nothing.
//!
//! Lock order: the sampler takes the emulator's engine lock (inside the accessors) and its own
//! sample list, never both at once.

use crate::metrics::Sampler;
use flashlog_ssd::SsdDevice;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of one entry of a flat page map (4 B per 4 KiB block, D2FS Table 1).
pub const PAGE_ENTRY_BYTES: u64 = 4;

/// Device gauges at one instant.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Gauge {
    pub t_s: f64,
    /// Modelled device DRAM of the logical-to-physical mapping, and of the outstanding D2FS
    /// migration records.
    pub mapping_bytes: u64,
    pub record_bytes: u64,
    pub records_now: u64,
    /// Upcalls sent and acknowledged so far (D2FS).
    pub upcalls_sent: u64,
    pub upcalls_acked: u64,
    /// Valid 4 KiB blocks on flash (the live data the mapping has to cover).
    pub valid_blocks: u64,
    /// Device GC runs so far (victim lines collected by the device), pages they moved, and of
    /// those the pages the host wrote as node blocks (D2FS: the coupled FTL's node stream).
    pub device_gc_runs: u64,
    pub device_gc_pages_moved: u64,
    pub device_gc_node_pages_moved: u64,
    /// D2FS regions: valid blocks / region blocks, and zones holding a line / zones.
    pub regular_fill: f64,
    pub regular_zones_used: f64,
    pub gc_fill: f64,
    pub gc_zones_used: f64,
    /// IPLFS interval map: valid and allocated entries, compaction runs and firmware time
    /// charged so far, the flat map of the touched range.
    pub interval_valid: u64,
    pub interval_allocated: u64,
    pub compaction_runs: u64,
    pub compaction_busy_ns: u64,
    pub flat_touched_bytes: u64,
    /// IPLFS interval map as its last compaction run left it: tree bytes and a page map of
    /// the live data then (0 before the first run).
    pub after_compaction_bytes: u64,
    pub after_compaction_page_map_bytes: u64,
}

impl Gauge {
    /// Read every gauge from the device now (`t_s` left at 0).
    pub fn read(ssd: &SsdDevice) -> Gauge {
        let mem = ssd.ftl_memory();
        let ftl = ssd.ftl_stats();
        let counters = ssd.counters();
        let mut g = Gauge {
            mapping_bytes: mem.mapping_bytes,
            record_bytes: mem.record_bytes,
            records_now: ftl.records_now,
            upcalls_sent: ftl.upcalls_sent,
            upcalls_acked: ftl.upcalls_acked,
            valid_blocks: ssd.valid_blocks(),
            device_gc_runs: counters.gc_runs,
            device_gc_pages_moved: counters.gc_pages_moved,
            device_gc_node_pages_moved: ftl.gc_node_pages_moved,
            ..Gauge::default()
        };
        let frac = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        for r in ssd.region_usage() {
            match r.name {
                "regular" => {
                    g.regular_fill = frac(r.valid_blocks, r.blocks);
                    g.regular_zones_used = frac(r.zones_in_use, r.zones);
                }
                "gc" => {
                    g.gc_fill = frac(r.valid_blocks, r.blocks);
                    g.gc_zones_used = frac(r.zones_in_use, r.zones);
                }
                _ => {}
            }
        }
        if let Some(iv) = &ftl.interval {
            g.interval_valid = iv.valid_entries;
            g.interval_allocated = iv.allocated_entries;
            g.compaction_runs = iv.compaction_runs;
            g.compaction_busy_ns = iv.compaction_busy_ns;
            g.flat_touched_bytes = iv.flat_touched_bytes;
            g.after_compaction_bytes = iv.after_compaction_bytes;
            g.after_compaction_page_map_bytes = iv.after_compaction_page_map_bytes;
        }
        g
    }

    /// What a flat page map of the live data needs (4 B per valid block).
    pub fn page_map_for_live(&self) -> u64 {
        self.valid_blocks * PAGE_ENTRY_BYTES
    }
}

/// A thread sampling [`Gauge`]s.
pub type GaugeSampler = Sampler<Gauge>;

impl Sampler<Gauge> {
    /// Start sampling `ssd` every `interval`, times relative to `t0`.
    pub fn start(ssd: Arc<SsdDevice>, interval: Duration, t0: Instant) -> GaugeSampler {
        let take = move || {
            let mut g = Gauge::read(&ssd);
            g.t_s = t0.elapsed().as_secs_f64();
            g
        };
        Sampler::every("bench-gauges", interval, take, |_: &Gauge| {})
    }
}

/// End-of-run mapping-memory numbers of one volume (D2FS Table 1, IPLFS targets).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MemorySummary {
    pub ftl: String,
    /// Mapping memory at the end of the run, and its peak over the run.
    pub mapping_bytes_end: u64,
    pub mapping_bytes_peak: u64,
    /// A flat page map of the live data at the end (4 B per valid block), and of the whole
    /// device capacity (what the page-mapping FTL allocates).
    pub page_map_live_bytes: u64,
    pub page_map_capacity_bytes: u64,
    /// mapping / page map of the live data, at the end.
    pub vs_page_map_live: f64,
    /// Interval FTL: mapping just after the last compaction run (None: it never ran) and its
    /// ratio to the page map of the live data then; the flat map of the touched range at the
    /// end and how many times smaller the mapping is.
    pub mapping_bytes_after_compaction: Option<u64>,
    pub after_compaction_vs_page_map_live: Option<f64>,
    pub flat_touched_bytes: u64,
    pub flat_touched_over_mapping: Option<f64>,
    pub compaction_runs: u64,
    pub compaction_busy_ms: f64,
    /// D2FS: records peak over the run, in bytes and per GiB of device capacity.
    pub record_bytes_peak: u64,
    pub record_kib_per_gib_peak: f64,
}

/// Summarise a gauge series of a device with `capacity_blocks` physical-capacity blocks.
pub fn summarize(ftl: &str, g: &[Gauge], capacity_blocks: u64) -> Option<MemorySummary> {
    let last = g.last()?;
    let mut s = MemorySummary {
        ftl: ftl.to_string(),
        mapping_bytes_end: last.mapping_bytes,
        mapping_bytes_peak: g.iter().map(|x| x.mapping_bytes).max().unwrap_or(0),
        page_map_live_bytes: last.page_map_for_live(),
        page_map_capacity_bytes: capacity_blocks * PAGE_ENTRY_BYTES,
        flat_touched_bytes: last.flat_touched_bytes,
        compaction_runs: last.compaction_runs,
        compaction_busy_ms: last.compaction_busy_ns as f64 / 1e6,
        record_bytes_peak: g.iter().map(|x| x.record_bytes).max().unwrap_or(0),
        ..MemorySummary::default()
    };
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    s.vs_page_map_live = ratio(s.mapping_bytes_end, s.page_map_live_bytes);
    let gib = (capacity_blocks * 4096) as f64 / (1u64 << 30) as f64;
    if gib > 0.0 {
        s.record_kib_per_gib_peak = s.record_bytes_peak as f64 / 1024.0 / gib;
    }
    // The tree as the last compaction run left it (the FTL records it at the end of the run;
    // the first sample after the run would also count the writes since).
    if last.compaction_runs > 0 && last.after_compaction_bytes > 0 {
        s.mapping_bytes_after_compaction = Some(last.after_compaction_bytes);
        s.after_compaction_vs_page_map_live = Some(ratio(
            last.after_compaction_bytes,
            last.after_compaction_page_map_bytes,
        ));
    }
    if s.flat_touched_bytes > 0 && s.mapping_bytes_end > 0 {
        s.flat_touched_over_mapping = Some(ratio(s.flat_touched_bytes, s.mapping_bytes_end));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_takes_the_tree_the_last_compaction_left() {
        let mk = |t: f64, map: u64, valid: u64, runs: u64| Gauge {
            t_s: t,
            mapping_bytes: map,
            valid_blocks: valid,
            compaction_runs: runs,
            flat_touched_bytes: 4_000_000,
            record_bytes: (t * 100.0) as u64,
            // The run (between the samples at t=1 and t=2) left 940,000 B over a live page
            // map of 800,000 B; the sample at t=2 already counts writes since.
            after_compaction_bytes: if runs > 0 { 940_000 } else { 0 },
            after_compaction_page_map_bytes: if runs > 0 { 800_000 } else { 0 },
            ..Gauge::default()
        };
        // 1 GiB device (262,144 blocks); mapping grows, one compaction shrinks it to 117.5 %
        // of the live page map, then writes grow it again.
        let g = vec![
            mk(0.0, 100, 0, 0),
            mk(1.0, 900_000, 200_000, 0),
            mk(2.0, 960_000, 200_000, 1),
            mk(3.0, 1_000_000, 200_000, 1),
        ];
        let s = summarize("interval", &g, 262_144).unwrap();
        assert_eq!(s.mapping_bytes_after_compaction, Some(940_000));
        assert!((s.after_compaction_vs_page_map_live.unwrap() - 1.175).abs() < 1e-9);
        assert!((s.vs_page_map_live - 1.25).abs() < 1e-9);
        assert_eq!(s.mapping_bytes_peak, 1_000_000);
        assert!((s.flat_touched_over_mapping.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(s.page_map_capacity_bytes, 262_144 * 4);
        assert_eq!(s.record_bytes_peak, 300);
        assert!((s.record_kib_per_gib_peak - 300.0 / 1024.0).abs() < 1e-9);
        // No compaction: no after-compaction number.
        let s = summarize("interval", &g[..2], 262_144).unwrap();
        assert_eq!(s.mapping_bytes_after_compaction, None);
        assert!(summarize("page", &[], 1).is_none());
    }
}
