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

/// Make the header field at `at` (u32) of pack `pack` hold `value`, resealing the header
/// and the footer's copy of its checksum, so that the pack is whole but its field wrong.
fn patch_pack_header(dev: &dyn BlockDevice, pack: u8, at: usize, value: u32) {
    use flashlog_format::{codec, tag};
    let sb = checkpoint::read_superblock(dev).unwrap();
    let start = sb.geo.cp_pack_addr(pack);
    let mut hdr = codec::zero_block();
    dev.read(start, &mut hdr[..]).unwrap();
    let blocks = u32::from_le_bytes(hdr[16..20].try_into().unwrap()) as u64;
    hdr[at..at + 4].copy_from_slice(&value.to_le_bytes());
    codec::seal(&mut hdr, tag::CP_HEADER);
    dev.write(start, &hdr[..]).unwrap();
    let mut foot = codec::zero_block();
    dev.read(start + blocks - 1, &mut foot[..]).unwrap();
    foot[16..20].copy_from_slice(&hdr[4..8]);
    codec::seal(&mut foot, tag::CP_FOOTER);
    dev.write(start + blocks - 1, &foot[..]).unwrap();
}

/// The newest checkpoint pack written whole but with a field this code refuses (here: no
/// log heads): mount and fsck refuse the volume instead of mounting the older pack, which
/// lost everything since without a word (what binaries of 2026-11-27 did with a pack of
/// more than 8,192 orphans). The same field wrong in the older pack changes nothing: the
/// newer one mounts. Fails without the check: the volume mounts without `/second`.
#[test]
fn a_whole_newest_pack_that_does_not_decode_is_refused_not_rolled_back() {
    // A volume whose newest pack holds `/second` and whose older pack does not.
    let two_packs = || {
        let dev = volume_with_a_file();
        let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
        fs.write_file("/second", b"in the newest pack only")
            .unwrap();
        fs.unmount().unwrap();
        let sb = checkpoint::read_superblock(&*dev).unwrap();
        let newest = checkpoint::read_checkpoint(&*dev, &sb.geo).unwrap().version;
        (dev, (newest % 2) as u8, ((newest + 1) % 2) as u8)
    };

    // The older pack whole but wrong: the newest still mounts, with everything.
    let (dev, _, old_pack) = two_packs();
    patch_pack_header(&*dev, old_pack, 76, 0);
    let fs = Fs::mount(dev.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.read_file("/second").unwrap(), b"in the newest pack only");
    fs.unmount().unwrap();
    let rep = fsck(&*dev).unwrap();
    assert!(rep.is_clean(), "{rep}");

    // The newest whole but wrong, the older valid: refused, by mount and by fsck.
    let (dev, new_pack, _) = two_packs();
    patch_pack_header(&*dev, new_pack, 76, 0);
    let e = match Fs::mount(dev.clone(), MountOptions::default()) {
        Ok(fs) => {
            let second = fs.read_file("/second");
            fs.abandon();
            panic!("mounted the older pack: /second is {second:?}");
        }
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("written whole but does not decode") && e.contains("not mounted"),
        "{e}"
    );
    let rep = fsck(&*dev).unwrap();
    assert!(!rep.is_clean(), "fsck said clean");
}
