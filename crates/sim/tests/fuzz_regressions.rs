//! Inputs the fuzzers found, replayed natively (no sanitizer). Each must finish with a typed
//! result: no panic, and within a time limit (no hang).

use flashlog_core::{fsck, Fs, GcPolicy};
use flashlog_sim::image::{apply_patches, populated_image, sim_mount_options, used_blocks};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What mount_fsck does with one input, on a thread, with a deadline.
fn mount_fsck(input: &'static [u8], limit: Duration) -> Duration {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let img = populated_image().expect("seed image");
        let used = used_blocks(&img);
        apply_patches(&img, &used, input);
        let img = Arc::new(img);
        let _ = fsck(&*img);
        if let Ok(fs) = Fs::mount(img.clone(), sim_mount_options(GcPolicy::F2fs)) {
            let _ = flashlog_sim::check::walk(&fs);
            let _ = fs.create(fs.root(), b"fuzz-new", 0o644, 0, 0);
            let _ = fs.unmount();
        }
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => start.elapsed(),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("input {input:02x?} did not finish within {limit:?} (hang)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("input {input:02x?} panicked"),
    }
}

/// mount_fsck timeout (found after ~3,200 executions): 8 bytes of 0x25 at offset 256 of a
/// metadata block, resealed. Under ASan, create's foreground GC (crates/core/src/gc.rs,
/// `clean_section` reading SSA blocks) ran past libFuzzer's 10 s limit.
#[test]
fn corrupt_metadata_does_not_stall_foreground_gc() {
    let took = mount_fsck(
        &[0x04, 0x06, 0x00, 0x01, 0xff, 0x25],
        Duration::from_secs(60),
    );
    println!("took {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// mount_fsck (2026-11-27, found after ~1,500 executions in a build with overflow checks):
/// a patch that made an inode's block count huge; `getattr` multiplied it by 8 and
/// overflowed (`fs::tests::a_corrupt_block_count_saturates_st_blocks` pins the fix).
#[test]
fn a_corrupt_block_count_does_not_overflow_getattr() {
    mount_fsck(
        &[0xf7, 0xef, 0x27, 0x00, 0xc0, 0x2b],
        Duration::from_secs(60),
    );
}

/// mount_fsck (2026-11-27, ~33,000 executions): a resealed superblock whose checkpoint pack
/// size had its top bit set; `Geometry::validate` computed `2 * cp_pack_blocks`, which a
/// release build wrapped back to the right SIT address, accepting the superblock
/// (`sb::tests::a_pack_size_that_overflows_the_layout_is_refused` pins the fix).
#[test]
fn a_superblock_whose_pack_size_overflows_is_refused() {
    mount_fsck(
        &[0x00, 0x00, 0x28, 0x00, 0xff, 0x81, 0xd8],
        Duration::from_secs(60),
    );
}
