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
                    fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
                    let (s, e) = (off as usize, ((off + len) as usize).min(m.len()));
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
