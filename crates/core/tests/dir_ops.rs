//! Directory operations (found in review, 2026-11-27, fourth session): a rename between a
//! directory and its parent against an rmdir (lock order), a rolled-forward entry of a
//! special file (its type), a directory moved into a parent at LINK_MAX. Each test failed
//! before its fix.
//!
//! Checked and found sound (no test kept): readdir cookies under churn (inline, conversion,
//! multi-level; unchanged entries seen exactly once), 480 colliding 255-byte names and
//! 16,000 colliding 8-byte names (crc32c kernel) up to depth 40 then ENOSPC, xattr limits
//! (255-byte name, 65535/65536-byte values, exact fill of the node), ENOSPC during inline
//! conversion / dir growth / setxattr on a full volume (fsck clean), truncate and punch
//! at inode / direct / indirect / double-indirect boundaries with and without fsync+abandon.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const BS: u64 = BLOCK_SIZE as u64;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..Default::default()
    }
}

fn fresh_sized(mib: u64) -> (Arc<dyn BlockDevice>, Fs) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((mib << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    (dev, fs)
}

fn fresh() -> (Arc<dyn BlockDevice>, Fs) {
    fresh_sized(128)
}

/// Lock order between a directory and its parent: `remove` (rmdir/unlink) locks the parent
/// P, then the child directory C; `rename` locks its two parent directories by ascending
/// inode number (`lock_pair`). With C's inode number below P's (C made first, then moved
/// into P), `rename(C/x -> P/x)` takes C then P while `rmdir(P, "C")` takes P then C.
/// Input: mkdir /C, mkdir /P, rename /C -> /P/C, create C/x and C/keep; then one thread
/// repeats rmdir(P, "C") (ENOTEMPTY) while another moves x between C and P.
#[test]
fn rename_between_a_directory_and_its_parent_does_not_deadlock_with_rmdir() {
    let (_dev, fs) = fresh();
    let fs = Arc::new(fs);
    let root = fs.root();
    let c = fs.mkdir(root, b"C", 0o755, 0, 0).unwrap().ino;
    let p = fs.mkdir(root, b"P", 0o755, 0, 0).unwrap().ino;
    assert!(c < p);
    fs.rename(root, b"C", p, b"C", RenameFlags::default())
        .unwrap();
    fs.create(c, b"x", 0o644, 0, 0).unwrap();
    fs.create(c, b"keep", 0o644, 0, 0).unwrap();
    let (tx, rx) = mpsc::channel();
    let (f1, tx1) = (fs.clone(), tx.clone());
    std::thread::spawn(move || {
        for _ in 0..20_000 {
            let r = f1.rmdir(p, b"C");
            assert!(matches!(r, Err(Error::NotEmpty)), "{r:?}");
        }
        let _ = tx1.send(());
    });
    let f2 = fs.clone();
    std::thread::spawn(move || {
        for _ in 0..10_000 {
            f2.rename(c, b"x", p, b"x", RenameFlags::default()).unwrap();
            f2.rename(p, b"x", c, b"x", RenameFlags::default()).unwrap();
        }
        let _ = tx.send(());
    });
    for _ in 0..2 {
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            // The stuck threads hold the op lock: dropping `fs` would wait forever.
            std::mem::forget(fs);
            panic!(
                "rmdir(P, C) and rename(C/x <-> P/x) did not finish within 20 s: rmdir holds \
                 P and waits for C, rename holds C (lower ino, lock_pair) and waits for P"
            );
        }
    }
}

/// recovery.rs `recover_dentry`: the recovered entry's type maps every mode but directory
/// and symlink to REG. Input: sync; mknod FIFO /p; fsync(p) (rolled forward with DENT);
/// abandon; mount. The entry says REG for a FIFO inode, which fsck reports.
#[test]
fn roll_forward_puts_back_a_fifo_entry_with_its_own_type() {
    let (dev, fs) = fresh();
    let root = fs.root();
    fs.sync().unwrap();
    let a = fs.mknod(root, b"p", 0o010644, 0, 0, 0).unwrap();
    fs.fsync(a.ino, false).unwrap();
    fs.abandon();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let es = fs.readdir(root, 2, 10).unwrap();
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(
        rep.is_clean(),
        "entries after roll-forward {es:?}; fsck: {rep}"
    );
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].ftype, 1, "d_type of the FIFO: {es:?}");
}

/// `rename` of a directory into another parent never checks that parent's link count:
/// mkdir refuses the 64,999th subdirectory (EMLINK at LINK_MAX = 65,000 links), but
/// `rename(/extra -> /p/extra)` of a directory then succeeds and leaves /p with 65,001.
#[test]
fn rename_of_a_directory_into_a_parent_at_link_max_is_emlink() {
    let (_dev, fs) = fresh_sized(600);
    let root = fs.root();
    let p = fs.mkdir(root, b"p", 0o755, 0, 0).unwrap().ino;
    let mut made = 0;
    loop {
        match fs.mkdir(p, format!("{made}").as_bytes(), 0o755, 0, 0) {
            Ok(_) => made += 1,
            Err(Error::TooManyLinks) => break,
            Err(e) => panic!("mkdir {made}: {e:?}"),
        }
    }
    let limit = fs.getattr(p).unwrap().nlink;
    fs.mkdir(root, b"extra", 0o755, 0, 0).unwrap();
    let r = fs.rename(root, b"extra", p, b"extra", RenameFlags::default());
    let after = fs.getattr(p).unwrap().nlink;
    assert!(
        matches!(r, Err(Error::TooManyLinks)) && after == limit,
        "mkdir stopped at {made} subdirectories (nlink {limit}); rename of a directory into \
         it returned {r:?}, nlink now {after}"
    );
}
