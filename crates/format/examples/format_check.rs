//! Check docs/FORMAT.md against the bytes of a real image.
//!
//! Usage: `cargo run --release -p flashlog-format --example format_check -- IMAGE`
//! where IMAGE was made by `flashlog mkfs` (and optionally filled through a mount and
//! unmounted cleanly). Every field is read at the offset docs/FORMAT.md gives, with plain
//! little-endian reads, and compared with what `flashlog_format`'s decoders return and with
//! the formulas FORMAT.md states. Prints one line per check; `MISMATCH` lines are findings.

use flashlog_format::cp::Checkpoint;
use flashlog_format::dir::{self as fdir, BLOCK_LAYOUT, INLINE_LAYOUT};
use flashlog_format::meta::{NatBlock, SitBlock, SsaBlock};
use flashlog_format::node;
use flashlog_format::sb::Superblock;
use std::io::{Read, Seek, SeekFrom};

const BS: usize = 4096;

struct Img(std::fs::File);
impl Img {
    fn block(&mut self, addr: u64) -> Box<[u8; BS]> {
        let mut b = Box::new([0u8; BS]);
        self.0.seek(SeekFrom::Start(addr * BS as u64)).unwrap();
        self.0.read_exact(&mut b[..]).unwrap();
        b
    }
}

fn u16_(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

struct Report {
    ok: usize,
    bad: usize,
}
impl Report {
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, doc: T, code: T) {
        if doc == code {
            self.ok += 1;
            println!("ok        {what}: {doc:?}");
        } else {
            self.bad += 1;
            println!("MISMATCH  {what}: docs give {doc:?}, code/image {code:?}");
        }
    }
}

fn tag(s: &[u8; 4]) -> u32 {
    u32::from_le_bytes(*s)
}

/// FORMAT.md "Metadata block header": tag at 0, crc32c of bytes 8..4096 at 4.
fn header(r: &mut Report, what: &str, b: &[u8; BS], t: &[u8; 4]) {
    r.eq(&format!("{what} tag"), tag(t), u32_(b, 0));
    r.eq(
        &format!("{what} crc32c(8..4096) at 4"),
        crc32c::crc32c(&b[8..]),
        u32_(b, 4),
    );
}

fn ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: format_check IMAGE");
    let mut img = Img(std::fs::File::open(&path).unwrap());
    let mut r = Report { ok: 0, bad: 0 };

    // ---- superblock ----
    let b0 = img.block(0);
    let b1 = img.block(1);
    header(&mut r, "superblock 0", &b0, b"FLSB");
    r.eq("superblock copy 1 == copy 0", true, b0[..] == b1[..]);
    let sb = Superblock::decode(&b0).expect("superblock decodes");
    let g = &sb.geo;
    r.eq("sb@8 version", 2, u32_(&b0[..], 8));
    r.eq("sb@12 log2 block size", 12, u32_(&b0[..], 12));
    r.eq("sb@16 blocks/segment", 512, u32_(&b0[..], 16));
    r.eq("sb@20 segs/sec", g.segs_per_sec, u32_(&b0[..], 20));
    let f64s: [(usize, &str, u64); 14] = [
        (24, "block_count", g.block_count),
        (32, "cp_addr", g.cp_addr),
        (40, "cp_pack_blocks", g.cp_pack_blocks),
        (48, "sit_addr", g.sit_addr),
        (56, "sit_blocks", g.sit_blocks),
        (64, "nat_addr", g.nat_addr),
        (72, "nat_blocks", g.nat_blocks),
        (80, "ssa_addr", g.ssa_addr),
        (88, "ssa_blocks", g.ssa_blocks),
        (96, "main_addr", g.main_addr),
        (104, "main_segments", g.main_segments),
        (120, "reserved", g.reserved_segments),
        (128, "ovp", g.ovp_segments),
        (136, "user_blocks", g.user_blocks),
    ];
    for (o, n, v) in f64s {
        r.eq(&format!("sb@{o} {n}"), u64_(&b0[..], o), v);
    }
    r.eq("sb@112 max_nid", u32_(&b0[..], 112), g.max_nid);
    r.eq("sb@116 root ino", 3, u32_(&b0[..], 116));
    r.eq("sb@144 log heads", u32_(&b0[..], 144), g.log_heads);
    r.eq("sb@148 mlogs", u32_(&b0[..], 148), g.mlogs);
    r.eq("sb@152 hash seed", u32_(&b0[..], 152), sb.hash_seed);
    r.eq("sb@156 orphan slots", u32_(&b0[..], 156), g.orphan_slots);
    r.eq("sb@160 created", u64_(&b0[..], 160), sb.created_unix);
    r.eq("sb@168 features (finite: 0)", 0, u64_(&b0[..], 168));
    r.eq("sb@176 uuid", &b0[176..192], &sb.uuid[..]);
    let lab_end = b0[192..256].iter().position(|&c| c == 0).unwrap_or(64);
    r.eq(
        "sb@192 label",
        String::from_utf8_lossy(&b0[192..192 + lab_end]).to_string(),
        sb.label.clone(),
    );
    r.eq(
        "sb bytes 256..4096 zero",
        true,
        b0[256..].iter().all(|&c| c == 0),
    );
    // Layout relations of FORMAT.md "Volume layout".
    let main = g.main_segments;
    let max_nid = (main * 512).clamp(1024, 1 << 26);
    r.eq(
        "max_nid = clamp(main x 512, 1024, 2^26)",
        max_nid,
        g.max_nid as u64,
    );
    r.eq(
        "nat_blocks = ceil(max_nid / 255)",
        ceil(max_nid, 255),
        g.nat_blocks,
    );
    r.eq("sit_blocks = ceil(main / 53)", ceil(main, 53), g.sit_blocks);
    r.eq(
        "orphan_slots = clamp(max_nid, 8192, 2^17)",
        max_nid.clamp(8192, 1 << 17),
        g.orphan_slots as u64,
    );
    let payload_max = 256 * 32
        + g.orphan_slots as u64 * 4
        + ceil(g.nat_blocks, 8)
        + ceil(g.sit_blocks, 8)
        + ceil(main, 8);
    r.eq(
        "cp_pack_blocks = 2 + ceil(payload_max / 4072)",
        2 + ceil(payload_max, 4072),
        g.cp_pack_blocks,
    );
    r.eq("cp_addr = 2", 2, g.cp_addr);
    r.eq(
        "sit_addr = cp + 2 packs",
        g.cp_addr + 2 * g.cp_pack_blocks,
        g.sit_addr,
    );
    r.eq(
        "nat_addr = sit + 2 x sit",
        g.sit_addr + 2 * g.sit_blocks,
        g.nat_addr,
    );
    r.eq(
        "ssa_addr = nat + 2 x nat",
        g.nat_addr + 2 * g.nat_blocks,
        g.ssa_addr,
    );
    r.eq("ssa_blocks = main_segments", main, g.ssa_blocks);
    r.eq(
        "main_addr = first segment boundary after SSA",
        ceil(g.ssa_addr + 2 * g.ssa_blocks, 512) * 512,
        g.main_addr,
    );
    r.eq(
        "main area is the largest that fits (no whole section left after it)",
        true,
        g.block_count - (g.main_addr + main * 512) < 512 * g.segs_per_sec as u64 * 2,
    );
    // Overprovision, FORMAT.md's formula, in segments as written there.
    let sps = g.segs_per_sec as u64;
    let logs = 9 * g.mlogs as u64;
    let mut best: Option<(u64, u64, u64)> = None;
    for c in 1..=1000u64 {
        let ovp = c as f64 / 100.0;
        let reserved = ((100.0 / ovp + 1.0 + logs as f64) as u64) * sps;
        if reserved >= main {
            continue;
        }
        let ovp_segs = (((main - reserved) as f64 * ovp / 100.0) as u64).max(reserved) + 2 * sps;
        if ovp_segs >= main {
            continue;
        }
        if best.is_none_or(|b| main - ovp_segs > b.2) {
            best = Some((reserved, ovp_segs, main - ovp_segs));
        }
    }
    let (res, mut ovp, _) = best.unwrap();
    let secs = main / sps;
    if g.mlogs > 1 || 10 * 16 <= secs {
        ovp += (9 * g.mlogs as u64 + 1) * sps;
    }
    r.eq("reserved segments (doc formula)", res, g.reserved_segments);
    r.eq(
        "ovp segments (doc formula + recovery reserve)",
        ovp,
        g.ovp_segments,
    );
    r.eq(
        "user_blocks = (main - ovp) x 512",
        (main - g.ovp_segments) * 512,
        g.user_blocks,
    );

    // ---- checkpoint packs ----
    let mut newest: Option<(u64, u8, Checkpoint)> = None;
    for pack in 0..2u8 {
        let start = g.cp_addr + pack as u64 * g.cp_pack_blocks;
        let h = img.block(start);
        if u32_(&h[..], 0) != tag(b"FLCH") {
            println!("note      pack {pack}: no header (never written)");
            continue;
        }
        let w = format!("pack {pack}");
        header(&mut r, &format!("{w} header"), &h, b"FLCH");
        let ver = u64_(&h[..], 8);
        r.eq(
            &format!("{w}: written to pack version mod 2"),
            pack as u64,
            ver % 2,
        );
        let n = u32_(&h[..], 16) as u64;
        let blocks: Vec<Box<[u8; BS]>> = (0..n).map(|i| img.block(start + i)).collect();
        let payload_bytes = u64_(&h[..], 96) as usize;
        let mut payload = Vec::new();
        for (i, p) in blocks[1..n as usize - 1].iter().enumerate() {
            header(&mut r, &format!("{w} payload {i}"), p, b"FLCP");
            r.eq(&format!("{w} payload {i}@8 version"), ver, u64_(&p[..], 8));
            r.eq(
                &format!("{w} payload {i}@16 index"),
                i as u32,
                u32_(&p[..], 16),
            );
            let take = (payload_bytes - payload.len()).min(4072);
            payload.extend_from_slice(&p[24..24 + take]);
        }
        let f = &blocks[n as usize - 1];
        header(&mut r, &format!("{w} footer"), f, b"FLCF");
        r.eq(&format!("{w} footer@8 version"), ver, u64_(&f[..], 8));
        r.eq(
            &format!("{w} footer@16 header crc"),
            u32_(&h[..], 4),
            u32_(&f[..], 16),
        );
        r.eq(
            &format!("{w}@104 payload crc"),
            crc32c::crc32c(&payload),
            u32_(&h[..], 104),
        );
        let ck = Checkpoint::decode(
            &blocks,
            ceil(g.nat_blocks, 8) as usize,
            ceil(g.sit_blocks, 8) as usize,
            ceil(g.ssa_blocks, 8) as usize,
        )
        .expect("pack decodes");
        r.eq(&format!("{w}@8 version"), ver, ck.version);
        r.eq(&format!("{w}@20 flags"), u32_(&h[..], 20), ck.flags);
        r.eq(
            &format!("{w}@24 elapsed"),
            u64_(&h[..], 24),
            ck.elapsed_secs,
        );
        r.eq(&format!("{w}@32 wall"), u64_(&h[..], 32), ck.wall_unix);
        r.eq(
            &format!("{w}@40 valid blocks"),
            u64_(&h[..], 40),
            ck.valid_blocks,
        );
        r.eq(
            &format!("{w}@48 valid nodes"),
            u64_(&h[..], 48),
            ck.valid_nodes,
        );
        r.eq(
            &format!("{w}@56 valid inodes"),
            u64_(&h[..], 56),
            ck.valid_inodes,
        );
        r.eq(
            &format!("{w}@64 free segs"),
            u64_(&h[..], 64),
            ck.free_segments,
        );
        r.eq(
            &format!("{w}@72 next nid"),
            u32_(&h[..], 72),
            ck.next_nid_hint,
        );
        r.eq(
            &format!("{w}@76 heads"),
            u32_(&h[..], 76) as usize,
            ck.heads.len(),
        );
        r.eq(
            &format!("{w}@80 orphans"),
            u32_(&h[..], 80) as usize,
            ck.orphans.len(),
        );
        r.eq(
            &format!("{w}@84 nat bm"),
            u32_(&h[..], 84) as usize,
            ck.nat_bitmap.len(),
        );
        r.eq(
            &format!("{w}@88 sit bm"),
            u32_(&h[..], 88) as usize,
            ck.sit_bitmap.len(),
        );
        r.eq(
            &format!("{w}@92 ssa bm"),
            u32_(&h[..], 92) as usize,
            ck.ssa_bitmap.len(),
        );
        r.eq(
            &format!("{w}@108 last upcall"),
            u64_(&h[..], 108),
            ck.last_upcall,
        );
        r.eq(
            &format!("{w}@116 dlog bytes"),
            u32_(&h[..], 116) as usize,
            ck.discard_log.len(),
        );
        r.eq(
            &format!("{w}@120 live blocks"),
            u64_(&h[..], 120),
            ck.live_blocks,
        );
        r.eq(
            &format!("{w} header bytes 128.. zero"),
            true,
            h[128..].iter().all(|&c| c == 0),
        );
        r.eq(
            &format!("{w}: pack blocks <= cp_pack_blocks"),
            true,
            n <= g.cp_pack_blocks,
        );
        // Log heads: 32 bytes each, order mlog x 6 + kind x 3 + temp.
        for (i, hd) in ck.heads.iter().enumerate() {
            let rec = &payload[32 * i..32 * i + 32];
            let want = (
                rec[0],
                rec[1],
                u16_(rec, 2),
                u16_(rec, 4),
                u32_(rec, 8),
                u64_(rec, 16),
                u64_(rec, 24),
            );
            let got = (
                hd.kind as u8,
                hd.temp as u8,
                hd.mlog,
                hd.stream,
                hd.blkoff,
                hd.seg,
                hd.next_seg,
            );
            r.eq(&format!("{w} head {i} record"), want, got);
            if i < g.log_heads as usize {
                r.eq(
                    &format!("{w} head {i} index = mlog*6 + kind*3 + temp"),
                    i,
                    hd.mlog as usize * 6 + hd.kind as usize * 3 + hd.temp as usize,
                );
            }
            r.eq(
                &format!("{w} head {i} bytes 6..8, 12..16 zero"),
                [0u8; 6],
                [rec[6], rec[7], rec[12], rec[13], rec[14], rec[15]],
            );
        }
        if newest.as_ref().is_none_or(|(v, _, _)| ver > *v) {
            newest = Some((ver, pack, ck));
        }
    }
    let (_, _, ck) = newest.expect("a valid pack");
    let cur = |bm: &[u8], i: u64| -> u8 { (bm[(i / 8) as usize] >> (i % 8)) & 1 };

    // ---- NAT ----
    let nat = |img: &mut Img, r: &mut Report, nid: u32| -> (u64, u32, u8) {
        let (bi, k) = ((nid / 255) as u64, (nid % 255) as usize);
        let b = img.block(g.nat_addr + 2 * bi + cur(&ck.nat_bitmap, bi) as u64);
        header(r, &format!("NAT block {bi}"), &b, b"FLNA");
        r.eq(&format!("NAT block {bi}@8 index"), bi, u64_(&b[..], 8));
        let o = 16 + 16 * k;
        let dec = NatBlock::decode(&b, bi).unwrap().entries[k];
        let doc = (u64_(&b[..], o), u32_(&b[..], o + 8), b[o + 12]);
        r.eq(
            &format!("NAT entry nid {nid}"),
            doc,
            (dec.addr, dec.ino, dec.version),
        );
        r.eq(
            &format!("NAT entry nid {nid} bytes 13..16 zero"),
            [0u8; 3],
            [b[o + 13], b[o + 14], b[o + 15]],
        );
        doc
    };
    // ---- node blocks and directories ----
    let (root_addr, root_ino, _) = nat(&mut img, &mut r, 3);
    r.eq("NAT root ino", 3, root_ino);
    let mut dirs = vec![(3u32, root_addr)];
    let mut files = Vec::new();
    let mut checked_blocks = 0;
    while let Some((ino, addr)) = dirs.pop() {
        let b = img.block(addr);
        header(&mut r, &format!("inode {ino}"), &b, b"FLND");
        r.eq(&format!("inode {ino}@4064 nid"), ino, u32_(&b[..], 4064));
        r.eq(&format!("inode {ino}@4068 ino"), ino, u32_(&b[..], 4068));
        r.eq(
            &format!("inode {ino}@4072 kind bits 8..11"),
            1,
            (u32_(&b[..], 4072) >> 8) & 0xf,
        );
        r.eq(&format!("inode {ino}@4076 ofs"), 0, u32_(&b[..], 4076));
        let f = node::footer(&b);
        r.eq(
            &format!("inode {ino} footer 4080/4084/4088"),
            (u32_(&b[..], 4080), u32_(&b[..], 4084), u64_(&b[..], 4088)),
            (f.cp_ver, f.seq, f.next_blkaddr),
        );
        let hdr = node::InodeHdr::read(&b).unwrap();
        r.eq(&format!("inode {ino}@8 mode"), u32_(&b[..], 8), hdr.mode);
        r.eq(
            &format!("inode {ino}@20 nlink"),
            u32_(&b[..], 20),
            hdr.nlink,
        );
        r.eq(&format!("inode {ino}@24 size"), u64_(&b[..], 24), hdr.size);
        r.eq(
            &format!("inode {ino}@32 blocks"),
            u64_(&b[..], 32),
            hdr.blocks,
        );
        r.eq(
            &format!("inode {ino}@56 mtime.sec"),
            u64_(&b[..], 56) as i64,
            hdr.mtime.sec,
        );
        r.eq(
            &format!("inode {ino}@64 mtime.nsec"),
            u32_(&b[..], 64),
            hdr.mtime.nsec,
        );
        r.eq(
            &format!("inode {ino}@108 flags"),
            u32_(&b[..], 108),
            hdr.flags,
        );
        r.eq(
            &format!("inode {ino}@116 pino"),
            u32_(&b[..], 116),
            hdr.pino,
        );
        r.eq(
            &format!("inode {ino}@120 depth"),
            u32_(&b[..], 120),
            hdr.depth,
        );
        r.eq(
            &format!("inode {ino}@128 namelen"),
            u16_(&b[..], 128) as usize,
            hdr.name.len(),
        );
        let is_dir = hdr.mode & 0o170000 == 0o040000;
        let seed = sb.hash_seed;
        let mut entries = Vec::new();
        if !is_dir {
            files.push((ino, hdr.clone(), b));
            continue;
        }
        if hdr.flags & 0x2 != 0 {
            let area = &b[392..392 + 3648];
            let es = INLINE_LAYOUT.entries(area).unwrap();
            for e in &es {
                let rec = 24 + 12 * e.slot;
                r.eq(
                    "inline dentry bitmap at area+0",
                    true,
                    area[e.slot / 8] >> (e.slot % 8) & 1 == 1,
                );
                r.eq(
                    "inline dentry record",
                    (
                        u32_(area, rec),
                        u32_(area, rec + 4),
                        u16_(area, rec + 8) as usize,
                        area[rec + 10],
                        area[rec + 11],
                    ),
                    (e.hash, e.ino, e.name.len(), e.ftype, 0),
                );
                r.eq(
                    "inline name at 2184 + 8 slot",
                    &area[2184 + 8 * e.slot..2184 + 8 * e.slot + e.name.len()],
                    &e.name[..],
                );
                r.eq(
                    "hash = crc32c seeded",
                    crc32c::crc32c_append(seed, &e.name),
                    e.hash,
                );
            }
            entries = es;
        } else {
            // Dentry blocks: the inode's own address slots (small directories).
            let span = fdir::level_start(hdr.depth);
            for bi in 0..span.min(456) {
                let a = u64_(&b[..], 392 + 8 * bi as usize);
                if a == 0 {
                    continue;
                }
                let d = img.block(a);
                header(
                    &mut r,
                    &format!("dentry block {bi} of dir {ino}"),
                    &d,
                    b"FLDE",
                );
                let es = BLOCK_LAYOUT.entries(&d[..]).unwrap();
                for e in &es {
                    let rec = 40 + 12 * e.slot;
                    r.eq(
                        "dentry bitmap at 8",
                        true,
                        d[8 + e.slot / 8] >> (e.slot % 8) & 1 == 1,
                    );
                    r.eq(
                        "dentry record at 40 + 12 slot",
                        (
                            u32_(&d[..], rec),
                            u32_(&d[..], rec + 4),
                            u16_(&d[..], rec + 8) as usize,
                            d[rec + 10],
                            d[rec + 11],
                        ),
                        (e.hash, e.ino, e.name.len(), e.ftype, 0),
                    );
                    r.eq(
                        "dentry name at 2440 + 8 slot",
                        &d[2440 + 8 * e.slot..2440 + 8 * e.slot + e.name.len()],
                        &e.name[..],
                    );
                    r.eq(
                        "hash = crc32c seeded",
                        crc32c::crc32c_append(seed, &e.name),
                        e.hash,
                    );
                    // Bucket: level L, bucket h mod 2^min(L,20), 2 blocks each.
                    let mut found = false;
                    for l in 0..hdr.depth {
                        let s = fdir::level_start(l) + (e.hash as u64 % (1u64 << l.min(20))) * 2;
                        found |= (s..s + 2).contains(&bi);
                    }
                    r.eq("entry in its hash bucket of a level < depth", true, found);
                }
                entries.extend(es);
            }
        }
        for e in entries {
            let (a, i, _) = nat(&mut img, &mut r, e.ino);
            r.eq("NAT ino of an inode is itself", e.ino, i);
            if e.ftype == fdir::ftype::DIR || e.ftype == fdir::ftype::REG {
                dirs.push((e.ino, a));
            }
        }
    }
    // ---- data blocks: SIT and SSA of a file's first blocks ----
    for (ino, hdr, b) in files.iter().take(4) {
        if hdr.flags & 0x1 != 0 {
            println!("note      inode {ino}: inline data");
            continue;
        }
        for slot in 0..2usize {
            let a = u64_(&b[..], 392 + 8 * slot);
            if a == 0 || a == u64::MAX {
                continue;
            }
            let seg = (a - g.main_addr) / 512;
            let off = ((a - g.main_addr) % 512) as usize;
            let (si, k) = (seg / 53, (seg % 53) as usize);
            let sb_ = img.block(g.sit_addr + 2 * si + cur(&ck.sit_bitmap, si) as u64);
            header(&mut r, &format!("SIT block {si}"), &sb_, b"FLSI");
            r.eq(&format!("SIT block {si}@8 index"), si, u64_(&sb_[..], 8));
            let o = 16 + 76 * k;
            let dec = SitBlock::decode(&sb_, si).unwrap().entries[k].clone();
            r.eq(
                "SIT entry valid@0 class@2 mtime@4",
                (u16_(&sb_[..], o), sb_[o + 2], u64_(&sb_[..], o + 4)),
                (dec.valid, dec.class, dec.mtime),
            );
            r.eq("SIT entry byte 3 zero", 0, sb_[o + 3]);
            r.eq(
                "SIT bitmap@12 has the block",
                1,
                sb_[o + 12 + off / 8] >> (off % 8) & 1,
            );
            r.eq(
                "SIT class: a data head (kind 0)",
                true,
                (dec.class as u32) >= g.log_heads || (dec.class as u32 % 6) < 3,
            );
            let ssa = img.block(g.ssa_addr + 2 * seg + cur(&ck.ssa_bitmap, seg) as u64);
            header(&mut r, &format!("SSA of seg {seg}"), &ssa, b"FLSS");
            r.eq("SSA@8 segment", seg, u64_(&ssa[..], 8));
            let o = 16 + 7 * off;
            let dec = SsaBlock::decode(&ssa, seg).unwrap().entries[off];
            r.eq(
                "SSA entry nid@0 ofs@4 ver@6",
                (u32_(&ssa[..], o), u16_(&ssa[..], o + 4), ssa[o + 6]),
                (dec.nid, dec.ofs, dec.version),
            );
            r.eq(
                "SSA names the inode and slot",
                (*ino, slot as u16),
                (dec.nid, dec.ofs),
            );
            checked_blocks += 1;
        }
    }
    println!("data blocks checked: {checked_blocks}");
    println!("{} checks, {} mismatches", r.ok + r.bad, r.bad);
    if r.bad > 0 {
        std::process::exit(1);
    }
}
