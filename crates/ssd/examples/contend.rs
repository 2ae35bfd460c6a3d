//! Many host threads on one wall-clock emulated SSD: is the emulator's own locking the bound?
//!
//! `cargo run --release -p flashlog-ssd --example contend -- [THREADS] [SECONDS] [SIZE]`
//! (defaults 16, 5, 1GiB): a 970pro-like device with a RAM store; every thread issues 4 KiB
//! random writes to its own quarter-free region for SECONDS, then 4 KiB random reads for
//! SECONDS. Prints ops/s and, per emulator lock, contended acquisitions, wait time and its
//! share of thread time (wait / (threads × seconds)), and hold time.

use std::time::{Duration, Instant};

use flashlog_dev::BlockDevice;
use flashlog_ssd::{parse_size, ClockKind, SsdConfig, SsdDevice, StoreKind};

fn rng(x: &mut u64) -> u64 {
    // xorshift64*
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn phase(dev: &SsdDevice, threads: u64, secs: f64, write: bool) -> anyhow::Result<()> {
    dev.reset_stats();
    let blocks = dev.capabilities().block_count;
    let per = blocks / threads;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(secs);
    let ops: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> anyhow::Result<u64> {
                    let mut x = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                    let mut buf = vec![t as u8 + 1; 4096];
                    let mut n = 0;
                    while Instant::now() < deadline {
                        // Within the first 3/4 of the thread's region: leaves the device
                        // overprovisioning plus a quarter free, so device GC stays light.
                        let lba = t * per + rng(&mut x) % (per * 3 / 4).max(1);
                        if write {
                            dev.write(lba, &buf)?;
                        } else {
                            dev.read(lba, &mut buf)?;
                        }
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .sum::<anyhow::Result<u64>>()
    })?;
    let el = t0.elapsed().as_secs_f64();
    let st = dev.stats();
    let thread_s = threads as f64 * el;
    println!(
        "{} x{threads}: {:.0} ops/s ({:.0} MiB/s), p50 {:.1} us p99 {:.1} us, device wait share {:.2}% of {thread_s:.1} thread-s",
        if write { "4 KiB random write" } else { "4 KiB random read" },
        ops as f64 / el,
        ops as f64 * 4096.0 / el / (1u64 << 20) as f64,
        if write { st.latency.write.p50_us } else { st.latency.read.p50_us },
        if write { st.latency.write.p99_us } else { st.latency.read.p99_us },
        100.0 * st.locks.wait_s() / thread_s,
    );
    println!(
        "  engine lock held {:.1}% of the phase; device GC runs {}; wake-up lateness p50 {:.0} us p99 {:.0} us",
        100.0 * st.locks.engine.hold_s / el,
        st.gc_runs,
        st.latency.wall_lateness.p50_us,
        st.latency.wall_lateness.p99_us,
    );
    for (name, l) in [
        ("engine", &st.locks.engine),
        ("recorder", &st.locks.recorder),
        ("store", &st.locks.store),
    ] {
        println!(
            "  {name:8} acquisitions {:>9} contended {:>8} wait {:.3} s ({:.2}% of thread time, max {:.0} us) hold {:.3} s (mean {:.2} us, max {:.0} us)",
            l.acquisitions,
            l.contended,
            l.wait_s,
            100.0 * l.wait_s / thread_s,
            l.max_wait_us,
            l.hold_s,
            l.hold_s * 1e6 / l.acquisitions.max(1) as f64,
            l.max_hold_us,
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let threads: u64 = a.first().map_or(Ok(16), |s| s.parse())?;
    let secs: f64 = a.get(1).map_or(Ok(5.0), |s| s.parse())?;
    let size = parse_size(a.get(2).map_or("1GiB", |s| s.as_str()))?;
    let mut cfg = SsdConfig::preset("970pro-like")?.with_capacity(size)?;
    cfg.store = StoreKind::Ram;
    cfg.clock = ClockKind::Wall;
    let dev = SsdDevice::new(cfg)?;
    phase(&dev, threads, secs, true)?;
    phase(&dev, threads, secs, false)?;
    Ok(())
}
