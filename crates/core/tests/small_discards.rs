//! F2FS's small discards (`add_discard_addrs`): after each checkpoint `gc=f2fs` and
//! `gc=scale` discard the runs (>= `SMALL_DISCARD_MIN_BLOCKS`) of blocks that died in
//! segments still in use, once the pack is durable and before threaded logging can reuse
//! them (`SegManager::issue_small_discards`).
//!
//! - on the emulated SSD with the page FTL, the blocks the device keeps mapped in the main
//!   area come down to the live ones (before: every overwritten block stayed mapped until
//!   the cleaner freed its section);
//! - on the crash simulator (whose discard zeroes the durable blocks), with threaded logging
//!   forced so that the discarded holes are written again: a power cut at every request of
//!   an interval that overwrites (some files fsync'd, some not), checkpoints (discarding the
//!   dead runs), writes into the holes and fsyncs loses no fsync'd byte and no byte of the
//!   durable checkpoint, and fsck is clean.

use flashlog_core::*;
use flashlog_dev::{BlockDevice, CrashMode, RamDevice, SimDevice};
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod common;

const BS: usize = BLOCK_SIZE;

fn block_pattern(byte: u8, blocks: usize) -> Vec<u8> {
    vec![byte; blocks * BS]
}

/// Write files, overwrite half of each in runs of 32 blocks, sync: the page FTL keeps
/// mapped in the main area at most the live blocks plus 64 (one short run per head segment,
/// node blocks rewritten one by one); before this feature, every overwritten block
/// (1024 here) stayed mapped.
fn page_ftl(opts: MountOptions) {
    let ssd = common::emulated_ssd("page", 128 << 20);
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    Fs::mkfs(dev.clone(), &MkfsOptions::default()).unwrap();
    let fs = Fs::mount(dev.clone(), opts.clone()).unwrap();
    let mut model = Vec::new();
    for f in 0..8 {
        let data = block_pattern(f as u8 + 1, 256);
        fs.write_file(&format!("/f{f}"), &data).unwrap();
        model.push(data);
    }
    fs.sync().unwrap();
    let before = fs.stats().discarded_blocks;
    for (f, m) in model.iter_mut().enumerate() {
        let ino = fs.lookup(ROOT_INO, format!("f{f}").as_bytes()).unwrap().ino;
        for i in 0..4 {
            let off = i * 64 * BS;
            let new = block_pattern(0x80 + f as u8, 32);
            fs.write(ino, off as u64, &new).unwrap();
            m[off..off + new.len()].copy_from_slice(&new);
        }
    }
    fs.sync().unwrap();
    let main = checkpoint::read_superblock(&*dev).unwrap().geo.main_addr;
    let mapped = ssd.valid_against(main, &[]).valid;
    let live = fs.inner().seg.total_valid();
    let discarded = fs.stats().discarded_blocks - before;
    eprintln!(
        "{:?}/{:?}: main area mapped {mapped}, live {live}, dead mapped {}, discarded {discarded}",
        opts.gc,
        opts.alloc_mode,
        mapped - live
    );
    assert!(
        mapped <= live + 64,
        "{:?}: the device maps {mapped} blocks of the main area, {} more than the {live} live",
        opts.gc,
        mapped - live
    );
    // 1024 overwritten; a run that crosses a segment end is split there (runs are per
    // segment, as in F2FS), and a piece under 16 blocks is left.
    assert!(
        discarded >= 1024 - 8 * 16,
        "discarded only {discarded} blocks"
    );
    assert!(common::files_differing(&fs, &model).is_empty());
    fs.unmount().unwrap();
    let r = fsck(&*dev).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = Fs::mount(dev, opts).unwrap();
    assert!(common::files_differing(&fs, &model).is_empty());
    fs.unmount().unwrap();
}

fn quiet() -> MountOptions {
    MountOptions {
        cp_interval: None,
        gc_interval: None,
        ..MountOptions::default()
    }
}

#[test]
fn f2fs_page_ftl_maps_about_the_live_blocks() {
    page_ftl(quiet());
}

#[test]
fn f2fs_lfs_page_ftl_maps_about_the_live_blocks() {
    page_ftl(MountOptions {
        alloc_mode: AllocMode::Lfs,
        ..quiet()
    });
}

#[test]
fn scale_page_ftl_maps_about_the_live_blocks() {
    page_ftl(MountOptions {
        gc: GcPolicy::Scale,
        gc_workers: 2,
        ..quiet()
    });
}

const FILES: usize = 6;
const FILE_BLOCKS: usize = 256;

/// Files whose acceptable contents after a cut: `durable` (the last fsync or checkpoint)
/// and, while an fsync or checkpoint is in flight, `pending`.
struct Model {
    durable: Vec<Vec<u8>>,
    pending: Vec<Vec<u8>>,
}

/// The interval under test, on a volume holding `FILES` files of `FILE_BLOCKS` blocks.
/// Stops at the first error (the cut). Returns whether it ran to the end.
fn interval(fs: &Fs, m: &mut Model) -> bool {
    let run = |fs: &Fs, m: &mut Model| -> Result<()> {
        // Threaded logging from now on: heads that end their segment fill holes.
        fs.inner()
            .seg
            .ssr_below_secs
            .store(u64::MAX, Ordering::Relaxed);
        // Overwrite runs of 32 blocks of each file; even files are fsync'd, odd ones are
        // durable only through the checkpoint (so a cut before its pack needs the blocks
        // valid at the previous checkpoint, which this checkpoint discards).
        for f in 0..FILES {
            let ino = fs.lookup(ROOT_INO, format!("f{f}").as_bytes())?.ino;
            for i in 0..4 {
                let off = i * 64 * BS;
                let new = block_pattern(0x40 + f as u8, 32);
                fs.write(ino, off as u64, &new)?;
                m.pending[f][off..off + new.len()].copy_from_slice(&new);
            }
            if f % 2 == 0 {
                fs.fsync(ino, false)?;
                m.durable[f] = m.pending[f].clone();
            }
        }
        fs.sync()?;
        m.durable = m.pending.clone();
        // Write into the holes the checkpoint discarded (threaded logging), fsync.
        for f in 0..FILES {
            let ino = fs.lookup(ROOT_INO, format!("f{f}").as_bytes())?.ino;
            for i in 0..4 {
                let off = (i * 64 + 32) * BS;
                let new = block_pattern(0xa0 + f as u8, 32);
                fs.write(ino, off as u64, &new)?;
                m.pending[f][off..off + new.len()].copy_from_slice(&new);
            }
            fs.fsync(ino, false)?;
            m.durable[f] = m.pending[f].clone();
        }
        // And a checkpoint after them (what it discards lies outside those holes).
        fs.sync()?;
        Ok(())
    };
    run(fs, m).is_ok()
}

fn base_image() -> (RamDevice, Vec<Vec<u8>>) {
    let sim = Arc::new(SimDevice::new((64 << 20) / BS as u64));
    let dev: Arc<dyn BlockDevice> = sim.clone();
    Fs::mkfs(
        dev.clone(),
        &MkfsOptions {
            seed: Some(7),
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let fs = Fs::mount(dev, quiet()).unwrap();
    let mut files = Vec::new();
    for f in 0..FILES {
        let data = block_pattern(f as u8 + 1, FILE_BLOCKS);
        fs.write_file(&format!("/f{f}"), &data).unwrap();
        files.push(data);
    }
    fs.sync().unwrap();
    fs.unmount().unwrap();
    (sim.clean_image(), files)
}

#[test]
fn a_cut_at_any_request_around_small_discards_loses_nothing() {
    let (base, files) = base_image();
    // The uncut run: how many requests, and that the new path and threaded logging ran.
    let sim = Arc::new(SimDevice::from_image(base.deep_clone()));
    let fs = Fs::mount(sim.clone(), quiet()).unwrap();
    let start = sim.ops();
    let d0 = fs.stats().discarded_blocks;
    let mut m = Model {
        durable: files.clone(),
        pending: files.clone(),
    };
    assert!(interval(&fs, &mut m));
    let total = sim.ops() - start;
    let discarded = fs.stats().discarded_blocks - d0;
    let ssr = fs.inner().seg.ssr_blocks.load(Ordering::Relaxed);
    eprintln!("interval: {total} requests, {discarded} blocks discarded, {ssr} written by SSR");
    assert!(discarded >= 32 * 4, "small discards ran ({discarded})");
    assert!(ssr > 0, "threaded logging wrote");
    assert!(common::files_differing(&fs, &m.durable).is_empty());
    fs.unmount().unwrap();

    for k in 0..total {
        let sim = Arc::new(SimDevice::from_image(base.deep_clone()));
        let fs = Fs::mount(sim.clone(), quiet()).unwrap();
        sim.cut_at(sim.ops() + k, if k % 3 == 1 { 1 } else { 0 });
        let mut m = Model {
            durable: files.clone(),
            pending: files.clone(),
        };
        let finished = interval(&fs, &mut m);
        sim.cut_now();
        fs.abandon();
        let mode = CrashMode::ALL[k as usize % 2];
        let img: Arc<dyn BlockDevice> = Arc::new(sim.crash_image(mode, k));
        let r = fsck(&*img).unwrap();
        assert!(r.is_clean(), "cut at {k} ({mode:?}): fsck: {r}");
        let fs = Fs::mount(img.clone(), quiet()).unwrap();
        for f in 0..FILES {
            let got = fs.read_file(&format!("/f{f}")).unwrap();
            assert!(
                got == m.durable[f] || got == m.pending[f],
                "cut at {k} ({mode:?}, finished {finished}): /f{f} holds neither its durable \
                 nor its pending contents (first bad block {:?})",
                (0..FILE_BLOCKS)
                    .find(|&b| got[b * BS..(b + 1) * BS] != m.durable[f][b * BS..(b + 1) * BS])
            );
        }
        fs.unmount().unwrap();
        let r = fsck(&*img).unwrap();
        assert!(
            r.is_clean(),
            "cut at {k} ({mode:?}): fsck after remount: {r}"
        );
    }
}
