//! Tests from mutation testing of the cleaners and the space budget (review, 2026-11-28).
//! 22 mutants were planted one at a time in gc.rs, seg.rs, scale.rs, space.rs,
//! gc_device.rs and checkpoint.rs; `space`, `long_life`, `scale_victims`, `powercut`,
//! `gc_races`, `gc` and the core's unit tests were run against each (`device_gc` for the
//! `gc=device` ones, `full_volume` for some survivors). Those that survived them and would
//! reach users are killed here:
//!
//! - `greedy_cleaning_takes_the_section_with_fewest_valid_blocks`: foreground (greedy)
//!   victim selection taking the fullest cleanable section instead of the emptiest (every
//!   test checks that cleaning keeps data correct, none which victim it takes);
//! - `cost_benefit_cleaning_prefers_the_older_of_equally_used_sections`: background
//!   (cost-benefit) selection with the age term inverted (youngest preferred);
//! - `scale_workers_keep_the_cheapest_victims`: `gc=scale`'s concurrent victim selection
//!   (`cvs_next`) keeping the most valid of the sections it scans instead of the least
//!   (`scale_victims` failed with it, but only because its forced schedule never arose);
//! - `threaded_logging_fills_the_emptiest_segment`: SSR (`pick_ssr_segment`) choosing the
//!   fullest data segment instead of the emptiest;
//! - `a_cut_while_the_cleaning_checkpoint_writes_loses_nothing`: the checkpoint releasing
//!   (and discarding) the sections the cleaner emptied at its snapshot, before its pack is
//!   durable (only `full_volume`'s `gc=device` runs caught it; for `f2fs` and `scale`
//!   nothing did, `powercut` and the 97 % power cuts included).
//!
//! Two more pin mutants that only a side condition caught: SSR writing into a block
//! invalidated since the last checkpoint (the `ckpt_valid` check in `append_copy`; caught
//! only by `gc_races`' random power cuts during cleaning):
//! `threaded_logging_leaves_blocks_the_checkpoint_still_needs`; and lazy migration
//! counting a page that was already dirty as newly dirty (caught only as an ENOSPC in
//! `gc`'s `scale` ablation run; no test runs `gc=f2fs`'s background cleaner, they mount
//! with `gc_interval: None`): `a_lazy_move_of_a_dirty_page_counts_it_once`.
//!
//! The greedy test also kills a foreground loop that cleans one section past its target
//! (`<=` for `<` in `F2fsCollector::foreground`). Each test drives the public `Fs` on a
//! RAM or simulated device and looks at victims through `Fs::inner()` (`gc::select_victim`,
//! the SIT's per-section valid counts and ages).

use flashlog_core::gc::{clean_section, select_victim, Cost, Migration, BG_VICTIM_SEARCH};
use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const VOLUME: u64 = 64 << 20;
/// Blocks per file: two sections' worth, so each file owns at least one section alone.
const PER_FILE: u64 = 2 * BLOCKS_PER_SEG;

fn block(f: u64, b: u64, v: u32) -> Vec<u8> {
    let mut d = vec![(f as u8) ^ (b as u8) ^ (v as u8); 4096];
    d[..8].copy_from_slice(&f.to_le_bytes());
    d[8..16].copy_from_slice(&b.to_le_bytes());
    d[16..20].copy_from_slice(&v.to_le_bytes());
    d
}

fn mount() -> Fs {
    mount_with(MountOptions {
        gc: GcPolicy::F2fs,
        alloc_mode: AllocMode::Lfs,
        ..Default::default()
    })
}

fn mount_with(o: MountOptions) -> Fs {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(VOLUME / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        ..o
    };
    Fs::mount(dev, o).unwrap()
}

/// File 0 keeps one block in 8, file 1 seven in 8: two kinds of cleanable sections, 64
/// and 448 blocks valid.
fn sparse_and_dense(f: u64, b: u64) -> bool {
    if f == 0 {
        b % 8 == 0
    } else {
        b % 8 != 0
    }
}

/// The cleanable sections with more than half their blocks valid (the bad victims).
fn dense_sections(fs: &Fs) -> Vec<(u64, u64)> {
    let seg = &fs.inner().seg;
    let dense: Vec<(u64, u64)> = seg
        .dirty_sections()
        .filter(|&(_, v)| v > BLOCKS_PER_SEG / 2 && v < BLOCKS_PER_SEG)
        .collect();
    assert!(!dense.is_empty(), "layout: no dense section");
    dense
}

/// Two files of `PER_FILE` blocks, the first written at volume age `ages[0]` seconds, the
/// second at `ages[1]`; then in file `f` every block `b` with `keep(f, b)` false is
/// overwritten (its first copy dies), and everything is written back. Each file is
/// written back by `fsync` before the clock moves (a checkpoint would reset the clock).
fn layout(fs: &Fs, ages: [u64; 2], keep: impl Fn(u64, u64) -> bool) -> Vec<Ino> {
    let seg = &fs.inner().seg;
    let mut inos = Vec::new();
    for f in 0..2u64 {
        seg.clock_secs.store(ages[f as usize], Ordering::Relaxed);
        let ino = fs
            .create(ROOT_INO, format!("f{f}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        for b in 0..PER_FILE {
            fs.write(ino, b * 4096, &block(f, b, 0)).unwrap();
        }
        // Written back now, at this age (a checkpoint would reset the clock first).
        fs.fsync(ino, false).unwrap();
        inos.push(ino);
    }
    seg.clock_secs.store(ages[1] + 1000, Ordering::Relaxed);
    for f in 0..2u64 {
        for b in 0..PER_FILE {
            if !keep(f, b) {
                fs.write(inos[f as usize], b * 4096, &block(f, b, 1))
                    .unwrap();
            }
        }
    }
    fs.sync().unwrap();
    inos
}

fn verify(fs: &Fs, inos: &[Ino], keep: impl Fn(u64, u64) -> bool) {
    let mut buf = vec![0u8; 4096];
    for (f, &ino) in inos.iter().enumerate() {
        let f = f as u64;
        for b in 0..PER_FILE {
            let v = if keep(f, b) { 0 } else { 1 };
            let n = fs.read(ino, b * 4096, &mut buf).unwrap();
            assert_eq!(n, 4096);
            assert!(buf == block(f, b, v), "file {f} block {b} lost its data");
        }
    }
}

/// Kills: `Cost::Greedy => v` turned into "most valid first" (gc.rs `select_victim`), or
/// any slip in the greedy cost that does not take the emptiest section. A user would
/// notice: foreground cleaning (every write on a full volume waits for it) copies a
/// nearly full section to free a few blocks, then cleans again and again: write
/// amplification and stalls many times what F2FS's greedy policy (docs/DESIGN.md) gives,
/// with the data still correct, so no other test sees it.
#[test]
fn greedy_cleaning_takes_the_section_with_fewest_valid_blocks() {
    let fs = mount();
    let keep = sparse_and_dense;
    let inos = layout(&fs, [0, 0], keep);
    let seg = &fs.inner().seg;
    let cands: Vec<(u64, u64)> = seg
        .dirty_sections()
        .filter(|&(_, v)| v < BLOCKS_PER_SEG)
        .collect();
    let min = cands.iter().map(|c| c.1).min().expect("cleanable sections");
    let max = cands.iter().map(|c| c.1).max().unwrap();
    assert!(min * 4 < max, "layout: candidates {cands:?}");

    let v = select_victim(fs.inner(), Cost::Greedy, u64::MAX).expect("a victim");
    seg.victims.clear(v);
    assert_eq!(
        seg.section_valid(v),
        min,
        "greedy took section {v} with {} valid blocks; candidates {cands:?}",
        seg.section_valid(v)
    );

    // And what a user sees: one section freed by `gc` costs the fewest copies.
    let before = fs.stats().gc_moved_blocks;
    assert_eq!(fs.gc(1).unwrap(), 1);
    let moved = fs.stats().gc_moved_blocks - before;
    assert_eq!(
        moved, min,
        "freeing one section moved {moved} blocks, the best victim {min}"
    );
    verify(&fs, &inos, keep);
    fs.unmount().unwrap();
}

/// Kills: the age term of the cost-benefit cost inverted (`100 * (m - min) / (max - min)`
/// instead of `100 - ...` in gc.rs `select_victim`), or ages that do not reach it. Two
/// groups of sections equally used (half their blocks valid), one written long before the
/// other: cost-benefit (F2FS `get_cb_cost`, the background cleaner's policy) must take an
/// old one: cold data that stayed put is worth compacting, young data is still dying on
/// its own. A user would notice: the background cleaner copies blocks that the workload
/// is about to overwrite (more write amplification, less flash life), which no test
/// measured.
#[test]
fn cost_benefit_cleaning_prefers_the_older_of_equally_used_sections() {
    let fs = mount();
    const OLD: u64 = 10;
    const YOUNG: u64 = 1_000_000;
    let keep = |_f: u64, b: u64| b % 2 == 0;
    let inos = layout(&fs, [OLD, YOUNG], keep);
    let seg = &fs.inner().seg;
    let cands: Vec<(u64, u64, u64)> = seg
        .dirty_sections()
        .filter(|&(_, v)| v < BLOCKS_PER_SEG)
        .map(|(s, v)| (s, v, seg.section_mtime(s)))
        .collect();
    let half = BLOCKS_PER_SEG / 2;
    assert!(
        cands.iter().any(|c| c.1 == half && c.2 <= OLD)
            && cands.iter().any(|c| c.1 == half && c.2 >= YOUNG),
        "layout: candidates (sec, valid, mtime) {cands:?}"
    );
    let v = select_victim(fs.inner(), Cost::CostBenefit, BG_VICTIM_SEARCH).expect("a victim");
    seg.victims.clear(v);
    let (valid, age) = (seg.section_valid(v), seg.section_mtime(v));
    assert!(
        age <= OLD && valid <= half,
        "cost-benefit took section {v} ({valid} valid, written at {age} s) over an old \
         half-valid one; candidates (sec, valid, mtime) {cands:?}"
    );
    verify(&fs, &inos, keep);
    fs.unmount().unwrap();
}

/// Kills: `gc=scale`'s concurrent victim selection (scale.rs `cvs_next`) keeping the
/// sections with the most valid blocks (`v > wv` for `v < wv` when its held list is full).
/// With one worker holding one victim, the first cleanable section it scans is replaced
/// by each cheaper one. A user would notice what the greedy mutant shows, with `gc=scale`:
/// foreground cleaning that copies nearly full sections (the ScaleLFS paper's selection is
/// greedy), several times the write amplification.
#[test]
fn scale_workers_keep_the_cheapest_victims() {
    let fs = mount_with(MountOptions {
        gc: GcPolicy::Scale,
        gc_workers: 1,
        gc_victims_per_worker: Some(1),
        alloc_mode: AllocMode::Lfs,
        ..Default::default()
    });
    let keep = sparse_and_dense;
    let inos = layout(&fs, [0, 0], keep);
    let dense = dense_sections(&fs);
    let before = fs.stats().gc_moved_blocks;
    assert!(fs.gc(1).unwrap() >= 1);
    let moved = fs.stats().gc_moved_blocks - before;
    let seg = &fs.inner().seg;
    for &(sec, v) in &dense {
        assert_eq!(
            seg.section_valid(sec),
            v,
            "gc=scale cleaned section {sec} ({v} of {BLOCKS_PER_SEG} blocks valid) while \
             sections with {} valid were there; {moved} blocks moved",
            BLOCKS_PER_SEG / 8
        );
    }
    verify(&fs, &inos, keep);
    fs.unmount().unwrap();
}

/// Kills: threaded logging (seg.rs `pick_ssr_segment`) taking the data segment with the
/// most blocks in use (`ckpt > bv` for `ckpt < bv`). Once free sections run short
/// (`ssr_below_secs`, forced here), an adaptive-mode data head writes into the holes of
/// dirty segments; F2FS takes the one with the most holes. A user would notice: each
/// SSR segment gives a few blocks before the head moves again (a segment summary read and
/// a write-stream break per few blocks), and the nearly empty segments that would have
/// given hundreds stay for the cleaner to copy.
#[test]
fn threaded_logging_fills_the_emptiest_segment() {
    let fs = mount_with(MountOptions {
        gc: GcPolicy::F2fs,
        alloc_mode: AllocMode::Adaptive,
        ..Default::default()
    });
    let keep = sparse_and_dense;
    let inos = layout(&fs, [0, 0], keep);
    let dense = dense_sections(&fs);
    let seg = &fs.inner().seg;
    let ssr_before = fs.stats().ssr_blocks;
    // Threaded logging from now on, whatever the free sections.
    seg.ssr_below_secs.store(u64::MAX, Ordering::Relaxed);
    let ino = fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap().ino;
    // Enough to leave the data head's section, less than the sparse segments' holes
    // (2 x 448): none of the new blocks needs a dense segment.
    let n = BLOCKS_PER_SEG + BLOCKS_PER_SEG / 4;
    for b in 0..n {
        fs.write(ino, b * 4096, &block(7, b, 0)).unwrap();
    }
    fs.fsync(ino, false).unwrap();
    let ssr = fs.stats().ssr_blocks - ssr_before;
    assert!(ssr > 0, "no block was written by threaded logging");
    for &(sec, v) in &dense {
        assert_eq!(
            seg.section_valid(sec),
            v,
            "threaded logging wrote into section {sec} ({v} of {BLOCKS_PER_SEG} blocks \
             valid) while segments with {} valid were there ({ssr} SSR blocks)",
            BLOCKS_PER_SEG / 8
        );
    }
    verify(&fs, &inos, keep);
    let mut buf = vec![0u8; 4096];
    for b in 0..n {
        fs.read(ino, b * 4096, &mut buf).unwrap();
        assert!(buf == block(7, b, 0), "new block {b} lost");
    }
    fs.unmount().unwrap();
}

/// Kills: a checkpoint that frees the sections emptied since the last one (prefree) when
/// it takes them, in its snapshot, instead of once its pack is durable (checkpoint.rs
/// `snapshot_inner` / `tail_inner`; the mutant called `release_sections` at the
/// snapshot). Freeing discards them: the discard reaches the device before the new pack,
/// so a power cut in between leaves the old checkpoint pointing into zeroed blocks. Here:
/// `gc` moves a sparse section's 64 live blocks of a checkpointed file and checkpoints;
/// the power is cut at every request of that call in turn. A user would lose those
/// blocks (read back as zeros) after a crash during any checkpoint that follows
/// cleaning: the durable checkpoint still maps them to their old place.
#[test]
fn a_cut_while_the_cleaning_checkpoint_writes_loses_nothing() {
    let keep = sparse_and_dense;
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        gc: GcPolicy::F2fs,
        alloc_mode: AllocMode::Lfs,
        ..Default::default()
    };
    // The same volume each time (mkfs with a fixed seed, one thread): the same requests.
    let setup = || {
        let sim = Arc::new(SimDevice::new(VOLUME / 4096));
        let dev: Arc<dyn BlockDevice> = sim.clone();
        Fs::mkfs(
            dev.clone(),
            &MkfsOptions {
                seed: Some(7),
                ..Default::default()
            },
        )
        .unwrap();
        let fs = Fs::mount(dev, o.clone()).unwrap();
        let inos = layout(&fs, [0, 0], keep);
        (sim, fs, inos)
    };
    let (sim, fs, _) = setup();
    let first = sim.ops();
    assert_eq!(fs.gc(1).unwrap(), 1);
    let n = sim.ops() - first;
    fs.unmount().unwrap();
    assert!(n > 2, "gc made {n} requests");
    for k in 0..n {
        let (sim, fs, inos) = setup();
        assert_eq!(sim.ops(), first, "the setup is not deterministic");
        sim.cut_at(first + k, 0);
        let _ = fs.gc(1);
        fs.abandon();
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(CrashMode::DropUnflushed, 0));
        let fs = Fs::mount(img, o.clone()).unwrap();
        let mut buf = vec![0u8; 4096];
        for (f, &ino) in inos.iter().enumerate() {
            let f = f as u64;
            for b in 0..PER_FILE {
                let v = if keep(f, b) { 0 } else { 1 };
                fs.read(ino, b * 4096, &mut buf).unwrap();
                assert!(
                    buf == block(f, b, v),
                    "cut at request {k} of {n} of the cleaning call: file {f} block {b} \
                     lost (first bytes {:?})",
                    &buf[..8]
                );
            }
        }
        fs.unmount().unwrap();
    }
}

/// Kills: threaded logging writing into a block that died after the last checkpoint (seg.rs
/// `append_copy` without its `ckpt_valid` check; F2FS keeps `ckpt_valid_map` for this).
/// The durable checkpoint still maps such a block: file 0's blocks are rewritten and
/// written back (a small dirty cap, no fsync, no checkpoint), which kills their old
/// copies in the sparse segments, then new data is written with SSR forced. A cut then
/// (every write landed) remounts from that checkpoint. A user would find, after a crash,
/// a file's checkpointed contents replaced by another file's bytes, on any adaptive-mode
/// volume low on free sections.
#[test]
fn threaded_logging_leaves_blocks_the_checkpoint_still_needs() {
    let keep = sparse_and_dense;
    let o = MountOptions {
        cp_interval: None,
        gc_interval: None,
        io_threads: 0,
        dirty_cap_bytes: 64 * 4096,
        gc: GcPolicy::F2fs,
        alloc_mode: AllocMode::Adaptive,
        ..Default::default()
    };
    let sim = Arc::new(SimDevice::new(VOLUME / 4096));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev, o.clone()).unwrap();
    let inos = layout(&fs, [0, 0], keep); // ends with a checkpoint
    let seg = &fs.inner().seg;
    seg.ssr_below_secs.store(u64::MAX, Ordering::Relaxed);
    let ssr_before = fs.stats().ssr_blocks;
    // File 0's surviving blocks rewritten: their checkpointed copies die.
    for b in (0..PER_FILE).filter(|&b| keep(0, b)) {
        fs.write(inos[0], b * 4096, &block(0, b, 2)).unwrap();
    }
    let ino = fs.create(ROOT_INO, b"new", 0o644, 0, 0).unwrap().ino;
    for b in 0..BLOCKS_PER_SEG + BLOCKS_PER_SEG / 4 {
        fs.write(ino, b * 4096, &block(7, b, 0)).unwrap();
    }
    let ssr = fs.stats().ssr_blocks - ssr_before;
    assert!(ssr > 0, "no block was written by threaded logging");
    let cps = fs.stats().checkpoints;
    sim.cut_now();
    fs.abandon();
    // Every write landed (the worst case for overwritten blocks).
    let img: Arc<dyn BlockDevice> = Arc::new(sim.clean_image());
    let fs = Fs::mount(img, o).unwrap();
    let mut buf = vec![0u8; 4096];
    for (f, &ino) in inos.iter().enumerate() {
        let f = f as u64;
        for b in 0..PER_FILE {
            let v = if keep(f, b) { 0 } else { 1 };
            fs.read(ino, b * 4096, &mut buf).unwrap();
            assert!(
                buf == block(f, b, v),
                "after the cut: file {f} block {b} is not its checkpointed version \
                 ({ssr} SSR blocks, {cps} checkpoints; first bytes {:?})",
                &buf[..24]
            );
        }
    }
    fs.unmount().unwrap();
}

/// Kills: lazy migration (gc.rs `migrate_data`, `Migration::Lazy`, the background
/// cleaner's) counting a page that is already dirty as one more dirty page (the mutant
/// added `st.dirty_pages += 1; charge_dirty_page()` in the `p.dirty` arm). Here every
/// live block of file 0 is rewritten (dirty in the cache) before its section is cleaned
/// lazily, as an idle-time pass would. After a sync nothing may count as dirty, and the
/// victim must be empty. A user would see, with the mutant, dirty-page counts that never
/// come back down (a file's cell can never be evicted, writeback and checkpoints that
/// think work is left), growing with every background pass.
#[test]
fn a_lazy_move_of_a_dirty_page_counts_it_once() {
    let fs = mount();
    let keep = sparse_and_dense;
    let inos = layout(&fs, [0, 0], keep);
    let inner = fs.inner();
    let v = select_victim(inner, Cost::Greedy, u64::MAX).expect("a victim");
    assert_eq!(
        inner.seg.section_valid(v),
        BLOCKS_PER_SEG / 8,
        "layout: not a sparse victim"
    );
    // Every live block of file 0 dirty again, with the same bytes.
    for b in (0..PER_FILE).filter(|&b| keep(0, b)) {
        fs.write(inos[0], b * 4096, &block(0, b, 0)).unwrap();
    }
    {
        let _op = inner.oplock.op();
        clean_section(inner, v, Migration::Lazy).unwrap();
    }
    inner.seg.victims.clear(v);
    fs.sync().unwrap();
    assert_eq!(
        inner.dirty_pages.load(Ordering::Relaxed),
        0,
        "dirty pages counted after a sync"
    );
    assert_eq!(
        inner.seg.section_valid(v),
        0,
        "the lazily cleaned victim is not empty"
    );
    verify(&fs, &inos, keep);
    fs.unmount().unwrap();
}
