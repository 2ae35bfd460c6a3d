//! Every background agent at once, with the race windows widened: application threads
//! write, overwrite, truncate, punch, rename, unlink and fsync files of their own while the
//! flusher's lanes, the collectors (or `gc=none`'s discard dispatcher, or `gc=device`'s
//! upcall handler), cap reliefs (an inode cache of 8 cells) and checkpoints all run. A
//! test hook makes the thread that reaches any test point (a visit copying with the cell
//! released, a collector between its check and its remap, every checkpoint step, a cell
//! load, a log append) yield or sleep for up to 300 us at random: on 2 cores this opens the
//! interleavings that 16 cores give without it (a thread preempted in the middle of a
//! window another thread then enters). The end state must be exactly the model: every
//! file's size and bytes, the space budget at rest, a clean fsck, the same after a remount.
//! Mlogs too: `f2fs` on 2 mapped per thread, `scale` on 4 per file, `device` on 2 per
//! thread. The emulated devices are too large for `device`'s own GC to start here (its
//! upcalls have their races in `device_gc.rs`); its handler thread, discards and
//! acknowledgements run.
//!
//! `CHAOS_SEED=N` picks the delays' seed (default 1) and `CHAOS_THREADS=N` the application
//! threads (default 6; 16 gives a 16-core machine's writers), `CHAOS_MLOGS=N` the mlogs of
//! the `f2fs` and `scale` runs (16 is what mkfs gives a 16-core machine; the RAM volume
//! grows until they fit); a failure prints the seed it ran with. Delays depend on the scheduler too, so a seed does not replay a failure exactly:
//! run the file in a loop to hunt one.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;

const OPS: u64 = 500;
const FILES: u64 = 5;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

type Models = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// One thread's work on its own files; the model of what they hold at the end.
fn worker(fs: &Fs, t: u64, seed: u64) -> HashMap<String, Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000 + t);
    let mut mine: HashMap<String, Vec<u8>> = HashMap::new();
    for i in 0..OPS {
        let name = format!("t{t}-f{}", rng.random_range(0..FILES));
        let ino = common::open_or_create(fs, &name);
        let m = mine.entry(name.clone()).or_default();
        match rng.random_range(0..20) {
            // Writes: a small overwrite or append (one page's worth or a few) most often,
            // sometimes a large one.
            0..=10 => {
                let off = if rng.random_bool(0.3) {
                    m.len() as u64
                } else {
                    rng.random_range(0..1_000_000u64)
                };
                let len = if rng.random_bool(0.8) {
                    rng.random_range(1..12_000usize)
                } else {
                    rng.random_range(12_000..120_000usize)
                };
                common::write_both(fs, ino, m, off, len, (i % 251) as u8 + 1);
            }
            11 => {
                let size = rng.random_range(0..800_000u64);
                common::truncate_both(fs, ino, m, size);
            }
            12 => {
                let off = rng.random_range(0..800_000u64);
                let len = rng.random_range(1..200_000u64);
                common::punch_both(fs, ino, m, off, len);
            }
            13 => {
                fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                mine.remove(&name);
            }
            14 => {
                // Over another of this thread's names (replacing it if it exists).
                let to = format!("t{t}-f{}", rng.random_range(0..FILES));
                if to != name {
                    fs.rename(
                        ROOT_INO,
                        name.as_bytes(),
                        ROOT_INO,
                        to.as_bytes(),
                        RenameFlags::default(),
                    )
                    .unwrap();
                    let v = mine.remove(&name).unwrap();
                    mine.insert(to, v);
                }
            }
            15..=17 => fs.fsync(ino, false).unwrap(),
            _ => fs.fsync(ino, true).unwrap(),
        }
    }
    mine
}

/// `mlogs` log partitions, mapped per file (`MlogMap::Ino`) or per thread.
fn run(gc: &str, dev: Arc<dyn BlockDevice>, mlogs: u32, mlog_map: MlogMap) {
    let seed = env_or("CHAOS_SEED", 1);
    let threads = env_or("CHAOS_THREADS", 6);
    eprintln!("{gc}: CHAOS_SEED={seed} CHAOS_THREADS={threads}, {mlogs} mlogs {mlog_map:?}");
    let mkfs = MkfsOptions {
        mlogs,
        ..Default::default()
    };
    Fs::mkfs(dev.clone(), &mkfs).unwrap();
    let agents = gc == "none" || gc == "device";
    let opts = || MountOptions {
        gc: gc.parse().unwrap(),
        gc_workers: 3,
        cp_interval: None,
        // The discard dispatcher and the upcall handler run only with a period.
        gc_interval: agents.then(|| Duration::from_millis(5)),
        flushers: 2,
        dirty_cap_bytes: 1 << 20,
        inode_cache_max: 8,
        mlog_map,
        ..Default::default()
    };
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let hits = common::widen_races(&fs, seed);
    let stop = Arc::new(AtomicBool::new(false));
    // Checkpoints, and for the cleaning policies a foreground cleaner, beside the writers.
    let background: Vec<_> = [false, true]
        .into_iter()
        .filter(|&clean| !clean || !agents)
        .map(|clean| {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if clean {
                        fs.gc(2).unwrap();
                    } else {
                        fs.sync().unwrap();
                        std::thread::sleep(Duration::from_millis(3));
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let models: Models = Arc::default();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (fs, models) = (fs.clone(), models.clone());
            std::thread::spawn(move || {
                let mine = worker(&fs, t, seed);
                models.lock().extend(mine);
            })
        })
        .collect();
    for w in workers {
        if let Err(e) = w.join() {
            eprintln!("{gc}: failed with CHAOS_SEED={seed} CHAOS_THREADS={threads}");
            std::panic::resume_unwind(e);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for b in background {
        assert!(b.join().unwrap() > 0, "a background thread never ran");
    }
    common::narrow_races(&fs);
    assert!(
        hits.load(Ordering::Relaxed) > 1000,
        "the hook was reached only {} times",
        hits.load(Ordering::Relaxed)
    );
    let when = format!("{gc}, CHAOS_SEED={seed} CHAOS_THREADS={threads}");
    common::assert_files_hold(&fs, &models.lock(), &when);
    common::assert_budget_exact(&fs, &when);
    let st = fs.stats();
    eprintln!(
        "{gc}: {} test points, {} checkpoints, {} cap reliefs, {} blocks moved, {} flusher copies orphaned, {} collector copies lost, {} upcall pairs applied, {} blocks discarded",
        hits.load(Ordering::Relaxed),
        st.checkpoints,
        st.cap_reliefs,
        st.gc_moved_blocks,
        st.flush_orphaned_copies,
        st.gc_lost_copies,
        st.upcall_pairs_applied,
        st.discarded_blocks
    );
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let r = fsck::fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{when}: {r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    common::assert_files_hold(&fs, &models.lock(), &format!("{when}, after a remount"));
    fs.unmount().unwrap();
}

fn ram(mib: u64) -> Arc<dyn BlockDevice> {
    Arc::new(RamDevice::new((mib << 20) / 4096))
}

/// The mlog count of a RAM run: `CHAOS_MLOGS` if set (a 16-core machine's mkfs gives 16, as
/// `CHAOS_THREADS=16` gives its writers), else `mlogs`; and a RAM volume of at least `mib`
/// that mkfs accepts for that count (doubled until the mlogs' heads and reserves fit; the
/// device is sparse).
fn ram_volume(mib: u64, mlogs: u32) -> (Arc<dyn BlockDevice>, u32) {
    let mlogs = env_or("CHAOS_MLOGS", u64::from(mlogs)) as u32;
    let mut mib = mib;
    while flashlog_format::sb::Geometry::compute((mib << 20) / 4096, 1, mlogs).is_err() {
        assert!(mib < 1 << 20, "no volume size fits {mlogs} mlogs");
        mib *= 2;
    }
    (ram(mib), mlogs)
}

#[test]
fn chaos_f2fs() {
    let (dev, mlogs) = ram_volume(128, 2);
    run("f2fs", dev, mlogs, MlogMap::Thread);
}

#[test]
fn chaos_scale() {
    let (dev, mlogs) = ram_volume(256, 4);
    run("scale", dev, mlogs, MlogMap::Ino);
}

#[test]
fn chaos_none() {
    run(
        "none",
        common::emulated_ssd("interval", 256 << 20),
        1,
        MlogMap::Ino,
    );
}

#[test]
fn chaos_device() {
    run(
        "device",
        common::emulated_ssd("coupled", 256 << 20),
        2,
        MlogMap::Thread,
    );
}
