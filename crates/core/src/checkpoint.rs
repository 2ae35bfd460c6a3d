//! mkfs, mount (roll-back to the newest valid checkpoint) and the checkpoint itself.
//!
//! Mount reads format versions 1 and 2 and marks a version-1 volume 2 before its first
//! read-write mount writes anything (`upgrade_superblock`); it refuses a version or
//! feature bit it does not know, and a newest pack written whole that does not decode
//! (`read_checkpoint`): never roll back or misread without a word.
//!
//! Checkpoint protocol (docs/DESIGN.md "Checkpoint"), with every operation excluded:
//! 1. write back all dirty data and nodes to the logs; submit the log buffers;
//! 2. write dirty NAT, SIT and SSA blocks to their *other* copies (flipping bits in memory),
//!    queued on the log-write pool beside the log buffers (`SegManager::write_meta`);
//! 3. wait for every write of 1 and 2; write the pack header and payload to pack (v % 2);
//!    flush; write the footer; flush;
//! 4. durable: the collector's `after_checkpoint` says which of the sections emptied before
//!    the pack to discard and free now (all, except `gc=device`, which frees them one
//!    checkpoint later, after its discards and acknowledgement: `gc_device.rs`).
//!
//! The tail (step 3's wait and the pack, step 4) needs no operation excluded once the
//! snapshot (steps 1 and 2 submitted, the pack encoded, the next interval started) is
//! taken. `gc=none`'s room-making and timer checkpoints run it beside operations
//! (`checkpoint_beside_ops`, mount option `cp_tail`); every other checkpoint runs it at
//! once. Invariants: one tail at a time (a checkpoint waits for the previous one's first);
//! fsync and sync return only once the pack of the interval they wrote in is durable
//! (`wait_durable`); what a pack frees is taken at its snapshot.
//! Lock order: the tail takes no op lock, no cell and no `gc_lock` (a thread holding
//! either may wait for it); `tail_lock` is a leaf.
//!
//! Per-phase time goes to the `cp_*_ns` counters (apply, writeback, metadata and pack, after
//! the pack), so a benchmark reports where checkpoint time goes.
//!
//! Until the footer is durable the previous pack still describes a complete, consistent
//! volume, since nothing it references was overwritten: main-area blocks freed since it are
//! not reused (prefree), and metadata went to the copies it does not use.

use crate::cell::{InodeCell, InodeState};
use crate::config::MountOptions;
use crate::error::{Error, Result};
use crate::inner::{CpState, FsInner};
use crate::lock::OpLock;
use crate::nat::NatTable;
use crate::seg::SegManager;
use crate::stats::Stats;
use crossbeam_utils::CachePadded;
use flashlog_dev::BlockDevice;
use flashlog_format::codec::{zero_block, Block};
use flashlog_format::cp::{self, Checkpoint, LogKind, PackChoice, Temp};
use flashlog_format::node::{self, iflag, InodeHdr, NodeKind};
use flashlog_format::sb::{Geometry, Superblock};
use flashlog_format::{BLOCKS_PER_SEG, BLOCK_SIZE, ROOT_INO};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// mkfs options.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    pub label: String,
    pub segs_per_sec: u32,
    pub mlogs: u32,
    /// Overwrite an existing file system.
    pub force: bool,
    /// Derive the uuid, directory hash seed and first checkpoint version from this seed
    /// instead of randomness (deterministic simulation).
    pub seed: Option<u64>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            label: String::new(),
            segs_per_sec: 1,
            mlogs: 1,
            force: false,
            seed: None,
        }
    }
}

/// What mkfs laid out.
#[derive(Clone, Debug)]
pub struct MkfsReport {
    pub sb: Superblock,
}

impl std::fmt::Display for MkfsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = &self.sb.geo;
        let mib = |blocks: u64| blocks as f64 * BLOCK_SIZE as f64 / (1 << 20) as f64;
        writeln!(
            f,
            "Flashlog volume {:?}: {} blocks ({:.1} MiB)",
            self.sb.label,
            g.block_count,
            mib(g.block_count)
        )?;
        writeln!(f, "  area        start block   blocks")?;
        writeln!(f, "  superblock  {:>11}   {:>6}", 0, 2)?;
        writeln!(
            f,
            "  checkpoint  {:>11}   {:>6}  (2 packs of {})",
            g.cp_addr,
            2 * g.cp_pack_blocks,
            g.cp_pack_blocks
        )?;
        writeln!(
            f,
            "  SIT         {:>11}   {:>6}  (2 copies)",
            g.sit_addr,
            2 * g.sit_blocks
        )?;
        writeln!(
            f,
            "  NAT         {:>11}   {:>6}  (2 copies, {} nids)",
            g.nat_addr,
            2 * g.nat_blocks,
            g.max_nid
        )?;
        writeln!(
            f,
            "  SSA         {:>11}   {:>6}  (2 copies)",
            g.ssa_addr,
            2 * g.ssa_blocks
        )?;
        writeln!(
            f,
            "  main        {:>11}   {:>6}  ({} segments of 2 MiB, {} per section)",
            g.main_addr,
            g.main_blocks(),
            g.main_segments,
            g.segs_per_sec
        )?;
        writeln!(
            f,
            "  reserved segments {}, overprovision segments {}",
            g.reserved_segments, g.ovp_segments
        )?;
        write!(
            f,
            "  user space {:.1} MiB, {} log heads ({} mlogs)",
            mib(g.user_blocks),
            g.log_heads,
            g.mlogs
        )
    }
}

/// A known file-system signature found on a device (mkfs refuses without --force).
pub fn detect_signature(dev: &dyn BlockDevice) -> Result<Option<&'static str>> {
    let mut b = zero_block();
    if dev.capabilities().block_count == 0 {
        return Ok(None);
    }
    dev.read(0, &mut b[..])?;
    // A sealed superblock block, even one this code cannot decode (a later format version
    // or feature): mkfs must not take a newer Flashlog's volume for free space.
    if flashlog_format::codec::check(&b, flashlog_format::tag::SUPERBLOCK, "superblock").is_ok() {
        return Ok(Some("Flashlog"));
    }
    let le16 = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let le32 = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    if le16(1024 + 56) == 0xEF53 {
        return Ok(Some("ext2/3/4"));
    }
    if le32(1024) == 0xF2F5_2010 {
        return Ok(Some("F2FS"));
    }
    if &b[0..4] == b"XFSB" {
        return Ok(Some("XFS"));
    }
    if dev.capabilities().block_count > 17 {
        dev.read(16, &mut b[..])?;
        if &b[64..72] == b"_BHRfS_M" {
            return Ok(Some("btrfs"));
        }
    }
    Ok(None)
}

/// The head table of a fresh volume: 6 heads per mlog.
fn head_specs(mlogs: u32) -> Vec<(LogKind, Temp, u16, u16)> {
    let mut v = Vec::new();
    for m in 0..mlogs as u16 {
        for kind in [LogKind::Data, LogKind::Node] {
            for temp in [Temp::Hot, Temp::Warm, Temp::Cold] {
                v.push((kind, temp, m, 0));
            }
        }
    }
    v
}

fn bitmap_len(blocks: u64) -> usize {
    blocks.div_ceil(8) as usize
}

/// Blocks written per request when zeroing metadata areas.
const ZERO_BATCH: u64 = 256;

/// A zoned (ZNS-style) device, zoned F2FS: sections are zones (segments per section from the
/// zone size), the main area starts at the end of the conventional region (all metadata
/// lives there), and the overprovision is what an ordinary layout of the device with that
/// section size would keep (at least the reserved sections), so that zf2fs and f2fs compare
/// on the same user space where the zone size allows it.
fn zoned_geometry(
    caps: &flashlog_dev::Capabilities,
    mlogs: u32,
) -> std::result::Result<Geometry, flashlog_format::sb::GeometryError> {
    let z = caps.zone_blocks;
    let sps = (z / flashlog_format::BLOCKS_PER_SEG).max(1);
    let plain = Geometry::compute(caps.block_count, sps as u32, mlogs)?;
    let main_segs = caps.block_count.saturating_sub(caps.conventional_blocks) / z * sps;
    let logs = ((flashlog_format::sb::DEFAULT_LOG_HEADS + 3) * mlogs) as u64;
    let reserved = (logs + 2) * sps;
    let user = main_segs.saturating_sub(plain.ovp_segments.max(reserved));
    Geometry::compute_zoned(
        caps.block_count,
        caps.conventional_blocks,
        z,
        user * flashlog_format::BLOCKS_PER_SEG,
        mlogs,
        0, // no discard log: zf2fs frees whole sections (zone resets), no dead-block map
    )
}

/// Lay out a new volume on `dev`.
pub fn mkfs(dev: Arc<dyn BlockDevice>, opts: &MkfsOptions) -> Result<MkfsReport> {
    let caps = dev.capabilities().clone();
    if !opts.force {
        if let Some(sig) = detect_signature(&*dev)? {
            return Err(Error::Invalid(match sig {
                "Flashlog" => {
                    "the device already holds a Flashlog file system (use --force, MkfsOptions::force, to overwrite it)"
                }
                _ => "the device already holds another file system (use --force, MkfsOptions::force, to overwrite it)",
            }));
        }
    }
    // A D2FS coupled device: sections are zones, the main area starts after the page-mapped
    // conventional region (all metadata lives there) and runs over the GC region, and the
    // user space is what the device can hold (virtual overprovisioning).
    // IPLFS: an infinite space gets the infinite layout (regions, no SIT/SSA).
    let geo = if caps.infinite_space {
        Geometry::compute_infinite(
            caps.block_count,
            caps.capacity_blocks,
            opts.mlogs,
            crate::gc_none::infinite_log_bytes_max(caps.capacity_blocks),
        )
    } else if caps.migration_upcalls && caps.zone_blocks > 0 && caps.gc_region_blocks > 0 {
        Geometry::compute_zoned(
            caps.block_count,
            caps.conventional_blocks,
            caps.zone_blocks,
            crate::gc_device::live_limit(&caps, opts.mlogs),
            opts.mlogs,
            crate::gc_none::finite_log_bytes_max(
                caps.block_count.saturating_sub(caps.conventional_blocks) / BLOCKS_PER_SEG,
            ),
        )
    } else if caps.zone_blocks > 0 && !caps.migration_upcalls {
        zoned_geometry(&caps, opts.mlogs)
    } else {
        Geometry::compute(caps.block_count, opts.segs_per_sec, opts.mlogs)
    }
    .map_err(|e| Error::Invalid(Box::leak(e.to_string().into_boxed_str())))?;
    crate::seg::check_table_memory(&geo)?;
    // Zero the metadata areas: a stale block of an earlier volume with a valid crc would be
    // trusted. Discard zeroes where the device says it does. (An infinite volume's metadata
    // ends at `ssa_addr`, far below its main area at region 1.)
    let meta_end = if geo.infinite {
        geo.ssa_addr
    } else {
        geo.main_addr
    };
    if caps.discard && caps.discard_zeroes {
        dev.discard(0, meta_end)?;
    } else {
        let zeros = vec![0u8; ZERO_BATCH as usize * BLOCK_SIZE];
        let mut a = 0;
        while a < meta_end {
            let n = ZERO_BATCH.min(meta_end - a);
            dev.write(a, &zeros[..n as usize * BLOCK_SIZE])?;
            a += n;
        }
    }
    // Uuid, hash seed and first checkpoint version are random, or derived from
    // `opts.seed` so that simulations replay exactly.
    let mut rng: Box<dyn rand::RngCore> = match opts.seed {
        Some(s) => Box::new(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(s)),
        None => Box::new(rand::rng()),
    };
    let mut seed = [0u8; 16];
    rng.fill_bytes(&mut seed);
    let sb = Superblock {
        version: flashlog_format::sb::FORMAT_VERSION,
        geo: geo.clone(),
        hash_seed: u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]),
        created_unix: if opts.seed.is_some() {
            0
        } else {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        },
        features: 0,
        uuid: seed,
        label: opts.label.clone(),
    };
    let enc = sb.encode();
    dev.write(0, &enc[..])?;
    dev.write(1, &enc[..])?;
    // Random first checkpoint version: node blocks of an earlier volume can never carry it,
    // so roll-forward cannot adopt them.
    let first_version = (rng.next_u64() >> 16).max(1);
    let cp_state = CpState {
        nat_bm: vec![0; bitmap_len(geo.nat_blocks)],
        sit_bm: vec![0; bitmap_len(geo.sit_blocks)],
        ssa_bm: vec![0; bitmap_len(geo.ssa_blocks)],
        elapsed_base: 0,
    };
    let mut seg = SegManager::load(
        dev.clone(),
        &geo,
        &cp_state.sit_bm,
        &cp_state.ssa_bm,
        &[],
        0,
        0,
    )?;
    if let Some(first) = device_region(&caps, &geo) {
        seg.reserve_device_region(first);
    }
    let heads = seg.fresh_heads(&head_specs(geo.mlogs))?;
    seg.install_heads(&heads)?;
    let nat = NatTable::new(geo.max_nid, geo.nat_blocks);
    let opts_m = MountOptions {
        cp_interval: None,
        ..Default::default()
    };
    let fs = build(
        dev.clone(),
        sb.clone(),
        opts_m,
        nat,
        seg,
        cp_state,
        first_version - 1,
        Box::new(crate::gc::NoCollector),
    );
    // The root directory.
    let now = fs.now();
    let hdr = InodeHdr {
        mode: crate::cell::libc_mode::S_IFDIR | 0o755,
        nlink: 2,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        flags: iflag::INLINE_DENTRY,
        pino: ROOT_INO,
        ..Default::default()
    };
    fs.nat.mark_used(ROOT_INO);
    fs.nat.set(ROOT_INO, ROOT_INO, 0);
    let mut blk = node::new_node(NodeKind::Inode, ROOT_INO, ROOT_INO, 0);
    hdr.write(&mut blk);
    let st = InodeState::new(ROOT_INO, blk, hdr, true);
    fs.cells.insert(InodeCell::new(st, true));
    fs.alloc_blocks.set(1);
    fs.valid_nodes.store(1, Ordering::Relaxed);
    fs.valid_inodes.store(1, Ordering::Relaxed);
    fs.write_checkpoint(true)?;
    Ok(MkfsReport { sb })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    dev: Arc<dyn BlockDevice>,
    sb: Superblock,
    opts: MountOptions,
    nat: NatTable,
    seg: SegManager,
    cp: CpState,
    version: u64,
    collector: Box<dyn crate::gc::Collector>,
) -> FsInner {
    let svp_on = opts.gc == crate::config::GcPolicy::Scale && opts.scale.svp;
    let user_blocks = sb.geo.user_blocks;
    let mut fs = FsInner {
        svp_on,
        dev,
        sb,
        opts,
        oplock: OpLock::new(),
        rename_lock: Mutex::new(()),
        nat,
        seg,
        cells: Default::default(),
        cp: Mutex::new(cp),
        cp_version: AtomicU64::new(version),
        cp_durable: AtomicU64::new(version),
        fsync_chain_after: AtomicU64::new(0),
        tail_lock: Mutex::new(()),
        tail_done: parking_lot::Condvar::new(),
        node_version: AtomicU64::new(flashlog_format::node::first_node_version(version)),
        mlog_shift: Default::default(),
        orphans: Mutex::new(Default::default()),
        orphans_refused: Default::default(),
        alloc_blocks: crate::space::UserBlocks::new(user_blocks, 0),
        prepass: Mutex::new(()),
        discard_checkpoint: Mutex::new(()),
        cap_relief: Mutex::new(()),
        wb_done_lock: Mutex::new(()),
        wb_waiters: std::sync::atomic::AtomicU32::new(0),
        wb_done: parking_lot::Condvar::new(),
        prepass_round: Mutex::new(None),
        mount_id: {
            static MOUNTS: AtomicU64 = AtomicU64::new(0);
            MOUNTS.fetch_add(1, Ordering::Relaxed)
        },
        valid_nodes: Default::default(),
        valid_inodes: Default::default(),
        dirty_pages: Default::default(),
        dirty_nodes: Default::default(),
        poison: Mutex::new(None),
        poisoned: AtomicBool::new(false),
        stats: Stats::default(),
        gc_cursor: AtomicU64::new(0),
        gc_lock: Mutex::new(()),
        collector,
        last_op_ns: AtomicU64::new(0),
        last_cp_ns: AtomicU64::new(0),
        gc_sleep: Mutex::new(crate::gc::BgSleep::default()),
        gc_bg_dirtied: std::sync::atomic::AtomicBool::new(false),
        svp: Default::default(),
        epoch: std::time::Instant::now(),
        epoch_ns: crate::inner::mono_ns(),
        limits: Default::default(),
        test_hook: Default::default(),
    };
    fs.limits = fs.compute_limits();
    // The caps are checked on every operation against `approx`: fit the counters to them.
    let cap = fs.dirty_nodes_cap();
    fs.dirty_nodes.fit_to(cap);
    fs.cells.fit_to(fs.opts.inode_cache_max);
    fs
}

/// Read the superblock: copy 0, else copy 1.
pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock> {
    let mut errs = Vec::new();
    for addr in 0..2u64 {
        let mut b = zero_block();
        if dev.capabilities().block_count <= addr {
            break;
        }
        dev.read(addr, &mut b[..])?;
        match Superblock::decode(&b) {
            Ok(sb) if sb.geo.block_count <= dev.capabilities().block_count => return Ok(sb),
            Ok(sb) => errs.push(format!(
                "copy {addr}: volume of {} blocks on a device of {}",
                sb.geo.block_count,
                dev.capabilities().block_count
            )),
            Err(e) => errs.push(format!("copy {addr}: {e}")),
        }
    }
    Err(Error::Corrupt(format!(
        "no valid Flashlog superblock ({})",
        errs.join("; ")
    )))
}

/// A read-write mount of a volume of an older format version marks it
/// [`FORMAT_VERSION`](flashlog_format::sb::FORMAT_VERSION) before it writes anything else:
/// what this code writes, binaries that only read the older version misread (docs/FORMAT.md,
/// "Versions"), and they refuse the new one. Copy 1 first: a cut between the two leaves
/// copy 0 old and copy 1 new, which an old binary still mounts, but nothing new-format has
/// been written yet; after copy 0, both copies refuse it.
fn upgrade_superblock(dev: &dyn BlockDevice, sb: &Superblock) -> Result<()> {
    let latest = flashlog_format::sb::FORMAT_VERSION;
    if sb.version >= latest {
        return Ok(());
    }
    let enc = Superblock {
        version: latest,
        ..sb.clone()
    }
    .encode();
    for copy in [1u64, 0] {
        dev.write(copy, &enc[..])?;
        dev.flush()?;
    }
    tracing::info!(
        "format version {} marked {latest} (binaries before 2026-11-28 no longer mount it)",
        sb.version
    );
    Ok(())
}

/// Read and check one checkpoint pack.
pub fn read_pack(dev: &dyn BlockDevice, geo: &Geometry, pack: u8) -> Result<Checkpoint> {
    read_pack_whole(dev, geo, pack).0
}

/// `read_pack`, and the pack's version if it was written whole
/// (`Checkpoint::intact_version`), whether or not its fields decode. (A sealed header whose
/// pack size is out of range counts as torn: nothing after it is read.)
fn read_pack_whole(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    pack: u8,
) -> (Result<Checkpoint>, Option<u64>) {
    let start = geo.cp_pack_addr(pack);
    let read = || -> Result<Vec<Box<Block>>> {
        let mut hdr = zero_block();
        dev.read(start, &mut hdr[..])?;
        let h = Checkpoint::decode_header(&hdr, geo.cp_pack_blocks)?;
        let mut blocks: Vec<Box<Block>> = vec![hdr];
        let mut buf = vec![0u8; (h.pack_blocks as usize - 1) * BLOCK_SIZE];
        dev.read(start + 1, &mut buf)?;
        for c in buf.chunks_exact(BLOCK_SIZE) {
            let mut b = zero_block();
            b.copy_from_slice(c);
            blocks.push(b);
        }
        Ok(blocks)
    };
    let blocks = match read() {
        Ok(b) => b,
        Err(e) => return (Err(e), None),
    };
    let decoded = Checkpoint::decode(
        &blocks,
        bitmap_len(geo.nat_blocks),
        bitmap_len(geo.sit_blocks),
        bitmap_len(geo.ssa_blocks),
    );
    // Only a pack that does not decode is asked whether it was whole (one more pass over
    // its blocks); a decoded one was.
    let whole = match &decoded {
        Ok(c) => Some(c.version),
        Err(_) => Checkpoint::intact_version(&blocks),
    };
    (decoded.map_err(Error::from), whole)
}

/// The newest valid checkpoint (roll-back), per `cp::choose_pack`. A pack written whole
/// whose fields do not decode, and newer than the pack that does, is not a torn pack:
/// the mount is refused, as F2FS's checkpoint sanity check refuses it, instead of rolling
/// back to the older pack without a word (binaries of 2026-11-27 did so on the packs of
/// later code, losing what the newer pack held; found in review, 2026-11-28).
pub fn read_checkpoint(dev: &dyn BlockDevice, geo: &Geometry) -> Result<Checkpoint> {
    let (a, wa) = read_pack_whole(dev, geo, 0);
    let (b, wb) = read_pack_whole(dev, geo, 1);
    let va = a.as_ref().ok().map(|c| c.version);
    let vb = b.as_ref().ok().map(|c| c.version);
    for (pack, r, whole, other) in [(0, &a, wa, vb), (1, &b, wb, va)] {
        if let (Err(e), Some(v)) = (r, whole) {
            if other.is_none_or(|o| v > o) {
                let e = match e {
                    Error::Corrupt(why) => why.clone(),
                    e => e.to_string(),
                };
                return Err(Error::Corrupt(format!(
                    "checkpoint pack {pack} (version {v}) was written whole but does not decode ({e}), and the other pack is {}: not mounted, so as not to roll the volume back to it (a format this Flashlog does not know, or damage)",
                    match other {
                        Some(o) => format!("older (version {o})"),
                        None => "not valid either".to_string(),
                    }
                )));
            }
        }
    }
    match cp::choose_pack(va, vb) {
        PackChoice::Newer(0) | PackChoice::Only(0) => a,
        PackChoice::Newer(_) | PackChoice::Only(_) => b,
        PackChoice::Neither => Err(Error::Corrupt(format!(
            "no valid checkpoint pack (pack 0: {}; pack 1: {})",
            a.err().map(|e| e.to_string()).unwrap_or_default(),
            b.err().map(|e| e.to_string()).unwrap_or_default()
        ))),
    }
}

/// First section of the device's GC region (D2FS coupled device), if the volume has one.
pub fn device_region(caps: &flashlog_dev::Capabilities, geo: &Geometry) -> Option<u64> {
    if caps.gc_region_blocks == 0 {
        return None;
    }
    let start = caps.block_count.checked_sub(caps.gc_region_blocks)?;
    let bps = BLOCKS_PER_SEG * geo.segs_per_sec as u64;
    Some(start.saturating_sub(geo.main_addr) / bps)
}

/// Mount-time state from the newest checkpoint (no roll-forward yet).
pub(crate) fn load(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<(FsInner, Checkpoint)> {
    let (dev, device_gc) = crate::gc_device::prepare(dev, &opts)?;
    let sb = read_superblock(&*dev)?;
    let geo = sb.geo.clone();
    let cpk = read_checkpoint(&*dev, &geo)?;
    // The first `log_heads` rows are the base logs (6 per mlog); any further rows are the
    // dedicated collectors' write streams (ScaleLFS DWS), which can differ per mount.
    let base = geo.log_heads as usize;
    let base_ok = cpk.heads.len() >= base
        && cpk.heads[..base].iter().enumerate().all(|(i, h)| {
            crate::seg::head_index(h.mlog, h.kind, h.temp) == i && h.temp != Temp::Gc
        })
        && cpk.heads[base..]
            .iter()
            .all(|h| h.kind == LogKind::Data && h.temp == Temp::Gc);
    if !base_ok {
        return Err(Error::Corrupt(format!(
            "checkpoint log-head table does not match the superblock ({} rows, {base} base logs)",
            cpk.heads.len()
        )));
    }
    crate::gc_none::check_volume(dev.capabilities(), &geo)?;
    crate::seg::check_table_memory(&geo)?;
    if !opts.read_only {
        upgrade_superblock(&*dev, &sb)?;
    }
    let nat = NatTable::load(&*dev, &geo, &cpk.nat_bitmap)?;
    let mut seg = SegManager::load(
        dev.clone(),
        &geo,
        &cpk.sit_bitmap,
        &cpk.ssa_bitmap,
        &cpk.heads,
        cpk.elapsed_secs,
        // gc=device: a head's writes must reach the device in address order (the coupled
        // FTL seals a zone's line when its last slot is written; a reordered write of the
        // last slot would seal it early, and the zone could then lose its line to device GC
        // and get a second one that never seals). The I/O pool keeps each zone's buffers in
        // submission order on a zoned device (io.rs), so the threads stay on.
        opts.io_threads,
    )?;
    if geo.infinite {
        // No node of the checkpoint's NAT at or ahead of its head (before roll-forward).
        seg.inf_check_nat(&nat)?;
        // IPLFS hook: the pool from the live count; after a cut, record adoptions.
        seg.inf_start(cpk.live_blocks, cpk.flags & cp::flags::UMOUNT == 0);
    }
    let cp_state = CpState {
        nat_bm: cpk.nat_bitmap.clone(),
        sit_bm: cpk.sit_bitmap.clone(),
        ssa_bm: cpk.ssa_bitmap.clone(),
        elapsed_base: cpk.elapsed_secs,
    };
    seg.lfs_mode.store(
        opts.alloc_mode == crate::config::AllocMode::Lfs,
        Ordering::Relaxed,
    );
    let collector: Box<dyn crate::gc::Collector> = match device_gc {
        Some(d) => {
            let Some(first) = device_region(dev.capabilities(), &geo)
                .filter(|_| geo.main_addr == dev.capabilities().conventional_blocks)
            else {
                return Err(Error::Invalid(
                    "gc=device: this volume was not formatted for the device's zones and GC \
                     region (run mkfs on the coupled device)",
                ));
            };
            seg.reserve_device_region(first);
            // Zone blocks are write-once until the device reclaims the zone: no threaded
            // logging into holes.
            seg.lfs_mode.store(true, Ordering::Relaxed);
            d.set_loaded(cpk.last_upcall);
            if !opts.read_only {
                // First the discards the pack logged and may not have issued (a cut before
                // the discard thread or the next checkpoint got to them): a record of a
                // dead block the device moved must still redirect its discard to the moved
                // copy, and the acknowledgement below makes the device forget it.
                crate::gc_device::issue_pack_log(&*dev, &geo, &seg, &cpk)?;
                // What the durable pack covers may be acknowledged now (a cut between the
                // pack and its acknowledgement left it outstanding). Until then the device
                // would redirect a discard of such a pair's old address, which lies in a
                // section this pack freed, to the live block at its new one: the first
                // discard of that section (before a head writes it, `claim_section`) lost it.
                d.ack_loaded(&dev, cpk.last_upcall)?;
            }
            Box::new(d)
        }
        None => {
            let caps = dev.capabilities();
            if caps.zone_blocks > 0 {
                // Zoned F2FS: sections must be the device's zones (a freed section's discard
                // is the zone reset), and blocks of a zone are written in order from its
                // start: lfs mode only, never threaded logging into holes.
                if geo.main_addr != caps.conventional_blocks
                    || flashlog_format::BLOCKS_PER_SEG * geo.segs_per_sec as u64 != caps.zone_blocks
                {
                    return Err(Error::Invalid(
                        "this volume was not formatted for the device's zones (sections must \
                         be zones, the main area must start after the conventional region): \
                         run mkfs on the zoned device",
                    ));
                }
                seg.lfs_mode.store(true, Ordering::Relaxed);
            }
            // F2FS's discards of blocks that die in segments still in use. Not gc=device
            // (its dead-block map discards every dead block), not gc=none (its discard
            // log), not a zoned device (a section is discarded whole, as its zone's reset).
            if !geo.infinite
                && matches!(
                    opts.gc,
                    crate::config::GcPolicy::F2fs | crate::config::GcPolicy::Scale
                )
                && caps.discard
                && caps.zone_blocks == 0
            {
                seg.enable_small_discards();
            }
            crate::gc::collector_for(&opts)?
        }
    };
    seg.set_gc_streams(
        base,
        collector
            .streams()
            .min(crate::scale::ScaleCollector::affordable_streams(&geo)),
    )?;
    let fs = build(dev, sb, opts, nat, seg, cp_state, cpk.version, collector);
    // Threaded logging starts before foreground cleaning would (F2FS f2fs_need_SSR adds
    // min_ssr_sections to the cleaning threshold): at 5 % free sections, or above the
    // highest cleaning target, whichever is more.
    let ssr =
        (fs.sb.geo.sections() / 20).max(fs.seg.reserve_sections() + fs.headroom_secs() * 3 / 4 + 1);
    fs.seg.ssr_below_secs.store(ssr, Ordering::Relaxed);
    fs.alloc_blocks.set(cpk.valid_blocks);
    fs.valid_nodes.store(cpk.valid_nodes, Ordering::Relaxed);
    fs.valid_inodes.store(cpk.valid_inodes, Ordering::Relaxed);
    Ok((fs, cpk))
}

/// A cap relief's pre-pass takes another round over the cells while the last one wrote
/// at least this many nodes, at most `PREPASS_ROUNDS_MAX` rounds in all.
const PREPASS_AGAIN_NODES: u64 = 1024;
const PREPASS_ROUNDS_MAX: u32 = 3;

/// The cells of one checkpoint pre-pass, taken one at a time by the thread that runs it
/// and, for a cap relief, by the operations that help it (`FsInner::help_prepass`).
/// They are split by mlog (`mlog_of`): each taker starts with its own thread's mlog and
/// then takes from the others, so that takers on different mlogs write nodes to different
/// heads (one shared cursor in inode order sent every helper to every mlog's heads in
/// turn: log-head waits were 27 % of thread time in fxmark MWCL, 16 threads on 2 cores).
pub struct PrepassRound {
    buckets: Vec<Bucket>,
    /// Write each file's dirty nodes too, after its pages (a cap relief's pass).
    nodes: bool,
    /// Nodes written in this round, by the pass and its helpers.
    written: AtomicU64,
    /// Operations helping now (at most one per mlog, `help_prepass`).
    helpers: AtomicUsize,
    /// Set when the pass ends (or a cell was short of space): helpers stop taking cells.
    closed: AtomicBool,
}

struct Bucket {
    cells: Vec<Arc<InodeCell>>,
    /// The next cell to take.
    next: CachePadded<AtomicUsize>,
}

impl PrepassRound {
    fn new(fs: &FsInner, nodes: bool) -> Self {
        let mut buckets: Vec<Bucket> = (0..fs.sb.geo.mlogs)
            .map(|_| Bucket {
                cells: Vec::new(),
                next: CachePadded::new(AtomicUsize::new(0)),
            })
            .collect();
        for c in fs.cells.all() {
            buckets[fs.mlog_of(c.ino) as usize].cells.push(c);
        }
        PrepassRound {
            buckets,
            nodes,
            written: AtomicU64::new(0),
            helpers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// The next cell for a taker whose own mlog is `first`; None once every bucket is
    /// taken.
    fn take(&self, first: usize) -> Option<&Arc<InodeCell>> {
        let n = self.buckets.len();
        (0..n).find_map(|k| {
            let b = &self.buckets[(first + k) % n];
            if b.next.load(Ordering::Relaxed) >= b.cells.len() {
                return None;
            }
            b.cells.get(b.next.fetch_add(1, Ordering::Relaxed))
        })
    }
}

impl FsInner {
    /// Before a checkpoint takes the op lock exclusively: write back every cached file's
    /// dirty pages, a file at a time under the shared lock, so that writers go on meanwhile
    /// and the checkpoint's own writeback, which every operation waits for, finds only what
    /// was dirtied since. The flusher leaves up to a quarter of the dirty cap (16 MiB by
    /// default) for the checkpoint; `gc=device` checkpoints every few tens of ms to apply
    /// its upcalls and issue discards, and spent 60 % of its checkpoint time (7.4 of 12.3 s
    /// in a 15 s run) writing those pages with everything else stopped. Best effort: a
    /// file short of space is left to the checkpoint. Takes no `gc_lock` and may run under
    /// it (it never cleans), though a caller that holds it makes everyone short of space
    /// wait for the writeback (so `gc=none`'s discard trigger does not call it).
    ///
    /// One pass at a time: a caller that finds one running waits for it (`checkpoint_prepass`
    /// in the lock waits) instead of walking the cells beside it. `gc=device`'s discard
    /// trigger runs in every writer that finds a checkpoint due, and 16 such pre-passes
    /// walking every cell in turn made the writers wait 29-40 s per 10 s run on each other's
    /// cells (`file_cell_checkpoint`, by holder `prepass`). Skipping instead of waiting (and
    /// skipping held cells) also ended that, but left 1.8-2.6 s more per run to the
    /// checkpoint itself, with everything excluded.
    pub fn writeback_before_checkpoint(&self) -> Result<()> {
        if self.writeback_before_checkpoint_unless_running()? {
            return Ok(());
        }
        // Another pass runs: wait for it (it writes what ours would have) instead of
        // walking the cells beside it.
        drop(crate::waits::lock(
            crate::waits::Point::Prepass,
            &self.prepass,
        ));
        Ok(())
    }

    /// The pre-pass, unless one runs already: then false at once. For a caller whose
    /// checkpoint the running pass's own checkpoint makes unneeded (every caller of the
    /// pre-pass checkpoints right after it).
    pub fn writeback_before_checkpoint_unless_running(&self) -> Result<bool> {
        match self.prepass.try_lock() {
            Some(_one) => self.writeback_before_checkpoint_alone(false).map(|()| true),
            None => Ok(false),
        }
    }

    /// The pre-pass of a cap relief (`Fs::relieve_caps`): each file's dirty nodes are
    /// written too, after its pages, under the shared op lock, so that clean cells can be
    /// evicted without a checkpoint. The other pre-passes leave nodes alone (`gc=device`
    /// and `gc=none` checkpoint every few tens of ms under random overwrites, which dirty
    /// the same direct nodes again at once). The nodes go out without the FSYNC mark
    /// (`write_nodes_unsynced`: a regular file's to its warm log, the file marked
    /// `unsynced` so that its next fsync writes an FSYNC inode that adopts them).
    pub fn writeback_nodes_for_caps(&self) -> Result<()> {
        let _one = crate::waits::lock(crate::waits::Point::Prepass, &self.prepass);
        self.writeback_before_checkpoint_alone(true)
    }

    /// An operation that found a cap crossed while another thread's cap relief runs its
    /// pre-pass: take that pass's cells one at a time, as it does, until none is left
    /// (Max's per-core work: one pre-pass thread writes inodes at one core's pace while
    /// every other core makes them). It holds creators back too, as the dirty cap holds
    /// writers. Nothing when no round runs or every mlog has its helper.
    pub fn help_prepass(&self) -> Result<()> {
        // `try_lock`: an operation never waits here; one that finds the lock taken (a
        // round being published or cleared, or another helper cloning it) goes on.
        let Some(round) = self.prepass_round.try_lock().and_then(|r| r.clone()) else {
            return Ok(());
        };
        // At most one helper per mlog: node writes go through the mlogs' heads, so more
        // helpers than mlogs only wait on each other's heads (MWCL, 16 threads on 2 cores
        // with 2 mlogs: log-head waits 23 % of thread time with every creator helping, 11 %
        // with two; the checkpoints' exclusive time the same).
        if round.helpers.fetch_add(1, Ordering::AcqRel) >= round.buckets.len() {
            round.helpers.fetch_sub(1, Ordering::AcqRel);
            return Ok(());
        }
        let _role = crate::waits::as_role(crate::waits::Role::Prepass);
        let n = self.prepass_cells(&round, false);
        round.helpers.fetch_sub(1, Ordering::AcqRel);
        self.stats
            .cp_helped_nodes
            .fetch_add(*n.as_ref().unwrap_or(&0), Ordering::Relaxed);
        n.map(drop)
    }

    fn writeback_before_checkpoint_alone(&self, nodes: bool) -> Result<()> {
        let _role = crate::waits::as_role(crate::waits::Role::Prepass);
        self.test_point("checkpoint:prepass");
        let t0 = std::time::Instant::now();
        let mut rounds = 0;
        let r = loop {
            let round = Arc::new(PrepassRound::new(self, nodes));
            if nodes {
                *self.prepass_round.lock() = Some(round.clone());
                self.test_point("checkpoint:prepass-published");
            }
            let r = self.prepass_cells(&round, true);
            let short = round.closed.swap(true, Ordering::AcqRel);
            if nodes {
                *self.prepass_round.lock() = None;
            }
            rounds += 1;
            // A cap relief's round leaves the cells made while it ran to the next relief
            // or checkpoint; while a round still finds many nodes to write, another round
            // takes them first (each is shorter: the operations that made them help).
            let again = round.written.load(Ordering::Relaxed) >= PREPASS_AGAIN_NODES;
            if r.is_err() || !nodes || short || !again || rounds == PREPASS_ROUNDS_MAX {
                break r.map(drop);
            }
        };
        self.stats
            .cp_prewrite_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// Take cells from `round` until none is left or one is short of space (the rest is
    /// left to the checkpoint; the round is closed); the nodes this call wrote. `wait`:
    /// for a cell another thread holds (the pass itself); a helper skips it instead and
    /// leaves it to the checkpoint (a creator's directory, held by that creator: helpers
    /// that waited on them did so for 3.8-4.3 s per 3 s MWCL phase, 16 threads on 2 cores).
    fn prepass_cells(&self, round: &PrepassRound, wait: bool) -> Result<u64> {
        let mut mine = 0;
        let first = self.thread_mlog() as usize;
        while !round.closed.load(Ordering::Acquire) {
            let Some(c) = round.take(first) else {
                break;
            };
            match self.prepass_cell(c, round.nodes, wait) {
                Ok(n) => {
                    mine += n;
                    round.written.fetch_add(n, Ordering::Relaxed);
                    self.stats.cp_prewrite_nodes.fetch_add(n, Ordering::Relaxed);
                }
                Err(Error::NoSpace) => {
                    round.closed.store(true, Ordering::Release);
                    break;
                }
                Err(e) => return self.guard(Err(e)),
            }
        }
        Ok(mine)
    }

    /// Write back `c`'s dirty pages in visits of at most `FLUSH_CHUNK` pages, as the
    /// flusher does: each visit takes the op lock (shared) and the cell, holds the cell
    /// only to mark its pages and to map their copies (`writeback_pages_released`), and
    /// releases both before it waits for room in the log-write queue (`_bp`, declared
    /// first, dropped last). Holding the cell for all of a file's pages and the device waits between them
    /// kept its writer out: on 16 cores, `gc=device`'s writers waited 5.0 s per 12 s run at
    /// `file_cell` behind the checkpoint pre-pass (half of their 9 % of lock waits).
    /// After each visit `more(dirty pages before it, pages it wrote)` says whether to go
    /// on; visits end too when the file is clean or freed, or a visit wrote nothing (the
    /// pages left are a flusher's, `Page::wb`). `wait`: for the cell if another
    /// thread holds it; without, false at once if one does (else true).
    pub fn write_back_in_visits(
        &self,
        c: &InodeCell,
        wait: bool,
        mut more: impl FnMut(u64, u64) -> bool,
    ) -> Result<bool> {
        loop {
            let _bp = self.seg.defer_throttle();
            let _g = self.oplock.op();
            self.check_writable()?;
            let Some(st) = (if wait { Some(c.lock()) } else { c.try_lock() }) else {
                return Ok(false);
            };
            if st.freed || st.dirty_pages == 0 {
                return Ok(true);
            }
            let dirty = st.dirty_pages;
            // The copies are written with the cell released, as the flusher's are.
            let n = self.writeback_pages_released(c, st, crate::flush::FLUSH_CHUNK)?;
            // Nothing written: what is dirty is in a flusher's copy (`Page::wb`).
            if !more(dirty, n) || n == 0 {
                return Ok(true);
            }
        }
    }

    /// One file of the pre-pass: its dirty pages, then (`nodes`) its dirty nodes; the
    /// nodes written. Without `wait`, nothing if another thread holds the cell.
    fn prepass_cell(&self, c: &InodeCell, nodes: bool, wait: bool) -> Result<u64> {
        // A file is visited until the pages it had dirty at the first visit could all have
        // been written: a writer that keeps dirtying it cannot hold the pass there.
        let mut visits: Option<u64> = None;
        let visited = self.write_back_in_visits(c, wait, |dirty, _| {
            let left = visits.get_or_insert(dirty.div_ceil(crate::flush::FLUSH_CHUNK));
            *left -= 1;
            *left > 0
        })?;
        if !visited {
            return Ok(0);
        }
        let lock = || if wait { Some(c.lock()) } else { c.try_lock() };
        if !nodes {
            return Ok(0);
        }
        let _g = self.oplock.op();
        self.check_writable()?;
        let Some(mut st) = lock() else {
            return Ok(0);
        };
        if st.freed || !(st.dirty || st.has_dirty_nodes()) {
            return Ok(0);
        }
        self.write_nodes_unsynced(&mut st)
    }

    /// Write a checkpoint, with every operation excluded (the caller holds the op lock
    /// exclusively) until its pack is durable.
    pub fn write_checkpoint(&self, umount: bool) -> Result<()> {
        let tail = self.checkpoint_snapshot(umount)?;
        self.tail_excluding_all(tail)
    }

    /// The tail with operations still excluded (so counted in the checkpoint's time too).
    fn tail_excluding_all(&self, tail: CpTail) -> Result<()> {
        let t0 = std::time::Instant::now();
        let r = self.checkpoint_tail(tail);
        self.stats
            .checkpoint_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// `gc=none`: the part of a checkpoint that needs every operation excluded (the
    /// snapshot: write-back, the pack's contents fixed); the caller releases the op lock
    /// and then runs the returned tail (`checkpoint_tail`), operations running beside it.
    /// Other volumes, and a mount with `cp_tail` off, write the whole checkpoint here and
    /// return None.
    fn write_checkpoint_overlapped(&self) -> Result<Option<CpTail>> {
        let tail = self.checkpoint_snapshot(false)?;
        if self.seg.is_infinite() && self.opts.cp_tail {
            self.stats.cp_tails_beside.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(tail));
        }
        self.tail_excluding_all(tail)?;
        Ok(None)
    }

    /// `gc=none`'s room-making and timer checkpoints: the snapshot with every operation
    /// excluded, then (the op lock released) the tail beside them. Other volumes, and
    /// `cp_tail` off: the whole checkpoint excluding them. The caller holds no op lock.
    pub fn checkpoint_beside_ops(&self) -> Result<()> {
        // A tail still in flight: wait for it here, not with every operation excluded.
        self.wait_durable()?;
        let tail = {
            let _g = self.oplock.checkpoint();
            self.check_writable()?;
            self.write_checkpoint_overlapped()?
        };
        match tail {
            Some(t) => self.checkpoint_tail(t),
            None => Ok(()),
        }
    }

    /// A checkpoint's tail is running beside operations (its pack not yet durable).
    pub fn tail_in_flight(&self) -> bool {
        self.cp_version.load(Ordering::Acquire) > self.cp_durable.load(Ordering::Acquire)
    }

    /// Wait until the pack of the last snapshot is durable (its tail, if one is in flight,
    /// see `checkpoint_tail`); an error if the mount was poisoned meanwhile.
    pub fn wait_durable(&self) -> Result<()> {
        let version = self.cp_version.load(Ordering::Acquire);
        if self.cp_durable.load(Ordering::Acquire) >= version {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let mut g = self.tail_lock.lock();
        while self.cp_durable.load(Ordering::Acquire) < version {
            if self.poisoned.load(Ordering::Acquire) {
                drop(g);
                return Err(Error::Poisoned(
                    self.poison.lock().clone().unwrap_or_default(),
                ));
            }
            self.tail_done.wait(&mut g);
        }
        drop(g);
        crate::waits::record(crate::waits::Point::CheckpointTail, t0);
        Ok(())
    }

    /// The snapshot, with every operation excluded: waits for the previous checkpoint's
    /// tail, writes back every dirty page and node, fixes what the pack records, and
    /// starts the next interval (node versions under the new tag, `cp_version`).
    fn checkpoint_snapshot(&self, umount: bool) -> Result<CpTail> {
        let t0 = std::time::Instant::now();
        let _role = crate::waits::as_role(crate::waits::Role::Checkpoint);
        // No space check: everything this writes was charged to the space budget as debt
        // when it became dirty, so its sections are there (space.rs).
        let r = self
            .wait_durable()
            .and_then(|_| self.snapshot_inner(umount));
        self.stats
            .checkpoint_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Err(e) = &r {
            self.poison_with(format!("checkpoint failed: {e}"));
        }
        r
    }

    fn snapshot_inner(&self, umount: bool) -> Result<CpTail> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                self.poison.lock().clone().unwrap_or_default(),
            ));
        }
        self.tick_clock();
        let mut phase = std::time::Instant::now();
        let mut lap = |c: &AtomicU64| {
            let now = std::time::Instant::now();
            c.fetch_add((now - phase).as_nanos() as u64, Ordering::Relaxed);
            phase = now;
        };
        // 0. gc=device: issue what is left of the previous pack's discards, then apply the
        //    migration upcalls received so far (their remaps go into this checkpoint).
        self.test_point("checkpoint:before-apply");
        self.collector.before_checkpoint(self)?;
        self.test_point("checkpoint:applied");
        let last_upcall = self.collector.last_upcall();
        lap(&self.stats.cp_apply_ns);
        // 1. Data, then nodes, of every cached inode; their log writes are submitted here
        //    and waited for by the tail.
        let cells = self.cells.all();
        for c in &cells {
            let mut st = c.lock();
            if st.freed {
                continue;
            }
            self.writeback_pages(&mut st)?;
        }
        for c in &cells {
            let mut st = c.lock();
            if st.freed {
                continue;
            }
            self.write_all_nodes(&mut st, None)?;
            st.needs_cp = false;
            st.unsynced = false;
        }
        self.seg.submit_all_nowait()?;
        lap(&self.stats.cp_writeback_ns);
        // 2. Metadata to the other copies, queued with the log writes (`write_meta`): the
        //    tail waits for all of them before the pack.
        let cp = self.cp.lock();
        let mut nat_bm = cp.nat_bm.clone();
        let mut sit_bm = cp.sit_bm.clone();
        let mut ssa_bm = cp.ssa_bm.clone();
        let elapsed = cp.elapsed_base + self.epoch.elapsed().as_secs();
        drop(cp);
        for i in self.nat.dirty_blocks() {
            let copy = !flashlog_format::codec::test_bit(&nat_bm, i as usize);
            let b = self.nat.encode_block(i).encode();
            self.seg
                .write_meta(self.sb.geo.nat_block_addr(i, copy as u8), &b)?;
            flashlog_format::codec::set_bit(&mut nat_bm, i as usize, copy);
            self.nat.clear_dirty(i);
        }
        let small_discards = self.seg.flush_meta(&mut sit_bm, &mut ssa_bm)?;
        let io_mark = self.seg.io_mark();
        // 3. The pack's contents.
        let version = self.cp_version.load(Ordering::Acquire) + 1;
        let orphans: Vec<_> = self.orphans.lock().iter().copied().collect();
        // The discard log (gc=none, gc=device): what is dead and not yet issued.
        let base_bytes = (orphans.len() * 4
            + self.seg.heads.len() * cp::LOG_HEAD_BYTES
            + nat_bm.len()
            + sit_bm.len()
            + ssa_bm.len()) as u64;
        let room = (self.sb.geo.cp_pack_blocks - 2) * flashlog_format::sb::CP_PAYLOAD_BYTES as u64;
        let discards = crate::gc_none::checkpoint_discards(self, room.saturating_sub(base_bytes));
        let mut flags = if umount { cp::flags::UMOUNT } else { 0 };
        if !orphans.is_empty() {
            flags |= cp::flags::ORPHANS;
        }
        let ck = Checkpoint {
            version,
            flags,
            elapsed_secs: elapsed,
            wall_unix: self.now().sec.max(0) as u64,
            valid_blocks: self.alloc_blocks.used(),
            valid_nodes: self.valid_nodes.load(Ordering::Acquire),
            valid_inodes: self.valid_inodes.load(Ordering::Acquire),
            free_segments: self.seg.free_after_checkpoint() * self.sb.geo.segs_per_sec as u64,
            next_nid_hint: 0,
            last_upcall,
            heads: self.seg.head_records(),
            orphans,
            nat_bitmap: nat_bm.clone(),
            sit_bitmap: sit_bm.clone(),
            ssa_bitmap: ssa_bm.clone(),
            discard_log: discards.log.clone(),
            live_blocks: self.seg.live_blocks().unwrap_or(0),
        };
        let pack = ck.encode();
        if pack.len() as u64 > self.sb.geo.cp_pack_blocks {
            return Err(Error::Corrupt("checkpoint pack outgrew its area".into()));
        }
        // 4. The next interval starts here. Every node written from now on carries the new
        //    checkpoint's tag and a sequence that starts over; what this pack frees is
        //    taken now (what is freed later is still referenced by it).
        self.cp_version.store(version, Ordering::Release);
        self.node_version.store(
            flashlog_format::node::first_node_version(version),
            Ordering::Release,
        );
        let nids = self.nat.take_prefree();
        let prefree = self.seg.take_prefree();
        for c in &cells {
            c.is_new.store(false, Ordering::Release);
        }
        drop(cells);
        self.dirty_nodes.store(0, Ordering::Relaxed);
        self.last_cp_ns
            .store(self.last_op_ns.load(Ordering::Relaxed), Ordering::Relaxed);
        self.cells.end_interval();
        self.cells.evict(self.opts.inode_cache_max / 2, version);
        lap(&self.stats.cp_meta_ns);
        Ok(CpTail {
            version,
            umount,
            io_mark,
            nat_bm,
            sit_bm,
            ssa_bm,
            pack,
            discards,
            nids,
            prefree,
            last_upcall,
            small_discards,
        })
    }

    /// The tail: the log and metadata writes the snapshot submitted reach the device, then
    /// the pack; once it is durable, what it freed is freed. Needs no op lock; the
    /// next checkpoint, and every durability promise made after the snapshot, waits for
    /// it (`wait_durable`). An error poisons the mount.
    fn checkpoint_tail(&self, t: CpTail) -> Result<()> {
        let t0 = std::time::Instant::now();
        let version = t.version;
        let r = self.tail_inner(t);
        self.stats
            .cp_tail_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match &r {
            Err(e) => self.poison_with(format!("checkpoint failed: {e}")),
            Ok(()) => {
                let _g = self.tail_lock.lock();
                self.cp_durable.store(version, Ordering::Release);
                self.tail_done.notify_all();
            }
        }
        r
    }

    fn tail_inner(&self, t: CpTail) -> Result<()> {
        let mut phase = std::time::Instant::now();
        let mut lap = |c: &AtomicU64| {
            let now = std::time::Instant::now();
            c.fetch_add((now - phase).as_nanos() as u64, Ordering::Relaxed);
            phase = now;
        };
        self.seg.wait_io_upto(t.io_mark)?;
        lap(&self.stats.cp_writeback_ns);
        self.test_point("checkpoint:tail");
        // The pack: its header and payload go with the metadata before one flush (a pack
        // without its footer is not valid, and this slot is not the newest pack's), then
        // the footer, then a flush.
        let start = self.sb.geo.cp_pack_addr((t.version % 2) as u8);
        let (footer, body) = t.pack.split_last().expect("pack has a footer");
        let mut buf = Vec::with_capacity(body.len() * BLOCK_SIZE);
        for b in body {
            buf.extend_from_slice(&b[..]);
        }
        self.dev.write(start, &buf)?;
        self.dev.flush()?;
        self.dev.write(start + body.len() as u64, &footer[..])?;
        self.dev.flush()?;
        self.seg
            .blocks_written
            .fetch_add(t.pack.len() as u64, Ordering::Relaxed);
        // Durable: commit the in-memory view.
        {
            let mut cp = self.cp.lock();
            cp.nat_bm = t.nat_bm;
            cp.sit_bm = t.sit_bm;
            cp.ssa_bm = t.ssa_bm;
        }
        lap(&self.stats.cp_meta_ns);
        crate::gc_none::after_durable(self, t.discards)?;
        self.nat.release(t.nids);
        self.test_point("checkpoint:durable");
        let secs = self
            .collector
            .after_checkpoint(self, t.last_upcall, t.prefree, t.umount)?;
        self.test_point("checkpoint:acked");
        // Runs that died in sections still in use: durable now, and no operation runs
        // before this tail ends (`gc=f2fs`/`gc=scale` run it with the op lock held), so no
        // threaded-logging write to them can precede their discard.
        self.seg.issue_small_discards(t.small_discards, &secs);
        self.seg.release_sections(secs);
        self.test_point("checkpoint:released");
        lap(&self.stats.cp_after_pack_ns);
        self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// What a checkpoint's snapshot fixed for its tail (`FsInner::checkpoint_tail`).
pub struct CpTail {
    version: u64,
    umount: bool,
    /// The log and metadata writes submitted before the snapshot ended
    /// (`SegManager::io_mark`).
    io_mark: u64,
    nat_bm: Vec<u8>,
    sit_bm: Vec<u8>,
    ssa_bm: Vec<u8>,
    pack: Vec<Box<Block>>,
    discards: crate::gc_none::CheckpointDiscards,
    nids: Vec<flashlog_format::Nid>,
    prefree: Vec<u64>,
    last_upcall: u64,
    /// Runs of blocks that died this interval in segments still in use
    /// (`SegManager::flush_meta`), discarded once the pack is durable.
    small_discards: Vec<(u64, u64)>,
}
