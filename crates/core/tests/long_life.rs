//! A long life (review, 2026-11-28): does anything leak over many create/write/delete
//! cycles? Each cycle fills a volume to ~80 % with a mix of small (inline), medium and
//! large files in nested directories, with xattrs (small ones, and big ones set and
//! removed), hard links, renames (some over an existing name), symlinks, fsyncs and files
//! unlinked while open; unlinks a scattered 40 % and fills to 80 % again (so the cleaner,
//! threaded logging or the device's GC runs); then deletes everything and syncs. After
//! each cycle the volume must be back where the first cycle left it (and the first where
//! the fresh volume was): statfs free blocks and free inodes, nids in use, live blocks,
//! free sections (none prefree, held or dirty), no orphan, no queued discard, no dirty page
//! or node, the space budget exact; the inode cache back to its size; the device (emulated
//! SSD) mapping no more in its main area, the interval FTL no more map nodes, the coupled
//! FTL no more migration records. Every few cycles the volume is unmounted, checked with
//! fsck (clean, one inode, an empty discard log) and mounted again, and the rebuilt state
//! must equal the one before.
//!
//! Policies: f2fs (RAM device), f2fs mode=lfs, scale, f2fs on the emulated SSD's page FTL,
//! device on the coupled FTL, none on the interval FTL.
//!
//! Run: `cargo test --release -p flashlog-core --test long_life` (quick: 3-5 cycles per
//! policy, ~7 s); the long versions (ignored) print one line of gauges per cycle:
//! `CYCLES=200 cargo test --release -p flashlog-core --test long_life -- --ignored
//! --nocapture --test-threads=1 soak_` (100 cycles of each: about 15 minutes on 2 cores).
//!
//! Slack, and why:
//! - none for statfs, nids, live blocks, sections, orphans, queued discards and dirty
//!   counts: after everything is deleted and the volume settled (`settle`), each has one
//!   exact value (the root holds a cycle's two top directories at most, so it stays inline
//!   and its size does not depend on the cycle);
//! - gc=none's capacity pool: its whole segments move with the heads' offsets in theirs,
//!   up to two per head (`Loose::pool_segs`);
//! - the device's main area: the coupled and interval FTLs map only the root's block
//!   (+64 slack); the page FTL under f2fs keeps mapped the dead blocks that no discard
//!   reached yet: runs shorter than `SMALL_DISCARD_MIN_BLOCKS` in sections still in use,
//!   mostly the log heads' current segments, until those sections are freed (bounded by the
//!   heads' segments; 327-433 blocks a cycle in `CYCLES=4 soak_f2fs_page`, 1382-1603 before
//!   the checkpoint discarded the runs that die in sections still in use);
//! - the device's metadata area (NAT, SIT, SSA copies, packs) is not checked: it fills as
//!   the nid cursors sweep the NAT and stays mapped, bounded by its size;
//! - the heap (mallinfo2, process-wide, the RAM device's chunks included) is printed by the
//!   soak tests, not asserted.
//!
//! Found: nothing leaks. 250 cycles of f2fs, f2fs mode=lfs, scale and f2fs on the page
//! FTL, 100 of device and none (soak_*, 2026-11-28): every exact gauge equal in every
//! cycle and across every remount; the heap less the RAM device's chunks flat (f2fs
//! 9-11 MiB, scale 10-12 MiB, by 50-cycle window, no trend); threads and fds constant;
//! the interval FTL's map nodes (3) and entries constant; the coupled FTL no records left.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_ssd::SsdDevice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod common;

const BS: u64 = BLOCK_SIZE as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    F2fs,
    F2fsLfs,
    Scale,
    /// f2fs on the emulated SSD with the page-mapping FTL (discards of freed sections).
    F2fsPage,
    /// gc=device on the emulated coupled-GC SSD.
    Device,
    /// gc=none on the emulated interval-mapping SSD.
    None,
}

struct Vol {
    kind: Kind,
    dev: Arc<dyn BlockDevice>,
    ssd: Option<Arc<SsdDevice>>,
    ram: Option<Arc<RamDevice>>,
    opts: MountOptions,
}

impl Vol {
    fn new(kind: Kind, mib: u64) -> Vol {
        // The emulated coupled SSD's zones fit a section from 256 MiB on.
        let mib = if kind == Kind::Device {
            mib.max(256)
        } else {
            mib
        };
        let base = MountOptions {
            cp_interval: None,
            gc_interval: None,
            ..MountOptions::default()
        };
        let ram = std::sync::Mutex::new(None);
        let new_ram = || {
            let r = Arc::new(RamDevice::new((mib << 20) / BS));
            *ram.lock().unwrap() = Some(r.clone());
            r
        };
        let (dev, ssd, opts): (Arc<dyn BlockDevice>, _, _) = match kind {
            Kind::F2fs => (new_ram(), None, base),
            Kind::F2fsLfs => (
                new_ram(),
                None,
                MountOptions {
                    alloc_mode: AllocMode::Lfs,
                    ..base
                },
            ),
            Kind::Scale => (
                new_ram(),
                None,
                MountOptions {
                    gc: GcPolicy::Scale,
                    gc_workers: 2,
                    ..base
                },
            ),
            Kind::F2fsPage => {
                let s = common::emulated_ssd("page", mib << 20);
                (s.clone(), Some(s), base)
            }
            Kind::Device => {
                let s = common::emulated_ssd("coupled", mib << 20);
                (
                    s.clone(),
                    Some(s),
                    MountOptions {
                        gc: GcPolicy::Device,
                        ..base
                    },
                )
            }
            Kind::None => {
                let s = common::emulated_ssd("interval", mib << 20);
                (
                    s.clone(),
                    Some(s),
                    MountOptions {
                        gc: GcPolicy::None,
                        // gc=none's discard dispatcher runs only with a gc interval.
                        gc_interval: Some(std::time::Duration::from_millis(200)),
                        ..base
                    },
                )
            }
        };
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let ram = ram.lock().unwrap().take();
        Vol {
            kind,
            dev,
            ssd,
            ram,
            opts,
        }
    }
    fn mount(&self) -> Fs {
        Fs::mount(self.dev.clone(), self.opts.clone()).unwrap()
    }
    fn fsck(&self, when: &str) -> fsck::FsckReport {
        let r = fsck::fsck(&*self.dev).unwrap();
        assert!(
            r.is_clean(),
            "{:?} {when}: fsck: {:?}",
            self.kind,
            r.findings
        );
        r
    }
}

/// Open fds and threads of this process.
fn fds_threads() -> (u64, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let thr = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    (fds, thr)
}

/// What must come back after everything is deleted and synced.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Exact {
    blocks_free: u64,
    files_free: u64,
    nids_used: u64,
    valid_nodes: u64,
    valid_inodes: u64,
    alloc_used: u64,
    live: u64,
    free_secs: u64,
    prefree_secs: u64,
    held_secs: u64,
    dirty_secs: u64,
    orphans: usize,
    discards_queued: u64,
    dead_pending: u64,
    dirty_pages: u64,
    dirty_nodes: u64,
    overcommit: u64,
    budget_drift: i64,
}

/// What may vary a little, or is reported.
#[derive(Clone, Debug)]
#[allow(dead_code)] // printed
struct Loose {
    cells: usize,
    gone_cells: usize,
    heap: u64,
    /// Of `heap`, the RAM device's chunks.
    ram_bytes: u64,
    fds: u64,
    threads: u64,
    /// Device: blocks valid on flash (or mapped, interval FTL), and the FTL's mapping
    /// structures in bytes.
    dev_valid: u64,
    /// Of those, in the main area (outside the metadata: the coupled FTL's conventional
    /// region; the interval FTL's region 0).
    dev_main_valid: u64,
    /// gc=none: whole free segments of the capacity pool (0 elsewhere).
    pool_segs: u64,
    /// Blocks the log heads' segments span (each head's segment and a node head's next
    /// one): dead blocks there are discarded only once their section is freed.
    head_blocks: u64,
    ftl_map_bytes: u64,
    ftl_record_bytes: u64,
    interval_map_nodes: u64,
    interval_alloc_entries: u64,
    checkpoints: u64,
}

fn exact(fs: &Fs) -> Exact {
    let i = fs.inner();
    let seg = &i.seg;
    let st = fs.statfs();
    let infinite = seg.is_infinite();
    Exact {
        blocks_free: st.blocks_free,
        files_free: st.files_free,
        nids_used: i.nat.used_count(),
        valid_nodes: i.valid_nodes.load(Ordering::Relaxed),
        valid_inodes: i.valid_inodes.load(Ordering::Relaxed),
        alloc_used: i.alloc_blocks.used(),
        live: seg.total_valid(),
        // gc=none: the capacity pool (`Loose::pool_segs`), whose whole segments move with
        // the heads' offsets in theirs.
        free_secs: if infinite { 0 } else { seg.free_sections() },
        prefree_secs: seg.prefree_sections(),
        held_secs: seg.held_sections(),
        dirty_secs: if infinite {
            0
        } else {
            seg.dirty_sections().count() as u64
        },
        orphans: i.orphans.lock().len(),
        discards_queued: seg.discards.lock().len() as u64,
        dead_pending: seg.dead_pending(),
        dirty_pages: i.dirty_pages.load(Ordering::Relaxed),
        dirty_nodes: i.dirty_nodes.load(Ordering::Relaxed),
        overcommit: seg.space.overcommit_blocks.load(Ordering::Relaxed),
        budget_drift: if infinite {
            0
        } else {
            seg.space.headroom() - seg.headroom_at_rest()
        },
    }
}

fn loose(vol: &Vol, fs: &Fs) -> Loose {
    let (fds, threads) = fds_threads();
    let mut l = Loose {
        cells: fs.inner().cells.len(),
        gone_cells: fs.inner().cells.gone_len(),
        heap: common::heap_in_use(),
        ram_bytes: vol.ram.as_ref().map_or(0, |r| r.resident_bytes()),
        fds,
        threads,
        dev_valid: 0,
        dev_main_valid: 0,
        pool_segs: if fs.inner().seg.is_infinite() {
            fs.inner().seg.free_sections()
        } else {
            0
        },
        head_blocks: fs.inner().seg.heads.len() as u64 * 2 * flashlog_format::BLOCKS_PER_SEG,
        ftl_map_bytes: 0,
        ftl_record_bytes: 0,
        interval_map_nodes: 0,
        interval_alloc_entries: 0,
        checkpoints: fs.stats().checkpoints,
    };
    if let Some(ssd) = &vol.ssd {
        l.dev_valid = ssd.valid_blocks();
        let m = ssd.ftl_memory();
        l.ftl_map_bytes = m.mapping_bytes;
        l.ftl_record_bytes = m.record_bytes;
        if let Some(iv) = ssd.ftl_stats().interval {
            l.interval_map_nodes = iv.map_nodes;
            l.interval_alloc_entries = iv.allocated_entries;
            l.dev_valid = iv.valid_entries;
            l.dev_main_valid = iv.valid_entries - mapped_meta(ssd);
        } else if vol.kind == Kind::F2fsPage {
            let main = flashlog_core::checkpoint::read_superblock(&**ssd)
                .unwrap()
                .geo
                .main_addr;
            let d = ssd.valid_against(main, &[]);
            l.dev_main_valid = d.valid;
            if std::env::var("SHOW_SEGS").is_ok() {
                // Which segments hold them, and which of those the log heads write.
                let mut segs = std::collections::BTreeMap::<u64, u64>::new();
                for a in &d.unreferenced {
                    *segs
                        .entry((a - main) / flashlog_format::BLOCKS_PER_SEG)
                        .or_default() += 1;
                }
                let heads: Vec<u64> = fs.inner().seg.heads.iter().map(|h| h.lock().seg).collect();
                eprintln!("valid on device by segment {segs:?}; head segments {heads:?}");
            }
        } else {
            l.dev_main_valid = ssd
                .region_usage()
                .iter()
                .filter(|u| u.name != "conventional")
                .map(|u| u.valid_blocks)
                .sum();
        }
    }
    l
}

/// Blocks of the interval FTL's region 0 (the metadata, below `ssa_addr` on an infinite
/// volume) that read non-zero: mapped.
fn mapped_meta(ssd: &SsdDevice) -> u64 {
    let sb = flashlog_core::checkpoint::read_superblock(ssd).unwrap();
    let mut b = vec![0u8; BS as usize];
    (0..sb.geo.ssa_addr)
        .filter(|&a| {
            ssd.read(a, &mut b).unwrap();
            b.iter().any(|&x| x != 0)
        })
        .count() as u64
}

/// One cycle's fill: a top directory `/c{cycle}` holding a tree of directories up to 3
/// deep, and files until statfs says `fill_pct` % is used. Returns (files, bytes) written.
fn fill(fs: &Fs, cycle: u64, fill_pct: u64, seed: u64) -> (u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ cycle.wrapping_mul(0x9E37_79B9));
    let st0 = fs.statfs();
    let stop_free = st0.blocks * (100 - fill_pct) / 100;
    let top = fs
        .mkdir(ROOT_INO, format!("c{cycle}").as_bytes(), 0o755, 0, 0)
        .unwrap()
        .ino;
    let mut dirs = vec![top];
    let mut files: Vec<(Ino, Ino, Vec<u8>)> = Vec::new(); // (parent, ino, name)
    let mut open: Vec<Ino> = Vec::new();
    let (mut n, mut bytes) = (0u64, 0u64);
    let mut k = 0u64;
    while fs.statfs().blocks_free > stop_free {
        k += 1;
        let r = rng.random_range(0..100u32);
        // A new directory one time in 15, under a random one of depth < 3.
        if r < 7 && dirs.len() < 200 {
            let p = dirs[rng.random_range(0..dirs.len())];
            let d = fs
                .mkdir(p, format!("d{k}").as_bytes(), 0o755, 0, 0)
                .unwrap()
                .ino;
            dirs.push(d);
            continue;
        }
        let p = dirs[rng.random_range(0..dirs.len())];
        let name = format!("f{k}").into_bytes();
        let room = fs.statfs().blocks_free.saturating_sub(stop_free) * BS;
        let len = match rng.random_range(0..100u32) {
            0..=69 => rng.random_range(0..3000u64),
            70..=96 => rng.random_range(4096..64 << 10),
            _ => rng.random_range(256 << 10..2 << 20),
        }
        .min(room);
        let a = match fs.create(p, &name, 0o644, 0, 0) {
            Ok(a) => a,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create: {e}"),
        };
        let data = vec![(k % 251) as u8 + 1; len as usize];
        // Large files in chunks, as an application writes them.
        let mut off = 0;
        while off < data.len() {
            let end = (off + (1 << 20)).min(data.len());
            match fs.write(a.ino, off as u64, &data[off..end]) {
                Ok(_) => {}
                Err(Error::NoSpace) => break,
                Err(e) => panic!("write: {e}"),
            }
            off = end;
        }
        bytes += len;
        n += 1;
        match rng.random_range(0..100u32) {
            0..=24 => {
                let v = vec![7u8; rng.random_range(1..64)];
                fs.setxattr(a.ino, b"user.small", &v, XattrMode::Any)
                    .unwrap();
            }
            25..=29 => {
                let v = vec![9u8; 1500];
                fs.setxattr(a.ino, b"user.big", &v, XattrMode::Any).unwrap();
                if rng.random_bool(0.5) {
                    fs.removexattr(a.ino, b"user.big").unwrap();
                }
            }
            _ => {}
        }
        if rng.random_range(0..20) == 0 {
            fs.fsync(a.ino, false).unwrap();
        }
        match rng.random_range(0..100u32) {
            // A hard link in another directory.
            0..=9 => {
                let q = dirs[rng.random_range(0..dirs.len())];
                fs.link(a.ino, q, format!("l{k}").as_bytes()).unwrap();
            }
            // Renamed into another directory.
            10..=19 => {
                let q = dirs[rng.random_range(0..dirs.len())];
                let nn = format!("r{k}").into_bytes();
                fs.rename(p, &name, q, &nn, RenameFlags::default()).unwrap();
                files.push((q, a.ino, nn));
                continue;
            }
            // Renamed over an earlier file (which loses that name).
            20..=22 if !files.is_empty() => {
                let i = rng.random_range(0..files.len());
                let (q, _, nn) = files.swap_remove(i);
                fs.rename(p, &name, q, &nn, RenameFlags::default()).unwrap();
                files.push((q, a.ino, nn));
                continue;
            }
            // Unlinked while open: an orphan until its release.
            23..=24 => {
                fs.open(a.ino).unwrap();
                fs.unlink(p, &name).unwrap();
                open.push(a.ino);
                continue;
            }
            // A symlink beside it.
            25..=27 => {
                let t = vec![b'x'; rng.random_range(1..200)];
                fs.symlink(p, format!("s{k}").as_bytes(), &t, 0, 0).unwrap();
            }
            _ => {}
        }
        files.push((p, a.ino, name));
        // Close the orphans now and then (some stay open across a sync).
        if open.len() > 4 {
            for ino in open.drain(..2) {
                fs.release(ino).unwrap();
            }
        }
        if k % 500 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    for ino in open {
        fs.release(ino).unwrap();
    }
    (n, bytes)
}

/// Unlink about 40 % of the files under `dir` (chosen by a hash of their names).
fn thin(fs: &Fs, dir: Ino, salt: u64) {
    let mut off = 2;
    loop {
        let ents = fs.readdir(dir, off, 256).unwrap();
        let Some(last) = ents.last() else { return };
        off = last.next_offset;
        for e in ents {
            if e.ftype == flashlog_format::dir::ftype::DIR {
                thin(fs, e.ino, salt);
            } else {
                let h = e.name.iter().fold(salt ^ 0xcbf2_9ce4_8422_2325, |h, &b| {
                    (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
                });
                if h % 10 < 4 {
                    fs.unlink(dir, &e.name).unwrap();
                }
            }
        }
    }
}

/// Delete everything under the root, depth first.
fn delete_all(fs: &Fs, dir: Ino) {
    loop {
        let ents = fs.readdir(dir, 2, 256).unwrap();
        if ents.is_empty() {
            return;
        }
        for e in ents {
            if e.ftype == flashlog_format::dir::ftype::DIR {
                delete_all(fs, e.ino);
                fs.rmdir(dir, &e.name).unwrap();
            } else {
                fs.unlink(dir, &e.name).unwrap();
            }
        }
    }
}

/// Syncs until nothing waits for a later checkpoint: `gc=device` releases the sections a
/// checkpoint emptied at the next one (after their dead blocks' discards), and `gc=none`
/// issues a checkpoint's discard log after it (its dispatcher, every `gc_interval`). Returns
/// the syncs it took beyond the first; panics when nothing drains (about 10 s).
fn settle(fs: &Fs) -> u32 {
    let seg = &fs.inner().seg;
    let mut syncs = 0;
    let mut waits = 0;
    for _ in 0..200 {
        let queued = seg.discards.lock().len();
        if seg.held_sections() > 0 || seg.dead_pending() > 0 || (queued > 0 && waits >= 10) {
            // `gc=device` without a gc interval has no discard thread: the next
            // checkpoint issues what the last one queued.
            fs.sync().unwrap();
            syncs += 1;
            waits = 0;
        } else if queued == 0 {
            return syncs;
        } else {
            // The gc=none dispatcher issues 16 commands every 50 ms.
            std::thread::sleep(std::time::Duration::from_millis(50));
            waits += 1;
        }
    }
    panic!(
        "not settled after {syncs} syncs: {} sections held, {} discards queued, {} dead blocks",
        seg.held_sections(),
        seg.discards.lock().len(),
        seg.dead_pending()
    );
}

/// `cycles` cycles of fill and delete on a fresh `mib` MiB volume of `kind`, unmounting,
/// checking and remounting every `remount_every` cycles. Asserts after each cycle that
/// the exact gauges equal the first cycle's (and the fresh volume's), and returns the
/// loose ones per cycle.
fn cycles(kind: Kind, mib: u64, cycles: u64, remount_every: u64, verbose: bool) -> Vec<Loose> {
    let vol = Vol::new(kind, mib);
    let mut fs = vol.mount();
    fs.sync().unwrap();
    let fresh = exact(&fs);
    let mut first: Option<Exact> = None;
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    for c in 0..cycles {
        let (n, bytes) = fill(&fs, c, 80, 0x1eaf + kind as u64);
        // Free a scattered 40 % and fill again: the second fill needs the cleaner (f2fs,
        // scale), threaded logging (adaptive) or the device's GC (device).
        thin(&fs, ROOT_INO, c);
        fs.sync().unwrap();
        let (n2, bytes2) = fill(&fs, c + 1_000_000, 80, 0x2eaf + kind as u64);
        let (n, bytes) = (n + n2, bytes + bytes2);
        let full = fs.statfs();
        delete_all(&fs, ROOT_INO);
        fs.sync().unwrap();
        let syncs = settle(&fs);
        let e = exact(&fs);
        let l = loose(&vol, &fs);
        if verbose {
            eprintln!(
                "{kind:?} cycle {c:3} ({:5.1}s): {n} files {:.1} MiB, full bfree {} ffree {}; \
                 {syncs} syncs to settle; gc runs {} moved {}; empty {e:?} {l:?}",
                t0.elapsed().as_secs_f64(),
                bytes as f64 / (1 << 20) as f64,
                full.blocks_free,
                full.files_free,
                fs.stats().gc_fg_runs + fs.stats().gc_bg_runs,
                fs.stats().gc_moved_blocks
            );
        }
        match &first {
            None => {
                assert_eq!(
                    (e.blocks_free, e.files_free, e.nids_used, e.alloc_used),
                    (
                        fresh.blocks_free,
                        fresh.files_free,
                        fresh.nids_used,
                        fresh.alloc_used
                    ),
                    "{kind:?}: the first cycle did not give back what it took\nfresh {fresh:?}\nnow   {e:?}"
                );
                first = Some(e.clone());
            }
            Some(f) => assert_eq!(&e, f, "{kind:?}: cycle {c} differs from the first"),
        }
        out.push(l);
        if (c + 1) % remount_every == 0 {
            fs.unmount().unwrap();
            let r = vol.fsck(&format!("after cycle {c}"));
            // A clean unmount issues every queued discard and writes a pack whose discard
            // log is empty (gc_none.rs step 6).
            assert_eq!(
                (r.discard_log_blocks, r.inodes),
                (0, 1),
                "{kind:?}: after cycle {c} the unmounted volume logs discards or keeps inodes"
            );
            fs = vol.mount();
            fs.sync().unwrap();
            let e2 = exact(&fs);
            // A mount rebuilds the state: it must agree with what the unmount left,
            // except what lives only in memory (the cells).
            assert_eq!(
                &e2,
                first.as_ref().unwrap(),
                "{kind:?}: the state after remount {c} differs"
            );
        }
    }
    fs.unmount().unwrap();
    vol.fsck("at the end");
    if let Some(ssd) = &vol.ssd {
        ssd.check_invariants().unwrap();
    }
    out
}

/// The loose gauges stay bounded: the inode cache and the device's mapping do not grow
/// from the second cycle to the last by more than the slack given.
fn assert_bounded(kind: Kind, l: &[Loose]) {
    let (a, z) = (&l[1], l.last().unwrap());
    assert!(
        z.cells <= a.cells + 2,
        "{kind:?}: cached inode cells grew from {} to {}",
        a.cells,
        z.cells
    );
    // f2fs discards a section's blocks when it frees it, and after each checkpoint the
    // runs of 16 blocks or more that died in a section still in use (F2FS's small
    // discards): what stays mapped are shorter runs, mostly in the heads' current segments.
    let bound = if kind == Kind::F2fsPage {
        z.head_blocks
    } else {
        a.dev_main_valid + 64
    };
    assert!(
        z.dev_main_valid <= bound,
        "{kind:?}: the device holds {} valid blocks in the main area after the last cycle, \
         {} after the second",
        z.dev_main_valid,
        a.dev_main_valid
    );
    // The pool gets back every block discarded; what the heads hold in their segments
    // moves its whole segments by up to two per head.
    let heads = z.head_blocks / (2 * flashlog_format::BLOCKS_PER_SEG);
    assert!(
        z.pool_segs + 2 * heads >= a.pool_segs,
        "{kind:?}: gc=none's capacity pool shrank from {} to {} segments",
        a.pool_segs,
        z.pool_segs
    );
    assert!(
        z.interval_map_nodes <= a.interval_map_nodes + 4,
        "{kind:?}: the interval FTL's map nodes grew from {} to {}",
        a.interval_map_nodes,
        z.interval_map_nodes
    );
    assert!(
        z.ftl_record_bytes <= a.ftl_record_bytes + 4096,
        "{kind:?}: the FTL's migration records grew from {} to {} bytes",
        a.ftl_record_bytes,
        z.ftl_record_bytes
    );
}

#[test]
fn f2fs_cycles_give_everything_back() {
    let l = cycles(Kind::F2fs, 128, 5, 2, false);
    assert_bounded(Kind::F2fs, &l);
}

#[test]
fn f2fs_lfs_cycles_give_everything_back() {
    let l = cycles(Kind::F2fsLfs, 128, 5, 2, false);
    assert_bounded(Kind::F2fsLfs, &l);
}

#[test]
fn scale_cycles_give_everything_back() {
    let l = cycles(Kind::Scale, 128, 5, 2, false);
    assert_bounded(Kind::Scale, &l);
}

#[test]
fn f2fs_on_page_ftl_cycles_give_everything_back() {
    let l = cycles(Kind::F2fsPage, 128, 4, 2, false);
    assert_bounded(Kind::F2fsPage, &l);
}

#[test]
fn device_cycles_give_everything_back() {
    let l = cycles(Kind::Device, 256, 3, 2, false);
    assert_bounded(Kind::Device, &l);
}

#[test]
fn none_cycles_give_everything_back() {
    let l = cycles(Kind::None, 128, 4, 2, false);
    assert_bounded(Kind::None, &l);
}

fn soak(kind: Kind, mib: u64) {
    let n = std::env::var("CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let l = cycles(kind, mib, n, 10, true);
    let (a, z) = (&l[1], l.last().unwrap());
    eprintln!(
        "{kind:?}: heap less the RAM device {} -> {} KiB",
        (a.heap - a.ram_bytes) >> 10,
        (z.heap - z.ram_bytes) >> 10
    );
    eprintln!(
        "{kind:?}: heap {} -> {} KiB, fds {} -> {}, threads {} -> {}, cells {} -> {}",
        a.heap >> 10,
        z.heap >> 10,
        a.fds,
        z.fds,
        a.threads,
        z.threads,
        a.cells,
        z.cells
    );
    assert_bounded(kind, &l);
}

#[test]
#[ignore]
fn soak_f2fs() {
    soak(Kind::F2fs, 256)
}
#[test]
#[ignore]
fn soak_f2fs_lfs() {
    soak(Kind::F2fsLfs, 256)
}
#[test]
#[ignore]
fn soak_scale() {
    soak(Kind::Scale, 256)
}
#[test]
#[ignore]
fn soak_f2fs_page() {
    soak(Kind::F2fsPage, 256)
}
#[test]
#[ignore]
fn soak_device() {
    soak(Kind::Device, 256)
}
#[test]
#[ignore]
fn soak_none() {
    soak(Kind::None, 256)
}

/// Files unlinked while open and still open at unmount are recorded in the pack as
/// orphans and freed by the next mount: statfs comes back, over many such unmounts.
#[test]
fn orphans_open_at_unmount_are_freed_by_the_next_mount() {
    for kind in [Kind::F2fs, Kind::Scale, Kind::Device, Kind::None] {
        let vol = Vol::new(kind, 128);
        let mut fs = vol.mount();
        fs.sync().unwrap();
        let base = exact(&fs);
        for round in 0..8u32 {
            for i in 0..20u32 {
                let name = format!("o{round}-{i}");
                let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
                fs.write(a.ino, 0, &vec![i as u8; 40_000 + i as usize * 4096])
                    .unwrap();
                if i % 3 == 0 {
                    fs.setxattr(a.ino, b"user.x", &[1; 1000], XattrMode::Any)
                        .unwrap();
                }
                fs.open(a.ino).unwrap();
                fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
            }
            assert_eq!(fs.inner().orphans.lock().len(), 20);
            fs.unmount().unwrap();
            vol.fsck(&format!("{kind:?}: orphans at unmount {round}"));
            fs = vol.mount();
            fs.sync().unwrap();
            settle(&fs);
            let e = exact(&fs);
            assert_eq!(
                (e.blocks_free, e.files_free, e.nids_used, e.orphans),
                (base.blocks_free, base.files_free, base.nids_used, 0),
                "{kind:?}: round {round}: the orphans were not all freed"
            );
        }
        fs.unmount().unwrap();
        vol.fsck("at the end");
    }
}

/// Mount and unmount many times: no thread or descriptor stays behind (every policy's
/// threads are joined at unmount), and nothing on disk changes.
#[test]
fn remounts_leave_no_threads_or_fds() {
    for kind in [
        Kind::F2fs,
        Kind::Scale,
        Kind::F2fsPage,
        Kind::Device,
        Kind::None,
    ] {
        let vol = Vol::new(kind, 128);
        let fs = vol.mount();
        fs.write_file("/a", &[5u8; 100_000]).unwrap();
        fs.unmount().unwrap();
        let (fds0, _) = fds_threads();
        let mut threads = Vec::new();
        for _ in 0..30 {
            let fs = vol.mount();
            fs.write_file("/b", &[6u8; 10_000]).unwrap();
            fs.sync().unwrap();
            fs.inner().cells.len();
            fs.unmount().unwrap();
            threads.push(fds_threads().1);
        }
        let (fds1, _) = fds_threads();
        vol.fsck("after 30 remounts");
        // Other tests of this binary run beside this one: their threads come and go, so
        // only a steady climb is a leak.
        let climb = threads.windows(2).filter(|w| w[1] > w[0]).count();
        assert!(
            fds1 <= fds0 + 8 && climb < 25,
            "{kind:?}: fds {fds0} -> {fds1}, threads after each unmount {threads:?}"
        );
    }
}

/// How many evicted cells' records (`CellTable::gone`) a fsync-heavy run keeps between
/// checkpoints with a small inode cache; printed, as is the number of checkpoints.
#[test]
#[ignore]
fn measure_gone_records_between_checkpoints() {
    let ram = Arc::new(RamDevice::new((512u64 << 20) / BS));
    let dev: Arc<dyn BlockDevice> = ram;
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(
        dev,
        MountOptions {
            cp_interval: None,
            gc_interval: None,
            inode_cache_max: 256,
            ..MountOptions::default()
        },
    )
    .unwrap();
    fs.sync().unwrap();
    let cp0 = fs.stats().checkpoints;
    let h0 = common::heap_in_use();
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..n {
        let a = fs
            .create(d, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(a.ino, 0, &[1u8; 100]).unwrap();
        fs.fsync(a.ino, false).unwrap();
        if i % 10_000 == 9_999 {
            eprintln!(
                "{} files: cells {}, gone records {}, checkpoints {}, heap +{} KiB",
                i + 1,
                fs.inner().cells.len(),
                fs.inner().cells.gone_len(),
                fs.stats().checkpoints - cp0,
                (common::heap_in_use() as i64 - h0 as i64) / 1024
            );
        }
    }
    fs.unmount().unwrap();
}

/// A spool directory: a steady population of `LIVE` files, each replaced by one of a new
/// name (a mail queue, a cache, /tmp). The directory must not grow with the names it has
/// seen, only with the names it holds: its size and the volume's free blocks after the
/// churn stay what they were after the first round.
#[test]
fn spool_directory_with_steady_population_does_not_grow() {
    const LIVE: u64 = 300;
    let vol = Vol::new(Kind::F2fs, 128);
    let fs = vol.mount();
    let d = fs.mkdir(ROOT_INO, b"spool", 0o755, 0, 0).unwrap().ino;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut live: Vec<Vec<u8>> = Vec::new();
    let mut seen = Vec::new();
    let rounds: u64 = std::env::var("SPOOL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for r in 0..rounds {
        for k in 0..LIVE * 5 {
            let n = r * LIVE * 5 + k;
            // Names of 10-60 bytes, as queue ids and temp names are.
            let name = format!("q{n:x}-{}", "x".repeat(rng.random_range(0..50))).into_bytes();
            let a = fs.create(d, &name, 0o644, 0, 0).unwrap();
            fs.write(a.ino, 0, &[1u8; 500]).unwrap();
            live.push(name);
            if live.len() as u64 > LIVE {
                let i = rng.random_range(0..live.len());
                let old = live.swap_remove(i);
                fs.unlink(d, &old).unwrap();
            }
        }
        fs.sync().unwrap();
        let a = fs.getattr(d).unwrap();
        seen.push((a.size, fs.statfs().blocks_free));
    }
    eprintln!("spool directory (size, statfs free blocks) per round: {seen:?}");
    let (s1, f1) = seen[1];
    let (sz, fz) = *seen.last().unwrap();
    assert!(
        sz <= s1 * 2 && fz + 64 >= f1,
        "the spool directory grew from {s1} to {sz} bytes, free blocks {f1} -> {fz}"
    );
    fs.unmount().unwrap();
    vol.fsck("after the spool");
}

/// The heap a mount keeps after writing and deleting 300 MiB (the FUSE daemon's RSS stays
/// ~30 MiB above its start after such a run, through malloc_trim): printed with the heap
/// after the unmount, on a file-backed device (no device memory in the heap).
#[test]
#[ignore]
fn measure_heap_kept_after_big_writes() {
    let path = std::env::temp_dir().join(format!("long-life-{}.img", std::process::id()));
    let dev: Arc<dyn BlockDevice> =
        Arc::new(flashlog_dev::FileDevice::create(&path, 512 << 20).unwrap());
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let h0 = common::heap_in_use();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    fs.sync().unwrap();
    let h1 = common::heap_in_use();
    let chunk = vec![3u8; 1 << 20];
    for i in 0..3 {
        let ino = fs
            .create(ROOT_INO, format!("big{i}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        for k in 0..100u64 {
            fs.write(ino, k << 20, &chunk).unwrap();
        }
    }
    fs.sync().unwrap();
    let h2 = common::heap_in_use();
    for i in 0..3 {
        fs.unlink(ROOT_INO, format!("big{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let h3 = common::heap_in_use();
    fs.unmount().unwrap();
    let h4 = common::heap_in_use();
    let _ = std::fs::remove_file(&path);
    let m = |h: u64| h as f64 / (1 << 20) as f64;
    eprintln!(
        "heap MiB: before mount {:.1}, mounted {:.1}, after 300 MiB written {:.1}, deleted \
         {:.1}, unmounted {:.1}",
        m(h0),
        m(h1),
        m(h2),
        m(h3),
        m(h4)
    );
}
