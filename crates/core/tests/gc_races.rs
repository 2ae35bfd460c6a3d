//! Cleaning runs while application threads write, truncate, punch holes in and unlink the
//! files being cleaned; and power is cut while the cleaner works.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, DevError, RamDevice, SimDevice};
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

/// Each thread owns its files (so the model needs no cross-thread order) but all of them
/// share segments, so the cleaner constantly moves blocks of files being changed.
#[test]
fn cleaner_races_writers_truncates_punches_unlinks() {
    races(GcPolicy::F2fs, 2_000_000);
}

#[test]
fn scale_collectors_race_writers_truncates_punches_unlinks() {
    races(GcPolicy::Scale, 2_000_000);
}

/// The same with files of up to 3.8 MB, so that most blocks lie past the inode's own
/// slots: the `scale` collectors commit those under their direct node's lock, beside the
/// writers, the flusher and fsync holding the file's cell (`scale::commit_dnode_run`).
#[test]
fn scale_collectors_race_writers_on_direct_nodes() {
    races(GcPolicy::Scale, 3_800_000);
}

fn races(gc: GcPolicy, span: u64) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    // A 1 MiB dirty cap: the flusher writes back all the time, so the collector meets
    // pages whose copies a flusher visit has in flight.
    let o = MountOptions {
        dirty_cap_bytes: 1 << 20,
        ..opts_for(gc)
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o).unwrap());
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
                let mut rng = ChaCha8Rng::seed_from_u64(t);
                let mut mine: HashMap<String, Vec<u8>> = HashMap::new();
                for i in 0..1500 {
                    let name = format!("t{t}-f{}", rng.random_range(0..6));
                    let ino = common::open_or_create(&fs, &name);
                    let m = mine.entry(name.clone()).or_default();
                    match rng.random_range(0..10) {
                        0..=5 => {
                            let off = rng.random_range(0..span);
                            let len = rng.random_range(1..50_000usize);
                            common::write_both(&fs, ino, m, off, len, (i % 251) as u8 + 1);
                        }
                        6 => {
                            let size = rng.random_range(0..span * 3 / 4);
                            common::truncate_both(&fs, ino, m, size);
                        }
                        7 => {
                            let off = rng.random_range(0..span * 3 / 4);
                            let len = rng.random_range(1..400_000u64);
                            common::punch_both(&fs, ino, m, off, len);
                        }
                        8 => {
                            fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                            mine.remove(&name);
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
    let c = fs.stats();
    assert!(
        runs > 0 && c.gc_moved_blocks > 0,
        "cleaner did no work: {c:?}"
    );
    let check = |fs: &Fs| common::assert_files_hold(fs, &models.lock(), &format!("{gc:?}"));
    check(&fs);
    // Every block written was paid once, whoever wrote it: the collector moving dirty
    // pages whose copies the flusher had in flight, truncates and punches dropping them
    // (`Page::wb`). At rest the budget is what the volume's state gives.
    common::assert_budget_exact(
        &fs,
        &format!(
            "{} flusher copies orphaned",
            fs.stats().flush_orphaned_copies
        ),
    );
    let c = fs.stats();
    eprintln!(
        "{gc:?}: {} blocks moved, {} collector copies lost, {} flusher copies orphaned",
        c.gc_moved_blocks, c.gc_lost_copies, c.flush_orphaned_copies
    );
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts_for(gc)).unwrap();
    check(&fs);
    fs.unmount().unwrap();
}

/// Power cuts while the volume is nearly full and the cleaner runs: fsck is clean and
/// fsync'd files hold one of the states they had since their last fsync.
#[test]
fn power_cuts_during_cleaning() {
    power_cuts(GcPolicy::F2fs, 0..40);
}

#[test]
fn power_cuts_during_scale_cleaning() {
    power_cuts(GcPolicy::Scale, 100..130);
}

fn power_cuts(gc: GcPolicy, seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let mode = CrashMode::ALL[seed as usize % 3];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sim = Arc::new(SimDevice::new((96 << 20) / 4096));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Fs::mount(dev.clone(), opts_for(gc)).unwrap();
        // Fill to about 85 %, in 4 files.
        let per_file = fs.statfs().blocks * 85 / 100 / 4;
        let mut content: Vec<Vec<u8>> = Vec::new();
        let mut inos = Vec::new();
        for f in 0..4u8 {
            let data = vec![f + 1; per_file as usize * 4096 - 8192];
            let ino = fs
                .create(ROOT_INO, format!("f{f}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, &data).unwrap();
            fs.fsync(ino, false).unwrap();
            inos.push(ino);
            content.push(data);
        }
        fs.sync().unwrap();
        // Per file and block: the byte it held at the last fsync, and every byte written
        // since. After the crash each block must be uniform and one of those.
        let nblocks = content[0].len() / 4096;
        let mut durable: Vec<Vec<u8>> = (0..4u8).map(|f| vec![f + 1; nblocks]).collect();
        let mut since: Vec<Vec<Vec<u8>>> = vec![vec![Vec::new(); nblocks]; 4];
        let mut cur: Vec<Vec<u8>> = durable.clone();
        sim.cut_at(
            sim.ops() + rng.random_range(50..3000),
            rng.random_range(0..8),
        );
        for i in 0..4000u32 {
            let f = rng.random_range(0..4usize);
            let r = if rng.random_range(0..20) == 0 {
                fs.fsync(inos[f], false).map(|_| {
                    durable[f] = cur[f].clone();
                    since[f].iter_mut().for_each(|v| v.clear());
                })
            } else {
                let blk = rng.random_range(0..nblocks);
                let byte = (i % 200) as u8 + 10;
                fs.write(inos[f], blk as u64 * 4096, &[byte; 4096])
                    .map(|_| {
                        cur[f][blk] = byte;
                        since[f][blk].push(byte);
                    })
            };
            match r {
                Ok(()) => {}
                Err(Error::Device(DevError::PowerCut)) | Err(Error::Poisoned(_)) => break,
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
        sim.cut_now();
        let cleaned = fs.stats().gc_moved_blocks + fs.stats().ssr_blocks;
        fs.abandon();
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
        let r = fsck(&*img).unwrap();
        assert!(
            r.is_clean(),
            "seed {seed} {mode:?} (cleaned {cleaned}): {r}"
        );
        let fs = Fs::mount(img.clone(), opts_for(gc)).unwrap();
        let mut got = vec![0u8; 4096];
        for f in 0..4 {
            assert_eq!(fs.getattr(inos[f]).unwrap().size, content[f].len() as u64);
            for b in 0..nblocks {
                fs.read(inos[f], b as u64 * 4096, &mut got).unwrap();
                let ok = got.iter().all(|&x| x == got[0])
                    && (got[0] == durable[f][b] || since[f][b].contains(&got[0]));
                assert!(ok, "seed {seed} {mode:?}: file {f} block {b} holds {:?}.., durable {}, written since {:?}", &got[..4], durable[f][b], since[f][b]);
            }
        }
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "seed {seed} {mode:?} after remount: {r}");
    }
}

/// Power cuts while 3 threads overwrite and fsync their own files on a volume about 80 %
/// full, with the cleaning running (`f2fs`'s foreground cleaner in the writers, or `scale`'s
/// 3 collectors), 2 flusher lanes under a 512 KiB dirty cap, and the race windows widened
/// (`common::widen_races`): collectors between their check and their remap, visits copying
/// with the cell released, checkpoints, all cut in the orders many cores give. Every block
/// of every file must hold its last fsync'd byte or one written since.
#[test]
fn multithreaded_power_cuts_during_cleaning_with_races_widened() {
    for (gc, seeds) in [(GcPolicy::F2fs, 0..12u64), (GcPolicy::Scale, 100..112)] {
        let cleaned: Vec<u64> = seeds.map(|s| threads_cut_while_cleaning(gc, s)).collect();
        eprintln!("{gc:?}: blocks cleaned before each cut: {cleaned:?}");
        assert!(
            cleaned.iter().filter(|&&c| c > 0).count() >= cleaned.len() / 2,
            "{gc:?}: cleaning ran before too few of the cuts: {cleaned:?}"
        );
    }
}

/// One seed; the blocks cleaning moved or threaded before the cut.
fn threads_cut_while_cleaning(gc: GcPolicy, seed: u64) -> u64 {
    let mode = CrashMode::ALL[seed as usize % 3];
    let sim = Arc::new(SimDevice::new((96 << 20) / 4096));
    let (fs, inos, blocks) = common::cut_race_volume(sim.clone(), opts_for(gc), 80, seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    sim.cut_at(
        sim.ops() + rng.random_range(100..4000),
        rng.random_range(0..8),
    );
    let results =
        common::threads_until_cut(&fs, &inos, blocks, common::CUT_THREADS, (3000, 16), seed);
    sim.cut_now();
    let cleaned = fs.stats().gc_moved_blocks + fs.stats().ssr_blocks;
    let fs = Arc::try_unwrap(fs).ok().expect("threads are done");
    fs.abandon();
    let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
    let r = fsck(&*img).unwrap();
    assert!(r.is_clean(), "{gc:?} seed {seed} {mode:?}: {r}");
    let fs = Fs::mount(img.clone(), opts_for(gc)).unwrap();
    for (k, h) in results.iter().flatten().enumerate() {
        let what = format!("{gc:?} seed {seed} {mode:?} (cleaned {cleaned}): file {k}");
        common::assert_blocks_hold_history(&fs, inos[k], h, &what);
    }
    fs.unmount().unwrap();
    let r = fsck(&*img).unwrap();
    assert!(
        r.is_clean(),
        "{gc:?} seed {seed} {mode:?} after remount: {r}"
    );
    cleaned
}
