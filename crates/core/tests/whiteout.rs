//! renameat2 RENAME_WHITEOUT, which overlayfs needs of its upper directory: the source is
//! renamed as by a plain rename, and in the same operation a whiteout (a character device
//! 0:0 with mode 0, owned by the caller) takes its name. Refusals (NOREPLACE over a
//! target, EXCHANGE with it, ENOSPC for the whiteout's inode) leave everything as it was;
//! a remount keeps it, fsck accepts it, and a power cut at any request of the checkpoint
//! that writes it leaves the renames all there or none of them.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice};
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
const S_IFMT: u32 = 0o170000;
const S_IFCHR: u32 = 0o020000;

const WHITEOUT: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
    whiteout: true,
};

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..Default::default()
    }
}

fn fresh() -> (Arc<dyn BlockDevice>, Fs) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    (dev, fs)
}

fn who(uid: u32, gid: u32) -> Creator {
    Creator { uid, gid, umask: 0 }
}

fn fsck_clean(dev: &dyn BlockDevice, what: &str) {
    let r = fsck(dev).unwrap();
    assert!(r.is_clean(), "{what}: fsck: {r}");
}

fn put(fs: &Fs, dir: Ino, name: &str, data: &[u8]) -> Ino {
    let a = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap();
    fs.write(a.ino, 0, data).unwrap();
    a.ino
}

fn read_all(fs: &Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut got = vec![0u8; size];
    let mut off = 0;
    while off < size {
        let n = fs.read(ino, off as u64, &mut got[off..]).unwrap();
        assert!(n > 0);
        off += n;
    }
    got
}

fn contents(fs: &Fs, dir: Ino, name: &str) -> Vec<u8> {
    read_all(fs, fs.lookup(dir, name.as_bytes()).unwrap().ino)
}

/// `dir/name` is a whiteout owned by `uid:gid`, and the directory lists it as a
/// character device.
fn assert_whiteout(fs: &Fs, dir: Ino, name: &str, uid: u32, gid: u32) {
    let a = fs.lookup(dir, name.as_bytes()).unwrap();
    assert_eq!(a.mode, WHITEOUT_MODE, "{name}: mode {:o}", a.mode);
    assert_eq!(a.mode & S_IFMT, S_IFCHR);
    assert_eq!(a.rdev, WHITEOUT_DEV, "{name}: rdev");
    assert_eq!((a.uid, a.gid, a.nlink, a.size), (uid, gid, 1, 0), "{name}");
    let listed: Vec<_> = fs
        .readdir(dir, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|e| e.name == name.as_bytes())
        .collect();
    assert_eq!(listed.len(), 1, "{name} listed {} times", listed.len());
    assert_eq!(listed[0].ino, a.ino);
    assert_eq!(listed[0].ftype, 2, "{name}: listed type (DT_CHR)");
}

#[test]
fn whiteout_takes_the_source_name() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let a = put(&fs, root, "a", b"hello");
    let before = fs.getattr(root).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.rename_as(root, b"a", root, b"b", WHITEOUT, who(1000, 1001))
        .unwrap();
    assert_eq!(fs.lookup(root, b"b").unwrap().ino, a);
    assert_eq!(contents(&fs, root, "b"), b"hello");
    assert_whiteout(&fs, root, "a", 1000, 1001);
    let after = fs.getattr(root).unwrap();
    assert_eq!(after.nlink, before.nlink, "a whiteout is no subdirectory");
    assert!(after.mtime != before.mtime && after.ctime != before.ctime);
    // Without an owner (the library call) it is root's.
    fs.rename(root, b"b", root, b"c", WHITEOUT).unwrap();
    assert_whiteout(&fs, root, "b", 0, 0);
    // A whiteout goes as any name does.
    fs.unlink(root, b"a").unwrap();
    fs.unlink(root, b"b").unwrap();
    let names: Vec<_> = fs.readdir(root, 0, usize::MAX).unwrap();
    let names: Vec<_> = names.iter().map(|e| &e.name[..]).collect();
    assert_eq!(names, [&b"."[..], b"..", b"c"]);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "plain");
}

#[test]
fn whiteout_over_a_target_replaces_it() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let a = put(&fs, root, "a", b"new");
    put(&fs, root, "b", &vec![7u8; 3 * BS as usize]);
    let free = fs.statfs().blocks_free;
    fs.rename_as(root, b"a", root, b"b", WHITEOUT, who(5, 6))
        .unwrap();
    assert_eq!(fs.lookup(root, b"b").unwrap().ino, a);
    assert_eq!(contents(&fs, root, "b"), b"new");
    assert_whiteout(&fs, root, "a", 5, 6);
    fs.sync().unwrap();
    // The old b's 3 data blocks and inode went; the whiteout's inode came.
    assert!(
        fs.statfs().blocks_free >= free + 3,
        "the replaced file was not freed"
    );
    fs.unmount().unwrap();
    fsck_clean(&*dev, "over a target");
}

#[test]
fn whiteout_with_noreplace_and_refusals_change_nothing() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let a = put(&fs, root, "a", b"A");
    let b = put(&fs, root, "b", b"B");
    let inodes = fs.statfs().files_free;
    let nr = RenameFlags {
        noreplace: true,
        ..WHITEOUT
    };
    let r = fs.rename_as(root, b"a", root, b"b", nr, who(1, 1));
    assert!(matches!(r, Err(Error::Exists)), "{r:?}");
    let ex = RenameFlags {
        exchange: true,
        ..WHITEOUT
    };
    let r = fs.rename_as(root, b"a", root, b"b", ex, who(1, 1));
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    let r = fs.rename_as(root, b"nope", root, b"c", WHITEOUT, who(1, 1));
    assert!(matches!(r, Err(Error::NotFound)), "{r:?}");
    assert_eq!(fs.lookup(root, b"a").unwrap().ino, a);
    assert_eq!(fs.lookup(root, b"b").unwrap().ino, b);
    assert_eq!(fs.statfs().files_free, inodes, "a refusal kept an inode");
    // A file renamed onto another name of itself: nothing happens (as Linux's vfs_rename).
    fs.link(a, root, b"a2").unwrap();
    fs.rename_as(root, b"a", root, b"a2", WHITEOUT, who(1, 1))
        .unwrap();
    assert_eq!(fs.lookup(root, b"a").unwrap().ino, a);
    assert_eq!(fs.statfs().files_free, inodes, "no whiteout for a no-op");
    // NOREPLACE with no target: renamed, with a whiteout.
    fs.rename_as(root, b"a", root, b"c", nr, who(1, 2)).unwrap();
    assert_eq!(fs.lookup(root, b"c").unwrap().ino, a);
    assert_whiteout(&fs, root, "a", 1, 2);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "noreplace");
}

/// overlayfs renames directories with a whiteout too (a copied-up directory moved away).
#[test]
fn whiteout_of_a_directory_source() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    put(&fs, d, "x", b"x");
    let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
    let root_links = fs.getattr(root).unwrap().nlink;
    fs.rename_as(root, b"d", sub, b"e", WHITEOUT, who(3, 4))
        .unwrap();
    assert_whiteout(&fs, root, "d", 3, 4);
    assert_eq!(fs.lookup(sub, b"e").unwrap().ino, d);
    assert_eq!(contents(&fs, d, "x"), b"x");
    assert_eq!(fs.getattr(root).unwrap().nlink, root_links - 1);
    assert_eq!(fs.getattr(sub).unwrap().nlink, 3);
    // Over an empty directory, in the same parent.
    fs.mkdir(sub, b"empty", 0o755, 0, 0).unwrap();
    fs.rename_as(sub, b"e", sub, b"empty", WHITEOUT, who(3, 4))
        .unwrap();
    assert_whiteout(&fs, sub, "e", 3, 4);
    assert_eq!(fs.lookup(sub, b"empty").unwrap().ino, d);
    assert_eq!(fs.getattr(sub).unwrap().nlink, 3);
    // Not over a non-empty one, nor a directory over a file.
    fs.mkdir(root, b"full", 0o755, 0, 0).unwrap();
    let full = fs.lookup(root, b"full").unwrap().ino;
    put(&fs, full, "y", b"y");
    let r = fs.rename_as(sub, b"empty", root, b"full", WHITEOUT, who(3, 4));
    assert!(matches!(r, Err(Error::NotEmpty)), "{r:?}");
    let r = fs.rename_as(sub, b"empty", sub, b"e", WHITEOUT, who(3, 4));
    assert!(matches!(r, Err(Error::NotDir)), "{r:?}");
    assert_eq!(fs.lookup(sub, b"empty").unwrap().ino, d);
    // A setgid parent passes its group down, as to any new inode.
    let sg = fs.mkdir(root, b"sg", 0o2775, 0, 77).unwrap().ino;
    put(&fs, sg, "f", b"f");
    fs.rename_as(sg, b"f", root, b"g", WHITEOUT, who(9, 9))
        .unwrap();
    assert_whiteout(&fs, sg, "f", 9, 77);
    fs.unmount().unwrap();
    fsck_clean(&*dev, "directory");
}

/// A full volume: the whiteout's inode block is refused before anything changes, and the
/// same rename without a whiteout (which needs no block) still goes.
#[test]
fn whiteout_refused_at_full_leaves_nothing() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let src = put(&fs, root, "src", b"s");
    let big = fs.create(root, b"big", 0o644, 0, 0).unwrap().ino;
    let mut n = 0u64;
    while fs.write(big, n * BS, &[1u8; BS as usize]).is_ok() {
        n += 1;
    }
    let mut size = n * BS;
    while fs.statfs().blocks_free > 0 {
        size += BS;
        if fs.write(big, size - BS, &[1u8; BS as usize]).is_err() {
            break;
        }
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, 0);
    let r = fs.mknod(root, b"probe", S_IFCHR, 0, 0, 0);
    assert!(
        matches!(r, Err(Error::NoSpace)),
        "mknod on a full volume: {r:?}"
    );
    let inodes = fs.statfs().files_free;
    let root_attr = fs.getattr(root).unwrap();
    let r = fs.rename_as(root, b"src", root, b"dst", WHITEOUT, who(1, 1));
    assert!(matches!(r, Err(Error::NoSpace)), "{r:?}");
    assert_eq!(fs.lookup(root, b"src").unwrap().ino, src);
    assert!(matches!(fs.lookup(root, b"dst"), Err(Error::NotFound)));
    assert_eq!(fs.statfs().files_free, inodes);
    assert_eq!(fs.statfs().blocks_free, 0);
    let now = fs.getattr(root).unwrap();
    assert_eq!((now.mtime, now.nlink), (root_attr.mtime, root_attr.nlink));
    fs.rename(root, b"src", root, b"dst", RenameFlags::default())
        .unwrap();
    fs.unmount().unwrap();
    fsck_clean(&*dev, "full");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_eq!(fs.lookup(root, b"dst").unwrap().ino, src);
    assert!(matches!(fs.lookup(root, b"src"), Err(Error::NotFound)));
    fs.unmount().unwrap();
}

/// Whiteouts in an inline directory and in one with dentry blocks survive a remount, and
/// fsck counts them as files.
#[test]
fn whiteouts_survive_a_remount() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let many = fs.mkdir(root, b"many", 0o755, 0, 0).unwrap().ino;
    for i in 0..300 {
        put(&fs, many, &format!("file-with-a-longish-name-{i:04}"), b"m");
    }
    put(&fs, root, "a", b"A");
    fs.sync().unwrap();
    fs.rename_as(root, b"a", root, b"b", WHITEOUT, who(1, 2))
        .unwrap();
    for i in (0..300).step_by(7) {
        let name = format!("file-with-a-longish-name-{i:04}");
        let to = format!("moved-{i:04}");
        fs.rename_as(
            many,
            name.as_bytes(),
            root,
            to.as_bytes(),
            WHITEOUT,
            who(3, 4),
        )
        .unwrap();
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "fsck: {r}");
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    assert_whiteout(&fs, root, "a", 1, 2);
    assert_eq!(contents(&fs, root, "b"), b"A");
    for i in 0..300 {
        let name = format!("file-with-a-longish-name-{i:04}");
        if i % 7 == 0 {
            assert_whiteout(&fs, many, &name, 3, 4);
            assert_eq!(contents(&fs, root, &format!("moved-{i:04}")), b"m");
        } else {
            assert_eq!(contents(&fs, many, &name), b"m");
        }
    }
    fs.unmount().unwrap();
    fsck_clean(&*dev, "after the remount");
}

/// What the tree holds: path -> (mode, rdev, uid, gid, nlink, contents of a file).
type Tree = BTreeMap<String, (u32, u32, u32, u32, u32, Vec<u8>)>;

fn snapshot(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    let mut stack = vec![(fs.root(), String::new())];
    while let Some((dir, path)) = stack.pop() {
        for e in fs.readdir(dir, 0, usize::MAX).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).unwrap();
            let data = if a.is_file() {
                read_all(fs, e.ino)
            } else {
                Vec::new()
            };
            if a.is_dir() {
                stack.push((e.ino, p.clone()));
            }
            t.insert(p, (a.mode, a.rdev, a.uid, a.gid, a.nlink, data));
        }
    }
    t
}

/// Three renames with whiteouts (over a target, a directory to another parent, out of a
/// directory with dentry blocks) and an fsync of the renamed file, which takes a
/// checkpoint. A power cut at each request from the first rename to the end of that
/// checkpoint, in each crash mode: fsck is clean and the volume holds the tree from before
/// the renames or the one after all three, nothing in between.
#[test]
fn power_cut_leaves_all_the_renames_or_none() {
    let base = {
        let sim = Arc::new(SimDevice::new((64 << 20) / BS));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        let mk = MkfsOptions {
            seed: Some(11),
            ..Default::default()
        };
        Fs::mkfs(dev.clone(), &mk).unwrap();
        let fs = Fs::mount(dev, opts()).unwrap();
        let root = fs.root();
        put(&fs, root, "a", &vec![1u8; 5000]);
        put(&fs, root, "b", &vec![2u8; 9000]);
        let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
        put(&fs, d, "x", b"x");
        fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap();
        let many = fs.mkdir(root, b"many", 0o755, 0, 0).unwrap().ino;
        for i in 0..200 {
            put(&fs, many, &format!("file-with-a-longish-name-{i:04}"), b"m");
        }
        fs.unmount().unwrap();
        sim.clean_image()
    };
    let io = MountOptions {
        io_threads: 0,
        ..opts()
    };
    // Returns the request count of the operations (no cut), or whether it was cut.
    let run = |cut: Option<u64>| -> (Tree, Tree, u64, Option<RamDevice>) {
        let sim = Arc::new(SimDevice::from_image(base.deep_clone()));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        let fs = Fs::mount(dev, io.clone()).unwrap();
        let root = fs.root();
        let old = snapshot(&fs);
        let sub = fs.lookup(root, b"sub").unwrap().ino;
        let many = fs.lookup(root, b"many").unwrap().ino;
        let start = sim.ops();
        if let Some(k) = cut {
            sim.cut_at(start + k, k % 3);
        }
        let r = (|| -> Result<()> {
            fs.rename_as(root, b"a", root, b"b", WHITEOUT, who(1, 2))?;
            fs.rename_as(root, b"d", sub, b"e", WHITEOUT, who(1, 2))?;
            let n = b"file-with-a-longish-name-0042";
            fs.rename_as(many, n, root, b"m", WHITEOUT, who(1, 2))?;
            let b = fs.lookup(root, b"b")?.ino;
            fs.fsync(b, false)
        })();
        match (cut, r) {
            (None, r) => {
                r.unwrap();
                let new = snapshot(&fs);
                let n = sim.ops() - start;
                fs.unmount().unwrap();
                (old, new, n, None)
            }
            (Some(k), r) => {
                if let Err(e) = &r {
                    assert!(
                        matches!(e, Error::Device(_) | Error::Poisoned(_)),
                        "cut at {k}: {e}"
                    );
                }
                fs.abandon();
                let mode = CrashMode::ALL[k as usize % 3];
                (old, Tree::new(), 0, Some(sim.crash_image(mode, k)))
            }
        }
    };
    let (old, new, total, _) = run(None);
    eprintln!("{total} requests");
    assert!(total > 3, "the renames and the fsync made {total} requests");
    assert_eq!(new["/a"].0, WHITEOUT_MODE);
    assert_eq!(new["/many/file-with-a-longish-name-0042"].0, WHITEOUT_MODE);
    assert!(new.contains_key("/sub/e/x") && !new.contains_key("/d/x"));
    let (mut olds, mut news) = (0, 0);
    for k in 0..=total {
        let (_, _, _, img) = run(Some(k));
        let img: Arc<dyn BlockDevice> = Arc::new(img.unwrap());
        let what = format!("cut at request {k} of {total}");
        fsck_clean(&*img, &what);
        let fs = Fs::mount(img.clone(), opts()).unwrap();
        let got = snapshot(&fs);
        if got == old {
            olds += 1;
        } else if got == new {
            news += 1;
        } else {
            let diff: Vec<_> = got
                .keys()
                .chain(old.keys())
                .chain(new.keys())
                .filter(|p| {
                    got.get(*p) != old.get(*p) && got.get(*p) != new.get(*p)
                        || (old.get(*p) != new.get(*p) && got.get(*p) == old.get(*p))
                })
                .collect();
            panic!("{what}: neither the old tree nor the new one: {diff:?}");
        }
        fs.unmount().unwrap();
        fsck_clean(&*img, &format!("{what}, after the remount"));
    }
    eprintln!(
        "{} cut points: {olds} old trees, {news} new ones",
        total + 1
    );
    assert!(olds > 0 && news > 0, "{olds} old, {news} new");
}
