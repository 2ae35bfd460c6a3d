//! Page-mapping FTL (NVMeVirt's conventional FTL): a 4 KiB logical-to-physical map behind the
//! [`Mapping`] trait, one host and one GC write pointer, foreground line GC with a victim
//! policy, paced by write credits.
//!
//! GC (NVMeVirt `conv_ftl.c`: `check_and_refill_write_credit` → `foreground_gc` → one
//! `do_gc`): before a host page, once the write credits are used up and at most `threshold`
//! lines are free (`should_gc_high`: `free_line_cnt <= gc_thres_lines_high`), ONE victim is
//! collected and the credits are set to the slots it freed, so GC is spread over the host
//! writes. Without pacing (`gc.pacing = false`) GC collects until more than `threshold` lines
//! are free. The emergency path (the host about to take the last free line: NVMeVirt has none
//! and fails) collects until two lines are free; with pacing it should not run in steady state.
//!
//! Idle GC (`gc.idle_ns`, off by default; FEMU's background GC): at each request, if the
//! device has been quiet (every earlier request complete, every die idle) for `idle_ns`
//! before it, the victims
//! it would have collected in that gap are collected now, at the times they would have
//! started: the first `idle_ns` after the quiet began, each next one when the previous one's
//! dies are idle, as long as one starts before the request arrived, fewer lines are free
//! than its target (`idle_free` of all lines; by default half of the spare lines) and the
//! victim has at least 1/8 of its units invalid.
//! The request then waits only for the victim still running when it arrived.
//!
//! Owns: the mapping, the victim policy, the two write pointers and the write credits.
//!
//! Invariants:
//! - `map.lookup(lpn) == Some(ppn)` iff the flash reverse map says `ppn` holds `lpn`;
//! - after the GC check of a host page, at most `threshold` free lines only while write credits
//!   remain (or no line has an invalid page); the host never takes the last free line (kept
//!   for GC destinations: one victim's moves fill at most one line before it is erased);
//! - GC never picks a victim without an invalid page: it reports `NoReclaimableSpace` instead.
//!
//! [`Mapping`] is also the plug-in point for another L2P structure under the same algorithm
//! (e.g. IPLFS's sparse interval map): `PageFtl::with_mapping`.
//!
//! Lock order: none (owned by the engine).

use crate::config::SsdConfig;
use crate::flash::Flash;
use crate::ftl::{Ftl, FtlError, FtlMemory, FtlStats, Lpn, Ppn, VictimPolicy, WritePointer};
use flashlog_dev::WriteHint;

/// Logical-to-physical map of a page-mapping FTL.
pub trait Mapping: Send {
    fn name(&self) -> &'static str;
    /// Size of the logical space in 4 KiB blocks.
    fn logical_blocks(&self) -> u64;
    fn lookup(&self, lpn: Lpn) -> Option<Ppn>;
    /// Map `lpn` to `ppn`; returns the previous physical page.
    fn map(&mut self, lpn: Lpn, ppn: Ppn) -> Option<Ppn>;
    /// Remove the mapping of `lpn`; returns the physical page it had.
    fn unmap(&mut self, lpn: Lpn) -> Option<Ppn>;
    /// Modelled device DRAM of the mapping structures, in bytes.
    fn memory_bytes(&self) -> u64;
    /// Name of the FTL the page-mapping algorithm makes over this map ("page", or e.g.
    /// "interval" for IPLFS's sparse map).
    fn ftl_name(&self) -> &'static str {
        "page"
    }
    /// The logical space is effectively infinite (IPLFS: never reused, 2^64 − 1 blocks).
    fn infinite_space(&self) -> bool {
        false
    }
    /// Unmap every mapped block of `lpn..lpn + n`, handing each physical page it had to `f`.
    /// The default walks block by block (bounded by the logical size); a sparse map visits
    /// only what it holds, so a discard of a huge range stays cheap.
    fn unmap_range(&mut self, lpn: u64, n: u64, f: &mut dyn FnMut(Ppn)) {
        let end = lpn.saturating_add(n).min(self.logical_blocks());
        for l in lpn..end {
            if let Some(p) = self.unmap(Lpn(l)) {
                f(p);
            }
        }
    }
    /// Refuse a host write of `n` blocks at `lpn` that the map cannot take (e.g. a sparse
    /// map whose device DRAM would overflow), before anything changes.
    fn check_map(&self, _lpn: u64, _n: u64) -> Result<(), String> {
        Ok(())
    }
    /// Add the map's own statistics (e.g. the interval map's sizes and compaction counters).
    fn fill_stats(&self, _stats: &mut FtlStats) {}
    /// Background work due at `t` (e.g. compaction); returns the device time it takes.
    fn background(&mut self, _t: u64) -> u64 {
        0
    }
    /// Every mapped (lpn, ppn), for invariant checks (tests).
    fn entries(&self) -> Box<dyn Iterator<Item = (Lpn, Ppn)> + '_>;
}

const UNMAPPED: u32 = u32::MAX;

/// Flat 4 KiB page map, 4 B per logical page (32-bit PPN), as in NVMeVirt's conv FTL.
#[derive(Debug)]
pub struct PageMap {
    l2p: Vec<u32>,
}

impl PageMap {
    pub fn new(logical_blocks: u64) -> Self {
        PageMap {
            l2p: vec![UNMAPPED; logical_blocks as usize],
        }
    }
}

impl Mapping for PageMap {
    fn name(&self) -> &'static str {
        "page-map"
    }
    fn logical_blocks(&self) -> u64 {
        self.l2p.len() as u64
    }
    fn lookup(&self, lpn: Lpn) -> Option<Ppn> {
        match self.l2p.get(usize::try_from(lpn.0).ok()?) {
            Some(&p) if p != UNMAPPED => Some(Ppn(p)),
            _ => None,
        }
    }
    fn map(&mut self, lpn: Lpn, ppn: Ppn) -> Option<Ppn> {
        let slot = self.l2p.get_mut(usize::try_from(lpn.0).ok()?)?;
        let old = std::mem::replace(slot, ppn.0);
        (old != UNMAPPED).then_some(Ppn(old))
    }
    fn unmap(&mut self, lpn: Lpn) -> Option<Ppn> {
        let slot = self.l2p.get_mut(usize::try_from(lpn.0).ok()?)?;
        let old = std::mem::replace(slot, UNMAPPED);
        (old != UNMAPPED).then_some(Ppn(old))
    }
    fn memory_bytes(&self) -> u64 {
        self.l2p.len() as u64 * 4
    }
    fn entries(&self) -> Box<dyn Iterator<Item = (Lpn, Ppn)> + '_> {
        Box::new(
            self.l2p
                .iter()
                .enumerate()
                .filter(|(_, &p)| p != UNMAPPED)
                .map(|(l, &p)| (Lpn(l as u64), Ppn(p))),
        )
    }
}

/// Free lines idle GC stops at: `gc.idle_free` of all lines, or by default half of the spare
/// lines (physical minus logical; at least one).
fn idle_free_lines(cfg: &SsdConfig) -> u32 {
    let g = &cfg.geometry;
    let lines = match cfg.gc.idle_free {
        Some(f) => (f * g.lines() as f64).ceil() as u64,
        None => {
            let spare = g.physical_slots().saturating_sub(cfg.logical_blocks());
            (spare / g.slots_per_line() / 2).max(1)
        }
    };
    u32::try_from(lines).unwrap_or(u32::MAX)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Host,
    Gc,
}

/// The page-mapping FTL.
pub struct PageFtl {
    map: Box<dyn Mapping>,
    policy: Box<dyn VictimPolicy>,
    host_wp: WritePointer,
    gc_wp: WritePointer,
    credits: u64,
    pacing: bool,
    threshold: u32,
    emergency_runs: u64,
    background_runs: u64,
    background_ns: u64,
    /// Idle GC: quiet time before it starts (0: off), free lines it stops at, victims
    /// collected.
    idle_ns: u64,
    idle_free_lines: u32,
    idle_runs: u64,
}

impl PageFtl {
    /// Page mapping over the configured logical space.
    pub fn new(cfg: &SsdConfig, policy: Box<dyn VictimPolicy>) -> Self {
        Self::with_mapping(cfg, Box::new(PageMap::new(cfg.logical_blocks())), policy)
    }

    /// The page-mapping algorithm over another L2P structure.
    pub fn with_mapping(
        cfg: &SsdConfig,
        map: Box<dyn Mapping>,
        policy: Box<dyn VictimPolicy>,
    ) -> Self {
        PageFtl {
            map,
            policy,
            host_wp: WritePointer::default(),
            gc_wp: WritePointer::default(),
            credits: 0,
            pacing: cfg.gc.pacing,
            threshold: cfg.gc.threshold_lines,
            emergency_runs: 0,
            background_runs: 0,
            background_ns: 0,
            idle_ns: cfg.gc.idle_ns,
            idle_free_lines: idle_free_lines(cfg),
            idle_runs: 0,
        }
    }

    fn wp(&mut self, stream: Stream) -> &mut WritePointer {
        match stream {
            Stream::Host => &mut self.host_wp,
            Stream::Gc => &mut self.gc_wp,
        }
    }

    /// Next physical page of a stream's write pointer; opens a new line when needed.
    fn alloc(&mut self, flash: &mut Flash, stream: Stream, t: u64) -> Result<Ppn, FtlError> {
        let b = flash.slots_per_line();
        let full = {
            let wp = self.wp(stream);
            wp.line.is_none() || wp.off == b
        };
        if full {
            if stream == Stream::Host {
                // Keep one free line for GC destinations (emergency path: the paced GC runs
                // above this level, so it is rare).
                if flash.lines.free_count() <= 1 {
                    self.emergency_runs += self.gc_until(flash, 2, t)?.1;
                }
            }
            let seq = flash.seq;
            if let Some(l) = self.wp(stream).line.take() {
                flash.lines.seal(l, seq);
            }
            let l = flash
                .lines
                .open_free()
                .ok_or(FtlError::NoReclaimableSpace { free: 0 })?;
            let wp = self.wp(stream);
            wp.line = Some(l);
            wp.off = 0;
        }
        let wp = self.wp(stream);
        let line = wp.line.unwrap_or(crate::ftl::LineId(0));
        let off = wp.off;
        wp.off += 1;
        Ok(flash.ppn(line, off))
    }

    /// Collect one victim line at time `t`; returns the invalid slots it freed.
    fn gc_one(&mut self, flash: &mut Flash, t: u64) -> Result<u64, FtlError> {
        let victim =
            self.policy
                .select(&flash.lines, flash.seq)
                .ok_or(FtlError::NoReclaimableSpace {
                    free: flash.lines.free_count(),
                })?;
        self.collect(flash, victim, t)
    }

    /// Idle GC before a request submitted at `t` (see the module header).
    fn idle_gc(&mut self, flash: &mut Flash, t: u64) -> Result<(), FtlError> {
        if self.idle_ns == 0 {
            return Ok(());
        }
        // Every earlier request's completion (`last_done`, never before its submission) and
        // the NAND work it left.
        let quiet = flash.timing.quiet_from().max(flash.last_done);
        let b = flash.slots_per_line();
        let mut start = quiet.saturating_add(self.idle_ns);
        while start < t && flash.lines.free_count() < self.idle_free_lines {
            let Some(victim) = self.policy.select(&flash.lines, flash.seq) else {
                break;
            };
            if b - flash.lines.vpc(victim) < b.div_ceil(8) {
                break;
            }
            self.collect(flash, victim, start)?;
            self.idle_runs += 1;
            start = flash.timing.quiet_from().max(start);
        }
        Ok(())
    }

    /// Collect `victim` at time `t`; returns the invalid slots it freed.
    fn collect(
        &mut self,
        flash: &mut Flash,
        victim: crate::ftl::LineId,
        t: u64,
    ) -> Result<u64, FtlError> {
        let run = flash.gc_begin(victim, t)?;
        for p in run.slots(flash.slots_per_line()) {
            let Some(lpn) = flash.gc_take(&run, p) else {
                continue;
            };
            let new = self.alloc(flash, Stream::Gc, t)?;
            self.map.map(Lpn(lpn), new);
            flash.gc_place(&run, p, new, lpn);
        }
        Ok(flash.gc_end(run, t))
    }

    /// GC until at least `want` lines are free; returns the invalid slots freed and the
    /// victims collected.
    fn gc_until(&mut self, flash: &mut Flash, want: u32, t: u64) -> Result<(u64, u64), FtlError> {
        let (mut freed, mut runs) = (0, 0);
        while flash.lines.free_count() < want {
            freed += self.gc_one(flash, t)?;
            runs += 1;
        }
        Ok((freed, runs))
    }

    /// Foreground GC check before one host page (NVMeVirt's `should_gc_high` trigger, paced
    /// by write credits: one victim per credit exhaustion).
    fn maybe_gc(&mut self, flash: &mut Flash, t: u64) -> Result<(), FtlError> {
        if self.credits > 0 {
            self.credits -= 1;
            return Ok(());
        }
        if flash.lines.free_count() > self.threshold {
            return Ok(());
        }
        let r = if self.pacing {
            // This page takes one of the freed slots.
            self.gc_one(flash, t)
                .map(|freed| self.credits = freed.saturating_sub(1))
        } else {
            self.gc_until(flash, self.threshold.saturating_add(1), t)
                .map(|_| ())
        };
        match r {
            // Nothing to collect yet but the host can still take a line: the emergency path
            // decides when the device is really full.
            Err(FtlError::NoReclaimableSpace { .. }) if flash.lines.free_count() >= 2 => Ok(()),
            r => r,
        }
    }
}

impl Ftl for PageFtl {
    fn name(&self) -> &'static str {
        self.map.ftl_name()
    }
    fn infinite_space(&self) -> bool {
        self.map.infinite_space()
    }
    fn policy_name(&self) -> &'static str {
        self.policy.name()
    }
    fn logical_blocks(&self) -> u64 {
        self.map.logical_blocks()
    }
    fn check_write(&self, lpn: u64, n: u64) -> Result<(), FtlError> {
        self.map.check_map(lpn, n).map_err(FtlError::Refused)
    }

    fn write_page(
        &mut self,
        flash: &mut Flash,
        lpn: Lpn,
        t: u64,
        tx: u64,
        _hint: WriteHint,
    ) -> Result<Option<u64>, FtlError> {
        self.maybe_gc(flash, t)?;
        let spare = self.spare_units(flash);
        flash.sample_free(spare);
        // The new page first: a write refused for space must leave the old page valid and
        // mapped. A GC inside `alloc` may move the old page; look it up after.
        let ppn = self.alloc(flash, Stream::Host, t)?;
        if let Some(old) = self.map.lookup(lpn) {
            flash.invalidate(old);
        }
        self.map.map(lpn, ppn);
        Ok(flash.program_host(ppn, lpn.0, tx))
    }

    fn lookup(&self, _flash: &Flash, lpn: Lpn) -> Option<Ppn> {
        self.map.lookup(lpn)
    }

    fn mapped_lpns(&self) -> Option<Vec<u64>> {
        if !self.map.infinite_space() {
            return None; // a flat map would list up to its whole logical size
        }
        let mut v: Vec<u64> = self.map.entries().map(|(l, _)| l.0).collect();
        v.sort_unstable();
        Some(v)
    }

    fn discard(&mut self, flash: &mut Flash, lpn: u64, n: u64, _t: u64) -> Result<(), FtlError> {
        self.map
            .unmap_range(lpn, n, &mut |old| flash.invalidate(old));
        Ok(())
    }

    fn background(&mut self, flash: &mut Flash, t: u64) -> Result<(), FtlError> {
        self.idle_gc(flash, t)?;
        // The map answers with what is left of its stall at every request during it:
        // counted once, when a compaction moves the stall's end.
        let ns = self.map.background(t);
        if ns > 0 {
            let charged = flash.firmware_busy(t, ns);
            if charged > 0 {
                self.background_runs += 1;
                self.background_ns += charged;
            }
        }
        Ok(())
    }

    fn memory(&self) -> FtlMemory {
        FtlMemory {
            mapping_bytes: self.map.memory_bytes(),
            record_bytes: 0,
        }
    }

    fn stats(&self) -> FtlStats {
        let mut s = FtlStats {
            gc_emergency_runs: self.emergency_runs,
            gc_idle_runs: self.idle_runs,
            background_runs: self.background_runs,
            background_ns: self.background_ns,
            ..FtlStats::default()
        };
        self.map.fill_stats(&mut s);
        s
    }

    fn reset_stats(&mut self) {
        self.emergency_runs = 0;
        self.idle_runs = 0;
        self.background_runs = 0;
        self.background_ns = 0;
    }

    fn spare_units(&self, flash: &Flash) -> u64 {
        let b = flash.slots_per_line();
        u64::from(flash.lines.free_count()) * u64::from(b)
            + self.host_wp.spare(b)
            + self.gc_wp.spare(b)
    }

    fn check_invariants(&self, flash: &Flash) -> Result<(), String> {
        for (ppn, lpn) in flash.valid_pages() {
            if self.map.lookup(Lpn(lpn)) != Some(ppn) {
                return Err(format!("p2l[{}] = {lpn} but the map disagrees", ppn.0));
            }
        }
        for (lpn, p) in self.map.entries() {
            if flash.owner(p) != Some(lpn.0) {
                return Err(format!("lpn {} maps to {} whose p2l differs", lpn.0, p.0));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_map_round_trip() {
        let mut m = PageMap::new(8);
        assert_eq!(m.lookup(Lpn(3)), None);
        assert_eq!(m.map(Lpn(3), Ppn(7)), None);
        assert_eq!(m.map(Lpn(3), Ppn(9)), Some(Ppn(7)));
        assert_eq!(m.lookup(Lpn(3)), Some(Ppn(9)));
        assert_eq!(m.unmap(Lpn(3)), Some(Ppn(9)));
        assert_eq!(m.lookup(Lpn(3)), None);
        assert_eq!(m.lookup(Lpn(100)), None);
        assert_eq!(m.lookup(Lpn(u64::MAX)), None);
        assert_eq!(m.memory_bytes(), 32);
        assert_eq!(m.entries().count(), 0);
    }
}
