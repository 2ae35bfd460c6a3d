//! The core used as a library, by a program that links it (written in review, 2026-11-28,
//! from the user's side: README "As a library" and the rustdoc only). Each test either
//! checks a behaviour found sound, or one that was a problem a linking program met and the
//! FUSE adapter never did (each says what it was; all are fixed, and each test failed
//! before its fix).
//!
//! The tests of this file take `SERIAL` so that the thread and descriptor counts one of
//! them takes are not disturbed by another's mount.

mod common;

use flashlog_core::*;
use flashlog_dev::{BlockDevice, FileDevice, RamDevice};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An image file under the temp directory, removed on drop.
struct Image(PathBuf);

impl Image {
    fn new(tag: &str) -> Image {
        let p = std::env::temp_dir().join(format!(
            "flashlog-library-use-{}-{tag}.img",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Image(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ram(mib: u64) -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((mib << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    dev
}

/// Threads of this process whose name starts with `flashlog-` (the core's background,
/// I/O, flusher and collector threads).
fn flashlog_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("flashlog-"))
        .count()
}

/// The names of those threads once the count is back to `want`, or after 10 s: a thread
/// that `join` has returned for can still be listed for a moment while the kernel ends it
/// (the C library is told at its exit, before the task leaves /proc), and a loaded machine
/// stretches that moment. A thread really left running stays, and is named.
fn flashlog_threads_settled(want: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|c| c.trim_end().to_string())
            .filter(|c| c.starts_with("flashlog-"))
            .collect();
        if names.len() <= want || std::time::Instant::now() > deadline {
            return names;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn assert_clean(dev: &dyn BlockDevice) {
    let rep = fsck(dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// Run `f` on another thread and wait at most `secs` for it: Some(result), or None if it
/// did not return (the thread is left behind, stuck).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// The handle is `Send + Sync`: shared through an `Arc`, used from several threads, and
/// unmounted by whoever holds the last reference (`Arc::try_unwrap`).
#[test]
fn the_volume_is_send_and_sync_and_shared_through_an_arc() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Fs>();
    send_sync::<Error>();
    let _s = serial();
    let dev = ram(128);
    let fs = Arc::new(Fs::mount(dev.clone(), MountOptions::default()).unwrap());
    let root = fs.root();
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let name = format!("t{t}");
                let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                for i in 0..200u64 {
                    fs.write(ino, i * 4096, &[t as u8 + 1; 4096]).unwrap();
                }
                fs.fsync(ino, false).unwrap();
                let d = fs
                    .mkdir(root, format!("d{t}").as_bytes(), 0o755, 0, 0)
                    .unwrap();
                fs.rename(root, name.as_bytes(), d.ino, b"f", RenameFlags::default())
                    .unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let fs = Arc::try_unwrap(fs).ok().expect("last reference");
    fs.unmount().unwrap();
    assert_clean(&*dev);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    for t in 0..4u8 {
        let v = fs.read_file(&format!("/d{t}/f")).unwrap();
        assert_eq!(v.len(), 200 * 4096);
        assert!(v.iter().all(|&b| b == t + 1));
    }
    fs.unmount().unwrap();
}

/// What a user does first, on an image file: format, mount, create, write, read, fsync,
/// rename, readdir page by page, unlink, unmount, reopen; inode numbers stay valid across
/// the remount (they are node ids, not handles).
#[test]
fn format_use_unmount_and_reopen_an_image_file() {
    let _s = serial();
    let img = Image::new("roundtrip");
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::create(img.path(), 256 << 20).unwrap());
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    assert_eq!(root, ROOT_INO);
    let d = fs.mkdir(root, b"dir", 0o755, 1000, 1000).unwrap();
    let f = fs.create(d.ino, b"a", 0o644, 1000, 1000).unwrap();
    assert_eq!(fs.write(f.ino, 0, b"hello, world").unwrap(), 12);
    fs.fsync(f.ino, false).unwrap();
    let mut buf = [0u8; 64];
    let n = fs.read(f.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello, world");
    fs.rename(d.ino, b"a", root, b"b", RenameFlags::default())
        .unwrap();
    for i in 0..100 {
        fs.create(d.ino, format!("n{i:03}").as_bytes(), 0o600, 0, 0)
            .unwrap();
    }
    let mut names = Vec::new();
    let mut off = 0;
    loop {
        let page = fs.readdir(d.ino, off, 7).unwrap();
        if page.is_empty() {
            break;
        }
        for e in page {
            off = e.next_offset;
            names.push(e.name);
        }
    }
    assert_eq!(names.len(), 102, "., .. and 100 names");
    let g = fs.create(root, b"gone", 0o644, 0, 0).unwrap().ino;
    fs.unlink(root, b"gone").unwrap();
    assert!(matches!(fs.getattr(g), Err(Error::NotFound)));
    fs.unmount().unwrap();
    drop(dev);
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), false).unwrap());
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.read_file("/b").unwrap(), b"hello, world");
    assert_eq!(
        fs.getattr(f.ino).unwrap().size,
        12,
        "ino valid after remount"
    );
    assert_eq!(fs.resolve("/b").unwrap(), f.ino);
    assert_eq!(fs.lookup(d.ino, b"n042").unwrap().mode & 0o7777, 0o600);
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// Dropping the volume without `unmount` (a `?` that returns early, a panic elsewhere):
/// drop writes the final checkpoint, so what was fsync'd and what was not are both there
/// on reopen, the volume is clean, and no thread of the core is left running.
#[test]
fn drop_without_unmount_keeps_everything_and_stops_every_thread() {
    let _s = serial();
    let before = flashlog_threads();
    let dev = ram(128);
    {
        let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
        // A new thread names itself once it runs: give them the time to.
        std::thread::sleep(Duration::from_millis(300));
        assert!(flashlog_threads() > before, "the mount runs threads");
        let a = fs.write_file("/synced", &[7u8; 100_000]).unwrap();
        fs.fsync(a, false).unwrap();
        fs.write_file("/unsynced", &[9u8; 50_000]).unwrap();
        // `fs` dropped here.
    }
    let left = flashlog_threads_settled(before);
    assert_eq!(left.len(), before, "threads left behind by drop: {left:?}");
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.read_file("/synced").unwrap(), vec![7u8; 100_000]);
    assert_eq!(fs.read_file("/unsynced").unwrap(), vec![9u8; 50_000]);
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// A long-running program mounts and unmounts many times: no thread, descriptor or
/// mapping of the image is left behind.
#[test]
fn mount_unmount_cycles_leave_no_threads_or_descriptors() {
    let _s = serial();
    let img = Image::new("cycles");
    {
        let dev: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::create(img.path(), 128 << 20).unwrap());
        Fs::mkfs(dev, &MkfsOptions::default()).unwrap();
    }
    let threads = flashlog_threads();
    let fds = open_fds();
    for i in 0..20u32 {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), false).unwrap());
        let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
        fs.write_file(&format!("/f{i}"), &i.to_le_bytes()).unwrap();
        if i % 2 == 0 {
            fs.unmount().unwrap();
        } else {
            drop(fs);
        }
    }
    let left = flashlog_threads_settled(threads);
    assert_eq!(left.len(), threads, "threads leaked: {left:?}");
    assert_eq!(open_fds(), fds, "descriptors leaked");
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), true).unwrap());
    let fs = Fs::mount(
        dev.clone(),
        MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..20u32 {
        assert_eq!(fs.read_file(&format!("/f{i}")).unwrap(), i.to_le_bytes());
    }
    assert!(matches!(fs.write_file("/new", b"x"), Err(Error::ReadOnly)));
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// Two mounts of one image in one process (two `FileDevice`s on the same path, as two
/// parts of a program, or a retry after a mount it forgot, would make): before the volume
/// lock moved into `FileDevice` (it was the CLI's alone), nothing refused the second, both
/// wrote their own logs over the same sections and checkpoints, and after a remount none
/// of the first mount's 50 files was there while fsck said clean. The second open is
/// refused while the first device lives, for reading too; the first mount keeps working.
#[test]
fn a_second_mount_of_a_mounted_image_is_refused() {
    let _s = serial();
    let img = Image::new("twice");
    let dev1: Arc<dyn BlockDevice> = Arc::new(FileDevice::create(img.path(), 128 << 20).unwrap());
    Fs::mkfs(dev1.clone(), &MkfsOptions::default()).unwrap();
    let fs1 = Fs::mount(dev1.clone(), MountOptions::default()).unwrap();
    for read_only in [false, true] {
        match FileDevice::open(img.path(), read_only) {
            Err(flashlog_dev::DevError::InUse(p)) => assert!(p.contains("twice"), "{p}"),
            Err(e) => panic!("a second open failed, but not as in use: {e}"),
            Ok(_) => {
                panic!("a second open (read_only {read_only}) of a mounted image was accepted")
            }
        }
    }
    for i in 0..50u32 {
        fs1.write_file(&format!("/one{i}"), &[1u8; 20_000]).unwrap();
    }
    fs1.unmount().unwrap();
    drop(dev1);
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), false).unwrap());
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    for i in 0..50u32 {
        assert_eq!(
            fs.read_file(&format!("/one{i}")).unwrap(),
            vec![1u8; 20_000]
        );
    }
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// The lock protocol (flashlog-dev's file.rs): a mount holds flock(LOCK_EX) on the image
/// for its life. A program linking the core that opens an image a `flashlog mount` daemon
/// is serving is refused (it was accepted when only the CLI took the lock). (Held here on
/// another open file description of the same file, which is what another process's lock
/// looks like to flock.)
#[test]
fn a_library_mount_honours_the_cli_volume_lock() {
    let _s = serial();
    let img = Image::new("flock");
    {
        let dev: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::create(img.path(), 128 << 20).unwrap());
        Fs::mkfs(dev, &MkfsOptions::default()).unwrap();
    }
    let holder = std::fs::File::open(img.path()).unwrap();
    holder.lock().unwrap(); // flock(LOCK_EX), as `flashlog mount` holds it
    let r = FileDevice::open(img.path(), false);
    let accepted = r.is_ok();
    drop(r);
    drop(holder);
    assert!(
        !accepted,
        "FileDevice::open accepted an image whose volume lock another mount holds"
    );
    // Released with the holder's descriptor: open and mount now.
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), false).unwrap());
    Fs::mount(dev, MountOptions::default())
        .unwrap()
        .unmount()
        .unwrap();
}

/// Inode numbers never issued, or freed: every call is an error a caller can match
/// (NotFound, or NotDir where the inode would have to be a directory), nothing panics, and
/// the volume stays clean.
#[test]
fn inos_that_do_not_exist_or_were_freed_are_errors() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let freed = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(freed, 0, &[1u8; 10_000]).unwrap();
    fs.fsync(freed, false).unwrap();
    fs.unlink(root, b"f").unwrap(); // never opened: freed now
    let mut buf = [0u8; 100];
    for ino in [0u32, 1, 2, freed, 100_000, u32::MAX] {
        let what = format!("ino {ino}");
        assert!(matches!(fs.getattr(ino), Err(Error::NotFound)), "{what}");
        assert!(matches!(fs.open(ino), Err(Error::NotFound)), "{what}");
        assert!(
            matches!(fs.write(ino, 0, b"x"), Err(Error::NotFound)),
            "{what}"
        );
        assert!(
            matches!(
                fs.setattr(
                    ino,
                    &SetAttr {
                        size: Some(1),
                        ..Default::default()
                    }
                ),
                Err(Error::NotFound)
            ),
            "{what}"
        );
        assert!(
            matches!(
                fs.fallocate(ino, FallocMode::Allocate, 0, 4096),
                Err(Error::NotFound)
            ),
            "{what}"
        );
        assert!(
            matches!(fs.link(ino, root, b"l"), Err(Error::NotFound)),
            "{what}"
        );
        assert!(
            fs.lookup(ino, b"x").is_err() && fs.create(ino, b"x", 0o644, 0, 0).is_err(),
            "{what}"
        );
        assert!(fs.unlink(ino, b"x").is_err(), "{what}");
        assert!(
            fs.rename(root, b"nothing", ino, b"x", RenameFlags::default())
                .is_err(),
            "{what}"
        );
        assert!(fs.listxattr(ino).is_err(), "{what}");
        assert!(fs.readlink(ino).is_err(), "{what}");
        // fsync of a freed inode has nothing to make durable.
        let _ = fs.fsync(ino, false);
        assert!(fs.release(ino).is_ok(), "{what}");
        let r = fs.read(ino, 0, &mut buf);
        assert!(matches!(r, Err(Error::NotFound)), "{what}: read gave {r:?}");
    }
    assert!(fs.lookup(root, b"l").is_err(), "no link to a freed inode");
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// A program keeps an inode number after the file is gone (the FUSE kernel holds a lookup
/// count and FORGETs; a library user has only the number). Once a checkpoint has returned
/// the freed number to the allocator, a new file takes it, and the stale number reaches the
/// new file. `Attr::generation` (it had none) tells the two apart, as the README says.
#[test]
fn a_reused_ino_has_a_new_generation() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let old = fs.create(root, b"old", 0o644, 0, 0).unwrap();
    assert_eq!(fs.getattr(old.ino).unwrap().generation, old.generation);
    fs.unlink(root, b"old").unwrap();
    fs.sync().unwrap();
    let mut reused = None;
    for i in 0..64 {
        let a = fs
            .create(root, format!("new{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        if a.ino == old.ino {
            reused = Some(a);
            break;
        }
    }
    let new = reused.expect("a freed ino is reused after a checkpoint");
    assert_ne!(
        new.generation, old.generation,
        "the reused ino kept its generation"
    );
    assert_eq!(fs.getattr(new.ino).unwrap().generation, new.generation);
    fs.unmount().unwrap();
    // The generation is stored: the same after a remount.
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.getattr(new.ino).unwrap().generation, new.generation);
    fs.unmount().unwrap();
}

/// `link` of a directory is refused (EPERM), but only after it locked the directory's cell
/// while holding the new parent's: with the directory an ancestor of the new parent
/// (`link(/, /d, "x")`), that is child before parent, against the lock order, and it
/// deadlocks with a `lookup(/, "d")` (parent, then child). The kernel never sends a link of
/// a directory; a library caller can.
#[test]
fn link_of_an_ancestor_directory_does_not_deadlock_with_lookups() {
    let _s = serial();
    let dev = ram(128);
    let fs = Arc::new(
        Fs::mount(
            dev.clone(),
            MountOptions {
                cp_interval: None,
                ..Default::default()
            },
        )
        .unwrap(),
    );
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let f2 = fs.clone();
    let ok = within(30, move || {
        let a = {
            let fs = f2.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    assert!(matches!(fs.link(root, d, b"x"), Err(Error::NotPermitted)));
                }
            })
        };
        let b = {
            let fs = f2.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    fs.lookup(root, b"d").unwrap();
                }
            })
        };
        a.join().unwrap();
        b.join().unwrap();
    });
    if ok.is_none() {
        // Stuck threads hold the op lock: dropping the volume would wait forever.
        std::mem::forget(fs);
        panic!("link of an ancestor directory and lookups deadlocked (30 s)");
    }
    Arc::try_unwrap(fs).ok().unwrap().unmount().unwrap();
    assert_clean(&*dev);
}

/// Calls the kernel never makes on special inodes: a write to a symlink or a FIFO. Linux
/// cannot open a symlink for writing, and a FIFO's data never reaches the file system.
/// The core accepted both: the write rewrote the symlink's target (readlink returned the
/// written bytes) and gave the FIFO a size and data blocks (fsck did not object). Both are
/// refused now, and nothing changed.
#[test]
fn writes_to_a_symlink_or_a_fifo_are_refused() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let l = fs.symlink(root, b"l", b"target", 0, 0).unwrap().ino;
    let p = fs.mknod(root, b"p", 0o010644, 0, 0, 0).unwrap().ino;
    let wl = fs.write(l, 0, b"elsewhere/and/longer");
    let wp = fs.write(p, 0, &[5u8; 9000]);
    let link_now = fs.readlink(l).unwrap();
    let fifo_size = fs.getattr(p).unwrap().size;
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(
        wl.is_err() && wp.is_err(),
        "write to a symlink gave {wl:?} (its target is now {:?}); write to a FIFO gave {wp:?} \
         (size now {fifo_size}); fsck clean={}\n{rep}",
        String::from_utf8_lossy(&link_now),
        rep.is_clean()
    );
    assert!(rep.is_clean(), "{rep}");
}

/// Names a caller may pass that the kernel would have split or refused, through both the
/// inode API and the path helpers.
#[test]
fn odd_names_and_paths_are_typed_errors() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    for bad in [&b"a/b"[..], b"a\0b", b"\0", b"/"] {
        assert!(
            matches!(fs.create(root, bad, 0o644, 0, 0), Err(Error::Invalid(_))),
            "{bad:?}"
        );
        assert!(
            matches!(fs.mkdir(root, bad, 0o755, 0, 0), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    for dot in [&b"."[..], b".."] {
        assert!(matches!(
            fs.create(root, dot, 0o644, 0, 0),
            Err(Error::Invalid(_))
        ));
        assert!(fs.link(root, root, dot).is_err());
    }
    assert!(matches!(
        fs.create(root, &[b'n'; 256], 0o644, 0, 0),
        Err(Error::NameTooLong)
    ));
    assert!(matches!(
        fs.symlink(root, &[b'n'; 256], b"t", 0, 0),
        Err(Error::NameTooLong)
    ));
    let e = fs.create(root, &[b'n'; 300], 0o644, 0, 0).unwrap_err();
    assert!(e.to_string().contains("255"), "message: {e}");
    // Path helpers: "." and ".." components, trailing and doubled slashes.
    fs.mkdir_all("/a/b").unwrap();
    fs.write_file("/a//b/./f", b"x").unwrap();
    assert_eq!(fs.read_file("/a/b/../b/f").unwrap(), b"x");
    assert!(matches!(fs.write_file("/", b"x"), Err(Error::Invalid(_))));
    assert!(matches!(fs.write_file("", b"x"), Err(Error::Invalid(_))));
    assert!(matches!(fs.write_file("/a", b"x"), Err(Error::IsDir)));
    assert!(matches!(fs.mkdir_all("/a/b/f/g"), Err(Error::NotDir)));
    assert!(matches!(fs.read_file("/a/missing"), Err(Error::NotFound)));
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// A directory renamed into itself or below itself, and the root's "..": refused, and
/// nothing moves.
#[test]
fn a_directory_renamed_into_itself_is_refused() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let a = fs.mkdir_all("/a").unwrap();
    let b = fs.mkdir_all("/a/b").unwrap();
    let c = fs.mkdir_all("/a/b/c").unwrap();
    let nf = RenameFlags::default();
    assert!(matches!(
        fs.rename(root, b"a", a, b"x", nf),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        fs.rename(root, b"a", c, b"x", nf),
        Err(Error::Invalid(_))
    ));
    assert!(fs
        .rename(
            root,
            b"a",
            c,
            b"x",
            RenameFlags {
                noreplace: true,
                exchange: false,
                whiteout: false,
            }
        )
        .is_err());
    assert!(fs.rename(a, b"b", b, b"b", nf).is_err());
    assert_eq!(fs.resolve("/a/b/c").unwrap(), c);
    assert_eq!(fs.lookup(root, b"..").unwrap().ino, root);
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// readdir with cookies it never handed out: every offset from 0 to past the end gives a
/// tail of the full listing, in order, with no entry twice and no panic, on an inline
/// directory and a multi-block one with long (multi-slot) names.
#[test]
fn readdir_with_any_cookie_gives_a_tail_of_the_listing() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let small = fs.mkdir(root, b"small", 0o755, 0, 0).unwrap().ino;
    for i in 0..3 {
        fs.create(small, format!("s{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
    }
    let big = fs.mkdir(root, b"big", 0o755, 0, 0).unwrap().ino;
    for i in 0..150 {
        let name = format!("{i:03}{}", "L".repeat(150 + i % 90));
        fs.create(big, name.as_bytes(), 0o644, 0, 0).unwrap();
    }
    for dir in [small, big] {
        let all = fs.readdir(dir, 0, usize::MAX).unwrap();
        let last = all.last().unwrap().next_offset;
        for cookie in 0..=last + 40 {
            let tail = fs.readdir(dir, cookie, usize::MAX).unwrap();
            let start = all.len() - tail.len();
            assert_eq!(
                tail.iter().map(|e| &e.name).collect::<Vec<_>>(),
                all[start..].iter().map(|e| &e.name).collect::<Vec<_>>(),
                "dir {dir} cookie {cookie}"
            );
        }
    }
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// The errors a caller matches on are typed (EEXIST, ENOENT, ENOTEMPTY, ENOTDIR, EISDIR,
/// ENOSPC), and a full volume stays usable: ENOSPC is not a poisoning, and deleting makes
/// room again.
#[test]
fn errors_are_typed_and_a_full_volume_recovers() {
    let _s = serial();
    let dev = ram(64);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    assert!(matches!(
        fs.create(d, b"f", 0o644, 0, 0),
        Err(Error::Exists)
    ));
    assert!(matches!(
        fs.mkdir(root, b"d", 0o755, 0, 0),
        Err(Error::Exists)
    ));
    assert!(matches!(fs.lookup(d, b"nope"), Err(Error::NotFound)));
    assert!(matches!(fs.rmdir(root, b"d"), Err(Error::NotEmpty)));
    assert!(matches!(fs.lookup(f, b"x"), Err(Error::NotDir)));
    assert!(matches!(fs.readdir(f, 0, 10), Err(Error::NotDir)));
    assert!(matches!(fs.unlink(root, b"d"), Err(Error::IsDir)));
    assert!(matches!(fs.write(d, 0, b"x"), Err(Error::IsDir)));
    let mut buf = [0u8; 8];
    assert!(matches!(fs.read(d, 0, &mut buf), Err(Error::IsDir)));
    // Fill the volume.
    let chunk = vec![0xabu8; 1 << 20];
    let mut files = 0;
    let full = 'fill: loop {
        let name = format!("big{files}");
        let ino = match fs.create(root, name.as_bytes(), 0o644, 0, 0) {
            Ok(a) => a.ino,
            Err(e) => break 'fill e,
        };
        files += 1;
        for i in 0..8u64 {
            if let Err(e) = fs.write(ino, i << 20, &chunk) {
                break 'fill e;
            }
        }
        assert!(files < 1000, "a 64 MiB volume never filled");
    };
    assert!(
        matches!(full, Error::NoSpace),
        "a full volume said: {full:?}"
    );
    let _ = fs.fsync(f, false);
    for i in 0..files {
        fs.unlink(root, format!("big{i}").as_bytes()).unwrap();
    }
    fs.write_file("/after", &[1u8; 1 << 20]).unwrap();
    fs.unmount().unwrap();
    assert_clean(&*dev);
}

/// A volume mounted read-write on a device opened read-only is refused at mount, with
/// what to do (`Capabilities::read_only`); it was accepted, and the first fsync poisoned
/// the volume with a device error.
#[test]
fn a_read_write_mount_of_a_read_only_device_says_why() {
    let _s = serial();
    let img = Image::new("rodev");
    {
        let dev: Arc<dyn BlockDevice> =
            Arc::new(FileDevice::create(img.path(), 128 << 20).unwrap());
        Fs::mkfs(dev, &MkfsOptions::default()).unwrap();
    }
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), true).unwrap());
    let d = dev.clone();
    let r = within(60, move || match Fs::mount(d, MountOptions::default()) {
        Err(e) => format!("mount refused: {e}"),
        Ok(fs) => {
            let w = fs
                .write_file("/x", &[1u8; 100_000])
                .and_then(|ino| fs.fsync(ino, false));
            let u = fs.unmount();
            format!("mount accepted; write+fsync: {w:?}; unmount: {u:?}")
        }
    });
    let r = r.expect("mount, write or unmount on a read-only device hung");
    eprintln!("{r}");
    assert!(
        r.starts_with("mount refused") && r.contains("mount it read-only"),
        "a read-write mount of a read-only device: {r}"
    );
    // Read-only, it mounts.
    Fs::mount(
        dev,
        MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap()
    .unmount()
    .unwrap();
}

/// `read_file` of a directory: `IsDir`, as `read` of its inode and `write_file` over it
/// say. A small (inline) directory has size 0, so `read_file` never called `read` and
/// returned an empty file instead.
#[test]
fn read_file_of_a_directory_is_refused() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    fs.mkdir_all("/a").unwrap();
    let r = fs.read_file("/a");
    fs.unmount().unwrap();
    assert!(
        matches!(r, Err(Error::IsDir)),
        "read_file of a directory: {r:?}"
    );
}

/// `mknod` with bits above the file type and permissions (a caller passing a raw `u32`):
/// Linux keeps only `S_IFMT | 07777`; the core stored the whole word, and `getattr`
/// returned it (`st_mode` 0o37777700644 for 0xFFFF_81A4).
#[test]
fn mknod_keeps_only_the_type_and_permission_bits() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    let a = fs.mknod(fs.root(), b"x", 0xFFFF_81A4, 0, 0, 0);
    fs.unmount().unwrap();
    let mode = a.map(|a| a.mode);
    assert!(
        matches!(mode, Ok(0o100644) | Err(Error::Invalid(_))),
        "mode stored: {:o}",
        mode.unwrap_or(0)
    );
}

/// CPU time (in clock ticks) of this process's threads whose name starts with `prefix`.
fn thread_cpu_ticks(prefix: &str) -> u64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let p = t.ok()?.path();
            let comm = std::fs::read_to_string(p.join("comm")).ok()?;
            if !comm.starts_with(prefix) {
                return None;
            }
            let s = std::fs::read_to_string(p.join("stat")).ok()?;
            let f: Vec<&str> = s[s.rfind(')')? + 2..].split(' ').collect();
            Some(f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?)
        })
        .sum()
}

/// The mount options say `cp_interval=0` / `gc_interval=0` turn the timers off (README),
/// which the FUSE option parser maps to `None`; a library caller who wrote
/// `Some(Duration::ZERO)` got timer threads that waited 0 s and looped: each spun a core
/// for as long as the volume was mounted (measured: about half a core each, idle). Zero
/// means off now, as at the command line.
#[test]
fn a_zero_timer_interval_does_not_spin() {
    let _s = serial();
    let dev = ram(128);
    let fs = Fs::mount(
        dev.clone(),
        MountOptions {
            cp_interval: Some(Duration::ZERO),
            gc_interval: Some(Duration::ZERO),
            ..Default::default()
        },
    );
    let Ok(fs) = fs else { return }; // refusing it is fine too
    fs.write_file("/a", b"x").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = thread_cpu_ticks("flashlog-cp") + thread_cpu_ticks("flashlog-gc");
    std::thread::sleep(Duration::from_secs(1));
    let t1 = thread_cpu_ticks("flashlog-cp") + thread_cpu_ticks("flashlog-gc");
    fs.unmount().unwrap();
    assert!(
        t1 - t0 < 10,
        "the timer threads used {} ticks (1/100 s) of CPU in 1 s on an idle volume",
        t1 - t0
    );
}

/// `MountOptions::io_threads` has a documented maximum (`config::MAX_IO_THREADS`, 64),
/// which the FUSE option parser and the bench enforce; `Fs::mount` itself accepted any
/// count and spawned that many threads (`flushers` and `gc_workers` were checked there).
#[test]
fn io_threads_above_the_limit_are_refused() {
    let _s = serial();
    let dev = ram(128);
    let r = Fs::mount(
        dev.clone(),
        MountOptions {
            io_threads: config::MAX_IO_THREADS + 1,
            ..Default::default()
        },
    );
    match r {
        Err(Error::Invalid(why)) => assert!(why.contains("io_threads"), "{why}"),
        Err(e) => panic!("refused, but not as an invalid option: {e}"),
        Ok(fs) => {
            fs.unmount().unwrap();
            panic!("io_threads = MAX_IO_THREADS + 1 was accepted");
        }
    }
}

/// Every cleaning policy on the device it needs (`scale` on RAM, `device` on the emulated
/// SSD's coupled FTL, `none` on its interval FTL), as a library user would set them up:
/// dropping the volume without `unmount` keeps what was written and stops every thread
/// the mount started (collectors, upcall and discard threads included).
#[test]
fn every_policy_stops_its_threads_on_drop_and_keeps_the_data() {
    let _s = serial();
    let cases: Vec<(&str, Arc<dyn BlockDevice>, GcPolicy)> = vec![
        ("scale", ram(128), GcPolicy::Scale),
        (
            "device",
            common::emulated_ssd("coupled", 256 << 20),
            GcPolicy::Device,
        ),
        (
            "none",
            common::emulated_ssd("interval", 256 << 20),
            GcPolicy::None,
        ),
    ];
    for (label, dev, gc) in cases {
        if gc != GcPolicy::Scale {
            Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        }
        let before = flashlog_threads();
        let opts = MountOptions {
            gc,
            gc_interval: Some(Duration::from_millis(50)),
            gc_idle: Duration::from_millis(10),
            ..Default::default()
        };
        {
            let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
            for i in 0..20u32 {
                let ino = fs
                    .write_file(&format!("/f{i}"), &vec![i as u8; 200_000])
                    .unwrap();
                if i % 3 == 0 {
                    fs.unlink(fs.root(), format!("f{}", i / 3).as_bytes()).ok();
                } else {
                    fs.fsync(ino, false).unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let left = flashlog_threads_settled(before);
        assert_eq!(
            left.len(),
            before,
            "{label}: threads left after drop: {left:?}"
        );
        let fs = Fs::mount(dev.clone(), opts).unwrap();
        let mut seen = 0;
        for i in 0..20u32 {
            if let Ok(v) = fs.read_file(&format!("/f{i}")) {
                assert_eq!(v, vec![i as u8; 200_000], "{label}: f{i}");
                seen += 1;
            }
        }
        assert!(seen >= 13, "{label}: {seen} files");
        fs.unmount().unwrap();
        assert_clean(&*dev);
    }
}

/// The README's (and lib.rs's) setup, run by a program on every start: the first run makes
/// the volume, later runs open it and find what earlier ones wrote. The README showed
/// `FileDevice::create` + `Fs::mkfs` alone, which wiped an existing volume with no error
/// (`create` truncates, so mkfs saw nothing to protect); mkfs through `open` refuses and
/// names `MkfsOptions::force`.
#[test]
fn the_readme_setup_run_twice_keeps_the_volume() {
    let _s = serial();
    let img = Image::new("readme-twice");
    let setup = || -> Result<Arc<dyn BlockDevice>> {
        let path = img.path();
        let dev: Arc<dyn BlockDevice> = if path.exists() {
            Arc::new(FileDevice::open(path, false)?)
        } else {
            let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::create(path, 128 << 20)?);
            Fs::mkfs(dev.clone(), &MkfsOptions::default())?;
            dev
        };
        Ok(dev)
    };
    let dev = setup().unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    fs.write_file("/precious", b"data").unwrap();
    fs.unmount().unwrap();
    drop(dev);
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img.path(), false).unwrap());
    let e = Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap_err();
    assert!(e.to_string().contains("MkfsOptions::force"), "{e}");
    drop(dev);
    let dev = setup().unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.read_file("/precious").unwrap(), b"data");
    fs.unmount().unwrap();
}

/// After a failure poisons the volume, later calls say why, once: `FsInner::guard` stored
/// the failing error's whole message, and when that error was itself `Poisoned` (the log
/// writer's report), every later `Error::Poisoned` printed "the volume was poisoned by an
/// earlier failure and is read-only now: " twice before the cause.
#[test]
fn a_poisoned_volume_states_the_cause_once() {
    let _s = serial();
    let dev = Arc::new(ArmedDevice {
        inner: RamDevice::new((128 << 20) / 4096),
        armed: false.into(),
        panics: false,
    });
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    dev.armed.store(true, std::sync::atomic::Ordering::Relaxed);
    let first = fs
        .write_file("/x", &[1u8; 100_000])
        .and_then(|ino| fs.fsync(ino, false));
    let later = fs.write_file("/y", b"y").unwrap_err().to_string();
    let _ = fs.unmount();
    eprintln!("first: {first:?}\nlater: {later}");
    assert!(first.is_err());
    assert_eq!(
        later.matches("poisoned by an earlier failure").count(),
        1,
        "{later}"
    );
    assert!(later.contains("the device refuses writes now"), "{later}");
}

/// A device of the caller's (the `BlockDevice` trait is public, for embedding on other
/// storage) whose writes, once armed, panic or fail.
struct ArmedDevice {
    inner: RamDevice,
    armed: std::sync::atomic::AtomicBool,
    panics: bool,
}

impl BlockDevice for ArmedDevice {
    fn capabilities(&self) -> &flashlog_dev::Capabilities {
        self.inner.capabilities()
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.inner.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        if self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            if self.panics {
                panic!("the caller's device panicked in a write");
            }
            return Err(flashlog_dev::DevError::Refused(
                "the device refuses writes now".into(),
            ));
        }
        self.inner.write(addr, buf)
    }
    fn discard(&self, addr: u64, count: u64) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.inner.discard(addr, count)
    }
    fn flush(&self) -> flashlog_dev::DevResult<flashlog_dev::Completion> {
        self.inner.flush()
    }
}

/// A panic in the device's write on one of the core's log-write threads (`io.rs`
/// `IoPool::worker` had no `catch_unwind`, unlike the flusher, the collectors and the
/// timer threads): the thread died with the buffer still listed, and every later wait for
/// the log queue (fsync, sync, unmount, drop) waited for it forever. The volume is
/// poisoned and the calls fail.
#[test]
fn a_panicking_device_write_poisons_rather_than_hangs() {
    let _s = serial();
    let dev = Arc::new(ArmedDevice {
        inner: RamDevice::new((128 << 20) / 4096),
        armed: false.into(),
        panics: true,
    });
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount(dev.clone(), MountOptions::default()).unwrap());
    let ino = fs.write_file("/a", &[3u8; 1 << 20]).unwrap();
    dev.armed.store(true, std::sync::atomic::Ordering::Relaxed);
    let f2 = fs.clone();
    let r = within(20, move || {
        let r = f2.fsync(ino, false);
        let s = f2.sync();
        format!("fsync: {r:?}; sync: {s:?}")
    });
    match r {
        None => {
            std::mem::forget(fs);
            panic!("fsync after the device's write panicked did not return in 20 s");
        }
        Some(r) => {
            eprintln!("{r}");
            assert!(r.contains("Err"), "{r}");
            let fs = Arc::try_unwrap(fs).ok().unwrap();
            assert!(within(20, move || fs.unmount()).is_some(), "unmount hung");
        }
    }
}
