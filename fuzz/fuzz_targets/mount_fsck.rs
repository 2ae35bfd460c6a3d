//! Mutated real images: fsck, then mount (roll-forward, orphan cleanup, recovery
//! checkpoint), walk the tree, read every file, create one, unmount. Never a panic, never a
//! hang.
//!
//! Input: a list of 6-byte patches [block u16][offset u16][op u8][value u8], applied by
//! `flashlog_sim::image::apply_patches` to a populated 64 MiB image: `block` indexes the
//! image's non-zero blocks (mod their count); op & 3: 0 set, 1 xor, 2 add, 3 fill 8 bytes;
//! op & 0x80: reseal the block's crc afterwards when it carries a known tag, so that the
//! mutation reaches the semantic checks behind the crc.
#![no_main]
use flashlog_core::{fsck, Fs, GcPolicy};
use flashlog_dev::RamDevice;
use flashlog_sim::image::{apply_patches, populated_image, sim_mount_options, used_blocks};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

static BASE: OnceLock<(RamDevice, Vec<u64>)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (base, used) = BASE.get_or_init(|| {
        let img = populated_image().expect("build the seed image");
        let used = used_blocks(&img);
        (img, used)
    });
    let img = base.deep_clone();
    apply_patches(&img, used, data);
    let img = Arc::new(img);
    let _ = fsck(&*img);
    if let Ok(fs) = Fs::mount(img.clone(), sim_mount_options(GcPolicy::F2fs)) {
        if let Ok(found) = flashlog_sim::check::walk(&fs) {
            for ino in found.reached.iter().take(64) {
                if let Ok(a) = fs.getattr(*ino) {
                    if a.is_file() && a.size <= 1 << 22 {
                        let mut buf = vec![0u8; a.size as usize];
                        let _ = fs.read(*ino, 0, &mut buf);
                    }
                }
                let _ = fs.listxattr(*ino);
            }
        }
        let _ = fs.create(fs.root(), b"fuzz-new", 0o644, 0, 0);
        let _ = fs.unmount();
    }
});
