//! The FTL plug-in point: the [`Ftl`] trait every flash translation layer implements, and the
//! building blocks they share: logical/physical page numbers, the [`LineTable`] (superblock
//! states, valid counts, free list, greedy buckets), the [`VictimPolicy`] trait with greedy,
//! cost-benefit (LFS's and Kawaguchi's for flash), FIFO, random and d-choices policies, the device-event queue, FTL errors
//! and statistics.
//!
//! One folder, one file per FTL: `page` (page mapping, NVMeVirt's conventional FTL), `zoned`
//! (ZNS-style block-mapped zones, no device GC), `coupled` (D2FS coupled GC with migration
//! records and upcalls); an IPLFS interval-mapping FTL goes in `interval`. Every FTL runs over
//! the same [`Flash`] back-end (`flash.rs`: NAND timing, line table, reverse map, counters),
//! so timing, statistics and power cuts are the same for all of them.
//!
//! Invariants:
//! - [`LineTable`]: a line is in exactly one state; only `Sealed` lines are in the greedy
//!   buckets, in the bucket of their valid count; `vpc <= slots_per_line`; the free list holds
//!   exactly the `Free` lines.
//! - An FTL's `lookup(lpn) == Some(ppn)` iff the flash reverse map says `ppn` holds `lpn`
//!   (checked by `Engine::check_invariants` and each FTL's `check_invariants`).
//!
//! Lock order: none (owned by the engine, under the device's engine lock).

pub mod conv;
pub mod coupled;
pub mod page;
pub mod zoned;

pub mod interval;

use std::cell::Cell;
use std::collections::VecDeque;

use serde::Serialize;

use crate::flash::Flash;
use crate::workload::Rng;
use flashlog_dev::{DeviceEvent, WriteHint};

pub use coupled::{CoupledConfig, CoupledFtl};
pub use interval::{
    IntervalConfig, IntervalMap, IntervalMemory, IntervalStats, LiveInterval, MapNodeLayouts,
};
pub use page::{Mapping, PageFtl, PageMap};
pub use zoned::{ZonedConfig, ZonedFtl};

/// Logical page number (4 KiB logical block address). 64-bit: a logical space of up to 2^64
/// blocks (IPLFS) is representable.
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
    /// Forget every undelivered event (power cut: the completion queue is volatile).
    pub fn clear(&mut self) {
        self.pending.clear();
    }
    /// Keep only the events `f` accepts.
    pub fn retain(&mut self, f: impl FnMut(&DeviceEvent) -> bool) {
        self.pending.retain(f);
    }
    /// Move every pending event into `out` (called when a request completes).
    pub fn drain_into(&mut self, out: &mut Vec<DeviceEvent>) {
        out.extend(self.pending.drain(..));
    }
}

/// FTL and engine errors. Each is final for its request and leaves the FTL consistent (a
/// refused request changes nothing).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FtlError {
    #[error("no reclaimable space: every candidate line is fully valid (free lines {free}); discard data to make room")]
    NoReclaimableSpace { free: u32 },
    /// The request breaks the FTL's rules (e.g. a non-sequential write in a zone).
    #[error("{0}")]
    Refused(String),
    /// The FTL does not offer this operation.
    #[error("not supported by the {ftl} FTL: {what}")]
    Unsupported {
        ftl: &'static str,
        what: &'static str,
    },
}

/// Modelled device DRAM of an FTL's own structures.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FtlMemory {
    /// Logical-to-physical mapping structures.
    pub mapping_bytes: u64,
    /// Outstanding migration records (D2FS), 0 elsewhere.
    pub record_bytes: u64,
}

/// One region of an FTL's logical space and how full it is (read-only report, e.g. the D2FS
/// regular and GC regions of bench `vop`, paper Fig. 11).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RegionUsage {
    /// "conventional", "regular" or "gc".
    pub name: &'static str,
    /// Logical blocks of the region, and its zones.
    pub blocks: u64,
    pub zones: u64,
    /// Zones that hold a flash line now (written and not yet reclaimed or reset).
    pub zones_in_use: u64,
    /// Valid 4 KiB blocks on flash that belong to the region.
    pub valid_blocks: u64,
}

/// FTL-specific counters (zero where an FTL has no such thing). Cumulative since the last
/// statistics reset, except the `*_now` and `*_peak` gauges.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FtlStats {
    /// Zone resets (zoned, coupled).
    pub zone_resets: u64,
    /// Migration records created by coupled GC.
    pub records_created: u64,
    /// Records whose page moved again before they were sent (rewritten in place).
    pub records_merged: u64,
    /// Buffered records dropped because the host discarded the page.
    pub records_dropped: u64,
    /// Records freed by a host acknowledgement.
    pub records_acked: u64,
    /// Records now buffered or in flight, and the peak since the reset.
    pub records_now: u64,
    pub records_peak: u64,
    /// Upcalls (batches) sent, re-sent after a power cut or on request, and acknowledged.
    pub upcalls_sent: u64,
    pub upcalls_resent: u64,
    pub upcalls_acked: u64,
    /// Host reads and discards of an old address served through a migration record.
    pub reads_redirected: u64,
    pub discards_redirected: u64,
    /// Coupled GC: regular-region victims collected because the region's free zones fell
    /// below its watermark (`regular_free_zones`), not for free lines.
    pub regular_gc_runs: u64,
    /// Coupled GC: pages moved that the host wrote with the node hint (they went to the node
    /// stream's destinations; the rest of `Counters::gc_pages_moved` to the data stream's).
    pub gc_node_pages_moved: u64,
    /// Page FTL: victims collected on the emergency path (the host about to take the last free
    /// line), outside the write-credit pacing.
    pub gc_emergency_runs: u64,
    /// Page FTL: victims collected by idle-time GC (`gc_idle`), in the gaps between requests.
    pub gc_idle_runs: u64,
    /// Background work (e.g. IPLFS map compaction): runs and device time charged.
    pub background_runs: u64,
    pub background_ns: u64,
    /// IPLFS interval map: tree sizes by level, live intervals, compaction counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<IntervalStats>,
}

/// A flash translation layer over the shared [`Flash`] back-end.
///
/// The engine calls, for every request: [`Ftl::background`] at submission; then for a write
/// [`Ftl::check_write`] on the whole request (nothing changes if it is refused) and
/// [`Ftl::write_page`] per 4 KiB page; for a read [`Ftl::read_lookup`] per block; for a discard
/// [`Ftl::discard`]; for a flush [`Ftl::flush`]. Device GC is the FTL's business (it calls the
/// `Flash::gc_*` steps, which charge the NAND time).
pub trait Ftl: Send {
    fn name(&self) -> &'static str;
    /// Victim policy name, or "none" for an FTL without device GC.
    fn policy_name(&self) -> &'static str;
    /// Size of the logical space in 4 KiB blocks (may exceed the physical space: virtual
    /// overprovisioning, or up to 2^64 − 1 for IPLFS).
    fn logical_blocks(&self) -> u64;
    /// The logical space is effectively infinite and never needs reusing (IPLFS):
    /// `Capabilities::infinite_space`.
    fn infinite_space(&self) -> bool {
        false
    }
    /// Blocks per zone when the FTL exposes zones (zoned, coupled), else 0.
    fn zone_blocks(&self) -> u64 {
        0
    }
    /// Blocks at the start of the logical space that accept writes anywhere (page-mapped);
    /// the rest follows the FTL's zone rules. Equal to `logical_blocks` for page mapping.
    fn conventional_blocks(&self) -> u64 {
        self.logical_blocks()
    }
    /// Blocks at the end of the logical space that only the device allocates (the D2FS GC
    /// region), else 0.
    fn gc_region_blocks(&self) -> u64 {
        0
    }
    /// Refuse a host write of `n` blocks at `lpn` that breaks the FTL's rules, before
    /// anything changes.
    fn check_write(&self, _lpn: u64, _n: u64) -> Result<(), FtlError> {
        Ok(())
    }
    /// Place and program one host page whose data is in the device at `tx` (buffer claimed at
    /// `t`); returns the program end if this page closed a program unit. `hint` is the block
    /// type the host sent with the write (advisory; an FTL without streams ignores it).
    fn write_page(
        &mut self,
        flash: &mut Flash,
        lpn: Lpn,
        t: u64,
        tx: u64,
        hint: WriteHint,
    ) -> Result<Option<u64>, FtlError>;
    /// Where `lpn`'s live data sits (the mapping alone, no redirects).
    fn lookup(&self, flash: &Flash, lpn: Lpn) -> Option<Ppn>;
    /// Where a host read of `lpn` finds its data: `(physical page, logical address the content
    /// is kept under)`. Differs from `lookup` only for FTLs that redirect (D2FS).
    fn read_lookup(&mut self, flash: &Flash, lpn: Lpn) -> Option<(Ppn, Lpn)> {
        self.lookup(flash, lpn).map(|p| (p, lpn))
    }
    /// Discard `n` blocks at `lpn` (at time `t`).
    fn discard(&mut self, flash: &mut Flash, lpn: u64, n: u64, t: u64) -> Result<(), FtlError>;
    /// A flush at `t` (e.g. D2FS sends its partly filled upcall batch).
    fn flush(&mut self, _flash: &mut Flash, _t: u64) {}
    /// Background work due at `t` (e.g. IPLFS map compaction). It charges its device time
    /// through `Flash::firmware_busy`, so requests queue behind it.
    fn background(&mut self, _flash: &mut Flash, _t: u64) -> Result<(), FtlError> {
        Ok(())
    }
    /// Modelled device DRAM of the FTL's structures.
    fn memory(&self) -> FtlMemory;
    fn stats(&self) -> FtlStats {
        FtlStats::default()
    }
    fn reset_stats(&mut self) {}
    /// Whether completions may carry [`DeviceEvent::Migrated`] upcalls.
    fn migration_upcalls(&self) -> bool {
        false
    }
    /// The host applied and checkpointed every upcall with id `<= upto`: forget their records.
    /// Returns the number of records freed.
    fn ack_migrations(&mut self, _upto: u64) -> Result<u64, FtlError> {
        Err(FtlError::Unsupported {
            ftl: self.name(),
            what: "migration upcalls",
        })
    }
    /// Queue every sent but unacknowledged upcall again, in order, with its id (host restart).
    fn resend_migrations(&mut self, _flash: &mut Flash) -> Result<(), FtlError> {
        Err(FtlError::Unsupported {
            ftl: self.name(),
            what: "migration upcalls",
        })
    }
    /// Power came back after a cut. Volatile device state (undelivered events) is already
    /// gone; capacitor-backed FTL state (mapping, migration records) survives, and an FTL with
    /// upcalls queues its unacknowledged ones again.
    fn power_cycle(&mut self, _flash: &mut Flash) {}
    /// Spare 4 KiB units not holding data or garbage (free lines plus unwritten parts of the
    /// lines the FTL keeps open), for the effective-OP measurement.
    fn spare_units(&self, flash: &Flash) -> u64 {
        u64::from(flash.lines.free_count()) * u64::from(flash.slots_per_line())
    }
    /// The regions of the logical space and their fill, for reports (O(zones)); empty for an
    /// FTL without regions. Read-only.
    fn region_usage(&self, _flash: &Flash) -> Vec<RegionUsage> {
        Vec::new()
    }
    /// Check the FTL's own invariants against the flash state (tests; may be O(size)).
    fn check_invariants(&self, flash: &Flash) -> Result<(), String>;
    /// Every logical block the map holds, ascending, where the FTL can list them cheaply
    /// (sparse maps: the interval FTL); None otherwise. Read-only, for checks (the crash
    /// simulator compares it with the blocks the file system references).
    fn mapped_lpns(&self) -> Option<Vec<u64>> {
        None
    }
}

/// One write pointer: the open line and the next offset in it.
#[derive(Debug, Default, Clone)]
pub struct WritePointer {
    pub line: Option<LineId>,
    pub off: u32,
}

impl WritePointer {
    /// Unwritten units of the open line.
    pub fn spare(&self, b: u32) -> u64 {
        self.line.map_or(0, |_| u64::from(b - self.off))
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
    /// A line an FTL keeps out of the greedy buckets (held `Open`, e.g. a conventional-region
    /// line with its own victim choice) may also become the victim.
    pub fn begin_victim(&mut self, l: LineId) {
        match self.state(l) {
            LineState::Sealed => {
                self.unlink(l.0);
                self.sealed -= 1;
            }
            s => debug_assert_eq!(s, LineState::Open),
        }
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

    /// An open or sealed line without valid pages is erased and freed at once (zone reset:
    /// no copy needed).
    pub fn release(&mut self, l: LineId) {
        let i = l.0 as usize;
        debug_assert_eq!(self.vpc[i], 0);
        match self.state[i] {
            LineState::Sealed => {
                self.unlink(l.0);
                self.sealed -= 1;
            }
            LineState::Open => {}
            s => {
                debug_assert!(false, "release of a {s:?} line");
                return;
            }
        }
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
        best_by_age(lines, now_seq, |u| (1.0 - u) / (1.0 + u))
    }
}

/// The reclaimable line with the highest `age · benefit(u)` (u: its valid share; age: host
/// writes since it was sealed, plus one), the first on ties: the cost-benefit family.
fn best_by_age(lines: &LineTable, now_seq: u64, benefit: impl Fn(f64) -> f64) -> Option<LineId> {
    let b = f64::from(lines.slots_per_line());
    let mut best: Option<(f64, LineId)> = None;
    for l in lines.sealed_lines().filter(|&l| reclaimable(lines, l)) {
        let u = f64::from(lines.vpc(l)) / b;
        let age = (now_seq.saturating_sub(lines.sealed_at(l)) + 1) as f64;
        let score = age * benefit(u);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, l));
        }
    }
    best.map(|(_, l)| l)
}

/// Cost-benefit for flash (Kawaguchi, Nishioka and Motoda, USENIX '95): largest
/// (1−u)·age/(2u). Flash reads and rewrites only the valid units (cost 2u, where a disk LFS
/// reads the whole segment: 1 + u); an empty line (u = 0) goes first.
#[derive(Debug, Default)]
pub struct CostBenefitFlash;

impl VictimPolicy for CostBenefitFlash {
    fn name(&self) -> &'static str {
        "cost-benefit-flash"
    }
    fn select(&mut self, lines: &LineTable, now_seq: u64) -> Option<LineId> {
        best_by_age(lines, now_seq, |u| {
            if u == 0.0 {
                f64::INFINITY
            } else {
                (1.0 - u) / (2.0 * u)
            }
        })
    }
}

/// Oldest sealed line first (first in, first out), by the host-write clock at sealing; lines
/// sealed at the same count (a GC burst) go lowest-numbered first. A line with no invalid
/// page is passed over (collecting it frees nothing, and the FTLs refuse such a victim).
/// Under uniform random writes its WAF is the Lambert-W closed form at every line size
/// (`analytic::waf_greedy`), the limit greedy reaches only as lines grow
/// (reference/ssd-emulator.md §3). O(lines).
#[derive(Debug, Default)]
pub struct Fifo;

impl VictimPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn select(&mut self, lines: &LineTable, _now_seq: u64) -> Option<LineId> {
        lines
            .sealed_lines()
            .filter(|&l| reclaimable(lines, l))
            .min_by_key(|&l| (lines.sealed_at(l), l.0))
    }
}

/// A sealed line with at least one invalid page: one that collecting frees something.
fn reclaimable(lines: &LineTable, l: LineId) -> bool {
    lines.state(l) == LineState::Sealed && lines.vpc(l) < lines.slots_per_line()
}

/// A reclaimable line drawn uniformly (rejection sampling over the line numbers, so every
/// one is equally likely whatever the others' states). After 64 misses, when such lines are
/// a small share of all, the first one at or after a random start: not uniform then (a line
/// after a long run of others is likelier), but such a device has almost nothing to collect.
fn random_reclaimable(lines: &LineTable, rng: &mut Rng) -> Option<LineId> {
    let n = lines.lines();
    if lines.sealed_count() == 0 || n == 0 {
        return None;
    }
    for _ in 0..64 {
        let l = LineId(rng.below(u64::from(n)) as u32);
        if reclaimable(lines, l) {
            return Some(l);
        }
    }
    let start = rng.below(u64::from(n)) as u32;
    (0..n)
        .map(|i| LineId(((u64::from(start) + u64::from(i)) % u64::from(n)) as u32))
        .find(|&l| reclaimable(lines, l))
}

/// A sealed line with an invalid page, chosen uniformly at random (MQSim's `RANDOM_P`; its
/// `RANDOM` may also draw a fully valid block, which these FTLs refuse as a victim): the
/// baseline every other policy is measured against. Under uniform random writes its WAF is
/// near `(1 + ρ)/ρ` (`analytic::waf_random`), a victim holding about the average valid
/// share; a little below it, since the fully valid lines GC has just sealed are never drawn.
#[derive(Debug)]
pub struct Random(Rng);

impl Random {
    pub fn new(seed: u64) -> Self {
        Random(Rng(seed))
    }
}

impl VictimPolicy for Random {
    fn name(&self) -> &'static str {
        "random"
    }
    fn select(&mut self, lines: &LineTable, _now_seq: u64) -> Option<LineId> {
        random_reclaimable(lines, &mut self.0)
    }
}

/// d-choices' number of draws when none is given: MQSim's default, log2 of the line count.
pub fn default_choices(lines: u32) -> u32 {
    lines.max(2).ilog2()
}

/// Randomized greedy, d-choices (MQSim's `RGA`, Van Houdt SIGMETRICS '13): of `d` lines
/// drawn as `Random` draws (with replacement), the one with the fewest valid pages. d = 1 is
/// `Random`; as d grows it approaches greedy (d ≈ 30 is greedy in Van Houdt's mean field)
/// at O(d) a choice instead of greedy's sorted state.
#[derive(Debug)]
pub struct DChoices {
    d: u32,
    rng: Rng,
}

impl DChoices {
    /// `d` = 0 picks MQSim's default for the table, log2 of its line count (at least 1).
    pub fn new(d: u32, lines: u32, seed: u64) -> Self {
        let d = if d == 0 { default_choices(lines) } else { d };
        DChoices { d, rng: Rng(seed) }
    }

    pub fn d(&self) -> u32 {
        self.d
    }
}

impl VictimPolicy for DChoices {
    fn name(&self) -> &'static str {
        "d-choices"
    }
    fn select(&mut self, lines: &LineTable, _now_seq: u64) -> Option<LineId> {
        let mut best = random_reclaimable(lines, &mut self.rng)?;
        for _ in 1..self.d {
            if let Some(l) = random_reclaimable(lines, &mut self.rng) {
                if lines.vpc(l) < lines.vpc(best) {
                    best = l;
                }
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // For flash (cost 2u, not 1 + u), the same two lines: a (u = 7/8, age 1002) scores
        // (1/8)·1002/(14/8) = 71.6, b (u = 6/8, age 2) (2/8)·2/(12/8) = 0.33: a again; an
        // empty line beats any age, and a full one is never picked.
        assert_eq!(CostBenefitFlash.select(&t, 1001), Some(a));
        for _ in 0..6 {
            t.dec_vpc(b);
        }
        assert_eq!(CostBenefitFlash.select(&t, 1001), Some(b));
        let mut full = LineTable::new(1, 8);
        let f = full.open_free().unwrap();
        for _ in 0..8 {
            full.inc_vpc(f);
        }
        full.seal(f, 0);
        assert_eq!(CostBenefitFlash.select(&full, 10), None);
        assert_eq!(Fifo.select(&full, 10), None);
    }
}
