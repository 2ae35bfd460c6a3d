//! Mount options and the limits of the core, in one place, each with why.

use std::time::Duration;

/// Dirty page cache cap: above it, writers write back before adding more. 64 MiB keeps
/// writeback batches large (whole segments) while bounding memory.
pub const DEFAULT_DIRTY_CAP_BYTES: u64 = 64 << 20;
/// Dirty nodes before a checkpoint is forced (F2FS balances dirty node pages the same way):
/// bounds both memory and the roll-forward work after a crash.
pub const DEFAULT_DIRTY_NODES_MAX: u64 = 16_384;
/// Cached inode cells before clean, closed ones are evicted.
pub const DEFAULT_INODE_CACHE_MAX: usize = 16_384;
/// Clean node buffers one file may keep cached (its dirty ones are never dropped).
pub const NODE_CACHE_PER_FILE: usize = 4096;
/// Clean dentry pages one directory may keep cached (16 MiB; its dirty ones are never
/// dropped): past it, a load or a write-back of the directory drops the clean ones. A
/// directory of 300,000 short names spans about 3,100 dentry blocks, so directories up to
/// about that size stay wholly cached while their cell lives.
pub const DENTRY_CACHE_PER_DIR: usize = 4096;
/// Blocks a log head gathers before one device write: 64 blocks = 256 KiB, a request as
/// large as the block layer commonly issues to an NVMe SSD (`max_sectors_kb`). Larger is
/// not better: a request must fit the device's write buffer, and on the emulated
/// 970pro-like SSD (1 MiB buffer) 1 MiB requests serialise on it (1121 MiB/s at any
/// depth) while 256 KiB requests overlap (2227 MiB/s at 2 in flight).
pub const WRITE_BATCH_BLOCKS: usize = 64;

/// Shortest run of blocks that died in a segment still in use which a checkpoint discards
/// (`gc=f2fs`, `gc=scale`): 16 blocks = 64 KiB, F2FS's default `discard_granularity`
/// (Linux commit 969d1b180d98, "f2fs: introduce discard_granularity sysfs entry", 2017:
/// shorter runs are left to be discarded with their section).
pub const SMALL_DISCARD_MIN_BLOCKS: u64 = 16;
/// Shards of the inode-cell table (Max's file cells): a power of two well above the core
/// count so that unrelated files rarely share a shard lock.
pub const CELL_SHARDS: usize = 128;
/// Checkpoint timer (F2FS DEF_CP_INTERVAL is 60 s; shorter bounds roll-forward work).
pub const DEFAULT_CP_INTERVAL: Duration = Duration::from_secs(30);
/// Background cleaner period (F2FS sleeps 30 s between background passes).
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(30);
/// Most dedicated collectors `gc=scale` runs; the default (one per core) is capped here, so
/// a machine with more cores still mounts.
pub const MAX_GC_WORKERS: usize = 64;
/// Idle time before background cleaning (F2FS DEF_IDLE_INTERVAL is 5 s).
pub const DEFAULT_GC_IDLE: Duration = Duration::from_secs(5);
/// Asynchronous log-write threads, i.e. the log's queue depth to the device (each thread has
/// one write in flight): eight. With two, `f2fs` wrote 94-98 MiB/s while cleaning on the
/// default emulated SSD instead of 213-230 (its writers waited for the queue, not for the
/// dies; `device` and `none` write as fast with two as with eight: docs/BENCHMARKS.md
/// "Queue depth"). The ENOSPC that once kept this at two was the bench's YCSB logs really
/// filling a 96 MiB volume (faster writers grew them further), not a race in the core.
pub const DEFAULT_IO_THREADS: usize = 8;
/// Background write-back threads (`flushers=N`, `flush.rs` lanes): one. More are for many
/// cores (one per mlog with `mlog=ino` keeps each lane on its own log heads).
pub const DEFAULT_FLUSHERS: usize = 1;
/// The most flusher lanes a mount may ask for.
pub const MAX_FLUSHERS: usize = 64;
/// The most log-write threads a mount may ask for (`io_threads=N`, bench `/io_threads=N`).
pub const MAX_IO_THREADS: usize = 64;
/// Roll-forward walks at most this many chain blocks per main-area block count (never more
/// than the main area), so a corrupt chain cannot loop.
pub const ROLL_FORWARD_MAX_FACTOR: u64 = 1;
/// Hard-link limit per inode.
pub const LINK_MAX: u32 = 65_000;

/// Most mlogs mkfs picks by itself (`auto_mlogs`): one per core up to this. Max's code caps
/// its mlogs at 63 (`MAX_EXTEND_LOGS`); the checkpoint's head table holds 32.
pub const AUTO_MLOGS_MAX: u32 = 32;
/// `auto_mlogs` adds an mlog only while the overprovision of all of them (each mlog's log
/// heads and recovery reserve, docs/FORMAT.md) costs at most this share of the user space
/// one mlog would leave.
pub const AUTO_MLOGS_MAX_COST: f64 = 0.10;

/// The mlog count mkfs uses by default (Max: one per core): `cores`, capped at
/// `AUTO_MLOGS_MAX`, then lowered until the volume can afford them (the geometry lays out
/// and the extra overprovision costs at most `AUTO_MLOGS_MAX_COST` of the user space).
/// 1 when even two do not fit (volumes under 128 MiB with 2 MiB sections).
pub fn auto_mlogs(block_count: u64, segs_per_sec: u32, cores: usize) -> u32 {
    use flashlog_format::sb::Geometry;
    let Ok(one) = Geometry::compute(block_count, segs_per_sec, 1) else {
        return 1;
    };
    let mut m = (cores as u32).clamp(1, AUTO_MLOGS_MAX);
    while m > 1 {
        if let Ok(g) = Geometry::compute(block_count, segs_per_sec, m) {
            if g.user_blocks as f64 >= one.user_blocks as f64 * (1.0 - AUTO_MLOGS_MAX_COST) {
                return m;
            }
        }
        m -= 1;
    }
    1
}

/// How work maps to an mlog (Max §4.3), mount option `mlog=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MlogMap {
    /// `ino mod mlogs`: a file writes through one mlog always (two busy files may share
    /// one while another mlog idles).
    Ino,
    /// Per thread slot (Max: per core): data goes to the writing thread's mlog; an inode's
    /// nodes go to the mlog of the first thread that writes one in a checkpoint interval,
    /// and stay there until the next checkpoint (roll-forward needs one chain per inode).
    Thread,
}

impl MlogMap {
    pub fn name(self) -> &'static str {
        match self {
            MlogMap::Ino => "ino",
            MlogMap::Thread => "thread",
        }
    }
}

impl std::str::FromStr for MlogMap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ino" => Ok(MlogMap::Ino),
            "thread" | "cpu" => Ok(MlogMap::Thread),
            _ => Err(format!(
                "unknown mlog mapping {s:?} (expected mlog=ino or mlog=thread)"
            )),
        }
    }
}

/// Cleaning mode (F2FS `mode=`): `lfs` never writes into holes; `adaptive` uses threaded
/// logging (SSR) when free space runs short.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AllocMode {
    Adaptive,
    Lfs,
}

/// Garbage-collection policy chosen per mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GcPolicy {
    /// F2FS: one collector, foreground greedy, background cost-benefit.
    F2fs,
    /// ScaleLFS dedicated collectors.
    Scale,
    /// D2FS device-driven GC.
    Device,
    /// IPLFS: infinite partition, no host GC.
    None,
}

impl GcPolicy {
    /// Policies that run on an ordinary (finite) device, for tools that compare them all.
    pub fn implemented() -> &'static [GcPolicy] {
        &[GcPolicy::F2fs, GcPolicy::Scale]
    }
    pub fn name(self) -> &'static str {
        match self {
            GcPolicy::F2fs => "f2fs",
            GcPolicy::Scale => "scale",
            GcPolicy::Device => "device",
            GcPolicy::None => "none",
        }
    }
}

/// ScaleLFS techniques, each switchable for the ablation of the paper's Table 3. All on by
/// default; all off is "simple per-core GC": parallel workers that share victim selection
/// under one lock, the SIT under one lock, the cold data log, the page cache, and lock each
/// file for the whole of its blocks' migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScaleFeatures {
    /// Scalable victim protector: page-level protection instead of a per-file GC lock.
    pub svp: bool,
    /// Dedicated write stream per collector.
    pub dws: bool,
    /// Loose-synchronisation (lock-free) SIT updates.
    pub lsu: bool,
    /// Concurrent victim selection with an atomic victim bitmap.
    pub cvs: bool,
    /// Dedicated page buffer: migration does not go through the page cache.
    pub dpb: bool,
    /// Per-dnode commit lock (§4.3, the node-lock rule): a run's check and remap take its
    /// direct node's own lock, not the file's cell (`scale::commit_dnode_run`). Off: they
    /// take the cell, as this code base did before (with SVP on). Not one of Table 3's rows;
    /// a switch for measuring it (bench `scale/dnode_lock=0`).
    #[serde(default = "yes")]
    pub pdl: bool,
}

fn yes() -> bool {
    true
}

impl ScaleFeatures {
    pub const ALL: ScaleFeatures = ScaleFeatures {
        svp: true,
        dws: true,
        lsu: true,
        cvs: true,
        dpb: true,
        pdl: true,
    };
    pub const NONE: ScaleFeatures = ScaleFeatures {
        svp: false,
        dws: false,
        lsu: false,
        cvs: false,
        dpb: false,
        pdl: false,
    };
}

impl std::str::FromStr for GcPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f2fs" => Ok(GcPolicy::F2fs),
            "scale" => Ok(GcPolicy::Scale),
            "device" => Ok(GcPolicy::Device),
            "none" => Ok(GcPolicy::None),
            _ => Err(format!(
                "unknown GC policy {s:?} (expected f2fs, scale, device or none)"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct MountOptions {
    pub read_only: bool,
    pub dirty_cap_bytes: u64,
    pub dirty_nodes_max: u64,
    pub inode_cache_max: usize,
    /// Periodic checkpoint; None (or a zero period) disables the timer thread (tests drive
    /// checkpoints).
    pub cp_interval: Option<Duration>,
    pub alloc_mode: AllocMode,
    pub gc: GcPolicy,
    /// Store small files and directories inside the inode.
    pub inline: bool,
    /// POSIX ACLs (`acl`/`noacl`): the `system.posix_acl_*` attributes keep the mode bits in
    /// step and default ACLs are inherited (`crate::acl`); off, setting or reading them is
    /// "not supported", as on a Linux file system mounted with noacl.
    pub acl: bool,
    /// Background cleaning period; None (or a zero period) disables the background cleaner.
    pub gc_interval: Option<Duration>,
    /// The volume counts as idle (background cleaning may run) after this long without a
    /// modifying operation.
    pub gc_idle: Duration,
    /// Dedicated garbage collectors for `gc=scale` (default: one per core).
    pub gc_workers: usize,
    /// Victims each collector may hold (ScaleLFS M); None: 0.1 % of the sections, at least 1.
    pub gc_victims_per_worker: Option<usize>,
    /// ScaleLFS techniques in use (ablation).
    pub scale: ScaleFeatures,
    /// Threads writing full log buffers asynchronously (the log's queue depth to the
    /// device); 0 writes synchronously in the caller (deterministic device order, for the
    /// crash simulator).
    pub io_threads: usize,
    /// Background write-back threads (lanes of `flush.rs`; 1..=`MAX_FLUSHERS`).
    pub flushers: usize,
    /// A writer over the hard dirty cap writes back the file it just wrote, then waits for
    /// the flusher only if the cap is still crossed (`Fs::balance`); off: it waits for the
    /// flusher's rounds. An experiment for many cores (per-core write-back, as Max makes
    /// every other path per core), not the default: docs/BENCHMARKS.md "Writers writing
    /// back their own files".
    pub own_writeback: bool,
    /// `gc=none`: a checkpoint that makes room (`gc_none`) lets operations run again once
    /// its pack's contents are fixed, while its I/O tail (the log writes before it, the NAT
    /// blocks, the pack and its flushes) reaches the device; fsync and sync after that
    /// point wait for the tail (docs/DESIGN.md "The checkpoint's tail beside operations").
    /// Off: every checkpoint excludes operations until its pack is durable.
    pub cp_tail: bool,
    /// How work maps to an mlog on volumes with several (`MlogMap`).
    pub mlog_map: MlogMap,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            dirty_cap_bytes: DEFAULT_DIRTY_CAP_BYTES,
            dirty_nodes_max: DEFAULT_DIRTY_NODES_MAX,
            inode_cache_max: DEFAULT_INODE_CACHE_MAX,
            cp_interval: Some(DEFAULT_CP_INTERVAL),
            alloc_mode: AllocMode::Adaptive,
            gc: GcPolicy::F2fs,
            inline: true,
            acl: true,
            gc_interval: Some(DEFAULT_GC_INTERVAL),
            gc_idle: DEFAULT_GC_IDLE,
            gc_workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .min(MAX_GC_WORKERS),
            gc_victims_per_worker: None,
            scale: ScaleFeatures::ALL,
            io_threads: DEFAULT_IO_THREADS,
            flushers: DEFAULT_FLUSHERS,
            own_writeback: false,
            cp_tail: true,
            mlog_map: MlogMap::Ino,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashlog_format::sb::Geometry;

    /// mkfs's default mlog count: one per core, capped, and only what the volume affords.
    #[test]
    fn auto_mlogs_is_one_per_core_where_the_volume_affords_it() {
        const MIB: u64 = 256; // blocks per MiB
        let pick = |mib: u64, sps: u32, cores: usize| auto_mlogs(mib * MIB, sps, cores);
        // 64 MiB has no room for a second mlog; one core means one mlog anywhere.
        assert_eq!(pick(64, 1, 16), 1);
        assert_eq!(pick(16 << 10, 1, 1), 1);
        // Big volumes get one per core, up to the cap.
        assert_eq!(pick(64 << 10, 1, 16), 16);
        assert_eq!(pick(64 << 10, 1, 64), AUTO_MLOGS_MAX);
        for (mib, sps) in [(128, 1), (256, 1), (1 << 10, 1), (1 << 10, 4), (4 << 10, 1)] {
            let m = pick(mib, sps, 16);
            let one = Geometry::compute(mib * MIB, sps, 1).unwrap();
            let g = Geometry::compute(mib * MIB, sps, m).unwrap();
            assert!(
                g.user_blocks as f64 >= one.user_blocks as f64 * (1.0 - AUTO_MLOGS_MAX_COST),
                "{mib} MiB: {m} mlogs cost too much"
            );
            if m < 16 {
                // One more would not fit or would cost too much.
                let more = Geometry::compute(mib * MIB, sps, m + 1);
                assert!(more.map_or(true, |g| (g.user_blocks as f64)
                    < one.user_blocks as f64 * (1.0 - AUTO_MLOGS_MAX_COST)));
            }
            eprintln!("{mib} MiB, {sps} segs/sec, 16 cores: {m} mlogs");
        }
    }
}
