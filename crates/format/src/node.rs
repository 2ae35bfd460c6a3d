//! Node blocks: inode, direct, indirect and xattr nodes, with their footer.
//!
//! In memory a node is its raw 4 KiB block; this module gives typed access to it, so that the
//! on-disk bytes are the only representation (no decode/encode round trip per change). The
//! header crc is recomputed by [`seal_node`] right before a node is written.
//!
//! Block layout: `[0,8)` header (tag, crc) · `[8,4064)` body · `[4064,4096)` footer.
//! Footer: nid u32 · ino u32 · flags u32 · ofs u32 (position in the file's node tree) ·
//! cp_ver u32 (low 32 bits of the checkpoint version when written) · seq u32 (write order
//! within that checkpoint, from the file system's one node-version counter; roll-forward
//! merges the mlogs' chains by it, Max 4.4) · next_blkaddr u64 (roll-forward chain).
//! `(cp_ver << 32) | seq` is the node's *version* ([`Footer::version`]).

use crate::codec::*;
use crate::{tag, BlkAddr, Ino, Nid, BLOCK_SIZE, NAME_MAX};

pub const FOOTER: usize = 4064;
const F_NID: usize = FOOTER;
const F_INO: usize = FOOTER + 4;
const F_FLAGS: usize = FOOTER + 8;
const F_OFS: usize = FOOTER + 12;
const F_CP_VER: usize = FOOTER + 16;
const F_SEQ: usize = FOOTER + 20;
const F_NEXT: usize = FOOTER + 24;
const BODY: usize = 8;

/// Data addresses in a direct node.
pub const ADDRS_PER_BLOCK: usize = (FOOTER - BODY) / 8; // 507
/// Child nids in an indirect node.
pub const NIDS_PER_BLOCK: usize = (FOOTER - BODY) / 4; // 1014

/// Footer flag bits.
pub mod flag {
    /// Last node written by an fsync: everything before it in the chain for this inode is
    /// complete (F2FS FSYNC_BIT).
    pub const FSYNC: u32 = 0x1;
    /// The inode's directory entry must be recovered (new file fsync'd, F2FS DENT_BIT).
    pub const DENT: u32 = 0x2;
    /// Node kind, bits 8..12.
    pub const KIND_SHIFT: u32 = 8;
    pub const KIND_MASK: u32 = 0xf << KIND_SHIFT;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Inode = 1,
    Direct = 2,
    Indirect = 3,
    Xattr = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    pub nid: Nid,
    pub ino: Ino,
    pub flags: u32,
    pub ofs: u32,
    /// Low 32 bits of the checkpoint version the node was written under
    /// ([`cp_ver_tag`]).
    pub cp_ver: u32,
    /// Position of this write in the order of all node writes under that checkpoint
    /// (starts at 1 after each checkpoint; 0 on a node never written).
    pub seq: u32,
    pub next_blkaddr: BlkAddr,
}

/// What a node footer keeps of a checkpoint version: its low 32 bits. The first version
/// of a volume is random, so a stale node left by an earlier volume matches with
/// probability 2^-32 per walked chain end (F2FS keeps 32 bits of it too, next to a crc).
pub fn cp_ver_tag(cp_version: u64) -> u32 {
    cp_version as u32
}

/// The first node version written under checkpoint `cp_version`: `(cp_ver_tag << 32) | 1`.
/// Node versions of one checkpoint increase by one per node write; their low half must
/// never wrap (the file system checkpoints long before, see `SEQ_CHECKPOINT_AT`).
pub fn first_node_version(cp_version: u64) -> u64 {
    ((cp_ver_tag(cp_version) as u64) << 32) | 1
}

/// Past this `seq`, fsync writes a checkpoint (which restarts the sequence) instead of
/// rolling forward: half the range, so writes already in flight can never wrap it.
pub const SEQ_CHECKPOINT_AT: u32 = 1 << 31;

impl Footer {
    /// The node version, `(cp_ver << 32) | seq`: orders node writes of one checkpoint
    /// across every log.
    pub fn version(&self) -> u64 {
        ((self.cp_ver as u64) << 32) | self.seq as u64
    }

    pub fn kind(&self) -> Option<NodeKind> {
        match (self.flags & flag::KIND_MASK) >> flag::KIND_SHIFT {
            1 => Some(NodeKind::Inode),
            2 => Some(NodeKind::Direct),
            3 => Some(NodeKind::Indirect),
            4 => Some(NodeKind::Xattr),
            _ => None,
        }
    }
}

pub fn footer(b: &Block) -> Footer {
    Footer {
        nid: get_u32(b, F_NID),
        ino: get_u32(b, F_INO),
        flags: get_u32(b, F_FLAGS),
        ofs: get_u32(b, F_OFS),
        cp_ver: get_u32(b, F_CP_VER),
        seq: get_u32(b, F_SEQ),
        next_blkaddr: get_u64(b, F_NEXT),
    }
}

pub fn set_footer(b: &mut Block, f: &Footer) {
    put_u32(b, F_NID, f.nid);
    put_u32(b, F_INO, f.ino);
    put_u32(b, F_FLAGS, f.flags);
    put_u32(b, F_OFS, f.ofs);
    put_u32(b, F_CP_VER, f.cp_ver);
    put_u32(b, F_SEQ, f.seq);
    put_u64(b, F_NEXT, f.next_blkaddr);
}

/// A fresh node block of `kind`.
pub fn new_node(kind: NodeKind, nid: Nid, ino: Ino, ofs: u32) -> Box<Block> {
    let mut b = zero_block();
    set_footer(
        &mut b,
        &Footer {
            nid,
            ino,
            flags: (kind as u32) << flag::KIND_SHIFT,
            ofs,
            cp_ver: 0,
            seq: 0,
            next_blkaddr: 0,
        },
    );
    b
}

/// Stamp the write-time footer fields and the crc, right before the node goes to disk.
/// `version` is the node version (`(cp_ver_tag << 32) | seq`, [`Footer::version`]).
pub fn seal_node(b: &mut Block, version: u64, next_blkaddr: BlkAddr, extra_flags: u32) {
    let mut f = footer(b);
    f.cp_ver = (version >> 32) as u32;
    f.seq = version as u32;
    f.next_blkaddr = next_blkaddr;
    f.flags = (f.flags & flag::KIND_MASK) | extra_flags;
    set_footer(b, &f);
    seal(b, tag::NODE);
}

/// Check a node read from disk: tag, crc, a known kind, and (if given) the expected nid.
pub fn check_node(b: &Block, expect_nid: Option<Nid>) -> FormatResult<Footer> {
    check(b, tag::NODE, "node block")?;
    let f = footer(b);
    if f.kind().is_none() {
        return Err(FormatError::BadField {
            what: "node footer",
            field: "kind",
            value: f.flags as u64,
        });
    }
    if let Some(n) = expect_nid {
        if f.nid != n {
            return Err(FormatError::BadField {
                what: "node footer",
                field: "nid",
                value: f.nid as u64,
            });
        }
    }
    Ok(f)
}

// ---- direct and indirect nodes ----

pub fn dnode_addr(b: &Block, i: usize) -> BlkAddr {
    get_u64(b, BODY + 8 * i)
}
pub fn set_dnode_addr(b: &mut Block, i: usize, a: BlkAddr) {
    put_u64(b, BODY + 8 * i, a)
}
pub fn inode_child_nid(b: &Block, i: usize) -> Nid {
    get_u32(b, BODY + 4 * i)
}
pub fn set_indirect_nid(b: &mut Block, i: usize, n: Nid) {
    put_u32(b, BODY + 4 * i, n)
}
pub fn indirect_nid(b: &Block, i: usize) -> Nid {
    get_u32(b, BODY + 4 * i)
}

// ---- inodes ----

/// Inode header offsets.
mod io {
    pub const MODE: usize = 8;
    pub const UID: usize = 12;
    pub const GID: usize = 16;
    pub const NLINK: usize = 20;
    pub const SIZE: usize = 24;
    pub const BLOCKS: usize = 32;
    pub const ATIME: usize = 40; // 4 timestamps x (i64 sec, u32 nsec, u32 pad) = 64 bytes
    pub const GENERATION: usize = 104;
    pub const FLAGS: usize = 108;
    pub const XATTR_NID: usize = 112;
    pub const PINO: usize = 116;
    pub const DEPTH: usize = 120;
    pub const RDEV: usize = 124;
    pub const NAMELEN: usize = 128;
    pub const NAME: usize = 130; // 255 bytes -> 385
    pub const AREA: usize = 392;
}
/// Start of the inode's address / inline area.
pub const INODE_AREA: usize = io::AREA;
/// Data addresses held by the inode itself.
pub const ADDRS_PER_INODE: usize = 456;
/// Bytes of the address area, which holds inline data or inline dentries instead when the
/// inode is inline.
pub const INODE_AREA_BYTES: usize = ADDRS_PER_INODE * 8;
/// Offset of the 5 child nids (direct x2, indirect x2, double indirect).
const INODE_NIDS: usize = io::AREA + INODE_AREA_BYTES; // 392 + 3648 = 4040
pub const INODE_NIDS_COUNT: usize = 5;
/// Longest inline file.
pub const MAX_INLINE_DATA: usize = INODE_AREA_BYTES;

const _: () = assert!(INODE_NIDS + 4 * INODE_NIDS_COUNT <= FOOTER);
const _: () = assert!(io::NAME + NAME_MAX <= io::AREA);

/// Inode flags.
pub mod iflag {
    pub const INLINE_DATA: u32 = 0x1;
    pub const INLINE_DENTRY: u32 = 0x2;
    /// Created since the last checkpoint and not yet in a checkpointed directory.
    pub const NEW: u32 = 0x4;
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

/// The fixed part of an inode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeHdr {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Data blocks held (including fallocate reservations), not counting nodes.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub generation: u32,
    pub flags: u32,
    pub xattr_nid: Nid,
    /// Parent directory (for dentry recovery and "..").
    pub pino: Ino,
    /// Directory: hash levels in use.
    pub depth: u32,
    pub rdev: u32,
    /// Name in the parent (for dentry recovery).
    pub name: Vec<u8>,
}

fn get_ts(b: &Block, off: usize) -> Timespec {
    Timespec {
        sec: get_i64(b, off),
        nsec: get_u32(b, off + 8),
    }
}
fn put_ts(b: &mut Block, off: usize, t: Timespec) {
    put_i64(b, off, t.sec);
    put_u32(b, off + 8, t.nsec);
}

impl InodeHdr {
    pub fn read(b: &Block) -> FormatResult<InodeHdr> {
        let namelen = get_u16(b, io::NAMELEN) as usize;
        if namelen > NAME_MAX {
            return Err(FormatError::BadField {
                what: "inode",
                field: "namelen",
                value: namelen as u64,
            });
        }
        let t = |i: usize| get_ts(b, io::ATIME + 16 * i);
        Ok(InodeHdr {
            mode: get_u32(b, io::MODE),
            uid: get_u32(b, io::UID),
            gid: get_u32(b, io::GID),
            nlink: get_u32(b, io::NLINK),
            size: get_u64(b, io::SIZE),
            blocks: get_u64(b, io::BLOCKS),
            atime: t(0),
            mtime: t(1),
            ctime: t(2),
            crtime: t(3),
            generation: get_u32(b, io::GENERATION),
            flags: get_u32(b, io::FLAGS),
            xattr_nid: get_u32(b, io::XATTR_NID),
            pino: get_u32(b, io::PINO),
            depth: get_u32(b, io::DEPTH),
            rdev: get_u32(b, io::RDEV),
            name: b[io::NAME..io::NAME + namelen].to_vec(),
        })
    }

    pub fn write(&self, b: &mut Block) {
        put_u32(b, io::MODE, self.mode);
        put_u32(b, io::UID, self.uid);
        put_u32(b, io::GID, self.gid);
        put_u32(b, io::NLINK, self.nlink);
        put_u64(b, io::SIZE, self.size);
        put_u64(b, io::BLOCKS, self.blocks);
        for (i, t) in [self.atime, self.mtime, self.ctime, self.crtime]
            .into_iter()
            .enumerate()
        {
            put_ts(b, io::ATIME + 16 * i, t);
        }
        put_u32(b, io::GENERATION, self.generation);
        put_u32(b, io::FLAGS, self.flags);
        put_u32(b, io::XATTR_NID, self.xattr_nid);
        put_u32(b, io::PINO, self.pino);
        put_u32(b, io::DEPTH, self.depth);
        put_u32(b, io::RDEV, self.rdev);
        let n = self.name.len().min(NAME_MAX);
        put_u16(b, io::NAMELEN, n as u16);
        b[io::NAME..io::NAME + NAME_MAX].fill(0);
        b[io::NAME..io::NAME + n].copy_from_slice(&self.name[..n]);
    }
}

pub fn inode_addr(b: &Block, i: usize) -> BlkAddr {
    get_u64(b, io::AREA + 8 * i)
}
pub fn set_inode_addr(b: &mut Block, i: usize, a: BlkAddr) {
    put_u64(b, io::AREA + 8 * i, a)
}
pub fn inode_nid(b: &Block, i: usize) -> Nid {
    get_u32(b, INODE_NIDS + 4 * i)
}
pub fn set_inode_nid(b: &mut Block, i: usize, n: Nid) {
    put_u32(b, INODE_NIDS + 4 * i, n)
}
/// The inline area (inline data or inline dentries).
pub fn inode_area(b: &Block) -> &[u8] {
    &b[io::AREA..io::AREA + INODE_AREA_BYTES]
}
pub fn inode_area_mut(b: &mut Block) -> &mut [u8] {
    &mut b[io::AREA..io::AREA + INODE_AREA_BYTES]
}

// ---- node tree geometry (F2FS node offsets, node.h) ----

const N: u64 = NIDS_PER_BLOCK as u64;
const A: u64 = ADDRS_PER_BLOCK as u64;
const I: u64 = ADDRS_PER_INODE as u64;

/// Largest file, in blocks.
pub const MAX_FILE_BLOCKS: u64 = I + 2 * A + 2 * N * A + N * N * A;

/// Where the address of file block `index` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePath {
    /// Node hops below the inode (0: the inode holds the address).
    pub depth: usize,
    /// `slots[0]`: the inode slot (an address slot if depth 0, else an index into the inode's
    /// 5 child nids). `slots[k]`: the slot in the k-th node on the path. The last one is the
    /// address slot.
    pub slots: [usize; 4],
    /// Node offsets (footer `ofs`) of the nodes on the path; `node_ofs[0]` = 0 (the inode).
    pub node_ofs: [u32; 4],
}

/// Path to file block `index`, or None past the largest file.
pub fn node_path(index: u64) -> Option<NodePath> {
    let mut p = NodePath {
        depth: 0,
        slots: [0; 4],
        node_ofs: [0; 4],
    };
    let mut i = index;
    if i < I {
        p.slots[0] = i as usize;
        return Some(p);
    }
    i -= I;
    if i < 2 * A {
        let which = (i / A) as usize;
        p.depth = 1;
        p.slots = [which, (i % A) as usize, 0, 0];
        p.node_ofs[1] = 1 + which as u32;
        return Some(p);
    }
    i -= 2 * A;
    if i < 2 * N * A {
        let which = (i / (N * A)) as usize;
        let rem = i % (N * A);
        let child = rem / A;
        p.depth = 2;
        p.slots = [2 + which, child as usize, (rem % A) as usize, 0];
        let ind_ofs = 3 + which as u64 * (N + 1);
        p.node_ofs[1] = ind_ofs as u32;
        p.node_ofs[2] = (ind_ofs + 1 + child) as u32;
        return Some(p);
    }
    i -= 2 * N * A;
    if i < N * N * A {
        let ind = i / (N * A);
        let rem = i % (N * A);
        let child = rem / A;
        p.depth = 3;
        p.slots = [4, ind as usize, child as usize, (rem % A) as usize];
        let dind_ofs = 5 + 2 * N;
        let ind_ofs = dind_ofs + 1 + ind * (N + 1);
        p.node_ofs[1] = dind_ofs as u32;
        p.node_ofs[2] = ind_ofs as u32;
        p.node_ofs[3] = (ind_ofs + 1 + child) as u32;
        return Some(p);
    }
    None
}

/// For a node at tree position `ofs`: if it is a direct node (or the inode), the first file
/// block it maps and how many; None for indirect nodes and out-of-range offsets.
pub fn dnode_range(ofs: u32) -> Option<(u64, u64)> {
    let o = ofs as u64;
    if o == 0 {
        return Some((0, I));
    }
    if o <= 2 {
        return Some((I + (o - 1) * A, A));
    }
    // Single indirect trees: ofs 3 (indirect) then 4..3+N, then 4+N (indirect) 5+N..4+2N.
    for which in 0..2u64 {
        let ind = 3 + which * (N + 1);
        if o == ind {
            return None;
        }
        if o > ind && o <= ind + N {
            return Some((I + 2 * A + which * N * A + (o - ind - 1) * A, A));
        }
    }
    let dind = 5 + 2 * N;
    if o == dind {
        return None;
    }
    if o > dind {
        let rel = o - dind - 1;
        let ind = rel / (N + 1);
        let pos = rel % (N + 1);
        if ind >= N || pos == 0 {
            return None;
        }
        return Some((I + 2 * A + 2 * N * A + ind * N * A + (pos - 1) * A, A));
    }
    None
}

// ---- xattr node ----

/// Bytes available for xattrs in the xattr node.
pub const XATTR_SPACE: usize = FOOTER - BODY;

/// Decode the xattr list of an xattr node: (name, value) pairs.
pub fn xattrs(b: &Block) -> FormatResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let body = &b[BODY..FOOTER];
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 3 <= body.len() {
        let nlen = body[at] as usize;
        if nlen == 0 {
            return Ok(out);
        }
        let vlen = get_u16(body, at + 1) as usize;
        let end = at + 3 + nlen + vlen;
        if end > body.len() {
            return Err(FormatError::BadField {
                what: "xattr node",
                field: "entry length",
                value: end as u64,
            });
        }
        out.push((
            body[at + 3..at + 3 + nlen].to_vec(),
            body[at + 3 + nlen..end].to_vec(),
        ));
        at = end;
    }
    Ok(out)
}

/// Bytes `list` needs in an xattr node (including the terminator).
pub fn xattrs_size(list: &[(Vec<u8>, Vec<u8>)]) -> usize {
    list.iter()
        .map(|(n, v)| 3 + n.len() + v.len())
        .sum::<usize>()
        + 1
}

/// Write `list` into an xattr node body; the caller has checked `xattrs_size <= XATTR_SPACE`
/// and that names are 1..=255 bytes and values at most 65535.
pub fn set_xattrs(b: &mut Block, list: &[(Vec<u8>, Vec<u8>)]) {
    let body = &mut b[BODY..FOOTER];
    body.fill(0);
    let mut at = 0;
    for (n, v) in list {
        body[at] = n.len() as u8;
        put_u16(body, at + 1, v.len() as u16);
        body[at + 3..at + 3 + n.len()].copy_from_slice(n);
        body[at + 3 + n.len()..at + 3 + n.len() + v.len()].copy_from_slice(v);
        at += 3 + n.len() + v.len();
    }
}

const _: () = assert!(BLOCK_SIZE - FOOTER == 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_and_ranges_agree() {
        let samples = [
            0,
            I - 1,
            I,
            I + A,
            I + 2 * A - 1,
            I + 2 * A,
            I + 2 * A + N * A,
            I + 2 * A + 2 * N * A,
            MAX_FILE_BLOCKS - 1,
        ];
        for &idx in &samples {
            let p = node_path(idx).unwrap();
            let leaf_ofs = p.node_ofs[p.depth];
            let (first, count) = dnode_range(leaf_ofs).unwrap();
            assert!(
                idx >= first && idx < first + count,
                "idx {idx} ofs {leaf_ofs}"
            );
            assert_eq!(idx - first, p.slots[p.depth] as u64);
            for d in 1..p.depth {
                assert!(
                    dnode_range(p.node_ofs[d]).is_none(),
                    "indirect ofs {}",
                    p.node_ofs[d]
                );
            }
        }
        assert!(node_path(MAX_FILE_BLOCKS).is_none());
    }

    /// The bytes docs/FORMAT.md gives for the footer's version: the checkpoint tag at 4080
    /// and the sequence at 4084, little-endian. A footer written before the split (one u64
    /// checkpoint version at 4080) reads back with the same tag, so an older volume's chain
    /// still walks (its nodes then share one `seq`, the version's high half).
    #[test]
    fn footer_version_bytes() {
        let mut b = new_node(NodeKind::Direct, 7, 5, 1);
        seal_node(&mut b, 0x1122_3344_0000_0102, 4242, 0);
        assert_eq!(&b[4080..4088], &[0x44, 0x33, 0x22, 0x11, 0x02, 0x01, 0, 0]);
        assert_eq!(get_u64(&b[..], 4088), 4242);
        let old_cp: u64 = 0xdead_beef_1122_3344;
        put_u64(&mut b[..], 4080, old_cp);
        seal(&mut b, tag::NODE);
        let f = check_node(&b, Some(7)).unwrap();
        assert_eq!(f.cp_ver, cp_ver_tag(old_cp));
        assert_eq!(f.seq, 0xdead_beef);
        assert_eq!(
            first_node_version(old_cp),
            ((cp_ver_tag(old_cp) as u64) << 32) | 1
        );
    }

    #[test]
    fn inode_header_roundtrip() {
        let mut b = new_node(NodeKind::Inode, 5, 5, 0);
        let h = InodeHdr {
            mode: 0o100644,
            nlink: 1,
            size: 9,
            name: b"x".to_vec(),
            mtime: Timespec { sec: -3, nsec: 7 },
            ..Default::default()
        };
        h.write(&mut b);
        set_inode_addr(&mut b, ADDRS_PER_INODE - 1, 77);
        set_inode_nid(&mut b, 4, 8);
        seal_node(&mut b, (3 << 32) | 9, 1000, flag::FSYNC);
        let f = check_node(&b, Some(5)).unwrap();
        assert_eq!(
            (
                f.kind(),
                f.cp_ver,
                f.seq,
                f.next_blkaddr,
                f.flags & flag::FSYNC
            ),
            (Some(NodeKind::Inode), 3, 9, 1000, flag::FSYNC)
        );
        assert_eq!(f.version(), (3 << 32) | 9);
        assert_eq!(InodeHdr::read(&b).unwrap(), h);
        assert_eq!(inode_addr(&b, ADDRS_PER_INODE - 1), 77);
        assert_eq!(inode_nid(&b, 4), 8);
        assert!(check_node(&b, Some(6)).is_err());
    }

    #[test]
    fn xattr_roundtrip_and_bad_length() {
        let mut b = new_node(NodeKind::Xattr, 9, 5, 0);
        let list = vec![
            (b"user.a".to_vec(), b"1".to_vec()),
            (b"user.b".to_vec(), vec![0u8; 300]),
        ];
        set_xattrs(&mut b, &list);
        assert_eq!(xattrs(&b).unwrap(), list);
        put_u16(&mut b[BODY..], 1, 60000);
        assert!(xattrs(&b).is_err());
    }
}
