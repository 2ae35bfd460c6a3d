//! Crash tests from mutation testing of roll-forward recovery and fsync (review,
//! 2026-11-28). Mutants were planted one at a time in recovery.rs, fs.rs and inner.rs;
//! `rollforward_sweep`, `recovery_names`, `recovery_cut`, `powercut`, `limits`, `acl`,
//! `xattrs` and `flashlog-sim run --seeds 1000..1040 --mlogs 1,2` were run against each.
//! Two survived all of them and are killed here:
//!
//! - `stale_nodes_past_the_end_of_the_chain_are_not_replayed`: roll-forward without the
//!   footer's checkpoint-tag check (M4) rolls a file back to a superseded version on a
//!   device without discard;
//! - `a_single_attribute_change_then_fsync_survives_a_crash`: a times-only `setattr`
//!   (`touch -m`, utimens) that does not dirty the inode (M31).
//!
//! The other two tests pin cases that only a random test or a test with a side condition
//! caught: a cut at every request of a second fsync (a file's nodes adopted past its newest
//! FSYNC inode, M1, or no flush between data and nodes, M13: caught only by `powercut`'s
//! random cuts and the simulator), and rename-then-fsync of a checkpointed file (its fsync
//! not checkpointing, M16: caught only by a `recovery_names` test with evicted cells; the
//! simulator takes the core's word for whether an fsync checkpointed).
//!
//! The harness is the one of `rollforward_sweep.rs`: a fresh 64 MiB `SimDevice`, the setup,
//! a power cut (right after the setup, or at a chosen request inside it), then every
//! `CrashMode` image remounted, fsck before and after recovery.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, Capabilities, Completion, CrashMode, DevResult, SimDevice};
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        ..Default::default()
    }
}

fn volume() -> (Arc<SimDevice>, Fs) {
    volume_on(false)
}

/// A `SimDevice` that says it has no discard (a disk, an image file without hole punching):
/// freed sections keep what they held. `SimDevice`'s discard zeroes blocks.
struct NoDiscard {
    sim: Arc<SimDevice>,
    caps: Capabilities,
}

impl BlockDevice for NoDiscard {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> DevResult<Completion> {
        self.sim.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> DevResult<Completion> {
        self.sim.write(addr, buf)
    }
    fn discard(&self, addr: u64, count: u64) -> DevResult<Completion> {
        self.sim.discard(addr, count)
    }
    fn flush(&self) -> DevResult<Completion> {
        self.sim.flush()
    }
}

/// A fresh 64 MiB volume on a `SimDevice` (seen without discard if `no_discard`).
fn volume_on(no_discard: bool) -> (Arc<SimDevice>, Fs) {
    let sim = Arc::new(SimDevice::new((64 << 20) / BS));
    let dev: Arc<dyn BlockDevice> = if no_discard {
        let mut caps = sim.capabilities().clone();
        caps.discard = false;
        caps.discard_zeroes = false;
        Arc::new(NoDiscard {
            sim: sim.clone(),
            caps,
        })
    } else {
        sim.clone()
    };
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            seed: Some(7),
            ..Default::default()
        },
    )
    .unwrap();
    let fs = Fs::mount(dev, opts()).unwrap();
    (sim, fs)
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut v = vec![0u8; size];
    let mut off = 0;
    while off < size {
        let n = fs.read(ino, off as u64, &mut v[off..]).unwrap();
        assert!(n > 0, "read returned 0 at {off} below the size {size}");
        off += n;
    }
    v
}

/// Remount the crash images of `sim` (every kill mode, image seeds `seeds`), fsck before
/// and after recovery, and hand each recovered volume to `check`.
fn check_images(
    sim: &SimDevice,
    seeds: std::ops::Range<u64>,
    what: &str,
    check: &dyn Fn(&Fs, &str),
) {
    for seed in seeds {
        for mode in CrashMode::ALL {
            let tag = format!("{what} {mode:?} image seed {seed}");
            let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, seed));
            let r = fsck(&*img).unwrap();
            assert!(r.is_clean(), "{tag}: fsck before recovery: {r}");
            let fs = Fs::mount(img.clone(), opts()).unwrap();
            check(&fs, &tag);
            fs.unmount().unwrap();
            let r = fsck(&*img).unwrap();
            assert!(r.is_clean(), "{tag}: fsck after recovery: {r}");
        }
    }
}

/// Run `setup` on a fresh volume, cut the power right after it and hand what it returned
/// to `check` with each recovered volume.
fn crash_after<T>(setup: impl FnOnce(&Fs) -> T, check: impl Fn(&Fs, &str, &T)) {
    let (sim, fs) = volume();
    let t = setup(&fs);
    sim.cut_now();
    fs.abandon();
    check_images(&sim, 0..1, "cut after the setup", &|fs, tag| {
        check(fs, tag, &t)
    });
}

/// Mutant M16 (fs.rs `rename`: the moved file's `needs_cp` not set, so that its fsync
/// rolls forward instead of checkpointing): `rename a b; fsync(b)` of a file that was in
/// the checkpoint. Roll-forward replays the inode, never the old entry's removal, so after
/// a crash the file was back under `a` (and, renamed over an existing `c`, `c` was the old
/// file again), although the fsync that returned was of the file under its new name
/// (DESIGN "What fsync promises": f renamed, its fsync checkpoints, everything durable).
/// The simulator cannot see it: its model learns from `fsync_checkpoints` whether a fsync
/// made the rename durable, and a rolled-forward one leaves the old name allowed.
#[test]
fn a_checkpointed_file_renamed_then_fsynced_keeps_its_new_name() {
    crash_after(
        |fs| {
            let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
            fs.write(a, 0, b"file a").unwrap();
            let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
            let c_old = fs.create(d, b"c", 0o644, 0, 0).unwrap().ino;
            fs.write(c_old, 0, b"old c").unwrap();
            fs.sync().unwrap();
            // A plain rename, then a rename over an existing name in another directory.
            fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", RenameFlags::default())
                .unwrap();
            fs.write(a, 6, b" renamed").unwrap();
            fs.fsync(a, false).unwrap();
            fs.rename(ROOT_INO, b"b", d, b"c", RenameFlags::default())
                .unwrap();
            fs.fsync(a, true).unwrap();
            (a, c_old)
        },
        |fs, tag, &(a, c_old)| {
            let d = fs.lookup(ROOT_INO, b"d").unwrap().ino;
            assert_eq!(
                fs.lookup(d, b"c").map(|x| x.ino).ok(),
                Some(a),
                "{tag}: /d/c is not the file fsync'd under that name"
            );
            assert!(
                fs.lookup(ROOT_INO, b"a").is_err() && fs.lookup(ROOT_INO, b"b").is_err(),
                "{tag}: the file is still under an old name"
            );
            assert_eq!(fs.getattr(a).unwrap().nlink, 1, "{tag}");
            assert_eq!(read_all(fs, a), b"file a renamed", "{tag}");
            assert!(
                fs.getattr(c_old).is_err(),
                "{tag}: the file renamed over is back"
            );
        },
    );
}

/// Blocks in the inode's own slots and blocks in its first direct node.
const SPANS: [(u64, u64); 2] = [(0, 4), (460, 4)];

fn fill(fs: &Fs, ino: Ino, byte: u8) {
    for (at, n) in SPANS {
        fs.write(ino, at * BS, &vec![byte; (n * BS) as usize])
            .unwrap();
    }
}

/// A file with blocks in its inode and in a direct node, checkpointed with `A`, rewritten
/// with `B` and fsync'd, then rewritten with `C`; the second fsync is left to the caller.
fn two_versions(fs: &Fs) -> Ino {
    let i = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
    fill(fs, i, b'A');
    fs.sync().unwrap();
    fill(fs, i, b'B');
    fs.fsync(i, false).unwrap();
    fill(fs, i, b'C');
    i
}

/// Mutant M1 (recovery.rs `roll_forward`: a file's nodes adopted past its newest FSYNC
/// inode, `chain[..=last]` read to the end of the chain) and mutant M13 (fs.rs
/// `fsync_once`: no flush between the data and the nodes). The power is cut at every
/// request of a second fsync (every partial landing of a multi-block write, every kill
/// mode, several images each): the file must be the first fsync's version or the second's,
/// never a mix. With M1 the second fsync's direct node, landed without its FSYNC inode, was
/// adopted beside the first fsync's inode (blocks in the inode `B`, in the direct node
/// `C`); with M13 the nodes landed without the data they point at. `rollforward_sweep`
/// cuts only after the fsync returned, and the simulator's files (6 blocks at most) never
/// have a direct node; `powercut`'s random cuts and the simulator found both mutants, but
/// only at some seeds. This test reaches the case on purpose.
#[test]
fn a_cut_inside_a_second_fsync_leaves_one_version_or_the_other() {
    let expect = |b: u8| {
        let mut v = vec![0u8; ((SPANS[1].0 + SPANS[1].1) * BS) as usize];
        for (at, n) in SPANS {
            v[(at * BS) as usize..((at + n) * BS) as usize].fill(b);
        }
        v
    };
    let (v1, v2) = (expect(b'B'), expect(b'C'));
    // A dry run counts the requests of the second fsync.
    let (sim, fs) = volume();
    let i = two_versions(&fs);
    let first = sim.ops();
    fs.fsync(i, false).unwrap();
    let last = sim.ops();
    assert_eq!(read_all(&fs, i), v2);
    fs.unmount().unwrap();
    assert!(last > first + 2, "the fsync made {} requests", last - first);
    for cut in first..=last {
        for partial in [0, 1, 2, 3] {
            let (sim, fs) = volume();
            let i2 = two_versions(&fs);
            assert_eq!(i2, i);
            assert_eq!(sim.ops(), first, "the setup is not deterministic");
            sim.cut_at(cut, partial);
            let _ = fs.fsync(i, false);
            fs.abandon();
            let what = format!("cut at request {cut} (fsync {first}..{last}) partial {partial}");
            check_images(&sim, 0..4, &what, &|fs, tag| {
                let got = read_all(fs, i);
                if got != v1 && got != v2 {
                    let at = |b: u64| got.get((b * BS) as usize).copied();
                    panic!(
                        "{tag}: the file is neither fsync'd version: size {}, block 0 {:?}, \
                         block 460 {:?}",
                        got.len(),
                        at(0).map(char::from),
                        at(460).map(char::from)
                    );
                }
            });
        }
    }
}

/// One attribute change alone, then fsync, then a crash: the change must be there
/// (DESIGN "What fsync promises": f's mode, owner and times are durable when fsync
/// returns). `rollforward_sweep` changes every attribute in one `setattr` (and its chmod
/// case changes the owner too), so a path that forgets to dirty the inode for one kind of
/// change alone goes unseen there; the simulator has no chmod, chown or utimens at all.
/// Kills mutant M31 (fs.rs `setattr`: a times-only change, `touch -m` or utimens, not
/// marked dirty, so that fsync finds the file clean and writes nothing: no other test
/// fails) and M30 (the same for a mode-only change, which `acl.rs` catches only through a
/// remount of a full volume). fsync and fdatasync alike: Flashlog promises the same for
/// both (DESIGN's table), more than POSIX asks of fdatasync.
#[test]
fn a_single_attribute_change_then_fsync_survives_a_crash() {
    type Change = fn(&Fs, Ino);
    let changes: [(&str, Change); 4] = [
        ("chmod", |fs, i| {
            fs.setattr(
                i,
                &SetAttr {
                    mode: Some(0o4710),
                    ..Default::default()
                },
            )
            .unwrap();
        }),
        ("chown", |fs, i| {
            fs.setattr(
                i,
                &SetAttr {
                    uid: Some(1001),
                    gid: Some(1002),
                    ..Default::default()
                },
            )
            .unwrap();
        }),
        ("utimens", |fs, i| {
            let t = |sec| TimeSet::At(Timespec { sec, nsec: 5 });
            fs.setattr(
                i,
                &SetAttr {
                    atime: Some(t(1_000_000_000)),
                    mtime: Some(t(1_100_000_000)),
                    ..Default::default()
                },
            )
            .unwrap();
        }),
        ("touch_m", |fs, i| {
            fs.setattr(
                i,
                &SetAttr {
                    mtime: Some(TimeSet::Now),
                    ..Default::default()
                },
            )
            .unwrap();
        }),
    ];
    for (name, change) in changes {
        for cp in [true, false] {
            for datasync in [false, true] {
                crash_after(
                    |fs| {
                        let i = fs.create(ROOT_INO, b"f", 0o644, 0, 0).unwrap().ino;
                        fs.write(i, 0, b"contents").unwrap();
                        if cp {
                            fs.sync().unwrap();
                        } else {
                            fs.fsync(i, false).unwrap();
                        }
                        change(fs, i);
                        fs.fsync(i, datasync).unwrap();
                        (i, fs.getattr(i).unwrap())
                    },
                    |fs, tag, (i, want)| {
                        let got = fs.getattr(*i).unwrap();
                        assert_eq!(
                            (got.mode, got.uid, got.gid, got.atime, got.mtime, got.ctime),
                            (want.mode, want.uid, want.gid, want.atime, want.mtime, want.ctime),
                            "{name} cp={cp} datasync={datasync} {tag}: (mode, uid, gid, atime, \
                             mtime, ctime) after the crash"
                        );
                        assert_eq!(read_all(fs, *i), b"contents");
                    },
                );
            }
        }
    }
}

/// Where the first mlog's warm node log writes next: (segment, block offset).
fn warm_node_head(fs: &Fs) -> (u64, u32) {
    use flashlog_format::cp::{LogKind, Temp};
    let h = fs
        .inner()
        .seg
        .head_records()
        .into_iter()
        .find(|h| h.kind == LogKind::Node && h.temp == Temp::Warm)
        .unwrap();
    (h.seg, h.blkoff)
}

/// Mutant M4 (recovery.rs `walk_chain`: the footer's checkpoint tag not checked). A node
/// log reuses the lowest free section, so the chain of this interval can end a few blocks
/// into a section whose next blocks are nodes of an earlier interval, each a valid node
/// whose footer names the next: FSYNC inodes of `x`, superseded long ago. Only the tag
/// tells them apart. Without the check the walk went on into them and rolled `x` back to
/// one of its old fsync'd versions, although `x` was not touched since the checkpoint.
/// On a device with discard the freed section reads back as zeros (`SimDevice` zeroes
/// discarded blocks), which hides the bug; every other crash test and the simulator run on
/// such devices, and the simulator's workloads never reuse a node section anyway.
#[test]
fn stale_nodes_past_the_end_of_the_chain_are_not_replayed() {
    let (sim, fs) = volume_on(true);
    let sps = fs.inner().sb.geo.segs_per_sec as u64;
    let x = fs.create(ROOT_INO, b"x", 0o644, 0, 0).unwrap().ino;
    let y = fs.create(ROOT_INO, b"y", 0o644, 0, 0).unwrap().ino;
    fs.sync().unwrap();
    // 1. x's fsyncs fill sections of the warm node log with its FSYNC inodes.
    let first = warm_node_head(&fs).0 / sps;
    let mut filled = std::collections::BTreeSet::new();
    let mut n = 0u32;
    while filled.len() < 2 {
        fs.write(x, 0, format!("x version {n:06}").as_bytes())
            .unwrap();
        fs.fsync(x, false).unwrap();
        let sec = warm_node_head(&fs).0 / sps;
        if sec != first {
            filled.insert(sec);
        }
        n += 1;
        assert!(n < 20_000, "the warm node head never left section {first}");
    }
    // The sections x filled completely (not the one the head is still in).
    let open = warm_node_head(&fs).0 / sps;
    filled.remove(&open);
    assert!(!filled.is_empty());
    let x_final = b"x final, checkpointed".to_vec();
    fs.write(x, 0, &x_final).unwrap();
    fs.setattr(
        x,
        &SetAttr {
            size: Some(x_final.len() as u64),
            ..Default::default()
        },
    )
    .unwrap();
    fs.sync().unwrap();
    // 2. y's fsyncs until the warm node head is a few blocks into a reused section.
    let mut m = 0u32;
    let y_last = loop {
        let data = format!("y version {m:06}").into_bytes();
        fs.write(y, 0, &data).unwrap();
        fs.fsync(y, false).unwrap();
        m += 1;
        let (seg, off) = warm_node_head(&fs);
        if filled.contains(&(seg / sps)) && (3..8).contains(&off) {
            break data;
        }
        assert!(
            m < 20_000,
            "the warm node log never reused a section x filled ({filled:?})"
        );
    };
    sim.cut_now();
    fs.abandon();
    check_images(&sim, 0..2, "cut in a reused node section", &|fs, tag| {
        let got = read_all(fs, x);
        assert!(
            got == x_final,
            "{tag}: x is {:?}, not its checkpointed version",
            String::from_utf8_lossy(&got)
        );
        assert_eq!(read_all(fs, y), y_last, "{tag}: y lost its last fsync");
    });
}
