//! Checks of the bench's metrics and options against known inputs: each metric is computed
//! as its name and docs/BENCHMARKS.md say. Latency percentiles; rates, the before/during
//! cleaning split, WAF while cleaning and die utilisation; the sampler's intervals and the
//! peak bandwidth; ycsb's timeline (per-bucket rate and p99); `--aged` runs (every
//! "during cleaning" field over the measured phase, lock-wait shares over the same window
//! as the waits); the migration records per GiB of device; the ratios between policies
//! (`scale_targets`); and the refusal of device options that cannot apply (`--ssd-set`
//! off the emulator, an unknown `--clock`, a device larger than the RAM available).
//!
//! Started as the review of 2026-11-27: its failing checks are the regression tests of the
//! fixes (each named for the behaviour it expects).

use flashlog_bench::device::DeviceSpec;
use flashlog_bench::exp::sustained::run_policy;
use flashlog_bench::metrics::{phases, rates, Lat, Sample, Timeline};
use flashlog_bench::{default_main_job, BenchArgs, Ctx, Experiment};
use std::time::{Duration, Instant};

/// A tiny emulated SSD on the virtual clock, as the library's own tests use.
fn tiny_ssd_args(policies: &str) -> BenchArgs {
    let mut a = default_main_job();
    a.experiment = Experiment::Sustained;
    a.device = "970pro-like:256MiB".into();
    a.clock = "virtual".into();
    a.threads = 2;
    a.duration = 1.0;
    a.fill = 0.8;
    a.write_factor = 0.5;
    a.sample_ms = 20;
    a.aging_max = 20.0;
    a.quiet = true;
    a.policies = Some(policies.into());
    a.out = std::env::temp_dir().join(format!("flashlog-review-{}", std::process::id()));
    a
}

// ---------------------------------------------------------------------------------------
// Latency percentiles (hdrhistogram, 3 significant digits).

fn lat_of(values_ns: impl IntoIterator<Item = u64>) -> Lat {
    let mut l = Lat::default();
    for v in values_ns {
        l.0.record(v).unwrap();
    }
    l
}

#[test]
fn latency_percentiles_match_exact_ranks() {
    // 1..=1000 us, one each: p50 = 500 us, p99 = 990 us, p99.9 = 999 us, max 1000 us,
    // mean 500.5 us (3 significant digits: within 0.1 %).
    let l = lat_of((1..=1000u64).map(|i| i * 1000));
    let s = l.summary();
    let close = |got: f64, want: f64| (got - want).abs() <= want * 1e-3 + 1e-9;
    assert_eq!(s.count, 1000);
    assert!(close(s.p50_us, 500.0), "p50 {}", s.p50_us);
    assert!(close(s.p99_us, 990.0), "p99 {}", s.p99_us);
    assert!(close(s.p999_us, 999.0), "p99.9 {}", s.p999_us);
    assert!(close(s.max_us, 1000.0), "max {}", s.max_us);
    assert!(close(s.mean_us, 500.5), "mean {}", s.mean_us);
    // Merging per-thread histograms is the same as one histogram of everything.
    let mut a = lat_of((1..=500u64).map(|i| i * 1000));
    a.merge(&lat_of((501..=1000u64).map(|i| i * 1000)));
    let m = a.summary();
    assert_eq!(m.count, 1000);
    assert_eq!(m.p99_us, s.p99_us);
    assert_eq!(m.p999_us, s.p999_us);
    // The rank boundary: 990 fast + 10 slow -> p99 is fast; 989 + 11 -> p99 is slow.
    let p99 = |slow: u64| {
        lat_of((0..1000u64).map(|i| if i < 1000 - slow { 5_000 } else { 9_000_000 }))
            .summary()
            .p99_us
    };
    assert!(p99(10) < 10.0, "{}", p99(10));
    assert!(p99(11) > 8_000.0, "{}", p99(11));
    // An empty histogram reports zeros, not garbage.
    assert_eq!(Lat::default().summary().count, 0);
    // The CDF ends at the max and is monotonic.
    let cdf = l.cdf();
    assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    assert!((cdf.last().unwrap().0 - 1000.0).abs() < 1.0);
}

// ---------------------------------------------------------------------------------------
// Rates, phases, WAF while cleaning, die utilisation.

#[test]
fn phases_use_the_right_windows_and_units() {
    let mib = 1u64 << 20;
    let mk = |t: f64, app: u64, dr: u64, dw: u64, gc: u64, data: u64, devw: u64| Sample {
        t_s: t,
        app_write_bytes: app * mib,
        dev_read_bytes: dr * mib,
        dev_write_bytes: dw * mib,
        gc_runs: gc,
        data_blocks: data,
        dev_write_blocks: devw,
        ops: app,
        ..Default::default()
    };
    // 0-2 s: 400 MiB app, 400 MiB dev writes, no GC; GC first seen at 2 s; 2-6 s: 80 MiB
    // app, 120 MiB dev reads + 200 MiB dev writes; data 1000 -> 1500 blocks, device
    // blocks 1000 -> 3000 blocks.
    let s = vec![
        mk(0.0, 0, 0, 0, 0, 0, 0),
        mk(1.0, 200, 0, 200, 0, 500, 500),
        mk(2.0, 400, 0, 400, 1, 1000, 1000),
        mk(4.0, 440, 60, 500, 3, 1250, 2000),
        mk(6.0, 480, 120, 600, 4, 1500, 3000),
    ];
    let p = phases(&s);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert_eq!(p.gc_start_s, Some(2.0));
    assert!(close(p.app_mib_s_before_gc, 200.0));
    assert!(close(p.device_mib_s_before_gc, 200.0));
    assert!(close(p.app_mib_s_during_gc, 20.0));
    assert!(close(p.device_mib_s_during_gc, (120.0 + 200.0) / 4.0));
    assert!(close(p.ops_s_during_gc, 20.0));
    assert!(close(p.waf_during_gc, 2000.0 / 500.0));
    // Peak over one interval: 2-4 s moves 60 + 100 MiB in 2 s = 80; 0-1 s: 200.
    assert!(close(p.device_peak_mib_s, 200.0));
    let r = rates(&s);
    assert_eq!(r.len(), 4);
    assert!(close(r[2].dev_read_mib_s, 30.0) && close(r[2].dev_write_mib_s, 50.0));
    assert!(!r[0].gc_active && r[1].gc_active);
    // A repeated timestamp (the final sample taken at once) is skipped, not divided by 0.
    let mut s2 = s.clone();
    s2.push(s[4]);
    assert_eq!(rates(&s2).len(), 4);
    assert!(phases(&s2).device_peak_mib_s.is_finite());
}

// ---------------------------------------------------------------------------------------
// The sampler's intervals.

/// After one late sample (the probe blocked on a lock, or the sampler thread was not
/// scheduled for a while, as on the 2-core machine of every published number), the sampler
/// skips the missed ticks. It used to take them back to back (`next += interval` until it
/// caught up), so the series got samples microseconds apart. `rates()` turned each of those
/// into a bandwidth point over a microsecond window, and `device_peak_mib_s` ("largest
/// device read plus write bandwidth over one sample interval") took the max over them: one
/// 256 KiB request completing between two such samples read as tens of GiB/s.
///
/// Known answer: with a 20 ms interval, consecutive samples must be about 20 ms apart
/// (at least half of it), however late one of them was.
#[test]
fn sampler_skips_missed_ticks_after_a_late_sample() {
    use flashlog_bench::metrics::Sampler;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let t0 = Instant::now();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let interval = Duration::from_millis(20);
    let take = move || {
        // The second sample (the sampler thread's first) is 200 ms late.
        if c.fetch_add(1, Ordering::SeqCst) == 1 {
            std::thread::sleep(Duration::from_millis(200));
        }
        t0.elapsed().as_secs_f64()
    };
    let s = Sampler::every("review-sampler", interval, take, |_: &f64| {});
    std::thread::sleep(Duration::from_millis(400));
    let ts = s.finish();
    // The last sample is the one `finish` takes at once: leave it out.
    let gaps: Vec<f64> = ts[..ts.len() - 1].windows(2).map(|w| w[1] - w[0]).collect();
    let min_gap = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        min_gap >= interval.as_secs_f64() / 2.0,
        "samples {:.3} ms apart with a {:?} interval (gaps ms: {:?})",
        min_gap * 1e3,
        interval,
        gaps.iter()
            .map(|g| (g * 1e4).round() / 10.0)
            .collect::<Vec<_>>()
    );
}

/// A window shorter than half the series' interval (the final sample `Sampler::finish` takes
/// at once, microseconds after the last tick) is no bandwidth point and no peak: the next
/// window starts from the last sample used.
///
/// Known answer: samples every second moving 100 MiB each, then one 1 MiB request 10 us
/// later: the peak is 100 MiB/s (not 100,000), and the series has one point per second.
#[test]
fn rates_and_peak_skip_a_window_shorter_than_half_the_interval() {
    let mib = 1u64 << 20;
    let mk = |t: f64, w: u64| Sample {
        t_s: t,
        dev_write_bytes: w * mib,
        ..Default::default()
    };
    let s = vec![
        mk(0.0, 0),
        mk(1.0, 100),
        mk(2.0, 200),
        mk(3.0, 300),
        mk(3.00001, 301),
    ];
    let r = rates(&s);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(
        r.iter().all(|x| (x.dev_write_mib_s - 100.0).abs() < 1e-9),
        "{r:?}"
    );
    let p = phases(&s);
    assert!(
        (p.device_peak_mib_s - 100.0).abs() < 1e-9,
        "peak {} MiB/s",
        p.device_peak_mib_s
    );
    // A short window in the middle: the next point spans from the last sample used.
    let s = vec![
        mk(0.0, 0),
        mk(1.0, 100),
        mk(1.0001, 101),
        mk(2.0, 200),
        mk(3.0, 300),
    ];
    let r = rates(&s);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(
        r.iter().all(|x| (x.dev_write_mib_s - 100.0).abs() < 1e-9),
        "{r:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Timeline (ycsb's per-bucket throughput and p99).

#[test]
fn timeline_p99_rank_and_bins() {
    // 1000 operations in one bucket: 990 at ~10 us and 10 at ~50 ms: p99 is the 990th
    // value (fast); with 11 slow ones it is slow (the rank is ceil(0.99 n), no off-by-one).
    // Bins are upper bounds within 25 %.
    let run = |slow: usize| {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Duration::from_secs(3600));
        for i in 0..1000 {
            let lat = if i < 1000 - slow {
                Duration::from_micros(10)
            } else {
                Duration::from_millis(50)
            };
            t.record(Instant::now() - lat);
        }
        t.points(0.0, t0.elapsed().as_secs_f64())[0]
    };
    let p = run(10);
    assert_eq!(p.ops, 1000);
    // (A loaded machine may stretch a "10 us" operation: only the side of 1 ms matters.)
    assert!(p.p99_us >= 10.0 && p.p99_us < 1_000.0, "{p:?}");
    assert!(p.max_us >= 50_000.0 && p.max_us <= 62_500.0, "{p:?}");
    let p = run(11);
    assert!(p.p99_us >= 50_000.0, "{p:?}");
}

/// A bucket's rate is its operations over the part of the bucket the workload covered.
/// ycsb's timelines (`points(start_s, end_s)`) start and end mid-bucket: the workload's
/// first bucket began before it started and its last one ends after it stopped. Dividing by
/// the whole bucket length made the first and last `ops_s` of every workload low by the
/// fraction of the bucket it did not run (the plots and JSON `timeline` showed a dip at each
/// end that did not happen).
///
/// Known answer: 1 s buckets; a workload from 0.75 s to now (~1.5 s) did 250 operations in
/// bucket 0 (0.25 s of it) and 500 in bucket 1 (~0.5 s of it): 1000 ops/s in both, where the
/// whole-bucket division reported 250 and 500.
#[test]
fn timeline_partial_bucket_rate_divides_by_the_covered_part() {
    let bucket = Duration::from_secs(1);
    // The policy's clock started 1.5 s ago: bucket 1 is [1, 2) s. Operations recorded now
    // land in bucket 1; those of a timeline whose clock started 0.5 s ago land in bucket 0
    // (`merge` adds buckets by index).
    let t_start = Instant::now() - Duration::from_millis(1500);
    let start_s = 0.75;
    let mut t = Timeline::new(t_start, bucket);
    for _ in 0..500 {
        t.record(Instant::now());
    }
    let mut early = Timeline::new(Instant::now() - Duration::from_millis(500), bucket);
    for _ in 0..250 {
        early.record(Instant::now());
    }
    t.merge(&early);
    // The workload stops now; the timeline is read as ycsb reads it.
    let end_s = t_start.elapsed().as_secs_f64();
    let pts = t.points(start_s, end_s);
    assert_eq!(pts.len(), 2, "{pts:?}");
    assert_eq!((pts[0].ops, pts[1].ops), (250, 500));
    for (p, covered) in pts.iter().zip([1.0 - start_s, end_s - 1.0]) {
        let true_rate = p.ops as f64 / covered;
        assert!(
            (p.ops_s - true_rate).abs() < true_rate * 1e-9,
            "a bucket the workload covered {:.0} ms of reports {} ops/s; it ran at \
             {true_rate:.0} ops/s ({pts:?})",
            covered * 1e3,
            p.ops_s
        );
    }
    assert!((pts[0].ops_s - 1000.0).abs() < 1.0, "{pts:?}");
    // The last point ends with the window, not after it.
    assert_eq!(pts[1].t_s, end_s);
    // Buckets outside the window give no points.
    assert!(t.points(2.0, 5.0).is_empty());
    assert_eq!(t.points(0.0, 0.5).len(), 1);
}

// ---------------------------------------------------------------------------------------
// Whole-run checks on a tiny emulated SSD (virtual clock, a few seconds each).

/// With `--aged` the whole measured phase is "during cleaning", for every window field:
/// `phases.waf_during_gc`, `die_util_during_gc` and `ops_s_during_gc` cover the measured
/// phase's first to last sample, as the MiB/s do. They used to stay computed from the first
/// *host* cleaning run seen inside the measured phase: `none` never cleans on the host (its
/// cleaning is the device's), so its "WAF (cleaning)" column read 0 and "die busy" /
/// "die-bound" read "-" although the measured phase wrote data and the dies were busy
/// throughout it.
#[test]
fn aged_measured_phase_is_cleaning_for_every_window_field() {
    let mut a = tiny_ssd_args("none");
    a.aged = true;
    let ctx = Ctx::new(&a).expect("ctx");
    let r = run_policy(&ctx, &ctx.policies[0]).expect("run");
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.aging_cleaning_started, "aging did not start cleaning");
    assert!(r.gc_start_s.is_some());
    assert!(r.app_mib_s_during_gc > 0.0, "{}", r.app_mib_s_during_gc);
    assert!(
        r.random_bytes > 0 && r.fs_waf > 0.0,
        "{} {}",
        r.random_bytes,
        r.fs_waf
    );
    assert!(
        r.phases.waf_during_gc > 0.0
            && r.phases.die_util_during_gc > 0.0
            && r.phases.ops_s_during_gc > 0.0,
        "measured (aged, all-cleaning) phase: {:.0} MiB/s written, but WAF (cleaning) = {}, \
         die busy during cleaning = {}, ops/s during cleaning = {}",
        r.app_mib_s_during_gc,
        r.phases.waf_during_gc,
        r.phases.die_util_during_gc,
        r.phases.ops_s_during_gc
    );
    // Nothing of the measured phase is "before cleaning"; the split is at its start.
    assert_eq!(r.phases.gc_start_s, Some(r.measured_from_s));
    assert_eq!(r.app_mib_s_before_gc, 0.0);
}

/// The sustained table's `records KiB/GiB` (SsdSummary::migration_record_peak_kib_per_gib)
/// divides the records' peak by the `--device` size, as the FTL-memory table's `KiB/GiB`
/// (MemorySummary::record_kib_per_gib_peak) and docs/BENCHMARKS.md do. It used to divide by
/// the coupled FTL's GC region: the same peak got two different per-GiB figures in one
/// report.
#[test]
fn records_per_gib_divides_by_the_device_size() {
    let a = tiny_ssd_args("device");
    let ctx = Ctx::new(&a).expect("ctx");
    let r = run_policy(&ctx, &ctx.policies[0]).expect("run");
    assert!(r.error.is_none(), "{:?}", r.error);
    let ssd = r.end.as_ref().and_then(|e| e.ssd.as_ref()).expect("ssd");
    assert!(
        ssd.migration_records_peak > 0,
        "no migration records in the run"
    );
    let device_gib = (256u64 << 20) as f64 / (1u64 << 30) as f64;
    let want = (ssd.migration_records_peak * flashlog_ssd::ftl::coupled::RECORD_BYTES) as f64
        / 1024.0
        / device_gib;
    assert!(
        (ssd.migration_record_peak_kib_per_gib - want).abs() < want * 1e-6,
        "records KiB/GiB: {} (peak {} records); per GiB of the 256 MiB device it is {want}",
        ssd.migration_record_peak_kib_per_gib,
        ssd.migration_records_peak
    );
}

// ---------------------------------------------------------------------------------------
// Ratios between policies (report.json `scale_targets`).

/// `scale_targets.vs_f2fs.throughput_during_gc_ratio` compares a policy that never cleaned
/// in the run (a short run, or f2fs's SSR keeping it out of cleaning) by its random phase's
/// MiB/s, as `ftl_targets` does; `waf_during_gc_ratio` is null when either side has no WAF
/// while cleaning. Both used to divide by the base's field clamped to 1e-9: the JSON
/// reported the scale row as ~1e10 times f2fs, or 0x when the scale row did not clean.
///
/// Known answer: f2fs never cleaned (random phase 100 MiB/s), scale cleaned at 50 MiB/s
/// (WAF while cleaning 2): throughput ratio 0.5, WAF ratio null; never 5e10.
#[test]
fn scale_target_ratio_uses_the_random_phase_of_a_policy_that_never_cleaned() {
    use flashlog_bench::exp::sustained::{build_report, SustainedResult};
    let mut a = default_main_job();
    a.device = "ram:96MiB".into();
    a.policies = Some("f2fs,f2fs-lfs,scale".into());
    a.quiet = true;
    a.out = std::env::temp_dir().join(format!("flashlog-review-ratio-{}", std::process::id()));
    std::fs::create_dir_all(&a.out).unwrap();
    let ctx = Ctx::new(&a).expect("ctx");
    let row = |policy: &str, gc: Option<f64>, during: f64, random: f64, waf: f64| {
        let mut r = SustainedResult {
            policy: policy.into(),
            gc_start_s: gc,
            app_mib_s_during_gc: during,
            random_mib_s: random,
            latency_cdf: vec![(1.0, 0.5), (2.0, 1.0)],
            ..Default::default()
        };
        r.phases.waf_during_gc = waf;
        r
    };
    let results = vec![
        row("f2fs", None, 0.0, 100.0, 0.0),
        // f2fs-lfs cleaned; it wrote nothing while cleaning.
        row("f2fs-lfs", Some(1.0), 0.0, 0.0, 0.0),
        row("scale", Some(1.0), 50.0, 60.0, 2.0),
    ];
    let rep = build_report(&ctx, "sustained", results, 1000.0).expect("report");
    let _ = std::fs::remove_dir_all(&a.out);
    let vs = &rep.extra["scale_targets"][0]["vs_f2fs"];
    let ratio = &vs["throughput_during_gc_ratio"];
    assert!(
        ratio.as_f64().is_some_and(|x| (x - 0.5).abs() < 1e-9),
        "scale vs an f2fs that never cleaned: throughput_during_gc_ratio = {ratio} (f2fs \
         random phase 100 MiB/s, scale 50 MiB/s while cleaning)"
    );
    assert!(vs["waf_during_gc_ratio"].is_null(), "{vs}");
    // Against a base that measured 0 MiB/s: no ratio (null), not x / 1e-9.
    let vs = &rep.extra["scale_targets"][0]["vs_f2fs_lfs"];
    assert!(vs["throughput_during_gc_ratio"].is_null(), "{vs}");
    assert!(vs["waf_during_gc_ratio"].is_null(), "{vs}");
}

// ---------------------------------------------------------------------------------------
// Lock waits as a share of thread time.

/// With `--aged`, the lock-wait shares ("fs wait % thr", "dev wait % thr") divide the waits,
/// counted from the policy's start (`waits::reset()` at the top of `run_policy`; the
/// emulator's lock meters from mkfs) to its end, aging included, by the thread time of the
/// same window: `threads x (fill + aging + random)` seconds. The thread time used to leave
/// the aging out, overstating the shares the more, the longer the (unmeasured) aging and
/// the shorter `--duration` (the default `--aging-max` is 120 s against a 25 s measured
/// phase).
///
/// Known answer: waits over a window divided by the thread time of that same window.
#[test]
fn aged_lock_wait_share_counts_the_aging_in_thread_time() {
    let mut a = tiny_ssd_args("f2fs");
    a.aged = true;
    a.duration = 0.3;
    let ctx = Ctx::new(&a).expect("ctx");
    let r = run_policy(&ctx, &ctx.policies[0]).expect("run");
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.aging_s > 0.0);
    let waits: f64 = r.lock_waits.iter().map(|w| w.wait_s).sum();
    let dev_waits: f64 = r.device_lock_waits.iter().map(|w| w.wait_s).sum();
    assert!(
        waits > 0.0 || dev_waits > 0.0,
        "no lock waits at all: nothing to compare"
    );
    let thread_s = a.threads as f64 * (r.fill_s + r.aging_s + r.random_s);
    let close = |got: f64, want: f64| (got - want).abs() <= want * 0.01 + 1e-12;
    assert!(
        close(r.core_lock_wait_share, waits / thread_s)
            && close(r.device_lock_wait_share, dev_waits / thread_s),
        "fs waits {waits:.4} s, device waits {dev_waits:.4} s over fill {:.2} s + aging {:.2} s \
         + random {:.2} s on {} threads: shares {:.4} / {:.4}, over the same window {:.4} / \
         {:.4}",
        r.fill_s,
        r.aging_s,
        r.random_s,
        a.threads,
        r.core_lock_wait_share,
        r.device_lock_wait_share,
        waits / thread_s,
        dev_waits / thread_s
    );
}

// ---------------------------------------------------------------------------------------
// Device options that cannot apply are refused before anything runs.

/// `--ssd-set` only configures the emulator: with `--device ram:SIZE`, `--image` or `--dev`
/// it is refused with a clear error (it used to be accepted silently, have no effect, and be
/// recorded in report.json's command as if it had applied), whether the key is valid or
/// not; and `--clock` is checked whatever the device.
#[test]
fn ssd_set_and_clock_are_refused_where_they_cannot_apply() {
    let img = std::env::temp_dir().join(format!("flashlog-review-{}.img", std::process::id()));
    for (device, image, set) in [
        ("ram:64MiB", None, "op=0.2"),
        ("ram:64MiB", None, "nosuch=1"),
        ("ram-resident:64MiB", None, "op=0.2"),
        ("970pro-like:64MiB", Some(&img), "op=0.2"),
    ] {
        let e = DeviceSpec::from_args(device, image, None, &[set.to_string()], "wall")
            .err()
            .map(|e| format!("{e:#}"));
        assert!(
            e.as_deref().is_some_and(
                |e| e.contains("--ssd-set needs an emulated SSD (--device PRESET:SIZE)")
            ),
            "--device {device} --image {image:?} --ssd-set {set}: {e:?}"
        );
    }
    assert!(!img.exists());
    let e = DeviceSpec::from_args("ram:64MiB", None, None, &[], "sundial")
        .err()
        .map(|e| format!("{e:#}"));
    assert!(e.as_deref().is_some_and(|e| e.contains("--clock")), "{e:?}");
    // Where they apply they are taken.
    let s = DeviceSpec::from_args("test:128MiB", None, None, &["op=0.2".into()], "virtual")
        .expect("emulated SSD with --ssd-set");
    assert!((s.ssd_config().unwrap().op - 0.2).abs() < 1e-9);
    assert!(DeviceSpec::from_args("ram:64MiB", None, None, &[], "virtual").is_ok());
}

/// An emulated SSD or RAM device keeps its contents in memory and every run first writes it
/// whole: one larger than the memory available is refused with one line saying how much it
/// needs and how much there is (it used to abort with "memory allocation of N bytes failed"
/// mid-run). Image files and block devices need no such memory.
#[test]
fn device_larger_than_the_available_ram_is_refused() {
    let gib = 1u64 << 30;
    for device in ["ram:1TiB", "ram-resident:1TiB", "970pro-like:1TiB"] {
        let s = DeviceSpec::from_args(device, None, None, &[], "wall").expect(device);
        let e = s.check_ram(Some(8 * gib)).expect_err(device).to_string();
        assert!(
            e.contains("needs about 1040.00 GiB") && e.contains("8.00 GiB is available"),
            "{device}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
        assert!(s.check_ram(Some(2048 * gib)).is_ok(), "{device}");
        assert!(
            s.check_ram(None).is_ok(),
            "{device}: unknown memory is not checked"
        );
    }
    let img = std::env::temp_dir().join("flashlog-review-unused.img");
    let s = DeviceSpec::from_args("ram:1TiB", Some(&img), None, &[], "wall").unwrap();
    assert!(
        s.check_ram(Some(0)).is_ok(),
        "an image file is not held in RAM"
    );
    // Through the bench's own checks, on this machine (where /proc/meminfo says less than
    // the 1 TiB device needs).
    if flashlog_bench::device::mem_available().is_some_and(|a| a < 1000 * gib) {
        let mut a = default_main_job();
        a.device = "ram:1TiB".into();
        a.policies = Some("f2fs".into());
        a.quiet = true;
        let e = Ctx::new(&a).err().map(|e| format!("{e:#}"));
        assert!(
            e.as_deref().is_some_and(|e| e.contains("needs about")),
            "{e:?}"
        );
    }
}
