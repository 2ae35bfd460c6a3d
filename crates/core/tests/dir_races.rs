//! Directory reads racing directory changes on other threads (written in review,
//! 2026-11-27, fourth session).
//!
//! `Fs::lookup` found the entry's inode number under the parent's cell lock, released that
//! lock, and only then loaded the inode's cell (`FsInner::cell`). A `rename(a, b)` over an
//! existing `b` that ran in between freed the old `b` (its last link, nobody has it
//! open): `cell` then found its nid free and answered ENOENT, so a lookup of `b`, a name
//! that exists before, during and after the rename (POSIX rename replaces it atomically),
//! reported it missing. Now the inode is read with the directory still locked.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use parking_lot::Mutex;
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

const NONE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
    whiteout: false,
};

const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
    whiteout: false,
};

fn fsck_clean(dev: &dyn BlockDevice) {
    let r = flashlog_core::fsck::fsck(dev).unwrap();
    assert!(r.is_clean(), "fsck: {:?}", r.findings);
}

/// Forces: lookup(root, "b") has read b's (old) inode number from the directory and
/// released the directory's cell; it is paused in `FsInner::cell` loading that inode from
/// disk (test point `cell:read`; the remount left it uncached). Meanwhile
/// `rename(tmp, b)` replaces b and frees the old inode. The lookup resumes, its load is
/// refused (a cell of the shard was removed since its mark), it retries, finds the nid
/// free, and answers ENOENT for a name that never stopped existing. Either inode is a
/// correct answer (before or after the rename); ENOENT is not.
#[test]
fn lookup_of_a_name_renamed_over_never_reports_it_missing() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    {
        let fs = Fs::mount(dev.clone(), opts()).unwrap();
        fs.create(fs.root(), b"b", 0o644, 0, 0).unwrap();
        fs.unmount().unwrap();
    }
    // b's cell is not cached after the remount; the root's is loaded before the hook.
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let root = fs.root();
    fs.getattr(root).unwrap();
    let old_b = {
        // Not via lookup (it would cache b's cell): list the root.
        let es = fs.readdir(root, 0, 100).unwrap();
        es.iter().find(|e| e.name == b"b").unwrap().ino
    };

    let (reached_tx, reached_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let target: Arc<Mutex<Option<std::thread::ThreadId>>> = Arc::new(Mutex::new(None));
    {
        let target = target.clone();
        let reached_tx = Mutex::new(reached_tx);
        let go_rx = Mutex::new(go_rx);
        fs.set_test_hook(Some(Arc::new(move |what: &'static str| {
            if what != "cell:read" {
                return;
            }
            let me = std::thread::current().id();
            let mut t = target.lock();
            if *t == Some(me) {
                // Pause once.
                *t = None;
                drop(t);
                let _ = reached_tx.lock().send(());
                let _ = go_rx.lock().recv_timeout(Duration::from_secs(20));
            }
        })));
    }

    let new_b = fs.create(root, b"tmp", 0o644, 0, 0).unwrap().ino;
    let looker = {
        let fs = fs.clone();
        let target = target.clone();
        std::thread::spawn(move || {
            *target.lock() = Some(std::thread::current().id());
            fs.lookup(root, b"b")
        })
    };
    reached_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("lookup did not reach cell:read");
    // The rename over b, on its own thread: before the fix the lookup held no lock here
    // and the rename ran to the end, freeing the old b; now the lookup holds the directory
    // until it has read b's inode, so the rename waits for it.
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let renamer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            fs.rename(root, b"tmp", root, b"b", NONE).unwrap();
            let _ = done_tx.send(());
        })
    };
    let _ = done_rx.recv_timeout(Duration::from_secs(1));
    go_tx.send(()).unwrap();
    let got = looker.join().unwrap();
    renamer.join().unwrap();
    fs.set_test_hook(None);
    match got {
        Ok(a) => assert!(
            a.ino == old_b || a.ino == new_b,
            "lookup(b) gave inode {}, neither {old_b} nor {new_b}",
            a.ino
        ),
        Err(e) => panic!(
            "lookup(b) raced rename(tmp, b) over an existing b and answered {e:?}: \
             b existed throughout"
        ),
    }
    assert_eq!(fs.lookup(root, b"b").unwrap().ino, new_b);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&*dev);
}

/// Stress (a soundness check, passes): a listing with cookies of a directory that starts
/// inline and grows to several hash levels while other threads create, unlink, rename
/// within and between directories and exchange names, and lookups of exchanged names.
/// Names that exist throughout are listed exactly once by every full listing; exchanged
/// names are never missing.
#[test]
fn listings_and_lookups_under_directory_churn() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((256 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), opts()).unwrap());
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let e = fs.mkdir(root, b"e", 0o755, 0, 0).unwrap().ino;
    // A few stable names while the directory is still inline.
    let stable: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("stable-{i:04}").into_bytes())
        .collect();
    for n in &stable {
        fs.create(d, n, 0o644, 0, 0).unwrap();
    }
    fs.create(d, b"x1", 0o644, 0, 0).unwrap();
    fs.create(d, b"x2", 0o644, 0, 0).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut hs = Vec::new();
    // Growth: creates grow d from inline to blocks and more levels; unlinks some.
    {
        let fs = fs.clone();
        let stop = stop.clone();
        hs.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 6000 {
                let n = format!("grow-{i:06}-{}", "y".repeat((i % 40) as usize));
                fs.create(d, n.as_bytes(), 0o644, 0, 0).unwrap();
                if i % 3 == 0 {
                    fs.unlink(d, n.as_bytes()).unwrap();
                }
                i += 1;
            }
        }));
    }
    // Renames within d and between d and e, and over existing names.
    {
        let fs = fs.clone();
        let stop = stop.clone();
        hs.push(std::thread::spawn(move || {
            let mut i = 0u64;
            fs.create(d, b"mv", 0o644, 0, 0).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let a = format!("mv-{i}");
                fs.rename(d, b"mv", d, a.as_bytes(), NONE).unwrap();
                fs.rename(d, a.as_bytes(), e, b"mv", NONE).unwrap();
                fs.create(d, b"mv", 0o644, 0, 0).unwrap();
                fs.rename(e, b"mv", d, b"mv", NONE).unwrap(); // over d/mv
                fs.rename(d, b"x1", d, b"x2", EXCHANGE).unwrap();
                i += 1;
            }
        }));
    }
    // Lookups of the exchanged names.
    {
        let fs = fs.clone();
        let stop = stop.clone();
        hs.push(std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for n in [&b"x1"[..], b"x2"] {
                    if let Err(e) = fs.lookup(d, n) {
                        panic!(
                            "lookup of exchanged name {:?}: {e:?}",
                            String::from_utf8_lossy(n)
                        );
                    }
                }
            }
        }));
    }
    // Listings with small cookies.
    let t0 = std::time::Instant::now();
    let mut listings = 0;
    while t0.elapsed() < Duration::from_secs(8) {
        let mut off = 0;
        let mut seen = std::collections::HashMap::<Vec<u8>, usize>::new();
        loop {
            let es = fs.readdir(d, off, 7).unwrap();
            if es.is_empty() {
                break;
            }
            for en in &es {
                *seen.entry(en.name.clone()).or_default() += 1;
                off = en.next_offset;
            }
        }
        for n in stable.iter().chain([&b"x1".to_vec(), &b"x2".to_vec()]) {
            assert_eq!(
                seen.get(n).copied().unwrap_or(0),
                1,
                "listing {listings}: {:?}",
                String::from_utf8_lossy(n)
            );
        }
        for (n, c) in seen.iter().filter(|(n, _)| !n.starts_with(b"mv")) {
            assert_eq!(*c, 1, "listed twice: {:?}", String::from_utf8_lossy(n));
        }
        listings += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    assert!(listings > 0);
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    fsck_clean(&*dev);
}
