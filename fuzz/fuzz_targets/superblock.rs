//! Superblock decoder: never panics; a decoded superblock validates or is refused.
#![no_main]
use flashlog_format::sb::Superblock;
use flashlog_format::tag;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let b = block_of(data);
    for blk in [b.clone(), resealed(&b, tag::SUPERBLOCK)] {
        if let Ok(sb) = Superblock::decode(&blk) {
            // What decodes must re-encode to a block that decodes to the same value.
            let again = Superblock::decode(&sb.encode()).expect("re-encoded superblock decodes");
            assert_eq!(again, sb);
            let _ = sb.geo.validate();
        }
    }
});
