//! FTL building blocks: the logical-to-physical [`Mapping`] trait and its 4 KiB page map, the
//! [`VictimPolicy`] trait with greedy and cost-benefit policies, the [`LineTable`] (superblock
//! states, valid counts, free list, greedy buckets), and the device-event queue.
//!
//! Variants plug in here: a D2FS coupled-GC FTL implements [`Mapping::gc_moved`] to give a
//! migrated page a new logical address in its GC region and push a
//! [`DeviceEvent::Migrated`] record; an IPLFS interval-mapping FTL replaces the flat page map by
//! a sparse tree behind the same trait. The engine (see `engine.rs`) never looks inside.
//!
//! Invariants:
//! - [`PageMap`]: `l2p[lpn]` is `UNMAPPED` or a physical page whose reverse entry is `lpn`.
//! - [`LineTable`]: a line is in exactly one state; only `Sealed` lines are in the greedy
//!   buckets, in the bucket of their valid count; `vpc <= slots_per_line`; the free list holds
//!   exactly the `Free` lines.
//!
//! Lock order: none (owned by the engine, under its lock).

pub mod interval;

use std::cell::Cell;
use std::collections::VecDeque;

use flashlog_dev::DeviceEvent;

/// Logical page number (4 KiB logical block address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lpn(pub u64);

/// Physical page number: `line * slots_per_line + offset_in_line`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ppn(pub u32);

/// Line (superblock) number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineId(pub u32);

/// Device-to-host events waiting to ride on the next completion.
#[derive(Debug, Default)]
pub struct EventQueue {
    pending: VecDeque<DeviceEvent>,
}

impl EventQueue {
    pub fn push(&mut self, ev: DeviceEvent) {
        self.pending.push_back(ev);
    }
    pub fn len(&self) -> usize {
        self.pending.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
    /// Move every pending event into `out` (called when a request completes).
    pub fn drain_into(&mut self, out: &mut Vec<DeviceEvent>) {
        out.extend(self.pending.drain(..));
    }
}

/// Logical-to-physical mapping of one FTL variant.
pub trait Mapping: Send {
    fn name(&self) -> &'static str;
    /// Size of the logical space in 4 KiB blocks.
    fn logical_blocks(&self) -> u64;
    fn lookup(&self, lpn: Lpn) -> Option<Ppn>;
    /// Map `lpn` to `ppn`; returns the previous physical page.
    fn map(&mut self, lpn: Lpn, ppn: Ppn) -> Option<Ppn>;
    /// Remove the mapping of `lpn`; returns the physical page it had.
    fn unmap(&mut self, lpn: Lpn) -> Option<Ppn>;
    /// GC moved the live page of `lpn` to `to`. Returns the logical address the page has now
    /// (a D2FS coupled GC gives it a new one in its GC region and pushes a migration event).
    fn gc_moved(&mut self, lpn: Lpn, to: Ppn, _events: &mut EventQueue) -> Lpn {
        self.map(lpn, to);
        lpn
    }
    /// Modelled device DRAM of the mapping structures, in bytes.
    fn memory_bytes(&self) -> u64;
    /// Whether completions may carry migration events.
    fn migration_upcalls(&self) -> bool {
        false
    }
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
        match self.l2p.get(lpn.0 as usize) {
            Some(&p) if p != UNMAPPED => Some(Ppn(p)),
            _ => None,
        }
    }
    fn map(&mut self, lpn: Lpn, ppn: Ppn) -> Option<Ppn> {
        let slot = self.l2p.get_mut(lpn.0 as usize)?;
        let old = std::mem::replace(slot, ppn.0);
        (old != UNMAPPED).then_some(Ppn(old))
    }
    fn unmap(&mut self, lpn: Lpn) -> Option<Ppn> {
        let slot = self.l2p.get_mut(lpn.0 as usize)?;
        let old = std::mem::replace(slot, UNMAPPED);
        (old != UNMAPPED).then_some(Ppn(old))
    }
    fn memory_bytes(&self) -> u64 {
        self.l2p.len() as u64 * 4
    }
}

/// State of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineState {
    Free,
    /// Being filled by a write pointer.
    Open,
    /// Full; a GC candidate.
    Sealed,
    /// Being collected.
    Victim,
}

const NIL: u32 = u32::MAX;

/// Per-line bookkeeping, the free list and greedy buckets by valid count.
#[derive(Debug)]
pub struct LineTable {
    b: u32,
    vpc: Vec<u32>,
    state: Vec<LineState>,
    /// Host-write sequence number when the line was sealed (age for cost-benefit).
    sealed_at: Vec<u64>,
    erase_count: Vec<u32>,
    bucket_head: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// No sealed line has a valid count below this.
    min_hint: Cell<u32>,
    free: VecDeque<u32>,
    sealed: u32,
}

impl LineTable {
    pub fn new(lines: u32, slots_per_line: u32) -> Self {
        let n = lines as usize;
        LineTable {
            b: slots_per_line,
            vpc: vec![0; n],
            state: vec![LineState::Free; n],
            sealed_at: vec![0; n],
            erase_count: vec![0; n],
            bucket_head: vec![NIL; slots_per_line as usize + 1],
            next: vec![NIL; n],
            prev: vec![NIL; n],
            min_hint: Cell::new(0),
            free: (0..lines).collect(),
            sealed: 0,
        }
    }

    pub fn lines(&self) -> u32 {
        self.vpc.len() as u32
    }
    pub fn slots_per_line(&self) -> u32 {
        self.b
    }
    pub fn vpc(&self, l: LineId) -> u32 {
        self.vpc[l.0 as usize]
    }
    pub fn state(&self, l: LineId) -> LineState {
        self.state[l.0 as usize]
    }
    pub fn sealed_at(&self, l: LineId) -> u64 {
        self.sealed_at[l.0 as usize]
    }
    pub fn erase_count(&self, l: LineId) -> u32 {
        self.erase_count[l.0 as usize]
    }
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }
    pub fn sealed_count(&self) -> u32 {
        self.sealed
    }

    fn link(&mut self, l: u32) {
        let v = self.vpc[l as usize];
        let head = self.bucket_head[v as usize];
        self.next[l as usize] = head;
        self.prev[l as usize] = NIL;
        if head != NIL {
            self.prev[head as usize] = l;
        }
        self.bucket_head[v as usize] = l;
        if v < self.min_hint.get() {
            self.min_hint.set(v);
        }
    }

    fn unlink(&mut self, l: u32) {
        let v = self.vpc[l as usize];
        let (p, n) = (self.prev[l as usize], self.next[l as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.bucket_head[v as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }

    /// Take a free line and open it for writing.
    pub fn open_free(&mut self) -> Option<LineId> {
        let l = self.free.pop_front()?;
        debug_assert_eq!(self.state[l as usize], LineState::Free);
        self.state[l as usize] = LineState::Open;
        Some(LineId(l))
    }

    /// A written-full open line becomes a GC candidate.
    pub fn seal(&mut self, l: LineId, now_seq: u64) {
        debug_assert_eq!(self.state(l), LineState::Open);
        self.state[l.0 as usize] = LineState::Sealed;
        self.sealed_at[l.0 as usize] = now_seq;
        self.sealed += 1;
        self.link(l.0);
    }

    pub fn inc_vpc(&mut self, l: LineId) {
        let i = l.0 as usize;
        debug_assert!(self.vpc[i] < self.b);
        if self.state[i] == LineState::Sealed {
            self.unlink(l.0);
            self.vpc[i] += 1;
            self.link(l.0);
        } else {
            self.vpc[i] += 1;
        }
    }

    pub fn dec_vpc(&mut self, l: LineId) {
        let i = l.0 as usize;
        debug_assert!(self.vpc[i] > 0);
        if self.state[i] == LineState::Sealed {
            self.unlink(l.0);
            self.vpc[i] -= 1;
            self.link(l.0);
        } else {
            self.vpc[i] -= 1;
        }
    }

    /// Mark a sealed line as the current GC victim.
    pub fn begin_victim(&mut self, l: LineId) {
        debug_assert_eq!(self.state(l), LineState::Sealed);
        self.unlink(l.0);
        self.sealed -= 1;
        self.state[l.0 as usize] = LineState::Victim;
    }

    /// The victim has no valid page left: erase it and return it to the free list.
    pub fn finish_victim(&mut self, l: LineId) {
        let i = l.0 as usize;
        debug_assert_eq!(self.state[i], LineState::Victim);
        debug_assert_eq!(self.vpc[i], 0);
        self.state[i] = LineState::Free;
        self.erase_count[i] += 1;
        self.free.push_back(l.0);
    }

    /// Sealed line with the fewest valid pages (greedy), O(1) amortised.
    pub fn min_vpc_sealed(&self) -> Option<LineId> {
        if self.sealed == 0 {
            return None;
        }
        let mut v = self.min_hint.get() as usize;
        while v < self.bucket_head.len() {
            let h = self.bucket_head[v];
            if h != NIL {
                self.min_hint.set(v as u32);
                return Some(LineId(h));
            }
            v += 1;
        }
        None
    }

    /// Every sealed line.
    pub fn sealed_lines(&self) -> impl Iterator<Item = LineId> + '_ {
        self.state
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == LineState::Sealed)
            .map(|(i, _)| LineId(i as u32))
    }

    /// Modelled device DRAM for line metadata and per-slot valid bitmaps.
    pub fn memory_bytes(&self) -> u64 {
        let n = u64::from(self.lines());
        // vpc + erase count + age + state per line, one valid bit per slot.
        n * (4 + 4 + 8 + 1) + n * u64::from(self.b).div_ceil(8)
    }
}

/// GC victim selection.
pub trait VictimPolicy: Send {
    fn name(&self) -> &'static str;
    /// Choose a sealed line; `now_seq` is the host-write sequence number (age clock).
    fn select(&mut self, lines: &LineTable, now_seq: u64) -> Option<LineId>;
}

/// Fewest valid pages.
#[derive(Debug, Default)]
pub struct Greedy;

impl VictimPolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn select(&mut self, lines: &LineTable, _now_seq: u64) -> Option<LineId> {
        lines.min_vpc_sealed()
    }
}

/// Largest (1−u)·age/(1+u), u = valid fraction, age in host writes since sealing.
#[derive(Debug, Default)]
pub struct CostBenefit;

impl VictimPolicy for CostBenefit {
    fn name(&self) -> &'static str {
        "cost-benefit"
    }
    fn select(&mut self, lines: &LineTable, now_seq: u64) -> Option<LineId> {
        let b = f64::from(lines.slots_per_line());
        let mut best: Option<(f64, LineId)> = None;
        for l in lines.sealed_lines() {
            let u = f64::from(lines.vpc(l)) / b;
            let age = (now_seq.saturating_sub(lines.sealed_at(l)) + 1) as f64;
            let score = (1.0 - u) * age / (1.0 + u);
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, l));
            }
        }
        best.map(|(_, l)| l)
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
        assert_eq!(m.memory_bytes(), 32);
    }

    #[test]
    fn greedy_buckets_track_valid_counts() {
        let mut t = LineTable::new(4, 8);
        let mut opened = vec![];
        for _ in 0..3 {
            let l = t.open_free().unwrap();
            for _ in 0..8 {
                t.inc_vpc(l);
            }
            t.seal(l, 0);
            opened.push(l);
        }
        assert_eq!(t.free_count(), 1);
        t.dec_vpc(opened[1]);
        t.dec_vpc(opened[1]);
        t.dec_vpc(opened[2]);
        assert_eq!(Greedy.select(&t, 0), Some(opened[1]));
        t.begin_victim(opened[1]);
        for _ in 0..6 {
            t.dec_vpc(opened[1]);
        }
        t.finish_victim(opened[1]);
        assert_eq!(t.free_count(), 2);
        assert_eq!(Greedy.select(&t, 0), Some(opened[2]));
        // Cost-benefit prefers an old line over a slightly emptier young one.
        let mut t = LineTable::new(2, 8);
        let a = t.open_free().unwrap();
        for _ in 0..8 {
            t.inc_vpc(a);
        }
        t.seal(a, 0);
        let b = t.open_free().unwrap();
        for _ in 0..8 {
            t.inc_vpc(b);
        }
        t.seal(b, 1000);
        t.dec_vpc(a);
        t.dec_vpc(b);
        t.dec_vpc(b);
        assert_eq!(CostBenefit.select(&t, 1001), Some(a));
        assert_eq!(Greedy.select(&t, 1001), Some(b));
    }
}
