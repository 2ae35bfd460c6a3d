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
//!
//! Several mlogs (issue 12 item 3): roll-forward merges every mlog's chain by the node
//! version in each footer. The tests below the `multi_mlog_volume` helper pin files to
//! chosen mlogs (`mlog_shift` knob) so that the later fsync is on a chain walked first, and
//! cover the cases where two inodes' chains disagree about a name (unlink and re-create,
//! link then unlink, rename between directories on different mlogs), one file fsync'd on
//! two mlogs, and concurrent fsyncs on four mlogs with a power cut from another thread.

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
    check_every_mode(&sim, 11, check);
}

/// Remount the crash image of `sim` under every kill mode (images drawn with `seed`), check
/// fsck before and after, and hand the recovered volume to `check`.
fn check_every_mode(sim: &SimDevice, seed: u64, check: impl Fn(&Fs, CrashMode)) {
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
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

// ---- Several mlogs (issue 12 item 3, Max 4.4): roll-forward merges every mlog's chain by
// the node version every node write carries. These tests place each file on a chosen mlog
// with the `mlog_shift` test knob (mlog = (ino + shift) mod mlogs), so that the later fsync
// lands on a chain roll-forward walks *before* the earlier one's: ordering by chain (the
// behaviour before the version) gets each of them wrong.

/// A fresh volume with `mlogs` log partitions on the smallest size mkfs accepts.
fn multi_mlog_volume(mlogs: u32) -> Arc<SimDevice> {
    let mut blocks = (64u64 << 20) / 4096;
    loop {
        let sim = Arc::new(SimDevice::new(blocks));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        let o = MkfsOptions {
            mlogs,
            ..Default::default()
        };
        if Fs::mkfs(dev, &o).is_ok() {
            return sim;
        }
        blocks *= 2;
        assert!(blocks <= (1 << 30) / 4096, "mkfs refuses {mlogs} mlogs");
    }
}

/// Map `ino` to mlog `m` from now on (every inode moves with it; tests pin one file at a
/// time, right before the operations that write its nodes).
fn pin(fs: &Fs, ino: Ino, m: u32, mlogs: u32) {
    let shift = (m + mlogs - (ino % mlogs)) % mlogs;
    fs.inner()
        .mlog_shift
        .store(shift, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(fs.inner().mlog_of(ino) as u32, m);
}

/// [`crash_and_check`] on a volume with `mlogs` mlogs.
fn crash_and_check_mlogs(mlogs: u32, setup: impl FnOnce(&Fs), check: impl Fn(&Fs, CrashMode)) {
    let sim = multi_mlog_volume(mlogs);
    let dev: Arc<dyn BlockDevice> = sim.clone();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    setup(&fs);
    sim.cut_now();
    fs.abandon();
    check_every_mode(&sim, 13, check);
}

fn new_file(fs: &Fs, parent: Ino, name: &[u8], data: &[u8]) -> Ino {
    let ino = fs.create(parent, name, 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, data).unwrap();
    ino
}

/// `create a (X); fsync; unlink a; create a (Y); fsync; unlink a; create a (Z); fsync` with
/// X, Y, Z on mlogs walked in the reverse order (2, 1, 0 of 4 mlogs; 1, 0, 1 of 2): Z,
/// fsync'd last, keeps the name and X and Y are freed, under every kill mode.
#[test]
fn names_go_back_in_fsync_order_across_mlogs() {
    for mlogs in [2u32, 4] {
        let inos = std::cell::RefCell::new(Vec::new());
        crash_and_check_mlogs(
            mlogs,
            |fs| {
                fs.sync().unwrap();
                for (k, m) in [2u32, 1, 0].into_iter().enumerate() {
                    let m = if mlogs == 2 { (k as u32 + 1) % 2 } else { m };
                    let ino = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
                    pin(fs, ino, m, mlogs);
                    fs.write(ino, 0, format!("generation {k}").as_bytes())
                        .unwrap();
                    fs.fsync(ino, false).unwrap();
                    if k < 2 {
                        fs.unlink(ROOT_INO, b"a").unwrap();
                    }
                    inos.borrow_mut().push(ino);
                }
                assert_eq!(
                    fs.stats().fsync_checkpoints,
                    0,
                    "every fsync must roll forward"
                );
            },
            |fs, mode| {
                let inos = inos.borrow();
                let a = fs.lookup(ROOT_INO, b"a").unwrap();
                assert_eq!(
                    a.ino, inos[2],
                    "{mlogs} mlogs, {mode:?}: `a` went to ino {} (fsync order {:?})",
                    a.ino, *inos
                );
                assert_eq!(read_all(fs, a.ino), b"generation 2");
                assert_eq!(a.nlink, 1);
                for &old in &inos[..2] {
                    assert!(
                        fs.getattr(old).is_err(),
                        "{mlogs} mlogs, {mode:?}: unlinked ino {old} still allocated"
                    );
                }
            },
        );
    }
}

/// One file fsync'd on two mlogs (a per-CPU mapping moves a file between mlogs with its
/// writer): the later fsync's contents, size and xattr win although its chain is walked
/// first. Both a file from the checkpoint and a new one (its name from the DENT mark).
#[test]
fn a_file_fsynced_on_two_mlogs_recovers_its_later_fsync() {
    let mlogs = 2;
    for new_since_cp in [false, true] {
        let ino = Cell::new(0);
        let later: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        crash_and_check_mlogs(
            mlogs,
            |fs| {
                ino.set(new_file(fs, ROOT_INO, b"f", b"checkpointed"));
                if !new_since_cp {
                    fs.sync().unwrap();
                }
                pin(fs, ino.get(), 1, mlogs);
                fs.write(ino.get(), 0, &[1u8; 9000]).unwrap();
                fs.setxattr(ino.get(), b"user.v", b"one", XattrMode::Any)
                    .unwrap();
                fs.fsync(ino.get(), false).unwrap();
                pin(fs, ino.get(), 0, mlogs);
                fs.setattr(
                    ino.get(),
                    &SetAttr {
                        size: Some(0),
                        ..Default::default()
                    },
                )
                .unwrap();
                fs.write(ino.get(), 0, &later).unwrap();
                fs.setxattr(ino.get(), b"user.v", b"two", XattrMode::Any)
                    .unwrap();
                fs.fsync(ino.get(), false).unwrap();
                assert_eq!(fs.stats().fsync_checkpoints, 0);
            },
            |fs, mode| {
                let f = fs.lookup(ROOT_INO, b"f").unwrap();
                assert_eq!(f.ino, ino.get());
                assert_eq!(f.nlink, 1);
                assert_eq!(
                    read_all(fs, f.ino),
                    later,
                    "{mode:?} (new since the checkpoint: {new_since_cp}): not the later fsync"
                );
                assert_eq!(fs.getxattr(f.ino, b"user.v").unwrap(), b"two", "{mode:?}");
            },
        );
    }
}

/// The names of `ino` in the directories `dirs` (the tests' whole tree).
fn names_of(fs: &Fs, ino: Ino, dirs: &[Ino]) -> Vec<(Ino, Vec<u8>)> {
    let mut out = Vec::new();
    for &d in dirs {
        for e in fs.readdir(d, 0, 1024).unwrap() {
            if e.ino == ino && e.name != b"." && e.name != b".." {
                out.push((d, e.name.clone()));
            }
        }
    }
    out
}

/// `create X a; fsync X` (X's chain: mlog 1), `link X c; unlink a; create Y a; fsync Y` (Y's
/// chain: mlog 0). The two chains disagree about `a`: X's DENT says X, Y's says Y. Y's
/// name is the later fsync's, but X must not lose its only durable name to it: X still
/// lives (under `c`), and it was fsync'd. Roll-forward cannot know `c` (a link is made
/// durable only by a checkpoint), so the unlink of a name whose file lives on makes the
/// parent's next fsync'd new file take a checkpoint, as a rename does. Before that, Y's
/// DENT replaced `a`, X's recovered link count fell to 0 and X was freed with its data.
#[test]
fn a_linked_file_keeps_a_name_when_a_new_file_takes_its_old_one() {
    let mlogs = 2;
    let (x, y) = (Cell::new(0), Cell::new(0));
    crash_and_check_mlogs(
        mlogs,
        |fs| {
            fs.sync().unwrap();
            x.set(new_file(fs, ROOT_INO, b"a", b"x data"));
            pin(fs, x.get(), 1, mlogs);
            fs.fsync(x.get(), false).unwrap();
            fs.link(x.get(), ROOT_INO, b"c").unwrap();
            fs.unlink(ROOT_INO, b"a").unwrap();
            y.set(new_file(fs, ROOT_INO, b"a", b"y data"));
            pin(fs, y.get(), 0, mlogs);
            fs.fsync(y.get(), false).unwrap();
            assert_eq!(
                fs.stats().fsync_checkpoints,
                1,
                "X's fsync rolls forward, Y's not"
            );
        },
        |fs, mode| {
            let a = fs.lookup(ROOT_INO, b"a").unwrap();
            assert_eq!(a.ino, y.get(), "{mode:?}: `a` is not Y's");
            assert_eq!(read_all(fs, y.get()), b"y data");
            let xa = fs
                .getattr(x.get())
                .unwrap_or_else(|e| panic!("{mode:?}: X, fsync'd and still linked, is gone: {e}"));
            let names = names_of(fs, x.get(), &[ROOT_INO]);
            assert!(!names.is_empty(), "{mode:?}: X has no name");
            assert_eq!(xa.nlink as usize, names.len(), "{mode:?}: X's link count");
            assert_eq!(read_all(fs, x.get()), b"x data");
        },
    );
}

/// A checkpointed file with two names (`a`, `c`; nlink 2) loses `a` to a new file fsync'd
/// on another mlog: X keeps `c` with link count 1 (the unlink left X linked, so Y's fsync
/// is a checkpoint, by the rule of the test above).
#[test]
fn a_hard_linked_file_from_the_checkpoint_keeps_its_other_name() {
    let mlogs = 2;
    let (x, y) = (Cell::new(0), Cell::new(0));
    crash_and_check_mlogs(
        mlogs,
        |fs| {
            x.set(new_file(fs, ROOT_INO, b"a", b"x data"));
            fs.link(x.get(), ROOT_INO, b"c").unwrap();
            fs.sync().unwrap();
            fs.unlink(ROOT_INO, b"a").unwrap();
            y.set(new_file(fs, ROOT_INO, b"a", b"y data"));
            pin(fs, y.get(), (x.get() + 1) % mlogs, mlogs);
            fs.fsync(y.get(), false).unwrap();
            assert_eq!(fs.stats().fsync_checkpoints, 1);
        },
        |fs, mode| {
            assert_eq!(fs.lookup(ROOT_INO, b"a").unwrap().ino, y.get(), "{mode:?}");
            let c = fs.lookup(ROOT_INO, b"c").unwrap();
            assert_eq!(c.ino, x.get(), "{mode:?}");
            assert_eq!(c.nlink, 1, "{mode:?}: X's link count");
            assert_eq!(read_all(fs, x.get()), b"x data");
        },
    );
}

/// Directories on different mlogs: `create X d0/a; fsync X` (mlog 1), `rename d0/a d1/b`,
/// `create Y /c; fsync Y` (mlog 0; the root lost no name, so Y rolls forward). The rename
/// is not durable (only a checkpoint makes it so): X is under exactly one of `d0/a` and
/// `d1/b` (rename atomicity), with link count 1, and Y under `/c`. Then the same with Y
/// created under the name X left (`d0/a`): the rename took a name from d0, so Y's fsync is
/// a checkpoint and both names are durable.
#[test]
fn rename_between_directories_on_different_mlogs() {
    let mlogs = 2;
    for reuse_name in [false, true] {
        let (d0, d1, x, y) = (Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0));
        crash_and_check_mlogs(
            mlogs,
            |fs| {
                d0.set(fs.mkdir(ROOT_INO, b"d0", 0o755, 0, 0).unwrap().ino);
                d1.set(fs.mkdir(ROOT_INO, b"d1", 0o755, 0, 0).unwrap().ino);
                assert_ne!(d0.get() % 2, d1.get() % 2, "d0 and d1 share an mlog");
                fs.sync().unwrap();
                x.set(new_file(fs, d0.get(), b"a", b"x data"));
                pin(fs, x.get(), 1, mlogs);
                fs.fsync(x.get(), false).unwrap();
                fs.rename(d0.get(), b"a", d1.get(), b"b", RenameFlags::default())
                    .unwrap();
                let (yd, yn): (Ino, &[u8]) = if reuse_name {
                    (d0.get(), b"a")
                } else {
                    (ROOT_INO, b"c")
                };
                y.set(new_file(fs, yd, yn, b"y data"));
                pin(fs, y.get(), 0, mlogs);
                let before = fs.stats().fsync_checkpoints;
                fs.fsync(y.get(), false).unwrap();
                assert_eq!(
                    fs.stats().fsync_checkpoints - before,
                    reuse_name as u64,
                    "Y's fsync: checkpoint iff it takes the name X left"
                );
            },
            |fs, mode| {
                let dirs = [ROOT_INO, d0.get(), d1.get()];
                let xn = names_of(fs, x.get(), &dirs);
                let (a, b) = ((d0.get(), b"a".to_vec()), (d1.get(), b"b".to_vec()));
                if reuse_name {
                    assert_eq!(xn, vec![b], "{mode:?}: X after the checkpoint");
                    assert_eq!(fs.lookup(d0.get(), b"a").unwrap().ino, y.get());
                } else {
                    assert!(
                        xn == vec![a.clone()] || xn == vec![b.clone()],
                        "{mode:?}: X is under {xn:?}, not exactly one of d0/a, d1/b"
                    );
                    assert_eq!(fs.lookup(ROOT_INO, b"c").unwrap().ino, y.get());
                }
                assert_eq!(fs.getattr(x.get()).unwrap().nlink, 1, "{mode:?}");
                assert_eq!(read_all(fs, x.get()), b"x data");
                assert_eq!(read_all(fs, y.get()), b"y data");
            },
        );
    }
}

/// Concurrent fsyncs on different mlogs, with names handed from one file to the next: four
/// threads each loop `create t<i> (a new inode, on whatever mlog its number maps to);
/// write; fsync; unlink t<i>`, so each thread's name is claimed by a DENT mark on several
/// chains at once while the other threads append to the same chains. Power is cut from a
/// fifth thread at a point the test does not choose (after 40 acknowledged fsyncs), while
/// fsyncs are in flight. After recovery, under every kill mode, `t<i>` must be the file of
/// the thread's last acknowledged fsync or of a later one (in flight at the cut), with that
/// file's contents: never an older generation, whose DENT mark a chain-order merge could
/// replay last.
#[test]
fn concurrent_fsyncs_on_four_mlogs_keep_each_name_with_its_latest_file() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    let mlogs = 4;
    let sim = multi_mlog_volume(mlogs);
    let dev: Arc<dyn BlockDevice> = sim.clone();
    let fs = Fs::mount(dev, opts()).unwrap();
    fs.sync().unwrap();
    let acked = AtomicU64::new(0);
    // Per thread: every generation created (ino, contents), and the last acknowledged.
    type Generations = (Vec<(Ino, Vec<u8>)>, Option<usize>);
    let gens: Vec<Mutex<Generations>> = (0..4).map(|_| Mutex::new((Vec::new(), None))).collect();
    std::thread::scope(|s| {
        for (t, g) in gens.iter().enumerate() {
            let (fs, acked) = (&fs, &acked);
            s.spawn(move || {
                let name = format!("t{t}").into_bytes();
                for k in 0..200usize {
                    let Ok(a) = fs.create(ROOT_INO, &name, 0o644, 0, 0) else {
                        return;
                    };
                    let data = format!("thread {t} generation {k}").repeat(1 + k % 300);
                    g.lock().unwrap().0.push((a.ino, data.clone().into_bytes()));
                    if fs.write(a.ino, 0, data.as_bytes()).is_err()
                        || fs.fsync(a.ino, false).is_err()
                    {
                        return;
                    }
                    g.lock().unwrap().1 = Some(k);
                    acked.fetch_add(1, Ordering::SeqCst);
                    if fs.unlink(ROOT_INO, &name).is_err() {
                        return;
                    }
                }
            });
        }
        s.spawn(|| {
            while acked.load(Ordering::SeqCst) < 40 {
                std::thread::yield_now();
            }
            sim.cut_now();
        });
    });
    let rolled = fs.stats().fsyncs - fs.stats().fsync_checkpoints;
    fs.abandon();
    assert!(rolled >= 40, "only {rolled} fsyncs rolled forward");
    for mode in CrashMode::ALL {
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, 17));
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck before recovery: {r}");
        let fs = Fs::mount(img.clone(), opts()).unwrap();
        for (t, g) in gens.iter().enumerate() {
            let (list, last) = &*g.lock().unwrap();
            let Some(last) = *last else { continue };
            let name = format!("t{t}");
            let found = fs
                .lookup(ROOT_INO, name.as_bytes())
                .unwrap_or_else(|e| panic!("{mode:?}: {name} (acknowledged gen {last}) lost: {e}"));
            let k = list
                .iter()
                .position(|(ino, _)| *ino == found.ino)
                .unwrap_or_else(|| panic!("{mode:?}: {name} is ino {}, never created", found.ino));
            assert!(
                k >= last,
                "{mode:?}: {name} went back to generation {k} (ino {}), the last acknowledged fsync was generation {last}",
                found.ino
            );
            assert_eq!(
                read_all(&fs, found.ino),
                list[k].1,
                "{mode:?}: {name} gen {k}"
            );
            assert_eq!(found.nlink, 1);
        }
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "{mode:?}: fsck after recovery: {r}");
    }
}

/// The footer's node version (docs/FORMAT.md "Node blocks"): read back from the device,
/// fsync'd nodes carry the current checkpoint's tag and sequences that grow with each node
/// write; a checkpoint restarts the sequence under its own tag; and once the sequence of a
/// checkpoint reaches `SEQ_CHECKPOINT_AT`, fsync writes a checkpoint instead of rolling
/// forward, so the sequence never carries into the tag. Roll-forward still recovers a
/// file fsync'd right after that restart.
#[test]
fn node_versions_follow_checkpoints_and_never_wrap() {
    use flashlog_format::node::{self, SEQ_CHECKPOINT_AT};
    use std::sync::atomic::Ordering;
    let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let footer_of = |fs: &Fs, ino: Ino| {
        fs.inner().seg.submit_all().unwrap();
        let mut b = flashlog_format::codec::zero_block();
        dev.read(fs.inner().nat.addr(ino), &mut b[..]).unwrap();
        node::check_node(&b, Some(ino)).unwrap()
    };
    let tag = |fs: &Fs| node::cp_ver_tag(fs.inner().cp_version.load(Ordering::Acquire));
    let ino = new_file(&fs, ROOT_INO, b"f", &[1u8; 5000]);
    fs.sync().unwrap();
    fs.write(ino, 0, b"two").unwrap();
    fs.fsync(ino, false).unwrap();
    let a = footer_of(&fs, ino);
    assert_eq!(a.cp_ver, tag(&fs));
    assert!(a.flags & node::flag::FSYNC != 0);
    fs.write(ino, 0, b"three").unwrap();
    fs.fsync(ino, false).unwrap();
    let b = footer_of(&fs, ino);
    assert_eq!(b.cp_ver, a.cp_ver);
    assert!(
        b.seq > a.seq,
        "sequence did not grow: {} then {}",
        a.seq,
        b.seq
    );
    fs.sync().unwrap();
    fs.write(ino, 0, b"four").unwrap();
    fs.fsync(ino, false).unwrap();
    let c = footer_of(&fs, ino);
    assert_eq!(c.cp_ver, tag(&fs));
    assert_ne!(c.cp_ver, a.cp_ver, "a checkpoint must change the tag");
    assert!(
        c.seq < a.seq.max(2) + 4,
        "the checkpoint did not restart the sequence: {}",
        c.seq
    );
    // Near the end of the sequence's range: the next fsync is a checkpoint.
    let v = fs.inner().node_version.load(Ordering::Acquire);
    fs.inner().node_version.store(
        (v & !0xffff_ffff) | SEQ_CHECKPOINT_AT as u64,
        Ordering::Release,
    );
    let before = fs.stats().fsync_checkpoints;
    fs.write(ino, 0, b"five").unwrap();
    fs.fsync(ino, false).unwrap();
    assert_eq!(
        fs.stats().fsync_checkpoints,
        before + 1,
        "fsync rolled forward at the limit"
    );
    let after = fs.inner().node_version.load(Ordering::Acquire);
    assert_eq!(after >> 32, tag(&fs) as u64);
    assert!(
        (after as u32) < 16,
        "sequence not restarted: {}",
        after as u32
    );
    fs.write(ino, 0, b"six").unwrap();
    fs.fsync(ino, false).unwrap();
    assert_eq!(fs.stats().fsync_checkpoints, before + 1);
    sim.cut_now();
    fs.abandon();
    let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(CrashMode::DropUnflushed, 3));
    let fs = Fs::mount(img, opts()).unwrap();
    assert_eq!(&read_all(&fs, ino)[..4], b"sixe");
    fs.unmount().unwrap();
}

/// Foreground cleaning moves node blocks eagerly (writes them at once). A node moved while
/// dirty (changed since it was last written) was left clean by the move, so the next fsync
/// did not write it: an xattr node (cold log, never on a roll-forward chain) or a warm node
/// on another mlog's chain (after the file moved mlogs, not flushed by the fsync) kept its
/// change only in the moved copy, and roll-forward fell back to the checkpoint's. Here:
/// `setxattr v=one; sync; setxattr v=two; clean the xattr node's section eagerly; fsync`,
/// power cut: the fsync'd value must come back. Before the fix it read `one`.
#[test]
fn eager_cleaning_of_a_dirty_node_keeps_it_for_fsync() {
    use flashlog_core::gc::{clean_section, Migration};
    let ino = Cell::new(0);
    crash_and_check(
        |fs| {
            ino.set(new_file(fs, ROOT_INO, b"f", b"data"));
            fs.setxattr(ino.get(), b"user.v", &[1u8; 200], XattrMode::Any)
                .unwrap();
            fs.sync().unwrap();
            fs.setxattr(ino.get(), b"user.v", &[2u8; 300], XattrMode::Any)
                .unwrap();
            let inner = fs.inner();
            let xnid = {
                let c = inner.cell(ino.get()).unwrap();
                let st = c.lock();
                st.hdr.xattr_nid
            };
            assert_ne!(xnid, 0, "no xattr node");
            let addr = inner.nat.addr(xnid);
            let geo = inner.geo();
            let sec = geo.seg_of(addr).unwrap() / geo.segs_per_sec as u64;
            clean_section(inner, sec, Migration::Eager).unwrap();
            fs.fsync(ino.get(), false).unwrap();
            assert_eq!(fs.stats().fsync_checkpoints, 0);
        },
        |fs, mode| {
            assert_eq!(
                fs.getxattr(ino.get(), b"user.v").unwrap(),
                vec![2u8; 300],
                "{mode:?}: the fsync'd xattr value is lost"
            );
        },
    );
}

/// Between checkpoints the inode-cache cap evicts clean cells without a checkpoint
/// (`Fs::relieve_caps`); what fsync needs to know about the interval (`is_new`, `needs_cp`,
/// a directory's `names_left_at`) comes back with the cell when it is loaded again. Each
/// case below makes the file (or its parent) a candidate for eviction with 48 other files
/// on a cache of 8 inodes, checks that it was evicted with no checkpoint since the sync,
/// then fsyncs the file (loading it, and not its parent) and cuts the power. Without the kept interval state the reloaded cell
/// looked checkpointed: a new file was fsync'd without its name, a renamed one rolled
/// forward under its old name, and a file in a new directory rolled forward into a
/// directory the checkpoint does not have.
fn evicted_then_fsynced(
    before_sync: impl FnOnce(&Fs),
    setup: impl FnOnce(&Fs) -> (Ino, Ino),
    check: impl Fn(&Fs, CrashMode),
) {
    let sim = Arc::new(SimDevice::new((64 << 20) / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let small = MountOptions {
        inode_cache_max: 8,
        ..opts()
    };
    let fs = Fs::mount(dev.clone(), small).unwrap();
    let filler = fs.mkdir(ROOT_INO, b"filler", 0o755, 0, 0).unwrap().ino;
    before_sync(&fs);
    fs.sync().unwrap();
    let cps = fs.stats().checkpoints;
    let (target, file) = setup(&fs);
    for i in 0..48 {
        new_file(&fs, filler, format!("f{i}").as_bytes(), b"filler");
    }
    let evicted = fs.inner().cells.get(target).is_none();
    assert!(
        evicted,
        "inode {target} was not evicted ({} cells, {} cap writebacks)",
        fs.inner().cells.len(),
        fs.stats().cap_reliefs
    );
    assert!(fs.stats().cap_reliefs > 0);
    assert_eq!(
        fs.stats().checkpoints,
        cps,
        "a checkpoint ran before the fsync: the case tests nothing"
    );
    fs.fsync(file, false).unwrap();
    sim.cut_now();
    fs.abandon();
    check_every_mode(&sim, 17, check);
}

#[test]
fn a_new_file_evicted_before_its_fsync_keeps_its_name() {
    evicted_then_fsynced(
        |_| {},
        |fs| {
            let b = new_file(fs, ROOT_INO, b"b", b"new file");
            (b, b)
        },
        |fs, mode| {
            let b = fs
                .lookup(ROOT_INO, b"b")
                .unwrap_or_else(|e| panic!("{mode:?}: the fsync'd new file lost its name: {e}"));
            assert_eq!(read_all(fs, b.ino), b"new file");
        },
    );
}

#[test]
fn a_renamed_file_evicted_before_its_fsync_keeps_its_new_name() {
    evicted_then_fsynced(
        |fs| {
            new_file(fs, ROOT_INO, b"a", b"renamed file");
        },
        |fs| {
            let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
            fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())
                .unwrap();
            (a, a)
        },
        |fs, mode| {
            let b = fs
                .lookup(ROOT_INO, b"b")
                .unwrap_or_else(|e| panic!("{mode:?}: the fsync'd rename was lost: {e}"));
            assert_eq!(read_all(fs, b.ino), b"renamed file");
            assert!(
                fs.lookup(ROOT_INO, b"a").is_err(),
                "{mode:?}: a still named"
            );
        },
    );
}

#[test]
fn a_new_file_in_an_evicted_new_directory_keeps_its_name() {
    evicted_then_fsynced(
        |_| {},
        |fs| {
            let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
            (d, new_file(fs, d, b"f", b"in a new directory"))
        },
        |fs, mode| {
            let d = fs
                .lookup(ROOT_INO, b"d")
                .unwrap_or_else(|e| panic!("{mode:?}: the new directory was lost: {e}"));
            let f = fs.lookup(d.ino, b"f").unwrap();
            assert_eq!(read_all(fs, f.ino), b"in a new directory");
        },
    );
}
