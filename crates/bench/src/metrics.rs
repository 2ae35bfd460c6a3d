//! Measurement machinery, kept cheap so the harness does not compete with the file system
//! for the CPU: per-thread latency histograms merged at the end, one sampler thread reading
//! counters every `--sample-ms`, process CPU time (getrusage) and peak RSS (VmHWM, reset per
//! policy through /proc/self/clear_refs).
//!
//! Owns: [`Lat`], [`Sample`]/[`Sampler`], [`Phases`] (the before/during-cleaning split),
//! [`ProcUsage`].

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MIB: f64 = (1u64 << 20) as f64;
/// Largest latency recorded: one hour (in ns).
const LAT_MAX_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds.
#[derive(Clone)]
pub struct Lat(pub Histogram<u64>);

impl Default for Lat {
    fn default() -> Self {
        Lat(Histogram::new_with_bounds(1, LAT_MAX_NS, 3).expect("valid histogram bounds"))
    }
}

/// Percentiles of one histogram, in microseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LatSummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Lat {
    #[inline]
    pub fn record(&mut self, since: Instant) {
        self.0
            .saturating_record(since.elapsed().as_nanos().min(LAT_MAX_NS as u128) as u64);
    }
    pub fn merge(&mut self, o: &Lat) {
        // Same bounds everywhere, so add() cannot fail.
        let _ = self.0.add(&o.0);
    }
    pub fn summary(&self) -> LatSummary {
        let h = &self.0;
        if h.is_empty() {
            return LatSummary::default();
        }
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        LatSummary {
            count: h.len(),
            mean_us: h.mean() / 1e3,
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1e3,
        }
    }
    /// (latency µs, cumulative fraction) points for a CDF plot.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let h = &self.0;
        if h.is_empty() {
            return Vec::new();
        }
        let mut qs: Vec<f64> = (1..100).map(|i| i as f64 / 100.0).collect();
        qs.extend([0.995, 0.999, 0.9995, 0.9999, 1.0]);
        qs.iter()
            .map(|&q| (h.value_at_quantile(q).max(1) as f64 / 1e3, q))
            .collect()
    }
}

/// Cumulative counters at one instant.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub app_write_bytes: u64,
    pub app_read_bytes: u64,
    pub dev_read_bytes: u64,
    pub dev_write_bytes: u64,
    /// Foreground + background cleaning runs.
    pub gc_runs: u64,
    pub gc_sections_freed: u64,
    /// Workload operations completed (experiments that count ops).
    pub ops: u64,
    /// File-system counters: data blocks written back, and blocks written to the device.
    pub data_blocks: u64,
    pub dev_write_blocks: u64,
    /// Emulated SSD only: die busy time summed over dies (host I/O, device GC), and dies.
    pub die_user_ns: u64,
    pub die_gc_ns: u64,
    pub dies: usize,
}

/// One point of a rate series.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Rate {
    pub t_s: f64,
    pub app_write_mib_s: f64,
    pub app_read_mib_s: f64,
    pub dev_read_mib_s: f64,
    pub dev_write_mib_s: f64,
    pub ops_s: f64,
    pub gc_active: bool,
}

/// Rates between consecutive samples. A sample less than half the series' typical interval
/// (the median gap) after the last one used is skipped, and the next window starts from that
/// last one: a window of microseconds (the final sample `Sampler::finish` takes at once, or
/// two samples after a late tick) would turn one request into a bandwidth of GiB/s.
pub fn rates(s: &[Sample]) -> Vec<Rate> {
    let min_dt = min_window_s(s);
    let mut out = Vec::with_capacity(s.len());
    let Some(mut a) = s.first() else {
        return out;
    };
    for b in &s[1..] {
        let dt = b.t_s - a.t_s;
        if dt <= 0.0 || dt < min_dt {
            continue;
        }
        let r = |x: u64, y: u64| y.saturating_sub(x) as f64 / MIB / dt;
        out.push(Rate {
            t_s: b.t_s,
            app_write_mib_s: r(a.app_write_bytes, b.app_write_bytes),
            app_read_mib_s: r(a.app_read_bytes, b.app_read_bytes),
            dev_read_mib_s: r(a.dev_read_bytes, b.dev_read_bytes),
            dev_write_mib_s: r(a.dev_write_bytes, b.dev_write_bytes),
            ops_s: b.ops.saturating_sub(a.ops) as f64 / dt,
            gc_active: b.gc_runs > a.gc_runs || b.gc_sections_freed > a.gc_sections_freed,
        });
        a = b;
    }
    out
}

/// Half the median gap between consecutive samples (0 for fewer than two positive gaps):
/// the shortest window [`rates`] turns into a point.
fn min_window_s(s: &[Sample]) -> f64 {
    let mut gaps: Vec<f64> = s
        .windows(2)
        .map(|w| w[1].t_s - w[0].t_s)
        .filter(|&d| d > 0.0)
        .collect();
    if gaps.len() < 2 {
        return 0.0;
    }
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2] / 2.0
}

/// Throughput before and after cleaning first ran.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Phases {
    /// Seconds from the start until the first sample that saw a GC run (None: never).
    pub gc_start_s: Option<f64>,
    pub app_mib_s_before_gc: f64,
    pub app_mib_s_during_gc: f64,
    pub device_mib_s_before_gc: f64,
    /// Device reads + writes (ScaleLFS Fig. 9b counts both) after cleaning started.
    pub device_mib_s_during_gc: f64,
    /// Largest device read + write bandwidth over one sample interval.
    pub device_peak_mib_s: f64,
    pub ops_s_before_gc: f64,
    pub ops_s_during_gc: f64,
    /// Device blocks written / data blocks written back, from the first cleaning to the end:
    /// the steady-state write amplification, independent of how much a policy wrote before
    /// cleaning started (the cumulative figure includes the fill and the clean period).
    pub waf_during_gc: f64,
    /// Emulated SSD only: fraction of the dies' time busy after cleaning started (host
    /// requests plus the device's own GC), and the part of it spent on device GC.
    pub die_util_during_gc: f64,
    pub die_gc_util_during_gc: f64,
}

/// The split at the first sample that saw a cleaning run (foreground, background, or an
/// applied upcall) since the first sample.
pub fn phases(s: &[Sample]) -> Phases {
    let gc_idx = s.first().and_then(|first| {
        s.iter().position(|x| {
            x.gc_runs > first.gc_runs || x.gc_sections_freed > first.gc_sections_freed
        })
    });
    phases_split(s, gc_idx)
}

/// The split with cleaning taken to have started at sample `start` whatever the counters
/// say: every "during cleaning" field (bandwidths, ops/s, WAF, die utilisation) covers
/// `s[start]` to the last sample, the "before" fields the samples up to `s[start]`.
/// `sustained --aged` passes the measured phase with `start` 0: all of it is during
/// cleaning, none of it before.
pub fn phases_from(s: &[Sample], start: usize) -> Phases {
    if s.is_empty() {
        return Phases::default();
    }
    phases_split(s, Some(start.min(s.len() - 1)))
}

fn phases_split(s: &[Sample], gc_idx: Option<usize>) -> Phases {
    let mut p = Phases::default();
    let (Some(first), Some(last)) = (s.first(), s.last()) else {
        return p;
    };
    let rate = |a: &Sample, b: &Sample| {
        let dt = b.t_s - a.t_s;
        if dt <= 0.0 {
            return (0.0, 0.0, 0.0);
        }
        (
            b.app_write_bytes.saturating_sub(a.app_write_bytes) as f64 / MIB / dt,
            (b.dev_read_bytes + b.dev_write_bytes)
                .saturating_sub(a.dev_read_bytes + a.dev_write_bytes) as f64
                / MIB
                / dt,
            b.ops.saturating_sub(a.ops) as f64 / dt,
        )
    };
    let mid = gc_idx.map_or(last, |i| &s[i]);
    let before = rate(first, mid);
    p.app_mib_s_before_gc = before.0;
    p.device_mib_s_before_gc = before.1;
    p.ops_s_before_gc = before.2;
    if let Some(i) = gc_idx {
        p.gc_start_s = Some(s[i].t_s - first.t_s);
        let during = rate(&s[i], last);
        p.app_mib_s_during_gc = during.0;
        p.device_mib_s_during_gc = during.1;
        p.ops_s_during_gc = during.2;
        let a = &s[i];
        let data = last.data_blocks.saturating_sub(a.data_blocks);
        if data > 0 {
            p.waf_during_gc =
                last.dev_write_blocks.saturating_sub(a.dev_write_blocks) as f64 / data as f64;
        }
        let die_s = (last.t_s - a.t_s) * 1e9 * last.dies as f64;
        if die_s > 0.0 {
            let user = last.die_user_ns.saturating_sub(a.die_user_ns) as f64;
            let gc = last.die_gc_ns.saturating_sub(a.die_gc_ns) as f64;
            p.die_util_during_gc = (user + gc) / die_s;
            p.die_gc_util_during_gc = gc / die_s;
        }
    }
    p.device_peak_mib_s = rates(s)
        .iter()
        .map(|r| r.dev_read_mib_s + r.dev_write_mib_s)
        .fold(0.0, f64::max);
    p
}

/// A thread that takes a sample every `interval` and keeps them; `tick` gets each sample
/// (progress bars). `S` is [`Sample`] for the file-system probes and the emulator's
/// [`crate::gauges::Gauge`] for its gauges.
pub struct Sampler<S: Send + 'static = Sample> {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    samples: Arc<Mutex<Vec<S>>>,
}

impl Sampler<Sample> {
    /// Sample `probe` every `interval`, times relative to now.
    pub fn start<P, T>(interval: Duration, probe: P, tick: T) -> Sampler
    where
        P: Fn() -> Sample + Send + 'static,
        T: FnMut(&Sample) + Send + 'static,
    {
        let t0 = Instant::now();
        let take = move || {
            let mut s = probe();
            s.t_s = t0.elapsed().as_secs_f64();
            s
        };
        Sampler::every("bench-sampler", interval, take, tick)
    }
}

impl<S: Send + 'static> Sampler<S> {
    /// Call `take` now and then every `interval` on a thread named `name`, until
    /// [`Sampler::finish`] (which takes a last sample).
    pub fn every<P, T>(name: &str, interval: Duration, take: P, mut tick: T) -> Sampler<S>
    where
        P: Fn() -> S + Send + 'static,
        T: FnMut(&S) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::with_capacity(1024)));
        samples.lock().push(take());
        let (st, sm) = (stop.clone(), samples.clone());
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                loop {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep((next - now).min(Duration::from_millis(20)));
                    }
                    let stopping = st.load(Ordering::Acquire);
                    if Instant::now() >= next || stopping {
                        let s = take();
                        tick(&s);
                        sm.lock().push(s);
                        // The next tick, but at least half an interval from now: after a
                        // late sample the missed ticks are skipped, not taken back to back
                        // (a window of microseconds reads one request as GiB/s).
                        next = (next + interval).max(Instant::now() + interval / 2);
                    }
                    if stopping {
                        break;
                    }
                }
            })
            .expect("spawn sampler");
        Sampler {
            stop,
            handle: Some(handle),
            samples,
        }
    }

    /// Take a final sample and return them all.
    pub fn finish(mut self) -> Vec<S> {
        self.stop_thread();
        std::mem::take(&mut *self.samples.lock())
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl<S: Send + 'static> Drop for Sampler<S> {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Process CPU time and peak RSS.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ProcUsage {
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

impl ProcUsage {
    pub fn now() -> ProcUsage {
        // SAFETY: getrusage writes a plain struct we own; RUSAGE_SELF is always valid.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return ProcUsage::default();
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        ProcUsage {
            cpu_user_s: tv(ru.ru_utime),
            cpu_sys_s: tv(ru.ru_stime),
        }
    }
    /// CPU seconds (user + system) since `earlier`.
    pub fn cpu_since(&self, earlier: &ProcUsage) -> f64 {
        (self.cpu_user_s + self.cpu_sys_s) - (earlier.cpu_user_s + earlier.cpu_sys_s)
    }
}

/// Reset the peak RSS (VmHWM) so the next reading covers only what follows (Linux >= 4.0).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size (VmHWM) in MiB.
pub fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Bins of a [`Timeline`] bucket: 4 per octave of nanoseconds, 64 octaves.
const TL_BINS: usize = 256;

fn tl_bin(ns: u64) -> usize {
    let ns = ns.max(1);
    let l = 63 - ns.leading_zeros() as usize;
    let sub = if l >= 2 {
        ((ns >> (l - 2)) & 3) as usize
    } else {
        0
    };
    (l * 4 + sub).min(TL_BINS - 1)
}

/// Upper bound (ns) of a bin.
fn tl_upper(bin: usize) -> u64 {
    let (l, sub) = (bin / 4, (bin % 4) as u64);
    if l < 2 {
        1 << (l + 1)
    } else {
        (4 + sub + 1) << (l - 2)
    }
}

/// Latencies over time: per `bucket` of wall time since `t0`, a coarse log histogram (4 bins
/// per octave, so percentiles are within 25 %), to show when the tail moves (pauses), which
/// one end-of-run histogram hides. One per thread; merged at the end.
#[derive(Clone)]
pub struct Timeline {
    t0: Instant,
    bucket_ns: u64,
    buckets: Vec<Vec<u32>>,
}

/// One bucket of a [`Timeline`].
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TimePoint {
    /// End of the bucket (or of the window read, if that is earlier), seconds since the
    /// timeline's start.
    pub t_s: f64,
    pub ops: u64,
    pub ops_s: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Timeline {
    pub fn new(t0: Instant, bucket: Duration) -> Timeline {
        Timeline {
            t0,
            bucket_ns: (bucket.as_nanos() as u64).max(1_000_000),
            buckets: Vec::new(),
        }
    }
    /// One operation that started at `start` and ends now.
    #[inline]
    pub fn record(&mut self, start: Instant) {
        let now = Instant::now();
        let lat = now.saturating_duration_since(start).as_nanos() as u64;
        let b =
            (now.saturating_duration_since(self.t0).as_nanos() as u64 / self.bucket_ns) as usize;
        if b >= self.buckets.len() {
            self.buckets.resize_with(b + 1, Vec::new);
        }
        let h = &mut self.buckets[b];
        if h.is_empty() {
            h.resize(TL_BINS, 0);
        }
        h[tl_bin(lat)] += 1;
    }
    pub fn merge(&mut self, o: &Timeline) {
        if o.buckets.len() > self.buckets.len() {
            self.buckets.resize_with(o.buckets.len(), Vec::new);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            if b.is_empty() {
                continue;
            }
            if a.is_empty() {
                a.resize(TL_BINS, 0);
            }
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
    /// One point per bucket that overlaps the window [`from_s`, `to_s`] (seconds since the
    /// timeline's start: a workload's start and end); empty buckets give 0 operations. A
    /// bucket's rate is its operations over the part of it inside the window, so the
    /// workload's first and last buckets, which it covered only in part, are not diluted by
    /// the time it was not running.
    pub fn points(&self, from_s: f64, to_s: f64) -> Vec<TimePoint> {
        let secs = self.bucket_ns as f64 / 1e9;
        self.buckets
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let (a, b) = (i as f64 * secs, (i as f64 + 1.0) * secs);
                let overlap = b.min(to_s) - a.max(from_s);
                (overlap > 0.0).then_some((i, h, overlap))
            })
            .map(|(i, h, overlap)| {
                let ops: u64 = h.iter().map(|&c| u64::from(c)).sum();
                let mut p = TimePoint {
                    t_s: ((i as f64 + 1.0) * secs).min(to_s),
                    ops,
                    ops_s: ops as f64 / overlap,
                    ..TimePoint::default()
                };
                if ops > 0 {
                    let want = (ops as f64 * 0.99).ceil() as u64;
                    let mut seen = 0;
                    for (b, &c) in h.iter().enumerate() {
                        seen += u64::from(c);
                        if seen >= want && p.p99_us == 0.0 {
                            p.p99_us = tl_upper(b) as f64 / 1e3;
                        }
                        if c > 0 {
                            p.max_us = tl_upper(b) as f64 / 1e3;
                        }
                    }
                }
                p
            })
            .collect()
    }
}

/// A tiny fast PRNG (SplitMix64): deterministic per seed and thread, no dependencies.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_split() {
        let mk = |t: f64, app: u64, gc: u64| Sample {
            t_s: t,
            app_write_bytes: app << 20,
            dev_write_bytes: app << 20,
            gc_runs: gc,
            ..Default::default()
        };
        let s = vec![
            mk(0.0, 0, 0),
            mk(1.0, 100, 0),
            mk(2.0, 200, 1),
            mk(4.0, 220, 5),
        ];
        let p = phases(&s);
        assert_eq!(p.gc_start_s, Some(2.0));
        assert!((p.app_mib_s_before_gc - 100.0).abs() < 1e-9);
        assert!((p.app_mib_s_during_gc - 10.0).abs() < 1e-9);
        assert!((p.device_peak_mib_s - 100.0).abs() < 1e-9);
        assert!(peak_rss_mib() > 0.0);
        let mut r = Rng::new(1, 2);
        assert!((0..1000).all(|_| r.below(10) < 10));
    }

    #[test]
    fn timeline_buckets_show_a_pause() {
        // Bins: 1 ns .. 2^64 ns, each bound above its values, within 25 %.
        for ns in [1u64, 3, 999, 1_000, 1_234_567, 5_000_000_000] {
            let b = tl_bin(ns);
            assert!(tl_upper(b) > ns, "{ns}: bin {b} upper {}", tl_upper(b));
            assert!((tl_upper(b) as f64) <= ns as f64 * 1.25 + 2.0, "{ns}");
        }
        let t0 = Instant::now() - Duration::from_millis(350);
        let mut t = Timeline::new(t0, Duration::from_millis(100));
        // 100 fast operations now (bucket 3), one of which took 50 ms.
        for _ in 0..99 {
            t.record(Instant::now());
        }
        t.record(Instant::now() - Duration::from_millis(50));
        let mut u = Timeline::new(t0, Duration::from_millis(100));
        u.merge(&t);
        let p = u.points(0.0, 0.4);
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].ops, 0);
        assert_eq!(p[3].ops, 100);
        assert!((p[3].ops_s - 1000.0).abs() < 1e-6);
        assert!(
            p[3].max_us >= 50_000.0 && p[3].max_us < 63_000.0,
            "{:?}",
            p[3]
        );
        assert!(p[3].p99_us < 1_000.0, "{:?}", p[3]);
        assert_eq!(u.points(0.25, 0.4).len(), 2);
    }

    #[test]
    fn cleaning_phase_waf_and_die_utilisation() {
        // Before cleaning: 100 data blocks at WAF 1; after: 50 data blocks cost 400 device
        // blocks, and 4 dies are busy 3 of 4 seconds (1 of them on device GC).
        let mk = |t: f64, data: u64, dev: u64, user: u64, gc: u64, runs: u64| Sample {
            t_s: t,
            data_blocks: data,
            dev_write_blocks: dev,
            die_user_ns: user * 1_000_000_000,
            die_gc_ns: gc * 1_000_000_000,
            dies: 4,
            gc_runs: runs,
            ..Default::default()
        };
        let s = vec![
            mk(0.0, 0, 0, 0, 0, 0),
            mk(1.0, 100, 100, 1, 0, 1),
            mk(5.0, 150, 500, 9, 4, 9),
        ];
        let p = phases(&s);
        assert!((p.waf_during_gc - 8.0).abs() < 1e-9, "{}", p.waf_during_gc);
        assert!((p.die_util_during_gc - 0.75).abs() < 1e-9);
        assert!((p.die_gc_util_during_gc - 0.25).abs() < 1e-9);
    }
}
