//! The FTL engine: host reads, writes, discards and flushes against the page-mapping FTL and
//! the NAND timing model, with foreground line GC paced by write credits.
//!
//! Owns: the mapping (a [`Mapping`] variant), the victim policy, the line table, the reverse map
//! (physical page → logical page), the host and GC write pointers, the event queue, the timing
//! model and the operation counters. Every request is computed eagerly: given its submission
//! time it returns its completion time, updating the die/channel/buffer state in processing
//! order (the caller submits in time order for faithful results).
//!
//! Physical layout: `ppn = line * b + off`, `off = (unit * dies + die) * spu + slot`, so a write
//! pointer fills one program unit (`spu` slots) on a die, then moves to the next die
//! (channel-first numbering, so the next channel), then to the next unit index. A read unit is
//! `sru` consecutive slots, so `ppn / sru` names it.
//!
//! Invariants:
//! - `p2l[ppn] == lpn` iff `mapping.lookup(lpn) == Some(ppn)` (else `p2l[ppn] == INVALID`);
//! - a line's `vpc` equals the number of valid entries of its `p2l` range;
//! - after each host page, fewer than `gc.threshold_lines` free lines only while write credits
//!   remain; the host never takes the last free line (kept for GC destinations);
//! - GC never picks a victim without an invalid page: it reports `NoReclaimableSpace` instead.
//!
//! Lock order: none inside; the device holds its engine lock around every call.

use serde::Serialize;

use crate::config::{SsdConfig, MAP_UNIT};
use crate::ftl::{EventQueue, LineId, LineTable, Lpn, Mapping, Ppn, VictimPolicy};
use crate::timing::{BusyStats, NandTiming, Work};
use flashlog_dev::DeviceEvent;

const INVALID: u64 = u64::MAX;

/// Engine errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    #[error("no reclaimable space: every candidate line is fully valid (free lines {free}); discard data to make room")]
    NoReclaimableSpace { free: u32 },
}

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

/// One write pointer: the open line and the next offset in it.
#[derive(Debug, Default)]
struct WritePointer {
    line: Option<LineId>,
    off: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Host,
    Gc,
}

/// The engine.
pub struct Engine {
    mapping: Box<dyn Mapping>,
    policy: Box<dyn VictimPolicy>,
    lines: LineTable,
    p2l: Vec<u64>,
    host_wp: WritePointer,
    gc_wp: WritePointer,
    events: EventQueue,
    pub timing: NandTiming,
    counters: Counters,
    credits: u64,
    /// When the data of the GC write pointer's open program unit is all in the controller.
    gc_unit_ready: u64,
    /// Reused buffer: read-completion time per read unit of the current victim.
    gc_ready_scratch: Vec<u64>,
    pacing: bool,
    threshold: u32,
    /// Host-write sequence number: the age clock of cost-benefit.
    seq: u64,
    b: u32,
    dies: u32,
    spu: u32,
    sru: u32,
    logical_blocks: u64,
}

impl Engine {
    pub fn new(cfg: &SsdConfig, mapping: Box<dyn Mapping>, policy: Box<dyn VictimPolicy>) -> Self {
        let g = &cfg.geometry;
        let b = g.slots_per_line() as u32;
        Engine {
            logical_blocks: mapping.logical_blocks(),
            mapping,
            policy,
            lines: LineTable::new(g.lines() as u32, b),
            p2l: vec![INVALID; g.physical_slots() as usize],
            host_wp: WritePointer::default(),
            gc_wp: WritePointer::default(),
            events: EventQueue::default(),
            timing: NandTiming::new(cfg),
            counters: Counters::default(),
            credits: 0,
            gc_unit_ready: 0,
            gc_ready_scratch: Vec::new(),
            pacing: cfg.gc.pacing,
            threshold: cfg.gc.threshold_lines,
            seq: 0,
            b,
            dies: g.dies(),
            spu: g.slots_per_unit(),
            sru: g.slots_per_read_unit(),
        }
    }

    pub fn logical_blocks(&self) -> u64 {
        self.logical_blocks
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    pub fn busy(&self) -> BusyStats {
        self.timing.busy()
    }

    pub fn reset_counters(&mut self) {
        self.counters = Counters::default();
        self.timing.reset_busy();
    }

    pub fn free_lines(&self) -> u32 {
        self.lines.free_count()
    }

    pub fn lines(&self) -> &LineTable {
        &self.lines
    }

    pub fn mapping_name(&self) -> &'static str {
        self.mapping.name()
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    pub fn migration_upcalls(&self) -> bool {
        self.mapping.migration_upcalls()
    }

    /// Modelled device DRAM: (mapping, line metadata + valid bitmaps).
    pub fn memory_bytes(&self) -> (u64, u64) {
        (self.mapping.memory_bytes(), self.lines.memory_bytes())
    }

    pub fn events_mut(&mut self) -> &mut EventQueue {
        &mut self.events
    }

    /// Move pending device events into a completion's event list.
    pub fn drain_events(&mut self, out: &mut Vec<DeviceEvent>) {
        self.events.drain_into(out);
    }

    /// (die, cell index) of a physical page.
    fn place(&self, ppn: u64) -> (u32, u32) {
        let off = (ppn % u64::from(self.b)) as u32;
        let die = (off / self.spu) % self.dies;
        let unit = off / (self.spu * self.dies);
        let slot = off % self.spu;
        let spr = self.spu / self.sru;
        (die, unit * spr + slot / self.sru)
    }

    fn invalidate(&mut self, ppn: Ppn) {
        let p = u64::from(ppn.0);
        debug_assert_ne!(self.p2l[p as usize], INVALID);
        self.p2l[p as usize] = INVALID;
        self.lines.dec_vpc(LineId((p / u64::from(self.b)) as u32));
    }

    /// Next physical page of a stream's write pointer; opens a new line when needed.
    fn alloc(&mut self, stream: Stream, t: u64) -> Result<u64, EngineError> {
        let full = {
            let wp = match stream {
                Stream::Host => &self.host_wp,
                Stream::Gc => &self.gc_wp,
            };
            wp.line.is_none() || wp.off == self.b
        };
        if full {
            if stream == Stream::Host {
                // Keep one free line for GC destinations.
                if self.lines.free_count() <= 1 {
                    self.gc_until(2.max(self.threshold), t)?;
                }
            }
            let seq = self.seq;
            let wp = match stream {
                Stream::Host => &mut self.host_wp,
                Stream::Gc => &mut self.gc_wp,
            };
            if let Some(l) = wp.line.take() {
                self.lines.seal(l, seq);
            }
            let l = self
                .lines
                .open_free()
                .ok_or(EngineError::NoReclaimableSpace { free: 0 })?;
            let wp = match stream {
                Stream::Host => &mut self.host_wp,
                Stream::Gc => &mut self.gc_wp,
            };
            wp.line = Some(l);
            wp.off = 0;
        }
        let wp = match stream {
            Stream::Host => &mut self.host_wp,
            Stream::Gc => &mut self.gc_wp,
        };
        let line = wp.line.map_or(0, |l| l.0);
        let ppn = u64::from(line) * u64::from(self.b) + u64::from(wp.off);
        wp.off += 1;
        Ok(ppn)
    }

    /// Whether writing `ppn` closes its program unit.
    fn closes_unit(&self, ppn: u64) -> bool {
        (ppn % u64::from(self.b)) as u32 % self.spu == self.spu - 1
    }

    /// Collect one victim line at time `t`; returns the invalid slots it freed.
    fn gc_one(&mut self, t: u64) -> Result<u64, EngineError> {
        let victim =
            self.policy
                .select(&self.lines, self.seq)
                .ok_or(EngineError::NoReclaimableSpace {
                    free: self.lines.free_count(),
                })?;
        let vpc = self.lines.vpc(victim);
        if vpc >= self.b {
            return Err(EngineError::NoReclaimableSpace {
                free: self.lines.free_count(),
            });
        }
        self.lines.begin_victim(victim);
        let base = u64::from(victim.0) * u64::from(self.b);
        let sru = u64::from(self.sru);
        // Pass 1: read every read unit holding valid data. All reads are queued before any
        // GC program, as firmware does, so a die's reads never wait behind programs that
        // themselves wait for reads on other dies.
        let mut ready = std::mem::take(&mut self.gc_ready_scratch);
        ready.clear();
        for ru_start in (base..base + u64::from(self.b)).step_by(sru as usize) {
            let valid = (ru_start..ru_start + sru)
                .filter(|&p| self.p2l[p as usize] != INVALID)
                .count() as u64;
            if valid == 0 {
                ready.push(0);
                continue;
            }
            let (die, cell) = self.place(ru_start);
            let r = self
                .timing
                .read(die, cell, valid * MAP_UNIT, t, false, Work::Gc);
            self.counters.gc_read_ops += 1;
            self.counters.nand_read_bytes += valid * MAP_UNIT;
            ready.push(r);
        }
        // Pass 2: move the valid pages; a GC program waits only for the reads feeding it.
        for p in base..base + u64::from(self.b) {
            let lpn = self.p2l[p as usize];
            if lpn == INVALID {
                continue;
            }
            self.p2l[p as usize] = INVALID;
            self.lines.dec_vpc(victim);
            let new = self.alloc(Stream::Gc, t)?;
            let lpn2 = self
                .mapping
                .gc_moved(Lpn(lpn), Ppn(new as u32), &mut self.events);
            self.p2l[new as usize] = lpn2.0;
            self.lines.inc_vpc(LineId((new / u64::from(self.b)) as u32));
            self.counters.gc_pages_moved += 1;
            self.counters.nand_written_blocks += 1;
            self.gc_unit_ready = self.gc_unit_ready.max(ready[((p - base) / sru) as usize]);
            if self.closes_unit(new) {
                let (d, _) = self.place(new);
                self.timing.program(d, self.gc_unit_ready, Work::Gc);
                self.gc_unit_ready = 0;
                self.counters.nand_program_ops += 1;
            }
        }
        self.gc_ready_scratch = ready;
        for die in 0..self.dies {
            self.timing.erase(die, t);
        }
        self.counters.nand_erases += u64::from(self.dies);
        self.lines.finish_victim(victim);
        self.counters.gc_runs += 1;
        Ok(u64::from(self.b - vpc))
    }

    /// GC until at least `want` lines are free; returns the invalid slots freed.
    fn gc_until(&mut self, want: u32, t: u64) -> Result<u64, EngineError> {
        let mut freed = 0;
        while self.lines.free_count() < want {
            freed += self.gc_one(t)?;
        }
        Ok(freed)
    }

    /// Foreground GC check before one host page (write-credit pacing).
    fn maybe_gc(&mut self, t: u64) -> Result<(), EngineError> {
        if self.credits > 0 {
            self.credits -= 1;
            return Ok(());
        }
        if self.lines.free_count() < self.threshold {
            let freed = self.gc_until(self.threshold, t)?;
            if self.pacing {
                self.credits = freed.saturating_sub(1);
            }
        }
        Ok(())
    }

    fn sample_free(&mut self) {
        let b = u64::from(self.b);
        let open = |wp: &WritePointer| wp.line.map_or(0, |_| b - u64::from(wp.off));
        let free = u64::from(self.lines.free_count()) * b + open(&self.host_wp) + open(&self.gc_wp);
        self.counters.free_units_sum += u128::from(free);
        self.counters.free_units_samples += 1;
    }

    /// Host write of `n` blocks at `lpn` submitted at `t`; returns the completion time.
    pub fn write(&mut self, lpn: u64, n: u64, t: u64) -> Result<u64, EngineError> {
        self.counters.host_write_ops += 1;
        let seg_max = (self.timing.write_segment_bytes() / MAP_UNIT).max(1);
        let mut done = t;
        let mut last_prog = t;
        let mut seg_t = t;
        let mut i = 0;
        while i < n {
            let seg = (n - i).min(seg_max);
            let (start, tx) = self.timing.host_write_in(seg_t, seg * MAP_UNIT);
            seg_t = start;
            done = done.max(tx);
            for k in i..i + seg {
                self.write_page(lpn + k, start, tx, &mut last_prog)?;
            }
            i += seg;
        }
        if self.timing.early_completion() {
            Ok(done)
        } else {
            Ok(done.max(last_prog))
        }
    }

    fn write_page(
        &mut self,
        lpn: u64,
        t: u64,
        tx: u64,
        last_prog: &mut u64,
    ) -> Result<(), EngineError> {
        self.maybe_gc(t)?;
        self.sample_free();
        if let Some(old) = self.mapping.lookup(Lpn(lpn)) {
            self.invalidate(old);
        }
        let ppn = self.alloc(Stream::Host, t)?;
        self.mapping.map(Lpn(lpn), Ppn(ppn as u32));
        self.p2l[ppn as usize] = lpn;
        self.lines.inc_vpc(LineId((ppn / u64::from(self.b)) as u32));
        self.seq += 1;
        self.counters.host_write_blocks += 1;
        self.counters.nand_written_blocks += 1;
        if self.closes_unit(ppn) {
            let (die, _) = self.place(ppn);
            let end = self.timing.program(die, tx, Work::User);
            self.counters.nand_program_ops += 1;
            *last_prog = (*last_prog).max(end);
        }
        Ok(())
    }

    /// Host read of several extents `(lpn, blocks)` all submitted at `t` (in flight together);
    /// returns the completion time of the last.
    pub fn read(&mut self, extents: &[(u64, u64)], t: u64) -> u64 {
        let total: u64 = extents.iter().map(|e| e.1).sum();
        self.counters.host_read_ops += extents.len() as u64;
        self.counters.host_read_blocks += total;
        let per_req_bytes = extents.iter().map(|e| e.1 * MAP_UNIT).max().unwrap_or(0);
        let t0 = t + self.timing.fw_read(per_req_bytes);
        let mut done = t0;
        for &(lpn0, n) in extents {
            // Group consecutive blocks that sit in the same read unit into one NAND read.
            let mut group: Option<(u64, u64)> = None; // (read-unit id, blocks)
            for lpn in lpn0..lpn0 + n {
                let Some(ppn) = self.mapping.lookup(Lpn(lpn)) else {
                    self.counters.host_read_unmapped_blocks += 1;
                    continue;
                };
                let ru = u64::from(ppn.0) / u64::from(self.sru);
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
        done
    }

    fn read_unit(&mut self, ru: u64, blocks: u64, t0: u64) -> u64 {
        let (die, cell) = self.place(ru * u64::from(self.sru));
        self.counters.nand_read_ops += 1;
        self.counters.nand_read_bytes += blocks * MAP_UNIT;
        self.timing
            .read(die, cell, blocks * MAP_UNIT, t0, true, Work::User)
    }

    /// Discard `n` blocks at `lpn` at `t`; returns the completion time.
    pub fn discard(&mut self, lpn: u64, n: u64, t: u64) -> u64 {
        self.counters.host_discard_ops += 1;
        self.counters.host_discard_blocks += n;
        for l in lpn..lpn + n {
            if let Some(old) = self.mapping.unmap(Lpn(l)) {
                self.invalidate(old);
            }
        }
        t + self.timing.fw_trim()
    }

    /// Flush at `t`; returns when every accepted write is programmed.
    pub fn flush(&mut self, t: u64) -> u64 {
        self.counters.host_flush_ops += 1;
        self.timing.flush(t)
    }

    /// Check the invariants listed in the module header (for tests; O(physical size)).
    pub fn check_invariants(&self) -> Result<(), String> {
        let b = u64::from(self.b);
        let mut vpc = vec![0u32; self.lines.lines() as usize];
        for (p, &lpn) in self.p2l.iter().enumerate() {
            if lpn == INVALID {
                continue;
            }
            if self.mapping.lookup(Lpn(lpn)) != Some(Ppn(p as u32)) {
                return Err(format!("p2l[{p}] = {lpn} but the map disagrees"));
            }
            vpc[(p as u64 / b) as usize] += 1;
        }
        for (l, &v) in vpc.iter().enumerate() {
            if self.lines.vpc(LineId(l as u32)) != v {
                return Err(format!(
                    "line {l}: vpc {} but {v} valid pages",
                    self.lines.vpc(LineId(l as u32))
                ));
            }
        }
        for lpn in 0..self.logical_blocks {
            if let Some(p) = self.mapping.lookup(Lpn(lpn)) {
                if self.p2l[p.0 as usize] != lpn {
                    return Err(format!("lpn {lpn} maps to {} whose p2l differs", p.0));
                }
            }
        }
        Ok(())
    }
}
