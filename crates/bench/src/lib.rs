//! `flashlog bench`: the papers' experiments, run side by side for each GC policy in one run,
//! with a table, a JSON report and plots (SVG and PNG) in `--out DIR`.
//!
//! Experiments (in-process through the library API unless noted; see docs/BENCHMARKS.md):
//! - `sustained`: ScaleLFS §5.1 (Fig. 1, 9a-c): fill ~90 % with one file per thread, then
//!   random 4 KiB overwrites until cleaning dominates; bandwidth over time, latency CDF;
//! - `fxmark`: Max Fig. 6-7: DWOL, DWAL, MWCL, MWUL over 1..N threads;
//! - `filebench`: fileserver, varmail, OLTP (ScaleLFS Table 2, scaled) above 90 % full;
//! - `ycsb`: key-value records in files, workloads A, B, F and update-only;
//! - `vop`, `gccost`, `memory`: D2FS Fig. 10-11, Fig. 16, Table 1 / Fig. 17 and the IPLFS
//!   mapping-memory comparison (see their modules);
//! - `fio`: through the FUSE mount (`flashlog mount --daemon`), against the libfuse
//!   passthrough example and kernel ext4 on a loop device; plus in-process sequential write
//!   against the raw device.
//!
//! Module map: `policy` (policy specs as data), `device` (device specs, byte counting),
//! `metrics` (histograms, sampler, CPU/RSS), `report` (table, JSON), `plot` (plotters),
//! `exp::*` (one module per experiment, sharing `exp::Volume`).
//!
//! Targets are measured and reported here, never asserted in tests.

pub mod device;
pub mod exp;
pub mod gauges;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod report;

use anyhow::{bail, Context, Result};
use device::DeviceSpec;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use policy::PolicySpec;
use std::path::PathBuf;
use std::time::Duration;

/// The experiments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    /// ScaleLFS §5.1: fill ~90 %, then random 4 KiB overwrites while cleaning runs.
    Sustained,
    /// Max/FxMark: DWOL, DWAL, MWCL, MWUL over 1..N threads.
    Fxmark,
    /// fileserver, varmail and OLTP personalities above 90 % utilization.
    Filebench,
    /// Key-value records in files: YCSB A, B, F and update-only.
    Ycsb,
    /// The same jobs through the FUSE mount, against libfuse passthrough and ext4.
    Fio,
    /// D2FS Fig. 10-11: `sustained` for `device` at each regular-region degree of
    /// `--degrees`; throughput per degree and region fill over time.
    Vop,
    /// D2FS Fig. 16: the cost of reclaiming one section, host GC (`fs.gc`) against device
    /// GC, broken down.
    Gccost,
    /// D2FS Table 1 / Fig. 17, IPLFS: `sustained` per FTL (page, coupled, interval with and
    /// without compaction, zoned) with the FTL's mapping memory and migration records over
    /// time.
    Memory,
}

impl Experiment {
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Sustained => "sustained",
            Experiment::Fxmark => "fxmark",
            Experiment::Filebench => "filebench",
            Experiment::Ycsb => "ycsb",
            Experiment::Fio => "fio",
            Experiment::Vop => "vop",
            Experiment::Gccost => "gccost",
            Experiment::Memory => "memory",
        }
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Options of `flashlog bench`.
#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct BenchArgs {
    /// Experiment to run.
    #[arg(value_enum, default_value_t = Experiment::Sustained)]
    pub experiment: Experiment,
    /// Emulated SSD as PRESET:SIZE (presets: 970pro-like, sata-like, test, tiny), or
    /// ram:SIZE for a RAM device without timing (ram-resident:SIZE: its whole capacity
    /// allocated and touched before the run, so that no first write pays the kernel's page
    /// faults: for runs that must measure the file system alone). A fresh device per policy.
    #[arg(long, default_value = "970pro-like:1GiB")]
    pub device: String,
    /// Use an image file instead (created with the --device SIZE if missing; overwritten).
    #[arg(long, conflicts_with = "dev")]
    pub image: Option<PathBuf>,
    /// Use a block device instead (its contents are destroyed).
    #[arg(long)]
    pub dev: Option<PathBuf>,
    /// Emulator parameter override, repeatable (see docs/EMULATOR.md), e.g. op=0.15.
    #[arg(long = "ssd-set", value_name = "KEY=VALUE")]
    pub ssd_set: Vec<String>,
    /// Emulator clock: wall (requests take real time; use for time-based experiments) or
    /// virtual.
    #[arg(long, default_value = "wall")]
    pub clock: String,
    /// Comma-separated policies: f2fs, f2fs-lfs, scale, scale:N (N GC workers), device (D2FS, on
    /// the emulator's coupled FTL), zf2fs (zoned F2FS, on the emulator's zoned FTL), none
    /// (IPLFS, on the interval FTL), the ScaleLFS ablation rows (scale-simple,
    /// scale+svp+dws+lsu+cvs+dpb+pdl in any subset); each may end in `/KEY=VALUE` emulator
    /// settings for its own device (e.g. device/vop_degree=1.2, none/compaction_period=0)
    /// or these file-system keys: io_threads=N, flushers=N, own_writeback=1,
    /// cp_tail=0 (none), dnode_lock=0 (scale: commit moves under the file's cell, not the
    /// direct node's lock). Default: f2fs, f2fs-lfs and scale, the policies every device
    /// runs (device, none and zf2fs need the emulator's FTLs: name them; vop, gccost,
    /// memory: their own lists).
    #[arg(long)]
    pub policies: Option<String>,
    /// Application threads (fxmark: the largest thread count).
    #[arg(long, default_value_t = default_threads())]
    pub threads: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output directory.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Time limit in seconds of each measured phase per policy (sustained: the random-write
    /// phase; fxmark: each test; filebench/ycsb: each workload; fio: each job).
    #[arg(long, default_value_t = 25.0)]
    pub duration: f64,
    /// Fraction of the volume the sustained fill writes (filebench: utilization at start).
    #[arg(long, default_value_t = 0.9)]
    pub fill: f64,
    /// Sustained: random writes in total, as a multiple of the volume size (the run stops
    /// at this or at --duration, whichever comes first).
    #[arg(long, default_value_t = 3.0)]
    pub write_factor: f64,
    /// Sustained (and vop, memory): after the fill, overwrite at random unmeasured until
    /// cleaning has started (host GC, an upcall applied, or device GC), then measure.
    #[arg(long)]
    pub aged: bool,
    /// Longest unmeasured aging phase of `--aged`, in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub aging_max: f64,
    /// vop: regular-region degrees of the coupled FTL to sweep (D2FS Fig. 10: 1.0-2.0).
    #[arg(long, default_value = "1.0,1.2,1.4,1.6,1.8,2.0")]
    pub degrees: String,
    /// gccost: host GC calls (one section each) measured per policy.
    #[arg(long, default_value_t = 16)]
    pub sections: u64,
    /// ycsb: workloads to run, in order (A, B, F, update-only).
    #[arg(long, default_value = "A,B,F,update-only")]
    pub workloads: String,
    /// ycsb: fsync the thread's log every N updates (1 = every update; YCSB over MySQL with
    /// fsync, D2FS Fig. 13/15). Default 16 (group commit).
    #[arg(long, default_value_t = 16)]
    pub fsync_every: u64,
    /// ycsb: operations per workload (YCSB's `operationcount`), split over the threads; 0
    /// (default) = the record count, as YCSB's default. More than the records (e.g. 4x)
    /// with a long `--duration` reaches the cleaning regime.
    #[arg(long, default_value_t = 0)]
    pub operations: u64,
    /// Sampling period of the over-time series, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub sample_ms: u64,
    /// Segments (2 MiB) per section at mkfs, F2FS's `-s`: a number, or `auto` to match the
    /// emulated SSD's GC unit (its line), so that a section the file system frees and
    /// discards is a whole line the device can erase without copying. `auto` keeps the
    /// device's own GC out of file-system GC experiments, as ScaleLFS §5 sets up its
    /// runs; use 1 to study the two collectors stacked (log-on-log).
    #[arg(long, default_value = "auto")]
    pub segs_per_sec: String,
    /// Max log partitions (mlogs) at mkfs: each has its own log heads and free sections.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=32))]
    pub mlogs: u32,
    /// fxmark: the tests to run, comma-separated, in their fixed order (MWUL unlinks what
    /// MWCL created, so it needs MWCL): e.g. `DWAL` alone to profile appends.
    #[arg(long, default_value = FXMARK_ALL_TESTS, value_name = "TESTS")]
    pub tests: String,
    /// How writes map to an mlog (mount option `mlog=`): `ino` (the file's, ino mod mlogs)
    /// or `thread` (the writing thread's, Max's per-core mlogs).
    #[arg(long, default_value = "ino", value_name = "ino|thread")]
    pub mlog_map: String,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// fio: the flashlog binary (default: next to this executable, then target/release,
    /// then PATH).
    #[arg(long)]
    pub flashlog_bin: Option<PathBuf>,
    /// fio: skip the libfuse passthrough and ext4 peers.
    #[arg(long)]
    pub no_peers: bool,
    /// fio: extra `-o` options for the Flashlog mounts, e.g. `nokillpriv,bdi_max_ratio=1`
    /// for the request path before issue 13.
    #[arg(long)]
    pub mount_opts: Option<String>,
}

/// `--tests` when not given: every fxmark test.
pub const FXMARK_ALL_TESTS: &str = "DWOL,DWAL,MWCL,MWUL";

/// The README's main job: a short sustained run on an emulated SSD with every policy,
/// printing the table and writing the bandwidth-over-time plot (≤ 2 minutes on 2 cores).
pub fn default_main_job() -> BenchArgs {
    BenchArgs {
        experiment: Experiment::Sustained,
        device: "970pro-like:1GiB".into(),
        image: None,
        dev: None,
        ssd_set: Vec::new(),
        clock: "wall".into(),
        policies: None,
        threads: default_threads(),
        seed: 42,
        out: PathBuf::from("bench-out"),
        duration: 25.0,
        fill: 0.9,
        write_factor: 3.0,
        aged: false,
        aging_max: 120.0,
        degrees: "1.0,1.2,1.4,1.6,1.8,2.0".into(),
        sections: 16,
        workloads: "A,B,F,update-only".into(),
        fsync_every: 16,
        operations: 0,
        sample_ms: 200,
        segs_per_sec: "auto".into(),
        mlogs: 1,
        mlog_map: "ino".into(),
        tests: FXMARK_ALL_TESTS.into(),
        quiet: false,
        flashlog_bin: None,
        no_peers: false,
        mount_opts: None,
    }
}

impl BenchArgs {
    /// The command line that repeats this run.
    pub fn command(&self) -> String {
        let mut s = format!("flashlog bench {}", self.experiment.name());
        match (&self.image, &self.dev) {
            (_, Some(d)) => s += &format!(" --dev {}", d.display()),
            (Some(i), _) => s += &format!(" --image {} --device {}", i.display(), self.device),
            _ => s += &format!(" --device {} --clock {}", self.device, self.clock),
        }
        for kv in &self.ssd_set {
            s += &format!(" --ssd-set {kv}");
        }
        if let Some(p) = &self.policies {
            s += &format!(" --policies {p}");
        }
        s += &format!(
            " --threads {} --seed {} --duration {} --fill {} --write-factor {} --sample-ms {} --out {}",
            self.threads,
            self.seed,
            self.duration,
            self.fill,
            self.write_factor,
            self.sample_ms,
            self.out.display()
        );
        if self.aged {
            s += &format!(" --aged --aging-max {}", self.aging_max);
        }
        match self.experiment {
            Experiment::Vop => s += &format!(" --degrees {}", self.degrees),
            Experiment::Gccost => s += &format!(" --sections {}", self.sections),
            Experiment::Ycsb => {
                s += &format!(
                    " --workloads {} --fsync-every {}",
                    self.workloads, self.fsync_every
                );
                if self.operations > 0 {
                    s += &format!(" --operations {}", self.operations);
                }
            }
            _ => {}
        }
        if self.segs_per_sec != "auto" {
            s += &format!(" --segs-per-sec {}", self.segs_per_sec);
        }
        if self.mlogs != 1 {
            s += &format!(" --mlogs {}", self.mlogs);
        }
        if self.mlog_map != "ino" {
            s += &format!(" --mlog-map {}", self.mlog_map);
        }
        if matches!(self.experiment, Experiment::Fxmark) && self.tests != FXMARK_ALL_TESTS {
            s += &format!(" --tests {}", self.tests);
        }
        if self.no_peers {
            s += " --no-peers";
        }
        if let Some(o) = &self.mount_opts {
            s += &format!(" --mount-opts {o}");
        }
        s
    }
}

/// What every experiment gets: the checked options, the policies, the device and the
/// progress display.
pub struct Ctx {
    pub args: BenchArgs,
    pub policies: Vec<PolicySpec>,
    pub device: DeviceSpec,
    /// `--segs-per-sec` resolved.
    pub segs_per_sec: u32,
    pub progress: MultiProgress,
}

impl Ctx {
    pub fn new(args: &BenchArgs) -> Result<Ctx> {
        if args.threads == 0 || args.threads > 256 {
            bail!("--threads must be between 1 and 256 (got {})", args.threads);
        }
        if !(args.duration > 0.0 && args.duration.is_finite()) {
            bail!("--duration must be a positive number of seconds");
        }
        if !(0.05..=0.97).contains(&args.fill) {
            bail!("--fill must be between 0.05 and 0.97 (got {})", args.fill);
        }
        if !(args.write_factor >= 0.0 && args.write_factor.is_finite()) {
            bail!("--write-factor must be >= 0");
        }
        if args.sample_ms < 10 {
            bail!("--sample-ms must be at least 10");
        }
        if !(args.aging_max > 0.0 && args.aging_max.is_finite()) {
            bail!("--aging-max must be a positive number of seconds");
        }
        if args.sections == 0 || args.sections > 100_000 {
            bail!("--sections must be between 1 and 100000");
        }
        if args.fsync_every == 0 {
            bail!("--fsync-every must be at least 1");
        }
        args.mlog_map
            .parse::<flashlog_core::MlogMap>()
            .map_err(anyhow::Error::msg)?;
        let device = DeviceSpec::from_args(
            &args.device,
            args.image.as_ref(),
            args.dev.as_ref(),
            &args.ssd_set,
            &args.clock,
        )?;
        device.check_ram(device::mem_available())?;
        let segs_per_sec = resolve_segs_per_sec(&args.segs_per_sec, &device)?;
        let policies = policy::resolve(args.policies.as_deref())?;
        if policies.is_empty() {
            bail!("no GC policy could be mounted");
        }
        for p in &policies {
            device.check_policy(p)?;
        }
        let progress = if args.quiet {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4))
        };
        Ok(Ctx {
            args: args.clone(),
            policies,
            device,
            segs_per_sec,
            progress,
        })
    }

    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.args.sample_ms)
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.args.duration)
    }

    /// A progress bar of `len` units with a prefix.
    pub fn bar(&self, len: u64, prefix: String, bytes: bool) -> ProgressBar {
        let tpl = if bytes {
            "{prefix:>22} [{elapsed_precise}] {bar:30.cyan/blue} {bytes}/{total_bytes} {msg}"
        } else {
            "{prefix:>22} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}"
        };
        let pb = self.progress.add(ProgressBar::new(len));
        pb.set_style(
            ProgressStyle::with_template(tpl)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_prefix(prefix);
        pb
    }

    /// Print a line above the progress bars.
    pub fn say(&self, msg: &str) {
        if self.args.quiet {
            eprintln!("{msg}");
        } else {
            let _ = self.progress.println(msg);
        }
    }

    /// The configuration echoed in the report.
    pub fn config_json(&self) -> serde_json::Value {
        let ssd = self
            .device
            .ssd_config()
            .ok()
            .and_then(|c| serde_json::to_value(c).ok());
        serde_json::json!({
            "command": self.args.command(),
            "args": self.args,
            "policies": self.policies.iter().map(|p| serde_json::json!({
                "label": p.label, "description": p.description(), "workers": p.workers,
            })).collect::<Vec<_>>(),
            "device": self.device,
            "device_description": self.device.describe(),
            "ssd_config": ssd,
            "segs_per_sec": self.segs_per_sec,
        })
    }
}

/// Largest section the format accepts, in segments (a sanity bound for the option).
const MAX_SEGS_PER_SEC: u32 = 256;

/// `--segs-per-sec`: a number, or `auto` = the emulated SSD's line in segments (1 on other
/// devices or when the line is not a whole number of segments).
fn resolve_segs_per_sec(v: &str, device: &DeviceSpec) -> Result<u32> {
    let seg_bytes = flashlog_core::BLOCKS_PER_SEG * flashlog_core::BLOCK_SIZE as u64;
    if v == "auto" {
        let line = device
            .ssd_config()
            .ok()
            .map_or(0, |c| c.geometry.line_bytes());
        return Ok(if line >= seg_bytes && line.is_multiple_of(seg_bytes) {
            ((line / seg_bytes) as u32).min(MAX_SEGS_PER_SEC)
        } else {
            1
        });
    }
    match v.parse::<u32>() {
        Ok(n) if (1..=MAX_SEGS_PER_SEC).contains(&n) => Ok(n),
        _ => bail!(
            "--segs-per-sec must be a number from 1 to {MAX_SEGS_PER_SEC}, or auto (got {v:?})"
        ),
    }
}

/// Policies an experiment runs when `--policies` is not given (None: every implemented one).
pub fn default_policies(args: &BenchArgs) -> Result<Option<String>> {
    Ok(match args.experiment {
        Experiment::Vop => Some(exp::vop::policies(&args.degrees)?),
        Experiment::Gccost => Some("f2fs,zf2fs,device".into()),
        Experiment::Memory => Some("f2fs,device,none,none/compaction_period=0,zf2fs".into()),
        _ => None,
    })
}

/// Run `flashlog bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let mut args = args.clone();
    if args.policies.is_none() {
        args.policies = default_policies(&args)?;
    }
    let args = &args;
    let ctx = Ctx::new(args)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create --out {}", args.out.display()))?;
    if !plot::font_ready() {
        eprintln!(
            "bench: /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf not found: no plots (install fonts-dejavu-core)"
        );
    }
    let labels: Vec<&str> = ctx.policies.iter().map(|p| p.label.as_str()).collect();
    ctx.say(&format!(
        "flashlog bench {}: policies {}, {} thread(s), {}; writing to {}",
        args.experiment.name(),
        labels.join(","),
        args.threads,
        ctx.device.describe(),
        args.out.display()
    ));
    let report = match args.experiment {
        Experiment::Sustained => exp::sustained::run(&ctx)?,
        Experiment::Fxmark => exp::fxmark::run(&ctx)?,
        Experiment::Filebench => exp::filebench::run(&ctx)?,
        Experiment::Ycsb => exp::ycsb::run(&ctx)?,
        Experiment::Fio => exp::fio::run(&ctx)?,
        Experiment::Vop => exp::vop::run(&ctx)?,
        Experiment::Gccost => exp::gccost::run(&ctx)?,
        Experiment::Memory => exp::memory::run(&ctx)?,
    };
    let _ = ctx.progress.clear();
    report.write()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn tmp_out(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("flashlog-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn bad_options_are_clear_errors() {
        assert!(Cli::try_parse_from(["b", "nosuch"]).is_err());
        let mut a = default_main_job();
        a.policies = Some("f2fs,zfs".into());
        let e = Ctx::new(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("unknown policy"), "{e}");
        let mut a = default_main_job();
        a.device = "floppy:1GiB".into();
        let e = Ctx::new(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("unknown preset"), "{e}");
        let cli = Cli::try_parse_from(["b", "fxmark", "--threads", "4", "--policies", "f2fs"]);
        assert_eq!(cli.map(|c| c.args.threads).ok(), Some(4));
    }

    #[test]
    fn segs_per_sec_option() {
        let ssd = DeviceSpec::from_args("970pro-like:1GiB", None, None, &[], "wall").unwrap();
        let ram = DeviceSpec::from_args("ram:96MiB", None, None, &[], "wall").unwrap();
        // 970pro-like lines are 8 MiB: four 2 MiB segments.
        let line = ssd.ssd_config().unwrap().geometry.line_bytes();
        assert_eq!(
            resolve_segs_per_sec("auto", &ssd).unwrap() as u64,
            line / (2 << 20)
        );
        assert_eq!(resolve_segs_per_sec("auto", &ram).unwrap(), 1);
        assert_eq!(resolve_segs_per_sec("2", &ram).unwrap(), 2);
        for bad in ["0", "x", "-1", "1000"] {
            let e = resolve_segs_per_sec(bad, &ram).unwrap_err().to_string();
            assert!(e.contains("--segs-per-sec"), "{e}");
        }
    }

    /// A tiny sustained run on a RAM device: completes, and the JSON carries the keys
    /// issue 7 requires for every policy, and the plots are written.
    #[test]
    fn tiny_sustained_run_writes_report_and_plots() {
        let out = tmp_out("sustained");
        let mut a = default_main_job();
        a.device = "ram:96MiB".into();
        a.threads = 2;
        a.duration = 1.0;
        a.fill = 0.8;
        a.write_factor = 0.3;
        a.sample_ms = 50;
        a.quiet = true;
        a.out = out.clone();
        run(&a).expect("sustained run");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(v["experiment"], "sustained");
        assert!(v["config"]["command"]
            .as_str()
            .unwrap()
            .contains("--device ram:96MiB"));
        let res = v["results"].as_array().unwrap();
        assert_eq!(res.len(), policy::implemented().len());
        for r in res {
            for k in [
                "policy",
                "app_mib_s_before_gc",
                "app_mib_s_during_gc",
                "device_mib_s_during_gc",
                "device_peak_mib_s",
                "waf",
                "p99_us",
                "gc_time_s",
                "stall_time_s",
                "peak_rss_mib",
            ] {
                assert!(r.get(k).is_some_and(|x| !x.is_null()), "missing {k} in {r}");
            }
        }
        assert!(std::fs::read_to_string(out.join("report.txt"))
            .unwrap()
            .contains("before GC MiB/s"));
        if plot::font_ready() {
            for f in [
                "bandwidth_app.svg",
                "bandwidth_app.png",
                "latency_cdf.svg",
                "waf.png",
            ] {
                let md = std::fs::metadata(out.join(f)).expect(f);
                assert!(md.len() > 1000, "{f} is too small");
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    /// A small emulated SSD on the virtual clock: fast, with every FTL's counters.
    fn tiny_ssd_job(name: &str, exp: Experiment) -> (BenchArgs, PathBuf) {
        let out = tmp_out(name);
        let mut a = default_main_job();
        a.experiment = exp;
        // 970pro-like lines are whole sections (the D2FS zones must be).
        a.device = "970pro-like:256MiB".into();
        a.clock = "virtual".into();
        a.threads = 2;
        a.duration = 1.0;
        a.fill = 0.8;
        a.write_factor = 0.5;
        a.sample_ms = 20;
        a.aging_max = 20.0;
        a.quiet = true;
        a.out = out.clone();
        (a, out)
    }

    fn report_json(out: &std::path::Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
    }

    /// `vop` runs `device` once per degree and records the regions' fill over time: the
    /// regular region fills as the host writes, and each degree gets its row.
    #[test]
    fn vop_sweeps_degrees_with_region_fill() {
        let (mut a, out) = tiny_ssd_job("vop", Experiment::Vop);
        a.degrees = "1.4,2.0".into();
        run(&a).expect("vop run");
        let v = report_json(&out);
        let sweep = v["vop_sweep"].as_array().unwrap();
        let degrees: Vec<f64> = sweep
            .iter()
            .map(|r| r["degree"].as_f64().unwrap())
            .collect();
        assert_eq!(degrees, vec![1.4, 2.0]);
        for r in v["results"].as_array().unwrap() {
            let g = r["gauges"].as_array().unwrap();
            assert!(g.len() > 2, "no gauge series for {}", r["policy"]);
            let max_fill = g
                .iter()
                .map(|x| x["regular_fill"].as_f64().unwrap())
                .fold(0.0, f64::max);
            assert!(max_fill > 0.3, "regular region never filled: {max_fill}");
        }
        assert!(std::fs::read_to_string(out.join("report.txt"))
            .unwrap()
            .contains("regular-region degree sweep"));
        let mut bad = a.clone();
        bad.policies = None;
        bad.degrees = "1.4,x".into();
        assert!(run(&bad).unwrap_err().to_string().contains("--degrees"));
        let _ = std::fs::remove_dir_all(&out);
    }

    /// `gccost`: host GC of f2fs frees sections on a quiet volume and its breakdown adds up;
    /// `device` reports the device's GC runs and the host's upcall work per run.
    #[test]
    fn gccost_breaks_down_host_and_device_gc() {
        let (mut a, out) = tiny_ssd_job("gccost", Experiment::Gccost);
        a.policies = Some("f2fs,device".into());
        a.sections = 3;
        run(&a).expect("gccost run");
        let v = report_json(&out);
        let res = v["results"].as_array().unwrap();
        let h = &res[0]["host"];
        assert!(h["sections_freed"].as_u64().unwrap() > 0, "{h}");
        let f = |k: &str| h[k].as_f64().unwrap();
        assert!(f("blocks_moved") > 0.0);
        assert!(f("total_ms") + 1e-6 >= f("checkpoint_ms"));
        assert!(f("collector_ms") + 1e-6 >= f("read_wait_ms") + f("write_wait_ms"));
        let d = &res[1]["device"];
        assert!(res[1]["aging_cleaning_started"].as_bool().unwrap());
        assert!(d["gc_runs"].as_u64().unwrap() > 0, "{d}");
        assert!(d["pages_moved"].as_f64().unwrap() > 0.0);
        let _ = std::fs::remove_dir_all(&out);
    }

    /// `memory`: the page FTL's map covers the whole device; the interval FTL's covers the
    /// live data, compacts when told to, and is compared with the flat map of what it touched.
    #[test]
    fn memory_compares_ftl_mappings() {
        let (mut a, out) = tiny_ssd_job("memory", Experiment::Memory);
        a.policies = Some("f2fs,none/compaction_period=20ms".into());
        run(&a).expect("memory run");
        let v = report_json(&out);
        let res = v["results"].as_array().unwrap();
        let m = |i: usize, k: &str| res[i]["memory"][k].clone();
        assert_eq!(res[0]["ftl"], "page");
        // 4 B per block of the whole device (the emulator rounds the logical size up a little).
        let page = m(0, "mapping_bytes_end").as_u64().unwrap();
        let want = (256u64 << 20) / 4096 * 4;
        assert!(page >= want && page < want + want / 100, "{page}");
        assert_eq!(res[1]["ftl"], "interval");
        assert!(m(1, "compaction_runs").as_u64().unwrap() > 0);
        assert!(m(1, "mapping_bytes_after_compaction").as_u64().is_some());
        assert!(m(1, "flat_touched_bytes").as_u64().unwrap() > 0);
        assert!(v["ftl_targets"]["none/compaction_period=20ms_mapping"].is_object());
        let _ = std::fs::remove_dir_all(&out);
    }

    /// `--aged`: cleaning has started before the measured phase, which comes after it.
    #[test]
    fn aged_sustained_measures_after_cleaning_started() {
        let out = tmp_out("aged");
        let mut a = default_main_job();
        a.device = "ram:96MiB".into();
        a.policies = Some("f2fs".into());
        a.threads = 2;
        a.duration = 1.0;
        a.fill = 0.85;
        a.write_factor = 0.3;
        a.sample_ms = 20;
        a.aged = true;
        a.aging_max = 30.0;
        a.quiet = true;
        a.out = out.clone();
        run(&a).expect("aged run");
        let v = report_json(&out);
        let r = &v["results"][0];
        assert_eq!(r["aging_cleaning_started"], true, "{r}");
        assert!(r["aging_bytes"].as_u64().unwrap() > 0);
        assert!(r["measured_from_s"].as_f64().unwrap() > 0.0);
        // The whole measured phase counts as "during cleaning".
        assert!(r["app_mib_s_during_gc"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["device_mib_s_during_gc"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["random_bytes"].as_u64().unwrap() > 0);
        assert!(v["config"]["command"].as_str().unwrap().contains("--aged"));
        let _ = std::fs::remove_dir_all(&out);
    }

    /// `ycsb --workloads A,F --fsync-every 1`: only those workloads, each with a timeline.
    #[test]
    fn ycsb_selected_workloads_with_timeline() {
        let (mut a, out) = tiny_ssd_job("ycsb", Experiment::Ycsb);
        a.device = "ram:96MiB".into();
        a.policies = Some("f2fs".into());
        a.workloads = "a,F".into();
        a.fsync_every = 1;
        a.duration = 0.5;
        run(&a).expect("ycsb run");
        let v = report_json(&out);
        let res = v["results"].as_array().unwrap();
        let names: Vec<&str> = res
            .iter()
            .map(|r| r["workload"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["A", "F"]);
        for r in res {
            assert_eq!(r["fsync_every"], 1);
            let tl = r["timeline"].as_array().unwrap();
            let ops: u64 = tl.iter().map(|x| x["ops"].as_u64().unwrap()).sum();
            assert!(ops > 0, "empty timeline for {}", r["workload"]);
        }
        let mut bad = a.clone();
        bad.workloads = "A,Z".into();
        assert!(run(&bad).unwrap_err().to_string().contains("--workloads"));
        let _ = std::fs::remove_dir_all(&out);
    }

    /// Device overrides per policy: checked up front, refused off the emulator.
    #[test]
    fn policy_device_overrides_are_checked() {
        let mut a = default_main_job();
        a.policies = Some("device/vop_degree=99".into());
        let e = Ctx::new(&a)
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(e.contains("vop_degree"), "{e}");
        a.policies = Some("f2fs/op=0.2".into());
        a.device = "ram:96MiB".into();
        let e = Ctx::new(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("emulated SSD"), "{e}");
    }

    #[test]
    fn plots_are_written() {
        let out = tmp_out("plots");
        std::fs::create_dir_all(&out).unwrap();
        let s = vec![("a".to_string(), vec![(1.0, 2.0), (2.0, 3.0)])];
        let files = plot::line_plot(
            &out,
            "x",
            &plot::Lines {
                title: "t",
                x_desc: "x",
                y_desc: "y",
                series: &s,
                log_x: true,
                points: true,
            },
        )
        .unwrap();
        let b = plot::bar_plot(
            &out,
            "b",
            &plot::Bars {
                title: "t",
                y_desc: "y",
                groups: &["g".to_string()],
                series: &[("a".to_string(), vec![1.0])],
            },
        )
        .unwrap();
        if plot::font_ready() {
            assert_eq!(files.len() + b.len(), 4);
            assert!(files.iter().chain(&b).all(|f| f.exists()));
        }
        let _ = std::fs::remove_dir_all(&out);
    }
}
