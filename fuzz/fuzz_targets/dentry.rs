//! Dentry blocks: the block check and every read of the entry layout.
#![no_main]
use flashlog_format::dir::{check_dentry_block, name_hash, BLOCK_LAYOUT};
use flashlog_format::tag;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let b = block_of(data);
    for blk in [b.clone(), resealed(&b, tag::DENTRY)] {
        if check_dentry_block(&blk).is_err() {
            continue;
        }
        if let Ok(list) = BLOCK_LAYOUT.entries(&blk[..]) {
            for d in list.iter().take(8) {
                let _ = BLOCK_LAYOUT.find(&blk[..], &d.name, name_hash(0, &d.name));
            }
        }
        let _ = BLOCK_LAYOUT.find_space(&blk[..], 3);
        let _ = BLOCK_LAYOUT.is_empty(&blk[..]);
    }
});
