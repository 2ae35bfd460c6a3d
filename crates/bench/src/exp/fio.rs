//! `fio`: the same jobs through four mounts over the same backing storage (the disk under
//! `--out`), so that Flashlog's FUSE path can be compared with its peers:
//! - Flashlog: `flashlog mkfs --size SIZE IMG` + `flashlog mount --daemon -o gc=..,mode=..
//!   IMG MNT`, once per policy (the binary: `--flashlog-bin`, else next to this executable,
//!   else target/release, else PATH);
//! - libfuse's `passthrough` example (built here with cc and pkg-config from
//!   /usr/share/doc/libfuse3-dev/examples/passthrough.c) over a directory of that disk: the
//!   peer the 90 % targets name; its FSYNC is a stub (returns 0), so its `end_fsync` makes
//!   nothing durable;
//! - libfuse's `passthrough_ll` example (same place), whose FSYNC calls fsync(2): the same
//!   storage with a real fsync, reported as a second ratio;
//! - kernel ext4 on a loop device over an image file of the same size (root only).
//!
//! Each job runs on every mount in turn, each mount made fresh for it (a new Flashlog
//! volume, a new ext4, an empty passthrough directory) and followed by a `sync`, so that
//! no mount's job runs while another's writes still drain to the disk.
//!
//! Jobs, N threads each: `seqwrite` (one file per thread, 1 MiB writes, fsync), `randwrite`
//! (4 KiB random overwrites of a laid-out file per thread for `--duration`, then fsync),
//! `createunlink` (create a 4 KiB file and unlink it, in a private directory per thread).
//! seqwrite and randwrite use fio (`--output-format=json`) when it is on PATH, otherwise the
//! built-in generator; createunlink always uses the built-in one. Reported: MiB/s or ops/s per
//! mount, Flashlog / peer ratios against the 90 % targets, and the Flashlog daemon's CPU time
//! per job (a daemon near 100 % of a core per FUSE thread is CPU bound).
//!
//! Also the in-process target: a sequential write through the library API on `--device`
//! against the raw device's sequential write bandwidth (80 %).

use super::{pattern, Volume};
use crate::device::raw_write_mib_s;
use crate::metrics::Rng;
use crate::plot::{bar_plot, Bars};
use crate::report::{num, Report, Table};
use crate::Ctx;
use anyhow::{anyhow, bail, Context, Result};
use flashlog_core::ROOT_INO;
use serde_json::json;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const JOBS: [&str; 3] = ["seqwrite", "randwrite", "createunlink"];
const PASSTHROUGH_SRC: &str = "/usr/share/doc/libfuse3-dev/examples/passthrough.c";
const PASSTHROUGH_LL_SRC: &str = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c";
/// The peer the targets name: `passthrough.c`, whose fsync does nothing.
const PEER_STUB: &str = "libfuse passthrough";
/// The same storage with a real fsync: `passthrough_ll.c`.
const PEER_LL: &str = "libfuse passthrough_ll";
/// Kernel ext4 on a loop device.
const PEER_EXT4: &str = "ext4 (loop)";

#[derive(Clone, Debug, serde::Serialize)]
pub struct JobResult {
    pub mount: String,
    pub job: String,
    /// MiB/s for the write jobs, ops/s for createunlink.
    pub value: f64,
    pub unit: String,
    pub secs: f64,
    pub tool: String,
    /// Flashlog daemon CPU seconds during the job (Flashlog mounts only).
    pub daemon_cpu_s: Option<f64>,
    pub error: Option<String>,
}

/// A mounted file system under test.
struct Mounted {
    label: String,
    /// Directory the jobs run in.
    dir: PathBuf,
    mnt: PathBuf,
    daemon_pid: Option<u32>,
    loopdev: Option<String>,
}

fn sh(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// The flashlog binary.
fn flashlog_bin(ctx: &Ctx) -> Result<PathBuf> {
    if let Some(b) = &ctx.args.flashlog_bin {
        return Ok(b.clone());
    }
    let mut c = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "flashlog") {
            c.push(exe.clone());
        }
        if let Some(d) = exe.parent() {
            c.push(d.join("flashlog"));
            if let Some(dd) = d.parent() {
                c.push(dd.join("flashlog"));
            }
        }
    }
    c.push(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/release/flashlog"
    )));
    if let Some(p) = on_path("flashlog") {
        c.push(p);
    }
    c.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        anyhow!("the flashlog binary was not found (build it with `cargo build --release -p flashlog` or pass --flashlog-bin)")
    })
}

fn unmount(m: &Mounted) {
    let _ = Command::new("fusermount3").arg("-u").arg(&m.mnt).output();
    let _ = Command::new("umount").arg(&m.mnt).output();
    if let Some(l) = &m.loopdev {
        let _ = Command::new("losetup").arg("-d").arg(l).output();
    }
    // Wait for a FUSE daemon to finish its final checkpoint.
    if let Some(pid) = m.daemon_pid {
        let t = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn mount_flashlog(
    ctx: &Ctx,
    work: &Path,
    p: &crate::policy::PolicySpec,
    bytes: u64,
) -> Result<Mounted> {
    let bin = flashlog_bin(ctx)?;
    let img = work.join("flashlog.img");
    let mnt = work.join("mnt-flashlog");
    std::fs::create_dir_all(&mnt)?;
    let _ = std::fs::remove_file(&img);
    sh(Command::new(&bin)
        .arg("mkfs")
        .arg("--force")
        .arg("--size")
        .arg(bytes.to_string())
        .arg(&img))?;
    let mode = match p.alloc_mode {
        flashlog_core::AllocMode::Lfs => "lfs",
        flashlog_core::AllocMode::Adaptive => "adaptive",
    };
    let pidf = work.join("flashlog.pid");
    let _ = std::fs::remove_file(&pidf);
    sh(Command::new(&bin)
        .arg("mount")
        .arg("--daemon")
        .arg("--pid-file")
        .arg(&pidf)
        .arg("--log")
        .arg(mount_log(work, &p.label))
        .arg("-o")
        .arg(match &ctx.args.mount_opts {
            Some(extra) => format!("gc={},mode={mode},{extra}", p.gc.name()),
            None => format!("gc={},mode={mode}", p.gc.name()),
        })
        .arg(&img)
        .arg(&mnt))?;
    let pid = std::fs::read_to_string(&pidf)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Ok(Mounted {
        label: format!("flashlog {}", p.label),
        dir: mnt.clone(),
        mnt,
        daemon_pid: pid,
        loopdev: None,
    })
}

/// The daemon's log of one policy's mount (kept in the output directory).
fn mount_log(work: &Path, label: &str) -> PathBuf {
    work.join(format!(
        "flashlog-mount-{}.log",
        label.replace(['/', ' '], "_")
    ))
}

/// libfuse's two passthrough examples over a directory of the bench's disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Passthrough {
    /// `passthrough.c` (high-level API): its FSYNC is a stub that returns 0.
    Stub,
    /// `passthrough_ll.c` (low-level API): its FSYNC calls fsync(2)/fdatasync(2).
    Ll,
}

impl Passthrough {
    fn src(self) -> &'static str {
        match self {
            Passthrough::Stub => PASSTHROUGH_SRC,
            Passthrough::Ll => PASSTHROUGH_LL_SRC,
        }
    }
    fn label(self) -> &'static str {
        match self {
            Passthrough::Stub => PEER_STUB,
            Passthrough::Ll => PEER_LL,
        }
    }
}

fn mount_passthrough(work: &Path, which: Passthrough) -> Result<Mounted> {
    let src = which.src();
    if !Path::new(src).exists() {
        bail!("{src} not found: install libfuse3-dev (its examples include the passthrough file systems)");
    }
    let name = Path::new(src)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("passthrough");
    let bin = work.join(name);
    if !bin.exists() {
        let flags = sh(Command::new("pkg-config").args(["fuse3", "--cflags", "--libs"]))?;
        let mut c = Command::new("cc");
        c.args(["-O2", "-Wall", src, "-o"]).arg(&bin);
        c.args(flags.split_whitespace());
        sh(&mut c).with_context(|| format!("building libfuse's {name} example"))?;
    }
    let mnt = work.join(format!("mnt-{name}"));
    let backing = work.join(format!("{name}-backing"));
    let _ = std::fs::remove_dir_all(&backing);
    std::fs::create_dir_all(&mnt)?;
    std::fs::create_dir_all(&backing)?;
    let abs = backing.canonicalize()?;
    let dir = match which {
        Passthrough::Stub => {
            sh(Command::new(&bin).arg(&mnt))?;
            // passthrough mirrors "/": the backing directory appears under the mount point.
            mnt.join(abs.strip_prefix("/").unwrap_or(&abs))
        }
        Passthrough::Ll => {
            // passthrough_ll mounts its source directory (default cache=auto, no writeback).
            sh(Command::new(&bin)
                .arg("-o")
                .arg(format!("source={}", abs.display()))
                .arg(&mnt))?;
            mnt.clone()
        }
    };
    Ok(Mounted {
        label: which.label().into(),
        dir,
        mnt,
        daemon_pid: None,
        loopdev: None,
    })
}

fn mount_ext4(work: &Path, bytes: u64) -> Result<Mounted> {
    let img = work.join("ext4.img");
    let _ = std::fs::remove_file(&img);
    let f = std::fs::File::create(&img)?;
    f.set_len(bytes)?;
    drop(f);
    let dev = sh(Command::new("losetup").args(["--find", "--show"]).arg(&img))?;
    let mnt = work.join("mnt-ext4");
    std::fs::create_dir_all(&mnt)?;
    let m = Mounted {
        label: PEER_EXT4.into(),
        dir: mnt.clone(),
        mnt: mnt.clone(),
        daemon_pid: None,
        loopdev: Some(dev.clone()),
    };
    if let Err(e) = sh(Command::new("mkfs.ext4").args(["-q", "-F", &dev]))
        .and_then(|_| sh(Command::new("mount").arg(&dev).arg(&mnt)))
    {
        unmount(&m);
        return Err(e);
    }
    Ok(m)
}

/// CPU seconds of a process so far.
fn proc_cpu_s(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

/// Run one job on a mount: (value, unit, seconds, tool).
fn job(ctx: &Ctx, m: &Mounted, job: &str, size: u64) -> Result<(f64, &'static str, f64, String)> {
    let threads = ctx.args.threads;
    let dur = ctx.duration();
    let dir = m.dir.join(format!("job-{job}"));
    std::fs::create_dir_all(&dir)?;
    let per = size / threads as u64 / (1 << 20) * (1 << 20);
    let use_fio = job != "createunlink" && on_path("fio").is_some();
    let r = if use_fio {
        let mut c = Command::new("fio");
        c.arg(format!("--name={job}"))
            .arg(format!("--directory={}", dir.display()))
            .arg(format!("--numjobs={threads}"))
            .arg(format!("--size={per}"))
            .arg("--ioengine=psync")
            .arg("--end_fsync=1")
            .arg("--group_reporting")
            .arg("--output-format=json");
        if job == "seqwrite" {
            c.args(["--rw=write", "--bs=1M"]);
        } else {
            c.args(["--rw=randwrite", "--bs=4k", "--time_based"])
                .arg(format!("--runtime={}", ctx.args.duration.ceil() as u64));
        }
        let t0 = Instant::now();
        let out = sh(&mut c)?;
        let secs = t0.elapsed().as_secs_f64();
        let v: serde_json::Value = serde_json::from_str(&out).context("fio JSON output")?;
        let bw = v["jobs"][0]["write"]["bw_bytes"].as_f64().unwrap_or(0.0);
        (bw / (1u64 << 20) as f64, "MiB/s", secs, "fio".to_string())
    } else {
        builtin(job, &dir, threads, per, dur, ctx.args.seed)?
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(r)
}

/// The built-in generator (std::fs against the mount path).
fn builtin(
    job: &str,
    dir: &Path,
    threads: usize,
    per: u64,
    dur: Duration,
    seed: u64,
) -> Result<(f64, &'static str, f64, String)> {
    let mb = pattern(1 << 20, seed);
    // Lay out the random-write files first (not timed).
    if job == "randwrite" {
        for t in 0..threads {
            let mut f = std::fs::File::create(dir.join(format!("f{t}")))?;
            let mut off = 0;
            while off < per {
                f.write_all(&mb)?;
                off += mb.len() as u64;
            }
            f.sync_all()?;
        }
    }
    let t0 = Instant::now();
    let deadline = t0 + dur;
    let totals: Vec<Result<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let mb = &mb;
                s.spawn(move || -> Result<u64> {
                    match job {
                        "seqwrite" => {
                            let mut f = std::fs::File::create(dir.join(format!("f{t}")))?;
                            let mut off = 0;
                            while off < per {
                                f.write_all(mb)?;
                                off += mb.len() as u64;
                            }
                            f.sync_all()?;
                            Ok(off)
                        }
                        "randwrite" => {
                            let f = std::fs::OpenOptions::new()
                                .write(true)
                                .open(dir.join(format!("f{t}")))?;
                            let mut r = Rng::new(seed, t as u64);
                            let blocks = per / 4096;
                            let mut n = 0u64;
                            while Instant::now() < deadline {
                                for _ in 0..64 {
                                    f.write_all_at(&mb[..4096], r.below(blocks) * 4096)?;
                                    n += 4096;
                                }
                            }
                            f.sync_all()?;
                            Ok(n)
                        }
                        _ => {
                            let d = dir.join(format!("d{t}"));
                            std::fs::create_dir_all(&d)?;
                            let mut n = 0u64;
                            while Instant::now() < deadline {
                                for i in 0..64 {
                                    let p = d.join(format!("f{i}"));
                                    let mut f = std::fs::File::create(&p)?;
                                    f.write_all(&mb[..4096])?;
                                    drop(f);
                                    std::fs::remove_file(&p)?;
                                    n += 2;
                                }
                            }
                            Ok(n)
                        }
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("job thread panicked")))
            })
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut total = 0;
    for t in totals {
        total += t?;
    }
    Ok(if job == "createunlink" {
        (total as f64 / secs, "ops/s", secs, "built-in".into())
    } else {
        (
            total as f64 / (1u64 << 20) as f64 / secs,
            "MiB/s",
            secs,
            "built-in".into(),
        )
    })
}

/// In-process sequential write on `--device`: N files, 1 MiB writes, fsync. MiB/s.
fn inproc_seq(ctx: &Ctx, p: &crate::policy::PolicySpec, bytes: u64) -> Result<f64> {
    let vol = Volume::open(ctx, p)?;
    let threads = ctx.args.threads;
    let per = bytes / threads as u64 / (1 << 20) * (1 << 20);
    let buf = pattern(1 << 20, ctx.args.seed);
    let t0 = Instant::now();
    let r: Result<()> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (fs, buf) = (vol.fs.clone(), &buf);
                s.spawn(move || -> Result<()> {
                    let a = fs.create(ROOT_INO, format!("seq.{t}").as_bytes(), 0o644, 0, 0)?;
                    let mut off = 0;
                    while off < per {
                        fs.write(a.ino, off, buf)?;
                        off += buf.len() as u64;
                    }
                    fs.fsync(a.ino, false)?;
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| anyhow!("writer panicked"))??;
        }
        Ok(())
    });
    let secs = t0.elapsed().as_secs_f64();
    r?;
    vol.finish()?;
    Ok((per * threads as u64) as f64 / (1u64 << 20) as f64 / secs)
}

pub fn run(ctx: &Ctx) -> Result<Report> {
    let out = &ctx.args.out;
    let work = out.join("fio-work");
    std::fs::create_dir_all(&work)?;
    let bytes = ctx.device.bytes()?;
    let job_bytes = (bytes / 4).min(512 << 20);
    let mut results: Vec<JobResult> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut mounts: Vec<String> = Vec::new();
    // Every mount the jobs run on, made fresh for each job. Jobs are the outer loop and the
    // mounts take turns within each job, with a `sync` after each: one mount's writes still
    // going to the disk (or a disk that slows down after gigabytes) must not fall on the
    // next mount's job. (Run all jobs of one mount, then the next, the peers measured 2-4x
    // slower than on their own after Flashlog's random-write jobs, on this VM's disk.)
    type MountFn<'a> = Box<dyn Fn() -> Result<Mounted> + 'a>;
    let mut makers: Vec<(String, MountFn)> = Vec::new();
    for p in &ctx.policies {
        let (work, bytes) = (&work, bytes);
        makers.push((
            format!("flashlog {}", p.label),
            Box::new(move || mount_flashlog(ctx, work, p, bytes)),
        ));
    }
    if !ctx.args.no_peers {
        for which in [Passthrough::Stub, Passthrough::Ll] {
            let work = &work;
            makers.push((
                which.label().to_string(),
                Box::new(move || mount_passthrough(work, which)),
            ));
        }
        let (work, bytes) = (&work, bytes);
        makers.push((
            PEER_EXT4.to_string(),
            Box::new(move || mount_ext4(work, bytes)),
        ));
    }
    let bar = ctx.bar((makers.len() * JOBS.len()) as u64, "fio".into(), false);
    for j in JOBS {
        for (label, make) in &makers {
            bar.set_message(format!("{label} {j}"));
            let m = match make() {
                Ok(m) => m,
                Err(e) => {
                    notes.push(format!("{label} {j}: not measured: {e:#}"));
                    bar.inc(1);
                    continue;
                }
            };
            if !mounts.contains(&m.label) {
                mounts.push(m.label.clone());
            }
            let c0 = m.daemon_pid.and_then(proc_cpu_s);
            let r = job(ctx, &m, j, job_bytes);
            let c1 = m.daemon_pid.and_then(proc_cpu_s);
            let daemon_cpu_s = c0.zip(c1).map(|(a, b)| b - a);
            results.push(match r {
                Ok((value, unit, secs, tool)) => JobResult {
                    mount: m.label.clone(),
                    job: j.into(),
                    value,
                    unit: unit.into(),
                    secs,
                    tool,
                    daemon_cpu_s,
                    error: None,
                },
                Err(e) => JobResult {
                    mount: m.label.clone(),
                    job: j.into(),
                    value: 0.0,
                    unit: String::new(),
                    secs: 0.0,
                    tool: String::new(),
                    daemon_cpu_s,
                    error: Some(format!("{e:#}")),
                },
            });
            unmount(&m);
            // SAFETY: sync(2) takes no arguments and touches no memory of ours.
            unsafe { libc::sync() };
            // The daemon's request counters (logged at unmount): how many WRITEs of what
            // size, and the extra round trips (GETXATTR before writes without
            // HANDLE_KILLPRIV_V2).
            if let Some(policy) = m.label.strip_prefix("flashlog ") {
                let log = std::fs::read_to_string(mount_log(&work, policy)).unwrap_or_default();
                if let Some(l) = log
                    .lines()
                    .rev()
                    .find_map(|l| l.split_once("FUSE requests: "))
                {
                    notes.push(format!("{} daemon, {j}: {}", m.label, l.1));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let _ = std::fs::remove_file(work.join("flashlog.img"));
    let _ = std::fs::remove_file(work.join("ext4.img"));

    // In-process sequential write vs the raw device.
    let raw = raw_write_mib_s(&ctx.device, job_bytes, ctx.args.threads)?;
    let mut inproc = Vec::new();
    for p in &ctx.policies {
        let v = inproc_seq(ctx, p, job_bytes)?;
        inproc.push(json!({"policy": p.label, "inproc_seq_write_mib_s": v,
            "raw_device_write_mib_s": raw, "ratio": v / raw.max(1e-9), "target_met": v >= 0.8 * raw}));
    }

    // Report.
    let mut rep = Report::new("fio", out, ctx.config_json());
    let mut t = Table::new(&[
        "mount",
        "seqwrite MiB/s",
        "randwrite MiB/s",
        "create+unlink ops/s",
        "tool",
        "daemon CPU s (seq/rand/cu)",
    ]);
    for m in &mounts {
        let get = |j: &str| results.iter().find(|r| &r.mount == m && r.job == j);
        let cell = |j: &str| {
            get(j).map_or("-".into(), |r| {
                if r.error.is_some() {
                    "ERR".into()
                } else {
                    num(r.value)
                }
            })
        };
        let cpu: Vec<String> = JOBS
            .iter()
            .map(|j| get(j).and_then(|r| r.daemon_cpu_s).map_or("-".into(), num))
            .collect();
        t.row(vec![
            m.clone(),
            cell("seqwrite"),
            cell("randwrite"),
            cell("createunlink"),
            get("seqwrite").map_or("-".into(), |r| r.tool.clone()),
            cpu.join("/"),
        ]);
    }
    let mut body = t.render();
    for r in &results {
        if let Some(e) = &r.error {
            body += &format!("{} {}: ERROR {e}\n", r.mount, r.job);
        }
    }
    for n in &notes {
        body += &format!("{n}\n");
    }
    rep.section(
        &format!(
            "through the mount, {} threads, {} MiB per write job, {} s random/create jobs, backing storage: the disk of {}",
            ctx.args.threads,
            job_bytes >> 20,
            ctx.args.duration,
            out.display()
        ),
        body,
    );
    // Ratios and targets.
    let mut targets = Vec::new();
    let mut t2 = Table::new(&[
        "flashlog policy",
        "job",
        "vs passthrough",
        "target 90%",
        "vs passthrough_ll",
        "90% of _ll",
        "vs ext4",
    ]);
    for p in &ctx.policies {
        let me = format!("flashlog {}", p.label);
        for j in JOBS {
            let v = |m: &str| {
                results
                    .iter()
                    .find(|r| r.mount == m && r.job == j && r.error.is_none())
                    .map(|r| r.value)
            };
            let f = v(&me);
            let ratio = |peer: &str| f.zip(v(peer)).map(|(a, b)| a / b.max(1e-9));
            let (rp, rl, re) = (ratio(PEER_STUB), ratio(PEER_LL), ratio(PEER_EXT4));
            let pct = |r: Option<f64>| r.map_or("-".into(), |x| format!("{:.0}%", x * 100.0));
            let met = |r: Option<f64>| {
                r.map_or("-".into(), |x| {
                    if x >= 0.9 {
                        "met".into()
                    } else {
                        "MISSED".into()
                    }
                })
            };
            t2.row(vec![
                p.label.clone(),
                j.into(),
                pct(rp),
                met(rp),
                pct(rl),
                met(rl),
                pct(re),
            ]);
            targets.push(
                json!({"policy": p.label, "job": j, "ratio_vs_passthrough": rp,
                "ratio_vs_passthrough_ll": rl, "ratio_vs_ext4": re,
                "target_met": rp.map(|x| x >= 0.9), "met_vs_passthrough_ll": rl.map(|x| x >= 0.9)}),
            );
        }
    }
    let mut body2 = t2.render();
    for v in &inproc {
        body2 += &format!(
            "in-process sequential write ({}): {:.0} MiB/s = {:.0}% of the raw device ({:.0} MiB/s, {}); target 80%: {}\n",
            v["policy"].as_str().unwrap_or(""),
            v["inproc_seq_write_mib_s"].as_f64().unwrap_or(0.0),
            v["ratio"].as_f64().unwrap_or(0.0) * 100.0,
            raw,
            ctx.device.describe(),
            if v["target_met"].as_bool() == Some(true) { "met" } else { "MISSED" }
        );
    }
    rep.section("ratios and targets", body2);
    let groups: Vec<String> = JOBS.iter().map(|s| s.to_string()).collect();
    let series: Vec<(String, Vec<f64>)> = mounts
        .iter()
        .map(|m| {
            // Normalised to the passthrough peer (1.0 = equal), or raw values without it.
            let base = |j: &str| {
                results
                    .iter()
                    .find(|r| r.mount == PEER_STUB && r.job == j)
                    .map_or(1.0, |r| r.value.max(1e-9))
            };
            (
                m.clone(),
                JOBS.iter()
                    .map(|j| {
                        results
                            .iter()
                            .find(|r| &r.mount == m && r.job == *j)
                            .map_or(0.0, |r| r.value / base(j))
                    })
                    .collect(),
            )
        })
        .collect();
    rep.plots.extend(bar_plot(
        out,
        "fio_relative",
        &Bars {
            title: "through the mount, relative to libfuse passthrough",
            y_desc: "throughput / passthrough",
            groups: &groups,
            series: &series,
        },
    )?);
    rep.extra.insert("targets".into(), json!(targets));
    rep.extra.insert("inproc".into(), json!(inproc));
    rep.extra.insert("notes".into(), json!(notes));
    rep.results = serde_json::to_value(&results)?;
    Ok(rep)
}
