//! Zoned FTL (ZNS-style): a few conventional (page-mapped) zones at the start, then
//! sequential-write zones, each block-mapped to one line (a 32 MiB superblock on the
//! 970pro-like preset at ≥ 4 GiB). No device GC for the sequential zones: the host reclaims a
//! zone by resetting it (a discard of the whole zone), which erases its line at once.
//!
//! Owns: the conventional region, and per sequential zone its line (or none) and its write
//! pointer.
//!
//! Invariants:
//! - a sequential zone's blocks `[base, base + wp)` were written in order since the last
//!   reset; a write elsewhere is refused before anything changes;
//! - a zone with a line keeps it `Open` in the line table (never a GC candidate); a zone
//!   without a line has `wp == 0`;
//! - the conventional region never holds more than its line budget, and the sequential zones
//!   are as many as the remaining lines minus one spare, so opening a zone never waits.
//!
//! Zone reset: a discard that covers a whole zone resets it; a discard that leaves a full zone
//! (`wp == zone size`) with no valid block also resets it (what zoned F2FS does for every freed
//! section, and what a host that discards block ranges rather than zones needs). Other partial
//! discards only mark blocks dead.
//!
//! Lock order: none (owned by the engine).

use serde::Serialize;

use crate::config::SsdConfig;
use crate::flash::Flash;
use crate::ftl::conv::{self, ConvRegion};
use crate::ftl::{Ftl, FtlError, FtlMemory, FtlStats, LineId, Lpn, Ppn};
use flashlog_dev::WriteHint;

/// Zoned-FTL parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ZonedConfig {
    /// Size of the conventional (page-mapped) region; rounded up to whole zones. 0 = auto:
    /// 1/32 of the capacity, at least one zone.
    pub conventional_bytes: u64,
}

/// Conventional zones for a request of `bytes` (0 = auto) on a device of `capacity_blocks`
/// with zones of `b` blocks.
pub fn conventional_zones(bytes: u64, capacity_blocks: u64, b: u64) -> u64 {
    let blocks = if bytes == 0 {
        capacity_blocks.div_ceil(32)
    } else {
        bytes.div_ceil(crate::config::MAP_UNIT)
    };
    blocks.div_ceil(b).max(1)
}

const NO_LINE: u32 = u32::MAX;

/// The zoned FTL.
pub struct ZonedFtl {
    conv: ConvRegion,
    /// Blocks per zone.
    b: u64,
    zone_line: Vec<u32>,
    zone_wp: Vec<u32>,
    resets: u64,
}

impl ZonedFtl {
    /// Conventional zones as configured, then as many sequential zones as the remaining lines
    /// allow (one line spare).
    pub fn new(cfg: &SsdConfig, zc: ZonedConfig) -> Result<Self, String> {
        let b = cfg.geometry.slots_per_line();
        let lines = cfg.geometry.lines();
        let cz = conventional_zones(zc.conventional_bytes, cfg.logical_blocks(), b);
        let budget = conv::max_lines(cz) + 1;
        if lines <= budget {
            return Err(format!(
                "{lines} lines leave no sequential zone after {cz} conventional zones"
            ));
        }
        let seq = (lines - budget) as usize;
        Ok(ZonedFtl {
            conv: ConvRegion::new(cz * b, cz),
            b,
            zone_line: vec![NO_LINE; seq],
            zone_wp: vec![0; seq],
            resets: 0,
        })
    }

    fn conv_blocks(&self) -> u64 {
        self.conv.blocks()
    }

    /// (zone, offset) of a block of the sequential region.
    fn zone_of(&self, lpn: u64) -> (usize, u32) {
        let rel = lpn - self.conv_blocks();
        ((rel / self.b) as usize, (rel % self.b) as u32)
    }

    fn reset(&mut self, flash: &mut Flash, z: usize, t: u64) {
        let l = self.zone_line[z];
        if l != NO_LINE {
            let line = LineId(l);
            for off in 0..self.zone_wp[z] {
                let p = flash.ppn(line, off);
                if flash.owner(p).is_some() {
                    flash.invalidate(p);
                    flash
                        .dropped
                        .push(self.conv_blocks() + z as u64 * self.b + u64::from(off));
                }
            }
            flash.reset_line(line, t);
            self.resets += 1;
        }
        self.zone_line[z] = NO_LINE;
        self.zone_wp[z] = 0;
    }
}

impl Ftl for ZonedFtl {
    fn name(&self) -> &'static str {
        "zoned"
    }
    fn policy_name(&self) -> &'static str {
        "none"
    }
    fn logical_blocks(&self) -> u64 {
        self.conv_blocks() + self.zone_line.len() as u64 * self.b
    }
    fn zone_blocks(&self) -> u64 {
        self.b
    }
    fn conventional_blocks(&self) -> u64 {
        self.conv_blocks()
    }

    fn check_write(&self, lpn: u64, n: u64) -> Result<(), FtlError> {
        let end = lpn + n;
        let mut a = lpn.max(self.conv_blocks());
        while a < end {
            let (z, off) = self.zone_of(a);
            let wp = self.zone_wp[z];
            if off != wp {
                return Err(FtlError::Refused(format!(
                    "zoned FTL: write at block {a} is not at the write pointer of zone {z} \
                     (block {}); sequential zones take sequential writes only (reset a zone \
                     by discarding all of it)",
                    self.conv_blocks() + z as u64 * self.b + u64::from(wp)
                )));
            }
            a = (a - u64::from(off) + self.b).min(end);
        }
        Ok(())
    }

    fn write_page(
        &mut self,
        flash: &mut Flash,
        lpn: Lpn,
        t: u64,
        tx: u64,
        _hint: WriteHint,
    ) -> Result<Option<u64>, FtlError> {
        let spare = self.spare_units(flash);
        flash.sample_free(spare);
        if lpn.0 < self.conv_blocks() {
            return self.conv.write(flash, lpn.0, t, tx);
        }
        let (z, off) = self.zone_of(lpn.0);
        debug_assert_eq!(off, self.zone_wp[z]);
        if self.zone_line[z] == NO_LINE {
            let l = flash
                .lines
                .open_free()
                .ok_or(FtlError::NoReclaimableSpace { free: 0 })?;
            self.zone_line[z] = l.0;
        }
        let ppn = flash.ppn(LineId(self.zone_line[z]), off);
        self.zone_wp[z] = off + 1;
        Ok(flash.program_host(ppn, lpn.0, tx))
    }

    fn lookup(&self, flash: &Flash, lpn: Lpn) -> Option<Ppn> {
        if lpn.0 < self.conv_blocks() {
            return self.conv.lookup(lpn.0);
        }
        let (z, off) = self.zone_of(lpn.0);
        let l = *self.zone_line.get(z)?;
        if l == NO_LINE || off >= self.zone_wp[z] {
            return None;
        }
        let p = flash.ppn(LineId(l), off);
        (flash.owner(p) == Some(lpn.0)).then_some(p)
    }

    fn discard(&mut self, flash: &mut Flash, lpn: u64, n: u64, t: u64) -> Result<(), FtlError> {
        let end = lpn + n;
        for l in lpn..end.min(self.conv_blocks()) {
            self.conv.discard(flash, l);
        }
        let mut a = lpn.max(self.conv_blocks());
        while a < end {
            let (z, off) = self.zone_of(a);
            let zone_end = a - u64::from(off) + self.b;
            let stop = zone_end.min(end);
            if off == 0 && stop == zone_end {
                self.reset(flash, z, t);
            } else {
                for x in a..stop {
                    if let Some(p) = self.lookup(flash, Lpn(x)) {
                        flash.invalidate(p);
                    }
                }
                let l = self.zone_line[z];
                if l != NO_LINE
                    && u64::from(self.zone_wp[z]) == self.b
                    && flash.lines.vpc(LineId(l)) == 0
                {
                    self.reset(flash, z, t);
                }
            }
            a = stop;
        }
        Ok(())
    }

    fn memory(&self) -> FtlMemory {
        FtlMemory {
            // Zone → line and write pointer per zone, plus the conventional page map.
            mapping_bytes: self.zone_line.len() as u64 * 8 + self.conv.memory_bytes(),
            record_bytes: 0,
        }
    }

    fn stats(&self) -> FtlStats {
        FtlStats {
            zone_resets: self.resets,
            ..FtlStats::default()
        }
    }

    fn reset_stats(&mut self) {
        self.resets = 0;
    }

    fn spare_units(&self, flash: &Flash) -> u64 {
        let b = flash.slots_per_line();
        let open: u64 = self
            .zone_line
            .iter()
            .zip(&self.zone_wp)
            .filter(|(l, _)| **l != NO_LINE)
            .map(|(_, wp)| u64::from(b - wp))
            .sum();
        u64::from(flash.lines.free_count()) * u64::from(b) + open + self.conv.open_spare(b)
    }

    fn check_invariants(&self, flash: &Flash) -> Result<(), String> {
        self.conv.check(flash)?;
        for (z, (&l, &wp)) in self.zone_line.iter().zip(&self.zone_wp).enumerate() {
            if l == NO_LINE {
                if wp != 0 {
                    return Err(format!("zone {z} has no line but write pointer {wp}"));
                }
                continue;
            }
            for off in 0..flash.slots_per_line() {
                let p = flash.ppn(LineId(l), off);
                if let Some(owner) = flash.owner(p) {
                    let want = self.conv_blocks() + z as u64 * self.b + u64::from(off);
                    if owner != want || off >= wp {
                        return Err(format!(
                            "zone {z} line {l} offset {off} holds block {owner} (wp {wp})"
                        ));
                    }
                }
            }
        }
        for (p, lpn) in flash.valid_pages() {
            if self.lookup(flash, Lpn(lpn)) != Some(p) {
                return Err(format!("p2l[{}] = {lpn} but the zone map disagrees", p.0));
            }
        }
        Ok(())
    }
}
