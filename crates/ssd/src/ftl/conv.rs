//! The conventional (page-mapped) region at the start of a zoned or coupled FTL's logical
//! space, where the file system keeps metadata it rewrites in place (superblock, checkpoint,
//! SIT, NAT, SSA): D2FS's META partition, a ZNS drive's conventional zones.
//!
//! Owns: the page map of the region's blocks, its host and GC write pointers and the list of
//! its full lines. Its lines stay `Open` in the shared line table, so the FTL's own greedy
//! victim choice never sees them; the region collects its own lines greedily when it would
//! hold more than `max_lines` lines.
//!
//! Invariants: `l2p[i] == ppn` iff the flash reverse map says `ppn` holds block `i`; the
//! region never holds more than `max_lines` lines (full + the two write pointers), so the
//! FTL can size its other regions from the rest.
//!
//! Lock order: none (owned by its FTL).

use crate::flash::Flash;
use crate::ftl::{FtlError, LineId, Ppn, WritePointer};

const UNMAPPED: u32 = u32::MAX;

/// Lines a conventional region of `zones` zone-sized (line-sized) blocks may hold: its data
/// plus two open write pointers plus one line of slack for GC to work with.
pub fn max_lines(zones: u64) -> u64 {
    zones + 3
}

/// A page-mapped region of `blocks` logical blocks starting at logical block 0.
pub struct ConvRegion {
    l2p: Vec<u32>,
    host_wp: WritePointer,
    gc_wp: WritePointer,
    full: Vec<LineId>,
    max_lines: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Host,
    Gc,
}

impl ConvRegion {
    pub fn new(blocks: u64, zones: u64) -> Self {
        ConvRegion {
            l2p: vec![UNMAPPED; blocks as usize],
            host_wp: WritePointer::default(),
            gc_wp: WritePointer::default(),
            full: Vec::new(),
            max_lines: max_lines(zones) as usize,
        }
    }

    pub fn blocks(&self) -> u64 {
        self.l2p.len() as u64
    }

    /// Blocks mapped now (O(blocks); reports only).
    pub fn valid_blocks(&self) -> u64 {
        self.l2p.iter().filter(|&&p| p != UNMAPPED).count() as u64
    }

    pub fn memory_bytes(&self) -> u64 {
        self.l2p.len() as u64 * 4 + self.max_lines as u64 * 4
    }

    pub fn lookup(&self, lpn: u64) -> Option<Ppn> {
        match self.l2p.get(usize::try_from(lpn).ok()?) {
            Some(&p) if p != UNMAPPED => Some(Ppn(p)),
            _ => None,
        }
    }

    fn lines_held(&self) -> usize {
        self.full.len()
            + usize::from(self.host_wp.line.is_some())
            + usize::from(self.gc_wp.line.is_some())
    }

    /// Spare units in the region's open lines.
    pub fn open_spare(&self, b: u32) -> u64 {
        self.host_wp.spare(b) + self.gc_wp.spare(b)
    }

    fn wp(&mut self, s: Stream) -> &mut WritePointer {
        match s {
            Stream::Host => &mut self.host_wp,
            Stream::Gc => &mut self.gc_wp,
        }
    }

    fn alloc(&mut self, flash: &mut Flash, s: Stream, t: u64) -> Result<Ppn, FtlError> {
        let b = flash.slots_per_line();
        let full = {
            let wp = self.wp(s);
            wp.line.is_none() || wp.off == b
        };
        if full {
            if let Some(l) = self.wp(s).line.take() {
                self.full.push(l);
            }
            if s == Stream::Host {
                // Keep one line of the budget for the GC write pointer.
                while self.lines_held() + 1 + usize::from(self.gc_wp.line.is_none())
                    > self.max_lines
                {
                    self.gc_one(flash, t)?;
                }
            }
            let l = flash
                .lines
                .open_free()
                .ok_or(FtlError::NoReclaimableSpace { free: 0 })?;
            let wp = self.wp(s);
            wp.line = Some(l);
            wp.off = 0;
        }
        let wp = self.wp(s);
        let (line, off) = (wp.line.unwrap_or(LineId(0)), wp.off);
        wp.off += 1;
        Ok(flash.ppn(line, off))
    }

    /// Collect the full line with the fewest valid pages into the GC write pointer.
    fn gc_one(&mut self, flash: &mut Flash, t: u64) -> Result<(), FtlError> {
        let Some((i, _)) = self
            .full
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| flash.lines.vpc(**l))
        else {
            return Err(FtlError::NoReclaimableSpace {
                free: flash.lines.free_count(),
            });
        };
        let victim = self.full.swap_remove(i);
        let run = match flash.gc_begin(victim, t) {
            Ok(r) => r,
            Err(e) => {
                self.full.push(victim);
                return Err(e);
            }
        };
        for p in run.slots(flash.slots_per_line()) {
            let Some(lpn) = flash.gc_take(&run, p) else {
                continue;
            };
            let new = self.alloc(flash, Stream::Gc, t)?;
            self.l2p[lpn as usize] = new.0;
            flash.gc_place(&run, p, new, lpn);
        }
        flash.gc_end(run, t);
        Ok(())
    }

    /// Host write of block `lpn` (inside the region).
    pub fn write(
        &mut self,
        flash: &mut Flash,
        lpn: u64,
        t: u64,
        tx: u64,
    ) -> Result<Option<u64>, FtlError> {
        // The new page first (as `PageFtl::write_page`): a write refused for space keeps
        // the old page; a GC inside `alloc` may move it, so look it up after.
        let ppn = self.alloc(flash, Stream::Host, t)?;
        if let Some(old) = self.lookup(lpn) {
            flash.invalidate(old);
        }
        self.l2p[lpn as usize] = ppn.0;
        Ok(flash.program_host(ppn, lpn, tx))
    }

    pub fn discard(&mut self, flash: &mut Flash, lpn: u64) {
        if let Some(old) = self.lookup(lpn) {
            flash.invalidate(old);
            self.l2p[lpn as usize] = UNMAPPED;
        }
    }

    /// Every mapped block agrees with the reverse map; the line budget holds.
    pub fn check(&self, flash: &Flash) -> Result<(), String> {
        for (l, &p) in self.l2p.iter().enumerate() {
            if p != UNMAPPED && flash.owner(Ppn(p)) != Some(l as u64) {
                return Err(format!(
                    "conventional block {l} maps to {p} whose p2l differs"
                ));
            }
        }
        if self.lines_held() > self.max_lines {
            return Err(format!(
                "conventional region holds {} lines, budget {}",
                self.lines_held(),
                self.max_lines
            ));
        }
        Ok(())
    }
}
