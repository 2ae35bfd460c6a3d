//! `fxmark`: the FxMark tests Max reports (ATC '21 Fig. 6-7), over 1, 2, 4 ... N threads.
//!
//! - DWOL: each thread overwrites block 0 of its private file (4 KiB writes, no fsync);
//! - DWAL: each thread appends 4 KiB blocks to its private file (truncated back to empty when
//!   it reaches its share of 60 % of the volume, so the test never runs out of space);
//! - MWCL: each thread creates empty files in its private directory;
//! - MWUL: each thread unlinks the files it created in MWCL.
//!
//! One fresh volume per (policy, thread count); the four tests run on it in that order,
//! each for at most `--duration`. Reported: operations per second per test and thread count,
//! latency percentiles, and one plot per test (ops/s against threads, one line per policy).
//! A 2-vCPU machine cannot show the 72-core curves of the paper: read the numbers as "does
//! throughput hold up from 1 to 2 threads", not as a scalability result.

use super::{pattern, run_workers, thread_counts, Volume};
use crate::metrics::LatSummary;
use crate::plot::{line_plot, Lines};
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, Result};
use flashlog_core::{Ino, SetAttr, ROOT_INO};
use std::sync::atomic::Ordering;

pub const TESTS: [&str; 4] = ["DWOL", "DWAL", "MWCL", "MWUL"];
const BS: u64 = 4096;

#[derive(Clone, Debug, serde::Serialize)]
pub struct FxResult {
    pub policy: String,
    pub test: String,
    pub threads: usize,
    pub ops: u64,
    pub secs: f64,
    pub ops_s: f64,
    /// Data tests: MiB/s of 4 KiB operations.
    pub mib_s: f64,
    pub latency: LatSummary,
    pub gc_runs: u64,
    /// Seconds the workers waited on the emulated SSD's own locks during this test (0 on
    /// other devices), and that as a share of thread time (threads × seconds).
    pub device_lock_wait_s: f64,
    pub device_lock_wait_share: f64,
    /// Seconds every thread waited at the file system's own wait points (`waits.rs`: file
    /// cells, log heads, the I/O queue, ...) during this test, that as a share of thread
    /// time, and the point that waited longest (issue 12: under 5 % at 16 threads).
    pub fs_lock_wait_s: f64,
    pub fs_lock_wait_share: f64,
    pub fs_lock_wait_top: Option<String>,
    /// Checkpoints during this test and the seconds they took (the exclusive side of the
    /// op lock: every operation waits for them).
    pub checkpoints: u64,
    pub checkpoint_s: f64,
    /// Cap reliefs (writeback and eviction without a checkpoint, `Counters::cap_reliefs`).
    pub cap_reliefs: u64,
    /// Where the checkpoints' time went, seconds: the pre-pass writers run beside (not in
    /// `checkpoint_s`), then under the exclusive lock the writeback of what was left, the
    /// metadata and pack, and the steps after the pack (`Counters::cp_*_s`).
    pub cp_prewrite_s: f64,
    pub cp_writeback_s: f64,
    pub cp_meta_s: f64,
    pub cp_after_pack_s: f64,
    /// Seconds writers waited at the dirty cap for the flusher's rounds (`balance`; not a
    /// lock wait), as a share of thread time.
    pub writeback_wait_share: f64,
    pub error: Option<String>,
}

/// The tests `--tests` selects, in `TESTS` order.
pub fn selected(list: &str) -> Result<Vec<&'static str>> {
    let mut want = Vec::new();
    for t in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some(&known) = TESTS.iter().find(|k| k.eq_ignore_ascii_case(t)) else {
            return Err(anyhow!(
                "--tests: unknown fxmark test {t:?} (tests: {})",
                TESTS.join(", ")
            ));
        };
        want.push(known);
    }
    if want.is_empty() {
        return Err(anyhow!(
            "--tests: no test selected (tests: {})",
            TESTS.join(", ")
        ));
    }
    if want.contains(&"MWUL") && !want.contains(&"MWCL") {
        return Err(anyhow!(
            "--tests: MWUL unlinks the files MWCL creates: select MWCL with it"
        ));
    }
    Ok(TESTS.into_iter().filter(|t| want.contains(t)).collect())
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    let tests = selected(&ctx.args.tests)?;
    let counts = thread_counts(ctx.args.threads);
    let total = (ctx.policies.len() * counts.len() * tests.len()) as u64;
    let bar = ctx.bar(total, "fxmark".into(), false);
    let mut results = Vec::new();
    for p in &ctx.policies {
        for &n in &counts {
            bar.set_message(format!("{} x{n}", p.label));
            results.extend(run_one(ctx, p, n, &tests, &bar)?);
        }
    }
    bar.finish_and_clear();
    build_report(ctx, &counts, results)
}

fn run_one(
    ctx: &Ctx,
    p: &crate::policy::PolicySpec,
    threads: usize,
    tests: &[&'static str],
    bar: &indicatif::ProgressBar,
) -> Result<Vec<FxResult>> {
    let vol = Volume::open(ctx, p)?;
    let fs = vol.fs.clone();
    let dur = ctx.duration();
    let append_cap = (vol.user_bytes() as f64 * 0.6) as u64 / threads as u64 / BS * BS;
    let files_cap = fs.statfs().files_free * 8 / 10 / threads as u64;
    let buf = pattern(BS as usize, ctx.args.seed);
    // Private files and directories.
    let mut files: Vec<Ino> = Vec::new();
    let mut dirs: Vec<Ino> = Vec::new();
    for t in 0..threads {
        let f = fs
            .create(ROOT_INO, format!("fx.{t}").as_bytes(), 0o644, 0, 0)
            .map_err(|e| anyhow!("create: {e}"))?;
        fs.write(f.ino, 0, &buf)
            .map_err(|e| anyhow!("write: {e}"))?;
        files.push(f.ino);
        let d = fs
            .mkdir(ROOT_INO, format!("fxdir.{t}").as_bytes(), 0o755, 0, 0)
            .map_err(|e| anyhow!("mkdir: {e}"))?;
        dirs.push(d.ino);
    }
    let mut out = Vec::new();
    let created: Vec<std::sync::atomic::AtomicU64> = (0..threads).map(|_| 0.into()).collect();
    let ssd = vol.bd.ssd.clone();
    let dev_wait = || ssd.as_ref().map_or(0.0, |d| d.lock_stats().wait_s());
    for &test in tests {
        let gc0 = fs.stats();
        let w0 = dev_wait();
        let wb0 = fs.writeback_stats().throttled_ns;
        flashlog_core::waits::reset();
        let (ops, secs, lat, err) = run_workers(threads, dur, |t, stop, lat| {
            let mut n = 0u64;
            match test {
                "DWOL" => {
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = std::time::Instant::now();
                        fs.write(files[t], 0, &buf)?;
                        lat.record(t0);
                        n += 1;
                    }
                }
                "DWAL" => {
                    let mut off = BS;
                    while !stop.load(Ordering::Relaxed) {
                        if off >= append_cap {
                            let a = SetAttr {
                                size: Some(0),
                                ..Default::default()
                            };
                            fs.setattr(files[t], &a)?;
                            off = 0;
                        }
                        let t0 = std::time::Instant::now();
                        fs.write(files[t], off, &buf)?;
                        lat.record(t0);
                        off += BS;
                        n += 1;
                    }
                }
                "MWCL" => {
                    while !stop.load(Ordering::Relaxed) && n < files_cap {
                        let name = format!("f{n}");
                        let t0 = std::time::Instant::now();
                        fs.create(dirs[t], name.as_bytes(), 0o644, 0, 0)?;
                        lat.record(t0);
                        n += 1;
                    }
                    created[t].store(n, Ordering::Relaxed);
                }
                _ => {
                    let have = created[t].load(Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) && n < have {
                        let name = format!("f{n}");
                        let t0 = std::time::Instant::now();
                        fs.unlink(dirs[t], name.as_bytes())?;
                        lat.record(t0);
                        n += 1;
                    }
                }
            }
            Ok(n)
        });
        let gc1 = fs.stats();
        let device_lock_wait_s = dev_wait() - w0;
        let waits = flashlog_core::waits::snapshot();
        let fs_lock_wait_s: f64 = waits.iter().map(|w| w.1).sum();
        let fs_lock_wait_top = waits
            .iter()
            .filter(|w| w.1 > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|w| format!("{} {:.3}s", w.0, w.1));
        let thread_s = (threads as f64 * secs).max(1e-9);
        let ops_s = ops as f64 / secs.max(1e-9);
        out.push(FxResult {
            policy: p.label.clone(),
            test: test.to_string(),
            threads,
            ops,
            secs,
            ops_s,
            mib_s: if test.starts_with('D') {
                ops_s * BS as f64 / (1u64 << 20) as f64
            } else {
                0.0
            },
            latency: lat.summary(),
            gc_runs: (gc1.gc_fg_runs + gc1.gc_bg_runs) - (gc0.gc_fg_runs + gc0.gc_bg_runs),
            device_lock_wait_s,
            device_lock_wait_share: device_lock_wait_s / thread_s,
            fs_lock_wait_s,
            fs_lock_wait_share: fs_lock_wait_s / thread_s,
            fs_lock_wait_top,
            checkpoints: gc1.checkpoints - gc0.checkpoints,
            checkpoint_s: gc1.checkpoint_time_s - gc0.checkpoint_time_s,
            cap_reliefs: gc1.cap_reliefs - gc0.cap_reliefs,
            cp_prewrite_s: gc1.cp_prewrite_s - gc0.cp_prewrite_s,
            cp_writeback_s: gc1.cp_writeback_s - gc0.cp_writeback_s,
            cp_meta_s: gc1.cp_meta_s - gc0.cp_meta_s,
            cp_after_pack_s: gc1.cp_after_pack_s - gc0.cp_after_pack_s,
            writeback_wait_share: (fs.writeback_stats().throttled_ns - wb0) as f64 / 1e9 / thread_s,
            error: err,
        });
        bar.inc(1);
    }
    drop(fs);
    let end = vol.finish()?;
    if let Some(e) = end.problem() {
        if let Some(last) = out.last_mut() {
            last.error.get_or_insert(e);
        }
    }
    Ok(out)
}

/// The result of `test` for `policy` at `threads`.
fn find<'a>(
    results: &'a [FxResult],
    test: &str,
    policy: &str,
    threads: usize,
) -> Option<&'a FxResult> {
    results
        .iter()
        .find(|r| r.test == test && r.policy == policy && r.threads == threads)
}

/// The file system's own lock waits per test and thread count (% of thread time), the
/// point that waited longest and the checkpoints at the largest count.
fn waits_table(ctx: &Ctx, counts: &[usize], results: &[FxResult]) -> String {
    let max = counts.last().copied().unwrap_or(1);
    let mut hdr: Vec<String> = vec!["test".into(), "policy".into()];
    for n in counts {
        hdr.push(format!("{n} thr"));
    }
    hdr.push(format!("longest at {max} thr"));
    hdr.push(format!("checkpoints at {max} thr (s)"));
    hdr.push("cap reliefs".into());
    hdr.push("pre-pass / writeback / meta / after (s)".into());
    hdr.push(format!("write-back wait at {max} thr"));
    let hdr: Vec<&str> = hdr.iter().map(|s| s.as_str()).collect();
    let mut w = Table::new(&hdr);
    for test in tests_run(results) {
        for p in &ctx.policies {
            let get = |n: usize| find(results, test, &p.label, n);
            let mut row = vec![test.to_string(), p.label.clone()];
            for &n in counts {
                row.push(get(n).map_or("-".into(), |r| {
                    format!("{:.2}%", 100.0 * r.fs_lock_wait_share)
                }));
            }
            let last = get(max);
            row.push(
                last.and_then(|r| r.fs_lock_wait_top.clone())
                    .unwrap_or_else(|| "-".into()),
            );
            row.push(last.map_or("-".into(), |r| {
                format!("{} ({:.2})", r.checkpoints, r.checkpoint_s)
            }));
            row.push(last.map_or("-".into(), |r| r.cap_reliefs.to_string()));
            row.push(last.map_or("-".into(), |r| {
                format!(
                    "{:.2} / {:.2} / {:.2} / {:.2}",
                    r.cp_prewrite_s, r.cp_writeback_s, r.cp_meta_s, r.cp_after_pack_s
                )
            }));
            row.push(last.map_or("-".into(), |r| {
                format!("{:.1}%", 100.0 * r.writeback_wait_share)
            }));
            w.row(row);
        }
    }
    "\nwait at the file system's own wait points (waits.rs), % of thread time:\n".to_string()
        + &w.render()
        + "(write-back wait: writers held at the dirty cap until the flusher's rounds bring \
           the dirty pages under it, % of thread time; a flusher-bound test shows here, \
           not as a lock wait)\n"
}

/// The tests with results, in `TESTS` order (`--tests` may leave some out).
fn tests_run(results: &[FxResult]) -> Vec<&'static str> {
    TESTS
        .into_iter()
        .filter(|t| results.iter().any(|r| r.test == *t))
        .collect()
}

fn build_report(ctx: &Ctx, counts: &[usize], results: Vec<FxResult>) -> Result<Report> {
    let out = &ctx.args.out;
    let mut rep = Report::new("fxmark", out, ctx.config_json());
    let mut header: Vec<String> = vec!["test".into(), "policy".into()];
    for n in counts {
        header.push(format!("{n} thr ops/s"));
    }
    let max = counts.last().copied().unwrap_or(1);
    if max > 1 {
        header.push(format!("{max} / 1"));
    }
    for n in counts {
        header.push(format!("{n} thr p99 us"));
    }
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    let mut t = Table::new(&hdr);
    for test in tests_run(&results) {
        for p in &ctx.policies {
            let get = |n: usize| find(&results, test, &p.label, n);
            let mut row = vec![test.to_string(), p.label.clone()];
            for &n in counts {
                row.push(get(n).map_or("-".into(), |r| num(r.ops_s)));
            }
            if max > 1 {
                row.push(match (get(1), get(max)) {
                    (Some(a), Some(b)) if a.ops_s > 0.0 => format!("{:.1}x", b.ops_s / a.ops_s),
                    _ => "-".into(),
                });
            }
            for &n in counts {
                row.push(get(n).map_or("-".into(), |r| num(r.latency.p99_us)));
            }
            t.row(row);
        }
    }
    let mut body = t.render();
    body += &waits_table(ctx, counts, &results);
    if results.iter().any(|r| r.device_lock_wait_s > 0.0) {
        let mut hdr: Vec<String> = vec!["test".into(), "policy".into()];
        for n in counts {
            hdr.push(format!("{n} thr"));
        }
        let hdr: Vec<&str> = hdr.iter().map(|s| s.as_str()).collect();
        let mut w = Table::new(&hdr);
        for test in tests_run(&results) {
            for p in &ctx.policies {
                let mut row = vec![test.to_string(), p.label.clone()];
                for &n in counts {
                    row.push(find(&results, test, &p.label, n).map_or("-".into(), |r| {
                        format!("{:.2}%", 100.0 * r.device_lock_wait_share)
                    }));
                }
                w.row(row);
            }
        }
        body += "\nwait on the emulated SSD's own locks, % of thread time:\n";
        body += &w.render();
        body += "(waits of the file system's own I/O threads, such as writeback and \
                 checkpoints, count too, so the share can be above 0 at one thread)\n";
    }
    for r in &results {
        if let Some(e) = &r.error {
            body += &format!("{} {} x{}: ERROR {e}\n", r.test, r.policy, r.threads);
        }
    }
    rep.section(
        &format!(
            "FxMark (ops/s), {} s per test, {}",
            ctx.args.duration,
            ctx.device.describe()
        ),
        body,
    );
    for test in tests_run(&results) {
        let series: Vec<(String, Vec<(f64, f64)>)> = ctx
            .policies
            .iter()
            .map(|p| {
                (
                    p.label.clone(),
                    results
                        .iter()
                        .filter(|r| r.test == test && r.policy == p.label)
                        .map(|r| (r.threads as f64, r.ops_s))
                        .collect(),
                )
            })
            .collect();
        rep.plots.extend(line_plot(
            out,
            &format!("fxmark_{}", test.to_lowercase()),
            &Lines {
                title: &format!("FxMark {test}"),
                x_desc: "threads",
                y_desc: "operations/s",
                series: &series,
                log_x: false,
                points: true,
            },
        )?);
    }
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::selected;

    #[test]
    fn tests_run_in_fixed_order_and_mwul_needs_mwcl() {
        assert_eq!(selected("mwcl,DWAL").unwrap(), ["DWAL", "MWCL"]);
        assert_eq!(selected("DWOL,DWAL,MWCL,MWUL").unwrap().len(), 4);
        let e = selected("MWUL").unwrap_err().to_string();
        assert!(e.contains("MWCL"), "{e}");
        let e = selected("DWAL,XX").unwrap_err().to_string();
        assert!(e.contains("\"XX\""), "{e}");
        assert!(selected(" , ").is_err());
    }
}
