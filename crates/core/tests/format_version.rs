//! Format versions across binaries (found in review, 2026-11-28, fifth session): binaries
//! from before the node-footer and orphan-slot changes read only version 1 and misread what
//! today's code writes (they rolled back to the older checkpoint pack, and recovered none of
//! the fsync'd nodes of a crash image), so today's code writes version 2, which they refuse,
//! reads version 1, and marks a version-1 volume 2 at its first read-write mount.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::sb::{Superblock, FORMAT_VERSION, OLDEST_FORMAT_VERSION};
use std::sync::Arc;

/// The version field (bytes 8..12) of superblock copy `copy`, as any binary reads it.
fn stored_version(dev: &dyn BlockDevice, copy: u64) -> u32 {
    let mut b = vec![0u8; 4096];
    dev.read(copy, &mut b).unwrap();
    u32::from_le_bytes(b[8..12].try_into().unwrap())
}

/// Rewrite both superblock copies with `version` (checksum resealed by `encode`).
fn set_version(dev: &dyn BlockDevice, version: u32) {
    let sb = checkpoint::read_superblock(dev).unwrap();
    let enc = Superblock { version, ..sb }.encode();
    for copy in 0..2 {
        dev.write(copy, &enc[..]).unwrap();
    }
}

fn volume_with_a_file() -> Arc<dyn BlockDevice> {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    fs.write_file("/kept", &[5u8; 300_000]).unwrap();
    fs.unmount().unwrap();
    dev
}

#[test]
fn mkfs_writes_the_current_version_in_both_copies() {
    let dev = volume_with_a_file();
    assert_eq!(FORMAT_VERSION, 2);
    assert_eq!(stored_version(&*dev, 0), FORMAT_VERSION);
    assert_eq!(stored_version(&*dev, 1), FORMAT_VERSION);
}

/// A version-1 volume: read-only mounts keep it version 1, the first read-write mount marks
/// both copies 2 (which a binary that reads only 1 refuses), and the data and fsck are as
/// they were. Fails without `upgrade_superblock`: the copies stay 1.
#[test]
fn a_version_one_volume_is_read_and_marked_at_its_first_read_write_mount() {
    let dev = volume_with_a_file();
    set_version(&*dev, OLDEST_FORMAT_VERSION);
    let ro = MountOptions {
        read_only: true,
        ..Default::default()
    };
    let fs = Fs::mount(dev.clone(), ro).unwrap();
    assert_eq!(fs.read_file("/kept").unwrap(), vec![5u8; 300_000]);
    fs.unmount().unwrap();
    assert_eq!(stored_version(&*dev, 0), 1, "a read-only mount wrote");
    assert_eq!(stored_version(&*dev, 1), 1, "a read-only mount wrote");
    assert!(fsck(&*dev).unwrap().is_clean());

    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(stored_version(&*dev, 0), FORMAT_VERSION);
    assert_eq!(stored_version(&*dev, 1), FORMAT_VERSION);
    assert_eq!(fs.read_file("/kept").unwrap(), vec![5u8; 300_000]);
    fs.write_file("/new", b"after").unwrap();
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.read_file("/new").unwrap(), b"after");
    fs.unmount().unwrap();
}

/// A volume of a later version, or with a feature bit this code does not know, is refused
/// by mount and fsck with a message that says so, is left as it was, and mkfs without
/// `force` refuses to overwrite it (it took such a volume for free space before).
#[test]
fn a_newer_version_or_an_unknown_feature_is_refused_and_left_alone() {
    for (label, patch) in [
        ("version", (8usize, (FORMAT_VERSION + 1) as u64, 4usize)),
        ("features", (168, 0x100, 8)),
    ] {
        let dev = volume_with_a_file();
        let sb = checkpoint::read_superblock(&*dev).unwrap();
        let mut b = sb.encode();
        let (at, value, len) = patch;
        b[at..at + len].copy_from_slice(&value.to_le_bytes()[..len]);
        flashlog_format::codec::seal(&mut b, flashlog_format::tag::SUPERBLOCK);
        for copy in 0..2 {
            dev.write(copy, &b[..]).unwrap();
        }
        let mut before = vec![0u8; 8192];
        dev.read(0, &mut before[..4096]).unwrap();
        dev.read(1, &mut before[4096..]).unwrap();
        let e = match Fs::mount(dev.clone(), MountOptions::default()) {
            Ok(fs) => {
                fs.abandon();
                panic!("{label}: mounted");
            }
            Err(e) => e.to_string(),
        };
        assert!(e.contains("a newer one made the volume"), "{label}: {e}");
        assert!(fsck(&*dev).is_err() || !fsck(&*dev).unwrap().is_clean());
        let mut after = vec![0u8; 8192];
        dev.read(0, &mut after[..4096]).unwrap();
        dev.read(1, &mut after[4096..]).unwrap();
        assert!(before == after, "{label}: the refused volume changed");
        // mkfs without `force` does not take it for free space.
        let e = Fs::mkfs(dev.clone(), &MkfsOptions::default())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("Flashlog"), "{label}: {e}");
    }
}
