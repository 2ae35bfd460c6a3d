//! `ycsb`: a key-value store over files, driven by YCSB workloads A (50 % reads, 50 %
//! updates), B (95/5), F (50 % reads, 50 % read-modify-writes) and update-only (100 %
//! updates), scrambled-Zipfian keys (θ = 0.99), as ScaleLFS §5.3 runs MySQL.
//!
//! Layout: 1 KiB records striped over 16 table files (record k lives in file k mod 16 at
//! (k / 16) KiB); the load writes them sequentially until the table fills 70 % of the volume
//! (ScaleLFS: "70 % of total space occupied"). An update overwrites the record in place and
//! appends it to its thread's log file, which is fsynced every 16 updates (group commit) and
//! truncated at 32 MiB (less on a small volume: the logs together stay within half the space
//! the table leaves free). The workloads run in order A, B, F, update-only on the same volume,
//! each for `--duration` or `--operations` (YCSB's `operationcount`; default one per
//! record), whichever comes first.
//!
//! `--workloads A,F` picks workloads; `--fsync-every 1` fsyncs the log on every update (MySQL
//! with fsync, D2FS Fig. 13/15: there the interval FTL's compaction pauses reach the
//! application). Throughput and update latency (p99, max) are also reported over time, per
//! `--sample-ms` bucket (`ycsb_timeline_*.svg`, JSON `timeline`), with the device's
//! compaction runs (interval FTL) and GC runs marked.

use super::{pattern, run_workers, Volume};
use crate::gauges::{Gauge, GaugeSampler};
use crate::metrics::{Lat, LatSummary, Rng, TimePoint, Timeline};
use crate::plot::{bar_plot, line_plot, Bars, Lines};
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, Result};
use flashlog_core::{Ino, SetAttr, ROOT_INO};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::time::Instant;

const RECORD: u64 = 1024;
const TABLE_FILES: u64 = 16;
const LOAD_FRACTION: f64 = 0.7;
/// A thread's log is truncated here, or sooner on a small volume (`Volume::log_cap`).
const LOG_MAX: u64 = 32 << 20;
const THETA: f64 = 0.99;

/// (name, fraction of reads, updates are read-modify-writes).
pub const WORKLOADS: [(&str, f64, bool); 4] = [
    ("A", 0.5, false),
    ("B", 0.95, false),
    ("F", 0.5, true),
    ("update-only", 0.0, false),
];

/// YCSB's Zipfian generator (Gray et al.), scrambled with FNV-1a as ScrambledZipfian.
pub struct Zipf {
    n: u64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow: f64,
}

impl Zipf {
    pub fn new(n: u64) -> Zipf {
        let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(THETA)).sum();
        let zeta2 = 1.0 + 0.5f64.powf(THETA);
        Zipf {
            n,
            zetan,
            alpha: 1.0 / (1.0 - THETA),
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - THETA)) / (1.0 - zeta2 / zetan),
            half_pow: 0.5f64.powf(THETA),
        }
    }
    pub fn next(&self, r: &mut Rng) -> u64 {
        let u = r.unit();
        let uz = u * self.zetan;
        let v = if uz < 1.0 {
            0
        } else if uz < 1.0 + self.half_pow {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in v.min(self.n - 1).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.n
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct YcsbResult {
    pub policy: String,
    pub workload: String,
    pub records: u64,
    pub ops: u64,
    pub secs: f64,
    pub ops_s: f64,
    pub read: LatSummary,
    pub update: LatSummary,
    pub gc_runs: u64,
    pub stall_time_s: f64,
    pub waf: f64,
    pub fsync_every: u64,
    /// Seconds from the policy's first workload start to this workload's start.
    pub start_s: f64,
    /// Update throughput and latency per `--sample-ms` bucket (seconds since the policy's
    /// first workload started).
    pub timeline: Vec<TimePoint>,
    /// When the device compacted its map (interval FTL) or ran GC during this workload
    /// (seconds on the same clock, at sample resolution).
    pub compactions_at_s: Vec<f64>,
    pub device_gc_runs: u64,
    pub error: Option<String>,
}

/// The workloads `--workloads` names, in the order given.
pub fn selected(list: &str) -> Result<Vec<(&'static str, f64, bool)>> {
    let mut v = Vec::new();
    for w in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match WORKLOADS.iter().find(|x| x.0.eq_ignore_ascii_case(w)) {
            Some(x) => v.push(*x),
            None => {
                anyhow::bail!("--workloads: unknown workload {w:?} (known: A, B, F, update-only)")
            }
        }
    }
    if v.is_empty() {
        anyhow::bail!("--workloads is empty");
    }
    Ok(v)
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    selected(&ctx.args.workloads)?;
    let mut results = Vec::new();
    for p in &ctx.policies {
        results.extend(run_policy(ctx, p)?);
    }
    build_report(ctx, results)
}

fn run_policy(ctx: &Ctx, p: &crate::policy::PolicySpec) -> Result<Vec<YcsbResult>> {
    let threads = ctx.args.threads;
    let vol = Volume::open(ctx, p)?;
    let fs = vol.fs.clone();
    let per_file = (vol.user_bytes() as f64 * LOAD_FRACTION) as u64 / TABLE_FILES / RECORD;
    let records = per_file * TABLE_FILES;
    let bar = ctx.bar(
        records * RECORD + WORKLOADS.len() as u64,
        format!("{} ycsb", p.label),
        false,
    );
    // Load: the table files, sequentially, then a checkpoint.
    let chunk = pattern(1 << 20, ctx.args.seed);
    let mut table: Vec<Ino> = Vec::new();
    for f in 0..TABLE_FILES {
        let a = fs
            .create(ROOT_INO, format!("table.{f}").as_bytes(), 0o644, 0, 0)
            .map_err(|e| anyhow!("load: {e}"))?;
        let mut off = 0;
        while off < per_file * RECORD {
            let n = (per_file * RECORD - off).min(chunk.len() as u64) as usize;
            fs.write(a.ino, off, &chunk[..n])
                .map_err(|e| anyhow!("load: {e}"))?;
            off += n as u64;
            bar.inc(n as u64);
        }
        table.push(a.ino);
    }
    fs.sync().map_err(|e| anyhow!("load sync: {e}"))?;
    let logs: Vec<Ino> = (0..threads)
        .map(|t| {
            fs.create(ROOT_INO, format!("log.{t}").as_bytes(), 0o644, 0, 0)
                .map(|a| a.ino)
                .map_err(|e| anyhow!("create log: {e}"))
        })
        .collect::<Result<_>>()?;
    let log_max = vol.log_cap(threads as u64, LOG_MAX, RECORD);
    let zipf = Zipf::new(records);
    let mut out = Vec::new();
    let group_commit = ctx.args.fsync_every;
    let t_start = Instant::now();
    let gauges = vol
        .bd
        .ssd
        .clone()
        .map(|s| GaugeSampler::start(s, ctx.sample_interval(), t_start));
    let mut spans = Vec::new();
    for (wi, (name, read_frac, rmw)) in selected(&ctx.args.workloads)?.iter().enumerate() {
        bar.set_message(name.to_string());
        let s0 = fs.stats();
        let start_s = t_start.elapsed().as_secs_f64();
        let updates = Mutex::new(Lat::default());
        let timeline = Mutex::new(Timeline::new(t_start, ctx.sample_interval()));
        let total_ops = match ctx.args.operations {
            0 => records,
            n => n,
        };
        // Split exactly: the first `total_ops % threads` threads take one more.
        let thread_ops = |t: usize| {
            total_ops / threads as u64 + u64::from((t as u64) < total_ops % threads as u64)
        };
        let (ops, secs, rlat, err) = run_workers(threads, ctx.duration(), |t, stop, rlat| {
            let mut rng = Rng::new(ctx.args.seed + wi as u64, t as u64);
            let mut ulat = Lat::default();
            let mut tl = Timeline::new(t_start, ctx.sample_interval());
            let mut rec = vec![0u8; RECORD as usize];
            let val = pattern(RECORD as usize, t as u64);
            let (mut n, mut log_off, mut pending) = (0u64, 0u64, 0u64);
            let my_ops = thread_ops(t);
            while n < my_ops && !stop.load(Ordering::Relaxed) {
                let k = zipf.next(&mut rng);
                let (file, off) = (
                    table[(k % TABLE_FILES) as usize],
                    (k / TABLE_FILES) * RECORD,
                );
                let t0 = Instant::now();
                if rng.unit() < *read_frac {
                    fs.read(file, off, &mut rec)?;
                    rlat.record(t0);
                } else {
                    if *rmw {
                        fs.read(file, off, &mut rec)?;
                    }
                    fs.write(file, off, &val)?;
                    if log_off >= log_max {
                        let a = SetAttr {
                            size: Some(0),
                            ..Default::default()
                        };
                        fs.setattr(logs[t], &a)?;
                        log_off = 0;
                    }
                    fs.write(logs[t], log_off, &val)?;
                    log_off += RECORD;
                    pending += 1;
                    if pending >= group_commit {
                        fs.fsync(logs[t], true)?;
                        pending = 0;
                    }
                    ulat.record(t0);
                    tl.record(t0);
                }
                n += 1;
            }
            updates.lock().merge(&ulat);
            timeline.lock().merge(&tl);
            Ok(n)
        });
        let end_s = t_start.elapsed().as_secs_f64();
        let s1 = fs.stats();
        let dapp = s1.app_write_bytes.saturating_sub(s0.app_write_bytes);
        out.push(YcsbResult {
            policy: p.label.clone(),
            workload: name.to_string(),
            records,
            ops,
            secs,
            ops_s: ops as f64 / secs.max(1e-9),
            read: rlat.summary(),
            update: updates.lock().summary(),
            gc_runs: (s1.gc_fg_runs + s1.gc_bg_runs) - (s0.gc_fg_runs + s0.gc_bg_runs),
            stall_time_s: s1.stall_time_s - s0.stall_time_s,
            waf: if dapp == 0 {
                0.0
            } else {
                (s1.dev_write_blocks - s0.dev_write_blocks) as f64 * 4096.0 / dapp as f64
            },
            fsync_every: group_commit,
            start_s,
            timeline: timeline.into_inner().points(start_s, end_s),
            compactions_at_s: Vec::new(),
            device_gc_runs: 0,
            error: err,
        });
        spans.push((start_s, end_s));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let g: Vec<Gauge> = gauges.map(|g| g.finish()).unwrap_or_default();
    for (r, (a, b)) in out.iter_mut().zip(spans) {
        let inside: Vec<&Gauge> = g.iter().filter(|x| x.t_s >= a && x.t_s <= b).collect();
        r.compactions_at_s = inside
            .windows(2)
            .filter(|w| w[1].compaction_runs > w[0].compaction_runs)
            .map(|w| w[1].t_s)
            .collect();
        if let (Some(f), Some(l)) = (inside.first(), inside.last()) {
            r.device_gc_runs = l.device_gc_runs - f.device_gc_runs;
        }
    }
    drop(fs);
    let end = vol.finish()?;
    if let (Some(e), Some(last)) = (end.problem(), out.last_mut()) {
        last.error.get_or_insert(e);
    }
    Ok(out)
}

fn build_report(ctx: &Ctx, results: Vec<YcsbResult>) -> Result<Report> {
    let out = &ctx.args.out;
    let mut rep = Report::new("ycsb", out, ctx.config_json());
    let mut t = Table::new(&[
        "workload",
        "policy",
        "ops/s",
        "ops",
        "read p50 us",
        "read p99 us",
        "upd p50 us",
        "upd p99 us",
        "upd p99.9 us",
        "GC runs",
        "stall s",
        "WAF",
        "worst bucket: p99 us",
        "max us",
        "compactions",
        "dev GC runs",
    ]);
    for r in &results {
        let worst = r
            .timeline
            .iter()
            .filter(|x| x.ops > 0)
            .fold(TimePoint::default(), |a, x| {
                if x.p99_us > a.p99_us {
                    *x
                } else {
                    a
                }
            });
        let max = r.timeline.iter().map(|x| x.max_us).fold(0.0, f64::max);
        t.row(vec![
            r.workload.clone(),
            r.policy.clone(),
            num(r.ops_s),
            r.ops.to_string(),
            num(r.read.p50_us),
            num(r.read.p99_us),
            num(r.update.p50_us),
            num(r.update.p99_us),
            num(r.update.p999_us),
            r.gc_runs.to_string(),
            num(r.stall_time_s),
            num(r.waf),
            num(worst.p99_us),
            num(max),
            r.compactions_at_s.len().to_string(),
            r.device_gc_runs.to_string(),
        ]);
    }
    let mut body = t.render();
    body += &format!(
        "fsync of the thread's log every {} update(s). worst bucket: the highest update p99 over \
         one --sample-ms bucket ({} ms; coarse bins, within 25 %); compactions: interval-FTL \
         map compaction runs during the workload (the device delays I/O meanwhile).\n",
        ctx.args.fsync_every, ctx.args.sample_ms
    );
    for r in &results {
        if let Some(e) = &r.error {
            body += &format!("{} {}: ERROR {e}\n", r.workload, r.policy);
        }
    }
    rep.section(
        &format!(
            "YCSB over files, {} threads, {} records of 1 KiB, {}",
            ctx.args.threads,
            results.first().map_or(0, |r| r.records),
            ctx.device.describe()
        ),
        body,
    );
    let groups: Vec<String> = selected(&ctx.args.workloads)?
        .iter()
        .map(|w| w.0.to_string())
        .collect();
    for g in &groups {
        let pick = |f: fn(&TimePoint) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            results
                .iter()
                .filter(|r| &r.workload == g)
                .map(|r| {
                    (
                        r.policy.clone(),
                        r.timeline
                            .iter()
                            .map(|x| (x.t_s - r.start_s, f(x)))
                            .collect(),
                    )
                })
                .collect()
        };
        let name = g.to_lowercase().replace('-', "_");
        rep.plots.extend(line_plot(
            out,
            &format!("ycsb_timeline_{name}_ops"),
            &Lines {
                title: &format!("YCSB {g}: updates per second over time"),
                x_desc: "time in workload (s)",
                y_desc: "updates/s",
                series: &pick(|x| x.ops_s),
                log_x: false,
                points: false,
            },
        )?);
        rep.plots.extend(line_plot(
            out,
            &format!("ycsb_timeline_{name}_p99"),
            &Lines {
                title: &format!("YCSB {g}: update latency p99 per interval"),
                x_desc: "time in workload (s)",
                y_desc: "p99 us",
                series: &pick(|x| x.p99_us),
                log_x: false,
                points: false,
            },
        )?);
    }
    let by = |f: fn(&YcsbResult) -> f64| -> Vec<(String, Vec<f64>)> {
        ctx.policies
            .iter()
            .map(|p| {
                (
                    p.label.clone(),
                    groups
                        .iter()
                        .map(|g| {
                            results
                                .iter()
                                .find(|r| &r.workload == g && r.policy == p.label)
                                .map_or(0.0, f)
                        })
                        .collect(),
                )
            })
            .collect()
    };
    rep.plots.extend(bar_plot(
        out,
        "ycsb_throughput",
        &Bars {
            title: "YCSB throughput",
            y_desc: "operations/s",
            groups: &groups,
            series: &by(|r| r.ops_s),
        },
    )?);
    rep.plots.extend(bar_plot(
        out,
        "ycsb_update_p99",
        &Bars {
            title: "YCSB update latency p99",
            y_desc: "us",
            groups: &groups,
            series: &by(|r| r.update.p99_us),
        },
    )?);
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(10_000);
        let mut r = Rng::new(1, 1);
        let mut hits = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let k = z.next(&mut r);
            assert!(k < 10_000);
            *hits.entry(k).or_insert(0u32) += 1;
        }
        let top = hits.values().max().copied().unwrap_or(0);
        assert!(top > 1000, "hottest key got {top} of 100000");
    }
}
