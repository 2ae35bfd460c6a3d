//! File contents at block edges, through the write paths that skip zero-fill (issue 13):
//! a whole-block write builds its page from the caller's bytes, and the log buffer grows by
//! one copy of a block. Every case compares the whole file, byte for byte, with a model
//! (`Vec<u8>`), before and after write-back, after a remount, and ends with fsck.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;

fn opts() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..Default::default()
    }
}

fn fresh() -> (Arc<dyn BlockDevice>, Fs) {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new((128 << 20) / BS));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    (dev, fs)
}

fn new_file(fs: &Fs, name: &str) -> Ino {
    fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .unwrap()
        .ino
}

/// The whole file, read back in one request and again in odd-sized pieces.
fn check(fs: &Fs, ino: Ino, model: &[u8], what: &str) {
    assert_eq!(
        fs.getattr(ino).unwrap().size,
        model.len() as u64,
        "{what}: size"
    );
    let mut all = vec![0xEEu8; model.len() + 100];
    let n = fs.read(ino, 0, &mut all).unwrap();
    assert_eq!(n, model.len(), "{what}: read length");
    if all[..n] != *model {
        let at = (0..n).find(|&i| all[i] != model[i]).unwrap();
        panic!(
            "{what}: byte {at} (block {}, offset {}) is {:#x}, expected {:#x}",
            at as u64 / BS,
            at as u64 % BS,
            all[at],
            model[at]
        );
    }
    let mut off = 0u64;
    while off < model.len() as u64 {
        let mut piece = vec![0xEEu8; 3001];
        let n = fs.read(ino, off, &mut piece).unwrap();
        assert!(n > 0, "{what}: short read at {off}");
        assert_eq!(
            piece[..n],
            model[off as usize..off as usize + n],
            "{what}: at {off}"
        );
        off += n as u64;
    }
}

fn write(fs: &Fs, ino: Ino, model: &mut Vec<u8>, off: u64, data: &[u8]) {
    assert_eq!(fs.write(ino, off, data).unwrap(), data.len());
    let end = off as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(data);
}

fn truncate(fs: &Fs, ino: Ino, model: &mut Vec<u8>, size: u64) {
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(size),
            ..Default::default()
        },
    )
    .unwrap();
    model.resize(size as usize, 0);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn finish(dev: Arc<dyn BlockDevice>, fs: Fs, files: &[(Ino, Vec<u8>)]) {
    fs.unmount().unwrap();
    let fs = Fs::mount(dev.clone(), opts()).unwrap();
    for (i, (ino, m)) in files.iter().enumerate() {
        check(&fs, *ino, m, &format!("file {i} after remount"));
    }
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// Partial writes that start or end one byte either side of a block edge, over holes, over
/// cached pages and over written-back blocks, mixed with whole-block writes of the same pages.
#[test]
fn partial_and_whole_block_writes_at_edges_are_exact() {
    let (dev, fs) = fresh();
    let ino = new_file(&fs, "edges");
    let mut m = Vec::new();
    // A sparse start: block 3 written whole, blocks 0-2 a hole.
    write(&fs, ino, &mut m, 3 * BS, &pattern(BLOCK_SIZE, 1));
    check(&fs, ino, &m, "whole block after a hole");
    // One byte either side of the edge between blocks 3 and 4 (past EOF: page 4 is new).
    write(&fs, ino, &mut m, 4 * BS - 1, &[0xA1, 0xA2]);
    check(&fs, ino, &m, "straddling write past EOF");
    // A write ending one byte before an edge, and one starting one byte after it.
    write(&fs, ino, &mut m, BS + 7, &pattern(BLOCK_SIZE - 8, 2));
    write(&fs, ino, &mut m, 2 * BS + 1, &pattern(10, 3));
    check(&fs, ino, &m, "writes at a hole's edges");
    fs.sync().unwrap(); // every page written back, file data leaves the cache
    check(&fs, ino, &m, "after write-back");
    // Whole-block writes over written blocks (no read), and a partial one over a written
    // block (read, then merge).
    write(&fs, ino, &mut m, BS, &pattern(2 * BLOCK_SIZE, 4));
    write(&fs, ino, &mut m, 3 * BS + 100, &pattern(50, 5));
    check(&fs, ino, &m, "overwrites of written blocks");
    // A partial write then a whole-block write of the same cached page: the whole one wins.
    write(&fs, ino, &mut m, 5 * BS + 9, &pattern(20, 6));
    write(&fs, ino, &mut m, 5 * BS, &pattern(BLOCK_SIZE, 7));
    // And the other way: whole, then partial on top.
    write(&fs, ino, &mut m, 6 * BS, &pattern(BLOCK_SIZE, 8));
    write(&fs, ino, &mut m, 6 * BS + BS - 3, &[1, 2, 3]);
    check(&fs, ino, &m, "whole and partial on one cached page");
    // A large unaligned write: partial head page, whole middle pages, partial tail page.
    write(
        &fs,
        ino,
        &mut m,
        7 * BS + 4095,
        &pattern(5 * BLOCK_SIZE + 2, 9),
    );
    check(&fs, ino, &m, "unaligned multi-block write");
    fs.fsync(ino, false).unwrap();
    check(&fs, ino, &m, "after fsync");
    finish(dev, fs, &[(ino, m)]);
}

/// Truncate down into the middle of a block and extend again: the bytes past the cut read
/// as zeros, whether the tail page was cached, written back, or then overwritten whole.
#[test]
fn truncate_then_extend_reads_zeros_past_the_cut() {
    let (dev, fs) = fresh();
    let a = new_file(&fs, "a");
    let b = new_file(&fs, "b");
    let mut ma = Vec::new();
    let mut mb = Vec::new();
    write(&fs, a, &mut ma, 0, &pattern(8 * BLOCK_SIZE, 11));
    write(&fs, b, &mut mb, 0, &pattern(8 * BLOCK_SIZE, 12));
    fs.sync().unwrap(); // b's blocks on the device, a's too
    write(&fs, a, &mut ma, 0, &pattern(8 * BLOCK_SIZE, 13)); // a's pages cached and dirty
    for (ino, m) in [(a, &mut ma), (b, &mut mb)] {
        truncate(&fs, ino, m, 3 * BS + 17);
        check(&fs, ino, m, "cut inside block 3");
        truncate(&fs, ino, m, 10 * BS + 5);
        check(&fs, ino, m, "extended past the cut");
        // Extend by writing past EOF with a hole between.
        write(&fs, ino, m, 12 * BS, &pattern(BLOCK_SIZE, 14));
        check(&fs, ino, m, "written past a hole after the cut");
        // A whole-block write of the block the cut went through, then cut at an edge.
        write(&fs, ino, m, 3 * BS, &pattern(BLOCK_SIZE, 15));
        truncate(&fs, ino, m, 4 * BS);
        truncate(&fs, ino, m, 4 * BS + 1);
        check(&fs, ino, m, "cut at an edge, extended by one byte");
    }
    fs.sync().unwrap();
    check(&fs, a, &ma, "a after write-back");
    check(&fs, b, &mb, "b after write-back");
    finish(dev, fs, &[(a, ma), (b, mb)]);
}

/// Whole-block writes into fallocated blocks (reserved, never written) and into punched
/// holes; partial writes there leave the rest of the block zero.
#[test]
fn writes_into_fallocated_and_punched_blocks() {
    let (dev, fs) = fresh();
    let ino = new_file(&fs, "f");
    let mut m = Vec::new();
    fs.fallocate(ino, FallocMode::Allocate, 0, 16 * BS).unwrap();
    m.resize(16 * BLOCK_SIZE, 0);
    check(&fs, ino, &m, "fallocated");
    write(&fs, ino, &mut m, 2 * BS, &pattern(BLOCK_SIZE, 21));
    write(&fs, ino, &mut m, 4 * BS + 2000, &pattern(100, 22));
    check(&fs, ino, &m, "writes into reserved blocks");
    write(&fs, ino, &mut m, 0, &pattern(16 * BLOCK_SIZE, 23));
    fs.sync().unwrap();
    fs.fallocate(ino, FallocMode::PunchHole, 5 * BS + 10, 3 * BS)
        .unwrap();
    m[5 * BLOCK_SIZE + 10..8 * BLOCK_SIZE + 10].fill(0);
    check(&fs, ino, &m, "punched");
    write(&fs, ino, &mut m, 6 * BS, &pattern(BLOCK_SIZE, 24));
    write(&fs, ino, &mut m, 7 * BS + 1, &pattern(5, 25));
    check(&fs, ino, &m, "writes into the punched hole");
    finish(dev, fs, &[(ino, m)]);
}

/// st_blocks in 4 KiB blocks.
fn blocks(fs: &Fs, ino: Ino) -> u64 {
    fs.getattr(ino).unwrap().blocks / 8
}

/// `FALLOC_FL_ZERO_RANGE` with and without `KEEP_SIZE`: the range reads as zeros, its
/// blocks stay allocated (st_blocks counts them), partial blocks at its edges keep their
/// other bytes, the size grows to its end only without `KEEP_SIZE`, writes into it land;
/// on written-back blocks, cached pages, holes, past the end and in an inline file.
#[test]
fn zero_range_reads_zeros_and_keeps_the_blocks_allocated() {
    let (dev, fs) = fresh();
    let ino = new_file(&fs, "z");
    let mut m = Vec::new();
    write(&fs, ino, &mut m, 0, &pattern(20 * BLOCK_SIZE, 31));
    fs.sync().unwrap();
    // Blocks 12-15 cached and dirty over their written-back copies.
    write(&fs, ino, &mut m, 12 * BS + 5, &pattern(3 * BLOCK_SIZE, 32));
    assert_eq!(blocks(&fs, ino), 20);
    // Across written-back and cached blocks, both edges inside blocks.
    fs.fallocate(ino, FallocMode::ZeroRange, 3 * BS + 100, 11 * BS)
        .unwrap();
    m[3 * BLOCK_SIZE + 100..14 * BLOCK_SIZE + 100].fill(0);
    check(&fs, ino, &m, "zeroed across written and cached blocks");
    assert_eq!(blocks(&fs, ino), 20, "the zeroed blocks stay allocated");
    // Inside one block.
    fs.fallocate(ino, FallocMode::ZeroRangeKeepSize, 17 * BS + 1, 10)
        .unwrap();
    m[17 * BLOCK_SIZE + 1..17 * BLOCK_SIZE + 11].fill(0);
    check(&fs, ino, &m, "zeroed inside a block");
    // Past the end with KEEP_SIZE: the size stays, the blocks are preallocated.
    fs.fallocate(ino, FallocMode::ZeroRangeKeepSize, 19 * BS, 5 * BS)
        .unwrap();
    m[19 * BLOCK_SIZE..].fill(0);
    check(&fs, ino, &m, "zeroed past the end, size kept");
    assert_eq!(blocks(&fs, ino), 24, "blocks preallocated past the end");
    // Past the end without it: the size grows to the range's end (over a hole too).
    fs.fallocate(ino, FallocMode::ZeroRange, 30 * BS, 2 * BS + 7)
        .unwrap();
    m.resize(32 * BLOCK_SIZE + 7, 0);
    check(&fs, ino, &m, "zeroed past the end, size grown");
    assert_eq!(blocks(&fs, ino), 27);
    fs.sync().unwrap();
    check(&fs, ino, &m, "after write-back");
    // Writes into the zeroed, preallocated blocks.
    write(&fs, ino, &mut m, 5 * BS, &pattern(BLOCK_SIZE, 33));
    write(&fs, ino, &mut m, 31 * BS + 9, &pattern(77, 34));
    check(&fs, ino, &m, "writes into zeroed blocks");
    assert_eq!(
        blocks(&fs, ino),
        27,
        "writes into preallocated blocks take none"
    );
    // An inline file: zeroed in place; past the inline area it becomes a regular one.
    let small = new_file(&fs, "small");
    let mut ms = Vec::new();
    write(&fs, small, &mut ms, 0, &pattern(1000, 35));
    fs.fallocate(small, FallocMode::ZeroRange, 100, 200)
        .unwrap();
    ms[100..300].fill(0);
    check(&fs, small, &ms, "inline, zeroed inside");
    fs.fallocate(small, FallocMode::ZeroRange, 900, 300)
        .unwrap();
    ms.resize(1200, 0);
    ms[900..].fill(0);
    check(&fs, small, &ms, "inline, zeroed past its end");
    fs.fallocate(small, FallocMode::ZeroRange, 500, 3 * BS)
        .unwrap();
    ms.resize(500 + 3 * BLOCK_SIZE, 0);
    ms[500..].fill(0);
    check(&fs, small, &ms, "zeroed past the inline area");
    assert!(blocks(&fs, small) >= 4, "converted and preallocated");
    finish(dev, fs, &[(ino, m), (small, ms)]);
}

/// On a volume whose user space is full, zeroing blocks a file already has needs no new
/// space: it succeeds, leaves the volume full and consistent, and ENOSPC still comes for
/// a range that would need more.
#[test]
fn zero_range_on_a_full_volume_reuses_the_files_blocks() {
    let (dev, fs) = fresh();
    let ino = new_file(&fs, "full");
    let mut m = Vec::new();
    let chunk = pattern(64 * BLOCK_SIZE, 41);
    loop {
        match fs.write(ino, m.len() as u64, &chunk) {
            Ok(0) => break,
            Ok(n) => m.extend_from_slice(&chunk[..n]), // short near the end
            Err(Error::NoSpace) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    fs.sync().unwrap();
    let before = blocks(&fs, ino);
    fs.fallocate(ino, FallocMode::ZeroRangeKeepSize, 10 * BS, 200 * BS)
        .unwrap();
    m[10 * BLOCK_SIZE..210 * BLOCK_SIZE].fill(0);
    assert_eq!(blocks(&fs, ino), before);
    let size = m.len() as u64;
    let r = fs.fallocate(ino, FallocMode::ZeroRange, size, 4096 * BS);
    assert!(matches!(r, Err(Error::NoSpace)), "{r:?}");
    // The failed range left the size alone (its blocks may be partly preallocated).
    check(&fs, ino, &m, "after zeroing on a full volume");
    fs.sync().unwrap();
    finish(dev, fs, &[(ino, m)]);
}

/// Random writes (half of them whole aligned blocks), truncates, punches and syncs on a few
/// files against the model, with a full comparison after every step.
#[test]
fn random_edge_writes_match_the_model() {
    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (dev, fs) = fresh();
        let mut files: Vec<(Ino, Vec<u8>)> = (0..3)
            .map(|i| (new_file(&fs, &format!("r{i}")), Vec::new()))
            .collect();
        for step in 0..300 {
            let k = rng.random_range(0..files.len());
            let (ino, m) = &mut files[k];
            let ino = *ino;
            let max = 40 * BS;
            match rng.random_range(0..10) {
                0..=3 => {
                    let blk = rng.random_range(0..40u64);
                    let n = rng.random_range(1..6usize);
                    let d = pattern(n * BLOCK_SIZE, rng.random());
                    write(&fs, ino, m, blk * BS, &d);
                }
                4..=6 => {
                    let edge = rng.random_range(0..40u64) * BS;
                    let off = (edge + rng.random_range(0..3)).saturating_sub(1);
                    let len = match rng.random_range(0..3) {
                        0 => rng.random_range(1..4),
                        1 => BLOCK_SIZE - 1 + rng.random_range(0..3),
                        _ => rng.random_range(1..3 * BLOCK_SIZE),
                    };
                    let d = pattern(len, rng.random());
                    write(&fs, ino, m, off.min(max), &d);
                }
                7 => {
                    let size = rng.random_range(0..max);
                    truncate(&fs, ino, m, size);
                }
                8 => {
                    let off = rng.random_range(0..max);
                    let len = rng.random_range(1..4 * BS);
                    let mode = [
                        FallocMode::PunchHole,
                        FallocMode::ZeroRange,
                        FallocMode::ZeroRangeKeepSize,
                    ][rng.random_range(0..3)];
                    fs.fallocate(ino, mode, off, len).unwrap();
                    let end = (off + len) as usize;
                    if mode == FallocMode::ZeroRange && end > m.len() {
                        m.resize(end, 0);
                    }
                    let (s, e) = (off as usize, end.min(m.len()));
                    if s < e {
                        m[s..e].fill(0);
                    }
                }
                _ => {
                    if rng.random_bool(0.5) {
                        fs.sync().unwrap();
                    } else {
                        fs.fsync(ino, false).unwrap();
                    }
                }
            }
            let (ino, m) = &files[k];
            check(&fs, *ino, m, &format!("seed {seed} step {step}"));
        }
        finish(dev, fs, &files);
    }
}
