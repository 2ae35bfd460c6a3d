//! Checkpoint pack decoder (header, payload blocks, footer) with the bitmap sizes of a real
//! 64 MiB volume.
#![no_main]
use flashlog_format::cp::Checkpoint;
use flashlog_format::sb::Geometry;
use flashlog_format::tag;
use libfuzzer_sys::fuzz_target;
include!("common.rs");

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Geometry::compute((64 << 20) / 4096, 1, 1) else { return };
    let bm = |n: u64| n.div_ceil(8) as usize;
    let mut blocks: Vec<Box<Block>> = data.chunks(BLOCK_SIZE).take(g.cp_pack_blocks as usize).map(block_of).collect();
    if blocks.is_empty() {
        blocks.push(block_of(&[]));
    }
    let _ = Checkpoint::decode_header(&blocks[0], g.cp_pack_blocks);
    let _ = Checkpoint::decode(&blocks, bm(g.nat_blocks), bm(g.sit_blocks), bm(g.ssa_blocks));
    // Resealed: header, payloads, footer each with its tag.
    let last = blocks.len() - 1;
    let sealed: Vec<Box<Block>> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let t = if i == 0 { tag::CP_HEADER } else if i == last { tag::CP_FOOTER } else { tag::CP_PAYLOAD };
            resealed(b, t)
        })
        .collect();
    let _ = Checkpoint::decode_header(&sealed[0], g.cp_pack_blocks);
    if let Ok(c) = Checkpoint::decode(&sealed, bm(g.nat_blocks), bm(g.sit_blocks), bm(g.ssa_blocks)) {
        // A decoded pack re-encodes without panicking.
        let _ = c.encode();
    }
});
