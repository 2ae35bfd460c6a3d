//! Inodes unlinked while open (orphans) against the room the checkpoint pack has for them.
//!
//! Found by CI (stress-ng's `open` stressor through the mount, 2026-11-27): every unlinked
//! inode is an orphan until its last close, and under FUSE until the kernel's FORGET (the
//! adapter pins it), so a burst of unlinks made more orphans than the pack held (8,192 on
//! every volume then): the next checkpoint failed ("checkpoint pack outgrew its area") and
//! poisoned the mount, and a pack with more than 8,192 could not be read back.
//! Now mkfs gives the pack one slot per nid (`orphan_slots`, up to 2^17), a mount reads back
//! what the pack holds, and an unlink that would need a slot past the limit gets ENOSPC
//! with nothing changed (as F2FS's `f2fs_acquire_orphan_inode`).

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::sb::{Superblock, MIN_ORPHAN_SLOTS};
use std::sync::Arc;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        ..Default::default()
    }
}

fn volume(bytes: u64) -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(bytes / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    dev
}

/// `n` files `f<i>` in the root, each opened (as the adapter's pin or a program's fd).
fn open_files(fs: &Fs, n: usize) -> Vec<Ino> {
    let root = fs.root();
    (0..n)
        .map(|i| {
            let ino = fs
                .create(root, format!("f{i}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, format!("file {i}").as_bytes()).unwrap();
            fs.open(ino).unwrap();
            ino
        })
        .collect()
}

/// More orphans than the old packs held (8,192, and ~10,000 with the unused log-head room):
/// the checkpoint writes them all, and after a crash the mount reads them back and frees
/// them. Before, `sync` failed with "checkpoint pack outgrew its area" (the mount poisoned).
#[test]
fn a_checkpoint_records_more_orphans_than_the_old_packs_held() {
    let dev = volume(256 << 20);
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let free_before = fs.statfs().blocks_free;
    let n = 12_000;
    let inos = open_files(&fs, n);
    let root = fs.root();
    for i in 0..n {
        fs.unlink(root, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().expect("a checkpoint with 12,000 orphans");
    // Still readable while open.
    let mut buf = [0u8; 16];
    let got = fs.read(inos[n - 1], 0, &mut buf).unwrap();
    assert_eq!(&buf[..got], format!("file {}", n - 1).as_bytes());
    fs.abandon(); // a crash with every orphan still open
    let fs = Fs::mount(dev.clone(), opts()).expect("the pack with 12,000 orphans reads back");
    assert!(
        fs.readdir(root, 0, 100)
            .unwrap()
            .iter()
            .all(|e| !e.name.starts_with(b"f")),
        "an unlinked file came back"
    );
    let free_after = fs.statfs().blocks_free;
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert!(
        free_after + 64 >= free_before,
        "the orphans' blocks were not freed: {free_before} free before, {free_after} after"
    );
}

/// A volume with the old pack's 8,192 slots (what one made before `orphan_slots` reads
/// as): unlinks past the limit get ENOSPC and change nothing (name, contents, link count);
/// a rename over an open file is refused the same way; once files are closed, unlinks
/// succeed again; every checkpoint fits; fsck is clean. Before, the unlinks succeeded and
/// the checkpoint past ~10,000 orphans poisoned the mount.
#[test]
fn unlinks_past_the_orphan_slots_get_enospc_and_change_nothing() {
    let dev = volume(256 << 20);
    // The superblock of a volume made before the field: 8,192 slots.
    let mut b = flashlog_format::codec::zero_block();
    dev.read(0, &mut b[..]).unwrap();
    let mut sb = Superblock::decode(&b).unwrap();
    assert!(
        sb.geo.orphan_slots > MIN_ORPHAN_SLOTS,
        "{}",
        sb.geo.orphan_slots
    );
    sb.geo.orphan_slots = MIN_ORPHAN_SLOTS;
    let enc = sb.encode();
    dev.write(0, &enc[..]).unwrap();
    dev.write(1, &enc[..]).unwrap();

    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    let limit = fs.inner().orphan_limit();
    assert!(limit < MIN_ORPHAN_SLOTS as usize && limit > 8000, "{limit}");
    let n = limit + 40;
    let inos = open_files(&fs, n);
    let root = fs.root();
    let mut refused = Vec::new();
    for i in 0..n {
        match fs.unlink(root, format!("f{i}").as_bytes()) {
            Ok(()) => {}
            Err(Error::NoSpace) => refused.push(i),
            Err(e) => panic!("unlink f{i}: {e}"),
        }
    }
    assert_eq!(refused, (limit..n).collect::<Vec<_>>());
    // Nothing changed for the refused ones.
    for &i in &refused {
        let a = fs.lookup(root, format!("f{i}").as_bytes()).unwrap();
        assert_eq!((a.ino, a.nlink), (inos[i], 1));
    }
    // A rename over an open file needs a slot too.
    let r = fs.rename(
        root,
        format!("f{}", n - 1).as_bytes(),
        root,
        format!("f{}", n - 2).as_bytes(),
        RenameFlags::default(),
    );
    assert!(matches!(r, Err(Error::NoSpace)), "{r:?}");
    assert_eq!(
        fs.lookup(root, format!("f{}", n - 2).as_bytes())
            .unwrap()
            .ino,
        inos[n - 2]
    );
    fs.sync()
        .expect("the checkpoint holds every admitted orphan");
    // Closing orphans frees their slots: the refused unlinks now succeed.
    for &ino in &inos[..refused.len()] {
        fs.release(ino).unwrap();
    }
    for &i in &refused {
        fs.unlink(root, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    for &ino in &inos[refused.len()..] {
        fs.release(ino).unwrap();
    }
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
}
