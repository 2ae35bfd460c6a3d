//! Hostile or edge input through the core API the FUSE adapter forwards to (written in
//! review, 2026-11-27): a rename into a removed directory (accepted before, and the file
//! was lost when the directory was freed: fsck found its inode unreachable), a directory
//! renamed over its own parent (deadlocked on its own cell before), offsets and
//! sizes at the top of the 64-bit range, odd names.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

fn fresh() -> (Arc<dyn BlockDevice>, Fs) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    (dev, fs)
}

const NONE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
    whiteout: false,
};

/// The adapter pins (opens) a directory before its rmdir; the kernel may still name it.
/// A rename into the removed directory must fail (ENOENT, as make_node and link do), not
/// put a live file into a directory that is freed at FORGET.
#[test]
fn rename_into_removed_directory_is_refused() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    fs.open(d).unwrap(); // the adapter's pin_victim
    fs.rmdir(root, b"d").unwrap();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    // make_node refuses the dead directory...
    assert!(matches!(
        fs.create(d, b"g", 0o644, 0, 0),
        Err(Error::NotFound)
    ));
    // ...and so must rename.
    let r = fs.rename(root, b"f", d, b"f", NONE);
    let refused = matches!(r, Err(Error::NotFound));
    fs.release(d).unwrap(); // the kernel's FORGET: the directory is freed
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(
        refused,
        "rename into a removed directory returned {r:?}; fsck after the directory was freed: clean={} {rep}",
        rep.is_clean()
    );
    assert!(rep.is_clean(), "{rep}");
}

/// Offsets and sizes at the top of the u64 range: errors, never a panic or a change.
#[test]
fn huge_offsets_and_sizes_are_errors() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, &[1u8; 10000]).unwrap();
    let mut buf = [0u8; 4096];
    assert_eq!(fs.read(f, u64::MAX, &mut buf).unwrap(), 0);
    assert_eq!(fs.read(f, u64::MAX - 1, &mut buf).unwrap(), 0);
    assert!(matches!(
        fs.write(f, u64::MAX - 10, &[2u8; 100]),
        Err(Error::TooBig)
    ));
    assert!(matches!(
        fs.write(f, i64::MAX as u64, &[2u8; 100]),
        Err(Error::TooBig)
    ));
    for m in [
        FallocMode::Allocate,
        FallocMode::KeepSize,
        FallocMode::PunchHole,
        FallocMode::ZeroRange,
        FallocMode::ZeroRangeKeepSize,
    ] {
        let r = fs.fallocate(f, m, u64::MAX - 10, 100);
        assert!(matches!(r, Err(Error::TooBig)), "{m:?}: {r:?}");
        let r = fs.fallocate(f, m, 4096, u64::MAX);
        assert!(matches!(r, Err(Error::TooBig)), "{m:?}: {r:?}");
    }
    let sa = SetAttr {
        size: Some(u64::MAX),
        mode: Some(0o4755),
        ..Default::default()
    };
    assert!(matches!(fs.setattr(f, &sa), Err(Error::TooBig)));
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 10000);
    assert_eq!(a.mode & 0o7777, 0o644, "a failed setattr changed the mode");
    // readdir from offsets far past the end, and u64::MAX.
    for off in [3u64, 1 << 40, u64::MAX - 1, u64::MAX] {
        let e = fs.readdir(root, off, 160).unwrap();
        assert!(e.is_empty(), "offset {off}: {e:?}");
    }
    assert!(fs.readdir(root, 0, 0).unwrap().is_empty());
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// Names the kernel could pass: empty, '.', '..', with '/', 255 and 256 bytes, non-UTF-8.
#[test]
fn odd_names() {
    let (dev, fs) = fresh();
    let root = fs.root();
    let long255 = vec![b'x'; 255];
    let long256 = vec![b'x'; 256];
    let long4k = vec![b'y'; 4096];
    assert!(matches!(fs.lookup(root, &long256), Err(Error::NameTooLong)));
    assert!(matches!(fs.lookup(root, &long4k), Err(Error::NameTooLong)));
    assert!(fs.lookup(root, b"").is_err());
    assert!(matches!(fs.lookup(root, b"a/b"), Err(Error::NotFound)));
    assert_eq!(fs.lookup(root, b"..").unwrap().ino, root);
    assert!(fs.create(root, b"", 0o644, 0, 0).is_err());
    assert!(fs.create(root, b".", 0o644, 0, 0).is_err());
    assert!(fs.create(root, b"..", 0o644, 0, 0).is_err());
    assert!(fs.create(root, b"a/b", 0o644, 0, 0).is_err());
    assert!(matches!(
        fs.create(root, &long256, 0o644, 0, 0),
        Err(Error::NameTooLong)
    ));
    let a = fs.create(root, &long255, 0o644, 0, 0).unwrap().ino;
    let bad = [0xffu8, 0xfe, 0x80, b'z'];
    let b = fs.mkdir(root, &bad, 0o755, 0, 0).unwrap().ino;
    assert_eq!(fs.lookup(root, &bad).unwrap().ino, b);
    assert!(fs.unlink(root, b"").is_err());
    assert!(fs.rmdir(root, b".").is_err());
    assert!(fs.rmdir(root, b"..").is_err());
    assert!(fs.rename(root, b"..", b, b"x", NONE).is_err());
    assert!(fs.rename(root, &long255, b, b"..", NONE).is_err());
    assert!(fs.rename(root, &long255, b, &long256, NONE).is_err());
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
        whiteout: false,
    };
    assert!(matches!(
        fs.rename(root, &long255, root, &bad, both),
        Err(Error::Invalid(_))
    ));
    // Exchange of a directory with a file inside it.
    fs.rename(root, &long255, b, b"inner", NONE).unwrap();
    assert!(fs
        .rename(
            root,
            &bad,
            b,
            b"inner",
            RenameFlags {
                noreplace: false,
                exchange: true,
                whiteout: false,
            }
        )
        .is_err());
    // A directory onto itself / below itself.
    assert!(fs.rename(root, &bad, b, b"self", NONE).is_err());
    // Inode numbers never issued.
    for ino in [0u32, 1, 2, 4, 5, 1000, u32::MAX] {
        if ino == a || ino == b {
            continue;
        }
        assert!(fs.getattr(ino).is_err(), "getattr {ino}");
        assert!(fs.readdir(ino, 0, 10).is_err(), "readdir {ino}");
        assert!(fs.getxattr(ino, b"user.x").is_err(), "getxattr {ino}");
        assert!(
            fs.setxattr(ino, b"user.x", b"v", XattrMode::Any).is_err(),
            "setxattr {ino}"
        );
        assert!(fs.release(ino).is_ok(), "release (FORGET) {ino}");
    }
    // xattr names and sizes.
    assert!(fs.setxattr(a, b"", b"v", XattrMode::Any).is_err());
    assert!(fs.setxattr(a, &[b'u'; 256], b"v", XattrMode::Any).is_err());
    assert!(fs
        .setxattr(a, b"user.big", &vec![0u8; 70000], XattrMode::Any)
        .is_err());
    assert!(matches!(
        fs.setxattr(a, b"user.big", &vec![0u8; 65535], XattrMode::Any),
        Err(Error::NoSpace)
    ));
    fs.setxattr(a, b"user.e", b"", XattrMode::Any).unwrap();
    assert_eq!(fs.getxattr(a, b"user.e").unwrap(), b"");
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// Found in review (2026-11-27, fourth session). Input (a direct call, no concurrency): `/P` and `/P/n` are directories; rename
/// `P/n` over `/P`, i.e. a directory over its own parent (`mv /P/n /P`). Linux refuses
/// this with ENOTEMPTY (the target is an ancestor of the source: `lock_rename`'s trap), and
/// so must the core, with the victim `P` non-empty.
///
/// What happens: `Fs::rename` locks both parents (`P` as the source directory, `/` as the
/// destination), checks only that the *destination parent* is not below the source, then
/// locks the victim's cell together with the source's (`lock_pair(&sc, dc)`, fs.rs "Plain
/// rename, maybe over an existing entry"); the victim's cell is `P`, already locked by
/// this same thread, and parking_lot mutexes are not reentrant: the call never returns,
/// holding the shared op lock, so no checkpoint (sync, unmount) can ever run again. (The
/// kernel never forwards this rename, so only callers of the core API meet it; a victim
/// that is a farther ancestor of the source takes the cells against the lock order, parent
/// before child, and can deadlock with an rmdir of that ancestor's child the same way.)
#[test]
fn rename_of_a_directory_over_its_own_parent_is_refused_not_deadlocked() {
    let (dev, fs) = fresh();
    let fs = Arc::new(fs);
    let root = fs.root();
    let p = fs.mkdir(root, b"P", 0o755, 0, 0).unwrap().ino;
    fs.mkdir(p, b"n", 0o755, 0, 0).unwrap();
    let (tx, rx) = mpsc::channel();
    let f2 = fs.clone();
    let t = std::thread::spawn(move || {
        let r = f2.rename(p, b"n", root, b"P", NONE);
        let _ = tx.send(r);
    });
    let r = match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => r,
        Err(_) => {
            // The stuck thread holds the op lock: dropping `fs` would wait for it forever.
            std::mem::forget(fs);
            panic!(
                "rename(P/n -> /P) did not return within 10 s: the thread deadlocked on \
                 the cell of P, which it already holds as the source directory"
            );
        }
    };
    t.join().unwrap();
    assert!(matches!(r, Err(Error::NotEmpty)), "{r:?}");
    // Nothing changed.
    assert_eq!(fs.lookup(root, b"P").unwrap().ino, p);
    assert!(fs.lookup(p, b"n").is_ok());
    let fs = Arc::try_unwrap(fs).ok().expect("one owner");
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// A truncate to the file's current size changes neither mtime nor ctime (ext4; POSIX
/// truncate marks them only when the size changes); one that changes the size changes
/// both. Under the kernel's write-back cache, which owns a regular file's times,
/// truncate(2) to the current size sends the size alone and keeps its times: the core
/// stamping "now" then moved mtime and ctime across a remount by what the user saw
/// (found by a differential run against tmpfs, 2026-11-28). Checked after a remount too.
#[test]
fn truncate_to_the_same_size_keeps_the_times() {
    let (dev, fs) = fresh();
    let f = fs.create(fs.root(), b"t", 0o644, 0, 0).unwrap().ino;
    fs.write(f, 0, b"xxxxx").unwrap();
    let past = node_time(1_000_000_000);
    fs.setattr(
        f,
        &SetAttr {
            mtime: Some(TimeSet::At(past)),
            ctime: Some(past),
            ..Default::default()
        },
    )
    .unwrap();
    let same = SetAttr {
        size: Some(5),
        ..Default::default()
    };
    let a = fs.setattr(f, &same).unwrap();
    assert_eq!(
        (a.mtime, a.ctime),
        (past, past),
        "truncate to the same size"
    );
    // An empty request (chown(f, -1, -1) without the write-back cache) marks ctime, as
    // Linux's chown does; then the times go back for the remount check.
    let a = fs.setattr(f, &SetAttr::default()).unwrap();
    assert!(
        a.ctime.sec > past.sec && a.mtime == past,
        "empty setattr: {a:?}"
    );
    fs.setattr(
        f,
        &SetAttr {
            ctime: Some(past),
            ..Default::default()
        },
    )
    .unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.mtime, a.ctime), (past, past), "after a remount");
    let a = fs
        .setattr(
            f,
            &SetAttr {
                size: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        a.mtime.sec > past.sec && a.ctime.sec > past.sec && a.size == 3,
        "a truncate that changes the size changes both times: {a:?}"
    );
    fs.unmount().unwrap();
}

fn node_time(secs: i64) -> Timespec {
    Timespec { sec: secs, nsec: 0 }
}

/// A write stamps mtime and ctime with the wall clock (`CLOCK_REALTIME`, as `SystemTime`),
/// to the nanosecond field: the write path reads the clock with `clock_gettime` itself
/// (2026-11-28), and a monotonic reading there would put the times near the boot, not now.
#[test]
fn a_write_stamps_the_wall_clock_time() {
    let (_dev, fs) = fresh();
    let f = fs.create(fs.root(), b"w", 0o644, 0, 0).unwrap().ino;
    let ns = |t: Timespec| t.sec as i128 * 1_000_000_000 + t.nsec as i128;
    let wall = || {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        d.as_nanos() as i128
    };
    for round in 0..3 {
        let before = wall();
        fs.write(f, round * 4096, &[7u8; 4096]).unwrap();
        let after = wall();
        let a = fs.getattr(f).unwrap();
        assert!(a.mtime.nsec < 1_000_000_000, "nsec in range: {a:?}");
        assert_eq!(a.mtime, a.ctime, "one reading for both");
        assert!(
            before <= ns(a.mtime) && ns(a.mtime) <= after,
            "round {round}: mtime {:?} not between {before} and {after}",
            a.mtime
        );
    }
}
