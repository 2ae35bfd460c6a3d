//! The `scale` collectors' commit (scale.rs `commit_dnode_run`): the copies of one direct
//! node's run of blocks are written with no file lock held, between two short holds of the
//! file cell (check and protect; remap). These tests stop a collector in that window (test
//! hook point `scale:copied`: the copies are written, the node still maps the victim's
//! blocks) and run, on another thread, an operation that changes the same slots: a
//! truncate that frees the direct node, or a writer overwriting the same blocks and
//! fsyncing. The order the commit promises: the operation waits on the pages' SVP
//! protection until the remap is done, then runs on the remapped node; nothing the
//! collector wrote is lost or leaked either way.
//!
//! How each fails with a broken ordering (checked by hand on the code, see docs/TESTING.md):
//! - pages released before the copies are mapped (the SVP protection not held across the
//!   window): the operation completes inside the window, and the `done_in_window` assert
//!   fails;
//! - and no check at the remap as well: the truncate's freed blocks come back as the
//!   collector's copies (fsck: "marked valid but unreachable"), and the overwrite is
//!   undone by the old bytes (the model check fails, before and after a crash).

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const VOLUME: u64 = 64 << 20;
/// File blocks: the inode's own slots (456) and six direct nodes (507 each).
const BLOCKS: u64 = 3000;
const ADDRS_PER_INODE: u64 = flashlog_format::node::ADDRS_PER_INODE as u64;
/// How long the collector stays in the window with the conflicting operation started.
const WINDOW: Duration = Duration::from_millis(150);

fn block(b: u64, v: u32) -> Vec<u8> {
    let mut d = vec![(b as u8) ^ (v as u8); 4096];
    d[..8].copy_from_slice(&b.to_le_bytes());
    d[8..12].copy_from_slice(&v.to_le_bytes());
    d
}

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc: GcPolicy::Scale,
        gc_workers: 1,
        ..Default::default()
    }
}

/// A fresh RAM volume mounted in LFS mode (no SSR: victims are whole sections), with
/// the mount options used.
fn lfs_volume() -> (Arc<dyn BlockDevice>, Arc<Fs>, MountOptions) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOLUME / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        alloc_mode: AllocMode::Lfs,
        ..opts()
    };
    let fs = Arc::new(Fs::mount(dev.clone(), o.clone()).unwrap());
    (dev, fs, o)
}

/// Clean with one foreground call (`gc(1)`) while this thread holds the cell of `ino`, for
/// up to 5 s or until a block moved; then release the cell and let the call end. Returns
/// the blocks moved while the cell was held.
fn moved_while_cell_held(fs: &Arc<Fs>, ino: Ino) -> u64 {
    let moved0 = fs.stats().gc_moved_blocks;
    let cell = fs.inner().cell(ino).unwrap();
    let held = cell.lock();
    let cleaner = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.gc(1).unwrap())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while fs.stats().gc_moved_blocks == moved0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let moved = fs.stats().gc_moved_blocks - moved0;
    drop(held);
    cleaner.join().unwrap();
    moved
}

/// `check` the mounted volume, unmount it, remount it with `o` and `check` again, then
/// unmount and fsck.
fn check_remount_fsck(
    fs: Arc<Fs>,
    dev: &Arc<dyn BlockDevice>,
    o: MountOptions,
    check: impl Fn(&Fs),
) {
    check(&fs);
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let fs = Fs::mount(dev.clone(), o).unwrap();
    check(&fs);
    fs.unmount().unwrap();
    let r = fsck(&**dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// A volume with one file whose odd blocks (version 0) sit in half-valid sections, the
/// even ones rewritten (version 1): every old section is a cheap victim holding blocks of
/// the inode's slots and of both direct nodes.
fn setup() -> (Arc<dyn BlockDevice>, Arc<Fs>, Ino) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOLUME / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    for b in 0..BLOCKS {
        fs.write(ino, b * 4096, &block(b, 0)).unwrap();
    }
    for b in (0..BLOCKS).step_by(2) {
        fs.write(ino, b * 4096, &block(b, 1)).unwrap();
    }
    fs.sync().unwrap();
    (dev, fs, ino)
}

/// What happened in one clean with an operation started in the commit window.
struct Window {
    /// The collector's protected pages of the file when it reached `scale:copied`.
    pages: Vec<u64>,
    /// The operation had completed when the collector left the window.
    done_in_window: bool,
    /// Blocks the clean moved.
    moved: u64,
}

/// The first time a collector reaches `scale:copied` with pages of a direct node of `ino`
/// in its run (as protected at `scale:protected`, after its check), start
/// `op(fs, protected pages)` on another thread and keep the collector there for `WINDOW`;
/// then let it remap. Joins the operation.
fn clean_with_op_in_window(
    fs: &Arc<Fs>,
    ino: Ino,
    op: impl FnOnce(&Fs, &[u64]) + Send + 'static,
) -> Window {
    let fired: Arc<parking_lot::Mutex<Option<Vec<u64>>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let done_in_window = Arc::new(AtomicBool::new(false));
    let handle: Arc<parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let op = parking_lot::Mutex::new(Some(op));
    {
        let (fired, done, done_in_window, handle) = (
            fired.clone(),
            done.clone(),
            done_in_window.clone(),
            handle.clone(),
        );
        let weak = Arc::downgrade(fs);
        let run: parking_lot::Mutex<Vec<u64>> = Default::default();
        fs.set_test_hook(Some(Arc::new(move |what| {
            let Some(fs) = weak.upgrade() else { return };
            match what {
                // The run's pages, as the collector protected them after its check.
                "scale:protected" => *run.lock() = fs.inner().svp.pages_of(ino),
                "scale:copied" => {}
                _ => return,
            }
            let pages = std::mem::take(&mut *run.lock());
            if what != "scale:copied" {
                *run.lock() = pages;
                return;
            }
            // A run of a direct node (not of the inode's own slots), so that a truncate can
            // free the node itself.
            if pages.first().is_none_or(|&p| p < ADDRS_PER_INODE) {
                return;
            }
            let Some(op) = op.lock().take() else { return };
            *fired.lock() = Some(pages.clone());
            let done_op = done.clone();
            *handle.lock() = Some(std::thread::spawn(move || {
                op(&fs, &pages);
                done_op.store(true, Ordering::SeqCst);
            }));
            std::thread::sleep(WINDOW);
            done_in_window.store(done.load(Ordering::SeqCst), Ordering::SeqCst);
        })));
    }
    let before = fs.stats().gc_moved_blocks;
    fs.gc(1).unwrap();
    fs.set_test_hook(None);
    let t = handle
        .lock()
        .take()
        .expect("a collector reached the window");
    t.join().unwrap();
    let pages = fired.lock().take().expect("the hook ran");
    Window {
        pages,
        done_in_window: done_in_window.load(Ordering::SeqCst),
        moved: fs.stats().gc_moved_blocks - before,
    }
}

/// The first file block the direct node (or inode) that maps block `idx` maps.
fn node_start(idx: u64) -> u64 {
    let (i, a) = (
        ADDRS_PER_INODE,
        flashlog_format::node::ADDRS_PER_BLOCK as u64,
    );
    if idx < i {
        0
    } else {
        i + (idx - i) / a * a
    }
}

/// A collector's copies are written, its direct node not yet remapped; a truncate to 0
/// frees that node (and every other). The truncate waits for the remap, then frees the
/// copies: the file is empty, no block leaks (fsck), before and after a remount.
#[test]
fn collector_commit_vs_truncate_of_that_dnode() {
    let (dev, fs, ino) = setup();
    let size = Arc::new(AtomicU64::new(u64::MAX));
    let size2 = size.clone();
    let w = clean_with_op_in_window(&fs, ino, move |fs, pages| {
        // Free the node that maps the collector's run, and everything after it.
        let to = node_start(pages[0]) * 4096;
        size2.store(to, Ordering::SeqCst);
        fs.setattr(
            ino,
            &SetAttr {
                size: Some(to),
                ..Default::default()
            },
        )
        .unwrap();
    });
    assert!(
        !w.done_in_window,
        "the truncate ran while the collector's copies of {} pages ({:?}..={:?}) were unmapped",
        w.pages.len(),
        w.pages.first(),
        w.pages.last()
    );
    assert!(w.moved > 0, "the collector moved nothing");
    let size = size.load(Ordering::SeqCst);
    assert_eq!(fs.getattr(ino).unwrap().size, size);
    let mut buf = vec![0u8; 4096];
    for b in 0..size / 4096 {
        fs.read(ino, b * 4096, &mut buf).unwrap();
        assert!(buf == block(b, (b % 2 == 0) as u32), "block {b}");
    }
    assert_eq!(fs.read(ino, size, &mut buf).unwrap(), 0);
    // A block written past the end after the truncate reads back, and the hole before it
    // reads zeros (no stale mapping is left in the freed range).
    let end = BLOCKS + 5;
    fs.write(ino, end * 4096, &block(end, 9)).unwrap();
    fs.read(ino, end * 4096, &mut buf).unwrap();
    assert_eq!(buf, block(end, 9));
    for b in size / 4096..end {
        fs.read(ino, b * 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0), "block {b} of the hole");
    }
    fs.sync().unwrap();
    let fs = Arc::try_unwrap(fs).ok().expect("one owner");
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, (end + 1) * 4096);
    fs.read(ino, end * 4096, &mut buf).unwrap();
    assert_eq!(buf, block(end, 9));
    fs.unmount().unwrap();
    assert!(fsck(&*dev).unwrap().is_clean());
}

/// A collector's copies (of version-0 blocks) are written, not yet mapped; a writer
/// overwrites every block of the file with version 2 and fsyncs. The writer's blocks win:
/// every block reads version 2, after the clean, after a crash (fsync'd) and after a
/// clean remount, with fsck clean.
#[test]
fn collector_commit_vs_writer_overwriting_the_same_slots() {
    let (dev, fs, ino) = setup();
    let w = clean_with_op_in_window(&fs, ino, move |fs, pages| {
        for &b in pages {
            fs.write(ino, b * 4096, &block(b, 2)).unwrap();
        }
        fs.fsync(ino, false).unwrap();
    });
    assert!(
        !w.done_in_window,
        "the overwrite of {} pages ({:?}..={:?}) finished while the collector's copies were \
         unmapped",
        w.pages.len(),
        w.pages.first(),
        w.pages.last()
    );
    assert!(w.moved > 0, "the collector moved nothing");
    let overwritten: std::collections::HashSet<u64> = w.pages.iter().copied().collect();
    let version = |b: u64| {
        if overwritten.contains(&b) {
            2
        } else {
            (b % 2 == 0) as u32
        }
    };
    let verify = |fs: &Fs| {
        let mut buf = vec![0u8; 4096];
        for b in 0..BLOCKS {
            fs.read(ino, b * 4096, &mut buf).unwrap();
            assert!(
                buf == block(b, version(b)),
                "block {b} is not version {}",
                version(b)
            );
        }
    };
    verify(&fs);
    // Clean everything that is left, then a crash: the fsync'd state comes back.
    fs.gc(u64::MAX / 2).unwrap();
    verify(&fs);
    fs.fsync(ino, false).unwrap();
    let fs = Arc::try_unwrap(fs).ok().expect("one owner");
    fs.abandon();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    verify(&fs);
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// A collector does not stop at a file whose cell is held while other files' runs in its
/// victim are free to move: it commits those first and the held file's runs at the end
/// (on 16 cores the collectors queued on one file cell after another, 2.6 s per 8 s run).
/// Two files' blocks interleave in the victim segment (written a pair at a time, each
/// pair made durable by a checkpoint), half of each overwritten; the test holds the
/// first file's cell and cleans with one worker (whose walk starts at the first file): the
/// second file's blocks must move while the cell is held. Without the rule the collector
/// waits on the cell with nothing moved, and the test fails after 5 s.
#[test]
fn a_collector_moves_other_files_while_one_files_cell_is_held() {
    const PAIRS: u64 = 256;
    let (dev, fs, o) = lfs_volume();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    assert!(a < b, "the walk must reach a's runs first");
    for i in 0..PAIRS {
        fs.write(a, i * 4096, &block(i, 0)).unwrap();
        fs.sync().unwrap();
        fs.write(b, i * 4096, &block(i, 10)).unwrap();
        fs.sync().unwrap();
    }
    for i in (0..PAIRS).step_by(2) {
        fs.write(a, i * 4096, &block(i, 1)).unwrap();
        fs.write(b, i * 4096, &block(i, 11)).unwrap();
    }
    fs.sync().unwrap();
    let moved = moved_while_cell_held(&fs, a);
    assert!(moved > 0, "nothing moved while a's cell was held");
    let check = |fs: &Fs| {
        for i in 0..PAIRS {
            let v = u32::from(i % 2 == 0);
            let mut buf = vec![0u8; 4096];
            fs.read(a, i * 4096, &mut buf).unwrap();
            assert!(buf == block(i, v), "a block {i}");
            fs.read(b, i * 4096, &mut buf).unwrap();
            assert!(buf == block(i, 10 + v), "b block {i}");
        }
    };
    check_remount_fsck(fs, &dev, o, check);
}

/// The per-dnode commit (ScaleLFS §4.3): a collector checks and remaps the blocks a direct
/// node maps under that node's own lock, not the file's cell, so it moves a file's blocks
/// while another thread holds the file's cell (a writer, an fsync's write-back). One file
/// whose blocks all lie past the inode's own slots (two direct nodes), odd blocks left in
/// half-valid sections by overwriting the even ones; the test holds the file's cell and
/// cleans with one worker: blocks must move while the cell is held, and after the cell is
/// released, a remount and fsck, every block reads back as last written. With the cell as
/// the commit lock (git a872b92) the collector waits on the cell with nothing moved, and
/// the test fails after 5 s.
#[test]
fn a_collector_moves_a_files_direct_node_blocks_while_its_cell_is_held() {
    const N: u64 = 1000;
    let first = ADDRS_PER_INODE;
    let (dev, fs, o) = lfs_volume();
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    for b in first..first + N {
        fs.write(ino, b * 4096, &block(b, 0)).unwrap();
    }
    fs.sync().unwrap();
    for b in (first..first + N).step_by(2) {
        fs.write(ino, b * 4096, &block(b, 1)).unwrap();
    }
    fs.sync().unwrap();
    let moved = moved_while_cell_held(&fs, ino);
    assert!(moved > 0, "nothing moved while the file's cell was held");
    let check = |fs: &Fs| {
        let mut buf = vec![0u8; 4096];
        for b in first..first + N {
            fs.read(ino, b * 4096, &mut buf).unwrap();
            assert!(buf == block(b, u32::from(b % 2 == first % 2)), "block {b}");
        }
    };
    check_remount_fsck(fs, &dev, o, check);
}

/// Node blocks too: a collector moving a victim's node blocks passes over those whose
/// file's cell is held (a node's move writes it into its file's node chain, which the cell
/// orders) and moves the others first, the held ones at the end. Two files' nodes
/// interleave in the node log (a block of each written and synced 200 times), a third
/// file's syncs then close those sections, so the cheapest victims hold both files' last
/// nodes; the test holds the first file's cell and cleans with one worker: blocks must
/// move while it is held. Without the rule the worker waits on the cell at the first
/// node of that file, and the test fails after 5 s when that node comes first.
#[test]
fn a_collector_moves_other_files_nodes_while_one_files_cell_is_held() {
    let (dev, fs, o) = lfs_volume();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", 0o644, 0, 0).unwrap().ino;
    let c = fs.create(ROOT_INO, b"c", 0o644, 0, 0).unwrap().ino;
    let first = ADDRS_PER_INODE;
    for i in 0..200 {
        fs.write(a, (first + i) * 4096, &block(i, 0)).unwrap();
        fs.write(b, (first + i) * 4096, &block(i, 10)).unwrap();
        fs.sync().unwrap();
    }
    for i in 0..1200 {
        fs.write(c, (i % 8) * 4096, &block(i, 20)).unwrap();
        fs.sync().unwrap();
    }
    let moved = moved_while_cell_held(&fs, a);
    assert!(moved > 0, "nothing moved while a's cell was held");
    let check = |fs: &Fs| {
        let mut buf = vec![0u8; 4096];
        for i in 0..200 {
            fs.read(a, (first + i) * 4096, &mut buf).unwrap();
            assert!(buf == block(i, 0), "a block {i}");
            fs.read(b, (first + i) * 4096, &mut buf).unwrap();
            assert!(buf == block(i, 10), "b block {i}");
        }
    };
    check_remount_fsck(fs, &dev, o, check);
}

/// A RAM device that holds the armed thread's first flush until released, and cuts the
/// power (every later write, discard and flush fails) right after that thread's second.
struct FsyncGate {
    ram: Arc<RamDevice>,
    cut: AtomicBool,
    armed: parking_lot::Mutex<Option<std::thread::ThreadId>>,
    flushes: AtomicU64,
    held: AtomicBool,
    release: AtomicBool,
}

impl FsyncGate {
    fn powered(&self) -> flashlog_dev::DevResult<()> {
        if self.cut.load(Ordering::SeqCst) {
            Err(flashlog_dev::DevError::PowerCut)
        } else {
            Ok(())
        }
    }
}

impl BlockDevice for FsyncGate {
    fn capabilities(&self) -> &flashlog_dev::Capabilities {
        self.ram.capabilities()
    }
    fn read(&self, a: u64, b: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.ram.read(a, b)
    }
    fn write(&self, a: u64, b: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.powered()?;
        self.ram.write(a, b)
    }
    fn discard(&self, a: u64, n: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.powered()?;
        self.ram.discard(a, n)
    }
    fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.powered()?;
        let mine = *self.armed.lock() == Some(std::thread::current().id());
        let n = if mine {
            self.flushes.fetch_add(1, Ordering::SeqCst)
        } else {
            u64::MAX
        };
        if n == 0 {
            self.held.store(true, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !self.release.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let r = self.ram.flush();
        if n == 1 {
            self.cut.store(true, Ordering::SeqCst);
        }
        r
    }
}

/// fsync makes the file's data durable (every log head submitted, then a flush) and, with
/// its cell still held, writes the file's nodes with the FSYNC mark. A collector that
/// remaps under a direct node's own lock could remap in between, to copies still in its
/// log buffer: the FSYNC'd node then pointed at blocks never written, and after a power
/// cut roll-forward adopted it (found in review, 2026-11-27: 43 of 1,000 blocks read
/// wrong, the copies of the collector's unsubmitted last buffer). The test holds fsync at
/// its barrier's flush, runs one collector until it wrote copies of the file's blocks
/// there (`scale:copied`), lets fsync finish and cuts the power after its node flush:
/// every block must read back as written. Fails without `FsyncWindow`.
#[test]
fn a_collector_does_not_remap_into_an_fsync_between_its_barrier_and_its_nodes() {
    const N: u64 = 1000;
    let first = ADDRS_PER_INODE; // past the inode's own slots: direct nodes only
    let ram = Arc::new(RamDevice::new(VOLUME / 4096));
    let gate = Arc::new(FsyncGate {
        ram: ram.clone(),
        cut: AtomicBool::new(false),
        armed: parking_lot::Mutex::new(None),
        flushes: AtomicU64::new(0),
        held: AtomicBool::new(false),
        release: AtomicBool::new(false),
    });
    let dev: Arc<dyn BlockDevice> = gate.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        alloc_mode: AllocMode::Lfs,
        ..opts()
    };
    let fs = Arc::new(Fs::mount(dev, o.clone()).unwrap());
    let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    for b in first..first + N {
        fs.write(ino, b * 4096, &block(b, 0)).unwrap();
    }
    fs.sync().unwrap();
    // Two of three blocks rewritten: the old sections are cheap victims, and a third of a
    // section is not a multiple of the 64-block log buffer, so copies stay buffered.
    let version = |b: u64| u32::from((b - first) % 3 != 0);
    for b in (first..first + N).filter(|&b| version(b) == 1) {
        fs.write(ino, b * 4096, &block(b, 1)).unwrap();
    }
    fs.sync().unwrap();
    let extra = first + N; // something for fsync to write
    fs.write(ino, extra * 4096, &block(extra, 7)).unwrap();

    let copied_in_window = Arc::new(AtomicU64::new(0));
    {
        let (gate, copied) = (gate.clone(), copied_in_window.clone());
        fs.set_test_hook(Some(Arc::new(move |what| {
            if what == "scale:copied"
                && gate.held.load(Ordering::SeqCst)
                && !gate.release.load(Ordering::SeqCst)
            {
                copied.fetch_add(1, Ordering::SeqCst);
            }
        })));
    }
    let fsyncer = {
        let (fs, gate) = (fs.clone(), gate.clone());
        std::thread::spawn(move || {
            *gate.armed.lock() = Some(std::thread::current().id());
            fs.fsync(ino, false)
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gate.held.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < deadline, "fsync never flushed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // fsync holds the file's cell, its data barrier half done.
    let cleaner = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.gc(1))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while copied_in_window.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the collector wrote no copies while fsync was at its barrier"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(WINDOW); // time to remap, had it been allowed to
    gate.release.store(true, Ordering::SeqCst);
    fsyncer.join().unwrap().expect("fsync");
    let _ = cleaner.join().unwrap(); // fails at the cut, or finished before it
    fs.set_test_hook(None);
    assert!(gate.cut.load(Ordering::SeqCst), "power cut after fsync");
    Arc::into_inner(fs).unwrap().abandon();

    let dev: Arc<dyn BlockDevice> = ram;
    let fs = Fs::mount(dev.clone(), o).unwrap();
    let mut buf = vec![0u8; 4096];
    let bad: Vec<u64> = (first..first + N)
        .filter(|&b| fs.read(ino, b * 4096, &mut buf).is_err() || buf != block(b, version(b)))
        .collect();
    assert!(
        bad.is_empty(),
        "after fsync and a power cut {} of {N} blocks read wrong (first {:?})",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
    fs.read(ino, extra * 4096, &mut buf).unwrap();
    assert_eq!(buf, block(extra, 7), "the fsync'd block");
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}
