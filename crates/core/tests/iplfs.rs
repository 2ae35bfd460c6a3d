//! `gc=none` (IPLFS) on the emulated SSD with the interval-mapping FTL: an infinite,
//! never-reused space, no SIT/SSA, the discard map, the discard log and its re-issue.
//! Every test ends with fsck, and checks what the device maps against what is live.

use flashlog_core::*;
use flashlog_dev::BlockDevice;
use flashlog_format::sb::REGION_BLOCKS;
use flashlog_ssd::SsdDevice;
use std::sync::Arc;

mod common;

const CAP: u64 = 256 << 20;

fn interval(cap: u64) -> Arc<SsdDevice> {
    common::emulated_ssd("interval", cap)
}

/// `gc=none` has no cleaner thread; `gc_interval` set keeps its discard dispatcher (without
/// it only the space path issues discards, as in the crash simulator).
fn opts() -> MountOptions {
    MountOptions {
        gc: "none".parse().unwrap(),
        cp_interval: None,
        ..MountOptions::default()
    }
}

fn fsck_clean(dev: &dyn BlockDevice) -> fsck::FsckReport {
    let r = fsck::fsck(dev).unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.findings);
    r
}

/// Blocks the device maps in the main area (regions 1..): every mapped block less the
/// metadata of region 0 (which always holds a tag, so a mapped one reads non-zero).
fn mapped_in_main(ssd: &SsdDevice) -> u64 {
    let all = ssd
        .ftl_stats()
        .interval
        .expect("interval stats")
        .valid_entries;
    let sb = flashlog_core::checkpoint::read_superblock(ssd).unwrap();
    let mut b = vec![0u8; 4096];
    let mut meta = 0;
    for a in 0..sb.geo.ssa_addr {
        ssd.read(a, &mut b).unwrap();
        if b.iter().any(|&x| x != 0) {
            meta += 1;
        }
    }
    all - meta
}

/// Wait (30 s at most) until `done` holds, polling every 10 ms; false if it never did. The
/// discard dispatcher issues 16 commands every 50 ms when its thread runs, which a loaded
/// machine may delay well past a few rounds.
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

#[test]
fn mkfs_lays_out_regions_without_sit_or_ssa_and_statfs_is_the_capacity() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let sb = flashlog_core::checkpoint::read_superblock(&*ssd).unwrap();
    let g = &sb.geo;
    assert!(g.infinite);
    assert_eq!(
        (g.sit_blocks, g.ssa_blocks, g.main_addr),
        (0, 0, REGION_BLOCKS)
    );
    let cap_blocks = ssd.capabilities().capacity_blocks;
    // Less the metadata (packs sized for the worst discard log) and 20 reserved segments.
    assert!(g.user_blocks < cap_blocks && g.user_blocks > cap_blocks * 3 / 4);
    // Finite policies are refused on this device, and gc=none on a finite one.
    let err = Fs::mount(ssd.clone(), MountOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("gc=none"), "{err}");
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let st = fs.statfs();
    assert_eq!(st.blocks, g.user_blocks);
    let f = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &pattern(1, 1 << 20)).unwrap();
    fs.fsync(f, false).unwrap();
    assert!(fs.statfs().blocks_free <= st.blocks_free - 256);
    fs.unmount().unwrap();
    let r = fsck_clean(&*ssd);
    // Data and nodes live in their heads' regions, behind the heads.
    let live: Vec<_> = r
        .live_intervals
        .iter()
        .filter(|v| v.live_blocks > 0)
        .collect();
    assert!(live.len() >= 2, "{:?}", r.live_intervals);
    for v in &r.live_intervals {
        assert_eq!(v.region_start, (v.head as u64 + 1) * REGION_BLOCKS);
        if let (Some(a), Some(z)) = (v.first_live, v.last_live) {
            assert!(v.region_start <= a && a <= z && z < v.head_at);
        }
    }
}

#[test]
fn overwrites_are_discarded_after_the_checkpoint_and_addresses_never_reused() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let mut highest = 0u64;
    for round in 0..6u64 {
        // 8 MiB rewritten in place: each round kills the previous round's blocks.
        fs.write(f, 0, &pattern(round, 8 << 20)).unwrap();
        fs.fsync(f, false).unwrap();
        fs.sync().unwrap();
        let r_heads: u64 = fs.stats().live_blocks;
        assert!(r_heads >= 2048, "{r_heads}");
        // The dispatcher (50 ms, 16 commands) catches up.
        eventually(|| fs.stats().discards_queued == 0);
        let s = fs.stats();
        assert_eq!(s.discards_queued, 0, "round {round}");
        let top = ssd
            .ftl_stats()
            .interval
            .unwrap()
            .intervals
            .iter()
            .map(|i| i.head)
            .max()
            .unwrap();
        assert!(top >= highest, "a head went back: {top:#x} < {highest:#x}");
        highest = top;
    }
    let s = fs.stats();
    assert!(s.discarded_blocks >= 5 * 2048, "{}", s.discarded_blocks);
    let live = s.live_blocks;
    assert_eq!(
        mapped_in_main(&ssd),
        live,
        "dead blocks the device still maps"
    );
    let mut buf = vec![0u8; 8 << 20];
    fs.read(f, 0, &mut buf).unwrap();
    assert!(buf == pattern(5, 8 << 20));
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

/// A clean unmount issues the discards its final checkpoint made safe and leaves a pack
/// whose discard log is empty: the unmounted volume's device maps only live blocks (they
/// waited for the next mount before).
#[test]
fn a_clean_unmount_leaves_no_dead_block_mapped() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &pattern(1, 4 << 20)).unwrap();
    fs.fsync(f, false).unwrap();
    // Overwritten and unmounted at once: these blocks die in the final checkpoint.
    fs.write(f, 0, &pattern(2, 4 << 20)).unwrap();
    fs.unmount().unwrap();
    let r = fsck_clean(&*ssd);
    assert_eq!(
        mapped_in_main(&ssd),
        r.data_blocks + r.node_blocks,
        "dead blocks the device maps after a clean unmount"
    );
    let sb = flashlog_core::checkpoint::read_superblock(&*ssd).unwrap();
    let ck = flashlog_core::checkpoint::read_checkpoint(&*ssd, &sb.geo).unwrap();
    assert!(
        ck.discard_log.is_empty(),
        "the last pack still lists discards"
    );
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    fs.read(f, 0, &mut buf).unwrap();
    assert!(buf == pattern(2, 4 << 20));
    fs.unmount().unwrap();
    let r = fsck_clean(&*ssd);
    assert_eq!(mapped_in_main(&ssd), r.data_blocks + r.node_blocks);
}

#[test]
fn enospc_when_live_data_reaches_the_capacity_and_space_returns_after_delete() {
    let ssd = interval(96 << 20);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let user = fs.statfs().blocks;
    let chunk = pattern(7, 1 << 20);
    let mut written = 0u64;
    let mut files = Vec::new();
    'fill: for i in 0.. {
        let f = match fs.create(ROOT_INO, format!("f{i}").as_bytes(), 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("{e}"),
        };
        files.push(f);
        for k in 0..4u64 {
            match fs.write(f, k << 20, &chunk) {
                Ok(_) => written += 1 << 20,
                Err(Error::NoSpace) => break 'fill,
                Err(e) => panic!("{e}"),
            }
        }
    }
    let blocks = written / 4096;
    assert!(
        blocks > user * 85 / 100 && blocks <= user,
        "ENOSPC after {blocks} of {user} user blocks"
    );
    assert_eq!(fs.stats().space_overcommit_blocks, 0);
    // Delete half, and the same amount fits again (the device got the discards).
    for (i, _) in files.iter().enumerate().step_by(2) {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    let f = fs.create(ROOT_INO, b"again", 0o644, 0, 0).unwrap().ino;
    for k in 0..(blocks / 256 / 2 - 8) {
        fs.write(f, k << 20, &chunk).unwrap();
    }
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

#[test]
fn crash_keeps_fsynced_bytes_and_leaves_no_dead_block_mapped() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(1, 4 << 20)).unwrap();
    fs.sync().unwrap();
    // After the checkpoint: an overwrite (dead blocks in the map, never logged), an
    // fsync'd file, and unsynced data written to the device.
    fs.write(a, 0, &pattern(2, 2 << 20)).unwrap();
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    fs.write(b, 0, &pattern(3, 1 << 20)).unwrap();
    fs.fsync(b, false).unwrap();
    let c = fs.create(ROOT_INO, b"c", 0o644, 0, 0).unwrap().ino;
    fs.write(c, 0, &pattern(4, 3 << 20)).unwrap();
    let _ = c; // never fsync'd: its blocks are dead after the cut
    fs.abandon();
    ssd.power_cycle();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let b = fs.lookup(ROOT_INO, b"b").unwrap().ino;
    let mut buf = vec![0u8; 1 << 20];
    fs.read(b, 0, &mut buf).unwrap();
    assert!(buf == pattern(3, 1 << 20), "fsync'd bytes lost");
    // Everything dead (the overwritten half of `a`'s first version was never dead in the
    // checkpoint, the residue after the heads is) is discarded by the recovery checkpoint.
    fs.sync().unwrap();
    let live = fs.stats().live_blocks;
    eventually(|| mapped_in_main(&ssd) == live);
    assert_eq!(
        mapped_in_main(&ssd),
        live,
        "dead blocks the device still maps"
    );
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

#[test]
fn the_discard_log_survives_a_crash_and_mount_reissues_it() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &pattern(1, 4 << 20)).unwrap();
    fs.sync().unwrap();
    fs.write(f, 0, &pattern(2, 4 << 20)).unwrap();
    // This checkpoint logs the 1024 dead blocks; the crash comes before the dispatcher
    // (first round 50 ms later) issues them all.
    fs.sync().unwrap();
    fs.abandon();
    ssd.power_cycle();
    let r = fsck_clean(&*ssd);
    assert!(r.discard_log_blocks >= 1024, "{}", r.discard_log_blocks);
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    assert!(fs.stats().discard_log_reissued_blocks >= 1024);
    let live = fs.stats().live_blocks;
    assert_eq!(
        mapped_in_main(&ssd),
        live,
        "dead blocks the device still maps"
    );
    let mut buf = vec![0u8; 4 << 20];
    fs.read(f, 0, &mut buf).unwrap();
    assert!(buf == pattern(2, 4 << 20));
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

/// A writer that finds the device's capacity short while discards a durable checkpoint
/// already made safe wait in the queue issues them itself: it neither waits for the
/// dispatcher's 50 ms rounds of 16 commands nor checkpoints (its overwrites leave dead
/// blocks in the map, so the old foreground path checkpointed first). The queue is
/// thousands of one-block runs (every other block of a file overwritten), which the
/// dispatcher alone would take seconds to issue.
#[test]
fn a_writer_short_of_capacity_issues_queued_discards_without_a_checkpoint() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let user = fs.statfs().blocks;
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let a_blocks = user * 4 / 10;
    let write_all = |seed: u64| {
        for k in (0..a_blocks).step_by(256) {
            let n = 256.min(a_blocks - k) as usize;
            fs.write(f, k * 4096, &pattern(seed + k, n * 4096)).unwrap();
        }
    };
    write_all(0);
    fs.sync().unwrap();
    // Every other block overwritten: 20 % of the capacity dies, as one-block runs.
    let blk = pattern(99, 4096);
    for k in (0..a_blocks).step_by(2) {
        fs.write(f, k * 4096, &blk).unwrap();
    }
    fs.sync().unwrap();
    let before = fs.stats();
    assert!(
        before.discards_queued > 1000,
        "the checkpoint queued the one-block runs: {}",
        before.discards_queued
    );
    // Now overwrite the whole file (40 % of the capacity): more than is free above the
    // space target, less than that plus what the queue gives back.
    let t0 = std::time::Instant::now();
    write_all(1000);
    let took = t0.elapsed();
    eprintln!("the overwrite took {took:?}");
    let after = fs.stats();
    assert_eq!(
        after.checkpoints, before.checkpoints,
        "a checkpoint ran although queued discards covered the writes"
    );
    assert!(
        after.discarded_blocks - before.discarded_blocks >= user / 10,
        "the queue was issued: {} blocks",
        after.discarded_blocks - before.discarded_blocks
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "the writes waited for the dispatcher: {:?}",
        t0.elapsed()
    );
    let mut buf = vec![0u8; 4096];
    fs.read(f, 4096 * 256, &mut buf).unwrap();
    assert!(buf == pattern(1256, 4096)[..]);
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

/// A cut before the first checkpoint of a mount whose newest checkpoint is a clean one
/// (mkfs's, or an unmount's): the blocks written since still count as "before the cut".
/// Without the mount's own checkpoint (found by the crash simulator, `flashlog-sim none
/// --seed 2 --cut 3`), the remount took the clean flag at its word: it neither moved the
/// heads past what was written nor discarded it (dead blocks left mapped), and, where
/// roll-forward recovered an fsync'd file, the residue discard did not know the adopted
/// blocks (fsync'd data discarded).
#[test]
fn a_cut_before_the_first_checkpoint_after_a_clean_mount_loses_nothing_and_leaks_nothing() {
    for clean_unmount_first in [false, true] {
        let ssd = interval(CAP);
        Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
        if clean_unmount_first {
            let fs = Fs::mount(ssd.clone(), opts()).unwrap();
            let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
            fs.write(a, 0, &pattern(1, 1 << 20)).unwrap();
            fs.unmount().unwrap();
        }
        let fs = Fs::mount(ssd.clone(), opts()).unwrap();
        // Unsynced data (dead after the cut), then an fsync'd file (roll-forward's).
        let u = fs.create(ROOT_INO, b"u", 0o644, 0, 0).unwrap().ino;
        fs.write(u, 0, &pattern(2, 2 << 20)).unwrap();
        let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
        fs.write(b, 0, &pattern(3, 1 << 20)).unwrap();
        fs.fsync(b, false).unwrap();
        fs.abandon();
        ssd.power_cycle();
        let fs = Fs::mount(ssd.clone(), opts()).unwrap();
        let b = fs.lookup(ROOT_INO, b"b").unwrap().ino;
        let mut buf = vec![0u8; 1 << 20];
        fs.read(b, 0, &mut buf).unwrap();
        assert!(
            buf == pattern(3, 1 << 20),
            "fsync'd bytes lost (clean unmount first: {clean_unmount_first})"
        );
        fs.sync().unwrap();
        let live = fs.stats().live_blocks;
        eventually(|| mapped_in_main(&ssd) == live);
        assert_eq!(
            mapped_in_main(&ssd),
            live,
            "dead blocks the device still maps (clean unmount first: {clean_unmount_first})"
        );
        fs.unmount().unwrap();
        fsck_clean(&*ssd);
    }
}

/// `gc=none` checkpoints every few ms near full, and each checkpoint writes back, with
/// every operation excluded, whatever is dirty: the flusher starts at a sixteenth of the
/// dirty cap there (half elsewhere), so that it writes ahead of the checkpoints. Dirtying
/// an eighth of the cap must wake it (without the lower threshold nothing is written back
/// until a checkpoint, and the wait below runs out).
#[test]
fn the_flusher_writes_ahead_of_none_checkpoints() {
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let cap = fs.inner().dirty_cap_pages();
    assert!(cap >= 64, "{cap}");
    let f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let len = (cap / 8 * 4096) as usize;
    fs.write(f, 0, &pattern(7, len)).unwrap();
    let t0 = std::time::Instant::now();
    while fs.writeback_stats().background_pages == 0 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{} dirty pages of a cap of {cap}: the flusher did not start",
            cap / 8
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut buf = vec![0u8; len];
    fs.read(f, 0, &mut buf).unwrap();
    assert!(buf == pattern(7, len));
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

/// Power cuts while 3 threads overwrite and fsync their own files on a `gc=none` volume
/// about 80 % full: free capacity runs short every few MiB, so the discard dispatcher
/// checkpoints and issues the dead blocks again and again beside the writers, their
/// fsyncs and the flusher's 2 lanes (512 KiB dirty cap), those checkpoints' tails
/// (`MountOptions::cp_tail`) running beside them too (and on odd seeds a 5 ms checkpoint
/// timer's), with the race windows widened
/// (`common::widen_races`). After the cut (the SSD keeps what it accepted): fsck is clean,
/// every block holds its last fsync'd byte or one written since, and after a clean unmount
/// the device maps exactly the live blocks (a discard that raced a write would show as a
/// lost byte or a leaked block).
#[test]
fn multithreaded_power_cuts_near_full_keep_fsynced_bytes_and_leak_nothing() {
    use rand::{Rng, SeedableRng};
    let (mut discarded, mut tails) = (0, 0);
    for seed in 0..6u64 {
        let ssd = interval(96 << 20);
        let dev = Arc::new(common::Cut::new(ssd.clone()));
        // Odd seeds add the checkpoint timer (every 5 ms), whose tails run beside too.
        let timer = MountOptions {
            cp_interval: (seed % 2 == 1).then_some(std::time::Duration::from_millis(5)),
            ..opts()
        };
        let (fs, inos, blocks) = common::cut_race_volume(dev.clone(), timer, 80, seed);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        dev.arm(rng.random_range(200..6000));
        let results =
            common::threads_until_cut(&fs, &inos, blocks, common::CUT_THREADS, (2500, 16), seed);
        dev.cut.store(true, std::sync::atomic::Ordering::Release);
        discarded += fs.stats().discarded_blocks;
        tails += fs.stats().cp_tails_beside;
        // The clean unmount at its end issues every discard the recovery left (no waiting
        // for the dispatcher's pace): then the device maps exactly what fsck finds live.
        let what = format!("seed {seed}");
        let r = common::remount_after_ssd_cut(fs, &ssd, opts(), &inos, &results, &what);
        assert_eq!(
            mapped_in_main(&ssd),
            r.data_blocks + r.node_blocks,
            "seed {seed}: dead blocks the device still maps"
        );
    }
    assert!(discarded > 0, "no discard was issued before any cut");
    // The writers and fsyncs ran beside checkpoints' tails (`MountOptions::cp_tail`).
    assert!(tails > 0, "no checkpoint's tail ran beside the writers");
    eprintln!("{discarded} blocks discarded before the cuts, {tails} tails beside writers");
}

/// Install a test hook that stops the first thread to reach test point `point` once `armed`
/// is set (it disarms itself) until the returned sender releases it; the receiver hears
/// when that thread arrived.
fn hold_first_at(
    fs: &Fs,
    point: &'static str,
    armed: Arc<std::sync::atomic::AtomicBool>,
) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
    let (arrived, reached) = std::sync::mpsc::channel::<()>();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let (arrived, wait_go) = (
        parking_lot::Mutex::new(arrived),
        parking_lot::Mutex::new(wait_go),
    );
    fs.set_test_hook(Some(Arc::new(move |what| {
        if what == point && armed.swap(false, std::sync::atomic::Ordering::AcqRel) {
            let _ = arrived.lock().send(());
            let _ = wait_go.lock().recv();
        }
    })));
    (reached, go)
}

/// A room-making checkpoint's tail runs beside operations (`MountOptions::cp_tail`,
/// docs/DESIGN.md "The checkpoint's tail beside operations"). The test hook holds one at
/// `checkpoint:tail`: its snapshot is done and the op lock released, its pack not yet
/// written. Meanwhile another thread creates, writes and fsyncs a new file `b`. The create
/// and the write must return (they run beside the tail). The fsync's nodes carry the new
/// checkpoint's tag, which roll-forward from the old pack does not walk, so the fsync must
/// not return before that pack is durable. The power is then cut with the tail still held.
/// An fsync that returned must find its bytes after the remount: without the wait in
/// `Fs::fsync` it returned and `b` was gone ("no such file").
#[test]
fn an_fsync_beside_a_checkpoints_tail_returns_only_once_its_pack_is_durable() {
    use std::sync::mpsc;
    use std::time::Duration;
    let ssd = interval(CAP);
    let dev = Arc::new(common::Cut::new(ssd.clone()));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(1, 1 << 20)).unwrap();
    fs.fsync(a, false).unwrap();
    // Dirty pages for the snapshot to write back, and dead blocks for it to log.
    fs.write(a, 0, &pattern(2, 1 << 20)).unwrap();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (reached, go) = hold_first_at(&fs, "checkpoint:tail", armed);
    let cp = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.inner().checkpoint_beside_ops())
    };
    reached
        .recv_timeout(Duration::from_secs(20))
        .expect("the checkpoint never reached its tail");
    let (wrote, written) = mpsc::channel::<()>();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0)?.ino;
            fs.write(b, 0, &pattern(3, 64 << 10))?;
            let _ = wrote.send(());
            fs.fsync(b, false)
        })
    };
    written
        .recv_timeout(Duration::from_secs(20))
        .expect("a create and a write did not run beside the tail");
    std::thread::sleep(Duration::from_millis(200));
    let returned_in_tail = writer.is_finished();
    dev.cut.store(true, std::sync::atomic::Ordering::Release);
    go.send(()).unwrap();
    assert!(
        cp.join().unwrap().is_err(),
        "the tail wrote its pack past the cut"
    );
    let synced = writer.join().unwrap().is_ok();
    fs.set_test_hook(None);
    let fs = Arc::try_unwrap(fs).ok().expect("threads are done");
    fs.abandon();
    ssd.power_cycle();
    fsck_clean(&*ssd);
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    if synced {
        let b = fs
            .lookup(ROOT_INO, b"b")
            .unwrap_or_else(|e| panic!("fsync'd b returned (in the tail: {returned_in_tail}): {e}"))
            .ino;
        let mut buf = vec![0u8; 64 << 10];
        fs.read(b, 0, &mut buf).unwrap();
        assert!(buf == pattern(3, 64 << 10), "fsync'd bytes of b lost");
    }
    assert!(
        !returned_in_tail,
        "the fsync returned before the pack it needs was durable"
    );
    let mut buf = vec![0u8; 1 << 20];
    fs.read(a, 0, &mut buf).unwrap();
    assert!(
        buf == pattern(1, 1 << 20) || buf == pattern(2, 1 << 20),
        "a holds neither its fsync'd bytes nor the later ones"
    );
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
}

/// One tail at a time, and waiting for it does not exclude operations: while the test hook
/// holds a checkpoint's tail, a `sync` waits for that tail before it takes the op lock, so
/// a create and a write on another thread still return meanwhile (without the wait before
/// the op lock, `sync` took the lock and then waited inside its checkpoint, and the create
/// waited for both). Once the tail is released, `sync` writes its own pack; after an
/// unmount, fsck is clean and both files read back.
#[test]
fn a_sync_beside_a_checkpoints_tail_waits_for_it_without_excluding_operations() {
    use std::sync::mpsc;
    use std::time::Duration;
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(ssd.clone(), opts()).unwrap());
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(1, 1 << 20)).unwrap();
    fs.sync().unwrap();
    fs.write(a, 0, &pattern(2, 1 << 20)).unwrap();
    // Only the first tail is held (the sync's own runs through).
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (reached, go) = hold_first_at(&fs, "checkpoint:tail", armed);
    let before = fs.stats().checkpoints;
    let cp = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.inner().checkpoint_beside_ops())
    };
    reached
        .recv_timeout(Duration::from_secs(20))
        .expect("the checkpoint never reached its tail");
    let sync = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync())
    };
    std::thread::sleep(Duration::from_millis(50));
    let (done, ran) = mpsc::channel::<Ino>();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
            fs.write(b, 0, &pattern(3, 64 << 10)).unwrap();
            let _ = done.send(b);
        })
    };
    // Returns at once unless it waits for the held tail (then never, until `go`).
    let b = ran.recv_timeout(Duration::from_secs(20));
    assert!(
        !sync.is_finished(),
        "sync returned while the tail before it was held"
    );
    go.send(()).unwrap();
    let b = b.expect("a create and a write waited for a sync that waited for a tail");
    // Joined, not only heard from: its clone of `fs` is dropped after the send (under
    // load the unwrap below found it still alive, CI 2026-11-27).
    writer.join().unwrap();
    cp.join().unwrap().unwrap();
    sync.join().unwrap().unwrap();
    fs.set_test_hook(None);
    assert_eq!(
        fs.stats().checkpoints,
        before + 2,
        "the held checkpoint and the sync's"
    );
    let fs = Arc::try_unwrap(fs).ok().expect("threads are done");
    fs.unmount().unwrap();
    fsck_clean(&*ssd);
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    fs.read(a, 0, &mut buf).unwrap();
    assert!(buf == pattern(2, 1 << 20), "a lost its last bytes");
    let mut buf = vec![0u8; 64 << 10];
    fs.read(b, 0, &mut buf).unwrap();
    assert!(buf == pattern(3, 64 << 10), "b lost its bytes");
    fs.unmount().unwrap();
}

/// Every command not yet issued is in the newest durable pack's discard log, including a
/// batch a dispatcher or writer has taken from the queue and is issuing
/// (`discard::DiscardQueue` in flight). The test hook holds the discard dispatcher at
/// `discards:taken` with a batch of dead blocks in hand; a `sync` writes a pack
/// meanwhile; then the power is cut before the batch reaches the device. The mount must
/// issue those blocks from the pack's log: after it and a clean unmount the device maps
/// exactly the live blocks. Before in-flight batches were logged, the pack left them out
/// and they stayed mapped for good ("dead blocks the device still maps": 516 mapped, 258
/// live); so did a first fix that logged them only when the queue or the map held
/// something too (its shortcut for an empty log looked at the queue alone).
#[test]
fn a_discard_batch_in_flight_at_a_checkpoint_is_in_its_log() {
    use std::time::Duration;
    let ssd = interval(CAP);
    let dev = Arc::new(common::Cut::new(ssd.clone()));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (held, go) = hold_first_at(&fs, "discards:taken", armed.clone());
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, &pattern(1, 1 << 20)).unwrap();
    fs.sync().unwrap();
    // 256 dead blocks, queued for discard once this sync's pack is durable; the
    // dispatcher takes them within its 50 ms round and stops at the hook.
    armed.store(true, std::sync::atomic::Ordering::Release);
    fs.write(a, 0, &pattern(2, 1 << 20)).unwrap();
    fs.sync().unwrap();
    held.recv_timeout(Duration::from_secs(20))
        .expect("the dispatcher never took the batch");
    assert_eq!(
        fs.inner().seg.discards.lock().in_flight(),
        1,
        "the batch is tracked while it is issued"
    );
    // A pack written while the batch is in flight, with nothing else to log (the queue
    // is empty, nothing died since the last pack), then the cut before the batch is
    // issued.
    fs.sync().unwrap();
    dev.cut.store(true, std::sync::atomic::Ordering::Release);
    go.send(()).unwrap();
    fs.set_test_hook(None);
    let fs = Arc::try_unwrap(fs).ok().expect("no other owner");
    fs.abandon();
    ssd.power_cycle();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    fs.read(a, 0, &mut buf).unwrap();
    assert!(buf == pattern(2, 1 << 20), "a lost its synced bytes");
    fs.unmount().unwrap();
    let r = fsck_clean(&*ssd);
    assert_eq!(
        mapped_in_main(&ssd),
        r.data_blocks + r.node_blocks,
        "dead blocks the device still maps"
    );
}

/// The NAT entry of `nid` (current copy).
fn nat_addr(dev: &dyn BlockDevice, nid: u32) -> u64 {
    use flashlog_format::meta::{nat_pos, NatBlock};
    let sb = checkpoint::read_superblock(dev).unwrap();
    let cp = checkpoint::read_checkpoint(dev, &sb.geo).unwrap();
    let (i, slot) = nat_pos(nid);
    let copy = flashlog_format::codec::test_bit(&cp.nat_bitmap, i as usize) as u8;
    let mut b = [0u8; 4096];
    dev.read(sb.geo.nat_block_addr(i, copy), &mut b).unwrap();
    NatBlock::decode(&b, i).unwrap().entries[slot].addr
}

/// fsck of an infinite volume (its reached blocks in a sparse map by segment, the main
/// area being 2^64 blocks) still finds corrupt references: `/b`'s block 0 given `/a`'s
/// block 1 (used twice, both owners named), its block 1 a block ahead of the data head.
#[test]
fn corrupt_references_on_an_infinite_volume_are_found() {
    use flashlog_format::node;
    let ssd = interval(CAP);
    Fs::mkfs(ssd.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(ssd.clone(), opts()).unwrap();
    let a = fs.write_file("/a", &pattern(1, 4 * 4096)).unwrap();
    let b = fs.write_file("/b", &pattern(2, 2 * 4096)).unwrap();
    fs.unmount().unwrap();
    let r = fsck_clean(&*ssd);
    let head = r
        .live_intervals
        .iter()
        .filter(|v| v.live_blocks > 0)
        .map(|v| v.head_at)
        .max()
        .unwrap();
    let read = |nid: u32| {
        let mut x = [0u8; 4096];
        ssd.read(nat_addr(&*ssd, nid), &mut x).unwrap();
        x
    };
    let shared = node::inode_addr(&read(a), 1);
    let mut x = read(b);
    node::set_inode_addr(&mut x, 0, shared);
    node::set_inode_addr(&mut x, 1, head + 10);
    flashlog_format::codec::seal(&mut x, flashlog_format::tag::NODE);
    ssd.write(nat_addr(&*ssd, b), &x).unwrap();
    let r = fsck::fsck(&*ssd).unwrap();
    let msgs: Vec<String> = r.findings.iter().map(|f| f.to_string()).collect();
    let twice = msgs
        .iter()
        .find(|m| m.contains(&format!("block {shared} used twice")))
        .unwrap_or_else(|| panic!("no double use reported: {msgs:#?}"));
    assert!(
        twice.contains(&format!("Data {{ nid: {a}, slot: 1 }}"))
            && twice.contains(&format!("Data {{ nid: {b}, slot: 0 }}")),
        "{twice}"
    );
    assert!(
        msgs.iter().any(|m| m.contains(&format!(
            "block {:#x} is reachable but at or ahead of log head",
            head + 10
        ))),
        "{msgs:#?}"
    );
}
