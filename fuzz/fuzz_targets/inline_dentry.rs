//! Inline directories: the entry layout inside an inode, and its conversion to a block.
#![no_main]
use flashlog_format::dir::{BLOCK_LAYOUT, INLINE_LAYOUT};
use flashlog_format::node::INODE_AREA_BYTES;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let mut area = vec![0u8; INODE_AREA_BYTES];
    let n = data.len().min(INODE_AREA_BYTES);
    area[..n].copy_from_slice(&data[..n]);
    if let Ok(list) = INLINE_LAYOUT.entries(&area) {
        for d in list.iter().take(8) {
            let _ = INLINE_LAYOUT.find(&area, &d.name, d.hash);
        }
        let mut blk = block_of(&[]);
        if INLINE_LAYOUT.copy_into_block(&area, &mut blk[..]).is_ok() {
            let _ = BLOCK_LAYOUT.entries(&blk[..]);
        }
    }
    let _ = INLINE_LAYOUT.find_space(&area, 2);
    let _ = INLINE_LAYOUT.is_empty(&area);
});
