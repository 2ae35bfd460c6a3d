//! Random 4 KiB overwrites at several utilisations, per GC policy and mode: write
//! amplification, GC time share, application throughput before and during cleaning.
//! A small driver for the cleaning issue's report until `flashlog bench` covers it.
//!
//! `cargo run --release -p flashlog-core --example gc_sweep -- [VOLUME_MIB] [OVERWRITE_FACTOR]`

use flashlog_core::*;
use flashlog_dev::{BlockDevice, RamDevice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let vol_mib: u64 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(512);
    let factor: u64 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(4);
    println!(
        "volume {vol_mib} MiB, random 4 KiB overwrites totalling {factor}x the volume, RAM device"
    );
    println!(
        "{:<8} {:<9} {:>5} {:>7} {:>7} {:>9} {:>11} {:>11} {:>9} {:>9}",
        "policy",
        "mode",
        "util",
        "fs-WAF",
        "dev/app",
        "GC time%",
        "MiB/s fill",
        "MiB/s clean",
        "moved",
        "SSR"
    );
    for util in [50u64, 80, 90, 95] {
        for (gc, mode) in [
            (GcPolicy::F2fs, AllocMode::Adaptive),
            (GcPolicy::F2fs, AllocMode::Lfs),
            (GcPolicy::Scale, AllocMode::Lfs),
        ] {
            let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new(vol_mib << 8));
            Fs::mkfs(dev.clone(), &MkfsOptions::default())?;
            let opts = MountOptions {
                cp_interval: None,
                gc_interval: None,
                alloc_mode: mode,
                gc,
                gc_workers: 2,
                ..Default::default()
            };
            let fs = Fs::mount(dev.clone(), opts)?;
            let blocks = fs.statfs().blocks * util / 100 - 64;
            let ino = fs.create(ROOT_INO, b"data", 0o644, 0, 0)?.ino;
            let buf = vec![0xa5u8; 1 << 20];
            let t0 = Instant::now();
            let mut off = 0;
            while off < blocks * 4096 {
                let n = (blocks * 4096 - off).min(buf.len() as u64) as usize;
                fs.write(ino, off, &buf[..n])?;
                off += n as u64;
            }
            fs.sync()?;
            let fill_s = t0.elapsed().as_secs_f64();
            let before = fs.stats();
            let mut rng = ChaCha8Rng::seed_from_u64(util);
            let writes = factor * (vol_mib << 8);
            let t1 = Instant::now();
            let page = [0x5au8; 4096];
            for _ in 0..writes {
                fs.write(ino, rng.random_range(0..blocks) * 4096, &page)?;
            }
            fs.sync()?;
            let clean_s = t1.elapsed().as_secs_f64();
            let c = fs.stats();
            let dev_blocks = c.dev_write_blocks - before.dev_write_blocks;
            let data_blocks = c.data_blocks_written - before.data_blocks_written;
            println!(
                "{:<8} {:<9} {:>4}% {:>7.2} {:>7.2} {:>8.1}% {:>11.0} {:>11.0} {:>9} {:>9}",
                gc.name(),
                format!("{mode:?}").to_lowercase(),
                util,
                dev_blocks as f64 / data_blocks.max(1) as f64,
                dev_blocks as f64 / writes as f64,
                100.0 * (c.gc_time_s - before.gc_time_s) / clean_s,
                (blocks * 4096) as f64 / fill_s / 1048576.0,
                (writes * 4096) as f64 / clean_s / 1048576.0,
                c.gc_moved_blocks,
                c.ssr_blocks,
            );
            fs.unmount()?;
            let r = fsck(&*dev)?;
            anyhow::ensure!(r.is_clean(), "fsck: {r}");
        }
    }
    Ok(())
}
