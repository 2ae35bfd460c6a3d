//! The engine: host reads, writes, discards and flushes dispatched to the FTL ([`Ftl`]) over
//! the shared NAND back-end ([`Flash`]).
//!
//! Owns: the FTL and the flash back-end. Every request is computed eagerly: given its
//! submission time it returns its completion time, updating the die/channel/buffer state in
//! processing order (the caller submits in time order for faithful results).
//!
//! Invariants:
//! - `flash.p2l[ppn] == lpn` iff `ftl.lookup(lpn) == Some(ppn)`;
//! - a refused write (`Ftl::check_write`) changes nothing;
//! - every event queued before a request finished rides on that request's completion.
//!
//! Lock order: none inside; the device holds its engine lock around every call.

use serde::Serialize;

use crate::config::{SsdConfig, MAP_UNIT};
use crate::flash::Flash;
use crate::ftl::{EventQueue, Ftl, FtlError, FtlMemory, FtlStats, LineTable, Lpn};
use crate::timing::{BusyStats, Work};
use flashlog_dev::{DeviceEvent, WriteHint};

/// Engine errors are the FTL's.
pub type EngineError = FtlError;

/// Operation counters (cumulative since the last reset).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Counters {
    pub host_read_ops: u64,
    pub host_read_blocks: u64,
    /// Reads of never-written or discarded blocks (no NAND access).
    pub host_read_unmapped_blocks: u64,
    pub host_write_ops: u64,
    pub host_write_blocks: u64,
    pub host_discard_ops: u64,
    pub host_discard_blocks: u64,
    pub host_flush_ops: u64,
    pub nand_read_ops: u64,
    pub nand_read_bytes: u64,
    pub gc_read_ops: u64,
    pub nand_program_ops: u64,
    /// 4 KiB units programmed: host plus GC (WAF numerator).
    pub nand_written_blocks: u64,
    /// Die-block erases.
    pub nand_erases: u64,
    pub gc_runs: u64,
    pub gc_pages_moved: u64,
    /// Σ over host page writes of the spare units not holding data-or-garbage at that moment
    /// (free lines plus unwritten parts of open lines): its mean gives the effective OP.
    pub free_units_sum: u128,
    pub free_units_samples: u64,
}

/// The engine.
pub struct Engine {
    ftl: Box<dyn Ftl>,
    pub flash: Flash,
    logical_blocks: u64,
}

impl Engine {
    pub fn new(cfg: &SsdConfig, ftl: Box<dyn Ftl>) -> Self {
        Engine {
            logical_blocks: ftl.logical_blocks(),
            ftl,
            flash: Flash::new(cfg),
        }
    }

    pub fn logical_blocks(&self) -> u64 {
        self.logical_blocks
    }

    pub fn counters(&self) -> &Counters {
        &self.flash.counters
    }

    pub fn busy(&self) -> BusyStats {
        self.flash.timing.busy()
    }

    pub fn reset_counters(&mut self) {
        self.flash.counters = Counters::default();
        self.flash.timing.reset_busy();
        self.ftl.reset_stats();
    }

    pub fn free_lines(&self) -> u32 {
        self.flash.lines.free_count()
    }

    pub fn lines(&self) -> &LineTable {
        &self.flash.lines
    }

    /// Logical pages of every valid physical page, ascending (tests; O(physical size)).
    pub fn valid_lpns(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.flash.valid_pages().map(|(_, l)| l).collect();
        v.sort_unstable();
        v
    }

    pub fn ftl(&self) -> &dyn Ftl {
        self.ftl.as_ref()
    }

    pub fn mapping_name(&self) -> &'static str {
        self.ftl.name()
    }

    pub fn policy_name(&self) -> &'static str {
        self.ftl.policy_name()
    }

    pub fn migration_upcalls(&self) -> bool {
        self.ftl.migration_upcalls()
    }

    /// Modelled device DRAM: (FTL structures, line metadata + valid bitmaps).
    pub fn memory(&self) -> (FtlMemory, u64) {
        (self.ftl.memory(), self.flash.lines.memory_bytes())
    }

    /// The FTL's regions and their fill (read-only; empty for FTLs without regions).
    pub fn region_usage(&self) -> Vec<crate::ftl::RegionUsage> {
        self.ftl.region_usage(&self.flash)
    }

    pub fn ftl_stats(&self) -> FtlStats {
        self.ftl.stats()
    }

    pub fn events_mut(&mut self) -> &mut EventQueue {
        &mut self.flash.events
    }

    /// Move pending device events into a completion's event list.
    pub fn drain_events(&mut self, out: &mut Vec<DeviceEvent>) {
        self.flash.events.drain_into(out);
    }

    /// Logical-address changes made by GC since the last call (the device moves contents),
    /// and logical addresses whose contents died without a host discard of that address
    /// (discard redirect).
    pub fn take_store_changes(&mut self) -> (Vec<(u64, u64)>, Vec<u64>) {
        (
            std::mem::take(&mut self.flash.relocations),
            std::mem::take(&mut self.flash.dropped),
        )
    }

    /// Host write of `n` blocks at `lpn` submitted at `t`, with the block type the host sent
    /// (`hint`, passed to the FTL per page); returns the completion time.
    pub fn write(&mut self, lpn: u64, n: u64, t: u64, hint: WriteHint) -> Result<u64, EngineError> {
        self.ftl.check_write(lpn, n)?;
        self.ftl.background(&mut self.flash, t)?;
        // Requests wait while the firmware is busy (IPLFS compaction stalls I/O).
        let t = t.max(self.flash.firmware_until);
        self.flash.counters.host_write_ops += 1;
        let seg_max = (self.flash.timing.write_segment_bytes() / MAP_UNIT).max(1);
        let mut done = t;
        let mut last_prog = t;
        let mut seg_t = t;
        let mut i = 0;
        while i < n {
            let seg = (n - i).min(seg_max);
            let (start, tx) = self.flash.timing.host_write_in(seg_t, seg * MAP_UNIT);
            seg_t = start;
            done = done.max(tx);
            for k in i..i + seg {
                if let Some(end) =
                    self.ftl
                        .write_page(&mut self.flash, Lpn(lpn + k), start, tx, hint)?
                {
                    last_prog = last_prog.max(end);
                }
            }
            i += seg;
        }
        let done = if self.flash.timing.early_completion() {
            done
        } else {
            done.max(last_prog)
        };
        Ok(self.completed(done))
    }

    /// Host read of several extents `(lpn, blocks)` all submitted at `t` (in flight together);
    /// returns the completion time of the last and, for blocks served from another logical
    /// address (D2FS read redirect), `(host address, address the content is kept under)`.
    pub fn read(
        &mut self,
        extents: &[(u64, u64)],
        t: u64,
    ) -> Result<(u64, Vec<(u64, u64)>), EngineError> {
        self.ftl.background(&mut self.flash, t)?;
        // Requests wait while the firmware is busy (IPLFS compaction stalls I/O).
        let t = t.max(self.flash.firmware_until);
        let total: u64 = extents.iter().map(|e| e.1).sum();
        self.flash.counters.host_read_ops += extents.len() as u64;
        self.flash.counters.host_read_blocks += total;
        let per_req_bytes = extents.iter().map(|e| e.1 * MAP_UNIT).max().unwrap_or(0);
        let t0 = t + self.flash.timing.fw_read(per_req_bytes);
        let mut done = t0;
        let mut redirected = Vec::new();
        for &(lpn0, n) in extents {
            // Group consecutive blocks that sit in the same read unit into one NAND read.
            let mut group: Option<(u64, u64)> = None; // (read-unit id, blocks)
            for lpn in lpn0..lpn0 + n {
                let Some((ppn, at)) = self.ftl.read_lookup(&self.flash, Lpn(lpn)) else {
                    self.flash.counters.host_read_unmapped_blocks += 1;
                    continue;
                };
                if at.0 != lpn {
                    redirected.push((lpn, at.0));
                }
                let ru = self.flash.read_unit_of(ppn);
                match &mut group {
                    Some((g, k)) if *g == ru => *k += 1,
                    _ => {
                        if let Some((g, k)) = group.take() {
                            done = done.max(self.read_unit(g, k, t0));
                        }
                        group = Some((ru, 1));
                    }
                }
            }
            if let Some((g, k)) = group {
                done = done.max(self.read_unit(g, k, t0));
            }
        }
        Ok((self.completed(done), redirected))
    }

    fn read_unit(&mut self, ru: u64, blocks: u64, t0: u64) -> u64 {
        let (die, cell) = self.flash.place(ru * self.flash.slots_per_read_unit());
        self.flash.counters.nand_read_ops += 1;
        self.flash.counters.nand_read_bytes += blocks * MAP_UNIT;
        self.flash
            .timing
            .read(die, cell, blocks * MAP_UNIT, t0, true, Work::User)
    }

    /// Discard `n` blocks at `lpn` at `t`; returns the completion time.
    pub fn discard(&mut self, lpn: u64, n: u64, t: u64) -> Result<u64, EngineError> {
        self.ftl.background(&mut self.flash, t)?;
        // Requests wait while the firmware is busy (IPLFS compaction stalls I/O).
        let t = t.max(self.flash.firmware_until);
        self.flash.counters.host_discard_ops += 1;
        // Saturating: an infinite logical space accepts discards of up to 2^64 − 1 blocks.
        self.flash.counters.host_discard_blocks =
            self.flash.counters.host_discard_blocks.saturating_add(n);
        self.ftl.discard(&mut self.flash, lpn, n, t)?;
        Ok(self.completed(t + self.flash.timing.fw_trim()))
    }

    /// Record a request's completion (idle GC's quiet time) and return it.
    fn completed(&mut self, done: u64) -> u64 {
        self.flash.last_done = self.flash.last_done.max(done);
        done
    }

    /// Discard several extents `(lpn, n)` in one request (NVMe DSM): one command, one
    /// firmware overhead; returns the completion time. On an error the ranges before the
    /// failing one stay discarded.
    pub fn discard_many(&mut self, ranges: &[(u64, u64)], t: u64) -> Result<u64, EngineError> {
        self.ftl.background(&mut self.flash, t)?;
        let t = t.max(self.flash.firmware_until);
        self.flash.counters.host_discard_ops += 1;
        for &(lpn, n) in ranges {
            self.flash.counters.host_discard_blocks =
                self.flash.counters.host_discard_blocks.saturating_add(n);
            self.ftl.discard(&mut self.flash, lpn, n, t)?;
        }
        Ok(self.completed(t + self.flash.timing.fw_trim()))
    }

    /// Flush at `t`; returns when every accepted write is programmed.
    pub fn flush(&mut self, t: u64) -> Result<u64, EngineError> {
        self.ftl.background(&mut self.flash, t)?;
        // Requests wait while the firmware is busy (IPLFS compaction stalls I/O).
        let t = t.max(self.flash.firmware_until);
        self.flash.counters.host_flush_ops += 1;
        self.ftl.flush(&mut self.flash, t);
        let done = self.flash.timing.flush(t);
        Ok(self.completed(done))
    }

    /// The host acknowledged every upcall up to `upto` (D2FS).
    pub fn ack_migrations(&mut self, upto: u64) -> Result<u64, EngineError> {
        self.ftl.ack_migrations(upto)
    }

    /// Queue every unacknowledged upcall again (host restart).
    pub fn resend_migrations(&mut self) -> Result<(), EngineError> {
        self.ftl.resend_migrations(&mut self.flash)
    }

    /// Power cut and restart: undelivered events are lost; the FTL keeps its
    /// capacitor-backed state and re-queues what it must.
    pub fn power_cycle(&mut self) {
        self.flash.events.clear();
        self.ftl.power_cycle(&mut self.flash);
    }

    /// Check the invariants listed in the module header (for tests; O(physical size)).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.flash.check_counts()?;
        self.ftl.check_invariants(&self.flash)
    }
}
