//! Zero-range, punch, truncate, preallocation and writes into preallocated blocks against
//! the cleaners (`gc=scale` collectors, `gc=f2fs` foreground cleaning) and the flusher's
//! write-back visits (written in review, 2026-11-27, fourth session).
//!
//! `stress_*`: every fallocate mode beside writes, truncates, unlinks and fsyncs, the
//! flusher at a 1 MiB dirty cap and a cleaner looping, half the seeds with the race windows
//! widened; contents against a model, exact budget, fsck, remount (they passed before any
//! fix: coverage of the concurrent paths). `zero_range_enospc_*` failed before the inode
//! was dirtied on a partial preallocation: see its comment.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

fn opts_for(gc: GcPolicy) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc,
        gc_workers: 3,
        ..Default::default()
    }
}

fn falloc_both(fs: &Fs, ino: Ino, m: &mut Vec<u8>, mode: FallocMode, off: u64, len: u64) {
    fs.fallocate(ino, mode, off, len).unwrap_or_else(|e| {
        // With the volume's free space, to tell a full volume from a spurious ENOSPC
        // (seen once under heavy load, 2026-11-28, not reproduced since).
        panic!(
            "fallocate {mode:?} {off}+{len} of {ino}: {e}; {:?}",
            fs.statfs()
        )
    });
    let end = (off + len) as usize;
    match mode {
        FallocMode::Allocate => {
            if m.len() < end {
                m.resize(end, 0);
            }
        }
        FallocMode::KeepSize => {}
        FallocMode::PunchHole | FallocMode::ZeroRangeKeepSize => {
            let s = (off as usize).min(m.len());
            let e = end.min(m.len());
            m[s..e].fill(0);
        }
        FallocMode::ZeroRange => {
            if m.len() < end {
                m.resize(end, 0);
            }
            m[off as usize..end].fill(0);
        }
    }
}

fn races(gc: GcPolicy, span: u64, seed: u64, widen: bool) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        dirty_cap_bytes: 1 << 20,
        ..opts_for(gc)
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o).unwrap());
    if widen {
        common::widen_races(&fs, seed);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let models: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
    let cleaner = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::Relaxed) {
                fs.gc(2).unwrap();
                runs += 1;
            }
            runs
        })
    };
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let (fs, models) = (fs.clone(), models.clone());
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(t ^ (seed << 8));
                let mut mine: HashMap<String, Vec<u8>> = HashMap::new();
                for i in 0..1500 {
                    let name = format!("t{t}-f{}", rng.random_range(0..5));
                    let ino = common::open_or_create(&fs, &name);
                    let m = mine.entry(name.clone()).or_default();
                    let off = rng.random_range(0..span);
                    match rng.random_range(0..14) {
                        0..=5 => {
                            let len = rng.random_range(1..50_000usize);
                            common::write_both(&fs, ino, m, off, len, (i % 251) as u8 + 1);
                        }
                        6 => {
                            let size = rng.random_range(0..span * 3 / 4);
                            common::truncate_both(&fs, ino, m, size);
                        }
                        7 => {
                            let len = rng.random_range(1..400_000u64);
                            falloc_both(&fs, ino, m, FallocMode::PunchHole, off, len);
                        }
                        8 => {
                            let len = rng.random_range(1..400_000u64);
                            falloc_both(&fs, ino, m, FallocMode::ZeroRange, off, len);
                        }
                        9 => {
                            let len = rng.random_range(1..400_000u64);
                            falloc_both(&fs, ino, m, FallocMode::ZeroRangeKeepSize, off, len);
                        }
                        10 => {
                            let len = rng.random_range(1..200_000u64);
                            let mode = if rng.random_bool(0.5) {
                                FallocMode::Allocate
                            } else {
                                FallocMode::KeepSize
                            };
                            falloc_both(&fs, ino, m, mode, off, len);
                        }
                        11 => {
                            if rng.random_range(0..4) == 0 {
                                fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                                mine.remove(&name);
                            }
                        }
                        _ => fs.fsync(ino, false).unwrap(),
                    }
                }
                models.lock().extend(mine);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let runs = cleaner.join().unwrap();
    common::narrow_races(&fs);
    let c = fs.stats();
    assert!(
        runs > 0 && c.gc_moved_blocks > 0,
        "cleaner did no work: {c:?}"
    );
    let check = |fs: &Fs| common::assert_files_hold(fs, &models.lock(), &format!("{gc:?}"));
    check(&fs);
    common::assert_budget_exact(&fs, &format!("{gc:?}"));
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts_for(gc)).unwrap();
    check(&fs);
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn stress_f2fs_zero_range() {
    for seed in 0..3 {
        races(GcPolicy::F2fs, 2_000_000, seed, seed % 2 == 1);
    }
}

#[test]
fn stress_scale_zero_range() {
    for seed in 0..3 {
        // Each thread's operations are fixed by its seed, but not how the threads
        // interleave: with a span of 3.8 MB the three threads' peaks of allocated blocks
        // (replayed one thread at a time: 1,388-1,894 blocks each) summed to 4,776-4,967,
        // past the volume's 4,608 user blocks, so a true ENOSPC could come when the peaks
        // coincided (it did once, under heavy load, 2026-11-28). 2.5 MB keeps that sum
        // near 4,200.
        races(GcPolicy::Scale, 2_500_000, seed, seed % 2 == 1);
    }
}

/// Fill the volume with file `filler` until a write fails with ENOSPC.
fn fill(fs: &Fs, filler: Ino) -> u64 {
    let mut off = 0u64;
    let chunk = vec![7u8; 64 * 4096];
    loop {
        match fs.write(filler, off, &chunk) {
            Ok(n) if n == chunk.len() => off += n as u64,
            Ok(n) => return off + n as u64,
            Err(Error::NoSpace) => return off,
            Err(e) => panic!("fill: {e}"),
        }
    }
}

/// ZERO_RANGE (and plain preallocation, `Allocate`/`KeepSize`, which share the path) that
/// runs out of user space part way through `preallocate` (file.rs): the blocks reserved
/// before the failure stay mapped `NEW_ADDR` and counted in the in-memory header
/// (`hdr.blocks += 1`), but the error returns from `file_fallocate` (`?` on
/// `preallocate`) before its `dirty_inode`, and a slot of a direct node is set dirtying
/// the node only, not the inode (the punch over a hole dirtied nothing either). The
/// sequence: a file whose direct node has a 200-block hole, synced (inode clean); the
/// volume filled to 16 free user blocks; ZERO_RANGE|KEEP_SIZE over the hole ->
/// ENOSPC after 16 reservations. The next checkpoint writes the direct node (16 more
/// NEW_ADDR slots) but not the clean inode: fsck finds
/// "inode N: header says 800 blocks, tree holds 816".
#[test]
fn zero_range_enospc_part_way_dirties_the_inode_for_its_block_count() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = opts_for(GcPolicy::F2fs);
    let fs = Fs::mount(dev.clone(), o.clone()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    // 1000 blocks: 456 in the inode, the rest in the first direct node; then a hole of
    // 200 blocks in the direct node's part.
    fs.write(f, 0, &vec![3u8; 1000 * 4096]).unwrap();
    fs.fallocate(f, FallocMode::PunchHole, 600 * 4096, 200 * 4096)
        .unwrap();
    let filler = fs.create(ROOT_INO, b"filler", 0o644, 0, 0).unwrap().ino;
    let size = fill(&fs, filler);
    fs.sync().unwrap();
    // Room for a few blocks only.
    let set = SetAttr {
        size: Some(size - 16 * 4096),
        ..Default::default()
    };
    fs.setattr(filler, &set).unwrap();
    fs.sync().unwrap();
    let r = fs.fallocate(f, FallocMode::ZeroRangeKeepSize, 600 * 4096, 200 * 4096);
    assert!(matches!(r, Err(Error::NoSpace)), "{r:?}");
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
    let fs = Fs::mount(dev.clone(), o).unwrap();
    let mut got = vec![0u8; 1000 * 4096];
    let mut off = 0;
    while off < got.len() {
        off += fs.read(f, off as u64, &mut got[off..]).unwrap();
    }
    assert!(got[..600 * 4096].iter().all(|&b| b == 3));
    assert!(got[600 * 4096..800 * 4096].iter().all(|&b| b == 0));
    assert!(got[800 * 4096..].iter().all(|&b| b == 3));
    common::assert_budget_exact(&fs, "after remount");
    fs.unmount().unwrap();
}
