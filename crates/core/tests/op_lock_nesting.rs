//! The op lock (lock.rs) is not reentrant: a thread that holds its shared side and takes
//! it again waits at the gate of a checkpoint that started in between, while the
//! checkpoint waits for the first hold. `gc=scale`'s background cleaning did exactly that
//! (`background_gc` in fs.rs holds it around `collector.background`, and
//! `ScaleCollector::background` took it again after choosing its victim): found in review
//! on 2026-11-27, a hang of the whole volume, since every later operation then waits at
//! the gate. No earlier test ran `gc=scale`'s background thread beside checkpoints.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VOLUME: u64 = 64 << 20;

fn opts(gc: GcPolicy, gc_interval: Option<Duration>) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval,
        gc_idle: Duration::ZERO,
        gc,
        gc_workers: 2,
        ..Default::default()
    }
}

/// A volume with garbage for background cleaning (a victim it would pick): one file over
/// most of the user blocks, overwritten at random without a checkpoint.
/// Made with no background thread; then mounted again with `gc_interval`.
fn garbage_volume(gc: GcPolicy, gc_interval: Option<Duration>) -> (Fs, Ino, u64) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOLUME / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts(gc, None)).unwrap();
    let user = fs.statfs().blocks;
    let blocks = user * 85 / 100;
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    let chunk = vec![7u8; 256 * 4096];
    let mut off = 0;
    while off < blocks {
        let n = (blocks - off).min(256);
        fs.write(ino, off * 4096, &chunk[..(n * 4096) as usize])
            .unwrap();
        off += n;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let b = [9u8; 4096];
    let mut writes = 0;
    while !(writes >= blocks && has_victim(&fs)) {
        assert!(
            writes < 20 * user,
            "no garbage for background cleaning after {writes} overwrites ({:?})",
            fs.stats()
        );
        for _ in 0..64 {
            fs.write(ino, rng.random_range(0..blocks) * 4096, &b)
                .unwrap();
            writes += 1;
        }
    }
    fs.unmount().unwrap();
    let fs = Fs::mount(dev, opts(gc, gc_interval)).unwrap();
    assert!(has_victim(&fs), "the garbage left at the remount");
    (fs, ino, blocks)
}

/// A section background cleaning would pick (the claim is given back).
fn has_victim(fs: &Fs) -> bool {
    let inner = fs.inner();
    let v = flashlog_core::gc::select_victim(
        inner,
        flashlog_core::gc::Cost::CostBenefit,
        flashlog_core::gc::BG_VICTIM_SEARCH,
    );
    if let Some(sec) = v {
        inner.seg.victims.clear(sec);
    }
    v.is_some()
}

/// Run `background_gc`'s body (fs.rs: the shared op lock, then
/// `collector.background`) on a thread, with a `sync` started between the op lock and
/// the collector. True if the collector returned within 20 s.
fn background_gc_with_a_checkpoint_in_between(gc: GcPolicy) -> bool {
    let (fs, _, _) = garbage_volume(gc, None);
    let fs = Arc::new(fs);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let gcer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let inner = fs.inner();
            let _g = inner.oplock.op();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            inner.collector.background(inner)
        })
    };
    held_rx.recv().unwrap();
    let syncer = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.sync())
    };
    // The checkpoint now holds the gate and waits for the shard of the op lock held above.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !syncer.is_finished(),
        "the checkpoint did not wait for the running operation"
    );
    go_tx.send(()).unwrap();
    let t0 = Instant::now();
    while !gcer.is_finished() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !gcer.is_finished() {
        // Deadlocked: the threads never end, and the volume cannot be unmounted.
        std::mem::forget(fs);
        return false;
    }
    let cleaned = gcer.join().unwrap().unwrap();
    syncer.join().unwrap().unwrap();
    eprintln!("{gc:?}: background cleaned {cleaned:?} section(s), then the sync ran");
    true
}

/// Control: `f2fs`'s background collector runs under `background_gc`'s hold alone.
#[test]
fn f2fs_background_gc_lets_a_checkpoint_in() {
    assert!(background_gc_with_a_checkpoint_in_between(GcPolicy::F2fs));
}

/// The interleaving, forced: the gc thread holds the shared side (`background_gc`), a
/// sync's checkpoint takes the gate and waits for that shard, then
/// `ScaleCollector::background` runs: it must not take the op lock again.
#[test]
fn scale_background_gc_deadlocks_with_a_checkpoint_that_starts_between_its_op_locks() {
    assert!(
        background_gc_with_a_checkpoint_in_between(GcPolicy::Scale),
        "deadlock: ScaleCollector::background took the op lock again under background_gc's \
         hold while a checkpoint held the gate waiting for that hold's shard"
    );
}

/// The same with the real `flashlog-gc` thread (1 ms period, no idle wait): a writer keeps
/// garbage coming while another thread syncs in a loop for 8 s; a stall of 4 s with neither
/// making progress is the deadlock (it came after 0.1-0.2 s, in 3 of 3 runs).
#[test]
fn scale_background_gc_thread_and_syncs_make_progress() {
    let (fs, ino, blocks) = garbage_volume(GcPolicy::Scale, Some(Duration::from_millis(1)));
    let fs = Arc::new(fs);
    let stop = Arc::new(AtomicBool::new(false));
    let syncs = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let syncer = {
        let (fs, stop, syncs) = (fs.clone(), stop.clone(), syncs.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                fs.sync().unwrap();
                syncs.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let writer = {
        let (fs, stop, writes) = (fs.clone(), stop.clone(), writes.clone());
        std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(2);
            let b = [3u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                fs.write(ino, rng.random_range(0..blocks) * 4096, &b)
                    .unwrap();
                writes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let t0 = Instant::now();
    let mut last = (0, 0, Instant::now());
    while t0.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(100));
        let now = (
            syncs.load(Ordering::Relaxed),
            writes.load(Ordering::Relaxed),
        );
        if now != (last.0, last.1) {
            last = (now.0, now.1, Instant::now());
        } else if last.2.elapsed() > Duration::from_secs(4) {
            let bg = fs.stats().gc_bg_runs;
            std::mem::forget(fs);
            panic!(
                "no sync and no write for 4 s after {:.1} s ({} syncs, {} writes, {bg} \
                 background gc runs): deadlock",
                t0.elapsed().as_secs_f64() - 4.0,
                now.0,
                now.1
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
    writer.join().unwrap();
    eprintln!(
        "8 s: {} syncs, {} writes, {} background gc runs, no deadlock",
        syncs.load(Ordering::Relaxed),
        writes.load(Ordering::Relaxed),
        fs.stats().gc_bg_runs
    );
}
