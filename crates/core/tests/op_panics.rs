//! A panic inside a mutating operation (a bug, as the mkdir under a large default ACL was:
//! `tests/xattrs.rs`) must not reach the disk half made. The operation's unwind poisons the
//! mount: later operations fail, no checkpoint is written, and a remount finds the volume
//! as its last checkpoint and fsyncs left it, fsck clean.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;

/// The test hook panics in `make_node` right after the new inode was allocated, counted and
/// cached, before its name exists. Without the guard the unmount wrote that state (fsck:
/// "node N (inode N) ... is not reachable from any inode", the inode and node counts off).
#[test]
fn a_panic_inside_an_operation_poisons_the_mount_and_writes_nothing_half_made() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((64 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let opts = MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..Default::default()
    };
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let a = fs.create(ROOT_INO, b"a", 0o644, 0, 0).unwrap().ino;
    fs.write(a, 0, b"kept").unwrap();
    fs.fsync(a, false).unwrap();
    fs.set_test_hook(Some(Arc::new(|what: &str| {
        if what == "make_node:allocated" {
            panic!("injected: a bug inside make_node");
        }
    })));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fs.create(ROOT_INO, b"b", 0o644, 0, 0)
    }));
    assert!(r.is_err(), "the injected panic did not happen");
    fs.set_test_hook(None);
    // Everything after is refused, and the unmount writes no checkpoint.
    assert!(matches!(
        fs.create(ROOT_INO, b"c", 0o644, 0, 0),
        Err(Error::Poisoned(_))
    ));
    assert!(fs.unmount().is_err(), "a poisoned mount unmounted cleanly");
    let report = fsck::fsck(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    // The fsync'd file is there (roll-forward); the half-made one is not.
    let fs = Fs::mount(dev.clone(), opts).unwrap();
    let a = fs.lookup(ROOT_INO, b"a").unwrap().ino;
    let mut buf = [0u8; 4];
    assert_eq!(fs.read(a, 0, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"kept");
    assert!(matches!(fs.lookup(ROOT_INO, b"b"), Err(Error::NotFound)));
    fs.unmount().unwrap();
    let report = fsck::fsck(&*dev).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
}
