//! Operations on different files share no volume-wide lock on their common path (issue 12:
//! on 16 cores, 16 writers of `gc=scale` and `gc=device` ran 7-20x slower than 8, each
//! operation taking one mutex of the volume: scale's deferred-free list, device's dead-block
//! map). Each test holds such a lock on the test thread and has another thread run the
//! operations; they must finish while it is held. Without the fixes they wait for it and the
//! test fails at its deadline. Also the orphan rules of the unlink that `gc=scale` defers.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_ssd::{SsdConfig, SsdDevice, StoreKind};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// How long the operations may take with the lock held (they take milliseconds).
const DEADLINE: Duration = Duration::from_secs(20);

fn opts(gc: &str) -> MountOptions {
    MountOptions {
        gc: gc.parse().unwrap(),
        cp_interval: None,
        gc_interval: None,
        ..MountOptions::default()
    }
}

fn ram(blocks: u64) -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(blocks));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    dev
}

/// A formatted emulated SSD of `bytes` with FTL `ftl`.
fn ssd(ftl: &str, bytes: u64) -> Arc<dyn BlockDevice> {
    let mut c = SsdConfig::preset("970pro-like")
        .unwrap()
        .with_capacity(bytes)
        .unwrap();
    c.set("ftl", ftl).unwrap();
    c.store = StoreKind::Ram;
    let dev: Arc<dyn BlockDevice> = Arc::new(SsdDevice::new(c).unwrap());
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    dev
}

/// A formatted 512 MiB emulated SSD with the coupled-GC FTL (what `gc=device` mounts on).
fn coupled_ssd() -> Arc<dyn BlockDevice> {
    ssd("coupled", 512 << 20)
}

fn fsck_clean(dev: &dyn BlockDevice) {
    let r = flashlog_core::fsck::fsck(dev).unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.findings);
}

/// No orphan is left, every unlinked inode was freed (its nid is free again after the
/// checkpoint: `files_free` is back to `free0`), and the unmounted volume is fsck-clean.
fn every_inode_back(fs: Arc<Fs>, dev: &Arc<dyn BlockDevice>, free0: u64) {
    assert!(fs.inner().orphans.lock().is_empty());
    fs.sync().unwrap();
    assert_eq!(fs.statfs().files_free, free0);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&**dev);
}

/// Run `work` on another thread and wait for it at most `DEADLINE`; panics if it did not
/// finish (the thread is left waiting on whatever the caller holds).
fn finishes<F: FnOnce() + Send + 'static>(what: &str, work: F) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        work();
        let _ = tx.send(());
    });
    rx.recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("{what} waited for a volume-wide lock"));
}

/// On another thread, overwrite the first bytes of `ino` (`/hot`) 10,000 times, then create
/// `creates` files; they must finish while the caller holds a lock (`finishes`).
fn hot_overwrites_finish(what: &str, fs: &Arc<Fs>, ino: Ino, creates: usize) {
    let f = fs.clone();
    finishes(what, move || {
        for i in 0..10_000u32 {
            f.write(ino, 0, &i.to_le_bytes()).unwrap();
        }
        for i in 0..creates {
            f.create(ROOT_INO, format!("c{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
    });
}

/// `/hot` holds the last overwrite of `hot_overwrites_finish`; unmounted, the volume is
/// fsck-clean.
fn hot_reads_back_clean(fs: Arc<Fs>, dev: &Arc<dyn BlockDevice>) {
    assert_eq!(&fs.read_file("/hot").unwrap()[..4], &9_999u32.to_le_bytes());
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&**dev);
}

/// `gc=scale`: writes, creates and unlinks of closed files take neither the orphan set (an
/// unlinked closed file is freed after the operation, not made an orphan first) nor any
/// list shared by all operations. The test holds the orphan set.
#[test]
fn scale_operations_do_not_wait_for_the_orphan_set() {
    let dev = ram(1 << 16);
    let fs = Arc::new(Fs::mount(dev.clone(), opts("scale")).unwrap());
    let free0 = fs.statfs().files_free;
    {
        let _held = fs.inner().orphans.lock();
        let f = fs.clone();
        finishes("scale create/write/unlink", move || {
            for i in 0..200 {
                let name = format!("f{i}");
                let a = f.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
                f.write(a.ino, 0, &[i as u8; 4096]).unwrap();
                f.write(a.ino, 0, &[!i as u8; 100]).unwrap();
                f.unlink(ROOT_INO, name.as_bytes()).unwrap();
            }
        });
    }
    every_inode_back(fs, &dev, free0);
}

/// `gc=device`: operations test whether a discard checkpoint is due by the dead-block map's
/// count, not under its lock. The test holds the map while another thread overwrites pages
/// in the page cache and creates files.
#[test]
fn device_operations_do_not_wait_for_the_dead_block_map() {
    let dev = coupled_ssd();
    let fs = Arc::new(Fs::mount(dev.clone(), opts("device")).unwrap());
    let a = fs.create(ROOT_INO, b"hot", 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, &[1; 4096]).unwrap();
    {
        let _held = fs.inner().seg.dead.lock();
        hot_overwrites_finish("device overwrite", &fs, a.ino, 50);
    }
    hot_reads_back_clean(fs, &dev);
}

/// `gc=none` near full, where free space always sits below twice the space target, so that
/// every write runs the policy's room check (`NoneCollector::space_low`): it asks whether
/// discard commands are queued by the queue's mirrored count, not under the queue's lock
/// (16 writers on 16 cores took that lock on every write). The test fills an interval-FTL
/// volume to that point, empties the queue, holds it, and has another thread overwrite a
/// page and create files.
#[test]
fn none_writes_near_full_do_not_wait_for_the_discard_queue() {
    let dev = ssd("interval", 256 << 20);
    let fs = Arc::new(Fs::mount(dev.clone(), opts("none")).unwrap());
    // Fill, a synced MiB at a time, until free sections are below twice the target (the
    // early target of `space_low`).
    let big = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let chunk = vec![7u8; 1 << 20];
    let inner = fs.inner().clone();
    let mut off = 0u64;
    while inner.seg.free_sections() >= 2 * inner.space_target() {
        fs.write(big.ino, off, &chunk).unwrap();
        fs.sync().unwrap();
        off += chunk.len() as u64;
        assert!(off < 256 << 20, "never got near the space target");
    }
    let hot = fs.create(ROOT_INO, b"hot", 0o644, 0, 0).unwrap();
    fs.write(hot.ino, 0, &[1; 4096]).unwrap();
    flashlog_core::gc_none::dispatch_all(&inner).unwrap();
    {
        let held = inner.seg.discards.lock();
        assert!(held.is_empty());
        assert!(inner.seg.free_sections() < 2 * inner.space_target());
        hot_overwrites_finish("none overwrite near full", &fs, hot.ino, 20);
    }
    hot_reads_back_clean(fs, &dev);
}

/// `gc=device`: a writer that finds a discard checkpoint due while another thread's
/// checkpoint pre-pass runs goes on writing: that pass is followed by its checkpoint,
/// which applies the upcalls and issues the discards. Before, it waited for the pass to
/// end (a whole pre-pass: ~80 ms in the 16-thread bench on 2 cores) and then checkpointed
/// again itself. The test holds the pre-pass, makes a section's worth of blocks die (a file
/// written, synced, overwritten and fsync'd) and has another thread write.
#[test]
fn device_discard_checkpoint_does_not_wait_for_a_running_prepass() {
    let dev = coupled_ssd();
    let fs = Arc::new(Fs::mount(dev.clone(), opts("device")).unwrap());
    let per_sec = flashlog_format::BLOCKS_PER_SEG * u64::from(fs.inner().sb.geo.segs_per_sec);
    let a = fs.create(ROOT_INO, b"big", 0o644, 0, 0).unwrap();
    let chunk = vec![0x11u8; 256 << 10];
    let blocks = per_sec + 256;
    for round in 0..2u8 {
        let data: Vec<u8> = chunk.iter().map(|b| b ^ round).collect();
        for off in (0..blocks * 4096).step_by(data.len()) {
            fs.write(a.ino, off, &data).unwrap();
        }
        fs.fsync(a.ino, false).unwrap();
        if round == 0 {
            fs.sync().unwrap();
        }
    }
    assert!(
        fs.inner().seg.dead_pending() >= per_sec,
        "a discard checkpoint is due: {} dead blocks wait, a section is {per_sec}",
        fs.inner().seg.dead_pending()
    );
    {
        let _running = fs.inner().prepass.lock();
        let f = fs.clone();
        finishes("a write with a discard checkpoint due", move || {
            f.write(a.ino, 0, &[7; 4096]).unwrap();
        });
    }
    fs.sync().unwrap();
    assert_eq!(fs.read_file("/big").unwrap()[..4096], [7; 4096]);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&*dev);
}

/// The unlink that `gc=scale` defers: a file unlinked while open stays readable, becomes an
/// orphan, and is freed at its last close; one unlinked while open and never closed is
/// freed by the next mount after a power cut. Both end fsck-clean with every inode back.
#[test]
fn scale_unlink_of_an_open_file_makes_an_orphan() {
    for cut in [false, true] {
        let dev = ram(1 << 16);
        let fs = Fs::mount(dev.clone(), opts("scale")).unwrap();
        let free0 = fs.statfs().files_free;
        let a = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        fs.write(a.ino, 0, &[7; 3 * 4096]).unwrap();
        fs.open(a.ino).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert!(fs.inner().orphans.lock().contains(&a.ino), "cut {cut}");
        let mut buf = vec![0; 3 * 4096];
        assert_eq!(fs.read(a.ino, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == 7));
        fs.sync().unwrap(); // the orphan reaches the checkpoint
        let fs = if cut {
            fs.abandon();
            Fs::mount(dev.clone(), opts("scale")).unwrap()
        } else {
            fs.release(a.ino).unwrap();
            assert!(fs.inner().orphans.lock().is_empty());
            fs
        };
        fs.sync().unwrap();
        assert_eq!(fs.statfs().files_free, free0, "cut {cut}");
        fs.unmount().unwrap();
        fsck_clean(&*dev);
    }
}

/// `gc=scale`: unlinks of open files race their closes on other threads; whichever comes
/// last frees the inode, none is freed twice or left behind (the unlink decides "orphan"
/// under the cell lock, as the close decides "free").
#[test]
fn scale_unlinks_race_closes() {
    let dev = ram(1 << 16);
    let fs = Arc::new(Fs::mount(dev.clone(), opts("scale")).unwrap());
    let free0 = fs.statfs().files_free;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    let name = format!("t{t}.{i}");
                    let a = fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0).unwrap();
                    fs.write(a.ino, 0, &[t as u8; 8192]).unwrap();
                    fs.open(a.ino).unwrap();
                    let closer = {
                        let fs = fs.clone();
                        std::thread::spawn(move || fs.release(a.ino).unwrap())
                    };
                    fs.unlink(ROOT_INO, name.as_bytes()).unwrap();
                    closer.join().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    every_inode_back(fs, &dev, free0);
}

/// A formatted RAM volume mounted with an inode cache of `cache` cells (`f2fs`).
fn small_cache_mount(cache: usize) -> (Arc<dyn BlockDevice>, MountOptions, Arc<Fs>) {
    let dev = ram(1 << 18);
    let o = MountOptions {
        inode_cache_max: cache,
        ..opts("f2fs")
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
    (dev, o, fs)
}

/// `threads` threads each make a directory `d{t}`, meet, create `files` files in it and
/// count themselves in `done`.
fn create_in_parallel(fs: &Arc<Fs>, threads: usize, files: usize, done: &Arc<AtomicUsize>) {
    let barrier = Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (fs, barrier, done) = (fs.clone(), barrier.clone(), done.clone());
            std::thread::spawn(move || {
                let d = fs
                    .mkdir(ROOT_INO, format!("d{t}").as_bytes(), 0o755, 0, 0)
                    .unwrap();
                barrier.wait();
                for i in 0..files {
                    fs.create(d.ino, format!("f{i}").as_bytes(), 0o644, 0, 0)
                        .unwrap();
                }
                done.fetch_add(1, SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Unmount, fsck, remount: every directory `d{t}` holds its `files` files.
fn every_file_created(
    fs: Arc<Fs>,
    dev: &Arc<dyn BlockDevice>,
    o: MountOptions,
    threads: usize,
    files: usize,
) {
    fs.set_test_hook(None);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&**dev);
    let fs = Fs::mount(dev.clone(), o).unwrap();
    for t in 0..threads {
        let d = fs.lookup(ROOT_INO, format!("d{t}").as_bytes()).unwrap();
        assert_eq!(
            fs.readdir(d.ino, 0, usize::MAX).unwrap().len(),
            files + 2,
            "d{t}"
        );
    }
    fs.unmount().unwrap();
}

/// The inode-cache and dirty-node caps: when creators on many threads cross one, one of
/// them relieves it (`Fs::relieve_caps`: writeback and eviction, no checkpoint) and the
/// others go on; they used to checkpoint one after the other (each waiting for the
/// previous one's pre-pass), 16 checkpoints where one was due: fxmark MWCL made 192 a
/// second on 16 cores. The hook holds each pre-pass 20 ms, the window in which the other
/// threads cross the cap (16 cores open it without help).
///
/// The count depends on scheduling: on 2 cores the code as it is makes 1 relief (quiet
/// machine), and once made 8 in 50 runs of the whole file beside 3 busy loops (a relief
/// that could not evict cells creators held left the cache over the cap sooner), where
/// one relief per crossing thread (every creator that found the cap crossed waiting for
/// the relief lock and relieving again, checked) makes 6-8 in every run. So the run is
/// repeated, on a fresh volume, up to 3 times until it is within the bound: the
/// one-per-thread code fails all 3, a loaded machine's outlier passes the next.
#[test]
fn a_crossed_cap_makes_one_relief_not_one_per_thread() {
    const THREADS: usize = 8;
    const FILES: usize = 600;
    const CACHE: usize = 2048;
    // Each relief evicts down to half the cache: one is due per CACHE / 2 creates.
    let due = (THREADS * FILES / (CACHE / 2)) as u64;
    let mut runs = Vec::new();
    for attempt in 0..3 {
        let (dev, o, fs) = small_cache_mount(CACHE);
        fs.set_test_hook(Some(Arc::new(|at: &str| {
            if at == "checkpoint:prepass" {
                std::thread::sleep(Duration::from_millis(20));
            }
        })));
        let s0 = fs.stats();
        create_in_parallel(&fs, THREADS, FILES, &Arc::new(AtomicUsize::new(0)));
        let s = fs.stats();
        let (reliefs, cps) = (
            s.cap_reliefs - s0.cap_reliefs,
            s.checkpoints - s0.checkpoints,
        );
        eprintln!(
            "run {attempt}: {reliefs} cap reliefs and {cps} checkpoints for {} creates ({due} due)",
            THREADS * FILES
        );
        assert!(reliefs >= 1, "no relief");
        assert!(cps <= reliefs, "{cps} checkpoints for {reliefs} reliefs");
        every_file_created(fs, &dev, o, THREADS, FILES);
        runs.push(reliefs);
        if reliefs <= due + 1 {
            return;
        }
    }
    panic!("reliefs per run {runs:?}, {due} due in each");
}

/// The creators that find a cap crossed while another thread's cap relief runs its
/// pre-pass take cells from it and write their nodes (Max's per-core work): one pre-pass
/// thread writes inodes at one core's pace while every other core makes them. The hook
/// holds each pre-pass round after it published its cells until a helper has written one
/// (in this round or an earlier one: creators waiting at twice the cap help every ms, and
/// may take a round's cells before the hook reads the count), every other creator is
/// done, or 10 s passed (without helpers nobody writes them and the test fails), so the
/// interleaving forced is "the pass waits, the creators write".
#[test]
fn creators_over_the_cap_write_the_prepass_nodes() {
    const THREADS: usize = 6;
    const FILES: usize = 800;
    const CACHE: usize = 1024;
    let (dev, o, fs) = small_cache_mount(CACHE);
    let weak = Arc::downgrade(&fs);
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    fs.set_test_hook(Some(Arc::new(move |at: &str| {
        if at != "checkpoint:prepass-published" {
            return;
        }
        let Some(fs) = weak.upgrade() else { return };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // The pass runs in a creator: wait for the others.
        while fs.stats().cp_helped_nodes == 0
            && d.load(SeqCst) + 1 < THREADS
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    })));
    create_in_parallel(&fs, THREADS, FILES, &done);
    let s = fs.stats();
    eprintln!(
        "{} checkpoints; pre-pass nodes {}, {} of them by helpers",
        s.checkpoints, s.cp_prewrite_nodes, s.cp_helped_nodes
    );
    assert!(s.cp_helped_nodes > 0, "no creator helped a pre-pass");
    every_file_created(fs, &dev, o, THREADS, FILES);
}

/// A load of an evicted inode races a load, change, write-back and eviction of the same
/// inode by another thread: the cap relief evicts under the shared op lock, so a reader's
/// load may have read the inode block before the other thread's change was written, and
/// must not put that older inode back in the table. The hook stops the loader right after
/// its read (`cell:read`) while the main thread chmods the file, writes its nodes back
/// (the relief's pre-pass) and evicts it; then the loader inserts. Without the table's
/// removal mark the loader's stale cell went in and the chmod was lost (mode 0644).
#[test]
fn a_load_racing_an_eviction_does_not_bring_back_an_older_inode() {
    let dev = ram(1 << 16);
    let fs = Arc::new(Fs::mount(dev, opts("f2fs")).unwrap());
    let ino = fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    let evict = |fs: &Fs| {
        let epoch = fs.inner().cp_version.load(SeqCst);
        fs.inner().cells.evict(0, epoch);
        assert!(fs.inner().cells.get(ino).is_none(), "not evicted");
    };
    evict(&fs);
    let (read_tx, read_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let hook_chans = std::sync::Mutex::new(Some((read_tx, go_rx)));
    fs.set_test_hook(Some(Arc::new(move |at: &str| {
        if at != "cell:read" || std::thread::current().name() != Some("loader") {
            return;
        }
        // Only the loader's first read waits.
        if let Some((read, go)) = hook_chans.lock().unwrap().take() {
            read.send(()).unwrap();
            go.recv().unwrap();
        }
    })));
    let loader = {
        let fs = fs.clone();
        std::thread::Builder::new()
            .name("loader".into())
            .spawn(move || fs.getattr(ino).unwrap().mode)
            .unwrap()
    };
    read_rx.recv().unwrap();
    let mode = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    fs.setattr(ino, &mode).unwrap();
    fs.inner().writeback_nodes_for_caps().unwrap();
    evict(&fs);
    go_tx.send(()).unwrap();
    let seen = loader.join().unwrap();
    fs.set_test_hook(None);
    assert_eq!(seen & 0o7777, 0o600, "the loader saw the older inode");
    assert_eq!(
        fs.getattr(ino).unwrap().mode & 0o7777,
        0o600,
        "the chmod was lost"
    );
}
