//! Superblock fuzz finding: an input that decodes, but whose re-encoding decodes to a
//! different superblock (decode is not canonical). Input from fuzz/artifacts (superblock).

use flashlog_format::codec::{seal, Block};
use flashlog_format::sb::Superblock;
use flashlog_format::{tag, BLOCK_SIZE};

const INPUT: &[u8] = include_bytes!("data/superblock-roundtrip.bin");

#[test]
fn superblock_decode_is_canonical() {
    let mut b: Box<Block> = Box::new([0u8; BLOCK_SIZE]);
    let n = INPUT.len().min(BLOCK_SIZE);
    b[..n].copy_from_slice(&INPUT[..n]);
    seal(&mut b, tag::SUPERBLOCK);
    let Ok(sb) = Superblock::decode(&b) else {
        return;
    };
    let again = Superblock::decode(&sb.encode()).expect("re-encoded superblock decodes");
    assert_eq!(again, sb, "decode(encode(decode(x))) != decode(x)");
}
