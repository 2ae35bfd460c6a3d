//! D2FS coupled-GC FTL (FAST '25 §4-§7): block-associative mapping of the file-system
//! partition with virtual overprovisioning, device GC that packs valid pages densely into
//! sections of a GC region and remaps them, migration records with read/discard redirect,
//! and migration upcalls piggybacked on completions.
//!
//! Logical layout (zones are line-sized; blocks):
//! ```text
//! [0, C)                 conventional region, page-mapped (file-system metadata)
//! [C, C + R·z)           regular region: R = ceil(degree × capacity / z) zones, host-allocated
//! [C + R·z, C + (R+G)·z) GC region: G = ceil(capacity / z) zones, allocated by the device only
//! ```
//!
//! Owns: the conventional region; per zone its line (or none) and its write pointer; per line
//! its zone; per physical page the block type the host wrote it with; one GC destination zone
//! per block-type stream and the stream of each GC-region zone's line; the migration records (buffered, then in flight in
//! upcalls until acknowledged); per GC-region zone the number of outstanding records whose
//! old address lies in it.
//!
//! Mapping: block mapping with identity offsets (block `o` of a zone sits at slot `o` of the
//! zone's line). Zone blocks are write-once: a block written since its zone got its line is
//! refused until the zone is reclaimed (device GC, or every written block discarded, sealed
//! or not; never the open GC destination). Any order is
//! accepted, so a host whose I/O threads reorder the writes of a section works; slots never
//! written count as invalid. A zone's line is sealed (a GC candidate) when all its slots or
//! its last slot are written.
//!
//! Coupled GC: greedy victim among sealed zone lines; each valid page goes to the next slot of
//! the GC destination zone of its block type's stream (block-associative migration: its
//! offset changes), gets the new logical address of that slot (remap), and a record (old,
//! new) is buffered. A buffered
//! record whose page moves again is rewritten in place (merge); records in flight are never
//! changed. The victim's zone loses its line (its old addresses are served by redirect).
//!
//! Block-type streams (FAST '25 §6, "Specifying Block Type in IO Command"): the host sends a
//! [`WriteHint`] with each write; node pages form one GC stream, everything else (data,
//! unhinted) the other ([`gc_stream`], [`GC_STREAMS`]). The type is kept per physical page,
//! as firmware keeps it in the page's out-of-band area next to its logical address (no
//! modelled DRAM), and moves with the page, so a host zone written with mixed hints is still
//! split by type when collected. The streams share the GC region's zones: a zone becomes the
//! destination of whichever stream needs one next, and keeps that stream until reclaimed.
//!
//! Regular-region watermark (FAST '25 §8.2, below degree 1.4): while fewer than
//! `regular_watermark` regular zones have no line, a host write or a flush also collects one
//! regular victim (the sealed regular zone line with the fewest valid pages, not fully valid,
//! whose valid pages fit in the GC region now): at most one victim per request, and after
//! finding none no new scan for a zone's worth of host writes. Its records are like any
//! other GC's (at most one per slot of the victim, freed by the host's acknowledgement).
//!
//! Invariants:
//! - a valid page at slot `o` of zone `z`'s line holds logical block `base(z) + o`;
//! - every outstanding record's old address is unmapped or was rewritten by the host since
//!   (redirect is used only when unmapped); `by_old` names the newest record per old address,
//!   none once a discard redirected through the record killed its page;
//! - a GC-region zone is chosen as a destination only when it has no line and no outstanding
//!   record has its old address in it (else a redirected read could find new data);
//! - every valid page of a GC-region zone's line has the block type of that zone's stream
//!   (no GC destination mixes node and data pages); `gc_dst[s]`, when set, is a zone of
//!   stream `s` that has a line;
//! - `regular_lined` is the number of regular zones that have a line;
//! - records are sent in creation order (merges keep their place); upcall ids and record ids
//!   increase by one; an upcall stays in flight until acknowledged, across power cuts.
//!
//! Lock order: none (owned by the engine).

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::config::SsdConfig;
use crate::flash::Flash;
use crate::ftl::conv::{self, ConvRegion};
use crate::ftl::zoned::conventional_zones;
use crate::ftl::{
    Ftl, FtlError, FtlMemory, FtlStats, LineId, LineState, Lpn, Ppn, RegionUsage, VictimPolicy,
};
use flashlog_dev::{DeviceEvent, MigrationPair, WriteHint, MAX_UPCALL_PAIRS};

/// GC destination streams: one per block type the coupled FTL separates (FAST '25 §6).
pub const GC_STREAMS: usize = 2;

/// The GC destination stream of a page the host wrote with `hint`: node pages (stream 1)
/// apart from everything else (stream 0: data, and unhinted writes), as the artifact sends
/// data to its partition 3 and nodes to its partition 7. Metadata lives in the conventional
/// region, which coupled GC never collects.
pub fn gc_stream(hint: WriteHint) -> usize {
    match hint {
        WriteHint::Node => 1,
        WriteHint::None | WriteHint::Meta | WriteHint::Data => 0,
    }
}

/// Coupled-FTL parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoupledConfig {
    /// Regular-region degree ρ_regular: regular region = degree × device capacity (paper: 1.4
    /// avoids stalls). The GC region is always one device capacity.
    pub degree: f64,
    /// Conventional (page-mapped) region, rounded up to zones; 0 = auto (1/32 of capacity).
    pub conventional_bytes: u64,
    /// Pairs per upcall (1..=256).
    pub upcall_pairs: usize,
    /// Device GC runs while at most this many lines are free (the artifact's NVMeVirt fork:
    /// `free_line_cnt <= 5`).
    pub gc_threshold_lines: u32,
    /// Regular-region watermark: while fewer regular zones than this have no line (are free
    /// for the host), each host write or flush collects one regular-region victim. Below
    /// ρ_regular 1.4 the flash can keep free lines while the host's regular region runs out
    /// of free sections (FAST '25 §8.2: the host freezes until the device reclaims). 0 =
    /// auto ([`auto_regular_free_zones`]): covers a host's reserve (the F2FS host keeps
    /// about log heads + recovery reserve + its open sections, ~30 sections).
    pub regular_free_zones: u32,
    /// A flush also sends a partly filled batch (else only full batches are sent).
    pub send_on_flush: bool,
    /// One GC destination per block type (`vop_streams`, default on; [`gc_stream`]); off:
    /// every moved page goes to one destination whatever its hint (the ablation).
    pub block_type_streams: bool,
}

impl Default for CoupledConfig {
    fn default() -> Self {
        CoupledConfig {
            degree: 1.4,
            conventional_bytes: 0,
            upcall_pairs: MAX_UPCALL_PAIRS,
            gc_threshold_lines: 5,
            regular_free_zones: 0,
            send_on_flush: true,
            block_type_streams: true,
        }
    }
}

/// Default regular-region watermark for `regular_free_zones = 0`: 32 zones (what an F2FS
/// host keeps back on a volume of this kind: data stops at its reserved sections, about 13
/// on a 2 GiB partition, plus its recovery reserve of about 9 and its ~7 open sections)
/// plus 1/32 of the region for dirty data in flight, at most half the region and never
/// below the line threshold. At ρ_regular 1.4 the flash runs out of lines first (the region
/// has 0.4 capacity more zones than the flash has lines), so the watermark rarely fires.
pub fn auto_regular_free_zones(regular_zones: u64, threshold_lines: u32) -> u64 {
    (32 + regular_zones / 32)
        .min(regular_zones / 2)
        .max(u64::from(threshold_lines))
}

/// Modelled device DRAM per outstanding record: old and new 64-bit addresses plus a 32-bit
/// hash link and a 32-bit state/merge link.
pub const RECORD_BYTES: u64 = 24;

const NO_LINE: u32 = u32::MAX;
const NO_ZONE: u32 = u32::MAX;

/// Where an outstanding record lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    /// Buffered, keyed by creation sequence.
    Buffered(u64),
    /// Sent, by record id.
    InFlight(u64),
}

/// Where a redirect ended: (page, logical address), and the records walked on the way.
type Resolved = (Ppn, u64, Vec<(u64, Loc)>);

/// An upcall sent and not yet acknowledged.
#[derive(Clone, Debug)]
struct Upcall {
    id: u64,
    first_record: u64,
    pairs: Vec<MigrationPair>,
}

/// The coupled-GC FTL.
pub struct CoupledFtl {
    cfg: CoupledConfig,
    conv: ConvRegion,
    /// Blocks per zone.
    z: u64,
    regular_zones: u64,
    gc_zones: u64,
    zone_line: Vec<u32>,
    /// One past the highest offset written since the zone got its line.
    zone_wp: Vec<u32>,
    /// Slots of each zone's line written since the zone got it (a bit per physical slot).
    written: Vec<u64>,
    /// Blocks written per zone since it got its line.
    zone_written: Vec<u32>,
    line_zone: Vec<u32>,
    /// Outstanding records whose old address lies in each GC-region zone.
    pending_old: Vec<u32>,
    /// Per physical page (`line * z + offset`): the block type the host wrote it with (moved
    /// with the page by GC). Meaningful for valid pages of zone lines only.
    page_hint: Vec<WriteHint>,
    /// Current GC destination zone per stream (index into the GC region), if any.
    gc_dst: [Option<usize>; GC_STREAMS],
    /// Per GC-region zone: the stream its line was opened for (meaningful while it has one).
    gc_zone_stream: Vec<u8>,
    /// Next GC-region zone to consider (first fit, wrapping).
    gc_cursor: usize,
    policy: Box<dyn VictimPolicy>,
    threshold: u32,
    /// Regular zones that have a line (the rest are free for the host).
    regular_lined: u64,
    /// Regular-region watermark in zones (`CoupledConfig::regular_free_zones`, resolved).
    regular_watermark: u64,
    /// Host-write sequence number before which the watermark does not look for a regular
    /// victim again (after it found none it could collect; bounds the scan to once a zone).
    regular_retry_seq: u64,
    // Records.
    buffered: BTreeMap<u64, MigrationPair>,
    buffered_by_new: HashMap<u64, u64>,
    by_old: HashMap<u64, Loc>,
    next_seq: u64,
    in_flight: VecDeque<Upcall>,
    /// Pairs in `in_flight`.
    in_flight_records: u64,
    next_upcall: u64,
    next_record: u64,
    stats: FtlStats,
}

impl CoupledFtl {
    pub fn new(
        cfg: &SsdConfig,
        cc: CoupledConfig,
        policy: Box<dyn VictimPolicy>,
    ) -> Result<Self, String> {
        if !(cc.degree.is_finite() && (0.5..=64.0).contains(&cc.degree)) {
            return Err(format!(
                "regular-region degree {} is outside 0.5..=64",
                cc.degree
            ));
        }
        if !(1..=MAX_UPCALL_PAIRS).contains(&cc.upcall_pairs) {
            return Err(format!(
                "upcall_pairs {} is outside 1..={MAX_UPCALL_PAIRS}",
                cc.upcall_pairs
            ));
        }
        let z = cfg.geometry.slots_per_line();
        let lines = cfg.geometry.lines();
        let cap = cfg.logical_blocks();
        let cz = conventional_zones(cc.conventional_bytes, cap, z);
        // A collection may open a destination line per stream before its victim's line is
        // free again: keep that many free lines plus one.
        let threshold = cc.gc_threshold_lines.max(GC_STREAMS as u32 + 1);
        if lines < conv::max_lines(cz) + u64::from(threshold) + 4 {
            return Err(format!(
                "{lines} lines are too few for {cz} conventional zones and a GC threshold of \
                 {threshold} lines"
            ));
        }
        let regular_zones = ((cc.degree * cap as f64) / z as f64).ceil() as u64;
        let gc_zones = cap.div_ceil(z);
        let zones = (regular_zones + gc_zones) as usize;
        let regular_watermark = match cc.regular_free_zones {
            0 => auto_regular_free_zones(regular_zones, threshold),
            w if u64::from(w) < regular_zones => u64::from(w),
            w => {
                return Err(format!(
                    "regular_free_zones {w} must be below the regular region's {regular_zones} \
                     zones (0 = auto)"
                ))
            }
        };
        Ok(CoupledFtl {
            conv: ConvRegion::new(cz * z, cz),
            z,
            regular_zones,
            gc_zones,
            zone_line: vec![NO_LINE; zones],
            zone_wp: vec![0; zones],
            written: vec![0; (lines * z).div_ceil(64) as usize],
            zone_written: vec![0; zones],
            line_zone: vec![NO_ZONE; lines as usize],
            pending_old: vec![0; gc_zones as usize],
            page_hint: vec![WriteHint::None; (lines * z) as usize],
            gc_dst: [None; GC_STREAMS],
            gc_zone_stream: vec![0; gc_zones as usize],
            gc_cursor: 0,
            policy,
            threshold,
            regular_lined: 0,
            regular_watermark,
            regular_retry_seq: 0,
            buffered: BTreeMap::new(),
            buffered_by_new: HashMap::new(),
            by_old: HashMap::new(),
            next_seq: 0,
            in_flight: VecDeque::new(),
            in_flight_records: 0,
            next_upcall: 1,
            next_record: 1,
            stats: FtlStats::default(),
            cfg: cc,
        })
    }

    fn conv_blocks(&self) -> u64 {
        self.conv.blocks()
    }

    /// First block of the GC region.
    pub fn gc_region_start(&self) -> u64 {
        self.conv_blocks() + self.regular_zones * self.z
    }

    /// Zones of the regular and the GC region.
    pub fn regions(&self) -> (u64, u64) {
        (self.regular_zones, self.gc_zones)
    }

    fn zone_base(&self, zone: usize) -> u64 {
        self.conv_blocks() + zone as u64 * self.z
    }

    /// (zone, offset) of a block outside the conventional region.
    fn zone_of(&self, lpn: u64) -> (usize, u32) {
        let rel = lpn - self.conv_blocks();
        ((rel / self.z) as usize, (rel % self.z) as u32)
    }

    /// GC-region zone index of a block, if it lies in the GC region.
    fn gc_zone_of(&self, lpn: u64) -> Option<usize> {
        if lpn < self.gc_region_start() || lpn >= self.logical_blocks() {
            return None;
        }
        Some(((lpn - self.gc_region_start()) / self.z) as usize)
    }

    fn records_now(&self) -> u64 {
        self.buffered.len() as u64 + self.in_flight_records
    }

    fn note_records(&mut self) {
        let now = self.records_now();
        self.stats.records_now = now;
        self.stats.records_peak = self.stats.records_peak.max(now);
    }

    /// Open a line for zone `zone`.
    fn open_zone(&mut self, flash: &mut Flash, zone: usize) -> Result<LineId, FtlError> {
        let l = flash
            .lines
            .open_free()
            .ok_or(FtlError::NoReclaimableSpace { free: 0 })?;
        if (zone as u64) < self.regular_zones && self.zone_line[zone] == NO_LINE {
            self.regular_lined += 1;
        }
        self.zone_line[zone] = l.0;
        self.zone_wp[zone] = 0;
        self.zone_written[zone] = 0;
        self.line_zone[l.0 as usize] = zone as u32;
        let base = u64::from(l.0) * self.z;
        for slot in base..base + self.z {
            self.written[(slot / 64) as usize] &= !(1 << (slot % 64));
        }
        Ok(l)
    }

    /// The zone's line is gone (collected or reset): its slots are free again.
    fn close_zone(&mut self, zone: usize) {
        let l = self.zone_line[zone];
        if l != NO_LINE {
            self.line_zone[l as usize] = NO_ZONE;
            if (zone as u64) < self.regular_zones {
                self.regular_lined -= 1;
            }
        }
        self.zone_line[zone] = NO_LINE;
        self.zone_wp[zone] = 0;
        self.zone_written[zone] = 0;
    }

    /// Whether slot `off` of `zone`'s line was written since the zone got it.
    fn slot_written(&self, zone: usize, off: u32) -> bool {
        let l = self.zone_line[zone];
        if l == NO_LINE {
            return false;
        }
        let slot = u64::from(l) * self.z + u64::from(off);
        self.written[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    /// Note a write of slot `off` of `zone` (which has a line); returns whether the line is
    /// now complete (every slot written, or the last slot written).
    fn mark_written(&mut self, zone: usize, off: u32) -> bool {
        let slot = u64::from(self.zone_line[zone]) * self.z + u64::from(off);
        self.written[(slot / 64) as usize] |= 1 << (slot % 64);
        self.zone_written[zone] += 1;
        self.zone_wp[zone] = self.zone_wp[zone].max(off + 1);
        u64::from(self.zone_written[zone]) == self.z || u64::from(off) + 1 == self.z
    }

    /// Next slot of stream `s`'s GC destination: (physical page, new logical address).
    fn alloc_gc(&mut self, flash: &mut Flash, s: usize) -> Result<(Ppn, u64), FtlError> {
        let full = match self.gc_dst[s] {
            None => true,
            Some(g) => u64::from(self.zone_wp[self.regular_zones as usize + g]) == self.z,
        };
        if full {
            if let Some(g) = self.gc_dst[s].take() {
                let zone = self.regular_zones as usize + g;
                flash.lines.seal(LineId(self.zone_line[zone]), flash.seq);
            }
            let n = self.gc_zones as usize;
            let pick = (0..n).map(|i| (self.gc_cursor + i) % n).find(|&g| {
                self.zone_line[self.regular_zones as usize + g] == NO_LINE
                    && self.pending_old[g] == 0
            });
            let Some(g) = pick else {
                return Err(FtlError::NoReclaimableSpace {
                    free: flash.lines.free_count(),
                });
            };
            self.gc_cursor = (g + 1) % n;
            self.open_zone(flash, self.regular_zones as usize + g)?;
            self.gc_dst[s] = Some(g);
            self.gc_zone_stream[g] = s as u8;
        }
        let g = self.gc_dst[s].unwrap_or(0);
        let zone = self.regular_zones as usize + g;
        let off = self.zone_wp[zone];
        self.mark_written(zone, off);
        let ppn = flash.ppn(LineId(self.zone_line[zone]), off);
        Ok((ppn, self.zone_base(zone) + u64::from(off)))
    }

    /// Record the migration of the page at `old` to `new` (merging a buffered record whose
    /// page moves again).
    fn record(&mut self, old: u64, new: u64) {
        self.stats.records_created += 1;
        if let Some(seq) = self.buffered_by_new.remove(&old) {
            if let Some(pair) = self.buffered.get_mut(&seq) {
                pair.new = new;
                self.buffered_by_new.insert(new, seq);
                self.stats.records_merged += 1;
                return;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buffered.insert(seq, MigrationPair { old, new });
        self.buffered_by_new.insert(new, seq);
        self.by_old.insert(old, Loc::Buffered(seq));
        if let Some(g) = self.gc_zone_of(old) {
            self.pending_old[g] += 1;
        }
    }

    /// Send buffered records in batches: full batches only, or everything with `partial`.
    fn send(&mut self, flash: &mut Flash, partial: bool) {
        let max = self.cfg.upcall_pairs;
        while self.buffered.len() >= max || (partial && !self.buffered.is_empty()) {
            let mut pairs = Vec::with_capacity(max.min(self.buffered.len()));
            let first_record = self.next_record;
            while pairs.len() < max {
                let Some((_, pair)) = self.buffered.pop_first() else {
                    break;
                };
                self.buffered_by_new.remove(&pair.new);
                let rid = first_record + pairs.len() as u64;
                if let Some(loc) = self.by_old.get_mut(&pair.old) {
                    if matches!(loc, Loc::Buffered(_)) {
                        *loc = Loc::InFlight(rid);
                    }
                }
                pairs.push(pair);
            }
            self.next_record += pairs.len() as u64;
            let up = Upcall {
                id: self.next_upcall,
                first_record,
                pairs,
            };
            self.next_upcall += 1;
            flash.events.push(event(&up));
            self.in_flight_records += up.pairs.len() as u64;
            self.in_flight.push_back(up);
            self.stats.upcalls_sent += 1;
        }
        self.note_records();
    }

    /// The pair of an outstanding record.
    fn pair(&self, loc: Loc) -> Option<MigrationPair> {
        match loc {
            Loc::Buffered(seq) => self.buffered.get(&seq).copied(),
            Loc::InFlight(rid) => {
                let i = self
                    .in_flight
                    .partition_point(|u| u.first_record + u.pairs.len() as u64 <= rid);
                let u = self.in_flight.get(i)?;
                u.pairs
                    .get(rid.checked_sub(u.first_record)? as usize)
                    .copied()
            }
        }
    }

    /// Physical page of `lpn` through the mapping alone.
    fn mapped(&self, flash: &Flash, lpn: u64) -> Option<Ppn> {
        if lpn < self.conv_blocks() {
            return self.conv.lookup(lpn);
        }
        if lpn >= self.logical_blocks() {
            return None;
        }
        let (zone, off) = self.zone_of(lpn);
        let l = self.zone_line[zone];
        if l == NO_LINE || off >= self.zone_wp[zone] {
            return None;
        }
        let p = flash.ppn(LineId(l), off);
        (flash.owner(p) == Some(lpn)).then_some(p)
    }

    /// Follow records from an unmapped `lpn` to where its data lives now: (page, address),
    /// and the records walked (for discard redirect). Bounded by the number of records.
    fn resolve(&self, flash: &Flash, lpn: u64) -> Option<Resolved> {
        let mut at = lpn;
        let mut walked = Vec::new();
        for _ in 0..=self.records_now() {
            if let Some(p) = self.mapped(flash, at) {
                return Some((p, at, walked));
            }
            let loc = *self.by_old.get(&at)?;
            walked.push((at, loc));
            at = self.pair(loc)?.new;
        }
        None
    }

    /// Forget a buffered record (its page was discarded before it was sent).
    fn drop_buffered(&mut self, old: u64, seq: u64) {
        if let Some(pair) = self.buffered.remove(&seq) {
            self.buffered_by_new.remove(&pair.new);
            if self.by_old.get(&old) == Some(&Loc::Buffered(seq)) {
                self.by_old.remove(&old);
            }
            if let Some(g) = self.gc_zone_of(old) {
                self.pending_old[g] -= 1;
            }
            self.stats.records_dropped += 1;
        }
    }

    /// Collect one victim line (coupled GC); returns the invalid slots freed.
    fn gc_one(&mut self, flash: &mut Flash, t: u64) -> Result<u64, FtlError> {
        let victim =
            self.policy
                .select(&flash.lines, flash.seq)
                .ok_or(FtlError::NoReclaimableSpace {
                    free: flash.lines.free_count(),
                })?;
        self.collect(flash, victim, t)
    }

    /// Regular zones without a line: free for the host (or collected, their sections freed
    /// by the host once it applied and acknowledged the records).
    pub fn regular_free_zones(&self) -> u64 {
        self.regular_zones - self.regular_lined
    }

    /// The resolved regular-region watermark in zones.
    pub fn regular_watermark(&self) -> u64 {
        self.regular_watermark
    }

    /// The sealed regular-region zone line with the fewest valid pages, if any (a scan of
    /// the regular zones: runs once per collected zone, not per block).
    fn regular_victim(&self, flash: &Flash) -> Option<LineId> {
        self.zone_line[..self.regular_zones as usize]
            .iter()
            .filter(|&&l| l != NO_LINE && flash.lines.state(LineId(l)) == LineState::Sealed)
            .min_by_key(|&&l| flash.lines.vpc(LineId(l)))
            .map(|&l| LineId(l))
    }

    /// Regular-region watermark (FAST '25 §8.2): while fewer regular zones than the
    /// watermark are free, collect one regular victim (bounded work per request: its valid
    /// pages go to the GC region, its zone becomes free once the host applied the records).
    /// Returns whether it collected. A region whose lines are all open or fully written
    /// with live data has no candidate: the host gets ENOSPC from its own budget then.
    fn regular_gc(&mut self, flash: &mut Flash, t: u64) -> Result<bool, FtlError> {
        if self.regular_free_zones() >= self.regular_watermark {
            return Ok(false);
        }
        // Keep a free line for the GC destination; the line threshold collects otherwise.
        if flash.lines.free_count() < 2 {
            return Ok(false);
        }
        if flash.seq < self.regular_retry_seq {
            return Ok(false);
        }
        let victim = self.regular_victim(flash).filter(|&v| {
            // A fully valid line frees no flash (`gc_begin` refuses it).
            u64::from(flash.lines.vpc(v)) < self.z && self.gc_fits(flash, v)
        });
        let Some(victim) = victim else {
            // Nothing to collect (or no room in the GC region): look again after a zone's
            // worth of host writes. The host's own budget answers ENOSPC meanwhile.
            self.regular_retry_seq = flash.seq + self.z;
            return Ok(false);
        };
        self.collect(flash, victim, t)?;
        self.stats.regular_gc_runs += 1;
        Ok(true)
    }

    /// Whether the GC region can take `victim`'s valid pages now: per stream, what does not
    /// fit in the rest of its destination zone needs new zones, and the zones `alloc_gc` may
    /// open (no line, no outstanding record with its old address there) and the free lines
    /// (one kept back) must cover them. O(z) over the victim.
    fn gc_fits(&self, flash: &Flash, victim: LineId) -> bool {
        let rz = self.regular_zones as usize;
        let mut pages = [0u64; GC_STREAMS];
        for off in 0..flash.slots_per_line() {
            let p = flash.ppn(victim, off);
            if flash.owner(p).is_some() {
                pages[self.stream_of(self.page_hint[p.0 as usize])] += 1;
            }
        }
        let mut zones = 0;
        for (s, &n) in pages.iter().enumerate() {
            let rest = self.gc_dst[s].map_or(0, |g| self.z - u64::from(self.zone_wp[rz + g]));
            zones += n.saturating_sub(rest).div_ceil(self.z);
        }
        let open = (0..self.gc_zones as usize)
            .filter(|&g| self.zone_line[rz + g] == NO_LINE && self.pending_old[g] == 0)
            .count() as u64;
        zones <= open && zones < u64::from(flash.lines.free_count())
    }

    /// The GC destination stream of a page written with `hint` ([`gc_stream`]; 0 for all
    /// with `block_type_streams` off).
    fn stream_of(&self, hint: WriteHint) -> usize {
        if self.cfg.block_type_streams {
            gc_stream(hint)
        } else {
            0
        }
    }

    /// Collect `victim` (a sealed zone line): move its valid pages to the GC destination.
    fn collect(&mut self, flash: &mut Flash, victim: LineId, t: u64) -> Result<u64, FtlError> {
        let zone = self.line_zone[victim.0 as usize];
        debug_assert_ne!(zone, NO_ZONE, "sealed line {} without a zone", victim.0);
        let run = flash.gc_begin(victim, t)?;
        for p in run.slots(flash.slots_per_line()) {
            let Some(old) = flash.gc_take(&run, p) else {
                continue;
            };
            let hint = self.page_hint[p as usize];
            let s = self.stream_of(hint);
            let (new_ppn, new) = self.alloc_gc(flash, s)?;
            self.page_hint[new_ppn.0 as usize] = hint;
            if hint == WriteHint::Node {
                self.stats.gc_node_pages_moved += 1;
            }
            flash.gc_place(&run, p, new_ppn, new);
            flash.relocations.push((old, new));
            self.record(old, new);
        }
        self.close_zone(zone as usize);
        let freed = flash.gc_end(run, t);
        self.note_records();
        Ok(freed)
    }

    /// Device GC before a host page: collect while at most the threshold lines are free (the
    /// artifact's `<=`; until 2026-11-28 `<`, one line fewer held back),
    /// then send full batches of records.
    fn maybe_gc(&mut self, flash: &mut Flash, t: u64) -> Result<(), FtlError> {
        let mut ran = false;
        while flash.lines.free_count() <= self.threshold {
            self.gc_one(flash, t)?;
            ran = true;
        }
        ran |= self.regular_gc(flash, t)?;
        if ran {
            self.send(flash, false);
        }
        Ok(())
    }
}

fn event(up: &Upcall) -> DeviceEvent {
    DeviceEvent::Migrated {
        upcall: up.id,
        first_record: up.first_record,
        pairs: up.pairs.clone(),
    }
}

impl Ftl for CoupledFtl {
    fn name(&self) -> &'static str {
        "coupled"
    }
    fn policy_name(&self) -> &'static str {
        self.policy.name()
    }
    fn logical_blocks(&self) -> u64 {
        self.conv_blocks() + (self.regular_zones + self.gc_zones) * self.z
    }
    fn zone_blocks(&self) -> u64 {
        self.z
    }
    fn conventional_blocks(&self) -> u64 {
        self.conv_blocks()
    }
    fn gc_region_blocks(&self) -> u64 {
        self.gc_zones * self.z
    }

    fn check_write(&self, lpn: u64, n: u64) -> Result<(), FtlError> {
        let end = lpn + n;
        if end > self.gc_region_start() {
            return Err(FtlError::Refused(format!(
                "coupled FTL: write at blocks {lpn}..{end} reaches the GC region (blocks {}..): \
                 only the device allocates there; write updated blocks to the regular region",
                self.gc_region_start()
            )));
        }
        for a in lpn.max(self.conv_blocks())..end {
            let (zone, off) = self.zone_of(a);
            if self.slot_written(zone, off) {
                return Err(FtlError::Refused(format!(
                    "coupled FTL: block {a} of zone {zone} was already written since the zone \
                     was last reclaimed; zone blocks are write-once until the device reclaims \
                     the zone (discard it and write elsewhere)"
                )));
            }
        }
        Ok(())
    }

    fn write_page(
        &mut self,
        flash: &mut Flash,
        lpn: Lpn,
        t: u64,
        tx: u64,
        hint: WriteHint,
    ) -> Result<Option<u64>, FtlError> {
        self.maybe_gc(flash, t)?;
        let spare = self.spare_units(flash);
        flash.sample_free(spare);
        if lpn.0 < self.conv_blocks() {
            return self.conv.write(flash, lpn.0, t, tx);
        }
        let (zone, off) = self.zone_of(lpn.0);
        let line = match self.zone_line[zone] {
            NO_LINE => {
                // Keep a free line for each stream's GC destination.
                if flash.lines.free_count() <= GC_STREAMS as u32 {
                    self.gc_one(flash, t)?;
                    self.send(flash, false);
                }
                self.open_zone(flash, zone)?
            }
            l => LineId(l),
        };
        debug_assert!(!self.slot_written(zone, off));
        let ppn = flash.ppn(line, off);
        self.page_hint[ppn.0 as usize] = hint;
        let complete = self.mark_written(zone, off);
        let end = flash.program_host(ppn, lpn.0, tx);
        if complete && flash.lines.state(line) == LineState::Open {
            flash.lines.seal(line, flash.seq);
        }
        Ok(end)
    }

    fn lookup(&self, flash: &Flash, lpn: Lpn) -> Option<Ppn> {
        self.mapped(flash, lpn.0)
    }

    fn read_lookup(&mut self, flash: &Flash, lpn: Lpn) -> Option<(Ppn, Lpn)> {
        if let Some(p) = self.mapped(flash, lpn.0) {
            return Some((p, lpn));
        }
        let (p, at, _) = self.resolve(flash, lpn.0)?;
        self.stats.reads_redirected += 1;
        Some((p, Lpn(at)))
    }

    fn discard(&mut self, flash: &mut Flash, lpn: u64, n: u64, t: u64) -> Result<(), FtlError> {
        for l in lpn..lpn + n {
            if l < self.conv_blocks() {
                self.conv.discard(flash, l);
                continue;
            }
            if let Some(p) = self.mapped(flash, l) {
                flash.invalidate(p);
                self.release_if_empty(flash, flash.line_of(p), t);
                continue;
            }
            // Discard redirect: the page moved; drop it where it is now, and forget the
            // buffered records of its moves (records in flight stay: the host skips them).
            let Some((p, at, walked)) = self.resolve(flash, l) else {
                continue;
            };
            flash.invalidate(p);
            flash.dropped.push(at);
            self.stats.discards_redirected += 1;
            for (old, loc) in walked {
                match loc {
                    Loc::Buffered(seq) => self.drop_buffered(old, seq),
                    // The record stays until acknowledged, but no longer redirects: its page
                    // is gone, and once the GC zone of `new` is reused a later discard of
                    // `old` (the host's section discard) would kill another block's page.
                    Loc::InFlight(_) => {
                        if self.by_old.get(&old) == Some(&loc) {
                            self.by_old.remove(&old);
                        }
                    }
                }
            }
            self.release_if_empty(flash, flash.line_of(p), t);
        }
        // Zones of the range whose written pages are all dead now, sealed or not (a section
        // the host wrote part of before a power cut and discards before writing it again).
        let first = lpn.max(self.conv_blocks());
        if first < lpn + n {
            let (z0, _) = self.zone_of(first);
            let (z1, _) = self.zone_of(lpn + n - 1);
            for zone in z0..=z1.min(self.zone_line.len() - 1) {
                if self.zone_line[zone] != NO_LINE {
                    self.release_if_empty(flash, LineId(self.zone_line[zone]), t);
                }
            }
        }
        self.note_records();
        Ok(())
    }

    fn flush(&mut self, flash: &mut Flash, t: u64) {
        // A host frozen for free sections flushes: collect a regular victim if the region is
        // below its watermark, so that the flush carries records that free a section. An
        // error here (no GC destination) leaves it to the next write's GC.
        let _ = self.regular_gc(flash, t);
        if self.cfg.send_on_flush {
            self.send(flash, true);
        }
    }

    fn memory(&self) -> FtlMemory {
        let zones = self.zone_line.len() as u64;
        FtlMemory {
            // Zone → line and write pointer per zone, line → zone, written-slot bits,
            // pending counts per GC zone, and the conventional page map.
            mapping_bytes: zones * 8
                + self.line_zone.len() as u64 * 4
                + self.written.len() as u64 * 8
                + self.gc_zones * 4
                + self.conv.memory_bytes(),
            record_bytes: self.records_now() * RECORD_BYTES,
        }
    }

    fn region_usage(&self, flash: &Flash) -> Vec<RegionUsage> {
        let zone_range = |name: &'static str, zones: std::ops::Range<usize>| {
            let mut r = RegionUsage {
                name,
                blocks: zones.len() as u64 * self.z,
                zones: zones.len() as u64,
                ..RegionUsage::default()
            };
            for &l in &self.zone_line[zones] {
                if l != NO_LINE {
                    r.zones_in_use += 1;
                    r.valid_blocks += u64::from(flash.lines.vpc(LineId(l)));
                }
            }
            r
        };
        let reg = self.regular_zones as usize;
        vec![
            RegionUsage {
                name: "conventional",
                blocks: self.conv_blocks(),
                zones: self.conv_blocks() / self.z.max(1),
                zones_in_use: 0,
                valid_blocks: self.conv.valid_blocks(),
            },
            zone_range("regular", 0..reg),
            zone_range("gc", reg..self.zone_line.len()),
        ]
    }

    fn stats(&self) -> FtlStats {
        let mut s = self.stats.clone();
        s.records_now = self.records_now();
        s
    }

    fn reset_stats(&mut self) {
        let now = self.records_now();
        self.stats = FtlStats {
            records_now: now,
            records_peak: now,
            ..FtlStats::default()
        };
    }

    fn migration_upcalls(&self) -> bool {
        true
    }

    fn ack_migrations(&mut self, upto: u64) -> Result<u64, FtlError> {
        if upto >= self.next_upcall {
            return Err(FtlError::Refused(format!(
                "acknowledgement of upcall {upto}, but the last upcall sent is {}",
                self.next_upcall - 1
            )));
        }
        let mut freed = 0;
        while self.in_flight.front().is_some_and(|u| u.id <= upto) {
            let Some(up) = self.in_flight.pop_front() else {
                break;
            };
            for (i, pair) in up.pairs.iter().enumerate() {
                let rid = up.first_record + i as u64;
                if self.by_old.get(&pair.old) == Some(&Loc::InFlight(rid)) {
                    self.by_old.remove(&pair.old);
                }
                if let Some(g) = self.gc_zone_of(pair.old) {
                    self.pending_old[g] -= 1;
                }
            }
            freed += up.pairs.len() as u64;
            self.in_flight_records -= up.pairs.len() as u64;
            self.stats.upcalls_acked += 1;
        }
        self.stats.records_acked += freed;
        self.note_records();
        Ok(freed)
    }

    fn resend_migrations(&mut self, flash: &mut Flash) -> Result<(), FtlError> {
        flash
            .events
            .retain(|e| !matches!(e, DeviceEvent::Migrated { .. }));
        for up in &self.in_flight {
            flash.events.push(event(up));
            self.stats.upcalls_resent += 1;
        }
        Ok(())
    }

    fn power_cycle(&mut self, flash: &mut Flash) {
        // Records are capacitor-backed: every unacknowledged upcall is delivered again.
        let _ = self.resend_migrations(flash);
    }

    fn spare_units(&self, flash: &Flash) -> u64 {
        u64::from(flash.lines.free_count()) * u64::from(flash.slots_per_line())
    }

    fn check_invariants(&self, flash: &Flash) -> Result<(), String> {
        self.conv.check(flash)?;
        for (zone, (&l, &wp)) in self.zone_line.iter().zip(&self.zone_wp).enumerate() {
            if l == NO_LINE {
                if wp != 0 {
                    return Err(format!("zone {zone} has no line but write pointer {wp}"));
                }
                continue;
            }
            if self.line_zone[l as usize] != zone as u32 {
                return Err(format!("zone {zone} has line {l} whose zone differs"));
            }
            for off in 0..flash.slots_per_line() {
                if let Some(owner) = flash.owner(flash.ppn(LineId(l), off)) {
                    if owner != self.zone_base(zone) + u64::from(off) || off >= wp {
                        return Err(format!(
                            "zone {zone} line {l} offset {off} holds block {owner} (wp {wp})"
                        ));
                    }
                }
            }
        }
        let lined = self.zone_line[..self.regular_zones as usize]
            .iter()
            .filter(|&&l| l != NO_LINE)
            .count() as u64;
        if lined != self.regular_lined {
            return Err(format!(
                "{lined} regular zones have a line, {} counted",
                self.regular_lined
            ));
        }
        for (p, lpn) in flash.valid_pages() {
            if self.mapped(flash, lpn) != Some(p) {
                return Err(format!("p2l[{}] = {lpn} but the zone map disagrees", p.0));
            }
        }
        self.check_streams(flash)?;
        // Pending counts match the outstanding records.
        let mut pending = vec![0u32; self.gc_zones as usize];
        let olds = self
            .buffered
            .values()
            .chain(self.in_flight.iter().flat_map(|u| u.pairs.iter()))
            .map(|p| p.old);
        for old in olds {
            if let Some(g) = self.gc_zone_of(old) {
                pending[g] += 1;
            }
        }
        if pending != self.pending_old {
            return Err("pending-old counts differ from the outstanding records".into());
        }
        let pairs: u64 = self.in_flight.iter().map(|u| u.pairs.len() as u64).sum();
        if pairs != self.in_flight_records {
            return Err(format!(
                "{} records in flight counted, {pairs} in the upcalls",
                self.in_flight_records
            ));
        }
        for (seq, pair) in &self.buffered {
            if self.buffered_by_new.get(&pair.new) != Some(seq) {
                return Err(format!(
                    "buffered record {seq} is missing from the merge index"
                ));
            }
        }
        Ok(())
    }
}

impl CoupledFtl {
    /// Block-type streams: each stream's destination is a lined GC zone of that stream (no
    /// two streams share one), and every valid page of a GC-region zone's line has the type
    /// of the zone's stream.
    fn check_streams(&self, flash: &Flash) -> Result<(), String> {
        let rz = self.regular_zones as usize;
        for (s, dst) in self.gc_dst.iter().enumerate() {
            let Some(g) = *dst else { continue };
            if self.zone_line[rz + g] == NO_LINE || usize::from(self.gc_zone_stream[g]) != s {
                return Err(format!(
                    "stream {s}'s GC destination zone {g} has no line or stream {}",
                    self.gc_zone_stream[g]
                ));
            }
            if self.gc_dst[..s].contains(&Some(g)) {
                return Err(format!("GC zone {g} is the destination of two streams"));
            }
        }
        for g in 0..self.gc_zones as usize {
            let l = self.zone_line[rz + g];
            if l == NO_LINE {
                continue;
            }
            let want = usize::from(self.gc_zone_stream[g]);
            for off in 0..flash.slots_per_line() {
                let p = flash.ppn(LineId(l), off);
                let hint = self.page_hint[p.0 as usize];
                if flash.owner(p).is_some() && self.stream_of(hint) != want {
                    return Err(format!(
                        "GC zone {g} (stream {want}) line {l} offset {off} holds a {} page",
                        hint.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// A zone line whose every page is dead is reset at once (no copy needed): sealed, or
    /// still open (a zone the host stopped writing, e.g. at a power cut, whose written blocks
    /// it then discarded: without the reset its written slots stayed write-once and the host
    /// could never write the section again). Not the open GC destination.
    fn release_if_empty(&mut self, flash: &mut Flash, line: LineId, t: u64) {
        let zone = self.line_zone[line.0 as usize];
        let rz = self.regular_zones as usize;
        let is_gc_dst = self
            .gc_dst
            .iter()
            .flatten()
            .any(|&g| rz + g == zone as usize);
        if zone == NO_ZONE
            || flash.lines.vpc(line) != 0
            || is_gc_dst
            || !matches!(flash.lines.state(line), LineState::Sealed | LineState::Open)
        {
            return;
        }
        self.close_zone(zone as usize);
        flash.reset_line(line, t);
        self.stats.zone_resets += 1;
    }
}
