//! Where `gc=f2fs` claims to follow F2FS (docs/DESIGN.md "Cleaning", seed-impl-facts 1.6),
//! checks of the rules a researcher would see in its behaviour.
//!
//! - `cost_benefit_ages_run_from_the_volume_minimum_to_now`: F2FS's `get_cb_cost` turns a
//!   section's mtime into an age against the volume's oldest mtime (`sit_i->min_mtime`,
//!   set at mount over every section) and the present (`sit_i->max_mtime`, raised to the
//!   current time on every allocation), so a section written long ago is old even if
//!   another is older. Until 2026-11-28 Flashlog scaled ages between the oldest and the
//!   youngest *candidate* of the pass: the youngest candidate got age 0 (cost `UINT_MAX`)
//!   however empty, and the background cleaner moved a section 7/8 valid instead of one
//!   1/8 valid written a little later.
//! - `threaded_logging_keeps_to_its_own_temperature_first`: F2FS's `get_ssr_segment` looks
//!   for a dirty segment of the log's own type first (`dirty_segmap[type]`), and only then
//!   of the other data types. Flashlog took the emptiest data segment of any temperature,
//!   so new user data (warm) was thread-logged into the cold segments that hold what
//!   cleaning moved, mixing the data that F2FS's six logs keep apart.

use flashlog_core::gc::{select_victim, Cost, BG_VICTIM_SEARCH};
use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use flashlog_format::cp::Temp;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const VOLUME: u64 = 64 << 20;
/// Blocks per file: two sections' worth, so each file owns whole sections.
const PER_FILE: u64 = 2 * BLOCKS_PER_SEG;

fn block(f: u64, b: u64, v: u32) -> Vec<u8> {
    let mut d = vec![(f as u8) ^ (b as u8) ^ (v as u8); 4096];
    d[..8].copy_from_slice(&f.to_le_bytes());
    d[8..16].copy_from_slice(&b.to_le_bytes());
    d[16..20].copy_from_slice(&v.to_le_bytes());
    d
}

fn mount() -> Fs {
    mount_on(VOLUME)
}

fn mount_on(bytes: u64) -> Fs {
    let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(bytes / 4096));
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    Fs::mount(
        dev,
        MountOptions {
            gc: GcPolicy::F2fs,
            alloc_mode: AllocMode::Lfs,
            cp_interval: None,
            gc_interval: None,
            io_threads: 0,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Dense file 0 keeps 7 blocks in 8, sparse file 1 one in 8.
fn keep(f: u64, b: u64) -> bool {
    if f == 0 {
        b % 8 != 0
    } else {
        b % 8 == 0
    }
}

#[test]
fn cost_benefit_ages_run_from_the_volume_minimum_to_now() {
    let fs = mount();
    let seg = &fs.inner().seg;
    // File 0 written at volume age 1000 s, file 1 at 2000 s, each written back (fsync: no
    // checkpoint, which would reset the clock) before the clock moves.
    let ages = [1000u64, 2000];
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
        fs.fsync(ino, false).unwrap();
        inos.push(ino);
    }
    // The blocks not kept die by overwrites (2 sections' worth: the copies fill sections
    // of their own, full or current, so not candidates).
    seg.clock_secs.store(3000, Ordering::Relaxed);
    for f in 0..2u64 {
        for b in (0..PER_FILE).filter(|&b| !keep(f, b)) {
            fs.write(inos[f as usize], b * 4096, &block(f, b, 1))
                .unwrap();
        }
    }
    fs.sync().unwrap();
    // Much later (a day of volume life), the background cleaner looks for a victim.
    seg.clock_secs.store(86_400, Ordering::Relaxed);
    let dense = BLOCKS_PER_SEG * 7 / 8;
    let sparse = BLOCKS_PER_SEG / 8;
    let cands: Vec<(u64, u64, u64)> = seg
        .dirty_sections()
        .filter(|&(_, v)| v < BLOCKS_PER_SEG)
        .map(|(s, v)| (s, v, seg.section_mtime(s)))
        .collect();
    assert!(
        cands.iter().any(|c| c.1 == dense && c.2 == ages[0])
            && cands.iter().any(|c| c.1 == sparse && c.2 == ages[1]),
        "layout: candidates (sec, valid, mtime) {cands:?}"
    );
    // F2FS get_cb_cost with min_mtime 0 (sections never written) and max_mtime now: the
    // dense sections are 99 old, the sparse ones 98; benefit (100-u)·age/(100+u) is 6.8
    // for the dense (u = 87) and 76.9 for the sparse (u = 12).
    let v = select_victim(fs.inner(), Cost::CostBenefit, BG_VICTIM_SEARCH).expect("a victim");
    seg.victims.clear(v);
    let (valid, age) = (seg.section_valid(v), seg.section_mtime(v));
    assert_eq!(
        valid, sparse,
        "cost-benefit took section {v} ({valid} valid, written at {age} s) over a 1/8-valid \
         one written 1000 s later, a day ago; candidates (sec, valid, mtime) {cands:?}"
    );
    // What the user sees: the background pass moves 1/8 of a section, not 7/8.
    let mut buf = vec![0u8; 4096];
    for (f, &ino) in inos.iter().enumerate() {
        let f = f as u64;
        for b in 0..PER_FILE {
            let v = u32::from(!keep(f, b));
            assert_eq!(fs.read(ino, b * 4096, &mut buf).unwrap(), 4096);
            assert!(buf == block(f, b, v), "file {f} block {b} lost its data");
        }
    }
    fs.unmount().unwrap();
}

/// Cleanable sections (not current, neither empty nor full) with their valid counts and
/// the temperature of the data head that last wrote them.
fn data_sections(fs: &Fs) -> Vec<(u64, u64, Option<Temp>)> {
    let inner = fs.inner();
    let seg = &inner.seg;
    let sps = inner.sb.geo.segs_per_sec as u64;
    seg.dirty_sections()
        .filter(|&(s, v)| v < BLOCKS_PER_SEG * sps && !seg.is_current_section(s))
        .map(|(s, v)| (s, v, seg.segment_data_temp(s * sps)))
        .collect()
}

#[test]
fn threaded_logging_keeps_to_its_own_temperature_first() {
    let fs = mount_on(256 << 20);
    let seg = &fs.inner().seg;
    let mk = |name: &str| {
        fs.create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino
    };
    let write = |ino: Ino, f: u64, b: u64, v: u32| {
        fs.write(ino, b * 4096, &block(f, b, v)).unwrap();
    };
    // f0 and f1: two warm sections each.
    let f0 = mk("f0");
    let f1 = mk("f1");
    for b in 0..PER_FILE {
        write(f0, 0, b, 0);
    }
    for b in 0..PER_FILE {
        write(f1, 1, b, 0);
    }
    fs.sync().unwrap();
    // One block in 8 of f0 dies; cleaning moves the rest (896 blocks) to the cold log.
    for b in (0..PER_FILE).filter(|b| b % 8 == 0) {
        write(f0, 0, b, 1);
    }
    fs.sync().unwrap();
    assert_eq!(fs.gc(2).unwrap(), 2, "cleaning f0's two sections");
    // Of the moved blocks only those with b % 8 == 1 stay: the full cold section keeps
    // about one block in seven. Half of f1 dies: its warm sections keep half.
    for b in (0..PER_FILE).filter(|b| b % 8 > 1) {
        write(f0, 0, b, 2);
    }
    for b in (0..PER_FILE).filter(|b| b % 2 == 1) {
        write(f1, 1, b, 1);
    }
    fs.sync().unwrap();
    let before = data_sections(&fs);
    let cold: Vec<_> = before.iter().filter(|c| c.2 == Some(Temp::Cold)).collect();
    let warm: Vec<_> = before.iter().filter(|c| c.2 == Some(Temp::Warm)).collect();
    assert!(
        cold.iter().any(|c| c.1 < BLOCKS_PER_SEG / 4)
            && warm.iter().any(|c| c.1 == BLOCKS_PER_SEG / 2),
        "layout: cleanable (sec, valid, temperature) {before:?}"
    );
    // Threaded logging from now on; new user data (warm) fills its section, then
    // thread-logs: into the half-empty warm segments first, as F2FS does, though the
    // cold one is emptier.
    seg.lfs_mode.store(false, Ordering::Relaxed);
    seg.ssr_below_secs.store(u64::MAX, Ordering::Relaxed);
    let ssr_before = fs.stats().ssr_blocks;
    let f2 = mk("f2");
    // Written back 64 blocks at a time until 256 went by threaded logging: less than the
    // warm segments' 512 holes, so none of it needs another temperature.
    let mut n = 0;
    while fs.stats().ssr_blocks - ssr_before < 256 {
        assert!(n < 4 * BLOCKS_PER_SEG, "threaded logging never started");
        for b in n..n + 64 {
            write(f2, 2, b, 0);
        }
        n += 64;
        fs.fsync(f2, false).unwrap();
    }
    let ssr = fs.stats().ssr_blocks - ssr_before;
    for &&(sec, v, _) in &cold {
        assert_eq!(
            seg.section_valid(sec),
            v,
            "warm user data was thread-logged into cold section {sec} ({v} valid) while \
             warm segments with holes were there ({ssr} SSR blocks); before: {before:?}"
        );
    }
    // Everything reads back.
    let mut buf = vec![0u8; 4096];
    for b in 0..PER_FILE {
        let v0 = if b % 8 == 0 {
            1
        } else if b % 8 > 1 {
            2
        } else {
            0
        };
        fs.read(f0, b * 4096, &mut buf).unwrap();
        assert!(buf == block(0, b, v0), "f0 block {b}");
        fs.read(f1, b * 4096, &mut buf).unwrap();
        assert!(buf == block(1, b, (b % 2) as u32), "f1 block {b}");
    }
    for b in 0..n {
        fs.read(f2, b * 4096, &mut buf).unwrap();
        assert!(buf == block(2, b, 0), "f2 block {b}");
    }
    fs.unmount().unwrap();
}
