//! fsck: check every invariant of a volume without changing it.
//!
//! Works on the device directly through the format crate (no mount), so it also runs on
//! images that cannot be mounted. Every read is checked; every walk is bounded (node trees by
//! depth, the directory tree by a visited set, chains by a step limit), so a corrupt image
//! gives findings, never a panic or a hang. A volume whose tables (SIT, NAT block pointers)
//! exceed the memory this process may use is refused first with `Error::NoMemory`, and so
//! is one whose walk cannot fit (`Checker::check_walk_memory`). The walk records each
//! reachable block's owner in a table per main segment it touches (`Owners`, ~6 bytes a
//! used block), not a map per block.
//!
//! Checked (docs/FORMAT.md "Invariants"):
//! - superblock copies and the checkpoint packs;
//! - NAT against node footers (nid, inode, kind, tree position);
//! - the directory tree from the root: entries, hash placement, file types, parent links,
//!   link counts, loops;
//! - every block reachable from an inode is in the main area, reached once, marked valid in
//!   the SIT, and owned by the right node in the SSA;
//! - SIT bitmaps and counts against reachability (no leaked valid blocks), and each
//!   segment's log class against its blocks (node and data never share a segment);
//! - checkpoint counters and free-space accounting; log heads point at unused space and
//!   share no segment; no inode's size is past the largest file size;
//! - orphan inodes;
//! - infinite (IPLFS, `gc=none`) volumes have no SIT and no SSA: instead, the live count
//!   against reachability, every reachable block in the region of a log head and behind it
//!   (append-only), and the discard log decodes and names no reachable block.

use crate::cell::libc_mode::{S_IFDIR, S_IFMT};
use crate::checkpoint::{read_checkpoint, read_pack, read_superblock};
use crate::error::Result;
use flashlog_dev::BlockDevice;
use flashlog_format::codec::{as_block, test_bit, zero_block, Block};
use flashlog_format::cp::Checkpoint;
use flashlog_format::dir::{self as fdir, BLOCK_LAYOUT, INLINE_LAYOUT};
use flashlog_format::meta::{
    NatBlock, NatEntry, SitBlock, SitEntry, SsaBlock, NAT_ENTRIES_PER_BLOCK, SIT_ENTRIES_PER_BLOCK,
};
use flashlog_format::node::{
    self, iflag, InodeHdr, NodeKind, ADDRS_PER_BLOCK, ADDRS_PER_INODE, NIDS_PER_BLOCK,
};
use flashlog_format::sb::{Geometry, Superblock};
use flashlog_format::SEG_BITMAP_BYTES;
use flashlog_format::{
    BlkAddr, Ino, Nid, SegNo, BLOCKS_PER_SEG, BLOCK_SIZE, NEW_ADDR, NULL_ADDR, ROOT_INO,
};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Severity {
    /// The volume is inconsistent.
    Error,
    /// Allowed, but worth knowing.
    Warning,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// Which structure: "superblock", "checkpoint", "nat", "sit", "ssa", "inode", "dir", ...
    pub area: &'static str,
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}: {}: {}", self.area, self.message)
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FsckReport {
    pub findings: Vec<Finding>,
    pub checkpoint_version: u64,
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub data_blocks: u64,
    pub node_blocks: u64,
    /// Findings beyond this many are counted, not stored.
    pub suppressed: u64,
    /// Infinite volumes: per log head, the live interval of its region.
    pub live_intervals: Vec<LiveInterval>,
    /// Blocks the checkpoint's discard log names (to be issued; none of them reachable).
    pub discard_log_blocks: u64,
    /// Commands in the discard log (after merging adjacent ones).
    pub discard_log_commands: u64,
    /// Every reachable main-area block, ascending (the crash simulator and the D2FS tests
    /// compare it with what the device maps). Not in the JSON report.
    #[serde(skip)]
    pub reachable: Reachable,
}

/// The live interval of one log head's region on an infinite volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LiveInterval {
    pub head: usize,
    /// First block of the region.
    pub region_start: BlkAddr,
    /// Lowest and highest reachable block (None: nothing live in the region).
    pub first_live: Option<BlkAddr>,
    pub last_live: Option<BlkAddr>,
    pub live_blocks: u64,
    /// Where the head appends next (from the checkpoint).
    pub head_at: BlkAddr,
}

/// Findings kept in the report (a badly broken image would otherwise produce millions).
pub const MAX_FINDINGS: usize = 1000;

impl FsckReport {
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
            + self.suppressed as usize
    }
    pub fn is_clean(&self) -> bool {
        self.errors() == 0
    }
    /// fsck(8) exit code: 0 clean, 4 errors left uncorrected.
    pub fn exit_code(&self) -> i32 {
        if self.is_clean() {
            0
        } else {
            4
        }
    }
}

impl std::fmt::Display for FsckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for x in &self.findings {
            writeln!(f, "{x}")?;
        }
        if self.suppressed > 0 {
            writeln!(f, "... and {} more errors", self.suppressed)?;
        }
        write!(
            f,
            "checkpoint {}: {} inodes ({} directories, {} files), {} data blocks, {} node blocks: {}",
            self.checkpoint_version,
            self.inodes,
            self.directories,
            self.files,
            self.data_blocks,
            self.node_blocks,
            if self.is_clean() { "clean".to_string() } else { format!("{} errors", self.errors()) }
        )
    }
}

/// Who references a main-area block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Node(Nid),
    Data { nid: Nid, slot: u16 },
}

const SEG: usize = BLOCKS_PER_SEG as usize;
/// `SegOwners::tag` of a node block; a data block's tag is its slot + 1, 0 is "not reached".
const NODE_TAG: u16 = u16::MAX;

/// The owners of the reached blocks of one main segment, 6 bytes a block (3 KiB a segment).
#[derive(Clone)]
struct SegOwners {
    nid: [Nid; SEG],
    tag: [u16; SEG],
}

impl SegOwners {
    fn new() -> Box<Self> {
        Box::new(SegOwners {
            nid: [0; SEG],
            tag: [0; SEG],
        })
    }
    fn get(&self, off: usize) -> Option<Owner> {
        match self.tag[off] {
            0 => None,
            NODE_TAG => Some(Owner::Node(self.nid[off])),
            t => Some(Owner::Data {
                nid: self.nid[off],
                slot: t - 1,
            }),
        }
    }
    fn set(&mut self, off: usize, owner: Owner) {
        let (nid, tag) = match owner {
            Owner::Node(nid) => (nid, NODE_TAG),
            // Slots are below ADDRS_PER_BLOCK, far from the node tag.
            Owner::Data { nid, slot } => (nid, slot + 1),
        };
        self.nid[off] = nid;
        self.tag[off] = tag;
    }
}

/// Every reached main-area block and its owner, one table per segment the walk touches,
/// allocated when it does: a full volume costs ~6 bytes a block, an empty segment 8 bytes
/// (finite volumes, a slot in a vector by segment) or nothing (infinite volumes, whose
/// 2^64-block main area is a sparse map by segment).
#[derive(Default)]
struct Owners {
    main_addr: BlkAddr,
    /// Finite volumes: by main segment.
    dense: Vec<Option<Box<SegOwners>>>,
    /// Infinite volumes.
    sparse: BTreeMap<SegNo, Box<SegOwners>>,
    infinite: bool,
    len: u64,
}

impl Owners {
    fn new(geo: &Geometry) -> Self {
        Owners {
            main_addr: geo.main_addr,
            dense: if geo.infinite {
                Vec::new()
            } else {
                (0..geo.main_segments).map(|_| None).collect()
            },
            sparse: BTreeMap::new(),
            infinite: geo.infinite,
            len: 0,
        }
    }

    /// Bytes the walk holds for each segment it touches (its table, and the bitmap
    /// `into_reachable` makes of it), beyond the vector `new` allocates.
    fn cost_per_segment() -> u64 {
        (std::mem::size_of::<SegOwners>() + std::mem::size_of::<(BlkAddr, SegBits)>()) as u64
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn seg(&self, seg: SegNo) -> Option<&SegOwners> {
        if self.infinite {
            self.sparse.get(&seg).map(|b| &**b)
        } else {
            self.dense.get(seg as usize)?.as_deref()
        }
    }

    /// Record `owner` for main-area block `addr` (the caller checked that it is one); the
    /// earlier owner if it was reached already (then kept).
    fn insert(&mut self, addr: BlkAddr, owner: Owner) -> Option<Owner> {
        let rel = addr - self.main_addr;
        let (seg, off) = (rel / BLOCKS_PER_SEG, (rel % BLOCKS_PER_SEG) as usize);
        let t = if self.infinite {
            self.sparse.entry(seg).or_insert_with(SegOwners::new)
        } else {
            self.dense[seg as usize].get_or_insert_with(SegOwners::new)
        };
        if let Some(prev) = t.get(off) {
            return Some(prev);
        }
        t.set(off, owner);
        self.len += 1;
        None
    }

    #[cfg(test)]
    fn get(&self, addr: BlkAddr) -> Option<Owner> {
        let rel = addr.checked_sub(self.main_addr)?;
        self.seg(rel / BLOCKS_PER_SEG)?
            .get((rel % BLOCKS_PER_SEG) as usize)
    }

    /// The touched segments in `lo..hi`, ascending.
    fn segs(&self, lo: SegNo, hi: SegNo) -> Box<dyn Iterator<Item = (SegNo, &SegOwners)> + '_> {
        if lo >= hi {
            return Box::new(std::iter::empty());
        }
        if self.infinite {
            Box::new(self.sparse.range(lo..hi).map(|(&s, t)| (s, &**t)))
        } else {
            let n = self.dense.len() as u64;
            let (lo, hi) = (lo.min(n) as usize, hi.min(n) as usize);
            Box::new(
                self.dense[lo..hi]
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, t)| Some(((lo + i) as SegNo, t.as_deref()?))),
            )
        }
    }

    /// The reached blocks in `lo..hi` with their owners, ascending.
    fn range(&self, lo: BlkAddr, hi: BlkAddr) -> impl Iterator<Item = (BlkAddr, Owner)> + '_ {
        let main = self.main_addr;
        let seg_lo = lo.saturating_sub(main) / BLOCKS_PER_SEG;
        let seg_hi = match hi.checked_sub(main) {
            Some(r) => r.div_ceil(BLOCKS_PER_SEG),
            None => 0,
        };
        self.segs(seg_lo, seg_hi).flat_map(move |(s, t)| {
            let start = main + s * BLOCKS_PER_SEG;
            (0..SEG).filter_map(move |off| {
                let a = start + off as u64;
                if a < lo || a >= hi {
                    return None;
                }
                Some((a, t.get(off)?))
            })
        })
    }

    /// Every reached block, ascending.
    fn iter(&self) -> impl Iterator<Item = (BlkAddr, Owner)> + '_ {
        self.range(0, BlkAddr::MAX)
    }

    /// The reached blocks without their owners, each table dropped as it is converted.
    fn into_reachable(self) -> Reachable {
        let main = self.main_addr;
        let mut r = Reachable::default();
        let mut push = |s: SegNo, t: Box<SegOwners>| {
            let mut bits = [0u64; SEG / 64];
            for (off, &tag) in t.tag.iter().enumerate() {
                if tag != 0 {
                    bits[off / 64] |= 1 << (off % 64);
                }
            }
            r.len += bits.iter().map(|w| w.count_ones() as usize).sum::<usize>();
            r.segs.push((main + s * BLOCKS_PER_SEG, bits));
        };
        if self.infinite {
            for (s, t) in self.sparse {
                push(s, t);
            }
        } else {
            for (s, t) in self.dense.into_iter().enumerate() {
                if let Some(t) = t {
                    push(s as SegNo, t);
                }
            }
        }
        r.segs.shrink_to_fit();
        r
    }
}

/// One bit per block of a segment.
type SegBits = [u64; SEG / 64];

/// The reachable main-area blocks of a volume: a bitmap for each segment holding one,
/// 72 bytes a segment (a 4 TiB volume's full set is 150 MiB, against 8 GiB as a list).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachable {
    /// First block of the segment, its bitmap; ascending.
    segs: Vec<(BlkAddr, SegBits)>,
    len: usize,
}

impl Reachable {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The blocks, ascending.
    pub fn iter(&self) -> impl Iterator<Item = BlkAddr> + '_ {
        self.segs.iter().flat_map(|(start, bits)| {
            (0..SEG)
                .filter(move |&off| bits[off / 64] >> (off % 64) & 1 != 0)
                .map(move |off| start + off as u64)
        })
    }
    pub fn contains(&self, addr: BlkAddr) -> bool {
        let i = self.segs.partition_point(|(s, _)| *s <= addr);
        let Some((start, bits)) = i.checked_sub(1).map(|i| &self.segs[i]) else {
            return false;
        };
        let off = addr - start;
        off < SEG as u64 && bits[off as usize / 64] >> (off % 64) & 1 != 0
    }
    pub fn first(&self) -> Option<BlkAddr> {
        self.iter().next()
    }
    pub fn last(&self) -> Option<BlkAddr> {
        let (start, bits) = self.segs.last()?;
        let w = bits.iter().rposition(|&w| w != 0)?;
        Some(start + (w * 64) as u64 + 63 - bits[w].leading_zeros() as u64)
    }
    /// The blocks as a sorted list (8 bytes a block: for small volumes and tests).
    pub fn to_vec(&self) -> Vec<BlkAddr> {
        self.iter().collect()
    }
}

/// The SIT as fsck reads it: every segment's valid count and class, and its bitmap only
/// where that marks a block (11 bytes per segment, and 64 more per segment in use; a whole
/// `SitEntry` of 80 bytes per segment until 2026-11-29: 160 MiB at 4 TiB, used or not).
#[derive(Default)]
struct Sit {
    valid: Vec<u16>,
    class: Vec<u8>,
    bitmaps: Vec<Option<Box<[u8; SEG_BITMAP_BYTES]>>>,
}

impl Sit {
    /// Bytes per segment before any bitmap.
    const PER_SEGMENT: usize = 2 + 1 + std::mem::size_of::<Option<Box<[u8; SEG_BITMAP_BYTES]>>>();

    fn new(segments: usize) -> Sit {
        Sit {
            valid: vec![0; segments],
            class: vec![SitEntry::default().class; segments],
            bitmaps: vec![None; segments],
        }
    }
    fn len(&self) -> usize {
        self.valid.len()
    }
    fn set(&mut self, seg: usize, e: &SitEntry) {
        self.valid[seg] = e.valid;
        self.class[seg] = e.class;
        self.bitmaps[seg] = e.bitmap.iter().any(|&b| b != 0).then(|| Box::new(e.bitmap));
    }
    fn valid(&self, seg: u64) -> u16 {
        self.valid[seg as usize]
    }
    fn class(&self, seg: u64) -> u8 {
        self.class[seg as usize]
    }
    /// The segment's validity bitmap (all zeros where it marks nothing).
    fn bitmap(&self, seg: u64) -> &[u8; SEG_BITMAP_BYTES] {
        static NONE: [u8; SEG_BITMAP_BYTES] = [0; SEG_BITMAP_BYTES];
        self.bitmaps[seg as usize].as_deref().unwrap_or(&NONE)
    }
    /// Segments whose entry counts or marks a block.
    fn in_use(&self) -> usize {
        (0..self.len())
            .filter(|&s| self.valid[s] != 0 || self.bitmaps[s].is_some())
            .count()
    }
}

/// Refuse, before `load_sit` and `load_nat` allocate them, tables this process cannot hold:
/// [`Sit`]'s 11 bytes per main segment (the bitmaps of segments in use come on top: the
/// walk's check counts them), one NAT block pointer
/// per NAT block (the NAT's blocks in use come on top, sparse) and the walk's slot per main
/// segment ([`Owners`], 8 bytes). Against the memory it may still use
/// ([`crate::memlimit`]): without this a volume too large for the machine (or the
/// container's cgroup limit) was SIGKILLed or aborted part way through.
fn check_table_memory(geo: &Geometry) -> Result<()> {
    let nsegs = if geo.infinite { 0 } else { geo.main_segments };
    let per_seg = (Sit::PER_SEGMENT + std::mem::size_of::<Option<Box<SegOwners>>>()) as u64;
    let sit = nsegs * per_seg;
    let nat = geo.nat_blocks * std::mem::size_of::<Option<Box<[NatEntry]>>>() as u64;
    crate::memlimit::refuse_over(sit + nat, || {
        format!(
            "checking a {} GiB volume needs {} MiB for its tables (SIT {} MiB: {} segments of \
             {} bytes; NAT {} MiB: {} blocks)",
            geo.block_count >> 18,
            (sit + nat) >> 20,
            sit >> 20,
            nsegs,
            per_seg,
            nat >> 20,
            geo.nat_blocks,
        )
    })
}

struct Checker<'a> {
    dev: &'a dyn BlockDevice,
    sb: Superblock,
    geo: Geometry,
    cp: Checkpoint,
    /// The NAT by NAT block: `None` for a block whose entries are all free (never written),
    /// so that an empty 2^26-nid table costs 2 MiB, not 1 GiB.
    nat: Vec<Option<Box<[NatEntry]>>>,
    sit: Sit,
    report: FsckReport,
    /// Every reachable main-area block.
    owners: Owners,
    reserved_blocks: u64,
    /// First block of the device's GC region (gc=device), else `u64::MAX`.
    device_from: BlkAddr,
    /// Every inode a directory entry names: its names, and its link count once walked.
    inodes: HashMap<Ino, Reached>,
    /// Nids reached through inodes: a bit per nid of the volume (8 MiB at 2^26 nids).
    reached_nids: Vec<u64>,
    subdirs: HashMap<Ino, u32>,
    progress: &'a mut dyn FnMut(FsckStep, u64, u64),
}

/// What the tree walk keeps of an inode that directory entries name (12 bytes; it kept the
/// whole `InodeHdr` with its name until 2026-11-29, about 380 bytes per file with the sets
/// beside it, so 10 million files needed 3.8 GB).
#[derive(Default, Clone, Copy)]
struct Reached {
    /// Entries that name it.
    names: u32,
    /// The link count its inode block states (valid once `WALKED`).
    nlink: u32,
    state: u8,
}

impl Reached {
    /// Its walk was started (an inode is walked once, however many names it has).
    const SEEN: u8 = 1;
    /// Its inode block was read: `nlink` holds its link count.
    const WALKED: u8 = 2;
    const DIR: u8 = 4;
}

impl<'a> Checker<'a> {
    /// Refuse, before the walk, a volume whose reachable blocks this process cannot record
    /// ([`Owners`]: 3 KiB for each segment holding one) and whose inodes and nodes it cannot
    /// track (a [`Reached`] each, a bit per nid). Finite volumes count the segments the SIT
    /// marks in use; infinite ones have no SIT and count the checkpoint's valid blocks
    /// packed into full segments (a lower bound: live blocks spread over more segments need
    /// more). What it counts is what a consistent volume needs at the least, so it refuses
    /// only walks that cannot fit; a corrupt count past the volume's size is bounded by it.
    fn check_walk_memory(&self) -> Result<()> {
        let g = &self.geo;
        let segs = if g.infinite {
            self.cp
                .valid_blocks
                .min(g.user_blocks)
                .div_ceil(BLOCKS_PER_SEG)
        } else {
            self.sit.in_use() as u64
        };
        // A segment in use has a bitmap in `Sit` (held already) and an owner table.
        let blocks = segs * Owners::cost_per_segment();
        let nodes = self.cp.valid_nodes.min(g.max_nid as u64);
        let inodes = self.cp.valid_inodes.min(nodes);
        // A hash table's slot per inode, at most half full after it grows.
        let files = (g.max_nid as u64).div_ceil(8)
            + inodes * 2 * (std::mem::size_of::<(Ino, Reached)>() as u64 + 1);
        crate::memlimit::refuse_over(blocks + files, || {
            format!(
                "checking this volume needs at least {} MiB to walk it ({} MiB for the reachable \
                 blocks of {segs} segments, {} MiB for {nodes} nodes and {inodes} inodes)",
                (blocks + files) >> 20,
                blocks >> 20,
                files >> 20,
            )
        })
    }

    fn add(&mut self, severity: Severity, area: &'static str, message: String) {
        if self.report.findings.len() >= MAX_FINDINGS {
            if severity == Severity::Error {
                self.report.suppressed += 1;
            }
            return;
        }
        self.report.findings.push(Finding {
            severity,
            area,
            message,
        });
    }
    fn err(&mut self, area: &'static str, message: String) {
        self.add(Severity::Error, area, message)
    }

    /// One more inode walked.
    fn tree_tick(&mut self) {
        let n = self.report.files + self.report.directories;
        self.tick(FsckStep::Tree, n, self.cp.valid_inodes.max(n));
    }

    /// Tell the progress display, at a step's ends and every 4,096 units.
    fn tick(&mut self, step: FsckStep, done: u64, total: u64) {
        if done % 4096 == 0 || done == total {
            (self.progress)(step, done, total);
        }
    }

    /// The ACL invariants of docs/FORMAT.md ("POSIX ACLs"): a stored ACL decodes, a default
    /// ACL sits on a directory (errors); an access ACL agrees with the mode bits and says
    /// more than they do (a warning: volumes written before ACL support kept ACLs opaque, and
    /// chmod or setfacl on the file repairs it).
    fn check_acls(&mut self, ino: Ino, mode: u32, list: &[(Vec<u8>, Vec<u8>)]) {
        for (name, value) in list {
            let Some(kind) = crate::acl::kind_of(name) else {
                continue;
            };
            let acl = match flashlog_format::acl::Acl::decode(value) {
                Ok(a) => a,
                Err(e) => {
                    let n = String::from_utf8_lossy(name);
                    self.err("acl", format!("inode {ino}: {n}: {e}"));
                    continue;
                }
            };
            match kind {
                crate::acl::AclKind::Default if mode & S_IFMT != S_IFDIR => self.err(
                    "acl",
                    format!("inode {ino}: a default ACL on a non-directory (mode {mode:o})"),
                ),
                crate::acl::AclKind::Default => {}
                crate::acl::AclKind::Access => {
                    let (perm, extended) = crate::acl::equiv_mode(&acl);
                    if perm != mode & crate::acl::PERM_BITS || !extended {
                        self.add(
                            Severity::Warning,
                            "acl",
                            format!(
                                "inode {ino}: access ACL (permissions {perm:o}{}) and mode {:o} disagree; chmod or setfacl repairs it",
                                if extended { "" } else { ", no more than the mode" },
                                mode & 0o7777
                            ),
                        );
                    }
                }
            }
        }
    }

    fn read(&mut self, addr: BlkAddr) -> Option<Box<Block>> {
        let mut b = zero_block();
        match self.dev.read(addr, &mut b[..]) {
            Ok(_) => Some(b),
            Err(e) => {
                self.err("device", format!("read of block {addr} failed: {e}"));
                None
            }
        }
    }

    fn load_nat(&mut self) {
        let g = self.geo.clone();
        let mut nat: Vec<Option<Box<[NatEntry]>>> = vec![None; g.nat_blocks as usize];
        for i in 0..g.nat_blocks {
            self.tick(FsckStep::Nat, i, g.nat_blocks);
            let copy = test_bit(&self.cp.nat_bitmap, i as usize) as u8;
            let Some(b) = self.read(g.nat_block_addr(i, copy)) else {
                continue;
            };
            match NatBlock::decode(&b, i) {
                Ok(nb) => {
                    let free = NatEntry::default();
                    if nb.entries.iter().any(|e| *e != free) {
                        nat[i as usize] = Some(nb.entries.into_iter().collect());
                    }
                }
                Err(e) => self.err("nat", format!("NAT block {i} (copy {copy}): {e}")),
            }
        }
        self.tick(FsckStep::Nat, g.nat_blocks, g.nat_blocks);
        self.nat = nat;
    }

    fn load_sit(&mut self) {
        let g = self.geo.clone();
        let mut sit = Sit::new(g.main_segments as usize);
        for i in 0..g.sit_blocks {
            self.tick(FsckStep::Sit, i, g.sit_blocks);
            let copy = test_bit(&self.cp.sit_bitmap, i as usize) as u8;
            let Some(b) = self.read(g.sit_block_addr(i, copy)) else {
                continue;
            };
            match SitBlock::decode(&b, i) {
                Ok(sb) => {
                    for (slot, e) in sb.entries.iter().enumerate() {
                        let seg = i as usize * SIT_ENTRIES_PER_BLOCK + slot;
                        if seg < sit.len() {
                            sit.set(seg, e);
                        }
                    }
                }
                Err(e) => self.err("sit", format!("SIT block {i} (copy {copy}): {e}")),
            }
        }
        self.tick(FsckStep::Sit, g.sit_blocks, g.sit_blocks);
        self.sit = sit;
    }

    fn nat_entry(&self, nid: Nid) -> Option<NatEntry> {
        if nid >= self.geo.max_nid {
            return None;
        }
        let (block, slot) = (
            nid as usize / NAT_ENTRIES_PER_BLOCK,
            nid as usize % NAT_ENTRIES_PER_BLOCK,
        );
        Some(match self.nat.get(block)? {
            Some(entries) => entries.get(slot).copied().unwrap_or_default(),
            None => NatEntry::default(),
        })
    }

    /// Claim a main-area block for `owner`; report double use and bad addresses.
    fn claim(&mut self, addr: BlkAddr, owner: Owner, ino: Ino) -> bool {
        if self.geo.seg_of(addr).is_none() {
            self.err(
                "inode",
                format!("inode {ino}: {owner:?} points at block {addr:#x} outside the main area"),
            );
            return false;
        }
        if let Some(prev) = self.owners.insert(addr, owner) {
            self.err(
                "inode",
                format!("inode {ino}: block {addr} used twice ({prev:?} and {owner:?})"),
            );
            return false;
        }
        true
    }

    /// Read node `nid` of `ino` and check its footer. `ofs`/`kind` are what the tree says.
    fn node(&mut self, nid: Nid, ino: Ino, kind: NodeKind, ofs: Option<u32>) -> Option<Box<Block>> {
        let Some(e) = self.nat_entry(nid) else {
            self.err("inode", format!("inode {ino}: nid {nid} out of range"));
            return None;
        };
        if e.addr == NULL_ADDR {
            self.err("nat", format!("inode {ino}: node {nid} has no NAT address"));
            return None;
        }
        if e.ino != ino {
            self.err(
                "nat",
                format!(
                    "node {nid}: NAT says inode {}, tree of inode {ino} uses it",
                    e.ino
                ),
            );
        }
        let (word, bit) = ((nid / 64) as usize, 1u64 << (nid % 64));
        if self.reached_nids[word] & bit != 0 {
            self.err("inode", format!("inode {ino}: node {nid} reached twice"));
            return None;
        }
        self.reached_nids[word] |= bit;
        if !self.claim(e.addr, Owner::Node(nid), ino) {
            return None;
        }
        self.report.node_blocks += 1;
        let b = self.read(e.addr)?;
        match node::check_node(&b, Some(nid)) {
            Ok(f) => {
                if f.ino != ino {
                    self.err(
                        "node",
                        format!("node {nid} at {}: footer inode {} != {ino}", e.addr, f.ino),
                    );
                }
                if f.kind() != Some(kind) {
                    self.err(
                        "node",
                        format!(
                            "node {nid} at {}: kind {:?}, expected {kind:?}",
                            e.addr,
                            f.kind()
                        ),
                    );
                }
                if let Some(o) = ofs {
                    if f.ofs != o {
                        self.err("node", format!("node {nid}: tree offset {} != {o}", f.ofs));
                    }
                }
                Some(b)
            }
            Err(err) => {
                self.err(
                    "node",
                    format!("node {nid} of inode {ino} at {}: {err}", e.addr),
                );
                None
            }
        }
    }

    /// Walk one inode's node tree. Returns its header and data block map (index -> addr).
    fn walk_inode(
        &mut self,
        ino: Ino,
        want_data: bool,
    ) -> Option<(InodeHdr, Box<Block>, BTreeMap<u64, BlkAddr>)> {
        let blk = self.node(ino, ino, NodeKind::Inode, Some(0))?;
        let hdr = match InodeHdr::read(&blk) {
            Ok(h) => h,
            Err(e) => {
                self.err("inode", format!("inode {ino}: {e}"));
                return None;
            }
        };
        self.report.inodes += 1;
        let mut data = BTreeMap::new();
        let mut count = 0u64;
        let inline = hdr.flags & (iflag::INLINE_DATA | iflag::INLINE_DENTRY) != 0;
        if hdr.size > node::MAX_FILE_BLOCKS * BLOCK_SIZE as u64 {
            self.err(
                "inode",
                format!(
                    "inode {ino}: size {} is past the largest file size ({} bytes)",
                    hdr.size,
                    node::MAX_FILE_BLOCKS * BLOCK_SIZE as u64
                ),
            );
        }
        if hdr.flags & iflag::INLINE_DATA != 0 && hdr.size > node::MAX_INLINE_DATA as u64 {
            self.err(
                "inode",
                format!("inode {ino}: inline file of size {}", hdr.size),
            );
        }
        let mut note = |me: &mut Self, addr: BlkAddr, idx: u64, nid: Nid, slot: usize| {
            if addr == NULL_ADDR {
                return;
            }
            count += 1;
            if addr == NEW_ADDR {
                me.reserved_blocks += 1;
            } else if me.claim(
                addr,
                Owner::Data {
                    nid,
                    slot: slot as u16,
                },
                ino,
            ) {
                me.report.data_blocks += 1;
                if want_data {
                    data.insert(idx, addr);
                }
            }
        };
        if !inline {
            for s in 0..ADDRS_PER_INODE {
                note(self, node::inode_addr(&blk, s), s as u64, ino, s);
            }
        }
        if hdr.xattr_nid != 0 {
            if let Some(x) = self.node(hdr.xattr_nid, ino, NodeKind::Xattr, None) {
                match node::xattrs(&x) {
                    Err(e) => self.err("xattr", format!("inode {ino}: {e}")),
                    Ok(list) => self.check_acls(ino, hdr.mode, &list),
                }
            }
        }
        // Subtrees: (inode nid slot, first file index of the subtree, level).
        let (a, n, i) = (
            ADDRS_PER_BLOCK as u64,
            NIDS_PER_BLOCK as u64,
            ADDRS_PER_INODE as u64,
        );
        let roots = [
            (0usize, i, 1usize),
            (1, i + a, 1),
            (2, i + 2 * a, 2),
            (3, i + 2 * a + n * a, 2),
            (4, i + 2 * a + 2 * n * a, 3),
        ];
        let mut stack: Vec<(Nid, u64, usize)> = Vec::new();
        for &(k, start, level) in &roots {
            let nid = node::inode_nid(&blk, k);
            if nid != 0 {
                stack.push((nid, start, level));
            }
        }
        while let Some((nid, start, level)) = stack.pop() {
            let want_ofs = node::node_path(start).map(|p| p.node_ofs[p.depth + 1 - level]);
            let kind = if level == 1 {
                NodeKind::Direct
            } else {
                NodeKind::Indirect
            };
            let Some(b) = self.node(nid, ino, kind, want_ofs) else {
                continue;
            };
            if level == 1 {
                for s in 0..ADDRS_PER_BLOCK {
                    note(self, node::dnode_addr(&b, s), start + s as u64, nid, s);
                }
            } else {
                let span = a * n.pow(level as u32 - 2);
                for s in 0..NIDS_PER_BLOCK {
                    let c = node::indirect_nid(&b, s);
                    if c != 0 {
                        stack.push((c, start + s as u64 * span, level - 1));
                    }
                }
            }
        }
        if hdr.blocks != count {
            self.err(
                "inode",
                format!(
                    "inode {ino}: header says {} blocks, tree holds {count}",
                    hdr.blocks
                ),
            );
        }
        Some((hdr, blk, data))
    }

    fn check_tree(&mut self) {
        self.tick(FsckStep::Tree, 0, self.cp.valid_inodes);
        let seed = self.sb.hash_seed;
        let mut queue = VecDeque::from([(ROOT_INO, ROOT_INO)]);
        let mut seen_dirs = HashSet::new();
        self.inodes.insert(
            ROOT_INO,
            Reached {
                names: 1,
                ..Default::default()
            },
        );
        while let Some((dir, parent)) = queue.pop_front() {
            if !seen_dirs.insert(dir) {
                self.err(
                    "dir",
                    format!("directory {dir} reached twice (a loop or a directory hard link)"),
                );
                continue;
            }
            self.inodes.entry(dir).or_default().state |= Reached::SEEN;
            let Some((hdr, blk, data)) = self.walk_inode(dir, true) else {
                continue;
            };
            self.report.directories += 1;
            self.tree_tick();
            if hdr.mode & crate::cell::libc_mode::S_IFMT != crate::cell::libc_mode::S_IFDIR {
                self.err(
                    "dir",
                    format!(
                        "inode {dir} is listed as a directory but has mode {:o}",
                        hdr.mode
                    ),
                );
                continue;
            }
            if hdr.pino != parent {
                self.err(
                    "dir",
                    format!(
                        "directory {dir}: parent link {} but found in {parent}",
                        hdr.pino
                    ),
                );
            }
            let mut entries = Vec::new();
            if hdr.flags & iflag::INLINE_DENTRY != 0 {
                match INLINE_LAYOUT.entries(node::inode_area(&blk)) {
                    Ok(es) => entries.extend(es.into_iter().map(|d| (None, d))),
                    Err(e) => self.err("dir", format!("directory {dir} inline entries: {e}")),
                }
            } else {
                for (&idx, &addr) in &data {
                    let Some(b) = self.read(addr) else { continue };
                    if let Err(e) = fdir::check_dentry_block(&b) {
                        self.err("dir", format!("directory {dir} block {idx}: {e}"));
                        continue;
                    }
                    match BLOCK_LAYOUT.entries(&b[..]) {
                        Ok(es) => entries.extend(es.into_iter().map(|d| (Some(idx), d))),
                        Err(e) => self.err("dir", format!("directory {dir} block {idx}: {e}")),
                    }
                }
            }
            let mut names = HashSet::new();
            let mut subdirs = 0;
            for (block, d) in entries {
                let shown = String::from_utf8_lossy(&d.name).into_owned();
                if d.hash != fdir::name_hash(seed, &d.name) {
                    self.err(
                        "dir",
                        format!("directory {dir}: entry {shown:?} has a wrong hash"),
                    );
                }
                if let Some(idx) = block {
                    if !hash_fits(idx, d.hash, hdr.depth) {
                        self.err("dir", format!("directory {dir}: entry {shown:?} is in block {idx}, outside its hash bucket"));
                    }
                }
                if !names.insert(d.name.clone()) {
                    self.err(
                        "dir",
                        format!("directory {dir}: name {shown:?} appears twice"),
                    );
                }
                if d.name.contains(&b'/') || d.name == b"." || d.name == b".." {
                    self.err("dir", format!("directory {dir}: invalid name {shown:?}"));
                }
                match self.nat_entry(d.ino) {
                    Some(e) if e.addr != NULL_ADDR && e.ino == d.ino => {}
                    _ => {
                        self.err(
                            "dir",
                            format!(
                                "directory {dir}: entry {shown:?} points at missing inode {}",
                                d.ino
                            ),
                        );
                        continue;
                    }
                }
                let r = self.inodes.entry(d.ino).or_default();
                r.names += 1;
                if d.ftype == fdir::ftype::DIR {
                    subdirs += 1;
                    queue.push_back((d.ino, dir));
                } else if r.state & Reached::SEEN == 0 {
                    r.state |= Reached::SEEN;
                    self.check_file(d.ino, d.ftype);
                }
            }
            self.subdirs.insert(dir, subdirs);
            self.walked(dir, hdr.nlink, true);
        }
    }

    fn check_file(&mut self, ino: Ino, ftype: u8) {
        let Some((hdr, _, _)) = self.walk_inode(ino, false) else {
            return;
        };
        self.report.files += 1;
        self.tree_tick();
        let mode_type = match hdr.mode & crate::cell::libc_mode::S_IFMT {
            crate::cell::libc_mode::S_IFREG => fdir::ftype::REG,
            crate::cell::libc_mode::S_IFLNK => fdir::ftype::LNK,
            crate::cell::libc_mode::S_IFCHR => fdir::ftype::CHR,
            crate::cell::libc_mode::S_IFBLK => fdir::ftype::BLK,
            crate::cell::libc_mode::S_IFIFO => fdir::ftype::FIFO,
            crate::cell::libc_mode::S_IFSOCK => fdir::ftype::SOCK,
            crate::cell::libc_mode::S_IFDIR => fdir::ftype::DIR,
            _ => fdir::ftype::UNKNOWN,
        };
        if mode_type != ftype {
            self.err(
                "dir",
                format!(
                    "inode {ino}: directory entry type {ftype} but mode {:o}",
                    hdr.mode
                ),
            );
        }
        let is_dir = hdr.mode & crate::cell::libc_mode::S_IFMT == crate::cell::libc_mode::S_IFDIR;
        self.walked(ino, hdr.nlink, is_dir);
    }

    /// Record the link count of an inode whose block the walk read.
    fn walked(&mut self, ino: Ino, nlink: u32, dir: bool) {
        let r = self.inodes.entry(ino).or_default();
        r.nlink = nlink;
        r.state |= Reached::WALKED | if dir { Reached::DIR } else { 0 };
    }

    fn check_links(&mut self) {
        let mut wrong: Vec<(Ino, u32, u32)> = Vec::new();
        for (&ino, r) in &self.inodes {
            if r.state & Reached::WALKED == 0 {
                continue;
            }
            let want = if r.state & Reached::DIR != 0 {
                2 + self.subdirs.get(&ino).copied().unwrap_or(0)
            } else {
                r.names
            };
            if r.nlink != want {
                wrong.push((ino, r.nlink, want));
            }
        }
        wrong.sort_unstable();
        for (ino, nlink, want) in wrong {
            self.err(
                "inode",
                format!("inode {ino}: link count {nlink} but {want} found"),
            );
        }
    }

    fn check_orphans(&mut self) {
        for ino in self.cp.orphans.clone() {
            if self
                .inodes
                .get(&ino)
                .is_some_and(|r| r.state & Reached::WALKED != 0)
            {
                self.err(
                    "orphan",
                    format!("orphan inode {ino} is still linked in a directory"),
                );
                continue;
            }
            if let Some((hdr, _, _)) = self.walk_inode(ino, false) {
                if hdr.nlink != 0 {
                    self.err(
                        "orphan",
                        format!("orphan inode {ino} has {} links", hdr.nlink),
                    );
                }
            }
        }
    }

    fn check_nat_leaks(&mut self) {
        // Only written NAT blocks are held (`load_nat`).
        let mut unreached = Vec::new();
        for (block, entries) in self.nat.iter().enumerate() {
            let Some(entries) = entries else { continue };
            for (slot, e) in entries.iter().enumerate() {
                let nid = (block * NAT_ENTRIES_PER_BLOCK + slot) as Nid;
                if nid != 0
                    && nid < self.geo.max_nid
                    && e.addr != NULL_ADDR
                    && self.reached_nids[(nid / 64) as usize] & (1 << (nid % 64)) == 0
                {
                    unreached.push((nid, *e));
                }
            }
        }
        let leaked = unreached.len();
        for (nid, e) in unreached.into_iter().take(20) {
            self.err(
                "nat",
                format!(
                    "node {nid} (inode {}) at {} is not reachable from any inode",
                    e.ino, e.addr
                ),
            );
        }
        if leaked > 20 {
            self.err("nat", format!("{} more unreachable nodes", leaked - 20));
        }
    }

    fn check_sit_ssa(&mut self) {
        let g = self.geo.clone();
        let mut total_valid = 0u64;
        // The segments holding a reachable block: a segment outside it whose SIT marks no
        // block has nothing to compare, and is passed without 512 lookups (a 16 TiB volume
        // has 8 million segments; looking each block up took fsck 5 minutes there).
        // Taken out while `err` borrows `self`; put back below.
        let owners = std::mem::take(&mut self.owners);
        for seg in 0..g.main_segments {
            self.tick(FsckStep::Segments, seg, g.main_segments);
            total_valid += self.sit.valid(seg) as u64;
            let table = owners.seg(seg);
            if table.is_none() && self.sit.bitmaps[seg as usize].is_none() {
                continue;
            }
            let bitmap = *self.sit.bitmap(seg);
            let start = g.seg_start(seg);
            let mut wrong = 0;
            let mut any_reached = false;
            for off in 0..BLOCKS_PER_SEG as usize {
                let reached = table.is_some_and(|t| t.get(off).is_some());
                any_reached |= reached;
                if reached != test_bit(&bitmap, off) {
                    wrong += 1;
                    if wrong <= 3 {
                        let what = if reached {
                            "reachable but marked free"
                        } else {
                            "marked valid but unreachable"
                        };
                        self.err(
                            "sit",
                            format!(
                                "segment {seg} block {off} (addr {}): {what}",
                                start + off as u64
                            ),
                        );
                    }
                }
            }
            if wrong > 3 {
                self.err(
                    "sit",
                    format!("segment {seg}: {} more validity mismatches", wrong - 3),
                );
            }
            let Some(table) = table.filter(|_| any_reached) else {
                continue;
            };
            let copy = test_bit(&self.cp.ssa_bitmap, seg as usize) as u8;
            let Some(b) = self.read(g.ssa_block_addr(seg, copy)) else {
                continue;
            };
            let ssa = match SsaBlock::decode(&b, seg) {
                Ok(s) => s,
                Err(e) => {
                    self.err("ssa", format!("segment {seg} summary: {e}"));
                    continue;
                }
            };
            // The segment's log class decides how the cleaner moves its blocks: node and
            // data blocks never share a segment.
            let class = self.sit.class(seg);
            let class_node = crate::seg::class_kind(class, g.log_heads as usize)
                == Some(flashlog_format::cp::LogKind::Node);
            let mut mixed = 0;
            let mut bad = 0;
            for off in 0..BLOCKS_PER_SEG as usize {
                let Some(owner) = table.get(off) else {
                    continue;
                };
                // The device's GC region (gc=device) packs node and data blocks together.
                if matches!(owner, Owner::Node(_)) != class_node && start < self.device_from {
                    mixed += 1;
                    if mixed == 1 {
                        self.err(
                            "sit",
                            format!(
                                "segment {seg} block {off}: {owner:?} in a segment of log head {class} ({})",
                                if class_node { "node" } else { "data" }
                            ),
                        );
                    }
                }
                let s = ssa.entries[off];
                let ok = match owner {
                    Owner::Node(nid) => s.nid == nid,
                    Owner::Data { nid, slot } => s.nid == nid && s.ofs == slot,
                };
                if !ok {
                    bad += 1;
                    if bad <= 3 {
                        self.err("ssa", format!("segment {seg} block {off}: summary says nid {} slot {}, owner is {owner:?}", s.nid, s.ofs));
                    }
                }
            }
            if bad > 3 {
                self.err(
                    "ssa",
                    format!("segment {seg}: {} more summary mismatches", bad - 3),
                );
            }
        }
        self.tick(FsckStep::Segments, g.main_segments, g.main_segments);
        self.owners = owners;
        let reachable = self.owners.len();
        if total_valid != reachable {
            self.err(
                "sit",
                format!("SIT counts {total_valid} valid blocks, {reachable} are reachable"),
            );
        }
    }

    /// Infinite volumes, instead of the SIT and SSA: the live count, the heads in their
    /// regions, every reachable block in a head's region and behind the head.
    fn check_infinite(&mut self) {
        let g = self.geo.clone();
        let cp = self.cp.clone();
        let reachable = self.owners.len();
        if cp.live_blocks != reachable {
            self.err(
                "checkpoint",
                format!(
                    "live block count {} but {reachable} blocks are reachable",
                    cp.live_blocks
                ),
            );
        }
        let mut iv: Vec<LiveInterval> = Vec::new();
        for (i, h) in cp.heads.iter().enumerate() {
            let first = g.region_first_seg(i);
            let in_region = h.seg >= first && g.region_of_seg(h.seg) == i;
            let next_ok = match h.kind {
                flashlog_format::cp::LogKind::Node => h.next_seg == h.seg + 1,
                flashlog_format::cp::LogKind::Data => h.next_seg == u64::MAX,
            };
            if !in_region || h.blkoff as u64 > BLOCKS_PER_SEG || !next_ok {
                self.err(
                    "checkpoint",
                    format!(
                        "log head {i} at segment {:#x} offset {} (next {:#x}) is not in its region {}",
                        h.seg, h.blkoff, h.next_seg, i + 1
                    ),
                );
            }
            iv.push(LiveInterval {
                head: i,
                region_start: g.seg_start(first),
                head_at: g.seg_start(h.seg) + h.blkoff as u64,
                ..Default::default()
            });
        }
        let mut outside = 0u64;
        let mut ahead = 0u64;
        // Taken out while `err` borrows `self`; put back below.
        let owners = std::mem::take(&mut self.owners);
        for (a, owner) in owners.iter() {
            let hi = g.seg_of(a).map(|s| g.region_of_seg(s));
            let Some(v) = hi.and_then(|hi| iv.get_mut(hi)) else {
                outside += 1;
                if outside <= 3 {
                    self.err(
                        "inode",
                        format!("block {a:#x} is in no log head's region ({owner:?})"),
                    );
                }
                continue;
            };
            v.first_live.get_or_insert(a);
            v.last_live = Some(a);
            v.live_blocks += 1;
            if a >= v.head_at {
                ahead += 1;
                if ahead <= 3 {
                    let head = v.head;
                    self.err(
                        "checkpoint",
                        format!("block {a:#x} is reachable but at or ahead of log head {head}"),
                    );
                }
            }
        }
        if outside > 3 || ahead > 3 {
            self.err(
                "inode",
                format!("{outside} blocks outside every region, {ahead} ahead of their head"),
            );
        }
        self.report.live_intervals = iv;
        self.owners = owners;
    }

    /// The discard log decodes, and names no reachable block (that would be data loss at
    /// the next mount, which re-issues it).
    fn check_discard_log(&mut self) {
        if self.cp.discard_log.is_empty() {
            return;
        }
        let cmds = match crate::discard::decode_log(&self.cp.discard_log, self.geo.block_count) {
            Ok(c) => c,
            Err(e) => {
                self.err("checkpoint", e.to_string());
                return;
            }
        };
        self.report.discard_log_commands = cmds.len() as u64;
        self.report.discard_log_blocks = cmds.iter().map(|c| c.len).sum();
        let owners = std::mem::take(&mut self.owners);
        let mut hits = 0;
        for c in cmds {
            for (a, owner) in owners.range(c.addr, c.addr.saturating_add(c.len)) {
                hits += 1;
                if hits <= 3 {
                    self.err(
                        "checkpoint",
                        format!("discard log names block {a:#x}, which is reachable ({owner:?})"),
                    );
                }
            }
        }
        self.owners = owners;
        if hits > 3 {
            self.err(
                "checkpoint",
                format!("discard log names {} more reachable blocks", hits - 3),
            );
        }
    }

    fn check_counters_and_heads(&mut self) {
        let g = self.geo.clone();
        let cp = self.cp.clone();
        let want_blocks = self.owners.len() + self.reserved_blocks;
        if cp.valid_blocks != want_blocks {
            self.err(
                "checkpoint",
                format!(
                    "valid block count {} but {want_blocks} blocks are allocated",
                    cp.valid_blocks
                ),
            );
        }
        if cp.valid_nodes != self.report.node_blocks {
            self.err(
                "checkpoint",
                format!(
                    "valid node count {} but {} nodes are reachable",
                    cp.valid_nodes, self.report.node_blocks
                ),
            );
        }
        if cp.valid_inodes != self.report.inodes {
            self.err(
                "checkpoint",
                format!(
                    "inode count {} but {} inodes are reachable",
                    cp.valid_inodes, self.report.inodes
                ),
            );
        }
        if want_blocks > g.user_blocks {
            self.err(
                "checkpoint",
                format!(
                    "{want_blocks} blocks allocated, more than the {} user blocks",
                    g.user_blocks
                ),
            );
        }
        // Every head's segment and reserved next segment are its own: two heads in one
        // segment write the same blocks.
        for e in crate::seg::heads_sharing_segments(&cp.heads) {
            self.err("checkpoint", e);
        }
        if g.infinite {
            return; // heads checked by `check_infinite`; no sections to count
        }
        // Sections owned by log heads, and free-space accounting.
        let sps = g.segs_per_sec as u64;
        let mut current = HashSet::new();
        for (i, h) in cp.heads.iter().enumerate() {
            if h.seg >= g.main_segments || h.blkoff as u64 > BLOCKS_PER_SEG {
                self.err(
                    "checkpoint",
                    format!(
                        "log head {i} at segment {} offset {} is out of range",
                        h.seg, h.blkoff
                    ),
                );
                continue;
            }
            current.insert(h.seg / sps);
            let bitmap = *self.sit.bitmap(h.seg);
            // Data heads may thread-log (SSR) into a segment with valid blocks ahead; node
            // heads never do.
            let strict = h.kind == flashlog_format::cp::LogKind::Node;
            for off in (h.blkoff as usize..BLOCKS_PER_SEG as usize).filter(|_| strict) {
                if test_bit(&bitmap, off) {
                    self.err(
                        "checkpoint",
                        format!(
                            "log head {i}: segment {} block {off} is valid but ahead of the head",
                            h.seg
                        ),
                    );
                    break;
                }
            }
            if h.next_seg != u64::MAX {
                if h.next_seg >= g.main_segments {
                    self.err(
                        "checkpoint",
                        format!("log head {i}: next segment {} out of range", h.next_seg),
                    );
                } else {
                    current.insert(h.next_seg / sps);
                    if self.sit.valid(h.next_seg) != 0 && h.next_seg / sps != h.seg / sps {
                        self.err(
                            "checkpoint",
                            format!(
                                "log head {i}: next segment {} already holds data",
                                h.next_seg
                            ),
                        );
                    }
                }
            }
        }
        let mut free = 0;
        for sec in 0..g.sections() {
            let valid: u64 = (sec * sps..(sec + 1) * sps)
                .map(|s| self.sit.valid(s) as u64)
                .sum();
            // The device's GC region (gc=device) is never free for the host.
            let device = g.seg_start(sec * sps) >= self.device_from;
            if valid == 0 && !current.contains(&sec) && !device {
                free += 1;
            }
        }
        if cp.free_segments != free * sps {
            self.err(
                "checkpoint",
                format!(
                    "free segment count {} but {} segments are free",
                    cp.free_segments,
                    free * sps
                ),
            );
        }
    }
}

/// Is dentry block `idx` in a bucket that hash `h` maps to at some level below `depth`?
fn hash_fits(idx: u64, h: u32, depth: u32) -> bool {
    (0..depth.min(fdir::MAX_DEPTH)).any(|l| fdir::bucket_blocks(l, h).contains(&idx))
}

/// The step a check is in, for a progress display ([`fsck_with_progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsckStep {
    /// Reading the NAT (`done` and `total` count its blocks).
    Nat,
    /// Reading the SIT (blocks).
    Sit,
    /// Walking the directory tree (inodes; `total` is the checkpoint's count, which a
    /// damaged volume may not reach or may pass).
    Tree,
    /// Comparing the reachable blocks with the SIT and the summaries (segments).
    Segments,
}

impl FsckStep {
    /// What the step does, for people; `unit` names what `done` and `total` count.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            FsckStep::Nat => ("reading the NAT", "blocks"),
            FsckStep::Sit => ("reading the SIT", "blocks"),
            FsckStep::Tree => ("walking the tree", "inodes"),
            FsckStep::Segments => ("checking segment usage", "segments"),
        }
    }
}

/// Check the volume on `dev`. `Err` means the check could not run at all (exit code 8).
pub fn fsck(dev: &dyn BlockDevice) -> Result<FsckReport> {
    fsck_with_progress(dev, &mut |_, _, _| {})
}

/// [`fsck`], telling `progress` (step, done, total) as it goes: at the start and end of each
/// step and every 4,096 units between (a display throttles it further by time).
pub fn fsck_with_progress(
    dev: &dyn BlockDevice,
    progress: &mut dyn FnMut(FsckStep, u64, u64),
) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let sb = match read_superblock(dev) {
        Ok(sb) => sb,
        Err(e) => {
            report.findings.push(Finding {
                severity: Severity::Error,
                area: "superblock",
                message: e.to_string(),
            });
            return Ok(report);
        }
    };
    let mut b = zero_block();
    for copy in 0..2u64 {
        dev.read(copy, &mut b[..])?;
        match Superblock::decode(as_block(&b[..], "superblock")?) {
            Ok(s) if s == sb => {}
            Ok(_) => report.findings.push(Finding {
                severity: Severity::Error,
                area: "superblock",
                message: format!("copy {copy} differs from the copy in use"),
            }),
            Err(e) => report.findings.push(Finding {
                severity: Severity::Error,
                area: "superblock",
                message: format!("copy {copy}: {e}"),
            }),
        }
    }
    let cp = match read_checkpoint(dev, &sb.geo) {
        Ok(cp) => cp,
        Err(e) => {
            report.findings.push(Finding {
                severity: Severity::Error,
                area: "checkpoint",
                message: e.to_string(),
            });
            return Ok(report);
        }
    };
    for pack in 0..2u8 {
        // mkfs writes pack 0 or 1 and zeroes the other: a pack whose header is all zeros
        // was never written (every volume until its first checkpoint after mkfs), which is
        // no damage to warn of.
        dev.read(sb.geo.cp_pack_addr(pack), &mut b[..])?;
        if b.iter().all(|&x| x == 0) {
            continue;
        }
        if let Err(e) = read_pack(dev, &sb.geo, pack) {
            report.findings.push(Finding {
                severity: Severity::Warning,
                area: "checkpoint",
                message: format!("pack {pack} is not valid ({e}); the other pack is in use"),
            });
        }
    }
    report.checkpoint_version = cp.version;
    let geo = sb.geo.clone();
    check_table_memory(&geo)?;
    let owners = Owners::new(&geo);
    let mut c = Checker {
        dev,
        sb,
        geo,
        cp,
        nat: Vec::new(),
        sit: Sit::default(),
        report,
        owners,
        reserved_blocks: 0,
        device_from: {
            let c = dev.capabilities();
            if c.gc_region_blocks > 0 {
                c.block_count - c.gc_region_blocks
            } else {
                u64::MAX
            }
        },
        inodes: HashMap::new(),
        reached_nids: Vec::new(),
        subdirs: HashMap::new(),
        progress,
    };
    c.load_nat();
    if !c.geo.infinite {
        c.load_sit();
    }
    c.check_walk_memory()?;
    c.reached_nids = vec![0; (c.geo.max_nid as usize).div_ceil(64)];
    c.check_tree();
    let walked = c.report.files + c.report.directories;
    (c.progress)(FsckStep::Tree, walked, walked);
    c.check_links();
    c.check_orphans();
    c.check_nat_leaks();
    if c.geo.infinite {
        c.check_infinite();
    } else {
        c.check_sit_ssa();
    }
    c.check_counters_and_heads();
    c.check_discard_log();
    c.report.reachable = std::mem::take(&mut c.owners).into_reachable();
    Ok(c.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(infinite: bool, main_addr: BlkAddr, segs: u64) -> Owners {
        Owners {
            main_addr,
            dense: if infinite {
                Vec::new()
            } else {
                (0..segs).map(|_| None).collect()
            },
            infinite,
            ..Default::default()
        }
    }

    /// Blocks on both sides of a segment boundary (and far apart on an infinite volume):
    /// each keeps its owner, a second claim returns the first owner and changes nothing,
    /// ranges and the reachable set come out in address order.
    #[test]
    fn owners_across_segment_boundaries() {
        for (infinite, main) in [(false, 1024), (true, 1024)] {
            let mut o = owners(infinite, main, 8);
            let far = if infinite { 1 << 40 } else { 7 };
            let claims = [
                (main + 511, Owner::Node(5)),
                (main + 512, Owner::Data { nid: 6, slot: 0 }),
                (main + 3 * 512 + 7, Owner::Data { nid: 7, slot: 1017 }),
                (main + far * 512 + 511, Owner::Node(u32::MAX)),
            ];
            for &(a, w) in &claims {
                assert_eq!(o.insert(a, w), None);
            }
            assert_eq!(o.len(), 4);
            assert_eq!(
                o.insert(main + 512, Owner::Node(9)),
                Some(Owner::Data { nid: 6, slot: 0 })
            );
            assert_eq!(o.insert(main + 511, Owner::Node(9)), Some(Owner::Node(5)));
            assert_eq!(o.len(), 4);
            for &(a, w) in &claims {
                assert_eq!(o.get(a), Some(w));
            }
            assert_eq!(o.get(main + 510), None);
            assert_eq!(o.get(main - 1), None);
            assert_eq!(o.iter().collect::<Vec<_>>(), claims.to_vec());
            assert_eq!(
                o.range(main + 511, main + 513).collect::<Vec<_>>(),
                claims[..2].to_vec()
            );
            assert_eq!(o.range(0, main + 511).count(), 0);
            assert_eq!(o.range(main + 513, main + 3 * 512 + 7).count(), 0);
            assert_eq!(
                o.range(main + 3 * 512 + 7, BlkAddr::MAX)
                    .collect::<Vec<_>>(),
                claims[2..].to_vec()
            );
            let r = o.into_reachable();
            let want: Vec<BlkAddr> = claims.iter().map(|c| c.0).collect();
            assert_eq!(r.len(), 4);
            assert_eq!(r.to_vec(), want);
            assert_eq!(r.first(), Some(want[0]));
            assert_eq!(r.last(), Some(want[3]));
            for a in main - 1..main + 4 * 512 {
                assert_eq!(r.contains(a), want.contains(&a), "{a}");
            }
            assert!(r.contains(want[3]) && !r.contains(want[3] + 1));
        }
        assert!(Reachable::default().is_empty());
        assert_eq!(Reachable::default().last(), None);
    }
}
