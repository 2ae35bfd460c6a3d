//! Power-cut test: a workload with fsyncs runs on a device that loses every unflushed write
//! when power is cut at a random request; after remount, fsck is clean and every file that
//! was fsync'd (or covered by a checkpoint) has one of the contents it had since then.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, DevError, SimDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;

mod common;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

fn is_cut(e: &Error) -> bool {
    matches!(e, Error::Device(DevError::PowerCut)) || matches!(e, Error::Poisoned(_))
}

/// Per path: the contents since the last durable point (index 0 is the durable one; None
/// means "absent" is acceptable).
type Hist = HashMap<String, Vec<Option<Vec<u8>>>>;

/// Cut the power now, take the crash image in `mode`, check it with fsck and mount it.
fn remount_after_cut(
    sim: &SimDevice,
    fs: Fs,
    mode: CrashMode,
    seed: u64,
) -> (Arc<dyn BlockDevice>, Fs) {
    sim.cut_now();
    fs.abandon();
    let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
    let r = fsck(&*img).unwrap();
    assert!(
        r.is_clean(),
        "seed {seed} {mode:?}: fsck before remount: {r}"
    );
    let fs = Fs::mount(img.clone(), opts()).unwrap();
    (img, fs)
}

/// Unmount the recovered volume and check it with fsck again.
fn unmount_clean(fs: Fs, img: &Arc<dyn BlockDevice>, mode: CrashMode, seed: u64) {
    fs.unmount().unwrap();
    let r = fsck(&**img).unwrap();
    assert!(
        r.is_clean(),
        "seed {seed} {mode:?}: fsck after remount: {r}"
    );
}

/// [`remount_after_cut`], then every `(name, states)` of `dir` must be in one of its
/// states, then [`unmount_clean`].
fn crash_and_check<'a>(
    sim: &SimDevice,
    fs: Fs,
    mode: CrashMode,
    seed: u64,
    dir: Ino,
    states: impl IntoIterator<Item = (&'a str, &'a [Option<Vec<u8>>])>,
) {
    let (img, fs) = remount_after_cut(sim, fs, mode, seed);
    for (name, versions) in states {
        assert_one_of(seed, mode, name, &contents(&fs, dir, name), versions);
    }
    unmount_clean(fs, &img, mode, seed);
}

/// What `dir/name` holds after the remount (None: absent).
fn contents(fs: &Fs, dir: Ino, name: &str) -> Option<Vec<u8>> {
    fs.lookup(dir, name.as_bytes()).ok().map(|a| {
        let mut v = vec![0u8; a.size as usize];
        let mut off = 0;
        while off < v.len() {
            let n = fs.read(a.ino, off as u64, &mut v[off..]).unwrap();
            assert!(n > 0);
            off += n;
        }
        v
    })
}

/// `got` is one of the states `name` may have (PC_DEBUG: how each differs, if not).
fn assert_one_of(
    seed: u64,
    mode: CrashMode,
    name: &str,
    got: &Option<Vec<u8>>,
    versions: &[Option<Vec<u8>>],
) {
    if versions.contains(got) {
        return;
    }
    if std::env::var("PC_DEBUG").is_ok() {
        let g = got.clone().unwrap_or_default();
        for w in versions {
            let w = w.clone().unwrap_or_default();
            let diff: Vec<usize> = (0..w.len().max(g.len()))
                .filter(|&i| w.get(i) != g.get(i))
                .collect();
            eprintln!(
                "{name}: want len {} got len {}: {} bytes differ, first {:?} (want {:?} got {:?})",
                w.len(),
                g.len(),
                diff.len(),
                diff.first(),
                diff.first().map(|&i| w.get(i)),
                diff.first().map(|&i| g.get(i))
            );
        }
    }
    panic!(
        "seed {seed} {mode:?}: {name} has {:?} bytes, not one of its {} states since the last \
         durable point",
        got.as_ref().map(|g| g.len()),
        versions.len()
    );
}

fn run(seed: u64, mode: CrashMode) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    let start = sim.ops();
    sim.cut_at(start + rng.random_range(0..400), rng.random_range(0..4));
    let mut cur: HashMap<String, Vec<u8>> = HashMap::new();
    let mut hist: Hist = HashMap::new();
    let mut result = Ok(());
    for _ in 0..120 {
        let name = format!("f{}", rng.random_range(0..8));
        let r: Result<()> = (|| {
            let which = rng.random_range(0..10);
            if std::env::var("PC_DEBUG").is_ok() {
                eprintln!("op {which} {name} ops={}", sim.ops());
            }
            match which {
                0..=4 => {
                    let ino = match fs.lookup(d, name.as_bytes()) {
                        Ok(a) => a.ino,
                        Err(Error::NotFound) => fs.create(d, name.as_bytes(), 0o644, 0, 0)?.ino,
                        Err(e) => return Err(e),
                    };
                    let off = rng.random_range(0..300_000u64);
                    let len = rng.random_range(1..40_000usize);
                    let byte: u8 = rng.random();
                    fs.write(ino, off, &vec![byte; len])?;
                    let c = cur.entry(name.clone()).or_default();
                    if c.len() < off as usize + len {
                        c.resize(off as usize + len, 0);
                    }
                    c[off as usize..off as usize + len].fill(byte);
                    hist.entry(name.clone())
                        .or_insert_with(|| vec![None])
                        .push(Some(c.clone()));
                }
                5..=6 => {
                    if let Ok(a) = fs.lookup(d, name.as_bytes()) {
                        fs.fsync(a.ino, rng.random_bool(0.5))?;
                        hist.insert(name.clone(), vec![cur.get(&name).cloned()]);
                    }
                }
                7 => {
                    if fs.unlink(d, name.as_bytes()).is_ok() {
                        cur.remove(&name);
                        hist.entry(name.clone())
                            .or_insert_with(|| vec![None])
                            .push(None);
                    }
                }
                8 => {
                    if let Ok(a) = fs.lookup(d, name.as_bytes()) {
                        let size = rng.random_range(0..200_000u64);
                        fs.setattr(
                            a.ino,
                            &SetAttr {
                                size: Some(size),
                                ..Default::default()
                            },
                        )?;
                        let c = cur.get_mut(&name).unwrap();
                        c.resize(size as usize, 0);
                        hist.get_mut(&name).unwrap().push(Some(c.clone()));
                    }
                }
                _ => {
                    fs.sync()?;
                    hist = cur
                        .iter()
                        .map(|(k, v)| (k.clone(), vec![Some(v.clone())]))
                        .collect();
                    for i in 0..8 {
                        hist.entry(format!("f{i}")).or_insert_with(|| vec![None]);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            assert!(is_cut(&e), "seed {seed}: unexpected error {e}");
            result = Err(e);
            break;
        }
    }
    let _ = result;
    crash_and_check(
        &sim,
        fs,
        mode,
        seed,
        d,
        hist.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
    );
}

#[test]
fn fsynced_files_survive_power_cuts() {
    let only: Option<u64> = std::env::var("PC_SEED").ok().and_then(|s| s.parse().ok());
    for seed in 0..150 {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        run(seed, CrashMode::DropUnflushed);
    }
}

#[test]
fn fsynced_files_survive_reordered_and_torn_writes() {
    for seed in 1000..1100 {
        run(seed, CrashMode::KeepRandomSubset);
        run(seed, CrashMode::TearOne);
    }
}

/// Several threads write and fsync their own files while power is cut at a random request:
/// every block of every file holds the value it had at its file's last successful fsync or
/// one written since. Not replayable request for request (threads interleave freely), so a
/// failure prints the seed and the kill mode to narrow it down.
/// Many files created, written, rewritten and some fsync'd, with an inode cache of 32
/// cells, so that reliefs of its cap come every few dozen creates: their pre-pass
/// writes each file's nodes without the FSYNC mark under the shared op lock
/// (`writeback_nodes_for_caps`) and evicts the cells, and roll-forward finds those nodes
/// on the warm node log between the fsyncs. Power is cut at a random request; every file then holds
/// its fsync'd contents or one written since (or is absent if it never was fsync'd).
#[test]
fn fsynced_files_survive_power_cuts_between_cap_reliefs() {
    let mut prewritten = 0;
    let only: Option<u64> = std::env::var("PC_SEED").ok().and_then(|s| s.parse().ok());
    for seed in 2000..2040u64 {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let mode = CrashMode::ALL[seed as usize % 3];
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Fs::mount(
            dev.clone(),
            MountOptions {
                inode_cache_max: 32,
                ..opts()
            },
        )
        .unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
        fs.sync().unwrap();
        sim.cut_at(
            sim.ops() + rng.random_range(50..2500),
            rng.random_range(0..4),
        );
        let mut cur: Vec<Vec<u8>> = Vec::new();
        let mut hist: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
        let mut inos = Vec::new();
        let mut names = Vec::new();
        for i in 0..300usize {
            let r: Result<()> = (|| {
                let f = if i < 8 || rng.random_range(0..3) != 0 {
                    let ino = fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0)?.ino;
                    inos.push(ino);
                    names.push(format!("f{i}"));
                    cur.push(Vec::new());
                    hist.push(vec![None, Some(Vec::new())]);
                    inos.len() - 1
                } else {
                    rng.random_range(0..inos.len())
                };
                let len = rng.random_range(1..3 * 4096usize);
                let byte: u8 = rng.random_range(1..=255);
                let off = rng.random_range(0..2 * 4096u64);
                // The write's state counts before the call: a write in flight when power
                // is cut may be durable though it fails (a checkpoint after its cap relief can complete
                // before the cut is seen).
                let c = &mut cur[f];
                if c.len() < off as usize + len {
                    c.resize(off as usize + len, 0);
                }
                c[off as usize..off as usize + len].fill(byte);
                hist[f].push(Some(c.clone()));
                fs.write(inos[f], off, &vec![byte; len])?;
                if std::env::var("PC_DEBUG").is_ok() {
                    eprintln!(
                        "op {i}: wrote {} at {off}+{len} (ops {})",
                        names[f],
                        sim.ops()
                    );
                }
                if rng.random_range(0..4) == 0 {
                    if std::env::var("PC_DEBUG").is_ok() {
                        eprintln!("op {i}: fsync {} (ops {})", names[f], sim.ops());
                    }
                    fs.fsync(inos[f], false)?;
                    hist[f] = vec![Some(cur[f].clone())];
                }
                Ok(())
            })();
            if let Err(e) = r {
                assert!(is_cut(&e), "seed {seed}: unexpected error {e}");
                if std::env::var("PC_DEBUG").is_ok() {
                    eprintln!("cut in op {i}");
                }
                break;
            }
        }
        prewritten += fs.stats().cp_prewrite_nodes;
        crash_and_check(
            &sim,
            fs,
            mode,
            seed,
            d,
            names
                .iter()
                .map(String::as_str)
                .zip(hist.iter().map(Vec::as_slice)),
        );
    }
    assert!(prewritten > 0, "no cap relief wrote nodes in its pre-pass");
}

#[test]
fn multithreaded_fsyncs_survive_power_cuts() {
    multithreaded_fsyncs(MountOptions::default().inode_cache_max, false);
}

/// The same with the race windows widened (`common::widen_races`), two flusher lanes and a
/// 256 KiB dirty cap, so that the cut falls while visits copy with the cells released,
/// fsyncs wait for them and the cap relief evicts cells, in the orders many cores give.
#[test]
fn multithreaded_fsyncs_survive_power_cuts_with_races_widened() {
    multithreaded_fsyncs(8, true);
}

/// The same with an inode cache of 2 cells: the cap relief writes nodes back and evicts
/// the files' cells between the threads' writes and fsyncs (loads, relief and flusher
/// concurrent), with no checkpoint between the sync and the cut unless the interval fills.
#[test]
fn multithreaded_fsyncs_survive_power_cuts_with_cells_evicted() {
    let reliefs = multithreaded_fsyncs(2, false);
    assert!(reliefs > 0, "no cap relief ran");
}

/// The cap reliefs that ran before the cuts, over all seeds. `widen`: with
/// `common::widen_races` and the flusher busy.
fn multithreaded_fsyncs(inode_cache_max: usize, widen: bool) -> u64 {
    let mut reliefs = 0;
    const THREADS: usize = 3;
    const FILES: usize = 2;
    const BLOCKS: usize = 96;
    for seed in 0..100u64 {
        let mode = CrashMode::ALL[seed as usize % 3];
        let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let fs = Arc::new(
            Fs::mount(
                dev.clone(),
                MountOptions {
                    cp_interval: None,
                    gc_interval: None,
                    inode_cache_max,
                    flushers: if widen { 2 } else { 1 },
                    dirty_cap_bytes: if widen {
                        256 << 10
                    } else {
                        MountOptions::default().dirty_cap_bytes
                    },
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let name = |k: usize| format!("t{}f{}", k / FILES, k % FILES);
        let inos = common::files_of_ones(&fs, THREADS * FILES, BLOCKS, name);
        fs.sync().unwrap();
        if widen {
            common::widen_races(&fs, seed);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        sim.cut_at(sim.ops() + rng.random_range(5..600), rng.random_range(0..4));
        let results = common::threads_until_cut(&fs, &inos, BLOCKS, THREADS, (400, 8), seed);
        reliefs += fs.stats().cap_reliefs;
        let fs = Arc::try_unwrap(fs).ok().expect("threads are done");
        let (img, fs) = remount_after_cut(&sim, fs, mode, seed);
        for (t, per_thread) in results.iter().enumerate() {
            for (f, h) in per_thread.iter().enumerate() {
                let name = format!("t{t}f{f}");
                let ino = fs.lookup(ROOT_INO, name.as_bytes()).unwrap().ino;
                common::assert_blocks_hold_history(
                    &fs,
                    ino,
                    h,
                    &format!("seed {seed} {mode:?}: {name}"),
                );
            }
        }
        unmount_clean(fs, &img, mode, seed);
    }
    reliefs
}
