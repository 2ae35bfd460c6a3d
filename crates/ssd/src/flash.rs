//! The NAND back-end every FTL runs on: the timing model, the line table, the reverse map
//! (physical page → logical page, standing in for the OOB area), the operation counters and
//! the device-event queue, with the primitive steps an FTL composes: program a host page,
//! invalidate a page, collect a victim line (read pass, moves, erase), reset a line, charge
//! firmware time.
//!
//! Physical layout: `ppn = line * b + off`, `off = (unit * dies + die) * spu + slot`, so
//! filling a line in offset order fills one program unit (`spu` slots) on a die, then moves to
//! the next die (channel-first numbering, so the next channel), then to the next unit index. A
//! read unit is `sru` consecutive slots, so `ppn / sru` names it.
//!
//! Invariants:
//! - a line's `vpc` equals the number of valid (`!= INVALID`) entries of its `p2l` range;
//! - a program unit is programmed (timed) when its last slot is written, by whoever writes it;
//! - GC moves are recorded in `relocations` (old, new logical address) whenever the logical
//!   address changes, so the device moves the stored contents before releasing its lock.
//!
//! Lock order: none (owned by the engine, under its lock).

use crate::config::{SsdConfig, MAP_UNIT};
use crate::engine::Counters;
use crate::ftl::{EventQueue, FtlError, LineId, LineTable, Ppn};
use crate::timing::{NandTiming, Work};

/// Reverse-map entry of a slot holding no valid data.
pub const INVALID: u64 = u64::MAX;

/// An ongoing collection of one victim line (see [`Flash::gc_begin`]).
#[derive(Debug)]
pub struct GcRun {
    pub victim: LineId,
    /// Valid pages when the run began.
    pub vpc: u32,
    base: u64,
    /// Read-completion time per read unit of the victim (0: nothing valid in it).
    ready: Vec<u64>,
}

impl GcRun {
    /// The victim's physical pages, in offset order.
    pub fn slots(&self, b: u32) -> std::ops::Range<u64> {
        self.base..self.base + u64::from(b)
    }
}

/// The shared NAND back-end.
pub struct Flash {
    pub timing: NandTiming,
    pub lines: LineTable,
    p2l: Vec<u64>,
    pub counters: Counters,
    pub events: EventQueue,
    /// Host-write sequence number: the age clock of cost-benefit.
    pub seq: u64,
    /// Per GC destination line with a partly programmed unit: when the data of that open
    /// program unit is all in the controller. One entry per destination line an FTL fills
    /// (the coupled FTL keeps one per block-type stream), so the streams' units wait only for
    /// the reads that fed them; an entry goes when its unit is programmed.
    gc_unit_ready: Vec<(LineId, u64)>,
    gc_ready_scratch: Vec<u64>,
    /// Logical-address changes made by GC moves since the device last drained them.
    pub relocations: Vec<(u64, u64)>,
    /// Logical addresses whose stored contents died without a host discard of that address
    /// (a discard redirected through a migration record).
    pub dropped: Vec<u64>,
    /// The controller is busy with firmware work (IPLFS map compaction) until then: requests
    /// submitted earlier start only then (the I/O stall of compaction).
    pub firmware_until: u64,
    /// Latest completion of any host request so far (idle GC's "quiet since": a write
    /// completed early from the buffer, or a read's last link transfer, ends after the dies
    /// are free).
    pub last_done: u64,
    b: u32,
    dies: u32,
    spu: u32,
    sru: u32,
}

impl Flash {
    pub fn new(cfg: &SsdConfig) -> Self {
        let g = &cfg.geometry;
        let b = g.slots_per_line() as u32;
        Flash {
            timing: NandTiming::new(cfg),
            lines: LineTable::new(g.lines() as u32, b),
            p2l: vec![INVALID; g.physical_slots() as usize],
            counters: Counters::default(),
            events: EventQueue::default(),
            seq: 0,
            gc_unit_ready: Vec::new(),
            gc_ready_scratch: Vec::new(),
            relocations: Vec::new(),
            dropped: Vec::new(),
            firmware_until: 0,
            last_done: 0,
            b,
            dies: g.dies(),
            spu: g.slots_per_unit(),
            sru: g.slots_per_read_unit(),
        }
    }

    /// Mapping units per line (`b`).
    pub fn slots_per_line(&self) -> u32 {
        self.b
    }

    pub fn line_of(&self, ppn: Ppn) -> LineId {
        LineId(ppn.0 / self.b)
    }

    pub fn ppn(&self, line: LineId, off: u32) -> Ppn {
        debug_assert!(off < self.b);
        Ppn(line.0 * self.b + off)
    }

    /// The logical page a physical page holds valid data for.
    pub fn owner(&self, ppn: Ppn) -> Option<u64> {
        match self.p2l.get(ppn.0 as usize) {
            Some(&l) if l != INVALID => Some(l),
            _ => None,
        }
    }

    /// Every physical page with valid data, as (ppn, lpn) (tests; O(physical size)).
    pub fn valid_pages(&self) -> impl Iterator<Item = (Ppn, u64)> + '_ {
        self.p2l
            .iter()
            .enumerate()
            .filter(|(_, &l)| l != INVALID)
            .map(|(p, &l)| (Ppn(p as u32), l))
    }

    /// (die, cell index) of a physical page.
    pub fn place(&self, ppn: u64) -> (u32, u32) {
        let off = (ppn % u64::from(self.b)) as u32;
        let die = (off / self.spu) % self.dies;
        let unit = off / (self.spu * self.dies);
        let slot = off % self.spu;
        let spr = self.spu / self.sru;
        (die, unit * spr + slot / self.sru)
    }

    /// Mapping units per read unit.
    pub fn slots_per_read_unit(&self) -> u64 {
        u64::from(self.sru)
    }

    /// Read unit of a physical page (consecutive blocks in one read unit share a NAND read).
    pub fn read_unit_of(&self, ppn: Ppn) -> u64 {
        u64::from(ppn.0) / u64::from(self.sru)
    }

    /// Whether writing `ppn` closes its program unit.
    pub fn closes_unit(&self, ppn: u64) -> bool {
        (ppn % u64::from(self.b)) as u32 % self.spu == self.spu - 1
    }

    /// The page's data is dead (overwritten, discarded, moved).
    pub fn invalidate(&mut self, ppn: Ppn) {
        let p = ppn.0 as usize;
        debug_assert_ne!(self.p2l[p], INVALID);
        self.p2l[p] = INVALID;
        self.lines.dec_vpc(self.line_of(ppn));
    }

    /// Program a host page at `ppn` for `lpn`, data in the device at `tx`. Returns the program
    /// end if it closed a program unit.
    pub fn program_host(&mut self, ppn: Ppn, lpn: u64, tx: u64) -> Option<u64> {
        debug_assert_eq!(self.p2l[ppn.0 as usize], INVALID);
        self.p2l[ppn.0 as usize] = lpn;
        self.lines.inc_vpc(self.line_of(ppn));
        self.seq += 1;
        self.counters.host_write_blocks += 1;
        self.counters.nand_written_blocks += 1;
        if self.closes_unit(u64::from(ppn.0)) {
            let (die, _) = self.place(u64::from(ppn.0));
            let end = self.timing.program(die, tx, Work::User);
            self.counters.nand_program_ops += 1;
            return Some(end);
        }
        None
    }

    /// Start collecting `victim` at `t`: refuses a line without an invalid page, marks it the
    /// victim, and queues a read of every read unit holding valid data. All reads are queued
    /// before any GC program, as firmware does, so a die's reads never wait behind programs
    /// that themselves wait for reads on other dies.
    pub fn gc_begin(&mut self, victim: LineId, t: u64) -> Result<GcRun, FtlError> {
        let vpc = self.lines.vpc(victim);
        if vpc >= self.b {
            return Err(FtlError::NoReclaimableSpace {
                free: self.lines.free_count(),
            });
        }
        self.lines.begin_victim(victim);
        let base = u64::from(victim.0) * u64::from(self.b);
        let sru = u64::from(self.sru);
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
        Ok(GcRun {
            victim,
            vpc,
            base,
            ready,
        })
    }

    /// Take the valid page at victim slot `p` out of the victim (its logical page), if any.
    pub fn gc_take(&mut self, run: &GcRun, p: u64) -> Option<u64> {
        let lpn = self.p2l[p as usize];
        if lpn == INVALID {
            return None;
        }
        self.p2l[p as usize] = INVALID;
        self.lines.dec_vpc(run.victim);
        Some(lpn)
    }

    /// Program the page taken from victim slot `from` at `to`, now holding `lpn`. A GC program
    /// waits only for the reads that fed its own unit.
    pub fn gc_place(&mut self, run: &GcRun, from: u64, to: Ppn, lpn: u64) {
        debug_assert_eq!(self.p2l[to.0 as usize], INVALID);
        self.p2l[to.0 as usize] = lpn;
        self.lines.inc_vpc(self.line_of(to));
        self.counters.gc_pages_moved += 1;
        self.counters.nand_written_blocks += 1;
        let ru = ((from - run.base) / u64::from(self.sru)) as usize;
        let dst = self.line_of(to);
        let i = match self.gc_unit_ready.iter().position(|e| e.0 == dst) {
            Some(i) => i,
            None => {
                self.gc_unit_ready.push((dst, 0));
                self.gc_unit_ready.len() - 1
            }
        };
        self.gc_unit_ready[i].1 = self.gc_unit_ready[i].1.max(run.ready[ru]);
        if self.closes_unit(u64::from(to.0)) {
            let (_, ready) = self.gc_unit_ready.swap_remove(i);
            let (d, _) = self.place(u64::from(to.0));
            self.timing.program(d, ready, Work::Gc);
            self.counters.nand_program_ops += 1;
        }
    }

    /// Finish a collection: every die erases its block of the victim, which becomes free.
    /// Returns the invalid slots freed.
    pub fn gc_end(&mut self, run: GcRun, t: u64) -> u64 {
        for die in 0..self.dies {
            self.timing.erase(die, t);
        }
        self.counters.nand_erases += u64::from(self.dies);
        self.lines.finish_victim(run.victim);
        self.counters.gc_runs += 1;
        self.gc_ready_scratch = run.ready;
        u64::from(self.b - run.vpc)
    }

    /// Reset an open or sealed line without valid data (zone reset): erase, free.
    pub fn reset_line(&mut self, line: LineId, t: u64) {
        for die in 0..self.dies {
            self.timing.erase(die, t);
        }
        self.counters.nand_erases += u64::from(self.dies);
        self.lines.release(line);
    }

    /// Charge `ns` of firmware work starting no earlier than `t` to every die (the FTL core
    /// cannot serve NAND commands meanwhile), e.g. IPLFS map compaction; requests submitted
    /// before it ends start when it ends ([`Flash::firmware_until`]).
    /// A stall already charged (every request during a compaction asks again with what is
    /// left of it) adds nothing: each die is held until the stall's end, once, and a die
    /// busy past it keeps its own end (review 2026-11-27: each request during one
    /// compaction held every die for the whole cost again). Returns the time newly
    /// charged (0: that stall was charged already).
    pub fn firmware_busy(&mut self, t: u64, ns: u64) -> u64 {
        let end = t.saturating_add(ns);
        if end <= self.firmware_until {
            return 0;
        }
        let from = self.firmware_until.max(t);
        self.firmware_until = end;
        for die in 0..self.dies {
            self.timing.occupy_until(die, from, end);
        }
        end - from
    }

    /// Sample the spare units for the effective-OP measurement (one sample per host page).
    pub fn sample_free(&mut self, spare_units: u64) {
        self.counters.free_units_sum += u128::from(spare_units);
        self.counters.free_units_samples += 1;
    }

    /// Check that each line's valid count matches the reverse map.
    pub fn check_counts(&self) -> Result<(), String> {
        let b = u64::from(self.b);
        let mut vpc = vec![0u32; self.lines.lines() as usize];
        for (p, &lpn) in self.p2l.iter().enumerate() {
            if lpn != INVALID {
                vpc[(p as u64 / b) as usize] += 1;
            }
        }
        for (l, &v) in vpc.iter().enumerate() {
            if self.lines.vpc(LineId(l as u32)) != v {
                return Err(format!(
                    "line {l}: vpc {} but {v} valid pages",
                    self.lines.vpc(LineId(l as u32))
                ));
            }
        }
        Ok(())
    }
}
