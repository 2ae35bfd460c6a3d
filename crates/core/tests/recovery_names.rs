//! Roll-forward of names (docs/DESIGN.md, "What fsync promises"): what a power cut leaves of
//! the names of fsync'd files.
//!
//! `later_fsync_wins_a_name_over_a_lower_inode_number`: two new files fsync'd one after the
//! other under the same name (the first unlinked in between, which only a checkpoint would
//! make durable). Roll-forward must give the name to the file fsync'd last, even when that
//! file has the lower inode number: the names are put back in the order of the fsync chain,
//! not in inode order. Two threads force the inode numbers: each thread allocates nids from
//! its own region of the nid space (`nat.rs` hints), so the thread whose region is higher
//! fsyncs first.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, SimDevice};
use std::cell::Cell;
use std::sync::mpsc;
use std::sync::Arc;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        ..Default::default()
    }
}

type Job<'a> = Box<dyn FnOnce() -> Ino + Send + 'a>;

/// A thread that runs jobs one at a time (so that each job runs on the same thread, and
/// allocates nids from that thread's region).
struct Worker<'a> {
    tx: mpsc::Sender<Job<'a>>,
    rx: mpsc::Receiver<Ino>,
}

impl<'a> Worker<'a> {
    fn spawn<'s>(s: &'s std::thread::Scope<'s, 'a>) -> Worker<'a> {
        let (tx, jobs) = mpsc::channel::<Job<'a>>();
        let (done, rx) = mpsc::channel();
        s.spawn(move || {
            for job in jobs {
                if done.send(job()).is_err() {
                    return;
                }
            }
        });
        Worker { tx, rx }
    }

    fn run(&self, job: impl FnOnce() -> Ino + Send + 'a) -> Ino {
        self.tx.send(Box::new(job)).expect("worker alive");
        self.rx.recv().expect("worker answered")
    }
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut v = vec![0u8; size];
    let mut off = 0;
    while off < size {
        let n = fs.read(ino, off as u64, &mut v[off..]).unwrap();
        assert!(n > 0);
        off += n;
    }
    v
}

#[test]
fn later_fsync_wins_a_name_over_a_lower_inode_number() {
    let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let mounted = Fs::mount(dev.clone(), opts()).unwrap();
    let fs = &mounted;
    let (first, second) = std::thread::scope(|s| {
        let w: Vec<Worker> = (0..2).map(|_| Worker::spawn(s)).collect();
        // Which thread allocates higher inode numbers?
        let probes: Vec<Ino> = w
            .iter()
            .enumerate()
            .map(|(i, w)| {
                w.run(move || {
                    fs.create(ROOT_INO, format!("probe{i}").as_bytes(), 0o644, 0, 0)
                        .unwrap()
                        .ino
                })
            })
            .collect();
        let (hi, lo) = if probes[0] > probes[1] {
            (&w[0], &w[1])
        } else {
            (&w[1], &w[0])
        };
        fs.sync().unwrap();
        // The higher-numbered file is created and fsync'd first, then unlinked...
        let first = hi.run(|| {
            let ino = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
            fs.write(ino, 0, b"first, then unlinked").unwrap();
            fs.fsync(ino, false).unwrap();
            fs.unlink(ROOT_INO, b"a").unwrap();
            ino
        });
        // ...and a lower-numbered file takes its name and is fsync'd last.
        let second = lo.run(|| {
            let ino = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
            fs.write(ino, 0, b"second, fsync'd last").unwrap();
            fs.fsync(ino, false).unwrap();
            ino
        });
        (first, second)
    });
    assert!(
        second < first,
        "the two threads share a nid region ({first}, {second}): the test cannot force the order"
    );
    assert_eq!(
        fs.stats().fsync_checkpoints,
        0,
        "both fsyncs must roll forward"
    );
    sim.cut_now();
    mounted.abandon();
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, 7));
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck before recovery: {r}");
        let fs = Fs::mount(img.clone(), opts()).unwrap();
        let a = fs.lookup(ROOT_INO, b"a").unwrap();
        assert_eq!(
            a.ino, second,
            "{mode:?}: the name went to ino {} ({first} was fsync'd first, then unlinked; {second} was fsync'd last)",
            a.ino
        );
        assert_eq!(read_all(&fs, a.ino), b"second, fsync'd last");
        assert_eq!(a.nlink, 1);
        assert!(
            fs.getattr(first).is_err(),
            "{mode:?}: the unlinked file {first} is still allocated without a name"
        );
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck after recovery: {r}");
    }
}

/// Crash right after `setup` (everything it fsync'd or synced is durable), remount under
/// every kill mode, check fsck before and after, and hand the recovered volume to `check`.
fn crash_and_check(setup: impl FnOnce(&Fs), check: impl Fn(&Fs, CrashMode)) {
    let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    setup(&fs);
    sim.cut_now();
    fs.abandon();
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, 11));
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck before recovery: {r}");
        let fs = Fs::mount(img.clone(), opts()).unwrap();
        check(&fs, mode);
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck after recovery: {r}");
    }
}

/// `mkdir a; sync; rmdir a; create a; fsync a`: the checkpoint still has the directory `a`,
/// which roll-forward cannot replace (it may have had entries at the checkpoint). Before the
/// fix the fsync rolled forward, recovery left the file without a name and fsck found an
/// unreachable inode.
#[test]
fn fsync_of_a_new_file_over_a_removed_directory_keeps_its_name() {
    let ino = Cell::new(0);
    crash_and_check(
        |fs| {
            let d = fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap().ino;
            fs.create(d, b"inside", 0o644, 0, 0).unwrap();
            fs.sync().unwrap();
            fs.unlink(d, b"inside").unwrap();
            fs.rmdir(ROOT_INO, b"a").unwrap();
            ino.set(fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino);
            fs.write(ino.get(), 0, b"file data").unwrap();
            fs.fsync(ino.get(), false).unwrap();
        },
        |fs, mode| {
            let a = fs.lookup(ROOT_INO, b"a").unwrap();
            assert_eq!(a.ino, ino.get(), "{mode:?}: a is not the fsync'd file");
            assert!(!a.is_dir());
            assert_eq!(read_all(fs, a.ino), b"file data");
        },
    );
}

/// `create a; write; sync; rename a b; create a; write; fsync(new a)`: the editor's
/// backup pattern. The old file must survive under one of its names (a or b) and the new
/// one must be durable under a. Before the fix roll-forward gave `a` to the new file over
/// the checkpointed entry, and the old file, renamed but not durably, lost its only name
/// and was freed.
#[test]
fn fsync_of_a_new_file_over_a_renamed_one_keeps_both() {
    let (old, new) = (Cell::new(0), Cell::new(0));
    crash_and_check(
        |fs| {
            old.set(fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino);
            fs.write(old.get(), 0, b"old version").unwrap();
            fs.sync().unwrap();
            fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())
                .unwrap();
            new.set(fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino);
            fs.write(new.get(), 0, b"new version").unwrap();
            fs.fsync(new.get(), false).unwrap();
        },
        |fs, mode| {
            let a = fs.lookup(ROOT_INO, b"a").unwrap();
            assert_eq!(a.ino, new.get(), "{mode:?}: a is not the fsync'd new file");
            assert_eq!(read_all(fs, new.get()), b"new version");
            let b = fs.lookup(ROOT_INO, b"b").unwrap();
            assert_eq!(b.ino, old.get(), "{mode:?}: the old file lost its name");
            assert_eq!(read_all(fs, old.get()), b"old version");
        },
    );
}

/// On the smallest volume mkfs accepts for several mlogs, a crash with anything to roll
/// forward must leave a mountable volume: roll-forward moves every log head (6 per mlog,
/// node heads with their next segment) to a fresh section while the old head sections stay
/// in use until the recovery checkpoint. mkfs reserves sections for both sets and the space
/// budget holds the recovery set out of every operation's reach. Before that, mount failed
/// with ENOSPC for 4 mlogs on 128 MiB (found by `flashlog-sim run --mlogs 4`, seed 31000).
#[test]
fn roll_forward_mounts_on_the_smallest_multi_mlog_volume() {
    for mlogs in [2u32, 4, 8] {
        let mut blocks = (64u64 << 20) / 4096;
        let sim = loop {
            let sim = Arc::new(SimDevice::new(blocks));
            let dev: Arc<dyn BlockDevice> = sim.clone();
            let o = MkfsOptions {
                mlogs,
                ..Default::default()
            };
            if Fs::mkfs(dev, &o).is_ok() {
                break sim;
            }
            blocks *= 2;
            assert!(blocks <= (1 << 30) / 4096, "mkfs refuses {mlogs} mlogs");
        };
        let dev: Arc<dyn BlockDevice> = sim.clone();
        let fs = Fs::mount(dev, opts()).unwrap();
        let ino = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &[7u8; 8192]).unwrap();
        fs.fsync(ino, false).unwrap();
        sim.cut_now();
        fs.abandon();
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(CrashMode::DropUnflushed, 1));
        let fs = Fs::mount(img.clone(), opts()).unwrap_or_else(|e| {
            panic!(
                "{mlogs} mlogs on {} MiB: mount after the crash: {e}",
                blocks >> 8
            )
        });
        assert_eq!(read_all(&fs, ino), vec![7u8; 8192]);
        fs.unmount().unwrap();
    }
}
