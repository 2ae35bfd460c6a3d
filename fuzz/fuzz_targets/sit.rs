//! SitBlock decoder: never panics; what decodes re-encodes and decodes to the same value.
#![no_main]
use flashlog_format::meta::SitBlock;
use flashlog_format::tag;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let b = block_of(data);
    let index = index_of(data) % (1 << 20);
    for blk in [b.clone(), resealed(&b, tag::SIT)] {
        if let Ok(x) = SitBlock::decode(&blk, index) {
            let again = SitBlock::decode(&x.encode(), index).expect("re-encoded block decodes");
            assert_eq!(again, x);
        }
    }
});
