//! Flashlog on-disk format.
//!
//! Owns: every on-disk structure, its byte layout and its checks. This is the only place that
//! turns bytes into structs and back; docs/FORMAT.md describes the same bytes and is kept in
//! lockstep with this crate.
//!
//! Invariants:
//! - little-endian everywhere; offsets are named constants, never transmuted structs;
//! - every metadata block starts with an 8-byte header: a 4-byte type tag and a crc32c of the
//!   rest of the block (bytes 8..4096), so a torn or misdirected write is detected;
//! - decoders take untrusted bytes and return [`FormatError`], never panic; every count read
//!   from disk is bounded before it is used.
//!
//! No I/O and no locks here.

pub mod acl;
pub mod codec;
pub mod cp;
pub mod dir;
pub mod meta;
pub mod node;
pub mod sb;

pub use codec::{Block, FormatError, FormatResult};

/// Bytes per block (the unit of every device request and every on-disk structure).
pub const BLOCK_SIZE: usize = 4096;
/// log2 of [`BLOCK_SIZE`].
pub const BLOCK_SIZE_LOG2: u32 = 12;
/// Blocks per segment: 512 blocks = 2 MiB, as in F2FS. The SIT validity bitmap is sized by it.
pub const BLOCKS_PER_SEG: u64 = 512;
/// Bytes of one segment validity bitmap.
pub const SEG_BITMAP_BYTES: usize = (BLOCKS_PER_SEG / 8) as usize;

/// A block address on the device (64-bit everywhere, for the IPLFS 2^64 logical space).
pub type BlkAddr = u64;
/// A node id: index into the NAT.
pub type Nid = u32;
/// An inode number: the nid of the inode's node block.
pub type Ino = u32;
/// A segment number, counted from the start of the main area.
pub type SegNo = u64;

/// Block address meaning "no block" (a hole). Block 0 holds the superblock, so no file block
/// can live there.
pub const NULL_ADDR: BlkAddr = 0;
/// Block address meaning "reserved by fallocate, not yet written": reads as zeros.
pub const NEW_ADDR: BlkAddr = u64::MAX;

/// Nid 0 is never allocated; nids 1 and 2 are reserved; the root directory is inode 3.
pub const ROOT_INO: Ino = 3;
/// First nid handed out to files.
pub const FIRST_FREE_NID: Nid = 4;

/// Longest file name in bytes.
pub const NAME_MAX: usize = 255;

/// Block type tags (ASCII, little-endian u32 at byte 0 of each metadata block).
pub mod tag {
    const fn t(s: &[u8; 4]) -> u32 {
        u32::from_le_bytes(*s)
    }
    pub const SUPERBLOCK: u32 = t(b"FLSB");
    pub const CP_HEADER: u32 = t(b"FLCH");
    pub const CP_PAYLOAD: u32 = t(b"FLCP");
    pub const CP_FOOTER: u32 = t(b"FLCF");
    pub const NAT: u32 = t(b"FLNA");
    pub const SIT: u32 = t(b"FLSI");
    pub const SSA: u32 = t(b"FLSS");
    pub const NODE: u32 = t(b"FLND");
    pub const DENTRY: u32 = t(b"FLDE");
}
