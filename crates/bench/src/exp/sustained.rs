//! `sustained`: the ScaleLFS §5.1 micro-benchmark scaled to this machine (Fig. 1, 9a-c).
//!
//! Per policy, on a fresh device: each of N threads creates one file and writes it
//! sequentially (1 MiB writes, then fsync) so that the files fill `--fill` (~90 %) of the
//! volume; then every thread overwrites random 4 KiB blocks of its file until the random
//! writes total `--write-factor` × the volume or `--duration` passes. Cleaning starts soon
//! after the random phase begins and runs for most of it.
//!
//! Reported per policy: application bandwidth before and during cleaning, device bandwidth
//! (reads + writes at the block layer) during cleaning and its peak, write amplification,
//! 4 KiB write latency percentiles and CDF, GC runs/time, stall time, CPU time, peak RSS; and
//! once per run the raw device's sequential write bandwidth, against which the fill phase
//! (in-process sequential write) is compared for the 80 % target.
//!
//! `--aged` (IPLFS and D2FS Fig. 12: an aged, ~90 % full volume): after the fill, the same
//! random overwrites run unmeasured until cleaning has started (a host GC run, an upcall
//! applied, or a device GC run) or `--aging-max` seconds pass; only what follows is the
//! measured phase (throughput, device bandwidth, latency).
//!
//! On an emulated SSD every run also samples the device gauges (`gauges.rs`): FTL mapping
//! memory, migration records, region fill, interval-map compaction; the report's "FTL
//! memory" section and `ftl_memory*.svg` come from them (D2FS Table 1 / Fig. 17, IPLFS).

use super::{pattern, Ops, Volume, VolumeEnd};
use crate::device::raw_write_mib_s;
use crate::gauges::{Gauge, GaugeSampler, MemorySummary};
use crate::metrics::{phases, phases_from, rates, Lat, LatSummary, Phases, Rate, Rng, Sample};
use crate::plot::{bar_plot, line_plot, Bars, Lines};
use crate::policy::PolicySpec;
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, Result};
use flashlog_core::{Fs, Ino, ROOT_INO};
use flashlog_dev::BlockDevice;
use parking_lot::Mutex;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const MIB: f64 = (1u64 << 20) as f64;
/// Fill write size (FIO lays files out with large sequential writes).
const FILL_CHUNK: usize = 1 << 20;
/// Random write size (ScaleLFS §5.1: 4 KiB random writes).
pub(crate) const RAND_BS: u64 = 4096;
/// Raw-device reference: bytes written sequentially (capped by the volume).
const RAW_BYTES: u64 = 256 << 20;
/// `--aged`: at most this many times the device capacity of unmeasured overwrites.
const AGING_MAX_FACTOR: f64 = 3.0;

/// One policy's result; the first keys are the ones issue 7 requires.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LockWait {
    pub point: String,
    pub wait_s: f64,
    pub contended: u64,
}

impl LockWait {
    /// From (point, wait seconds, contended count) rows, as the core's and the emulator's
    /// meters report them.
    fn from_points(rows: Vec<(&'static str, f64, u64)>) -> Vec<LockWait> {
        rows.into_iter()
            .map(|(point, wait_s, contended)| LockWait {
                point: point.to_string(),
                wait_s,
                contended,
            })
            .collect()
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SustainedResult {
    pub policy: String,
    pub app_mib_s_before_gc: f64,
    pub app_mib_s_during_gc: f64,
    pub device_mib_s_during_gc: f64,
    pub device_peak_mib_s: f64,
    /// Device bytes written / application bytes written (file system view).
    pub waf: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub gc_time_s: f64,
    pub stall_time_s: f64,
    /// Seconds spent in checkpoints, and their number.
    pub checkpoint_time_s: f64,
    pub checkpoints: u64,
    pub peak_rss_mib: f64,
    pub cpu_s: f64,
    pub gc_fg_runs: u64,
    pub gc_bg_runs: u64,
    pub gc_sections_freed: u64,
    pub gc_moved_blocks: u64,
    pub ssr_blocks: u64,
    /// Blocks collectors read (all victims' valid blocks).
    pub gc_read_blocks: u64,
    /// Blocks read but not moved: invalidated between the lock-free SIT read and the move
    /// (ScaleLFS LSU false positives), or lost the race to a newer write.
    pub gc_false_positive_reads: u64,
    /// Seconds waited and contended acquisitions per lock or contention point.
    pub lock_waits: Vec<LockWait>,
    /// The file-cell points split by the role that held the cell when the wait began
    /// (`point` is "waiter<holder", e.g. "file_cell<flusher": writers behind the flusher).
    pub cell_waits_by_holder: Vec<LockWait>,
    /// The same for the emulated SSD's own locks (empty on other devices), over the volume's
    /// life (mkfs to unmount).
    pub device_lock_waits: Vec<LockWait>,
    /// Lock waits as a share of thread time (threads × (fill + aging + random seconds), the
    /// window the waits are counted over): the file system's points, and the emulator's.
    pub core_lock_wait_share: f64,
    pub device_lock_wait_share: f64,
    /// Share of the volume's life the emulator's engine lock was held: near 100 % it would
    /// be the bound whatever the host does.
    pub device_engine_busy: f64,
    pub fs_waf: f64,
    /// Seconds from the start of the run until cleaning first ran.
    pub gc_start_s: Option<f64>,
    pub fill_bytes: u64,
    pub fill_s: f64,
    /// In-process sequential write bandwidth of the fill (including its fsync).
    pub fill_mib_s: f64,
    pub random_bytes: u64,
    pub random_s: f64,
    pub random_mib_s: f64,
    pub random_iops: f64,
    pub phases: Phases,
    pub latency: LatSummary,
    pub end: Option<VolumeEnd>,
    pub error: Option<String>,
    pub series: Vec<Rate>,
    pub latency_cdf: Vec<(f64, f64)>,
    /// `--aged`: unmeasured random overwrites before the measured phase, until cleaning
    /// started (bytes, seconds, whether it did start), and when the measured phase began
    /// (seconds on the series' clock).
    pub aging_bytes: u64,
    pub aging_s: f64,
    pub aging_cleaning_started: bool,
    pub measured_from_s: f64,
    /// FTL name of the policy's device ("page", "coupled", "interval", "zoned"; empty off
    /// the emulator).
    pub ftl: String,
    /// Device gauges over time (emulated SSD only) and their end-of-run summary.
    pub gauges: Vec<Gauge>,
    pub memory: Option<MemorySummary>,
}

/// Run the experiment for every policy and build the report.
pub fn run(ctx: &Ctx) -> Result<Report> {
    run_named(ctx, "sustained")
}

/// `run`, with the report titled `name` (`memory` and `vop` are this workload).
pub fn run_named(ctx: &Ctx, name: &str) -> Result<Report> {
    let results = run_all(ctx)?;
    build_report(ctx, name, results.0, results.1)
}

/// Every policy's result, and the raw device's sequential write MiB/s.
pub fn run_all(ctx: &Ctx) -> Result<(Vec<SustainedResult>, f64)> {
    let threads = ctx.args.threads;
    let vol_bytes = ctx.device.bytes()?;
    crate::device::warm_up(&ctx.device, threads)?;
    let raw = raw_write_mib_s(&ctx.device, RAW_BYTES.min(vol_bytes / 2), threads)?;
    ctx.say(&format!(
        "raw device sequential write ({threads} threads, best of 256 KiB and 1 MiB requests): {raw:.0} MiB/s"
    ));
    let mut results = Vec::new();
    for p in &ctx.policies {
        let r = run_policy(ctx, p)?;
        if let Some(e) = &r.error {
            ctx.say(&format!("{}: {e}", p.label));
        }
        results.push(r);
    }
    Ok((results, raw))
}

/// Fill then random-overwrite one fresh volume.
pub fn run_policy(ctx: &Ctx, p: &PolicySpec) -> Result<SustainedResult> {
    flashlog_core::waits::reset();
    let threads = ctx.args.threads;
    // The device's size as the user gave it (--device PRESET:SIZE): the page-mapping FTL's
    // table and the per-GiB record numbers are of this.
    let capacity_blocks = ctx.device.bytes()? / 4096;
    let vol = Volume::open(ctx, p)?;
    let user = vol.user_bytes();
    let per_file = ((user as f64 * ctx.args.fill) as u64 / threads as u64) / RAND_BS * RAND_BS;
    if per_file < RAND_BS {
        return Err(anyhow!("volume too small for {threads} files"));
    }
    let fill_bytes = per_file * threads as u64;
    let rand_target =
        (vol.bd.dev.capabilities().capacity_blocks as f64 * 4096.0 * ctx.args.write_factor) as u64;
    let ops = Ops::new(threads);
    let bar = ctx.bar(fill_bytes + rand_target, p.label.clone(), true);
    let t_base = Instant::now();
    let sampler = vol.sampler(ctx, ops.clone(), bar.clone(), false);
    let gauge_sampler = vol
        .bd
        .ssd
        .clone()
        .map(|s| GaugeSampler::start(s, ctx.sample_interval(), t_base));
    let err: Mutex<Option<String>> = Mutex::new(None);
    let fail = |e: String| {
        err.lock().get_or_insert(e);
    };

    // Fill: one file per thread, sequential, then fsync.
    let t_fill = Instant::now();
    let inos = fill_files(&vol.fs, threads, per_file, ctx.args.seed, &ops, &fail);
    let fill_s = t_fill.elapsed().as_secs_f64();

    // --aged: the same overwrites, unmeasured, until cleaning has started.
    let (mut aging_bytes, mut aging_s, mut aging_started) = (0, 0.0, false);
    if ctx.args.aged && err.lock().is_none() {
        let b;
        (b, aging_s, aging_started) = age_until_cleaning(
            ctx,
            &vol,
            &inos,
            per_file,
            ctx.args.seed ^ 0xA6E,
            &fail,
            &ops,
        );
        aging_bytes = b;
        if !aging_started {
            ctx.say(&format!(
                "{}: cleaning had not started after {aging_s:.1} s of aging ({} MiB of random writes); measuring anyway",
                p.label,
                b >> 20
            ));
        }
    }
    let measured_from_s = t_base.elapsed().as_secs_f64();

    // Random 4 KiB overwrites until the byte target or the deadline.
    let t_rand = Instant::now();
    let deadline = t_rand + ctx.duration();
    let per_thread = rand_target / threads as u64 / RAND_BS;
    let mut lat = Lat::default();
    let mut random_bytes = 0;
    if err.lock().is_none() {
        let (l, b) = random_phase(
            &vol.fs,
            &inos,
            per_file,
            per_thread,
            deadline,
            None,
            ctx.args.seed,
            &fail,
            &ops,
        );
        lat = l;
        random_bytes = b;
    }
    let random_s = t_rand.elapsed().as_secs_f64();
    let all_samples = sampler.finish();
    let gauges = gauge_sampler.map(|g| g.finish()).unwrap_or_default();
    let ftl = vol
        .bd
        .ssd
        .as_ref()
        .map_or(String::new(), |s| s.ftl_name().to_string());
    bar.finish_and_clear();
    let end = vol.finish();
    // The measured phase's samples (with the one before it as the rate baseline).
    let samples: Vec<Sample> = if ctx.args.aged {
        let i = all_samples
            .iter()
            .rposition(|x| x.t_s <= measured_from_s)
            .unwrap_or(0);
        all_samples[i..].to_vec()
    } else {
        all_samples.clone()
    };
    let mut r = summarize(
        p,
        threads,
        &samples,
        &lat,
        end,
        fill_bytes,
        fill_s,
        random_bytes,
        random_s,
        aging_s,
    );
    if ctx.args.aged {
        // Cleaning started during the aging: the whole measured phase is "during cleaning",
        // whether or not the policy's own counters moved in it (`none` never cleans on the
        // host; the device's GC ran underneath). Every window field (bandwidths, ops/s, WAF
        // and die utilisation while cleaning) covers the measured phase's first to last
        // sample; nothing of it is "before cleaning".
        let mut ph = phases_from(&samples, 0);
        ph.gc_start_s = Some(measured_from_s);
        r.gc_start_s = ph.gc_start_s;
        r.app_mib_s_before_gc = ph.app_mib_s_before_gc;
        r.app_mib_s_during_gc = ph.app_mib_s_during_gc;
        r.device_mib_s_during_gc = ph.device_mib_s_during_gc;
        r.device_peak_mib_s = ph.device_peak_mib_s;
        r.phases = ph;
    }
    r.series = rates(&all_samples);
    r.aging_bytes = aging_bytes;
    r.aging_s = aging_s;
    r.aging_cleaning_started = aging_started;
    r.measured_from_s = if ctx.args.aged { measured_from_s } else { 0.0 };
    r.memory = crate::gauges::summarize(&ftl, &gauges, capacity_blocks);
    r.ftl = ftl;
    r.gauges = gauges;
    if let Some(e) = err.into_inner() {
        r.error = Some(e);
    }
    Ok(r)
}

/// Every thread overwrites random 4 KiB blocks of its file, at most `per_thread` writes each,
/// until `deadline` or, if given, until `until()` holds (checked every 20 ms). Returns the
/// merged latencies and the bytes written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn random_phase(
    fs: &std::sync::Arc<Fs>,
    inos: &[Option<Ino>],
    per_file: u64,
    per_thread: u64,
    deadline: Instant,
    until: Option<&(dyn Fn() -> bool + Sync)>,
    seed: u64,
    fail: &(dyn Fn(String) + Sync),
    ops: &Ops,
) -> (Lat, u64) {
    let stop = AtomicBool::new(false);
    let outs: Vec<(Lat, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = inos
            .iter()
            .enumerate()
            .map(|(t, ino)| {
                let fs = fs.clone();
                let stop = &stop;
                let ino = ino.unwrap_or(0);
                s.spawn(move || {
                    let mut lat = Lat::default();
                    let mut rng = Rng::new(seed, t as u64 + 1000);
                    let buf = pattern(RAND_BS as usize, seed + t as u64);
                    let blocks = per_file / RAND_BS;
                    let mut n = 0u64;
                    while n < per_thread && !stop.load(Ordering::Relaxed) {
                        let off = rng.below(blocks) * RAND_BS;
                        let t0 = Instant::now();
                        if let Err(e) = fs.write(ino, off, &buf) {
                            fail(format!("random write (thread {t}, offset {off}): {e}"));
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        lat.record(t0);
                        n += 1;
                        ops.add(t, 1);
                    }
                    (lat, n * RAND_BS)
                })
            })
            .collect();
        // The watcher: this thread sleeps until the deadline, the condition, or until all
        // workers are done.
        while Instant::now() < deadline
            && !hs.iter().all(|h| h.is_finished())
            && !until.is_some_and(|f| f())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut lat = Lat::default();
    let mut bytes = 0;
    for (l, b) in outs {
        lat.merge(&l);
        bytes += b;
    }
    (lat, bytes)
}

/// Random overwrites of the filled files (unmeasured), until cleaning of any kind has
/// started (host GC, an applied D2FS upcall, or the SSD's own GC), at most
/// [`AGING_MAX_FACTOR`] device capacities or `--aging-max` seconds. Returns the bytes
/// written, the seconds taken and whether cleaning started.
pub(crate) fn age_until_cleaning(
    ctx: &Ctx,
    vol: &Volume,
    inos: &[Option<Ino>],
    per_file: u64,
    seed: u64,
    fail: &(dyn Fn(String) + Sync),
    ops: &Ops,
) -> (u64, f64, bool) {
    let ssd = vol.bd.ssd.clone();
    let cleaning_count = || {
        let c = vol.fs.stats();
        c.gc_fg_runs
            + c.gc_bg_runs
            + c.upcalls_applied
            + ssd.as_ref().map_or(0, |s| s.counters().gc_runs)
    };
    let base = cleaning_count();
    let started = || cleaning_count() > base;
    let t = Instant::now();
    let cap = (vol.bd.dev.capabilities().capacity_blocks as f64 * 4096.0 * AGING_MAX_FACTOR) as u64
        / ctx.args.threads as u64
        / RAND_BS;
    let (_, bytes) = random_phase(
        &vol.fs,
        inos,
        per_file,
        cap,
        t + Duration::from_secs_f64(ctx.args.aging_max),
        Some(&started),
        seed,
        fail,
        ops,
    );
    (bytes, t.elapsed().as_secs_f64(), started())
}

/// Fill one file per thread ([`fill_file`]) on `threads` threads; a thread that fails
/// reports through `fail` and leaves `None` in its slot.
pub(crate) fn fill_files(
    fs: &std::sync::Arc<Fs>,
    threads: usize,
    per_file: u64,
    seed: u64,
    ops: &Ops,
    fail: &(dyn Fn(String) + Sync),
) -> Vec<Option<Ino>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let fs = fs.clone();
                s.spawn(move || match fill_file(&fs, t, per_file, seed, ops) {
                    Ok(i) => Some(i),
                    Err(e) => {
                        fail(format!("fill (thread {t}): {e}"));
                        None
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().ok().flatten()).collect()
    })
}

pub(crate) fn fill_file(fs: &Fs, t: usize, bytes: u64, seed: u64, ops: &Ops) -> Result<Ino> {
    let name = format!("sustained.{t}");
    let a = fs
        .create(ROOT_INO, name.as_bytes(), 0o644, 0, 0)
        .map_err(|e| anyhow!("create {name}: {e}"))?;
    let buf = pattern(FILL_CHUNK, seed ^ t as u64);
    let mut off = 0;
    while off < bytes {
        let n = (bytes - off).min(FILL_CHUNK as u64) as usize;
        fs.write(a.ino, off, &buf[..n])
            .map_err(|e| anyhow!("write {name} at {off}: {e}"))?;
        off += n as u64;
        ops.add(t, 1);
    }
    fs.fsync(a.ino, false)
        .map_err(|e| anyhow!("fsync {name}: {e}"))?;
    Ok(a.ino)
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    p: &PolicySpec,
    p_threads: usize,
    samples: &[Sample],
    lat: &Lat,
    end: Result<VolumeEnd>,
    fill_bytes: u64,
    fill_s: f64,
    random_bytes: u64,
    random_s: f64,
    aging_s: f64,
) -> SustainedResult {
    let ph = phases(samples);
    let ls = lat.summary();
    let mut r = SustainedResult {
        policy: p.label.clone(),
        app_mib_s_before_gc: ph.app_mib_s_before_gc,
        app_mib_s_during_gc: ph.app_mib_s_during_gc,
        device_mib_s_during_gc: ph.device_mib_s_during_gc,
        device_peak_mib_s: ph.device_peak_mib_s,
        p50_us: ls.p50_us,
        p99_us: ls.p99_us,
        p999_us: ls.p999_us,
        max_us: ls.max_us,
        gc_start_s: ph.gc_start_s,
        fill_bytes,
        fill_s,
        fill_mib_s: fill_bytes as f64 / MIB / fill_s.max(1e-9),
        random_bytes,
        random_s,
        random_mib_s: random_bytes as f64 / MIB / random_s.max(1e-9),
        random_iops: (random_bytes / RAND_BS) as f64 / random_s.max(1e-9),
        phases: ph,
        latency: ls,
        series: rates(samples),
        latency_cdf: lat.cdf(),
        ..Default::default()
    };
    r.lock_waits = LockWait::from_points(flashlog_core::waits::snapshot());
    r.cell_waits_by_holder = flashlog_core::waits::cell_holders()
        .into_iter()
        .map(|(point, holder, wait_s, contended)| LockWait {
            point: format!("{point}<{holder}"),
            wait_s,
            contended,
        })
        .collect();
    // The waits are counted over the whole run (the core's from `waits::reset()` at the top
    // of `run_policy`, the emulator's from mkfs), `--aged`'s unmeasured aging included: so
    // is the thread time they are a share of.
    let thread_s = (p_threads as f64 * (fill_s + aging_s + random_s)).max(1e-9);
    r.core_lock_wait_share = r.lock_waits.iter().map(|w| w.wait_s).sum::<f64>() / thread_s;
    if let Some(ssd) = end.as_ref().ok().and_then(|e| e.ssd.as_ref()) {
        r.device_lock_waits = LockWait::from_points(super::device_lock_waits(&ssd.locks));
        r.device_lock_wait_share = ssd.locks.wait_s() / thread_s;
        if let Ok(e) = &end {
            r.device_engine_busy = ssd.locks.engine.hold_s / e.elapsed_s.max(1e-9);
        }
    }
    match end {
        Ok(e) => {
            let c = &e.counters;
            r.waf = c.write_amplification;
            r.fs_waf = c.fs_write_amplification;
            r.gc_time_s = c.gc_time_s;
            r.stall_time_s = c.stall_time_s;
            r.checkpoint_time_s = c.checkpoint_time_s;
            r.checkpoints = c.checkpoints;
            r.gc_fg_runs = c.gc_fg_runs;
            r.gc_bg_runs = c.gc_bg_runs;
            r.gc_sections_freed = c.gc_sections_freed;
            r.gc_moved_blocks = c.gc_moved_blocks;
            r.ssr_blocks = c.ssr_blocks;
            r.gc_read_blocks = c.gc_read_blocks;
            r.gc_false_positive_reads = c.gc_skipped_blocks;
            r.peak_rss_mib = e.peak_rss_mib;
            r.cpu_s = e.cpu_s;
            r.error = e.problem();
            r.end = Some(e);
        }
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    r
}

fn pct(f: f64) -> String {
    if f > 0.0 {
        format!("{:.0}%", 100.0 * f)
    } else {
        "-".into()
    }
}

pub fn build_report(
    ctx: &Ctx,
    name: &str,
    results: Vec<SustainedResult>,
    raw: f64,
) -> Result<Report> {
    let out = &ctx.args.out;
    let mut rep = Report::new(name, out, ctx.config_json());
    let mut t = Table::new(&[
        "policy",
        "before GC MiB/s",
        "during GC MiB/s",
        "dev MiB/s (GC)",
        "dev peak",
        "WAF",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "GC fg/bg",
        "GC s",
        "stall s",
        "CP s",
        "CPU s",
        "RSS MiB",
    ]);
    for r in &results {
        t.row(vec![
            r.policy.clone(),
            // --aged: the measured phase is all during cleaning; nothing of it is before.
            if ctx.args.aged {
                "-".into()
            } else {
                num(r.app_mib_s_before_gc)
            },
            if r.gc_start_s.is_some() {
                num(r.app_mib_s_during_gc)
            } else {
                "no GC".into()
            },
            num(r.device_mib_s_during_gc),
            num(r.device_peak_mib_s),
            num(r.waf),
            num(r.p50_us),
            num(r.p99_us),
            num(r.p999_us),
            num(r.max_us),
            format!("{}/{}", r.gc_fg_runs, r.gc_bg_runs),
            num(r.gc_time_s),
            num(r.stall_time_s),
            num(r.checkpoint_time_s),
            num(r.cpu_s),
            num(r.peak_rss_mib),
        ]);
    }
    rep.section(
        &format!(
            "sustained random write, {} threads, {}, {} MiB sections",
            ctx.args.threads,
            ctx.device.describe(),
            2 * ctx.segs_per_sec
        ),
        t.render(),
    );
    let mut t2 = Table::new(&[
        "policy",
        "fill MiB",
        "fill MiB/s",
        "vs raw",
        "random MiB",
        "random s",
        "rand MiB/s",
        "IOPS",
        "GC starts s",
        "sections freed",
        "moved blocks",
        "SSR blocks",
        "NAND WAF",
        "total WAF",
        "records KiB/GiB",
    ]);
    for r in &results {
        t2.row(vec![
            r.policy.clone(),
            num(r.fill_bytes as f64 / MIB),
            num(r.fill_mib_s),
            format!("{:.0}%", 100.0 * r.fill_mib_s / raw.max(1e-9)),
            num(r.random_bytes as f64 / MIB),
            num(r.random_s),
            num(r.random_mib_s),
            num(r.random_iops),
            r.gc_start_s.map_or("-".into(), num),
            r.gc_sections_freed.to_string(),
            r.gc_moved_blocks.to_string(),
            r.ssr_blocks.to_string(),
            r.end
                .as_ref()
                .and_then(|e| e.ssd.as_ref())
                .map_or("-".into(), |s| num(s.nand_waf)),
            // File-system WAF times the device's: NAND programs per application byte.
            r.end
                .as_ref()
                .and_then(|e| e.ssd.as_ref())
                .map_or("-".into(), |s| num(s.nand_waf * r.waf)),
            r.end
                .as_ref()
                .and_then(|e| e.ssd.as_ref())
                .filter(|s| s.migration_records_peak > 0)
                .map_or("-".into(), |s| num(s.migration_record_peak_kib_per_gib)),
        ]);
    }
    let mut t3 = Table::new(&[
        "policy",
        "GC read blocks",
        "false positives",
        "WAF (cleaning)",
        "die busy",
        "dev GC",
        "die-bound MiB/s",
        "lock waits (s, contended acquisitions)",
        "fs wait % thr",
        "device lock waits",
        "dev wait % thr",
        "dev lock busy",
    ]);
    for r in &results {
        let waits: Vec<String> = r
            .lock_waits
            .iter()
            .filter(|w| w.contended > 0)
            .map(|w| format!("{} {:.3}s/{}", w.point, w.wait_s, w.contended))
            .collect();
        let dwaits: Vec<String> = r
            .device_lock_waits
            .iter()
            .filter(|w| w.contended > 0)
            .map(|w| format!("{} {:.3}s/{}", w.point, w.wait_s, w.contended))
            .collect();
        t3.row(vec![
            r.policy.clone(),
            r.gc_read_blocks.to_string(),
            r.gc_false_positive_reads.to_string(),
            num(r.phases.waf_during_gc),
            pct(r.phases.die_util_during_gc),
            pct(r.phases.die_gc_util_during_gc),
            if r.phases.die_util_during_gc > 0.0 {
                num(r.app_mib_s_during_gc / r.phases.die_util_during_gc)
            } else {
                "-".into()
            },
            if waits.is_empty() {
                "-".into()
            } else {
                waits.join(", ")
            },
            format!("{:.2}%", 100.0 * r.core_lock_wait_share),
            if dwaits.is_empty() {
                "-".into()
            } else {
                dwaits.join(", ")
            },
            format!("{:.2}%", 100.0 * r.device_lock_wait_share),
            format!("{:.1}%", 100.0 * r.device_engine_busy),
        ]);
    }
    let mut body = t3.render();
    for r in &results {
        if !r.cell_waits_by_holder.is_empty() {
            let w: Vec<String> = r
                .cell_waits_by_holder
                .iter()
                .map(|w| format!("{} {:.3}s/{}", w.point, w.wait_s, w.contended))
                .collect();
            body += &format!("{} file-cell waits by holder: {}\n", r.policy, w.join(", "));
        }
    }
    body += "WAF (cleaning): device blocks / data blocks written after cleaning started (--aged: \
             in the measured phase). die busy: the emulated dies' busy time after cleaning \
             started (host requests and device GC), of which dev GC is the SSD's own GC. \
             die-bound: the application bandwidth if the dies were busy all the time with the \
             same work per application byte. % thr: lock wait as a share of thread time \
             (threads x (fill + aging + random) seconds, the run the waits are counted over), \
             for the file system's points and for the emulated SSD's own locks (ssd_engine: \
             the FTL and timing state; ssd_recorder: latency statistics; ssd_store: page \
             contents). dev lock busy: the share of the run the emulator's engine lock was \
             held (near 100 % the device model itself would be the bound). file-cell waits by \
             holder: each file-cell point (file_cell: application operations; _gc, \
             _checkpoint (with its pre-pass), _flusher) by the role that held the cell \
             (app, gc, checkpoint, flusher, prepass, inline: a writer's last-resort \
             write-back, discard: a policy's discard or upcall thread).\n";
    rep.section("cleaning detail", body);
    let mut body = t2.render();
    body += &format!(
        "raw device sequential write: {raw:.0} MiB/s; target: in-process sequential write (fill) >= 80 % of it\n"
    );
    for r in &results {
        if let Some(e) = &r.error {
            body += &format!("{}: ERROR {e}\n", r.policy);
        }
    }
    if ctx.args.aged {
        for r in &results {
            body += &format!(
                "{}: aged with {:.0} MiB of unmeasured random writes in {:.1} s (cleaning {}); measured from t = {:.1} s\n",
                r.policy,
                r.aging_bytes as f64 / MIB,
                r.aging_s,
                if r.aging_cleaning_started { "started" } else { "had NOT started" },
                r.measured_from_s
            );
        }
    }
    rep.section("phases", body);
    memory_section(ctx, &mut rep, &results)?;

    // Plots.
    let series = |f: fn(&Rate) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        results
            .iter()
            .map(|r| {
                (
                    r.policy.clone(),
                    r.series.iter().map(|x| (x.t_s, f(x))).collect(),
                )
            })
            .collect()
    };
    let title = format!(
        "sustained 4 KiB random write, {} thr, {}",
        ctx.args.threads,
        ctx.device.describe()
    );
    rep.plots.extend(line_plot(
        out,
        "bandwidth_app",
        &Lines {
            title: &format!("{title}: application"),
            x_desc: "time (s)",
            y_desc: "application write MiB/s",
            series: &series(|r| r.app_write_mib_s),
            log_x: false,
            points: false,
        },
    )?);
    rep.plots.extend(line_plot(
        out,
        "bandwidth_device",
        &Lines {
            title: &format!("{title}: device (read + write)"),
            x_desc: "time (s)",
            y_desc: "device MiB/s",
            series: &series(|r| r.dev_read_mib_s + r.dev_write_mib_s),
            log_x: false,
            points: false,
        },
    )?);
    let cdf: Vec<(String, Vec<(f64, f64)>)> = results
        .iter()
        .map(|r| (r.policy.clone(), r.latency_cdf.clone()))
        .collect();
    rep.plots.extend(line_plot(
        out,
        "latency_cdf",
        &Lines {
            title: "4 KiB random write latency CDF",
            x_desc: "latency (us, log)",
            y_desc: "cumulative fraction",
            series: &cdf,
            log_x: true,
            points: false,
        },
    )?);
    let groups = vec!["file system WAF".to_string(), "NAND WAF".to_string()];
    let waf: Vec<(String, Vec<f64>)> = results
        .iter()
        .map(|r| {
            let nand = r
                .end
                .as_ref()
                .and_then(|e| e.ssd.as_ref())
                .map_or(0.0, |s| s.nand_waf);
            (r.policy.clone(), vec![r.waf, nand])
        })
        .collect();
    rep.plots.extend(bar_plot(
        out,
        "waf",
        &Bars {
            title: "write amplification",
            y_desc: "bytes written / bytes asked",
            groups: &groups,
            series: &waf,
        },
    )?);
    let groups = vec!["GC time".to_string(), "application stall".to_string()];
    let gct: Vec<(String, Vec<f64>)> = results
        .iter()
        .map(|r| (r.policy.clone(), vec![r.gc_time_s, r.stall_time_s]))
        .collect();
    rep.plots.extend(bar_plot(
        out,
        "gc_time",
        &Bars {
            title: "cleaning time and application stall time",
            y_desc: "seconds",
            groups: &groups,
            series: &gct,
        },
    )?);
    rep.extra
        .insert("raw_device_write_mib_s".into(), json!(raw));
    rep.extra.insert(
        "targets".into(),
        json!(results
            .iter()
            .map(|r| json!({
                "policy": r.policy,
                "inproc_seq_write_vs_raw": r.fill_mib_s / raw.max(1e-9),
                "inproc_seq_write_target_met": r.fill_mib_s >= 0.8 * raw,
            }))
            .collect::<Vec<_>>()),
    );
    // ScaleLFS targets (issue 8): every scale row against the f2fs and f2fs-lfs rows.
    let by = |name: &str| {
        results
            .iter()
            .find(|r| r.policy == name && r.error.is_none())
    };
    let scale_targets: Vec<_> = results
        .iter()
        .filter(|r| r.policy.starts_with("scale") && r.error.is_none())
        .map(|r| {
            // A policy that never cleaned is compared by its random phase's MiB/s, as in
            // `ftl_targets`; a WAF while cleaning it does not have (null).
            let vs = |base: Option<&SustainedResult>| {
                base.map(|b| {
                    json!({
                        "policy": b.policy,
                        "throughput_during_gc_ratio":
                            ratio(during_gc_mib_s(r), during_gc_mib_s(b)),
                        "waf_during_gc_ratio":
                            ratio(r.phases.waf_during_gc, b.phases.waf_during_gc),
                    })
                })
            };
            json!({
                "policy": r.policy,
                "vs_f2fs": vs(by("f2fs")),
                "vs_f2fs_lfs": vs(by("f2fs-lfs")),
                "device_bw_during_gc_vs_peak": r.device_mib_s_during_gc / raw.max(1e-9),
                "die_utilisation_during_gc": r.phases.die_util_during_gc,
            })
        })
        .collect();
    rep.extra
        .insert("scale_targets".into(), json!(scale_targets));
    rep.extra
        .insert("ftl_targets".into(), ftl_targets(&results));
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}

/// The "FTL memory" section (D2FS Table 1, IPLFS targets) and the memory-over-time plots, for
/// the policies that ran on the emulator.
fn memory_section(ctx: &Ctx, rep: &mut Report, results: &[SustainedResult]) -> Result<()> {
    let with: Vec<&SustainedResult> = results.iter().filter(|r| r.memory.is_some()).collect();
    if with.is_empty() {
        return Ok(());
    }
    let mut t = Table::new(&[
        "policy",
        "FTL",
        "map MiB (end)",
        "peak",
        "page map of live MiB",
        "x live",
        "after compaction x live",
        "flat touched MiB",
        "flat / map",
        "compactions",
        "compaction ms",
        "records peak KiB",
        "KiB/GiB",
    ]);
    let mib = |b: u64| num(b as f64 / MIB);
    for r in &with {
        let m = r.memory.as_ref().expect("filtered");
        t.row(vec![
            r.policy.clone(),
            m.ftl.clone(),
            mib(m.mapping_bytes_end),
            mib(m.mapping_bytes_peak),
            mib(m.page_map_live_bytes),
            num(m.vs_page_map_live),
            m.after_compaction_vs_page_map_live.map_or("-".into(), num),
            if m.flat_touched_bytes > 0 {
                mib(m.flat_touched_bytes)
            } else {
                "-".into()
            },
            m.flat_touched_over_mapping.map_or("-".into(), num),
            m.compaction_runs.to_string(),
            num(m.compaction_busy_ms),
            num(m.record_bytes_peak as f64 / 1024.0),
            num(m.record_kib_per_gib_peak),
        ]);
    }
    let mut body = t.render();
    let cap = with
        .iter()
        .filter_map(|r| r.memory.as_ref())
        .map(|m| m.page_map_capacity_bytes)
        .max()
        .unwrap_or(0);
    body += &format!(
        "map: the FTL's modelled mapping DRAM (docs/EMULATOR.md); page map of live: 4 B per valid \
         block on flash at the end (what a page-mapping FTL needs for the same live data; the \
         page FTL allocates 4 B per block of the whole device: {} MiB here); x live: map / that; \
         after compaction: the map as the interval FTL's last compaction run left it, over a page map of the live data then; \
         flat touched: a flat map (4 B per block) of the range each log ever wrote (IPLFS's \
         infinite space); records: outstanding D2FS migration records (24 B each).\n",
        num(cap as f64 / MIB)
    );
    rep.section("FTL memory (D2FS Table 1, IPLFS)", body);
    let out = &ctx.args.out;
    let mut series: Vec<(String, Vec<(f64, f64)>)> = with
        .iter()
        .map(|r| {
            (
                r.policy.clone(),
                r.gauges
                    .iter()
                    .map(|g| (g.t_s, g.mapping_bytes as f64 / MIB))
                    .collect(),
            )
        })
        .collect();
    if let Some(r) = with.iter().find(|r| r.ftl == "interval") {
        series.push((
            format!("page map of {}'s live data", r.policy),
            r.gauges
                .iter()
                .map(|g| (g.t_s, g.page_map_for_live() as f64 / MIB))
                .collect(),
        ));
    }
    rep.plots.extend(line_plot(
        out,
        "ftl_memory",
        &Lines {
            title: "FTL mapping memory over time",
            x_desc: "time (s)",
            y_desc: "mapping MiB (modelled device DRAM)",
            series: &series,
            log_x: false,
            points: false,
        },
    )?);
    let rec: Vec<(String, Vec<(f64, f64)>)> = with
        .iter()
        .filter(|r| r.gauges.iter().any(|g| g.upcalls_sent > 0))
        .map(|r| {
            (
                r.policy.clone(),
                r.gauges
                    .iter()
                    .map(|g| (g.t_s, g.record_bytes as f64 / 1024.0))
                    .collect(),
            )
        })
        .collect();
    if !rec.is_empty() {
        rep.plots.extend(line_plot(
            out,
            "migration_records",
            &Lines {
                title: "D2FS migration-record buffer over time (Fig. 17)",
                x_desc: "time (s)",
                y_desc: "outstanding records KiB",
                series: &rec,
                log_x: false,
                points: false,
            },
        )?);
        let rate: Vec<(String, Vec<(f64, f64)>)> = with
            .iter()
            .filter(|r| r.gauges.iter().any(|g| g.upcalls_sent > 0))
            .map(|r| {
                (
                    r.policy.clone(),
                    r.gauges
                        .windows(2)
                        .filter(|w| w[1].t_s > w[0].t_s)
                        .map(|w| {
                            (
                                w[1].t_s,
                                (w[1].upcalls_sent - w[0].upcalls_sent) as f64
                                    / (w[1].t_s - w[0].t_s),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        rep.plots.extend(line_plot(
            out,
            "upcall_rate",
            &Lines {
                title: "D2FS upcalls sent per second (Fig. 17)",
                x_desc: "time (s)",
                y_desc: "upcalls/s",
                series: &rate,
                log_x: false,
                points: false,
            },
        )?);
    }
    Ok(())
}

/// Application MiB/s while cleaning, or the random phase's for a policy that never cleaned
/// (the throughput the ratios between policies compare).
fn during_gc_mib_s(r: &SustainedResult) -> f64 {
    if r.gc_start_s.is_some() {
        r.app_mib_s_during_gc
    } else {
        r.random_mib_s
    }
}

/// `a / b`, or None (null in the JSON) when `b` is not a positive number: a ratio to a
/// quantity the run did not measure.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a.is_finite()).then(|| a / b)
}

/// The D2FS and IPLFS targets as ratios of this run (issues 14 and 15), where the policies
/// they compare ran.
fn ftl_targets(results: &[SustainedResult]) -> serde_json::Value {
    let ok = |name: &str| {
        results
            .iter()
            .find(|r| r.policy == name && r.error.is_none())
    };
    let total_waf = |r: &SustainedResult| {
        r.end
            .as_ref()
            .and_then(|e| e.ssd.as_ref())
            .map(|s| s.nand_waf * r.waf)
    };
    let mut v = serde_json::Map::new();
    if let (Some(d), Some(f)) = (ok("device"), ok("f2fs")) {
        v.insert(
            "device_vs_f2fs_throughput".into(),
            json!(ratio(during_gc_mib_s(d), during_gc_mib_s(f))),
        );
        v.insert(
            "device_total_waf_vs_f2fs".into(),
            json!([total_waf(d), total_waf(f)]),
        );
    }
    if let (Some(d), Some(z)) = (ok("device"), ok("zf2fs")) {
        v.insert(
            "device_vs_zf2fs_throughput".into(),
            json!(ratio(during_gc_mib_s(d), during_gc_mib_s(z))),
        );
    }
    if let Some(d) = ok("device").and_then(|r| r.memory.as_ref()) {
        v.insert(
            "device_record_kib_per_gib_peak".into(),
            json!(d.record_kib_per_gib_peak),
        );
    }
    if let (Some(n), Some(f)) = (ok("none"), ok("f2fs")) {
        v.insert(
            "none_vs_f2fs_throughput".into(),
            json!(ratio(during_gc_mib_s(n), during_gc_mib_s(f))),
        );
    }
    for r in results.iter().filter(|r| r.ftl == "interval") {
        if let Some(m) = &r.memory {
            v.insert(
                format!("{}_mapping", r.policy),
                json!({
                    "after_compaction_vs_page_map_live": m.after_compaction_vs_page_map_live,
                    "end_vs_page_map_live": m.vs_page_map_live,
                    "flat_touched_over_mapping": m.flat_touched_over_mapping,
                    "target_after_compaction_le_1_2x": m.after_compaction_vs_page_map_live.map(|x| x <= 1.2),
                    "target_flat_ge_10x": m.flat_touched_over_mapping.map(|x| x >= 10.0),
                }),
            );
        }
    }
    serde_json::Value::Object(v)
}
