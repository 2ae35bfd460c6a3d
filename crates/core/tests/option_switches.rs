//! One volume across mounts with different options: GC policy (f2fs, scale, device, none),
//! allocation mode (lfs, adaptive), mlog mapping (ino, thread), inline/noinline, and ro
//! after a crash. The volume is aged first (filled, overwritten, partly deleted, so that
//! cleaning has work); after each switch every file, directory, mode, xattr and symlink
//! must be as before, fsck clean, the volume usable (more writes, cleaning, fsync, remount)
//! and statfs honest. A power cut in the first checkpoint after a switch must lose nothing
//! fsync'd.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, DevError, RamDevice, SimDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

mod common;

const VOL_BLOCKS: u64 = (96 << 20) / 4096;

/// A volume size that leaves room for `mk`'s mlogs and sections.
fn vol_blocks(mk: &MkfsOptions) -> u64 {
    if mk.segs_per_sec >= 4 {
        (512 << 20) / 4096
    } else if mk.mlogs > 1 || mk.segs_per_sec > 1 {
        (256 << 20) / 4096
    } else {
        VOL_BLOCKS
    }
}

/// Test mounts: no timers (the tests drive checkpoints and cleaning), one flusher.
fn base() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc_workers: 2,
        ..MountOptions::default()
    }
}

fn with(f: impl FnOnce(&mut MountOptions)) -> MountOptions {
    let mut o = base();
    f(&mut o);
    o
}

fn gc(p: &str) -> MountOptions {
    with(|o| o.gc = p.parse().unwrap())
}

fn fsck_clean(dev: &dyn BlockDevice, when: &str) -> fsck::FsckReport {
    let r = fsck::fsck(dev).unwrap();
    assert!(r.is_clean(), "{when}: fsck: {r}");
    r
}

/// What one path holds: kind and mode, size, contents (files), target (symlinks), xattrs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    mode: u32,
    size: u64,
    uid: u32,
    gid: u32,
    nlink: u32,
    data: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

type Tree = BTreeMap<String, Entry>;

/// Everything reachable from the root, read through the file system.
fn snapshot(fs: &Fs) -> Tree {
    let mut out = Tree::new();
    let mut todo = vec![(String::new(), ROOT_INO)];
    while let Some((path, ino)) = todo.pop() {
        let a = fs.getattr(ino).unwrap();
        let mut xattrs = BTreeMap::new();
        for n in fs.listxattr(ino).unwrap() {
            let v = fs.getxattr(ino, &n).unwrap();
            xattrs.insert(n, v);
        }
        let kind = a.mode & 0o170000;
        let mut e = Entry {
            mode: a.mode,
            size: a.size,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            data: None,
            link: None,
            xattrs,
        };
        if kind == 0o100000 {
            let mut v = vec![0u8; a.size as usize];
            let mut off = 0;
            while off < v.len() {
                let n = fs.read(ino, off as u64, &mut v[off..]).unwrap();
                assert!(n > 0, "{path}: short read at {off} of {}", a.size);
                off += n;
            }
            e.data = Some(v);
        } else if kind == 0o120000 {
            e.link = Some(fs.readlink(ino).unwrap());
        } else if kind == 0o040000 {
            let mut off = 0;
            loop {
                let ents = fs.readdir(ino, off, 128).unwrap();
                if ents.is_empty() {
                    break;
                }
                for d in &ents {
                    off = d.next_offset;
                    if d.name == b"." || d.name == b".." {
                        continue;
                    }
                    let name = String::from_utf8(d.name.clone()).unwrap();
                    todo.push((format!("{path}/{name}"), d.ino));
                }
            }
        }
        out.insert(if path.is_empty() { "/".into() } else { path }, e);
    }
    out
}

fn assert_same(want: &Tree, got: &Tree, when: &str) {
    for (p, w) in want {
        let Some(g) = got.get(p) else {
            panic!("{when}: {p} is missing")
        };
        if w != g {
            let first = match (&w.data, &g.data) {
                (Some(a), Some(b)) => (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)),
                _ => None,
            };
            panic!(
                "{when}: {p} differs: mode {:o}/{:o} size {}/{} nlink {}/{} link {:?}/{:?} \
                 xattrs {:?}/{:?}, first differing byte {first:?}",
                w.mode,
                g.mode,
                w.size,
                g.size,
                w.nlink,
                g.nlink,
                w.link,
                g.link,
                w.xattrs.keys().collect::<Vec<_>>(),
                g.xattrs.keys().collect::<Vec<_>>()
            );
        }
    }
    for p in got.keys() {
        assert!(want.contains_key(p), "{when}: {p} appeared");
    }
}

/// Blocks the files of `t` take at least (data only).
fn data_blocks(t: &Tree) -> u64 {
    t.values()
        .filter_map(|e| e.data.as_ref())
        .map(|d| (d.len() as u64).div_ceil(4096))
        .sum()
}

/// statfs is honest: free is below total, and total minus free covers the data.
fn assert_statfs_honest(fs: &Fs, t: &Tree, when: &str) {
    let s = fs.statfs();
    assert!(s.blocks_free <= s.blocks, "{when}: {s:?}");
    let used = s.blocks - s.blocks_free;
    // Inline files take no data block; allow them.
    let need = data_blocks(t).saturating_sub(t.len() as u64);
    assert!(
        used >= need,
        "{when}: statfs says {used} blocks used, the files hold at least {need}: {s:?}"
    );
}

/// Age the volume: a tree of directories with files of all sizes (inline ones too),
/// xattrs, symlinks and modes; overwrites; deletions. `round` varies names and bytes.
/// Returns nothing: the state is read back with `snapshot`.
fn age(fs: &Fs, seed: u64, round: u32, fill_pct: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed * 1000 + round as u64);
    let dir = format!("/r{round}");
    let d = fs.mkdir_all(&dir).unwrap();
    fs.setxattr(
        d,
        b"user.round",
        format!("{round}").as_bytes(),
        XattrMode::Any,
    )
    .unwrap();
    for k in 0..4 {
        fs.mkdir_all(&format!("{dir}/sub{k}/deeper")).unwrap();
    }
    let total = fs.statfs().blocks;
    let budget = total * fill_pct / 100;
    let mut files: Vec<(String, Ino, u64)> = Vec::new();
    let mut written = 0u64;
    let mut n = 0;
    // Fill with files of mixed sizes.
    while total - fs.statfs().blocks_free < budget && n < 3000 {
        let sz = match rng.random_range(0..10) {
            0..=2 => rng.random_range(1..3000u64), // inline-sized
            3..=6 => rng.random_range(4096..64 << 10),
            _ => rng.random_range(64 << 10..1 << 20),
        };
        let path = format!("{dir}/sub{}/f{n}", n % 4);
        let byte = (n as u8).wrapping_mul(7).wrapping_add(round as u8);
        let data: Vec<u8> = (0..sz).map(|i| byte ^ (i as u8)).collect();
        let ino = fs.write_file(&path, &data).unwrap();
        fs.setattr(
            ino,
            &SetAttr {
                mode: Some(0o600 + (n as u32 % 0o100)),
                ..Default::default()
            },
        )
        .unwrap();
        if n % 3 == 0 {
            fs.setxattr(ino, b"user.n", format!("{n}").as_bytes(), XattrMode::Any)
                .unwrap();
        }
        if n % 17 == 0 {
            fs.setxattr(ino, b"user.big", &vec![n as u8; 1500], XattrMode::Any)
                .unwrap();
        }
        if n % 25 == 0 {
            let (p, name) = fs.resolve_parent(&path).unwrap();
            let _ = fs.symlink(p, format!("l{n}").as_bytes(), name.as_bytes(), 0, 0);
        }
        files.push((path, ino, sz));
        written += sz;
        n += 1;
    }
    fs.sync().unwrap();
    // Overwrite: random blocks of random files, so that sections hold dead blocks.
    for i in 0..(written / 4096 / 2).min(20_000) {
        let (_, ino, sz) = files[rng.random_range(0..files.len())];
        if sz < 4096 {
            continue;
        }
        let off = rng.random_range(0..sz / 4096) * 4096;
        let len = 4096.min(sz - off) as usize;
        fs.write(ino, off, &vec![(i % 251) as u8; len]).unwrap();
    }
    // Delete a third, truncate some.
    for (k, (path, ino, sz)) in files.iter().enumerate() {
        if k % 3 == 1 {
            let (p, name) = fs.resolve_parent(path).unwrap();
            fs.unlink(p, name.as_bytes()).unwrap();
        } else if k % 7 == 2 && *sz > 8192 {
            fs.setattr(
                *ino,
                &SetAttr {
                    size: Some(sz / 2 + 1),
                    ..Default::default()
                },
            )
            .unwrap();
        }
    }
    // A hard link.
    if let Some((path, ino, _)) = files.iter().find(|(p, _, _)| p.ends_with("/f0")) {
        let _ = path;
        let (p, _) = fs.resolve_parent(&format!("{dir}/x")).unwrap();
        let _ = fs.link(*ino, p, b"hardlink");
    }
    fs.sync().unwrap();
}

/// Unmount, fsck, mount with `opts` (must succeed), compare with `want`, check fsck is clean
/// and statfs is honest. Returns the new mount.
fn switch(dev: &Arc<dyn BlockDevice>, fs: Fs, opts: MountOptions, want: &Tree, when: &str) -> Fs {
    let sf = fs.statfs();
    fs.unmount().unwrap();
    fsck_clean(&**dev, &format!("{when}: before the switch"));
    let fs = Fs::mount(dev.clone(), opts).unwrap_or_else(|e| panic!("{when}: mount: {e}"));
    let got = snapshot(&fs);
    assert_same(want, &got, when);
    assert_statfs_honest(&fs, &got, when);
    let now = fs.statfs();
    assert_eq!(
        (sf.blocks, sf.blocks_free, sf.files_free),
        (now.blocks, now.blocks_free, now.files_free),
        "{when}: statfs changed across the switch"
    );
    common::assert_budget_exact(&fs, &format!("{when}: after the switch"));
    fs
}

/// Use the volume with its new options: write more, delete, clean, fsync, sync; then an
/// unmount and a remount with the same options read the same tree. Returns the mount and
/// its tree.
fn use_it(
    dev: &Arc<dyn BlockDevice>,
    fs: Fs,
    opts: &MountOptions,
    seed: u64,
    round: u32,
    when: &str,
) -> (Fs, Tree) {
    age(&fs, seed, round, 80);
    // Cleaning must run and find work.
    let before = fs.statfs().blocks_free;
    let cleaned = fs.gc(4).unwrap_or_else(|e| panic!("{when}: gc: {e}"));
    eprintln!(
        "{when}: cleaned {cleaned} sections, free {before} -> {}",
        fs.statfs().blocks_free
    );
    let ino = fs
        .write_file(&format!("/fsync{round}"), &[round as u8; 10000])
        .unwrap();
    fs.fsync(ino, false).unwrap();
    fs.sync().unwrap();
    let t = snapshot(&fs);
    assert_statfs_honest(&fs, &t, when);
    common::assert_budget_exact(&fs, &format!("{when}: after use"));
    fs.unmount().unwrap();
    fsck_clean(&**dev, &format!("{when}: after use"));
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    assert_same(
        &t,
        &snapshot(&fs),
        &format!("{when}: after use and a remount"),
    );
    (fs, t)
}

/// A fresh aged volume on a RAM device.
fn aged(mk: &MkfsOptions, opts: MountOptions, seed: u64) -> (Arc<dyn BlockDevice>, Fs, Tree) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(vol_blocks(mk)));
    Fs::mkfs(dev.clone(), mk).unwrap();
    let fs = Fs::mount(dev.clone(), opts).unwrap();
    age(&fs, seed, 0, 70);
    age(&fs, seed, 1, 80);
    let t = snapshot(&fs);
    (dev, fs, t)
}

/// Run `opts` one after the other on one aged volume (made with `mk`): after each switch the
/// tree is intact, then used.
fn chain(mk: MkfsOptions, steps: &[(&str, MountOptions)], seed: u64) {
    let (dev, mut fs, mut t) = aged(&mk, steps[0].1.clone(), seed);
    for (i, (name, o)) in steps.iter().enumerate().skip(1) {
        fs = switch(&dev, fs, o.clone(), &t, name);
        let (f, nt) = use_it(&dev, fs, o, seed, 10 + i as u32, name);
        fs = f;
        t = nt;
    }
    fs.unmount().unwrap();
    fsck_clean(&*dev, "end");
}

#[test]
fn gc_f2fs_scale_f2fs() {
    chain(
        MkfsOptions::default(),
        &[
            ("f2fs", gc("f2fs")),
            ("scale", gc("scale")),
            ("f2fs again", gc("f2fs")),
        ],
        1,
    );
}

#[test]
fn gc_f2fs_scale_with_large_sections_and_mlogs() {
    let mk = MkfsOptions {
        segs_per_sec: 4,
        mlogs: 2,
        label: "switch".into(),
        ..MkfsOptions::default()
    };
    chain(
        mk,
        &[
            ("f2fs", gc("f2fs")),
            ("scale", gc("scale")),
            ("f2fs lfs", with(|o| o.alloc_mode = AllocMode::Lfs)),
            ("scale adaptive", gc("scale")),
        ],
        2,
    );
}

#[test]
fn mode_lfs_adaptive_lfs() {
    chain(
        MkfsOptions {
            segs_per_sec: 2,
            ..MkfsOptions::default()
        },
        &[
            ("adaptive", base()),
            ("lfs", with(|o| o.alloc_mode = AllocMode::Lfs)),
            ("adaptive again", base()),
            ("lfs again", with(|o| o.alloc_mode = AllocMode::Lfs)),
        ],
        3,
    );
}

#[test]
fn mlog_ino_thread_ino() {
    let mk = MkfsOptions {
        mlogs: 3,
        ..MkfsOptions::default()
    };
    chain(
        mk,
        &[
            ("ino", base()),
            ("thread", with(|o| o.mlog_map = MlogMap::Thread)),
            ("ino again", base()),
            (
                "thread scale",
                with(|o| {
                    o.mlog_map = MlogMap::Thread;
                    o.gc = GcPolicy::Scale;
                }),
            ),
        ],
        4,
    );
}

#[test]
fn inline_then_noinline_then_inline() {
    chain(
        MkfsOptions::default(),
        &[
            ("inline", base()),
            ("noinline", with(|o| o.inline = false)),
            ("inline again", base()),
        ],
        5,
    );
}

/// Inline files and directories made under `inline`, then grown, shrunk, punched, extended,
/// xattr'd and renamed under `noinline`: each stays readable and matches a model.
#[test]
fn inline_files_stay_readable_and_writable_under_noinline() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOL_BLOCKS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    for i in 0..8 {
        let d: Vec<u8> = (0..(100 + i * 300)).map(|k| (k + i) as u8).collect();
        fs.write_file(&format!("/i{i}"), &d).unwrap();
        model.push(d);
    }
    let dir = fs.mkdir(ROOT_INO, b"idir", 0o755, 0, 0).unwrap().ino;
    for k in 0..5 {
        fs.create(dir, format!("e{k}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), with(|o| o.inline = false)).unwrap();
    for (i, m) in model.iter_mut().enumerate() {
        let ino = fs.resolve(&format!("/i{i}")).unwrap();
        assert_eq!(
            fs.read_file(&format!("/i{i}")).unwrap(),
            *m,
            "i{i} before writes"
        );
        match i % 4 {
            // small write inside the inline area
            0 => common::write_both(&fs, ino, m, 10, 20, 0xAA),
            // grow past inline
            1 => common::write_both(&fs, ino, m, 3000, 9000, 0xBB),
            // extend by truncate, then write into the hole
            2 => {
                common::truncate_both(&fs, ino, m, 20000);
                common::write_both(&fs, ino, m, 15000, 10, 0xCC);
            }
            // punch, then shrink
            _ => {
                common::punch_both(&fs, ino, m, 50, 100);
                common::truncate_both(&fs, ino, m, 70);
            }
        }
        fs.setxattr(ino, b"user.x", &[i as u8; 300], XattrMode::Any)
            .unwrap();
        assert_eq!(
            fs.read_file(&format!("/i{i}")).unwrap(),
            *m,
            "i{i} after writes"
        );
    }
    for k in 5..300 {
        fs.create(
            dir,
            format!("entry-with-a-longer-name-{k}").as_bytes(),
            0o644,
            0,
            0,
        )
        .unwrap();
    }
    fs.rename(dir, b"e0", ROOT_INO, b"moved", RenameFlags::default())
        .unwrap();
    let ino = fs.resolve("/i0").unwrap();
    fs.fsync(ino, false).unwrap();
    let t = snapshot(&fs);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "noinline");
    for o in [with(|o| o.inline = false), base()] {
        let fs = Fs::mount(dev.clone(), o).unwrap();
        assert_same(&t, &snapshot(&fs), "remount");
        for (i, m) in model.iter().enumerate() {
            assert_eq!(
                fs.read_file(&format!("/i{i}")).unwrap(),
                *m,
                "i{i} after remount"
            );
        }
        fs.unmount().unwrap();
        fsck_clean(&*dev, "remount");
    }
}

// ---- gc=device and gc=none: other devices --------------------------------------------

/// gc=device volumes live on the coupled SSD, which refuses other policies read-write;
/// `ro` with another policy reads them. Aged under gc=device, then: f2fs and scale refused
/// with a clear error (not a panic), ro f2fs reads the same tree, device again works.
#[test]
fn gc_device_and_other_policies_on_the_coupled_ssd() {
    let ssd = common::emulated_ssd("coupled", 512 << 20);
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let dopts = gc("device");
    let fs = Fs::mount(dev.clone(), dopts.clone()).unwrap();
    age(&fs, 6, 0, 60);
    age(&fs, 6, 1, 70);
    let t = snapshot(&fs);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "device");
    for p in ["f2fs", "scale", "none"] {
        match Fs::mount(dev.clone(), gc(p)) {
            Ok(fs) => {
                let got = snapshot(&fs);
                fs.unmount().unwrap();
                panic!(
                    "gc={p} mounted the coupled device read-write ({} paths)",
                    got.len()
                );
            }
            Err(e) => eprintln!("gc={p} refused: {e}"),
        }
    }
    let fs = Fs::mount(dev.clone(), with(|o| o.read_only = true)).unwrap();
    assert_same(&t, &snapshot(&fs), "ro f2fs on the coupled device");
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after ro");
    let fs = Fs::mount(dev.clone(), dopts.clone()).unwrap();
    assert_same(&t, &snapshot(&fs), "device again");
    let (fs, _t) = use_it(&dev, fs, &dopts, 6, 2, "device again");
    fs.unmount().unwrap();
    fsck_clean(&*dev, "end");
}

/// The image of a gc=device volume copied to a plain device (e.g. `dd` to a file): mounting
/// it with f2fs must work with the data intact, or be refused; never corrupt or panic.
#[test]
fn gc_device_volume_image_on_a_plain_device_with_f2fs() {
    let ssd = common::emulated_ssd("coupled", 512 << 20);
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), gc("device")).unwrap();
    age(&fs, 7, 0, 60);
    let t = snapshot(&fs);
    fs.unmount().unwrap();
    let n = dev.capabilities().block_count;
    let img: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(n));
    let mut b = vec![0u8; 4096];
    for a in 0..n {
        dev.read(a, &mut b).unwrap();
        if b.iter().any(|&x| x != 0) {
            img.write(a, &b).unwrap();
        }
    }
    let r = fsck::fsck(&*img).unwrap();
    eprintln!("fsck of the copy: {r}");
    match Fs::mount(img.clone(), gc("f2fs")) {
        Err(e) => eprintln!("f2fs on the copy refused: {e}"),
        Ok(fs) => {
            assert_same(&t, &snapshot(&fs), "f2fs on the copy");
            let (fs, _) = use_it(&img, fs, &gc("f2fs"), 7, 3, "f2fs on the copy");
            fs.unmount().unwrap();
            fsck_clean(&*img, "f2fs on the copy, end");
        }
    }
}

/// gc=none volumes (infinite device, no SIT/SSA): every other policy is refused with a
/// clear error, ro works, gc=none again works; and a gc=none mount of a finite volume is
/// refused too.
#[test]
fn gc_none_and_other_policies() {
    let ssd = common::emulated_ssd("interval", 256 << 20);
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let nopts = gc("none");
    let fs = Fs::mount(dev.clone(), nopts.clone()).unwrap();
    age(&fs, 8, 0, 60);
    let t = snapshot(&fs);
    let sf = fs.statfs();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "none");
    for p in ["f2fs", "scale", "device"] {
        for ro in [false, true] {
            let o = with(|o| {
                o.gc = p.parse().unwrap();
                o.read_only = ro;
            });
            match Fs::mount(dev.clone(), o) {
                Ok(fs) => {
                    let got = snapshot(&fs);
                    let r = if ro { Ok(()) } else { fs.unmount() };
                    fsck_clean(&*dev, &format!("after gc={p} ro={ro}"));
                    assert_same(&t, &got, &format!("gc={p} ro={ro} on the infinite volume"));
                    panic!("gc={p} ro={ro} mounted an infinite volume (unmount {r:?})");
                }
                Err(e) => eprintln!("gc={p} ro={ro} refused: {e}"),
            }
        }
    }
    let fs = Fs::mount(
        dev.clone(),
        with(|o| {
            o.gc = GcPolicy::None;
            o.read_only = true;
        }),
    )
    .unwrap();
    assert_same(&t, &snapshot(&fs), "ro none");
    let s2 = fs.statfs();
    assert_eq!(
        (sf.blocks, sf.blocks_free),
        (s2.blocks, s2.blocks_free),
        "ro none: statfs"
    );
    fs.unmount().unwrap();
    let fs = Fs::mount(
        dev.clone(),
        with(|o| {
            o.gc = GcPolicy::None;
            o.cp_tail = false;
        }),
    )
    .unwrap();
    assert_same(&t, &snapshot(&fs), "none again");
    let s3 = fs.statfs();
    assert_eq!(
        (sf.blocks, sf.blocks_free),
        (s3.blocks, s3.blocks_free),
        "none again: statfs"
    );
    let (fs, _) = use_it_none(&dev, fs, &nopts);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "none end");

    // A finite volume (f2fs-aged), mounted gc=none: refused, nothing written.
    let (fdev, ffs, ft) = aged(&MkfsOptions::default(), base(), 9);
    ffs.unmount().unwrap();
    for ro in [false, true] {
        let o = with(|o| {
            o.gc = GcPolicy::None;
            o.read_only = ro;
        });
        if let Ok(fs) = Fs::mount(fdev.clone(), o) {
            let got = snapshot(&fs);
            fs.unmount().unwrap();
            fsck_clean(&*fdev, "gc=none on finite");
            assert_same(&ft, &got, "gc=none on finite");
            panic!("gc=none ro={ro} mounted a finite volume");
        }
    }
    let fs = Fs::mount(fdev.clone(), base()).unwrap();
    assert_same(&ft, &snapshot(&fs), "f2fs after the gc=none attempts");
    fs.unmount().unwrap();
    fsck_clean(&*fdev, "finite end");
}

/// The image of a gc=none volume copied to a plain finite device of the same size, then
/// mounted with f2fs or none: refused (or works with all data).
#[test]
fn gc_none_image_on_a_plain_device() {
    let ssd = common::emulated_ssd("interval", 256 << 20);
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), gc("none")).unwrap();
    for i in 0..20 {
        fs.write_file(&format!("/f{i}"), &vec![i as u8; 50_000])
            .unwrap();
    }
    let t = snapshot(&fs);
    fs.unmount().unwrap();
    let caps = dev.capabilities().clone();
    eprintln!(
        "interval device: block_count {} capacity {}",
        caps.block_count, caps.capacity_blocks
    );
    // The plain device: as many blocks as the infinite one's capacity, holding the image's
    // blocks that fit.
    let n = caps.capacity_blocks.max(1 << 16);
    let img: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(n));
    let mut b = vec![0u8; 4096];
    for a in 0..n.min(caps.block_count) {
        if dev.read(a, &mut b).is_ok() && b.iter().any(|&x| x != 0) {
            img.write(a, &b).unwrap();
        }
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fsck::fsck(&*img)));
    eprintln!(
        "fsck of the copy: {:?}",
        r.as_ref().map(|r| r.as_ref().map(|r| r.is_clean()))
    );
    for p in ["f2fs", "none", "scale"] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Fs::mount(img.clone(), gc(p))
        }));
        match r {
            Err(_) => panic!("gc={p}: mount of the copied infinite volume panicked"),
            Ok(Err(e)) => eprintln!("gc={p} on the copy refused: {e}"),
            Ok(Ok(fs)) => {
                assert_same(&t, &snapshot(&fs), &format!("gc={p} on the copy"));
                fs.unmount().unwrap();
            }
        }
    }
}

fn use_it_none(dev: &Arc<dyn BlockDevice>, fs: Fs, o: &MountOptions) -> (Fs, Tree) {
    for i in 0..30 {
        fs.write_file(&format!("/n{i}"), &vec![i as u8; 30_000])
            .unwrap();
    }
    for i in 0..30 {
        if i % 2 == 0 {
            fs.unlink(ROOT_INO, format!("n{i}").as_bytes()).unwrap();
        }
    }
    let ino = fs.resolve("/n1").unwrap();
    fs.fsync(ino, false).unwrap();
    fs.sync().unwrap();
    let t = snapshot(&fs);
    fs.unmount().unwrap();
    fsck_clean(&**dev, "none use");
    let fs = Fs::mount(dev.clone(), o.clone()).unwrap();
    assert_same(&t, &snapshot(&fs), "none use remount");
    (fs, t)
}

// ---- ro after a crash that needs roll-forward -----------------------------------------

/// fsync'd data after the last checkpoint, then a crash: a ro mount must replay it, or
/// refuse; it must not show the stale checkpointed contents. Then a rw mount recovers it,
/// and fsck is clean at every step.
#[test]
fn ro_after_a_crash_that_needs_roll_forward() {
    let sim = Arc::new(SimDevice::new(VOL_BLOCKS));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let ino = fs.write_file("/a", &[1u8; 20000]).unwrap();
    fs.sync().unwrap();
    fs.write(ino, 0, &[2u8; 8192]).unwrap();
    fs.fsync(ino, false).unwrap();
    let new = fs.write_file("/new", &[3u8; 5000]).unwrap();
    fs.fsync(new, false).unwrap();
    sim.cut_now();
    fs.abandon();
    let img = Arc::new(sim.crash_image(CrashMode::DropUnflushed, 1));
    let img: Arc<dyn BlockDevice> = img;
    fsck_clean(&*img, "after the cut");
    for p in ["f2fs", "scale"] {
        let ro = with(|o| {
            o.read_only = true;
            o.gc = p.parse().unwrap();
        });
        match Fs::mount(img.clone(), ro) {
            Err(e) => eprintln!("ro gc={p} refused: {e}"),
            Ok(fs) => {
                let a = fs.read_file("/a").unwrap();
                assert_eq!(
                    &a[..8192],
                    &[2u8; 8192][..],
                    "ro shows stale contents of /a"
                );
                assert_eq!(fs.read_file("/new").unwrap(), vec![3u8; 5000], "ro: /new");
                fs.unmount().unwrap();
            }
        }
    }
    fsck_clean(&*img, "after the ro attempts");
    // rw with another policy recovers.
    let fs = Fs::mount(img.clone(), gc("scale")).unwrap();
    let mut a = vec![1u8; 20000];
    a[..8192].fill(2);
    assert_eq!(fs.read_file("/a").unwrap(), a);
    assert_eq!(fs.read_file("/new").unwrap(), vec![3u8; 5000]);
    fs.unmount().unwrap();
    fsck_clean(&*img, "after recovery");
    let fs = Fs::mount(img.clone(), with(|o| o.read_only = true)).unwrap();
    assert_eq!(fs.read_file("/a").unwrap(), a);
    fs.unmount().unwrap();
}

/// A crash with nothing to roll forward but orphans (an open unlinked file): ro mounts, shows
/// the tree, and leaves the orphan for the next rw mount, which frees it.
#[test]
fn ro_after_a_crash_with_an_orphan() {
    let sim = Arc::new(SimDevice::new(VOL_BLOCKS));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let keep = fs.write_file("/keep", &[5u8; 30000]).unwrap();
    let gone = fs.write_file("/gone", &[6u8; 400_000]).unwrap();
    fs.open(gone).unwrap();
    fs.unlink(ROOT_INO, b"gone").unwrap();
    fs.sync().unwrap();
    let free_with_orphan = fs.statfs().blocks_free;
    let _ = keep;
    sim.cut_now();
    fs.abandon();
    let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(CrashMode::DropUnflushed, 2));
    fsck_clean(&*img, "after the cut");
    let fs = Fs::mount(img.clone(), with(|o| o.read_only = true)).unwrap();
    assert_eq!(fs.read_file("/keep").unwrap(), vec![5u8; 30000]);
    assert!(fs.resolve("/gone").is_err());
    let ro_free = fs.statfs().blocks_free;
    fs.unmount().unwrap();
    fsck_clean(&*img, "after ro");
    let fs = Fs::mount(img.clone(), base()).unwrap();
    let rw_free = fs.statfs().blocks_free;
    eprintln!("free: with orphan {free_with_orphan}, ro {ro_free}, rw {rw_free}");
    assert!(rw_free >= free_with_orphan + 90, "the orphan was not freed");
    fs.unmount().unwrap();
    fsck_clean(&*img, "end");
}

// ---- a power cut in the first checkpoint after a switch --------------------------------

fn is_cut(e: &Error) -> bool {
    matches!(e, Error::Device(DevError::PowerCut)) || matches!(e, Error::Poisoned(_))
}

/// Aged under `from` on a SimDevice, cleanly unmounted; mounted with `to`; files changed and
/// fsync'd, then more changed (not fsync'd); the first checkpoint (a sync after cleaning)
/// is cut at its request `k`, for a range of `k`. After the crash, fsck is clean, a mount
/// with `to` (and one with `from`) shows every fsync'd file, and the rest of the tree either
/// as before the switch or as changed.
fn cut_first_checkpoint_after_switch(
    from: MountOptions,
    to: MountOptions,
    mk: MkfsOptions,
    seed: u64,
) {
    let sim = Arc::new(SimDevice::new(vol_blocks(&mk)));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &mk).unwrap();
    let fs = Fs::mount(dev.clone(), from.clone()).unwrap();
    age(&fs, seed, 0, 70);
    fs.unmount().unwrap();
    let base_img = sim.clean_image();
    // Count the requests of the first checkpoint once, then cut at points across it.
    /// The image (clean, or the crash image of a cut), the files synced before, the tree
    /// expected, and the requests of the checkpoint (without a cut).
    type Cut = (RamDevice, BTreeMap<String, Vec<u8>>, Tree, u64);
    let run = |k: Option<u64>| -> Option<Cut> {
        let sim = Arc::new(SimDevice::from_image(base_img.deep_clone()));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        let fs = Fs::mount(dev.clone(), to.clone()).unwrap();
        let before = snapshot(&fs);
        let mut synced = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..6 {
            let data: Vec<u8> = (0..rng.random_range(1..200_000usize))
                .map(|x| (x as u8) ^ (i as u8 * 13))
                .collect();
            let ino = fs.write_file(&format!("/synced{i}"), &data).unwrap();
            fs.fsync(ino, false).unwrap();
            synced.insert(format!("/synced{i}"), data);
        }
        // Unsynced changes: deletions in the aged tree, overwrites.
        let mut t = snapshot(&fs);
        let victims: Vec<String> = t
            .iter()
            .filter(|(p, e)| e.data.is_some() && p.contains("/sub1/"))
            .map(|(p, _)| p.clone())
            .take(30)
            .collect();
        for p in &victims {
            let (d, n) = fs.resolve_parent(p).unwrap();
            fs.unlink(d, n.as_bytes()).unwrap();
        }
        t = snapshot(&fs);
        let start = sim.ops();
        if let Some(k) = k {
            sim.cut_at(start + k, k % 3);
        }
        let r = fs.gc(3).and_then(|_| fs.sync());
        match (k, r) {
            (None, Ok(())) => {
                let n = sim.ops() - start;
                eprintln!("first checkpoint after the switch: {n} requests");
                fs.unmount().unwrap();
                Some((sim.clean_image(), synced, t, n))
            }
            (None, Err(e)) => panic!("no cut: {e}"),
            (Some(_), Ok(())) => {
                // Finished before the cut point.
                fs.abandon();
                Some((
                    sim.crash_image(CrashMode::DropUnflushed, seed),
                    synced,
                    before,
                    0,
                ))
            }
            (Some(k), Err(e)) => {
                assert!(is_cut(&e), "cut at {k}: {e}");
                fs.abandon();
                let _ = t;
                Some((
                    sim.crash_image(CrashMode::KeepRandomSubset, seed + k),
                    synced,
                    before,
                    0,
                ))
            }
        }
    };
    let (_, _, _, total) = run(None).unwrap();
    // Cut points: every other request of the cleaning and the checkpoint (and the last).
    for k in (0..=total).step_by(2).chain([total]) {
        let (img, synced, before, _) = run(Some(k)).unwrap();
        let img: Arc<dyn BlockDevice> = Arc::new(img);
        fsck_clean(&*img, &format!("cut at {k}"));
        for o in [to.clone(), from.clone()] {
            let fs = Fs::mount(img.clone(), o.clone())
                .unwrap_or_else(|e| panic!("cut at {k}: mount {:?}: {e}", o.gc));
            for (p, d) in &synced {
                let got = fs
                    .read_file(p)
                    .unwrap_or_else(|e| panic!("cut at {k}: fsync'd {p} lost: {e}"));
                assert!(got == *d, "cut at {k}: fsync'd {p} differs");
            }
            let now = snapshot(&fs);
            // Aged files not deleted since must be intact.
            for (p, e) in &before {
                if p.contains("/sub1/") || p == "/" || p.starts_with("/synced") {
                    continue;
                }
                match now.get(p) {
                    Some(g) => assert!(
                        g == e || e.mode & 0o170000 == 0o040000,
                        "cut at {k}: {p} differs"
                    ),
                    None => panic!("cut at {k}: {p} lost"),
                }
            }
            fs.unmount().unwrap();
            fsck_clean(
                &*img,
                &format!("cut at {k}, after a remount with gc={:?}", o.gc),
            );
        }
    }
}

#[test]
fn cut_in_first_checkpoint_f2fs_to_scale() {
    cut_first_checkpoint_after_switch(gc("f2fs"), gc("scale"), MkfsOptions::default(), 11);
}

#[test]
fn cut_in_first_checkpoint_scale_to_f2fs_lfs() {
    cut_first_checkpoint_after_switch(
        gc("scale"),
        with(|o| o.alloc_mode = AllocMode::Lfs),
        MkfsOptions {
            segs_per_sec: 2,
            ..MkfsOptions::default()
        },
        12,
    );
}

#[test]
fn cut_in_first_checkpoint_ino_to_thread() {
    cut_first_checkpoint_after_switch(
        base(),
        with(|o| o.mlog_map = MlogMap::Thread),
        MkfsOptions {
            mlogs: 3,
            ..MkfsOptions::default()
        },
        13,
    );
}

/// A crash with fsync'd data (roll-forward due) under one policy, recovered by a mount with
/// another policy / mode / mapping; then the first checkpoint of that recovery mount cut.
#[test]
fn roll_forward_under_switched_options() {
    let variants: Vec<(&str, MountOptions, MountOptions)> = vec![
        ("f2fs->scale", gc("f2fs"), gc("scale")),
        ("scale->f2fs", gc("scale"), gc("f2fs")),
        (
            "ino->thread",
            base(),
            with(|o| o.mlog_map = MlogMap::Thread),
        ),
        (
            "thread->ino",
            with(|o| o.mlog_map = MlogMap::Thread),
            base(),
        ),
        (
            "adaptive->lfs",
            base(),
            with(|o| o.alloc_mode = AllocMode::Lfs),
        ),
        ("inline->noinline", base(), with(|o| o.inline = false)),
    ];
    for (name, from, to) in variants {
        let mk = MkfsOptions {
            mlogs: 2,
            ..MkfsOptions::default()
        };
        let sim = Arc::new(SimDevice::new(vol_blocks(&mk)));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        Fs::mkfs(dev.clone(), &mk).unwrap();
        let fs = Fs::mount(dev.clone(), from.clone()).unwrap();
        age(&fs, 20, 0, 60);
        let model = common::fsync_chains(&fs, 21, 300);
        sim.cut_now();
        fs.abandon();
        let img = sim.crash_image(CrashMode::DropUnflushed, 3);
        let img2 = img.deep_clone();
        let imgd: Arc<dyn BlockDevice> = Arc::new(img);
        fsck_clean(&*imgd, name);
        let fs = Fs::mount(imgd.clone(), to.clone()).unwrap();
        common::assert_files_hold(&fs, &model, name);
        common::assert_budget_exact(&fs, &format!("{name}: after recovery"));
        let t = snapshot(&fs);
        fs.unmount().unwrap();
        fsck_clean(&*imgd, name);
        let fs = Fs::mount(imgd.clone(), from.clone()).unwrap();
        assert_same(&t, &snapshot(&fs), &format!("{name}: back"));
        fs.unmount().unwrap();
        // The recovery mount's own checkpoint cut at several points.
        for k in [0u64, 1, 3, 7, 15, 40, 100] {
            let s2 = Arc::new(SimDevice::from_image(img2.deep_clone()));
            s2.cut_at(k, k % 2);
            let d2: Arc<dyn BlockDevice> = s2.clone();
            match Fs::mount(d2, to.clone()) {
                Ok(fs) => fs.abandon(),
                Err(e) => assert!(is_cut(&e), "{name}: cut at {k}: {e}"),
            }
            let i3: Arc<dyn BlockDevice> = Arc::new(s2.crash_image(CrashMode::KeepRandomSubset, k));
            fsck_clean(&*i3, &format!("{name}: recovery cut at {k}"));
            let fs = Fs::mount(i3.clone(), from.clone()).unwrap();
            common::assert_files_hold(&fs, &model, &format!("{name}: recovery cut at {k}"));
            fs.unmount().unwrap();
            fsck_clean(&*i3, &format!("{name}: recovery cut at {k}, end"));
        }
    }
}

// ---- more switches ----------------------------------------------------------------------

/// gc=scale with a different number of collectors (and so of DWS write streams in the
/// checkpoint's head table) each mount, with f2fs between.
#[test]
fn scale_workers_change_between_mounts() {
    let w = |n: usize| {
        with(|o| {
            o.gc = GcPolicy::Scale;
            o.gc_workers = n;
        })
    };
    chain(
        MkfsOptions::default(),
        &[
            ("scale 4", w(4)),
            ("scale 1", w(1)),
            ("scale 8", w(8)),
            ("f2fs", base()),
            ("scale 3", w(3)),
            ("scale 64", w(64)),
            ("f2fs lfs", with(|o| o.alloc_mode = AllocMode::Lfs)),
            ("scale 2", w(2)),
        ],
        30,
    );
}

/// `mode=lfs` "never writes into holes" (config.rs AllocMode): after an adaptive mount left
/// a data head thread-logging (SSR), an lfs mount must not write into holes. It did, until
/// that segment ended (171 blocks here): `SegManager::load` sets `ssr` from the on-disk
/// state and the mode came after; an SSR head in lfs mode now leaves its segment first.
#[test]
fn lfs_after_adaptive_writes_no_holes() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOL_BLOCKS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    // Synchronous log writes, no flusher: the same run every time.
    let fs = Fs::mount(dev.clone(), with(|o| o.io_threads = 0)).unwrap();
    let total = fs.statfs().blocks;
    let n = 40usize;
    let blocks = (total * 88 / 100) as usize / n;
    let inos = common::files_of_ones(&fs, n, blocks, |k| format!("f{k}"));
    let mut rng = ChaCha8Rng::seed_from_u64(40);
    let mut i = 0u64;
    while fs.stats().ssr_blocks < 200 && i < 200_000 {
        let f = rng.random_range(0..n);
        let b = rng.random_range(0..blocks);
        fs.write(inos[f], b as u64 * 4096, &[(i % 250) as u8; 4096])
            .unwrap();
        i += 1;
        if i % 5000 == 0 {
            fs.sync().unwrap();
        }
    }
    let ssr_adaptive = fs.stats().ssr_blocks;
    eprintln!("adaptive: {i} overwrites, {ssr_adaptive} SSR blocks");
    assert!(ssr_adaptive > 0, "no threaded logging happened");
    // Stop with the head in the middle of an SSR segment.
    for _ in 0..5 {
        let f = rng.random_range(0..n);
        fs.write(inos[f], 0, &[9u8; 4096]).unwrap();
    }
    fs.unmount().unwrap();
    fsck_clean(&*dev, "adaptive");
    let fs = Fs::mount(
        dev.clone(),
        with(|o| {
            o.alloc_mode = AllocMode::Lfs;
            o.io_threads = 0;
        }),
    )
    .unwrap();
    for j in 0..3000u64 {
        let f = rng.random_range(0..n);
        let b = rng.random_range(0..blocks);
        fs.write(inos[f], b as u64 * 4096, &[(j % 250) as u8; 4096])
            .unwrap();
        if j % 500 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let ssr_lfs = fs.stats().ssr_blocks;
    fs.unmount().unwrap();
    fsck_clean(&*dev, "lfs");
    assert_eq!(ssr_lfs, 0, "mode=lfs wrote {ssr_lfs} blocks into holes");
}

/// acl -> noacl -> acl: the ACL is hidden under noacl (listxattr and getxattr agree), kept
/// on disk, and back under acl; fsck finds no error (a chmod under noacl leaves the ACL
/// stale: a warning, as Linux).
#[test]
fn acl_noacl_acl() {
    use flashlog_format::acl::ACCESS_NAME;
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOL_BLOCKS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let ino = fs.write_file("/a", b"hello").unwrap();
    // user::rw-, user:1000:rwx, group::r--, mask::rwx, other::---
    let mut acl = vec![2u8, 0, 0, 0];
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 7, 1000),
        (4, 4, u32::MAX),
        (0x10, 7, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    fs.setxattr(ino, ACCESS_NAME, &acl, XattrMode::Any).unwrap();
    let stored = fs.getxattr(ino, ACCESS_NAME).unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "acl");
    let fs = Fs::mount(dev.clone(), with(|o| o.acl = false)).unwrap();
    let names = fs.listxattr(ino).unwrap();
    assert!(
        !names.iter().any(|n| n == ACCESS_NAME),
        "noacl lists the ACL"
    );
    assert!(fs.getxattr(ino, ACCESS_NAME).is_err());
    fs.setattr(
        ino,
        &SetAttr {
            mode: Some(0o100600),
            ..Default::default()
        },
    )
    .unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "noacl");
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let now = fs.getxattr(ino, ACCESS_NAME);
    eprintln!(
        "ACL after noacl chmod: {:?} (was {:?}), mode {:o}",
        now.as_ref().map(|v| v.len()),
        stored.len(),
        fs.getattr(ino).unwrap().mode
    );
    assert_eq!(fs.read_file("/a").unwrap(), b"hello");
    fs.unmount().unwrap();
    let r = fsck::fsck(&*dev).unwrap();
    eprintln!("{r}");
    assert!(r.is_clean());
}

/// gc=device: the device cleaned and sent upcalls; power cut before the host applied the
/// last of them. A read-only mount with gc=f2fs (allowed on the coupled device) and then
/// with gc=device must read every block as of its last sync or later; then a rw gc=device
/// mount recovers, fsck clean. Also a plain f2fs volume written onto the coupled device:
/// gc=device refuses it clearly.
#[test]
fn gc_device_crash_then_ro_with_other_policy() {
    let ssd = common::emulated_ssd("coupled", 256 << 20);
    let cut = Arc::new(common::Cut::new(ssd.clone()));
    let dev: Arc<dyn BlockDevice> = cut.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), gc("device")).unwrap();
    let n = 8usize;
    let blocks = (fs.statfs().blocks * 60 / 100) as usize / n;
    let inos = common::files_of_ones(&fs, n, blocks, |k| format!("f{k}"));
    fs.sync().unwrap();
    let mut hist: Vec<common::BlockHistory> = (0..n)
        .map(|_| (vec![1u8; blocks], vec![Vec::new(); blocks]))
        .collect();
    let mut cur: Vec<Vec<u8>> = vec![vec![1u8; blocks]; n];
    let mut rng = ChaCha8Rng::seed_from_u64(50);
    let sent0 = ssd.ftl_stats().upcalls_sent;
    let mut i = 0u64;
    while i < 400_000 {
        let f = rng.random_range(0..n);
        let b = rng.random_range(0..blocks);
        let byte = 2 + (i % 250) as u8;
        hist[f].1[b].push(byte);
        fs.write(inos[f], b as u64 * 4096, &[byte; 4096]).unwrap();
        cur[f][b] = byte;
        i += 1;
        if i % 20_000 == 0 {
            fs.sync().unwrap();
            for (h, c) in hist.iter_mut().zip(&cur) {
                h.0 = c.clone();
                h.1.iter_mut().for_each(|v| v.clear());
            }
        }
        if i % 20_000 == 10_000 && ssd.ftl_stats().upcalls_sent > sent0 + 2 {
            break;
        }
    }
    let st = ssd.ftl_stats();
    eprintln!(
        "{i} overwrites; upcalls sent {} acked {}, records now {}",
        st.upcalls_sent, st.upcalls_acked, st.records_now
    );
    cut.cut.store(true, std::sync::atomic::Ordering::Release);
    fs.abandon();
    ssd.power_cycle();
    let sdev: Arc<dyn BlockDevice> = ssd.clone();
    fsck_clean(&*sdev, "after the cut");
    for o in [
        with(|o| o.read_only = true),
        with(|o| {
            o.read_only = true;
            o.gc = GcPolicy::Device;
        }),
    ] {
        match Fs::mount(sdev.clone(), o.clone()) {
            Err(e) => eprintln!("ro gc={:?} refused: {e}", o.gc),
            Ok(fs) => {
                for k in 0..n {
                    common::assert_blocks_hold_history(
                        &fs,
                        inos[k],
                        &hist[k],
                        &format!("ro {:?} f{k}", o.gc),
                    );
                }
                fs.unmount().unwrap();
            }
        }
        fsck_clean(&*sdev, "after ro");
    }
    let fs = Fs::mount(sdev.clone(), gc("device")).unwrap();
    for k in 0..n {
        common::assert_blocks_hold_history(&fs, inos[k], &hist[k], &format!("rw f{k}"));
    }
    fs.unmount().unwrap();
    fsck_clean(&*sdev, "end");

    // A plain device's volume copied onto a fresh coupled SSD.
    let (fdev, ffs, ft) = aged(&MkfsOptions::default(), base(), 51);
    ffs.unmount().unwrap();
    let ssd2 = common::emulated_ssd("coupled", 256 << 20);
    let mut b = vec![0u8; 4096];
    let cap2 = ssd2.capabilities().block_count - ssd2.capabilities().gc_region_blocks;
    for a in 0..fdev.capabilities().block_count.min(cap2) {
        fdev.read(a, &mut b).unwrap();
        if b.iter().any(|&x| x != 0) {
            ssd2.write(a, &b).unwrap();
        }
    }
    let d2: Arc<dyn BlockDevice> = ssd2.clone();
    match Fs::mount(d2.clone(), gc("device")) {
        Err(e) => eprintln!("gc=device on a plain volume refused: {e}"),
        Ok(fs) => {
            assert_same(&ft, &snapshot(&fs), "gc=device on a plain volume");
            fs.unmount().unwrap();
        }
    }
}

/// gc=none: the options it can switch (cp_tail/nocp_tail, lfs/adaptive, inline/noinline,
/// mlog mapping) alternate each mount, and the first checkpoint after each switch is cut at
/// a different request; fsync'd files survive, fsck is clean, the volume mounts again.
#[test]
fn gc_none_option_switches_with_cuts_in_the_first_checkpoint() {
    let ssd = common::emulated_ssd("interval", 256 << 20);
    let cut = Arc::new(common::Cut::new(ssd.clone()));
    let dev: Arc<dyn BlockDevice> = cut.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let a = gc("none");
    let b = with(|o| {
        o.gc = GcPolicy::None;
        o.cp_tail = false;
        o.alloc_mode = AllocMode::Lfs;
        o.inline = false;
        o.mlog_map = MlogMap::Thread;
    });
    let fs = Fs::mount(dev.clone(), a.clone()).unwrap();
    age(&fs, 60, 0, 50);
    fs.unmount().unwrap();
    let mut synced: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Round r cuts at the r-th changing request from the switching mount on: its own
    // checkpoint (an infinite volume writes one at mount), the fsyncs, the first sync.
    for round in 0..30u64 {
        let (to, back) = if round % 2 == 0 { (&b, &a) } else { (&a, &b) };
        let sdev: Arc<dyn BlockDevice> = cut.clone();
        cut.arm_past_reads(round);
        let r: Result<()> = (|| {
            let fs = Fs::mount(sdev, to.clone())?;
            let res: Result<()> = (|| {
                for (p, d) in &synced {
                    assert!(fs.read_file(p)? == *d, "round {round}: {p}");
                }
                for i in 0..3 {
                    let p = format!("/s{round}-{i}");
                    let d = vec![(round * 3 + i) as u8; 3000 + 9000 * i as usize];
                    let ino = fs.write_file(&p, &d)?;
                    fs.fsync(ino, false)?;
                    synced.insert(p, d);
                }
                let t = snapshot(&fs);
                for p in t
                    .keys()
                    .filter(|p| p.starts_with("/r0/sub") && p.contains("/f"))
                    .take(2)
                {
                    let (d, n) = fs.resolve_parent(p)?;
                    fs.unlink(d, n.as_bytes())?;
                }
                fs.sync()
            })();
            fs.abandon();
            res
        })();
        eprintln!(
            "round {round}: {:?}, {} requests left",
            r.as_ref().err(),
            cut.left()
        );
        if let Err(e) = &r {
            assert!(is_cut(e), "round {round}: {e}");
        }
        cut.cut.store(false, std::sync::atomic::Ordering::Release);
        cut.arm(u64::MAX >> 2);
        ssd.power_cycle();
        fsck_clean(&*ssd, &format!("round {round}: after the cut"));
        let sdev: Arc<dyn BlockDevice> = cut.clone();
        let fs =
            Fs::mount(sdev, back.clone()).unwrap_or_else(|e| panic!("round {round}: remount: {e}"));
        for (p, d) in &synced {
            let got = fs
                .read_file(p)
                .unwrap_or_else(|e| panic!("round {round}: {p}: {e}"));
            assert!(got == *d, "round {round}: {p} differs");
        }
        fs.unmount().unwrap();
        fsck_clean(&*ssd, &format!("round {round}: after a remount"));
    }
}

/// Inline files made under `inline`, then fallocated (every mode) under `noinline`, and the
/// reverse (fallocated inline files under `inline` after noinline wrote others): contents
/// and sizes as a model says, before and after a remount with each option; fsck clean.
#[test]
fn inline_files_fallocated_under_noinline() {
    let modes = [
        FallocMode::Allocate,
        FallocMode::KeepSize,
        FallocMode::PunchHole,
        FallocMode::ZeroRange,
        FallocMode::ZeroRangeKeepSize,
    ];
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOL_BLOCKS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), base()).unwrap();
    let mut model: Vec<Vec<u8>> = Vec::new();
    for i in 0..modes.len() * 2 {
        let d: Vec<u8> = (0..500 + i * 100).map(|k| (k * 3 + i) as u8 | 1).collect();
        fs.write_file(&format!("/fa{i}"), &d).unwrap();
        model.push(d);
    }
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), with(|o| o.inline = false)).unwrap();
    for (i, m) in model.iter_mut().enumerate() {
        let ino = fs.resolve(&format!("/fa{i}")).unwrap();
        let mode = modes[i % modes.len()];
        // Half inside the inline area, half past it.
        let (off, len) = if i < modes.len() {
            (100u64, 200u64)
        } else {
            (1000, 20_000)
        };
        fs.fallocate(ino, mode, off, len)
            .unwrap_or_else(|e| panic!("fa{i} {mode:?}: {e}"));
        let end = (off + len) as usize;
        match mode {
            FallocMode::Allocate => {
                if m.len() < end {
                    m.resize(end, 0)
                }
            }
            FallocMode::KeepSize => {}
            FallocMode::PunchHole | FallocMode::ZeroRangeKeepSize => {
                let e = end.min(m.len());
                let s = (off as usize).min(e);
                m[s..e].fill(0);
            }
            FallocMode::ZeroRange => {
                if m.len() < end {
                    m.resize(end, 0)
                }
                m[off as usize..end].fill(0);
            }
        }
        assert_eq!(
            fs.read_file(&format!("/fa{i}")).unwrap(),
            *m,
            "fa{i} {mode:?}"
        );
        // And write after it.
        common::write_both(&fs, ino, m, 50, 10, 0xEE);
        assert_eq!(
            fs.read_file(&format!("/fa{i}")).unwrap(),
            *m,
            "fa{i} {mode:?} + write"
        );
    }
    fs.unmount().unwrap();
    fsck_clean(&*dev, "noinline fallocate");
    for o in [base(), with(|o| o.inline = false)] {
        let fs = Fs::mount(dev.clone(), o).unwrap();
        for (i, m) in model.iter().enumerate() {
            assert_eq!(
                fs.read_file(&format!("/fa{i}")).unwrap(),
                *m,
                "fa{i} after remount"
            );
        }
        fs.unmount().unwrap();
        fsck_clean(&*dev, "remount");
    }
}

/// Multithreaded: a volume filled under one policy, cleanly unmounted, mounted with another
/// (background cleaning, two flusher lanes, races widened), three threads overwriting and
/// fsyncing until a power cut at a random request; then fsck, and a mount with the first
/// policy finds every block as of its last fsync or later.
#[test]
fn threads_cut_after_a_policy_switch() {
    let cases: [(&str, MountOptions, MountOptions); 4] = [
        ("f2fs->scale", base(), gc("scale")),
        ("scale->f2fs", gc("scale"), base()),
        (
            "adaptive->lfs",
            base(),
            with(|o| o.alloc_mode = AllocMode::Lfs),
        ),
        (
            "ino->thread",
            base(),
            with(|o| o.mlog_map = MlogMap::Thread),
        ),
    ];
    for (seed, (name, from, to)) in cases.into_iter().enumerate() {
        // OPTX_SEED varies the cut points in a manual sweep.
        let base_seed: u64 = std::env::var("OPTX_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(70);
        let seed = seed as u64 + base_seed;
        let ssd = common::emulated_ssd("page", 128 << 20);
        let cut = Arc::new(common::Cut::new(ssd.clone()));
        let dev: Arc<dyn BlockDevice> = cut.clone();
        let (fs, inos, blocks) = common::cut_race_volume(dev.clone(), from.clone(), 70, seed);
        common::narrow_races(&fs);
        Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
        let to = MountOptions {
            flushers: 2,
            dirty_cap_bytes: 512 << 10,
            gc_interval: Some(std::time::Duration::from_millis(50)),
            gc_idle: std::time::Duration::from_millis(1),
            ..to
        };
        let fs = Arc::new(Fs::mount(dev.clone(), to).unwrap());
        common::widen_races(&fs, seed);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        cut.arm_past_reads(rng.random_range(200..3000));
        let results =
            common::threads_until_cut(&fs, &inos, blocks, common::CUT_THREADS, (20_000, 40), seed);
        eprintln!(
            "{name}: cut {}, left {}",
            cut.cut.load(std::sync::atomic::Ordering::Acquire),
            cut.left()
        );
        common::narrow_races(&fs);
        common::remount_after_ssd_cut(fs, &ssd, from, &inos, &results, name);
    }
}
