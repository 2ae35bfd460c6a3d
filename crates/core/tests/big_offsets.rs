//! File size and offset edges (written in review, 2026-11-28): writes, reads, truncates and
//! fallocate at and around the largest file size, offsets near the top of the u64 range,
//! sparse files whose data sits at every node-level boundary of the node tree (inode slots,
//! direct nodes, indirect, double indirect) through write-back, remount and cleaning,
//! punch and zero range across those boundaries, block counts of sparse files, and inline
//! data growing and shrinking across the inline limit with holes.
//!
//! Contents are checked against a sparse model (`Model`): only the blocks written are
//! stored, everything else must read as zeros.

use flashlog_core::file::MAX_FILE_BYTES;
use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::node::{
    ADDRS_PER_BLOCK, ADDRS_PER_INODE, MAX_FILE_BLOCKS, MAX_INLINE_DATA, NIDS_PER_BLOCK,
};
use std::collections::BTreeMap;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
const I: u64 = ADDRS_PER_INODE as u64;
const A: u64 = ADDRS_PER_BLOCK as u64;
const N: u64 = NIDS_PER_BLOCK as u64;

fn opts(gc: GcPolicy) -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        gc,
        gc_workers: 2,
        ..Default::default()
    }
}

fn fresh(mib: u64) -> (Arc<dyn BlockDevice>, Fs) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((mib << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    (dev, fs)
}

fn new_file(fs: &Fs, name: &str) -> Ino {
    fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .unwrap()
        .ino
}

fn set_size(fs: &Fs, ino: Ino, size: u64) -> Result<Attr> {
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(size),
            ..Default::default()
        },
    )
}

fn fsck_clean(dev: &Arc<dyn BlockDevice>, what: &str) {
    let r = fsck(&**dev).unwrap();
    assert!(r.is_clean(), "{what}: {r}");
}

/// First block index of each level's first and second node, and the last block of the
/// file: every place where the node tree changes the node that maps a block.
fn boundaries() -> Vec<u64> {
    let single = I + 2 * A; // first block under the first indirect node
    let dind = single + 2 * N * A; // first block under the double-indirect node
    vec![
        0,
        I,                      // first direct node
        I + A,                  // second direct node
        single,                 // first indirect node, its first direct node
        single + A,             // its second direct node
        single + N * A,         // second indirect node
        dind,                   // double indirect, first indirect, first direct
        dind + A,               // ... second direct
        dind + N * A,           // double indirect, second indirect
        dind + (N - 1) * N * A, // last indirect under the double indirect
        MAX_FILE_BLOCKS - A,    // last direct node
        MAX_FILE_BLOCKS - 1,    // the last block
    ]
}

/// Pattern bytes for (block, seed), never zero.
fn pat(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(131)
                .wrapping_add(seed.wrapping_mul(7)) as u8)
                | 1
        })
        .collect()
}

/// The file as a map of non-zero blocks and a size.
#[derive(Default, Clone)]
struct Model {
    size: u64,
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl Model {
    fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let (idx, in_b) = (pos / BS, (pos % BS) as usize);
            let take = (BLOCK_SIZE - in_b).min(data.len() - done);
            let b = self
                .blocks
                .entry(idx)
                .or_insert_with(|| vec![0; BLOCK_SIZE]);
            b[in_b..in_b + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        self.size = self.size.max(off + data.len() as u64);
    }

    fn zero(&mut self, off: u64, end: u64) {
        let end = end.min(self.size);
        let mut pos = off;
        while pos < end {
            let (idx, in_b) = (pos / BS, (pos % BS) as usize);
            let take = (BS - in_b as u64).min(end - pos) as usize;
            if let Some(b) = self.blocks.get_mut(&idx) {
                b[in_b..in_b + take].fill(0);
            }
            pos += take as u64;
        }
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            self.zero(size, self.size);
        }
        self.size = size;
    }

    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        if off >= self.size {
            return Vec::new();
        }
        let n = (len as u64).min(self.size - off) as usize;
        let mut out = vec![0u8; n];
        let mut done = 0usize;
        while done < n {
            let pos = off + done as u64;
            let (idx, in_b) = (pos / BS, (pos % BS) as usize);
            let take = (BLOCK_SIZE - in_b).min(n - done);
            if let Some(b) = self.blocks.get(&idx) {
                out[done..done + take].copy_from_slice(&b[in_b..in_b + take]);
            }
            done += take;
        }
        out
    }
}

/// Compare `len` bytes at `off` with the model (one request, then block-sized pieces).
fn check_range(fs: &Fs, ino: Ino, m: &Model, off: u64, len: usize, what: &str) {
    let want = m.read(off, len);
    let mut got = vec![0xEEu8; len];
    let n = fs.read(ino, off, &mut got).unwrap();
    assert_eq!(n, want.len(), "{what}: read length at {off}");
    if got[..n] != want[..] {
        let at = (0..n).find(|&i| got[i] != want[i]).unwrap();
        let pos = off + at as u64;
        panic!(
            "{what}: byte {pos} (block {}, offset {}) reads {:#x}, expected {:#x}",
            pos / BS,
            pos % BS,
            got[at],
            want[at]
        );
    }
}

/// Size, then the neighbourhood of every boundary and every written block.
fn check(fs: &Fs, ino: Ino, m: &Model, what: &str) {
    assert_eq!(fs.getattr(ino).unwrap().size, m.size, "{what}: size");
    let mut spots: Vec<u64> = boundaries();
    spots.extend(m.blocks.keys().copied());
    for b in spots {
        let off = b.saturating_sub(2) * BS;
        check_range(fs, ino, m, off, 5 * BLOCK_SIZE, what);
        // Unaligned, straddling the block's start.
        if b > 0 {
            check_range(fs, ino, m, b * BS - 7, 4096 + 14, what);
        }
    }
    // Past EOF reads nothing.
    let mut buf = [0u8; 16];
    assert_eq!(fs.read(ino, m.size, &mut buf).unwrap(), 0, "{what}: at EOF");
    assert_eq!(fs.read(ino, m.size + 1, &mut buf).unwrap(), 0, "{what}");
    assert_eq!(fs.read(ino, u64::MAX, &mut buf).unwrap(), 0, "{what}");
}

// ---- the largest file size ----

/// A write that starts below the largest size and ends past it writes up to the limit and
/// returns a short count, as Linux does (`generic_write_check_limits`: EFBIG only when
/// the write starts at or past the limit). Through FUSE the kernel cannot do that for us:
/// its s_maxbytes is i64::MAX, so the adapter gets the whole straddling WRITE.
#[test]
fn write_straddling_the_max_size_is_short_not_efbig() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    let off = MAX_FILE_BYTES - 100;
    let r = fs.write(f, off, &pat(200, 1));
    let size = fs.getattr(f).unwrap().size;
    assert!(
        matches!(r, Ok(100)),
        "write of 200 bytes at max-100 returned {r:?} (size now {size}); Linux writes 100"
    );
    assert_eq!(size, MAX_FILE_BYTES);
    let mut buf = [0u8; 200];
    assert_eq!(fs.read(f, off, &mut buf).unwrap(), 100);
    assert_eq!(buf[..100], pat(200, 1)[..100]);
    fs.unmount().unwrap();
    fsck_clean(&dev, "after a straddling write");
}

/// A write larger than one core operation (1 MiB) whose later part crosses the limit:
/// the first chunks are written and the file grows, so the call must report them (a short
/// count), not EFBIG for a write that changed the file.
#[test]
fn a_multi_chunk_write_stopped_by_the_max_size_reports_what_it_wrote() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    let off = MAX_FILE_BYTES - (3 << 19); // 1.5 MiB below the limit
    let data = pat(2 << 20, 2);
    let r = fs.write(f, off, &data);
    let size = fs.getattr(f).unwrap().size;
    match r {
        Ok(n) => {
            assert_eq!(n as u64, MAX_FILE_BYTES - off, "short count");
            assert_eq!(size, MAX_FILE_BYTES);
        }
        Err(e) => panic!(
            "write of 2 MiB at max-1.5 MiB failed with {e:?} but the file grew from 0 to \
             {size} bytes (max-{}): the caller is told nothing was written",
            MAX_FILE_BYTES - size
        ),
    }
    fs.unmount().unwrap();
    fsck_clean(&dev, "after a multi-chunk write at the limit");
}

/// The exact limit: the last byte can be written and read, a byte at the limit is EFBIG
/// and changes nothing, truncate to the limit works and EFBIG past it, fallocate up to the
/// limit works and past it is EFBIG in every mode; then down to nothing again, with every
/// node and block given back.
#[test]
fn writes_truncates_and_fallocate_at_the_exact_limit() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    let free0 = fs.statfs().blocks_free;
    let mut m = Model::default();

    // At the limit: EFBIG, nothing changes.
    for (off, len) in [
        (MAX_FILE_BYTES, 1usize),
        (MAX_FILE_BYTES, 4096),
        (MAX_FILE_BYTES + 1, 1),
    ] {
        let r = fs.write(f, off, &pat(len, 3));
        assert!(matches!(r, Err(Error::TooBig)), "write at {off}: {r:?}");
        assert_eq!(fs.getattr(f).unwrap().size, 0);
        assert_eq!(fs.getattr(f).unwrap().blocks, 0);
    }
    // The last byte.
    assert_eq!(fs.write(f, MAX_FILE_BYTES - 1, &[0x5a]).unwrap(), 1);
    m.write(MAX_FILE_BYTES - 1, &[0x5a]);
    assert_eq!(fs.getattr(f).unwrap().size, MAX_FILE_BYTES);
    assert_eq!(
        fs.getattr(f).unwrap().blocks,
        8,
        "one 4 KiB block in 512-byte units"
    );
    check(&fs, f, &m, "last byte");
    // The last whole block.
    let last = pat(BLOCK_SIZE, 4);
    assert_eq!(fs.write(f, MAX_FILE_BYTES - BS, &last).unwrap(), BLOCK_SIZE);
    m.write(MAX_FILE_BYTES - BS, &last);
    check(&fs, f, &m, "last block");

    // Truncate: past the limit is EFBIG and changes nothing.
    assert!(matches!(
        set_size(&fs, f, MAX_FILE_BYTES + 1),
        Err(Error::TooBig)
    ));
    assert!(matches!(set_size(&fs, f, u64::MAX), Err(Error::TooBig)));
    assert!(matches!(
        set_size(&fs, f, i64::MAX as u64),
        Err(Error::TooBig)
    ));
    check(&fs, f, &m, "after refused truncates");

    // fallocate: up to the limit fine, one byte past it EFBIG in every mode.
    for mode in [
        FallocMode::Allocate,
        FallocMode::KeepSize,
        FallocMode::PunchHole,
        FallocMode::ZeroRange,
        FallocMode::ZeroRangeKeepSize,
    ] {
        let r = fs.fallocate(f, mode, MAX_FILE_BYTES - 2 * BS, 2 * BS + 1);
        assert!(
            matches!(r, Err(Error::TooBig)),
            "{mode:?} past the limit: {r:?}"
        );
        let r = fs.fallocate(f, mode, MAX_FILE_BYTES, 1);
        assert!(
            matches!(r, Err(Error::TooBig)),
            "{mode:?} at the limit: {r:?}"
        );
        let r = fs.fallocate(f, mode, u64::MAX, 1);
        assert!(
            matches!(r, Err(Error::TooBig)),
            "{mode:?} at u64::MAX: {r:?}"
        );
        let r = fs.fallocate(f, mode, i64::MAX as u64, i64::MAX as u64);
        assert!(
            matches!(r, Err(Error::TooBig)),
            "{mode:?} at i64::MAX: {r:?}"
        );
        check(&fs, f, &m, &format!("after a refused {mode:?}"));
    }
    // Preallocate the two blocks before the last, then zero the last partially.
    fs.fallocate(f, FallocMode::KeepSize, MAX_FILE_BYTES - 3 * BS, 2 * BS)
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, 3 * 8);
    fs.fallocate(f, FallocMode::ZeroRange, MAX_FILE_BYTES - 100, 100)
        .unwrap();
    m.zero(MAX_FILE_BYTES - 100, MAX_FILE_BYTES);
    check(&fs, f, &m, "zero range at the limit");
    fs.fallocate(f, FallocMode::PunchHole, MAX_FILE_BYTES - BS, BS)
        .unwrap();
    m.blocks.remove(&(MAX_FILE_BLOCKS - 1));
    assert_eq!(fs.getattr(f).unwrap().blocks, 2 * 8);
    check(&fs, f, &m, "punched the last block");

    // Through a remount.
    fs.unmount().unwrap();
    fsck_clean(&dev, "a file of the largest size");
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "after remount");
    assert_eq!(fs.getattr(f).unwrap().blocks, 2 * 8);

    // Down to nothing and up to the limit again with no blocks: a hole of 1.9 TiB.
    set_size(&fs, f, 0).unwrap();
    m.truncate(0);
    assert_eq!(fs.getattr(f).unwrap().blocks, 0);
    set_size(&fs, f, MAX_FILE_BYTES).unwrap();
    m.truncate(MAX_FILE_BYTES);
    check(&fs, f, &m, "truncated to 0 then to the limit");
    assert_eq!(fs.getattr(f).unwrap().blocks, 0);
    // A punch of the whole file finds nothing to free and keeps the size.
    fs.fallocate(f, FallocMode::PunchHole, 0, MAX_FILE_BYTES)
        .unwrap();
    check(&fs, f, &m, "punch of the whole 1.9 TiB hole");
    set_size(&fs, f, 0).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free0, "blocks left behind");
    fs.unmount().unwrap();
    fsck_clean(&dev, "after truncating back to zero");
}

/// A write of nothing changes nothing wherever it is, and offsets whose end overflows u64
/// are refused without a change.
#[test]
fn zero_length_writes_and_overflowing_ends_change_nothing() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    fs.write(f, 0, &pat(5000, 5)).unwrap();
    let before = fs.getattr(f).unwrap();
    for off in [
        5000,
        1 << 40,
        MAX_FILE_BYTES - 1,
        MAX_FILE_BYTES,
        MAX_FILE_BYTES + 1,
        i64::MAX as u64,
        u64::MAX - 1,
        u64::MAX,
    ] {
        let r = fs.write(f, off, &[]);
        // Linux returns 0 for a write of nothing (checked before the size limit); EFBIG
        // past the limit is tolerated here, a change of the file is not.
        assert!(matches!(r, Ok(0) | Err(Error::TooBig)), "at {off}: {r:?}");
        let a = fs.getattr(f).unwrap();
        assert_eq!(
            (a.size, a.blocks, a.mtime),
            (before.size, before.blocks, before.mtime)
        );
    }
    for (off, len) in [
        (u64::MAX, 1usize),
        (u64::MAX - 4095, 4096),
        (i64::MAX as u64, 1),
    ] {
        let r = fs.write(f, off, &pat(len, 6));
        assert!(matches!(r, Err(Error::TooBig)), "at {off}: {r:?}");
    }
    let r = fs.fallocate(f, FallocMode::Allocate, u64::MAX - 10, 100);
    assert!(matches!(r, Err(Error::TooBig)));
    let r = fs.fallocate(f, FallocMode::Allocate, 0, 0);
    assert!(matches!(r, Err(Error::Invalid(_))), "len 0: {r:?}");
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.blocks), (before.size, before.blocks));
    fs.unmount().unwrap();
    fsck_clean(&dev, "zero-length writes");
}

// ---- sparse files across the node tree ----

/// Write a few bytes into the first and last block of every node boundary (and the block
/// before it), unaligned: every hole between must read as zeros, before write-back, after
/// it, after a remount, and after the cleaner moved every block (both cleaners); the block
/// count is the blocks written.
#[test]
fn holes_read_as_zeros_at_every_node_level_boundary_through_remount_and_cleaning() {
    for gc in [GcPolicy::F2fs, GcPolicy::Scale] {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / BS));
        Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
        let mut o = opts(gc);
        o.alloc_mode = AllocMode::Lfs;
        let fs = Fs::mount(dev.clone(), o.clone()).unwrap();
        let f = new_file(&fs, "sparse");
        let filler = new_file(&fs, "filler");
        let mut m = Model::default();
        let mut spots: Vec<u64> = Vec::new();
        for b in boundaries() {
            if b > 0 {
                spots.push(b - 1);
            }
            spots.push(b);
        }
        spots.sort();
        spots.dedup();
        let mut fill_off = 0u64;
        for (k, &b) in spots.iter().enumerate() {
            // Few bytes at an odd place in the block, so the block's other bytes must be
            // zeros too.
            let off = b * BS + 1000 + k as u64;
            let d = pat(100, b);
            assert_eq!(fs.write(f, off, &d).unwrap(), 100);
            m.write(off, &d);
            // Filler blocks beside it in the same sections, so the cleaner must move it.
            fs.write(filler, fill_off, &pat(64 * BLOCK_SIZE, k as u64))
                .unwrap();
            fill_off += 64 * BS;
            fs.fsync(filler, false).unwrap();
            fs.fsync(f, false).unwrap();
        }
        let want_blocks = m.blocks.len() as u64 * 8;
        check(&fs, f, &m, &format!("{gc:?}: written"));
        assert_eq!(
            fs.getattr(f).unwrap().blocks,
            want_blocks,
            "{gc:?}: st_blocks"
        );
        fs.unmount().unwrap();
        fsck_clean(&dev, &format!("{gc:?}: sparse file"));

        let fs = Fs::mount(dev.clone(), o.clone()).unwrap();
        check(&fs, f, &m, &format!("{gc:?}: after remount"));
        assert_eq!(fs.getattr(f).unwrap().blocks, want_blocks);
        fs.unlink(fs.root(), b"filler").unwrap();
        fs.sync().unwrap();
        let addrs = |fs: &Fs| -> Vec<u64> {
            let inner = fs.inner();
            let c = inner.cell(f).unwrap();
            let mut st = c.lock();
            m.blocks
                .keys()
                .map(|&i| inner.block_addr(&mut st, i).unwrap())
                .collect()
        };
        let before = addrs(&fs);
        let moved0 = fs.stats().gc_moved_blocks;
        fs.gc(u64::MAX / 2).unwrap();
        let moved = fs.stats().gc_moved_blocks - moved0;
        // The sections that held only filler are freed without a move; those shared with
        // the sparse file's blocks move them (the open sections are not victims).
        assert!(moved > 0, "{gc:?}: the cleaner moved nothing");
        let after = addrs(&fs);
        let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert!(changed > 0, "{gc:?}: no block of the sparse file moved");
        eprintln!("{gc:?}: {changed} of {} sparse blocks moved", before.len());
        check(&fs, f, &m, &format!("{gc:?}: after cleaning"));
        assert_eq!(fs.getattr(f).unwrap().blocks, want_blocks);
        fs.unmount().unwrap();
        fsck_clean(&dev, &format!("{gc:?}: after cleaning"));
        let fs = Fs::mount(dev.clone(), o).unwrap();
        check(&fs, f, &m, &format!("{gc:?}: cleaned, remounted"));
        fs.unmount().unwrap();
    }
}

/// Data around each boundary, then punch, zero range and unaligned writes across the
/// boundary, with the block count after each.
#[test]
fn punch_and_zero_range_across_node_boundaries() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    let mut m = Model::default();
    for b in boundaries() {
        let start = b.saturating_sub(3);
        let end = (b + 3).min(MAX_FILE_BLOCKS);
        let d = pat(((end - start) * BS) as usize, b);
        fs.write(f, start * BS, &d).unwrap();
        m.write(start * BS, &d);
    }
    let blocks = |fs: &Fs| fs.getattr(f).unwrap().blocks / 8;
    assert_eq!(blocks(&fs), m.blocks.len() as u64);
    check(&fs, f, &m, "written");
    fs.sync().unwrap();
    for (k, b) in boundaries().into_iter().enumerate() {
        if b == 0 {
            continue;
        }
        let (mode, lo, hi) = match k % 3 {
            // Punch [b-1 + 100, b+1 + 200): frees block b, partial edges zeroed.
            0 => (
                FallocMode::PunchHole,
                (b - 1) * BS + 100,
                (b + 1) * BS + 200,
            ),
            // Zero range whole blocks b-2..b+1: freed then preallocated.
            1 => (FallocMode::ZeroRangeKeepSize, (b - 2) * BS, (b + 1) * BS),
            _ => (FallocMode::ZeroRange, b * BS - 1, b * BS + 1),
        };
        let hi = hi.min(MAX_FILE_BYTES);
        fs.fallocate(f, mode, lo, hi - lo).unwrap();
        m.zero(lo, hi);
        if mode == FallocMode::PunchHole {
            // Whole blocks inside the punch are holes now.
            for idx in lo.div_ceil(BS)..hi / BS {
                m.blocks.remove(&idx);
            }
        }
        check(&fs, f, &m, &format!("{mode:?} across block {b}"));
    }
    // Count: blocks mapped (written or preallocated) must match a fresh count after remount.
    let before = blocks(&fs);
    fs.unmount().unwrap();
    fsck_clean(&dev, "after punches");
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "after punches, remounted");
    assert_eq!(blocks(&fs), before);
    // Rewrite across boundaries unaligned, then punch everything.
    for b in boundaries().into_iter().filter(|&b| b > 0) {
        let d = pat(3 * BLOCK_SIZE, b + 9);
        let off = (b - 1) * BS + 17;
        let len = d.len().min((MAX_FILE_BYTES - off) as usize);
        fs.write(f, off, &d[..len]).unwrap();
        m.write(off, &d[..len]);
    }
    check(&fs, f, &m, "rewritten across boundaries");
    fs.fallocate(f, FallocMode::PunchHole, 0, m.size).unwrap();
    m.zero(0, m.size);
    m.blocks.clear();
    check(&fs, f, &m, "all punched");
    assert_eq!(blocks(&fs), 0, "blocks after punching the whole file");
    fs.unmount().unwrap();
    fsck_clean(&dev, "all punched");
}

/// Truncate down through every level from the top: data below each cut stays, the blocks
/// and nodes above it are freed (statfs back to where it was once the file is empty), and
/// an extension reads zeros where the cut data was.
#[test]
fn truncate_down_through_every_level_then_extend_reads_zeros() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    fs.sync().unwrap();
    let free0 = fs.statfs().blocks_free;
    let mut m = Model::default();
    for b in boundaries() {
        let start = b.saturating_sub(1);
        let end = (b + 2).min(MAX_FILE_BLOCKS);
        let d = pat(((end - start) * BS) as usize, b + 1);
        fs.write(f, start * BS, &d).unwrap();
        m.write(start * BS, &d);
    }
    fs.sync().unwrap();
    let mut cuts: Vec<u64> = boundaries().into_iter().filter(|&b| b > 0).collect();
    cuts.reverse();
    for (k, b) in cuts.into_iter().enumerate() {
        // Cut in the middle of block b-1 (odd cut), or exactly at b (even cut).
        let size = if k % 2 == 0 {
            b * BS
        } else {
            (b - 1) * BS + 333
        };
        set_size(&fs, f, size).unwrap();
        m.truncate(size);
        m.blocks.retain(|&i, _| i * BS < size);
        assert_eq!(
            fs.getattr(f).unwrap().blocks / 8,
            m.blocks.len() as u64,
            "blocks after truncating to {size}"
        );
        check(&fs, f, &m, &format!("truncated to {size}"));
        // Extend past the old data: zeros, no blocks.
        let big = ((b + 2) * BS).min(MAX_FILE_BYTES);
        set_size(&fs, f, big).unwrap();
        m.truncate(big);
        check(&fs, f, &m, &format!("extended to {big}"));
        set_size(&fs, f, size).unwrap();
        m.truncate(size);
    }
    fs.unmount().unwrap();
    fsck_clean(&dev, "truncated through the levels");
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "after remount");
    set_size(&fs, f, 0).unwrap();
    fs.sync().unwrap();
    assert_eq!(
        fs.statfs().blocks_free,
        free0,
        "blocks or nodes left behind"
    );
    fs.unmount().unwrap();
    fsck_clean(&dev, "emptied");
}

/// KEEP_SIZE preallocation past EOF deep in the tree: counted in st_blocks, the size stays,
/// reads past EOF return nothing, an extension reads zeros over them, a write into them
/// lands, and a truncate below frees them.
#[test]
fn keep_size_preallocation_past_eof_in_deep_levels() {
    let (dev, fs) = fresh(128);
    fs.sync().unwrap();
    let free0 = fs.statfs().blocks_free;
    let f = new_file(&fs, "f");
    let mut m = Model::default();
    fs.write(f, 0, &pat(10, 1)).unwrap();
    m.write(0, &pat(10, 1));
    let deep = (I + 2 * A + 2 * N * A - 2) * BS; // straddles into the double indirect
    fs.fallocate(f, FallocMode::KeepSize, deep, 4 * BS).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 10);
    // The inline file became a block file when preallocating past the inline area.
    let blocks = fs.getattr(f).unwrap().blocks / 8;
    assert_eq!(blocks, 5, "1 data block + 4 preallocated");
    check(&fs, f, &m, "preallocated past EOF");
    set_size(&fs, f, deep + 3 * BS).unwrap();
    m.truncate(deep + 3 * BS);
    check(&fs, f, &m, "extended over the preallocation");
    let d = pat(BLOCK_SIZE + 10, 2);
    fs.write(f, deep + BS - 5, &d).unwrap();
    m.write(deep + BS - 5, &d);
    assert_eq!(fs.getattr(f).unwrap().blocks / 8, 5);
    check(&fs, f, &m, "written into the preallocation");
    fs.unmount().unwrap();
    fsck_clean(&dev, "preallocated deep");
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "remounted");
    assert_eq!(fs.getattr(f).unwrap().blocks / 8, 5);
    set_size(&fs, f, 5).unwrap();
    m.truncate(5);
    m.blocks.retain(|&i, _| i == 0);
    assert_eq!(fs.getattr(f).unwrap().blocks / 8, 1);
    check(&fs, f, &m, "cut below the preallocation");
    fs.unlink(fs.root(), b"f").unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().blocks_free, free0, "blocks left behind");
    fs.unmount().unwrap();
    fsck_clean(&dev, "removed");
}

// ---- inline data ----

/// A small file kept in the inode: holes inside the inline area, growth one byte past the
/// inline limit (by write, truncate and fallocate), shrink back, extension after a shrink,
/// punch and zero range while inline; the block count and contents through a remount.
#[test]
fn inline_data_across_the_limit_with_holes() {
    let (dev, fs) = fresh(128);
    let lim = MAX_INLINE_DATA as u64;
    let mut files: Vec<(Ino, Model)> = Vec::new();

    // 1. A hole inside the inline area, then a write that ends exactly at the limit, then
    //    one byte past it.
    let f = new_file(&fs, "a");
    let mut m = Model::default();
    for (off, len) in [(0u64, 10usize), (2000, 5), (lim - 1, 1)] {
        fs.write(f, off, &pat(len, off)).unwrap();
        m.write(off, &pat(len, off));
        check(&fs, f, &m, &format!("inline write at {off}"));
    }
    assert_eq!(fs.getattr(f).unwrap().size, lim);
    fs.write(f, lim, &[7]).unwrap();
    m.write(lim, &[7]);
    check(&fs, f, &m, "one byte past the inline limit");
    assert_eq!(fs.getattr(f).unwrap().blocks, 8);
    files.push((f, m));

    // 2. Shrink an inline file, then extend within the area: the cut bytes read zeros.
    let f = new_file(&fs, "b");
    let mut m = Model::default();
    fs.write(f, 0, &pat(3000, 9)).unwrap();
    m.write(0, &pat(3000, 9));
    set_size(&fs, f, 100).unwrap();
    m.truncate(100);
    set_size(&fs, f, 2500).unwrap();
    m.truncate(2500);
    check(&fs, f, &m, "inline shrunk then extended");
    // Beyond the area by truncate: a hole to 5000.
    set_size(&fs, f, lim + 1).unwrap();
    m.truncate(lim + 1);
    check(&fs, f, &m, "truncated one past the inline limit");
    set_size(&fs, f, 50).unwrap();
    m.truncate(50);
    set_size(&fs, f, 3 * BS).unwrap();
    m.truncate(3 * BS);
    check(&fs, f, &m, "converted, shrunk, extended");
    files.push((f, m));

    // 3. Punch and zero range inside an inline file; fallocate past the limit converts.
    let f = new_file(&fs, "c");
    let mut m = Model::default();
    fs.write(f, 0, &pat(3000, 11)).unwrap();
    m.write(0, &pat(3000, 11));
    fs.fallocate(f, FallocMode::PunchHole, 100, 200).unwrap();
    m.zero(100, 300);
    fs.fallocate(f, FallocMode::ZeroRangeKeepSize, 2900, 500)
        .unwrap();
    m.zero(2900, 3400);
    check(&fs, f, &m, "inline punch and zero range");
    assert_eq!(fs.getattr(f).unwrap().size, 3000);
    fs.fallocate(f, FallocMode::ZeroRange, 2990, lim - 2990)
        .unwrap();
    m.zero(2990, lim);
    m.truncate(lim);
    check(&fs, f, &m, "inline zero range to the limit");
    fs.fallocate(f, FallocMode::Allocate, lim - 1, 2).unwrap();
    m.truncate(lim + 1);
    check(&fs, f, &m, "allocate across the inline limit");
    files.push((f, m));

    // 4. A write far past the area into an inline file: data moves to block 0, hole after.
    let f = new_file(&fs, "d");
    let mut m = Model::default();
    fs.write(f, 0, &pat(700, 13)).unwrap();
    m.write(0, &pat(700, 13));
    let far = (I + 2 * A + 2 * N * A) * BS + 5;
    fs.write(f, far, &pat(20, 14)).unwrap();
    m.write(far, &pat(20, 14));
    check(&fs, f, &m, "inline then far write");
    assert_eq!(fs.getattr(f).unwrap().blocks, 16);
    files.push((f, m));

    fs.unmount().unwrap();
    fsck_clean(&dev, "inline files");
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    for (k, (f, m)) in files.iter().enumerate() {
        check(&fs, *f, m, &format!("inline file {k} after remount"));
    }
    fs.unmount().unwrap();
}

/// A file whose data lives in the inode reports its bytes in st_blocks, as ext4 and F2FS
/// do (`f2fs_getattr`: "we need to show initial sectors used for inline_data";
/// `ext4_file_getattr`: "so tools like tar, rsync, others don't incorrectly think the
/// file is completely sparse"). With 0 blocks for a non-empty file, GNU tar --sparse
/// (`sparse_scan_file_wholesparse`) archives it as one hole: its contents are lost.
#[test]
fn inline_file_reports_its_bytes_in_st_blocks() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "small");
    fs.write(f, 0, &pat(950, 1)).unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!(a.size, 950);
    assert!(
        a.blocks * 512 >= a.size,
        "inline file of {} bytes reports {} 512-byte blocks: tar --sparse stores it as a hole",
        a.size,
        a.blocks
    );
    fs.unmount().unwrap();
    fsck_clean(&dev, "inline file");
}

/// fsync'd blocks at every node boundary, a power cut before any checkpoint (the nodes
/// reach the volume only through roll-forward), then a truncate through the levels, fsync
/// and another cut: recovery rebuilds the tree at every depth.
#[test]
fn roll_forward_restores_fsynced_blocks_at_every_level() {
    let (dev, fs) = fresh(128);
    let f = new_file(&fs, "f");
    fs.sync().unwrap(); // the file's creation is checkpointed; its data is not
    let mut m = Model::default();
    for (k, b) in boundaries().into_iter().enumerate() {
        let off = b * BS + 500 + k as u64;
        let d = pat(300, b + 3);
        fs.write(f, off, &d).unwrap();
        m.write(off, &d);
    }
    fs.fsync(f, false).unwrap();
    fs.abandon();
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "rolled forward");
    assert_eq!(fs.getattr(f).unwrap().blocks / 8, m.blocks.len() as u64);
    // Cut to just inside the first indirect node's range, fsync, cut the power.
    let size = (I + 2 * A + 1) * BS + 10;
    set_size(&fs, f, size).unwrap();
    m.truncate(size);
    m.blocks.retain(|&i, _| i * BS < size);
    fs.fsync(f, false).unwrap();
    fs.abandon();
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    check(&fs, f, &m, "truncate rolled forward");
    assert_eq!(fs.getattr(f).unwrap().blocks / 8, m.blocks.len() as u64);
    fs.unmount().unwrap();
    fsck_clean(&dev, "after roll-forward");
}

/// One fallocate that makes thousands of direct nodes (6 GiB preallocated: 3,100 of them,
/// past the 4,096-block cap on what `Fs::fallocate` reserves for its checkpoint debt):
/// the budget must not be overcommitted, and the volume must check clean.
#[test]
fn a_huge_preallocation_stays_within_the_space_budget() {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((8u64 << 30) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts(GcPolicy::F2fs)).unwrap();
    let f = new_file(&fs, "f");
    let len = 6u64 << 30;
    fs.fallocate(f, FallocMode::KeepSize, 0, len).unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, len / 512);
    let over = fs
        .inner()
        .seg
        .space
        .overcommit_blocks
        .load(std::sync::atomic::Ordering::Relaxed);
    fs.sync().unwrap();
    assert_eq!(over, 0, "space budget overcommitted by {over} blocks");
    fs.unmount().unwrap();
    fsck_clean(&dev, "after a huge preallocation");
}
