//! `filebench`: the fileserver, varmail and OLTP personalities of ScaleLFS Table 2, scaled
//! to the volume, each starting above 90 % utilization (ScaleLFS: "more than 95 %"; `--fill`
//! sets it, default 0.9).
//!
//! Per policy and personality, a fresh volume gets a ballast file (never touched again) so
//! that ballast + fileset = `--fill` of the volume, then the fileset, then `--duration` of:
//! - fileserver (fileset 20 % of the volume in 200 files, ScaleLFS: 500 files of 64 MB):
//!   delete a random file and create it again written whole, append 16 KiB to a random file,
//!   read a random file whole, stat a random file;
//! - varmail (20 % in 1000 files, ScaleLFS: 1000 files of 28 MB): delete and recreate a file
//!   with a 16 KiB append and fsync, append 16 KiB to another and fsync, read two files whole;
//! - OLTP (20 % in 10 data files + a log file, ScaleLFS: 28 files of 1000 MB and a 200 MB
//!   log, 3 writers and 16 readers): N·16/19 readers doing random 4 KiB reads, the rest
//!   writers doing random 4 KiB writes, plus one log writer appending 256 KiB with fsync.
//!
//! Counted operations are filebench flowops (each create, write, append, read, delete, stat,
//! fsync). Reported: ops/s, MiB/s written and read, GC runs, stall time, WAF.

use super::{pattern, run_workers, Volume};
use crate::metrics::{LatSummary, Rng};
use crate::plot::{bar_plot, Bars};
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, Result};
use flashlog_core::{Error as FsError, Fs, Ino, SetAttr, ROOT_INO};
use std::sync::atomic::Ordering;
use std::time::Instant;

pub const PERSONALITIES: [&str; 3] = ["fileserver", "varmail", "oltp"];
const FILESET_FRACTION: f64 = 0.2;
const APPEND: u64 = 16 << 10;
const OLTP_IO: u64 = 4096;
const OLTP_LOG_IO: u64 = 256 << 10;
/// The OLTP log is truncated here, or sooner on a small volume (`Volume::log_cap`).
const OLTP_LOG_MAX: u64 = 64 << 20;

#[derive(Clone, Debug, serde::Serialize)]
pub struct FbResult {
    pub policy: String,
    pub personality: String,
    pub files: u64,
    pub mean_file_bytes: u64,
    pub start_utilization: f64,
    pub ops: u64,
    pub secs: f64,
    pub ops_s: f64,
    pub write_mib_s: f64,
    pub read_mib_s: f64,
    pub latency: LatSummary,
    pub gc_runs: u64,
    pub stall_time_s: f64,
    pub waf: f64,
    pub error: Option<String>,
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    let mut results = Vec::new();
    let bar = ctx.bar(
        (ctx.policies.len() * PERSONALITIES.len()) as u64,
        "filebench".into(),
        false,
    );
    for p in &ctx.policies {
        for pers in PERSONALITIES {
            bar.set_message(format!("{} {pers}", p.label));
            results.push(run_one(ctx, p, pers)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    build_report(ctx, results)
}

fn write_whole(fs: &Fs, ino: Ino, size: u64, buf: &[u8]) -> flashlog_core::Result<()> {
    let mut off = 0;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        fs.write(ino, off, &buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

fn read_whole(fs: &Fs, ino: Ino, buf: &mut [u8]) -> flashlog_core::Result<u64> {
    let mut off = 0;
    loop {
        let n = fs.read(ino, off, buf)?;
        if n == 0 {
            return Ok(off);
        }
        off += n as u64;
    }
}

/// NotFound (the file was deleted by another thread after the lookup) is not an error.
fn gone_ok(r: flashlog_core::Result<()>) -> Result<()> {
    match r {
        Ok(()) | Err(FsError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn run_one(ctx: &Ctx, p: &crate::policy::PolicySpec, pers: &str) -> Result<FbResult> {
    let threads = ctx.args.threads;
    let vol = Volume::open(ctx, p)?;
    let fs = vol.fs.clone();
    let user = vol.user_bytes();
    let fileset = (user as f64 * FILESET_FRACTION) as u64;
    let ballast = (user as f64 * ctx.args.fill) as u64 - fileset;
    let buf = pattern(1 << 20, ctx.args.seed);
    let b = fs
        .create(ROOT_INO, b"ballast", 0o644, 0, 0)
        .map_err(|e| anyhow!("ballast: {e}"))?;
    write_whole(&fs, b.ino, ballast / 4096 * 4096, &buf).map_err(|e| anyhow!("ballast: {e}"))?;
    let (nfiles, mean) = match pers {
        "fileserver" => (200u64, fileset / 200),
        "varmail" => (1000, fileset / 1000),
        _ => (10, fileset / 10),
    };
    let mean = mean / 4096 * 4096;
    let dir = fs
        .mkdir(ROOT_INO, b"fileset", 0o755, 0, 0)
        .map_err(|e| anyhow!("mkdir: {e}"))?
        .ino;
    let mut inos: Vec<Ino> = Vec::new();
    for i in 0..nfiles {
        let a = fs
            .create(dir, format!("f{i}").as_bytes(), 0o644, 0, 0)
            .map_err(|e| anyhow!("fileset: {e}"))?;
        write_whole(&fs, a.ino, mean, &buf).map_err(|e| anyhow!("fileset: {e}"))?;
        inos.push(a.ino);
    }
    let log = fs
        .create(ROOT_INO, b"oltp.log", 0o644, 0, 0)
        .map_err(|e| anyhow!("log: {e}"))?
        .ino;
    fs.sync().map_err(|e| anyhow!("sync: {e}"))?;
    let st = fs.statfs();
    let start_util = 1.0 - st.blocks_free as f64 / st.blocks as f64;
    let log_max = vol.log_cap(1, OLTP_LOG_MAX, OLTP_LOG_IO);
    let s0 = fs.stats();
    // OLTP thread roles: readers, writers, and one extra log writer.
    let readers = if pers == "oltp" {
        (threads * 16 / 19).clamp(1, threads.saturating_sub(1).max(1))
    } else {
        0
    };
    let workers = if pers == "oltp" { threads + 1 } else { threads };
    let (ops, secs, lat, err) = run_workers(workers, ctx.duration(), |t, stop, lat| {
        let mut rng = Rng::new(ctx.args.seed, t as u64 + 77);
        let mut rbuf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        // Each thread owns the files i with i % threads == t, so deletes never race.
        let mine = |r: &mut Rng| -> u64 {
            let per = (nfiles / threads as u64).max(1);
            (r.below(per) * threads as u64 + t as u64).min(nfiles - 1)
        };
        let any = |r: &mut Rng| -> u64 { r.below(nfiles) };
        let name = |i: u64| format!("f{i}");
        let size =
            |r: &mut Rng| -> u64 { ((mean / 2 + r.below(mean.max(1))) / 4096 * 4096).max(4096) };
        let recreate = |i: u64, r: &mut Rng| -> Result<Ino> {
            match fs.unlink(dir, name(i).as_bytes()) {
                Ok(()) | Err(FsError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
            let a = fs.create(dir, name(i).as_bytes(), 0o644, 0, 0)?;
            let sz = size(r);
            write_whole(&fs, a.ino, sz, &buf)?;
            Ok(a.ino)
        };
        let lookup = |i: u64| fs.lookup(dir, name(i).as_bytes()).map(|a| (a.ino, a.size));
        let mut log_off = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            match pers {
                "fileserver" => {
                    let i = mine(&mut rng);
                    recreate(i, &mut rng)?;
                    // Another thread may delete a file between lookup and use.
                    if let Ok((ino, sz)) = lookup(any(&mut rng)) {
                        gone_ok(fs.write(ino, sz, &buf[..APPEND as usize]).map(|_| ()))?;
                    }
                    if let Ok((ino, _)) = lookup(any(&mut rng)) {
                        gone_ok(read_whole(&fs, ino, &mut rbuf).map(|_| ()))?;
                    }
                    let _ = lookup(any(&mut rng));
                    // delete, create, write whole, append, read whole, stat.
                    n += 6;
                }
                "varmail" => {
                    let i = mine(&mut rng);
                    match fs.unlink(dir, name(i).as_bytes()) {
                        Ok(()) | Err(FsError::NotFound) => {}
                        Err(e) => return Err(e.into()),
                    }
                    let a = fs.create(dir, name(i).as_bytes(), 0o644, 0, 0)?;
                    fs.write(a.ino, 0, &buf[..APPEND as usize])?;
                    fs.fsync(a.ino, false)?;
                    if let Ok((ino, sz)) = lookup(mine(&mut rng)) {
                        fs.write(ino, sz, &buf[..APPEND as usize])?;
                        fs.fsync(ino, false)?;
                    }
                    for _ in 0..2 {
                        if let Ok((ino, _)) = lookup(any(&mut rng)) {
                            gone_ok(read_whole(&fs, ino, &mut rbuf).map(|_| ()))?;
                        }
                    }
                    n += 8;
                }
                _ => {
                    if t == workers - 1 {
                        if log_off >= log_max {
                            let a = SetAttr {
                                size: Some(0),
                                ..Default::default()
                            };
                            fs.setattr(log, &a)?;
                            log_off = 0;
                        }
                        fs.write(log, log_off, &buf[..OLTP_LOG_IO as usize])?;
                        fs.fsync(log, true)?;
                        log_off += OLTP_LOG_IO;
                        n += 2;
                    } else {
                        let ino = inos[any(&mut rng) as usize];
                        let off = rng.below(mean / OLTP_IO) * OLTP_IO;
                        if t < readers {
                            fs.read(ino, off, &mut rbuf[..OLTP_IO as usize])?;
                        } else {
                            fs.write(ino, off, &buf[..OLTP_IO as usize])?;
                        }
                        n += 1;
                    }
                }
            }
            lat.record(t0);
        }
        Ok(n)
    });
    let s1 = fs.stats();
    drop(fs);
    let end = vol.finish()?;
    let mib = (1u64 << 20) as f64 * secs.max(1e-9);
    let dapp = s1.app_write_bytes - s0.app_write_bytes;
    Ok(FbResult {
        policy: p.label.clone(),
        personality: pers.to_string(),
        files: nfiles,
        mean_file_bytes: mean,
        start_utilization: start_util,
        ops,
        secs,
        ops_s: ops as f64 / secs.max(1e-9),
        write_mib_s: dapp as f64 / mib,
        read_mib_s: (s1.app_read_bytes - s0.app_read_bytes) as f64 / mib,
        latency: lat.summary(),
        gc_runs: (s1.gc_fg_runs + s1.gc_bg_runs) - (s0.gc_fg_runs + s0.gc_bg_runs),
        stall_time_s: s1.stall_time_s - s0.stall_time_s,
        waf: if dapp == 0 {
            0.0
        } else {
            (s1.dev_write_blocks - s0.dev_write_blocks) as f64 * 4096.0 / dapp as f64
        },
        error: err.or(end.problem()),
    })
}

fn build_report(ctx: &Ctx, results: Vec<FbResult>) -> Result<Report> {
    let out = &ctx.args.out;
    let mut rep = Report::new("filebench", out, ctx.config_json());
    let mut t = Table::new(&[
        "personality",
        "policy",
        "files",
        "mean KiB",
        "start util",
        "ops/s",
        "write MiB/s",
        "read MiB/s",
        "p99 us",
        "GC runs",
        "stall s",
        "WAF",
    ]);
    for r in &results {
        t.row(vec![
            r.personality.clone(),
            r.policy.clone(),
            r.files.to_string(),
            num(r.mean_file_bytes as f64 / 1024.0),
            format!("{:.1}%", r.start_utilization * 100.0),
            num(r.ops_s),
            num(r.write_mib_s),
            num(r.read_mib_s),
            num(r.latency.p99_us),
            r.gc_runs.to_string(),
            num(r.stall_time_s),
            num(r.waf),
        ]);
    }
    let mut body = t.render();
    for r in &results {
        if let Some(e) = &r.error {
            body += &format!("{} {}: ERROR {e}\n", r.personality, r.policy);
        }
    }
    rep.section(
        &format!(
            "filebench personalities, {} threads, {} s each, {}",
            ctx.args.threads,
            ctx.args.duration,
            ctx.device.describe()
        ),
        body,
    );
    let groups: Vec<String> = PERSONALITIES.iter().map(|s| s.to_string()).collect();
    let series: Vec<(String, Vec<f64>)> = ctx
        .policies
        .iter()
        .map(|p| {
            (
                p.label.clone(),
                groups
                    .iter()
                    .map(|g| {
                        results
                            .iter()
                            .find(|r| &r.personality == g && r.policy == p.label)
                            .map_or(0.0, |r| r.ops_s)
                    })
                    .collect(),
            )
        })
        .collect();
    rep.plots.extend(bar_plot(
        out,
        "filebench_throughput",
        &Bars {
            title: "filebench throughput (flowops/s)",
            y_desc: "operations/s",
            groups: &groups,
            series: &series,
        },
    )?);
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}
