//! IPLFS interval-mapping FTL: a logical-to-physical map over a 2^64-block logical space that
//! keeps mappings only for the live interval (IPLFS, ATC '22, "Interval Mapping").
//!
//! Owns: the tree of one root per root region (default 2^56 blocks, one file-system log each),
//! zone nodes (default 1024 map nodes = 16 GiB) and map nodes (default 4096 entries = 16 MiB),
//! map-node compaction (into the smallest of the layouts below, run every
//! `compaction_period_ns` of device time on the dirty nodes whose valid ratio fell below
//! `compaction_threshold` or whose compacted layout is no longer the smallest), and the
//! modelled device-DRAM size of all of it.
//!
//! Model of the tree (what [`IntervalMap::memory`] charges, computed from the counts each
//! node holds, never from a constant):
//! - a **map node** is a 16 B header plus one layout: **dense**, an array of `E` 4-byte
//!   entries (every node starts so); **regions**, a region directory of `E / R` 2-byte entries
//!   and one `R`-entry region mapping per region that holds a valid entry (a write into a
//!   region without a mapping allocates one); **bitmap**, an `E`-bit validity bitmap, a rank
//!   directory of one 2-byte count per 512 entries (4-byte when `E > 2^16`) and 4 B per valid
//!   entry packed in offset order; **list**, 6 B (2-byte offset, 4-byte entry; 8 B when
//!   `E > 2^16`) per valid entry. A write into a dropped slot of a bitmap or list inserts the
//!   entry in place (+4 B / +6 B) until compaction picks a smaller layout (dense again). In
//!   this process the rank directory holds `u32` counts and a list `(u32, u32)` pairs: the
//!   model charges the firmware's field widths above;
//! - a **zone node** is an array of 4-byte map-node pointers (`zone_map_nodes` of them);
//! - a **root** is an array of 4-byte zone pointers spanning its interval, from the zone of
//!   the first valid mapping to the zone of the last, plus a 16 B header: it expands and shrinks
//!   with the interval. (In this process the roots and zones are kept in a `BTreeMap`, so a
//!   hostile address far from the interval costs a few bytes here; the modelled root still
//!   pays for the whole span, as the device would.)
//!
//! Invariants:
//! - every map node held has at least one valid entry (a node whose last entry is unmapped is
//!   freed at once, and a zone node with no map node is freed with it): the interval of a
//!   region is exactly [first valid mapping, last valid mapping] and slides as the log's tail
//!   is discarded and its head appended;
//! - `valid` of a node equals its number of mapped entries; `map_node_bytes` equals the sum of
//!   the modelled sizes of all map nodes; `valid_total` the sum of `valid`;
//! - a bitmap node's `rank[b]` counts the set bits before entry `512 b`, and `packed` holds
//!   exactly one entry per set bit, in offset order;
//! - an entry is `UNMAPPED` (u32::MAX) or a physical page number; `map` never stores
//!   `UNMAPPED` as a mapping (it unmaps instead).
//!
//! Lock order: none (owned by the engine, under its lock).

use std::collections::BTreeMap;

use serde::Serialize;

use super::page::Mapping;
use super::{FtlStats, Lpn, Ppn};

const UNMAPPED: u32 = u32::MAX;
/// No region mapping for this directory slot.
const NO_REGION: u32 = u32::MAX;
/// Modelled sizes (bytes), 32-bit firmware fields as in the public IPLFS code.
const NODE_HEADER_BYTES: u64 = 16;
const ENTRY_BYTES: u64 = 4;
const DIR_ENTRY_BYTES: u64 = 2;
/// Entries per rank-directory block of a bitmap node: a lookup popcounts at most
/// `RANK_BLOCK_ENTRIES / 64` = 8 words after the block's prefix count.
const RANK_BLOCK_ENTRIES: usize = 512;
const PTR_BYTES: u64 = 4;
/// Discards of at most this many blocks unmap block by block (`unmap_range`): one tree walk
/// per block instead of a listing walk plus an unmap walk and a vector.
const UNMAP_PER_BLOCK: u64 = 64;
const ROOT_HEADER_BYTES: u64 = 16;

/// Parameters of the interval map. Sizes are powers of two, in 4 KiB blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalConfig {
    /// Entries of a map node (`E`; 4096 = 16 MiB of logical space). Power of two, 64..=2^20.
    pub map_node_blocks: u64,
    /// Map nodes per zone node (1024: a zone covers 16 GiB). Power of two, 1..=2^20.
    pub zone_map_nodes: u64,
    /// log2 of the blocks covered by one root (one interval). 56: one root per file-system
    /// log region (`gc=none` puts log `i` at `i * 2^56`). Between the zone size and 64.
    pub root_region_bits: u32,
    /// A dirty map node whose valid entries over allocated entries fall below this is compacted.
    pub compaction_threshold: f64,
    /// Device time between compactions; 0 disables periodic compaction.
    pub compaction_period_ns: u64,
    /// Modelled firmware time to examine one eligible node.
    pub compaction_node_ns: u64,
    /// Modelled firmware time per entry scanned or copied.
    pub compaction_entry_ns: u64,
    /// Smallest region of a compacted node, in entries (power of two, 1..=E).
    pub min_region_blocks: u64,
    /// Device DRAM for the map nodes and zone nodes: a host write that needs new nodes
    /// beyond it is refused (a real FTL's DRAM is finite, and so is this process's memory:
    /// scattered writes over the 2^64 space would otherwise cost a node each without bound).
    pub max_map_bytes: u64,
}

impl Default for IntervalConfig {
    fn default() -> Self {
        IntervalConfig {
            map_node_blocks: 4096,
            zone_map_nodes: 1024,
            root_region_bits: 56,
            compaction_threshold: 0.7,
            compaction_period_ns: 30_000_000_000,
            compaction_node_ns: 1_000,
            compaction_entry_ns: 2,
            min_region_blocks: 16,
            max_map_bytes: 1 << 30,
        }
    }
}

impl IntervalConfig {
    /// Check the parameters; the error says which one is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        let pow2 = |name: &str, v: u64, lo: u64, hi: u64| {
            if v.is_power_of_two() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "interval FTL: {name} = {v} must be a power of two in {lo}..={hi}"
                ))
            }
        };
        pow2("map_node_blocks", self.map_node_blocks, 64, 1 << 20)?;
        pow2("zone_map_nodes", self.zone_map_nodes, 1, 1 << 20)?;
        pow2(
            "min_region_blocks",
            self.min_region_blocks,
            1,
            self.map_node_blocks,
        )?;
        let zone_bits =
            self.map_node_blocks.trailing_zeros() + self.zone_map_nodes.trailing_zeros();
        if self.root_region_bits < zone_bits || self.root_region_bits > 64 {
            return Err(format!(
                "interval FTL: root_region_bits = {} must be between the zone size ({zone_bits} bits) and 64",
                self.root_region_bits
            ));
        }
        let one_node = NODE_HEADER_BYTES
            + self.map_node_blocks * ENTRY_BYTES
            + self.zone_map_nodes * PTR_BYTES;
        if self.max_map_bytes < one_node {
            return Err(format!(
                "interval FTL: max_map_bytes = {} cannot hold one map node and its zone node ({one_node} B)",
                self.max_map_bytes
            ));
        }
        if !(self.compaction_threshold.is_finite()
            && (0.0..=1.0).contains(&self.compaction_threshold))
        {
            return Err(format!(
                "interval FTL: compaction_threshold = {} must be in 0..=1",
                self.compaction_threshold
            ));
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Repr {
    /// One entry per block of the node.
    Dense(Box<[u32]>),
    /// Regions of `1 << shift` entries; `dir[r]` is the start of region `r` in `buf`, or
    /// `NO_REGION`.
    Compact {
        shift: u32,
        dir: Box<[u32]>,
        buf: Vec<u32>,
    },
    /// A validity bitmap (`E / 64` words), a rank directory (`rank[b]`: valid entries before
    /// entry `b * RANK_BLOCK_ENTRIES`) and the valid entries packed in offset order: entry
    /// `off` is `packed[rank of off]` when its bit is set. A node with scattered holes that
    /// still holds more than 6.4 % of its entries (264 of 4096; random invalidations leave no
    /// empty region).
    Bitmap {
        bits: Box<[u64]>,
        rank: Box<[u32]>,
        packed: Vec<u32>,
    },
    /// Only the valid entries, sorted by offset, as `(offset, physical page)`: a node left
    /// with few, scattered valid entries.
    List(Vec<(u32, u32)>),
}

/// Layout of a map node, for statistics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Dense,
    Regions,
    Bitmap,
    List,
}

/// Modelled bytes of a list entry's offset, and of a rank-directory entry (a count of the
/// entries before a block, at most `E - RANK_BLOCK_ENTRIES`): 2 while they fit 16 bits.
fn list_offset_bytes(e: u64) -> u64 {
    if e <= 1 << 16 {
        2
    } else {
        4
    }
}

/// Modelled bytes of a dense node of `e` entries.
fn dense_bytes(e: u64) -> u64 {
    NODE_HEADER_BYTES + e * ENTRY_BYTES
}

/// Modelled bytes of a list node holding `valid` entries.
fn list_bytes(e: u64, valid: u64) -> u64 {
    NODE_HEADER_BYTES + valid * (list_offset_bytes(e) + ENTRY_BYTES)
}

/// Rank-directory entries of a bitmap node: one per `RANK_BLOCK_ENTRIES` entries.
fn rank_entries(e: u64) -> u64 {
    e.div_ceil(RANK_BLOCK_ENTRIES as u64)
}

/// Modelled bytes of a bitmap node holding `valid` entries: header, `E / 8` bytes of
/// validity bitmap, the rank directory, 4 B per valid entry.
fn bitmap_bytes(e: u64, valid: u64) -> u64 {
    NODE_HEADER_BYTES + e / 8 + rank_entries(e) * list_offset_bytes(e) + valid * ENTRY_BYTES
}

/// Index in `packed` of entry `off` of a bitmap node (the valid entries before it).
fn bitmap_rank(bits: &[u64], rank: &[u32], off: usize) -> usize {
    let block = off / RANK_BLOCK_ENTRIES;
    let w = off / 64;
    let before: u32 = bits[block * (RANK_BLOCK_ENTRIES / 64)..w]
        .iter()
        .map(|x| x.count_ones())
        .sum();
    let partial = (bits[w] & ((1u64 << (off % 64)) - 1)).count_ones();
    (rank[block] + before + partial) as usize
}

#[derive(Debug)]
struct MapNode {
    repr: Repr,
    valid: u32,
    /// Changed since it was last examined by compaction.
    dirty: bool,
}

impl MapNode {
    fn new(e: usize) -> Self {
        MapNode {
            repr: Repr::Dense(vec![UNMAPPED; e].into_boxed_slice()),
            valid: 0,
            dirty: true,
        }
    }

    fn get(&self, off: usize) -> u32 {
        match &self.repr {
            Repr::Dense(v) => v[off],
            Repr::Compact { shift, dir, buf } => {
                let d = dir[off >> shift];
                if d == NO_REGION {
                    UNMAPPED
                } else {
                    buf[d as usize + (off & ((1 << shift) - 1))]
                }
            }
            Repr::Bitmap { bits, rank, packed } => {
                if bits[off / 64] & (1 << (off % 64)) == 0 {
                    UNMAPPED
                } else {
                    packed[bitmap_rank(bits, rank, off)]
                }
            }
            Repr::List(l) => match l.binary_search_by_key(&(off as u32), |&(o, _)| o) {
                Ok(i) => l[i].1,
                Err(_) => UNMAPPED,
            },
        }
    }

    fn layout(&self) -> Layout {
        match self.repr {
            Repr::Dense(_) => Layout::Dense,
            Repr::Compact { .. } => Layout::Regions,
            Repr::Bitmap { .. } => Layout::Bitmap,
            Repr::List(_) => Layout::List,
        }
    }

    fn is_compacted(&self) -> bool {
        self.layout() != Layout::Dense
    }

    /// Set entry `off` to `val` (may be `UNMAPPED`); returns the old entry. A write into a
    /// dropped region allocates its region mapping; a bitmap or a list inserts or removes the
    /// entry in place (the node grows or shrinks by one entry; compaction re-grows it to dense
    /// once it outgrows that).
    fn set(&mut self, off: usize, val: u32) -> u32 {
        let old = match &mut self.repr {
            Repr::Dense(v) => std::mem::replace(&mut v[off], val),
            Repr::Compact { shift, dir, buf } => {
                let r = off >> *shift;
                let len = 1usize << *shift;
                if dir[r] == NO_REGION {
                    if val == UNMAPPED {
                        return UNMAPPED;
                    }
                    dir[r] = buf.len() as u32;
                    buf.resize(buf.len() + len, UNMAPPED);
                }
                std::mem::replace(&mut buf[dir[r] as usize + (off & (len - 1))], val)
            }
            Repr::Bitmap { bits, rank, packed } => {
                let (w, bit) = (off / 64, 1u64 << (off % 64));
                let i = bitmap_rank(bits, rank, off);
                let later = off / RANK_BLOCK_ENTRIES + 1;
                match (bits[w] & bit != 0, val == UNMAPPED) {
                    (true, false) => std::mem::replace(&mut packed[i], val),
                    (true, true) => {
                        bits[w] &= !bit;
                        rank[later..].iter_mut().for_each(|r| *r -= 1);
                        packed.remove(i)
                    }
                    (false, false) => {
                        bits[w] |= bit;
                        rank[later..].iter_mut().for_each(|r| *r += 1);
                        packed.insert(i, val);
                        UNMAPPED
                    }
                    (false, true) => UNMAPPED,
                }
            }
            Repr::List(l) => match l.binary_search_by_key(&(off as u32), |&(o, _)| o) {
                Ok(i) if val == UNMAPPED => l.remove(i).1,
                Ok(i) => std::mem::replace(&mut l[i].1, val),
                Err(i) => {
                    if val != UNMAPPED {
                        l.insert(i, (off as u32, val));
                    }
                    UNMAPPED
                }
            },
        };
        match (old == UNMAPPED, val == UNMAPPED) {
            (true, false) => self.valid += 1,
            (false, true) => self.valid -= 1,
            _ => {}
        }
        if old != val {
            self.dirty = true;
        }
        old
    }

    /// Entries held (dense: E; regions: the region mappings; bitmap and list: the valid
    /// entries).
    fn allocated(&self) -> u64 {
        match &self.repr {
            Repr::Dense(v) => v.len() as u64,
            Repr::Compact { buf, .. } => buf.len() as u64,
            Repr::Bitmap { packed, .. } => packed.len() as u64,
            Repr::List(l) => l.len() as u64,
        }
    }

    /// Modelled bytes of the node in its layout, from the counts it holds.
    fn bytes(&self, e: u64) -> u64 {
        match &self.repr {
            Repr::Dense(_) => dense_bytes(e),
            Repr::Compact { shift, buf, .. } => {
                NODE_HEADER_BYTES + (e >> shift) * DIR_ENTRY_BYTES + buf.len() as u64 * ENTRY_BYTES
            }
            Repr::Bitmap { packed, .. } => bitmap_bytes(e, packed.len() as u64),
            Repr::List(l) => list_bytes(e, l.len() as u64),
        }
    }

    /// Whether compaction should examine this dirty node: its valid entries over held
    /// entries fell below `threshold` (dense and region nodes hold unmapped entries), or it
    /// is compacted and a layout sized from its valid count alone (dense, bitmap, list) is now
    /// smaller (writes into dropped slots grew it; or a bitmap node decayed below 6.4 % valid,
    /// where a list is smaller). O(1), as the firmware's walk over the nodes would be.
    fn eligible(&self, e: u64, threshold: f64) -> bool {
        let valid = u64::from(self.valid);
        if (valid as f64) < threshold * self.allocated() as f64 {
            return true;
        }
        let sized = dense_bytes(e)
            .min(bitmap_bytes(e, valid))
            .min(list_bytes(e, valid));
        self.is_compacted() && self.bytes(e) > sized
    }

    /// Validity bitmap of the node (E / 64 words).
    fn valid_words(&self, e: usize) -> Vec<u64> {
        let mut w = vec![0u64; e / 64];
        match &self.repr {
            Repr::Dense(v) => {
                for (i, &p) in v.iter().enumerate() {
                    if p != UNMAPPED {
                        w[i / 64] |= 1 << (i % 64);
                    }
                }
            }
            Repr::Compact { shift, dir, buf } => {
                let len = 1usize << shift;
                for (r, &d) in dir.iter().enumerate() {
                    if d == NO_REGION {
                        continue;
                    }
                    for k in 0..len {
                        if buf[d as usize + k] != UNMAPPED {
                            let i = (r << shift) + k;
                            w[i / 64] |= 1 << (i % 64);
                        }
                    }
                }
            }
            Repr::Bitmap { bits, .. } => w.copy_from_slice(bits),
            Repr::List(l) => {
                for &(o, _) in l {
                    w[o as usize / 64] |= 1 << (o % 64);
                }
            }
        }
        w
    }

    /// Rebuild the node in the smallest layout: dense; regions of the power-of-two size
    /// (>= `min_shift`) that needs the fewest bytes; a bitmap with the valid entries packed;
    /// or a list of the valid entries. Returns (bytes before, bytes after, entries copied);
    /// unchanged (and nothing copied) when no layout is smaller.
    fn compact(&mut self, e: usize, min_shift: u32) -> (u64, u64, u64) {
        let before = self.bytes(e as u64);
        let words = self.valid_words(e);
        let e_shift = e.trailing_zeros();
        let valid = u64::from(self.valid);
        // Candidate layouts, smallest wins (ties: the earlier one).
        let mut best = (Candidate::List, list_bytes(e as u64, valid));
        let bitmap = bitmap_bytes(e as u64, valid);
        if bitmap < best.1 {
            best = (Candidate::Bitmap, bitmap);
        }
        for shift in min_shift..=e_shift {
            let bytes = if shift == e_shift {
                dense_bytes(e as u64)
            } else {
                let occupied = occupied_regions(&words, shift);
                NODE_HEADER_BYTES
                    + ((e as u64) >> shift) * DIR_ENTRY_BYTES
                    + occupied * (1u64 << shift) * ENTRY_BYTES
            };
            if bytes < best.1 {
                best = (Candidate::Regions(shift), bytes);
            }
        }
        let (layout, after) = best;
        if after >= before {
            return (before, before, 0);
        }
        let repr = match layout {
            Candidate::Regions(shift) if shift == e_shift => {
                let mut v = vec![UNMAPPED; e].into_boxed_slice();
                for (i, slot) in v.iter_mut().enumerate() {
                    *slot = self.get(i);
                }
                Repr::Dense(v)
            }
            Candidate::Regions(shift) => {
                let len = 1usize << shift;
                let mut dir = vec![NO_REGION; e >> shift].into_boxed_slice();
                let mut buf = Vec::new();
                for (r, d) in dir.iter_mut().enumerate() {
                    let lo = r << shift;
                    if !any_bits(&words, lo, len) {
                        continue;
                    }
                    *d = buf.len() as u32;
                    for k in 0..len {
                        buf.push(self.get(lo + k));
                    }
                }
                Repr::Compact { shift, dir, buf }
            }
            Candidate::Bitmap => {
                let per_block = RANK_BLOCK_ENTRIES / 64;
                let mut rank = vec![0u32; rank_entries(e as u64) as usize].into_boxed_slice();
                let mut packed = Vec::with_capacity(self.valid as usize);
                for (wi, &w) in words.iter().enumerate() {
                    if wi % per_block == 0 {
                        rank[wi / per_block] = packed.len() as u32;
                    }
                    let mut w = w;
                    while w != 0 {
                        packed.push(self.get(wi * 64 + w.trailing_zeros() as usize));
                        w &= w - 1;
                    }
                }
                Repr::Bitmap {
                    bits: words.into_boxed_slice(),
                    rank,
                    packed,
                }
            }
            Candidate::List => {
                let mut l = Vec::with_capacity(self.valid as usize);
                for (wi, &w) in words.iter().enumerate() {
                    let mut w = w;
                    while w != 0 {
                        let o = wi * 64 + w.trailing_zeros() as usize;
                        l.push((o as u32, self.get(o)));
                        w &= w - 1;
                    }
                }
                Repr::List(l)
            }
        };
        self.repr = repr;
        debug_assert_eq!(self.bytes(e as u64), after);
        (before, after, self.allocated())
    }

    /// A bitmap node's rank directory counts its bitmap, and it packs exactly the set bits'
    /// entries, none `UNMAPPED` (for tests).
    fn check_layout(&self, e: usize) -> Result<(), String> {
        let Repr::Bitmap { bits, rank, packed } = &self.repr else {
            return Ok(());
        };
        if bits.len() != e / 64 || rank.len() as u64 != rank_entries(e as u64) {
            return Err(format!(
                "bitmap of {} words, rank of {} entries",
                bits.len(),
                rank.len()
            ));
        }
        let per_block = RANK_BLOCK_ENTRIES / 64;
        let mut count = 0u32;
        for (wi, w) in bits.iter().enumerate() {
            if wi % per_block == 0 && rank[wi / per_block] != count {
                return Err(format!(
                    "rank[{}] {} but {count} bits before",
                    wi / per_block,
                    rank[wi / per_block]
                ));
            }
            count += w.count_ones();
        }
        if packed.len() != count as usize || packed.contains(&UNMAPPED) {
            return Err(format!("{} packed entries for {count} bits", packed.len()));
        }
        Ok(())
    }

    fn first_valid(&self, e: usize) -> Option<usize> {
        (0..e).find(|&i| self.get(i) != UNMAPPED)
    }

    fn last_valid(&self, e: usize) -> Option<usize> {
        (0..e).rev().find(|&i| self.get(i) != UNMAPPED)
    }
}

/// A layout compaction can choose (`Regions(log2 E)` is dense).
#[derive(Clone, Copy)]
enum Candidate {
    Regions(u32),
    Bitmap,
    List,
}

/// Whether any bit of `words` in `lo..lo + len` is set.
fn any_bits(words: &[u64], lo: usize, len: usize) -> bool {
    if len >= 64 {
        words[lo / 64..(lo + len) / 64].iter().any(|&w| w != 0)
    } else {
        let mask = (1u64 << len) - 1;
        (words[lo / 64] >> (lo % 64)) & mask != 0
    }
}

/// Regions of `1 << shift` entries with at least one valid entry.
fn occupied_regions(words: &[u64], shift: u32) -> u64 {
    let len = 1usize << shift;
    if len >= 64 {
        words
            .chunks(len / 64)
            .filter(|c| c.iter().any(|&w| w != 0))
            .count() as u64
    } else if len == 1 {
        words.iter().map(|w| u64::from(w.count_ones())).sum()
    } else {
        let mask = (1u64 << len) - 1;
        let mut n = 0;
        for &w in words {
            if w == 0 {
                continue;
            }
            for j in 0..64 / len {
                if (w >> (j * len)) & mask != 0 {
                    n += 1;
                }
            }
        }
        n
    }
}

#[derive(Debug)]
struct ZoneNode {
    nodes: Box<[Option<Box<MapNode>>]>,
    live: u32,
}

/// Modelled device DRAM of the tree, by level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IntervalMemory {
    pub root_bytes: u64,
    pub zone_node_bytes: u64,
    pub map_node_bytes: u64,
    pub total_bytes: u64,
}

/// One root's live interval: first and last valid logical block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LiveInterval {
    /// Root region number (`lpn >> root_region_bits`).
    pub region: u64,
    /// First valid mapping (the log's tail: discards move it up).
    pub tail: u64,
    /// Last valid mapping (the log's head: appends move it up).
    pub head: u64,
}

/// Map nodes by layout (they sum to `map_nodes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MapNodeLayouts {
    pub dense: u64,
    pub regions: u64,
    pub bitmap: u64,
    pub list: u64,
}

/// Counters and sizes of the interval map.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IntervalStats {
    pub memory: IntervalMemory,
    pub map_nodes: u64,
    pub compacted_map_nodes: u64,
    pub layouts: MapNodeLayouts,
    pub zone_nodes: u64,
    pub roots: u64,
    /// Valid mappings (live logical blocks).
    pub valid_entries: u64,
    /// Entries the map nodes hold (valid or not).
    pub allocated_entries: u64,
    /// What a flat page map (4 B per block) of the same live data would need.
    pub page_map_bytes_for_live: u64,
    /// What a flat map (4 B per block) of each root's touched range (lowest to highest block
    /// ever written) would need, summed over roots.
    pub flat_touched_bytes: u64,
    pub map_nodes_freed: u64,
    pub zone_nodes_freed: u64,
    pub compaction_runs: u64,
    pub nodes_examined: u64,
    pub nodes_compacted: u64,
    pub compaction_bytes_saved: u64,
    /// Modelled firmware time spent compacting (I/O waits behind it).
    pub compaction_busy_ns: u64,
    /// The tree's modelled bytes (`memory.total_bytes`) and a page map of the live data (4 B
    /// per valid entry) as the last compaction run left them (0 before the first run): the
    /// exact "after compaction" point, which a sampler reading the tree later, after more
    /// writes have dirtied dense nodes, overstates.
    pub after_compaction_bytes: u64,
    pub after_compaction_page_map_bytes: u64,
    pub intervals: Vec<LiveInterval>,
}

/// The interval map.
#[derive(Debug)]
pub struct IntervalMap {
    cfg: IntervalConfig,
    e: usize,
    node_shift: u32,
    zone_shift: u32,
    min_shift: u32,
    /// Zone nodes by global zone number (`lpn >> zone_shift`).
    zones: BTreeMap<u64, ZoneNode>,
    /// Lowest and highest block ever written, per root region.
    touched: BTreeMap<u64, (u64, u64)>,
    map_node_bytes: u64,
    valid_total: u64,
    allocated_total: u64,
    map_nodes: u64,
    compacted_nodes: u64,
    /// Device time of the next periodic compaction.
    next_compaction_ns: u64,
    /// The firmware is busy compacting until then.
    busy_until_ns: u64,
    stats: IntervalStats,
}

impl IntervalMap {
    pub fn new(cfg: IntervalConfig) -> Result<Self, String> {
        cfg.validate()?;
        let node_shift = cfg.map_node_blocks.trailing_zeros();
        Ok(IntervalMap {
            e: cfg.map_node_blocks as usize,
            node_shift,
            zone_shift: node_shift + cfg.zone_map_nodes.trailing_zeros(),
            min_shift: cfg.min_region_blocks.trailing_zeros(),
            zones: BTreeMap::new(),
            touched: BTreeMap::new(),
            map_node_bytes: 0,
            valid_total: 0,
            allocated_total: 0,
            map_nodes: 0,
            compacted_nodes: 0,
            next_compaction_ns: cfg.compaction_period_ns,
            busy_until_ns: 0,
            stats: IntervalStats::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &IntervalConfig {
        &self.cfg
    }

    fn region_of(&self, lpn: u64) -> u64 {
        lpn.checked_shr(self.cfg.root_region_bits).unwrap_or(0)
    }

    /// (zone number, node index in zone, offset in node).
    fn split(&self, lpn: u64) -> (u64, usize, usize) {
        let zone = lpn >> self.zone_shift;
        let node = ((lpn >> self.node_shift) & (self.cfg.zone_map_nodes - 1)) as usize;
        let off = (lpn & (self.cfg.map_node_blocks - 1)) as usize;
        (zone, node, off)
    }

    fn node(&self, lpn: u64) -> Option<(&MapNode, usize)> {
        let (z, n, off) = self.split(lpn);
        let node = self.zones.get(&z)?.nodes[n].as_deref()?;
        Some((node, off))
    }

    fn lookup_raw(&self, lpn: u64) -> Option<u32> {
        let (node, off) = self.node(lpn)?;
        let p = node.get(off);
        (p != UNMAPPED).then_some(p)
    }

    fn set(&mut self, lpn: u64, ppn: u32) -> Option<u32> {
        let (z, n, off) = self.split(lpn);
        let e = self.e;
        let zone_nodes = self.cfg.zone_map_nodes as usize;
        if ppn == UNMAPPED {
            let zone = self.zones.get_mut(&z)?;
            let node = zone.nodes[n].as_mut()?;
            let (bytes0, alloc0) = (node.bytes(e as u64), node.allocated());
            let old = node.set(off, UNMAPPED);
            if old == UNMAPPED {
                return None;
            }
            self.valid_total -= 1;
            self.map_node_bytes = self.map_node_bytes - bytes0 + node.bytes(e as u64);
            self.allocated_total = self.allocated_total - alloc0 + node.allocated();
            if node.valid == 0 {
                // The interval slides past a node with no valid entry: free it (and its zone).
                let bytes = node.bytes(e as u64);
                let alloc = node.allocated();
                let compacted = node.is_compacted();
                zone.nodes[n] = None;
                zone.live -= 1;
                self.map_node_bytes -= bytes;
                self.allocated_total -= alloc;
                self.map_nodes -= 1;
                self.compacted_nodes -= u64::from(compacted);
                self.stats.map_nodes_freed += 1;
                if zone.live == 0 {
                    self.zones.remove(&z);
                    self.stats.zone_nodes_freed += 1;
                }
            }
            return Some(old);
        }
        let region = self.region_of(lpn);
        let t = self.touched.entry(region).or_insert((lpn, lpn));
        t.0 = t.0.min(lpn);
        t.1 = t.1.max(lpn);
        let zone = self.zones.entry(z).or_insert_with(|| ZoneNode {
            nodes: (0..zone_nodes).map(|_| None).collect(),
            live: 0,
        });
        let node = match &mut zone.nodes[n] {
            Some(node) => node,
            slot @ None => {
                zone.live += 1;
                self.map_nodes += 1;
                self.map_node_bytes += NODE_HEADER_BYTES + e as u64 * ENTRY_BYTES;
                self.allocated_total += e as u64;
                slot.insert(Box::new(MapNode::new(e)))
            }
        };
        let (bytes0, alloc0) = (node.bytes(e as u64), node.allocated());
        let old = node.set(off, ppn);
        self.map_node_bytes = self.map_node_bytes - bytes0 + node.bytes(e as u64);
        self.allocated_total = self.allocated_total - alloc0 + node.allocated();
        if old == UNMAPPED {
            self.valid_total += 1;
            None
        } else {
            Some(old)
        }
    }

    /// Refuse a write of `n` blocks at `lpn` whose new map and zone nodes would take the map
    /// past `max_map_bytes`.
    pub fn check_room(&self, lpn: u64, n: u64) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let dense = NODE_HEADER_BYTES + self.e as u64 * ENTRY_BYTES;
        let zone_bytes = self.cfg.zone_map_nodes * PTR_BYTES;
        let now = self.map_node_bytes + self.zones.len() as u64 * zone_bytes;
        let last = lpn.saturating_add(n - 1);
        let mut need = 0u64;
        let mut node = lpn >> self.node_shift;
        let mut seen_zone = None;
        // A request is bounded by its buffer, so this walks a few nodes.
        while node <= last >> self.node_shift {
            let first = node << self.node_shift;
            let (z, i, _) = self.split(first);
            match self.zones.get(&z) {
                Some(zone) if zone.nodes[i].is_some() => {}
                Some(_) => need += dense,
                None => {
                    need += dense;
                    if seen_zone != Some(z) {
                        need += zone_bytes;
                        seen_zone = Some(z);
                    }
                }
            }
            node += 1;
        }
        if need > 0 && now + need > self.cfg.max_map_bytes {
            return Err(format!(
                "interval FTL: mapping {n} blocks at {lpn} needs {need} B of map nodes, but the map holds {now} B of its {} B (max_map_bytes); discard data or raise max_map_bytes",
                self.cfg.max_map_bytes
            ));
        }
        Ok(())
    }

    /// Every valid mapping in logical order (for invariant checks).
    pub fn iter_mapped(&self) -> impl Iterator<Item = (Lpn, Ppn)> + '_ {
        let zone_shift = self.zone_shift;
        let node_shift = self.node_shift;
        self.zones.iter().flat_map(move |(&z, zone)| {
            zone.nodes
                .iter()
                .enumerate()
                .filter_map(|(n, node)| node.as_deref().map(|node| (n, node)))
                .flat_map(move |(n, node)| {
                    let base = (z << zone_shift) + ((n as u64) << node_shift);
                    (0..self.e).filter_map(move |off| {
                        let p = node.get(off);
                        (p != UNMAPPED).then_some((Lpn(base + off as u64), Ppn(p)))
                    })
                })
        })
    }

    /// Visit every valid mapping in `lpn..lpn + n` (skipping absent nodes, so a huge range
    /// costs only what is mapped in it).
    pub fn mapped_in(&self, lpn: u64, n: u64) -> Vec<(Lpn, Ppn)> {
        let end = lpn.saturating_add(n);
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        let (z0, n0, _) = self.split(lpn);
        let (z1, n1, _) = self.split(end - 1);
        for (&z, zone) in self.zones.range(z0..=z1) {
            // Only the map nodes the range overlaps: a one-block discard visited all 1024
            // slots of its zone (7 % of the CPU of a `gc=none` bench run, under the
            // device's engine lock).
            let first = if z == z0 { n0 } else { 0 };
            let last = if z == z1 { n1 } else { zone.nodes.len() - 1 };
            for (i, node) in zone.nodes.iter().enumerate().take(last + 1).skip(first) {
                let Some(node) = node.as_deref() else {
                    continue;
                };
                let base = (z << self.zone_shift) + ((i as u64) << self.node_shift);
                let lo = lpn.max(base);
                let hi = end.min(base.saturating_add(self.cfg.map_node_blocks));
                for l in lo..hi {
                    let p = node.get((l - base) as usize);
                    if p != UNMAPPED {
                        out.push((Lpn(l), Ppn(p)));
                    }
                }
            }
        }
        out
    }

    /// The live interval of every root (ascending by region).
    pub fn intervals(&self) -> Vec<LiveInterval> {
        let mut out: Vec<LiveInterval> = Vec::new();
        let region_zone_shift = self.cfg.root_region_bits - self.zone_shift;
        let mut z = self.zones.keys().next().copied();
        while let Some(first) = z {
            let region = first.checked_shr(region_zone_shift).unwrap_or(0);
            let last_zone_of_region = match (region + 1).checked_shl(region_zone_shift) {
                Some(next) if region_zone_shift < 64 && next > first => next - 1,
                _ => u64::MAX,
            };
            let last = *self
                .zones
                .range(first..=last_zone_of_region)
                .next_back()
                .map(|(k, _)| k)
                .unwrap_or(&first);
            let tail = self.zone_first_valid(first);
            let head = self.zone_last_valid(last);
            out.push(LiveInterval { region, tail, head });
            z = last_zone_of_region
                .checked_add(1)
                .and_then(|n| self.zones.range(n..).next().map(|(k, _)| *k));
        }
        out
    }

    fn zone_first_valid(&self, z: u64) -> u64 {
        let zone = &self.zones[&z];
        for (i, node) in zone.nodes.iter().enumerate() {
            if let Some(node) = node {
                let off = node.first_valid(self.e).unwrap_or(0);
                return (z << self.zone_shift) + ((i as u64) << self.node_shift) + off as u64;
            }
        }
        z << self.zone_shift
    }

    fn zone_last_valid(&self, z: u64) -> u64 {
        let zone = &self.zones[&z];
        for (i, node) in zone.nodes.iter().enumerate().rev() {
            if let Some(node) = node {
                let off = node.last_valid(self.e).unwrap_or(0);
                return (z << self.zone_shift) + ((i as u64) << self.node_shift) + off as u64;
            }
        }
        z << self.zone_shift
    }

    /// Modelled DRAM of the tree.
    pub fn memory(&self) -> IntervalMemory {
        let root_bytes: u64 = self
            .intervals()
            .iter()
            .map(|iv| {
                let zones = (iv.head >> self.zone_shift) - (iv.tail >> self.zone_shift) + 1;
                ROOT_HEADER_BYTES + zones * PTR_BYTES
            })
            .sum();
        let zone_node_bytes = self.zones.len() as u64 * self.cfg.zone_map_nodes * PTR_BYTES;
        IntervalMemory {
            root_bytes,
            zone_node_bytes,
            map_node_bytes: self.map_node_bytes,
            total_bytes: root_bytes + zone_node_bytes + self.map_node_bytes,
        }
    }

    /// Counters, sizes and intervals.
    pub fn stats(&self) -> IntervalStats {
        let mut s = self.stats.clone();
        s.memory = self.memory();
        s.map_nodes = self.map_nodes;
        s.compacted_map_nodes = self.compacted_nodes;
        for node in self.zones.values().flat_map(|z| z.nodes.iter().flatten()) {
            let n = match node.layout() {
                Layout::Dense => &mut s.layouts.dense,
                Layout::Regions => &mut s.layouts.regions,
                Layout::Bitmap => &mut s.layouts.bitmap,
                Layout::List => &mut s.layouts.list,
            };
            *n += 1;
        }
        s.zone_nodes = self.zones.len() as u64;
        s.intervals = self.intervals();
        s.roots = s.intervals.len() as u64;
        s.valid_entries = self.valid_total;
        s.allocated_entries = self.allocated_total;
        s.page_map_bytes_for_live = self.valid_total * ENTRY_BYTES;
        s.flat_touched_bytes = self
            .touched
            .values()
            .map(|&(lo, hi)| (hi - lo).saturating_add(1).saturating_mul(ENTRY_BYTES))
            .fold(0u64, u64::saturating_add);
        s
    }

    /// Compact every dirty map node whose valid ratio is below the threshold, now. Returns the
    /// modelled firmware time it took.
    pub fn compact_all(&mut self) -> u64 {
        let e = self.e;
        let min_shift = self.min_shift;
        let threshold = self.cfg.compaction_threshold;
        let (node_ns, entry_ns) = (self.cfg.compaction_node_ns, self.cfg.compaction_entry_ns);
        let mut cost = 0u64;
        let mut bytes_delta: i64 = 0;
        let mut alloc_delta: i64 = 0;
        let mut compacted_delta: i64 = 0;
        for zone in self.zones.values_mut() {
            for node in zone.nodes.iter_mut().flatten() {
                if !node.dirty {
                    continue;
                }
                let alloc = node.allocated();
                if !node.eligible(e as u64, threshold) {
                    continue;
                }
                node.dirty = false;
                self.stats.nodes_examined += 1;
                let was_compact = node.is_compacted();
                let (before, after, copied) = node.compact(e, min_shift);
                cost += node_ns + entry_ns * (alloc + copied);
                if after < before {
                    self.stats.nodes_compacted += 1;
                    self.stats.compaction_bytes_saved += before - after;
                    bytes_delta += after as i64 - before as i64;
                    alloc_delta += node.allocated() as i64 - alloc as i64;
                    let is_compact = node.is_compacted();
                    compacted_delta += i64::from(is_compact) - i64::from(was_compact);
                }
            }
        }
        self.map_node_bytes = self.map_node_bytes.wrapping_add_signed(bytes_delta);
        self.allocated_total = self.allocated_total.wrapping_add_signed(alloc_delta);
        self.compacted_nodes = self.compacted_nodes.wrapping_add_signed(compacted_delta);
        self.stats.compaction_runs += 1;
        self.stats.compaction_busy_ns += cost;
        self.stats.after_compaction_bytes = self.memory().total_bytes;
        self.stats.after_compaction_page_map_bytes = self.valid_total * ENTRY_BYTES;
        cost
    }

    /// Run the periodic compaction that fell due at or before `now` (device time), if any.
    /// The firmware compacts from the due time (or when it is next free) for the modelled
    /// cost; returns when it is free again. A request submitted before that waits for it (the
    /// engine delays its start): this is the I/O stall the slides and D2FS report.
    pub fn tick(&mut self, now: u64) -> u64 {
        let period = self.cfg.compaction_period_ns;
        if period > 0 && now >= self.next_compaction_ns {
            // Only the latest due time matters: nothing changed the tree in between.
            let missed = (now - self.next_compaction_ns) / period;
            let due = self.next_compaction_ns + missed * period;
            let start = due.max(self.busy_until_ns);
            let cost = self.compact_all();
            self.busy_until_ns = start.saturating_add(cost);
            self.next_compaction_ns = due.saturating_add(period);
        }
        self.busy_until_ns
    }

    /// Check the invariants of the module header (O(tree size); for tests).
    pub fn check_invariants(&self) -> Result<(), String> {
        let e = self.e as u64;
        let (mut bytes, mut valid, mut alloc, mut nodes, mut compacted) = (0, 0, 0, 0, 0);
        for (&z, zone) in &self.zones {
            let live = zone.nodes.iter().flatten().count() as u32;
            if live == 0 || live != zone.live {
                return Err(format!("zone {z}: live {} but {live} map nodes", zone.live));
            }
            for (i, node) in zone.nodes.iter().enumerate() {
                let Some(node) = node else { continue };
                node.check_layout(self.e)
                    .map_err(|m| format!("zone {z} node {i}: {m}"))?;
                let n = (0..self.e).filter(|&o| node.get(o) != UNMAPPED).count() as u32;
                if n != node.valid || n == 0 {
                    return Err(format!(
                        "zone {z} node {i}: valid {} but {n} mapped entries",
                        node.valid
                    ));
                }
                bytes += node.bytes(e);
                valid += u64::from(n);
                alloc += node.allocated();
                nodes += 1;
                compacted += u64::from(node.is_compacted());
            }
        }
        let want = (self.map_node_bytes, self.valid_total, self.allocated_total);
        if (bytes, valid, alloc) != want
            || nodes != self.map_nodes
            || compacted != self.compacted_nodes
        {
            return Err(format!(
                "totals (bytes, valid, allocated) = {want:?} but nodes sum to {:?}; nodes {} vs {nodes}, compacted {} vs {compacted}",
                (bytes, valid, alloc),
                self.map_nodes,
                self.compacted_nodes
            ));
        }
        Ok(())
    }
}

/// The page-mapping algorithm (host and GC write pointers, line GC) runs over this map:
/// `PageFtl::with_mapping` makes the `interval` FTL.
impl Mapping for IntervalMap {
    fn name(&self) -> &'static str {
        "interval-map"
    }
    fn ftl_name(&self) -> &'static str {
        "interval"
    }
    fn infinite_space(&self) -> bool {
        true
    }
    /// 2^64 − 1: every 64-bit block address but the last, because requests are checked as
    /// `addr + count <= block_count` in 64 bits.
    fn logical_blocks(&self) -> u64 {
        u64::MAX
    }
    fn lookup(&self, lpn: Lpn) -> Option<Ppn> {
        self.lookup_raw(lpn.0).map(Ppn)
    }
    /// `ppn` must be a real physical page (`u32::MAX` unmaps).
    fn map(&mut self, lpn: Lpn, ppn: Ppn) -> Option<Ppn> {
        self.set(lpn.0, ppn.0).map(Ppn)
    }
    fn unmap(&mut self, lpn: Lpn) -> Option<Ppn> {
        self.set(lpn.0, UNMAPPED).map(Ppn)
    }
    /// Short ranges (what random overwrites leave: one block each, 256 to a request) unmap
    /// block by block, one tree walk each; longer ones list what is mapped first, so that a
    /// huge range costs only what it holds. Both visit the blocks in ascending order.
    fn unmap_range(&mut self, lpn: u64, n: u64, f: &mut dyn FnMut(Ppn)) {
        if n <= UNMAP_PER_BLOCK {
            for l in lpn..lpn.saturating_add(n) {
                if let Some(p) = self.unmap(Lpn(l)) {
                    f(p);
                }
            }
            return;
        }
        for (l, _) in self.mapped_in(lpn, n) {
            if let Some(p) = self.unmap(l) {
                f(p);
            }
        }
    }
    fn memory_bytes(&self) -> u64 {
        self.memory().total_bytes
    }
    fn check_map(&self, lpn: u64, n: u64) -> Result<(), String> {
        self.check_room(lpn, n)
    }
    fn fill_stats(&self, stats: &mut FtlStats) {
        stats.interval = Some(self.stats());
    }
    /// Periodic compaction; returns how long after `t` the firmware is still busy with it.
    fn background(&mut self, t: u64) -> u64 {
        self.tick(t).saturating_sub(t)
    }
    fn entries(&self) -> Box<dyn Iterator<Item = (Lpn, Ppn)> + '_> {
        Box::new(self.iter_mapped())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::workload::Rng;

    fn small() -> IntervalConfig {
        IntervalConfig {
            map_node_blocks: 64,
            zone_map_nodes: 4,
            root_region_bits: 20,
            compaction_period_ns: 1_000,
            ..IntervalConfig::default()
        }
    }

    fn check_against(m: &IntervalMap, model: &BTreeMap<u64, u32>) {
        m.check_invariants().unwrap();
        let got: Vec<(u64, u32)> = m.iter_mapped().map(|(l, p)| (l.0, p.0)).collect();
        let want: Vec<(u64, u32)> = model.iter().map(|(&l, &p)| (l, p)).collect();
        assert_eq!(got, want);
        for (&l, &p) in model {
            assert_eq!(m.lookup(Lpn(l)), Some(Ppn(p)));
        }
        assert_eq!(m.stats().valid_entries, model.len() as u64);
    }

    /// `unmap_range` hands out the physical pages of exactly the mapped blocks of the range,
    /// in ascending logical order, whether it unmaps block by block (short ranges) or lists
    /// what is mapped first (long ones, and huge ones over absent zones).
    #[test]
    fn unmap_range_short_and_long_match_model() {
        let mut m = IntervalMap::new(small()).unwrap();
        let mut model = BTreeMap::new();
        let mut rng = Rng(11);
        for i in 0..3000u32 {
            let l = rng.below(4096) + if i % 3 == 0 { 1 << 20 } else { 0 };
            m.map(Lpn(l), Ppn(i));
            model.insert(l, i);
        }
        for k in 0..400u64 {
            let base = if k % 3 == 0 { 1 << 20 } else { 0 };
            let lpn = base + rng.below(4096);
            let n = match k % 4 {
                0 => 1,
                1 => 1 + rng.below(UNMAP_PER_BLOCK),
                2 => UNMAP_PER_BLOCK + 1 + rng.below(300),
                _ => u64::MAX - lpn,
            };
            let mut got = Vec::new();
            m.unmap_range(lpn, n, &mut |p| got.push(p.0));
            let end = lpn.saturating_add(n);
            let want: Vec<u32> = model.range(lpn..end).map(|(_, &p)| p).collect();
            model.retain(|&l, _| !(lpn..end).contains(&l));
            assert_eq!(got, want, "range {lpn}+{n}");
            if k % 50 == 0 {
                check_against(&m, &model);
            }
        }
        check_against(&m, &model);
    }

    #[test]
    fn round_trip_and_defaults() {
        let mut m = IntervalMap::new(IntervalConfig::default()).unwrap();
        assert_eq!(m.logical_blocks(), u64::MAX);
        assert_eq!(m.memory_bytes(), 0);
        assert_eq!(m.map(Lpn(5), Ppn(7)), None);
        assert_eq!(m.map(Lpn(5), Ppn(9)), Some(Ppn(7)));
        assert_eq!(m.lookup(Lpn(5)), Some(Ppn(9)));
        // One map node of 4096 entries, one zone node of 1024 pointers, a one-zone root.
        let mem = m.memory();
        assert_eq!(mem.map_node_bytes, 16 + 4 * 4096);
        assert_eq!(mem.zone_node_bytes, 4 * 1024);
        assert_eq!(mem.root_bytes, 16 + 4);
        assert_eq!(m.unmap(Lpn(5)), Some(Ppn(9)));
        assert_eq!(m.unmap(Lpn(5)), None);
        assert_eq!(m.lookup(Lpn(5)), None);
        assert_eq!(
            m.memory_bytes(),
            0,
            "the last entry gone frees the whole tree"
        );
        let s = m.stats();
        assert_eq!((s.map_nodes_freed, s.zone_nodes_freed), (1, 1));
    }

    #[test]
    fn hostile_addresses_never_panic() {
        let mut m = IntervalMap::new(IntervalConfig::default()).unwrap();
        for lpn in [
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            (1 << 56) - 1,
            1 << 56,
        ] {
            assert_eq!(m.lookup(Lpn(lpn)), None);
            assert_eq!(m.unmap(Lpn(lpn)), None);
        }
        // Mappings at both ends of the space: two roots, each a one-zone interval; the
        // modelled memory stays two nodes' worth, not a flat map of the range between.
        m.map(Lpn(0), Ppn(1));
        m.map(Lpn(u64::MAX - 1), Ppn(2));
        m.map(Lpn(u64::MAX), Ppn(3));
        assert_eq!(m.lookup(Lpn(u64::MAX)), Some(Ppn(3)));
        let s = m.stats();
        assert_eq!(s.roots, 2);
        assert_eq!(s.intervals[1].region, 255);
        assert_eq!(s.intervals[1].head, u64::MAX);
        assert!(s.memory.total_bytes < 3 * (16 + 4 * 4096 + 4 * 1024 + 64));
        assert_eq!(m.mapped_in(0, u64::MAX).len(), 2);
        assert_eq!(m.mapped_in(u64::MAX - 1, 1).len(), 1);
        assert!(m.mapped_in(5, 0).is_empty());
        // Writing UNMAPPED as a physical page unmaps instead of storing it.
        assert_eq!(m.map(Lpn(0), Ppn(u32::MAX)), Some(Ppn(1)));
        assert_eq!(m.lookup(Lpn(0)), None);
        m.check_invariants().unwrap();
        // A sparse scatter over the whole space: one node each, nothing huge.
        let mut r = Rng(7);
        for i in 0..200 {
            m.map(Lpn(r.next()), Ppn(i));
        }
        m.check_invariants().unwrap();
        m.compact_all();
        m.check_invariants().unwrap();
        assert!(IntervalMap::new(IntervalConfig {
            map_node_blocks: 100,
            ..IntervalConfig::default()
        })
        .is_err());
        assert!(IntervalMap::new(IntervalConfig {
            root_region_bits: 65,
            ..IntervalConfig::default()
        })
        .is_err());
        assert!(IntervalMap::new(IntervalConfig {
            compaction_threshold: f64::NAN,
            ..IntervalConfig::default()
        })
        .is_err());
    }

    /// A log: appends at an advancing head, random invalidations (overwrites elsewhere and
    /// discards) behind it, the tail discarded as it ages, compaction and GC-style moves.
    #[test]
    fn sliding_log_matches_model() {
        for seed in 0..8 {
            let mut m = IntervalMap::new(small()).unwrap();
            let mut model: BTreeMap<u64, u32> = BTreeMap::new();
            let mut r = Rng(seed);
            let base = (seed % 3) << 20; // a root region per seed class
            let mut head = base + r.below_mod(1000);
            let mut tail = head;
            let mut ppn = 0u32;
            let mut max_bytes = 0;
            for step in 0..20_000u32 {
                match r.below_mod(10) {
                    0..=4 => {
                        // Append (the log head advances).
                        ppn = ppn.wrapping_add(1) % 1_000_000;
                        assert_eq!(m.map(Lpn(head), Ppn(ppn)), model.insert(head, ppn).map(Ppn));
                        head += 1;
                    }
                    5 | 6 if head > tail => {
                        // Invalidate a random live block (its file was overwritten).
                        let l = tail + r.below_mod(head - tail);
                        assert_eq!(m.unmap(Lpn(l)), model.remove(&l).map(Ppn));
                    }
                    7 if head > tail => {
                        // The tail ages out: discard a run from it.
                        let n = 1 + r.below_mod(40).min(head - tail - 1);
                        for l in tail..tail + n {
                            assert_eq!(m.unmap(Lpn(l)), model.remove(&l).map(Ppn));
                        }
                        tail += n;
                    }
                    8 if !model.is_empty() => {
                        // Device GC moves a live page.
                        let k = r.below_mod(head - tail + 1);
                        if let Some((&l, _)) = model.range(tail + k..).next() {
                            ppn = ppn.wrapping_add(1) % 1_000_000;
                            assert!(m.map(Lpn(l), Ppn(ppn)).is_some());
                            model.insert(l, ppn);
                        }
                    }
                    _ => {
                        let l = r.next();
                        assert_eq!(m.lookup(Lpn(l)), model.get(&l).map(|&p| Ppn(p)));
                    }
                }
                if step % 997 == 0 {
                    m.tick(u64::from(step) * 100);
                    check_against(&m, &model);
                }
                max_bytes = max_bytes.max(m.memory_bytes());
            }
            check_against(&m, &model);
            m.compact_all();
            check_against(&m, &model);
            let s = m.stats();
            assert!(s.compaction_runs > 10 && s.nodes_compacted > 0, "{s:?}");
            assert!(s.map_nodes_freed > 0, "the tail discards freed nodes");
            let iv = m.intervals();
            if let (Some(&lo), Some(&hi)) = (model.keys().next(), model.keys().next_back()) {
                assert_eq!(iv.len(), 1);
                assert_eq!((iv[0].tail, iv[0].head), (lo, hi));
            }
            // Discard everything: the tree is empty again.
            let keys: Vec<u64> = model.keys().copied().collect();
            for l in keys {
                m.unmap(Lpn(l));
            }
            model.clear();
            check_against(&m, &model);
            assert_eq!(m.memory_bytes(), 0);
            assert!(max_bytes > 0);
        }
    }

    /// `mapped_in` (the discard path) visits only the map nodes its range overlaps: ranges
    /// that start and end inside nodes, inside one zone or across several, and whole zones,
    /// against a model.
    #[test]
    fn mapped_in_matches_model_for_partial_ranges() {
        let mut m = IntervalMap::new(small()).unwrap();
        let mut model: BTreeMap<u64, u32> = BTreeMap::new();
        let mut r = Rng(11);
        // 64-entry nodes, 4 nodes a zone: 3000 scattered mappings over ~12 zones.
        for i in 0..3000u32 {
            let l = r.below_mod(3000);
            m.map(Lpn(l), Ppn(i));
            model.insert(l, i);
        }
        for _ in 0..2000 {
            let lo = r.below_mod(3100);
            let n = match r.below_mod(4) {
                0 => 1,
                1 => r.below_mod(64),
                2 => r.below_mod(300),
                _ => r.below_mod(3000),
            };
            let got: Vec<(u64, u32)> = m.mapped_in(lo, n).iter().map(|(l, p)| (l.0, p.0)).collect();
            let want: Vec<(u64, u32)> = model.range(lo..lo + n).map(|(&l, &p)| (l, p)).collect();
            assert_eq!(got, want, "range {lo}+{n}");
        }
    }

    #[test]
    fn sliding_frees_nodes_behind_the_tail() {
        let mut m = IntervalMap::new(small()).unwrap();
        // 64-entry nodes, 4 nodes a zone (256 blocks). Write 10 zones' worth.
        for l in 0..2560u64 {
            m.map(Lpn(l), Ppn(l as u32));
        }
        let full = m.stats();
        assert_eq!((full.map_nodes, full.zone_nodes), (40, 10));
        assert_eq!(full.memory.root_bytes, 16 + 10 * 4);
        // Discard the oldest 6 zones and append 2 more: the interval slides.
        for l in 0..1536u64 {
            m.unmap(Lpn(l));
        }
        for l in 2560..3072u64 {
            m.map(Lpn(l), Ppn(l as u32));
        }
        let s = m.stats();
        assert_eq!((s.map_nodes, s.zone_nodes), (24, 6));
        assert_eq!(
            s.intervals,
            vec![LiveInterval {
                region: 0,
                tail: 1536,
                head: 3071
            }]
        );
        assert_eq!(s.memory.root_bytes, 16 + 6 * 4);
        assert_eq!(s.memory.map_node_bytes, 24 * (16 + 4 * 64));
        assert!(s.memory.total_bytes < full.memory.total_bytes);
        // A partly discarded node stays (it has valid entries) until its last entry goes.
        m.unmap(Lpn(1536));
        assert_eq!(m.stats().map_nodes, 24);
        for l in 1537..1600u64 {
            m.unmap(Lpn(l));
        }
        assert_eq!(m.stats().map_nodes, 23);
        assert_eq!(m.intervals()[0].tail, 1600);
        m.check_invariants().unwrap();
    }

    #[test]
    fn compaction_shrinks_sparse_nodes_and_keeps_dense_ones() {
        let mut m = IntervalMap::new(IntervalConfig {
            map_node_blocks: 4096,
            zone_map_nodes: 16,
            compaction_period_ns: 30_000_000_000,
            ..IntervalConfig::default()
        })
        .unwrap();
        // Node 0: full. Node 1: every other 256-block run invalidated (50 % valid, long holes).
        // Node 2: random single-block holes at 60 % valid (no long holes).
        for l in 0..3 * 4096u64 {
            m.map(Lpn(l), Ppn(l as u32));
        }
        for run in (0..16).step_by(2) {
            for l in 4096 + run * 256..4096 + (run + 1) * 256 {
                m.unmap(Lpn(l));
            }
        }
        let mut r = Rng(3);
        let mut removed = 0;
        while removed < 1638 {
            let l = 8192 + r.below_mod(4096);
            if m.unmap(Lpn(l)).is_some() {
                removed += 1;
            }
        }
        let before = m.stats();
        let model: BTreeMap<u64, u32> = m.iter_mapped().map(|(l, p)| (l.0, p.0)).collect();
        // Nothing is due before 30 s of device time.
        assert_eq!(m.tick(29_999_999_999), 0);
        assert_eq!(m.stats().compaction_runs, 0);
        let free_at = m.tick(30_000_000_000);
        let after = m.stats();
        check_against(&m, &model);
        assert_eq!(after.compaction_runs, 1);
        // The full node is not eligible (ratio 1.0 >= 0.7); the two sparse ones are examined.
        assert_eq!(after.nodes_examined, 2);
        assert_eq!(after.nodes_compacted, 2);
        // Node 1 keeps 8 regions of 256 entries (16 + 2 * 16 + 8 * 256 * 4 B); node 2's
        // random 1-block holes leave no empty region, so it becomes a bitmap (512 B) with a
        // rank directory (8 x 2 B) and its 2458 valid entries packed (16 + 512 + 16 + 4 * 2458
        // B; a list would need 16 + 6 * 2458).
        assert_eq!(before.memory.map_node_bytes, 3 * (16 + 4 * 4096));
        let bitmap_node = 16 + 512 + 16 + 4 * 2458;
        assert_eq!(
            after.memory.map_node_bytes,
            (16 + 4 * 4096) + (16 + 2 * 16 + 8 * 256 * 4) + bitmap_node
        );
        assert_eq!(after.compacted_map_nodes, 2);
        // The run records the tree it left and a page map of the live data then; writes
        // after it change the tree but not that record (the bench's "after compaction").
        assert_eq!(before.after_compaction_bytes, 0);
        assert_eq!(after.after_compaction_bytes, after.memory.total_bytes);
        assert_eq!(
            after.after_compaction_page_map_bytes,
            4 * (3 * 4096 - 2048 - 1638)
        );
        {
            let mut grown = IntervalMap::new(m.cfg.clone()).unwrap();
            for (l, p) in m.iter_mapped() {
                grown.map(l, p);
            }
            grown.compact_all();
            let rec = grown.stats().after_compaction_bytes;
            grown.map(Lpn(5 * 4096), Ppn(1));
            let later = grown.stats();
            assert!(later.memory.total_bytes > rec);
            assert_eq!(later.after_compaction_bytes, rec);
        }
        assert_eq!(
            after.layouts,
            MapNodeLayouts {
                dense: 1,
                regions: 1,
                bitmap: 1,
                list: 0
            }
        );
        // The firmware was busy from the due time for the modelled cost: 2 nodes examined
        // (4096 entries scanned each), 2048 + 2458 entries copied.
        let cost = 2 * 1_000 + 2 * (2 * 4096 + 2048 + 2458);
        assert_eq!(free_at, 30_000_000_000 + cost);
        assert_eq!(after.compaction_busy_ns, cost);
        // Clean nodes are not examined again; the next run is 30 s later.
        assert_eq!(m.tick(45_000_000_000), free_at);
        m.tick(60_000_000_000);
        assert_eq!(m.stats().nodes_examined, 2);
        // Writes into a dropped region allocate a region mapping; once the region mappings
        // outgrow the dense layout, the next compaction goes back to it although the node is
        // nearly full.
        m.map(Lpn(4096), Ppn(1));
        assert_eq!(
            m.stats().memory.map_node_bytes,
            after.memory.map_node_bytes + 256 * 4
        );
        for l in 4096..8192u64 {
            m.map(Lpn(l), Ppn(l as u32));
        }
        assert_eq!(m.stats().compacted_map_nodes, 2);
        m.compact_all();
        let s = m.stats();
        assert_eq!(
            s.compacted_map_nodes, 1,
            "node 1 dense again, node 2 still a bitmap"
        );
        assert_eq!(s.memory.map_node_bytes, 2 * (16 + 4 * 4096) + bitmap_node);
        // Entries written into and removed from a bitmap node keep the model exact.
        m.map(Lpn(8192 + 4095), Ppn(77));
        let l = (8192..12288u64)
            .find(|&l| m.lookup(Lpn(l)).is_some())
            .unwrap();
        m.unmap(Lpn(l));
        m.check_invariants().unwrap();
    }

    #[test]
    fn compaction_after_sliding_discards_shrinks_memory() {
        // Default geometry: a log written sequentially, then its older half discarded in
        // irregular runs (files deleted) and scattered blocks invalidated.
        let mut m = IntervalMap::new(IntervalConfig::default()).unwrap();
        let n = 64 * 4096u64;
        for l in 0..n {
            m.map(Lpn(l), Ppn(l as u32));
        }
        let full = m.memory_bytes();
        let mut r = Rng(11);
        let mut l = 0;
        while l < n {
            let run = 1 + r.below_mod(600);
            if r.below_mod(2) == 0 {
                for k in l..(l + run).min(n) {
                    m.unmap(Lpn(k));
                }
            }
            l += run;
        }
        let model: BTreeMap<u64, u32> = m.iter_mapped().map(|(l, p)| (l.0, p.0)).collect();
        let before = m.memory_bytes();
        m.compact_all();
        check_against(&m, &model);
        let after = m.memory_bytes();
        assert!(after < before * 3 / 4, "{after} vs {before}");
        assert!(before <= full);
        // Memory within 1.2x of a page map of the live data (4 B per valid block) plus the
        // zone node and root.
        let live = model.len() as u64 * 4;
        assert!(
            (after as f64) < 1.2 * live as f64 + 8192.0,
            "after {after} live {live}"
        );
    }

    #[test]
    fn compaction_delays_requests_until_done() {
        let mut m = IntervalMap::new(small()).unwrap();
        for l in 0..64u64 {
            m.map(Lpn(l), Ppn(l as u32));
        }
        for l in (0..64u64).filter(|l| l % 4 != 0) {
            m.unmap(Lpn(l));
        }
        // Period 1 µs: due at 1000. A request at 5300 falls in the period [5000, 6000).
        let free_at = m.tick(5_300);
        assert!(free_at > 5_000, "compaction ran at the due time 5000");
        assert_eq!(free_at, 5_000 + m.stats().compaction_busy_ns);
        // Nothing due again until 6000.
        assert_eq!(m.tick(5_999), free_at);
        m.check_invariants().unwrap();
    }

    /// One node of `e` entries at `lpn` 0, mapped in full, then single-block holes punched
    /// at random until `valid` entries are left (no empty region for the regions layout).
    fn node_with_random_holes(cfg: IntervalConfig, valid: u64, seed: u64) -> IntervalMap {
        let e = cfg.map_node_blocks;
        let mut m = IntervalMap::new(cfg).unwrap();
        for l in 0..e {
            m.map(Lpn(l), Ppn(l as u32 + 1000));
        }
        let mut r = Rng(seed);
        let mut left = e;
        while left > valid {
            if m.unmap(Lpn(r.below(e))).is_some() {
                left -= 1;
            }
        }
        m
    }

    fn one_node(e: u64) -> IntervalConfig {
        IntervalConfig {
            map_node_blocks: e,
            zone_map_nodes: 4,
            root_region_bits: 20,
            compaction_period_ns: 0,
            ..IntervalConfig::default()
        }
    }

    /// A node with scattered holes compacts into the bitmap layout between 6.4 % and 96.8 %
    /// valid (below the threshold), and its modelled bytes are exactly header + E/8 bitmap +
    /// 2 B per 512-entry rank block + 4 B per valid entry; at 6.4 % (264 of 4096) and below the list is no bigger.
    #[test]
    fn scattered_holes_compact_into_a_bitmap_of_exact_size() {
        for (e, valid, want) in [
            // E = 4096: 16 + 512 + 8 * 2 + 4 v (a list: 16 + 6 v).
            (4096u64, 2048u64, Layout::Bitmap),
            (4096, 1000, Layout::Bitmap),
            (4096, 265, Layout::Bitmap),
            (4096, 264, Layout::List), // a tie (1600 B): the list is kept
            (4096, 263, Layout::List),
            (4096, 10, Layout::List),
            // E = 64: 16 + 8 + 1 * 2 + 4 v; list below 6 valid (16 + 6 v).
            (64, 40, Layout::Bitmap),
            (64, 6, Layout::Bitmap),
            (64, 5, Layout::List), // a tie (46 B)
        ] {
            let mut m = node_with_random_holes(one_node(e), valid, e + valid);
            let model: BTreeMap<u64, u32> = m.iter_mapped().map(|(l, p)| (l.0, p.0)).collect();
            m.compact_all();
            check_against(&m, &model);
            let s = m.stats();
            let node = m.zones[&0].nodes[0].as_deref().unwrap();
            assert_eq!(node.layout(), want, "E {e}, {valid} valid");
            let bytes = match want {
                Layout::Bitmap => 16 + e / 8 + e.div_ceil(512) * 2 + 4 * valid,
                _ => 16 + 6 * valid,
            };
            assert_eq!(s.memory.map_node_bytes, bytes, "E {e}, {valid} valid");
            assert_eq!(s.allocated_entries, valid);
            assert_eq!(s.layouts.bitmap, u64::from(want == Layout::Bitmap));
            assert_eq!(s.layouts.list, u64::from(want == Layout::List));
            // The firmware scanned E entries and copied the valid ones.
            assert_eq!(s.compaction_busy_ns, 1_000 + 2 * (e + valid));
        }
    }

    /// A bitmap node is examined again when it decays below the list's break-even (its held
    /// entries are all valid, so the valid-ratio rule alone would never pick it) and when
    /// writes into dropped slots grow it past the dense layout; a list node likewise once a
    /// bitmap is smaller. Every write into a dropped slot costs exactly 4 B (bitmap) or 6 B
    /// (list) until then.
    #[test]
    fn compacted_nodes_move_between_layouts_as_they_decay_and_regrow() {
        let mut m = node_with_random_holes(one_node(4096), 2048, 5);
        m.compact_all();
        let layout = |m: &IntervalMap| m.zones[&0].nodes[0].as_deref().unwrap().layout();
        assert_eq!(layout(&m), Layout::Bitmap);
        let bitmap = |v: u64| 16 + 512 + 16 + 4 * v;
        assert_eq!(m.stats().memory.map_node_bytes, bitmap(2048));
        // Decay to 300 valid: still a bitmap (the list would need 1816 B > 1744 B); not
        // rebuilt, nothing copied.
        let mut r = Rng(9);
        let mut valid = 2048;
        let mut kill_to = |m: &mut IntervalMap, target: u64, valid: &mut u64| {
            while *valid > target {
                if m.unmap(Lpn(r.below(4096))).is_some() {
                    *valid -= 1;
                }
            }
        };
        kill_to(&mut m, 300, &mut valid);
        assert_eq!(m.stats().memory.map_node_bytes, bitmap(300));
        let examined = m.stats().nodes_examined;
        m.compact_all();
        assert_eq!(layout(&m), Layout::Bitmap);
        assert_eq!(m.stats().nodes_examined, examined, "not eligible yet");
        // Below 265: a list (16 + 6 * 200 B) is smaller, so the node is examined and becomes one.
        kill_to(&mut m, 200, &mut valid);
        m.compact_all();
        assert_eq!(layout(&m), Layout::List);
        assert_eq!(m.stats().memory.map_node_bytes, 16 + 6 * 200);
        assert_eq!(m.stats().nodes_examined, examined + 1);
        // Writes into dropped slots: the list grows by 6 B each; past the bitmap's size the
        // next compaction turns it back into a bitmap, and past the dense size into dense.
        let model = |m: &IntervalMap| -> BTreeMap<u64, u32> {
            m.iter_mapped().map(|(l, p)| (l.0, p.0)).collect()
        };
        let mut fill = (0..4096u64)
            .filter(|&l| m.lookup(Lpn(l)).is_none())
            .collect::<Vec<_>>();
        for _ in 0..800 {
            let l = fill.pop().unwrap();
            assert_eq!(m.map(Lpn(l), Ppn(7 + l as u32)), None);
        }
        assert_eq!(m.stats().memory.map_node_bytes, 16 + 6 * 1000);
        let want = model(&m);
        m.compact_all();
        check_against(&m, &want);
        assert_eq!(layout(&m), Layout::Bitmap);
        assert_eq!(m.stats().memory.map_node_bytes, bitmap(1000));
        for l in fill {
            m.map(Lpn(l), Ppn(9 + l as u32));
        }
        // Every slot mapped again: the bitmap node holds 4096 packed entries (528 B more than
        // dense) until compaction re-grows it to dense.
        assert_eq!(m.stats().memory.map_node_bytes, bitmap(4096));
        let want = model(&m);
        m.compact_all();
        check_against(&m, &want);
        assert_eq!(layout(&m), Layout::Dense);
        assert_eq!(m.stats().memory.map_node_bytes, 16 + 4 * 4096);
        assert_eq!(m.stats().compacted_map_nodes, 0);
    }

    /// A randomized sequence of fresh writes, overwrites, writes into dropped slots, discards,
    /// lookups and compactions over nodes of 2048 entries (4 rank blocks) reads back the
    /// model's PPNs in every layout, and visits every layout.
    #[test]
    fn random_operations_on_every_layout_match_a_hashmap_model() {
        use std::collections::HashMap;
        let e = 2048u64;
        let span = 6 * e;
        let mut seen = [0u64; 4];
        for seed in 0..6 {
            let mut m = IntervalMap::new(IntervalConfig {
                min_region_blocks: 64,
                ..one_node(e)
            })
            .unwrap();
            let mut model: HashMap<u64, u32> = HashMap::new();
            let mut r = Rng(100 + seed);
            let mut ppn = 0u32;
            // Phases (op weights in %: run write, write, run discard, discard; the rest are
            // lookups): fill; delete files (64-aligned runs: empty regions, where the regions
            // layout wins); thin out at random (bitmaps, lists); rewrite dropped slots
            // (re-growth); mixed.
            for step in 0..60_000u32 {
                let weights = match step / 10_000 {
                    0 => [20, 20, 0, 0],
                    1 => [0, 0, 5, 0],
                    2 => [0, 5, 0, 60],
                    3 => [2, 70, 0, 10],
                    4 => [5, 20, 2, 30],
                    _ => [3, 30, 3, 40],
                };
                let l = r.below(span);
                let mut roll = r.below(100);
                let op = weights.iter().position(|&w| {
                    let hit = roll < w;
                    roll = roll.saturating_sub(w);
                    hit
                });
                let run = if matches!(op, Some(0 | 2)) {
                    let l = l & !63;
                    l..(l + 64 * (1 + r.below(5))).min(span)
                } else {
                    l..l + 1
                };
                match op {
                    Some(0 | 1) => {
                        for l in run {
                            ppn = (ppn + 1) % 1_000_000;
                            let old = model.insert(l, ppn).map(Ppn);
                            assert_eq!(m.map(Lpn(l), Ppn(ppn)), old, "step {step}");
                        }
                    }
                    Some(_) => {
                        for l in run {
                            assert_eq!(m.unmap(Lpn(l)), model.remove(&l).map(Ppn), "step {step}");
                        }
                    }
                    None => assert_eq!(m.lookup(Lpn(l)), model.get(&l).map(|&p| Ppn(p))),
                }
                if step % 500 == 0 {
                    let s = m.stats();
                    m.compact_all();
                    for (i, n) in [
                        s.layouts.dense,
                        s.layouts.regions,
                        s.layouts.bitmap,
                        s.layouts.list,
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        seen[i] += n;
                    }
                }
                if step % 2500 == 0 {
                    let want: BTreeMap<u64, u32> = model.iter().map(|(&l, &p)| (l, p)).collect();
                    check_against(&m, &want);
                    for l in 0..span {
                        assert_eq!(m.lookup(Lpn(l)), model.get(&l).map(|&p| Ppn(p)));
                    }
                }
            }
        }
        assert!(seen.iter().all(|&n| n > 0), "layouts seen {seen:?}");
    }

    /// Uniform random 4 KiB overwrites (an IPLFS volume: append at the head, discard a live
    /// block chosen uniformly), default geometry and threshold, compaction every 1/64 of a
    /// pass of virtual time: after compaction the tree stays under 1.2x a page map of the
    /// live data (4 B per live block); with dense, regions and lists only it holds at 1.42x.
    #[test]
    fn uniform_random_overwrites_stay_under_1_2x_a_page_map_of_live_data() {
        let live_n = 48 * 4096u64;
        let period = live_n / 64;
        let mut m = IntervalMap::new(IntervalConfig {
            compaction_period_ns: period,
            ..IntervalConfig::default()
        })
        .unwrap();
        let mut live: Vec<u64> = (0..live_n).collect();
        for l in 0..live_n {
            m.map(Lpn(l), Ppn(l as u32));
        }
        let mut r = Rng(1);
        let mut worst = 0f64;
        for step in 1..=3 * live_n {
            let head = live_n + step - 1;
            m.map(Lpn(head), Ppn(head as u32));
            live.push(head);
            let victim = live.swap_remove(r.below(live.len() as u64) as usize);
            assert!(m.unmap(Lpn(victim)).is_some());
            // Virtual time: one step per ns. Measure right after each compaction, from the
            // second pass on (the first is still aging the filled volume).
            if step % period == 0 {
                m.tick(step);
                let s = m.stats();
                assert_eq!(s.compaction_runs, step / period);
                if step > live_n {
                    let x = s.memory.total_bytes as f64 / s.page_map_bytes_for_live as f64;
                    worst = worst.max(x);
                }
            }
        }
        m.check_invariants().unwrap();
        let s = m.stats();
        assert_eq!(s.valid_entries, live_n);
        assert!(
            worst > 1.0 && worst < 1.2,
            "tree / page map of live data {worst:.3}"
        );
        assert!(
            s.layouts.bitmap > 0 && s.layouts.list > 0,
            "{:?}",
            s.layouts
        );
    }
}
