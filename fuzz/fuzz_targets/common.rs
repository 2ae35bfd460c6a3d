// Shared by the decoder targets (included with `include!`): turn fuzz bytes into a block.

use flashlog_format::codec::{seal, Block};
use flashlog_format::BLOCK_SIZE;

/// The first 4 KiB of `data`, zero-padded.
#[allow(dead_code)]
fn block_of(data: &[u8]) -> Box<Block> {
    let mut b = Box::new([0u8; BLOCK_SIZE]);
    let n = data.len().min(BLOCK_SIZE);
    b[..n].copy_from_slice(&data[..n]);
    b
}

/// The same block with a valid header for `tag`, so the decoder gets past the crc and the
/// fuzzer reaches the field checks.
#[allow(dead_code)]
fn resealed(b: &Block, tag: u32) -> Box<Block> {
    let mut c = Box::new(*b);
    seal(&mut c, tag);
    c
}

/// An index argument from the 8 bytes after the block.
#[allow(dead_code)]
fn index_of(data: &[u8]) -> u64 {
    let mut i = [0u8; 8];
    if data.len() > BLOCK_SIZE {
        let rest = &data[BLOCK_SIZE..];
        let n = rest.len().min(8);
        i[..n].copy_from_slice(&rest[..n]);
    }
    u64::from_le_bytes(i)
}
