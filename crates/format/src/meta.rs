//! NAT, SIT and SSA blocks.
//!
//! Each of these areas keeps two copies of every block; the checkpoint's version bitmaps say
//! which copy is current (see `cp`). A block that was never written (all zeros) decodes as
//! empty: mkfs does not have to write the whole area of a 16 TiB volume.
//!
//! - NAT block i holds the entries of nids `i*255 .. i*255+255`.
//! - SIT block i holds the entries of segments `i*53 .. i*53+53`.
//! - SSA block s holds the owners of the 512 blocks of main segment s.

use crate::codec::*;
use crate::{tag, BlkAddr, Ino, Nid, SegNo, BLOCKS_PER_SEG, BLOCK_SIZE, SEG_BITMAP_BYTES};

/// NAT entries per block: (4096 - 16) / 16.
pub const NAT_ENTRIES_PER_BLOCK: usize = 255;
const NAT_ENTRY: usize = 16;
const NAT_HDR: usize = 16;
/// SIT entries per block: (4096 - 16) / 76.
pub const SIT_ENTRIES_PER_BLOCK: usize = 53;
const SIT_ENTRY: usize = 76;
const SIT_HDR: usize = 16;
const SSA_HDR: usize = 16;
const SSA_ENTRY: usize = 7;

/// One NAT entry: where node `nid` lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatEntry {
    /// Block address of the node, or NULL_ADDR if the nid is free.
    pub addr: BlkAddr,
    /// Inode the node belongs to (0 if free).
    pub ino: Ino,
    /// Bumped each time the nid is freed, so that a stale SSA owner is recognised.
    pub version: u8,
}

/// A decoded NAT block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatBlock {
    pub index: u64,
    pub entries: Vec<NatEntry>,
}

impl NatBlock {
    pub fn empty(index: u64) -> Self {
        NatBlock {
            index,
            entries: vec![NatEntry::default(); NAT_ENTRIES_PER_BLOCK],
        }
    }

    pub fn encode(&self) -> Box<Block> {
        let mut b = zero_block();
        put_u64(&mut b[..], 8, self.index);
        for (i, e) in self.entries.iter().take(NAT_ENTRIES_PER_BLOCK).enumerate() {
            let o = NAT_HDR + i * NAT_ENTRY;
            put_u64(&mut b[..], o, e.addr);
            put_u32(&mut b[..], o + 8, e.ino);
            put_u8(&mut b[..], o + 12, e.version);
        }
        seal(&mut b, tag::NAT);
        b
    }

    pub fn decode(b: &Block, index: u64) -> FormatResult<NatBlock> {
        if is_zero(b) {
            return Ok(NatBlock::empty(index));
        }
        check(b, tag::NAT, "NAT block")?;
        let stored = get_u64(b, 8);
        if stored != index {
            return Err(FormatError::BadField {
                what: "NAT block",
                field: "index",
                value: stored,
            });
        }
        let entries = (0..NAT_ENTRIES_PER_BLOCK)
            .map(|i| {
                let o = NAT_HDR + i * NAT_ENTRY;
                NatEntry {
                    addr: get_u64(b, o),
                    ino: get_u32(b, o + 8),
                    version: get_u8(b, o + 12),
                }
            })
            .collect();
        Ok(NatBlock { index, entries })
    }
}

/// NAT block index and slot of a nid.
pub fn nat_pos(nid: Nid) -> (u64, usize) {
    (
        (nid as usize / NAT_ENTRIES_PER_BLOCK) as u64,
        nid as usize % NAT_ENTRIES_PER_BLOCK,
    )
}

/// One SIT entry: usage of one main-area segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SitEntry {
    /// Valid blocks in the segment (= bits set in `bitmap`).
    pub valid: u16,
    /// Log head (table index) that last wrote the segment, 0xff if none: indexes below
    /// `log_heads` are `mlog * 6 + kind * 3 + temp`, the rest collector streams (data).
    pub class: u8,
    /// Age stamp: seconds of volume lifetime when blocks were last added (weighted, F2FS
    /// `update_segment_mtime`), for cost-benefit cleaning.
    pub mtime: u64,
    pub bitmap: [u8; SEG_BITMAP_BYTES],
}

impl Default for SitEntry {
    fn default() -> Self {
        SitEntry {
            valid: 0,
            class: 0xff,
            mtime: 0,
            bitmap: [0; SEG_BITMAP_BYTES],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SitBlock {
    pub index: u64,
    pub entries: Vec<SitEntry>,
}

impl SitBlock {
    pub fn empty(index: u64) -> Self {
        SitBlock {
            index,
            entries: vec![SitEntry::default(); SIT_ENTRIES_PER_BLOCK],
        }
    }

    pub fn encode(&self) -> Box<Block> {
        let mut b = zero_block();
        put_u64(&mut b[..], 8, self.index);
        for (i, e) in self.entries.iter().take(SIT_ENTRIES_PER_BLOCK).enumerate() {
            let o = SIT_HDR + i * SIT_ENTRY;
            put_u16(&mut b[..], o, e.valid);
            put_u8(&mut b[..], o + 2, e.class);
            put_u64(&mut b[..], o + 4, e.mtime);
            b[o + 12..o + 12 + SEG_BITMAP_BYTES].copy_from_slice(&e.bitmap);
        }
        seal(&mut b, tag::SIT);
        b
    }

    pub fn decode(b: &Block, index: u64) -> FormatResult<SitBlock> {
        if is_zero(b) {
            return Ok(SitBlock::empty(index));
        }
        check(b, tag::SIT, "SIT block")?;
        let stored = get_u64(b, 8);
        if stored != index {
            return Err(FormatError::BadField {
                what: "SIT block",
                field: "index",
                value: stored,
            });
        }
        let mut entries = Vec::with_capacity(SIT_ENTRIES_PER_BLOCK);
        for i in 0..SIT_ENTRIES_PER_BLOCK {
            let o = SIT_HDR + i * SIT_ENTRY;
            let mut bitmap = [0u8; SEG_BITMAP_BYTES];
            bitmap.copy_from_slice(&b[o + 12..o + 12 + SEG_BITMAP_BYTES]);
            let valid = get_u16(b, o);
            let ones: u32 = bitmap.iter().map(|x| x.count_ones()).sum();
            if valid as u32 != ones {
                return Err(FormatError::BadField {
                    what: "SIT entry",
                    field: "valid (does not match bitmap)",
                    value: valid as u64,
                });
            }
            entries.push(SitEntry {
                valid,
                class: get_u8(b, o + 2),
                mtime: get_u64(b, o + 4),
                bitmap,
            });
        }
        Ok(SitBlock { index, entries })
    }
}

/// SIT block index and slot of a segment.
pub fn sit_pos(seg: SegNo) -> (u64, usize) {
    (
        seg / SIT_ENTRIES_PER_BLOCK as u64,
        (seg % SIT_ENTRIES_PER_BLOCK as u64) as usize,
    )
}

/// Owner of one main-area block (segment summary entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// For a data block: the node that points at it. For a node block: its own nid.
    pub nid: Nid,
    /// For a data block: the slot within that node's address array.
    pub ofs: u16,
    /// NAT version of `nid` when the block was written.
    pub version: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsaBlock {
    pub seg: SegNo,
    pub entries: Vec<Summary>,
}

impl SsaBlock {
    pub fn empty(seg: SegNo) -> Self {
        SsaBlock {
            seg,
            entries: vec![Summary::default(); BLOCKS_PER_SEG as usize],
        }
    }

    pub fn encode(&self) -> Box<Block> {
        let mut b = zero_block();
        put_u64(&mut b[..], 8, self.seg);
        for (i, e) in self
            .entries
            .iter()
            .take(BLOCKS_PER_SEG as usize)
            .enumerate()
        {
            let o = SSA_HDR + i * SSA_ENTRY;
            put_u32(&mut b[..], o, e.nid);
            put_u16(&mut b[..], o + 4, e.ofs);
            put_u8(&mut b[..], o + 6, e.version);
        }
        seal(&mut b, tag::SSA);
        b
    }

    pub fn decode(b: &Block, seg: SegNo) -> FormatResult<SsaBlock> {
        if is_zero(b) {
            return Ok(SsaBlock::empty(seg));
        }
        check(b, tag::SSA, "SSA block")?;
        let stored = get_u64(b, 8);
        if stored != seg {
            return Err(FormatError::BadField {
                what: "SSA block",
                field: "segment",
                value: stored,
            });
        }
        let entries = (0..BLOCKS_PER_SEG as usize)
            .map(|i| {
                let o = SSA_HDR + i * SSA_ENTRY;
                Summary {
                    nid: get_u32(b, o),
                    ofs: get_u16(b, o + 4),
                    version: get_u8(b, o + 6),
                }
            })
            .collect();
        Ok(SsaBlock { seg, entries })
    }
}

const _: () = assert!(NAT_HDR + NAT_ENTRIES_PER_BLOCK * NAT_ENTRY <= BLOCK_SIZE);
const _: () = assert!(SIT_HDR + SIT_ENTRIES_PER_BLOCK * SIT_ENTRY <= BLOCK_SIZE);
const _: () = assert!(SSA_HDR + BLOCKS_PER_SEG as usize * SSA_ENTRY <= BLOCK_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips() {
        let mut n = NatBlock::empty(3);
        n.entries[254] = NatEntry {
            addr: u64::MAX - 1,
            ino: 9,
            version: 2,
        };
        assert_eq!(NatBlock::decode(&n.encode(), 3).unwrap(), n);
        assert!(NatBlock::decode(&n.encode(), 4).is_err());
        let mut s = SitBlock::empty(1);
        s.entries[52].bitmap[63] = 0x81;
        s.entries[52].valid = 2;
        s.entries[52].mtime = 77;
        assert_eq!(SitBlock::decode(&s.encode(), 1).unwrap(), s);
        s.entries[0].valid = 1; // count without bits
        assert!(SitBlock::decode(&s.encode(), 1).is_err());
        let mut a = SsaBlock::empty(5);
        a.entries[511] = Summary {
            nid: 42,
            ofs: 506,
            version: 1,
        };
        assert_eq!(SsaBlock::decode(&a.encode(), 5).unwrap(), a);
        let zero = [0u8; BLOCK_SIZE];
        assert_eq!(NatBlock::decode(&zero, 8).unwrap(), NatBlock::empty(8));
    }
}
