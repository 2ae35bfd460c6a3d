//! Checkpoint packs.
//!
//! Two packs live at the start of the checkpoint area; checkpoint version v is written to pack
//! v % 2. A pack is: one header block, payload blocks carrying a byte stream (log-head table,
//! orphan list, NAT/SIT/SSA version bitmaps), and a footer block. The footer is written after
//! the rest of the pack is durable, so a pack is valid only if header, every payload block
//! and footer pass their crcs, all carry the same version, and the footer names the header's
//! crc. Mount takes the valid pack with the higher version (roll-back); see `choose_pack`.

use crate::codec::*;
use crate::sb::{CP_PAYLOAD_BYTES, MAX_LOG_HEADS};
use crate::{tag, Ino, Nid, SegNo};

/// Bytes per log-head record in the payload.
pub const LOG_HEAD_BYTES: usize = 32;

/// Checkpoint flags.
pub mod flags {
    /// Written by a clean unmount: no roll-forward is needed.
    pub const UMOUNT: u32 = 0x1;
    /// The orphan list is not empty.
    pub const ORPHANS: u32 = 0x2;
    /// The file system found an inconsistency and asks for fsck.
    pub const NEED_FSCK: u32 = 0x4;
}

/// Node or data log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogKind {
    Data = 0,
    Node = 1,
}

/// Temperature of a log (F2FS paper Table 1), plus dedicated GC streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Temp {
    Hot = 0,
    Warm = 1,
    Cold = 2,
    /// A garbage collector's own write stream (ScaleLFS DWS).
    Gc = 3,
}

/// One log head: where it is writing and which segment it continues into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeadRecord {
    pub kind: LogKind,
    pub temp: Temp,
    /// Max mlog (independent log partition) this head belongs to.
    pub mlog: u16,
    /// GC worker index for `Temp::Gc`, else 0.
    pub stream: u16,
    /// Current segment.
    pub seg: SegNo,
    /// Next block offset to write inside `seg`.
    pub blkoff: u32,
    /// Segment reserved to continue into when `seg` is full (known ahead, so that node
    /// footers can name the next block of the roll-forward chain).
    pub next_seg: SegNo,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u64,
    pub flags: u32,
    /// Seconds the volume has been mounted, summed over its life (segment ages use it).
    pub elapsed_secs: u64,
    pub wall_unix: u64,
    pub valid_blocks: u64,
    pub valid_nodes: u64,
    pub valid_inodes: u64,
    pub free_segments: u64,
    pub next_nid_hint: Nid,
    /// D2FS (`gc=device`): id of the last migration upcall whose pairs this checkpoint
    /// covers (0: none). Header bytes 108..116; zero in images written before it existed.
    pub last_upcall: u64,
    pub heads: Vec<LogHeadRecord>,
    pub orphans: Vec<Ino>,
    /// Bit i set: copy 1 of NAT block i is current.
    pub nat_bitmap: Vec<u8>,
    pub sit_bitmap: Vec<u8>,
    pub ssa_bitmap: Vec<u8>,
    /// The discard log: blocks dead in this checkpoint's view that the device may still
    /// map (encoded by `flashlog_core::discard::encode_log`; empty when there are none).
    /// Length at header bytes 116..120; zero in images written before it existed.
    pub discard_log: Vec<u8>,
    /// Infinite (IPLFS) volumes: blocks live in this checkpoint's view (no SIT holds valid
    /// counts there). Header bytes 120..128; 0 on finite volumes.
    pub live_blocks: u64,
}

// Header offsets.
const H_VERSION: usize = 8;
const H_PACK_BLOCKS: usize = 16;
const H_FLAGS: usize = 20;
const H_ELAPSED: usize = 24;
const H_WALL: usize = 32;
const H_VALID_BLOCKS: usize = 40;
const H_VALID_NODES: usize = 48;
const H_VALID_INODES: usize = 56;
const H_FREE_SEGS: usize = 64;
const H_NEXT_NID: usize = 72;
const H_HEADS: usize = 76;
const H_ORPHANS: usize = 80;
const H_NAT_BM: usize = 84;
const H_SIT_BM: usize = 88;
const H_SSA_BM: usize = 92;
const H_PAYLOAD_BYTES: usize = 96;
const H_PAYLOAD_CRC: usize = 104;
const H_LAST_UPCALL: usize = 108;
const H_DLOG_BYTES: usize = 116;
const H_LIVE_BLOCKS: usize = 120;
// Payload block offsets.
const P_VERSION: usize = 8;
const P_INDEX: usize = 16;
const P_DATA: usize = 24;
// Footer offsets.
const F_VERSION: usize = 8;
const F_HEADER_CRC: usize = 16;

/// Sizes read from a pack header, enough to read the rest of the pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackHeader {
    pub version: u64,
    /// Header + payload blocks + footer.
    pub pack_blocks: u32,
}

fn kind_from(v: u8) -> FormatResult<LogKind> {
    match v {
        0 => Ok(LogKind::Data),
        1 => Ok(LogKind::Node),
        _ => Err(FormatError::BadField {
            what: "log head",
            field: "kind",
            value: v as u64,
        }),
    }
}
fn temp_from(v: u8) -> FormatResult<Temp> {
    match v {
        0 => Ok(Temp::Hot),
        1 => Ok(Temp::Warm),
        2 => Ok(Temp::Cold),
        3 => Ok(Temp::Gc),
        _ => Err(FormatError::BadField {
            what: "log head",
            field: "temp",
            value: v as u64,
        }),
    }
}

impl Checkpoint {
    fn payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        for h in &self.heads {
            let mut r = [0u8; LOG_HEAD_BYTES];
            put_u8(&mut r, 0, h.kind as u8);
            put_u8(&mut r, 1, h.temp as u8);
            put_u16(&mut r, 2, h.mlog);
            put_u16(&mut r, 4, h.stream);
            put_u32(&mut r, 8, h.blkoff);
            put_u64(&mut r, 16, h.seg);
            put_u64(&mut r, 24, h.next_seg);
            p.extend_from_slice(&r);
        }
        for o in &self.orphans {
            p.extend_from_slice(&o.to_le_bytes());
        }
        p.extend_from_slice(&self.nat_bitmap);
        p.extend_from_slice(&self.sit_bitmap);
        p.extend_from_slice(&self.ssa_bitmap);
        p.extend_from_slice(&self.discard_log);
        p
    }

    /// Encode the pack: header, payload blocks, footer (in write order).
    pub fn encode(&self) -> Vec<Box<Block>> {
        let payload = self.payload();
        let n_payload = payload.len().div_ceil(CP_PAYLOAD_BYTES);
        let mut hdr = zero_block();
        put_u64(&mut hdr[..], H_VERSION, self.version);
        put_u32(&mut hdr[..], H_PACK_BLOCKS, (n_payload + 2) as u32);
        put_u32(&mut hdr[..], H_FLAGS, self.flags);
        put_u64(&mut hdr[..], H_ELAPSED, self.elapsed_secs);
        put_u64(&mut hdr[..], H_WALL, self.wall_unix);
        put_u64(&mut hdr[..], H_VALID_BLOCKS, self.valid_blocks);
        put_u64(&mut hdr[..], H_VALID_NODES, self.valid_nodes);
        put_u64(&mut hdr[..], H_VALID_INODES, self.valid_inodes);
        put_u64(&mut hdr[..], H_FREE_SEGS, self.free_segments);
        put_u32(&mut hdr[..], H_NEXT_NID, self.next_nid_hint);
        put_u64(&mut hdr[..], H_LAST_UPCALL, self.last_upcall);
        put_u32(&mut hdr[..], H_HEADS, self.heads.len() as u32);
        put_u32(&mut hdr[..], H_ORPHANS, self.orphans.len() as u32);
        put_u32(&mut hdr[..], H_NAT_BM, self.nat_bitmap.len() as u32);
        put_u32(&mut hdr[..], H_SIT_BM, self.sit_bitmap.len() as u32);
        put_u32(&mut hdr[..], H_SSA_BM, self.ssa_bitmap.len() as u32);
        put_u32(&mut hdr[..], H_DLOG_BYTES, self.discard_log.len() as u32);
        put_u64(&mut hdr[..], H_LIVE_BLOCKS, self.live_blocks);
        put_u64(&mut hdr[..], H_PAYLOAD_BYTES, payload.len() as u64);
        put_u32(&mut hdr[..], H_PAYLOAD_CRC, crc(&payload));
        seal(&mut hdr, tag::CP_HEADER);
        let header_crc = get_u32(&hdr[..], 4);
        let mut out = vec![hdr];
        for (i, chunk) in payload.chunks(CP_PAYLOAD_BYTES).enumerate() {
            let mut b = zero_block();
            put_u64(&mut b[..], P_VERSION, self.version);
            put_u32(&mut b[..], P_INDEX, i as u32);
            b[P_DATA..P_DATA + chunk.len()].copy_from_slice(chunk);
            seal(&mut b, tag::CP_PAYLOAD);
            out.push(b);
        }
        let mut f = zero_block();
        put_u64(&mut f[..], F_VERSION, self.version);
        put_u32(&mut f[..], F_HEADER_CRC, header_crc);
        seal(&mut f, tag::CP_FOOTER);
        out.push(f);
        out
    }

    /// Read the header of a pack; `max_pack_blocks` is the pack area size from the superblock.
    pub fn decode_header(b: &Block, max_pack_blocks: u64) -> FormatResult<PackHeader> {
        check(b, tag::CP_HEADER, "checkpoint header")?;
        let pack_blocks = get_u32(b, H_PACK_BLOCKS);
        if pack_blocks < 2 || pack_blocks as u64 > max_pack_blocks {
            return Err(FormatError::BadField {
                what: "checkpoint header",
                field: "pack_blocks",
                value: pack_blocks as u64,
            });
        }
        Ok(PackHeader {
            version: get_u64(b, H_VERSION),
            pack_blocks,
        })
    }

    /// The pack's version if it was written whole: every block's tag and checksum, the
    /// footer's and payload blocks' versions and indexes, the payload's checksum. Such a
    /// pack that `decode` refuses was not torn by a cut: its fields are wrong (damage a
    /// checksum missed, a bug, or a format this code does not know), and falling back to
    /// the other, older pack would roll the volume back without a word.
    pub fn intact_version(blocks: &[Box<Block>]) -> Option<u64> {
        unpack(blocks).ok().map(|(version, _)| version)
    }

    /// Decode a whole pack (`blocks` = header, payload..., footer) and check it against the
    /// expected bitmap sizes.
    pub fn decode(
        blocks: &[Box<Block>],
        nat_bm: usize,
        sit_bm: usize,
        ssa_bm: usize,
    ) -> FormatResult<Checkpoint> {
        let (version, payload) = unpack(blocks)?;
        let hdr = &blocks[0];
        let bad = |field: &'static str, value: u64| FormatError::BadField {
            what: "checkpoint",
            field,
            value,
        };
        let n_heads = get_u32(&hdr[..], H_HEADS) as usize;
        let n_orphans = get_u32(&hdr[..], H_ORPHANS) as usize;
        if n_heads == 0 || n_heads > MAX_LOG_HEADS as usize {
            return Err(bad("heads", n_heads as u64));
        }
        // Bounded by the payload (checked against `need` below), not by a constant: a
        // volume's pack holds its `orphan_slots`, at least `MIN_ORPHAN_SLOTS`.
        if n_orphans > payload.len() / 4 {
            return Err(bad("orphans", n_orphans as u64));
        }
        let (nb, sb, ab) = (
            get_u32(&hdr[..], H_NAT_BM) as usize,
            get_u32(&hdr[..], H_SIT_BM) as usize,
            get_u32(&hdr[..], H_SSA_BM) as usize,
        );
        if nb != nat_bm || sb != sit_bm || ab != ssa_bm {
            return Err(bad("bitmap sizes", nb as u64));
        }
        let dlog = get_u32(&hdr[..], H_DLOG_BYTES) as usize;
        let need = n_heads * LOG_HEAD_BYTES + n_orphans * 4 + nb + sb + ab + dlog;
        if need != payload.len() {
            return Err(bad("payload length", payload.len() as u64));
        }
        let mut heads = Vec::with_capacity(n_heads);
        for i in 0..n_heads {
            let r = &payload[i * LOG_HEAD_BYTES..(i + 1) * LOG_HEAD_BYTES];
            heads.push(LogHeadRecord {
                kind: kind_from(get_u8(r, 0))?,
                temp: temp_from(get_u8(r, 1))?,
                mlog: get_u16(r, 2),
                stream: get_u16(r, 4),
                blkoff: get_u32(r, 8),
                seg: get_u64(r, 16),
                next_seg: get_u64(r, 24),
            });
        }
        let mut at = n_heads * LOG_HEAD_BYTES;
        let orphans = (0..n_orphans)
            .map(|i| get_u32(&payload, at + 4 * i))
            .collect();
        at += n_orphans * 4;
        let nat_bitmap = payload[at..at + nb].to_vec();
        at += nb;
        let sit_bitmap = payload[at..at + sb].to_vec();
        at += sb;
        let ssa_bitmap = payload[at..at + ab].to_vec();
        at += ab;
        let discard_log = payload[at..at + dlog].to_vec();
        Ok(Checkpoint {
            version,
            flags: get_u32(&hdr[..], H_FLAGS),
            elapsed_secs: get_u64(&hdr[..], H_ELAPSED),
            wall_unix: get_u64(&hdr[..], H_WALL),
            valid_blocks: get_u64(&hdr[..], H_VALID_BLOCKS),
            valid_nodes: get_u64(&hdr[..], H_VALID_NODES),
            valid_inodes: get_u64(&hdr[..], H_VALID_INODES),
            free_segments: get_u64(&hdr[..], H_FREE_SEGS),
            next_nid_hint: get_u32(&hdr[..], H_NEXT_NID),
            last_upcall: get_u64(&hdr[..], H_LAST_UPCALL),
            heads,
            orphans,
            nat_bitmap,
            sit_bitmap,
            ssa_bitmap,
            discard_log,
            live_blocks: get_u64(&hdr[..], H_LIVE_BLOCKS),
        })
    }
}

/// Outcome of reading both packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackChoice {
    /// Both valid: take the newer (a = pack 0, b = pack 1).
    Newer(u8),
    /// Only this pack is valid (the other is torn, stale or never written).
    Only(u8),
    /// Neither pack is valid: the volume cannot be mounted.
    Neither,
}

/// The checkpoint selection case table (docs/FORMAT.md "Choosing a pack"):
///
/// | pack 0 | pack 1 | choice |
/// |---|---|---|
/// | valid v0 | valid v1, v1 > v0 | pack 1 |
/// | valid v0 | valid v1, v0 > v1 | pack 0 |
/// | valid | invalid | pack 0 |
/// | invalid | valid | pack 1 |
/// | invalid | invalid | none: refuse to mount |
///
/// Two valid packs with equal versions cannot be produced by the writer; it is treated as
/// corruption of pack 1 (pack 0 wins) so that the choice is still deterministic.
pub fn choose_pack(v0: Option<u64>, v1: Option<u64>) -> PackChoice {
    match (v0, v1) {
        (Some(a), Some(b)) if b > a => PackChoice::Newer(1),
        (Some(_), Some(_)) => PackChoice::Newer(0),
        (Some(_), None) => PackChoice::Only(0),
        (None, Some(_)) => PackChoice::Only(1),
        (None, None) => PackChoice::Neither,
    }
}

/// A pack's version and payload bytes, once its structure is whole (see
/// `Checkpoint::intact_version`); the fields inside are `decode`'s to check.
fn unpack(blocks: &[Box<Block>]) -> FormatResult<(u64, Vec<u8>)> {
    let bad = |field: &'static str, value: u64| FormatError::BadField {
        what: "checkpoint",
        field,
        value,
    };
    let (hdr, rest) = blocks.split_first().ok_or(bad("pack_blocks", 0))?;
    check(hdr, tag::CP_HEADER, "checkpoint header")?;
    let version = get_u64(&hdr[..], H_VERSION);
    let pack_blocks = get_u32(&hdr[..], H_PACK_BLOCKS) as usize;
    if pack_blocks != blocks.len() {
        return Err(bad("pack_blocks", pack_blocks as u64));
    }
    let (footer, payload_blocks) = rest.split_last().ok_or(bad("pack_blocks", 1))?;
    check(footer, tag::CP_FOOTER, "checkpoint footer")?;
    if get_u64(&footer[..], F_VERSION) != version {
        return Err(bad("footer version", get_u64(&footer[..], F_VERSION)));
    }
    if get_u32(&footer[..], F_HEADER_CRC) != get_u32(&hdr[..], 4) {
        return Err(bad(
            "footer header_crc",
            get_u32(&footer[..], F_HEADER_CRC) as u64,
        ));
    }
    let payload_bytes = get_u64(&hdr[..], H_PAYLOAD_BYTES);
    if payload_bytes > (payload_blocks.len() * CP_PAYLOAD_BYTES) as u64
        || (payload_bytes as usize).div_ceil(CP_PAYLOAD_BYTES) != payload_blocks.len()
    {
        return Err(bad("payload_bytes", payload_bytes));
    }
    let mut payload = Vec::with_capacity(payload_bytes as usize);
    for (i, b) in payload_blocks.iter().enumerate() {
        check(b, tag::CP_PAYLOAD, "checkpoint payload")?;
        if get_u64(&b[..], P_VERSION) != version || get_u32(&b[..], P_INDEX) != i as u32 {
            return Err(bad("payload version/index", i as u64));
        }
        let take = (payload_bytes as usize - payload.len()).min(CP_PAYLOAD_BYTES);
        payload.extend_from_slice(&b[P_DATA..P_DATA + take]);
    }
    if crc(&payload) != get_u32(&hdr[..], H_PAYLOAD_CRC) {
        return Err(bad("payload crc", 0));
    }
    Ok((version, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(nat: usize) -> Checkpoint {
        Checkpoint {
            version: 9,
            flags: flags::UMOUNT,
            elapsed_secs: 5,
            wall_unix: 6,
            valid_blocks: 7,
            valid_nodes: 8,
            valid_inodes: 1,
            free_segments: 3,
            next_nid_hint: 4,
            last_upcall: 7,
            heads: vec![LogHeadRecord {
                kind: LogKind::Node,
                temp: Temp::Warm,
                mlog: 0,
                stream: 0,
                seg: 2,
                blkoff: 5,
                next_seg: 3,
            }],
            orphans: vec![10, 11],
            nat_bitmap: vec![0xa5; nat],
            sit_bitmap: vec![1; 3],
            ssa_bitmap: vec![2; 64],
            discard_log: vec![7; 40],
            live_blocks: 12,
        }
    }

    #[test]
    fn pack_roundtrip_multi_block() {
        let cp = sample(10_000);
        let blocks = cp.encode();
        assert!(blocks.len() > 3);
        let h = Checkpoint::decode_header(&blocks[0], 100).unwrap();
        assert_eq!(h.pack_blocks as usize, blocks.len());
        assert_eq!(Checkpoint::decode(&blocks, 10_000, 3, 64).unwrap(), cp);
    }

    #[test]
    fn torn_or_mismatched_pack_is_invalid() {
        let cp = sample(10);
        let mut blocks = cp.encode();
        // Footer from another version.
        let mut other = cp.clone();
        other.version = 10;
        let ob = other.encode();
        let last = blocks.len() - 1;
        blocks[last] = ob[ob.len() - 1].clone();
        assert!(Checkpoint::decode(&blocks, 10, 3, 64).is_err());
        // Torn payload.
        let mut blocks = cp.encode();
        blocks[1][100] ^= 1;
        assert!(Checkpoint::decode(&blocks, 10, 3, 64).is_err());
    }

    #[test]
    fn choice_table() {
        assert_eq!(choose_pack(Some(1), Some(2)), PackChoice::Newer(1));
        assert_eq!(choose_pack(Some(3), Some(2)), PackChoice::Newer(0));
        assert_eq!(choose_pack(Some(3), None), PackChoice::Only(0));
        assert_eq!(choose_pack(None, Some(3)), PackChoice::Only(1));
        assert_eq!(choose_pack(None, None), PackChoice::Neither);
    }
}
