//! Base images and fuzz seed corpora.
//!
//! Owns: the one base volume every simulated case starts from, and the cutting of real
//! images into per-decoder seed files for cargo-fuzz (fuzz/corpus/<target>/).
//!
//! Invariant: the base image is the same bytes in every process. mkfs draws a random hash
//! seed, uuid and creation time; [`base_image`] pins them (rewriting both superblock copies)
//! so that a seed replays the same device requests on any machine. The cp version mkfs draws
//! is left random: nothing the simulation checks depends on its value.

use flashlog_core::{Fs, MkfsOptions, MountOptions};
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::codec::{as_block, get_u32, zero_block};
use flashlog_format::node::{self, iflag, InodeHdr, NodeKind};
use flashlog_format::sb::Superblock;
use flashlog_format::{tag, BLOCK_SIZE};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Pinned superblock fields (see the module invariant).
const PINNED_HASH_SEED: u32 = 0x5eed_f1a5;
const PINNED_CREATED_UNIX: u64 = 1_700_000_000;

/// Base images by mlog count (mkfs'd once per process and count, then cloned).
static BASES: Mutex<BTreeMap<u32, Arc<RamDevice>>> = Mutex::new(BTreeMap::new());

/// Mount options of every simulated mount: no timer threads and synchronous log writes,
/// so that checkpoints happen only where the workload asks for them, the device sees
/// requests in one order, and a seed replays exactly.
pub fn sim_mount_options(gc: flashlog_core::GcPolicy) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        gc,
        ..Default::default()
    }
}

/// mkfs of the base volume for `mlogs` log partitions: the smallest power-of-two size mkfs
/// accepts for the count (64 MiB for one; each mlog has its own log heads, each head its
/// own section, and mkfs reserves a second set for roll-forward), at most 4 GiB (32 mlogs,
/// the most mkfs makes, take 2 GiB; the RAM device is sparse).
fn make_base(mlogs: u32) -> Result<RamDevice, String> {
    let mut blocks = crate::VOLUME_BLOCKS;
    let ram = loop {
        let ram = Arc::new(RamDevice::new(blocks));
        let dev: Arc<dyn BlockDevice> = ram.clone();
        match Fs::mkfs(
            dev,
            &MkfsOptions {
                seed: Some(0x5EED),
                mlogs,
                ..Default::default()
            },
        ) {
            Ok(_) => break ram,
            Err(e) if blocks >= crate::VOLUME_BLOCKS << 6 => {
                return Err(format!(
                    "mkfs of a {} MiB base image with {mlogs} mlogs failed: {e}",
                    blocks >> 8
                ))
            }
            Err(_) => blocks *= 2,
        }
    };
    let dev: Arc<dyn BlockDevice> = ram.clone();
    let mut b = zero_block();
    if let Err(e) = dev.read(0, &mut b[..]) {
        panic!("reading the superblock of the base image: {e}");
    }
    let mut sb = match Superblock::decode(&b) {
        Ok(sb) => sb,
        Err(e) => panic!("mkfs wrote a superblock that does not decode: {e}"),
    };
    sb.hash_seed = PINNED_HASH_SEED;
    sb.uuid = *b"flashlog-sim-img";
    sb.created_unix = PINNED_CREATED_UNIX;
    let enc = sb.encode();
    for copy in 0..2 {
        if let Err(e) = dev.write(copy, &enc[..]) {
            panic!("pinning superblock copy {copy}: {e}");
        }
    }
    Ok(ram.deep_clone())
}

/// A fresh copy of the base image (one mlog; mkfs'd once per process, then cloned).
pub fn base_image() -> RamDevice {
    base_image_mlogs(1).unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh copy of the base image made with `mlogs` log partitions (mkfs refuses counts
/// the 64 MiB volume cannot hold: the error says so).
pub fn base_image_mlogs(mlogs: u32) -> Result<RamDevice, String> {
    let mut bases = BASES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = bases.get(&mlogs) {
        return Ok(b.deep_clone());
    }
    let b = Arc::new(make_base(mlogs)?);
    bases.insert(mlogs, b.clone());
    Ok(b.deep_clone())
}

/// A "real" image for corpora and fuzzing: the base image after a short workload that
/// leaves regular, inline and multi-level files, directories (inline and block), xattrs, a
/// checkpoint, and an fsync'd tail on the roll-forward chain.
pub fn populated_image() -> Result<RamDevice, flashlog_core::Error> {
    let ram = Arc::new(base_image());
    let dev: Arc<dyn BlockDevice> = ram.clone();
    let fs = Fs::mount(dev, sim_mount_options(flashlog_core::GcPolicy::F2fs))?;
    let root = fs.root();
    let d = fs.mkdir(root, b"dir", 0o755, 0, 0)?.ino;
    let small = fs.create(root, b"small", 0o644, 0, 0)?.ino;
    fs.write(small, 0, b"inline contents")?;
    let big = fs.create(d, b"big", 0o644, 0, 0)?.ino;
    let data: Vec<u8> = (0..600 * BLOCK_SIZE).map(|i| (i % 251) as u8).collect();
    fs.write(big, 0, &data)?;
    fs.setxattr(big, b"user.k", b"value", flashlog_core::XattrMode::Any)?;
    // Enough names to push the directory out of its inline form.
    for i in 0..120u32 {
        let name = format!("entry-with-a-longish-name-{i:04}");
        fs.create(d, name.as_bytes(), 0o644, 0, 0)?;
    }
    fs.link(small, d, b"hardlink")?;
    fs.sync()?;
    let tail = fs.create(root, b"fsynced", 0o644, 0, 0)?.ino;
    fs.write(tail, 0, &data[..3 * BLOCK_SIZE])?;
    fs.fsync(tail, false)?;
    fs.abandon();
    Ok(ram.deep_clone())
}

fn read(dev: &RamDevice, addr: u64) -> Box<[u8; BLOCK_SIZE]> {
    let mut b = zero_block();
    // A RAM device refuses only out-of-range reads, which the callers never make.
    let _ = dev.read(addr, &mut b[..]);
    b
}

fn put(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)
}

/// Write seed corpora for every fuzz target under `dir` (one subdirectory per target).
/// Returns the number of files written.
pub fn write_corpora(dir: &Path) -> Result<usize, Box<dyn std::error::Error>> {
    let img = populated_image()?;
    let sb = Superblock::decode(as_block(&read(&img, 0)[..], "superblock")?)?;
    let g = &sb.geo;
    let mut n = 0usize;
    let mut emit = |target: &str, name: String, bytes: &[u8]| -> std::io::Result<()> {
        n += 1;
        put(dir, target, &name, bytes)
    };
    emit("superblock", "sb0".into(), &read(&img, 0)[..])?;
    for pack in 0..2u8 {
        let start = g.cp_pack_addr(pack);
        let mut bytes = Vec::new();
        for i in 0..g.cp_pack_blocks {
            bytes.extend_from_slice(&read(&img, start + i)[..]);
        }
        emit("checkpoint", format!("pack{pack}"), &bytes)?;
    }
    let areas: [(&str, u64, u64, u32); 3] = [
        ("nat", g.nat_addr, 2 * g.nat_blocks, tag::NAT),
        ("sit", g.sit_addr, 2 * g.sit_blocks, tag::SIT),
        ("ssa", g.ssa_addr, 2 * g.ssa_blocks, tag::SSA),
    ];
    for (target, start, count, want) in areas {
        let mut kept = 0;
        for i in 0..count {
            let b = read(&img, start + i);
            if get_u32(&b[..], 0) == want && kept < 8 {
                // The decoders take the block's index in the area; the fuzz targets read it
                // from the 8 bytes after the block.
                let mut bytes = b.to_vec();
                bytes.extend_from_slice(&(i / 2).to_le_bytes());
                emit(target, format!("{target}{i}"), &bytes)?;
                kept += 1;
            }
        }
    }
    let (mut nodes, mut dents, mut inline) = (0, 0, 0);
    for a in g.main_addr..g.main_addr + g.main_blocks() {
        if nodes >= 24 && dents >= 4 && inline >= 4 {
            break;
        }
        let b = read(&img, a);
        match get_u32(&b[..], 0) {
            t if t == tag::NODE && nodes < 24 => {
                emit("node", format!("node{a}"), &b[..])?;
                nodes += 1;
                let Ok(f) = node::check_node(&b, None) else {
                    continue;
                };
                if f.kind() == Some(NodeKind::Inode) && inline < 4 {
                    if let Ok(h) = InodeHdr::read(&b) {
                        if h.flags & iflag::INLINE_DENTRY != 0 {
                            emit("inline_dentry", format!("inline{a}"), node::inode_area(&b))?;
                            inline += 1;
                        }
                    }
                }
            }
            t if t == tag::DENTRY && dents < 4 => {
                emit("dentry", format!("dentry{a}"), &b[..])?;
                dents += 1;
            }
            _ => {}
        }
    }
    // The checkpoint's discard log: ranges (long runs) and bitmaps (short ones), as
    // `gc=none` and `gc=device` write it.
    let cmd = |addr: u64, len: u64| flashlog_core::discard::DiscardCmd { addr, len };
    let logs: [(&str, Vec<flashlog_core::discard::DiscardCmd>); 3] = [
        ("empty", vec![]),
        ("ranges", vec![cmd(1024, 512), cmd(9000, 1000)]),
        (
            "mixed",
            (0..64u64)
                .map(|k| cmd(4096 + 3 * k, 1))
                .chain([cmd((1 << 56) + 7, 300)])
                .collect(),
        ),
    ];
    for (name, cmds) in &logs {
        emit(
            "discard_log",
            (*name).into(),
            &flashlog_core::discard::encode_log(cmds),
        )?;
    }
    // mount_fsck takes a list of patches (see fuzz/fuzz_targets/mount_fsck.rs); the empty
    // list mounts the image as it is, the others are small starting points.
    emit("mount_fsck", "empty".into(), &[])?;
    emit("mount_fsck", "one".into(), &[0, 0, 16, 0, 1, 0xff])?;
    emit("mount_fsck", "resealed".into(), &[3, 0, 40, 0, 0x81, 0x07])?;
    Ok(n)
}

/// Blocks of `img` that hold any non-zero byte (what image mutations pick from).
pub fn used_blocks(img: &RamDevice) -> Vec<u64> {
    let mut used = Vec::new();
    let mut b = zero_block();
    for a in 0..img.capabilities().block_count {
        if img.read(a, &mut b[..]).is_ok() && b.iter().any(|&x| x != 0) {
            used.push(a);
        }
    }
    used
}

/// Tags a mutated block may be resealed with.
const RESEAL_TAGS: [u32; 9] = [
    tag::SUPERBLOCK,
    tag::CP_HEADER,
    tag::CP_PAYLOAD,
    tag::CP_FOOTER,
    tag::NAT,
    tag::SIT,
    tag::SSA,
    tag::NODE,
    tag::DENTRY,
];
/// Patches applied from one input at most.
pub const MAX_PATCHES: usize = 64;

/// Apply the mount_fsck fuzz target's patch list to `img` (format in
/// fuzz/fuzz_targets/mount_fsck.rs): 6-byte records [block u16][offset u16][op u8][value u8];
/// `block` indexes `used` (mod its length); op & 3: 0 set, 1 xor, 2 add, 3 fill 8 bytes;
/// op & 0x80: reseal the block when it carries a known tag.
pub fn apply_patches(img: &RamDevice, used: &[u64], data: &[u8]) {
    if used.is_empty() {
        return;
    }
    for p in data.chunks_exact(6).take(MAX_PATCHES) {
        let addr = used[u16::from_le_bytes([p[0], p[1]]) as usize % used.len()];
        let off = u16::from_le_bytes([p[2], p[3]]) as usize % BLOCK_SIZE;
        let mut b = zero_block();
        if img.read(addr, &mut b[..]).is_err() {
            continue;
        }
        match p[4] & 3 {
            0 => b[off] = p[5],
            1 => b[off] ^= p[5],
            2 => b[off] = b[off].wrapping_add(p[5]),
            _ => {
                let o = off.min(BLOCK_SIZE - 8);
                b[o..o + 8].fill(p[5]);
            }
        }
        if p[4] & 0x80 != 0 {
            let t = get_u32(&b[..], 0);
            if RESEAL_TAGS.contains(&t) {
                flashlog_format::codec::seal(&mut b, t);
            }
        }
        // In range by construction (`used` came from this image).
        let _ = img.write(addr, &b[..]);
    }
}
